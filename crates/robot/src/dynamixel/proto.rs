//! DYNAMIXEL Protocol 2.0 on the wire: packet framing, CRC, byte stuffing, the instructions this
//! crate uses, status packets and their error byte, and an incremental reader that finds packets in
//! a byte stream.
//!
//! The specification is the ROBOTIS e-Manual, <https://emanual.robotis.com/docs/en/dxl/protocol2/>
//! (packet layout, instruction list, error numbers, processing order of transmission and reception)
//! and <https://emanual.robotis.com/docs/en/dxl/crc/> (CRC-16, polynomial 0x8005). Written from
//! those pages; `crates/robot/src/tests/dynamixel_proto.rs` checks every example packet they publish byte for byte.
//!
//! Everything here is pure data: no port, no clock. The bus client (`bus.rs`) and the emulator
//! (`emulator.rs`) share it, so both sides of a conversation use one encoder and one decoder.

/// `FF FF FD 00`: three header bytes and the reserved byte, which the e-Manual counts as part of
/// the header (it is never `FD`, so `FF FF FD FD` inside a body can be told apart from a header).
pub(crate) const HEADER: [u8; 4] = [0xFF, 0xFF, 0xFD, 0x00];

/// Header (4) + id (1) + length (2): the bytes before the instruction.
pub(crate) const PREFIX_LEN: usize = 7;

/// Broadcast id: every servo executes the packet; only PING, SYNC_READ and BULK_READ are answered.
pub(crate) const BROADCAST_ID: u8 = 0xFE;

/// Largest length field the reader accepts. The protocol allows up to 0xFFFF, but nothing this
/// crate sends or expects comes near (a 9-servo SYNC_WRITE of 12 bytes each is 125): a larger value
/// is almost certainly a corrupted length, and waiting for 64 KiB that will never come would turn
/// one bad byte into a timeout instead of an error naming it.
pub(crate) const MAX_LENGTH: u16 = 1024;

/// Instruction codes (e-Manual, "Instruction"): the whole table, though the driver sends only
/// some of them, so a code read off the wire can be named.
#[allow(dead_code)]
pub(crate) mod instruction {
    pub(crate) const PING: u8 = 0x01;
    pub(crate) const READ: u8 = 0x02;
    pub(crate) const WRITE: u8 = 0x03;
    pub(crate) const REG_WRITE: u8 = 0x04;
    pub(crate) const ACTION: u8 = 0x05;
    pub(crate) const FACTORY_RESET: u8 = 0x06;
    pub(crate) const REBOOT: u8 = 0x08;
    pub(crate) const CLEAR: u8 = 0x10;
    /// The instruction byte of every status (reply) packet.
    pub(crate) const STATUS: u8 = 0x55;
    pub(crate) const SYNC_READ: u8 = 0x82;
    pub(crate) const SYNC_WRITE: u8 = 0x83;
    pub(crate) const BULK_READ: u8 = 0x92;
    pub(crate) const BULK_WRITE: u8 = 0x93;
}

