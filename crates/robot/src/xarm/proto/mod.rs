//! The xArm controller's private TCP protocol, as the official xArm-Python-SDK 1.18.4 speaks it
//! ("the SDK", tag v1.18.4: `xarm/core/wrapper/uxbus_cmd{,_tcp}.py`,
//! `xarm/core/config/x_config.py`, `xarm/x3/{base,report}.py`) and as the UFACTORY developer docs
//! describe it ("UFACTORY", xArm-Developer/ufactory_docs `private_tcp_protocol/*.md`): command
//! frames on port 502, the unsolicited feedback frame, the RS-485 tunnel to the xArm Gripper, and
//! the 30002 "rich" and 30000 real-time report frames.
//!
//! Everything here is a pure function of bytes: no sockets, no clocks. The client (`robot::xarm`
//! driver) and the emulator (`robot::xarm::emulator`) share it, so both sides of the wire are
//! written once and tested against the SDK's golden frames (docs/references.md §2) byte for byte.
//!
//! Why the layout of the types: a command frame is `Request` (raw: transaction id, protocol id,
//! funcode, parameter bytes) and its typed meaning is `Command`; a reply frame is `Response` (raw,
//! with the status byte) and its typed payload is `Reply`. The raw layer is what the framing and
//! the transaction matching need; the typed layer is what a driver or an emulator reasons about.
//! Decoders never panic: short, long or malformed input is a `ProtoError` (fuzzed in
//! `crates/robot/src/tests/xarm_proto_fuzz.rs`).
//!
//! Byte order (UFACTORY `p05communication-format.md`, the SDK's `xarm/core/utils/bytes_data.py`):
//! header fields, u16 data and Modbus registers big-endian; every f32
//! and i32 parameter little-endian.

mod command;
mod reply;
mod report;
mod rtu;
mod state;
pub use command::*;
pub use reply::*;
pub use report::*;
pub(crate) use rtu::*;
pub use state::*;

use std::fmt;

use pointact_core::nalgebra::{Isometry3, Translation3, UnitQuaternion, Vector3};

/// Bytes before the funcode: transaction id, protocol id, length (all u16 big-endian).
pub(crate) const HEADER_LEN: usize = 6;

/// Protocol identifiers of the header's second field (the SDK's `uxbus_cmd_tcp.py`).
pub mod prot {
    /// Standard Modbus TCP on the same port (not used by pointact).
    pub(crate) const MODBUS_TCP: u16 = 0;
    /// The SDK's optional heartbeat frame `00 00 00 01 00 02 00 00`; a controller ignores it.
    pub(crate) const HEARTBEAT: u16 = 1;
    /// Private protocol, as first spoken by the SDK.
    pub const PRIVATE: u16 = 2;
    /// Private protocol after the SDK's switch (firmware >= 1.8.6); a controller echoes either.
    pub const PRIVATE_V3: u16 = 3;
}

/// Register (funcode) numbers, `XCONF.UxbusReg` in the SDK (`x_config.py`).
pub(crate) mod reg {
    pub(crate) const GET_VERSION: u8 = 1;
    pub(crate) const GET_ROBOT_SN: u8 = 2;
    pub(crate) const MOTION_EN: u8 = 11;
    pub(crate) const SET_STATE: u8 = 12;
    pub(crate) const GET_STATE: u8 = 13;
    pub(crate) const GET_CMDNUM: u8 = 14;
    pub(crate) const GET_ERROR: u8 = 15;
    pub(crate) const CLEAN_ERR: u8 = 16;
    pub(crate) const CLEAN_WAR: u8 = 17;
    pub(crate) const SET_MODE: u8 = 19;
    pub(crate) const MOVE_LINE: u8 = 21;
    pub(crate) const MOVE_JOINT: u8 = 23;
    pub(crate) const MOVE_HOME: u8 = 25;
    pub(crate) const MOVE_SERVOJ: u8 = 29;
    pub(crate) const MOVE_SERVO_CART: u8 = 30;
    pub(crate) const SET_TCP_OFFSET: u8 = 35;
    pub(crate) const SET_LOAD_PARAM: u8 = 36;
    pub(crate) const GET_TCP_POSE: u8 = 41;
    pub(crate) const GET_JOINT_POS: u8 = 42;
    /// Relative move (Cartesian or joint); the SDK's `set_position(relative=True)` on fw >= 1.8.100.
    pub(crate) const MOVE_RELATIVE: u8 = 83;
    pub(crate) const RS485_RTU: u8 = 124;
    pub(crate) const TGPIO_W16B: u8 = 127;
    pub(crate) const TGPIO_R16B: u8 = 128;
    pub(crate) const SET_FEEDBACK_TYPE: u8 = 254;
    /// Not a register: the funcode of unsolicited feedback frames.
    pub(crate) const FEEDBACK: u8 = 0xFF;
}

