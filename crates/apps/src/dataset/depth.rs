//! 12-bit depth codes, as lerobot 0.6.1 packs depth maps into LeRobotDataset v3.0 videos.
//!
//! lerobot stores a depth camera as a video whose single plane carries 12-bit codes
//! (`gray12le` / `yuv420p12le`, e.g. HEVC Main 12), so standard codecs can hold it. The mapping is
//! `quantize_depth` / `dequantize_depth` in `src/lerobot/datasets/depth_utils.py` at tag v0.6.1,
//! with the defaults of `DepthEncoderConfig` in `src/lerobot/configs/video.py`: logarithmic
//! (`log(depth + shift)` spread linearly over the codes, so near range gets more codes, matching
//! the 1/depth error of depth sensors) or linear, from `depth_min` (code 0) to `depth_max` (code
//! [`DEPTH_QMAX`]). A dataset is only readable by lerobot's decoder if its codes are lerobot's, so
//! this module replays lerobot's numpy arithmetic operation by operation:
//!
//! * Quantizing runs in float32: the depth, `np.float32(depth_min/max/shift)`, `np.log` of the
//!   shifted depth, and the Python-float `log_min` and `log_max - log_min` (float64, from the
//!   float32 sums) cast to float32 by NEP 50; then `np.rint` (ties to even), `clip(0, 4095)` and
//!   `astype(uint16)`.
//! * `np.log` on a float32 array is not the C library's `logf`: on x86-64 with AVX2+FMA3 or
//!   AVX512F numpy runs its own kernel (`simd_log_FLOAT` in numpy's
//!   `numpy/_core/src/umath/loops_exponent_log.dispatch.c.src`, numpy 2.x), a rational
//!   approximation within a few ulp, identical on both instruction sets. It differs from a
//!   correctly rounded log by one ulp for about 6 % of inputs, enough to move some depths to the
//!   neighbouring code, so [`numpy_logf`] replays it. `dequantize_depth`'s `np.exp` likewise
//!   ([`numpy_expf`]). numpy on other CPUs (aarch64, or x86-64 without AVX2) calls libm instead;
//!   codes there can differ from these by one at a few code boundaries.
//! * Dequantizing (`dequantize_depth(..., output_unit="m")`, numpy path): float64 `scale` and
//!   `offset`, `code * scale` in float64 stored to float32, then float32 `+ offset`, `np.exp`,
//!   `- shift` and `clip(depth_min, depth_max)`.
//!
//! Inputs lerobot gives no defined code: NaN, and depths below `-shift` in log mode (the log of a
//! negative number), reach numpy's float-to-uint16 cast as NaN, which C leaves undefined; x86-64
//! yields 0 there (with an "invalid value encountered in cast" warning), and so does
//! [`DepthQuantizer::quantize`] on every platform. Everything else follows the float arithmetic as
//! lerobot does: a missing return (depth 0 or negative) is below `depth_min` and becomes 0, `+inf`
//! and anything beyond `depth_max` become [`DEPTH_QMAX`].

/// `DEPTH_QUANT_BITS`: bits per code.
pub const DEPTH_QUANT_BITS: u32 = 12;
/// `DEPTH_QMAX`: the largest code, `depth_max`'s.
pub const DEPTH_QMAX: u16 = (1 << DEPTH_QUANT_BITS) - 1;

/// The quantization parameters of a depth feature (lerobot's `DepthEncoderConfig` fields, stored
/// as `video.depth_min` etc. in `info.json`), all in metres.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DepthQuantizer {
    /// Depth at code 0.
    pub depth_min: f64,
    /// Depth at code [`DEPTH_QMAX`].
    pub depth_max: f64,
    /// Added before the logarithm (log mode only); `depth_min + shift` must be positive.
    pub shift: f64,
    /// Logarithmic codes (lerobot's default) rather than linear ones.
    pub use_log: bool,
}

impl Default for DepthQuantizer {
    /// lerobot's `DEFAULT_DEPTH_MIN/MAX/SHIFT/USE_LOG`.
    fn default() -> Self {
        DepthQuantizer {
            depth_min: 0.01,
            depth_max: 10.0,
            shift: 3.5,
            use_log: true,
        }
    }
}

/// Per-call constants of `quantize_depth`, in the precision numpy uses them.
struct Quantize {
    use_log: bool,
    shift: f32,
    /// `log_min` (log mode) or `depth_min` (linear), float32.
    offset: f32,
    /// `log_max - log_min` (log mode) or `depth_max - depth_min` (linear), float32.
    range: f32,
}

