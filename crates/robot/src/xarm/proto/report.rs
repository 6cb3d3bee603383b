//! The 30001/30002 report frames and the 30000 real-time report.

use std::convert::Infallible;

use super::*;

/// Length of the 30001 "normal" report, and of the common head of the 30002 "rich" one.
#[allow(dead_code)]
pub(crate) const NORMAL_REPORT_LEN: usize = 145;
/// The shortest 30002 frame the SDK accepts (it reads bytes 145..245 unconditionally).
pub(crate) const RICH_REPORT_MIN_LEN: usize = 245;
/// The full 30002 frame of current firmware (the SDK's `_Report30002DataStructure`).
pub(crate) const RICH_REPORT_LEN: usize = 587;
/// Old firmware sends 245 bytes with 233 in the length field; the SDK accepts that pair.
const RICH_REPORT_OLD_DECLARED: usize = 233;
/// The 30000 real-time frame.
pub(crate) const RT_REPORT_LEN: usize = 804;
/// Longest report frame a `ReportReader` accepts: bounds memory when the stream is garbage.
pub(crate) const MAX_REPORT_LEN: usize = 4096;

/// The fields every state report starts with (30001 and the head of 30002), the SDK's
/// `_Report30001DataStructure` (`xarm/x3/report.py`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ArmStatus {
    /// `RobotState` value (the low nibble of byte 4).
    pub state: u8,
    /// `Mode` value (the high nibble).
    pub mode: u8,
    /// Commands queued in the controller (as GET_CMDNUM).
    pub cmdnum: u16,
    /// Joint positions (rad), 7 slots.
    pub joints: [f32; 7],
    /// x, y, z (mm), roll, pitch, yaw (rad).
    pub tcp_pose: [f32; 6],
    /// Joint torques as the controller estimates them, 7 slots.
    pub joint_torques: [f32; 7],
    /// One bit per axis: 1 = brake released.
    pub brake_bits: u8,
    /// One bit per axis: 1 = motor enabled.
    pub enable_bits: u8,
    /// Controller error code (0 = none; see `ControllerError`).
    pub error: u8,
    /// Controller warning code (0 = none; see `ControllerWarning`).
    pub warn: u8,
    /// TCP offset from the flange: x, y, z (mm), roll, pitch, yaw (rad).
    pub tcp_offset: [f32; 6],
    /// Mass (kg), centre of mass x, y, z (mm).
    pub tcp_load: [f32; 4],
    /// 0..=5.
    pub collision_sensitivity: u8,
    /// 0..=5.
    pub teach_sensitivity: u8,
    /// Gravity direction in the base frame (x, y, z).
    pub gravity: [f32; 3],
}

/// Jerk, minimum/maximum acceleration and minimum/maximum speed, as the rich report lists them.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct MotionBounds {
    /// Jerk the controller plans with.
    pub jerk: f32,
    /// Smallest acceleration accepted.
    pub min_acc: f32,
    /// Largest acceleration accepted.
    pub max_acc: f32,
    /// Smallest speed accepted.
    pub min_speed: f32,
    /// Largest speed accepted.
    pub max_speed: f32,
}

/// Optional fields after byte 245 of a rich frame (decoded when the frame reaches byte 312).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RichTail {
    /// Joint temperatures (°C).
    pub temperatures: [i8; 7],
    /// Target TCP speed (mm/s).
    pub target_tcp_speed: f32,
    /// Target joint speeds (rad/s).
    pub target_joint_speeds: [f32; 7],
    /// Frame counter, as the controller sends it.
    pub counter: u32,
    /// World offset x, y, z (mm), roll, pitch, yaw (rad).
    pub world_offset: [f32; 6],
}

/// Byte where the decoded part of the tail ends.
const RICH_TAIL_END: usize = 312;

