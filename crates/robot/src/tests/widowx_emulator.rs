//! The WidowX driver against the Dynamixel bus emulator over a real pseudo-terminal: connect,
//! read, a checked trajectory, the gripper, and the faults (hardware error on a shadow servo, a bus
//! that stops answering, corrupt and cut-off replies, servos set up unlike driver.toml).
//!
//! Everything here is verified against the emulator only (README, "WidowX 250").

use std::sync::Arc;
use std::time::Duration;

use crate::dynamixel::bus::Bus;
use crate::dynamixel::emulator::{Emulator, Fault};
use crate::dynamixel::proto::{hardware_error, table, ProtocolError, StatusError};
use crate::dynamixel::widowx::WidowX;
use crate::dynamixel::DynamixelError;
use crate::settings::{self, DynamixelGripperMode, DynamixelSettings};
use crate::{Robot, RobotError};
use pointact_core::kinematics::RobotModel;
use pointact_core::planning::{limit_tool_speed, JointPath, Trajectory};
use pointact_core::safety::{CheckedTrajectory, SafetyConfig, SafetyGate};

/// One tick of a 4096-tick servo (rad).
const TICK: f64 = std::f64::consts::TAU / 4096.0;

fn model() -> Arc<RobotModel> {
    Arc::new(RobotModel::builtin("widowx250").unwrap())
}

/// The shipped settings, pointed at the emulator. The bus timeout is raised from the shipped 50 ms
/// so a loaded test machine cannot turn scheduling delays into timeouts; the timeout tests still
/// see a silent bus fail within it.
fn settings_for(emulator: &Emulator) -> DynamixelSettings {
    let mut s = settings::builtin("widowx250")
        .unwrap()
        .as_dynamixel()
        .unwrap()
        .clone();
    s.bus.serial_port = emulator.path().display().to_string();
    s.bus.timeout_s = 0.5;
    s
}