impl Quantize {
    fn new(q: &DepthQuantizer) -> Self {
        let (min, max, shift) = (q.depth_min as f32, q.depth_max as f32, q.shift as f32);
        if q.use_log {
            // `math.log(float(depth_min_u + shift_u))`: a float32 sum, a float64 log.
            let log_min = f64::from(min + shift).ln();
            let log_max = f64::from(max + shift).ln();
            Quantize {
                use_log: true,
                shift,
                offset: log_min as f32,
                range: (log_max - log_min) as f32,
            }
        } else {
            Quantize {
                use_log: false,
                shift,
                offset: min,
                range: max - min,
            }
        }
    }

    fn code(&self, metres: f32) -> u16 {
        let norm = if self.use_log {
            (numpy_logf(metres + self.shift) - self.offset) / self.range
        } else {
            (metres - self.offset) / self.range
        };
        let code = (norm * f32::from(DEPTH_QMAX)).round_ties_even();
        if code.is_nan() {
            0
        } else {
            code.max(0.0).min(f32::from(DEPTH_QMAX)) as u16
        }
    }
}

impl DepthQuantizer {
    /// The checks lerobot makes (`_validate_log_quant_params`), plus finite parameters and
    /// `depth_min < depth_max`, without which the codes mean nothing.
    pub fn validate(&self) -> Result<(), String> {
        let (min, max, shift) = (self.depth_min, self.depth_max, self.shift);
        if !(min.is_finite() && max.is_finite() && shift.is_finite()) || min >= max {
            return Err(format!(
                "depth quantizer needs finite depth_min < depth_max and shift, got {min}, {max}, {shift}"
            ));
        }
        if self.use_log && min + shift <= 0.0 {
            return Err(format!(
                "depth_min + shift must be positive for logarithmic quantization, got {min} + {shift}"
            ));
        }
        Ok(())
    }

    /// `quantize_depth(metres, input_unit="m", video_backend=None)`: one code per depth (see the
    /// module doc for NaN and out-of-range depths). Panics if `out` is not as long as `metres`.
    pub fn quantize(&self, metres: &[f32], out: &mut [u16]) {
        assert_eq!(
            metres.len(),
            out.len(),
            "quantize: {} depths into {} codes",
            metres.len(),
            out.len()
        );
        let q = Quantize::new(self);
        for (o, &m) in out.iter_mut().zip(metres) {
            *o = q.code(m);
        }
    }

    /// [`Self::quantize`] for the next frame of a still camera: `codes` hold the codes of
    /// `before`, and only the depths that changed (bit for bit) are quantised again. Why: most of
    /// a recording's depth map does not change between frames, and each code costs a replay of
    /// numpy's float32 log. Panics unless all three have one length.
    pub fn requantize(&self, metres: &[f32], before: &[f32], codes: &mut [u16]) {
        assert!(
            metres.len() == before.len() && metres.len() == codes.len(),
            "requantize: {} depths, {} before, {} codes",
            metres.len(),
            before.len(),
            codes.len()
        );
        let q = Quantize::new(self);
        for ((o, &m), b) in codes.iter_mut().zip(metres).zip(before) {
            if m.to_bits() != b.to_bits() {
                *o = q.code(m);
            }
        }
    }

    /// `dequantize_depth(code, output_unit="m")` on a numpy array: the depth in metres a code
    /// decodes to, within `[depth_min, depth_max]` (as float32).
    pub fn dequantize(&self, code: u16) -> f32 {
        let (min, max, shift) = (self.depth_min, self.depth_max, self.shift);
        let (scale, offset) = if self.use_log {
            let log_min = (min + shift).ln();
            let log_max = (max + shift).ln();
            ((log_max - log_min) / f64::from(DEPTH_QMAX), log_min)
        } else {
            ((max - min) / f64::from(DEPTH_QMAX), min)
        };
        // `np.multiply(uint16, float, out=float32)` runs the float64 loop and casts its result.
        let mut v = (f64::from(code) * scale) as f32;
        v += offset as f32;
        if self.use_log {
            v = numpy_expf(v) - shift as f32;
        }
        v.max(min as f32).min(max as f32)
    }
}

