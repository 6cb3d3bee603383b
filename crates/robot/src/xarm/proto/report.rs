//! The 30001/30002 report frames and the 30000 real-time report.

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
#[derive(Debug, Clone, PartialEq)]
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
#[derive(Debug, Clone, PartialEq)]
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
#[derive(Debug, Clone, PartialEq)]
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
    pub(crate) fn encode(&self) -> Vec<u8> {
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

    /// Reads a whole 30002 frame (length field included), accepting the 245- and 587-byte
    /// layouts; refuses the state values the SDK would close the stream on.
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
