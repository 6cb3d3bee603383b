//! A joint-space path and its timing.
//!
//! Timing is one trapezoidal (or triangular) speed profile over the whole piecewise-linear path,
//! scaled so that no joint exceeds its velocity or acceleration limit on any segment and the tool
//! does not exceed the Cartesian speed given by the caller. It stops only at the two ends, so a dense
//! Cartesian line (hundreds of IK waypoints) moves smoothly instead of stopping at every waypoint.
//! Conservative by construction: the bound uses the worst segment for the whole path.

/// Waypoints in joint space, all of the same length (one value per arm joint).
#[derive(Debug, Clone, PartialEq)]
pub struct JointPath {
    /// Joint vectors in order from start to end, rad (or m for prismatic joints).
    pub waypoints: Vec<Vec<f64>>,
}

/// Why a path could not be timed.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TrajectoryError {
    /// The path has no waypoints.
    #[error("a path needs at least one waypoint")]
    Empty,
    /// A waypoint's length differs from the first one's.
    #[error("waypoint {index} has {got} joint values, expected {expected}")]
    Ragged {
        /// Index of the waypoint.
        index: usize,
        /// Length of the first waypoint.
        expected: usize,
        /// Length of this one.
        got: usize,
    },
    /// A waypoint holds a NaN or infinite value.
    #[error("waypoint {index} holds a non-finite joint value")]
    NonFinite {
        /// Index of the waypoint.
        index: usize,
    },
    /// A velocity or acceleration limit that is not positive and finite, or the wrong number of
    /// limits.
    #[error("limits must be positive and finite, one per joint")]
    BadLimits,
}

/// A timed joint trajectory: position along the path follows `s(t)`, one trapezoidal speed
/// profile over the whole path, or one per segment stopping at every waypoint
/// ([`Trajectory::time_parameterize_with_stops`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Trajectory {
    path: JointPath,
    /// Cumulative path parameter at each waypoint (max-norm joint distance, rad).
    knots: Vec<f64>,
    /// Consecutive profiles covering [0, duration].
    profiles: Vec<Profile>,
    duration: f64,
}

/// One trapezoid (or triangle) from rest to rest over path parameter [s0, s0 + len].
#[derive(Debug, Clone, Copy, PartialEq)]
struct Profile {
    t0: f64,
    s0: f64,
    len: f64,
    /// Peak path speed and acceleration.
    v: f64,
    a: f64,
    duration: f64,
}

impl Profile {
    /// Rest to rest over `len` under peak speed `v` and acceleration `a`.
    fn new(t0: f64, s0: f64, len: f64, v: f64, a: f64) -> Profile {
        if !(len > 0.0 && v.is_finite() && a.is_finite()) {
            return Profile {
                t0,
                s0,
                len: 0.0,
                v: 0.0,
                a: 0.0,
                duration: 0.0,
            };
        }
        // Trapezoid if there is room to reach v, else a triangle with a lower peak.
        let (v, duration) = if len >= v * v / a {
            (v, len / v + v / a)
        } else {
            let vp = (len * a).sqrt();
            (vp, 2.0 * vp / a)
        };
        Profile {
            t0,
            s0,
            len,
            v,
            a,
            duration,
        }
    }

    /// Path parameter at time t (absolute, clamped to this profile).
    fn s_at(&self, t: f64) -> f64 {
        // A hold (no length) stays at its start for its whole duration.
        if self.duration <= 0.0 || self.len <= 0.0 {
            return self.s0;
        }
        let t = (t - self.t0).clamp(0.0, self.duration);
        let ta = self.v / self.a;
        let s = if t < ta {
            0.5 * self.a * t * t
        } else if t > self.duration - ta {
            let r = self.duration - t;
            self.len - 0.5 * self.a * r * r
        } else {
            0.5 * self.a * ta * ta + self.v * (t - ta)
        };
        self.s0 + s.clamp(0.0, self.len)
    }

    fn slowed(&mut self, factor: f64, t0: f64) {
        self.v /= factor;
        self.a /= factor * factor;
        self.duration *= factor;
        self.t0 = t0;
    }
}

