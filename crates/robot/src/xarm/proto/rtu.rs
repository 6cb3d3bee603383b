//! Modbus RTU through the RS-485 tunnel to the xArm Gripper.

use super::*;

/// Modbus function codes the xArm Gripper uses.
pub(crate) mod modbus_fn {
    pub(crate) const READ_HOLDING: u8 = 0x03;
    pub(crate) const WRITE_MULTIPLE: u8 = 0x10;
    /// Set on the function code of an exception reply.
    pub(crate) const EXCEPTION: u8 = 0x80;
}

/// Modbus exception codes.
pub(crate) mod modbus_exception {
    pub(crate) const ILLEGAL_FUNCTION: u8 = 0x01;
    pub(crate) const ILLEGAL_ADDRESS: u8 = 0x02;
    /// The gateway's target device did not answer (no device with that id, or a baud mismatch).
    pub(crate) const TARGET_NO_RESPONSE: u8 = 0x0B;
}

/// A Modbus-RTU request PDU as tunnelled by register 124 (slave id first, no CRC).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RtuRequest {
    /// 0x03: read `count` holding registers from `addr`.
    ReadHolding { slave: u8, addr: u16, count: u16 },
    /// 0x10: write `values` from `addr`.
    WriteMultiple {
        slave: u8,
        addr: u16,
        values: Vec<u16>,
    },
}

impl RtuRequest {
    pub(crate) fn slave(&self) -> u8 {
        match self {
            RtuRequest::ReadHolding { slave, .. } | RtuRequest::WriteMultiple { slave, .. } => {
                *slave
            }
        }
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut p = Vec::new();
        match self {
            RtuRequest::ReadHolding { slave, addr, count } => {
                p.extend_from_slice(&[*slave, modbus_fn::READ_HOLDING]);
                p.extend_from_slice(&addr.to_be_bytes());
                p.extend_from_slice(&count.to_be_bytes());
            }
            RtuRequest::WriteMultiple {
                slave,
                addr,
                values,
            } => {
                p.extend_from_slice(&[*slave, modbus_fn::WRITE_MULTIPLE]);
                p.extend_from_slice(&addr.to_be_bytes());
                p.extend_from_slice(&(values.len() as u16).to_be_bytes());
                p.push((values.len() * 2) as u8);
                for v in values {
                    p.extend_from_slice(&v.to_be_bytes());
                }
            }
        }
        p
    }

    /// `Ok(None)` for a well-formed PDU with another function code (a device answers it with an
    /// ILLEGAL_FUNCTION exception).
    pub(crate) fn decode(pdu: &[u8]) -> Result<Result<RtuRequest, (u8, u8)>, ProtoError> {
        let mut c = Cursor::new(pdu, "Modbus RTU request");
        let slave = c.u8()?;
        let function = c.u8()?;
        match function {
            modbus_fn::READ_HOLDING => {
                expect_len("read-holding request", pdu.len(), &[6], "6")?;
                Ok(Ok(RtuRequest::ReadHolding {
                    slave,
                    addr: c.u16be()?,
                    count: c.u16be()?,
                }))
            }
            modbus_fn::WRITE_MULTIPLE => {
                let addr = c.u16be()?;
                let count = c.u16be()? as usize;
                let bytes = c.u8()? as usize;
                if bytes != count * 2 || c.remaining() != bytes || count == 0 {
                    return Err(ProtoError::BadLength {
                        what: "write-multiple request",
                        got: pdu.len(),
                        expected: "7 + 2 x count bytes, byte count = 2 x count",
                    });
                }
                let mut values = Vec::with_capacity(count);
                for _ in 0..count {
                    values.push(c.u16be()?);
                }
                Ok(Ok(RtuRequest::WriteMultiple {
                    slave,
                    addr,
                    values,
                }))
            }
            other => Ok(Err((slave, other))),
        }
    }
}

/// A Modbus-RTU reply PDU (slave id first, no CRC).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RtuReply {
    ReadHolding { slave: u8, values: Vec<u16> },
    WriteMultiple { slave: u8, addr: u16, count: u16 },
    Exception { slave: u8, function: u8, code: u8 },
}

impl RtuReply {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut p = Vec::new();
        match self {
            RtuReply::ReadHolding { slave, values } => {
                p.extend_from_slice(&[*slave, modbus_fn::READ_HOLDING, (values.len() * 2) as u8]);
                for v in values {
                    p.extend_from_slice(&v.to_be_bytes());
                }
            }
            RtuReply::WriteMultiple { slave, addr, count } => {
                p.extend_from_slice(&[*slave, modbus_fn::WRITE_MULTIPLE]);
                p.extend_from_slice(&addr.to_be_bytes());
                p.extend_from_slice(&count.to_be_bytes());
            }
            RtuReply::Exception {
                slave,
                function,
                code,
            } => p.extend_from_slice(&[*slave, function | modbus_fn::EXCEPTION, *code]),
        }
        p
    }

    pub(crate) fn decode(pdu: &[u8]) -> Result<RtuReply, ProtoError> {
        let mut c = Cursor::new(pdu, "Modbus RTU reply");
        let slave = c.u8()?;
        let function = c.u8()?;
        if function & modbus_fn::EXCEPTION != 0 {
            expect_len("exception reply", pdu.len(), &[3], "3")?;
            return Ok(RtuReply::Exception {
                slave,
                function: function & !modbus_fn::EXCEPTION,
                code: c.u8()?,
            });
        }
        match function {
            modbus_fn::READ_HOLDING => {
                let bytes = c.u8()? as usize;
                if !bytes.is_multiple_of(2) || c.remaining() != bytes {
                    return Err(ProtoError::BadLength {
                        what: "read-holding reply",
                        got: pdu.len(),
                        expected: "3 + byte count (even)",
                    });
                }
                let mut values = Vec::with_capacity(bytes / 2);
                for _ in 0..bytes / 2 {
                    values.push(c.u16be()?);
                }
                Ok(RtuReply::ReadHolding { slave, values })
            }
            modbus_fn::WRITE_MULTIPLE => {
                expect_len("write-multiple reply", pdu.len(), &[6], "6")?;
                Ok(RtuReply::WriteMultiple {
                    slave,
                    addr: c.u16be()?,
                    count: c.u16be()?,
                })
            }
            other => Err(ProtoError::Invalid {
                field: "Modbus function",
                value: other as u64,
            }),
        }
    }
}

/// Splits an i32 (gripper position) into the two big-endian registers the gripper uses.
pub(crate) fn i32_to_registers(v: i32) -> [u16; 2] {
    let b = v.to_be_bytes();
    [
        u16::from_be_bytes([b[0], b[1]]),
        u16::from_be_bytes([b[2], b[3]]),
    ]
}

/// Joins two registers (high first) into an i32.
pub(crate) fn registers_to_i32(r: [u16; 2]) -> i32 {
    let h = r[0].to_be_bytes();
    let l = r[1].to_be_bytes();
    i32::from_be_bytes([h[0], h[1], l[0], l[1]])
}
