//! SimplerEnv's stock WidowX arm controller (`arm_pd_ee_target_delta_pose_align2`, frame
//! `ee_align2`, `use_target`) as pose algebra, both ways: [`apply_delta`] is what the controller
//! does with a 6-D action, [`delta_for`] the action that lands its next target on a pose we chose.
//!
//! Why both live here: the bridge server turns a planned absolute end-effector pose into the
//! controller's delta ([`delta_for`]), and the built-in simulator, standing in for SimplerEnv in
//! `eval bridge`, applies deltas the way SimplerEnv does ([`apply_delta`]); one definition keeps
//! the two ends from drifting apart, and the round trip is the test.
//!
//! The controller (ManiSkill2_real2sim `agents/controllers/pd_ee_pose.py`, `compute_target_pose`),
//! all in the robot-base frame: with `c` the current end-effector position (from the measured
//! joints) and `prev` the controller's previous *target* pose,
//! `target = (T(c) · Δ · T(c)⁻¹) · prev` where `Δ = (R(rotvec), dp)`, i.e. the rotation turns
//! about the current end-effector position with base-frame axes and `dp` translates in base-frame
//! axes. Solving for `Δ` (docs/references.md §5): `R = R* · R_prevᵀ`,
//! `dp = p* − c − R (p_prev − c)`.
//!
//! Poses travel as `[x, y, z, qw, qx, qy, qz]` (SAPIEN's order); [`pose_from_wxyz`] and
//! [`pose_to_wxyz`] convert, refusing non-finite values and quaternions far from unit length.

use k::nalgebra::{Isometry3, Point3, Quaternion, Translation3, UnitQuaternion, Vector3};

use super::GeometryError;

/// The arm part of the controller's action: translation (m) and rotation vector (rad), base frame.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EeDelta {
    /// Translation in base-frame axes, m.
    pub translation: Vector3<f64>,
    /// Rotation vector (axis times angle) in base-frame axes, rad; turns about the current
    /// end-effector position.
    pub rotation: Vector3<f64>,
}

impl EeDelta {
    /// No motion: both parts zero.
    pub const ZERO: EeDelta = EeDelta {
        translation: Vector3::new(0.0, 0.0, 0.0),
        rotation: Vector3::new(0.0, 0.0, 0.0),
    };

    /// `[dx, dy, dz, rx, ry, rz]`, the first six entries of the 7-D action.
    pub fn to_array(&self) -> [f64; 6] {
        let (t, r) = (self.translation, self.rotation);
        [t.x, t.y, t.z, r.x, r.y, r.z]
    }

    /// Reads `[dx, dy, dz, rx, ry, rz]` from the first six entries of `a` (extra entries, such as
    /// the gripper's, are ignored); fails unless there are six finite numbers.
    pub fn from_slice(a: &[f64]) -> Result<EeDelta, GeometryError> {
        if a.len() < 6 || a[..6].iter().any(|v| !v.is_finite()) {
            return Err(GeometryError::InvalidPose(format!(
                "an end-effector delta needs 6 finite numbers, got {a:?}"
            )));
        }
        Ok(EeDelta {
            translation: Vector3::new(a[0], a[1], a[2]),
            rotation: Vector3::new(a[3], a[4], a[5]),
        })
    }
}

/// The controller's next target after `delta`, from its previous target `prev` and the current
/// end-effector position `current` (all base frame).
pub fn apply_delta(
    delta: &EeDelta,
    prev: &Isometry3<f64>,
    current: &Point3<f64>,
) -> Isometry3<f64> {
    let r = UnitQuaternion::from_scaled_axis(delta.rotation);
    let c = current.coords;
    let p = c + delta.translation + r * (prev.translation.vector - c);
    Isometry3::from_parts(Translation3::from(p), r * prev.rotation)
}

/// The delta that makes the controller's next target exactly `desired` (see the module docs).
/// The rotation vector is the shortest one (angle ≤ π).
pub fn delta_for(
    desired: &Isometry3<f64>,
    prev: &Isometry3<f64>,
    current: &Point3<f64>,
) -> EeDelta {
    let r = desired.rotation * prev.rotation.inverse();
    let c = current.coords;
    let dp = desired.translation.vector - c - r * (prev.translation.vector - c);
    EeDelta {
        translation: dp,
        rotation: r.scaled_axis(),
    }
}

/// A pose from `[x, y, z, qw, qx, qy, qz]`. The quaternion must be within 1e-3 of unit length
/// (then it is normalised): anything else is a sender's bug, not a rounding.
pub fn pose_from_wxyz(v: &[f64]) -> Result<Isometry3<f64>, GeometryError> {
    if v.len() != 7 || v.iter().any(|x| !x.is_finite()) {
        return Err(GeometryError::InvalidPose(format!(
            "a pose is 7 finite numbers [x, y, z, qw, qx, qy, qz], got {v:?}"
        )));
    }
    let q = Quaternion::new(v[3], v[4], v[5], v[6]);
    let n = q.norm();
    if (n - 1.0).abs() > 1e-3 {
        return Err(GeometryError::InvalidPose(format!(
            "pose quaternion [{}, {}, {}, {}] has length {n:.6}, not 1",
            v[3], v[4], v[5], v[6]
        )));
    }
    Ok(Isometry3::from_parts(
        Translation3::new(v[0], v[1], v[2]),
        UnitQuaternion::from_quaternion(q),
    ))
}