impl Trajectory {
    /// Times `path` so every joint respects `vel_limits`/`acc_limits` (per joint). A Cartesian tool
    /// speed limit is applied afterwards with `slowed`, measured on the samples.
    pub fn time_parameterize(
        path: JointPath,
        vel_limits: &[f64],
        acc_limits: &[f64],
    ) -> Result<Self, TrajectoryError> {
        let n = check_path(&path)?;
        if vel_limits.len() != n
            || acc_limits.len() != n
            || vel_limits
                .iter()
                .chain(acc_limits)
                .any(|x| !(x.is_finite() && *x > 0.0))
        {
            return Err(TrajectoryError::BadLimits);
        }
        let mut knots = vec![0.0];
        // Path speed ṡ maps to joint speed |dq_j/ds|·ṡ; the worst ratio limit_j / |dq_j/ds| over all
        // segments bounds ṡ (and, with the same argument, s̈) for the whole path.
        let (mut v, mut a) = (f64::INFINITY, f64::INFINITY);
        for w in path.waypoints.windows(2) {
            let d: Vec<f64> = w[1].iter().zip(&w[0]).map(|(b, a)| b - a).collect();
            let len = d.iter().fold(0.0f64, |m, x| m.max(x.abs()));
            knots.push(knots.last().copied().unwrap_or(0.0) + len);
            if len > 0.0 {
                for j in 0..n {
                    let slope = d[j].abs() / len;
                    if slope > 0.0 {
                        v = v.min(vel_limits[j] / slope);
                        a = a.min(acc_limits[j] / slope);
                    }
                }
            }
        }
        let total = knots.last().copied().unwrap_or(0.0);
        let profile = Profile::new(0.0, 0.0, total, v, a);
        Ok(Trajectory {
            path,
            knots,
            duration: profile.duration,
            profiles: vec![profile],
        })
    }

    /// Stays at `q` for `seconds`: the arm at rest while time passes (the runner waits this way
    /// between two looks, so the wait is a checked command like every other and a simulated world
    /// advances through it). `None` for a non-finite or empty `q` or a negative duration.
    pub fn hold(q: &[f64], seconds: f64) -> Option<Self> {
        if q.is_empty()
            || q.iter().any(|x| !x.is_finite())
            || !(seconds >= 0.0 && seconds.is_finite())
        {
            return None;
        }
        Some(Trajectory {
            path: JointPath {
                waypoints: vec![q.to_vec(), q.to_vec()],
            },
            knots: vec![0.0, 0.0],
            duration: seconds,
            profiles: vec![Profile {
                t0: 0.0,
                s0: 0.0,
                len: 0.0,
                v: 0.0,
                a: 0.0,
                duration: seconds,
            }],
        })
    }

    /// Times `path` segment by segment, each from rest to rest under the limits: for paths with
    /// corners (a planner's waypoints), where one profile through the corner would turn the
    /// joints' velocity around in no time.
    pub fn time_parameterize_with_stops(
        path: JointPath,
        vel_limits: &[f64],
        acc_limits: &[f64],
    ) -> Result<Self, TrajectoryError> {
        let mut t = Trajectory::time_parameterize(path, vel_limits, acc_limits)?;
        let mut profiles = Vec::new();
        let mut t0 = 0.0;
        for (i, w) in t.path.waypoints.windows(2).enumerate() {
            let (mut v, mut a) = (f64::INFINITY, f64::INFINITY);
            let len = t.knots[i + 1] - t.knots[i];
            for j in 0..w[0].len() {
                let slope = (w[1][j] - w[0][j]).abs() / len.max(1e-300);
                if slope > 0.0 {
                    v = v.min(vel_limits[j] / slope);
                    a = a.min(acc_limits[j] / slope);
                }
            }
            let p = Profile::new(t0, t.knots[i], len, v, a);
            t0 += p.duration;
            profiles.push(p);
        }
        if !profiles.is_empty() {
            t.profiles = profiles;
            t.duration = t0;
        }
        Ok(t)
    }

    /// Slows the whole trajectory down by `factor` ≥ 1 (e.g. to respect a Cartesian speed limit
    /// measured on the samples).
    pub fn slowed(mut self, factor: f64) -> Self {
        if factor.is_finite() && factor > 1.0 {
            let mut t0 = 0.0;
            for p in &mut self.profiles {
                p.slowed(factor, t0);
                t0 += p.duration;
            }
            self.duration *= factor;
        }
        self
    }

    /// Total time from start to end, s.
    pub fn duration(&self) -> f64 {
        self.duration
    }

    pub(crate) fn dof(&self) -> usize {
        self.path.waypoints[0].len()
    }

    /// The timed path.
    pub fn path(&self) -> &JointPath {
        &self.path
    }

    /// The first waypoint: where the trajectory starts.
    pub fn start(&self) -> &[f64] {
        &self.path.waypoints[0]
    }