/// RS-485 tunnel hosts (register 124, UFACTORY `p16-rs485-control-on-the-end-effector-124-127.md`).
pub(crate) const RS485_HOST_TOOL: u8 = 9;
#[allow(dead_code)] // the manual's other host, named so a frame that carries it reads as such
pub(crate) const RS485_HOST_CONTROL_BOX: u8 = 11;

/// Tool-board registers reached with TGPIO_R16B / TGPIO_W16B (host 9), as the SDK's
/// `checkset_modbus_baud` (`xarm/x3/base.py`) uses them.
pub(crate) mod tool_reg {
    /// Read: index of the tool RS-485 baud rate in `robot::settings::XARM_RS485_BAUDS`.
    pub(crate) const BAUD_INDEX: u16 = 0x0A0B;
    /// Write: new baud index (applied after a soft reboot).
    pub(crate) const SET_BAUD_INDEX: u16 = 0x1A0B;
    /// Write 1: soft reboot of the tool board.
    pub(crate) const SOFT_REBOOT: u16 = 0x0607;
}

/// xArm Gripper Modbus registers (slave 8 behind host 9), the SDK's `xarm/x3/gripper.py`.
pub(crate) mod gripper_reg {
    /// Default Modbus slave id of the xArm Gripper.
    pub(crate) const SLAVE_ID: u8 = 8;
    /// Status: bits 0-1 = 0 stopped, 1 moving, 2 object detected.
    pub(crate) const STATUS: u16 = 0x0000;
    pub(crate) const ERROR: u16 = 0x000F;
    pub(crate) const ENABLE: u16 = 0x0100;
    pub(crate) const MODE: u16 = 0x0101;
    /// Write 1: the current position becomes zero.
    pub(crate) const SET_ZERO: u16 = 0x0108;
    /// Write 1: clears the gripper's error.
    pub(crate) const CLEAR_ERROR: u16 = 0x0109;
    /// Speed (r/min).
    pub(crate) const SPEED: u16 = 0x0303;
    /// Target position: i32 big-endian pulses in two registers (850 open .. 0 closed).
    pub(crate) const TARGET_POSITION: u16 = 0x0700;
    /// Current position: i32 big-endian pulses in two registers.
    pub(crate) const POSITION: u16 = 0x0702;
    /// Firmware version major, minor, patch (one register each).
    pub(crate) const VERSION: [u16; 3] = [0x0801, 0x0802, 0x0803];
    /// Status register values (bits 0-1).
    pub(crate) const STATUS_STOPPED: u16 = 0;
    pub(crate) const STATUS_MOVING: u16 = 1;
    pub(crate) const STATUS_OBJECT: u16 = 2;
}

/// Feedback-type bits of SET_FEEDBACK_TYPE (254) and of the feedback frame's kind byte (the
/// manual's whole table; the client asks for motion start and finish only).
#[allow(dead_code)]
pub mod feedback_kind {
    pub(crate) const MOTION_START: u8 = 1;
    /// Bit 1: report when a motion finishes.
    pub const MOTION_FINISH: u8 = 2;
    pub(crate) const TRIGGER: u8 = 4;
    pub(crate) const OTHER_START: u8 = 32;
    pub(crate) const OTHER_FINISH: u8 = 64;
}

/// Result codes of a feedback frame (the manual's whole table).
#[allow(dead_code)]
pub mod feedback_code {
    /// 0: the command completed.
    pub const SUCCESS: u8 = 0;
    pub(crate) const FAILURE: u8 = 1;
    pub(crate) const DISCARDED: u8 = 2;
}

// ---------------------------------------------------------------------------------------------
// Errors

