//! `driver.toml`: how to reach and drive a robot (network address, ports, timeouts, serial bus, servo
//! ids, gripper units), kept apart from `robot.toml`.
//!
//! Why a second file: `robot.toml` describes the robot (kinematics, limits, workspace) and is the
//! same for every unit of a model, while these settings describe one installation (this controller's
//! address, that USB adapter's device path) and change when the robot moves to another bench.
//! `robot.toml` is also parsed with `deny_unknown_fields`, so driver keys could not live in it
//! anyway. The file is parsed just as strictly: an unknown or misspelt key is an error (a typo in a
//! timeout must not silently fall back to a default), and every error names the file and the key.
//!
//! The shipped values come from primary sources (xArm-Python-SDK v1.18.4 and the UFACTORY docs for
//! the xArm controller, its gripper and speeds; Interbotix's SDK and configs, Trossen's
//! specifications and the ROBOTIS e-Manual for the WidowX Dynamixel bus);
//! `robot-configs/*/driver.toml` cite the source next to each value.

use std::collections::HashSet;
use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

use pointact_core::kinematics::RobotConfig;

/// Name of the settings file inside a robot folder (next to `robot.toml`).
pub(crate) const DRIVER_FILE: &str = "driver.toml";

/// Driver settings compiled into the binary, so `pointact` runs from any folder: (robot, driver.toml).
/// The robot names are those of `kinematics::BUILTIN_ROBOTS`.
pub const BUILTIN_DRIVERS: &[(&str, &str)] = &[
    (
        "xarm6",
        include_str!("../../../robot-configs/xarm6/driver.toml"),
    ),
    (
        "widowx250",
        include_str!("../../../robot-configs/widowx250/driver.toml"),
    ),
];

/// Longest timeout accepted (s). Nothing in either protocol waits this long; a larger number is
/// almost always milliseconds written into a seconds field, and would also leave the arm unwatched.
pub(crate) const MAX_TIMEOUT_S: f64 = 60.0;

/// Errors name the file and the key at fault: the usual cause is a hand-edited file.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// The settings file could not be read (missing, unreadable).
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file that was asked for.
        path: PathBuf,
        /// Why reading it failed.
        #[source]
        source: std::io::Error,
    },
    /// Syntax errors, unknown keys, missing keys and wrong types, as reported by the TOML parser
    /// (which shows the line and the key).
    #[error("{file}: {detail}")]
    Toml {
        /// The file (or built-in settings) being parsed.
        file: String,
        /// The parser's message.
        detail: String,
    },
    /// A value that parses but is not acceptable (zero port, non-finite timeout, bad address...).
    #[error("{file}: field `{field}`: {detail}")]
    Field {
        /// The file (or built-in settings) being checked.
        file: String,
        /// The dotted key of the value (`network.command_port`).
        field: String,
        /// What is wrong with it.
        detail: String,
    },
    /// The settings disagree with the robot description they are used with.
    #[error("driver settings do not fit robot `{robot}`: {detail}")]
    ModelMismatch {
        /// The robot's name in its `robot.toml`.
        robot: String,
        /// What disagrees.
        detail: String,
    },
    /// `builtin` was asked for a robot that has no driver settings compiled in.
    #[error("no built-in driver settings for robot `{name}`: built-in robots are {known}")]
    UnknownRobot {
        /// The name asked for.
        name: String,
        /// The built-in robot names, listed for the message.
        known: String,
    },
}

/// Which driver a `driver.toml` is for: the value of its `driver` key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DriverKind {
    /// UFACTORY xArm controller over TCP (its private protocol, as xArm-Python-SDK speaks it).
    Xarm,
    /// ROBOTIS Dynamixel servos on a serial bus, Protocol 2.0 (ROBOTIS e-Manual).
    Dynamixel,
}

impl fmt::Display for DriverKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DriverKind::Xarm => "xarm",
            DriverKind::Dynamixel => "dynamixel",
        })
    }
}

