//! ORB features (Rublee, Rabaud, Konolige, Bradski, "ORB: an efficient alternative to SIFT or
//! SURF", ICCV 2011) with the parameters of OpenCV's `cv::ORB::create()` defaults
//! (<https://docs.opencv.org/4.x/db/d95/classcv_1_1ORB.html>): an 8-level pyramid at scale 1.2
//! with a geometric share of the 500 features per level, FAST-9 corners (threshold 20, non-maximum
//! suppression), the Harris measure (7 × 7 block, k = 0.04) to keep the best, orientation by the
//! intensity centroid of a radius-15 disc, and a 256-bit steered BRIEF descriptor sampled on a
//! Gaussian-smoothed (7 × 7, σ = 2) copy of the level.
//!
//! The one deliberate departure is the descriptor's test pattern. OpenCV ships a learnt table of
//! 256 point pairs; this module does not reproduce it. It draws its own pairs once, from BRIEF's
//! isotropic Gaussian (Calonder et al., "BRIEF: Binary Robust Independent Elementary Features",
//! ECCV 2010, sampling strategy G II: σ = S/5 for a patch of side S = 31), with a fixed seed, and
//! clips them to the patch. Descriptors therefore differ from OpenCV's bit for bit, and so do a few
//! of the matches; what the key-frame extractor decides on is the homography fitted to the matches
//! and the overlap it implies, and those are what the golden test holds to OpenCV's.

use image::GrayImage;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Half the side of the descriptor patch and the radius of the orientation disc (patch 31).
const HALF_PATCH: i32 = 15;
/// Number of binary tests in a descriptor (32 bytes).
const DESCRIPTOR_BITS: usize = 256;
/// Harris block side and constant, as OpenCV's ORB uses them.
const HARRIS_BLOCK: i32 = 7;
const HARRIS_K: f64 = 0.04;
/// Seed of the test-pair pattern: any fixed value will do, it only has to never change.
const PATTERN_SEED: u64 = 0x0B_2011;

/// ORB's tunables, defaulting to OpenCV's `ORB::create()` (WTA_K 2, Harris score, patch 31 and
/// first level 0 are fixed here).
#[derive(Debug, Clone, PartialEq)]
pub struct OrbParams {
    /// Features wanted over all levels (OpenCV `nfeatures`).
    pub n_features: usize,
    /// Ratio between neighbouring pyramid levels (`scaleFactor`).
    pub scale_factor: f32,
    /// Pyramid levels (`nlevels`).
    pub n_levels: usize,
    /// Keypoints closer than this to a level's border are dropped (`edgeThreshold`).
    pub edge_threshold: u32,
    /// FAST intensity threshold (`fastThreshold`).
    pub fast_threshold: u8,
}

impl Default for OrbParams {
    fn default() -> Self {
        OrbParams {
            n_features: 500,
            scale_factor: 1.2,
            n_levels: 8,
            edge_threshold: 31,
            fast_threshold: 20,
        }
    }
}

/// One detected feature, its position in level-0 pixels (pixel centres at integers).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Keypoint {
    pub x: f32,
    pub y: f32,
    pub level: usize,
    /// Orientation, radians.
    pub angle: f32,
    /// Harris response on its level.
    pub response: f64,
}

/// Keypoints and their descriptors, index for index.
#[derive(Debug, Clone, Default)]
pub(crate) struct Features {
    pub keypoints: Vec<Keypoint>,
    pub descriptors: Vec<[u8; 32]>,
}

/// Grey conversion of an RGB image with the ITU-R BT.601 weights (0.299, 0.587, 0.114) in the
/// 14-bit fixed point OpenCV documents for `cvtColor(…, COLOR_BGR2GRAY)` on 8-bit images
/// (<https://docs.opencv.org/4.x/de/d25/imgproc_color_conversions.html>): each weight scaled by
/// 2¹⁴ and rounded, the sum rounded to the nearest integer.
pub(crate) fn to_gray(rgb: &image::RgbImage) -> GrayImage {
    const R: u32 = 4899; // round(0.299 · 16384)
    const G: u32 = 9617; // round(0.587 · 16384)
    const B: u32 = 1868; // round(0.114 · 16384)
    let (w, h) = rgb.dimensions();
    let data = rgb
        .pixels()
        .map(|p| ((p[0] as u32 * R + p[1] as u32 * G + p[2] as u32 * B + (1 << 13)) >> 14) as u8)
        .collect();
    GrayImage::from_raw(w, h, data).unwrap_or_else(|| GrayImage::new(w, h))
}

