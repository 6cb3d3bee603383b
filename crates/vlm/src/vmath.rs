//! Vectorised f32 maths shared by the model's CPU kernels: `e^x` on 8 lanes, the SwiGLU
//! activation `silu(gate)·up` in one pass, and a scaled softmax over the last dimension.
//!
//! Why our own `exp`: candle's element-wise ops and softmax call libm's `expf` once per value.
//! In a `perf record` of `bench vlm --quant q4k` (2 threads, AVX-512 AMD) `__expf_fma` was 3.6 %
//! of the vision tower's samples and 3.4 % of the prefill's, and decode attention called it once
//! per score; the SwiGLU activation also made two passes (`silu`, then the product), each
//! allocating a tensor as large as the MLP's intermediate. With both here (the fused
//! activation in both towers), the same profile: `__expf_fma` 2.1 % of the vision tower (its
//! softmax) and 1.5 % of the prefill, the fused activation 0.9 % of the vision tower. The text
//! decoder takes the fused activation and the causal softmax in its inference passes only
//! (`linear::SwiGlu::forward_act` says why).

use candle_core::{DType, Device, Storage, Tensor};

/// `silu(gate)·up` (`silu(x) = x / (1 + e^-x)`), for f32 tensors of one shape whose rows are
/// contiguous (the two halves of a fused gate/up product are), outside autograd; `None` when
/// the inputs are not that (the caller takes candle's ops). Within 1e-6 relative of candle's
/// `gate.silu()? * up` (`tests`): only `exp` differs.
pub(crate) fn silu_mul(gate: &Tensor, up: &Tensor) -> candle_core::Result<Option<Tensor>> {
    if gate.dims() != up.dims() || !plain_f32(gate) || !plain_f32(up) {
        return Ok(None);
    }
    let (Some(g), Some(u)) = (Rows::of(gate), Rows::of(up)) else {
        return Ok(None);
    };
    let (gs, _) = gate.storage_and_layout();
    let (us, _) = up.storage_and_layout();
    let (Storage::Cpu(gc), Storage::Cpu(uc)) = (&*gs, &*us) else {
        return Ok(None);
    };
    let (gd, ud) = (gc.as_slice::<f32>()?, uc.as_slice::<f32>()?);
    rows_out(g.rows, g.len, gate, |r, o| {
        silu_mul_row(g.row(gd, r), u.row(ud, r), o)
    })
    .map(Some)
}

/// Whether `t` is what these kernels take: f32 on the CPU, not tracked by autograd, on a CPU
/// with AVX2/FMA (the kernels' floor, [`super::qgemv::available`]).
fn plain_f32(t: &Tensor) -> bool {
    !t.track_op()
        && matches!(t.device(), Device::Cpu)
        && t.dtype() == DType::F32
        && super::qgemv::available()
}

/// A new f32 tensor shaped like `like`, of `rows` rows of `n`, row `r` written by `row(r, ..)`
/// into zeros, the rows split across candle's pool.
fn rows_out(
    rows: usize,
    n: usize,
    like: &Tensor,
    row: impl Fn(usize, &mut [f32]) + Sync,
) -> candle_core::Result<Tensor> {
    let mut out = vec![0f32; rows * n];
    let at = out.as_mut_ptr() as usize;
    candle_core::utils::barrier_pool().execute_chunked(rows, |rs| {
        for r in rs {
            // SAFETY: row `r` of the output is written by this work item only, inside `out`.
            let o = unsafe { std::slice::from_raw_parts_mut((at as *mut f32).add(r * n), n) };
            row(r, o);
        }
    });
    Tensor::from_vec(out, like.dims(), like.device())
}

/// `softmax(scale·x)` over the last dimension of an f32 tensor with contiguous rows outside
/// autograd, rows split across the pool; `None` otherwise (the caller takes candle's ops). Within 1e-6 of
/// `candle_nn::ops::softmax_last_dim(&(x * scale)?)` (`tests`): `exp` and the order of the sum
/// differ. The scale is applied in the same pass, so the scaled scores are never a tensor of
/// their own.
pub(crate) fn scaled_softmax(x: &Tensor, scale: f32) -> candle_core::Result<Option<Tensor>> {
    softmax_rows(x, scale, |_, len| len)
}

/// [`scaled_softmax`] of attention scores under a causal mask: row `r` (of the rows the
/// leading dimensions flatten) sees its first `seen(r)` scores (at least 1, at most all), and
/// the keys after them get exactly 0, as `softmax(scale·x + mask)` with the −∞ mask gives.
/// Why not the mask tensor: adding it, scaling, and the softmax were three passes over the
/// scores, each a tensor of its own (the text decoder's prompt: 16 heads × 545² scores per
/// layer), and the masked keys went through `exp` to become 0.
pub(crate) fn causal_scaled_softmax(
    x: &Tensor,
    scale: f32,
    seen: impl Fn(usize) -> usize + Sync,
) -> candle_core::Result<Option<Tensor>> {
    softmax_rows(x, scale, |r, len| seen(r).clamp(1, len))
}

