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
//! `tests/xarm_proto_fuzz.rs`).
//!
//! Byte order (UFACTORY `p05communication-format.md`, the SDK's `xarm/core/utils/bytes_data.py`):
//! header fields, u16 data and Modbus registers big-endian; every f32
//! and i32 parameter little-endian.

use std::fmt;

use pointact_core::nalgebra::{Isometry3, Translation3, UnitQuaternion, Vector3};

/// Bytes before the funcode: transaction id, protocol id, length (all u16 big-endian).
pub const HEADER_LEN: usize = 6;

/// Protocol identifiers of the header's second field (the SDK's `uxbus_cmd_tcp.py`).
pub mod prot {
    /// Standard Modbus TCP on the same port (not used by pointact).
    pub const MODBUS_TCP: u16 = 0;
    /// The SDK's optional heartbeat frame `00 00 00 01 00 02 00 00`; a controller ignores it.
    pub const HEARTBEAT: u16 = 1;
    /// Private protocol, as first spoken by the SDK.
    pub const PRIVATE: u16 = 2;
    /// Private protocol after the SDK's switch (firmware >= 1.8.6); a controller echoes either.
    pub const PRIVATE_V3: u16 = 3;
}

/// Register (funcode) numbers, `XCONF.UxbusReg` in the SDK (`x_config.py`).
pub mod reg {
    pub const GET_VERSION: u8 = 1;
    pub const GET_ROBOT_SN: u8 = 2;
    pub const MOTION_EN: u8 = 11;
    pub const SET_STATE: u8 = 12;
    pub const GET_STATE: u8 = 13;
    pub const GET_CMDNUM: u8 = 14;
    pub const GET_ERROR: u8 = 15;
    pub const CLEAN_ERR: u8 = 16;
    pub const CLEAN_WAR: u8 = 17;
    pub const SET_MODE: u8 = 19;
    pub const MOVE_LINE: u8 = 21;
    pub const MOVE_JOINT: u8 = 23;
    pub const MOVE_HOME: u8 = 25;
    pub const MOVE_SERVOJ: u8 = 29;
    pub const MOVE_SERVO_CART: u8 = 30;
    pub const SET_TCP_OFFSET: u8 = 35;
    pub const SET_LOAD_PARAM: u8 = 36;
    pub const GET_TCP_POSE: u8 = 41;
    pub const GET_JOINT_POS: u8 = 42;
    /// Relative move (Cartesian or joint); the SDK's `set_position(relative=True)` on fw >= 1.8.100.
    pub const MOVE_RELATIVE: u8 = 83;
    pub const RS485_RTU: u8 = 124;
    pub const TGPIO_W16B: u8 = 127;
    pub const TGPIO_R16B: u8 = 128;
    pub const SET_FEEDBACK_TYPE: u8 = 254;
    /// Not a register: the funcode of unsolicited feedback frames.
    pub const FEEDBACK: u8 = 0xFF;
}

/// RS-485 tunnel hosts (register 124, UFACTORY `p16-rs485-control-on-the-end-effector-124-127.md`).
pub const RS485_HOST_TOOL: u8 = 9;
pub const RS485_HOST_CONTROL_BOX: u8 = 11;

/// Tool-board registers reached with TGPIO_R16B / TGPIO_W16B (host 9), as the SDK's
/// `checkset_modbus_baud` (`xarm/x3/base.py`) uses them.
pub mod tool_reg {
    /// Read: index of the tool RS-485 baud rate in `robot::settings::XARM_RS485_BAUDS`.
    pub const BAUD_INDEX: u16 = 0x0A0B;
    /// Write: new baud index (applied after a soft reboot).
    pub const SET_BAUD_INDEX: u16 = 0x1A0B;
    /// Write 1: soft reboot of the tool board.
    pub const SOFT_REBOOT: u16 = 0x0607;
}

/// xArm Gripper Modbus registers (slave 8 behind host 9), the SDK's `xarm/x3/gripper.py`.
pub mod gripper_reg {
    /// Default Modbus slave id of the xArm Gripper.
    pub const SLAVE_ID: u8 = 8;
    /// Status: bits 0-1 = 0 stopped, 1 moving, 2 object detected.
    pub const STATUS: u16 = 0x0000;
    pub const ERROR: u16 = 0x000F;
    pub const ENABLE: u16 = 0x0100;
    pub const MODE: u16 = 0x0101;
    /// Write 1: the current position becomes zero.
    pub const SET_ZERO: u16 = 0x0108;
    /// Write 1: clears the gripper's error.
    pub const CLEAR_ERROR: u16 = 0x0109;
    /// Speed (r/min).
    pub const SPEED: u16 = 0x0303;
    /// Target position: i32 big-endian pulses in two registers (850 open .. 0 closed).
    pub const TARGET_POSITION: u16 = 0x0700;
    /// Current position: i32 big-endian pulses in two registers.
    pub const POSITION: u16 = 0x0702;
    /// Firmware version major, minor, patch (one register each).
    pub const VERSION: [u16; 3] = [0x0801, 0x0802, 0x0803];
    /// Status register values (bits 0-1).
    pub const STATUS_STOPPED: u16 = 0;
    pub const STATUS_MOVING: u16 = 1;
    pub const STATUS_OBJECT: u16 = 2;
}

/// Feedback-type bits of SET_FEEDBACK_TYPE (254) and of the feedback frame's kind byte.
pub mod feedback_kind {
    pub const MOTION_START: u8 = 1;
    pub const MOTION_FINISH: u8 = 2;
    pub const TRIGGER: u8 = 4;
    pub const OTHER_START: u8 = 32;
    pub const OTHER_FINISH: u8 = 64;
}

/// Result codes of a feedback frame.
pub mod feedback_code {
    pub const SUCCESS: u8 = 0;
    pub const FAILURE: u8 = 1;
    pub const DISCARDED: u8 = 2;
}

// ---------------------------------------------------------------------------------------------
// Errors

