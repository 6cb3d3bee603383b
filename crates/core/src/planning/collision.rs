//! The collision model of the arm, owned by planning and re-used by the safety gate: spheres per
//! link (as CuRobo does; a conservative cover, cheap to test at every servo sample), the exact link
//! primitives for the table clearance, and the solids the arm must not enter.
//!
//! Planning owns it because a planner searches with it; the gate re-checks what planning made
//! with the same model, so the two can never disagree about what "collision" means.

use k::nalgebra::{Isometry3, Point3, Vector3};

use crate::geometry::Shape;
use crate::kinematics::{KinematicsError, LinkShape, RobotModel};

/// A solid the arm must not enter (a known object, a box around a fixture, an occupied voxel).
#[derive(Debug, Clone, PartialEq)]
pub struct Obstacle {
    /// Name reported in contacts and errors.
    pub name: String,
    /// The solid, centred on its own frame.
    pub shape: Shape,
    /// Pose of the shape's frame in the world (robot base) frame.
    pub world_from_shape: Isometry3<f64>,
}

/// A ball, the unit of the collision cover.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sphere {
    /// Centre, m, in the frame of whatever carries the sphere (a link, the tip, the base).
    pub center: Point3<f64>,
    /// m.
    pub radius: f64,
}

/// Spheres whose union contains the shape. Long shapes get a row of spheres along their longest
/// axis, each wide enough to cover the cross-section, so the cover is conservative but not bloated.
pub fn shape_spheres(shape: &Shape) -> Vec<Sphere> {
    let h = shape.local_half_extents();
    // Longest axis and the half-diagonal of the cross-section perpendicular to it.
    let (axis, half_len, cross) = if h.x >= h.y && h.x >= h.z {
        (0, h.x, (h.y * h.y + h.z * h.z).sqrt())
    } else if h.y >= h.z {
        (1, h.y, (h.x * h.x + h.z * h.z).sqrt())
    } else {
        (2, h.z, (h.x * h.x + h.y * h.y).sqrt())
    };
    if let Shape::Sphere { radius } = *shape {
        return vec![Sphere {
            center: Point3::origin(),
            radius,
        }];
    }
    // n spheres of radius sqrt(cross² + step²) centred every 2·step along the axis cover the box.
    let n = ((half_len / cross.max(1e-6)).ceil() as usize).clamp(1, 16);
    let step = half_len / n as f64;
    let radius = (cross * cross + step * step).sqrt();
    (0..n)
        .map(|i| {
            let mut c = Point3::origin();
            c[axis] = -half_len + step * (2 * i + 1) as f64;
            Sphere { center: c, radius }
        })
        .collect()
}

/// The sphere cover of link primitives, each sphere in its link's frame, tagged with the link.
pub fn link_spheres(shapes: &[LinkShape]) -> Vec<(String, Sphere)> {
    shapes
        .iter()
        .flat_map(|s| {
            shape_spheres(&s.shape).into_iter().map(move |sp| {
                (
                    s.link.clone(),
                    Sphere {
                        center: s.link_from_shape * sp.center,
                        radius: sp.radius,
                    },
                )
            })
        })
        .collect()
}

/// The whole robot's sphere cover in the base frame at joints `q` and gripper opening (0..1);
/// perception uses it to tell the robot's own points from obstacles.
pub fn robot_spheres(model: &RobotModel, q: &[f64], gripper_opening: f64) -> Vec<Sphere> {
    let Ok(poses) = model.link_poses(q, gripper_opening) else {
        return Vec::new();
    };
    link_spheres(&model.collision_shapes())
        .into_iter()
        .filter_map(|(link, sp)| {
            let pose = poses.iter().find(|(n, _)| *n == link)?.1;
            Some(Sphere {
                center: pose * sp.center,
                radius: sp.radius,
            })
        })
        .collect()
}

/// The collision geometry of the links that move with the arm joints (links fixed to the base sit on
/// the table by design and are skipped).
#[derive(Debug, Clone)]
pub struct ArmCollisionModel {
    /// Link spheres in link frames.
    link_spheres: Vec<(String, Sphere)>,
    /// Exact link primitives, for the table clearance.
    link_shapes: Vec<LinkShape>,
}

/// What the model found at one configuration.
#[derive(Debug, Clone, PartialEq)]
pub enum Contact {
    /// A moving link comes closer to the table top than allowed (`clearance` may be negative).
    Table {
        /// The link's name.
        link: String,
        /// Its distance to the table top, m.
        clearance: f64,
    },
    /// A link sphere overlaps an obstacle.
    Obstacle {
        /// The link's name.
        link: String,
        /// The obstacle's name.
        obstacle: String,
    },
}

impl ArmCollisionModel {
    pub(crate) fn new(model: &RobotModel) -> Self {
        let fixed = fixed_links(model);
        let link_shapes: Vec<LinkShape> = model
            .collision_shapes()
            .into_iter()
            .filter(|s| !fixed.contains(&s.link))
            .collect();
        let link_spheres = link_spheres(&link_shapes);
        ArmCollisionModel {
            link_spheres,
            link_shapes,
        }
    }

    /// The first contact at joints `q` and gripper opening (0..1): every moving primitive at least
    /// `clearance` above the plane z = `table_z` (exact lowest point), then no link sphere inside an
    /// obstacle. `Ok(None)` when the configuration is free.
    pub(crate) fn first_contact(
        &self,
        model: &RobotModel,
        q: &[f64],
        gripper_opening: f64,
        table_z: f64,
        clearance: f64,
        obstacles: &[Obstacle],
    ) -> Result<Option<Contact>, KinematicsError> {
        let poses = model.link_poses(q, gripper_opening)?;
        let pose_of = |link: &str| poses.iter().find(|(n, _)| n == link).map(|(_, p)| *p);
        for s in &self.link_shapes {
            let Some(pose) = pose_of(&s.link) else {
                continue;
            };
            let c = s.shape.lowest_z(&(pose * s.link_from_shape)) - table_z;
            if c < clearance {
                return Ok(Some(Contact::Table {
                    link: s.link.clone(),
                    clearance: c,
                }));
            }
        }
        if obstacles.is_empty() {
            return Ok(None);
        }
        for (link, sphere) in &self.link_spheres {
            let Some(pose) = pose_of(link) else {
                continue;
            };
            let c = pose * sphere.center;
            for o in obstacles {
                if sphere_hits_shape(&c, sphere.radius, &o.shape, &o.world_from_shape) {
                    return Ok(Some(Contact::Obstacle {
                        link: link.clone(),
                        obstacle: o.name.clone(),
                    }));
                }
            }
        }
        Ok(None)
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
pub(crate) fn sphere_hits_shape(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spheres_cover_every_corner_of_a_long_box() {
        let shape = Shape::Cuboid {
            half_extents: Vector3::new(0.02, 0.03, 0.2),
        };
        let s = shape_spheres(&shape);
        assert!(s.len() > 1);
        for sx in [-1.0, 1.0] {
            for sy in [-1.0, 1.0] {
                for z in [-0.2, -0.13, 0.0, 0.07, 0.2] {
                    let p = Point3::new(0.02 * sx, 0.03 * sy, z);
                    assert!(
                        s.iter()
                            .any(|sp| (p - sp.center).norm() <= sp.radius + 1e-12),
                        "{p} uncovered"
                    );
                }
            }
        }
    }
}