/// The settings of one robot's driver, chosen by the file's `driver = "xarm" | "dynamixel"` key.
#[derive(Debug, Clone, PartialEq)]
pub enum DriverSettings {
    /// `driver = "xarm"`: a UFACTORY xArm controller.
    Xarm(XarmSettings),
    /// `driver = "dynamixel"`: Dynamixel servos on a serial bus (WidowX 250).
    Dynamixel(DynamixelSettings),
}

// ---------------------------------------------------------------------------------------------
// xArm

/// UFACTORY xArm controller: TCP command socket, report streams, the xArm Gripper behind the tool
/// RS-485 port, and the payload the controller must be told about.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct XarmSettings {
    /// `[network]`: controller address, ports and timeouts.
    pub network: XarmNetwork,
    /// `[motion]`: speeds and accelerations of the motions the controller plans itself.
    pub motion: XarmMotion,
    /// `[gripper]`: the xArm Gripper on the tool RS-485 port.
    pub gripper: XarmGripper,
    /// `[payload]`: the tool's mass and centre of mass.
    pub payload: XarmPayload,
    /// `table_z` (optional, top level): see [`DriverSettings::table_z`].
    #[serde(default)]
    pub table_z: Option<f64>,
}

/// Where the controller is and how long to wait for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct XarmNetwork {
    /// IP address or hostname of the control box. Without a port: ports are the fields below.
    pub address: String,
    /// Command socket (private protocol). 502 on a real controller (xArm-Python-SDK
    /// `XCONF.SocketConf`); emulators run by an unprivileged user listen elsewhere because 502 is a
    /// privileged port (docs/references.md §3).
    pub command_port: u16,
    /// Real-time report stream (firmware >= 2.1.0): joint positions with controller timestamps at
    /// 250 Hz (UFACTORY `data-description-of-tcp-port.md`), the feedback for streamed (servo-mode)
    /// motion.
    pub realtime_report_port: u16,
    /// Slow (5 Hz) state report with error/warning codes and enable/brake bits, which the
    /// real-time layout does not list (the SDK's `xarm/x3/report.py`).
    pub state_report_port: u16,
    /// TCP connect timeout (s).
    pub connect_timeout_s: f64,
    /// How long one command may wait for its reply (s).
    pub command_timeout_s: f64,
    /// Enabling the motors answers slower than other commands (s).
    pub motion_enable_timeout_s: f64,
    /// Longest silence on a report stream before the driver treats the link as lost and stops (s).
    pub report_timeout_s: f64,
}

/// Speeds for motions the controller plans itself (MOVE_LINE 21 / MOVE_JOINT 23: going home,
/// recovery). Streamed trajectories carry their own timing, bounded by `robot.toml` `[limits]`.
/// SI units here; the driver converts to the controller's mm.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct XarmMotion {
    /// TCP speed (m/s).
    pub tcp_speed: f64,
    /// TCP acceleration (m/s²).
    pub tcp_acceleration: f64,
    /// Joint speed (rad/s).
    pub joint_speed: f64,
    /// Joint acceleration (rad/s²).
    pub joint_acceleration: f64,
}

/// Hardware ceilings of the xArm 6 (UFACTORY `private_tcp_protocol/p04robot-specifications.md`),
/// used to refuse settings the controller would clamp or reject: TCP speed 1 m/s, TCP
/// acceleration 50 m/s², joint speed 180°/s, joint acceleration 20 rad/s².
pub(crate) const XARM_MAX_TCP_SPEED: f64 = 1.0;
pub(crate) const XARM_MAX_TCP_ACCELERATION: f64 = 50.0;
pub(crate) const XARM_MAX_JOINT_SPEED: f64 = std::f64::consts::PI;
pub(crate) const XARM_MAX_JOINT_ACCELERATION: f64 = 20.0;

/// Baud rates the controller can set on its RS-485 buses: the list whose index the tool-baud
/// register 0x0A0B holds (xArm-Python-SDK v1.18.4 `UxbusCmd.BAUDRATES`: index 11 = 2 Mbps).
pub(crate) const XARM_RS485_BAUDS: [u32; 13] = [
    4800, 9600, 19200, 38400, 57600, 115200, 230400, 460800, 921600, 1000000, 1500000, 2000000,
    2500000,
];