/// Why bytes are not a valid frame, payload or report. Every decoder returns one of these instead
/// of panicking.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    #[error("{what}: {got} bytes, need at least {need}")]
    Short {
        what: &'static str,
        got: usize,
        need: usize,
    },
    #[error("{what}: length field says {declared} bytes, {actual} present")]
    LengthMismatch {
        what: &'static str,
        declared: usize,
        actual: usize,
    },
    #[error("{what}: {got} bytes, expected {expected}")]
    BadLength {
        what: &'static str,
        got: usize,
        expected: &'static str,
    },
    #[error("{what}: {got} bytes exceed the largest frame ({max})")]
    TooLong {
        what: &'static str,
        got: usize,
        max: usize,
    },
    #[error("frame header declares an empty body (no funcode)")]
    EmptyBody,
    #[error("funcode {got} where {expected} was expected")]
    Funcode { expected: u8, got: u8 },
    #[error("funcode {0} is not one this codec knows")]
    UnknownFuncode(u8),
    #[error("{field} = {value} is out of range")]
    Invalid { field: &'static str, value: u64 },
    #[error("report length changed from {first} to {now} bytes within one stream")]
    ReportLengthChanged { first: usize, now: usize },
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
    fn i16be(&mut self) -> Result<i16, ProtoError> {
        Ok(i16::from_be_bytes(self.array()?))
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
    fn u8s<const N: usize>(&mut self) -> Result<[u8; N], ProtoError> {
        self.array()
    }
    fn i16s<const N: usize>(&mut self) -> Result<[i16; N], ProtoError> {
        let mut out = [0i16; N];
        for v in &mut out {
            *v = self.i16be()?;
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

fn put_i16s(out: &mut Vec<u8>, values: &[i16]) {
    for v in values {
        out.extend_from_slice(&v.to_be_bytes());
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
    pub const INVALID: u8 = 0x08;
    /// Not ready to move: state 4 (stopped) or 5 (configuration changed); motion commands are
    /// discarded until SET_STATE 0.
    pub const NOT_READY: u8 = 0x10;
    /// A warning code is set (GET_ERROR tells which).
    pub const WARNING: u8 = 0x20;
    /// An error code is set; the arm has stopped.
    pub const ERROR: u8 = 0x40;

    pub const OK: Status = Status(0);

    pub fn not_ready(self) -> bool {
        self.0 & Self::NOT_READY != 0
    }
    pub fn warning(self) -> bool {
        self.0 & Self::WARNING != 0
    }
    pub fn error(self) -> bool {
        self.0 & Self::ERROR != 0
    }
    pub fn invalid(self) -> bool {
        self.0 & Self::INVALID != 0
    }
}

// ---------------------------------------------------------------------------------------------
// Frames

/// Largest body (funcode + parameters) the u16 length field can declare.
pub const MAX_BODY_LEN: usize = u16::MAX as usize;

/// One command frame, raw: `tid | prot | len | funcode | params`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub tid: u16,
    pub prot: u16,
    pub funcode: u8,
    pub params: Vec<u8>,
}

impl Request {
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
    pub fn decode(frame: &[u8]) -> Result<Request, ProtoError> {
        let (tid, prot, body) = split_frame(frame, "request")?;
        let (funcode, params) = body.split_first().ok_or(ProtoError::EmptyBody)?;
        Ok(Request {
            tid,
            prot,
            funcode: *funcode,
            params: params.to_vec(),
        })
    }

    /// The typed command this frame carries.
    pub fn command(&self) -> Result<Command, ProtoError> {
        Command::decode(self.funcode, &self.params)
    }
}

/// One reply frame, raw: `tid | prot | len | funcode | status | payload`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub tid: u16,
    pub prot: u16,
    pub funcode: u8,
    pub status: Status,
    pub payload: Vec<u8>,
}

impl Response {
    /// The reply to `request` (same tid, prot and funcode, as the controller echoes them).
    pub fn to(request: &Request, status: Status, payload: Vec<u8>) -> Response {
        Response {
            tid: request.tid,
            prot: request.prot,
            funcode: request.funcode,
            status,
            payload,
        }
    }

    pub fn encode(&self) -> Result<Vec<u8>, ProtoError> {
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

    pub fn decode(frame: &[u8]) -> Result<Response, ProtoError> {
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

    /// The typed payload, interpreted as the reply to `funcode`'s command.
    pub fn reply(&self) -> Result<Reply, ProtoError> {
        Reply::decode(self.funcode, &self.payload)
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
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes held that do not yet form a frame.
    pub fn buffered(&self) -> usize {
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
    pub prot: u16,
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
    pub fn encode(&self) -> Vec<u8> {
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

    pub fn from_response(r: &Response) -> Result<Feedback, ProtoError> {
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
    Response(Response),
    Feedback(Feedback),
}

impl Incoming {
    pub fn decode(frame: &[u8]) -> Result<Incoming, ProtoError> {
        let r = Response::decode(frame)?;
        if r.funcode == reg::FEEDBACK {
            Feedback::from_response(&r).map(Incoming::Feedback)
        } else {
            Ok(Incoming::Response(r))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Robot state, mode, errors, warnings

/// GET_STATE values (UFACTORY `p08-system-state-11-20.md`; UFACTORY user manual §2.1.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum RobotState {
    /// Reported briefly when a motion starts; clients treat it like `Moving`.
    Starting = 0,
    Moving = 1,
    /// Standby: ready, nothing queued ("sleeping").
    Ready = 2,
    Paused = 3,
    /// Stopped: the power-on state, after SET_STATE 4 and after an error; motion commands are
    /// discarded until SET_STATE 0.
    Stopped = 4,
    /// Configuration changed ("system reset"): after enabling, a mode switch or a TCP/load change;
    /// like `Stopped` until SET_STATE 0.
    ConfigChanged = 5,
    Decelerating = 6,
}

impl RobotState {
    pub fn from_u8(v: u8) -> Option<RobotState> {
        use RobotState::*;
        Some(match v {
            0 => Starting,
            1 => Moving,
            2 => Ready,
            3 => Paused,
            4 => Stopped,
            5 => ConfigChanged,
            6 => Decelerating,
            _ => return None,
        })
    }
    /// Whether motion commands would be discarded (status bit 0x10).
    pub fn not_ready(self) -> bool {
        matches!(self, RobotState::Stopped | RobotState::ConfigChanged)
    }
}

/// SET_STATE values.
pub mod set_state {
    /// Start / resume: ready for motion.
    pub const START: u8 = 0;
    pub const PAUSE: u8 = 3;
    /// Stop now and drop every queued command.
    pub const STOP: u8 = 4;
    pub const DECELERATE_STOP: u8 = 6;
}

/// SET_MODE values (UFACTORY `p08-system-state-11-20.md`,
/// `support_articles/faq/robot-state-and-mode-explanation.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Mode {
    /// Controller-planned moves (MOVE_LINE, MOVE_JOINT, ...), queued.
    Position = 0,
    /// Streamed targets (MOVE_SERVOJ, MOVE_SERVO_CART), newest applied, no queue.
    Servo = 1,
    JointTeach = 2,
    CartesianTeach = 3,
    JointVelocity = 4,
    CartesianVelocity = 5,
    JointOnline = 6,
    CartesianOnline = 7,
}

impl Mode {
    pub fn from_u8(v: u8) -> Option<Mode> {
        use Mode::*;
        Some(match v {
            0 => Position,
            1 => Servo,
            2 => JointTeach,
            3 => CartesianTeach,
            4 => JointVelocity,
            5 => CartesianVelocity,
            6 => JointOnline,
            7 => CartesianOnline,
            _ => return None,
        })
    }
}

/// Controller error codes (GET_ERROR, report byte 89), from the SDK's `ControllerErrorCodeMap`
/// (`xarm/core/config/x_code.py`). An error stops the arm (state 4) until CLEAN_ERR and
/// SET_STATE 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ControllerError {
    /// 1: the emergency stop button on the control box is pushed in.
    EmergencyStop,
    /// 2: the control box's emergency IO is triggered.
    EmergencyIo,
    /// 3: the three-state switch's emergency stop is pressed.
    ThreeStateSwitchStop,
    /// 10: a servo motor error (no joint named); 11..=17: servo motor of joint 1..=7.
    Servo { joint: Option<u8> },
    /// 18.
    ForceTorqueSensorComm,
    /// 19: end-effector (tool RS-485) communication.
    EndEffectorComm,
    /// 21: kinematic error — no joint solution along the path.
    Kinematic,
    /// 22.
    SelfCollision,
    /// 23: a joint angle would leave its limits.
    JointLimit,
    /// 24: a speed above the limit was asked for.
    SpeedLimit,
    /// 25.
    Planning,
    /// 26.
    LinuxRt,
    /// 27.
    CommandReply,
    /// 28.
    EndModuleComm,
    /// 30.
    FeedbackSpeed,
    /// 31: abnormal current, read as a collision.
    Collision,
    /// 32.
    CircleCalculation,
    /// 33.
    ControllerGpio,
    /// 34.
    RecordingTimeout,
    /// 35.
    SafetyBoundary,
    /// 36.
    TooManyDelayCommands,
    /// 37.
    ManualModeMotion,
    /// 38.
    AbnormalJointAngle,
    /// 39.
    PowerBoardComm,
    /// 40.
    TrajectorySolve,
    /// 41.
    FrictionFile,
    /// 42.
    CalibrationFile,
    /// 50..=53: six-axis force/torque sensor read, mode, zero, overload.
    ForceTorqueSensor(u8),
    /// 60: linear (TCP) speed above the limit in servo-joint mode.
    ServoJLinearSpeed,
    /// 110.
    BaseBoardComm,
    /// 111.
    ControlBox485,
    /// Any other code.
    Other(u8),
}

impl ControllerError {
    /// `None` for 0 (no error).
    pub fn from_code(code: u8) -> Option<ControllerError> {
        use ControllerError::*;
        Some(match code {
            0 => return None,
            1 => EmergencyStop,
            2 => EmergencyIo,
            3 => ThreeStateSwitchStop,
            10 => Servo { joint: None },
            11..=17 => Servo {
                joint: Some(code - 10),
            },
            18 => ForceTorqueSensorComm,
            19 => EndEffectorComm,
            21 => Kinematic,
            22 => SelfCollision,
            23 => JointLimit,
            24 => SpeedLimit,
            25 => Planning,
            26 => LinuxRt,
            27 => CommandReply,
            28 => EndModuleComm,
            30 => FeedbackSpeed,
            31 => Collision,
            32 => CircleCalculation,
            33 => ControllerGpio,
            34 => RecordingTimeout,
            35 => SafetyBoundary,
            36 => TooManyDelayCommands,
            37 => ManualModeMotion,
            38 => AbnormalJointAngle,
            39 => PowerBoardComm,
            40 => TrajectorySolve,
            41 => FrictionFile,
            42 => CalibrationFile,
            50..=53 => ForceTorqueSensor(code),
            60 => ServoJLinearSpeed,
            110 => BaseBoardComm,
            111 => ControlBox485,
            other => Other(other),
        })
    }

    pub fn code(self) -> u8 {
        use ControllerError::*;
        match self {
            EmergencyStop => 1,
            EmergencyIo => 2,
            ThreeStateSwitchStop => 3,
            Servo { joint: None } => 10,
            Servo { joint: Some(j) } => 10u8.saturating_add(j),
            ForceTorqueSensorComm => 18,
            EndEffectorComm => 19,
            Kinematic => 21,
            SelfCollision => 22,
            JointLimit => 23,
            SpeedLimit => 24,
            Planning => 25,
            LinuxRt => 26,
            CommandReply => 27,
            EndModuleComm => 28,
            FeedbackSpeed => 30,
            Collision => 31,
            CircleCalculation => 32,
            ControllerGpio => 33,
            RecordingTimeout => 34,
            SafetyBoundary => 35,
            TooManyDelayCommands => 36,
            ManualModeMotion => 37,
            AbnormalJointAngle => 38,
            PowerBoardComm => 39,
            TrajectorySolve => 40,
            FrictionFile => 41,
            CalibrationFile => 42,
            ForceTorqueSensor(c) => c,
            ServoJLinearSpeed => 60,
            BaseBoardComm => 110,
            ControlBox485 => 111,
            Other(c) => c,
        }
    }

    /// What the code means, in the SDK's words (shortened).
    pub fn meaning(self) -> &'static str {
        use ControllerError::*;
        match self {
            EmergencyStop => "the emergency stop button on the control box is pushed in",
            EmergencyIo => "the emergency IO of the control box is triggered",
            ThreeStateSwitchStop => "the emergency stop of the three-state switch is pressed",
            Servo { joint: None } => "servo motor error",
            Servo { joint: Some(_) } => "servo motor error on one joint (joint = code - 10)",
            ForceTorqueSensorComm => "force/torque sensor communication error",
            EndEffectorComm => "end-effector communication error (tool RS-485)",
            Kinematic => "kinematic error: no joint solution for the path; re-plan it",
            SelfCollision => "self-collision: the arm is about to hit itself",
            JointLimit => "joint angle exceeds its limit",
            SpeedLimit => "speed exceeds the limit",
            Planning => "planning error: re-plan the path or reduce the speed",
            LinuxRt => "Linux real-time error",
            CommandReply => "command reply error",
            EndModuleComm => "end module communication error",
            FeedbackSpeed => "feedback speed exceeds the limit",
            Collision => "collision caused abnormal current",
            CircleCalculation => "three-point circle calculation error",
            ControllerGpio => "controller GPIO error",
            RecordingTimeout => "trajectory recording timeout",
            SafetyBoundary => "safety boundary limit reached",
            TooManyDelayCommands => "too many delayed commands",
            ManualModeMotion => "abnormal movement in manual mode",
            AbnormalJointAngle => "abnormal joint angle",
            PowerBoardComm => "communication error between the power board's master and slave ICs",
            TrajectorySolve => "solution failure of an error-free joint trajectory",
            FrictionFile => "the friction file's content is invalid",
            CalibrationFile => "the calibration file's content is invalid",
            ForceTorqueSensor(_) => {
                "six-axis force/torque sensor error (read, mode, zero or overload)"
            }
            ServoJLinearSpeed => "linear speed exceeded the limit in servo-joint mode",
            BaseBoardComm => "robot arm base board communication error",
            ControlBox485 => "control box external RS-485 device communication error",
            Other(_) => "other error",
        }
    }
}

impl fmt::Display for ControllerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "C{}: {}", self.code(), self.meaning())
    }
}

/// Controller warning codes (GET_ERROR's second byte, report byte 90), from the SDK's
/// `ControllerWarnCodeMap`. A warning refuses one command; the arm keeps going. CLEAN_WAR clears it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ControllerWarning {
    /// 11: the command cache is full.
    CacheFull,
    /// 12: a command's parameters are wrong.
    BadParameter,
    /// 13: the funcode does not exist.
    UnknownCommand,
    /// 14: the command's parameters have no solution (e.g. no IK solution).
    NoSolution,
    /// 15: the Modbus command queue is full.
    ModbusFull,
    Other(u8),
}

impl ControllerWarning {
    pub fn from_code(code: u8) -> Option<ControllerWarning> {
        use ControllerWarning::*;
        Some(match code {
            0 => return None,
            11 => CacheFull,
            12 => BadParameter,
            13 => UnknownCommand,
            14 => NoSolution,
            15 => ModbusFull,
            other => Other(other),
        })
    }

    pub fn code(self) -> u8 {
        use ControllerWarning::*;
        match self {
            CacheFull => 11,
            BadParameter => 12,
            UnknownCommand => 13,
            NoSolution => 14,
            ModbusFull => 15,
            Other(c) => c,
        }
    }

    pub fn meaning(self) -> &'static str {
        use ControllerWarning::*;
        match self {
            CacheFull => "the controller's command cache is full",
            BadParameter => "a command parameter is wrong",
            UnknownCommand => "the command code does not exist",
            NoSolution => "the command's parameters have no solution",
            ModbusFull => "the Modbus command queue is full",
            Other(_) => "other warning",
        }
    }
}

impl fmt::Display for ControllerWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "W{}: {}", self.code(), self.meaning())
    }
}

