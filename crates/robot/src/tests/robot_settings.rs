//! Driver settings (`robot-configs/<robot>/driver.toml`, `crate::settings`): the shipped
//! files carry the protocol facts of their primary sources (cited per value in each file),
//! hand-edit mistakes are refused with messages that name the file and the key, and the kinematic
//! `robot.toml` files are untouched by the split.

use std::f64::consts::PI;
use std::path::{Path, PathBuf};

use crate::settings::{self, DriverKind, DriverSettings, DynamixelGripperMode, SettingsError};
use pointact_core::kinematics::{RobotConfig, RobotModel, BUILTIN_ROBOTS};

fn manifest(p: &str) -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join(p)
}

fn shipped_text(robot: &str) -> String {
    std::fs::read_to_string(manifest(&format!("robot-configs/{robot}/driver.toml"))).unwrap()
}

/// The shipped file of `robot` with `from` (which must occur exactly once) replaced by `to`.
fn edited(robot: &str, from: &str, to: &str) -> String {
    let text = shipped_text(robot);
    assert_eq!(
        text.matches(from).count(),
        1,
        "`{from}` not unique in {robot}"
    );
    text.replacen(from, to, 1)
}

const FILE: &str = "edited/driver.toml";

fn parse_err(text: &str) -> String {
    match DriverSettings::from_toml_str(text, FILE) {
        Ok(s) => panic!("accepted: {s:?}"),
        Err(e) => e.to_string(),
    }
}

/// A field error for `field`, whose message names the file and the field.
fn field_err(text: &str, field: &str) -> String {
    let err = DriverSettings::from_toml_str(text, FILE).unwrap_err();
    match &err {
        SettingsError::Field { file, field: f, .. } => {
            assert_eq!(file, FILE);
            assert_eq!(f, field, "{err}");
        }
        other => panic!("expected a field error for `{field}`, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains(FILE) && msg.contains(field), "{msg}");
    msg
}

/// A file under the temporary folder that removes itself.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, text: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "pointact-robot-settings-{}-{name}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("driver.toml");
        std::fs::write(&path, text).unwrap();
        TempFile(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.0.parent().unwrap());
    }
}

#[test]
fn xarm6_driver_toml_carries_the_reference_values() {
    let s = settings::load_for(&manifest("robot-configs/xarm6")).unwrap();
    assert_eq!(s.kind(), DriverKind::Xarm);
    assert_eq!(
        s,
        settings::builtin("xarm6").unwrap(),
        "built-in copy differs"
    );
    let x = s.as_xarm().unwrap();
    let n = &x.network;
    // xArm-Python-SDK v1.18.4 `XCONF.SocketConf`: 502 command socket (TCP_CONTROL_PORT), 30000
    // real-time report (TCP_REPORT_RT_PORT, 250 Hz), 30002 rich report (TCP_REPORT_RICH_PORT, SDK
    // default).
    assert_eq!(n.command_port, 502);
    assert_eq!(n.realtime_report_port, 30000);
    assert_eq!(n.state_report_port, 30002);
    // No source gives an address; the shipped default is loopback (emulator, never a real arm).
    assert_eq!(n.address, "127.0.0.1");
    // SDK sockets use a 1 s timeout (`socket_port.py`); set/get 2 s (`XCONF.UxbusConf`), motion_en
    // >= 5 s (`uxbus_cmd.py`).
    assert_eq!(n.connect_timeout_s, 1.0);
    assert_eq!(n.command_timeout_s, 2.0);
    assert_eq!(n.motion_enable_timeout_s, 5.0);
    assert_eq!(n.report_timeout_s, 1.0);
    assert_eq!(n.command_timeout(), std::time::Duration::from_secs(2));
    // Register 124: host 9 = robot tool RS-485 (`XCONF.ROBOT_RS485_HOST_ID`). Gripper = Modbus
    // slave 8 (`XCONF.GRIPPER_ID`), tool bus 2 Mbps (baud index 11, `checkset_modbus_baud`),
    // position 850 = open .. 0 = closed (xarm_ros2 `xarm_driver.cpp`), example speed 5000 r/min
    // (`5004-set_gripper.py`).
    let g = &x.gripper;
    assert_eq!(g.rs485_host, 9);
    assert_eq!(g.slave_id, 8);
    assert_eq!(g.baud, 2_000_000);
    assert_eq!(g.baud_index(), Some(11));
    assert_eq!((g.closed_position, g.open_position), (0, 850));
    assert_eq!(g.speed_rpm, 5000);
    // SDK defaults (`xarm/x3/base.py`): TCP 100 mm/s, 2000 mm/s², joints 20°/s and 8.727 rad/s².
    let m = &x.motion;
    assert_eq!(m.tcp_speed, 0.1);
    assert_eq!(m.tcp_acceleration, 2.0);
    assert!((m.joint_speed - 20f64.to_radians()).abs() < 1e-12);
    assert!((m.joint_acceleration - 8.727).abs() < 1e-3);
    // UFACTORY Studio default: xArm Gripper payload 0.82 kg at (0, 0, 48) mm.
    assert_eq!(x.payload.mass_kg, 0.82);
    assert_eq!(x.payload.center_of_mass, [0.0, 0.0, 0.048]);
}