fn shipped() -> DynamixelSettings {
    settings::builtin("widowx250")
        .unwrap()
        .as_dynamixel()
        .unwrap()
        .clone()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn emulator_at_home(settings: &DynamixelSettings) -> Emulator {
    let m = model();
    Emulator::start(settings, &m, m.home()).unwrap()
}

/// A joint-space move from `from` by `delta` on every joint, timed within robot.toml's limits and
/// passed through the safety gate the way the executor does.
fn checked_move(m: &RobotModel, from: &[f64], delta: &[f64]) -> CheckedTrajectory {
    let to: Vec<f64> = from.iter().zip(delta).map(|(a, d)| a + d).collect();
    let lim = &m.config.limits;
    let t = Trajectory::time_parameterize(
        JointPath {
            waypoints: vec![from.to_vec(), to],
        },
        &lim.joint_velocity,
        &lim.joint_acceleration,
    )
    .unwrap();
    let t = limit_tool_speed(t, m, lim.cartesian_speed).unwrap();
    SafetyGate::new(m, SafetyConfig::default())
        .check(t, from, 1.0, &[])
        .unwrap()
}

fn ids_of(s: &DynamixelSettings) -> (Vec<u8>, Vec<u8>) {
    let primaries = s.joints.iter().map(|j| j.id).collect();
    let shadows = s.joints.iter().filter_map(|j| j.shadow_id).collect();
    (primaries, shadows)
}

/// Every primary's goal equals its present position, and nothing moves any more: the arm is
/// stopped. (Read twice, a servo period apart.)
fn assert_stopped(emulator: &Emulator, s: &DynamixelSettings) {
    let (primaries, _) = ids_of(s);
    let before: Vec<i64> = primaries
        .iter()
        .map(|id| {
            emulator
                .state()
                .register(*id, table::PRESENT_POSITION)
                .unwrap()
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    for (id, was) in primaries.iter().zip(before) {
        let st = emulator.state();
        let present = st.register(*id, table::PRESENT_POSITION).unwrap();
        let goal = st.register(*id, table::GOAL_POSITION).unwrap();
        assert!(
            (goal - present).abs() <= 1,
            "servo {id}: goal {goal} but present {present}: not stopped"
        );
        assert!(
            (present - was).abs() <= 1,
            "servo {id} still moving: {was} -> {present}"
        );
    }
}

#[test]
fn connect_reads_the_pose_and_turns_torque_on_without_moving() {
    let s0 = shipped();
    let emulator = emulator_at_home(&s0);
    let s = settings_for(&emulator);
    let m = model();
    runtime().block_on(async {
        let mut w = WidowX::connect(&s, m.clone()).await.unwrap();
        let q = w.joint_positions().await.unwrap();
        for (a, b) in q.iter().zip(m.home()) {
            assert!((a - b).abs() <= TICK, "read {q:?}, home {:?}", m.home());
        }
        let width = w.gripper_width().await.unwrap();
        assert!(
            (width - m.config.gripper.open_width).abs() < 1e-3,
            "width {width}"
        );
    });
    let st = emulator.state();
    for id in s.servo_ids() {
        assert_eq!(
            st.register(id, table::TORQUE_ENABLE),
            Some(1),
            "servo {id} torque (shadows through their primary)"
        );
    }
    let (primaries, _) = ids_of(&s);
    for id in primaries {
        let goal = st.register(id, table::GOAL_POSITION).unwrap();
        let present = st.register(id, table::PRESENT_POSITION).unwrap();
        assert_eq!(
            goal, present,
            "servo {id}: connect must hold the present position"
        );
    }
}

#[test]
fn executes_a_checked_trajectory_and_reads_back_the_end() {
    let s0 = shipped();
    let emulator = emulator_at_home(&s0);
    let s = settings_for(&emulator);
    let m = model();
    let delta = [0.3, -0.1, 0.1, 0.2, -0.15, 0.4];
    let end = runtime().block_on(async {
        let mut w = WidowX::connect(&s, m.clone()).await.unwrap();
        let q0 = w.joint_positions().await.unwrap();
        let traj = checked_move(&m, &q0, &delta);
        let end = traj.trajectory().end().to_vec();
        w.execute(&traj).await.unwrap();
        let q = w.joint_positions().await.unwrap();
        for (j, (a, b)) in q.iter().zip(&end).enumerate() {
            assert!(
                (a - b).abs() <= 2.0 * TICK,
                "joint {j}: at {a}, trajectory ends at {b}"
            );
        }
        // The motion was observed while it ran: stamps increase, the first state is near the
        // start and the last at the end.
        let states = w.take_states();
        assert!(states.len() >= 3, "{} states", states.len());
        let stamps: Vec<f64> = states.iter().map(|st| st.stamp_s.unwrap()).collect();
        assert!(stamps.windows(2).all(|p| p[1] > p[0]), "{stamps:?}");
        assert!((states[0].q[5] - q0[5]).abs() < 0.4);
        assert!((states.last().unwrap().q[5] - end[5]).abs() <= 2.0 * TICK);
        assert!(w.take_states().is_empty());
        end
    });
    // The shadows sit with their primaries; only primaries got goals.
    let st = emulator.state();
    for j in &s.joints {
        let present = st.register(j.id, table::PRESENT_POSITION).unwrap();
        if let Some(sh) = j.shadow_id {
            assert_eq!(st.register(sh, table::PRESENT_POSITION), Some(present));
        }
    }
    let waist_goal = st.register(s.joints[0].id, table::GOAL_POSITION).unwrap();
    assert_eq!(waist_goal, s.position.ticks(end[0]) as i64);
}

#[test]
fn gripper_closes_opens_and_holds_an_object_in_pwm_mode() {
    let s0 = shipped();
    assert_eq!(s0.gripper.mode, DynamixelGripperMode::Pwm);
    let emulator = emulator_at_home(&s0);
    let s = settings_for(&emulator);
    let m = model();
    let gate_model = model();
    let gate = SafetyGate::new(&gate_model, SafetyConfig::default());
    let g = m.config.gripper;
    runtime().block_on(async {
        let mut w = WidowX::connect(&s, m.clone()).await.unwrap();
        w.set_gripper(gate.check_gripper(g.closed_width).unwrap())
            .await
            .unwrap();
        let closed = w.gripper_width().await.unwrap();
        assert!(closed < g.closed_width + 1e-3, "closed at {closed}");
        // At the end of travel the squeeze is released (nothing to hold).
        assert_eq!(
            emulator.state().register(s.gripper.id, table::GOAL_PWM),
            Some(0)
        );

        w.set_gripper(gate.check_gripper(g.open_width).unwrap())
            .await
            .unwrap();
        let open = w.gripper_width().await.unwrap();
        assert!(open > g.open_width - 1e-3, "opened to {open}");

        // A 20 mm object: closing stops early on it, and keeps squeezing.
        emulator.state().set_gripper_object(Some(0.02), &m);
        w.set_gripper(gate.check_gripper(g.closed_width).unwrap())
            .await
            .unwrap();
        let held = w.gripper_width().await.unwrap();
        assert!((held - 0.02).abs() < 1e-3, "held at {held}");
        let pwm = emulator
            .state()
            .register(s.gripper.id, table::GOAL_PWM)
            .unwrap();
        assert_eq!(
            pwm,
            -(s.gripper.pwm as i64),
            "the object must stay squeezed"
        );
    });
}

#[test]
fn gripper_in_position_mode_goes_to_the_commanded_width() {
    let mut s0 = shipped();
    s0.gripper.mode = DynamixelGripperMode::Position;
    let emulator = emulator_at_home(&s0);
    let mut s = settings_for(&emulator);
    s.gripper.mode = DynamixelGripperMode::Position;
    let m = model();
    let gate = SafetyGate::new(&m, SafetyConfig::default());
    runtime().block_on(async {
        let mut w = WidowX::connect(&s, m.clone()).await.unwrap();
        w.set_gripper(gate.check_gripper(0.015).unwrap())
            .await
            .unwrap();
        let width = w.gripper_width().await.unwrap();
        assert!((width - 0.015).abs() < 1e-3, "width {width}");
    });
    assert_eq!(
        emulator
            .state()
            .register(s.gripper.id, table::OPERATING_MODE),
        Some(table::MODE_POSITION as i64)
    );
}

#[test]
fn gripper_mode_is_switched_at_connect_when_it_differs() {
    // The servo is in position mode; driver.toml says PWM: connect switches it.
    let mut s0 = shipped();
    s0.gripper.mode = DynamixelGripperMode::Position;
    let emulator = emulator_at_home(&s0);
    let s = settings_for(&emulator);
    runtime().block_on(async {
        WidowX::connect(&s, model()).await.unwrap();
    });
    let st = emulator.state();
    assert_eq!(
        st.register(s.gripper.id, table::OPERATING_MODE),
        Some(table::MODE_PWM as i64)
    );
    assert_eq!(st.register(s.gripper.id, table::TORQUE_ENABLE), Some(1));
}

#[test]
fn hardware_error_on_a_shadow_mid_motion_names_the_joint_and_stops_the_arm() {
    let s0 = shipped();
    let emulator = emulator_at_home(&s0);
    let s = settings_for(&emulator);
    let m = model();
    let shoulder = s.joints.iter().find(|j| j.name == "shoulder").unwrap();
    let shadow = shoulder.shadow_id.unwrap();
    let err = std::thread::scope(|scope| {
        let em = &emulator;
        let (started, start) = std::sync::mpsc::channel::<()>();
        let injector = scope.spawn(move || {
            // Partway into the motion (which lasts well over a second), timed from its start so a
            // slow connect on a loaded machine cannot move the fault before it.
            start.recv().unwrap();
            std::thread::sleep(Duration::from_millis(300));
            assert!(em
                .state()
                .inject_hardware_error(shadow, hardware_error::OVERLOAD));
        });
        let err = runtime().block_on(async {
            let mut w = WidowX::connect(&s, m.clone()).await.unwrap();
            let q0 = w.joint_positions().await.unwrap();
            let traj = checked_move(&m, &q0, &[1.2, 0.0, 0.0, 0.0, 0.0, 0.0]);
            assert!(traj.trajectory().duration() > 1.0);
            started.send(()).unwrap();
            w.execute(&traj).await.unwrap_err()
        });
        injector.join().unwrap();
        err
    });
    match &err {
        RobotError::Dynamixel(DynamixelError::Hardware {
            joint,
            id,
            shadow: true,
            status,
        }) => {
            assert_eq!(joint, "shoulder");
            assert_eq!(*id, shadow);
            assert_eq!(*status, hardware_error::OVERLOAD);
        }
        other => panic!("expected a hardware error on the shoulder shadow, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("shoulder") && msg.contains("overload"),
        "{msg}"
    );
    // The waist was mid-way: it stopped short of the end, and holds.
    let st_waist = emulator
        .state()
        .register(s.joints[0].id, table::PRESENT_POSITION)
        .unwrap();
    let end = s.position.ticks(m.home()[0] + 1.2) as i64;
    assert!(st_waist < end - 50, "waist reached {st_waist}, end {end}");
    assert_stopped(&emulator, &s);
}

#[test]
fn hardware_error_present_at_connect_is_refused_naming_the_joint() {
    let s0 = shipped();
    let emulator = emulator_at_home(&s0);
    let s = settings_for(&emulator);
    emulator
        .state()
        .inject_hardware_error(7, hardware_error::OVERHEATING);
    let err = runtime().block_on(async { WidowX::connect(&s, model()).await.err().unwrap() });
    assert!(
        matches!(
            &err,
            RobotError::Dynamixel(DynamixelError::Hardware { joint, id: 7, shadow: false, status })
                if joint == "wrist_angle" && *status == hardware_error::OVERHEATING
        ),
        "{err:?}"
    );
}

#[test]
fn a_bus_that_stops_answering_times_out_and_the_arm_is_stopped() {
    let s0 = shipped();
    let emulator = emulator_at_home(&s0);
    let s = settings_for(&emulator);
    let m = model();
    let err = std::thread::scope(|scope| {
        let em = &emulator;
        let (started, start) = std::sync::mpsc::channel::<()>();
        let cutter = scope.spawn(move || {
            start.recv().unwrap();
            std::thread::sleep(Duration::from_millis(300));
            em.state().set_fault(Fault::Silent);
        });
        let err = runtime().block_on(async {
            let mut w = WidowX::connect(&s, m.clone()).await.unwrap();
            let q0 = w.joint_positions().await.unwrap();
            let traj = checked_move(&m, &q0, &[1.2, 0.0, 0.0, 0.0, 0.0, 0.0]);
            started.send(()).unwrap();
            // A guard against a hang only: the error comes after one bus timeout (0.5 s).
            tokio::time::timeout(Duration::from_secs(60), w.execute(&traj))
                .await
                .expect("execute hung on a silent bus")
                .unwrap_err()
        });
        cutter.join().unwrap();
        err
    });
    assert!(
        matches!(err, RobotError::Timeout(t) if (t - 0.5).abs() < 1e-9),
        "{err:?}"
    );
    // The stop still went out (a SYNC_WRITE needs no answer): goals = the last positions read.
    assert_stopped(&emulator, &s);
}

#[test]
fn corrupt_and_truncated_replies_are_typed_errors() {
    let s0 = shipped();
    let emulator = emulator_at_home(&s0);
    let s = settings_for(&emulator);
    runtime().block_on(async {
        let mut w = WidowX::connect(&s, model()).await.unwrap();
        emulator.state().set_fault(Fault::CorruptCrc);
        let err = w.joint_positions().await.unwrap_err();
        assert!(
            matches!(
                err,
                RobotError::Dynamixel(DynamixelError::Protocol {
                    source: ProtocolError::Crc { .. },
                    ..
                })
            ),
            "{err:?}"
        );
        emulator.state().set_fault(Fault::Truncate);
        let err = w.joint_positions().await.unwrap_err();
        assert!(
            matches!(
                err,
                RobotError::Dynamixel(DynamixelError::Protocol {
                    source: ProtocolError::Truncated { .. },
                    ..
                })
            ),
            "{err:?}"
        );
        // Back to normal: the next read works (no stale bytes taken for an answer).
        emulator.state().set_fault(Fault::None);
        let q = w.joint_positions().await.unwrap();
        assert_eq!(q.len(), 6);
    });
}

#[test]
fn connect_to_a_silent_bus_names_the_first_joint() {
    let s0 = shipped();
    let emulator = emulator_at_home(&s0);
    emulator.state().set_fault(Fault::Silent);
    let s = settings_for(&emulator);
    let err = runtime().block_on(async { WidowX::connect(&s, model()).await.err().unwrap() });
    assert!(
        matches!(&err, RobotError::Dynamixel(DynamixelError::Setup { joint, id: 1, .. }) if joint == "waist"),
        "{err:?}"
    );
}

#[test]
fn servos_set_up_unlike_driver_toml_are_refused() {
    let s0 = shipped();
    let emulator = emulator_at_home(&s0);
    let m = model();
    // driver.toml says wrist_angle is not reversed; the servo's Drive Mode says it is.
    let mut s = settings_for(&emulator);
    s.joints[4].reversed = false;
    let err = runtime().block_on(async { WidowX::connect(&s, m.clone()).await.err().unwrap() });
    assert!(
        matches!(&err, RobotError::Dynamixel(DynamixelError::Setup { joint, id: 7, .. }) if joint == "wrist_angle"),
        "{err:?}"
    );
    // A shadow id that is not the elbow's shadow on the bus (servo 5's Secondary ID is 4).
    let mut s = settings_for(&emulator);
    s.joints[1].shadow_id = Some(5);
    s.joints[2].shadow_id = Some(3);
    let err = runtime().block_on(async { WidowX::connect(&s, m.clone()).await.err().unwrap() });
    assert!(
        matches!(
            &err,
            RobotError::Dynamixel(DynamixelError::Setup { id: 5, .. })
        ),
        "{err:?}"
    );
}

#[test]
fn the_emulator_refuses_what_a_servo_refuses() {
    let s0 = shipped();
    let emulator = emulator_at_home(&s0);
    let s = settings_for(&emulator);
    runtime().block_on(async {
        let port = crate::dynamixel::widowx::open_port(&s.bus).unwrap();
        let mut bus = Bus::new(port, s.bus.timeout());
        // PING answers with the model number (XM430-W350 = 1020).
        assert_eq!(bus.ping(1).await.unwrap().0, 1020);
        // Goal beyond the shoulder's Max Position Limit: data limit error.
        let limit = emulator
            .state()
            .register(2, table::MAX_POSITION_LIMIT)
            .unwrap() as i32;
        let err = bus
            .write(2, table::GOAL_POSITION, &(limit + 10).to_le_bytes())
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                DynamixelError::Status {
                    id: 2,
                    error: StatusError::DataLimit
                }
            ),
            "{err:?}"
        );
        // EEPROM with torque on: access error.
        bus.write(2, table::TORQUE_ENABLE, &[1]).await.unwrap();
        let err = bus
            .write(2, table::OPERATING_MODE, &[table::MODE_PWM])
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                DynamixelError::Status {
                    id: 2,
                    error: StatusError::Access
                }
            ),
            "{err:?}"
        );
        // Half of a 4-byte item: data length error.
        let err = bus
            .write(
                2,
                table::Item {
                    address: 116,
                    size: 2,
                },
                &[0, 8],
            )
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                DynamixelError::Status {
                    error: StatusError::DataLength,
                    ..
                }
            ),
            "{err:?}"
        );
        // A servo that is not on the bus: timeout.
        let err = bus.ping(42).await.unwrap_err();
        assert!(
            matches!(err, DynamixelError::Timeout { id: 42, .. }),
            "{err:?}"
        );
    });
}