// ---------------------------------------------------------------------------------------------
// Commands (typed requests)

/// Reference frame of a Cartesian command's pose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Coord {
    /// Absolute, in the robot base frame.
    Base,
    /// Relative to the current tool (TCP) frame.
    Tool,
}

impl Coord {
    fn byte(self) -> u8 {
        match self {
            Coord::Base => 0,
            Coord::Tool => 1,
        }
    }
    fn from_byte(b: u8) -> Result<Coord, ProtoError> {
        match b {
            0 => Ok(Coord::Base),
            1 => Ok(Coord::Tool),
            v => Err(ProtoError::Invalid {
                field: "coord",
                value: v as u64,
            }),
        }
    }
}

/// The firmware >= 1.11.100 form of MOVE_LINE (`move_line_common`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LineCommon {
    /// Blend radius (mm); negative = stop at the target.
    pub radius: f32,
    pub coord: Coord,
    /// Orientation given as an axis-angle vector instead of roll/pitch/yaw.
    pub axis_angle: bool,
}

/// MOVE_LINE (21): a straight TCP line to `pose` (x, y, z mm; roll, pitch, yaw rad, or an
/// axis-angle vector).
#[derive(Debug, Clone, PartialEq)]
pub struct MoveLine {
    pub pose: [f32; 6],
    /// mm/s.
    pub speed: f32,
    /// mm/s².
    pub acc: f32,
    /// Reserved by the controller (0).
    pub mvtime: f32,
    /// `None`: the 9-float form of firmware < 1.11.100.
    pub common: Option<LineCommon>,
    /// Only check the move (1..): the controller answers whether it could run, and does not run it.
    /// Always present in the common form; optional trailing byte in the old form.
    pub only_check: Option<u8>,
    /// Optional trailing motion-type byte.
    pub motion_type: Option<u8>,
}

impl MoveLine {
    /// The SDK's `set_position` on current firmware: common form, base frame, roll/pitch/yaw, no
    /// blending (golden frame in docs/references.md §2).
    pub fn to(pose: [f32; 6], speed: f32, acc: f32) -> MoveLine {
        MoveLine {
            pose,
            speed,
            acc,
            mvtime: 0.0,
            common: Some(LineCommon {
                radius: -1.0,
                coord: Coord::Base,
                axis_angle: false,
            }),
            only_check: Some(0),
            motion_type: None,
        }
    }
}

/// MOVE_JOINT (23): joint-space move, all joints arriving together.
#[derive(Debug, Clone, PartialEq)]
pub struct MoveJoint {
    /// rad; unused joints 0.
    pub joints: [f32; 7],
    /// rad/s.
    pub speed: f32,
    /// rad/s².
    pub acc: f32,
    pub mvtime: f32,
    pub only_check: Option<u8>,
}

/// MOVE_HOME (25): joint move to all-zero joints.
#[derive(Debug, Clone, PartialEq)]
pub struct MoveHome {
    pub speed: f32,
    pub acc: f32,
    pub mvtime: f32,
    pub only_check: Option<u8>,
}

/// MOVE_RELATIVE (83): a move by an offset from the last target.
#[derive(Debug, Clone, PartialEq)]
pub struct MoveRelative {
    /// Cartesian: x, y, z (mm), roll, pitch, yaw (rad), unused; joint: 7 angle offsets (rad).
    pub offset: [f32; 7],
    pub speed: f32,
    pub acc: f32,
    pub mvtime: f32,
    pub radius: f32,
    /// Joint-space offset instead of a Cartesian one.
    pub joint: bool,
    pub axis_angle: bool,
    pub only_check: Option<u8>,
    pub motion_type: Option<u8>,
}

impl MoveRelative {
    /// The SDK's `set_position(..., relative=True)`: a Cartesian offset (x, y, z mm; roll, pitch,
    /// yaw rad) in the base frame, no blending.
    pub fn linear(offset: [f32; 6], speed: f32, acc: f32) -> MoveRelative {
        let mut o = [0f32; 7];
        o[..6].copy_from_slice(&offset);
        MoveRelative {
            offset: o,
            speed,
            acc,
            mvtime: 0.0,
            radius: -1.0,
            joint: false,
            axis_angle: false,
            only_check: None,
            motion_type: None,
        }
    }
}

/// MOVE_SERVOJ (29): servo-mode joint target, applied at once.
#[derive(Debug, Clone, PartialEq)]
pub struct ServoJoint {
    pub joints: [f32; 7],
    /// Reserved by the controller: it moves at its own maximum.
    pub speed: f32,
    pub acc: f32,
    pub mvtime: f32,
}

/// MOVE_SERVO_CART (30): servo-mode TCP target, applied at once.
#[derive(Debug, Clone, PartialEq)]
pub struct ServoCartesian {
    pub pose: [f32; 6],
    pub speed: f32,
    pub acc: f32,
    /// The third float carries the frame: 0 = base (absolute pose), 1 = tool (offset in the tool
    /// frame).
    pub coord: Coord,
}

