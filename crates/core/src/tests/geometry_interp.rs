//! SE(3) path interpolation: through the waypoints, continuous, straight for two waypoints,
//! slerp for rotation, arc-length sampling.

use crate::geometry::interp::slerp_shortest;
use crate::geometry::interp::Pose;
use crate::geometry::interp::SePath;
use crate::geometry::GeometryError;
use k::nalgebra::{Isometry3, Translation3, UnitQuaternion, Vector3};

fn pose(x: f64, y: f64, z: f64, roll: f64, pitch: f64, yaw: f64) -> Pose {
    Isometry3::from_parts(
        Translation3::new(x, y, z),
        UnitQuaternion::from_euler_angles(roll, pitch, yaw),
    )
}

/// An uneven trace like a pointer's: short and long hops, a turn, rotation changing throughout.
fn trace() -> Vec<Pose> {
    vec![
        pose(0.30, -0.20, 0.10, 3.1, 0.0, 0.0),
        pose(0.32, -0.18, 0.12, 3.0, 0.1, 0.2),
        pose(0.45, -0.05, 0.15, 2.9, 0.2, 0.6),
        pose(0.50, 0.10, 0.12, 3.1, -0.1, 1.2),
        pose(0.40, 0.25, 0.08, 3.12, 0.0, 1.6),
    ]
}

fn dist(a: &Pose, b: &Pose) -> (f64, f64) {
    (
        (a.translation.vector - b.translation.vector).norm(),
        a.rotation.angle_to(&b.rotation),
    )
}

#[test]
fn passes_exactly_through_every_waypoint() {
    let wps = trace();
    let path = SePath::new(&wps).expect("path");
    let params = path.waypoint_params();
    assert_eq!(params.len(), wps.len());
    assert_eq!((params[0], *params.last().expect("last")), (0.0, 1.0));
    assert!(params.windows(2).all(|w| w[0] < w[1]));
    for (wp, &s) in wps.iter().zip(&params) {
        let (dp, dr) = dist(&path.sample(s), wp);
        assert!(dp < 1e-12 && dr < 1e-7, "s = {s}: {dp} m, {dr} rad");
    }
}

#[test]
fn position_is_continuous_with_continuous_velocity() {
    let path = SePath::new(&trace()).expect("path");
    let params = path.waypoint_params();
    let h = 1e-7;
    let velocity = |s: f64, side: f64| {
        // One-sided difference quotient on the given side of s.
        let a = path.sample(s).translation.vector;
        let b = path.sample(s + side * h).translation.vector;
        (b - a) / (side * h)
    };
    for &s in &params[1..params.len() - 1] {
        let (left, right) = (path.sample(s - 1e-9), path.sample(s + 1e-9));
        let (dp, dr) = dist(&left, &right);
        assert!(dp < 1e-8 && dr < 1e-6, "jump at waypoint s = {s}");
        let (vl, vr) = (velocity(s, -1.0), velocity(s, 1.0));
        assert!(
            (vl - vr).norm() < 1e-4 * vl.norm().max(1.0),
            "velocity jumps at s = {s}: {vl:?} vs {vr:?}"
        );
    }
    // Dense sampling has no jumps anywhere.
    let n = 4000;
    for i in 0..n {
        let (a, b) = (
            path.sample(i as f64 / n as f64),
            path.sample((i + 1) as f64 / n as f64),
        );
        let (dp, dr) = dist(&a, &b);
        assert!(dp < 1e-3 && dr < 5e-3, "step {i}: {dp} m {dr} rad");
    }
}

#[test]
fn two_waypoints_give_a_straight_line_at_constant_speed_and_exact_slerp() {
    let a = pose(0.3, -0.1, 0.2, 0.1, 0.2, 0.3);
    let b = pose(0.6, 0.2, 0.05, -0.4, 0.5, 2.0);
    let path = SePath::new(&[a, b]).expect("path");
    let (pa, pb) = (a.translation.vector, b.translation.vector);
    assert!((path.length() - (pb - pa).norm()).abs() < 1e-12);
    for i in 0..=20 {
        let s = i as f64 / 20.0;
        let p = path.sample(s);
        let expected = pa + (pb - pa) * s;
        assert!((p.translation.vector - expected).norm() < 1e-12, "s = {s}");
        // Analytic slerp (nalgebra's, independently of ours).
        let q = a.rotation.slerp(&b.rotation, s);
        assert!(p.rotation.angle_to(&q) < 1e-9, "rotation at s = {s}");
    }
    let mid = path.sample(0.5).rotation;
    let half = a.rotation
        * UnitQuaternion::from_scaled_axis((a.rotation.inverse() * b.rotation).scaled_axis() * 0.5);
    assert!(mid.angle_to(&half) < 1e-12);
    assert!((mid.angle_to(&a.rotation) - mid.angle_to(&b.rotation)).abs() < 1e-12);
    // By arc length, too.
    let by_len = path.sample_at_distance(path.length() * 0.25);
    assert!((by_len.translation.vector - (pa + (pb - pa) * 0.25)).norm() < 1e-9);
}

