//! The hand-eye target against ground truth: PnP on analytically projected corners (pinhole and
//! Brown-Conrady, with and without noise), AprilTag detection on tags drawn by the simulator's
//! renderer at known poses, the simulated calibration capture through the safety gate, and the
//! session folder round trip.
//!
//! The hand-eye solve itself lives in `calibrate::handeye` (tested there); everything here is
//! checked against the simulator's exact poses.

use std::f64::consts::PI;

use pointact::calibrate::sim::SimRig;
use pointact::calibrate::target::detect::TagDetector;
use pointact::calibrate::target::pattern::{sim_tag_plate, tag_cells};
use pointact::calibrate::target::pnp::{project_tag_corners, solve_tag_pose, tag_corners};
use pointact::calibrate::target::session::{read_session, write_session, SessionInfo, POSES_FILE};
use pointact::calibrate::target::views::{capture_views, observe_target, CalibrationView};
use pointact::calibrate::target::{TagTarget, TargetError};
use pointact::camera::{Camera, RgbImage};
use pointact::geometry::{Distortion, Intrinsics};
use pointact::nalgebra::{Isometry3, Point3, Translation3, UnitQuaternion, Vector3};
use pointact::robot::Robot;
use pointact::safety::SafetyConfig;
use pointact::sim::render::{render, render_brute_force, PinholeCamera, RenderOptions};
use pointact::sim::{Primitive, RenderScene, ROBOT_INSTANCE};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr_like::normal;

