//! One new token's attention over the KV cache, on the CPU, read in place and split over the
//! thread pool by KV head.
//!
//! Why not candle's ops, as the prompt uses: for a single query row the general path (`q·kᵀ`
//! and `p·v` through `gemm`, a fused softmax, and a contiguous copy of the cache's V view)
//! runs on one thread while the pool's other threads wait, and copies V every token. In a q4k
//! decode profile of the 3B model (2 threads, 545-token prompt) that was ~8 % of the samples,
//! with the pool's second thread idle ~23 % of the time. Here each (sequence, KV head) is one
//! work item for candle's barrier pool (so on 2 threads, Qwen2.5-VL-3B's 2 KV heads run side by
//! side), keys and values are read where the cache holds them, and each key and value row is
//! read once for all the query heads that share it (grouped-query attention).
//!
//! The maths is the general path's, in another order of float additions: `softmax(q·kᵀ/√d)·v`
//! with the softmax's maximum subtracted; `tests` hold it to candle's ops within 1e-5.
//!
//! A prompt's attention ([`causal_prefill`]) runs on candle's matmul in blocks of query
//! positions, each against the keys its last position sees: the masked half of `q·kᵀ` and
//! `p·v` is not computed.

use candle_core::{DType, Device, Storage, Tensor};

/// Query positions per block of [`causal_prefill`]: 64 positions of 8 query heads are 512 rows
/// per product, and a 545-token prompt computes 56 % of the square (vs 100 % unblocked).
pub(crate) const CAUSAL_BLOCK: usize = 64;

/// Whether [`causal_prefill`] takes `xs`'s pass: f32 on the CPU where the vectorised softmax
/// runs ([`super::vmath::causal_scaled_softmax`]).
pub(crate) fn causal_fits(xs: &Tensor) -> bool {
    matches!(xs.device(), Device::Cpu) && xs.dtype() == DType::F32 && super::qgemv::available()
}

/// The additive causal mask `[s, past + s]` (f32) of `s` new positions after `past` cached
/// ones: 0 where position `i` may see key `j` (`j ≤ past + i`), −∞ after it. What the unblocked
/// path (training, and inference off the CPU) adds to the scores.
pub(crate) fn causal_mask(s: usize, past: usize, device: &Device) -> candle_core::Result<Tensor> {
    let t = past + s;
    let data: Vec<f32> = (0..s)
        .flat_map(|i| (0..t).map(move |j| if j > past + i { f32::NEG_INFINITY } else { 0.0 }))
        .collect();
    Tensor::from_vec(data, (s, t), device)
}

/// Causal `softmax(q·kᵀ·scale)·v` of `s` new positions after `t − s` cached ones, outside
/// autograd (an inference pass): `q` `[b, kv_heads, s·rep, d]` with its rows position-major
/// (row `i·rep + r` is query head `r` of the KV head's group at position `i`, so a run of
/// positions is a run of rows), `k`/`v` `[b, kv_heads, t, d]` with contiguous rows (the
/// cache's views) → `[b, kv_heads, s·rep, d]` f32, rows as `q`'s. Position `i` sees keys
/// `0..=t − s + i`: each block of [`CAUSAL_BLOCK`] positions multiplies against the keys its
/// last position sees, and the softmax gives the rest of the block's row exactly 0. Why: the
/// unblocked product computed the whole `s × t` square and the softmax zeroed half of it
/// (`perf` of a q4k prefill of the 3B, 2 threads, AVX-512: candle's gemm microkernel was
/// 5.7 % of the samples). Errors where [`causal_fits`] is false.
pub(crate) fn causal_prefill(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
    s: usize,
    rep: usize,
) -> candle_core::Result<Tensor> {
    let t = k.dim(2)?;
    if s == 0 || s > t || rep == 0 || q.dim(2)? != s * rep {
        candle_core::bail!(
            "causal_prefill: q {:?} is not {s} positions × {rep} heads over k {:?}",
            q.dims(),
            k.dims()
        );
    }
    let past = t - s;
    let mut outs = Vec::with_capacity(s.div_ceil(CAUSAL_BLOCK));
    let mut i0 = 0;
    while i0 < s {
        let n = CAUSAL_BLOCK.min(s - i0);
        let keys = past + i0 + n;
        let att = q
            .narrow(2, i0 * rep, n * rep)?
            .matmul(&k.narrow(2, 0, keys)?.t()?)?;
        let rows = n * rep;
        let p = super::vmath::causal_scaled_softmax(&att.detach(), scale as f32, |r| {
            past + i0 + (r % rows) / rep + 1
        })?
        .ok_or_else(|| {
            candle_core::Error::Msg(format!(
                "causal_prefill: f32 CPU scores expected, got {:?} on {:?}",
                att.dtype(),
                att.device()
            ))
        })?;
        outs.push(p.matmul(&v.narrow(2, 0, keys)?)?);
        i0 += n;
    }
    Tensor::cat(&outs, 2)
}

