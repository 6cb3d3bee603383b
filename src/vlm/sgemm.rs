//! Prefill-time f32 products on AVX-512: many activation rows (a prompt, an image's patches)
//! times a dense f32 weight `[n, k]`, in place of the `gemm` crate (0.19, `x86-v4`) that
//! candle's `matmul` calls.
//!
//! Why our own: in `bench vlm` the f32 prefill is ~88 % `gemm`, which ran the prefill's
//! products at 256–351 GFLOP/s on the 2-core AVX-512 EPYC (`bench qgemm`'s f32 column: 545 ×
//! 2048 × 22016 at 256) where MKL's AVX-512 sgemm reaches 395–411 (torch, the Intel code path),
//! so against transformers on an Intel CPU our f32 prefill measured 0.95×.
//!
//! The layout is BLIS's, with the roles set by the weight being stored `[n, k]`: the output's
//! lanes run along `n` (16 weight rows per vector), so a tile of [`MR`] activation rows ×
//! [`NR`] weight rows is 24 accumulators fed by 3 vector loads and [`MR`] broadcasts per `k`
//! step, and its results are 3 contiguous vectors per output row. The weight is repacked per
//! product, [`KC`] values of [`NR`] rows at a time (`[kc][48]`, kept in L2 while every
//! activation row passes it); the activation is read in place (a tile's [`MR`] × [`KC`] stays
//! in L1 across the panels of its block). A work item of candle's pool is a block of panels.
//!
//! The sums run in `k` order per output, as in a plain loop, so results differ from `gemm`'s
//! only by the order of float additions (tests: within 1e-5 relative of the largest output).

/// Activation rows per tile.
pub const MR: usize = 8;
/// Weight rows per tile (three 16-lane vectors).
pub const NR: usize = 48;
/// Values of `k` per packed panel at most (`NR × KC` floats: 384 KiB, in L2 while every
/// activation row passes it). Measured with 545 × 2048 × 22016, 545 × 11008 × 2048, 1564 ×
/// 1280 × 6840 and 1564 × 3420 × 1280 (2 threads, AVX-512 EPYC): one panel per work item with
/// `KC` ≈ 2048 ran 413–458 GFLOP/s, ahead of 256 × 8 panels (361–416), 1024 × 2 (383–431)
/// and 768 × 2 (384–438).
pub const KC: usize = 2048;

/// The rule: our tiles where our AVX-512 row kernels run ([`super::qgemv::row_kernels`], one
/// rule for the CPU, `POINTACT_QGEMV_AVX2=1` included), unless `POINTACT_SGEMM_GEMM=1` (hand the
/// products to `gemm`, to compare the two on one machine). CPU features named as
/// /proc/cpuinfo names them (`has`), the environment (`env`): `bench vlm` reports the same.
pub fn chosen(has: impl Fn(&str) -> bool, env: impl Fn(&str) -> bool) -> bool {
    super::qgemv::row_kernels(has, &env) == Some(super::qgemv::RowKernels::Avx512)
        && !env("POINTACT_SGEMM_GEMM")
}

/// [`chosen`] on this machine, decided once per process (asked for every product).
pub fn available() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        let env = |k: &str| std::env::var(k).as_deref() == Ok("1");
        chosen(super::qgemv::cpu_has, env)
    })
}

