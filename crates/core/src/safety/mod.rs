//! The one gate every motion passes before it reaches a robot.
//!
//! `SafetyGate::check` turns a `Trajectory` into a `CheckedTrajectory`, the only type a `Robot` will
//! execute; its constructor is private to this module, so an unchecked motion cannot reach a driver.
//! Checks, on samples at the robot's servo period: finite values; the trajectory starts where the
//! robot is; joint limits; joint speed; the TCP inside the workspace box and below the Cartesian speed
//! limit; every moving link (its exact primitives) above the table by a clearance; no moving link
//! sphere (a conservative cover) inside a known obstacle. Free-space (transit) moves are re-checked
//! with the collision-aware planner's own model too (`planning::Checker`: the fitted spheres
//! against the world the planner planned in, the depth cloud included, the held object, and
//! self-collision). The collision models are planning's: the gate re-checks with the model the
//! planner used. Gripper commands are checked against the gripper's range.

use k::nalgebra::Vector3;

use crate::kinematics::{KinematicsError, RobotModel};
use crate::planning::checker::GATE_PADDING;
use crate::planning::{
    ArmCollisionModel, Attached, Checker, Contact, Hit, Obstacle, Trajectory, World,
};

/// Settings of the [`SafetyGate`]; the robot's own limits come from its model's config.
#[derive(Debug, Clone, PartialEq)]
pub struct SafetyConfig {
    /// Height of the table top in the base frame (m): the plane of the table-clearance check and
    /// the floor of the workspace box (`WorkspaceBox::for_table`). A task run replaces it with the
    /// table its camera measures ([`SafetyConfig::with_measured_table`]).
    pub table_z: f64,
    /// Whether `table_z` was stated (a flag, the driver settings, a scene file) rather than left to
    /// the camera: a measured table farther than [`TABLE_AGREEMENT_M`] from a stated one stops the
    /// run before any motion (a depth bias or a wrong calibration would otherwise move the floor).
    pub table_stated: bool,
    /// Smallest allowed distance between a moving link and the table top (m).
    pub table_clearance: f64,
    /// Largest allowed gap between the robot's joints and the trajectory start (rad).
    pub max_start_deviation: f64,
    /// Plan and check everything, move nothing.
    pub dry_run: bool,
    /// Fraction (0, 1] of the planned speed the robot moves at: every trajectory is slowed by
    /// `1 / speed_scale` before it is checked, so what runs is what was checked. Physical arms start
    /// well below their limits; the simulator runs at 1.
    pub speed_scale: f64,
}

impl Default for SafetyConfig {
    fn default() -> Self {
        SafetyConfig {
            table_z: 0.0,
            table_stated: true,
            table_clearance: 0.003,
            max_start_deviation: 0.02,
            dry_run: false,
            speed_scale: 1.0,
        }
    }
}

/// How far apart the table the camera measures and a stated one may be (m): depth noise on a
/// table is millimetres and a plane fit averages it out; a few centimetres is a wrong `--table-z`,
/// a wrong hand-eye calibration or another surface taken for the table.
pub const TABLE_AGREEMENT_M: f64 = 0.03;

/// A stated table height (base frame, m) must be within this of the base: farther is a typo
/// (centimetres for metres), not a table the arm reaches.
pub const MAX_TABLE_Z_M: f64 = 1.0;

/// Checks a stated table height against [`MAX_TABLE_Z_M`]; the error says what to give.
pub fn check_table_z(z: f64) -> Result<f64, String> {
    if (-MAX_TABLE_Z_M..=MAX_TABLE_Z_M).contains(&z) {
        Ok(z)
    } else {
        Err(format!(
            "{z} m is outside [-{MAX_TABLE_Z_M}, {MAX_TABLE_Z_M}]: give the table top's height \
             under (negative) or above the robot base, in metres"
        ))
    }
}

impl SafetyConfig {
    /// This config over the table the camera measured at `measured_z` (base frame, m): the gate's
    /// table and workspace floor follow it. A stated table ([`SafetyConfig::table_stated`]) must
    /// agree within [`TABLE_AGREEMENT_M`].
    pub fn with_measured_table(&self, measured_z: f64) -> Result<SafetyConfig, SafetyError> {
        // NaN in either is a disagreement.
        let agrees = (measured_z - self.table_z).abs() <= TABLE_AGREEMENT_M;
        if !measured_z.is_finite() || (self.table_stated && !agrees) {
            return Err(SafetyError::TableMismatch {
                measured: measured_z,
                stated: self.table_z,
                tolerance: TABLE_AGREEMENT_M,
            });
        }
        Ok(SafetyConfig {
            table_z: measured_z,
            ..self.clone()
        })
    }
}