/// X-series control table (e-Manual, XM430-W350 and XL430-W250 pages; the addresses used here are
/// the same on both). Each constant is `(address, size in bytes)`, so a read or write can never use
/// the address of one item with the size of another.
pub mod table {
    /// A control table item: address and size (bytes).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Item {
        /// Address of the item's first byte in the control table.
        pub address: u16,
        /// Number of bytes the item holds (1, 2 or 4, little-endian).
        pub size: u16,
    }

    const fn item(address: u16, size: u16) -> Item {
        Item { address, size }
    }

    // EEPROM area: writable only with torque off.
    pub(crate) const MODEL_NUMBER: Item = item(0, 2);
    pub(crate) const FIRMWARE_VERSION: Item = item(6, 1);
    pub(crate) const ID: Item = item(7, 1);
    pub(crate) const BAUD_RATE: Item = item(8, 1);
    pub(crate) const RETURN_DELAY_TIME: Item = item(9, 1);
    /// Bit 0: reverse mode; bit 2: profile configuration (0 velocity-based, 1 time-based).
    pub(crate) const DRIVE_MODE: Item = item(10, 1);
    /// Operating Mode: how the servo is driven (`MODE_*` values below).
    pub(crate) const OPERATING_MODE: Item = item(11, 1);
    /// Secondary (shadow) id: the servo also executes packets sent to this id, without replying.
    pub(crate) const SECONDARY_ID: Item = item(12, 1);
    pub(crate) const PROTOCOL_TYPE: Item = item(13, 1);
    pub(crate) const PWM_LIMIT: Item = item(36, 2);
    pub(crate) const VELOCITY_LIMIT: Item = item(44, 4);
    /// Max Position Limit: the highest Goal Position the servo accepts in position mode (pulses).
    pub(crate) const MAX_POSITION_LIMIT: Item = item(48, 4);
    pub(crate) const MIN_POSITION_LIMIT: Item = item(52, 4);
    pub(crate) const SHUTDOWN: Item = item(63, 1);
    // RAM area.
    /// Torque Enable: 1 powers the motor (and locks the EEPROM area), 0 lets the joint go limp.
    pub(crate) const TORQUE_ENABLE: Item = item(64, 1);
    pub(crate) const LED: Item = item(65, 1);
    pub(crate) const STATUS_RETURN_LEVEL: Item = item(68, 1);
    pub(crate) const HARDWARE_ERROR_STATUS: Item = item(70, 1);
    /// Goal PWM: the motor's signed output in PWM mode (units of about 0.113 %, bounded by PWM
    /// Limit), and its output cap in the position modes.
    pub(crate) const GOAL_PWM: Item = item(100, 2);
    pub(crate) const GOAL_CURRENT: Item = item(102, 2);
    pub(crate) const GOAL_VELOCITY: Item = item(104, 4);
    pub(crate) const PROFILE_ACCELERATION: Item = item(108, 4);
    pub(crate) const PROFILE_VELOCITY: Item = item(112, 4);
    /// Goal Position: where the servo is commanded to go (pulses, 4096 per turn).
    pub(crate) const GOAL_POSITION: Item = item(116, 4);
    pub(crate) const MOVING: Item = item(122, 1);
    pub(crate) const PRESENT_PWM: Item = item(124, 2);
    /// Present Current on XM servos; Present Load on XL servos (same address and size).
    pub(crate) const PRESENT_CURRENT: Item = item(126, 2);
    pub(crate) const PRESENT_VELOCITY: Item = item(128, 4);
    /// Present Position: where the servo is now (pulses, 4096 per turn).
    pub(crate) const PRESENT_POSITION: Item = item(132, 4);

    /// Drive Mode bit 0: the servo turns the other way (positions mirrored).
    pub(crate) const DRIVE_MODE_REVERSE: u8 = 0x01;
    /// Drive Mode bit 2: profile registers hold times (ms) instead of velocity/acceleration.
    pub(crate) const DRIVE_MODE_TIME_BASED: u8 = 0x04;

    /// Operating Mode values (the table's; the driver uses position modes only).
    #[allow(dead_code)]
    pub(crate) const MODE_CURRENT: u8 = 0;
    #[allow(dead_code)]
    pub(crate) const MODE_VELOCITY: u8 = 1;
    /// Position control within one turn (Min/Max Position Limit apply); the arm joints' mode.
    pub(crate) const MODE_POSITION: u8 = 3;
    pub(crate) const MODE_EXTENDED_POSITION: u8 = 4;
    pub(crate) const MODE_CURRENT_BASED_POSITION: u8 = 5;
    /// PWM (voltage) control: Goal PWM drives the motor directly; the gripper's usual mode.
    pub(crate) const MODE_PWM: u8 = 16;

    /// Profile Velocity / Velocity Limit unit: 0.229 rev/min.
    pub(crate) const VELOCITY_UNIT_RPM: f64 = 0.229;
    /// Profile Acceleration unit: 214.577 rev/min².
    pub(crate) const ACCELERATION_UNIT_RPM2: f64 = 214.577;
}