/// The 30002 "rich" report (5 Hz), the SDK's `_Report30002DataStructure`. Fields after byte 312
/// (I/O, F/T sensor, reduced mode, ...) are not decoded and encode as zeros.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RichReport {
    /// The fields shared with the 30001 report (bytes 4..145).
    pub status: ArmStatus,
    /// Robot type number, as in GET_VERSION.
    pub robot_type: u8,
    /// Number of joints.
    pub axis: u8,
    /// Controller-internal id, kept as received (the SDK does not interpret it).
    pub master_id: u8,
    /// Controller-internal id, kept as received (the SDK does not interpret it).
    pub slave_id: u8,
    /// Controller-internal motor id, kept as received (the SDK does not interpret it).
    pub motor_tid: u8,
    /// Controller-internal motor id, kept as received (the SDK does not interpret it).
    pub motor_fid: u8,
    /// Firmware version text (at most 30 bytes).
    pub version: String,
    /// Bounds of TCP (linear) motion (mm/s, mm/s², mm/s³).
    pub tcp_bounds: MotionBounds,
    /// Bounds of joint motion (rad/s, rad/s², rad/s³).
    pub joint_bounds: MotionBounds,
    /// Rotational jerk of TCP motion.
    pub rot_jerk: f32,
    /// Largest rotational acceleration of TCP motion.
    pub max_rot_acc: f32,
    /// Per joint: servo status, servo error code.
    pub servo_codes: [[u8; 2]; 7],
    /// Tool GPIO board: status, error code.
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
    pub(crate) fn encode(&self) -> Vec<u8> {
        let len = if self.tail.is_some() {
            RICH_REPORT_LEN
        } else {
            RICH_REPORT_MIN_LEN
        };
        write_frame(len, |w| self.clone().layout(w))
    }

    /// Reads a whole 30002 frame (length field included), accepting the 245- and 587-byte
    /// layouts; refuses the state values the SDK would close the stream on.
    pub fn decode(frame: &[u8]) -> Result<RichReport, ProtoError> {
        report_length(frame, "rich report", RICH_REPORT_MIN_LEN)?;
        let mut c = Cursor::new(frame, "rich report");
        c.skip(4)?;
        let mut r = RichReport {
            tail: (frame.len() >= RICH_TAIL_END).then(RichTail::default),
            ..RichReport::default()
        };
        r.layout(&mut Read(c))?;
        check_status_fields(&r.status)?;
        Ok(r)
    }
}

/// Joint position, velocity and acceleration (rad, rad/s, rad/s²), 7 slots.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct JointMotion {
    /// Joint positions (rad).
    pub position: [f32; 7],
    /// Joint velocities (rad/s).
    pub velocity: [f32; 7],
    /// Joint accelerations (rad/s²).
    pub acceleration: [f32; 7],
}

/// TCP pose, speed and acceleration (mm, rad; per second, per second²).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct TcpMotion {
    /// x, y, z (mm), roll, pitch, yaw (rad).
    pub pose: [f32; 6],
    /// Linear (mm/s) and angular (rad/s) speed.
    pub speed: [f32; 6],
    /// Linear (mm/s²) and angular (rad/s²) acceleration.
    pub acceleration: [f32; 6],
}

/// The 30000 real-time report (250 Hz, 804 bytes, firmware >= 2.1), UFACTORY
/// `data-description-of-tcp-port.md` and the SDK's `_Report30000DataStructure`. Reserved blocks
/// encode as zeros and are not kept.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RtReport {
    /// Controller clock (µs).
    pub timestamp_us: u64,
    /// `RobotState` value (the low nibble of byte 12).
    pub state: u8,
    /// `Mode` value (the high nibble of byte 12).
    pub mode: u8,
    /// Commands queued in the controller.
    pub cmdnum: u16,
    /// Where the controller commands the joints to be.
    pub target_joints: JointMotion,
    /// Where the joints are, as the encoders measure.
    pub actual_joints: JointMotion,
    /// Joint motor currents, 7 slots.
    pub joint_currents: [f32; 7],
    /// Joint torques as the controller estimates them, 7 slots.
    pub joint_torques: [f32; 7],
    /// The commanded TCP motion.
    pub target_tcp: TcpMotion,
    /// The measured TCP motion.
    pub actual_tcp: TcpMotion,
    /// Force and torque at the TCP as the controller estimates them from joint torques.
    pub estimated_tcp_torque: [f32; 6],
    /// Six-axis force/torque sensor reading, unfiltered (zeros without a sensor).
    pub ft_raw: [f32; 6],
    /// Six-axis force/torque sensor reading, filtered (zeros without a sensor).
    pub ft_filtered: [f32; 6],
    /// Type of the monitored device, as the controller sends it.
    pub monitor_type: u8,
    /// State of the monitored device, as the controller sends it.
    pub monitor_state: u8,
    /// Monitored device position, speed, current.
    pub monitor: [i16; 3],
    /// Control box digital inputs, one bit each.
    pub cgpio_digital_in: i16,
    /// Control box digital outputs, one bit each.
    pub cgpio_digital_out: i16,
    /// mV.
    pub cgpio_analog_in: [i16; 2],
    /// Control box analog outputs (mV).
    pub cgpio_analog_out: [i16; 2],
    /// Tool (end-effector) digital inputs, one bit each.
    pub tgpio_digital_in: i16,
    /// Tool (end-effector) digital outputs, one bit each.
    pub tgpio_digital_out: i16,
    /// Tool (end-effector) analog inputs (mV).
    pub tgpio_analog_in: [i16; 2],
}

