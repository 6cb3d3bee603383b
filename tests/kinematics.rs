//! Kinematics against independent references: published zero-pose numbers, Pinocchio golden FK and
//! Jacobians (tests/fixtures/gen_fk_golden.py), finite differences, and the IK acceptance bar.

use std::f64::consts::PI;

use pointact::kinematics::{pose_error, IkError, IkOptions, IkSolver, KinematicsError, RobotModel};
use pointact::nalgebra::{Isometry3, Matrix3, Rotation3, Translation3, UnitQuaternion, Vector3};
use pointact_bench::ik::{random_targets, MAX_POSITION_ERROR_M, MAX_ROTATION_ERROR_RAD};

fn manifest(p: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

#[test]
fn xarm6_zero_pose_matches_published_flange() {
    let m = RobotModel::builtin("xarm6").unwrap();
    let flange = m.fk_flange(&[0.0; 6]).unwrap();
    let t = flange.translation.vector;
    assert!(
        (t - Vector3::new(0.207, 0.0, 0.112)).norm() < 1e-9,
        "flange at {t}"
    );
    let (roll, pitch, yaw) = flange.rotation.euler_angles();
    assert!((roll.abs() - PI).abs() < 1e-9 && pitch.abs() < 1e-9 && yaw.abs() < 1e-9);
    // The gripper TCP is 172 mm further along the flange z axis, which points down at zero.
    let tcp = m.fk(&[0.0; 6]).unwrap().translation.vector;
    assert!(
        (tcp - Vector3::new(0.207, 0.0, 0.112 - 0.172)).norm() < 1e-9,
        "tcp at {tcp}"
    );
}

#[test]
fn widowx_zero_pose_matches_published_ee() {
    let m = RobotModel::builtin("widowx250").unwrap();
    let ee = m.fk(&[0.0; 6]).unwrap();
    assert!((ee.translation.vector - Vector3::new(0.458325, 0.0, 0.36065)).norm() < 1e-9);
    assert!(ee.rotation.angle() < 1e-12);
}

fn golden(robot: &str) -> serde_json::Value {
    let path = manifest(&format!("tests/fixtures/fk_golden_{robot}.json"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn vecf(v: &serde_json::Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn pose_of(frame: &serde_json::Value) -> Isometry3<f64> {
    let t = vecf(&frame["translation"]);
    let rows: Vec<Vec<f64>> = frame["rotation"]
        .as_array()
        .unwrap()
        .iter()
        .map(vecf)
        .collect();
    let r = Matrix3::from_fn(|i, j| rows[i][j]);
    Isometry3::from_parts(
        Translation3::new(t[0], t[1], t[2]),
        UnitQuaternion::from_rotation_matrix(&Rotation3::from_matrix_unchecked(r)),
    )
}

fn check_golden(robot: &str) {
    let m = RobotModel::builtin(robot).unwrap();
    let g = golden(robot);
    let samples = g["samples"].as_array().unwrap();
    assert!(samples.len() >= 50, "need >= 50 golden samples");
    let (tip, flange) = (&m.config.tip_link, &m.config.flange_link);
    let (mut worst_p, mut worst_r, mut worst_j) = (0.0f64, 0.0f64, 0.0f64);
    for s in samples {
        let q = vecf(&s["q"]);
        let (dp, dr) = pose_error(&m.fk(&q).unwrap(), &pose_of(&s["frames"][tip]));
        let (fp, fr) = pose_error(&m.fk_flange(&q).unwrap(), &pose_of(&s["frames"][flange]));
        worst_p = worst_p.max(dp).max(fp);
        worst_r = worst_r.max(dr).max(fr);
        let j = m.jacobian(&q).unwrap();
        let gj: Vec<Vec<f64>> = s["jacobian"].as_array().unwrap().iter().map(vecf).collect();
        for (r, row) in gj.iter().enumerate() {
            for (c, v) in row.iter().enumerate() {
                worst_j = worst_j.max((j[(r, c)] - v).abs());
            }
        }
    }
    assert!(
        worst_p < 1e-9,
        "{robot}: FK position off by {worst_p} m vs pinocchio"
    );
    assert!(
        worst_r < 1e-9,
        "{robot}: FK rotation off by {worst_r} rad vs pinocchio"
    );
    assert!(
        worst_j < 1e-9,
        "{robot}: Jacobian off by {worst_j} vs pinocchio"
    );
}

#[test]
fn xarm6_fk_and_jacobian_match_pinocchio() {
    check_golden("xarm6");
}

#[test]
fn widowx_fk_and_jacobian_match_pinocchio() {
    check_golden("widowx250");
}

#[test]
fn jacobian_matches_finite_differences() {
    let m = RobotModel::builtin("xarm6").unwrap();
    let q = [0.3, -0.5, -1.0, 0.7, 1.1, -0.4];
    let j = m.jacobian(&q).unwrap();
    let h = 1e-6;
    let p0 = m.fk(&q).unwrap();
    for c in 0..6 {
        let mut qp = q;
        qp[c] += h;
        let p1 = m.fk(&qp).unwrap();
        let dv = (p1.translation.vector - p0.translation.vector) / h;
        let dw = (p1.rotation * p0.rotation.inverse()).scaled_axis() / h;
        for r in 0..3 {
            assert!((j[(r, c)] - dv[r]).abs() < 1e-5, "linear J[{r},{c}]");
            assert!((j[(r + 3, c)] - dw[r]).abs() < 1e-5, "angular J[{r},{c}]");
        }
    }
}

/// The IK bar: on 5,000 random reachable poses (fixed seed), from the mid-range pose,
/// success >= 99.96 % (at most 2 misses) with every success verified by FK within 0.1 mm and
/// 0.05 deg.
fn ik_bar(robot: &str) {
    let m = RobotModel::builtin(robot).unwrap();
    let targets = random_targets(&m, 5000, 2024).unwrap();
    let mut solver = IkSolver::new(&m, IkOptions::default());
    let seed = m.mid_range();
    let mut ok = 0;
    for (_, target) in &targets {
        if let Ok(sol) = solver.solve(target, &seed) {
            m.check_limits(&sol.q).unwrap();
            let (dp, dr) = pose_error(&m.fk(&sol.q).unwrap(), target);
            assert!(dp <= MAX_POSITION_ERROR_M, "{robot}: position error {dp}");
            assert!(dr <= MAX_ROTATION_ERROR_RAD, "{robot}: rotation error {dr}");
            ok += 1;
        }
    }
    let rate = ok as f64 / targets.len() as f64;
    assert!(
        rate >= 0.9996,
        "{robot}: IK success {:.2}% < 99.96%",
        100.0 * rate
    );
}

#[test]
fn ik_bar_xarm6() {
    ik_bar("xarm6");
}

#[test]
fn ik_bar_widowx250() {
    ik_bar("widowx250");
}

#[test]
fn ik_from_a_near_seed_returns_the_near_solution() {
    let m = RobotModel::builtin("xarm6").unwrap();
    let q = [0.4, -0.3, -1.2, 0.5, 1.2, -0.8];
    let target = m.fk(&q).unwrap();
    let seed: Vec<f64> = q.iter().map(|v| v + 0.05).collect();
    let sol = IkSolver::new(&m, IkOptions::default())
        .solve(&target, &seed)
        .unwrap();
    assert_eq!(sol.attempts, 1);
    let dist: f64 = sol
        .q
        .iter()
        .zip(&q)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    assert!(
        dist < 1e-4,
        "solution {:?} is not the one near the seed",
        sol.q
    );
}

#[test]
fn ik_picks_the_turn_nearest_the_seed_on_multi_turn_joints() {
    let m = RobotModel::builtin("xarm6").unwrap();
    let q = [-0.4, -0.3, -1.2, 0.5, 1.2, -0.8];
    let target = m.fk(&q).unwrap();
    // Seed joint 1 and joint 6 one turn away: the pose is the same, the answer should follow the seed.
    let mut seed = q;
    seed[0] += 2.0 * PI;
    seed[5] += 2.0 * PI;
    let sol = IkSolver::new(&m, IkOptions::default())
        .solve(&target, &seed)
        .unwrap();
    assert!((sol.q[0] - seed[0]).abs() < 1e-3, "joint1 {}", sol.q[0]);
    assert!((sol.q[5] - seed[5]).abs() < 1e-3, "joint6 {}", sol.q[5]);
}

#[test]
fn ik_unreachable_and_bad_targets_are_typed_errors() {
    let m = RobotModel::builtin("xarm6").unwrap();
    let mut solver = IkSolver::new(
        &m,
        IkOptions {
            max_attempts: 10,
            ..IkOptions::default()
        },
    );
    let far = Isometry3::translation(2.0, 0.0, 0.3);
    match solver.solve(&far, m.home()) {
        Err(IkError::Unreachable {
            attempts,
            best_position_error_m,
            ..
        }) => {
            assert_eq!(attempts, 10);
            assert!(
                best_position_error_m > 0.5,
                "residual {best_position_error_m}"
            );
        }
        other => panic!("expected Unreachable, got {other:?}"),
    }
    let nan = Isometry3::translation(f64::NAN, 0.0, 0.3);
    assert_eq!(solver.solve(&nan, m.home()), Err(IkError::NonFiniteTarget));
    assert!(matches!(
        solver.solve(&far, &[0.0; 5]),
        Err(IkError::SeedLength {
            expected: 6,
            got: 5
        })
    ));
}

#[test]
fn loading_from_a_folder_equals_the_builtin() {
    let a = RobotModel::load_dir(&manifest("robot-configs/widowx250")).unwrap();
    let b = RobotModel::builtin("widowx250").unwrap();
    assert_eq!(a.config, b.config);
    assert_eq!(a.joint_limits(), b.joint_limits());
    let q = [0.1, 0.2, -0.3, 0.4, 0.5, -0.6];
    assert_eq!(a.fk(&q).unwrap(), b.fk(&q).unwrap());
}

#[test]
fn home_poses_are_inside_limits_and_workspace() {
    for name in ["xarm6", "widowx250"] {
        let m = RobotModel::builtin(name).unwrap();
        m.check_limits(m.home()).unwrap();
        let p = m.fk(m.home()).unwrap().translation.vector;
        assert!(
            m.config.workspace.contains([p.x, p.y, p.z]),
            "{name} home TCP {p} outside workspace"
        );
    }
}

const XARM_TOML: &str = include_str!("../robot-configs/xarm6/robot.toml");
const XARM_URDF: &str = include_str!("../robot-configs/xarm6/xarm6.urdf");

fn load(toml: &str, urdf: &str) -> KinematicsError {
    RobotModel::from_strs(toml, "robot.toml", urdf, "xarm6.urdf").unwrap_err()
}

fn field_of(e: &KinematicsError) -> (&str, &str) {
    match e {
        KinematicsError::Field { file, field, .. } => (file.as_str(), field.as_str()),
        other => panic!("expected a field error, got {other}"),
    }
}

#[test]
fn urdf_with_a_missing_joint_names_the_file() {
    // Drop joint3: link3 is left unattached.
    let start = XARM_URDF.find("<joint name=\"joint3\"").unwrap();
    let end = start + XARM_URDF[start..].find("</joint>").unwrap() + "</joint>".len();
    let urdf = format!("{}{}", &XARM_URDF[..start], &XARM_URDF[end..]);
    let e = load(XARM_TOML, &urdf);
    let msg = e.to_string();
    assert!(matches!(e, KinematicsError::Urdf { .. }), "{msg}");
    assert!(msg.contains("xarm6.urdf") && msg.contains("link3"), "{msg}");
}

/// Found by `fuzz_readers`: each of these used to panic inside `k`, hang, abort on a stack
/// overflow, or load with NaN poses; now each is an error naming the URDF and what is wrong.
#[test]
fn broken_urdfs_found_by_fuzzing_are_typed_errors() {
    let cases = [
        // A finger limit with lower above upper: `k::joint::Range::new` asserted.
        (
            XARM_URDF.replacen(
                "<limit lower=\"0\" upper=\"0.043\"",
                "<limit lower=\"0.05\" upper=\"0.043\"",
                1,
            ),
            "left_finger_joint",
        ),
        // An infinite finger limit: the finger, placed between its limits, was at NaN.
        (
            XARM_URDF.replacen(
                "<limit lower=\"0\" upper=\"0.043\"",
                "<limit lower=\"0\" upper=\"inf\"",
                1,
            ),
            "left_finger_joint",
        ),
        // joint5's parent re-pointed at its own child: walking up from the tip never ended.
        (
            XARM_URDF.replace(
                "<parent link=\"link4\"/><child link=\"link5\"/>",
                "<parent link=\"link6\"/><child link=\"link5\"/>",
            ),
            "loop",
        ),
        // Nesting thousands of elements deep: urdf_rs recursed until the stack overflowed.
        (
            XARM_URDF.replacen(
                "<link name=\"link1\">",
                &format!(
                    "{}{}<link name=\"link1\">",
                    "<a>".repeat(20_000),
                    "</a>".repeat(20_000)
                ),
                1,
            ),
            "nested",
        ),
        // A non-finite origin or axis off the arm: every pose below it was NaN.
        (
            XARM_URDF.replacen("<origin xyz=\"0 -0.006 0\"", "<origin xyz=\"0 nan 0\"", 1),
            "right_finger_joint",
        ),
        (
            XARM_URDF.replacen("<axis xyz=\"0 1 0\"/>", "<axis xyz=\"0 0 0\"/>", 1),
            "left_finger_joint",
        ),
        // A NaN collision radius would make every distance check pass.
        (
            XARM_URDF.replacen("<cylinder radius=\"0.068\"", "<cylinder radius=\"NaN\"", 1),
            "link_base",
        ),
    ];
    for (urdf, what) in cases {
        assert_ne!(urdf, XARM_URDF, "replacement for {what} did not apply");
        let e = load(XARM_TOML, &urdf);
        let msg = e.to_string();
        assert!(matches!(e, KinematicsError::Urdf { .. }), "{what}: {msg}");
        assert!(
            msg.contains("xarm6.urdf") && msg.contains(what),
            "{what}: {msg}"
        );
    }
}

#[test]
fn arm_joint_missing_from_urdf_names_file_and_field() {
    let toml = XARM_TOML.replace("\"joint6\"]", "\"joint7\"]");
    let e = load(&toml, XARM_URDF);
    assert_eq!(field_of(&e), ("robot.toml", "arm_joints"));
    assert!(e.to_string().contains("joint7"));
}

#[test]
fn bad_robot_toml_values_name_the_field() {
    let cases = [
        (
            XARM_TOML.replace("0.0, 0.0, 0.172]", "0.0, 0.0, 0.15]"),
            "tcp_offset_xyz",
        ),
        (
            XARM_TOML.replace("home = [0.0, -0.6", "home = [0.0, -2.6"),
            "home",
        ),
        (
            XARM_TOML.replace("joint_velocity = [2.14,", "joint_velocity = [4.0,"),
            "limits.joint_velocity",
        ),
        (
            XARM_TOML.replace("min = [0.15, -0.5, -0.25]", "min = [0.15, -0.5, 0.7]"),
            "workspace",
        ),
        (
            XARM_TOML.replace("tip_link = \"link_tcp\"", "tip_link = \"link_nope\""),
            "tip_link",
        ),
    ];
    for (toml, field) in cases {
        assert_ne!(toml, XARM_TOML, "replacement for {field} did not apply");
        let e = load(&toml, XARM_URDF);
        assert_eq!(field_of(&e).1, field, "{e}");
    }
    // Unknown keys are rejected, not ignored (a misspelt limit must not silently vanish).
    let e = load(&XARM_TOML.replace("servo_rate_hz", "servo_rate"), XARM_URDF);
    assert!(matches!(e, KinematicsError::Toml { .. }), "{e}");
}

#[test]
fn fk_rejects_wrong_length_and_nan() {
    let m = RobotModel::builtin("xarm6").unwrap();
    assert!(matches!(
        m.fk(&[0.0; 5]),
        Err(KinematicsError::JointCount {
            expected: 6,
            got: 5
        })
    ));
    assert!(matches!(
        m.fk(&[0.0, f64::NAN, 0.0, 0.0, 0.0, 0.0]),
        Err(KinematicsError::NonFinite { .. })
    ));
    assert!(matches!(
        m.check_limits(&[0.0, 3.0, 0.0, 0.0, 0.0, 0.0]),
        Err(KinematicsError::OutOfLimits { .. })
    ));
    assert!(matches!(
        RobotModel::resolve("ur5"),
        Err(KinematicsError::UnknownRobot { .. })
    ));
}

#[test]
fn link_poses_agree_with_fk_and_move_the_fingers() {
    for (name, finger) in [("xarm6", "left_finger"), ("widowx250", "left_finger_link")] {
        let m = RobotModel::builtin(name).unwrap();
        let q = [0.2, -0.4, -0.6, 0.3, 0.9, -0.2];
        let closed = m.link_poses(&q, 0.0).unwrap();
        let open = m.link_poses(&q, 1.0).unwrap();
        let find =
            |v: &[(String, Isometry3<f64>)], l: &str| v.iter().find(|(n, _)| n == l).unwrap().1;
        let (dp, dr) = pose_error(&find(&closed, &m.config.tip_link), &m.fk(&q).unwrap());
        assert!(
            dp < 1e-12 && dr < 1e-12,
            "{name}: tip from link_poses differs from fk"
        );
        let travel = (find(&open, finger).translation.vector
            - find(&closed, finger).translation.vector)
            .norm();
        assert!(travel > 0.01, "{name}: finger moved only {travel} m");
        // Every collision primitive belongs to a link that has a pose.
        for s in m.collision_shapes() {
            assert!(
                closed.iter().any(|(n, _)| *n == s.link),
                "{name}: no pose for {}",
                s.link
            );
        }
        assert!(m.collision_shapes().len() >= 8);
    }
}