/// A grey image as a plain buffer with reflect-101 border reads (OpenCV's default border:
/// `dcb|abcd|cba`), which is what the pyramid and the blur see outside the picture.
#[derive(Debug, Clone)]
pub(crate) struct Plane {
    pub w: usize,
    pub h: usize,
    pub px: Vec<u8>,
}

impl Plane {
    pub fn from_gray(g: &GrayImage) -> Plane {
        Plane {
            w: g.width() as usize,
            h: g.height() as usize,
            px: g.as_raw().clone(),
        }
    }

    #[inline]
    fn at(&self, x: usize, y: usize) -> u8 {
        self.px[y * self.w + x]
    }

    /// Reflect-101 read; any coordinate is accepted.
    #[inline]
    fn at_reflect(&self, x: i32, y: i32) -> u8 {
        self.at(reflect101(x, self.w), reflect101(y, self.h))
    }
}

fn reflect101(mut i: i32, n: usize) -> usize {
    let n = n as i32;
    if n == 1 {
        return 0;
    }
    loop {
        if i < 0 {
            i = -i;
        } else if i >= n {
            i = 2 * n - 2 - i;
        } else {
            return i as usize;
        }
    }
}

/// Bilinear resize with pixel centres aligned (`src = (dst + ½)·scale − ½`, clamped at the
/// edges), the geometry of OpenCV's `INTER_LINEAR`, which ORB uses between pyramid levels.
fn resize_bilinear(src: &Plane, w: usize, h: usize) -> Plane {
    let sx = src.w as f64 / w as f64;
    let sy = src.h as f64 / h as f64;
    let taps = |d: usize, scale: f64, n: usize| -> (usize, usize, f64) {
        let f = (d as f64 + 0.5) * scale - 0.5;
        let i = f.floor();
        let t = f - i;
        let i = i as i64;
        if i < 0 {
            (0, 0, 0.0)
        } else if i as usize >= n - 1 {
            (n - 1, n - 1, 0.0)
        } else {
            (i as usize, i as usize + 1, t)
        }
    };
    let cols: Vec<_> = (0..w).map(|x| taps(x, sx, src.w)).collect();
    let mut px = Vec::with_capacity(w * h);
    for y in 0..h {
        let (y0, y1, ty) = taps(y, sy, src.h);
        for &(x0, x1, tx) in &cols {
            let top = src.at(x0, y0) as f64 * (1.0 - tx) + src.at(x1, y0) as f64 * tx;
            let bot = src.at(x0, y1) as f64 * (1.0 - tx) + src.at(x1, y1) as f64 * tx;
            px.push((top * (1.0 - ty) + bot * ty).round().clamp(0.0, 255.0) as u8);
        }
    }
    Plane { w, h, px }
}

/// Separable 7 × 7 Gaussian, σ = 2, reflect-101 borders (ORB smooths before the binary tests so
/// that single-pixel noise does not flip them).
fn gaussian_blur_7(src: &Plane) -> Plane {
    let sigma = 2.0f64;
    let raw: Vec<f64> = (-3..=3)
        .map(|i| (-(i * i) as f64 / (2.0 * sigma * sigma)).exp())
        .collect();
    let sum: f64 = raw.iter().sum();
    let k: Vec<f64> = raw.iter().map(|v| v / sum).collect();
    let (w, h) = (src.w, src.h);
    let mut tmp = vec![0f64; w * h];
    for y in 0..h {
        for x in 0..w {
            tmp[y * w + x] = (-3..=3i32)
                .map(|d| k[(d + 3) as usize] * src.at_reflect(x as i32 + d, y as i32) as f64)
                .sum();
        }
    }
    let mut px = Vec::with_capacity(w * h);
    for y in 0..h {
        for x in 0..w {
            let v: f64 = (-3..=3i32)
                .map(|d| k[(d + 3) as usize] * tmp[reflect101(y as i32 + d, h) * w + x])
                .sum();
            px.push(v.round().clamp(0.0, 255.0) as u8);
        }
    }
    Plane { w, h, px }
}