impl RtReport {
    pub(crate) fn encode(&self) -> Vec<u8> {
        write_frame(RT_REPORT_LEN, |w| self.clone().layout(w))
    }

    /// Reads a whole 30000 frame (length field included): exactly 804 bytes.
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
        let mut r = RtReport::default();
        r.layout(&mut Read(c))?;
        Ok(r)
    }
}

// ---------------------------------------------------------------------------------------------
// Layouts
//
// Each report's layout is one function that visits its fields in wire order through a `Pass`:
// `Read` fills them from a frame, `Write` appends them. The emulator's encoder and the client's
// decoder run the same function, so they cannot disagree on where a field is.

/// One direction over a layout.
trait Pass {
    /// `ProtoError` when reading; writing cannot fail.
    type Error;
    /// Reads or writes `v` with codec `W`.
    fn with<W: Wire>(&mut self, v: &mut W::Value) -> Result<(), Self::Error>;
    /// Reads or writes `v` with its own type as the codec.
    fn field<W: Wire<Value = W>>(&mut self, v: &mut W) -> Result<(), Self::Error> {
        self.with::<W>(v)
    }
    /// Bytes no field keeps: skipped when reading, zeros when writing.
    fn reserved(&mut self, n: usize) -> Result<(), Self::Error>;
}

/// Fills the fields from a frame.
struct Read<'a>(Cursor<'a>);

impl Pass for Read<'_> {
    type Error = ProtoError;
    fn with<W: Wire>(&mut self, v: &mut W::Value) -> Result<(), ProtoError> {
        let name = self.0.what;
        *v = W::get(&mut self.0, name)?;
        Ok(())
    }
    fn reserved(&mut self, n: usize) -> Result<(), ProtoError> {
        self.0.skip(n)
    }
}

/// Appends the fields to a frame. A layout takes its value as `&mut`, which reading needs, so
/// writing runs it on a copy.
struct Write(Vec<u8>);

impl Pass for Write {
    type Error = Infallible;
    fn with<W: Wire>(&mut self, v: &mut W::Value) -> Result<(), Infallible> {
        W::put(v, &mut self.0);
        Ok(())
    }
    fn reserved(&mut self, n: usize) -> Result<(), Infallible> {
        self.0.resize(self.0.len() + n, 0);
        Ok(())
    }
}

/// State in the low nibble, mode in the high one, in one byte (the SDK's `report.py`).
struct StateMode;

impl Wire for StateMode {
    type Value = (u8, u8);
    fn put((state, mode): &(u8, u8), p: &mut Vec<u8>) {
        p.push((state & 0x0F) | (mode << 4));
    }
    fn get(c: &mut Cursor, _: &'static str) -> Result<(u8, u8), ProtoError> {
        let b = c.u8()?;
        Ok((b & 0x0F, b >> 4))
    }
}

/// NUL-padded text of `N` bytes (a longer text is cut; reading stops at the first NUL).
struct Text<const N: usize>;

impl<const N: usize> Wire for Text<N> {
    type Value = String;
    fn put(v: &String, p: &mut Vec<u8>) {
        put_fixed_text(p, v, N);
    }
    fn get(c: &mut Cursor, _: &'static str) -> Result<String, ProtoError> {
        Ok(fixed_text(c.take(N)?))
    }
}

/// `StateMode` over two separate fields, which a layout cannot borrow as one tuple.
fn state_mode<P: Pass>(p: &mut P, state: &mut u8, mode: &mut u8) -> Result<(), P::Error> {
    let mut both = (*state, *mode);
    p.with::<StateMode>(&mut both)?;
    (*state, *mode) = both;
    Ok(())
}

impl ArmStatus {
    /// Bytes 4..145 of the 30001 and 30002 frames.
    fn layout<P: Pass>(&mut self, p: &mut P) -> Result<(), P::Error> {
        state_mode(p, &mut self.state, &mut self.mode)?;
        p.field(&mut self.cmdnum)?;
        p.field(&mut self.joints)?;
        p.field(&mut self.tcp_pose)?;
        p.field(&mut self.joint_torques)?;
        p.field(&mut self.brake_bits)?;
        p.field(&mut self.enable_bits)?;
        p.field(&mut self.error)?;
        p.field(&mut self.warn)?;
        p.field(&mut self.tcp_offset)?;
        p.field(&mut self.tcp_load)?;
        p.field(&mut self.collision_sensitivity)?;
        p.field(&mut self.teach_sensitivity)?;
        p.field(&mut self.gravity)
    }
}

impl MotionBounds {
    fn layout<P: Pass>(&mut self, p: &mut P) -> Result<(), P::Error> {
        p.field(&mut self.jerk)?;
        p.field(&mut self.min_acc)?;
        p.field(&mut self.max_acc)?;
        p.field(&mut self.min_speed)?;
        p.field(&mut self.max_speed)
    }
}

