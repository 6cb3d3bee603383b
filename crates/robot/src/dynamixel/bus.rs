//! A Protocol 2.0 client over any async byte stream (a serial port, or one end of a pty in tests):
//! one request, then its status packet(s), each awaited at most `timeout`.
//!
//! Why one request at a time: the bus is half duplex and servos answer in the order asked, so a
//! client that never has two requests outstanding can match every status to its request by id.
//! Before each request the input is drained and the reader cleared, so a late answer to a request
//! that timed out cannot be taken for the answer to the next one.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::proto::{self, table::Item, Decoder, Packet, ProtocolError, Status};
use super::DynamixelError;

/// A Protocol 2.0 client on the byte stream `P`: sends one instruction packet at a time and
/// waits for its status packet(s).
pub struct Bus<P> {
    port: P,
    decoder: Decoder,
    timeout: Duration,
}

impl<P: AsyncRead + AsyncWrite + Unpin> Bus<P> {
    /// `timeout`: the longest wait for each status packet.
    pub fn new(port: P, timeout: Duration) -> Self {
        Bus {
            port,
            decoder: Decoder::new(),
            timeout,
        }
    }

    /// Sends one instruction packet, after dropping anything unread.
    pub(crate) async fn send(&mut self, packet: &Packet) -> Result<(), DynamixelError> {
        self.drain().await?;
        self.port.write_all(&packet.encode()).await?;
        self.port.flush().await?;
        Ok(())
    }

    /// Reads and discards whatever is already waiting on the port (polls once, never waits).
    async fn drain(&mut self) -> Result<(), DynamixelError> {
        let mut buf = [0u8; 256];
        loop {
            match tokio::time::timeout(Duration::ZERO, self.port.read(&mut buf)).await {
                Ok(Ok(0)) | Err(_) => break,
                Ok(Ok(_)) => continue,
                Ok(Err(e)) => return Err(e.into()),
            }
        }
        self.decoder.clear();
        Ok(())
    }

    /// The next status packet, which must come from servo `id`, within the timeout. Instruction
    /// packets are skipped (adapters that echo the line return our own request first). A status
    /// carrying an error number is returned as `DynamixelError::Status`; the alert bit is left to
    /// the caller (`Status::alert`), since the data that came with it is still valid.
    pub(crate) async fn receive(&mut self, id: u8) -> Result<Status, DynamixelError> {
        let timeout = self.timeout;
        let status = match tokio::time::timeout(timeout, self.receive_any()).await {
            Ok(r) => r?,
            Err(_) => {
                return Err(match self.decoder.partial() {
                    Some((got, needed)) => DynamixelError::Protocol {
                        id,
                        source: ProtocolError::Truncated { got, needed },
                    },
                    None => DynamixelError::Timeout {
                        id,
                        timeout_s: timeout.as_secs_f64(),
                    },
                })
            }
        };
        if status.id != id {
            return Err(DynamixelError::Protocol {
                id,
                source: ProtocolError::WrongId {
                    expected: id,
                    got: status.id,
                },
            });
        }
        if let Some(error) = status.error() {
            return Err(DynamixelError::Status { id, error });
        }
        Ok(status)
    }

    async fn receive_any(&mut self) -> Result<Status, DynamixelError> {
        let mut buf = [0u8; 256];
        loop {
            while let Some(packet) = self.decoder.next_packet() {
                let packet = packet.map_err(|source| DynamixelError::Protocol {
                    id: proto::BROADCAST_ID,
                    source,
                })?;
                if packet.instruction == proto::instruction::STATUS {
                    return packet
                        .into_status()
                        .map_err(|source| DynamixelError::Protocol {
                            id: proto::BROADCAST_ID,
                            source,
                        });
                }
            }
            let n = self.port.read(&mut buf).await?;
            if n == 0 {
                return Err(DynamixelError::Io(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the serial port closed",
                )));
            }
            self.decoder.push(&buf[..n]);
        }
    }

    /// PING: (model number, firmware version).
    pub async fn ping(&mut self, id: u8) -> Result<(u16, u8), DynamixelError> {
        self.send(&proto::ping(id)).await?;
        let s = self.receive(id).await?;
        match s.data[..] {
            [lo, hi, fw] => Ok((u16::from_le_bytes([lo, hi]), fw)),
            _ => Err(params(id, proto::instruction::PING, "3", s.data.len())),
        }
    }

    /// READ one control table item.
    pub(crate) async fn read(&mut self, id: u8, item: Item) -> Result<Status, DynamixelError> {
        self.send(&proto::read(id, item.address, item.size)).await?;
        let s = self.receive(id).await?;
        check_len(&s, item, proto::instruction::READ)?;
        Ok(s)
    }

    /// WRITE one control table item (`data` must be the item's size) and wait for the servo's
    /// acknowledgement.
    pub async fn write(
        &mut self,
        id: u8,
        item: Item,
        data: &[u8],
    ) -> Result<Status, DynamixelError> {
        if data.len() != item.size as usize {
            return Err(params(
                id,
                proto::instruction::WRITE,
                &item.size.to_string(),
                data.len(),
            ));
        }
        self.send(&proto::write(id, item.address, data)).await?;
        self.receive(id).await
    }

    /// SYNC_READ one item from several servos: their statuses, in `ids` order.
    pub(crate) async fn sync_read(
        &mut self,
        item: Item,
        ids: &[u8],
    ) -> Result<Vec<Status>, DynamixelError> {
        self.send(&proto::sync_read(item.address, item.size, ids))
            .await?;
        let mut out = Vec::with_capacity(ids.len());
        for &id in ids {
            let s = self.receive(id).await?;
            check_len(&s, item, proto::instruction::SYNC_READ)?;
            out.push(s);
        }
        Ok(out)
    }

    /// SYNC_WRITE `len` bytes at `address` to several servos (no answer comes back). `address`
    /// and `len` may span consecutive items (profile acceleration, velocity and goal position in
    /// one packet).
    pub(crate) async fn sync_write(
        &mut self,
        address: u16,
        len: u16,
        entries: &[(u8, Vec<u8>)],
    ) -> Result<(), DynamixelError> {
        let refs: Vec<(u8, &[u8])> = entries.iter().map(|(id, d)| (*id, d.as_slice())).collect();
        let packet =
            proto::sync_write(address, len, &refs).map_err(|source| DynamixelError::Protocol {
                id: proto::BROADCAST_ID,
                source,
            })?;
        self.send(&packet).await
    }
}

fn params(id: u8, instruction: u8, expected: &str, got: usize) -> DynamixelError {
    DynamixelError::Protocol {
        id,
        source: ProtocolError::Params {
            instruction,
            expected: expected.to_string(),
            got,
        },
    }
}

fn check_len(s: &Status, item: Item, instruction: u8) -> Result<(), DynamixelError> {
    if s.data.len() == item.size as usize {
        Ok(())
    } else {
        Err(params(
            s.id,
            instruction,
            &item.size.to_string(),
            s.data.len(),
        ))
    }
}

/// Little-endian value of a status's data, sign-extended from its size (Present Position and
/// Goal PWM are signed). The bus checks every reply's size against its item first, so the
/// fallback 0 is never reached with data from a servo.
pub(crate) fn signed(data: &[u8]) -> i32 {
    match *data {
        [a] => a as i8 as i32,
        [a, b] => i16::from_le_bytes([a, b]) as i32,
        [a, b, c, d] => i32::from_le_bytes([a, b, c, d]),
        _ => 0,
    }
}