/// Hardware Error Status bits (control table 70; Shutdown 63 uses the same bits).
pub(crate) mod hardware_error {
    pub(crate) const INPUT_VOLTAGE: u8 = 0x01;
    /// Bit 2: the internal temperature exceeded the Temperature Limit.
    pub(crate) const OVERHEATING: u8 = 0x04;
    pub(crate) const MOTOR_ENCODER: u8 = 0x08;
    pub(crate) const ELECTRICAL_SHOCK: u8 = 0x10;
    /// Bit 5: the motor could not hold a sustained load (pushing against a stop or an obstacle).
    pub(crate) const OVERLOAD: u8 = 0x20;

    /// The names of the bits set in `status`, for messages ("overload, overheating").
    pub(crate) fn describe(status: u8) -> String {
        let names = [
            (INPUT_VOLTAGE, "input voltage"),
            (OVERHEATING, "overheating"),
            (MOTOR_ENCODER, "motor encoder"),
            (ELECTRICAL_SHOCK, "electrical shock"),
            (OVERLOAD, "overload"),
        ];
        let mut parts: Vec<String> = names
            .iter()
            .filter(|(bit, _)| status & bit != 0)
            .map(|(_, name)| name.to_string())
            .collect();
        let unknown =
            status & !(INPUT_VOLTAGE | OVERHEATING | MOTOR_ENCODER | ELECTRICAL_SHOCK | OVERLOAD);
        if unknown != 0 {
            parts.push(format!("unknown bits {unknown:#04x}"));
        }
        if parts.is_empty() {
            "no error bit set".to_string()
        } else {
            parts.join(", ")
        }
    }
}

// ---------------------------------------------------------------------------------------------
// CRC

/// CRC-16 table for polynomial 0x8005 (x¹⁶ + x¹⁵ + x² + 1), MSB first, built at compile time from
/// the polynomial rather than pasted, so the table cannot hold a typo.
const CRC_TABLE: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x8005
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

/// The packet CRC (e-Manual "CRC Calculation": initial value 0, polynomial 0x8005, no reflection),
/// over everything from the first header byte to the last parameter. Sent low byte first.
pub(crate) fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0u16, |crc, &b| {
        (crc << 8) ^ CRC_TABLE[(((crc >> 8) as u8) ^ b) as usize]
    })
}

// ---------------------------------------------------------------------------------------------
// Byte stuffing

/// Inserts `FD` after every `FF FF FD` in an instruction + parameter body, so the body can never
/// look like a header (e-Manual "Processing Order of Transmission").
pub(crate) fn stuff(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + body.len() / 3);
    for &b in body {
        out.push(b);
        if b == 0xFD && out.len() >= 3 && out[out.len() - 3..] == [0xFF, 0xFF, 0xFD] {
            out.push(0xFD);
        }
    }
    out
}

