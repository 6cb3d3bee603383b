//! Motion primitives the executors compose, behind the [`MotionPlanner`] seam: a free-space move
//! between joint configurations and a Cartesian tool path, both solved by IK from the previous
//! joints and timed under the robot's limits. [`DirectPlanner`] moves in straight joint-space lines
//! (no search); [`RrtPlanner`] is the collision-aware one (collision-free IK and RRT-Connect
//! against a [`World`] for free-space moves, [`DirectPlanner`]'s Cartesian paths otherwise).
//! Nothing here checks safety: every trajectory still goes through the gate before a robot sees it.

use k::nalgebra::{Isometry3, Matrix3, Rotation3, Translation3, UnitQuaternion, Vector3};

use rand::{Rng, SeedableRng};

use super::checker::{Attached, Checker, Hit};
use super::rrt::{rrt_connect, RrtError, RrtOptions};
use super::{limit_tool_speed, JointPath, Trajectory, TrajectoryError, World};
use crate::geometry::interp::SePath;
use crate::kinematics::{IkError, IkOptions, IkSolver, KinematicsError, RobotModel};

/// Why a motion could not be planned; `what` names the motion for the message.
#[derive(Debug, thiserror::Error)]
pub enum MotionError {
    /// IK found no joint configuration for a target pose.
    #[error("{what}: target unreachable: {source}")]
    Unreachable {
        /// The motion being planned, e.g. `free-space move`, as the caller names it.
        what: String,
        /// The IK failure.
        #[source]
        source: IkError,
    },
    /// Consecutive samples of a Cartesian path need a joint to jump (an IK branch change).
    #[error("{what}: the arm would have to flip (joint `{joint}` jumps {jump:.2} rad between path samples)")]
    Discontinuity {
        /// The motion being planned, e.g. `free-space move`, as the caller names it.
        what: String,
        /// The joint that jumps.
        joint: String,
        /// Size of the jump, rad.
        jump: f64,
    },
    /// Every IK solution tried for a target is in collision.
    #[error("{what}: every IK solution collides ({hit})")]
    Blocked {
        /// The motion being planned, e.g. `free-space move`, as the caller names it.
        what: String,
        /// What the first solution (nearest the seed) hits.
        hit: Hit,
    },
    /// A waypoint of a Cartesian path is in collision (`what` names the waypoint).
    #[error("{what} collides: {hit}")]
    Collides {
        /// The motion being planned, e.g. `free-space move`, as the caller names it.
        what: String,
        /// What it hits.
        hit: Hit,
    },
    /// RRT-Connect found no collision-free free-space path.
    #[error("{what}: {source}")]
    NoPath {
        /// The motion being planned, e.g. `free-space move`, as the caller names it.
        what: String,
        /// The planner's failure.
        #[source]
        source: RrtError,
    },
    /// Timing the path failed.
    #[error(transparent)]
    Trajectory(#[from] TrajectoryError),
    /// Forward kinematics or a joint check failed.
    #[error(transparent)]
    Kinematics(#[from] KinematicsError),
    /// A pose or path that is not valid geometry.
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

    /// The hand from now on: fingers at `opening` (0 closed … 1 open) and the object it holds, if
    /// any. A collision-aware planner checks later moves with them; others ignore it.
    fn set_hand(&mut self, _opening: f64, _held: Option<Attached>) {}

    /// Checks tool poses along a path (IK from `from`, pose after pose) against the world, with
    /// the hand as [`MotionPlanner::set_hand`] left it; the error names the pose (1-based).
    /// Planners without a world accept every pose.
    fn check_poses(
        &mut self,
        _what: &str,
        _from: &[f64],
        _poses: &[Isometry3<f64>],
    ) -> Result<(), MotionError> {
        Ok(())
    }

    /// Free-space motion to a pose (IK seeded at `from`).
    fn joint_move_to(
        &mut self,
        what: &str,
        from: &[f64],
        pose: &Isometry3<f64>,
    ) -> Result<Trajectory, MotionError> {
        let q = self.solve(what, pose, from)?;
        self.joint_move(from, q).map_err(|e| match e {
            MotionError::NoPath { source, .. } => MotionError::NoPath {
                what: what.to_string(),
                source,
            },
            e => e,
        })
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
    /// A planner for `model` with default IK options and a 5 mm line step.
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

/// Random IK seeds tried when the solution nearest the current joints collides.
const IK_SEEDS: usize = 12;

/// Collision-aware free-space moves: collision-free IK from several seeds and RRT-Connect on the
/// sphere model against a [`World`] (table, solids, the depth cloud), timed with a stop at each
/// corner. Cartesian paths (approach, descent, lift, trace) are [`DirectPlanner`]'s: they go
/// into the object and the place on purpose; the gate checks them against the table.
pub struct RrtPlanner<'a> {
    direct: DirectPlanner<'a>,
    checker: Checker,
    world: World,
    opening: f64,
    /// Settings of each RRT-Connect search; its seed is combined with a per-move counter.
    pub options: RrtOptions,
    /// Moves planned so far (seeds each search differently, deterministically).
    moves: u64,
}

impl<'a> RrtPlanner<'a> {
    /// A planner for `model` in `world`, with the hand open and empty; fails when the robot has
    /// no sphere model.
    pub fn new(model: &'a RobotModel, world: World) -> Result<Self, super::SpheresError> {
        let mut checker = Checker::for_model(model)?;
        // Exact cube distances for the cloud, as the gate re-checks: the field's fast bound alone
        // would call a lifted object beside a bottle in collision a centimetre early.
        checker.set_exact_cloud(true);
        Ok(RrtPlanner {
            direct: DirectPlanner::new(model),
            checker,
            world,
            opening: 1.0,
            options: RrtOptions::default(),
            moves: 0,
        })
    }

    /// The world free-space moves are planned in.
    pub fn world(&self) -> &World {
        &self.world
    }
}

impl MotionPlanner for RrtPlanner<'_> {
    fn model(&self) -> &RobotModel {
        self.direct.model
    }

    fn set_hand(&mut self, opening: f64, held: Option<Attached>) {
        self.opening = opening;
        self.checker.set_attached(held);
    }

    /// The IK solution nearest `seed` when it is clear; else the clear one nearest `seed` among
    /// solutions from random seeds; else an error naming what the first solution hits.
    fn solve(
        &mut self,
        what: &str,
        pose: &Isometry3<f64>,
        seed: &[f64],
    ) -> Result<Vec<f64>, MotionError> {
        let first = self.direct.solve(what, pose, seed)?;
        let Some(hit) = self
            .checker
            .first_contact(&first, self.opening, &self.world)
        else {
            return Ok(first);
        };
        let limits = self.direct.model.joint_limits().to_vec();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0x1c ^ self.moves);
        let mut best: Option<(f64, Vec<f64>)> = None;
        for _ in 0..IK_SEEDS {
            let s: Vec<f64> = limits
                .iter()
                .map(|l| rng.gen_range(l.lower..=l.upper))
                .collect();
            let Ok(q) = self.direct.solve(what, pose, &s) else {
                continue;
            };
            if self.checker.is_free(&q, self.opening, &self.world) {
                let d: f64 = q.iter().zip(seed).map(|(a, b)| (a - b) * (a - b)).sum();
                if best.as_ref().is_none_or(|(bd, _)| d < *bd) {
                    best = Some((d, q));
                }
            }
        }
        best.map(|(_, q)| q).ok_or(MotionError::Blocked {
            what: what.to_string(),
            hit,
        })
    }

    /// RRT-Connect from `from` to `to` (a straight line when that is clear), a stop at each
    /// corner of the path.
    fn joint_move(&mut self, from: &[f64], to: Vec<f64>) -> Result<Trajectory, MotionError> {
        self.moves += 1;
        let o = RrtOptions {
            seed: self.options.seed ^ self.moves,
            ..self.options.clone()
        };
        let path = rrt_connect(
            &mut self.checker,
            &self.world,
            self.opening,
            self.direct.model.joint_limits(),
            from,
            &to,
            &o,
        )
        .map_err(|source| MotionError::NoPath {
            what: "free-space move".into(),
            source,
        })?;
        let l = &self.direct.model.config.limits;
        let t = Trajectory::time_parameterize_with_stops(
            JointPath {
                waypoints: path.waypoints,
            },
            &l.joint_velocity,
            &l.joint_acceleration,
        )?;
        Ok(limit_tool_speed(t, self.direct.model, l.cartesian_speed)?)
    }

    fn path_through(
        &mut self,
        what: &str,
        from: &[f64],
        poses: &[Isometry3<f64>],
    ) -> Result<Trajectory, MotionError> {
        self.direct.path_through(what, from, poses)
    }

    fn check_poses(
        &mut self,
        what: &str,
        from: &[f64],
        poses: &[Isometry3<f64>],
    ) -> Result<(), MotionError> {
        let mut seed = from.to_vec();
        for (i, pose) in poses.iter().enumerate() {
            let q = self.direct.solve(what, pose, &seed)?;
            if let Some(hit) = self.checker.first_contact(&q, self.opening, &self.world) {
                return Err(MotionError::Collides {
                    what: format!("{what}, waypoint {}", i + 1),
                    hit,
                });
            }
            seed = q;
        }
        Ok(())
    }
}
