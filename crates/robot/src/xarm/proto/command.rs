//! Typed requests: each command's parameters, encoded and decoded.

use super::*;

/// Reference frame of a Cartesian command's pose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Coord {
    /// Absolute, in the robot base frame.
    Base,
    /// Relative to the current tool (TCP) frame.
    Tool,
}

impl Coord {
    pub(super) fn byte(self) -> u8 {
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
    /// Frame the pose is given in.
    pub coord: Coord,
    /// Orientation given as an axis-angle vector instead of roll/pitch/yaw.
    pub axis_angle: bool,
}

/// MOVE_LINE (21): a straight TCP line to `pose` (x, y, z mm; roll, pitch, yaw rad, or an
/// axis-angle vector).
#[derive(Debug, Clone, PartialEq)]
pub struct MoveLine {
    /// Target: x, y, z (mm), then roll, pitch, yaw (rad) or an axis-angle vector (rad).
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
    pub(crate) fn to(pose: [f32; 6], speed: f32, acc: f32) -> MoveLine {
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
    /// Reserved by the controller (0).
    pub mvtime: f32,
    /// Only check the move (1..): the controller answers whether it could run, and does not run it.
    pub only_check: Option<u8>,
}

/// MOVE_HOME (25): joint move to all-zero joints.
#[derive(Debug, Clone, PartialEq)]
pub struct MoveHome {
    /// Joint speed (rad/s).
    pub speed: f32,
    /// Joint acceleration (rad/s²).
    pub acc: f32,
    /// Reserved by the controller (0).
    pub mvtime: f32,
    /// Only check the move (1..): the controller answers whether it could run, and does not run it.
    pub only_check: Option<u8>,
}

/// MOVE_RELATIVE (83): a move by an offset from the last target.
#[derive(Debug, Clone, PartialEq)]
pub struct MoveRelative {
    /// Cartesian: x, y, z (mm), roll, pitch, yaw (rad), unused; joint: 7 angle offsets (rad).
    pub offset: [f32; 7],
    /// mm/s for a Cartesian offset, rad/s for a joint one.
    pub speed: f32,
    /// mm/s² for a Cartesian offset, rad/s² for a joint one.
    pub acc: f32,
    /// Reserved by the controller (0).
    pub mvtime: f32,
    /// Blend radius (mm); negative = stop at the target.
    pub radius: f32,
    /// Joint-space offset instead of a Cartesian one.
    pub joint: bool,
    /// Cartesian orientation offset given as an axis-angle vector instead of roll/pitch/yaw.
    pub axis_angle: bool,
    /// Only check the move (1..): the controller answers whether it could run, and does not run it.
    pub only_check: Option<u8>,
    /// Optional trailing motion-type byte.
    pub motion_type: Option<u8>,
}

impl MoveRelative {
    /// The SDK's `set_position(..., relative=True)`: a Cartesian offset (x, y, z mm; roll, pitch,
    /// yaw rad) in the base frame, no blending.
    pub(crate) fn linear(offset: [f32; 6], speed: f32, acc: f32) -> MoveRelative {
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
    /// Joint target (rad); unused joints 0.
    pub joints: [f32; 7],
    /// Reserved by the controller: it moves at its own maximum.
    pub speed: f32,
    /// Reserved by the controller, like `speed`.
    pub acc: f32,
    /// Reserved by the controller (0).
    pub mvtime: f32,
}

/// MOVE_SERVO_CART (30): servo-mode TCP target, applied at once.
#[derive(Debug, Clone, PartialEq)]
pub struct ServoCartesian {
    /// TCP target or offset (see `coord`): x, y, z (mm), roll, pitch, yaw (rad).
    pub pose: [f32; 6],
    /// Reserved, like `ServoJoint::speed`.
    pub speed: f32,
    /// Reserved, like `ServoJoint::acc`.
    pub acc: f32,
    /// The third float carries the frame: 0 = base (absolute pose), 1 = tool (offset in the tool
    /// frame).
    pub coord: Coord,
}

/// A typed command: what a `Request`'s funcode and parameters mean. Encoding and decoding are
/// exact inverses for every value the decoder returns.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// GET_VERSION (1): the firmware version string.
    GetVersion,
    /// GET_ROBOT_SN (2): the arm's and the control box's serial numbers.
    GetRobotSn,
    /// MOTION_EN (11): enable or disable the motors.
    MotionEnable {
        /// Joint 1..=7, or 8 = all joints.
        axis: u8,
        /// `true` enables (and releases the brakes), `false` disables.
        enable: bool,
    },
    /// One of `set_state`.
    SetState(u8),
    /// GET_STATE (13): the `RobotState`.
    GetState,
    /// GET_CMDNUM (14): how many commands are queued.
    GetCmdnum,
    /// GET_ERROR (15): the current error and warning codes.
    GetError,
    /// CLEAN_ERR (16): clears the controller error (the arm then needs SET_STATE 0).
    CleanError,
    /// CLEAN_WAR (17): clears the controller warning.
    CleanWarn,
    /// `mode` as `Mode`; `detection` is sent by firmware >= 1.10.0 (the SDK sends 0).
    SetMode {
        /// The new mode (a `Mode` value).
        mode: u8,
        /// Trailing detection byte of newer firmware; `None` in the old form.
        detection: Option<u8>,
    },
    /// MOVE_LINE (21).
    MoveLine(MoveLine),
    /// MOVE_JOINT (23).
    MoveJoint(MoveJoint),
    /// MOVE_HOME (25).
    MoveHome(MoveHome),
    /// MOVE_RELATIVE (83).
    MoveRelative(MoveRelative),
    /// MOVE_SERVOJ (29).
    ServoJoint(ServoJoint),
    /// MOVE_SERVO_CART (30).
    ServoCartesian(ServoCartesian),
    /// x, y, z (mm), roll, pitch, yaw (rad) of the TCP in the flange frame.
    SetTcpOffset([f32; 6]),
    /// Payload mass (kg) and centre of mass in the flange frame (mm).
    SetLoad {
        /// Payload mass (kg).
        mass: f32,
        /// Centre of mass x, y, z in the flange frame (mm).
        com: [f32; 3],
    },
    /// GET_TCP_POSE (41): the TCP pose (mm, rad).
    GetTcpPose,
    /// GET_JOINT_POS (42): the joint positions (rad).
    GetJointPos,
    /// Modbus-RTU PDU (no CRC) through RS-485 host `host` (9 = tool).
    Rs485 {
        /// RS-485 host (bus) id; 9 is the tool port.
        host: u8,
        /// Modbus-RTU PDU: slave address, function code and data, without CRC.
        pdu: Vec<u8>,
    },
    /// Read one 16-bit tool-board register (e.g. `tool_reg::BAUD_INDEX`).
    TgpioRead16 {
        /// RS-485 host (bus) id of the tool board.
        host: u8,
        /// Register address.
        addr: u16,
    },
    /// Write one tool-board register; the SDK sends the value as an f32 (LE), then optional bytes.
    TgpioWrite16 {
        /// RS-485 host (bus) id of the tool board.
        host: u8,
        /// Register address.
        addr: u16,
        /// The value to write.
        value: f32,
        /// Bytes sent after the value (the SDK's optional trailer).
        extra: Vec<u8>,
    },
    /// Bitmask of `feedback_kind` for the commands that follow.
    SetFeedbackType(u8),
}

impl Command {
    pub(crate) fn funcode(&self) -> u8 {
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

    pub(crate) fn encode_params(&self) -> Vec<u8> {
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

    pub(crate) fn decode(funcode: u8, params: &[u8]) -> Result<Command, ProtoError> {
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

impl Request {
    /// The typed command this frame carries.
    pub(crate) fn command(&self) -> Result<Command, ProtoError> {
        Command::decode(self.funcode, &self.params)
    }
}