/// A typed command: what a `Request`'s funcode and parameters mean. Encoding and decoding are
/// exact inverses for every value the decoder returns.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    GetVersion,
    GetRobotSn,
    /// `axis` 1..=7, or 8 = all joints.
    MotionEnable {
        axis: u8,
        enable: bool,
    },
    /// One of `set_state`.
    SetState(u8),
    GetState,
    GetCmdnum,
    GetError,
    CleanError,
    CleanWarn,
    /// `mode` as `Mode`; `detection` is sent by firmware >= 1.10.0 (the SDK sends 0).
    SetMode {
        mode: u8,
        detection: Option<u8>,
    },
    MoveLine(MoveLine),
    MoveJoint(MoveJoint),
    MoveHome(MoveHome),
    MoveRelative(MoveRelative),
    ServoJoint(ServoJoint),
    ServoCartesian(ServoCartesian),
    /// x, y, z (mm), roll, pitch, yaw (rad) of the TCP in the flange frame.
    SetTcpOffset([f32; 6]),
    /// Payload mass (kg) and centre of mass in the flange frame (mm).
    SetLoad {
        mass: f32,
        com: [f32; 3],
    },
    GetTcpPose,
    GetJointPos,
    /// Modbus-RTU PDU (no CRC) through RS-485 host `host` (9 = tool).
    Rs485 {
        host: u8,
        pdu: Vec<u8>,
    },
    /// Read one 16-bit tool-board register (e.g. `tool_reg::BAUD_INDEX`).
    TgpioRead16 {
        host: u8,
        addr: u16,
    },
    /// Write one tool-board register; the SDK sends the value as an f32 (LE), then optional bytes.
    TgpioWrite16 {
        host: u8,
        addr: u16,
        value: f32,
        extra: Vec<u8>,
    },
    /// Bitmask of `feedback_kind` for the commands that follow.
    SetFeedbackType(u8),
}

impl Command {
    pub fn funcode(&self) -> u8 {
        use Command::*;
        match self {
            GetVersion => reg::GET_VERSION,
            GetRobotSn => reg::GET_ROBOT_SN,
            MotionEnable { .. } => reg::MOTION_EN,
            SetState(_) => reg::SET_STATE,
            GetState => reg::GET_STATE,
            GetCmdnum => reg::GET_CMDNUM,
            GetError => reg::GET_ERROR,
            CleanError => reg::CLEAN_ERR,
            CleanWarn => reg::CLEAN_WAR,
            SetMode { .. } => reg::SET_MODE,
            MoveLine(_) => reg::MOVE_LINE,
            MoveJoint(_) => reg::MOVE_JOINT,
            MoveHome(_) => reg::MOVE_HOME,
            MoveRelative(_) => reg::MOVE_RELATIVE,
            ServoJoint(_) => reg::MOVE_SERVOJ,
            ServoCartesian(_) => reg::MOVE_SERVO_CART,
            SetTcpOffset(_) => reg::SET_TCP_OFFSET,
            SetLoad { .. } => reg::SET_LOAD_PARAM,
            GetTcpPose => reg::GET_TCP_POSE,
            GetJointPos => reg::GET_JOINT_POS,
            Rs485 { .. } => reg::RS485_RTU,
            TgpioRead16 { .. } => reg::TGPIO_R16B,
            TgpioWrite16 { .. } => reg::TGPIO_W16B,
            SetFeedbackType(_) => reg::SET_FEEDBACK_TYPE,
        }
    }

    /// Whether this command queues or starts a motion (refused while not ready: status bit 0x10,
    /// UFACTORY `p05communication-format.md`).
    pub fn is_motion(&self) -> bool {
        matches!(
            self,
            Command::MoveLine(_)
                | Command::MoveJoint(_)
                | Command::MoveHome(_)
                | Command::MoveRelative(_)
                | Command::ServoJoint(_)
                | Command::ServoCartesian(_)
        )
    }

    pub fn encode_params(&self) -> Vec<u8> {
        use Command::*;
        let mut p = Vec::new();
        match self {
            GetVersion | GetRobotSn | GetState | GetCmdnum | GetError | CleanError | CleanWarn
            | GetTcpPose | GetJointPos => {}
            MotionEnable { axis, enable } => p.extend_from_slice(&[*axis, *enable as u8]),
            SetState(s) => p.push(*s),
            SetMode { mode, detection } => {
                p.push(*mode);
                p.extend(detection);
            }
            SetFeedbackType(t) => p.push(*t),
            MoveLine(m) => {
                put_f32s(&mut p, &m.pose);
                put_f32s(&mut p, &[m.speed, m.acc, m.mvtime]);
                match &m.common {
                    Some(c) => {
                        put_f32s(&mut p, &[c.radius]);
                        p.extend_from_slice(&[
                            c.coord.byte(),
                            c.axis_angle as u8,
                            m.only_check.unwrap_or(0),
                        ]);
                        p.extend(m.motion_type);
                    }
                    None => {
                        // Old form: a motion type can only follow an only-check byte.
                        if m.only_check.is_some() || m.motion_type.is_some() {
                            p.push(m.only_check.unwrap_or(0));
                        }
                        p.extend(m.motion_type);
                    }
                }
            }
            MoveJoint(m) => {
                put_f32s(&mut p, &m.joints);
                put_f32s(&mut p, &[m.speed, m.acc, m.mvtime]);
                p.extend(m.only_check);
            }
            MoveHome(m) => {
                put_f32s(&mut p, &[m.speed, m.acc, m.mvtime]);
                p.extend(m.only_check);
            }
            MoveRelative(m) => {
                put_f32s(&mut p, &m.offset);
                put_f32s(&mut p, &[m.speed, m.acc, m.mvtime, m.radius]);
                p.extend_from_slice(&[m.joint as u8, m.axis_angle as u8]);
                if m.only_check.is_some() || m.motion_type.is_some() {
                    p.push(m.only_check.unwrap_or(0));
                }
                p.extend(m.motion_type);
            }
            ServoJoint(s) => {
                put_f32s(&mut p, &s.joints);
                put_f32s(&mut p, &[s.speed, s.acc, s.mvtime]);
            }
            ServoCartesian(s) => {
                put_f32s(&mut p, &s.pose);
                let coord = match s.coord {
                    Coord::Base => 0.0,
                    Coord::Tool => 1.0,
                };
                put_f32s(&mut p, &[s.speed, s.acc, coord]);
            }
            SetTcpOffset(o) => put_f32s(&mut p, o),
            SetLoad { mass, com } => {
                put_f32s(&mut p, &[*mass]);
                put_f32s(&mut p, com);
            }
            Rs485 { host, pdu } => {
                p.push(*host);
                p.extend_from_slice(pdu);
            }
            TgpioRead16 { host, addr } => {
                p.push(*host);
                p.extend_from_slice(&addr.to_be_bytes());
            }
            TgpioWrite16 {
                host,
                addr,
                value,
                extra,
            } => {
                p.push(*host);
                p.extend_from_slice(&addr.to_be_bytes());
                put_f32s(&mut p, &[*value]);
                p.extend_from_slice(extra);
            }
        }
        p
    }

    /// The request frame for this command.
    pub fn request(&self, tid: u16, prot: u16) -> Request {
        Request {
            tid,
            prot,
            funcode: self.funcode(),
            params: self.encode_params(),
        }
    }

