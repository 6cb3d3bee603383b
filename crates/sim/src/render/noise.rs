//! Colour encoding and the sensor model (depth noise, edge holes), applied after visibility.

use super::options::{RenderOptions, RenderOutput, EDGE_JUMP_RELATIVE, NO_PRIM};

/// Exact linear → sRGB8 encoding without a `powf` per channel: the 255 linear values at which
/// the rounded sRGB code steps up are computed once, and a pixel's code is the number of steps
/// below its value (binary search, eight comparisons).
pub(super) struct SrgbEncoder {
    steps: [f64; 255],
    /// `first[b]`: how many steps lie at or below `b / BUCKETS`, so that a value's code is found
    /// from its bucket in a step or two instead of a search over all 255 (three per pixel).
    first: Vec<u8>,
}

/// Buckets of the linear range [0, 1): a power of two, so `b / BUCKETS` and `linear · BUCKETS`
/// are exact and a value never falls below its bucket's lower edge.
const BUCKETS: usize = 4096;

impl SrgbEncoder {
    /// The one table every frame shares (building it takes 255 `powf` and a 4096-bucket index:
    /// more than shading a re-traced frame's pixels).
    pub(super) fn shared() -> &'static Self {
        static SHARED: std::sync::OnceLock<SrgbEncoder> = std::sync::OnceLock::new();
        SHARED.get_or_init(Self::new)
    }

    pub(super) fn new() -> Self {
        let mut steps = [0.0; 255];
        for (k, s) in steps.iter_mut().enumerate() {
            *s = srgb_to_linear((k as f64 + 0.5) / 255.0);
        }
        let first = (0..BUCKETS)
            .map(|b| steps.partition_point(|&s| s <= b as f64 / BUCKETS as f64) as u8)
            .collect();
        SrgbEncoder { steps, first }
    }

    /// sRGB8 code of a linear value (clamped to [0, 1]; NaN reads as black): the number of
    /// steps at or below `linear`.
    #[inline(always)]
    pub(super) fn encode(&self, linear: f64) -> u8 {
        let b = linear * BUCKETS as f64;
        // NaN and negatives lie below every step (the first is positive).
        if b.is_nan() || b < 0.0 {
            return 0;
        }
        if b >= BUCKETS as f64 {
            return self.steps.partition_point(|&s| s <= linear) as u8;
        }
        // A bucket (1/4096 wide) holds at most one step (the closest two, at the dark end, lie
        // 1/(255·12.92) apart), so one comparison finishes the count.
        let code = usize::from(self.first[b as usize]);
        (code + usize::from(self.steps.get(code).is_some_and(|&s| s <= linear))) as u8
    }
}

/// IEC 61966-2-1 decoding (sRGB value in [0, 1] → linear).
pub fn srgb_to_linear(s: f64) -> f64 {
    if s <= 0.04045 {
        s / 12.92
    } else {
        ((s + 0.055) / 1.055).powf(2.4)
    }
}

/// IEC 61966-2-1 encoding (linear in [0, 1] → sRGB value in [0, 1]).
pub fn linear_to_srgb(l: f64) -> f64 {
    let l = l.clamp(0.0, 1.0);
    if l <= 0.0031308 {
        12.92 * l
    } else {
        1.055 * l.powf(1.0 / 2.4) - 0.055
    }
}

const STREAM_HOLES: u64 = 0x686f6c6573; // "holes"
const STREAM_NOISE: u64 = 0x6e6f697365; // "noise"

/// SplitMix64 finaliser: a well-mixed 64-bit hash of its input.
#[inline]
fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Random bits for (seed, stream, pixel): counter-based, so each pixel's draw is independent of
/// the order pixels are visited in and of which other pixels drew.
#[inline]
fn pixel_bits(seed: u64, stream: u64, pixel: usize) -> u64 {
    splitmix64(splitmix64(seed ^ splitmix64(stream)) ^ pixel as u64)
}