/// Why the gate refused a motion or a gripper command; the first failing check is reported.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SafetyError {
    /// [`SafetyConfig::speed_scale`] is not in (0, 1].
    #[error("speed scale {scale} is outside (0, 1]")]
    SpeedScale {
        /// The configured speed scale.
        scale: f64,
    },
    /// The trajectory does not start at the robot's current joints (or has another joint count).
    #[error("trajectory starts {deviation:.4} rad from the robot's joints (allowed {allowed})")]
    StartMismatch {
        /// Largest per-joint gap, rad (NaN on a joint-count mismatch or a non-finite value).
        deviation: f64,
        /// [`SafetyConfig::max_start_deviation`], rad.
        allowed: f64,
    },
    /// A sample is not finite or forward kinematics failed on it.
    #[error("at t = {t:.3} s: {detail}")]
    Kinematics {
        /// Time of the failing sample along the slowed trajectory, s.
        t: f64,
        /// The kinematics error's message.
        detail: String,
    },
    /// A joint leaves its position limits.
    #[error(
        "at t = {t:.3} s joint `{joint}` = {value:.4} leaves its limits [{lower:.4}, {upper:.4}]"
    )]
    JointLimit {
        /// Time of the failing sample along the slowed trajectory, s.
        t: f64,
        /// The joint's name.
        joint: String,
        /// Its position (rad, or m for a prismatic joint).
        value: f64,
        /// Its lower limit, same unit.
        lower: f64,
        /// Its upper limit, same unit.
        upper: f64,
    },
    /// A joint moves faster than its velocity limit (with 1 % slack for sampling).
    #[error("at t = {t:.3} s joint `{joint}` moves at {speed:.3} rad/s, limit {limit:.3}")]
    JointSpeed {
        /// Time of the failing sample along the slowed trajectory, s.
        t: f64,
        /// The joint's name.
        joint: String,
        /// Its speed between the previous sample and this one, rad/s.
        speed: f64,
        /// Its velocity limit, rad/s.
        limit: f64,
    },
    /// The table the camera measures is not where it was stated to be.
    #[error(
        "the camera sees the table top at z = {measured:.3} m, {:.1} cm from the stated {stated:.3} m \
         (at most {:.0} cm apart): check --table-z and the camera calibration",
        100.0 * (measured - stated).abs(), 100.0 * tolerance
    )]
    TableMismatch {
        /// The table height the depth gives, base frame, m.
        measured: f64,
        /// [`SafetyConfig::table_z`] as stated, m.
        stated: f64,
        /// [`TABLE_AGREEMENT_M`].
        tolerance: f64,
    },
    /// The TCP leaves the workspace box.
    #[error("at t = {t:.3} s the TCP at ({:.3}, {:.3}, {:.3}) m leaves the workspace box", p[0], p[1], p[2])]
    Workspace {
        /// Time of the failing sample along the slowed trajectory, s.
        t: f64,
        /// The TCP position in the base frame, m.
        p: [f64; 3],
    },
    /// The TCP moves faster than the Cartesian speed limit (with 1 % slack for sampling).
    #[error("at t = {t:.3} s the TCP moves at {speed:.3} m/s, limit {limit:.3}")]
    CartesianSpeed {
        /// Time of the failing sample along the slowed trajectory, s.
        t: f64,
        /// TCP speed between the previous sample and this one, m/s.
        speed: f64,
        /// The Cartesian speed limit, m/s.
        limit: f64,
    },
    /// A moving link comes closer to the table top than the required clearance.
    #[error("at t = {t:.3} s link `{link}` comes within {clearance:.4} m of the table (minimum {minimum})")]
    TableClearance {
        /// Time of the failing sample along the slowed trajectory, s.
        t: f64,
        /// The link's name.
        link: String,
        /// Its distance to the table top, m.
        clearance: f64,
        /// [`SafetyConfig::table_clearance`], m.
        minimum: f64,
    },
    /// A moving link's spheres overlap a known obstacle.
    #[error("at t = {t:.3} s link `{link}` collides with `{obstacle}`")]
    Collision {
        /// Time of the failing sample along the slowed trajectory, s.
        t: f64,
        /// The link's name.
        link: String,
        /// The obstacle's name.
        obstacle: String,
    },
    /// A free-space move touches the planner's world or itself, by the planner's sphere model.
    #[error("at t = {t:.3} s {hit}")]
    Contact {
        /// Time of the failing sample along the slowed trajectory, s.
        t: f64,
        /// What touched what.
        hit: Hit,
    },
    /// The planner's sphere model could not be built for this robot (needed for transit checks).
    #[error("no collision model for this robot: {0}")]
    NoCollisionModel(String),
    /// A gripper width outside the gripper's physical range.
    #[error("gripper width {width} m is outside [{min}, {max}]")]
    Gripper {
        /// The commanded width, m.
        width: f64,
        /// Fully closed width, m.
        min: f64,
        /// Fully open width, m.
        max: f64,
    },
}

