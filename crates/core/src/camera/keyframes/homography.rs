//! Robust homography, the estimate behind `cv2.findHomography(…, cv2.RANSAC, 5.0)`
//! (<https://docs.opencv.org/4.x/d9/d0c/group__calib3d.html#ga4abc2ece9fab9398f2e560d53c8c9780>):
//! RANSAC (Fischler & Bolles, CACM 1981) over minimal 4-point samples solved by the normalised
//! direct linear transform (Hartley & Zisserman, *Multiple View Geometry*, 2nd ed., alg. 4.2),
//! inliers within 5 px of reprojection error, the iteration count adapted to the best inlier
//! ratio for 99.5 % confidence and capped at 2000, then a least-squares fit on the inliers
//! refined by Levenberg–Marquardt on the reprojection error (the refinement the OpenCV page
//! describes). Samples are drawn in PROSAC order (best-ranked matches first, see [`Prosac`])
//! where OpenCV draws uniformly: both look for the largest consensus set, and the ordered draws
//! find it far more reliably when correct matches are a small share, which is where a uniform
//! sampler's misses (its own and OpenCV's) would make the two disagree. The generator is a
//! fixed-seed ChaCha stream, so a call is a pure function of its points.

use k::nalgebra::{Matrix3, SMatrix, SVector, SymmetricEigen, Vector3};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// RANSAC settings (OpenCV `findHomography` defaults but for the threshold the caller gives).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RansacParams {
    /// Largest reprojection error of an inlier, px.
    pub threshold: f64,
    pub confidence: f64,
    pub max_iters: usize,
    pub seed: u64,
}

impl Default for RansacParams {
    fn default() -> Self {
        RansacParams {
            threshold: 5.0,
            confidence: 0.995,
            max_iters: 2000,
            seed: 0,
        }
    }
}

/// A fitted homography and the RANSAC inlier flags it was refined on.
#[derive(Debug, Clone)]
pub(crate) struct Fit {
    /// Maps `src` points onto `dst` points; `h[(2, 2)] = 1`.
    pub h: Matrix3<f64>,
    pub inliers: Vec<bool>,
}

/// Applies `h` to a point; `None` on the line at infinity.
pub(crate) fn apply(h: &Matrix3<f64>, p: [f64; 2]) -> Option<[f64; 2]> {
    let v = h * Vector3::new(p[0], p[1], 1.0);
    (v.z != 0.0).then(|| [v.x / v.z, v.y / v.z])
}

fn sq_error(h: &Matrix3<f64>, s: [f64; 2], d: [f64; 2]) -> f64 {
    match apply(h, s) {
        Some(p) => (p[0] - d[0]).powi(2) + (p[1] - d[1]).powi(2),
        None => f64::INFINITY,
    }
}

/// Similarity that moves the points' centroid to the origin and their mean distance to √2
/// (Hartley's normalisation, which makes the DLT's linear system well conditioned).
fn normaliser(pts: &[[f64; 2]]) -> Option<Matrix3<f64>> {
    let n = pts.len() as f64;
    let cx = pts.iter().map(|p| p[0]).sum::<f64>() / n;
    let cy = pts.iter().map(|p| p[1]).sum::<f64>() / n;
    let mean = pts
        .iter()
        .map(|p| ((p[0] - cx).powi(2) + (p[1] - cy).powi(2)).sqrt())
        .sum::<f64>()
        / n;
    if mean.is_nan() || mean <= 1e-12 || !mean.is_finite() {
        return None;
    }
    let s = std::f64::consts::SQRT_2 / mean;
    Some(Matrix3::new(
        s,
        0.0,
        -s * cx,
        0.0,
        s,
        -s * cy,
        0.0,
        0.0,
        1.0,
    ))
}

/// Normalised DLT through ≥ 4 correspondences: the null vector (least-squares, via the smallest
/// eigenvector of AᵀA) of the stacked cross-product constraints, de-normalised.
pub(crate) fn dlt(src: &[[f64; 2]], dst: &[[f64; 2]]) -> Option<Matrix3<f64>> {
    if src.len() < 4 || src.len() != dst.len() {
        return None;
    }
    let ts = normaliser(src)?;
    let td = normaliser(dst)?;
    let mut ata = SMatrix::<f64, 9, 9>::zeros();
    for (s, d) in src.iter().zip(dst) {
        let s = ts * Vector3::new(s[0], s[1], 1.0);
        let d = td * Vector3::new(d[0], d[1], 1.0);
        let (x, y, u, v) = (s.x, s.y, d.x, d.y);
        let r1 =
            SVector::<f64, 9>::from_column_slice(&[x, y, 1.0, 0.0, 0.0, 0.0, -u * x, -u * y, -u]);
        let r2 =
            SVector::<f64, 9>::from_column_slice(&[0.0, 0.0, 0.0, x, y, 1.0, -v * x, -v * y, -v]);
        ata += r1 * r1.transpose() + r2 * r2.transpose();
    }
    let eig = SymmetricEigen::new(ata);
    let (k, _) = eig
        .eigenvalues
        .iter()
        .enumerate()
        .min_by(|a, b| a.1.total_cmp(b.1))?;
    let e = eig.eigenvectors.column(k);
    let hn = Matrix3::new(e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7], e[8]);
    let h = td.try_inverse()? * hn * ts;
    normalise(h)
}