/// The xArm Gripper, a Modbus-RTU slave behind the controller's RS-485 tunnel (register 124).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct XarmGripper {
    /// Tunnel host: 9 = the robot tool's RS-485 port, 11 = the control box's (register 124,
    /// UFACTORY `p16-rs485-control-on-the-end-effector-124-127.md`).
    pub rs485_host: u8,
    /// Modbus slave id of the gripper on that bus (the SDK's `XCONF.GRIPPER_ID`).
    pub slave_id: u8,
    /// Bus baud rate; the driver checks register 0x0A0B and re-bauds the tool board if it differs
    /// (as the SDK's `checkset_modbus_baud` does). One of `XARM_RS485_BAUDS`.
    pub baud: u32,
    /// Finger speed register 0x0303 (r/min).
    pub speed_rpm: u16,
    /// Position register value when fully open (pulses, register 0x0700).
    pub open_position: i32,
    /// Position register value when closed (pulses).
    pub closed_position: i32,
    /// Longest wait for a gripper move to finish (s).
    pub motion_timeout_s: f64,
}

impl XarmGripper {
    /// Index of `baud` in `XARM_RS485_BAUDS`, the value register 0x0A0B holds.
    pub(crate) fn baud_index(&self) -> Option<usize> {
        XARM_RS485_BAUDS.iter().position(|b| *b == self.baud)
    }
}

/// Tool payload, sent with SET_LOAD_PARAM (register 36) so the controller's collision detection
/// (error 31) and dynamics expect the gripper's weight instead of reading it as a collision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct XarmPayload {
    /// kg.
    pub mass_kg: f64,
    /// Centre of mass in the flange frame (m).
    pub center_of_mass: [f64; 3],
}

// ---------------------------------------------------------------------------------------------
// Dynamixel

/// Dynamixel servos on one serial bus (WidowX 250: a ROBOTIS U2D2 adapter, Protocol 2.0).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DynamixelSettings {
    /// `[bus]`: serial port, baud rate, protocol and timeout.
    pub bus: DynamixelBus,
    /// `[position]`: how servo ticks map to joint angles.
    pub position: DynamixelPosition,
    /// One entry per arm joint, in `robot.toml` `arm_joints` order.
    pub joints: Vec<DynamixelJoint>,
    /// `[gripper]`: the gripper servo and its linkage.
    pub gripper: DynamixelGripper,
    /// `table_z` (optional, top level): see [`DriverSettings::table_z`].
    #[serde(default)]
    pub table_z: Option<f64>,
}

/// Baud rates an X-series servo can be set to (ROBOTIS e-Manual, XM430/XL430 control table
/// `Baud Rate` (8), values 0..7); the WidowX motors use value 3 = 1 Mbps (Interbotix
/// `wx250s.yaml`).
pub(crate) const DYNAMIXEL_BAUDS: [u32; 8] = [
    9600, 57600, 115200, 1000000, 2000000, 3000000, 4000000, 4500000,
];

/// Highest unicast servo id in Protocol 2.0 (254 is broadcast, 253 reserved).
pub(crate) const DYNAMIXEL_MAX_ID: u8 = 252;

/// The serial bus the servos share.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DynamixelBus {
    /// Serial device of the USB adapter (e.g. `/dev/ttyDXL`, `/dev/ttyUSB0`, `COM3`).
    pub serial_port: String,
    /// Must match the servos' configured baud rate; one of `DYNAMIXEL_BAUDS`.
    pub baud: u32,
    /// Dynamixel protocol version. Only 2 (Protocol 2.0) is accepted: 1.0 packets differ
    /// (header, checksum) and the WidowX servos speak 2.0 (Interbotix `interbotix_xs_sdk`).
    pub protocol: u8,
    /// Longest wait for a status packet (s); after it the read counts as failed.
    pub timeout_s: f64,
}

/// How servo ticks map to joint angles: `angle = (ticks - center_ticks) * 2π / ticks_per_revolution`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DynamixelPosition {
    /// Position ticks per full turn of the servo (4096 on X-series servos).
    pub ticks_per_revolution: u32,
    /// Tick count at joint angle 0.
    pub center_ticks: u32,
}

