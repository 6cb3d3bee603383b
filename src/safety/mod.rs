//! The one gate every motion passes before it reaches a robot.
//!
//! `SafetyGate::check` turns a `Trajectory` into a `CheckedTrajectory`, the only type a `Robot` will
//! execute; its constructor is private to this module, so an unchecked motion cannot reach a driver.
//! Checks, on samples at the robot's servo period: finite values; the trajectory starts where the
//! robot is; joint limits; joint speed; the TCP inside the workspace box and below the Cartesian speed
//! limit; every moving link (its exact primitives) above the table by a clearance; no moving link
//! sphere (a conservative cover) inside a known obstacle. Gripper commands are checked against the gripper's range.

mod spheres;

use k::nalgebra::{Isometry3, Point3, Vector3};

use crate::geometry::Shape;
use crate::kinematics::{KinematicsError, LinkShape, RobotModel};
use crate::planning::Trajectory;

pub use spheres::{link_spheres, robot_spheres, shape_spheres, Sphere};

#[derive(Debug, Clone, PartialEq)]
pub struct SafetyConfig {
    /// Height of the table top in the base frame (m).
    pub table_z: f64,
    /// Smallest allowed distance between a moving link and the table top (m).
    pub table_clearance: f64,
    /// Largest allowed gap between the robot's joints and the trajectory start (rad).
    pub max_start_deviation: f64,
    /// Plan and check everything, move nothing.
    pub dry_run: bool,
}

impl Default for SafetyConfig {
    fn default() -> Self {
        SafetyConfig {
            table_z: 0.0,
            table_clearance: 0.003,
            max_start_deviation: 0.02,
            dry_run: false,
        }
    }
}

/// A solid the arm must not enter (a known object, a box around a fixture).
#[derive(Debug, Clone, PartialEq)]
pub struct Obstacle {
    pub name: String,
    pub shape: Shape,
    pub world_from_shape: Isometry3<f64>,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SafetyError {
    #[error("trajectory starts {deviation:.4} rad from the robot's joints (allowed {allowed})")]
    StartMismatch { deviation: f64, allowed: f64 },
    #[error("at t = {t:.3} s: {detail}")]
    Kinematics { t: f64, detail: String },
    #[error(
        "at t = {t:.3} s joint `{joint}` = {value:.4} leaves its limits [{lower:.4}, {upper:.4}]"
    )]
    JointLimit {
        t: f64,
        joint: String,
        value: f64,
        lower: f64,
        upper: f64,
    },
    #[error("at t = {t:.3} s joint `{joint}` moves at {speed:.3} rad/s, limit {limit:.3}")]
    JointSpeed {
        t: f64,
        joint: String,
        speed: f64,
        limit: f64,
    },
    #[error("at t = {t:.3} s the TCP at ({:.3}, {:.3}, {:.3}) m leaves the workspace box", p[0], p[1], p[2])]
    Workspace { t: f64, p: [f64; 3] },
    #[error("at t = {t:.3} s the TCP moves at {speed:.3} m/s, limit {limit:.3}")]
    CartesianSpeed { t: f64, speed: f64, limit: f64 },
    #[error("at t = {t:.3} s link `{link}` comes within {clearance:.4} m of the table (minimum {minimum})")]
    TableClearance {
        t: f64,
        link: String,
        clearance: f64,
        minimum: f64,
    },
    #[error("at t = {t:.3} s link `{link}` collides with `{obstacle}`")]
    Collision {
        t: f64,
        link: String,
        obstacle: String,
    },
    #[error("gripper width {width} m is outside [{min}, {max}]")]
    Gripper { width: f64, min: f64, max: f64 },
}

/// A trajectory that passed the gate, with the servo period it was checked at.
#[derive(Debug, Clone)]
pub struct CheckedTrajectory {
    trajectory: Trajectory,
    dt: f64,
}

impl CheckedTrajectory {
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
    pub fn width(&self) -> f64 {
        self.width
    }
}

pub struct SafetyGate<'a> {
    model: &'a RobotModel,
    pub config: SafetyConfig,
    /// Link spheres in link frames, for links that move (links fixed to the base are skipped).
    link_spheres: Vec<(String, Sphere)>,
    /// Exact link primitives of moving links, for the table clearance.
    link_shapes: Vec<LinkShape>,
}