    /// The last waypoint: where the trajectory ends.
    pub fn end(&self) -> &[f64] {
        self.path.waypoints.last().map(Vec::as_slice).unwrap_or(&[])
    }

    /// Path parameter at time t (clamped to [0, duration]).
    fn s_at(&self, t: f64) -> f64 {
        let i = self
            .profiles
            .partition_point(|p| p.t0 + p.duration < t)
            .min(self.profiles.len().saturating_sub(1));
        self.profiles.get(i).map_or(0.0, |p| p.s_at(t))
    }

    /// Joint positions at time t.
    pub fn sample(&self, t: f64) -> Vec<f64> {
        let s = self.s_at(t);
        let wp = &self.path.waypoints;
        let i = match self.knots.partition_point(|k| *k <= s) {
            0 => 0,
            i => (i - 1).min(wp.len().saturating_sub(2)),
        };
        if wp.len() == 1 {
            return wp[0].clone();
        }
        let (k0, k1) = (self.knots[i], self.knots[i + 1]);
        let f = if k1 > k0 {
            ((s - k0) / (k1 - k0)).clamp(0.0, 1.0)
        } else {
            1.0
        };
        wp[i]
            .iter()
            .zip(&wp[i + 1])
            .map(|(a, b)| a + f * (b - a))
            .collect()
    }

    /// Samples every `dt` seconds from 0 to the end (the end included exactly once).
    pub fn samples(&self, dt: f64) -> Vec<(f64, Vec<f64>)> {
        let dt = if dt.is_finite() && dt > 0.0 { dt } else { 0.01 };
        let n = (self.duration / dt).ceil() as usize;
        (0..=n)
            .map(|i| {
                let t = (i as f64 * dt).min(self.duration);
                (t, self.sample(t))
            })
            .collect()
    }
}

fn check_path(path: &JointPath) -> Result<usize, TrajectoryError> {
    let n = path.waypoints.first().ok_or(TrajectoryError::Empty)?.len();
    for (index, w) in path.waypoints.iter().enumerate() {
        if w.len() != n {
            return Err(TrajectoryError::Ragged {
                index,
                expected: n,
                got: w.len(),
            });
        }
        if w.iter().any(|x| !x.is_finite()) {
            return Err(TrajectoryError::NonFinite { index });
        }
    }
    Ok(n)
}