/// The 16-pixel Bresenham circle of radius 3 that FAST tests (Rosten & Drummond, "Machine
/// learning for high-speed corner detection", ECCV 2006), clockwise from the top.
const CIRCLE: [(i32, i32); 16] = [
    (0, -3),
    (1, -3),
    (2, -2),
    (3, -1),
    (3, 0),
    (3, 1),
    (2, 2),
    (1, 3),
    (0, 3),
    (-1, 3),
    (-2, 2),
    (-3, 1),
    (-3, 0),
    (-3, -1),
    (-2, -2),
    (-1, -3),
];

/// FAST-9 score of a pixel: the largest threshold at which 9 contiguous circle pixels are all
/// brighter (or all darker) than the centre by more than it, or 0 when not a corner at
/// `threshold`. The score is what non-maximum suppression and the first cull compare.
fn fast_score(img: &Plane, x: usize, y: usize, threshold: i32) -> i32 {
    let c = img.at(x, y) as i32;
    let mut d = [0i32; 16];
    for (k, &(dx, dy)) in CIRCLE.iter().enumerate() {
        d[k] = img.at((x as i32 + dx) as usize, (y as i32 + dy) as usize) as i32 - c;
    }
    let mut best = 0;
    for start in 0..16 {
        let mut lo = i32::MAX; // smallest brightening on the arc
        let mut hi = i32::MIN; // largest (least negative) darkening on the arc
        for k in 0..9 {
            let v = d[(start + k) % 16];
            lo = lo.min(v);
            hi = hi.max(v);
        }
        best = best.max(lo).max(-hi);
    }
    // Corner at threshold t means every arc pixel differs by strictly more than t.
    if best > threshold {
        best - 1
    } else {
        0
    }
}

/// FAST-9 corners of a level with 3 × 3 non-maximum suppression on the score (a corner must beat
/// all eight neighbours strictly), as `cv::FAST(…, nonmaxSuppression = true)` documents.
fn fast_corners(img: &Plane, threshold: u8) -> Vec<(usize, usize, i32)> {
    let (w, h) = (img.w, img.h);
    if w < 7 || h < 7 {
        return Vec::new();
    }
    let mut score = vec![0i32; w * h];
    for y in 3..h - 3 {
        for x in 3..w - 3 {
            score[y * w + x] = fast_score(img, x, y, threshold as i32);
        }
    }
    let mut out = Vec::new();
    for y in 4..h - 4 {
        for x in 4..w - 4 {
            let s = score[y * w + x];
            if s == 0 {
                continue;
            }
            let beats_all = (-1..=1i32).all(|dy| {
                (-1..=1i32).all(|dx| {
                    (dx == 0 && dy == 0)
                        || s > score[(y as i32 + dy) as usize * w + (x as i32 + dx) as usize]
                })
            });
            if beats_all {
                out.push((x, y, s));
            }
        }
    }
    out
}

/// Keeps the `n` items with the largest `key`, plus every item tied with the `n`-th (the rule of
/// OpenCV's `KeyPointsFilter::retainBest`, which matters for FAST's integer scores).
fn retain_best<T>(items: &mut Vec<T>, n: usize, key: impl Fn(&T) -> f64) {
    if items.len() <= n {
        return;
    }
    if n == 0 {
        items.clear();
        return;
    }
    let mut keys: Vec<f64> = items.iter().map(&key).collect();
    keys.sort_by(|a, b| b.total_cmp(a));
    let cut = keys[n - 1];
    items.retain(|it| key(it) >= cut);
}

