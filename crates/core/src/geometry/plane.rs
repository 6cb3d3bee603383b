//! The table plane, by RANSAC plus a least-squares refinement.
//!
//! The executor needs the table to place objects, to reject grasps below it, and as a fallback
//! depth where the camera has none. RANSAC finds the dominant roughly-horizontal plane despite
//! objects standing on it; a total-least-squares fit on the inliers then removes the bias of
//! the three-point hypothesis. Hypotheses are drawn from a seeded ChaCha generator, so the same
//! cloud and options always give the same plane (plans and tests are reproducible).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::error::GeometryError;
use crate::nalgebra::{Matrix3, Vector3};

/// A plane `normal . p = offset` in the base frame.
#[derive(Clone, Debug, PartialEq)]
pub struct Plane {
    /// Unit normal, oriented up (`normal.z >= 0` in the base frame).
    pub normal: Vector3<f64>,
    /// Signed distance of the plane from the base origin along `normal` (metres); for a level
    /// table this is its height.
    pub offset: f64,
    /// Number of input points within `inlier_distance_m` of the refined plane.
    pub inliers: usize,
    /// Root-mean-square distance of those inliers to the plane (metres).
    pub rms_m: f64,
}

impl Plane {
    /// Signed distance of `p` to the plane, positive above (on the normal's side).
    pub fn signed_distance(&self, p: &Vector3<f64>) -> f64 {
        self.normal.dot(p) - self.offset
    }

    /// Angle between the normal and base +z, radians.
    pub fn tilt(&self) -> f64 {
        self.normal.z.clamp(-1.0, 1.0).acos()
    }
}

/// Options of [`fit_table_plane`].
#[derive(Clone, Debug, PartialEq)]
pub struct PlaneOptions {
    /// RANSAC hypotheses to score.
    pub iterations: usize,
    /// A point within this distance of a plane supports it (metres). RealSense noise at 1 m is a
    /// few millimetres, hence 1 cm.
    pub inlier_distance_m: f64,
    /// Fewer inliers than this is an error (no table in view, or the crop removed it).
    pub min_inliers: usize,
    /// Only planes whose normal is within this angle of base +z count as a table (degrees);
    /// keeps walls and box sides out. 90 accepts any plane.
    pub max_tilt_deg: f64,
    /// Hypotheses are scored on at most this many points (an even subsample), which bounds the
    /// cost on full-resolution clouds; the refinement uses all points.
    pub max_scored_points: usize,
    /// Seed of the hypothesis generator.
    pub seed: u64,
}

impl Default for PlaneOptions {
    fn default() -> Self {
        PlaneOptions {
            iterations: 200,
            inlier_distance_m: 0.01,
            min_inliers: 100,
            max_tilt_deg: 30.0,
            max_scored_points: 20_000,
            seed: 0,
        }
    }
}

impl PlaneOptions {
    fn validate(&self) -> Result<(), GeometryError> {
        let bad = |field, reason: String| Err(GeometryError::InvalidOption { field, reason });
        if self.iterations == 0 {
            return bad("iterations", "must be >= 1".into());
        }
        if !(self.inlier_distance_m.is_finite() && self.inlier_distance_m > 0.0) {
            return bad(
                "inlier_distance_m",
                format!("must be finite and > 0, got {}", self.inlier_distance_m),
            );
        }
        if !(0.0..=90.0).contains(&self.max_tilt_deg) {
            return bad(
                "max_tilt_deg",
                format!("must be in [0, 90], got {}", self.max_tilt_deg),
            );
        }
        if self.max_scored_points < 3 {
            return bad("max_scored_points", "must be >= 3".into());
        }
        Ok(())
    }
}

