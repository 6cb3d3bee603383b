//! Prefill-time f32 products: many activation rows (a prompt, an image's patches) times a
//! dense f32 weight `[n, k]`, on our own tiles in place of the `gemm` crate (0.19) that
//! candle's `matmul` calls.
//!
//! Why our own: in `bench vlm` the f32 prefill is ~88 % `gemm`, which ran the prefill's
//! products at 256–351 GFLOP/s on the 2-core AVX-512 EPYC (`bench qgemm`'s f32 column: 545 ×
//! 2048 × 22016 at 256, its `x86-v4` kernels) where MKL's AVX-512 sgemm reaches 395–411 (torch
//! on MKL's Intel code path, which an Intel CPU takes), so against that transformers
//! (`bench vlm --peer-mkl-intel`) our f32 prefill measured 0.95×. Ours: 413–476 GFLOP/s on the
//! 3B's prefill and vision shapes there (the f32 prefill then 1.17×), 3–5× `gemm` at 16–64
//! rows.
//!
//! The layout is BLIS's, with the roles set by the weight being stored `[n, k]`: the output's
//! lanes run along `n` (weight rows), so a tile of `MR` activation rows × `NR` weight rows
//! is `MR × NR / lanes` accumulators fed by `NR / lanes` vector loads and `MR` broadcasts per
//! `k` step, and its results are contiguous vectors of each output row. A work item of
//! candle's pool is one panel of `NR` weight rows: for each slice of `k` (equal slices of at
//! most [`KC`]) the panel is repacked (`[kc][NR]`, in L2) and every activation row passes it,
//! read in place. Kernels:
//!
//! * **AVX-512 F**: 8 × 48, 24 `zmm` accumulators; the panel packed through in-register
//!   16 × 16 transposes.
//! * **AVX2/FMA**: 6 × 16, 12 `ymm` accumulators (the BLIS Haswell shape); 8 × 8 transposes.
//!
//! Both are one generic tile and one generic pack over a small vector trait (`x86::Simd`),
//! compiled once per ISA inside a `#[target_feature]` function.
//!
//! The sums run in `k` order per output, as in a plain loop, so results differ from `gemm`'s
//! only by the order of float additions (tests: against an f64 loop).

use std::ops::Range;

use super::qgemv::{DenseElem, RowKernels};

/// Values of `k` per packed panel at most. Measured with 545 × 2048 × 22016, 545 × 11008 ×
/// 2048, 1564 × 1280 × 6840 and 1564 × 3420 × 1280 (2 threads, AVX-512 EPYC): one panel per
/// work item with `KC` ≈ 2048 (384 KiB of packed panel) ran 413–458 GFLOP/s, ahead of
/// 256 × 8 panels per item (361–416), 1024 × 2 (383–431) and 768 × 2 (384–438).
pub(crate) const KC: usize = 2048;

/// The rule: our tiles at the width our row kernels take ([`super::qgemv::row_kernels`]: one
/// rule for the CPU, `POINTACT_QGEMV_AVX2=1` included; [`RowKernels::Avx512`] → 8 × 48 on
/// `zmm`, [`RowKernels::Avx2`] → 6 × 16 on `ymm`), `None` (candle's `gemm`) below that or with
/// `POINTACT_SGEMM_GEMM=1` (to compare the two on one machine). CPU features named as
/// /proc/cpuinfo names them (`has`), the environment (`env`): `bench vlm` reports the same.
pub fn chosen(has: impl Fn(&str) -> bool, env: impl Fn(&str) -> bool) -> Option<RowKernels> {
    super::qgemv::row_kernels(has, &env).filter(|_| !env("POINTACT_SGEMM_GEMM"))
}

/// [`chosen`] on this machine, decided once per process (asked for every product).
pub fn chosen_here() -> Option<RowKernels> {
    static ON: std::sync::OnceLock<Option<RowKernels>> = std::sync::OnceLock::new();
    *ON.get_or_init(|| chosen(super::qgemv::cpu_has, super::qgemv::switch_on))
}