    pub fn decode(funcode: u8, params: &[u8]) -> Result<Command, ProtoError> {
        use Command::*;
        let n = params.len();
        let mut c = Cursor::new(params, "command parameters");
        let none = |cmd: Command| -> Result<Command, ProtoError> {
            expect_len("parameters", n, &[0], "0")?;
            Ok(cmd)
        };
        let cmd = match funcode {
            reg::GET_VERSION => return none(GetVersion),
            reg::GET_ROBOT_SN => return none(GetRobotSn),
            reg::GET_STATE => return none(GetState),
            reg::GET_CMDNUM => return none(GetCmdnum),
            reg::GET_ERROR => return none(GetError),
            reg::CLEAN_ERR => return none(CleanError),
            reg::CLEAN_WAR => return none(CleanWarn),
            reg::GET_TCP_POSE => return none(GetTcpPose),
            reg::GET_JOINT_POS => return none(GetJointPos),
            reg::MOTION_EN => {
                expect_len("MOTION_EN parameters", n, &[2], "2")?;
                let axis = c.u8()?;
                let enable = match c.u8()? {
                    0 => false,
                    1 => true,
                    v => {
                        return Err(ProtoError::Invalid {
                            field: "enable",
                            value: v as u64,
                        })
                    }
                };
                MotionEnable { axis, enable }
            }
            reg::SET_STATE => {
                expect_len("SET_STATE parameters", n, &[1], "1")?;
                SetState(c.u8()?)
            }
            reg::SET_MODE => {
                expect_len("SET_MODE parameters", n, &[1, 2], "1 or 2")?;
                let mode = c.u8()?;
                let detection = if n == 2 { Some(c.u8()?) } else { None };
                SetMode { mode, detection }
            }
            reg::SET_FEEDBACK_TYPE => {
                expect_len("SET_FEEDBACK_TYPE parameters", n, &[1], "1")?;
                SetFeedbackType(c.u8()?)
            }
            reg::MOVE_LINE => {
                expect_len(
                    "MOVE_LINE parameters",
                    n,
                    &[36, 37, 38, 43, 44],
                    "36..=38 (old form) or 43..=44 (common form)",
                )?;
                let pose = c.f32s::<6>()?;
                let [speed, acc, mvtime] = c.f32s::<3>()?;
                if n >= 43 {
                    let radius = c.f32le()?;
                    let coord = Coord::from_byte(c.u8()?)?;
                    let axis_angle = bool_byte(c.u8()?, "is_axis_angle")?;
                    let only_check = Some(c.u8()?);
                    let motion_type = if n == 44 { Some(c.u8()?) } else { None };
                    MoveLine(self::MoveLine {
                        pose,
                        speed,
                        acc,
                        mvtime,
                        common: Some(LineCommon {
                            radius,
                            coord,
                            axis_angle,
                        }),
                        only_check,
                        motion_type,
                    })
                } else {
                    let only_check = if n >= 37 { Some(c.u8()?) } else { None };
                    let motion_type = if n == 38 { Some(c.u8()?) } else { None };
                    MoveLine(self::MoveLine {
                        pose,
                        speed,
                        acc,
                        mvtime,
                        common: None,
                        only_check,
                        motion_type,
                    })
                }
            }
            reg::MOVE_JOINT => {
                expect_len("MOVE_JOINT parameters", n, &[40, 41], "40 or 41")?;
                let joints = c.f32s::<7>()?;
                let [speed, acc, mvtime] = c.f32s::<3>()?;
                let only_check = if n == 41 { Some(c.u8()?) } else { None };
                MoveJoint(self::MoveJoint {
                    joints,
                    speed,
                    acc,
                    mvtime,
                    only_check,
                })
            }
            reg::MOVE_HOME => {
                expect_len("MOVE_HOME parameters", n, &[12, 13], "12 or 13")?;
                let [speed, acc, mvtime] = c.f32s::<3>()?;
                let only_check = if n == 13 { Some(c.u8()?) } else { None };
                MoveHome(self::MoveHome {
                    speed,
                    acc,
                    mvtime,
                    only_check,
                })
            }
            reg::MOVE_RELATIVE => {
                expect_len("MOVE_RELATIVE parameters", n, &[46, 47, 48], "46..=48")?;
                let offset = c.f32s::<7>()?;
                let [speed, acc, mvtime, radius] = c.f32s::<4>()?;
                let joint = bool_byte(c.u8()?, "is_joint_motion")?;
                let axis_angle = bool_byte(c.u8()?, "is_axis_angle")?;
                let only_check = if n >= 47 { Some(c.u8()?) } else { None };
                let motion_type = if n == 48 { Some(c.u8()?) } else { None };
                MoveRelative(self::MoveRelative {
                    offset,
                    speed,
                    acc,
                    mvtime,
                    radius,
                    joint,
                    axis_angle,
                    only_check,
                    motion_type,
                })
            }
            reg::MOVE_SERVOJ => {
                expect_len("MOVE_SERVOJ parameters", n, &[40], "40")?;
                let joints = c.f32s::<7>()?;
                let [speed, acc, mvtime] = c.f32s::<3>()?;
                ServoJoint(self::ServoJoint {
                    joints,
                    speed,
                    acc,
                    mvtime,
                })
            }
            reg::MOVE_SERVO_CART => {
                expect_len("MOVE_SERVO_CART parameters", n, &[36], "36")?;
                let pose = c.f32s::<6>()?;
                let [speed, acc, coord] = c.f32s::<3>()?;
                let coord = if coord == 0.0 {
                    Coord::Base
                } else if coord == 1.0 {
                    Coord::Tool
                } else {
                    return Err(ProtoError::Invalid {
                        field: "servo coord",
                        value: coord.to_bits() as u64,
                    });
                };
                ServoCartesian(self::ServoCartesian {
                    pose,
                    speed,
                    acc,
                    coord,
                })
            }
            reg::SET_TCP_OFFSET => {
                expect_len("SET_TCP_OFFSET parameters", n, &[24], "24")?;
                SetTcpOffset(c.f32s::<6>()?)
            }
            reg::SET_LOAD_PARAM => {
                expect_len("SET_LOAD_PARAM parameters", n, &[16], "16")?;
                let mass = c.f32le()?;
                let com = c.f32s::<3>()?;
                SetLoad { mass, com }
            }
            reg::RS485_RTU => {
                if n < 3 {
                    return Err(ProtoError::Short {
                        what: "RS485_RTU parameters (host, slave, function)",
                        got: n,
                        need: 3,
                    });
                }
                let host = c.u8()?;
                Rs485 {
                    host,
                    pdu: c.rest().to_vec(),
                }
            }
            reg::TGPIO_R16B => {
                expect_len("TGPIO_R16B parameters", n, &[3], "3")?;
                TgpioRead16 {
                    host: c.u8()?,
                    addr: c.u16be()?,
                }
            }
            reg::TGPIO_W16B => {
                if n < 7 {
                    return Err(ProtoError::Short {
                        what: "TGPIO_W16B parameters",
                        got: n,
                        need: 7,
                    });
                }
                TgpioWrite16 {
                    host: c.u8()?,
                    addr: c.u16be()?,
                    value: c.f32le()?,
                    extra: c.rest().to_vec(),
                }
            }
            other => return Err(ProtoError::UnknownFuncode(other)),
        };
        Ok(cmd)
    }
}

fn bool_byte(b: u8, field: &'static str) -> Result<bool, ProtoError> {
    match b {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(ProtoError::Invalid {
            field,
            value: v as u64,
        }),
    }
}

// ---------------------------------------------------------------------------------------------
// Replies (typed payloads)

/// Length of the GET_VERSION and GET_ROBOT_SN payloads.
pub const TEXT_REPLY_LEN: usize = 40;

/// A typed reply payload (what follows the status byte).
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// Set commands, servo commands.
    Empty,
    /// GET_VERSION: e.g. `"6,6,XI1304,AC1303,v2.3.0"` (see `parse_version`).
    Version(String),
    /// GET_ROBOT_SN: robot serial, NUL, control-box serial.
    RobotSn { robot: String, control_box: String },
    /// GET_STATE raw value (see `RobotState::from_u8`).
    State(u8),
    /// GET_CMDNUM: commands queued.
    Cmdnum(u16),
    /// GET_ERROR: error and warning codes (see `ControllerError`, `ControllerWarning`).
    ErrorWarn { error: u8, warn: u8 },
    /// Planned moves: the task id feedback frames refer to; with only-check, the check result
    /// (0 = the move could run, else the error it would raise).
    MoveAck { task: u16, check: Option<u8> },
    /// GET_TCP_POSE: x, y, z (mm), roll, pitch, yaw (rad).
    Pose([f32; 6]),
    /// GET_JOINT_POS (rad).
    Joints([f32; 7]),
    /// RS485_RTU: host id, then the device's Modbus-RTU reply PDU (no CRC).
    Rs485 { host: u8, pdu: Vec<u8> },
    /// TGPIO_R16B: the register as a 4-byte big-endian integer.
    Register(i32),
}

impl Reply {
    pub fn encode_payload(&self) -> Vec<u8> {
        let mut p = Vec::new();
        match self {
            Reply::Empty => {}
            Reply::Version(v) => put_fixed_text(&mut p, v, TEXT_REPLY_LEN),
            Reply::RobotSn { robot, control_box } => {
                let text = format!("{robot}\0{control_box}");
                put_fixed_text(&mut p, &text, TEXT_REPLY_LEN);
            }
            Reply::State(s) => p.push(*s),
            Reply::Cmdnum(n) => p.extend_from_slice(&n.to_be_bytes()),
            Reply::ErrorWarn { error, warn } => p.extend_from_slice(&[*error, *warn]),
            Reply::MoveAck { task, check } => {
                p.extend_from_slice(&task.to_be_bytes());
                p.extend(check);
            }
            Reply::Pose(v) => put_f32s(&mut p, v),
            Reply::Joints(v) => put_f32s(&mut p, v),
            Reply::Rs485 { host, pdu } => {
                p.push(*host);
                p.extend_from_slice(pdu);
            }
            Reply::Register(v) => p.extend_from_slice(&v.to_be_bytes()),
        }
        p
    }