/// `softmax(q·kᵀ·scale)·v` for one query position: `q` `[b, heads, 1, d]`, `k`/`v`
/// `[b, kv_heads, t, d]` (any strides with contiguous rows, as the cache's views have), →
/// `[b, 1, heads·d]` f32. `None` when the inputs are not that (other device or dtype, more
/// query positions, strided rows): the caller takes the general path.
pub(crate) fn single_query(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
) -> candle_core::Result<Option<Tensor>> {
    let (Ok((b, heads, s, d)), Ok((kb, kv_heads, t, kd))) = (q.dims4(), k.dims4()) else {
        return Ok(None);
    };
    if s != 1
        || kb != b
        || kd != d
        || v.dims() != k.dims()
        || kv_heads == 0
        || heads % kv_heads != 0
        || t == 0
        || !matches!(q.device(), Device::Cpu)
        || [q, k, v].iter().any(|x| x.dtype() != DType::F32)
    {
        return Ok(None);
    }
    let q = q.contiguous()?;
    let (Some(kv), Some(vv)) = (rows_view(k)?, rows_view(v)?) else {
        return Ok(None);
    };
    let (qs, ql) = q.storage_and_layout();
    let (ks, _) = k.storage_and_layout();
    let (vs, _) = v.storage_and_layout();
    let (Storage::Cpu(qc), Storage::Cpu(kc), Storage::Cpu(vc)) = (&*qs, &*ks, &*vs) else {
        return Ok(None);
    };
    let qd = &qc.as_slice::<f32>()?[ql.start_offset()..ql.start_offset() + b * heads * d];
    let (kd_all, vd_all) = (kc.as_slice::<f32>()?, vc.as_slice::<f32>()?);
    let rep = heads / kv_heads;
    let mut out = vec![0f32; b * heads * d];
    let out_at = out.as_mut_ptr() as usize;
    let scale = scale as f32;
    candle_core::utils::barrier_pool().execute_chunked(b * kv_heads, |items| {
        let mut scores = vec![0f32; kernel::scratch_len(rep, t)];
        for item in items {
            let (bi, h) = (item / kv_heads, item % kv_heads);
            let first = (bi * heads + h * rep) * d;
            let qh = &qd[first..first + rep * d];
            // SAFETY: item (bi, h) alone writes the `rep·d` outputs of its query heads.
            let o =
                unsafe { std::slice::from_raw_parts_mut((out_at as *mut f32).add(first), rep * d) };
            kernel::attend(
                qh,
                |j| kv.row(kd_all, (bi, h, j), d),
                |j| vv.row(vd_all, (bi, h, j), d),
                (rep, t, d),
                scale,
                &mut scores,
                o,
            );
        }
    });
    Tensor::from_vec(out, (b, 1, heads * d), q.device()).map(Some)
}