/// `[x, y, z, qw, qx, qy, qz]` of a pose, with `qw ≥ 0`.
pub fn pose_to_wxyz(p: &Isometry3<f64>) -> [f64; 7] {
    let t = p.translation.vector;
    let mut q = *p.rotation.quaternion();
    if q.w < 0.0 {
        q = -q;
    }
    [t.x, t.y, t.z, q.w, q.i, q.j, q.k]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pose(t: [f64; 3], axis: [f64; 3], angle: f64) -> Isometry3<f64> {
        Isometry3::from_parts(
            Translation3::new(t[0], t[1], t[2]),
            UnitQuaternion::from_scaled_axis(Vector3::from(axis).normalize() * angle),
        )
    }

    #[test]
    fn zero_delta_keeps_the_previous_target() {
        let prev = pose([0.3, 0.1, 0.2], [0.0, 1.0, 0.0], 1.2);
        let out = apply_delta(&EeDelta::ZERO, &prev, &Point3::new(0.25, 0.12, 0.18));
        assert!((out.translation.vector - prev.translation.vector).norm() < 1e-15);
        assert!(out.rotation.angle_to(&prev.rotation) < 1e-12);
    }

    #[test]
    fn pure_translation_moves_the_target_by_dp_whatever_the_current_pose() {
        // With no rotation the current position drops out: target = prev + dp.
        let prev = pose([0.3, 0.1, 0.2], [1.0, 0.0, 0.0], 0.4);
        let d = EeDelta {
            translation: Vector3::new(0.01, -0.02, 0.005),
            rotation: Vector3::zeros(),
        };
        let out = apply_delta(&d, &prev, &Point3::new(-5.0, 7.0, 1.0));
        let want = prev.translation.vector + d.translation;
        assert!((out.translation.vector - want).norm() < 1e-15);
    }

    #[test]
    fn rotation_turns_about_the_current_position() {
        // A quarter turn about base z, with the current EE at the origin of the turn: the
        // previous target at (0.1, 0, 0) from it goes to (0, 0.1, 0) from it.
        let prev = pose([0.4, 0.0, 0.2], [0.0, 0.0, 1.0], 0.0);
        let c = Point3::new(0.3, 0.0, 0.2);
        let d = EeDelta {
            translation: Vector3::zeros(),
            rotation: Vector3::new(0.0, 0.0, std::f64::consts::FRAC_PI_2),
        };
        let out = apply_delta(&d, &prev, &c);
        assert!((out.translation.vector - Vector3::new(0.3, 0.1, 0.2)).norm() < 1e-12);
        let (axis, angle) = out.rotation.axis_angle().unwrap();
        assert!((angle - std::f64::consts::FRAC_PI_2).abs() < 1e-12);
        assert!((axis.into_inner() - Vector3::z()).norm() < 1e-12);
    }

    #[test]
    fn delta_for_lands_the_next_target_on_the_desired_pose() {
        let cases = [
            (
                pose([0.3, 0.1, 0.2], [0.0, 1.0, 0.0], 1.4),
                pose([0.28, 0.05, 0.1], [0.2, 1.0, 0.1], 1.5),
                Point3::new(0.31, 0.09, 0.21),
            ),
            (
                pose([0.2, -0.1, 0.3], [1.0, 0.0, 0.0], 3.0),
                pose([0.25, 0.0, 0.05], [0.0, 0.0, 1.0], -2.9),
                Point3::new(0.0, 0.0, 0.0),
            ),
        ];
        for (prev, desired, c) in cases {
            let d = delta_for(&desired, &prev, &c);
            assert!(d.rotation.norm() <= std::f64::consts::PI + 1e-12);
            let out = apply_delta(&d, &prev, &c);
            assert!((out.translation.vector - desired.translation.vector).norm() < 1e-12);
            assert!(out.rotation.angle_to(&desired.rotation) < 1e-9);
        }
    }

    #[test]
    fn wxyz_round_trip_and_refusals() {
        let p = pose([0.1, 0.2, 0.3], [1.0, 2.0, 3.0], 2.0);
        let back = pose_from_wxyz(&pose_to_wxyz(&p)).unwrap();
        assert!((back.translation.vector - p.translation.vector).norm() < 1e-15);
        assert!(back.rotation.angle_to(&p.rotation) < 1e-12);
        // SAPIEN order: identity is [.., 1, 0, 0, 0].
        let id = pose_from_wxyz(&[0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]).unwrap();
        assert_eq!(id.rotation, UnitQuaternion::identity());
        assert!(pose_from_wxyz(&[0.0; 7]).is_err());
        assert!(pose_from_wxyz(&[0.0, 0.0, f64::NAN, 1.0, 0.0, 0.0, 0.0]).is_err());
        assert!(pose_from_wxyz(&[0.0, 0.0, 0.0, 1.0, 0.0, 0.0]).is_err());
        assert!(EeDelta::from_slice(&[0.0, 0.0, 0.0, f64::INFINITY, 0.0, 0.0]).is_err());
    }
}
