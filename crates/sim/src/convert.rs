//! The boundary between our f64 nalgebra maths and rapier's f32 glam maths. Nothing rapier-typed
//! leaves `sim`; every pose crosses here.

use k::nalgebra::{Isometry3, Quaternion, Translation3, UnitQuaternion, Vector3};
use rapier3d::prelude::{Pose, Rotation, SharedShape, Vector};

use pointact_core::geometry::Shape;

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

/// A rapier shape for one of ours, and the pose of rapier's shape in our shape's frame.
///
/// What works in rapier 0.36 (each found by letting objects come to rest in tests): boxes are
/// exact; flat discs (plate and container bases, `half_height <= FLAT_RATIO * radius`) are parry's
/// exact cylinder, because things resting on a polyhedral disc kept creeping; every other curved
/// solid (cans, capsules, spheres) is a convex polyhedron with 12 vertices around and its vertices
/// on the true surface (faces at most 3.4 % of the radius inside), because parry's exact round
/// shapes picked up a spurious rolling torque and rolled or rocked forever, and polyhedra with 16 or
/// more sides around still rocked now and then (1 scripted episode in 70). The renderer still draws
/// the exact shapes.
pub(crate) fn to_shared_shape(shape: &Shape) -> (SharedShape, Isometry3<f64>) {
    let exact_cylinder = |radius: f64, half_height: f64| {
        (
            // Parry's cylinders run along y; ours along z.
            SharedShape::cylinder(half_height as f32, radius as f32),
            Isometry3::rotation(Vector3::x() * std::f64::consts::FRAC_PI_2),
        )
    };
    match *shape {
        Shape::Cuboid { half_extents: h } => {
            return (
                SharedShape::cuboid(h.x as f32, h.y as f32, h.z as f32),
                Isometry3::identity(),
            )
        }
        Shape::Cylinder {
            radius,
            half_height,
        } if half_height <= FLAT_RATIO * radius => return exact_cylinder(radius, half_height),
        _ => {}
    }
    if let Some(hull) = SharedShape::convex_hull(&surface_points(shape)) {
        return (hull, Isometry3::identity());
    }
    // Only for degenerate sizes, which scene loading rejects: the exact shape.
    match *shape {
        Shape::Cylinder {
            radius,
            half_height,
        } => exact_cylinder(radius, half_height),
        Shape::Capsule {
            radius,
            half_height,
        } => (
            SharedShape::capsule_z(half_height as f32, radius as f32),
            Isometry3::identity(),
        ),
        Shape::Sphere { radius } => (SharedShape::ball(radius as f32), Isometry3::identity()),
        Shape::Cuboid { half_extents: h } => (
            SharedShape::cuboid(h.x as f32, h.y as f32, h.z as f32),
            Isometry3::identity(),
        ),
    }
}

/// Cylinders at most this tall (half height over radius) count as flat discs.
const FLAT_RATIO: f64 = 0.25;

/// Vertices around each circle of a curved shape (see `to_shared_shape` for why 12).
const AROUND: usize = 12;
/// Latitude rings per hemisphere (besides the equator and the pole).
const LATITUDES: usize = 3;

fn ring(r: f64, z: f64, out: &mut Vec<Vector>) {
    // Half a step off the x axis: a capsule laid along x (its local x pointing down) then rests
    // on a face, not balanced on an edge.
    for k in 0..AROUND {
        let a = std::f64::consts::TAU * (k as f64 + 0.5) / AROUND as f64;
        out.push(Vector::new(
            (r * a.cos()) as f32,
            (r * a.sin()) as f32,
            z as f32,
        ));
    }
}

/// A hemisphere of radius `r` centred at height `z0`, pointing up (`up` = 1) or down (−1).
fn cap(r: f64, z0: f64, up: f64, out: &mut Vec<Vector>) {
    for i in 0..=LATITUDES {
        let lat = std::f64::consts::FRAC_PI_2 * i as f64 / (LATITUDES + 1) as f64;
        ring(r * lat.cos(), z0 + up * r * lat.sin(), out);
    }
    out.push(Vector::new(0.0, 0.0, (z0 + up * r) as f32));
}

/// Points on the surface of a curved shape whose convex hull stands in for it.
fn surface_points(shape: &Shape) -> Vec<Vector> {
    let mut pts = Vec::new();
    match *shape {
        Shape::Cylinder {
            radius,
            half_height,
        } => {
            ring(radius, -half_height, &mut pts);
            ring(radius, half_height, &mut pts);
        }
        Shape::Sphere { radius } => {
            cap(radius, 0.0, 1.0, &mut pts);
            cap(radius, 0.0, -1.0, &mut pts);
        }
        Shape::Capsule {
            radius,
            half_height,
        } => {
            cap(radius, half_height, 1.0, &mut pts);
            cap(radius, -half_height, -1.0, &mut pts);
        }
        Shape::Cuboid { .. } => {}
    }
    pts
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
        // Tall cylinders become polyhedra along z with the same extents.
        let (shape, fix) = to_shared_shape(&Shape::Cylinder {
            radius: 0.1,
            half_height: 0.2,
        });
        assert_eq!(fix, Isometry3::identity());
        let (cap, _) = to_shared_shape(&Shape::Capsule {
            radius: 0.1,
            half_height: 0.2,
        });
        assert!((cap.compute_local_aabb().maxs.z - 0.3).abs() < 1e-6);
        // Flat discs stay exact cylinders, turned from parry's y axis onto z.
        let (_, fix) = to_shared_shape(&Shape::Cylinder {
            radius: 0.1,
            half_height: 0.01,
        });
        assert!((fix * Vector3::y() - Vector3::z()).norm() < 1e-12);
        let aabb = shape.compute_local_aabb();
        // Vertices on the circle, none beyond it.
        assert!((aabb.maxs.z - 0.2).abs() < 1e-6);
        assert!(aabb.maxs.x <= 0.1 + 1e-6 && aabb.maxs.x >= 0.1 * 0.96);
    }
}