impl<'a> SafetyGate<'a> {
    pub fn new(model: &'a RobotModel, config: SafetyConfig) -> Self {
        // Links whose pose does not depend on the arm joints sit on the table by design.
        let fixed = fixed_links(model);
        let link_shapes: Vec<LinkShape> = model
            .collision_shapes()
            .into_iter()
            .filter(|s| !fixed.contains(&s.link))
            .collect();
        let link_spheres = link_spheres(&link_shapes);
        SafetyGate {
            model,
            config,
            link_spheres,
            link_shapes,
        }
    }

    pub fn model(&self) -> &RobotModel {
        self.model
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
        let cfg = &self.model.config;
        let dt = 1.0 / cfg.servo_rate_hz;
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
            if !cfg.workspace.contains([tcp.x, tcp.y, tcp.z]) {
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
            prev = Some((t, q.clone(), tcp));
        }
        Ok(CheckedTrajectory {
            trajectory: traj,
            dt,
        })
    }

    /// Table clearance and obstacle checks for one joint configuration.
    pub fn check_pose(
        &self,
        t: f64,
        q: &[f64],
        gripper_opening: f64,
        obstacles: &[Obstacle],
    ) -> Result<(), SafetyError> {
        let poses =
            self.model
                .link_poses(q, gripper_opening)
                .map_err(|e| SafetyError::Kinematics {
                    t,
                    detail: e.to_string(),
                })?;
        let pose_of = |link: &str| poses.iter().find(|(n, _)| n == link).map(|(_, p)| *p);
        // The table: exact lowest point of every moving primitive.
        for s in &self.link_shapes {
            let Some(pose) = pose_of(&s.link) else {
                continue;
            };
            let clearance = s.shape.lowest_z(&(pose * s.link_from_shape)) - self.config.table_z;
            if clearance < self.config.table_clearance {
                return Err(SafetyError::TableClearance {
                    t,
                    link: s.link.clone(),
                    clearance,
                    minimum: self.config.table_clearance,
                });
            }
        }
        if obstacles.is_empty() {
            return Ok(());
        }
        // Known objects: the sphere cover of every moving link.
        for (link, sphere) in &self.link_spheres {
            let Some(pose) = pose_of(link) else {
                continue;
            };
            let c = pose * sphere.center;
            for o in obstacles {
                if sphere_hits_shape(&c, sphere.radius, &o.shape, &o.world_from_shape) {
                    return Err(SafetyError::Collision {
                        t,
                        link: link.clone(),
                        obstacle: o.name.clone(),
                    });
                }
            }
        }
        Ok(())
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

/// Links that never move with the arm joints: ancestors of the first arm joint.
fn fixed_links(model: &RobotModel) -> Vec<String> {
    let zero = vec![0.0; model.dof()];
    let other = vec![0.3; model.dof()];
    let (Ok(a), Ok(b)) = (model.link_poses(&zero, 0.0), model.link_poses(&other, 0.0)) else {
        return Vec::new();
    };
    a.iter()
        .zip(&b)
        .filter(|((_, pa), (_, pb))| {
            let (dp, dr) = crate::kinematics::pose_error(pa, pb);
            dp < 1e-12 && dr < 1e-12
        })
        .map(|((n, _), _)| n.clone())
        .collect()
}

/// Whether a sphere (world centre, radius) overlaps a solid. Exact for spheres and boxes; cylinders
/// and capsules use the exact distance to their axis segment.
fn sphere_hits_shape(
    c: &Point3<f64>,
    r: f64,
    shape: &Shape,
    world_from_shape: &Isometry3<f64>,
) -> bool {
    let p = world_from_shape.inverse_transform_point(c);
    match *shape {
        Shape::Sphere { radius } => p.coords.norm() <= radius + r,
        Shape::Cuboid { half_extents: h } => {
            let d = Vector3::new(
                (p.x.abs() - h.x).max(0.0),
                (p.y.abs() - h.y).max(0.0),
                (p.z.abs() - h.z).max(0.0),
            );
            d.norm() <= r
        }
        Shape::Cylinder {
            radius,
            half_height,
        } => {
            let radial = (p.x * p.x + p.y * p.y).sqrt();
            let dr = (radial - radius).max(0.0);
            let dz = (p.z.abs() - half_height).max(0.0);
            (dr * dr + dz * dz).sqrt() <= r
        }
        Shape::Capsule {
            radius,
            half_height,
        } => {
            let z = p.z.clamp(-half_height, half_height);
            Vector3::new(p.x, p.y, p.z - z).norm() <= radius + r
        }
    }
}
