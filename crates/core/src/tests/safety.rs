//! The safety gate rejects each kind of unsafe motion, and lets a plain safe one through.

use crate::geometry::Shape;
use crate::kinematics::{IkOptions, IkSolver, RobotModel};
use crate::planning::{limit_tool_speed, JointPath, Obstacle, Trajectory};
use crate::safety::{SafetyConfig, SafetyError, SafetyGate};
use k::nalgebra::{Isometry3, Translation3, UnitQuaternion, Vector3};

fn xarm() -> RobotModel {
    RobotModel::builtin("xarm6").unwrap()
}

/// Top-down TCP pose at (x, y, z).
fn down(x: f64, y: f64, z: f64) -> Isometry3<f64> {
    Isometry3::from_parts(
        Translation3::new(x, y, z),
        UnitQuaternion::from_euler_angles(std::f64::consts::PI, 0.0, 0.0),
    )
}

fn line(m: &RobotModel, from: &[f64], to: Isometry3<f64>) -> Trajectory {
    let goal = IkSolver::new(m, IkOptions::default())
        .solve(&to, from)
        .unwrap()
        .q;
    let cfg = &m.config.limits;
    let t = Trajectory::time_parameterize(
        JointPath {
            waypoints: vec![from.to_vec(), goal],
        },
        &cfg.joint_velocity,
        &cfg.joint_acceleration,
    )
    .unwrap();
    limit_tool_speed(t, m, m.config.limits.cartesian_speed).unwrap()
}

#[test]
fn a_plain_move_above_the_table_passes() {
    let m = xarm();
    let gate = SafetyGate::new(&m, SafetyConfig::default());
    let home = m.home().to_vec();
    let t = line(&m, &home, down(0.4, 0.1, 0.25));
    let checked = gate.check(t, &home, 1.0, &[]).unwrap();
    assert!((checked.dt() - 0.01).abs() < 1e-12);
}

#[test]
fn going_through_the_table_is_rejected() {
    let m = xarm();
    let gate = SafetyGate::new(&m, SafetyConfig::default());
    let home = m.home().to_vec();
    let t = line(&m, &home, down(0.4, 0.0, -0.02));
    assert!(matches!(
        gate.check(t, &home, 1.0, &[]),
        Err(SafetyError::TableClearance { .. })
    ));
}

#[test]
fn leaving_the_workspace_is_rejected() {
    let m = xarm();
    let gate = SafetyGate::new(&m, SafetyConfig::default());
    let home = m.home().to_vec();
    let t = line(&m, &home, down(0.3, 0.55, 0.2));
    assert!(matches!(
        gate.check(t, &home, 1.0, &[]),
        Err(SafetyError::Workspace { .. })
    ));
}

#[test]
fn a_table_below_the_base_lowers_the_workspace_floor_with_it() {
    // The xArm's box is the outer limit (floor 25 cm below the base); the table is the floor within
    // it. With the table 4 cm below the base (an arm on a plate), a grasp 2.5 cm below the base is
    // inside and clear of the table; with the table at the base it is below the floor; past the
    // lowered table it still hits the table.
    let m = xarm();
    let home = m.home().to_vec();
    let low = SafetyConfig {
        table_z: -0.04,
        ..SafetyConfig::default()
    };
    let grasp = line(&m, &home, down(0.4, 0.0, -0.025));
    SafetyGate::new(&m, low.clone())
        .check(grasp.clone(), &home, 1.0, &[])
        .expect("a grasp above a table below the base");
    let e = SafetyGate::new(&m, SafetyConfig::default())
        .check(grasp, &home, 1.0, &[])
        .unwrap_err();
    assert!(
        matches!(
            e,
            SafetyError::Workspace { .. } | SafetyError::TableClearance { .. }
        ),
        "{e}"
    );
    let through = line(&m, &home, down(0.4, 0.0, -0.06));
    assert!(SafetyGate::new(&m, low)
        .check(through, &home, 1.0, &[])
        .is_err());
    let ws = m.config.workspace;
    assert_eq!(ws.for_table(-0.04).min[2], -0.04);
    assert_eq!(ws.for_table(0.03).min[2], 0.03, "a table above the base");
    assert_eq!(ws.for_table(-1.0), ws, "the box is the outer limit");
    assert_eq!(ws.for_table(f64::NAN), ws);
}

#[test]
fn a_measured_table_must_agree_with_a_stated_one() {
    let stated = SafetyConfig {
        table_z: -0.05,
        ..SafetyConfig::default()
    };
    // Within 3 cm the gate takes the measured table (the one the plan was made over).
    let c = stated.with_measured_table(-0.07).unwrap();
    assert_eq!(c.table_z, -0.07);
    assert_eq!(
        SafetyConfig { table_z: 0.0, ..c },
        SafetyConfig::default(),
        "nothing else changes"
    );
    for far in [-0.09, 0.0, f64::NAN, f64::INFINITY] {
        let e = stated.with_measured_table(far).unwrap_err();
        assert!(matches!(e, SafetyError::TableMismatch { .. }), "{far}: {e}");
    }
    let e = stated.with_measured_table(0.0).unwrap_err().to_string();
    assert!(
        e.contains("z = 0.000 m") && e.contains("5.0 cm") && e.contains("--table-z"),
        "{e}"
    );
    // Unstated: whatever finite table the camera measures.
    let unstated = SafetyConfig {
        table_stated: false,
        ..SafetyConfig::default()
    };
    assert_eq!(unstated.with_measured_table(-0.2).unwrap().table_z, -0.2);
    assert!(unstated.with_measured_table(f64::NAN).is_err());
}

