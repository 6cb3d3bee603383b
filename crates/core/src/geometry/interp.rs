//! SE(3) paths through waypoints: a centripetal Catmull-Rom spline for position, slerp for
//! rotation.
//!
//! # Why this spline
//!
//! Visual traces from the pointer are a handful of unevenly spaced 3D points. The path must pass
//! through every one of them (they are the model's answer) and be smooth enough to track.
//! Catmull-Rom interpolates its control points and is C1; the *centripetal* knot spacing
//! (`t_{i+1} - t_i = sqrt(|P_{i+1} - P_i|)`) is the variant proven free of cusps and
//! self-intersections inside a segment, which the uniform variant is not on unevenly spaced
//! points. It is local (moving one waypoint changes two segments), unlike a natural cubic that
//! can ring across the whole path. Segments are evaluated in Hermite form with the tangent
//!
//! `m_i = (P_i - P_{i-1})/d_{i-1} - (P_{i+1} - P_{i-1})/(d_{i-1} + d_i) + (P_{i+1} - P_i)/d_i`
//!
//! (`d` the knot spacings), which is algebraically the Barry-Goldman pyramid of Catmull-Rom. End
//! tangents come from reflecting the second waypoint through the first (`m_0 = (P_1 - P_0)/d_0`),
//! so two waypoints give exactly the straight segment at constant speed.
//!
//! Rotations are slerped between consecutive waypoints along the shortest arc, with the same
//! local parameter as the position segment; rotation is therefore continuous (C0) and exact at
//! the waypoints.
//!
//! # Degenerate segments
//!
//! A segment with no translation but a rotation (rotate in place) gets knot spacing
//! `sqrt(ROTATION_LENGTH_M_PER_RAD * angle)` so that the normalised parameter still advances
//! through it, and the tangents at both its ends are zero: the position stops at the waypoint
//! instead of overshooting and coming back. A repeated identical pose is a zero-length segment
//! and is skipped.

use super::error::GeometryError;
use crate::nalgebra::{Isometry3, Translation3, UnitQuaternion, Vector3};

/// A rigid pose, `a_from_b` by the convention of the caller (usually `base_from_tool`).
pub type Pose = Isometry3<f64>;

/// How much knot spacing an in-place rotation gets, in metres of equivalent translation per
/// radian (10 cm/rad: a quarter turn weighs like a 16 cm move).
pub const ROTATION_LENGTH_M_PER_RAD: f64 = 0.1;

/// Translations shorter than this count as none (metres).
const CHORD_EPS_M: f64 = 1e-9;
/// Sub-intervals per segment of the arc-length table.
const ARC_TABLE_STEPS: usize = 32;

/// A smooth SE(3) path through waypoints; see the module docs.
#[derive(Clone, Debug)]
pub struct SePath {
    poses: Vec<Pose>,
    /// Knot of each waypoint, starting at 0.
    knots: Vec<f64>,
    /// dp/dt at each waypoint.
    tangents: Vec<Vector3<f64>>,
    /// Cumulative arc length at `ARC_TABLE_STEPS` sub-intervals of every segment; length
    /// `(n - 1) * ARC_TABLE_STEPS + 1`.
    arc: Vec<f64>,
}

impl SePath {
    /// Builds the path. Errors for fewer than two waypoints or non-finite poses.
    pub fn new(waypoints: &[Pose]) -> Result<Self, GeometryError> {
        if waypoints.len() < 2 {
            return Err(GeometryError::TooFew {
                what: "waypoints for a path",
                got: waypoints.len(),
                needed: 2,
            });
        }
        for p in waypoints {
            let q = p.rotation.coords;
            if !(p.translation.vector.iter().all(|x| x.is_finite())
                && q.iter().all(|x| x.is_finite()))
            {
                return Err(GeometryError::NonFinite {
                    what: "waypoint pose",
                });
            }
        }
        let n = waypoints.len();
        let pos: Vec<Vector3<f64>> = waypoints.iter().map(|p| p.translation.vector).collect();
        let chords: Vec<f64> = (0..n - 1).map(|i| (pos[i + 1] - pos[i]).norm()).collect();
        let spacing: Vec<f64> = (0..n - 1)
            .map(|i| {
                if chords[i] > CHORD_EPS_M {
                    chords[i].sqrt()
                } else {
                    let angle = waypoints[i].rotation.angle_to(&waypoints[i + 1].rotation);
                    (ROTATION_LENGTH_M_PER_RAD * angle).sqrt()
                }
            })
            .collect();
        let mut knots = vec![0.0; n];
        for i in 0..n - 1 {
            knots[i + 1] = knots[i] + spacing[i];
        }
        let moving = |i: usize| chords[i] > CHORD_EPS_M;
        let tangents: Vec<Vector3<f64>> = (0..n)
            .map(|i| {
                if i == 0 {
                    if moving(0) {
                        (pos[1] - pos[0]) / spacing[0]
                    } else {
                        Vector3::zeros()
                    }
                } else if i == n - 1 {
                    if moving(n - 2) {
                        (pos[n - 1] - pos[n - 2]) / spacing[n - 2]
                    } else {
                        Vector3::zeros()
                    }
                } else if moving(i - 1) && moving(i) {
                    let (d0, d1) = (spacing[i - 1], spacing[i]);
                    (pos[i] - pos[i - 1]) / d0 - (pos[i + 1] - pos[i - 1]) / (d0 + d1)
                        + (pos[i + 1] - pos[i]) / d1
                } else {
                    Vector3::zeros()
                }
            })
            .collect();
        let mut path = SePath {
            poses: waypoints.to_vec(),
            knots,
            tangents,
            arc: Vec::new(),
        };
        path.arc = path.build_arc_table();
        Ok(path)
    }