/// Finds the table: the roughly horizontal plane (see [`PlaneOptions::max_tilt_deg`]) supported by
/// the most points of a base-frame cloud.
///
/// Steps: score `iterations` three-point hypotheses on an even subsample; take the best (first
/// wins ties); twice, collect all points within `inlier_distance_m` and replace the plane by
/// their total-least-squares fit (centroid + smallest principal axis). Non-finite points are
/// ignored. Errors when fewer than `min_inliers` points support the result.
pub fn fit_table_plane(points: &[[f32; 3]], opts: &PlaneOptions) -> Result<Plane, GeometryError> {
    opts.validate()?;
    let all: Vec<Vector3<f64>> = points
        .iter()
        .filter(|p| p.iter().all(|c| c.is_finite()))
        .map(|p| Vector3::new(p[0] as f64, p[1] as f64, p[2] as f64))
        .collect();
    if all.len() < 3 {
        return Err(GeometryError::TooFew {
            what: "finite points for a plane fit",
            got: all.len(),
            needed: 3,
        });
    }
    let step = all.len().div_ceil(opts.max_scored_points);
    let scored: Vec<Vector3<f64>> = all.iter().step_by(step).copied().collect();
    let min_up = opts.max_tilt_deg.to_radians().cos();
    let thr = opts.inlier_distance_m;

    let mut rng = ChaCha8Rng::seed_from_u64(opts.seed);
    let mut best: Option<(usize, Vector3<f64>, f64)> = None;
    for _ in 0..opts.iterations {
        let i = rng.gen_range(0..scored.len());
        let j = rng.gen_range(0..scored.len());
        let k = rng.gen_range(0..scored.len());
        if i == j || j == k || i == k {
            continue;
        }
        let n = (scored[j] - scored[i]).cross(&(scored[k] - scored[i]));
        let norm = n.norm();
        if norm < 1e-12 {
            continue; // collinear sample
        }
        let mut n = n / norm;
        if n.z < 0.0 {
            n = -n;
        }
        if opts.max_tilt_deg < 90.0 && n.z < min_up {
            continue;
        }
        let offset = n.dot(&scored[i]);
        let support = scored
            .iter()
            .filter(|p| (n.dot(p) - offset).abs() <= thr)
            .count();
        if best.as_ref().is_none_or(|b| support > b.0) {
            best = Some((support, n, offset));
        }
    }
    let Some((_, mut normal, mut offset)) = best else {
        return Err(GeometryError::TooFewInliers {
            inliers: 0,
            required: opts.min_inliers.max(3),
            points: all.len(),
        });
    };

    for _ in 0..2 {
        let inliers: Vec<&Vector3<f64>> = all
            .iter()
            .filter(|p| (normal.dot(p) - offset).abs() <= thr)
            .collect();
        if inliers.len() < 3 {
            break;
        }
        if let Some((n, o)) = total_least_squares(&inliers) {
            normal = n;
            offset = o;
        }
    }
    let (count, sq) = all
        .iter()
        .map(|p| normal.dot(p) - offset)
        .filter(|d| d.abs() <= thr)
        .fold((0usize, 0.0f64), |(c, s), d| (c + 1, s + d * d));
    if count < opts.min_inliers.max(3) {
        return Err(GeometryError::TooFewInliers {
            inliers: count,
            required: opts.min_inliers.max(3),
            points: all.len(),
        });
    }
    Ok(Plane {
        normal,
        offset,
        inliers: count,
        rms_m: (sq / count as f64).sqrt(),
    })
}

/// Plane through the centroid with the normal along the smallest principal axis, oriented up.
/// `None` when the points do not define a plane (all coincident).
pub(crate) fn total_least_squares(points: &[&Vector3<f64>]) -> Option<(Vector3<f64>, f64)> {
    let n = points.len() as f64;
    let centroid = points.iter().fold(Vector3::zeros(), |a, p| a + **p) / n;
    let cov = points.iter().fold(Matrix3::zeros(), |a, p| {
        let d = **p - centroid;
        a + d * d.transpose()
    });
    let eig = cov.symmetric_eigen();
    let (imin, _) = eig
        .eigenvalues
        .iter()
        .enumerate()
        .min_by(|a, b| a.1.total_cmp(b.1))?;
    let mut normal: Vector3<f64> = eig.eigenvectors.column(imin).into_owned();
    let norm = normal.norm();
    if !(norm.is_finite() && norm > 0.0) || eig.eigenvalues.iter().all(|&e| e <= 0.0) {
        return None;
    }
    normal /= norm;
    if normal.z < 0.0 {
        normal = -normal;
    }
    Some((normal, normal.dot(&centroid)))
}