/// The rows of [`scaled_softmax`], row `r` over its first `visible(r, len)` values, the rest 0.
fn softmax_rows(
    x: &Tensor,
    scale: f32,
    visible: impl Fn(usize, usize) -> usize + Sync,
) -> candle_core::Result<Option<Tensor>> {
    if !plain_f32(x) {
        return Ok(None);
    }
    let Some(rows) = Rows::of(x) else {
        return Ok(None);
    };
    let (xs, _) = x.storage_and_layout();
    let Storage::Cpu(xc) = &*xs else {
        return Ok(None);
    };
    let xd = xc.as_slice::<f32>()?;
    rows_out(rows.rows, rows.len, x, |r, o| {
        let v = visible(r, rows.len);
        // `rows_out` hands out zeroed rows: the values past `v` stay 0.
        softmax_row(&rows.row(xd, r)[..v], scale, &mut o[..v])
    })
    .map(Some)
}

/// One row of [`scaled_softmax`].
fn softmax_row(x: &[f32], scale: f32, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if super::qgemv::available() {
        // SAFETY: AVX2 and FMA are here (`available`).
        return unsafe { x86::softmax_row(x, scale, out) };
    }
    let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v * scale));
    let mut sum = 0f32;
    for (o, &v) in out.iter_mut().zip(x) {
        *o = (v * scale - max).exp();
        sum += *o;
    }
    out.iter_mut().for_each(|o| *o /= sum);
}

/// Where the rows of a tensor with contiguous rows start: `[..., len]`, the leading dimensions
/// collapsible into one row stride.
struct Rows {
    start: usize,
    stride: usize,
    rows: usize,
    len: usize,
}

impl Rows {
    fn of(t: &Tensor) -> Option<Rows> {
        let l = t.layout();
        let (&len, lead) = l.dims().split_last()?;
        if len == 0 || l.stride().last() != Some(&1) {
            return None;
        }
        // Leading dimensions of more than one index (a dimension of one has no stride to
        // keep), each stride the next one's times the next dimension: one row stride.
        let lead: Vec<(usize, usize)> = lead
            .iter()
            .zip(l.stride())
            .filter(|(&d, _)| d > 1)
            .map(|(&d, &s)| (d, s))
            .collect();
        let collapsible = lead.windows(2).all(|p| p[0].1 == p[1].1 * p[1].0);
        let stride = lead.last().map_or(len, |&(_, s)| s);
        (collapsible && stride >= len).then_some(Rows {
            start: l.start_offset(),
            stride,
            rows: lead.iter().map(|&(d, _)| d).product(),
            len,
        })
    }

    fn row<'a>(&self, all: &'a [f32], r: usize) -> &'a [f32] {
        let at = self.start + r * self.stride;
        &all[at..at + self.len]
    }
}