/// Why bytes are not a valid frame, payload or report. Every decoder returns one of these instead
/// of panicking.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// The input ended before a field that must be there.
    #[error("{what}: {got} bytes, need at least {need}")]
    Short {
        /// What was being read.
        what: &'static str,
        /// Bytes available.
        got: usize,
        /// Bytes the field being read needed.
        need: usize,
    },
    /// A frame's length field disagrees with the bytes that came with it.
    #[error("{what}: length field says {declared} bytes, {actual} present")]
    LengthMismatch {
        /// What was being read.
        what: &'static str,
        /// The length the frame declares.
        declared: usize,
        /// The length it has.
        actual: usize,
    },
    /// A payload or frame whose length is not one its kind can have.
    #[error("{what}: {got} bytes, expected {expected}")]
    BadLength {
        /// What was being read.
        what: &'static str,
        /// Its length in bytes.
        got: usize,
        /// The accepted lengths, in words.
        expected: &'static str,
    },
    /// A frame to encode, or a report to buffer, is larger than the protocol allows.
    #[error("{what}: {got} bytes exceed the largest frame ({max})")]
    TooLong {
        /// What was being encoded or read.
        what: &'static str,
        /// Its length in bytes.
        got: usize,
        /// The largest length allowed.
        max: usize,
    },
    /// A header's length field is 0, so the frame has not even a funcode.
    #[error("frame header declares an empty body (no funcode)")]
    EmptyBody,
    /// A frame carries another funcode than the one it is read as.
    #[error("funcode {got} where {expected} was expected")]
    Funcode {
        /// The funcode required.
        expected: u8,
        /// The funcode in the frame.
        got: u8,
    },
    /// A request or reply with a funcode this codec does not implement.
    #[error("funcode {0} is not one this codec knows")]
    UnknownFuncode(u8),
    /// A field holds a value outside its allowed range.
    #[error("{field} = {value} is out of range")]
    Invalid {
        /// The field's name.
        field: &'static str,
        /// Its value (a length for text fields that do not parse).
        value: u64,
    },
    /// A report stream's frames changed length, so the stream has lost its framing.
    #[error("report length changed from {first} to {now} bytes within one stream")]
    ReportLengthChanged {
        /// Length of the stream's first frame.
        first: usize,
        /// Length of the frame that differs.
        now: usize,
    },
}

// ---------------------------------------------------------------------------------------------
// Byte helpers: a bounds-checked reader, and writers

/// Reads fields in order; running past the end is an error, never a panic.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
    what: &'static str,
}

impl<'a> Cursor<'a> {
    fn new(bytes: &'a [u8], what: &'static str) -> Self {
        Cursor { bytes, at: 0, what }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtoError> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.bytes.len());
        match end {
            Some(end) => {
                let s = &self.bytes[self.at..end];
                self.at = end;
                Ok(s)
            }
            None => Err(ProtoError::Short {
                what: self.what,
                got: self.bytes.len(),
                need: self.at.saturating_add(n),
            }),
        }
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], ProtoError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, ProtoError> {
        Ok(self.array::<1>()?[0])
    }
    fn u16be(&mut self) -> Result<u16, ProtoError> {
        Ok(u16::from_be_bytes(self.array()?))
    }
    fn u32be(&mut self) -> Result<u32, ProtoError> {
        Ok(u32::from_be_bytes(self.array()?))
    }
    fn i32be(&mut self) -> Result<i32, ProtoError> {
        Ok(i32::from_be_bytes(self.array()?))
    }
    fn u64be(&mut self) -> Result<u64, ProtoError> {
        Ok(u64::from_be_bytes(self.array()?))
    }
    fn f32le(&mut self) -> Result<f32, ProtoError> {
        Ok(f32::from_le_bytes(self.array()?))
    }
    fn f32s<const N: usize>(&mut self) -> Result<[f32; N], ProtoError> {
        let mut out = [0f32; N];
        for v in &mut out {
            *v = self.f32le()?;
        }
        Ok(out)
    }
    fn rest(&mut self) -> &'a [u8] {
        let s = &self.bytes[self.at.min(self.bytes.len())..];
        self.at = self.bytes.len();
        s
    }
    fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.at)
    }
    fn skip(&mut self, n: usize) -> Result<(), ProtoError> {
        self.take(n).map(|_| ())
    }
}