impl DynamixelPosition {
    /// Joint angle (rad) for a Present Position reading.
    pub(crate) fn radians(&self, ticks: i32) -> f64 {
        (ticks as f64 - self.center_ticks as f64) * std::f64::consts::TAU
            / self.ticks_per_revolution as f64
    }

    /// Goal Position for a joint angle (rad), rounded to the nearest tick.
    pub(crate) fn ticks(&self, radians: f64) -> i32 {
        (self.center_ticks as f64
            + radians * self.ticks_per_revolution as f64 / std::f64::consts::TAU)
            .round() as i32
    }
}

/// One arm joint: its servo, and the follower servo that doubles its torque on the heavy joints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DynamixelJoint {
    /// Joint name, as in `robot.toml` `arm_joints` (checked by `DriverSettings::check_model`).
    pub name: String,
    /// Servo id.
    pub id: u8,
    /// Follower ("shadow") servo on the same joint, mounted mirrored: it runs reversed
    /// (Drive_Mode 1) with Secondary_ID = `id`, so it obeys every command sent to `id`. Absent
    /// when the joint has one servo.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow_id: Option<u8>,
    /// The primary servo is mounted so that positive ticks turn the joint negatively: its
    /// Drive_Mode reverse bit must be set (the driver verifies it at start-up); readings are then
    /// already in the joint's sense.
    pub reversed: bool,
}

/// How the gripper servo is driven.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DynamixelGripperMode {
    /// PWM ("pressure") mode: the fingers squeeze with a bounded effort and stall on the object.
    Pwm,
    /// Position mode: the fingers are driven to a goal position.
    Position,
}

/// The gripper servo and the linkage that turns its angle into finger travel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DynamixelGripper {
    /// Servo id.
    pub id: u8,
    /// Whether the fingers are driven by effort (PWM) or to a position.
    pub mode: DynamixelGripperMode,
    /// Radius of the servo horn that drives the finger linkage (m). With `arm_length` it maps the
    /// servo angle θ to a finger's position x = r·sin θ + √(L² − r²·cos² θ), the unit of
    /// `robot.toml` `[gripper]` `*_units`.
    pub horn_radius: f64,
    /// Length of the link between the horn and a finger carriage (m).
    pub arm_length: f64,
    /// Goal PWM magnitude in PWM mode (unit 0.113 %; the XL430 accepts up to its PWM Limit, 885):
    /// the squeeze on a held object, and the effort that moves the fingers.
    pub pwm: u16,
    /// Longest wait for a gripper move to finish (s).
    pub motion_timeout_s: f64,
}

impl DynamixelGripper {
    pub(crate) fn motion_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.motion_timeout_s)
    }
}

/// Largest Goal PWM of an X-series servo (PWM Limit's maximum, 885 = 100 %).
pub(crate) const DYNAMIXEL_MAX_PWM: u16 = 885;

// ---------------------------------------------------------------------------------------------
// Loading

/// First pass: only the `driver` key, so the second pass can parse the right struct directly from
/// the text and keep the parser's line-and-key error messages (an internally tagged serde enum
/// buffers the document and loses them).
#[derive(Deserialize)]
struct Probe {
    driver: DriverKind,
}

/// Second pass: the whole file. The `driver` key is already known; accept and drop it here.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct XarmFile {
    #[serde(rename = "driver")]
    _driver: IgnoredAny,
    network: XarmNetwork,
    motion: XarmMotion,
    gripper: XarmGripper,
    payload: XarmPayload,
    #[serde(default)]
    table_z: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DynamixelFile {
    #[serde(rename = "driver")]
    _driver: IgnoredAny,
    bus: DynamixelBus,
    position: DynamixelPosition,
    joints: Vec<DynamixelJoint>,
    gripper: DynamixelGripper,
    #[serde(default)]
    table_z: Option<f64>,
}