#[test]
fn too_fast_is_rejected() {
    let m = xarm();
    let gate = SafetyGate::new(&m, SafetyConfig::default());
    let home = m.home().to_vec();
    let mut goal = home.clone();
    goal[0] += 0.5;
    // Timed with twice the allowed joint speed.
    let v: Vec<f64> = m
        .config
        .limits
        .joint_velocity
        .iter()
        .map(|v| 2.0 * v)
        .collect();
    let t = Trajectory::time_parameterize(
        JointPath {
            waypoints: vec![home.clone(), goal],
        },
        &v,
        &m.config.limits.joint_acceleration,
    )
    .unwrap();
    let e = gate.check(t, &home, 1.0, &[]).unwrap_err();
    assert!(
        matches!(
            e,
            SafetyError::JointSpeed { .. } | SafetyError::CartesianSpeed { .. }
        ),
        "{e}"
    );
}

#[test]
fn starting_away_from_the_robot_is_rejected() {
    let m = xarm();
    let gate = SafetyGate::new(&m, SafetyConfig::default());
    let home = m.home().to_vec();
    let t = line(&m, &home, down(0.4, 0.1, 0.25));
    let mut elsewhere = home.clone();
    elsewhere[1] += 0.1;
    assert!(matches!(
        gate.check(t, &elsewhere, 1.0, &[]),
        Err(SafetyError::StartMismatch { .. })
    ));
}

#[test]
fn entering_a_known_object_is_rejected() {
    let m = xarm();
    let gate = SafetyGate::new(&m, SafetyConfig::default());
    let home = m.home().to_vec();
    let obstacle = Obstacle {
        name: "box".into(),
        shape: Shape::Cuboid {
            half_extents: Vector3::new(0.05, 0.05, 0.1),
        },
        world_from_shape: Isometry3::translation(0.4, 0.0, 0.1),
    };
    let t = line(&m, &home, down(0.4, 0.0, 0.12));
    match gate.check(t, &home, 1.0, std::slice::from_ref(&obstacle)) {
        Err(SafetyError::Collision { obstacle, .. }) => assert_eq!(obstacle, "box"),
        other => panic!("expected a collision, got {other:?}"),
    }
    // The same motion far from the box passes.
    let t = line(&m, &home, down(0.4, 0.3, 0.2));
    gate.check(t, &home, 1.0, &[obstacle]).unwrap();
}

#[test]
fn gripper_range_is_enforced() {
    let m = xarm();
    let gate = SafetyGate::new(&m, SafetyConfig::default());
    assert_eq!(gate.check_gripper(0.05).unwrap().width(), 0.05);
    assert!(gate.check_gripper(0.2).is_err());
    assert!(gate.check_gripper(f64::NAN).is_err());
}

#[test]
fn fingertips_just_above_the_clearance_pass_and_just_below_fail() {
    // xArm fingertips end at the TCP: the exact geometry, not a bloated cover, decides.
    let m = xarm();
    let gate = SafetyGate::new(&m, SafetyConfig::default());
    let home = m.home().to_vec();
    gate.check(line(&m, &home, down(0.4, 0.0, 0.0045)), &home, 1.0, &[])
        .unwrap();
    assert!(matches!(
        gate.check(line(&m, &home, down(0.4, 0.0, 0.0015)), &home, 1.0, &[]),
        Err(SafetyError::TableClearance { .. })
    ));
}

#[test]
fn the_speed_scale_slows_what_is_checked_and_refuses_a_bad_scale() {
    let m = xarm();
    let home = m.home().to_vec();
    let t = line(&m, &home, down(0.4, 0.1, 0.25));
    let full = t.duration();
    let slow = SafetyGate::new(
        &m,
        SafetyConfig {
            speed_scale: 0.25,
            ..SafetyConfig::default()
        },
    )
    .check(t.clone(), &home, 1.0, &[])
    .unwrap();
    // Same path, four times the time: every sample of the slow one is a sample of the fast one.
    assert!((slow.trajectory().duration() - 4.0 * full).abs() < 1e-9);
    for k in 0..=10 {
        let f = f64::from(k) / 10.0;
        assert_eq!(slow.trajectory().sample(4.0 * full * f), t.sample(full * f));
    }
    for scale in [0.0, -0.5, 1.5, f64::NAN] {
        let gate = SafetyGate::new(
            &m,
            SafetyConfig {
                speed_scale: scale,
                ..SafetyConfig::default()
            },
        );
        assert!(
            matches!(
                gate.check(t.clone(), &home, 1.0, &[]),
                Err(SafetyError::SpeedScale { .. })
            ),
            "{scale}"
        );
    }
}
