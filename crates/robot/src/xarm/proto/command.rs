//! Typed requests: each command's parameters, encoded and decoded from one table (`commands!`
//! at the end of this file).

use super::*;

/// Reference frame of a Cartesian command's pose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Coord {
    /// Absolute, in the robot base frame.
    Base,
    /// Relative to the current tool (TCP) frame.
    Tool,
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
    /// The request frame for this command.
    pub fn request(&self, tid: u16, prot: u16) -> Request {
        Request {
            tid,
            prot,
            funcode: self.funcode(),
            params: self.encode_params(),
        }
    }
}

impl Request {
    /// The typed command this frame carries.
    pub(crate) fn command(&self) -> Result<Command, ProtoError> {
        Command::decode(self.funcode, &self.params)
    }
}

// ---------------------------------------------------------------------------------------------
// Command field codecs (the integer and float ones, shared with the reports, are in `mod.rs`)

/// Reads one field with codec `W`: `at` is what a too-short error names, `name` what an
/// out-of-range error names.
fn read_field<W: Wire>(
    c: &mut Cursor,
    at: &'static str,
    name: &'static str,
) -> Result<W::Value, ProtoError> {
    c.what = at;
    W::get(c, name)
}

/// Refuses bytes after the last field: the decoded command would not say what they meant, and
/// the emulator must not act on a frame it only partly understood.
fn finish(c: &Cursor, what: &'static str, expected: &'static str) -> Result<(), ProtoError> {
    if c.remaining() == 0 {
        Ok(())
    } else {
        Err(ProtoError::BadLength {
            what,
            got: c.bytes.len(),
            expected,
        })
    }
}

/// One byte, 0 or 1. Any other value is refused rather than read as true: it is a corrupt frame
/// or a firmware extension this codec does not know, and either way not a command to act on.
impl Wire for bool {
    type Value = bool;
    fn put(v: &bool, p: &mut Vec<u8>) {
        p.push(*v as u8);
    }
    fn get(c: &mut Cursor, name: &'static str) -> Result<bool, ProtoError> {
        match c.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(ProtoError::Invalid {
                field: name,
                value: v as u64,
            }),
        }
    }
}

/// One byte: 0 base, 1 tool.
impl Wire for Coord {
    type Value = Coord;
    fn put(v: &Coord, p: &mut Vec<u8>) {
        p.push(match v {
            Coord::Base => 0,
            Coord::Tool => 1,
        });
    }
    fn get(c: &mut Cursor, name: &'static str) -> Result<Coord, ProtoError> {
        match c.u8()? {
            0 => Ok(Coord::Base),
            1 => Ok(Coord::Tool),
            v => Err(ProtoError::Invalid {
                field: name,
                value: v as u64,
            }),
        }
    }
}

/// MOVE_SERVO_CART's frame, carried in the ninth float, the `mvtime` slot of other moves: 0.0
/// base, 1.0 tool (the SDK's `set_servo_cartesian` passes `int(is_tool_coord)` there, through
/// `uxbus_cmd.py`'s `move_servo_cartesian`). Other values are refused, with the float's bits in
/// the error.
struct CoordF32;

impl Wire for CoordF32 {
    type Value = Coord;
    fn put(v: &Coord, p: &mut Vec<u8>) {
        let f: f32 = match v {
            Coord::Base => 0.0,
            Coord::Tool => 1.0,
        };
        f32::put(&f, p);
    }
    fn get(c: &mut Cursor, name: &'static str) -> Result<Coord, ProtoError> {
        let f = c.f32le()?;
        if f == 0.0 {
            Ok(Coord::Base)
        } else if f == 1.0 {
            Ok(Coord::Tool)
        } else {
            Err(ProtoError::Invalid {
                field: name,
                value: f.to_bits() as u64,
            })
        }
    }
}

