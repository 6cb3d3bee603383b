//! Sphere cover of a primitive: the collision model of the arm (as CuRobo does, spheres per link),
//! cheap to test against the table plane and obstacle shapes at every servo sample.

use k::nalgebra::Point3;

use crate::geometry::Shape;
use crate::kinematics::{LinkShape, RobotModel};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sphere {
    pub center: Point3<f64>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use k::nalgebra::Vector3;

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