    /// Normalised parameter of each waypoint (0 for the first, 1 for the last).
    pub fn waypoint_params(&self) -> Vec<f64> {
        let total = self.total_knot();
        self.knots.iter().map(|k| k / total).collect()
    }

    /// Arc length of the position curve (metres).
    pub(crate) fn length(&self) -> f64 {
        self.arc.last().copied().unwrap_or(0.0)
    }

    /// Pose at normalised parameter `s` in `[0, 1]` (clamped; NaN reads as 0). The parameter is
    /// proportional to the knot parameter, so position is C1 in `s`.
    pub fn sample(&self, s: f64) -> Pose {
        let s = if s.is_nan() { 0.0 } else { s.clamp(0.0, 1.0) };
        let (seg, u) = self.locate(s * self.total_knot());
        self.eval(seg, u)
    }

    /// Pose at arc length `distance_m` from the start, measured along the position curve
    /// (clamped to `[0, length]`). In-place rotations have no length, so at their distance this
    /// returns the pose before the rotation; use [`SePath::sample`] for paths that have them.
    pub(crate) fn sample_at_distance(&self, distance_m: f64) -> Pose {
        let (seg, u) = self.locate_distance(distance_m);
        self.eval(seg, u)
    }

    /// `count >= 2` poses equally spaced in arc length, first and last waypoint included (for a
    /// zero-length path, equally spaced in the normalised parameter instead).
    pub(crate) fn resample_by_arc_length(&self, count: usize) -> Vec<Pose> {
        let count = count.max(2);
        let total = self.length();
        (0..count)
            .map(|k| {
                let f = k as f64 / (count - 1) as f64;
                if total > 0.0 {
                    self.sample_at_distance(f * total)
                } else {
                    self.sample(f)
                }
            })
            .collect()
    }

    fn total_knot(&self) -> f64 {
        self.knots
            .last()
            .copied()
            .unwrap_or(0.0)
            .max(f64::MIN_POSITIVE)
    }

    /// Segment and local parameter of knot value `t` (skipping zero-length segments).
    fn locate(&self, t: f64) -> (usize, f64) {
        let last = self.poses.len() - 2;
        // Last segment whose start knot is <= t and that has positive length.
        let mut seg = self
            .knots
            .partition_point(|&k| k <= t)
            .saturating_sub(1)
            .min(last);
        while seg > 0 && self.spacing(seg) <= 0.0 {
            seg -= 1;
        }
        let d = self.spacing(seg);
        if d <= 0.0 {
            return (seg, 0.0);
        }
        (seg, ((t - self.knots[seg]) / d).clamp(0.0, 1.0))
    }

    fn spacing(&self, seg: usize) -> f64 {
        self.knots[seg + 1] - self.knots[seg]
    }

    /// Pose on segment `seg` at local parameter `u` in [0, 1].
    fn eval(&self, seg: usize, u: f64) -> Pose {
        let position = self.position(seg, u);
        let rotation = slerp_shortest(&self.poses[seg].rotation, &self.poses[seg + 1].rotation, u);
        Isometry3::from_parts(Translation3::from(position), rotation)
    }