/// Removes the stuffing `stuff` added. A `FF FF FD` followed by anything but the stuffing byte is
/// a body the sender did not stuff: refused, since the receiver could not have framed it reliably.
pub(crate) fn unstuff(body: &[u8]) -> Result<Vec<u8>, ProtocolError> {
    let mut out = Vec::with_capacity(body.len());
    let mut i = 0;
    while i < body.len() {
        let b = body[i];
        out.push(b);
        i += 1;
        if b == 0xFD && out.len() >= 3 && out[out.len() - 3..] == [0xFF, 0xFF, 0xFD] {
            match body.get(i) {
                Some(0xFD) => i += 1,
                found => {
                    return Err(ProtocolError::Unstuffed {
                        offset: i,
                        found: found.copied(),
                    })
                }
            }
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Errors

/// A packet that cannot be read, or does not fit what was asked. Every way the reader or a
/// parser can reject bytes is one of these (never a panic): the fuzz test checks it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// A header's length field is too small to hold an instruction and CRC, or larger than any
    /// packet this crate accepts.
    #[error("packet length field {length} is outside 3..={max}")]
    Length {
        /// The length field as received (bytes after it, CRC included).
        length: u16,
        /// The largest length accepted (`MAX_LENGTH`).
        max: u16,
    },
    /// The CRC at the end of a packet does not match its bytes (a damaged packet).
    #[error("packet CRC {received:#06x} does not match the computed {computed:#06x}")]
    Crc {
        /// The CRC the packet carried.
        received: u16,
        /// The CRC computed over the bytes received.
        computed: u16,
    },
    /// The body holds `FF FF FD` not followed by the stuffing byte `FD`.
    #[error("unstuffed FF FF FD in the packet body at byte {offset} (next byte {found:?})")]
    Unstuffed {
        /// Index in the body just after the `FF FF FD`.
        offset: usize,
        /// The byte found there instead of `FD` (`None` at the end of the body).
        found: Option<u8>,
    },
    /// A status packet was expected but an instruction packet came.
    #[error("expected a status packet (0x55), got instruction {instruction:#04x}")]
    NotStatus {
        /// The packet's instruction byte.
        instruction: u8,
    },
    /// A status packet with no parameters, so not even the error byte.
    #[error("status packet without an error byte")]
    NoErrorByte,
    /// A status packet came from another servo than the one asked.
    #[error("status from servo {got}, expected servo {expected}")]
    WrongId {
        /// The servo that was asked.
        expected: u8,
        /// The id in the status packet.
        got: u8,
    },
    /// A packet's parameters have the wrong length for its instruction (or for what was read).
    #[error(
        "instruction {instruction:#04x}: {got} parameter bytes do not fit (expected {expected})"
    )]
    Params {
        /// The packet's instruction byte.
        instruction: u8,
        /// What would have fit, in words.
        expected: String,
        /// How many parameter bytes there were.
        got: usize,
    },
    /// The timeout ran out with part of a packet received.
    #[error("a packet was cut off: {got} of {needed} bytes arrived")]
    Truncated {
        /// Bytes of the packet received.
        got: usize,
        /// Bytes the whole packet needs, from its length field (a minimum when that field had not
        /// arrived yet).
        needed: usize,
    },
}

/// The error number of a status packet's error byte (bits 0–6), e-Manual "Error".
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StatusError {
    /// Error 1: the servo failed to process the instruction.
    #[error("result fail (the servo could not process the instruction)")]
    ResultFail,
    /// Error 2: an undefined instruction, or ACTION without a pending REG_WRITE.
    #[error("instruction error (undefined instruction, or ACTION without REG_WRITE)")]
    Instruction,
    /// Error 3: the CRC of the packet the servo received did not match.
    #[error("CRC error (the servo received a damaged packet)")]
    Crc,
    /// Error 4: a value written is outside the item's range.
    #[error("data range error (value outside the item's minimum/maximum)")]
    DataRange,
    /// Error 5: fewer data bytes were written than the item holds.
    #[error("data length error (fewer bytes than the item holds)")]
    DataLength,
    /// Error 6: a value written is outside a limit set in the control table (e.g. a position
    /// limit).
    #[error("data limit error (value outside the configured limit)")]
    DataLimit,
    /// Error 7: a read-only or undefined item was written, a write-only one read, or the EEPROM
    /// area written while torque is on.
    #[error("access error (read-only/undefined item, or EEPROM written with torque on)")]
    Access,
    /// An error number the protocol does not define.
    #[error("unknown error number {0:#04x}")]
    Unknown(u8),
}

/// Bit 7 of the error byte: the servo has a hardware fault (Hardware Error Status says which).
pub(crate) const ALERT_BIT: u8 = 0x80;

impl StatusError {
    /// The error number carried in an error byte, if any (the alert bit is not an error number).
    pub(crate) fn from_byte(byte: u8) -> Option<StatusError> {
        Some(match byte & !ALERT_BIT {
            0 => return None,
            1 => StatusError::ResultFail,
            2 => StatusError::Instruction,
            3 => StatusError::Crc,
            4 => StatusError::DataRange,
            5 => StatusError::DataLength,
            6 => StatusError::DataLimit,
            7 => StatusError::Access,
            n => StatusError::Unknown(n),
        })
    }

