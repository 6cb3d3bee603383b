//! Hand-eye test rig: a camera looking at the table, a target on the gripper, random tilt axes.
//! Shared by the hand-eye solve tests and the calibration sanity tests.

use std::ops::Range;

use pointact::calibrate::HandEyeSample;
use pointact::nalgebra::{Isometry3, Point3, Translation3, Unit, UnitQuaternion, Vector3};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Camera optical frame at `eye` looking at `target` (x right, y down, z forward), base z up: the
/// crate's one look-at.
pub fn look_at(eye: [f64; 3], target: [f64; 3]) -> Isometry3<f64> {
    pointact::geometry::synthetic::camera_look_at(
        Point3::from(eye),
        Point3::from(target),
        Vector3::z(),
    )
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

/// Exact samples of the chain camera_from_target = x⁻¹ · base_from_gripper · y: robot poses around a
/// nominal one (±12 cm), turned by `rotate(axis, angle)` with a random axis and an angle drawn from
/// `angles_deg`; good data, so residuals are ~0.
pub fn tilted_samples(
    x: &Isometry3<f64>,
    y: &Isometry3<f64>,
    n: usize,
    seed: u64,
    angles_deg: Range<f64>,
    rotate: impl Fn(Unit<Vector3<f64>>, f64) -> UnitQuaternion<f64>,
) -> Vec<HandEyeSample> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let nominal = UnitQuaternion::from_euler_angles(0.3, -1.2, 0.4);
    (0..n)
        .map(|_| {
            let axis = random_axis(&mut rng);
            let angle = rng.gen_range(angles_deg.clone()).to_radians();
            let t = Vector3::new(
                0.45 + rng.gen_range(-0.12..0.12),
                rng.gen_range(-0.12..0.12),
                0.3 + rng.gen_range(-0.12..0.12),
            );
            let base_from_gripper =
                Isometry3::from_parts(Translation3::from(t), nominal * rotate(axis, angle));
            HandEyeSample {
                base_from_gripper,
                camera_from_target: x.inverse() * base_from_gripper * y,
            }
        })
        .collect()
}