/// A trailing byte newer firmware appends and older firmware omits: present when a byte remains.
impl Wire for Option<u8> {
    type Value = Option<u8>;
    fn put(v: &Option<u8>, p: &mut Vec<u8>) {
        p.extend(*v);
    }
    fn get(c: &mut Cursor, _: &'static str) -> Result<Option<u8>, ProtoError> {
        if c.remaining() == 0 {
            Ok(None)
        } else {
            c.u8().map(Some)
        }
    }
}

/// Two trailing optional bytes, only-check then motion type (MOVE_RELATIVE, and MOVE_LINE's old
/// form). Bytes are told apart by position only, so a motion type can only follow an only-check
/// byte: an absent only-check is sent as 0 (no check) when a motion type follows.
struct TrailingPair;

impl Wire for TrailingPair {
    type Value = (Option<u8>, Option<u8>);
    fn put((only_check, motion_type): &Self::Value, p: &mut Vec<u8>) {
        if only_check.is_some() || motion_type.is_some() {
            p.push(only_check.unwrap_or(0));
        }
        p.extend(*motion_type);
    }
    fn get(c: &mut Cursor, name: &'static str) -> Result<Self::Value, ProtoError> {
        Ok((<Option<u8>>::get(c, name)?, <Option<u8>>::get(c, name)?))
    }
}

/// MOVE_LINE after its nine floats, in one of two layouts told apart by length:
/// - the 9-float form of firmware < 1.11.100 (the SDK's `move_line`): `[only_check
///   [motion_type]]`, 0 to 2 bytes;
/// - the common form (`move_line_common`): `radius f32 | coord u8 | is_axis_angle u8 |
///   only_check u8 [| motion_type u8]`, 7 or 8 bytes; only-check is always sent (0 when `None`).
struct LineTail;

/// Bytes of the common form's tail without its optional motion type.
const LINE_COMMON_TAIL_LEN: usize = 7;

impl Wire for LineTail {
    type Value = (Option<LineCommon>, Option<u8>, Option<u8>);
    fn put((common, only_check, motion_type): &Self::Value, p: &mut Vec<u8>) {
        match common {
            Some(c) => {
                f32::put(&c.radius, p);
                Coord::put(&c.coord, p);
                bool::put(&c.axis_angle, p);
                p.push(only_check.unwrap_or(0));
                <Option<u8>>::put(motion_type, p);
            }
            None => TrailingPair::put(&(*only_check, *motion_type), p),
        }
    }
    fn get(c: &mut Cursor, name: &'static str) -> Result<Self::Value, ProtoError> {
        // A length between the forms would otherwise be blamed on the bytes after the tail.
        if !matches!(c.remaining(), 0..=2 | LINE_COMMON_TAIL_LEN..=8) {
            return Err(ProtoError::BadLength {
                what: "MOVE_LINE parameters",
                got: c.bytes.len(),
                expected: "36..=38 (old form) or 43..=44 (common form)",
            });
        }
        if c.remaining() < LINE_COMMON_TAIL_LEN {
            let (only_check, motion_type) = TrailingPair::get(c, name)?;
            return Ok((None, only_check, motion_type));
        }
        let common = LineCommon {
            radius: c.f32le()?,
            coord: Coord::get(c, "MOVE_LINE coord")?,
            axis_angle: bool::get(c, "MOVE_LINE axis_angle")?,
        };
        let only_check = c.u8()?;
        Ok((Some(common), Some(only_check), <Option<u8>>::get(c, name)?))
    }
}

/// Everything after the fields before it (TGPIO_W16B's optional trailer).
impl Wire for Vec<u8> {
    type Value = Vec<u8>;
    fn put(v: &Vec<u8>, p: &mut Vec<u8>) {
        p.extend_from_slice(v);
    }
    fn get(c: &mut Cursor, _: &'static str) -> Result<Vec<u8>, ProtoError> {
        Ok(c.rest().to_vec())
    }
}

/// RS485_RTU's tunnelled Modbus-RTU PDU (no CRC): the rest of the parameters, at least a slave
/// address and a function code, which every PDU starts with.
struct Pdu;

/// Slave address and function code.
const PDU_MIN_LEN: usize = 2;