impl RichTail {
    /// Bytes 245..312 of a 30002 frame.
    fn layout<P: Pass>(&mut self, p: &mut P) -> Result<(), P::Error> {
        p.field(&mut self.temperatures)?;
        p.field(&mut self.target_tcp_speed)?;
        p.field(&mut self.target_joint_speeds)?;
        p.field(&mut self.counter)?;
        p.field(&mut self.world_offset)
    }
}

impl RichReport {
    /// Bytes 4.. of a 30002 frame: 4..245, then the tail if there is one.
    fn layout<P: Pass>(&mut self, p: &mut P) -> Result<(), P::Error> {
        self.status.layout(p)?;
        p.field(&mut self.robot_type)?;
        p.field(&mut self.axis)?;
        p.field(&mut self.master_id)?;
        p.field(&mut self.slave_id)?;
        p.field(&mut self.motor_tid)?;
        p.field(&mut self.motor_fid)?;
        p.with::<Text<30>>(&mut self.version)?;
        self.tcp_bounds.layout(p)?;
        self.joint_bounds.layout(p)?;
        p.field(&mut self.rot_jerk)?;
        p.field(&mut self.max_rot_acc)?;
        p.field(&mut self.servo_codes)?;
        p.field(&mut self.tgpio_codes)?;
        match &mut self.tail {
            Some(t) => t.layout(p),
            None => Ok(()),
        }
    }
}

impl JointMotion {
    fn layout<P: Pass>(&mut self, p: &mut P) -> Result<(), P::Error> {
        p.field(&mut self.position)?;
        p.field(&mut self.velocity)?;
        p.field(&mut self.acceleration)
    }
}

impl RtReport {
    /// Bytes 4..804 of a 30000 frame.
    fn layout<P: Pass>(&mut self, p: &mut P) -> Result<(), P::Error> {
        p.field(&mut self.timestamp_us)?;
        state_mode(p, &mut self.state, &mut self.mode)?;
        p.field(&mut self.cmdnum)?;
        p.reserved(17)?;
        self.target_joints.layout(p)?;
        self.actual_joints.layout(p)?;
        p.field(&mut self.joint_currents)?;
        p.field(&mut self.joint_torques)?;
        p.reserved(42 * 4)?;
        p.field(&mut self.target_tcp.pose)?;
        p.field(&mut self.target_tcp.speed)?;
        p.field(&mut self.actual_tcp.pose)?;
        p.field(&mut self.actual_tcp.speed)?;
        p.field(&mut self.estimated_tcp_torque)?;
        p.field(&mut self.target_tcp.acceleration)?;
        p.field(&mut self.actual_tcp.acceleration)?;
        p.reserved(24 * 4)?;
        p.field(&mut self.ft_raw)?;
        p.field(&mut self.ft_filtered)?;
        p.field(&mut self.monitor_type)?;
        p.field(&mut self.monitor_state)?;
        p.field(&mut self.monitor)?;
        p.reserved(40)?;
        p.field(&mut self.cgpio_digital_in)?;
        p.field(&mut self.cgpio_digital_out)?;
        p.field(&mut self.cgpio_analog_in)?;
        p.field(&mut self.cgpio_analog_out)?;
        p.field(&mut self.tgpio_digital_in)?;
        p.field(&mut self.tgpio_digital_out)?;
        p.field(&mut self.tgpio_analog_in)
    }
}

/// A frame of `len` bytes: the length field, then what `layout` writes, zero-padded.
fn write_frame(len: usize, layout: impl FnOnce(&mut Write) -> Result<(), Infallible>) -> Vec<u8> {
    let mut w = Write(Vec::with_capacity(len));
    w.0.extend_from_slice(&(len as u32).to_be_bytes());
    let Ok(()) = layout(&mut w);
    debug_assert!(
        w.0.len() <= len,
        "layout wrote {} of {len} bytes",
        w.0.len()
    );
    let mut out = w.0;
    out.resize(len, 0);
    out
}

/// Splits a report stream into frames: a u32 big-endian length, then the rest of the frame
/// (the SDK's `recv_report_proc`). As in the SDK, every frame of one stream must have the first
/// frame's length; a change means the stream is corrupt and the connection should be dropped.
#[derive(Debug, Default, Clone)]
pub struct ReportReader {
    pub(super) buf: Vec<u8>,
    first_len: Option<usize>,
}

impl ReportReader {
    /// An empty reader.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends bytes as they arrive from the socket; frames are taken out with `next_frame`.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    pub(crate) fn buffered(&self) -> usize {
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