    /// Interprets `payload` as the reply to a command with `funcode`.
    pub fn decode(funcode: u8, payload: &[u8]) -> Result<Reply, ProtoError> {
        let n = payload.len();
        let mut c = Cursor::new(payload, "reply payload");
        let r = match funcode {
            reg::GET_VERSION => {
                expect_len("GET_VERSION reply", n, &[TEXT_REPLY_LEN], "40")?;
                Reply::Version(fixed_text(payload))
            }
            reg::GET_ROBOT_SN => {
                expect_len("GET_ROBOT_SN reply", n, &[TEXT_REPLY_LEN], "40")?;
                let robot = fixed_text(payload);
                let rest = payload.get(robot.len() + 1..).unwrap_or(&[]);
                Reply::RobotSn {
                    control_box: fixed_text(rest),
                    robot,
                }
            }
            reg::GET_STATE => {
                expect_len("GET_STATE reply", n, &[1], "1")?;
                Reply::State(c.u8()?)
            }
            reg::GET_CMDNUM => {
                expect_len("GET_CMDNUM reply", n, &[2], "2")?;
                Reply::Cmdnum(c.u16be()?)
            }
            reg::GET_ERROR => {
                expect_len("GET_ERROR reply", n, &[2], "2")?;
                Reply::ErrorWarn {
                    error: c.u8()?,
                    warn: c.u8()?,
                }
            }
            reg::MOVE_LINE | reg::MOVE_JOINT | reg::MOVE_HOME | reg::MOVE_RELATIVE => {
                expect_len("move reply", n, &[2, 3], "2 or 3")?;
                let task = c.u16be()?;
                let check = if n == 3 { Some(c.u8()?) } else { None };
                Reply::MoveAck { task, check }
            }
            reg::GET_TCP_POSE => {
                expect_len("GET_TCP_POSE reply", n, &[24], "24")?;
                Reply::Pose(c.f32s::<6>()?)
            }
            reg::GET_JOINT_POS => {
                expect_len("GET_JOINT_POS reply", n, &[28], "28")?;
                Reply::Joints(c.f32s::<7>()?)
            }
            reg::RS485_RTU => {
                let host = c.u8()?;
                Reply::Rs485 {
                    host,
                    pdu: c.rest().to_vec(),
                }
            }
            reg::TGPIO_R16B => {
                expect_len("TGPIO_R16B reply", n, &[4], "4")?;
                Reply::Register(c.i32be()?)
            }
            reg::MOTION_EN
            | reg::SET_STATE
            | reg::CLEAN_ERR
            | reg::CLEAN_WAR
            | reg::SET_MODE
            | reg::MOVE_SERVOJ
            | reg::MOVE_SERVO_CART
            | reg::SET_TCP_OFFSET
            | reg::SET_LOAD_PARAM
            | reg::TGPIO_W16B
            | reg::SET_FEEDBACK_TYPE => {
                expect_len("set-command reply", n, &[0], "0")?;
                Reply::Empty
            }
            other => return Err(ProtoError::UnknownFuncode(other)),
        };
        Ok(r)
    }
}

/// The fields of a GET_VERSION string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirmwareVersion {
    pub axis: u32,
    pub robot_type: u32,
    pub robot_sn: String,
    pub control_box_sn: String,
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

/// Parses `"axis,type,robot-sn,box-sn,vMAJOR.MINOR.PATCH"`, the shape the SDK's regex accepts
/// (`xarm/x3/base.py`): four comma-separated fields, then a version whose last three numbers count.
pub fn parse_version(text: &str) -> Result<FirmwareVersion, ProtoError> {
    let bad = || ProtoError::Invalid {
        field: "version string",
        value: text.len() as u64,
    };
    let mut parts = text.splitn(5, ',');
    let mut next = || parts.next().ok_or_else(bad);
    let axis = next()?.trim().parse::<u32>().map_err(|_| bad())?;
    let robot_type = next()?.trim().parse::<u32>().map_err(|_| bad())?;
    let robot_sn = next()?.to_string();
    let control_box_sn = next()?.to_string();
    let version = next()?;
    let digits = version.trim_start_matches(|c: char| !c.is_ascii_digit());
    let nums: Vec<u32> = digits
        .split('.')
        .take(3)
        .map(|s| {
            let d: String = s.chars().take_while(|c| c.is_ascii_digit()).collect();
            d.parse::<u32>().map_err(|_| bad())
        })
        .collect::<Result<_, _>>()?;
    let [major, minor, patch] = nums[..] else {
        return Err(bad());
    };
    Ok(FirmwareVersion {
        axis,
        robot_type,
        robot_sn,
        control_box_sn,
        major,
        minor,
        patch,
    })
}

// ---------------------------------------------------------------------------------------------
// Units: the wire's poses (mm, roll/pitch/yaw rad) and pointact's (m, rotations)

/// A wire pose (x, y, z mm; roll, pitch, yaw rad, applied about fixed x, then y, then z: the
/// controller's and nalgebra's convention) as `base_from_tcp` in metres.
pub fn pose_from_wire(p: &[f32; 6]) -> Isometry3<f64> {
    let t = Translation3::new(
        p[0] as f64 / 1000.0,
        p[1] as f64 / 1000.0,
        p[2] as f64 / 1000.0,
    );
    let r = UnitQuaternion::from_euler_angles(p[3] as f64, p[4] as f64, p[5] as f64);
    Isometry3::from_parts(t, r)
}

/// Like `pose_from_wire`, with the orientation as an axis-angle vector (rad).
pub fn pose_from_wire_axis_angle(p: &[f32; 6]) -> Isometry3<f64> {
    let t = Translation3::new(
        p[0] as f64 / 1000.0,
        p[1] as f64 / 1000.0,
        p[2] as f64 / 1000.0,
    );
    let r = UnitQuaternion::from_scaled_axis(Vector3::new(p[3] as f64, p[4] as f64, p[5] as f64));
    Isometry3::from_parts(t, r)
}

/// Joint angles (rad) in the wire's 7-slot layout (MOVE_JOINT, SERVOJ, GET_JOINT_POS): a 6-axis arm
/// leaves the seventh slot 0, as the SDK does.
pub fn joints_to_wire(q: &[f64]) -> [f32; 7] {
    let mut out = [0f32; 7];
    for (o, v) in out.iter_mut().zip(q) {
        *o = *v as f32;
    }
    out
}

/// `base_from_tcp` (m) as a wire pose (mm, roll/pitch/yaw rad).
pub fn pose_to_wire(pose: &Isometry3<f64>) -> [f32; 6] {
    let t = pose.translation.vector * 1000.0;
    let (r, p, y) = pose.rotation.euler_angles();
    [
        t.x as f32, t.y as f32, t.z as f32, r as f32, p as f32, y as f32,
    ]
}

// ---------------------------------------------------------------------------------------------
// Modbus RTU through the RS-485 tunnel

/// Modbus function codes the xArm Gripper uses.
pub mod modbus_fn {
    pub const READ_HOLDING: u8 = 0x03;
    pub const WRITE_MULTIPLE: u8 = 0x10;
    /// Set on the function code of an exception reply.
    pub const EXCEPTION: u8 = 0x80;
}

/// Modbus exception codes.
pub mod modbus_exception {
    pub const ILLEGAL_FUNCTION: u8 = 0x01;
    pub const ILLEGAL_ADDRESS: u8 = 0x02;
    pub const ILLEGAL_VALUE: u8 = 0x03;
    /// The gateway's target device did not answer (no device with that id, or a baud mismatch).
    pub const TARGET_NO_RESPONSE: u8 = 0x0B;
}