/// Reads and checks a `driver.toml`.
pub fn load(path: &Path) -> Result<DriverSettings, SettingsError> {
    let text = pointact_core::input::read_text(path, pointact_core::input::MAX_CONFIG_BYTES)
        .map_err(|source| SettingsError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    DriverSettings::from_toml_str(&text, &path.display().to_string())
}

/// Reads `<robot_dir>/driver.toml`, the driver settings next to a robot's `robot.toml`.
pub fn load_for(robot_dir: &Path) -> Result<DriverSettings, SettingsError> {
    load(&robot_dir.join(DRIVER_FILE))
}

/// The settings compiled into the binary for a built-in robot (`xarm6`, `widowx250`).
pub fn builtin(name: &str) -> Result<DriverSettings, SettingsError> {
    let (_, text) = BUILTIN_DRIVERS
        .iter()
        .find(|(n, _)| *n == name)
        .ok_or_else(|| SettingsError::UnknownRobot {
            name: name.to_string(),
            known: BUILTIN_DRIVERS
                .iter()
                .map(|(n, _)| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", "),
        })?;
    DriverSettings::from_toml_str(text, &format!("robot-configs/{name}/{DRIVER_FILE}"))
}

impl DriverSettings {
    /// Parses and validates the text of a `driver.toml`; `file` names it in errors.
    pub(crate) fn from_toml_str(text: &str, file: &str) -> Result<Self, SettingsError> {
        let toml_err = |e: toml::de::Error| SettingsError::Toml {
            file: file.to_string(),
            detail: e.to_string().trim_end().to_string(),
        };
        let probe: Probe = toml::from_str(text).map_err(toml_err)?;
        let settings = match probe.driver {
            DriverKind::Xarm => {
                let f: XarmFile = toml::from_str(text).map_err(toml_err)?;
                DriverSettings::Xarm(XarmSettings {
                    network: f.network,
                    motion: f.motion,
                    gripper: f.gripper,
                    payload: f.payload,
                    table_z: f.table_z,
                })
            }
            DriverKind::Dynamixel => {
                let f: DynamixelFile = toml::from_str(text).map_err(toml_err)?;
                DriverSettings::Dynamixel(DynamixelSettings {
                    bus: f.bus,
                    position: f.position,
                    joints: f.joints,
                    gripper: f.gripper,
                    table_z: f.table_z,
                })
            }
        };
        settings.validate(file)?;
        Ok(settings)
    }

    /// Which driver these settings are for.
    pub fn kind(&self) -> DriverKind {
        match self {
            DriverSettings::Xarm(_) => DriverKind::Xarm,
            DriverSettings::Dynamixel(_) => DriverKind::Dynamixel,
        }
    }

    /// The xArm settings, or `None` for another driver.
    pub fn as_xarm(&self) -> Option<&XarmSettings> {
        match self {
            DriverSettings::Xarm(s) => Some(s),
            DriverSettings::Dynamixel(_) => None,
        }
    }

    /// The Dynamixel settings, or `None` for another driver.
    pub fn as_dynamixel(&self) -> Option<&DynamixelSettings> {
        match self {
            DriverSettings::Dynamixel(s) => Some(s),
            DriverSettings::Xarm(_) => None,
        }
    }

    /// Checks every value that parsed; `file` names the source in errors.
    pub fn validate(&self, file: &str) -> Result<(), SettingsError> {
        let bad = |field: &str, detail: String| SettingsError::Field {
            file: file.to_string(),
            field: field.to_string(),
            detail,
        };
        if let Some(z) = self.table_z() {
            pointact_core::safety::check_table_z(z).map_err(|d| bad("table_z", d))?;
        }
        match self {
            DriverSettings::Xarm(s) => s.validate().map_err(|(f, d)| bad(&f, d)),
            DriverSettings::Dynamixel(s) => s.validate().map_err(|(f, d)| bad(&f, d)),
        }
    }

    /// The table top's height in the robot base frame (m) as measured at this installation (the
    /// optional top-level `table_z`): a run then refuses, before any motion, a camera that sees
    /// the table more than 3 cm from it. `--table-z` overrides it.
    pub fn table_z(&self) -> Option<f64> {
        match self {
            DriverSettings::Xarm(s) => s.table_z,
            DriverSettings::Dynamixel(s) => s.table_z,
        }
    }

    /// Checks that these settings can drive the robot `config` describes: the driver's joints are
    /// the model's arm joints in the same order (Dynamixel), and the gripper command range of
    /// `robot.toml` lies inside the range the gripper accepts (xArm).
    pub fn check_model(&self, config: &RobotConfig) -> Result<(), SettingsError> {
        let mismatch = |detail: String| SettingsError::ModelMismatch {
            robot: config.name.clone(),
            detail,
        };
        match self {
            DriverSettings::Xarm(s) => {
                let g = &s.gripper;
                let (lo, hi) = (g.closed_position as f64, g.open_position as f64);
                for (key, v) in [
                    ("closed_units", config.gripper.closed_units),
                    ("open_units", config.gripper.open_units),
                ] {
                    if !(lo..=hi).contains(&v) {
                        return Err(mismatch(format!(
                            "robot.toml gripper.{key} = {v} is outside the gripper's range \
                             [{lo}, {hi}] (driver.toml gripper.closed_position/open_position)"
                        )));
                    }
                }
            }
            DriverSettings::Dynamixel(s) => {
                let names: Vec<&str> = s.joints.iter().map(|j| j.name.as_str()).collect();
                if names != config.arm_joints {
                    return Err(mismatch(format!(
                        "driver.toml joints {names:?} differ from robot.toml arm_joints {:?} \
                         (same joints, same order)",
                        config.arm_joints
                    )));
                }
            }
        }
        Ok(())
    }
}

/// A validation failure: (field path, what is wrong).
type Invalid = (String, String);

fn invalid(field: &str, detail: impl Into<String>) -> Invalid {
    (field.to_string(), detail.into())
}

fn check_port(field: &str, port: u16) -> Result<(), Invalid> {
    if port == 0 {
        return Err(invalid(field, "port 0 is not a port (1..=65535)"));
    }
    Ok(())
}

fn check_timeout(field: &str, seconds: f64) -> Result<(), Invalid> {
    if !(seconds.is_finite() && seconds > 0.0) {
        return Err(invalid(
            field,
            format!("{seconds} is not a positive finite number of seconds"),
        ));
    }
    if seconds > MAX_TIMEOUT_S {
        return Err(invalid(
            field,
            format!("{seconds} s is longer than {MAX_TIMEOUT_S} s (seconds, not milliseconds?)"),
        ));
    }
    Ok(())
}

fn check_positive_at_most(field: &str, v: f64, max: f64, unit: &str) -> Result<(), Invalid> {
    if !(v.is_finite() && v > 0.0) {
        return Err(invalid(
            field,
            format!("{v} is not a positive finite number"),
        ));
    }
    if v > max {
        return Err(invalid(
            field,
            format!("{v} {unit} is above the hardware limit {max} {unit}"),
        ));
    }
    Ok(())
}

/// An IP address, or a hostname by RFC 1123 (labels of letters, digits and hyphens). A `host:port`
/// is refused with a hint: the ports are separate keys.
pub(crate) fn check_address(address: &str) -> Result<(), String> {
    if address.is_empty() {
        return Err("is empty".into());
    }
    if let Ok(ip) = address.parse::<IpAddr>() {
        if ip.is_unspecified() {
            return Err(format!("{address} is the unspecified address, not a host"));
        }
        return Ok(());
    }
    if let Some((host, port)) = address.rsplit_once(':') {
        if !host.contains(':') && port.parse::<u16>().is_ok() {
            return Err(format!(
                "`{address}` looks like host:port; give only the host here, the ports have their own keys"
            ));
        }
    }
    // Anything else with a colon (a URL, a mistyped IPv6) fails the hostname check below.
    let name = address.strip_suffix('.').unwrap_or(address);
    if name.len() > 253 {
        return Err("is longer than 253 characters".into());
    }
    let labels: Vec<&str> = name.split('.').collect();
    for label in &labels {
        let ok = !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-');
        if !ok {
            return Err(format!(
                "`{address}` is neither an IP address nor a hostname (labels of 1-63 letters, \
                 digits and inner hyphens, separated by dots)"
            ));
        }
    }
    if labels.iter().all(|l| l.bytes().all(|b| b.is_ascii_digit())) {
        return Err(format!("`{address}` is not a valid IPv4 address"));
    }
    Ok(())
}

impl XarmSettings {
    fn validate(&self) -> Result<(), Invalid> {
        let n = &self.network;
        check_address(&n.address).map_err(|d| invalid("network.address", d))?;
        let ports = [
            ("network.command_port", n.command_port),
            ("network.realtime_report_port", n.realtime_report_port),
            ("network.state_report_port", n.state_report_port),
        ];
        for (field, port) in ports {
            check_port(field, port)?;
        }
        for (i, (a, pa)) in ports.iter().enumerate() {
            if let Some((b, _)) = ports[i + 1..].iter().find(|(_, pb)| pb == pa) {
                return Err(invalid(
                    b,
                    format!("port {pa} is already `{a}`; each socket needs its own port"),
                ));
            }
        }
        for (field, t) in [
            ("network.connect_timeout_s", n.connect_timeout_s),
            ("network.command_timeout_s", n.command_timeout_s),
            ("network.motion_enable_timeout_s", n.motion_enable_timeout_s),
            ("network.report_timeout_s", n.report_timeout_s),
            ("gripper.motion_timeout_s", self.gripper.motion_timeout_s),
        ] {
            check_timeout(field, t)?;
        }

        let m = &self.motion;
        check_positive_at_most("motion.tcp_speed", m.tcp_speed, XARM_MAX_TCP_SPEED, "m/s")?;
        check_positive_at_most(
            "motion.tcp_acceleration",
            m.tcp_acceleration,
            XARM_MAX_TCP_ACCELERATION,
            "m/s²",
        )?;
        check_positive_at_most(
            "motion.joint_speed",
            m.joint_speed,
            XARM_MAX_JOINT_SPEED,
            "rad/s",
        )?;
        check_positive_at_most(
            "motion.joint_acceleration",
            m.joint_acceleration,
            XARM_MAX_JOINT_ACCELERATION,
            "rad/s²",
        )?;

        let g = &self.gripper;
        if ![9, 11].contains(&g.rs485_host) {
            return Err(invalid(
                "gripper.rs485_host",
                format!(
                    "{} is not an RS-485 tunnel host (9 = robot tool, 11 = control box)",
                    g.rs485_host
                ),
            ));
        }
        if !(1..=247).contains(&g.slave_id) {
            return Err(invalid(
                "gripper.slave_id",
                format!("{} is not a Modbus slave id (1..=247)", g.slave_id),
            ));
        }
        if g.baud_index().is_none() {
            return Err(invalid(
                "gripper.baud",
                format!(
                    "{} is not a baud rate the controller can set ({XARM_RS485_BAUDS:?})",
                    g.baud
                ),
            ));
        }
        if g.speed_rpm == 0 {
            return Err(invalid("gripper.speed_rpm", "0 r/min would never move"));
        }
        if g.closed_position < 0 || g.closed_position >= g.open_position {
            return Err(invalid(
                "gripper.closed_position/open_position",
                format!(
                    "need 0 <= closed_position < open_position, got {} and {}",
                    g.closed_position, g.open_position
                ),
            ));
        }

        let p = &self.payload;
        if !(p.mass_kg.is_finite() && p.mass_kg >= 0.0) {
            return Err(invalid(
                "payload.mass_kg",
                format!("{} is not a finite mass >= 0", p.mass_kg),
            ));
        }
        if !p.center_of_mass.iter().all(|x| x.is_finite()) {
            return Err(invalid("payload.center_of_mass", "must be finite"));
        }
        Ok(())
    }
}

impl XarmNetwork {
    pub(crate) fn connect_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.connect_timeout_s)
    }
    pub(crate) fn command_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.command_timeout_s)
    }
    pub(crate) fn motion_enable_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.motion_enable_timeout_s)
    }
    pub(crate) fn report_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.report_timeout_s)
    }
}