/// Harris corner measure `det(M) − k·trace(M)²` of the 7 × 7 block centred on `(x, y)`, with
/// Sobel derivatives (Harris & Stephens, "A combined corner and edge detector", 1988). Only the
/// ranking within a level matters, so no normalisation is applied.
fn harris(img: &Plane, x: i32, y: i32) -> f64 {
    let r = HARRIS_BLOCK / 2;
    let (mut a, mut b, mut c) = (0f64, 0f64, 0f64);
    let p = |dx: i32, dy: i32| img.at_reflect(dx, dy) as i32;
    for v in y - r..=y + r {
        for u in x - r..=x + r {
            let ix = (p(u + 1, v) - p(u - 1, v)) * 2
                + (p(u + 1, v - 1) - p(u - 1, v - 1))
                + (p(u + 1, v + 1) - p(u - 1, v + 1));
            let iy = (p(u, v + 1) - p(u, v - 1)) * 2
                + (p(u - 1, v + 1) - p(u - 1, v - 1))
                + (p(u + 1, v + 1) - p(u + 1, v - 1));
            a += (ix * ix) as f64;
            b += (iy * iy) as f64;
            c += (ix * iy) as f64;
        }
    }
    a * b - c * c - HARRIS_K * (a + b) * (a + b)
}

/// Half-widths of the rows of the radius-15 disc: the largest `u` with `u² + v² ≤ 15² + 15`, for
/// v = 0..=15. Deciding by `u² + v²` makes the disc symmetric under 90° rotations and mirror
/// images, so the centroid turns exactly with the image.
fn disc_rows() -> [i32; (HALF_PATCH + 1) as usize] {
    let r2 = HALF_PATCH * HALF_PATCH + HALF_PATCH;
    let mut u = [0; (HALF_PATCH + 1) as usize];
    for (v, slot) in u.iter_mut().enumerate() {
        let v = v as i32;
        *slot = (0..=HALF_PATCH)
            .rev()
            .find(|x| x * x + v * v <= r2)
            .unwrap_or(0);
    }
    u
}

/// Orientation by the intensity centroid (Rosin, "Measuring corner properties", CVIU 1999; ORB
/// §3.2): the angle of (m₁₀, m₀₁) over the disc of radius 15 around the keypoint.
fn centroid_angle(img: &Plane, x: i32, y: i32, rows: &[i32]) -> f32 {
    let (mut m10, mut m01) = (0i64, 0i64);
    for (v, &half) in rows.iter().enumerate() {
        let v = v as i32;
        for u in -half..=half {
            let below = img.at_reflect(x + u, y + v) as i64;
            m10 += u as i64 * below;
            m01 += v as i64 * below;
            if v != 0 {
                let above = img.at_reflect(x + u, y - v) as i64;
                m10 += u as i64 * above;
                m01 -= v as i64 * above;
            }
        }
    }
    (m01 as f64).atan2(m10 as f64) as f32
}

/// The 256 test pairs: BRIEF's G II sampling, both points i.i.d. isotropic Gaussian with
/// σ = 31/5, rounded to pixels and clipped to the 31 × 31 patch; pairs of one point are redrawn
/// (their test would be constant). Drawn from a fixed-seed ChaCha stream, so it never changes.
pub(crate) fn test_pattern() -> Vec<[(i32, i32); 2]> {
    let mut rng = ChaCha8Rng::seed_from_u64(PATTERN_SEED);
    let sigma = 31.0 / 5.0;
    let mut gauss = move || -> i32 {
        // Box–Muller; u1 in (0, 1] keeps the logarithm finite.
        let u1: f64 = 1.0 - rng.gen::<f64>();
        let u2: f64 = rng.gen::<f64>();
        let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
        ((z * sigma).round() as i32).clamp(-HALF_PATCH, HALF_PATCH)
    };
    let mut pairs = Vec::with_capacity(DESCRIPTOR_BITS);
    while pairs.len() < DESCRIPTOR_BITS {
        let a = (gauss(), gauss());
        let b = (gauss(), gauss());
        if a != b {
            pairs.push([a, b]);
        }
    }
    pairs
}