/// A trajectory that passed the gate, with the servo period it was checked at.
#[derive(Debug, Clone)]
pub struct CheckedTrajectory {
    trajectory: Trajectory,
    dt: f64,
}

impl CheckedTrajectory {
    /// The checked trajectory, already slowed by the speed scale: what the robot must run.
    pub fn trajectory(&self) -> &Trajectory {
        &self.trajectory
    }
    /// The servo period the checks ran at; drivers stream at this period.
    pub fn dt(&self) -> f64 {
        self.dt
    }
}

/// A gripper width that passed the gate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CheckedGripper {
    width: f64,
}

impl CheckedGripper {
    /// The checked opening between the fingers, m.
    pub fn width(&self) -> f64 {
        self.width
    }
}

/// A free-space move's surroundings: the world it was planned in and what the hand holds.
#[derive(Debug, Clone, Copy)]
pub struct Transit<'w> {
    /// The world the planner planned in (table, solids, depth cloud).
    pub world: &'w World,
    /// The object in the hand, if any, checked as part of the arm.
    pub held: Option<&'w Attached>,
}

/// Checks motions and gripper commands for one robot model; the only maker of
/// [`CheckedTrajectory`] and [`CheckedGripper`].
pub struct SafetyGate<'a> {
    model: &'a RobotModel,
    /// The gate's settings.
    pub config: SafetyConfig,
    collision: ArmCollisionModel,
    /// The planner's sphere checker (built on first transit check).
    checker: std::sync::Mutex<Option<Checker>>,
}

impl<'a> SafetyGate<'a> {
    /// A gate for `model`; the planner's sphere checker is built on the first transit check.
    pub fn new(model: &'a RobotModel, config: SafetyConfig) -> Self {
        SafetyGate {
            model,
            config,
            collision: ArmCollisionModel::new(model),
            checker: std::sync::Mutex::new(None),
        }
    }

    /// Checks `traj` at the robot's servo period against `current_q` (the robot's joints now) and
    /// `obstacles`; `gripper_opening` (0..1) places the fingers for the clearance checks.
    pub fn check(
        &self,
        traj: Trajectory,
        current_q: &[f64],
        gripper_opening: f64,
        obstacles: &[Obstacle],
    ) -> Result<CheckedTrajectory, SafetyError> {
        self.check_move(traj, current_q, gripper_opening, obstacles, None)
    }

    /// [`SafetyGate::check`] of a free-space move, which must also stay clear of `transit`'s world
    /// (table, solids, depth cloud) and of itself, held object included, by the planner's model.
    pub fn check_transit(
        &self,
        traj: Trajectory,
        current_q: &[f64],
        gripper_opening: f64,
        transit: Transit<'_>,
    ) -> Result<CheckedTrajectory, SafetyError> {
        self.check_move(
            traj,
            current_q,
            gripper_opening,
            &transit.world.boxes,
            Some(transit),
        )
    }