/// Where the rows of a `[b, h, t, d]` view start in its storage.
struct RowsView {
    start: usize,
    batch: usize,
    head: usize,
    row: usize,
}

impl RowsView {
    /// Row `(sequence, head, position)`, `d` long.
    fn row<'a>(&self, all: &'a [f32], (b, h, j): (usize, usize, usize), d: usize) -> &'a [f32] {
        let at = self.start + b * self.batch + h * self.head + j * self.row;
        &all[at..at + d]
    }
}

fn rows_view(x: &Tensor) -> candle_core::Result<Option<RowsView>> {
    let (_, l) = x.storage_and_layout();
    Ok(match l.stride() {
        &[batch, head, row, 1] => Some(RowsView {
            start: l.start_offset(),
            batch,
            head,
            row,
        }),
        _ => None,
    })
}

mod kernel {
    /// Query heads per group of the blocked AVX2 kernel: one 8-lane vector holds a score of
    /// each, and 8 accumulators of each loop fit the 16 vector registers with room to spare.
    /// Qwen2.5-VL shares each KV head among 8 (3B, 72B), 7 (7B) or 5 (32B) query heads.
    pub const GROUP: usize = 8;

    /// Scratch floats [`attend`] needs for `t` key rows.
    pub fn scratch_len(rep: usize, t: usize) -> usize {
        rep.max(GROUP) * t
    }