    /// The number this error is sent as.
    pub(crate) fn number(self) -> u8 {
        match self {
            StatusError::ResultFail => 1,
            StatusError::Instruction => 2,
            StatusError::Crc => 3,
            StatusError::DataRange => 4,
            StatusError::DataLength => 5,
            StatusError::DataLimit => 6,
            StatusError::Access => 7,
            StatusError::Unknown(n) => n & !ALERT_BIT,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Packets

/// One packet, instruction or status, with its body unstuffed. For a status packet `params[0]` is
/// the error byte (see `Status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Packet {
    pub id: u8,
    pub instruction: u8,
    pub params: Vec<u8>,
}

impl Packet {
    pub(crate) fn new(id: u8, instruction: u8, params: Vec<u8>) -> Self {
        Packet {
            id,
            instruction,
            params,
        }
    }

    /// The bytes on the wire: header, id, length, stuffed body, CRC (e-Manual order: stuff, then
    /// length, then CRC over the stuffed packet).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(1 + self.params.len());
        body.push(self.instruction);
        body.extend_from_slice(&self.params);
        let body = stuff(&body);
        let length = (body.len() + 2) as u16;
        let mut out = Vec::with_capacity(PREFIX_LEN + body.len() + 2);
        out.extend_from_slice(&HEADER);
        out.push(self.id);
        out.extend_from_slice(&length.to_le_bytes());
        out.extend_from_slice(&body);
        let crc = crc16(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Reads this packet as a status packet.
    pub(crate) fn into_status(self) -> Result<Status, ProtocolError> {
        if self.instruction != instruction::STATUS {
            return Err(ProtocolError::NotStatus {
                instruction: self.instruction,
            });
        }
        let Some((&error, data)) = self.params.split_first() else {
            return Err(ProtocolError::NoErrorByte);
        };
        Ok(Status {
            id: self.id,
            error,
            data: data.to_vec(),
        })
    }
}

/// A status (reply) packet: the servo's id, its error byte and the data it returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// The id of the servo that answered.
    pub id: u8,
    /// Bit 7: alert (hardware fault); bits 0–6: error number.
    pub error: u8,
    /// The parameters after the error byte (the bytes read, for a read).
    pub data: Vec<u8>,
}

impl Status {
    pub(crate) fn new(id: u8, error: u8, data: Vec<u8>) -> Self {
        Status { id, error, data }
    }

    /// The servo reports a hardware fault (read Hardware Error Status for the cause).
    pub(crate) fn alert(&self) -> bool {
        self.error & ALERT_BIT != 0
    }

    /// The instruction failed, and why.
    pub(crate) fn error(&self) -> Option<StatusError> {
        StatusError::from_byte(self.error)
    }

    pub(crate) fn into_packet(self) -> Packet {
        let mut params = Vec::with_capacity(1 + self.data.len());
        params.push(self.error);
        params.extend(self.data);
        Packet::new(self.id, instruction::STATUS, params)
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        self.clone().into_packet().encode()
    }
}

// ---------------------------------------------------------------------------------------------
// Instructions

/// PING `id`: answered by a status with the model number (u16) and firmware version.
pub(crate) fn ping(id: u8) -> Packet {
    Packet::new(id, instruction::PING, Vec::new())
}

/// READ `len` bytes from `address` of servo `id`.
pub(crate) fn read(id: u8, address: u16, len: u16) -> Packet {
    let mut p = address.to_le_bytes().to_vec();
    p.extend_from_slice(&len.to_le_bytes());
    Packet::new(id, instruction::READ, p)
}

/// WRITE `data` at `address` of servo `id`.
pub(crate) fn write(id: u8, address: u16, data: &[u8]) -> Packet {
    let mut p = address.to_le_bytes().to_vec();
    p.extend_from_slice(data);
    Packet::new(id, instruction::WRITE, p)
}

/// SYNC_READ `len` bytes at `address` from each of `ids`; each answers with its own status packet,
/// in the order listed.
pub(crate) fn sync_read(address: u16, len: u16, ids: &[u8]) -> Packet {
    let mut p = address.to_le_bytes().to_vec();
    p.extend_from_slice(&len.to_le_bytes());
    p.extend_from_slice(ids);
    Packet::new(BROADCAST_ID, instruction::SYNC_READ, p)
}

/// SYNC_WRITE one `len`-byte value at `address` per servo; not answered. Every entry's data must be
/// `len` bytes (checked: a short entry would shift every later id and value).
pub(crate) fn sync_write(
    address: u16,
    len: u16,
    entries: &[(u8, &[u8])],
) -> Result<Packet, ProtocolError> {
    let mut p = address.to_le_bytes().to_vec();
    p.extend_from_slice(&len.to_le_bytes());
    for (id, data) in entries {
        if data.len() != len as usize {
            return Err(ProtocolError::Params {
                instruction: instruction::SYNC_WRITE,
                expected: format!("{len} bytes for servo {id}"),
                got: data.len(),
            });
        }
        p.push(*id);
        p.extend_from_slice(data);
    }
    Ok(Packet::new(BROADCAST_ID, instruction::SYNC_WRITE, p))
}

/// REBOOT `id` (clears a hardware error; torque comes back off).
#[cfg(test)]
pub(crate) fn reboot(id: u8) -> Packet {
    Packet::new(id, instruction::REBOOT, Vec::new())
}

/// An instruction packet read back into what it asks, for the emulator (and any tool that
/// listens to a bus).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Request {
    Ping,
    Read {
        address: u16,
        len: u16,
    },
    Write {
        address: u16,
        data: Vec<u8>,
    },
    SyncRead {
        address: u16,
        len: u16,
        ids: Vec<u8>,
    },
    SyncWrite {
        address: u16,
        len: u16,
        entries: Vec<(u8, Vec<u8>)>,
    },
    Reboot,
    /// Any other instruction: the emulator answers it with an instruction error.
    Other(u8),
}

impl Request {
    pub(crate) fn parse(packet: &Packet) -> Result<Request, ProtocolError> {
        let p = &packet.params;
        let bad = |expected: &str| ProtocolError::Params {
            instruction: packet.instruction,
            expected: expected.to_string(),
            got: p.len(),
        };
        let u16_at = |i: usize| u16::from_le_bytes([p[i], p[i + 1]]);
        Ok(match packet.instruction {
            instruction::PING => {
                if !p.is_empty() {
                    return Err(bad("0"));
                }
                Request::Ping
            }
            instruction::READ => {
                if p.len() != 4 {
                    return Err(bad("4"));
                }
                Request::Read {
                    address: u16_at(0),
                    len: u16_at(2),
                }
            }
            instruction::WRITE => {
                if p.len() < 3 {
                    return Err(bad("address (2) + at least 1 data byte"));
                }
                Request::Write {
                    address: u16_at(0),
                    data: p[2..].to_vec(),
                }
            }
            instruction::SYNC_READ => {
                if p.len() < 5 {
                    return Err(bad("address (2) + length (2) + at least 1 id"));
                }
                Request::SyncRead {
                    address: u16_at(0),
                    len: u16_at(2),
                    ids: p[4..].to_vec(),
                }
            }
            instruction::SYNC_WRITE => {
                if p.len() < 4 {
                    return Err(bad("address (2) + length (2) + entries"));
                }
                let len = u16_at(2);
                let stride = 1 + len as usize;
                let rest = &p[4..];
                if len == 0 || rest.is_empty() || !rest.len().is_multiple_of(stride) {
                    return Err(bad(&format!(
                        "4 + a multiple of {stride} (id + {len} bytes)"
                    )));
                }
                Request::SyncWrite {
                    address: u16_at(0),
                    len,
                    entries: rest
                        .chunks(stride)
                        .map(|c| (c[0], c[1..].to_vec()))
                        .collect(),
                }
            }
            instruction::REBOOT => Request::Reboot,
            other => Request::Other(other),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Incremental reader

/// Finds packets in a byte stream fed in arbitrary pieces (serial reads split and merge packets at
/// will): skips bytes before a header, waits for the rest of a partial packet, checks the length,
/// CRC and stuffing. After an error it resumes the search just past the bad packet's header, so
/// one corrupt packet does not hide the next good one.
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    buf: Vec<u8>,
    skipped: usize,
}

impl Decoder {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Appends bytes read from the port.
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes held for a packet not yet complete (or a header prefix).
    #[cfg(test)]
    pub(crate) fn pending(&self) -> usize {
        self.buf.len()
    }

    /// Bytes thrown away so far because they preceded any header (line noise, echo remnants).
    #[cfg(test)]
    pub(crate) fn skipped(&self) -> usize {
        self.skipped
    }

    /// Forgets everything buffered (before a new request, so a late reply to an abandoned one
    /// cannot be taken for the answer).
    pub(crate) fn clear(&mut self) {
        self.buf.clear();
    }

    /// How many bytes the packet at the front still needs, when a header has been found; for
    /// reporting a packet cut off by a timeout.
    pub(crate) fn partial(&self) -> Option<(usize, usize)> {
        if self.buf.len() >= PREFIX_LEN && self.buf[..4] == HEADER {
            let length = u16::from_le_bytes([self.buf[5], self.buf[6]]) as usize;
            Some((self.buf.len(), PREFIX_LEN + length))
        } else if self.buf.len() >= 4 && self.buf[..4] == HEADER {
            Some((self.buf.len(), PREFIX_LEN + 3))
        } else {
            None
        }
    }

    /// The next complete packet, an error for a bad one, or `None` until more bytes arrive.
    pub(crate) fn next_packet(&mut self) -> Option<Result<Packet, ProtocolError>> {
        // Drop everything before the first header. A trailing prefix of a header (FF, FF FF,
        // FF FF FD) is kept: the rest may be in the next read.
        match find_header(&self.buf) {
            Some(start) => {
                self.skipped += start;
                self.buf.drain(..start);
            }
            None => {
                let keep = header_prefix_len(&self.buf);
                let drop = self.buf.len() - keep;
                self.skipped += drop;
                self.buf.drain(..drop);
                return None;
            }
        }
        if self.buf.len() < PREFIX_LEN {
            return None;
        }
        let id = self.buf[4];
        let length = u16::from_le_bytes([self.buf[5], self.buf[6]]);
        if !(3..=MAX_LENGTH).contains(&length) {
            self.buf.drain(..HEADER.len());
            return Some(Err(ProtocolError::Length {
                length,
                max: MAX_LENGTH,
            }));
        }
        let total = PREFIX_LEN + length as usize;
        if self.buf.len() < total {
            return None;
        }
        let received = u16::from_le_bytes([self.buf[total - 2], self.buf[total - 1]]);
        let computed = crc16(&self.buf[..total - 2]);
        if received != computed {
            self.buf.drain(..HEADER.len());
            return Some(Err(ProtocolError::Crc { received, computed }));
        }
        let body = unstuff(&self.buf[PREFIX_LEN..total - 2]);
        self.buf.drain(..total);
        Some(body.and_then(|body| match body.split_first() {
            Some((&instruction, params)) => Ok(Packet {
                id,
                instruction,
                params: params.to_vec(),
            }),
            // Unreachable with length >= 3 (the body keeps its first byte), but not worth a panic.
            None => Err(ProtocolError::Length {
                length,
                max: MAX_LENGTH,
            }),
        }))
    }
}

/// Index of the first `FF FF FD 00`. The reserved byte is never `FD`, so stuffed `FF FF FD FD`
/// sequences are not taken for headers.
fn find_header(buf: &[u8]) -> Option<usize> {
    buf.windows(HEADER.len()).position(|w| w == HEADER)
}

/// Length of the longest suffix of `buf` that is a proper prefix of the header.
fn header_prefix_len(buf: &[u8]) -> usize {
    (1..HEADER.len())
        .rev()
        .find(|&n| buf.len() >= n && buf[buf.len() - n..] == HEADER[..n])
        .unwrap_or(0)
}