impl Wire for Pdu {
    type Value = Vec<u8>;
    fn put(v: &Vec<u8>, p: &mut Vec<u8>) {
        p.extend_from_slice(v);
    }
    fn get(c: &mut Cursor, _: &'static str) -> Result<Vec<u8>, ProtoError> {
        let head = c.take(PDU_MIN_LEN)?;
        Ok([head, c.rest()].concat())
    }
}

/// The length a command's decoder expects, in words, for the error on bytes after its fields:
/// `after_last!(a, b)` is "nothing after b", and a command without parameters expects 0 bytes.
macro_rules! after_last {
    () => {
        "0"
    };
    ($f:tt) => {
        concat!("nothing after ", stringify!($f))
    };
    ($f:tt, $($rest:tt),+) => {
        after_last!($($rest),+)
    };
}

/// Generates `Command::{funcode, encode_params, decode}` from the table below.
///
/// A row is `CODE => Value`, where `CODE` names a `reg` constant and `Value` is written the way
/// the variant is built: `Unit`, `Variant { fields }`, `Variant(Struct { fields })` or
/// `Variant(name: Codec)`. A field is `name: Codec`; fields whose bytes cannot be told apart one
/// by one share a codec as a group, `(a, b): Codec`, whose value is the tuple `(a, b)`.
macro_rules! commands {
    // Each row is first rewritten to `{ CODE, Variant, [value], [fields] }`, where `value` is the
    // variant with every field bound by name: a pattern when encoding, a constructor when
    // decoding. In a field list, `$(($($g),+))? $($n)?` is the field's name: a group `(a, b)` or
    // a single name; `value` lists the group's names one by one.
    (@rows [$($row:tt)*]) => {
        commands!(@emit $($row)*);
    };
    (@rows [$($row:tt)*] $code:ident => $v:ident, $($rest:tt)*) => {
        commands!(@rows [$($row)* { $code, $v, [$v], [] }] $($rest)*);
    };
    (@rows [$($row:tt)*]
        $code:ident => $v:ident { $( $(($($g:ident),+))? $($n:ident)? : $t:ty ),* $(,)? },
        $($rest:tt)*
    ) => {
        commands!(@rows [$($row)* {
            $code, $v,
            [$v { $( $($($g,)+)? $($n,)? )* }],
            [$( $(($($g),+))? $($n)? : $t ),*]
        }] $($rest)*);
    };
    (@rows [$($row:tt)*]
        $code:ident => $v:ident($s:ident { $( $(($($g:ident),+))? $($n:ident)? : $t:ty ),* $(,)? }),
        $($rest:tt)*
    ) => {
        commands!(@rows [$($row)* {
            $code, $v,
            [$v($s { $( $($($g,)+)? $($n,)? )* })],
            [$( $(($($g),+))? $($n)? : $t ),*]
        }] $($rest)*);
    };
    (@rows [$($row:tt)*] $code:ident => $v:ident($n:ident : $t:ty), $($rest:tt)*) => {
        commands!(@rows [$($row)* {
            $code, $v, [$v($n)], [$n: $t]
        }] $($rest)*);
    };
    (@emit $({
        $code:ident, $v:ident, [$($value:tt)*],
        [$( $(($($g:ident),+))? $($n:ident)? : $t:ty ),*]
    })*) => {
        impl Command {
            /// The register this command is sent to.
            pub(crate) fn funcode(&self) -> u8 {
                match self {
                    $( Command::$v { .. } => reg::$code, )*
                }
            }

            /// The parameter bytes after the funcode. A group's fields are copied into the tuple
            /// its codec writes.
            pub(crate) fn encode_params(&self) -> Vec<u8> {
                let mut p = Vec::new();
                match self {
                    $( Command::$($value)* => {
                        $( <$t as Wire>::put($( &($(*$g),+) )? $($n)?, &mut p); )*
                    } )*
                }
                p
            }

            /// The command a request with `funcode` and `params` carries. Every field must be
            /// there and valid, and nothing may follow the last one.
            pub(crate) fn decode(funcode: u8, params: &[u8]) -> Result<Command, ProtoError> {
                let mut c = Cursor::new(params, "command parameters");
                match funcode {
                    $( reg::$code => {
                        $(
                            let $(($($g),+))? $($n)? = read_field::<$t>(
                                &mut c,
                                concat!(
                                    stringify!($code), " parameters at ",
                                    stringify!($(($($g),+))? $($n)?)
                                ),
                                concat!(stringify!($code), " ", stringify!($(($($g),+))? $($n)?)),
                            )?;
                        )*
                        finish(
                            &c,
                            concat!(stringify!($code), " parameters"),
                            after_last!($( $(($($g),+))? $($n)? ),*),
                        )?;
                        Ok(Command::$($value)*)
                    } )*
                    other => Err(ProtoError::UnknownFuncode(other)),
                }
            }
        }
    };
    ($($rows:tt)*) => {
        commands!(@rows [] $($rows)*);
    };
}