    fn check_move(
        &self,
        traj: Trajectory,
        current_q: &[f64],
        gripper_opening: f64,
        obstacles: &[Obstacle],
        transit: Option<Transit<'_>>,
    ) -> Result<CheckedTrajectory, SafetyError> {
        let mut guard = self.checker.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = transit {
            if guard.is_none() {
                let mut c = Checker::for_model(self.model)
                    .map_err(|e| SafetyError::NoCollisionModel(e.to_string()))?;
                c.set_padding(GATE_PADDING);
                c.set_exact_cloud(true);
                *guard = Some(c);
            }
            if let Some(c) = guard.as_mut() {
                c.set_attached(t.held.cloned());
            }
        }
        let cfg = &self.model.config;
        let workspace = cfg.workspace.for_table(self.config.table_z);
        let dt = 1.0 / cfg.servo_rate_hz;
        let scale = self.config.speed_scale;
        if !(scale.is_finite() && scale > 0.0 && scale <= 1.0) {
            return Err(SafetyError::SpeedScale { scale });
        }
        let traj = traj.slowed(1.0 / scale);
        let deviation = traj
            .start()
            .iter()
            .zip(current_q)
            .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
        if current_q.len() != traj.dof()
            || deviation.is_nan()
            || deviation > self.config.max_start_deviation
        {
            return Err(SafetyError::StartMismatch {
                deviation,
                allowed: self.config.max_start_deviation,
            });
        }
        let samples = traj.samples(dt);
        let limits = self.model.joint_limits();
        let mut prev: Option<(f64, Vec<f64>, Vector3<f64>)> = None;
        for (t, q) in &samples {
            let t = *t;
            let kin = |e: KinematicsError| SafetyError::Kinematics {
                t,
                detail: e.to_string(),
            };
            self.model.check_finite(q).map_err(kin)?;
            for (v, l) in q.iter().zip(limits) {
                if !l.contains(*v) {
                    return Err(SafetyError::JointLimit {
                        t,
                        joint: l.name.clone(),
                        value: *v,
                        lower: l.lower,
                        upper: l.upper,
                    });
                }
            }
            let tcp = self.model.fk(q).map_err(kin)?.translation.vector;
            if !workspace.contains([tcp.x, tcp.y, tcp.z]) {
                return Err(SafetyError::Workspace {
                    t,
                    p: [tcp.x, tcp.y, tcp.z],
                });
            }
            if let Some((t0, q0, p0)) = &prev {
                let h = t - t0;
                if h > 0.0 {
                    for (j, l) in limits.iter().enumerate() {
                        let speed = (q[j] - q0[j]).abs() / h;
                        let limit = cfg.limits.joint_velocity[j];
                        // 1 % slack: samples of an exact profile land on either side of the limit.
                        if speed > limit * 1.01 {
                            return Err(SafetyError::JointSpeed {
                                t,
                                joint: l.name.clone(),
                                speed,
                                limit,
                            });
                        }
                    }
                    let speed = (tcp - p0).norm() / h;
                    if speed > cfg.limits.cartesian_speed * 1.01 {
                        return Err(SafetyError::CartesianSpeed {
                            t,
                            speed,
                            limit: cfg.limits.cartesian_speed,
                        });
                    }
                }
            }
            self.check_pose(t, q, gripper_opening, obstacles)?;
            if let (Some(tr), Some(c)) = (transit, guard.as_mut()) {
                if let Some(hit) = c.first_contact(q, gripper_opening, tr.world) {
                    return Err(SafetyError::Contact { t, hit });
                }
            }
            prev = Some((t, q.clone(), tcp));
        }
        Ok(CheckedTrajectory {
            trajectory: traj,
            dt,
        })
    }

    /// Table clearance and obstacle checks for one joint configuration, with planning's model.
    pub(crate) fn check_pose(
        &self,
        t: f64,
        q: &[f64],
        gripper_opening: f64,
        obstacles: &[Obstacle],
    ) -> Result<(), SafetyError> {
        let contact = self
            .collision
            .first_contact(
                self.model,
                q,
                gripper_opening,
                self.config.table_z,
                self.config.table_clearance,
                obstacles,
            )
            .map_err(|e| SafetyError::Kinematics {
                t,
                detail: e.to_string(),
            })?;
        match contact {
            None => Ok(()),
            Some(Contact::Table { link, clearance }) => Err(SafetyError::TableClearance {
                t,
                link,
                clearance,
                minimum: self.config.table_clearance,
            }),
            Some(Contact::Obstacle { link, obstacle }) => {
                Err(SafetyError::Collision { t, link, obstacle })
            }
        }
    }

    /// Checks a gripper command against the gripper's physical range.
    pub fn check_gripper(&self, width: f64) -> Result<CheckedGripper, SafetyError> {
        let g = &self.model.config.gripper;
        if width.is_finite() && width >= g.closed_width && width <= g.open_width {
            Ok(CheckedGripper { width })
        } else {
            Err(SafetyError::Gripper {
                width,
                min: g.closed_width,
                max: g.open_width,
            })
        }
    }
}