/// Gaussian samples without another dependency (Box-Muller on the crate's `rand`).
mod rand_distr_like {
    use rand::Rng;
    pub fn normal(rng: &mut impl Rng, sigma: f64) -> f64 {
        let u1: f64 = rng.gen_range(f64::EPSILON..1.0);
        let u2: f64 = rng.gen_range(0.0..1.0);
        sigma * (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

const TAG: f64 = 0.08;

fn d435() -> Intrinsics {
    Intrinsics::pinhole(640, 480, 605.0, 605.0, 319.5, 239.5)
}

/// An L515-colour-like lens: forward Brown-Conrady with real, non-zero coefficients.
fn distorted() -> Intrinsics {
    Intrinsics {
        model: Distortion::BrownConrady,
        coeffs: [0.12, -0.25, 0.0015, -0.001, 0.1],
        ..Intrinsics::pinhole(640, 480, 600.0, 601.0, 322.0, 244.0)
    }
}

/// Translation (m) and rotation (deg) between two poses.
fn pose_error(a: &Isometry3<f64>, b: &Isometry3<f64>) -> (f64, f64) {
    (
        (a.translation.vector - b.translation.vector).norm(),
        a.rotation.angle_to(&b.rotation).to_degrees(),
    )
}

/// Tag poses a camera meets in calibration: 0.4–1.0 m away, off-axis, tilted up to 50°, rolled.
fn camera_from_target_cases() -> Vec<Isometry3<f64>> {
    let facing = UnitQuaternion::from_axis_angle(&Vector3::x_axis(), PI); // z towards the camera
    let mut out = Vec::new();
    for (i, (x, y, z)) in [
        (0.0, 0.0, 0.5),
        (0.12, -0.05, 0.6),
        (-0.15, 0.1, 0.8),
        (0.05, 0.12, 1.0),
        (-0.05, -0.08, 0.4),
    ]
    .into_iter()
    .enumerate()
    {
        let t = i as f64;
        let r = facing
            * UnitQuaternion::from_euler_angles(
                (-40.0 + 20.0 * t).to_radians(),
                (35.0 - 17.0 * t).to_radians(),
                (60.0 * t).to_radians(),
            );
        out.push(Isometry3::from_parts(Translation3::new(x, y, z), r));
    }
    out
}

#[test]
fn pnp_recovers_exact_corners_with_and_without_distortion() {
    for intr in [d435(), distorted()] {
        for truth in camera_from_target_cases() {
            let px = project_tag_corners(&truth, TAG, &intr).unwrap();
            let got = solve_tag_pose(&px, TAG, &intr).unwrap();
            let (dt, dr) = pose_error(&got.camera_from_target, &truth);
            // Corners come from the SDK's f32 projection (≈ 6e-5 px resolution): far below the bar.
            assert!(dt < 5e-5 && dr < 0.005, "{:?}: {dt} m {dr}°", intr.model);
            assert!(got.rms_px < 1e-3, "rms {}", got.rms_px);
        }
    }
}

#[test]
fn pnp_needs_the_distortion_model() {
    // The same distorted corners read as if the lens were pinhole give a pose centimetres off.
    let intr = distorted();
    let truth = camera_from_target_cases()[2];
    let px = project_tag_corners(&truth, TAG, &intr).unwrap();
    let pinhole = Intrinsics {
        model: Distortion::None,
        ..intr.clone()
    };
    let wrong = solve_tag_pose(&px, TAG, &pinhole).unwrap();
    let (dt, _) = pose_error(&wrong.camera_from_target, &truth);
    assert!(dt > 2e-3, "{dt}");
}

#[test]
fn pnp_with_corner_noise_stays_within_its_error_budget() {
    // 0.1 px corner noise (a good detector on a sharp tag): the mean over trials is unbiased
    // (< 0.2 mm), the RMS error stays within 2.5 mm and 1.2° for an 8 cm tag at 0.4-1.0 m (the worst
    // are the far and the near-frontal views, whose tilt four corners pin down poorly).
    let intr = distorted();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    for truth in camera_from_target_cases() {
        let mut mean = Vector3::zeros();
        let (mut sq_t, mut sq_r) = (0.0f64, 0.0f64);
        let n = 200;
        for _ in 0..n {
            let mut px = project_tag_corners(&truth, TAG, &intr).unwrap();
            for p in &mut px {
                p[0] += normal(&mut rng, 0.1);
                p[1] += normal(&mut rng, 0.1);
            }
            let got = solve_tag_pose(&px, TAG, &intr).unwrap();
            let (dt, dr) = pose_error(&got.camera_from_target, &truth);
            sq_t += dt * dt;
            sq_r += dr * dr;
            mean += got.camera_from_target.translation.vector - truth.translation.vector;
            assert!(got.rms_px < 0.5, "rms {}", got.rms_px);
        }
        let bias = (mean / n as f64).norm();
        assert!(bias < 2e-4, "bias {bias}");
        let (rms_t, rms_r) = ((sq_t / n as f64).sqrt(), (sq_r / n as f64).sqrt());
        eprintln!(
            "0.1 px noise at {:.2} m: rms {:.3} mm {:.3}°",
            truth.translation.vector.norm(),
            rms_t * 1e3,
            rms_r
        );
        assert!(rms_t < 2.5e-3 && rms_r < 1.2, "rms {rms_t} m {rms_r}°");
    }
}

#[test]
fn pnp_rejects_what_has_no_pose() {
    let intr = d435();
    let line = [
        [100.0, 100.0],
        [200.0, 100.0],
        [300.0, 100.0],
        [400.0, 100.0],
    ];
    assert!(matches!(
        solve_tag_pose(&line, TAG, &intr),
        Err(TargetError::Pose(_))
    ));
    let nan = [[f64::NAN, 1.0], [2.0, 1.0], [2.0, 2.0], [1.0, 2.0]];
    assert!(matches!(
        solve_tag_pose(&nan, TAG, &intr),
        Err(TargetError::Pose(_))
    ));
    let ok = [
        [300.0, 200.0],
        [340.0, 200.0],
        [340.0, 240.0],
        [300.0, 240.0],
    ];
    assert!(matches!(
        solve_tag_pose(&ok, 0.0, &intr),
        Err(TargetError::Pose(_))
    ));
    assert!(solve_tag_pose(&ok, TAG, &intr).is_ok());
    assert_eq!(tag_corners(TAG)[0], Point3::new(-0.04, 0.04, 0.0));
}

// ---------------------------------------------------------------------------------------------
// Tags drawn by the simulator's renderer.

/// The camera at the world origin (world = optical frame), D435-like intrinsics.
fn origin_camera() -> PinholeCamera {
    let i = d435();
    PinholeCamera {
        intrinsics: Intrinsics::pinhole(640, 480, i.fx, i.fy, i.cx, i.cy),
        world_from_camera: Isometry3::identity(),
    }
}

/// One tag plate at `camera_from_target`, in front of a grey wall.
fn tag_scene(target: &TagTarget, camera_from_target: &Isometry3<f64>) -> RenderScene {
    let plate = sim_tag_plate(target, &Isometry3::identity(), 0.004).unwrap();
    let wall = Primitive {
        shape: pointact::geometry::Shape::Cuboid {
            half_extents: Vector3::new(3.0, 3.0, 0.01),
        },
        world_from_shape: Isometry3::translation(0.0, 0.0, 2.5),
        color: [0.35, 0.3, 0.3],
        instance: 1,
        part: 0,
        texture: None,
    };
    RenderScene {
        primitives: vec![
            wall,
            Primitive {
                shape: plate.shape,
                world_from_shape: camera_from_target * plate.tcp_from_shape,
                color: plate.color,
                instance: ROBOT_INSTANCE,
                part: 0,
                texture: plate.texture,
            },
        ],
    }
}

/// Lit from behind the camera, a little from the upper left (the camera frame is the world here).
fn lit_from_camera() -> RenderOptions {
    RenderOptions {
        light_dir_world: Vector3::new(-0.2, -0.3, -1.0),
        ..RenderOptions::default()
    }
}

fn rgb_of(scene: &RenderScene, cam: &PinholeCamera) -> RgbImage {
    let out = render(scene, cam, &lit_from_camera());
    RgbImage::from_raw(out.width, out.height, out.rgb).unwrap()
}

fn facing(x: f64, y: f64, z: f64, rx: f64, ry: f64, rz: f64) -> Isometry3<f64> {
    Isometry3::from_parts(
        Translation3::new(x, y, z),
        UnitQuaternion::from_axis_angle(&Vector3::x_axis(), PI)
            * UnitQuaternion::from_euler_angles(rx.to_radians(), ry.to_radians(), rz.to_radians()),
    )
}

#[test]
fn printed_tag_is_supersampled_and_culling_still_agrees() {
    let target = TagTarget::tag36h11(3, TAG);
    let cam = origin_camera();
    let scene = tag_scene(&target, &facing(0.0, 0.0, 0.6, 0.0, 0.0, 0.0));
    let a = render(&scene, &cam, &lit_from_camera());
    let b = render_brute_force(&scene, &cam, &lit_from_camera());
    assert_eq!(a, b);
    // Frontal: a 10-cell plate of 0.1 m at 0.6 m is 100.8 px wide, so cells are ~10 px; the
    // centre of the black ring's top-left cell is dark, the white border's is light, and some
    // pixels on cell edges are neither (the edge is averaged, not a staircase).
    let gray: Vec<u8> = a.rgb.chunks(3).map(|p| p[1]).collect();
    let cell = 605.0 * 0.01 / 0.6;
    let at = |cx: f64, cy: f64| {
        let u = (319.5 + (cx - 4.5) * cell).round() as usize;
        let v = (239.5 + (cy - 4.5) * cell).round() as usize;
        gray[v * 640 + u]
    };
    assert!(at(1.0, 1.0) < 70, "black ring {}", at(1.0, 1.0));
    assert!(at(0.0, 0.0) > 200, "white border {}", at(0.0, 0.0));
    let mid = gray.iter().filter(|&&g| (90..180).contains(&g)).count();
    assert!(mid > 100, "only {mid} partially covered pixels");
}

#[test]
fn rendered_tags_are_found_with_their_corners_in_tag_order() {
    let cam = origin_camera();
    let intr = d435();
    let mut det = TagDetector::new().unwrap();
    let mut worst_px = 0.0f64;
    for (id, roll) in [
        (0u16, 0.0),
        (5, 90.0),
        (17, 180.0),
        (42, 270.0),
        (586, 33.0),
    ] {
        let target = TagTarget::tag36h11(id, TAG);
        let truth = facing(0.03, -0.02, 0.6, 15.0, -20.0, roll);
        let rgb = rgb_of(&tag_scene(&target, &truth), &cam);
        let d = det.detect_id(&rgb, id).unwrap();
        assert_eq!((d.family, d.id, d.hamming), ("tag36h11", id, 0));
        assert!(d.decision_margin > 20.0, "margin {}", d.decision_margin);
        let expect = project_tag_corners(&truth, TAG, &intr).unwrap();
        for (g, e) in d.corners.iter().zip(&expect) {
            let err = ((g[0] - e[0]).powi(2) + (g[1] - e[1]).powi(2)).sqrt();
            worst_px = worst_px.max(err);
        }
    }
    eprintln!("rendered tags: worst corner error {worst_px:.3} px");
    assert!(worst_px < 0.35, "worst corner error {worst_px} px");
}

#[test]
fn no_tag_and_wrong_tag_are_typed_errors() {
    let cam = origin_camera();
    let mut det = TagDetector::new().unwrap();
    let empty = RenderScene {
        primitives: tag_scene(&TagTarget::tag36h11(1, TAG), &Isometry3::identity()).primitives[..1]
            .to_vec(),
    };
    assert!(matches!(
        det.detect_id(&rgb_of(&empty, &cam), 1),
        Err(TargetError::NoTag)
    ));
    let other = tag_scene(
        &TagTarget::tag36h11(9, TAG),
        &facing(0.0, 0.0, 0.6, 0.0, 0.0, 0.0),
    );
    match det.detect_id(&rgb_of(&other, &cam), 1) {
        Err(TargetError::WrongId { expected: 1, seen }) => assert_eq!(seen, vec![9]),
        other => panic!("{other:?}"),
    }
    assert!(TagTarget::tag36h11(587, TAG).validate().is_err());
    assert!(TagTarget::tag36h11(0, -1.0).validate().is_err());
    assert_eq!(tag_cells(0).unwrap().printed_width(TAG), 0.1);
}

#[test]
fn rendered_tag_poses_match_the_truth() {
    // 8 cm tag, 0.5-0.8 m, tilted and rolled: detection + PnP against the exact pose.
    let cam = origin_camera();
    let intr = d435();
    let target = TagTarget::tag36h11(0, TAG);
    let mut det = TagDetector::new().unwrap();
    let (mut worst_t, mut worst_r, mut sum_t, mut sum_r) = (0.0f64, 0.0f64, 0.0, 0.0);
    let cases = [
        facing(0.0, 0.0, 0.5, 0.0, 0.0, 0.0),
        facing(0.08, -0.05, 0.6, 25.0, 10.0, 30.0),
        facing(-0.1, 0.06, 0.7, -20.0, 25.0, -45.0),
        facing(0.05, 0.1, 0.8, 30.0, -30.0, 120.0),
        facing(-0.12, -0.08, 0.65, -35.0, -15.0, 200.0),
        facing(0.0, 0.0, 0.75, 10.0, 35.0, 75.0),
    ];
    for truth in &cases {
        let rgb = rgb_of(&tag_scene(&target, truth), &cam);
        let d = det.detect_id(&rgb, 0).unwrap();
        let pose = solve_tag_pose(&d.corners, TAG, &intr).unwrap();
        let (dt, dr) = pose_error(&pose.camera_from_target, truth);
        eprintln!(
            "z {:.2} m: {:.3} mm {:.3}° rms {:.3} px margin {:.0}",
            truth.translation.z,
            dt * 1e3,
            dr,
            pose.rms_px,
            d.decision_margin
        );
        worst_t = worst_t.max(dt);
        worst_r = worst_r.max(dr);
        sum_t += dt;
        sum_r += dr;
    }
    let n = cases.len() as f64;
    eprintln!(
        "rendered tag pose: mean {:.3} mm {:.3}°, worst {:.3} mm {:.3}°",
        sum_t / n * 1e3,
        sum_r / n,
        worst_t * 1e3,
        worst_r
    );
    assert!(worst_t < 1.5e-3, "{worst_t} m");
    assert!(sum_t / n < 1e-3, "mean {} m", sum_t / n);
    assert!(
        worst_r < 2.0 && sum_r / n < 0.6,
        "{worst_r}° mean {}°",
        sum_r / n
    );
}

// ---------------------------------------------------------------------------------------------
// The simulated calibration capture.

fn sim_rig(target: &TagTarget) -> SimRig {
    SimRig::new(target).unwrap()
}

fn rig_poses(rig: &SimRig, n: usize) -> Vec<Isometry3<f64>> {
    rig.view_poses(n, 11)
}

fn capture(rig: &mut SimRig, poses: &[Isometry3<f64>]) -> Vec<CalibrationView> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let run = rt
        .block_on(capture_views(
            &mut rig.robot,
            &mut rig.camera,
            poses,
            SafetyConfig::default(),
            &[],
        ))
        .unwrap();
    assert!(run.skipped.is_empty(), "{:?}", run.skipped);
    run.views
}

#[test]
fn simulated_views_see_the_tag_where_it_is() {
    let target = TagTarget::tag36h11(4, TAG);
    let mut rig = sim_rig(&target);
    let poses = rig_poses(&rig, 10);
    let views = capture(&mut rig, &poses);
    assert_eq!(views.len(), poses.len());
    let camera_from_base = rig.camera.pinhole().world_from_camera.inverse();
    // The robot went where it was sent (IK + execution), within the IK tolerance.
    for (v, p) in views.iter().zip(&poses) {
        let (dt, dr) = pose_error(&v.base_from_gripper, p);
        assert!(dt < 1e-4 && dr < 0.01, "{dt} {dr}");
    }
    // Rotation about at least two independent axes between views.
    let axes: Vec<Vector3<f64>> = views
        .windows(2)
        .filter_map(|w| {
            let rel = w[0].base_from_gripper.rotation.inverse() * w[1].base_from_gripper.rotation;
            rel.axis().map(|a| a.into_inner() * rel.angle())
        })
        .collect();
    let spread = axes
        .iter()
        .flat_map(|a| {
            axes.iter()
                .map(move |b| a.normalize().cross(&b.normalize()).norm())
        })
        .fold(0.0f64, f64::max);
    assert!(spread > 0.7, "rotation axes nearly parallel: {spread}");
    let (obs, skipped) = observe_target(&views, &target).unwrap();
    assert!(skipped.is_empty(), "{skipped:?}");
    let (mut worst_t, mut worst_r, mut sum_t, mut sum_r) = (0.0f64, 0.0f64, 0.0, 0.0);
    for o in &obs {
        let truth = camera_from_base * o.base_from_gripper * rig.tcp_from_target;
        let (dt, dr) = pose_error(&o.camera_from_target, &truth);
        worst_t = worst_t.max(dt);
        worst_r = worst_r.max(dr);
        sum_t += dt;
        sum_r += dr;
    }
    let n = obs.len() as f64;
    eprintln!(
        "sim views ({} at {:.2}-{:.2} m): mean {:.3} mm {:.3}°, worst {:.3} mm {:.3}°",
        obs.len(),
        obs.iter()
            .map(|o| o.camera_from_target.translation.vector.norm())
            .fold(f64::INFINITY, f64::min),
        obs.iter()
            .map(|o| o.camera_from_target.translation.vector.norm())
            .fold(0.0, f64::max),
        sum_t / n * 1e3,
        sum_r / n,
        worst_t * 1e3,
        worst_r
    );
    assert!(worst_t < 3e-3 && worst_r < 1.0, "{worst_t} m {worst_r}°");
}

#[test]
fn unreachable_views_are_skipped_and_named() {
    let target = TagTarget::tag36h11(4, TAG);
    let mut rig = sim_rig(&target);
    let mut poses = rig_poses(&rig, 2);
    // Far outside the arm's reach, then one below the table.
    poses.insert(1, Isometry3::translation(2.0, 0.0, 0.3) * poses[0].rotation);
    poses.push(Isometry3::from_parts(
        Translation3::new(0.4, 0.0, -0.05),
        poses[0].rotation,
    ));
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let run = rt
        .block_on(capture_views(
            &mut rig.robot,
            &mut rig.camera,
            &poses,
            SafetyConfig::default(),
            &[],
        ))
        .unwrap();
    assert_eq!(run.views.len(), 2);
    let skipped: Vec<usize> = run.skipped.iter().map(|s| s.view).collect();
    assert_eq!(skipped, vec![1, 3], "{:?}", run.skipped);
    assert!(
        run.skipped[0].reason.contains("calibration view 1"),
        "{}",
        run.skipped[0].reason
    );
    // The robot is where the last good view left it.
    let q = rt.block_on(rig.robot.joint_positions()).unwrap();
    let (dt, _) = pose_error(&rig.model.fk(&q).unwrap(), &poses[2]);
    assert!(dt < 1e-4);
}

#[test]
fn a_session_folder_round_trips() {
    let target = TagTarget::tag36h11(4, TAG);
    let mut rig = sim_rig(&target);
    let poses = rig_poses(&rig, 3);
    let views = capture(&mut rig, &poses);
    let dir = std::env::temp_dir().join(format!("pointact-session-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let info = SessionInfo {
        robot: "xarm6".into(),
        gripper_frame: rig.model.config.tip_link.clone(),
        target: target.clone(),
    };
    write_session(&dir, &info, &views).unwrap();
    let back = read_session(&dir).unwrap();
    assert_eq!(back.info, info);
    assert_eq!(back.views.len(), views.len());
    for (a, b) in back.views.iter().zip(&views) {
        let (dt, dr) = pose_error(&a.base_from_gripper, &b.base_from_gripper);
        assert!(dt < 1e-12 && dr < 1e-9);
        assert_eq!(a.frame.rgb, b.frame.rgb);
        assert_eq!(a.frame.intrinsics, b.frame.intrinsics);
    }
    // The same observations from the files as from memory (PNG colour is lossless).
    let (o1, _) = observe_target(&views, &target).unwrap();
    let (o2, _) = observe_target(&back.views, &target).unwrap();
    assert_eq!(o1.len(), 3);
    assert_eq!(o1.len(), o2.len());
    for (a, b) in o1.iter().zip(&o2) {
        assert_eq!(a.camera_from_target, b.camera_from_target);
        let (dt, dr) = pose_error(&a.base_from_gripper, &b.base_from_gripper);
        assert!(dt < 1e-12 && dr < 1e-9);
    }
    // The frames are a plain recorded-frames folder for the replay camera too.
    let mut replay = pointact::camera::replay::ReplayCamera::open(&dir).unwrap();
    assert_eq!(replay.frame_dirs().len(), 3);
    assert_eq!(replay.capture().unwrap().rgb, views[0].frame.rgb);

    // A missing frame folder and a broken rotation are errors that name the file.
    std::fs::remove_dir_all(dir.join("0001")).unwrap();
    let e = read_session(&dir).unwrap_err().to_string();
    assert!(e.contains("0001"), "{e}");
    std::fs::create_dir_all(dir.join("0001")).unwrap();
    write_session(&dir, &info, &views).unwrap();
    let text = std::fs::read_to_string(dir.join(POSES_FILE)).unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
    json["views"][1]["rotation"][0][0] = serde_json::json!(2.0);
    std::fs::write(dir.join(POSES_FILE), json.to_string()).unwrap();
    let e = read_session(&dir).unwrap_err().to_string();
    assert!(
        e.contains(POSES_FILE) && e.contains("views[1].rotation"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