// ---------------------------------------------------------------------------------------------
// The command table
//
// Each command is described once, below: its funcode, its `Command` value, and its parameters in
// wire order with the codec of each. `funcode`, `encode_params` and `decode` are generated from
// that description, so the client's encoder and the emulator's decoder cannot disagree on a
// field's place, width or byte order, and the lengths a decoder accepts follow from the fields.
// Layouts: the SDK's `xarm/core/wrapper/uxbus_cmd.py` (one method per register) and UFACTORY
// `private_tcp_protocol/*.md`.

commands! {
    GET_VERSION => GetVersion,
    GET_ROBOT_SN => GetRobotSn,
    MOTION_EN => MotionEnable { axis: u8, enable: bool },
    SET_STATE => SetState(state: u8),
    GET_STATE => GetState,
    GET_CMDNUM => GetCmdnum,
    GET_ERROR => GetError,
    CLEAN_ERR => CleanError,
    CLEAN_WAR => CleanWarn,
    // The detection byte is absent in the 1-byte form of firmware < 1.10.0.
    SET_MODE => SetMode { mode: u8, detection: Option<u8> },
    MOVE_LINE => MoveLine(MoveLine {
        pose: [f32; 6],
        speed: f32,
        acc: f32,
        mvtime: f32,
        (common, only_check, motion_type): LineTail,
    }),
    MOVE_JOINT => MoveJoint(MoveJoint {
        joints: [f32; 7],
        speed: f32,
        acc: f32,
        mvtime: f32,
        only_check: Option<u8>,
    }),
    MOVE_HOME => MoveHome(MoveHome { speed: f32, acc: f32, mvtime: f32, only_check: Option<u8> }),
    MOVE_SERVOJ => ServoJoint(ServoJoint { joints: [f32; 7], speed: f32, acc: f32, mvtime: f32 }),
    MOVE_SERVO_CART => ServoCartesian(ServoCartesian {
        pose: [f32; 6],
        speed: f32,
        acc: f32,
        coord: CoordF32,
    }),
    SET_TCP_OFFSET => SetTcpOffset(offset: [f32; 6]),
    SET_LOAD_PARAM => SetLoad { mass: f32, com: [f32; 3] },
    GET_TCP_POSE => GetTcpPose,
    GET_JOINT_POS => GetJointPos,
    MOVE_RELATIVE => MoveRelative(MoveRelative {
        offset: [f32; 7],
        speed: f32,
        acc: f32,
        mvtime: f32,
        radius: f32,
        joint: bool,
        axis_angle: bool,
        (only_check, motion_type): TrailingPair,
    }),
    RS485_RTU => Rs485 { host: u8, pdu: Pdu },
    TGPIO_W16B => TgpioWrite16 { host: u8, addr: u16, value: f32, extra: Vec<u8> },
    TGPIO_R16B => TgpioRead16 { host: u8, addr: u16 },
    SET_FEEDBACK_TYPE => SetFeedbackType(kinds: u8),
}
