//! The boundary between our f64 nalgebra maths and rapier's f32 glam maths. Nothing rapier-typed
//! leaves `sim`; every pose crosses here.

use k::nalgebra::{Isometry3, Quaternion, Translation3, UnitQuaternion, Vector3};
use rapier3d::prelude::{Pose, Rotation, SharedShape, Vector};

use crate::geometry::Shape;

pub(crate) fn to_pose(iso: &Isometry3<f64>) -> Pose {
    let t = iso.translation.vector;
    let q = iso.rotation.coords; // (i, j, k, w)
    Pose::from_parts(
        Vector::new(t.x as f32, t.y as f32, t.z as f32),
        Rotation::from_xyzw(q.x as f32, q.y as f32, q.z as f32, q.w as f32).normalize(),
    )
}

pub(crate) fn from_pose(p: &Pose) -> Isometry3<f64> {
    let t = p.translation;
    let r = p.rotation;
    Isometry3::from_parts(
        Translation3::new(f64::from(t.x), f64::from(t.y), f64::from(t.z)),
        UnitQuaternion::from_quaternion(Quaternion::new(
            f64::from(r.w),
            f64::from(r.x),
            f64::from(r.y),
            f64::from(r.z),
        )),
    )
}

pub(crate) fn to_vec(v: &Vector3<f64>) -> Vector {
    Vector::new(v.x as f32, v.y as f32, v.z as f32)
}

pub(crate) fn from_vec(v: Vector) -> Vector3<f64> {
    Vector3::new(f64::from(v.x), f64::from(v.y), f64::from(v.z))
}

/// A rapier shape for one of ours, and the rotation to put between our shape frame and rapier's:
/// parry's cylinders run along y, ours (URDF convention) along z.
pub(crate) fn to_shared_shape(shape: &Shape) -> (SharedShape, Isometry3<f64>) {
    match *shape {
        Shape::Cuboid { half_extents: h } => (
            SharedShape::cuboid(h.x as f32, h.y as f32, h.z as f32),
            Isometry3::identity(),
        ),
        Shape::Cylinder {
            radius,
            half_height,
        } => (
            SharedShape::cylinder(half_height as f32, radius as f32),
            Isometry3::rotation(Vector3::x() * std::f64::consts::FRAC_PI_2),
        ),
        Shape::Sphere { radius } => (SharedShape::ball(radius as f32), Isometry3::identity()),
        Shape::Capsule {
            radius,
            half_height,
        } => (
            SharedShape::capsule_z(half_height as f32, radius as f32),
            Isometry3::identity(),
        ),
    }
}

/// Volume of a shape, m³ (to spread an object's mass over its primitives).
pub(crate) fn volume(shape: &Shape) -> f64 {
    use std::f64::consts::PI;
    match *shape {
        Shape::Cuboid { half_extents: h } => 8.0 * h.x * h.y * h.z,
        Shape::Cylinder {
            radius,
            half_height,
        } => PI * radius * radius * 2.0 * half_height,
        Shape::Sphere { radius } => 4.0 / 3.0 * PI * radius.powi(3),
        Shape::Capsule {
            radius,
            half_height,
        } => PI * radius * radius * 2.0 * half_height + 4.0 / 3.0 * PI * radius.powi(3),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poses_round_trip() {
        let iso = Isometry3::from_parts(
            Translation3::new(0.3, -0.2, 0.1),
            UnitQuaternion::from_euler_angles(0.3, -0.7, 2.0),
        );
        let back = from_pose(&to_pose(&iso));
        assert!((back.translation.vector - iso.translation.vector).norm() < 1e-6);
        assert!(back.rotation.angle_to(&iso.rotation) < 1e-6);
        // The cylinder correction maps rapier's y axis onto our z axis.
        let (_, fix) = to_shared_shape(&Shape::Cylinder {
            radius: 0.1,
            half_height: 0.2,
        });
        assert!((fix * Vector3::y() - Vector3::z()).norm() < 1e-12);
    }
}