/// One row of [`silu_mul`].
fn silu_mul_row(g: &[f32], u: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if super::qgemv::available() {
        // SAFETY: AVX2 and FMA are here (`available`).
        return unsafe { x86::silu_mul_row(g, u, out) };
    }
    for ((o, &g), &u) in out.iter_mut().zip(g).zip(u) {
        *o = g / (1.0 + (-g).exp()) * u;
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use std::arch::x86_64::*;

    /// `e^x` lane-wise, within ~2 ulp of libm: `x = n·ln 2 + r` with `n` the nearest integer to
    /// `x/ln 2` (ln 2 split in two parts so that `r` keeps its low bits), `e^r` by its Taylor
    /// series to `r⁶/6!` (|r| ≤ ln 2 / 2: the first term left out is below 1.2e-7·e^r), and
    /// `2ⁿ` built in the exponent bits. `x` is clamped to [−87, 88] first, so that `2ⁿ` stays a
    /// normal float: below, the result is e^−87 ≈ 1.6e-38 instead of smaller (or 0); above,
    /// e^88 ≈ 1.7e38 instead of larger (or infinity). Softmax (`x ≤ 0`, next to its maximum's
    /// `e^0 = 1`) and SiLU (`x / (1 + e^−x)`, where either end gives 0 or `x` to f32 precision)
    /// do not see the difference. NaN stays NaN.
    #[inline(always)]
    pub(crate) unsafe fn exp(x: __m256) -> __m256 {
        // The constants first: `max_ps(c, x)` / `min_ps(c, x)` are `x` when `x` is NaN.
        let x = _mm256_min_ps(
            _mm256_set1_ps(88.0),
            _mm256_max_ps(_mm256_set1_ps(-87.0), x),
        );
        let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm256_mul_ps(x, _mm256_set1_ps(std::f32::consts::LOG2_E)),
        );
        // ln 2 = 0.693359375 (exact in 9 bits) − 2.12194440e-4.
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693_359_4), x);
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.121_944_4e-4), r);
        let mut p = _mm256_set1_ps(1.0 / 720.0);
        for c in [1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
            p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
        }
        let two_n = _mm256_slli_epi32::<23>(_mm256_add_epi32(
            _mm256_cvtps_epi32(n),
            _mm256_set1_epi32(127),
        ));
        _mm256_mul_ps(p, _mm256_castsi256_ps(two_n))
    }

    /// [`super::softmax_row`] on 8 lanes; the tail of fewer than 8 values through libm.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn softmax_row(x: &[f32], scale: f32, out: &mut [f32]) {
        let n = out.len().min(x.len());
        let (xp, op) = (x.as_ptr(), out.as_mut_ptr());
        let s = _mm256_set1_ps(scale);
        let mut max = _mm256_set1_ps(f32::NEG_INFINITY);
        let mut i = 0;
        while i + 8 <= n {
            max = _mm256_max_ps(_mm256_mul_ps(_mm256_loadu_ps(xp.add(i)), s), max);
            i += 8;
        }
        let mut lanes = [0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), max);
        let m = (i..n).fold(
            lanes.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)),
            |a, j| a.max(*xp.add(j) * scale),
        );
        let mv = _mm256_set1_ps(m);
        let mut acc = _mm256_setzero_ps();
        let mut i = 0;
        while i + 8 <= n {
            let e = exp(_mm256_sub_ps(
                _mm256_mul_ps(_mm256_loadu_ps(xp.add(i)), s),
                mv,
            ));
            _mm256_storeu_ps(op.add(i), e);
            acc = _mm256_add_ps(acc, e);
            i += 8;
        }
        _mm256_storeu_ps(lanes.as_mut_ptr(), acc);
        let mut sum: f32 = lanes.iter().sum();
        for j in i..n {
            *op.add(j) = (*xp.add(j) * scale - m).exp();
            sum += *op.add(j);
        }
        let inv = _mm256_set1_ps(1.0 / sum);
        let mut i = 0;
        while i + 8 <= n {
            _mm256_storeu_ps(op.add(i), _mm256_mul_ps(_mm256_loadu_ps(op.add(i)), inv));
            i += 8;
        }
        for j in i..n {
            *op.add(j) /= sum;
        }
    }

    /// [`super::silu_mul_row`] on 8 lanes; the tail of fewer than 8 values through libm.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn silu_mul_row(g: &[f32], u: &[f32], out: &mut [f32]) {
        let n = out.len().min(g.len()).min(u.len());
        let (gp, up, op) = (g.as_ptr(), u.as_ptr(), out.as_mut_ptr());
        let (one, sign) = (_mm256_set1_ps(1.0), _mm256_set1_ps(-0.0));
        let mut i = 0;
        while i + 8 <= n {
            let x = _mm256_loadu_ps(gp.add(i));
            let e = exp(_mm256_xor_ps(x, sign));
            let s = _mm256_div_ps(x, _mm256_add_ps(one, e));
            _mm256_storeu_ps(op.add(i), _mm256_mul_ps(s, _mm256_loadu_ps(up.add(i))));
            i += 8;
        }
        for j in i..n {
            *op.add(j) = *gp.add(j) / (1.0 + (-*gp.add(j)).exp()) * *up.add(j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Equal to candle's `gate.silu()? * up` within 1e-6 relative (plus 1e-30 absolute) on the
    /// two halves of a fused product (strided rows), with values from −200 to 200 (both ends
    /// of the `exp` clamp), row lengths on and off the 8-lane grid, and NaN passed through;
    /// tensors that autograd tracks, and other dtypes, are left to candle.
    #[test]
    fn equals_candles_silu_times_up() {
        let dev = Device::Cpu;
        if !super::super::qgemv::available_or_skip() {
            return;
        }
        for (rows, n) in [(1, 8), (3, 37), (2, 1000)] {
            let fused = (Tensor::randn(0f32, 1.0, (rows, 2, 2 * n), &dev).unwrap() * 60.0).unwrap();
            let fused = fused.narrow(1, 1, 1).unwrap();
            let mut v = fused.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            v[0] = 200.0;
            v[1] = -200.0;
            v[2] = f32::NAN;
            let fused = Tensor::from_vec(v, (rows, 1, 2 * n), &dev).unwrap();
            let gate = fused.narrow(2, 0, n).unwrap();
            let up = fused.narrow(2, n, n).unwrap();
            let ours = silu_mul(&gate, &up).unwrap().expect("handled");
            let want = (gate.silu().unwrap() * &up).unwrap();
            let (o, w) = (
                ours.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
                want.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            );
            assert_eq!(ours.dims(), want.dims());
            assert!(o[2].is_nan() && w[2].is_nan());
            for (i, (a, b)) in o.iter().zip(&w).enumerate().filter(|(i, _)| *i != 2) {
                assert!(
                    (a - b).abs() <= 1e-6 * b.abs() + 1e-30,
                    "rows {rows} n {n} [{i}]: {a} vs {b}"
                );
            }
        }
        let var = candle_core::Var::new(&[1f32, 2.0], &dev).unwrap();
        assert!(silu_mul(var.as_tensor(), var.as_tensor())
            .unwrap()
            .is_none());
        let h = Tensor::ones(4, DType::F16, &dev).unwrap();
        assert!(silu_mul(&h, &h).unwrap().is_none());
        let t = Tensor::ones((4, 4), DType::F32, &dev).unwrap().t().unwrap();
        assert!(silu_mul(&t, &t).unwrap().is_none(), "columns are not rows");
    }

    /// Equal to candle's `softmax_last_dim(x · scale)` within 1e-6 (absolute: the outputs are
    /// at most 1), for rows of 1, 7, 64 and 1 564 values (on and off the 8-lane grid), scores
    /// spread over hundreds (most terms below the `exp` clamp) and near zero; not taken for a
    /// non-contiguous tensor or one autograd tracks.
    #[test]
    fn scaled_softmax_equals_candles() {
        let dev = Device::Cpu;
        if !super::super::qgemv::available_or_skip() {
            return;
        }
        for len in [1, 7, 64, 1564] {
            for (spread, scale) in [(300f32, 0.11f32), (1.0, 1.0)] {
                let x =
                    (Tensor::randn(0f32, 1.0, (3, 5, len), &dev).unwrap() * spread as f64).unwrap();
                let ours = scaled_softmax(&x, scale).unwrap().expect("handled");
                let want = candle_nn::ops::softmax_last_dim(&(&x * scale as f64).unwrap()).unwrap();
                let diff = crate::max_abs_diff(&ours, &want);
                assert!(diff <= 1e-6, "len {len} spread {spread}: {diff}");
            }
        }
        let t = Tensor::ones((4, 4), DType::F32, &dev).unwrap().t().unwrap();
        assert!(scaled_softmax(&t, 1.0).unwrap().is_none());
        let var = candle_core::Var::new(&[1f32, 2.0], &dev).unwrap();
        assert!(scaled_softmax(var.as_tensor(), 1.0).unwrap().is_none());
    }

    /// Equal to the decoder's training path, `softmax_last_dim(x · scale + mask)` with the
    /// additive causal mask broadcast over query heads, within 1e-6, and exactly 0 past each
    /// position's last key, for a prompt (no cache), a pass after 5 cached positions, one row,
    /// and rows on and off the 8-lane grid; tensors autograd tracks are left to candle.
    #[test]
    fn causal_scaled_softmax_equals_the_masked_softmax() {
        let dev = Device::Cpu;
        if !super::super::qgemv::available_or_skip() {
            return;
        }
        let (kv_heads, rep, scale) = (2, 3, 0.125f32);
        for (s, past) in [(1, 0), (7, 0), (19, 5), (40, 0)] {
            let t = s + past;
            let x = (Tensor::randn(0f32, 1.0, (1, kv_heads, rep * s, t), &dev).unwrap() * 20.0)
                .unwrap();
            let mask = crate::attend::causal_mask(s, past, &dev).unwrap();
            let want = (&x * scale as f64)
                .unwrap()
                .reshape((1, kv_heads, rep, s, t))
                .unwrap()
                .broadcast_add(&mask)
                .unwrap()
                .reshape((1, kv_heads, rep * s, t))
                .unwrap();
            let want = candle_nn::ops::softmax_last_dim(&want).unwrap();
            // Rows head-major, as candle's unblocked attention has them.
            let ours = causal_scaled_softmax(&x, scale, |r| past + r % s + 1)
                .unwrap()
                .expect("handled");
            assert_eq!(ours.dims(), want.dims());
            let diff = crate::max_abs_diff(&ours, &want);
            assert!(diff <= 1e-6, "s {s} past {past}: {diff}");
            let o = ours.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            for (r, row) in o.chunks(t).enumerate() {
                let seen = past + r % s + 1;
                assert!(row[seen..].iter().all(|&p| p == 0.0), "s {s} row {r}");
                let sum: f32 = row[..seen].iter().sum();
                assert!((sum - 1.0).abs() < 1e-5, "s {s} row {r}: {sum}");
            }
        }
        let var = candle_core::Var::new(&[[1f32, 2.0]], &dev).unwrap();
        assert!(causal_scaled_softmax(var.as_tensor(), 1.0, |_| 1)
            .unwrap()
            .is_none());
    }
}
