//! Motion primitives the executors compose, behind the [`MotionPlanner`] seam: a free-space move
//! between joint configurations and a Cartesian tool path, both solved by IK from the previous
//! joints and timed under the robot's limits. [`DirectPlanner`] moves in straight joint-space lines
//! (no search); a collision-aware planner (RRT-Connect, a later issue) is a second implementation.
//! Nothing here checks safety: every trajectory still goes through the gate before a robot sees it.

use k::nalgebra::{Isometry3, Matrix3, Rotation3, Translation3, UnitQuaternion, Vector3};

use super::{limit_tool_speed, JointPath, Trajectory, TrajectoryError};
use crate::geometry::SePath;
use crate::kinematics::{IkError, IkOptions, IkSolver, KinematicsError, RobotModel};

#[derive(Debug, thiserror::Error)]
pub enum MotionError {
    #[error("{what}: target unreachable: {source}")]
    Unreachable {
        what: String,
        #[source]
        source: IkError,
    },
    #[error("{what}: the arm would have to flip (joint `{joint}` jumps {jump:.2} rad between path samples)")]
    Discontinuity {
        what: String,
        joint: String,
        jump: f64,
    },
    #[error(transparent)]
    Trajectory(#[from] TrajectoryError),
    #[error(transparent)]
    Kinematics(#[from] KinematicsError),
    #[error(transparent)]
    Geometry(#[from] crate::geometry::GeometryError),
}

/// A top-down tool pose with the TCP at (x, y, z): the robot's approach axis points straight down and
/// the fingers close along the horizontal direction `yaw + π/2`, i.e. across an object whose long
/// axis has yaw `yaw`.
pub fn top_down(model: &RobotModel, x: f64, y: f64, z: f64, yaw: f64) -> Isometry3<f64> {
    let cfg = &model.config;
    let a = Vector3::from(cfg.approach_axis);
    let c = Vector3::from(cfg.closing_axis);
    let world_a = Vector3::new(0.0, 0.0, -1.0);
    let world_c = Vector3::new(-yaw.sin(), yaw.cos(), 0.0);
    let tool = Matrix3::from_columns(&[a, c, a.cross(&c)]);
    let world = Matrix3::from_columns(&[world_a, world_c, world_a.cross(&world_c)]);
    let r = Rotation3::from_matrix_unchecked(world * tool.transpose());
    Isometry3::from_parts(
        Translation3::new(x, y, z),
        UnitQuaternion::from_rotation_matrix(&r),
    )
}

/// Grasp yaws are symmetric under a half turn; pick the one whose wrist rotation from `reference`
/// is smallest, so the last joint does not spin half a turn for nothing.
pub fn fold_yaw(yaw: f64, reference: f64) -> f64 {
    use std::f64::consts::PI;
    let mut y = yaw;
    while y - reference > PI / 2.0 {
        y -= PI;
    }
    while reference - y > PI / 2.0 {
        y += PI;
    }
    y
}

/// Turns tool poses and joint targets into timed trajectories for one robot.
pub trait MotionPlanner {
    /// The robot planned for.
    fn model(&self) -> &RobotModel;
    /// Joints that reach `pose`, nearest to `seed`.
    fn solve(
        &mut self,
        what: &str,
        pose: &Isometry3<f64>,
        seed: &[f64],
    ) -> Result<Vec<f64>, MotionError>;
    /// A free-space motion from joints `from` to joints `to`.
    fn joint_move(&mut self, from: &[f64], to: Vec<f64>) -> Result<Trajectory, MotionError>;
    /// A smooth tool path through `poses` (the first should be the current tool pose).
    fn path_through(
        &mut self,
        what: &str,
        from: &[f64],
        poses: &[Isometry3<f64>],
    ) -> Result<Trajectory, MotionError>;

    /// Free-space motion to a pose (IK seeded at `from`).
    fn joint_move_to(
        &mut self,
        what: &str,
        from: &[f64],
        pose: &Isometry3<f64>,
    ) -> Result<Trajectory, MotionError> {
        let q = self.solve(what, pose, from)?;
        self.joint_move(from, q)
    }

    /// Straight Cartesian line from the current tool pose to `pose` (position linear, rotation slerp).
    fn line_to(
        &mut self,
        what: &str,
        from: &[f64],
        pose: &Isometry3<f64>,
    ) -> Result<Trajectory, MotionError> {
        let start = self.model().fk(from)?;
        self.path_through(what, from, &[start, *pose])
    }
}

/// Straight joint-space moves and IK-solved Cartesian paths: no search, no collision model (the
/// gate checks the result against the table and the known obstacles).
pub struct DirectPlanner<'a> {
    model: &'a RobotModel,
    ik: IkSolver,
    /// Cartesian sample spacing for straight lines (m).
    pub step: f64,
}

impl<'a> DirectPlanner<'a> {
    pub fn new(model: &'a RobotModel) -> Self {
        DirectPlanner {
            model,
            ik: IkSolver::new(model, IkOptions::default()),
            step: 0.005,
        }
    }

    /// Timed at the robot.toml limits; a slower run is the gate's `speed_scale` (one knob, applied
    /// to every motion after planning, so what runs is what was checked).
    fn timed(&self, path: JointPath) -> Result<Trajectory, MotionError> {
        let l = &self.model.config.limits;
        let t = Trajectory::time_parameterize(path, &l.joint_velocity, &l.joint_acceleration)?;
        Ok(limit_tool_speed(t, self.model, l.cartesian_speed)?)
    }
}

impl MotionPlanner for DirectPlanner<'_> {
    fn model(&self) -> &RobotModel {
        self.model
    }

    fn solve(
        &mut self,
        what: &str,
        pose: &Isometry3<f64>,
        seed: &[f64],
    ) -> Result<Vec<f64>, MotionError> {
        self.ik
            .solve(pose, seed)
            .map(|s| s.q)
            .map_err(|source| MotionError::Unreachable {
                what: what.to_string(),
                source,
            })
    }

    /// Straight line in joint space.
    fn joint_move(&mut self, from: &[f64], to: Vec<f64>) -> Result<Trajectory, MotionError> {
        self.timed(JointPath {
            waypoints: vec![from.to_vec(), to],
        })
    }

    /// A smooth path through tool poses (spline positions, slerp rotations; the first pose should be
    /// the current tool pose), sampled every `step` metres and solved sample by sample.
    fn path_through(
        &mut self,
        what: &str,
        from: &[f64],
        poses: &[Isometry3<f64>],
    ) -> Result<Trajectory, MotionError> {
        let path = SePath::new(poses)?;
        let n = ((path.length() / self.step).ceil() as usize).clamp(2, 2000);
        let samples = path.resample_by_arc_length(n + 1);
        let mut waypoints = vec![from.to_vec()];
        let mut seed = from.to_vec();
        for pose in samples.iter().skip(1) {
            let q = self.solve(what, pose, &seed)?;
            for (j, (a, b)) in q.iter().zip(&seed).enumerate() {
                let jump = (a - b).abs();
                // A continuous path moves each joint a few hundredths of a radian per 5 mm sample.
                if jump > 0.3 {
                    return Err(MotionError::Discontinuity {
                        what: what.to_string(),
                        joint: self.model.joint_limits()[j].name.clone(),
                        jump,
                    });
                }
            }
            seed = q.clone();
            waypoints.push(q);
        }
        self.timed(JointPath { waypoints })
    }
}
