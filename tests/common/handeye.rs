//! Hand-eye test rig: a camera looking at the table, a target on the gripper, random tilt axes.
//! Shared by the hand-eye solve tests and the calibration sanity tests.

use pointact::nalgebra::{Isometry3, Point3, Unit, Vector3};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// Camera optical frame at `eye` looking at `target` (x right, y down, z forward), base z up: the
/// crate's one look-at.
pub fn look_at(eye: [f64; 3], target: [f64; 3]) -> Isometry3<f64> {
    pointact::geometry::camera_look_at(Point3::from(eye), Point3::from(target), Vector3::z())
        .expect("a camera that is not looking straight up or down")
}

/// Where the target sits on the gripper (a few cm off the flange, tilted).
pub fn gripper_from_target() -> Isometry3<f64> {
    Isometry3::new(
        Vector3::new(0.01, -0.02, 0.06),
        Vector3::new(0.05, -0.08, 0.3),
    )
}

/// A random unit axis, uniform over directions (rejection sampling in the unit ball).
pub fn random_axis(rng: &mut ChaCha8Rng) -> Unit<Vector3<f64>> {
    loop {
        let v = Vector3::new(
            rng.gen_range(-1.0..1.0),
            rng.gen_range(-1.0..1.0),
            rng.gen_range(-1.0..1.0),
        );
        if v.norm() > 0.1 && v.norm() < 1.0 {
            return Unit::new_normalize(v);
        }
    }
}
