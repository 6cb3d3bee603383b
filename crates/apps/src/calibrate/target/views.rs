//! Calibration views: where to put the gripper so the camera sees the tag, how to get there
//! through the safety gate, and what each captured view says about the target.
//!
//! Eye-to-hand: the camera is fixed, the tag rides on the gripper. Each view pairs the robot's
//! `base_from_gripper` (forward kinematics of the joints the robot reports after the move, the
//! tool point `tip_link` as the gripper frame) with the frame the camera took there. Detection +
//! PnP turn the frame into `camera_from_target`; the pairs are what AX = XB needs. Hand-eye
//! solvers want rotation about at least two axes between views (rotation about one axis leaves the
//! translation along it undetermined), so [`view_poses`] tilts the tag about both of its in-plane
//! axes and rolls it about its normal, while keeping it facing the camera.

use k::nalgebra::{Isometry3, Point3, Rotation3, Translation3, UnitQuaternion, Vector3};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::detect::TagDetector;
use super::pnp::solve_tag_pose;
use super::{TagTarget, TargetError};
use crate::camera::{Camera, Frame};
use crate::kinematics::RobotModel;
use crate::planning::{DirectPlanner, MotionPlanner, Obstacle};
use crate::robot::Robot;
use crate::safety::{SafetyConfig, SafetyGate};

/// One calibration view: where the gripper was and what the camera saw.
#[derive(Debug, Clone)]
pub struct CalibrationView {
    /// Gripper (tool point) → robot base, from the robot's joints after the move.
    pub base_from_gripper: Isometry3<f64>,
    /// What the camera captured at that pose.
    pub frame: Frame,
}

/// What one view measured: the two halves of a hand-eye sample (`calibrate::handeye`'s
/// `HandEyeSample` has the same two fields) plus the quality numbers to report.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TargetObservation {
    /// Index of the view in the list it came from.
    pub view: usize,
    pub base_from_gripper: Isometry3<f64>,
    pub camera_from_target: Isometry3<f64>,
    /// Corner reprojection error of the tag pose, pixels (RMS).
    pub rms_px: f64,
    /// The detector's decision margin for the tag.
    pub decision_margin: f32,
}

impl From<&TargetObservation> for crate::calibrate::HandEyeSample {
    /// The pose pair the solver needs; the view index and quality figures stay in the observation.
    fn from(o: &TargetObservation) -> Self {
        Self {
            base_from_gripper: o.base_from_gripper,
            camera_from_target: o.camera_from_target,
        }
    }
}

/// A view (or planned pose) that gave nothing, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct SkippedView {
    /// Index of the view (or planned pose).
    pub view: usize,
    /// Why it gave nothing.
    pub reason: String,
}

/// Detection + PnP on every view; views without the tag (or with an unusable pose) are listed in
/// the second vector with the reason, not silently dropped.
pub(crate) fn observe_target(
    views: &[CalibrationView],
    target: &TagTarget,
) -> Result<(Vec<TargetObservation>, Vec<SkippedView>), TargetError> {
    target.validate()?;
    let mut detector = TagDetector::new()?;
    let mut seen = Vec::new();
    let mut skipped = Vec::new();
    for (i, v) in views.iter().enumerate() {
        let pose = detector.detect_id(&v.frame.rgb, target.id).and_then(|d| {
            solve_tag_pose(&d.corners, target.size_m, &v.frame.intrinsics)
                .map(|p| (p, d.decision_margin))
        });
        match pose {
            Ok((p, margin)) => seen.push(TargetObservation {
                view: i,
                base_from_gripper: v.base_from_gripper,
                camera_from_target: p.camera_from_target,
                rms_px: p.rms_px,
                decision_margin: margin,
            }),
            Err(e) => skipped.push(SkippedView {
                view: i,
                reason: e.to_string(),
            }),
        }
    }
    Ok((seen, skipped))
}

/// Where the target sits on the tool: its face `offset_m` beyond the tool point along the
/// approach axis, facing outwards (target z = approach axis), so the fingers are behind the plate
/// and a camera in front of the gripper sees the whole tag.
pub fn default_tcp_from_target(model: &RobotModel, offset_m: f64) -> Isometry3<f64> {
    let a = Vector3::from(model.config.approach_axis);
    let a = if a.norm() > 0.0 {
        a.normalize()
    } else {
        Vector3::z()
    };
    let rot = UnitQuaternion::rotation_between(&Vector3::z(), &a).unwrap_or_else(|| {
        UnitQuaternion::from_axis_angle(&Vector3::x_axis(), std::f64::consts::PI)
    });
    Isometry3::from_parts(Translation3::from(a * offset_m), rot)
}