/// A Modbus-RTU request PDU as tunnelled by register 124 (slave id first, no CRC).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RtuRequest {
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
    pub fn slave(&self) -> u8 {
        match self {
            RtuRequest::ReadHolding { slave, .. } | RtuRequest::WriteMultiple { slave, .. } => {
                *slave
            }
        }
    }

    pub fn encode(&self) -> Vec<u8> {
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
    pub fn decode(pdu: &[u8]) -> Result<Result<RtuRequest, (u8, u8)>, ProtoError> {
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
pub enum RtuReply {
    ReadHolding { slave: u8, values: Vec<u16> },
    WriteMultiple { slave: u8, addr: u16, count: u16 },
    Exception { slave: u8, function: u8, code: u8 },
}

impl RtuReply {
    pub fn encode(&self) -> Vec<u8> {
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

    pub fn decode(pdu: &[u8]) -> Result<RtuReply, ProtoError> {
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
pub fn i32_to_registers(v: i32) -> [u16; 2] {
    let b = v.to_be_bytes();
    [
        u16::from_be_bytes([b[0], b[1]]),
        u16::from_be_bytes([b[2], b[3]]),
    ]
}

/// Joins two registers (high first) into an i32.
pub fn registers_to_i32(r: [u16; 2]) -> i32 {
    let h = r[0].to_be_bytes();
    let l = r[1].to_be_bytes();
    i32::from_be_bytes([h[0], h[1], l[0], l[1]])
}

// ---------------------------------------------------------------------------------------------
// Report frames

/// Length of the 30001 "normal" report, and of the common head of the 30002 "rich" one.
pub const NORMAL_REPORT_LEN: usize = 145;
/// The shortest 30002 frame the SDK accepts (it reads bytes 145..245 unconditionally).
pub const RICH_REPORT_MIN_LEN: usize = 245;
/// The full 30002 frame of current firmware (the SDK's `_Report30002DataStructure`).
pub const RICH_REPORT_LEN: usize = 587;
/// Old firmware sends 245 bytes with 233 in the length field; the SDK accepts that pair.
const RICH_REPORT_OLD_DECLARED: usize = 233;
/// The 30000 real-time frame.
pub const RT_REPORT_LEN: usize = 804;
/// Longest report frame a `ReportReader` accepts: bounds memory when the stream is garbage.
pub const MAX_REPORT_LEN: usize = 4096;

/// The fields every state report starts with (30001 and the head of 30002), the SDK's
/// `_Report30001DataStructure` (`xarm/x3/report.py`).
#[derive(Debug, Clone, PartialEq)]
pub struct ArmStatus {
    /// `RobotState` value (the low nibble of byte 4).
    pub state: u8,
    /// `Mode` value (the high nibble).
    pub mode: u8,
    pub cmdnum: u16,
    /// rad.
    pub joints: [f32; 7],
    /// x, y, z (mm), roll, pitch, yaw (rad).
    pub tcp_pose: [f32; 6],
    pub joint_torques: [f32; 7],
    /// One bit per axis: 1 = brake released.
    pub brake_bits: u8,
    /// One bit per axis: 1 = motor enabled.
    pub enable_bits: u8,
    pub error: u8,
    pub warn: u8,
    pub tcp_offset: [f32; 6],
    /// Mass (kg), centre of mass x, y, z (mm).
    pub tcp_load: [f32; 4],
    /// 0..=5.
    pub collision_sensitivity: u8,
    /// 0..=5.
    pub teach_sensitivity: u8,
    pub gravity: [f32; 3],
}

/// Jerk, minimum/maximum acceleration and minimum/maximum speed, as the rich report lists them.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct MotionBounds {
    pub jerk: f32,
    pub min_acc: f32,
    pub max_acc: f32,
    pub min_speed: f32,
    pub max_speed: f32,
}

/// Optional fields after byte 245 of a rich frame (decoded when the frame reaches byte 312).
#[derive(Debug, Clone, PartialEq)]
pub struct RichTail {
    /// Joint temperatures (°C).
    pub temperatures: [i8; 7],
    /// Target TCP speed (mm/s).
    pub target_tcp_speed: f32,
    /// Target joint speeds (rad/s).
    pub target_joint_speeds: [f32; 7],
    pub counter: u32,
    /// World offset x, y, z (mm), roll, pitch, yaw (rad).
    pub world_offset: [f32; 6],
}

/// Byte where the decoded part of the tail ends.
const RICH_TAIL_END: usize = 312;

/// The 30002 "rich" report (5 Hz), the SDK's `_Report30002DataStructure`. Fields after byte 312
/// (I/O, F/T sensor, reduced mode, ...) are not decoded and encode as zeros.
#[derive(Debug, Clone, PartialEq)]
pub struct RichReport {
    pub status: ArmStatus,
    pub robot_type: u8,
    pub axis: u8,
    pub master_id: u8,
    pub slave_id: u8,
    pub motor_tid: u8,
    pub motor_fid: u8,
    /// Firmware version text (at most 30 bytes).
    pub version: String,
    pub tcp_bounds: MotionBounds,
    pub joint_bounds: MotionBounds,
    pub rot_jerk: f32,
    pub max_rot_acc: f32,
    /// Per joint: servo status, servo error code.
    pub servo_codes: [[u8; 2]; 7],
    pub tgpio_codes: [u8; 2],
    /// `Some` encodes a full 587-byte frame; `None` the minimal 245-byte one.
    pub tail: Option<RichTail>,
}

fn check_status_fields(s: &ArmStatus) -> Result<(), ProtoError> {
    // The SDK closes the report socket on these (`xarm/x3/base.py`, `__handle_report_normal`).
    for (field, value, max) in [
        ("report state", s.state, 9),
        ("report mode", s.mode, 11),
        ("collision sensitivity", s.collision_sensitivity, 5),
        ("teach sensitivity", s.teach_sensitivity, 5),
    ] {
        if value > max {
            return Err(ProtoError::Invalid {
                field,
                value: value as u64,
            });
        }
    }
    Ok(())
}

fn put_status(out: &mut Vec<u8>, s: &ArmStatus) {
    out.push((s.state & 0x0F) | (s.mode << 4));
    out.extend_from_slice(&s.cmdnum.to_be_bytes());
    put_f32s(out, &s.joints);
    put_f32s(out, &s.tcp_pose);
    put_f32s(out, &s.joint_torques);
    out.extend_from_slice(&[s.brake_bits, s.enable_bits, s.error, s.warn]);
    put_f32s(out, &s.tcp_offset);
    put_f32s(out, &s.tcp_load);
    out.extend_from_slice(&[s.collision_sensitivity, s.teach_sensitivity]);
    put_f32s(out, &s.gravity);
}

fn read_status(c: &mut Cursor) -> Result<ArmStatus, ProtoError> {
    let sm = c.u8()?;
    Ok(ArmStatus {
        state: sm & 0x0F,
        mode: sm >> 4,
        cmdnum: c.u16be()?,
        joints: c.f32s()?,
        tcp_pose: c.f32s()?,
        joint_torques: c.f32s()?,
        brake_bits: c.u8()?,
        enable_bits: c.u8()?,
        error: c.u8()?,
        warn: c.u8()?,
        tcp_offset: c.f32s()?,
        tcp_load: c.f32s()?,
        collision_sensitivity: c.u8()?,
        teach_sensitivity: c.u8()?,
        gravity: c.f32s()?,
    })
}

fn put_bounds(out: &mut Vec<u8>, b: &MotionBounds) {
    put_f32s(
        out,
        &[b.jerk, b.min_acc, b.max_acc, b.min_speed, b.max_speed],
    );
}

fn read_bounds(c: &mut Cursor) -> Result<MotionBounds, ProtoError> {
    let [jerk, min_acc, max_acc, min_speed, max_speed] = c.f32s::<5>()?;
    Ok(MotionBounds {
        jerk,
        min_acc,
        max_acc,
        min_speed,
        max_speed,
    })
}

/// The report length a frame declares in its first 4 bytes, checked against the bytes present.
fn report_length(frame: &[u8], what: &'static str, min: usize) -> Result<(), ProtoError> {
    let mut c = Cursor::new(frame, what);
    let declared = c.u32be()? as usize;
    if frame.len() < min {
        return Err(ProtoError::Short {
            what,
            got: frame.len(),
            need: min,
        });
    }
    if declared != frame.len()
        && !(declared == RICH_REPORT_OLD_DECLARED && frame.len() == RICH_REPORT_MIN_LEN)
    {
        return Err(ProtoError::LengthMismatch {
            what,
            declared,
            actual: frame.len(),
        });
    }
    Ok(())
}

impl RichReport {
    pub fn encode(&self) -> Vec<u8> {
        let len = if self.tail.is_some() {
            RICH_REPORT_LEN
        } else {
            RICH_REPORT_MIN_LEN
        };
        let mut out = Vec::with_capacity(len);
        out.extend_from_slice(&(len as u32).to_be_bytes());
        put_status(&mut out, &self.status);
        out.extend_from_slice(&[
            self.robot_type,
            self.axis,
            self.master_id,
            self.slave_id,
            self.motor_tid,
            self.motor_fid,
        ]);
        put_fixed_text(&mut out, &self.version, 30);
        put_bounds(&mut out, &self.tcp_bounds);
        put_bounds(&mut out, &self.joint_bounds);
        put_f32s(&mut out, &[self.rot_jerk, self.max_rot_acc]);
        for c in &self.servo_codes {
            out.extend_from_slice(c);
        }
        out.extend_from_slice(&self.tgpio_codes);
        if let Some(t) = &self.tail {
            out.extend(t.temperatures.iter().map(|v| *v as u8));
            put_f32s(&mut out, &[t.target_tcp_speed]);
            put_f32s(&mut out, &t.target_joint_speeds);
            out.extend_from_slice(&t.counter.to_be_bytes());
            put_f32s(&mut out, &t.world_offset);
        }
        out.resize(len, 0);
        out
    }

    pub fn decode(frame: &[u8]) -> Result<RichReport, ProtoError> {
        report_length(frame, "rich report", RICH_REPORT_MIN_LEN)?;
        let mut c = Cursor::new(frame, "rich report");
        c.skip(4)?;
        let status = read_status(&mut c)?;
        check_status_fields(&status)?;
        let [robot_type, axis, master_id, slave_id, motor_tid, motor_fid] = c.u8s::<6>()?;
        let version = fixed_text(c.take(30)?);
        let tcp_bounds = read_bounds(&mut c)?;
        let joint_bounds = read_bounds(&mut c)?;
        let [rot_jerk, max_rot_acc] = c.f32s::<2>()?;
        let mut servo_codes = [[0u8; 2]; 7];
        for s in &mut servo_codes {
            *s = c.u8s::<2>()?;
        }
        let tgpio_codes = c.u8s::<2>()?;
        let tail = if frame.len() >= RICH_TAIL_END {
            let t = c.u8s::<7>()?;
            Some(RichTail {
                temperatures: t.map(|b| b as i8),
                target_tcp_speed: c.f32le()?,
                target_joint_speeds: c.f32s()?,
                counter: c.u32be()?,
                world_offset: c.f32s()?,
            })
        } else {
            None
        };
        Ok(RichReport {
            status,
            robot_type,
            axis,
            master_id,
            slave_id,
            motor_tid,
            motor_fid,
            version,
            tcp_bounds,
            joint_bounds,
            rot_jerk,
            max_rot_acc,
            servo_codes,
            tgpio_codes,
            tail,
        })
    }
}

/// Joint position, velocity and acceleration (rad, rad/s, rad/s²), 7 slots.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct JointMotion {
    pub position: [f32; 7],
    pub velocity: [f32; 7],
    pub acceleration: [f32; 7],
}

/// TCP pose, speed and acceleration (mm, rad; per second, per second²).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct TcpMotion {
    pub pose: [f32; 6],
    pub speed: [f32; 6],
    pub acceleration: [f32; 6],
}

/// The 30000 real-time report (250 Hz, 804 bytes, firmware >= 2.1), UFACTORY
/// `data-description-of-tcp-port.md` and the SDK's `_Report30000DataStructure`. Reserved blocks
/// encode as zeros and are not kept.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RtReport {
    /// Controller clock (µs).
    pub timestamp_us: u64,
    pub state: u8,
    pub mode: u8,
    pub cmdnum: u16,
    pub target_joints: JointMotion,
    pub actual_joints: JointMotion,
    pub joint_currents: [f32; 7],
    pub joint_torques: [f32; 7],
    pub target_tcp: TcpMotion,
    pub actual_tcp: TcpMotion,
    pub estimated_tcp_torque: [f32; 6],
    pub ft_raw: [f32; 6],
    pub ft_filtered: [f32; 6],
    pub monitor_type: u8,
    pub monitor_state: u8,
    /// Monitored device position, speed, current.
    pub monitor: [i16; 3],
    pub cgpio_digital_in: i16,
    pub cgpio_digital_out: i16,
    /// mV.
    pub cgpio_analog_in: [i16; 2],
    pub cgpio_analog_out: [i16; 2],
    pub tgpio_digital_in: i16,
    pub tgpio_digital_out: i16,
    pub tgpio_analog_in: [i16; 2],
}

impl RtReport {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(RT_REPORT_LEN);
        out.extend_from_slice(&(RT_REPORT_LEN as u32).to_be_bytes());
        out.extend_from_slice(&self.timestamp_us.to_be_bytes());
        out.push((self.state & 0x0F) | (self.mode << 4));
        out.extend_from_slice(&self.cmdnum.to_be_bytes());
        out.resize(out.len() + 17, 0);
        for m in [&self.target_joints, &self.actual_joints] {
            put_f32s(&mut out, &m.position);
            put_f32s(&mut out, &m.velocity);
            put_f32s(&mut out, &m.acceleration);
        }
        put_f32s(&mut out, &self.joint_currents);
        put_f32s(&mut out, &self.joint_torques);
        out.resize(out.len() + 42 * 4, 0);
        put_f32s(&mut out, &self.target_tcp.pose);
        put_f32s(&mut out, &self.target_tcp.speed);
        put_f32s(&mut out, &self.actual_tcp.pose);
        put_f32s(&mut out, &self.actual_tcp.speed);
        put_f32s(&mut out, &self.estimated_tcp_torque);
        put_f32s(&mut out, &self.target_tcp.acceleration);
        put_f32s(&mut out, &self.actual_tcp.acceleration);
        out.resize(out.len() + 24 * 4, 0);
        put_f32s(&mut out, &self.ft_raw);
        put_f32s(&mut out, &self.ft_filtered);
        out.extend_from_slice(&[self.monitor_type, self.monitor_state]);
        put_i16s(&mut out, &self.monitor);
        out.resize(out.len() + 40, 0);
        put_i16s(&mut out, &[self.cgpio_digital_in, self.cgpio_digital_out]);
        put_i16s(&mut out, &self.cgpio_analog_in);
        put_i16s(&mut out, &self.cgpio_analog_out);
        put_i16s(&mut out, &[self.tgpio_digital_in, self.tgpio_digital_out]);
        put_i16s(&mut out, &self.tgpio_analog_in);
        debug_assert_eq!(out.len(), RT_REPORT_LEN);
        out
    }

    pub fn decode(frame: &[u8]) -> Result<RtReport, ProtoError> {
        if frame.len() != RT_REPORT_LEN {
            return Err(ProtoError::BadLength {
                what: "real-time report",
                got: frame.len(),
                expected: "804",
            });
        }
        let mut c = Cursor::new(frame, "real-time report");
        let declared = c.u32be()? as usize;
        if declared != RT_REPORT_LEN {
            return Err(ProtoError::LengthMismatch {
                what: "real-time report",
                declared,
                actual: frame.len(),
            });
        }
        let timestamp_us = c.u64be()?;
        let sm = c.u8()?;
        let cmdnum = c.u16be()?;
        c.skip(17)?;
        let mut joints = [JointMotion::default(); 2];
        for m in &mut joints {
            m.position = c.f32s()?;
            m.velocity = c.f32s()?;
            m.acceleration = c.f32s()?;
        }
        let joint_currents = c.f32s()?;
        let joint_torques = c.f32s()?;
        c.skip(42 * 4)?;
        let mut target_tcp = TcpMotion {
            pose: c.f32s()?,
            speed: c.f32s()?,
            ..TcpMotion::default()
        };
        let mut actual_tcp = TcpMotion {
            pose: c.f32s()?,
            speed: c.f32s()?,
            ..TcpMotion::default()
        };
        let estimated_tcp_torque = c.f32s()?;
        target_tcp.acceleration = c.f32s()?;
        actual_tcp.acceleration = c.f32s()?;
        c.skip(24 * 4)?;
        let ft_raw = c.f32s()?;
        let ft_filtered = c.f32s()?;
        let monitor_type = c.u8()?;
        let monitor_state = c.u8()?;
        let monitor = c.i16s()?;
        c.skip(40)?;
        let [cgpio_digital_in, cgpio_digital_out] = c.i16s::<2>()?;
        let cgpio_analog_in = c.i16s()?;
        let cgpio_analog_out = c.i16s()?;
        let [tgpio_digital_in, tgpio_digital_out] = c.i16s::<2>()?;
        let tgpio_analog_in = c.i16s()?;
        Ok(RtReport {
            timestamp_us,
            state: sm & 0x0F,
            mode: sm >> 4,
            cmdnum,
            target_joints: joints[0],
            actual_joints: joints[1],
            joint_currents,
            joint_torques,
            target_tcp,
            actual_tcp,
            estimated_tcp_torque,
            ft_raw,
            ft_filtered,
            monitor_type,
            monitor_state,
            monitor,
            cgpio_digital_in,
            cgpio_digital_out,
            cgpio_analog_in,
            cgpio_analog_out,
            tgpio_digital_in,
            tgpio_digital_out,
            tgpio_analog_in,
        })
    }
}