#[test]
fn widowx250_driver_toml_carries_the_reference_values() {
    let s = settings::load_for(&manifest("robot-configs/widowx250")).unwrap();
    assert_eq!(s.kind(), DriverKind::Dynamixel);
    assert_eq!(
        s,
        settings::builtin("widowx250").unwrap(),
        "built-in copy differs"
    );
    let d = s.as_dynamixel().unwrap();
    // Protocol 2.0 at 1 Mbps on the U2D2, /dev/ttyDXL (interbotix_xs_sdk `xs_sdk_obj.h` BAUDRATE
    // 1000000, PORT).
    assert_eq!(d.bus.serial_port, "/dev/ttyDXL");
    assert_eq!(d.bus.baud, 1_000_000);
    assert_eq!(d.bus.protocol, 2);
    // 4096 ticks/rev, 2048 = 0 rad (ROBOTIS e-Manual, X-series Present Position).
    assert_eq!(d.position.ticks_per_revolution, 4096);
    assert_eq!(d.position.center_ticks, 2048);
    assert_eq!(d.position.radians(2048), 0.0);
    assert!((d.position.radians(3072) - PI / 2.0).abs() < 1e-12);
    assert!((d.position.radians(0) + PI).abs() < 1e-12);
    assert_eq!(d.position.ticks(0.0), 2048);
    assert_eq!(d.position.ticks(-PI / 2.0), 1024);
    // Trossen `servos_wx250s.csv` and `wx250s.yaml`: waist 1, shoulder 2 (+3 shadow), elbow 4
    // (+5 shadow), forearm_roll 6, wrist_angle 7 (Drive_Mode 1), wrist_rotate 8, gripper 9.
    let table: Vec<(&str, u8, Option<u8>, bool)> = d
        .joints
        .iter()
        .map(|j| (j.name.as_str(), j.id, j.shadow_id, j.reversed))
        .collect();
    assert_eq!(
        table,
        [
            ("waist", 1, None, false),
            ("shoulder", 2, Some(3), false),
            ("elbow", 4, Some(5), false),
            ("forearm_roll", 6, None, false),
            ("wrist_angle", 7, None, true),
            ("wrist_rotate", 8, None, false),
        ]
    );
    assert_eq!(d.gripper.id, 9);
    assert_eq!(d.gripper.mode, DynamixelGripperMode::Pwm);
    let mut ids = d.servo_ids();
    ids.sort();
    assert_eq!(ids, (1..=9).collect::<Vec<u8>>(), "servo IDs 1-9 (Trossen)");
}

#[test]
fn shipped_settings_fit_their_robot_models() {
    for (robot, _, _) in BUILTIN_ROBOTS {
        let model = RobotModel::builtin(robot).unwrap();
        settings::builtin(robot)
            .unwrap()
            .check_model(&model.config)
            .unwrap_or_else(|e| panic!("{robot}: {e}"));
    }
    // Joints in another order than robot.toml's arm_joints are refused.
    let model = RobotModel::builtin("widowx250").unwrap();
    let text = edited("widowx250", "name = \"waist\"", "name = \"waistx\"");
    let s = DriverSettings::from_toml_str(&text, FILE).unwrap();
    let msg = s.check_model(&model.config).unwrap_err().to_string();
    assert!(
        msg.contains("waistx") && msg.contains("arm_joints"),
        "{msg}"
    );
    // A robot.toml gripper range beyond the gripper's 0..850 pulses is refused.
    let mut cfg = RobotModel::builtin("xarm6").unwrap().config.clone();
    cfg.gripper.open_units = 900.0;
    let msg = settings::builtin("xarm6")
        .unwrap()
        .check_model(&cfg)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("open_units") && msg.contains("850"), "{msg}");
    assert!(settings::builtin("ur5").is_err());
}