/// Where to show the tag: `count` tool poses with the target centre spread over the box
/// `centre ± half_extent` (base frame), its face turned to `camera_eye` and then tilted by up to
/// `max_tilt_rad` about each of its in-plane axes and rolled by up to `max_roll_rad` about its
/// normal. The tilt signs alternate over the views so every set has rotation about both axes.
/// Seeded: the same arguments give the same poses.
#[allow(clippy::too_many_arguments)]
pub(crate) fn view_poses(
    camera_eye: &Point3<f64>,
    centre: &Point3<f64>,
    half_extent: &Vector3<f64>,
    max_tilt_rad: f64,
    max_roll_rad: f64,
    tcp_from_target: &Isometry3<f64>,
    count: usize,
    seed: u64,
) -> Vec<Isometry3<f64>> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut unit = || rng.gen_range(-1.0..=1.0f64);
    let target_from_tcp = tcp_from_target.inverse();
    (0..count)
        .filter_map(|i| {
            let p = centre
                + Vector3::new(
                    unit() * half_extent.x,
                    unit() * half_extent.y,
                    unit() * half_extent.z,
                );
            let facing = facing_rotation(&p, camera_eye)?;
            // Alternate the tilt signs (+ +, + −, − +, − −) and draw the magnitudes.
            let sx = if i % 2 == 0 { 1.0 } else { -1.0 };
            let sy = if (i / 2) % 2 == 0 { 1.0 } else { -1.0 };
            let ax = sx * max_tilt_rad * (0.4 + 0.6 * unit().abs());
            let ay = sy * max_tilt_rad * (0.4 + 0.6 * unit().abs());
            let roll = max_roll_rad * unit();
            let r = facing
                * UnitQuaternion::from_axis_angle(&Vector3::x_axis(), ax)
                * UnitQuaternion::from_axis_angle(&Vector3::y_axis(), ay)
                * UnitQuaternion::from_axis_angle(&Vector3::z_axis(), roll);
            let base_from_target = Isometry3::from_parts(Translation3::from(p.coords), r);
            Some(base_from_target * target_from_tcp)
        })
        .collect()
}

/// The standard calibration views (`calibrate hand-eye --sim` and on a robot): the tag's centre
/// over a 10 x 24 x 8 cm box around `centre`, facing `camera_eye`, tilted up to 25° about both
/// in-plane axes and rolled up to 40° (rotation about two axes, as the solver needs, with the tag
/// never seen edge-on).
pub fn standard_view_poses(
    camera_eye: &Point3<f64>,
    centre: &Point3<f64>,
    tcp_from_target: &Isometry3<f64>,
    count: usize,
    seed: u64,
) -> Vec<Isometry3<f64>> {
    view_poses(
        camera_eye,
        centre,
        &Vector3::new(0.05, 0.12, 0.04),
        25f64.to_radians(),
        40f64.to_radians(),
        tcp_from_target,
        count,
        seed,
    )
}

/// Target orientation at `p` with z towards `eye` and y as close to world up as possible (the tag
/// upright as the camera sees it); `None` when the eye is straight above or at `p`.
fn facing_rotation(p: &Point3<f64>, eye: &Point3<f64>) -> Option<UnitQuaternion<f64>> {
    let z = (eye - p).try_normalize(1e-9)?;
    let x = Vector3::z().cross(&z).try_normalize(1e-9)?;
    let y = z.cross(&x);
    Some(UnitQuaternion::from_rotation_matrix(
        &Rotation3::from_basis_unchecked(&[x, y, z]),
    ))
}

/// The captured views and the planned poses that could not be visited.
#[derive(Debug, Clone)]
pub struct CaptureRun {
    /// The views captured, in the order visited.
    pub views: Vec<CalibrationView>,
    /// Index into the planned poses, and why it was skipped (unreachable, refused by the gate).
    pub skipped: Vec<SkippedView>,
}

/// Moves the robot through `poses` (tool poses, base frame) and captures a frame at each.
///
/// Every move is a joint-space move solved by IK from the current joints, timed under the robot's
/// limits and passed through the [`SafetyGate`] (with `obstacles`) before the robot sees it; a pose
/// that is unreachable or refused is skipped and named, and the run goes on from where the robot
/// is. `base_from_gripper` is the forward kinematics of the joints the robot reports after the
/// move, not the planned pose. Robot driver errors end the run.
pub async fn capture_views<R: Robot, C: Camera>(
    robot: &mut R,
    camera: &mut C,
    poses: &[Isometry3<f64>],
    safety: SafetyConfig,
    obstacles: &[Obstacle],
) -> Result<CaptureRun, TargetError> {
    let model = robot.model().clone();
    let gate = SafetyGate::new(&model, safety);
    let mut planner = DirectPlanner::new(&model);
    let g = &model.config.gripper;
    let mut run = CaptureRun {
        views: Vec::new(),
        skipped: Vec::new(),
    };
    let driver = |e: crate::robot::RobotError| TargetError::Robot(e.to_string());
    for (i, pose) in poses.iter().enumerate() {
        let q = robot.joint_positions().await.map_err(driver)?;
        let width = robot.gripper_width().await.map_err(driver)?;
        let opening = g.opening_for_width(width);
        let what = format!("calibration view {i}");
        let checked = planner
            .joint_move_to(&what, &q, pose)
            .map_err(|e| e.to_string())
            .and_then(|t| {
                gate.check(t, &q, opening, obstacles)
                    .map_err(|e| format!("refused by the safety gate: {e}"))
            });
        let checked = match checked {
            Ok(c) => c,
            Err(reason) => {
                run.skipped.push(SkippedView { view: i, reason });
                continue;
            }
        };
        if gate.config.dry_run {
            continue;
        }
        robot.execute(&checked).await.map_err(driver)?;
        let q = robot.joint_positions().await.map_err(driver)?;
        let base_from_gripper = model
            .fk(&q)
            .map_err(|e| TargetError::Robot(e.to_string()))?;
        let frame = camera.capture()?;
        run.views.push(CalibrationView {
            base_from_gripper,
            frame,
        });
    }
    Ok(run)
}