#[test]
fn slerp_takes_the_short_way_even_for_negated_quaternions() {
    let a = UnitQuaternion::from_euler_angles(0.0, 0.0, 0.2);
    let b = UnitQuaternion::from_euler_angles(0.0, 0.0, 1.0);
    let b_neg = UnitQuaternion::new_unchecked(-b.into_inner());
    let m = slerp_shortest(&a, &b_neg, 0.5);
    let (_, _, yaw) = m.euler_angles();
    assert!((yaw - 0.6).abs() < 1e-12, "{yaw}");
    // A half turn is still well defined.
    let c = UnitQuaternion::from_euler_angles(0.0, 0.0, std::f64::consts::PI);
    let half = slerp_shortest(&UnitQuaternion::identity(), &c, 0.5);
    assert!((half.angle() - std::f64::consts::FRAC_PI_2).abs() < 1e-12);
}

#[test]
fn arc_length_sampling_is_even_along_a_curve() {
    let path = SePath::new(&trace()).expect("path");
    let n = 101;
    let samples = path.resample_by_arc_length(n);
    assert_eq!(samples.len(), n);
    let wps = trace();
    assert!(dist(&samples[0], &wps[0]).0 < 1e-12);
    assert!(dist(&samples[n - 1], wps.last().expect("last")).0 < 1e-12);
    let step = path.length() / (n - 1) as f64;
    let chord_sum: f64 = samples
        .windows(2)
        .map(|w| (w[1].translation.vector - w[0].translation.vector).norm())
        .sum();
    // Chords of a smooth curve at this density are within 0.1 % of the arc.
    assert!((chord_sum - path.length()).abs() < 1e-3 * path.length());
    for w in samples.windows(2) {
        let chord = (w[1].translation.vector - w[0].translation.vector).norm();
        assert!(
            (chord - step).abs() < 0.01 * step,
            "chord {chord} vs step {step}"
        );
    }
    // The path is longer than the polyline's straight chords would suggest only slightly.
    let polyline: f64 = wps
        .windows(2)
        .map(|w| (w[1].translation.vector - w[0].translation.vector).norm())
        .sum();
    assert!(path.length() >= polyline && path.length() < 1.2 * polyline);
}

#[test]
fn rotation_in_place_stops_the_position_and_still_turns() {
    let a = pose(0.3, 0.0, 0.2, 0.0, 0.0, 0.0);
    let b = pose(0.3, 0.0, 0.2, 0.0, 0.0, 1.0); // same position, turned
    let c = pose(0.5, 0.0, 0.2, 0.0, 0.0, 1.0);
    let d = c; // repeated pose: a zero-length segment
    let path = SePath::new(&[a, b, c, d]).expect("path");
    let params = path.waypoint_params();
    // During the in-place turn the position does not move.
    for i in 0..=10 {
        let s = params[0] + (params[1] - params[0]) * i as f64 / 10.0;
        let p = path.sample(s);
        assert!((p.translation.vector - a.translation.vector).norm() < 1e-12);
    }
    let mid = path.sample((params[0] + params[1]) / 2.0);
    let (_, _, yaw) = mid.rotation.euler_angles();
    assert!((yaw - 0.5).abs() < 1e-9, "{yaw}");
    assert!(dist(&path.sample(1.0), &d).0 < 1e-12);
    assert!((path.length() - 0.2).abs() < 1e-9);
}

#[test]
fn bad_inputs_are_errors() {
    assert!(matches!(
        SePath::new(&[pose(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)]),
        Err(GeometryError::TooFew {
            got: 1,
            needed: 2,
            ..
        })
    ));
    let bad = Isometry3::from_parts(
        Translation3::from(Vector3::new(f64::NAN, 0.0, 0.0)),
        UnitQuaternion::identity(),
    );
    assert!(matches!(
        SePath::new(&[pose(0.0, 0.0, 0.0, 0.0, 0.0, 0.0), bad]),
        Err(GeometryError::NonFinite { .. })
    ));
    // Out-of-range parameters clamp instead of extrapolating.
    let path = SePath::new(&trace()).expect("path");
    assert_eq!(path.sample(-1.0), path.sample(0.0));
    assert_eq!(path.sample(7.0), path.sample(1.0));
    assert_eq!(path.sample_at_distance(1e9), path.sample(1.0));
}