    /// Cubic Hermite position on a segment; exact at u = 0 and u = 1.
    fn position(&self, seg: usize, u: f64) -> Vector3<f64> {
        let p0 = self.poses[seg].translation.vector;
        let p1 = self.poses[seg + 1].translation.vector;
        if u <= 0.0 {
            return p0;
        }
        if u >= 1.0 {
            return p1;
        }
        let d = self.spacing(seg);
        let (u2, u3) = (u * u, u * u * u);
        let h00 = 2.0 * u3 - 3.0 * u2 + 1.0;
        let h10 = u3 - 2.0 * u2 + u;
        let h01 = -2.0 * u3 + 3.0 * u2;
        let h11 = u3 - u2;
        p0 * h00 + self.tangents[seg] * (h10 * d) + p1 * h01 + self.tangents[seg + 1] * (h11 * d)
    }

    /// |dp/du| on a segment.
    fn speed(&self, seg: usize, u: f64) -> f64 {
        let p0 = self.poses[seg].translation.vector;
        let p1 = self.poses[seg + 1].translation.vector;
        let d = self.spacing(seg);
        let u2 = u * u;
        let dh00 = 6.0 * u2 - 6.0 * u;
        let dh10 = 3.0 * u2 - 4.0 * u + 1.0;
        let dh01 = -6.0 * u2 + 6.0 * u;
        let dh11 = 3.0 * u2 - 2.0 * u;
        (p0 * dh00
            + self.tangents[seg] * (dh10 * d)
            + p1 * dh01
            + self.tangents[seg + 1] * (dh11 * d))
            .norm()
    }

    /// Arc length on a segment between local parameters `a < b` (5-point Gauss-Legendre; the
    /// speed of a cubic is smooth, and the table's sub-intervals are short).
    fn arc_between(&self, seg: usize, a: f64, b: f64) -> f64 {
        const X: [f64; 5] = [
            0.0,
            -0.538_469_310_105_683,
            0.538_469_310_105_683,
            -0.906_179_845_938_664,
            0.906_179_845_938_664,
        ];
        const W: [f64; 5] = [
            0.568_888_888_888_889,
            0.478_628_670_499_366,
            0.478_628_670_499_366,
            0.236_926_885_056_189,
            0.236_926_885_056_189,
        ];
        let (mid, half) = ((a + b) / 2.0, (b - a) / 2.0);
        half * X
            .iter()
            .zip(W.iter())
            .map(|(x, w)| w * self.speed(seg, mid + half * x))
            .sum::<f64>()
    }

    fn build_arc_table(&self) -> Vec<f64> {
        let mut arc = vec![0.0];
        let mut acc = 0.0;
        for seg in 0..self.poses.len() - 1 {
            for k in 0..ARC_TABLE_STEPS {
                if self.spacing(seg) > 0.0 {
                    let a = k as f64 / ARC_TABLE_STEPS as f64;
                    let b = (k + 1) as f64 / ARC_TABLE_STEPS as f64;
                    acc += self.arc_between(seg, a, b);
                }
                arc.push(acc);
            }
        }
        arc
    }

    /// Segment and local parameter at arc length `s` (Newton on the table's sub-interval).
    fn locate_distance(&self, s: f64) -> (usize, f64) {
        let total = self.length();
        if total.is_nan() || total <= 0.0 || s.is_nan() || s <= 0.0 {
            return self.locate(0.0);
        }
        if s >= total {
            return (self.poses.len() - 2, 1.0);
        }
        // First table entry with cumulative length >= s; the sub-interval ends there.
        let idx = self
            .arc
            .partition_point(|&a| a < s)
            .clamp(1, self.arc.len() - 1);
        let seg = (idx - 1) / ARC_TABLE_STEPS;
        let k = (idx - 1) % ARC_TABLE_STEPS;
        let (ua, ub) = (
            k as f64 / ARC_TABLE_STEPS as f64,
            (k + 1) as f64 / ARC_TABLE_STEPS as f64,
        );
        let (la, lb) = (self.arc[idx - 1], self.arc[idx]);
        let target = s - la;
        let mut u = if lb > la {
            ua + (ub - ua) * target / (lb - la)
        } else {
            ua
        };
        for _ in 0..4 {
            let v = self.speed(seg, u);
            if v <= 0.0 {
                break;
            }
            u = (u - (self.arc_between(seg, ua, u) - target) / v).clamp(ua, ub);
        }
        (seg, u)
    }
}

/// Slerp along the shorter arc (a quaternion and its negative are the same rotation).
pub(crate) fn slerp_shortest(
    a: &UnitQuaternion<f64>,
    b: &UnitQuaternion<f64>,
    u: f64,
) -> UnitQuaternion<f64> {
    let mut rel = a.inverse() * b;
    if rel.w < 0.0 {
        rel = UnitQuaternion::new_unchecked(-rel.into_inner());
    }
    a * UnitQuaternion::from_scaled_axis(rel.scaled_axis() * u)
}