fn normalise(h: Matrix3<f64>) -> Option<Matrix3<f64>> {
    let z = h[(2, 2)];
    if z.abs() < 1e-12 || !h.iter().all(|v| v.is_finite()) {
        return None;
    }
    let h = h / z;
    h.iter().all(|v| v.is_finite()).then_some(h)
}

fn cross(a: [f64; 2], b: [f64; 2], c: [f64; 2]) -> f64 {
    (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])
}

/// A 4-point sample is usable when no three of its points are collinear on either side and the
/// four triangles keep (or all flip) their orientation, as any homography that keeps the points
/// in front of both cameras must (the check OpenCV's homography estimator applies to samples).
fn sample_ok(src: &[[f64; 2]; 4], dst: &[[f64; 2]; 4]) -> bool {
    const TRIPLES: [[usize; 3]; 4] = [[0, 1, 2], [1, 2, 3], [0, 2, 3], [0, 1, 3]];
    let mut negative = 0;
    for t in TRIPLES {
        let a = cross(src[t[0]], src[t[1]], src[t[2]]);
        let b = cross(dst[t[0]], dst[t[1]], dst[t[2]]);
        if a.abs() < 1e-6 || b.abs() < 1e-6 {
            return false;
        }
        if a * b < 0.0 {
            negative += 1;
        }
    }
    negative == 0 || negative == 4
}

/// Iterations still needed for `confidence` given the outlier ratio seen so far (the standard
/// bound log(1 − p) / log(1 − (1 − ε)⁴)), never more than `max_iters`.
fn needed_iters(confidence: f64, outlier_ratio: f64, max_iters: usize) -> usize {
    let num = (1.0 - confidence).max(f64::MIN_POSITIVE).ln();
    let denom = 1.0 - (1.0 - outlier_ratio).powi(4);
    if denom < f64::MIN_POSITIVE {
        return 0;
    }
    let denom = denom.ln();
    if denom >= 0.0 || -num >= max_iters as f64 * -denom {
        max_iters
    } else {
        (num / denom).round() as usize
    }
}

/// Levenberg–Marquardt on the 8 free entries of `h` (h₂₂ = 1), minimising the squared
/// reprojection error of `src` onto `dst`; at most 10 steps, a step kept only if it lowers the
/// cost.
fn refine(h: Matrix3<f64>, src: &[[f64; 2]], dst: &[[f64; 2]]) -> Matrix3<f64> {
    let cost =
        |h: &Matrix3<f64>| -> f64 { src.iter().zip(dst).map(|(s, d)| sq_error(h, *s, *d)).sum() };
    let mut h = h;
    let mut c = cost(&h);
    let mut lambda = 1e-3;
    for _ in 0..10 {
        let mut jtj = SMatrix::<f64, 8, 8>::zeros();
        let mut jtr = SVector::<f64, 8>::zeros();
        for (s, d) in src.iter().zip(dst) {
            let (x, y) = (s[0], s[1]);
            let w = h[(2, 0)] * x + h[(2, 1)] * y + 1.0;
            if w.abs() < 1e-12 {
                continue;
            }
            let px = (h[(0, 0)] * x + h[(0, 1)] * y + h[(0, 2)]) / w;
            let py = (h[(1, 0)] * x + h[(1, 1)] * y + h[(1, 2)]) / w;
            let jx = SVector::<f64, 8>::from_column_slice(&[
                x / w,
                y / w,
                1.0 / w,
                0.0,
                0.0,
                0.0,
                -px * x / w,
                -px * y / w,
            ]);
            let jy = SVector::<f64, 8>::from_column_slice(&[
                0.0,
                0.0,
                0.0,
                x / w,
                y / w,
                1.0 / w,
                -py * x / w,
                -py * y / w,
            ]);
            jtj += jx * jx.transpose() + jy * jy.transpose();
            jtr += jx * (px - d[0]) + jy * (py - d[1]);
        }
        let mut improved = false;
        for _ in 0..8 {
            let mut a = jtj;
            for i in 0..8 {
                a[(i, i)] += lambda * jtj[(i, i)].max(1e-12);
            }
            let Some(step) = a.cholesky().map(|ch| ch.solve(&jtr)) else {
                lambda *= 10.0;
                continue;
            };
            let mut cand = h;
            for i in 0..8 {
                cand[(i / 3, i % 3)] -= step[i];
            }
            let cc = cost(&cand);
            if cc < c {
                h = cand;
                c = cc;
                lambda = (lambda / 10.0).max(1e-12);
                improved = true;
                break;
            }
            lambda *= 10.0;
        }
        if !improved {
            break;
        }
    }
    h
}