/// Uniform in [0, 1) from the top 53 bits.
#[inline]
fn unit(bits: u64) -> f64 {
    (bits >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Standard normal draw for one pixel. Box–Muller turns one pair of uniforms into two independent
/// normals; pixels `2m` and `2m + 1` take the cosine and sine branch of pair `m`, which halves the
/// transcendental work and keeps each pixel's draw a function of (seed, pixel) alone.
#[inline]
fn gaussian(seed: u64, pixel: usize) -> f64 {
    let b1 = pixel_bits(seed, STREAM_NOISE, pixel >> 1);
    let b2 = splitmix64(b1);
    let u1 = 1.0 - unit(b1); // (0, 1]: ln is finite
    let radius = (-2.0 * u1.ln()).sqrt();
    let angle = std::f64::consts::TAU * unit(b2);
    if pixel & 1 == 0 {
        radius * angle.cos()
    } else {
        radius * angle.sin()
    }
}

/// Whether pixel `i` sits on a silhouette: a 4-neighbour (inside the image) saw nothing, or saw a
/// different primitive more than `EDGE_JUMP_RELATIVE` nearer or farther. Within one primitive
/// depth is continuous (they are convex), so a steep but continuous surface is not an edge, and
/// an object standing on the table (different primitives, no depth step) is not one either.
fn is_edge(t: &[f64], prim: &[u32], w: usize, h: usize, u: usize, v: usize) -> bool {
    let i = v * w + u;
    let (z, k) = (t[i], prim[i]);
    let check = |j: usize| {
        prim[j] == NO_PRIM || (prim[j] != k && (t[j] - z).abs() > EDGE_JUMP_RELATIVE * t[j].min(z))
    };
    (u > 0 && check(i - 1))
        || (u + 1 < w && check(i + 1))
        || (v > 0 && check(i - w))
        || (v + 1 < h && check(i + w))
}

/// Drops depth at edges with probability `edge_holes` (decided on the clean depth) and adds
/// σ = `depth_noise`·z² Gaussian noise to the rest; a noisy depth at or below zero reads as "no
/// data", as a real sensor would report it.
pub(super) fn apply_sensor_model(
    out: &mut RenderOutput,
    t: &[f64],
    prim: &[u32],
    opts: &RenderOptions,
) {
    let (w, h) = (out.width as usize, out.height as usize);
    let holes = opts.edge_holes.clamp(0.0, 1.0) as f64;
    let noise = opts.depth_noise.max(0.0) as f64;
    if holes == 0.0 && noise == 0.0 {
        return;
    }
    for v in 0..h {
        for u in 0..w {
            let i = v * w + u;
            if prim[i] == NO_PRIM {
                continue;
            }
            if holes > 0.0
                && is_edge(t, prim, w, h, u, v)
                && unit(pixel_bits(opts.seed, STREAM_HOLES, i)) < holes
            {
                out.depth_m[i] = 0.0;
                continue;
            }
            if noise > 0.0 {
                let z = t[i];
                let noisy = z + noise * z * z * gaussian(opts.seed, i);
                out.depth_m[i] = if noisy > 0.0 { noisy as f32 } else { 0.0 };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lut_encoder_matches_the_formula() {
        let enc = SrgbEncoder::new();
        for k in 0..=20000 {
            let l = k as f64 / 20000.0;
            let exact = (linear_to_srgb(l) * 255.0).round() as u8;
            assert_eq!(enc.encode(l), exact, "linear {l}");
        }
        assert_eq!(enc.encode(-1.0), 0);
        assert_eq!(enc.encode(2.0), 255);
        assert_eq!(enc.encode(f64::NAN), 0);
    }

    #[test]
    fn bucketed_lookup_counts_the_steps_as_a_full_search_does() {
        // Every step, its neighbours one ulp away, each bucket edge, and a dense sweep: the
        // places where a bucket's start or the forward scan could be off by one.
        let enc = SrgbEncoder::new();
        let search = |l: f64| enc.steps.partition_point(|&s| s <= l) as u8;
        let mut values: Vec<f64> = enc
            .steps
            .iter()
            .flat_map(|&s| {
                [
                    s,
                    f64::from_bits(s.to_bits() - 1),
                    f64::from_bits(s.to_bits() + 1),
                ]
            })
            .collect();
        values.extend((0..=BUCKETS).map(|b| b as f64 / BUCKETS as f64));
        values.extend((0..100_000).map(|k| k as f64 * 1.1e-5));
        values.extend([
            0.0,
            -0.0,
            1.0,
            1e300,
            -1e300,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ]);
        for l in values {
            assert_eq!(enc.encode(l), search(l), "linear {l:e}");
        }
    }

    /// The single comparison after the bucket's start is enough only while no bucket holds two
    /// steps.
    #[test]
    fn no_bucket_holds_two_steps() {
        let enc = SrgbEncoder::new();
        for b in 0..BUCKETS {
            let (lo, hi) = (b as f64 / BUCKETS as f64, (b + 1) as f64 / BUCKETS as f64);
            let inside = enc.steps.iter().filter(|&&s| s > lo && s <= hi).count();
            assert!(inside <= 1, "bucket {b}: {inside} steps");
        }
    }

    #[test]
    fn gaussian_draws_have_unit_moments() {
        let n = 200_000;
        let (mut s, mut s2) = (0.0, 0.0);
        for i in 0..n {
            let g = gaussian(7, i);
            s += g;
            s2 += g * g;
        }
        let mean = s / n as f64;
        let var = s2 / n as f64 - mean * mean;
        assert!(mean.abs() < 0.01, "mean {mean}");
        assert!((var - 1.0).abs() < 0.02, "var {var}");
    }
}