/// Slows `traj` until the tool's speed, measured by FK on fine samples, stays under `max_speed`
/// (with 2 % margin); joint-space timing alone does not bound the Cartesian speed.
pub fn limit_tool_speed(
    traj: Trajectory,
    model: &crate::kinematics::RobotModel,
    max_speed: f64,
) -> Result<Trajectory, crate::kinematics::KinematicsError> {
    if traj.duration() <= 0.0 {
        return Ok(traj);
    }
    let dt = (traj.duration() / 400.0).clamp(1e-4, 2e-3);
    let mut peak = 0.0f64;
    let mut prev: Option<k::nalgebra::Vector3<f64>> = None;
    for (_, q) in traj.samples(dt) {
        let p = model.fk(&q)?.translation.vector;
        if let Some(p0) = prev {
            peak = peak.max((p - p0).norm() / dt);
        }
        prev = Some(p);
    }
    let factor = 1.02 * peak / max_speed;
    Ok(if factor > 1.0 {
        traj.slowed(factor)
    } else {
        traj
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(w: &[&[f64]]) -> JointPath {
        JointPath {
            waypoints: w.iter().map(|x| x.to_vec()).collect(),
        }
    }

    #[test]
    fn trapezoid_matches_the_analytic_profile() {
        // One joint, 2 rad at 1 rad/s and 2 rad/s²: accelerate 0.5 s (0.25 rad), cruise 1.5 s, brake 0.5 s.
        let t = Trajectory::time_parameterize(path(&[&[0.0], &[2.0]]), &[1.0], &[2.0]).unwrap();
        assert!((t.duration() - 2.5).abs() < 1e-12);
        assert!((t.sample(0.5)[0] - 0.25).abs() < 1e-12);
        assert!((t.sample(1.25)[0] - 1.0).abs() < 1e-12);
        assert_eq!(t.sample(10.0), vec![2.0]);
    }

    #[test]
    fn a_hold_stays_put_for_its_duration_even_slowed() {
        let q = [0.1, -0.4, 0.7];
        let t = Trajectory::hold(&q, 0.5).unwrap().slowed(2.0);
        assert_eq!(t.duration(), 1.0);
        let s = t.samples(0.01);
        assert_eq!(s.len(), 101);
        assert!(s.iter().all(|(_, x)| x == &q), "every sample at q");
        assert!(Trajectory::hold(&[f64::NAN], 0.5).is_none());
        assert!(Trajectory::hold(&q, -1.0).is_none());
        assert!(Trajectory::hold(&[], 0.5).is_none());
    }

    #[test]
    fn short_moves_use_a_triangle() {
        // 0.1 rad at 2 rad/s²: peak sqrt(0.2) < 1 rad/s, duration 2·sqrt(0.1/2).
        let t = Trajectory::time_parameterize(path(&[&[0.0], &[0.1]]), &[1.0], &[2.0]).unwrap();
        assert!((t.duration() - 2.0 * (0.05f64).sqrt()).abs() < 1e-12);
    }

    #[test]
    fn sampled_speeds_and_accelerations_stay_within_limits() {
        let p = path(&[&[0.0, 0.0], &[0.5, -0.2], &[0.6, 0.8], &[0.0, 1.0]]);
        let (vl, al) = ([0.8, 1.2], [3.0, 2.0]);
        let t = Trajectory::time_parameterize(p, &vl, &al).unwrap();
        let dt = 1e-3;
        let s = t.samples(dt);
        for w in s.windows(2) {
            for (j, limit) in vl.iter().enumerate() {
                let v = (w[1].1[j] - w[0].1[j]) / (w[1].0 - w[0].0).max(1e-12);
                assert!(v.abs() <= limit * (1.0 + 1e-6), "joint {j} speed {v}");
            }
        }
        assert_eq!(s.last().unwrap().1, vec![0.0, 1.0]);
        assert_eq!(s[0].1, vec![0.0, 0.0]);
    }

    #[test]
    fn stops_at_every_corner_and_keeps_each_segment_within_limits() {
        let p = path(&[&[0.0, 0.0], &[1.0, 0.0], &[1.0, 0.5]]);
        let (vl, al) = ([1.0, 1.0], [2.0, 2.0]);
        let t = Trajectory::time_parameterize_with_stops(p, &vl, &al).unwrap();
        // Segment 1: 1 rad at 1 rad/s, 2 rad/s² = 1.5 s; segment 2: 0.5 rad, triangle 2·sqrt(0.25).
        assert!(
            (t.duration() - (1.5 + 1.0)).abs() < 1e-12,
            "{}",
            t.duration()
        );
        assert_eq!(t.sample(1.5), vec![1.0, 0.0]);
        // At rest at the corner: speed just before and after is near zero.
        let h = 1e-4;
        let v = |a: f64, b: f64| {
            let (x, y) = (t.sample(a), t.sample(b));
            ((y[0] - x[0]).powi(2) + (y[1] - x[1]).powi(2)).sqrt() / (b - a)
        };
        assert!(v(1.5 - h, 1.5) < 1e-3 && v(1.5, 1.5 + h) < 1e-3);
        // Speeds and accelerations from the samples stay within the limits.
        let s = t.samples(1e-3);
        for w in s.windows(3) {
            for j in 0..2 {
                let v1 = (w[1].1[j] - w[0].1[j]) / 1e-3;
                let v2 = (w[2].1[j] - w[1].1[j]) / 1e-3;
                assert!(v1.abs() <= vl[j] * (1.0 + 1e-6));
                assert!(
                    ((v2 - v1) / 1e-3).abs() <= al[j] * 1.01 + 1e-6,
                    "acc {}",
                    (v2 - v1) / 1e-3
                );
            }
        }
        // Slowing keeps the stops.
        let slow = t.slowed(2.0);
        assert!((slow.duration() - 5.0).abs() < 1e-12);
        assert_eq!(slow.sample(3.0), vec![1.0, 0.0]);
    }

    #[test]
    fn bad_paths_are_errors() {
        assert_eq!(
            Trajectory::time_parameterize(JointPath { waypoints: vec![] }, &[], &[]),
            Err(TrajectoryError::Empty)
        );
        assert!(matches!(
            Trajectory::time_parameterize(path(&[&[0.0], &[f64::NAN]]), &[1.0], &[1.0]),
            Err(TrajectoryError::NonFinite { index: 1 })
        ));
        assert!(matches!(
            Trajectory::time_parameterize(path(&[&[0.0], &[1.0, 2.0]]), &[1.0], &[1.0]),
            Err(TrajectoryError::Ragged { .. })
        ));
        assert_eq!(
            Trajectory::time_parameterize(path(&[&[0.0], &[1.0]]), &[0.0], &[1.0]),
            Err(TrajectoryError::BadLimits)
        );
    }
}