fn put_f32s(out: &mut Vec<u8>, values: &[f32]) {
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

// ---------------------------------------------------------------------------------------------
// Field codecs

/// How one field travels, both ways in one place. The command table (`command.rs`) and the report
/// layouts (`report.rs`) name a codec per field, and both the encoder and the decoder come from
/// it. The codec is usually the field's own type; a marker type stands for a field whose bytes
/// are not the plain encoding of its Rust type.
trait Wire {
    /// The field's type in the typed message.
    type Value;
    /// Appends the field's bytes.
    fn put(v: &Self::Value, p: &mut Vec<u8>);
    /// Reads the field; `name` (e.g. `MOTION_EN enable`) is what an out-of-range error names.
    fn get(c: &mut Cursor, name: &'static str) -> Result<Self::Value, ProtoError>;
}

/// Integers are big-endian: the header, u16 data and the report frames' integers (byte order in
/// the module docs).
macro_rules! big_endian_wire {
    ($($t:ty),*) => {$(
        impl Wire for $t {
            type Value = $t;
            fn put(v: &$t, p: &mut Vec<u8>) {
                p.extend_from_slice(&v.to_be_bytes());
            }
            fn get(c: &mut Cursor, _: &'static str) -> Result<$t, ProtoError> {
                Ok(<$t>::from_be_bytes(c.array()?))
            }
        }
    )*};
}
big_endian_wire!(u8, i8, u16, i16, u32, u64);

/// Little-endian, like every f32 parameter and report float.
impl Wire for f32 {
    type Value = f32;
    fn put(v: &f32, p: &mut Vec<u8>) {
        p.extend_from_slice(&v.to_le_bytes());
    }
    fn get(c: &mut Cursor, _: &'static str) -> Result<f32, ProtoError> {
        c.f32le()
    }
}

/// Element after element, each in its own byte order.
impl<T: Wire<Value = T> + Copy + Default, const N: usize> Wire for [T; N] {
    type Value = [T; N];
    fn put(v: &[T; N], p: &mut Vec<u8>) {
        for x in v {
            T::put(x, p);
        }
    }
    fn get(c: &mut Cursor, name: &'static str) -> Result<[T; N], ProtoError> {
        let mut out = [T::default(); N];
        for x in &mut out {
            *x = T::get(c, name)?;
        }
        Ok(out)
    }
}

/// Text in a fixed NUL-padded field: bytes up to the first NUL, lossy UTF-8.
fn fixed_text(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// `text` NUL-padded (or cut) to `len` bytes.
fn put_fixed_text(out: &mut Vec<u8>, text: &str, len: usize) {
    let b = text.as_bytes();
    let n = b.len().min(len);
    out.extend_from_slice(&b[..n]);
    out.resize(out.len() + (len - n), 0);
}

fn expect_len(
    what: &'static str,
    got: usize,
    ok: &[usize],
    expected: &'static str,
) -> Result<(), ProtoError> {
    if ok.contains(&got) {
        Ok(())
    } else {
        Err(ProtoError::BadLength {
            what,
            got,
            expected,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Status byte

/// The status byte after the funcode of every reply (UFACTORY `p05communication-format.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Status(pub u8);

impl Status {
    /// Result invalid / execution failed (SDK code 10).
    #[allow(dead_code)]
    pub(crate) const INVALID: u8 = 0x08;
    /// Not ready to move: state 4 (stopped) or 5 (configuration changed); motion commands are
    /// discarded until SET_STATE 0.
    pub(crate) const NOT_READY: u8 = 0x10;
    /// A warning code is set (GET_ERROR tells which).
    pub(crate) const WARNING: u8 = 0x20;
    /// An error code is set; the arm has stopped.
    pub(crate) const ERROR: u8 = 0x40;

    pub(crate) const OK: Status = Status(0);

    pub(crate) fn not_ready(self) -> bool {
        self.0 & Self::NOT_READY != 0
    }
    pub(crate) fn warning(self) -> bool {
        self.0 & Self::WARNING != 0
    }
    pub(crate) fn error(self) -> bool {
        self.0 & Self::ERROR != 0
    }
}

// ---------------------------------------------------------------------------------------------
// Frames

/// Largest body (funcode + parameters) the u16 length field can declare.
pub(crate) const MAX_BODY_LEN: usize = u16::MAX as usize;

/// One command frame, raw: `tid | prot | len | funcode | params`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Transaction id; the reply echoes it.
    pub tid: u16,
    /// Protocol id (`prot::PRIVATE` or `prot::PRIVATE_V3`).
    pub prot: u16,
    /// Register number of the command.
    pub funcode: u8,
    /// Parameter bytes after the funcode.
    pub params: Vec<u8>,
}

impl Request {
    /// The frame's bytes, header included; `TooLong` if the body exceeds the u16 length field.
    pub fn encode(&self) -> Result<Vec<u8>, ProtoError> {
        let body = 1 + self.params.len();
        if body > MAX_BODY_LEN {
            return Err(ProtoError::TooLong {
                what: "request",
                got: body,
                max: MAX_BODY_LEN,
            });
        }
        let mut out = Vec::with_capacity(HEADER_LEN + body);
        out.extend_from_slice(&self.tid.to_be_bytes());
        out.extend_from_slice(&self.prot.to_be_bytes());
        out.extend_from_slice(&(body as u16).to_be_bytes());
        out.push(self.funcode);
        out.extend_from_slice(&self.params);
        Ok(out)
    }

    /// Decodes exactly one frame (as `FrameReader::next_frame` yields them).
    pub(crate) fn decode(frame: &[u8]) -> Result<Request, ProtoError> {
        let (tid, prot, body) = split_frame(frame, "request")?;
        let (funcode, params) = body.split_first().ok_or(ProtoError::EmptyBody)?;
        Ok(Request {
            tid,
            prot,
            funcode: *funcode,
            params: params.to_vec(),
        })
    }
}

/// One reply frame, raw: `tid | prot | len | funcode | status | payload`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Transaction id of the request answered.
    pub tid: u16,
    /// Protocol id, echoed from the request.
    pub prot: u16,
    /// Register number of the command answered.
    pub funcode: u8,
    /// The controller's status bits.
    pub status: Status,
    /// Bytes after the status byte (see `Reply`).
    pub payload: Vec<u8>,
}

impl Response {
    /// The reply to `request` (same tid, prot and funcode, as the controller echoes them).
    pub(crate) fn to(request: &Request, status: Status, payload: Vec<u8>) -> Response {
        Response {
            tid: request.tid,
            prot: request.prot,
            funcode: request.funcode,
            status,
            payload,
        }
    }

    pub(crate) fn encode(&self) -> Result<Vec<u8>, ProtoError> {
        let body = 2 + self.payload.len();
        if body > MAX_BODY_LEN {
            return Err(ProtoError::TooLong {
                what: "response",
                got: body,
                max: MAX_BODY_LEN,
            });
        }
        let mut out = Vec::with_capacity(HEADER_LEN + body);
        out.extend_from_slice(&self.tid.to_be_bytes());
        out.extend_from_slice(&self.prot.to_be_bytes());
        out.extend_from_slice(&(body as u16).to_be_bytes());
        out.push(self.funcode);
        out.push(self.status.0);
        out.extend_from_slice(&self.payload);
        Ok(out)
    }

    pub(crate) fn decode(frame: &[u8]) -> Result<Response, ProtoError> {
        let (tid, prot, body) = split_frame(frame, "response")?;
        match body {
            [] => Err(ProtoError::EmptyBody),
            [_] => Err(ProtoError::Short {
                what: "response body (funcode + status)",
                got: 1,
                need: 2,
            }),
            [funcode, status, payload @ ..] => Ok(Response {
                tid,
                prot,
                funcode: *funcode,
                status: Status(*status),
                payload: payload.to_vec(),
            }),
        }
    }
}

/// Header fields and body of one complete frame; the length field must match the bytes.
fn split_frame<'a>(
    frame: &'a [u8],
    what: &'static str,
) -> Result<(u16, u16, &'a [u8]), ProtoError> {
    let mut c = Cursor::new(frame, what);
    let tid = c.u16be()?;
    let prot = c.u16be()?;
    let len = c.u16be()? as usize;
    let body = c.rest();
    if len != body.len() {
        return Err(ProtoError::LengthMismatch {
            what,
            declared: len,
            actual: body.len(),
        });
    }
    Ok((tid, prot, body))
}

/// Splits a byte stream (either direction of the command socket) into frames: read the 6-byte
/// header, then `len` more bytes (the SDK's `recv_proc`, `xarm/core/comm/base.py`). Feed it
/// whatever the socket returned; it keeps partial frames until the rest arrives.
#[derive(Debug, Default, Clone)]
pub struct FrameReader {
    buf: Vec<u8>,
}

impl FrameReader {
    /// An empty reader.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends bytes as they arrive from the socket; frames are taken out with `next_frame`.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes held that do not yet form a frame.
    pub(crate) fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// The next complete frame (header included), `None` until one has fully arrived. A header
    /// declaring an empty body is an error; its 6 bytes are dropped so the next call moves on, but
    /// the stream has most likely lost its framing and the connection should be closed.
    pub fn next_frame(&mut self) -> Result<Option<Vec<u8>>, ProtoError> {
        if self.buf.len() < HEADER_LEN {
            return Ok(None);
        }
        let len = u16::from_be_bytes([self.buf[4], self.buf[5]]) as usize;
        if len == 0 {
            self.buf.drain(..HEADER_LEN);
            return Err(ProtoError::EmptyBody);
        }
        let total = HEADER_LEN + len;
        if self.buf.len() < total {
            return Ok(None);
        }
        let rest = self.buf.split_off(total);
        Ok(Some(std::mem::replace(&mut self.buf, rest)))
    }
}

// ---------------------------------------------------------------------------------------------
// Feedback frames (funcode 0xFF)

/// Unsolicited frame the controller sends on the command socket when a command it was asked to
/// report on (SET_FEEDBACK_TYPE) starts or finishes (firmware >= 2.1.0; the SDK's
/// `example/wrapper/common/3005-task_feedback.py`).
/// Layout: `tid | prot | len=15 | 0xFF | status | kind | funcode | task u16be | code | µs u64be`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Feedback {
    /// Transaction id of the command it refers to.
    pub tid: u16,
    /// Protocol id of the header.
    pub prot: u16,
    /// The controller's status bits when the frame was sent.
    pub status: Status,
    /// One of `feedback_kind`.
    pub kind: u8,
    /// Funcode of the command it refers to.
    pub funcode: u8,
    /// The task id the command's reply carried (`Reply::MoveAck::task`).
    pub task: u16,
    /// One of `feedback_code`.
    pub code: u8,
    /// Controller time stamp (µs).
    pub time_us: u64,
}

const FEEDBACK_PAYLOAD_LEN: usize = 13;

impl Feedback {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut payload = Vec::with_capacity(FEEDBACK_PAYLOAD_LEN);
        payload.push(self.kind);
        payload.push(self.funcode);
        payload.extend_from_slice(&self.task.to_be_bytes());
        payload.push(self.code);
        payload.extend_from_slice(&self.time_us.to_be_bytes());
        let r = Response {
            tid: self.tid,
            prot: self.prot,
            funcode: reg::FEEDBACK,
            status: self.status,
            payload,
        };
        // 15-byte body: always within the length field.
        r.encode().unwrap_or_default()
    }

    pub(crate) fn from_response(r: &Response) -> Result<Feedback, ProtoError> {
        if r.funcode != reg::FEEDBACK {
            return Err(ProtoError::Funcode {
                expected: reg::FEEDBACK,
                got: r.funcode,
            });
        }
        let mut c = Cursor::new(&r.payload, "feedback payload");
        let f = Feedback {
            tid: r.tid,
            prot: r.prot,
            status: r.status,
            kind: c.u8()?,
            funcode: c.u8()?,
            task: c.u16be()?,
            code: c.u8()?,
            time_us: c.u64be()?,
        };
        if c.remaining() != 0 {
            return Err(ProtoError::BadLength {
                what: "feedback payload",
                got: r.payload.len(),
                expected: "13",
            });
        }
        Ok(f)
    }
}

/// What a client reads from the command socket: a reply to its request, or a feedback frame.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A reply to a request (matched by transaction id).
    Response(Response),
    /// A feedback frame (funcode 0xFF) on a command's start or finish.
    Feedback(Feedback),
}

impl Incoming {
    /// Reads one complete frame (as `FrameReader::next_frame` yields it).
    pub fn decode(frame: &[u8]) -> Result<Incoming, ProtoError> {
        let r = Response::decode(frame)?;
        if r.funcode == reg::FEEDBACK {
            Feedback::from_response(&r).map(Incoming::Feedback)
        } else {
            Ok(Incoming::Response(r))
        }
    }
}

#[cfg(test)]
mod tests;