/// Steered BRIEF (ORB §4): each test point rotated by the keypoint's angle and rounded, bit
/// `i` set when the first point of pair `i` is darker than the second.
fn describe(blurred: &Plane, x: i32, y: i32, angle: f32, pattern: &[[(i32, i32); 2]]) -> [u8; 32] {
    let (s, c) = (angle as f64).sin_cos();
    let sample = |(px, py): (i32, i32)| {
        let (px, py) = (px as f64, py as f64);
        let u = (px * c - py * s).round() as i32;
        let v = (px * s + py * c).round() as i32;
        blurred.at_reflect(x + u, y + v)
    };
    let mut d = [0u8; 32];
    for (i, [p, q]) in pattern.iter().enumerate() {
        if sample(*p) < sample(*q) {
            d[i / 8] |= 1 << (i % 8);
        }
    }
    d
}

/// Features per level: `n_features` shared geometrically (ratio 1/scale) over the levels, each
/// share rounded, the last level taking what is left (ORB in OpenCV; f32 as there).
pub(crate) fn level_quotas(p: &OrbParams) -> Vec<usize> {
    let n = p.n_levels.max(1);
    let factor = 1.0f32 / p.scale_factor;
    let mut share = p.n_features as f32 * (1.0 - factor) / (1.0 - factor.powi(n as i32));
    let mut quotas = Vec::with_capacity(n);
    let mut sum = 0usize;
    for _ in 0..n - 1 {
        let q = share.round().max(0.0) as usize;
        quotas.push(q);
        sum += q;
        share *= factor;
    }
    quotas.push(p.n_features.saturating_sub(sum));
    quotas
}

/// Detects ORB keypoints in a grey image and describes them.
pub(crate) fn detect_and_describe(
    gray: &GrayImage,
    p: &OrbParams,
    pattern: &[[(i32, i32); 2]],
) -> Features {
    let base = Plane::from_gray(gray);
    let quotas = level_quotas(p);
    let border = p.edge_threshold as usize;
    let rows = disc_rows();
    let mut out = Features::default();
    let mut level_img = base.clone();
    for (level, &quota) in quotas.iter().enumerate() {
        let scale = p.scale_factor.powi(level as i32);
        if level > 0 {
            // Each level is resized from the one above, to round(size / scale^level).
            let w = (base.w as f32 / scale).round() as usize;
            let h = (base.h as f32 / scale).round() as usize;
            if w == 0 || h == 0 {
                break;
            }
            level_img = resize_bilinear(&level_img, w, h);
        }
        let img = &level_img;
        if img.w <= 2 * border || img.h <= 2 * border {
            continue;
        }
        let mut corners: Vec<(usize, usize, i32)> = fast_corners(img, p.fast_threshold)
            .into_iter()
            .filter(|&(x, y, _)| {
                x >= border && x < img.w - border && y >= border && y < img.h - border
            })
            .collect();
        // FAST scores are a poor ranking: keep twice the quota, then rank by Harris.
        retain_best(&mut corners, 2 * quota, |c| c.2 as f64);
        let mut scored: Vec<(usize, usize, f64)> = corners
            .into_iter()
            .map(|(x, y, _)| (x, y, harris(img, x as i32, y as i32)))
            .collect();
        retain_best(&mut scored, quota, |c| c.2);
        if scored.is_empty() {
            continue;
        }
        let blurred = gaussian_blur_7(img);
        for (x, y, response) in scored {
            let angle = centroid_angle(img, x as i32, y as i32, &rows);
            // The descriptor is sampled where the level-0 position maps back to, rounded.
            let (x0, y0) = (x as f32 * scale, y as f32 * scale);
            let lx = (x0 / scale).round() as i32;
            let ly = (y0 / scale).round() as i32;
            out.descriptors
                .push(describe(&blurred, lx, ly, angle, pattern));
            out.keypoints.push(Keypoint {
                x: x0,
                y: y0,
                level,
                angle,
                response,
            });
        }
    }
    out
}