// numpy's float32 log/exp coefficients (`numpy/_core/src/umath/npy_simd_data.h`), verbatim: the C
// float literals round to the same float32 as these Rust ones.
#[allow(clippy::excessive_precision)]
mod coeff {
    pub const LOG_P: [f32; 6] = [
        0.000000000000000000000e+00,
        9.999999999999998702752e-01,
        2.112677543073053063722e+00,
        1.480000633576506585156e+00,
        3.808837741388407920751e-01,
        2.589979117907922693523e-02,
    ];
    pub const LOG_Q: [f32; 6] = [
        1.000000000000000000000e+00,
        2.612677543073109236779e+00,
        2.453006071784736363091e+00,
        9.864942958519418960339e-01,
        1.546476374983906719538e-01,
        5.875095403124574342950e-03,
    ];
    pub const EXP_P: [f32; 6] = [
        9.999999999980870924916e-01,
        7.257664613233124478488e-01,
        2.473615434895520810817e-01,
        5.114512081637298353406e-02,
        6.757896990527504603057e-03,
        5.082762527590693718096e-04,
    ];
    pub const EXP_Q: [f32; 3] = [
        1.000000000000000000000e+00,
        -2.742335390411667452936e-01,
        2.159509375685829852307e-02,
    ];
    /// `NPY_CODY_WAITE_LOGE_2_HIGHf`, `NPY_CODY_WAITE_LOGE_2_LOWf`.
    pub const LN2_HI: f32 = -6.93145752e-1;
    pub const LN2_LO: f32 = -1.42860677e-6;
}

/// Horner's rule with fused multiply-adds from the highest coefficient, as numpy's kernels
/// evaluate their polynomials.
fn horner(c: &[f32], x: f32) -> f32 {
    let (&last, rest) = c.split_last().expect("coefficients");
    rest.iter().rev().fold(last, |acc, &k| acc.mul_add(x, k))
}

/// numpy's float32 `np.log` on x86-64 with AVX2+FMA3 or AVX512F (`simd_log_FLOAT`), one lane:
/// `x = m * 2^e` with `m` in `(sqrt(1/2), sqrt(2)]`, `log(x) = P(m-1)/Q(m-1) + e*ln2`.
pub fn numpy_logf(x: f32) -> f32 {
    if x.is_nan() || x < 0.0 {
        return f32::NAN;
    }
    if x == 0.0 {
        return f32::NEG_INFINITY;
    }
    if x == f32::INFINITY {
        return f32::INFINITY;
    }
    // Subnormals are scaled by 2^100 first (`fma_get_exponent` / `fma_get_mantissa`).
    let (bits, bias) = if x < f32::MIN_POSITIVE {
        ((x * f32::from_bits(0x7180_0000)).to_bits(), 100.0)
    } else {
        (x.to_bits(), 0.0)
    };
    let mut exponent = ((bits >> 23) as i32 - 126) as f32 - bias;
    let mut m = f32::from_bits((bits & 0x007f_ffff) | (126 << 23));
    if m <= std::f32::consts::FRAC_1_SQRT_2 {
        m += m;
        exponent -= 1.0;
    }
    let t = m - 1.0;
    let poly = horner(&coeff::LOG_P, t) / horner(&coeff::LOG_Q, t);
    exponent.mul_add(std::f32::consts::LN_2, poly)
}

/// numpy's float32 `np.exp` on x86-64 with AVX2+FMA3 or AVX512F (`simd_exp_FLOAT`), one lane:
/// `k = rint(x * log2(e))`, Cody-Waite reduction `r = x - k*ln2`, `exp(r) = P(r)/Q(r)`, times 2^k.
pub fn numpy_expf(x: f32) -> f32 {
    // numpy's `88.72283935546875f` and `-103.97208404541015625f`, in shortest form.
    const XMAX: f32 = 88.722_84;
    const XMIN: f32 = -103.972_084;
    const RINT_MAGIC: f32 = 12_582_912.0; // 0x1.8p23
    if x.is_nan() {
        return f32::NAN;
    }
    if x >= XMAX {
        return f32::INFINITY;
    }
    if x <= XMIN {
        return 0.0;
    }
    let k = (x * std::f32::consts::LOG2_E + RINT_MAGIC) - RINT_MAGIC;
    let r = k.mul_add(coeff::LN2_HI, x);
    let r = k.mul_add(coeff::LN2_LO, r);
    let r = k.mul_add(0.0, r);
    let poly = horner(&coeff::EXP_P, r) / horner(&coeff::EXP_Q, r);
    // `scalef`: poly * 2^k, rounded once (exact unless the result is subnormal).
    (f64::from(poly) * 2f64.powi(k as i32)) as f32
}