impl DynamixelSettings {
    fn validate(&self) -> Result<(), Invalid> {
        let b = &self.bus;
        let port = b.serial_port.as_str();
        if port.trim().is_empty() || port.trim() != port || port.contains('\0') {
            return Err(invalid(
                "bus.serial_port",
                format!("`{port}` is not a device path (empty, NUL or surrounding spaces)"),
            ));
        }
        if !DYNAMIXEL_BAUDS.contains(&b.baud) {
            return Err(invalid(
                "bus.baud",
                format!(
                    "{} is not a Dynamixel X-series baud rate ({DYNAMIXEL_BAUDS:?})",
                    b.baud
                ),
            ));
        }
        if b.protocol != 2 {
            return Err(invalid(
                "bus.protocol",
                format!("{} is not supported; only Protocol 2.0 (2) is", b.protocol),
            ));
        }
        check_timeout("bus.timeout_s", b.timeout_s)?;

        let p = &self.position;
        if p.ticks_per_revolution == 0 {
            return Err(invalid("position.ticks_per_revolution", "must be > 0"));
        }
        if p.center_ticks >= p.ticks_per_revolution {
            return Err(invalid(
                "position.center_ticks",
                format!(
                    "{} is not below ticks_per_revolution {}",
                    p.center_ticks, p.ticks_per_revolution
                ),
            ));
        }

        if self.joints.is_empty() {
            return Err(invalid("joints", "must list at least one joint"));
        }
        let mut ids: HashSet<u8> = HashSet::new();
        let mut names: HashSet<&str> = HashSet::new();
        let mut claim = |field: String, id: u8| -> Result<(), Invalid> {
            if id > DYNAMIXEL_MAX_ID {
                return Err((
                    field,
                    format!("{id} is not a servo id (0..={DYNAMIXEL_MAX_ID}; 254 is broadcast)"),
                ));
            }
            if !ids.insert(id) {
                return Err((field, format!("servo id {id} is used twice on the bus")));
            }
            Ok(())
        };
        for (i, j) in self.joints.iter().enumerate() {
            if j.name.is_empty() {
                return Err(invalid(&format!("joints[{i}].name"), "is empty"));
            }
            if !names.insert(&j.name) {
                return Err(invalid(
                    &format!("joints[{i}].name"),
                    format!("joint `{}` is listed twice", j.name),
                ));
            }
            claim(format!("joints[{i}].id"), j.id)?;
            if let Some(s) = j.shadow_id {
                claim(format!("joints[{i}].shadow_id"), s)?;
            }
        }
        claim("gripper.id".to_string(), self.gripper.id)?;
        let g = &self.gripper;
        for (field, v) in [
            ("gripper.horn_radius", g.horn_radius),
            ("gripper.arm_length", g.arm_length),
        ] {
            if !(v.is_finite() && v > 0.0 && v < 1.0) {
                return Err(invalid(
                    field,
                    format!("{v} is not a length in metres in (0, 1)"),
                ));
            }
        }
        if g.arm_length <= g.horn_radius {
            return Err(invalid(
                "gripper.arm_length",
                format!(
                    "{} must exceed horn_radius {} (the linkage could not reach every angle)",
                    g.arm_length, g.horn_radius
                ),
            ));
        }
        if g.pwm == 0 || g.pwm > DYNAMIXEL_MAX_PWM {
            return Err(invalid(
                "gripper.pwm",
                format!("{} is outside 1..={DYNAMIXEL_MAX_PWM}", g.pwm),
            ));
        }
        check_timeout("gripper.motion_timeout_s", g.motion_timeout_s)?;
        Ok(())
    }

    /// Every servo id on the bus: joints, their shadows, the gripper.
    pub fn servo_ids(&self) -> Vec<u8> {
        let mut ids = Vec::new();
        for j in &self.joints {
            ids.push(j.id);
            ids.extend(j.shadow_id);
        }
        ids.push(self.gripper.id);
        ids
    }
}

impl DynamixelBus {
    /// `timeout_s` as a `Duration`: the longest wait for each status packet.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs_f64(self.timeout_s)
    }
}

impl XarmGripper {
    pub(crate) fn motion_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.motion_timeout_s)
    }
}