/// `dst[i][j] = bias[j] + Σ_k a[i][k] · w[j][k]` for `a` `[m, k]`, `w` `[n, k]` (f32, or bf16
/// widened as the panel is packed: the same sums as over the widened weight, bit for bit),
/// `dst` `[m, n]` (all row-major) and an optional `bias` `[n]`, through `tiles`, split across
/// candle's pool by panels of weight rows. An error where this CPU lacks the tiles or the
/// slices do not hold the shapes.
pub fn matmul_nt<W: DenseElem>(
    tiles: RowKernels,
    (m, k, n): (usize, usize, usize),
    a: &[f32],
    w: &[W],
    bias: Option<&[f32]>,
    dst: &mut [f32],
) -> candle_core::Result<()> {
    match tiles {
        RowKernels::Avx512 => super::qgemv::wide_cpu()?,
        RowKernels::Avx2 if super::qgemv::available() => {}
        RowKernels::Avx2 => candle_core::bail!("sgemm: this CPU lacks AVX2/FMA"),
    }
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
    // Other architectures erred above (no AVX2 or AVX-512 there).
    #[cfg(target_arch = "x86_64")]
    match tiles {
        RowKernels::Avx512 => panels::<x86::Wide, W>((m, k, n), a, w, bias, dst),
        RowKernels::Avx2 => panels::<x86::Narrow, W>((m, k, n), a, w, bias, dst),
    }
    Ok(())
}

/// Where a tile's sums start: zero, the panel's bias, or the outputs already in `dst` (the
/// slices of `k` after the first).
#[derive(Clone, Copy)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
enum Start {
    Zero,
    Bias(*const f32),
    Dst,
}

/// One ISA's tiles. The functions are `unsafe`: the caller has checked the CPU.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
trait Kernel {
    /// Weight rows per panel.
    const NR: usize;
    /// Activation rows per tile.
    const MR: usize;
    /// The weight rows `rows` (at most `NR`), values `k0..k0 + kc`, into `packed` as f32:
    /// value `kk` of row `j` at `kk·NR + j`, rows past `rows` zero.
    unsafe fn pack<W: DenseElem>(
        w: &[W],
        k: usize,
        rows: Range<usize>,
        k0: usize,
        kc: usize,
        packed: &mut Vec<f32>,
    );
    /// `r` (≤ `MR`) activation rows (`a`, row stride `lda`) × the packed panel `b` (`kc`
    /// values) into the `r × width` outputs at `c` (row stride `ldc`), from `start`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile(
        r: usize,
        a: *const f32,
        lda: usize,
        b: *const f32,
        kc: usize,
        c: *mut f32,
        ldc: usize,
        width: usize,
        start: Start,
    );
}