    /// The attention of `rep` query heads (`q`, `rep·d`) over `t` key/value rows: `out` ←
    /// `softmax(q·kᵀ·scale)·v` per head. `scores` is scratch of at least
    /// [`scratch_len`]`(rep, t)`.
    pub fn attend<'a>(
        q: &[f32],
        key: impl Fn(usize) -> &'a [f32],
        value: impl Fn(usize) -> &'a [f32],
        (rep, t, d): (usize, usize, usize),
        scale: f32,
        scores: &mut [f32],
        out: &mut [f32],
    ) {
        #[cfg(target_arch = "x86_64")]
        if blocked_fits(rep, d) && crate::qgemv::available() {
            // SAFETY: AVX2/FMA are here (`available`, the one rule for our CPU kernels);
            // `blocked_fits` holds.
            return unsafe { x86::blocked(q, key, value, (rep, t, d), scale, scores, out) };
        }
        attend_any(q, key, value, (rep, t, d), scale, scores, out)
    }

    /// Whether the blocked kernel takes these shapes: at most [`GROUP`] query heads per KV head
    /// and a head size of whole 16-value chunks (Qwen2.5-VL: 128).
    pub fn blocked_fits(rep: usize, d: usize) -> bool {
        (1..=GROUP).contains(&rep) && d > 0 && d.is_multiple_of(16)
    }

    /// The plain loops, for any shape and CPU; also the reference the blocked kernel is tested
    /// against.
    pub fn attend_any<'a>(
        q: &[f32],
        key: impl Fn(usize) -> &'a [f32],
        value: impl Fn(usize) -> &'a [f32],
        (rep, t, d): (usize, usize, usize),
        scale: f32,
        scores: &mut [f32],
        out: &mut [f32],
    ) {
        // Scores, key row by key row: each row is read once for every head sharing it.
        for j in 0..t {
            let k = key(j);
            for r in 0..rep {
                scores[r * t + j] = dot(&q[r * d..(r + 1) * d], k) * scale;
            }
        }
        for r in 0..rep {
            let s = &mut scores[r * t..(r + 1) * t];
            let max = s.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            let mut sum = 0f32;
            for x in s.iter_mut() {
                *x = (*x - max).exp();
                sum += *x;
            }
            let inv = 1.0 / sum;
            s.iter_mut().for_each(|x| *x *= inv);
        }
        out[..rep * d].fill(0.0);
        for j in 0..t {
            let v = value(j);
            for r in 0..rep {
                let p = scores[r * t + j];
                for (o, &x) in out[r * d..(r + 1) * d].iter_mut().zip(v) {
                    *o += p * x;
                }
            }
        }
    }

    /// A dot product in 16 independent lanes (so that it vectorises without reassociating).
    #[inline(always)]
    fn dot(a: &[f32], b: &[f32]) -> f32 {
        let mut acc = [0f32; 16];
        let (ca, cb) = (a.chunks_exact(16), b.chunks_exact(16));
        let tail: f32 = ca
            .remainder()
            .iter()
            .zip(cb.remainder())
            .map(|(x, y)| x * y)
            .sum();
        for (x, y) in ca.zip(cb) {
            for i in 0..16 {
                acc[i] += x[i] * y[i];
            }
        }
        acc.iter().sum::<f32>() + tail
    }

    /// The blocked kernel. Why: the plain loops, even compiled for AVX2, spent their time on
    /// what surrounds the multiplies — a 16-lane horizontal sum for every (head, key) score,
    /// one call to libm's `expf` per score, and a load and a store of the output row for every
    /// (key, head) in `p·v` — 7.8 % of a q4k decode's samples, and 0.8 % more in `expf`
    /// (`perf record` of `bench vlm --quant q4k --decode-tokens 240`, the last fifth of the
    /// run, 2 threads, AVX-512 AMD); this kernel: 4.4–4.7 % in all. Here the [`GROUP`] heads
    /// sharing a KV head are worked on together:
    ///
    /// * scores: one accumulator per head over the key row's 8-value chunks, then one
    ///   transposing reduction gives the 8 heads' scores of that key as one vector
    ///   (`scores[j·8 + r]`);
    /// * softmax across the 8 heads at once, lane-wise, with a polynomial `exp`
    ///   ([`crate::vmath`]); the `1/Σ` is applied to the output at the end;
    /// * `p·v` in 16-value chunks of the output, 4 heads at a time, accumulated in registers
    ///   over a block of keys small enough to stay in L1 while all chunks pass over it; the
    ///   value rows are prefetched into L2 while the scores are worked out (without that,
    ///   `pv`'s loads waited on memory and it alone took 3.5–4 %).
    #[cfg(target_arch = "x86_64")]
    pub(super) mod x86 {
        use super::GROUP;
        use crate::vmath::x86::exp;
        use std::arch::x86_64::*;

        /// Keys per block of `p·v`: 32 value rows of the 3B's 128 values are 16 KiB, half of
        /// the smallest L1 this runs on.
        const KEYS: usize = 32;

        /// See the module. Needs AVX2 and FMA, and `blocked_fits(rep, d)`.
        #[target_feature(enable = "avx2,fma")]
        pub unsafe fn blocked<'a>(
            q: &[f32],
            key: impl Fn(usize) -> &'a [f32],
            value: impl Fn(usize) -> &'a [f32],
            (rep, t, d): (usize, usize, usize),
            scale: f32,
            scores: &mut [f32],
            out: &mut [f32],
        ) {
            assert!(q.len() >= rep * d && out.len() >= rep * d && scores.len() >= GROUP * t);
            // Scores `[t][GROUP]`; the lanes of absent heads (rep < GROUP) hold zeros. The head
            // count is a constant inside `dots` and `pv` so that their accumulators stay in
            // registers; both carry the target features themselves, as they are called through
            // pointers and so not inlined here (without them, every intrinsic was a call).
            let dots = match rep {
                1 => dots::<1>,
                2 => dots::<2>,
                3 => dots::<3>,
                4 => dots::<4>,
                5 => dots::<5>,
                6 => dots::<6>,
                7 => dots::<7>,
                _ => dots::<8>,
            };
            let sp = scores.as_mut_ptr();
            for j in 0..t {
                // Each value row is asked for while the scores are worked out (the key rows
                // stream in order; the value rows are read 64 bytes at a time, 512 bytes
                // apart, by `pv`'s passes, whose loads otherwise waited on memory: perf put
                // most of its samples on them). One head's values of a 3B layer at 650
                // positions are 333 KB, which L2 holds.
                prefetch_row::<_MM_HINT_T1>(value(j));
                let k = key(j);
                assert!(k.len() >= d);
                _mm256_storeu_ps(sp.add(j * GROUP), dots(q.as_ptr(), k.as_ptr(), d));
            }
            let scale = _mm256_set1_ps(scale);
            let mut max = _mm256_set1_ps(f32::NEG_INFINITY);
            for j in 0..t {
                // `max_ps(a, b)` is `b` when either is NaN: NaN scores are skipped here (as
                // `f32::max` skips them) and reach the output through `exp`, as in candle.
                let x = _mm256_mul_ps(_mm256_loadu_ps(sp.add(j * GROUP)), scale);
                max = _mm256_max_ps(x, max);
            }
            let mut sum = _mm256_setzero_ps();
            for j in 0..t {
                let x = _mm256_loadu_ps(sp.add(j * GROUP));
                let e = exp(_mm256_fmsub_ps(x, scale, max));
                _mm256_storeu_ps(sp.add(j * GROUP), e);
                sum = _mm256_add_ps(sum, e);
            }
            let mut inv = [0f32; GROUP];
            _mm256_storeu_ps(inv.as_mut_ptr(), _mm256_div_ps(_mm256_set1_ps(1.0), sum));
            // Keys in blocks whose value rows stay in L1 while every chunk and head group
            // passes over them; the output rows hold the running sums between blocks.
            for j0 in (0..t).step_by(KEYS) {
                let keys = (j0, (j0 + KEYS).min(t));
                for r0 in (0..rep).step_by(4) {
                    let pv = match rep - r0 {
                        1 => pv::<1>,
                        2 => pv::<2>,
                        3 => pv::<3>,
                        _ => pv::<4>,
                    };
                    for c in (0..d).step_by(16) {
                        pv(sp.add(r0), &value, keys, c, out[r0 * d..].as_mut_ptr(), d);
                    }
                }
            }
            for (o, w) in out[..rep * d].chunks_exact_mut(d).zip(inv) {
                o.iter_mut().for_each(|x| *x *= w);
            }
        }

        /// Asks for every cache line of `row` (`HINT`: into which cache).
        #[inline(always)]
        unsafe fn prefetch_row<const HINT: i32>(row: &[f32]) {
            for at in (0..row.len()).step_by(16) {
                _mm_prefetch::<HINT>(row.as_ptr().add(at) as *const i8);
            }
        }

        /// `[q_r · k]` for the `R ≤ 8` heads of `q` (`R·d`, rows of `d`), as 8 lanes (zeros
        /// past `R`). One accumulator per head; the 8 are reduced together by pairwise
        /// horizontal adds and one cross-half add.
        #[target_feature(enable = "avx2,fma")]
        unsafe fn dots<const R: usize>(q: *const f32, k: *const f32, d: usize) -> __m256 {
            let mut acc = [_mm256_setzero_ps(); GROUP];
            for c in (0..d).step_by(8) {
                let kc = _mm256_loadu_ps(k.add(c));
                for (r, a) in acc.iter_mut().enumerate().take(R) {
                    *a = _mm256_fmadd_ps(_mm256_loadu_ps(q.add(r * d + c)), kc, *a);
                }
            }
            let h01 = _mm256_hadd_ps(acc[0], acc[1]);
            let h23 = _mm256_hadd_ps(acc[2], acc[3]);
            let h45 = _mm256_hadd_ps(acc[4], acc[5]);
            let h67 = _mm256_hadd_ps(acc[6], acc[7]);
            // Lanes: heads 0-3 summed over key lanes 0-3, then the same over lanes 4-7
            // (likewise heads 4-7).
            let lo = _mm256_hadd_ps(h01, h23);
            let hi = _mm256_hadd_ps(h45, h67);
            _mm256_add_ps(
                _mm256_permute2f128_ps::<0x20>(lo, hi),
                _mm256_permute2f128_ps::<0x31>(lo, hi),
            )
        }

        /// Output values `c..c+16` of `H ≤ 4` heads over keys `j0..j1`: `out[h·d + c..] +=
        /// Σ_j p[j·8 + h]·v_j` (`=` for the first block, `j0 = 0`), with `p` the softmax
        /// numerators (`[t][GROUP]`, offset to the first of the heads).
        #[target_feature(enable = "avx2,fma")]
        unsafe fn pv<'a, const H: usize>(
            p: *const f32,
            value: &impl Fn(usize) -> &'a [f32],
            (j0, j1): (usize, usize),
            c: usize,
            out: *mut f32,
            d: usize,
        ) {
            let mut acc = [[_mm256_setzero_ps(); 2]; H];
            if j0 > 0 {
                for (h, a) in acc.iter_mut().enumerate() {
                    let o = out.add(h * d + c);
                    *a = [_mm256_loadu_ps(o), _mm256_loadu_ps(o.add(8))];
                }
            }
            for j in j0..j1 {
                let v = value(j);
                assert!(v.len() >= c + 16);
                let v0 = _mm256_loadu_ps(v.as_ptr().add(c));
                let v1 = _mm256_loadu_ps(v.as_ptr().add(c + 8));
                for (h, a) in acc.iter_mut().enumerate() {
                    let w = _mm256_broadcast_ss(&*p.add(j * GROUP + h));
                    a[0] = _mm256_fmadd_ps(w, v0, a[0]);
                    a[1] = _mm256_fmadd_ps(w, v1, a[1]);
                }
            }
            for (h, a) in acc.iter().enumerate() {
                let o = out.add(h * d + c);
                _mm256_storeu_ps(o, a[0]);
                _mm256_storeu_ps(o.add(8), a[1]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn general(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64) -> Tensor {
        let (b, heads, _, d) = q.dims4().unwrap();
        let kvh = k.dim(1).unwrap();
        let rep = heads / kvh;
        let q = q.reshape((b, kvh, rep, d)).unwrap();
        let att = (q.matmul(&k.t().unwrap()).unwrap() * scale).unwrap();
        let att = candle_nn::ops::softmax_last_dim(&att).unwrap();
        att.matmul(&v.contiguous().unwrap())
            .unwrap()
            .reshape((b, 1, heads * d))
            .unwrap()
    }

    /// Equal to the general path (candle's matmul and softmax) within 1e-5, on views of a
    /// larger cache (the rows are strided as `KvCache` leaves them), for one and two
    /// sequences, 1 to 9 query heads per KV head, head sizes on and off the 16-lane grid (so
    /// through the blocked kernel and the plain loops), one and many cached positions; and
    /// inputs it does not handle are left to the general path.
    #[test]
    fn equals_the_general_path_on_cache_views() {
        let dev = Device::Cpu;
        for (b, heads, kvh, d, t) in [
            (1, 16, 2, 128, 300),
            (1, 8, 1, 128, 1),
            (2, 10, 2, 32, 17),
            (1, 7, 1, 64, 33),
            (1, 3, 3, 16, 5),
            (2, 4, 2, 20, 7),
            (1, 2, 1, 8, 1),
            (1, 9, 1, 16, 4),
        ] {
            let q = Tensor::randn(0f32, 1.0, (b, heads, 1, d), &dev).unwrap();
            let cap = t + 5;
            let kc = Tensor::randn(0f32, 3.0, (b, kvh, cap, d), &dev).unwrap();
            let vc = Tensor::randn(0f32, 1.0, (b, kvh, cap, d), &dev).unwrap();
            let (k, v) = (kc.narrow(2, 0, t).unwrap(), vc.narrow(2, 0, t).unwrap());
            let scale = 1.0 / (d as f64).sqrt();
            let ours = single_query(&q, &k, &v, scale).unwrap().expect("handled");
            let want = general(&q, &k, &v, scale);
            let diff = crate::max_abs_diff(&ours, &want);
            assert!(diff < 1e-5, "b {b} heads {heads} d {d} t {t}: {diff}");
        }
        let q = Tensor::zeros((1, 2, 2, 8), DType::F32, &dev).unwrap();
        let k = Tensor::zeros((1, 1, 3, 8), DType::F32, &dev).unwrap();
        assert!(
            single_query(&q, &k, &k, 1.0).unwrap().is_none(),
            "two query rows"
        );
        let q1 = q.narrow(2, 0, 1).unwrap();
        let kt = Tensor::zeros((1, 1, 8, 3), DType::F32, &dev)
            .unwrap()
            .transpose(2, 3)
            .unwrap();
        assert!(
            single_query(&q1, &kt, &kt, 1.0).unwrap().is_none(),
            "strided rows"
        );
        let kh = k.to_dtype(DType::F16).unwrap();
        assert!(
            single_query(&q1, &kh, &kh, 1.0).unwrap().is_none(),
            "f16 cache"
        );
    }

    /// Equal within 1e-5 to the unblocked path a training pass takes (candle's matmul over
    /// every key, the additive −∞ mask, softmax, matmul; query rows head-major), on views of a
    /// larger cache, for prompts of one block, of several blocks (the last one partial), and
    /// passes after cached positions, one and two sequences, 1 to 8 query heads per KV head;
    /// an input whose rows do not match `s × rep` is an error.
    #[test]
    fn causal_prefill_equals_the_masked_attention() {
        let dev = Device::Cpu;
        // `causal_fits` of an f32 CPU tensor.
        if !crate::qgemv::available_or_skip() {
            return;
        }
        for (b, kvh, rep, d, s, past) in [
            (1, 2, 8, 128, 150, 0),
            (1, 2, 8, 64, 2 * CAUSAL_BLOCK, 37),
            (2, 1, 3, 16, 70, 5),
            (1, 3, 1, 8, 9, 0),
            (2, 2, 2, 32, 3, 200),
        ] {
            let t = past + s;
            // Head-major queries (as candle's path takes them), and the same values
            // position-major (as `causal_prefill` takes them).
            let position_major = |t: &Tensor| {
                t.transpose(2, 3)
                    .unwrap()
                    .contiguous()
                    .unwrap()
                    .reshape((b, kvh, s * rep, d))
                    .unwrap()
            };
            let q = Tensor::randn(0f32, 1.0, (b, kvh, rep, s, d), &dev).unwrap();
            let q_pos = position_major(&q);
            let cap = t + 7;
            let kc = Tensor::randn(0f32, 3.0, (b, kvh, cap, d), &dev).unwrap();
            let vc = Tensor::randn(0f32, 1.0, (b, kvh, cap, d), &dev).unwrap();
            let (k, v) = (kc.narrow(2, 0, t).unwrap(), vc.narrow(2, 0, t).unwrap());
            let scale = 1.0 / (d as f64).sqrt();
            let mask = causal_mask(s, past, &dev).unwrap();
            let att = (q
                .reshape((b, kvh, rep * s, d))
                .unwrap()
                .matmul(&k.t().unwrap())
                .unwrap()
                * scale)
                .unwrap()
                .reshape((b, kvh, rep, s, t))
                .unwrap()
                .broadcast_add(&mask)
                .unwrap()
                .reshape((b, kvh, rep * s, t))
                .unwrap();
            let p = candle_nn::ops::softmax_last_dim(&att).unwrap();
            let want = position_major(
                &p.matmul(&v.contiguous().unwrap())
                    .unwrap()
                    .reshape((b, kvh, rep, s, d))
                    .unwrap(),
            );
            let ours = causal_prefill(&q_pos, &k, &v, scale, s, rep).unwrap();
            assert_eq!(ours.dims(), want.dims());
            let diff = crate::max_abs_diff(&ours, &want);
            assert!(
                diff < 1e-5,
                "b {b} kvh {kvh} rep {rep} s {s} past {past}: {diff}"
            );
        }
        let q = Tensor::zeros((1, 1, 6, 8), DType::F32, &dev).unwrap();
        let k = Tensor::zeros((1, 1, 4, 8), DType::F32, &dev).unwrap();
        assert!(
            causal_prefill(&q, &k, &k, 1.0, 4, 2).is_err(),
            "6 rows are not 4 × 2"
        );
        assert!(
            causal_prefill(&q, &k, &k, 1.0, 6, 1).is_err(),
            "6 positions over 4 keys"
        );
    }

    /// A xorshift stream of floats in (-1, 1): inputs without candle in the way.
    fn noise(seed: u64, len: usize) -> Vec<f32> {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    }

    /// The blocked AVX2 kernel against the plain loops, head by head, for every group size it
    /// takes and head sizes of 1 to 8 chunks: within 2e-6·(1 + scale) of the largest output
    /// (the two sum each score in another order, and the softmax multiplies that rounding by
    /// the scale), including at a scale of 40 that sends most terms of the softmax below e^-87
    /// (where its `exp` clamps); and a
    /// NaN in one head's query turns that head's output (only) into NaN in both.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn blocked_kernel_equals_the_plain_loops() {
        if !crate::qgemv::available_or_skip() {
            return;
        }
        let run = |blocked: bool, q: &[f32], kv: &[f32], (rep, t, d), scale| {
            let mut scores = vec![f32::NAN; kernel::scratch_len(rep, t)];
            let mut out = vec![f32::NAN; rep * d];
            let key = |j: usize| &kv[j * 2 * d..j * 2 * d + d];
            let value = |j: usize| &kv[j * 2 * d + d..(j + 1) * 2 * d];
            if blocked {
                assert!(kernel::blocked_fits(rep, d));
                // SAFETY: AVX2 and FMA were detected above; `blocked_fits` holds.
                unsafe {
                    kernel::x86::blocked(q, key, value, (rep, t, d), scale, &mut scores, &mut out)
                }
            } else {
                kernel::attend_any(q, key, value, (rep, t, d), scale, &mut scores, &mut out);
            }
            out
        };
        let mut cases = 0;
        for rep in 1..=kernel::GROUP {
            for d in [16, 48, 128] {
                for t in [1, 9, 300] {
                    for scale in [1.0 / (d as f32).sqrt(), 40.0] {
                        let seed = (rep * 1000 + d * 10 + t) as u64;
                        let q = noise(seed, rep * d);
                        let kv = noise(seed + 1, t * 2 * d);
                        let want = run(false, &q, &kv, (rep, t, d), scale);
                        let got = run(true, &q, &kv, (rep, t, d), scale);
                        let big = want.iter().fold(0f32, |m, x| m.max(x.abs()));
                        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                            assert!(
                                (g - w).abs() <= 2e-6 * (1.0 + scale) * big.max(1e-3),
                                "rep {rep} d {d} t {t} scale {scale} [{i}]: {g} vs {w}"
                            );
                        }
                        cases += 1;
                    }
                }
            }
        }
        assert_eq!(cases, 8 * 3 * 3 * 2);
        let (rep, t, d) = (8, 20, 32);
        let mut q = noise(5, rep * d);
        q[3 * d + 7] = f32::NAN;
        let kv = noise(6, t * 2 * d);
        for blocked in [false, true] {
            let out = run(blocked, &q, &kv, (rep, t, d), 0.2);
            for (h, row) in out.chunks(d).enumerate() {
                assert_eq!(
                    row.iter().all(|x| x.is_nan()),
                    h == 3,
                    "blocked {blocked}, head {h}"
                );
                assert!(h == 3 || row.iter().all(|x| x.is_finite()));
            }
        }
    }
}
