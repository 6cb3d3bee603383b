//! Typed reply payloads, the firmware version, and the wire's units against pointact's.

use super::*;

/// Length of the GET_VERSION and GET_ROBOT_SN payloads.
pub(crate) const TEXT_REPLY_LEN: usize = 40;

/// A typed reply payload (what follows the status byte).
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// Set commands, servo commands.
    Empty,
    /// GET_VERSION: e.g. `"6,6,XI1304,AC1303,v2.3.0"` (see `parse_version`).
    Version(String),
    /// GET_ROBOT_SN: robot serial, NUL, control-box serial.
    RobotSn {
        /// The arm's serial number.
        robot: String,
        /// The control box's serial number.
        control_box: String,
    },
    /// GET_STATE raw value (see `RobotState::from_u8`).
    State(u8),
    /// GET_CMDNUM: commands queued.
    Cmdnum(u16),
    /// GET_ERROR: error and warning codes (see `ControllerError`, `ControllerWarning`).
    ErrorWarn {
        /// Controller error code (0 = none).
        error: u8,
        /// Controller warning code (0 = none).
        warn: u8,
    },
    /// Planned moves: the task id feedback frames refer to; with only-check, the check result
    /// (0 = the move could run, else the error it would raise).
    MoveAck {
        /// Task id of the queued move.
        task: u16,
        /// Only-check result, present when the move was sent as a check.
        check: Option<u8>,
    },
    /// GET_TCP_POSE: x, y, z (mm), roll, pitch, yaw (rad).
    Pose([f32; 6]),
    /// GET_JOINT_POS (rad).
    Joints([f32; 7]),
    /// RS485_RTU: host id, then the device's Modbus-RTU reply PDU (no CRC).
    Rs485 {
        /// The RS-485 host (bus) the device answered on.
        host: u8,
        /// The device's Modbus-RTU reply: slave address, function code and data, without CRC.
        pdu: Vec<u8>,
    },
    /// TGPIO_R16B: the register as a 4-byte big-endian integer.
    Register(i32),
}

impl Reply {
    pub(crate) fn encode_payload(&self) -> Vec<u8> {
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
    pub(crate) fn decode(funcode: u8, payload: &[u8]) -> Result<Reply, ProtoError> {
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
    /// Number of joints (6 for the xArm 6).
    pub axis: u32,
    /// Robot type number, as the controller reports it.
    pub robot_type: u32,
    /// Third field: the arm's serial number (or its prefix, e.g. `XI1304`).
    pub robot_sn: String,
    /// Fourth field: the control box's serial number (or its prefix, e.g. `AC1303`).
    pub control_box_sn: String,
    /// Firmware major version.
    pub major: u32,
    /// Firmware minor version.
    pub minor: u32,
    /// Firmware patch version.
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
pub(crate) fn pose_from_wire(p: &[f32; 6]) -> Isometry3<f64> {
    let t = Translation3::new(
        p[0] as f64 / 1000.0,
        p[1] as f64 / 1000.0,
        p[2] as f64 / 1000.0,
    );
    let r = UnitQuaternion::from_euler_angles(p[3] as f64, p[4] as f64, p[5] as f64);
    Isometry3::from_parts(t, r)
}

/// Like `pose_from_wire`, with the orientation as an axis-angle vector (rad).
pub(crate) fn pose_from_wire_axis_angle(p: &[f32; 6]) -> Isometry3<f64> {
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
pub(crate) fn joints_to_wire(q: &[f64]) -> [f32; 7] {
    let mut out = [0f32; 7];
    for (o, v) in out.iter_mut().zip(q) {
        *o = *v as f32;
    }
    out
}

/// `base_from_tcp` (m) as a wire pose (mm, roll/pitch/yaw rad).
pub(crate) fn pose_to_wire(pose: &Isometry3<f64>) -> [f32; 6] {
    let t = pose.translation.vector * 1000.0;
    let (r, p, y) = pose.rotation.euler_angles();
    [
        t.x as f32, t.y as f32, t.z as f32, r as f32, p as f32, y as f32,
    ]
}

impl Response {
    /// The typed payload, interpreted as the reply to `funcode`'s command.
    pub fn reply(&self) -> Result<Reply, ProtoError> {
        Reply::decode(self.funcode, &self.payload)
    }
}