/// The product through `K`, a panel of `K::NR` weight rows per work item.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn panels<K: Kernel, W: DenseElem>(
    (m, k, n): (usize, usize, usize),
    a: &[f32],
    w: &[W],
    bias: Option<&[f32]>,
    dst: &mut [f32],
) {
    let kc_max = k.div_ceil(k.div_ceil(KC));
    let dst_at = dst.as_mut_ptr() as usize;
    candle_core::utils::barrier_pool().execute_chunked(n.div_ceil(K::NR), |panels| {
        let mut packed = Vec::new();
        for p in panels {
            let rows = p * K::NR..((p + 1) * K::NR).min(n);
            let mut k0 = 0;
            while k0 < k {
                let kc = kc_max.min(k - k0);
                let start = match (k0, bias) {
                    (0, None) => Start::Zero,
                    (0, Some(b)) => Start::Bias(b[rows.clone()].as_ptr()),
                    _ => Start::Dst,
                };
                // SAFETY: `matmul_nt` checked the CPU and the shapes; each panel writes only
                // the columns `rows` of `dst` (panels do not overlap), `r` rows from row `i`.
                unsafe {
                    K::pack(w, k, rows.clone(), k0, kc, &mut packed);
                    let mut i = 0;
                    while i < m {
                        let r = K::MR.min(m - i);
                        let c = (dst_at as *mut f32).add(i * n + rows.start);
                        let a_at = a.as_ptr().add(i * k + k0);
                        K::tile(r, a_at, k, packed.as_ptr(), kc, c, n, rows.len(), start);
                        i += r;
                    }
                }
                k0 += kc;
            }
        }
    });
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{DenseElem, Start};
    use std::arch::x86_64::*;
    use std::ops::Range;

    /// One vector ISA as the tiles use it: `N` f32 lanes. Every method is `#[inline(always)]`
    /// and meant to be inlined into a `#[target_feature]` function of its ISA ([`kernel!`]).
    pub(super) trait Simd {
        type V: Copy;
        const N: usize;
        unsafe fn zero() -> Self::V;
        unsafe fn load(p: *const f32) -> Self::V;
        /// Lanes `0..live` from `p`, zero beyond (nothing read there).
        unsafe fn load_first(p: *const f32, live: usize) -> Self::V;
        /// Lanes `0..live` of bf16 values from `p` widened (exactly), zero beyond (nothing
        /// read there).
        unsafe fn load_first_bf16(p: *const u16, live: usize) -> Self::V;
        unsafe fn store(p: *mut f32, v: Self::V);
        /// Lanes `0..live` to `p` (nothing written beyond).
        unsafe fn store_first(p: *mut f32, live: usize, v: Self::V);
        unsafe fn splat(p: *const f32) -> Self::V;
        /// `a·b + c`.
        unsafe fn fmadd(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
        /// `r` (`N` vectors) transposed in place: `r'[j][i] = r[i][j]`.
        unsafe fn transpose(r: &mut [Self::V]);
    }

    /// AVX-512 F.
    pub(super) struct Wide;
    /// AVX2 and FMA.
    pub(super) struct Narrow;

    impl Simd for Wide {
        type V = __m512;
        const N: usize = 16;
        #[inline(always)]
        unsafe fn zero() -> __m512 {
            _mm512_setzero_ps()
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> __m512 {
            _mm512_loadu_ps(p)
        }
        #[inline(always)]
        unsafe fn load_first(p: *const f32, live: usize) -> __m512 {
            _mm512_maskz_loadu_ps(first16(live), p)
        }
        /// Needs AVX-512 BW (16-bit masked load), which [`super::matmul_nt`]'s check of the
        /// wide tiles includes.
        #[inline(always)]
        unsafe fn load_first_bf16(p: *const u16, live: usize) -> __m512 {
            let h = _mm512_maskz_loadu_epi16(__mmask32::from(first16(live)), p as *const i16);
            let h = _mm512_castsi512_si256(h);
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
        }
        #[inline(always)]
        unsafe fn store(p: *mut f32, v: __m512) {
            _mm512_storeu_ps(p, v)
        }
        #[inline(always)]
        unsafe fn store_first(p: *mut f32, live: usize, v: __m512) {
            _mm512_mask_storeu_ps(p, first16(live), v)
        }
        #[inline(always)]
        unsafe fn splat(p: *const f32) -> __m512 {
            _mm512_set1_ps(*p)
        }
        #[inline(always)]
        unsafe fn fmadd(a: __m512, b: __m512, c: __m512) -> __m512 {
            _mm512_fmadd_ps(a, b, c)
        }
        /// 32-bit then 64-bit unpacks within 128-bit lanes, then two rounds of 128-bit lane
        /// shuffles (64 shuffles for 256 values).
        #[inline(always)]
        unsafe fn transpose(r: &mut [__m512]) {
            // t[2q] / t[2q+1]: rows 2q, 2q+1 interleaved, columns 4L, 4L+1 / 4L+2, 4L+3 of
            // lane L.
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
            // r'[4L + c] = lane L of u[c], u[4 + c], u[8 + c], u[12 + c].
            for (j, out) in r.iter_mut().enumerate() {
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
                *out = if l % 2 == 0 {
                    _mm512_shuffle_f32x4::<0x88>(lo, hi)
                } else {
                    _mm512_shuffle_f32x4::<0xDD>(lo, hi)
                };
            }
        }
    }

    /// Lanes `0..live` of a 16-lane vector as a mask.
    #[inline(always)]
    fn first16(live: usize) -> __mmask16 {
        ((1u32 << live.min(16)) - 1) as __mmask16
    }

    /// Lanes `0..live` of an 8-lane vector, as `maskload`/`maskstore` take them.
    #[inline(always)]
    unsafe fn first8(live: usize) -> __m256i {
        _mm256_cmpgt_epi32(
            _mm256_set1_epi32(live.min(8) as i32),
            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
        )
    }

    impl Simd for Narrow {
        type V = __m256;
        const N: usize = 8;
        #[inline(always)]
        unsafe fn zero() -> __m256 {
            _mm256_setzero_ps()
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> __m256 {
            _mm256_loadu_ps(p)
        }
        #[inline(always)]
        unsafe fn load_first(p: *const f32, live: usize) -> __m256 {
            _mm256_maskload_ps(p, first8(live))
        }
        /// AVX2 has no 16-bit masked load: a part vector is copied out first.
        #[inline(always)]
        unsafe fn load_first_bf16(p: *const u16, live: usize) -> __m256 {
            let h = if live >= 8 {
                _mm_loadu_si128(p as *const __m128i)
            } else {
                let mut part = [0u16; 8];
                std::ptr::copy_nonoverlapping(p, part.as_mut_ptr(), live);
                _mm_loadu_si128(part.as_ptr() as *const __m128i)
            };
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
        }
        #[inline(always)]
        unsafe fn store(p: *mut f32, v: __m256) {
            _mm256_storeu_ps(p, v)
        }
        #[inline(always)]
        unsafe fn store_first(p: *mut f32, live: usize, v: __m256) {
            _mm256_maskstore_ps(p, first8(live), v)
        }
        #[inline(always)]
        unsafe fn splat(p: *const f32) -> __m256 {
            _mm256_broadcast_ss(&*p)
        }
        #[inline(always)]
        unsafe fn fmadd(a: __m256, b: __m256, c: __m256) -> __m256 {
            _mm256_fmadd_ps(a, b, c)
        }
        /// 32-bit unpacks, 64-bit shuffles within 128-bit lanes, then a 128-bit lane exchange.
        #[inline(always)]
        unsafe fn transpose(r: &mut [__m256]) {
            let t: [__m256; 8] = std::array::from_fn(|i| {
                let (a, b) = (r[i & !1], r[i | 1]);
                if i % 2 == 0 {
                    _mm256_unpacklo_ps(a, b)
                } else {
                    _mm256_unpackhi_ps(a, b)
                }
            });
            // u[4q + c]: rows 4q..4q+4, column c (low lane) and c + 4 (high lane).
            let u: [__m256; 8] = std::array::from_fn(|i| {
                let (q, c) = (i / 4, i % 4);
                let (a, b) = (t[4 * q + c / 2], t[4 * q + 2 + c / 2]);
                if c % 2 == 0 {
                    _mm256_shuffle_ps::<0x44>(a, b)
                } else {
                    _mm256_shuffle_ps::<0xEE>(a, b)
                }
            });
            for (j, out) in r.iter_mut().enumerate() {
                let c = j % 4;
                *out = if j < 4 {
                    _mm256_permute2f128_ps::<0x20>(u[c], u[4 + c])
                } else {
                    _mm256_permute2f128_ps::<0x31>(u[c], u[4 + c])
                };
            }
        }
    }

    /// The weight rows `rows` (at most `NV·N`), values `k0..k0 + kc`, packed: value `kk` of row
    /// `j` at `kk·NV·N + j`, rows past `rows` zero. Every element is written, so `packed` is
    /// only grown, never cleared. `N` rows × `N` values at a time, transposed in registers: a
    /// scalar copy was 14 % of a 545 × 2048 × 22016 product.
    #[inline(always)]
    unsafe fn pack<S: Simd, W: DenseElem, const NV: usize>(
        w: &[W],
        k: usize,
        rows: Range<usize>,
        k0: usize,
        kc: usize,
        packed: &mut Vec<f32>,
    ) {
        let nr = NV * S::N;
        if packed.len() < kc * nr {
            packed.resize(kc * nr, 0.0);
        }
        let out = packed.as_mut_ptr();
        let mut r = [S::zero(); 16];
        let r = &mut r[..S::N];
        for g in 0..NV {
            let live = rows.len().saturating_sub(S::N * g).min(S::N);
            let mut kk = 0;
            while kk < kc {
                let rem = S::N.min(kc - kk);
                for (t, v) in r.iter_mut().enumerate() {
                    *v = if t < live {
                        let src = w.as_ptr().add((rows.start + S::N * g + t) * k + k0 + kk);
                        if W::BF16 {
                            S::load_first_bf16(src as *const u16, rem)
                        } else {
                            S::load_first(src as *const f32, rem)
                        }
                    } else {
                        S::zero()
                    };
                }
                S::transpose(r);
                for (u, v) in r.iter().enumerate().take(rem) {
                    S::store(out.add((kk + u) * nr + S::N * g), *v);
                }
                kk += S::N;
            }
        }
    }

    /// `R` activation rows (`a`, row stride `lda`) × one packed panel `b` (`kc` values of
    /// `NV·N` rows) into the `R × width` outputs at `c` (row stride `ldc`), the sums starting
    /// from `start`: `R·NV` accumulators, `NV` loads and `R` broadcasts per `k`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    unsafe fn tile<S: Simd, const R: usize, const NV: usize>(
        a: *const f32,
        lda: usize,
        b: *const f32,
        kc: usize,
        c: *mut f32,
        ldc: usize,
        width: usize,
        start: Start,
    ) {
        let live = |v: usize| width.saturating_sub(S::N * v);
        let mut acc = [[S::zero(); NV]; R];
        match start {
            Start::Zero => {}
            Start::Bias(bias) => {
                let row: [S::V; NV] =
                    std::array::from_fn(|v| S::load_first(bias.add(S::N * v), live(v)));
                acc = [row; R];
            }
            Start::Dst => {
                for (r, acc) in acc.iter_mut().enumerate() {
                    for (v, x) in acc.iter_mut().enumerate() {
                        *x = S::load_first(c.add(r * ldc + S::N * v), live(v));
                    }
                }
            }
        }
        for kk in 0..kc {
            let bk = b.add(kk * NV * S::N);
            let bv: [S::V; NV] = std::array::from_fn(|v| S::load(bk.add(S::N * v)));
            for (r, acc) in acc.iter_mut().enumerate() {
                let x = S::splat(a.add(r * lda + kk));
                for (x_acc, &bv) in acc.iter_mut().zip(&bv) {
                    *x_acc = S::fmadd(x, bv, *x_acc);
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            for (v, x) in acc.iter().enumerate() {
                S::store_first(c.add(r * ldc + S::N * v), live(v), *x);
            }
        }
    }

    /// [`tile`] for `r` (1..=8) rows.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    unsafe fn tiles<S: Simd, const NV: usize>(
        r: usize,
        a: *const f32,
        lda: usize,
        b: *const f32,
        kc: usize,
        c: *mut f32,
        ldc: usize,
        width: usize,
        start: Start,
    ) {
        match r {
            8 => tile::<S, 8, NV>(a, lda, b, kc, c, ldc, width, start),
            7 => tile::<S, 7, NV>(a, lda, b, kc, c, ldc, width, start),
            6 => tile::<S, 6, NV>(a, lda, b, kc, c, ldc, width, start),
            5 => tile::<S, 5, NV>(a, lda, b, kc, c, ldc, width, start),
            4 => tile::<S, 4, NV>(a, lda, b, kc, c, ldc, width, start),
            3 => tile::<S, 3, NV>(a, lda, b, kc, c, ldc, width, start),
            2 => tile::<S, 2, NV>(a, lda, b, kc, c, ldc, width, start),
            _ => tile::<S, 1, NV>(a, lda, b, kc, c, ldc, width, start),
        }
    }

    /// `Kernel` for one ISA: `NV` vectors of weight rows × `MR` activation rows, the generic
    /// pack and tiles compiled inside a function with the ISA's `target_feature`.
    macro_rules! kernel {
        ($isa:ty, $feature:literal, $nv:literal, $mr:literal) => {
            impl super::Kernel for $isa {
                const NR: usize = $nv * <$isa as Simd>::N;
                const MR: usize = $mr;
                unsafe fn pack<W: DenseElem>(
                    w: &[W],
                    k: usize,
                    rows: Range<usize>,
                    k0: usize,
                    kc: usize,
                    packed: &mut Vec<f32>,
                ) {
                    #[target_feature(enable = $feature)]
                    unsafe fn go<W: DenseElem>(
                        w: &[W],
                        k: usize,
                        rows: Range<usize>,
                        k0: usize,
                        kc: usize,
                        packed: &mut Vec<f32>,
                    ) {
                        pack::<$isa, W, $nv>(w, k, rows, k0, kc, packed)
                    }
                    go(w, k, rows, k0, kc, packed)
                }
                unsafe fn tile(
                    r: usize,
                    a: *const f32,
                    lda: usize,
                    b: *const f32,
                    kc: usize,
                    c: *mut f32,
                    ldc: usize,
                    width: usize,
                    start: Start,
                ) {
                    #[allow(clippy::too_many_arguments)]
                    #[target_feature(enable = $feature)]
                    unsafe fn go(
                        r: usize,
                        a: *const f32,
                        lda: usize,
                        b: *const f32,
                        kc: usize,
                        c: *mut f32,
                        ldc: usize,
                        width: usize,
                        start: Start,
                    ) {
                        tiles::<$isa, $nv>(r, a, lda, b, kc, c, ldc, width, start)
                    }
                    go(r, a, lda, b, kc, c, ldc, width, start)
                }
            }
        };
    }

    kernel!(Wide, "avx512f,avx512bw", 3, 8);
    kernel!(Narrow, "avx2,fma", 2, 6);
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

    /// The tiles this CPU has (every one is tested where it can run).
    fn here() -> Vec<RowKernels> {
        let never = |_: &str| false;
        match chosen(crate::qgemv::cpu_has, never) {
            Some(RowKernels::Avx512) => vec![RowKernels::Avx2, RowKernels::Avx512],
            Some(RowKernels::Avx2) => vec![RowKernels::Avx2],
            None => vec![],
        }
    }

    /// Every tile this CPU has against a plain f64 loop, within 1e-6 of each output's
    /// `Σ|a·w|`: shapes with part tiles (`m` not a multiple of 6 or 8), part panels and part
    /// vectors (`n` not a multiple of 16 or 48), `k` not a multiple of 8 or 16, `k` over `KC`
    /// (several slices: the later ones add to what the first stored), with and without a
    /// bias, into outputs that start as NaN (every one is written). Tiles the CPU lacks are
    /// an error, not an illegal instruction.
    #[test]
    fn equals_a_plain_loop() {
        let shapes = [
            (1, 1, 1),
            (8, 16, 48),
            (19, 37, 101),
            (9, 2 * KC + 5, 50),
            (3, KC, 17),
            (17, 100, 96),
            (13, 9, 23),
        ];
        for tiles in [RowKernels::Avx2, RowKernels::Avx512] {
            for (s, &(m, k, n)) in shapes.iter().enumerate() {
                let a = values(3 * s as u64, m * k);
                let w = values(3 * s as u64 + 1, n * k);
                let bias = values(3 * s as u64 + 2, n);
                for bias in [None, Some(&bias[..])] {
                    let mut dst = vec![f32::NAN; m * n];
                    let got = matmul_nt(tiles, (m, k, n), &a, &w, bias, &mut dst);
                    if !here().contains(&tiles) {
                        assert!(got.is_err(), "{tiles:?} are not here: the call must fail");
                        continue;
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
                                "{tiles:?} [{m}, {k}] x [{n}, {k}], bias {}: ({i}, {j}) = {} != {want}",
                                bias.is_some(),
                                dst[i * n + j]
                            );
                        }
                    }
                }
            }
        }
    }

    /// bf16 weights, widened as each panel is packed, give the bits of the same weights
    /// widened up front, for every tile here and the shapes of [`equals_a_plain_loop`] (part
    /// vectors take the masked or copied bf16 loads).
    #[test]
    fn bf16_weights_equal_the_widened_f32_bit_for_bit() {
        let shapes = [(8, 16, 48), (19, 37, 101), (9, 2 * KC + 5, 50), (13, 9, 23)];
        for tiles in here() {
            for (s, &(m, k, n)) in shapes.iter().enumerate() {
                let a = values(7 * s as u64, m * k);
                let w: Vec<half::bf16> = values(7 * s as u64 + 1, n * k)
                    .into_iter()
                    .map(half::bf16::from_f32)
                    .collect();
                let widened: Vec<f32> = w.iter().map(|v| v.to_f32()).collect();
                let bias = values(7 * s as u64 + 2, n);
                let (mut got, mut want) = (vec![f32::NAN; m * n], vec![f32::NAN; m * n]);
                matmul_nt(tiles, (m, k, n), &a, &w, Some(&bias), &mut got).unwrap();
                matmul_nt(tiles, (m, k, n), &a, &widened, Some(&bias), &mut want).unwrap();
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "{tiles:?} [{m}, {k}] x [{n}, {k}]");
                assert!(got.iter().all(|v| v.is_finite()));
            }
        }
    }

    #[test]
    fn chosen_follows_the_cpu() {
        let has = |list: &'static str| move |f: &str| list.split(' ').any(|x| x == f);
        let never = |_: &str| false;
        let xeon = "avx2 fma f16c avx512f avx512bw avx512_vnni";
        assert_eq!(chosen(has(xeon), never), Some(RowKernels::Avx512));
        assert_eq!(chosen(has("avx2 fma f16c"), never), Some(RowKernels::Avx2));
        assert_eq!(chosen(has("avx2 fma"), never), None);
        assert_eq!(
            chosen(has(xeon), |k| k == "POINTACT_QGEMV_AVX2"),
            Some(RowKernels::Avx2)
        );
        assert_eq!(chosen(has(xeon), |k| k == "POINTACT_SGEMM_GEMM"), None);
    }

    #[test]
    fn slices_that_do_not_hold_the_shape_are_an_error() {
        let Some(tiles) = here().pop() else { return };
        let mut dst = vec![0f32; 6];
        let a = values(9, 8);
        assert!(matmul_nt(tiles, (2, 4, 3), &a, &values(10, 11), None, &mut dst).is_err());
        assert!(matmul_nt(
            tiles,
            (2, 4, 3),
            &a,
            &values(10, 12),
            Some(&[0.0; 2]),
            &mut dst
        )
        .is_err());
        assert!(matmul_nt(tiles, (2, 4, 4), &a, &values(10, 16), None, &mut dst).is_err());
        assert!(matmul_nt(tiles, (2, 4, 3), &a, &values(10, 12), None, &mut dst).is_ok());
    }
}