/// Splits a report stream into frames: a u32 big-endian length, then the rest of the frame
/// (the SDK's `recv_report_proc`). As in the SDK, every frame of one stream must have the first
/// frame's length; a change means the stream is corrupt and the connection should be dropped.
#[derive(Debug, Default, Clone)]
pub struct ReportReader {
    buf: Vec<u8>,
    first_len: Option<usize>,
}

impl ReportReader {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// The next complete frame (length field included), `None` until it has fully arrived.
    /// A length below 8 or above `MAX_REPORT_LEN`, or one that differs from the first frame's,
    /// is an error and drops everything buffered.
    pub fn next_frame(&mut self) -> Result<Option<Vec<u8>>, ProtoError> {
        if self.buf.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize;
        // Old firmware declares 233 for a 245-byte rich frame (see `RichReport::decode`).
        let len = if len == RICH_REPORT_OLD_DECLARED {
            RICH_REPORT_MIN_LEN
        } else {
            len
        };
        let bad = if len < 8 {
            Some(ProtoError::Short {
                what: "report length field",
                got: len,
                need: 8,
            })
        } else if len > MAX_REPORT_LEN {
            Some(ProtoError::TooLong {
                what: "report length field",
                got: len,
                max: MAX_REPORT_LEN,
            })
        } else if self.first_len.is_some_and(|f| f != len) {
            Some(ProtoError::ReportLengthChanged {
                first: self.first_len.unwrap_or(0),
                now: len,
            })
        } else {
            None
        };
        if let Some(e) = bad {
            self.buf.clear();
            return Err(e);
        }
        if self.buf.len() < len {
            return Ok(None);
        }
        self.first_len = Some(len);
        let rest = self.buf.split_off(len);
        Ok(Some(std::mem::replace(&mut self.buf, rest)))
    }
}

#[cfg(test)]
mod tests;