/// `dst[i][j] = bias[j] + Σ_k a[i][k] · w[j][k]` for `a` `[m, k]`, `w` `[n, k]`, `dst`
/// `[m, n]` (all row-major) and an optional `bias` `[n]`, split across candle's pool by panels
/// of [`NR`] weight rows. An error where this CPU lacks AVX-512 or the slices do not hold the
/// shapes.
pub fn matmul_nt(
    (m, k, n): (usize, usize, usize),
    a: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    dst: &mut [f32],
) -> candle_core::Result<()> {
    super::qgemv::wide_cpu()?;
    if a.len() < m * k || w.len() < n * k || dst.len() < m * n || bias.is_some_and(|b| b.len() < n)
    {
        candle_core::bail!(
            "sgemm: [{m}, {k}] x [{n}, {k}] -> [{m}, {n}] does not fit slices of {}, {}, {} \
             (bias {:?})",
            a.len(),
            w.len(),
            dst.len(),
            bias.map(<[f32]>::len)
        );
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        for row in dst[..m * n].chunks_exact_mut(n) {
            match bias {
                Some(b) => row.copy_from_slice(&b[..n]),
                None => row.fill(0.0),
            }
        }
        return Ok(());
    }
    let dst_at = dst.as_mut_ptr() as usize;
    candle_core::utils::barrier_pool().execute_chunked(n.div_ceil(NR), |panels| {
        let mut packed = Vec::new();
        for p in panels {
            let rows = p * NR..((p + 1) * NR).min(n);
            let bias = bias.map(|b| &b[rows.clone()]);
            // SAFETY: the CPU was checked above; each panel writes only the columns `rows` of
            // `dst` (panels do not overlap), and every slice holds its shape.
            unsafe { x86::panel((m, k, n), a, w, bias, rows, &mut packed, dst_at as *mut f32) };
        }
    });
    Ok(())
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{KC, MR, NR};
    use std::arch::x86_64::*;
    use std::ops::Range;

    /// Where a tile's sums start: zero, the panel's bias, or the outputs already in `dst`
    /// (the slices of `k` after the first).
    #[derive(Clone, Copy)]
    enum Start {
        Zero,
        Bias(*const f32),
        Dst,
    }

    /// One panel of the product: the weight rows `rows` (at most `NR`; fewer only at the
    /// matrix's end) and their `bias`. For each slice of `k` (equal slices of at most `KC`)
    /// the panel is packed and every tile of `MR` activation rows passes it.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn panel(
        (m, k, n): (usize, usize, usize),
        a: &[f32],
        w: &[f32],
        bias: Option<&[f32]>,
        rows: Range<usize>,
        packed: &mut Vec<f32>,
        dst: *mut f32,
    ) {
        let kc_max = k.div_ceil(k.div_ceil(KC));
        let width = rows.len();
        let mut k0 = 0;
        while k0 < k {
            let kc = kc_max.min(k - k0);
            pack(w, k, rows.clone(), k0, kc, packed);
            let b = packed.as_ptr();
            let start = match (k0, bias) {
                (0, None) => Start::Zero,
                (0, Some(bias)) => Start::Bias(bias.as_ptr()),
                _ => Start::Dst,
            };
            let mut i = 0;
            while i < m {
                let r = MR.min(m - i);
                let a_at = a.as_ptr().add(i * k + k0);
                let c = dst.add(i * n + rows.start);
                match r {
                    8 => tile::<8>(a_at, k, b, kc, c, n, width, start),
                    7 => tile::<7>(a_at, k, b, kc, c, n, width, start),
                    6 => tile::<6>(a_at, k, b, kc, c, n, width, start),
                    5 => tile::<5>(a_at, k, b, kc, c, n, width, start),
                    4 => tile::<4>(a_at, k, b, kc, c, n, width, start),
                    3 => tile::<3>(a_at, k, b, kc, c, n, width, start),
                    2 => tile::<2>(a_at, k, b, kc, c, n, width, start),
                    _ => tile::<1>(a_at, k, b, kc, c, n, width, start),
                }
                i += r;
            }
            k0 += kc;
        }
    }

    /// The weight rows `rows` (at most `NR`), values `k0..k0 + kc`, packed: value `kk` of
    /// row `j` at `kk·NR + j`, rows past `rows` zero. Every element is written, so `packed`
    /// is only grown, never cleared. 16 rows × 16 values at a time, transposed in registers
    /// ([`transpose16`]): a scalar copy was 14 % of a 545 × 2048 × 22016 product.
    #[target_feature(enable = "avx512f")]
    unsafe fn pack(
        w: &[f32],
        k: usize,
        rows: Range<usize>,
        k0: usize,
        kc: usize,
        packed: &mut Vec<f32>,
    ) {
        if packed.len() < kc * NR {
            packed.resize(kc * NR, 0.0);
        }
        let out = packed.as_mut_ptr();
        for g in 0..NR / 16 {
            let live = rows.len().saturating_sub(16 * g).min(16);
            let mut kk = 0;
            while kk < kc {
                let rem = 16.min(kc - kk);
                let mask = ((1u32 << rem) - 1) as __mmask16;
                let r: [__m512; 16] = std::array::from_fn(|t| {
                    if t < live {
                        let src = w.as_ptr().add((rows.start + 16 * g + t) * k + k0 + kk);
                        _mm512_maskz_loadu_ps(mask, src)
                    } else {
                        _mm512_setzero_ps()
                    }
                });
                for (u, v) in transpose16(r).iter().enumerate().take(rem) {
                    _mm512_storeu_ps(out.add((kk + u) * NR + 16 * g), *v);
                }
                kk += 16;
            }
        }
    }

    /// The 16 × 16 transpose of `r` (`out[j][i] = r[i][j]`): 32-bit then 64-bit unpacks
    /// within 128-bit lanes, then two rounds of 128-bit lane shuffles.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn transpose16(r: [__m512; 16]) -> [__m512; 16] {
        // t[2q] / t[2q+1]: rows 2q, 2q+1 interleaved, columns 4L, 4L+1 / 4L+2, 4L+3 of lane L.
        let t: [__m512; 16] = std::array::from_fn(|i| {
            let (a, b) = (r[i & !1], r[i | 1]);
            if i % 2 == 0 {
                _mm512_unpacklo_ps(a, b)
            } else {
                _mm512_unpackhi_ps(a, b)
            }
        });
        // u[4q + c]: rows 4q..4q+4, column 4L + c in lane L.
        let u: [__m512; 16] = std::array::from_fn(|i| {
            let (q, c) = (i / 4, i % 4);
            let (a, b) = (
                _mm512_castps_pd(t[4 * q + (c / 2)]),
                _mm512_castps_pd(t[4 * q + 2 + (c / 2)]),
            );
            _mm512_castpd_ps(if c % 2 == 0 {
                _mm512_unpacklo_pd(a, b)
            } else {
                _mm512_unpackhi_pd(a, b)
            })
        });
        // out[4L + c] = lane L of u[c], u[4 + c], u[8 + c], u[12 + c].
        std::array::from_fn(|j| {
            let (l, c) = (j / 4, j % 4);
            let (lo, hi) = if l < 2 {
                (
                    _mm512_shuffle_f32x4::<0x44>(u[c], u[4 + c]),
                    _mm512_shuffle_f32x4::<0x44>(u[8 + c], u[12 + c]),
                )
            } else {
                (
                    _mm512_shuffle_f32x4::<0xEE>(u[c], u[4 + c]),
                    _mm512_shuffle_f32x4::<0xEE>(u[8 + c], u[12 + c]),
                )
            };
            if l % 2 == 0 {
                _mm512_shuffle_f32x4::<0x88>(lo, hi)
            } else {
                _mm512_shuffle_f32x4::<0xDD>(lo, hi)
            }
        })
    }

    /// `R` activation rows (`a`, row stride `lda`) × one packed panel `b` (`kc` values) into
    /// the `R × width` outputs at `c` (row stride `ldc`), the sums starting from `start`.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn tile<const R: usize>(
        a: *const f32,
        lda: usize,
        b: *const f32,
        kc: usize,
        c: *mut f32,
        ldc: usize,
        width: usize,
        start: Start,
    ) {
        let masks: [__mmask16; 3] = std::array::from_fn(|v| {
            let live = width.saturating_sub(16 * v).min(16);
            ((1u32 << live) - 1) as __mmask16
        });
        let mut acc = [[_mm512_setzero_ps(); 3]; R];
        match start {
            Start::Zero => {}
            Start::Bias(bias) => {
                let row: [__m512; 3] =
                    std::array::from_fn(|v| _mm512_maskz_loadu_ps(masks[v], bias.add(16 * v)));
                acc = [row; R];
            }
            Start::Dst => {
                for (r, acc) in acc.iter_mut().enumerate() {
                    for (v, x) in acc.iter_mut().enumerate() {
                        *x = _mm512_maskz_loadu_ps(masks[v], c.add(r * ldc + 16 * v));
                    }
                }
            }
        }
        for kk in 0..kc {
            let bk = b.add(kk * NR);
            let b0 = _mm512_loadu_ps(bk);
            let b1 = _mm512_loadu_ps(bk.add(16));
            let b2 = _mm512_loadu_ps(bk.add(32));
            for (r, acc) in acc.iter_mut().enumerate() {
                let x = _mm512_set1_ps(*a.add(r * lda + kk));
                acc[0] = _mm512_fmadd_ps(x, b0, acc[0]);
                acc[1] = _mm512_fmadd_ps(x, b1, acc[1]);
                acc[2] = _mm512_fmadd_ps(x, b2, acc[2]);
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            for (v, x) in acc.iter().enumerate() {
                _mm512_mask_storeu_ps(c.add(r * ldc + 16 * v), masks[v], *x);
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod x86 {
    // Never called: `matmul_nt` errs before (`wide_cpu`) on other architectures.
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn panel(
        _: (usize, usize, usize),
        _: &[f32],
        _: &[f32],
        _: Option<&[f32]>,
        _: std::ops::Range<usize>,
        _: &mut Vec<f32>,
        _: *mut f32,
    ) {
        unreachable!("sgemm: AVX-512 only")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn values(seed: u64, len: usize) -> Vec<f32> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..len).map(|_| rng.gen_range(-1.0f32..1.0)).collect()
    }

    /// Against a plain f64 loop, within 1e-6 of each output's `Σ|a·w|`: shapes with part tiles
    /// (`m` not a multiple of 8), a part panel and part vectors (`n` not a multiple of 48 or
    /// 16), `k` not a multiple of 16, `k` over `KC` (several slices: the later ones add to what
    /// the first stored), with and without a bias, into outputs that start as NaN (every one
    /// is written). Without AVX-512 the call is an error, not an illegal instruction.
    #[test]
    fn equals_a_plain_loop() {
        let shapes = [
            (1, 1, 1),
            (8, 16, 48),
            (19, 37, 101),
            (9, 2 * KC + 5, 50),
            (3, KC, 17),
            (17, 100, 96),
        ];
        for (s, &(m, k, n)) in shapes.iter().enumerate() {
            let a = values(3 * s as u64, m * k);
            let w = values(3 * s as u64 + 1, n * k);
            let bias = values(3 * s as u64 + 2, n);
            for bias in [None, Some(&bias[..])] {
                let mut dst = vec![f32::NAN; m * n];
                let got = matmul_nt((m, k, n), &a, &w, bias, &mut dst);
                if !available() {
                    assert!(got.is_err(), "no AVX-512 here: the call must fail");
                    return;
                }
                got.unwrap();
                for i in 0..m {
                    for j in 0..n {
                        let (mut want, mut size) = (bias.map_or(0.0, |b| b[j] as f64), 0.0f64);
                        for kk in 0..k {
                            let p = a[i * k + kk] as f64 * w[j * k + kk] as f64;
                            want += p;
                            size += p.abs();
                        }
                        let d = (dst[i * n + j] as f64 - want).abs();
                        assert!(
                            d <= 1e-6 * size.max(1.0),
                            "[{m}, {k}] x [{n}, {k}], bias {}: ({i}, {j}) = {} != {want}",
                            bias.is_some(),
                            dst[i * n + j]
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn slices_that_do_not_hold_the_shape_are_an_error() {
        let mut dst = vec![0f32; 6];
        let a = values(9, 8);
        assert!(matmul_nt((2, 4, 3), &a, &values(10, 11), None, &mut dst).is_err());
        assert!(matmul_nt((2, 4, 3), &a, &values(10, 12), Some(&[0.0; 2]), &mut dst).is_err());
        assert!(matmul_nt((2, 4, 4), &a, &values(10, 16), None, &mut dst).is_err());
    }
}
