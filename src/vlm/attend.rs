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

use candle_core::{DType, Device, Storage, Tensor};

/// `softmax(q·kᵀ·scale)·v` for one query position: `q` `[b, heads, 1, d]`, `k`/`v`
/// `[b, kv_heads, t, d]` (any strides with contiguous rows, as the cache's views have), →
/// `[b, 1, heads·d]` f32. `None` when the inputs are not that (other device or dtype, more
/// query positions, strided rows): the caller takes the general path.
pub fn single_query(
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
        let mut scores = vec![0f32; rep * t];
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
    /// The attention of `rep` query heads (`q`, `rep·d`) over `t` key/value rows: `out` ←
    /// `softmax(q·kᵀ·scale)·v` per head. `scores` is scratch of at least `rep·t`.
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
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // SAFETY: the features were detected just above.
            return unsafe { attend_avx2(q, key, value, (rep, t, d), scale, scores, out) };
        }
        attend_any(q, key, value, (rep, t, d), scale, scores, out)
    }

    /// [`attend_any`] compiled for AVX2 and FMA (its loops vectorise to 256-bit lanes).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn attend_avx2<'a>(
        q: &[f32],
        key: impl Fn(usize) -> &'a [f32],
        value: impl Fn(usize) -> &'a [f32],
        dims: (usize, usize, usize),
        scale: f32,
        scores: &mut [f32],
        out: &mut [f32],
    ) {
        attend_any(q, key, value, dims, scale, scores, out)
    }

    #[inline(always)]
    fn attend_any<'a>(
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
    /// sequences, head sizes on and off the 16-lane grid, one and many cached positions; and
    /// inputs it does not handle are left to the general path.
    #[test]
    fn equals_the_general_path_on_cache_views() {
        let dev = Device::Cpu;
        for (b, heads, kvh, d, t) in [(1, 16, 2, 128, 300), (2, 4, 2, 20, 7), (1, 2, 1, 8, 1)] {
            let q = Tensor::randn(0f32, 1.0, (b, heads, 1, d), &dev).unwrap();
            let cap = t + 5;
            let kc = Tensor::randn(0f32, 3.0, (b, kvh, cap, d), &dev).unwrap();
            let vc = Tensor::randn(0f32, 1.0, (b, kvh, cap, d), &dev).unwrap();
            let (k, v) = (kc.narrow(2, 0, t).unwrap(), vc.narrow(2, 0, t).unwrap());
            let scale = 1.0 / (d as f64).sqrt();
            let ours = single_query(&q, &k, &v, scale).unwrap().expect("handled");
            let want = general(&q, &k, &v, scale);
            let diff = (ours - &want)
                .unwrap()
                .abs()
                .unwrap()
                .max_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap();
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
}
