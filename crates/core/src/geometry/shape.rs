//! Primitive solids (box, cylinder, sphere, capsule): the one shape vocabulary shared by robot link
//! geometry, simulator objects, the simulated camera, collision checks and visualisation.

use k::nalgebra::{Point3, Vector3};

/// A solid centred on its own origin. Cylinders and capsules run along their local z axis (URDF's
/// convention), so shapes read from a URDF need no extra rotation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Shape {
    /// A box.
    Cuboid {
        /// Half the side lengths along x, y, z, m.
        half_extents: Vector3<f64>,
    },
    /// A flat-ended cylinder along z.
    Cylinder {
        /// Radius of the circular cross-section, m.
        radius: f64,
        /// Half the length along z, m.
        half_height: f64,
    },
    /// A ball.
    Sphere {
        /// Radius, m.
        radius: f64,
    },
    /// A cylinder along z with hemispherical caps.
    Capsule {
        /// Radius of the cylinder and of the caps, m.
        radius: f64,
        /// Half the length of the cylindrical part (caps excluded) along z, m.
        half_height: f64,
    },
}

impl Shape {
    /// Radius of a sphere about the origin that contains the shape (for cheap culling).
    pub fn bounding_radius(&self) -> f64 {
        match *self {
            Shape::Cuboid { half_extents } => half_extents.norm(),
            Shape::Cylinder {
                radius,
                half_height,
            } => (radius * radius + half_height * half_height).sqrt(),
            Shape::Sphere { radius } => radius,
            Shape::Capsule {
                radius,
                half_height,
            } => radius + half_height,
        }
    }

    /// Support function: the largest `p · dir` over points p of the solid (shape frame, `dir` need
    /// not be unit). Gives exact lowest points and extents along any direction.
    pub fn support(&self, dir: &Vector3<f64>) -> f64 {
        match *self {
            Shape::Cuboid { half_extents: h } => {
                dir.x.abs() * h.x + dir.y.abs() * h.y + dir.z.abs() * h.z
            }
            Shape::Cylinder {
                radius,
                half_height,
            } => dir.z.abs() * half_height + radius * (dir.x * dir.x + dir.y * dir.y).sqrt(),
            Shape::Sphere { radius } => radius * dir.norm(),
            Shape::Capsule {
                radius,
                half_height,
            } => dir.z.abs() * half_height + radius * dir.norm(),
        }
    }

    /// Lowest world z of the solid placed at `world_from_shape`.
    pub(crate) fn lowest_z(&self, world_from_shape: &k::nalgebra::Isometry3<f64>) -> f64 {
        let down_local = world_from_shape.rotation.inverse() * Vector3::new(0.0, 0.0, -1.0);
        world_from_shape.translation.z - self.support(&down_local)
    }

    /// Whether a point in the shape's own frame lies inside (or on) the solid.
    pub fn contains_local(&self, p: &Point3<f64>) -> bool {
        match *self {
            Shape::Cuboid { half_extents: h } => {
                p.x.abs() <= h.x && p.y.abs() <= h.y && p.z.abs() <= h.z
            }
            Shape::Cylinder {
                radius,
                half_height,
            } => p.z.abs() <= half_height && p.x * p.x + p.y * p.y <= radius * radius,
            Shape::Sphere { radius } => p.coords.norm_squared() <= radius * radius,
            Shape::Capsule {
                radius,
                half_height,
            } => {
                let z = p.z.clamp(-half_height, half_height);
                let d = Vector3::new(p.x, p.y, p.z - z);
                d.norm_squared() <= radius * radius
            }
        }
    }

    /// Half extents of the shape's axis-aligned box in its own frame.
    pub fn local_half_extents(&self) -> Vector3<f64> {
        match *self {
            Shape::Cuboid { half_extents } => half_extents,
            Shape::Cylinder {
                radius,
                half_height,
            } => Vector3::new(radius, radius, half_height),
            Shape::Sphere { radius } => Vector3::new(radius, radius, radius),
            Shape::Capsule {
                radius,
                half_height,
            } => Vector3::new(radius, radius, half_height + radius),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containment_matches_the_definitions() {
        let c = Shape::Cylinder {
            radius: 0.1,
            half_height: 0.2,
        };
        assert!(c.contains_local(&Point3::new(0.07, 0.07, 0.19)));
        assert!(!c.contains_local(&Point3::new(0.08, 0.08, 0.0)));
        assert!(!c.contains_local(&Point3::new(0.0, 0.0, 0.21)));
        let cap = Shape::Capsule {
            radius: 0.1,
            half_height: 0.2,
        };
        assert!(cap.contains_local(&Point3::new(0.0, 0.0, 0.29)));
        assert!(!cap.contains_local(&Point3::new(0.08, 0.0, 0.28)));
        assert!((c.bounding_radius() - (0.01f64 + 0.04).sqrt()).abs() < 1e-12);
    }

    #[test]
    fn lowest_point_of_tilted_shapes() {
        use k::nalgebra::{Isometry3, Translation3, UnitQuaternion};
        let q = UnitQuaternion::from_euler_angles(std::f64::consts::FRAC_PI_2, 0.0, 0.0);
        let pose = Isometry3::from_parts(Translation3::new(0.0, 0.0, 1.0), q);
        // A cylinder lying on its side rests on its radius.
        let c = Shape::Cylinder {
            radius: 0.1,
            half_height: 0.3,
        };
        assert!((c.lowest_z(&pose) - 0.9).abs() < 1e-12);
        // A box rotated 45 degrees about x reaches down by its half diagonal.
        let b = Shape::Cuboid {
            half_extents: Vector3::new(0.1, 0.2, 0.2),
        };
        let q45 = UnitQuaternion::from_euler_angles(std::f64::consts::FRAC_PI_4, 0.0, 0.0);
        let pose = Isometry3::from_parts(Translation3::new(0.0, 0.0, 1.0), q45);
        assert!((b.lowest_z(&pose) - (1.0 - 0.2 * 2f64.sqrt())).abs() < 1e-12);
        let s = Shape::Sphere { radius: 0.25 };
        assert!((s.lowest_z(&pose) - 0.75).abs() < 1e-12);
    }
}