/// PROSAC's sampling schedule (Chum & Matas, "Matching with PROSAC — progressive sample
/// consensus", CVPR 2005, §2.2): correspondences come best first (the matches sorted by
/// Hamming distance, as the released code sorts them), and the t-th sample is drawn from the
/// top n(t) of them, n growing so that the draws approach uniform RANSAC sampling as t grows.
/// Good matches are far more often correct, so an all-inlier sample comes early even when
/// correct matches are a fifth of all; with uniform draws, 2000 iterations miss such a model a
/// few times in a hundred, and one miss changes every later key frame of a sequence.
struct Prosac {
    n_total: usize,
    /// Size of the current top set.
    n: usize,
    /// Expected draws from the top `n` (T_n) and the iteration at which `n` grows (T'_n).
    t_n: f64,
    t_prime: f64,
    /// Samples drawn so far.
    t: usize,
}

impl Prosac {
    /// T_N of the paper: the draws after which the schedule is plain RANSAC.
    const T_N: f64 = 200_000.0;

    fn new(n_total: usize) -> Self {
        let mut t_n = Self::T_N;
        for i in 0..4 {
            t_n *= (4 - i) as f64 / (n_total - i) as f64;
        }
        Prosac {
            n_total,
            n: 4,
            t_n,
            t_prime: 1.0,
            t: 0,
        }
    }

    /// Four distinct indices for the next sample.
    fn draw(&mut self, rng: &mut ChaCha8Rng) -> [usize; 4] {
        self.t += 1;
        if self.t as f64 >= self.t_prime && self.n < self.n_total {
            let next = self.t_n * (self.n + 1) as f64 / (self.n + 1 - 4) as f64;
            self.t_prime += (next - self.t_n).ceil();
            self.t_n = next;
            self.n += 1;
        }
        let mut idx = [0usize; 4];
        let mut k = 0;
        // Until T'_n has passed, the newest member of the top set is always in the sample.
        if (self.t as f64) <= self.t_prime && self.n < self.n_total {
            idx[0] = self.n - 1;
            k = 1;
        }
        let pool = if k == 1 { self.n - 1 } else { self.n };
        while k < 4 {
            let c = rng.gen_range(0..pool);
            if !idx[..k].contains(&c) {
                idx[k] = c;
                k += 1;
            }
        }
        idx
    }
}

/// The homography mapping `src` onto `dst` by RANSAC, or `None` (fewer than 4 pairs, no usable
/// sample, or no finite model) — the cases in which `cv2.findHomography` returns `None`.
/// Pairs are expected best first (PROSAC draws from the front of the lists first).
pub(crate) fn find_homography(src: &[[f64; 2]], dst: &[[f64; 2]], p: &RansacParams) -> Option<Fit> {
    let n = src.len();
    if n < 4 || n != dst.len() {
        return None;
    }
    let thr2 = p.threshold * p.threshold;
    let count = |h: &Matrix3<f64>| -> Vec<bool> {
        src.iter()
            .zip(dst)
            .map(|(s, d)| sq_error(h, *s, *d) <= thr2)
            .collect()
    };
    let mut best: Option<(usize, Vec<bool>)> = None;
    if n == 4 {
        let h = dlt(src, dst)?;
        best = Some((4, count(&h)));
    } else {
        let mut rng = ChaCha8Rng::seed_from_u64(p.seed);
        let mut prosac = Prosac::new(n);
        let mut iters = p.max_iters;
        let mut it = 0;
        while it < iters {
            let mut sample = None;
            for _ in 0..1000 {
                let idx = prosac.draw(&mut rng);
                let s = idx.map(|i| src[i]);
                let d = idx.map(|i| dst[i]);
                if sample_ok(&s, &d) {
                    sample = Some((s, d));
                    break;
                }
            }
            let Some((s, d)) = sample else {
                if it == 0 {
                    return None;
                }
                break;
            };
            if let Some(h) = dlt(&s, &d) {
                let mask = count(&h);
                let good = mask.iter().filter(|&&m| m).count();
                if good > best.as_ref().map_or(3, |b| b.0.max(3)) {
                    iters = needed_iters(p.confidence, (n - good) as f64 / n as f64, iters);
                    best = Some((good, mask));
                }
            }
            it += 1;
        }
    }
    let (_, inliers) = best?;
    let s_in: Vec<[f64; 2]> = src
        .iter()
        .zip(&inliers)
        .filter_map(|(s, &m)| m.then_some(*s))
        .collect();
    let d_in: Vec<[f64; 2]> = dst
        .iter()
        .zip(&inliers)
        .filter_map(|(d, &m)| m.then_some(*d))
        .collect();
    let h = dlt(&s_in, &d_in)?;
    let h = normalise(refine(h, &s_in, &d_in))?;
    Some(Fit { h, inliers })
}