#[test]
fn unknown_field_is_refused_naming_it_and_the_file() {
    for (robot, anchor) in [("xarm6", "[network]\n"), ("widowx250", "[bus]\n")] {
        let file = TempFile::new(
            &format!("unknown-{robot}"),
            &edited(robot, anchor, &format!("{anchor}baud_rate_typo = 5\n")),
        );
        let err = settings::load(&file.0).unwrap_err();
        assert!(matches!(err, SettingsError::Toml { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains("unknown field `baud_rate_typo`"), "{msg}");
        assert!(msg.contains(&file.0.display().to_string()), "{msg}");
        assert!(msg.contains("line "), "the parser's line is kept: {msg}");
    }
    // Unknown top-level keys and tables too.
    let msg = parse_err(&format!("{}\n[extra]\nx = 1\n", shipped_text("xarm6")));
    assert!(
        msg.contains("unknown field `extra`") && msg.contains(FILE),
        "{msg}"
    );
    // An unknown driver.
    let msg = parse_err(&edited("xarm6", "driver = \"xarm\"", "driver = \"ur5\""));
    assert!(
        msg.contains("unknown variant `ur5`") && msg.contains(FILE),
        "{msg}"
    );
}

#[test]
fn missing_required_field_is_refused() {
    let msg = parse_err(&edited("xarm6", "command_port = 502\n", ""));
    assert!(msg.contains("missing field `command_port`"), "{msg}");
    assert!(msg.contains(FILE), "{msg}");
    let msg = parse_err(&edited("widowx250", "ticks_per_revolution = 4096\n", ""));
    assert!(
        msg.contains("missing field `ticks_per_revolution`"),
        "{msg}"
    );
    let msg = parse_err(&edited("xarm6", "driver = \"xarm\"\n", ""));
    assert!(
        msg.contains("missing field `driver`") && msg.contains(FILE),
        "{msg}"
    );
    // A whole table missing.
    let text = shipped_text("xarm6");
    let cut = text.find("[payload]").unwrap();
    let msg = parse_err(&text[..cut]);
    assert!(msg.contains("missing field `payload`"), "{msg}");
}

#[test]
fn zero_out_of_range_and_duplicate_ports_are_refused() {
    let msg = field_err(
        &edited("xarm6", "command_port = 502", "command_port = 0"),
        "network.command_port",
    );
    assert!(msg.contains("port 0"), "{msg}");
    field_err(
        &edited(
            "xarm6",
            "realtime_report_port = 30000",
            "realtime_report_port = 0",
        ),
        "network.realtime_report_port",
    );
    // Beyond u16: the parser refuses it at the line.
    let msg = parse_err(&edited(
        "xarm6",
        "command_port = 502",
        "command_port = 70000",
    ));
    assert!(msg.contains("70000") && msg.contains(FILE), "{msg}");
    let msg = field_err(
        &edited(
            "xarm6",
            "state_report_port = 30002",
            "state_report_port = 30000",
        ),
        "network.state_report_port",
    );
    assert!(msg.contains("network.realtime_report_port"), "{msg}");
}

#[test]
fn negative_nan_and_millisecond_timeouts_are_refused() {
    for (from, to, field) in [
        (
            "command_timeout_s = 2.0",
            "command_timeout_s = -1.0",
            "network.command_timeout_s",
        ),
        (
            "report_timeout_s = 1.0",
            "report_timeout_s = nan",
            "network.report_timeout_s",
        ),
        (
            "connect_timeout_s = 1.0",
            "connect_timeout_s = 0.0",
            "network.connect_timeout_s",
        ),
        (
            "motion_timeout_s = 5.0",
            "motion_timeout_s = inf",
            "gripper.motion_timeout_s",
        ),
    ] {
        let msg = field_err(&edited("xarm6", from, to), field);
        assert!(msg.contains("positive finite"), "{msg}");
    }
    let msg = field_err(
        &edited(
            "xarm6",
            "command_timeout_s = 2.0",
            "command_timeout_s = 2000",
        ),
        "network.command_timeout_s",
    );
    assert!(msg.contains("milliseconds"), "{msg}");
    field_err(
        &edited("widowx250", "timeout_s = 0.05", "timeout_s = -nan"),
        "bus.timeout_s",
    );
}

#[test]
fn address_must_be_an_ip_or_a_hostname() {
    for good in [
        "192.168.1.185",
        "::1",
        "fe80::1",
        "xarm.local",
        "control-box",
        "xarm.lab.",
    ] {
        let text = edited(
            "xarm6",
            "address = \"127.0.0.1\"",
            &format!("address = \"{good}\""),
        );
        DriverSettings::from_toml_str(&text, FILE).unwrap_or_else(|e| panic!("{good}: {e}"));
    }
    for (bad, hint) in [
        ("192.168.1.185:502", "host:port"),
        ("192.168.1.300", "IPv4"),
        ("", "empty"),
        ("0.0.0.0", "unspecified"),
        ("my robot", "hostname"),
        ("-xarm", "hostname"),
        ("http://xarm", "hostname"),
    ] {
        let text = edited(
            "xarm6",
            "address = \"127.0.0.1\"",
            &format!("address = \"{bad}\""),
        );
        let msg = field_err(&text, "network.address");
        assert!(msg.contains(hint), "{bad}: {msg}");
    }
}

#[test]
fn bad_protocol_values_are_refused() {
    // xArm: tunnel host, slave id, a baud the controller cannot set, gripper range, speeds above
    // the hardware limits of the UFACTORY docs (`p04robot-specifications.md`).
    field_err(
        &edited("xarm6", "rs485_host = 9", "rs485_host = 10"),
        "gripper.rs485_host",
    );
    field_err(
        &edited("xarm6", "slave_id = 8", "slave_id = 0"),
        "gripper.slave_id",
    );
    field_err(
        &edited("xarm6", "baud = 2000000", "baud = 2000001"),
        "gripper.baud",
    );
    field_err(
        &edited("xarm6", "closed_position = 0", "closed_position = 900"),
        "gripper.closed_position/open_position",
    );
    let msg = field_err(
        &edited("xarm6", "tcp_speed = 0.1", "tcp_speed = 100.0"),
        "motion.tcp_speed",
    );
    assert!(msg.contains("hardware limit"), "{msg}");
    field_err(
        &edited(
            "xarm6",
            "joint_speed = 0.3490658503988659",
            "joint_speed = 4.0",
        ),
        "motion.joint_speed",
    );
    field_err(
        &edited("xarm6", "mass_kg = 0.82", "mass_kg = -0.82"),
        "payload.mass_kg",
    );
    // Dynamixel: ids used twice or out of range, a baud the servos do not offer, protocol 1.0,
    // a centre outside the revolution, an empty device path.
    let msg = field_err(
        &edited("widowx250", "shadow_id = 5", "shadow_id = 3"),
        "joints[2].shadow_id",
    );
    assert!(msg.contains("twice"), "{msg}");
    field_err(&edited("widowx250", "id = 9", "id = 254"), "gripper.id");
    field_err(
        &edited("widowx250", "baud = 1000000", "baud = 1000001"),
        "bus.baud",
    );
    field_err(
        &edited("widowx250", "protocol = 2", "protocol = 1"),
        "bus.protocol",
    );
    field_err(
        &edited("widowx250", "center_ticks = 2048", "center_ticks = 4096"),
        "position.center_ticks",
    );
    field_err(
        &edited(
            "widowx250",
            "serial_port = \"/dev/ttyDXL\"",
            "serial_port = \"\"",
        ),
        "bus.serial_port",
    );
    let msg = field_err(
        &edited("widowx250", "name = \"elbow\"", "name = \"shoulder\""),
        "joints[2].name",
    );
    assert!(msg.contains("twice"), "{msg}");
    // An unknown gripper mode is a parse error at its line.
    let msg = parse_err(&edited("widowx250", "mode = \"pwm\"", "mode = \"torque\""));
    assert!(msg.contains("unknown variant `torque`"), "{msg}");
}

#[test]
fn kinematics_robot_toml_is_unchanged_and_still_parses() {
    for (robot, builtin_toml, _) in BUILTIN_ROBOTS {
        let dir = manifest(&format!("robot-configs/{robot}"));
        // The file on disk is the one compiled into the binary, and both load as before.
        let on_disk = std::fs::read_to_string(dir.join("robot.toml")).unwrap();
        assert_eq!(&on_disk, builtin_toml, "{robot}");
        let from_dir = RobotModel::load_dir(&dir).unwrap();
        let builtin = RobotModel::builtin(robot).unwrap();
        assert_eq!(from_dir.config, builtin.config);
        assert_eq!(from_dir.config.name, *robot);
        // robot.toml holds no driver keys, and would refuse them: that is why driver.toml exists.
        assert!(
            !on_disk.contains("driver"),
            "{robot}: robot.toml mentions a driver"
        );
        let err =
            RobotConfig::from_toml_str(&format!("driver = \"xarm\"\n{on_disk}"), "robot.toml")
                .unwrap_err()
                .to_string();
        assert!(err.contains("unknown field `driver`"), "{err}");
        // Conversely driver.toml is not a robot description.
        assert!(RobotConfig::from_toml_str(&shipped_text(robot), "driver.toml").is_err());
    }
}

#[test]
fn an_installation_states_its_table_height_or_leaves_it_to_the_camera() {
    for robot in ["xarm6", "widowx250"] {
        let shipped = DriverSettings::from_toml_str(&shipped_text(robot), FILE).unwrap();
        assert_eq!(shipped.table_z(), None, "{robot}: the camera's table");
        // A top-level key, before the first table.
        let stated = format!("table_z = -0.05\n{}", shipped_text(robot));
        let s = DriverSettings::from_toml_str(&stated, FILE).unwrap();
        assert_eq!(s.table_z(), Some(-0.05), "{robot}");
        let far = format!("table_z = 5.0\n{}", shipped_text(robot));
        let msg = field_err(&far, "table_z");
        assert!(msg.contains("[-1, 1]"), "{msg}");
    }
}