/// The serial port takes every rate a Dynamixel X servo can be set to, 4.5 Mbps included (no
/// `Bnnn` constant: termios2 `BOTHER`), and reads it back; a port that does not exist is a named
/// `Open` error, not a panic or a hang.
#[test]
fn serial_port_opens_at_every_dynamixel_rate_and_names_a_missing_port() {
    use crate::dynamixel::serial::SerialPort;
    use crate::settings::DYNAMIXEL_BAUDS;
    let s0 = shipped();
    let emulator = emulator_at_home(&s0);
    runtime().block_on(async {
        for baud in DYNAMIXEL_BAUDS {
            let port = SerialPort::open(emulator.path(), baud).unwrap();
            assert_eq!(port.baud().unwrap(), baud);
        }
        let mut s = s0.clone();
        s.bus.serial_port = "/dev/pointact-no-such-port".into();
        match crate::dynamixel::widowx::open_port(&s.bus) {
            Err(e @ crate::dynamixel::DynamixelError::Open { .. }) => {
                let msg = e.to_string();
                assert!(msg.contains("/dev/pointact-no-such-port"), "{msg}");
                assert!(msg.contains("No such file"), "{msg}");
            }
            Err(e) => panic!("expected Open, got {e}"),
            Ok(_) => panic!("opened a port that does not exist"),
        }
    });
}
