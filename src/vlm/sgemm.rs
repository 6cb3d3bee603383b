//! Prefill-time f32 products: many activation rows (a prompt, an image's patches) times a
//! dense f32 weight `[n, k]`, on our own tiles in place of the `gemm` crate (0.19) that
//! candle's `matmul` calls.
//!
//! Why our own: in `bench vlm` the f32 prefill is ~88 % `gemm`, which ran the prefill's
//! products at 256–351 GFLOP/s on the 2-core AVX-512 EPYC (`bench qgemm`'s f32 column: 545 ×
//! 2048 × 22016 at 256, its `x86-v4` kernels) where MKL's AVX-512 sgemm reaches 395–411 (torch,
//! the Intel code path), so against transformers on an Intel CPU our f32 prefill measured 0.95×.
//! Ours: 413–473 GFLOP/s on the 3B's prefill and vision shapes there, 3–5× `gemm` at 16–64 rows.
//!
//! The layout is BLIS's, with the roles set by the weight being stored `[n, k]`: the output's
//! lanes run along `n` (weight rows), so a tile of `MR` activation rows × `NR` weight rows
//! is `MR × NR / lanes` accumulators fed by `NR / lanes` vector loads and `MR` broadcasts per
//! `k` step, and its results are contiguous vectors of each output row. A work item of
//! candle's pool is one panel of `NR` weight rows: for each slice of `k` (equal slices of at
//! most [`KC`]) the panel is repacked (`[kc][NR]`, in L2) and every activation row passes it,
//! read in place. Kernels:
//!
//! * **AVX-512 F** ([`wide`]): 8 × 48, 24 `zmm` accumulators; the panel packed through
//!   in-register 16 × 16 transposes.
//! * **AVX2/FMA** ([`narrow`]): 6 × 16, 12 `ymm` accumulators (the BLIS Haswell shape);
//!   8 × 8 transposes.
//!
//! The sums run in `k` order per output, as in a plain loop, so results differ from `gemm`'s
//! only by the order of float additions (tests: against an f64 loop).

use std::ops::Range;

/// Values of `k` per packed panel at most. Measured with 545 × 2048 × 22016, 545 × 11008 ×
/// 2048, 1564 × 1280 × 6840 and 1564 × 3420 × 1280 (2 threads, AVX-512 EPYC): one panel per
/// work item with `KC` ≈ 2048 (384 KiB of packed panel) ran 413–458 GFLOP/s, ahead of
/// 256 × 8 panels per item (361–416), 1024 × 2 (383–431) and 768 × 2 (384–438).
pub const KC: usize = 2048;

/// Our tiles for dense f32 products of many rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tiles {
    /// 6 × 16 on `ymm` ([`narrow`]).
    Avx2,
    /// 8 × 48 on `zmm` ([`wide`]).
    Avx512,
}

impl Tiles {
    pub fn name(self) -> &'static str {
        match self {
            Tiles::Avx2 => "avx2",
            Tiles::Avx512 => "avx512",
        }
    }
}

/// The rule: the AVX-512 tiles where our AVX-512 row kernels run, the AVX2 tiles where our
/// AVX2 ones do ([`super::qgemv::row_kernels`]: one rule for the CPU, `POINTACT_QGEMV_AVX2=1`
/// included), `None` (candle's `gemm`) below that or with `POINTACT_SGEMM_GEMM=1` (to compare
/// the two on one machine). CPU features named as /proc/cpuinfo names them (`has`), the
/// environment (`env`): `bench vlm` reports the same.
pub fn chosen(has: impl Fn(&str) -> bool, env: impl Fn(&str) -> bool) -> Option<Tiles> {
    use super::qgemv::RowKernels;
    if env("POINTACT_SGEMM_GEMM") {
        return None;
    }
    match super::qgemv::row_kernels(has, &env)? {
        RowKernels::Avx512 => Some(Tiles::Avx512),
        RowKernels::Avx2 => Some(Tiles::Avx2),
    }
}

/// [`chosen`] on this machine, decided once per process (asked for every product).
pub fn chosen_here() -> Option<Tiles> {
    static ON: std::sync::OnceLock<Option<Tiles>> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        let env = |k: &str| std::env::var(k).as_deref() == Ok("1");
        chosen(super::qgemv::cpu_has, env)
    })
}

/// `dst[i][j] = bias[j] + Σ_k a[i][k] · w[j][k]` for `a` `[m, k]`, `w` `[n, k]`, `dst`
/// `[m, n]` (all row-major) and an optional `bias` `[n]`, through `tiles`, split across
/// candle's pool by panels of weight rows. An error where this CPU lacks the tiles or the
/// slices do not hold the shapes.
pub fn matmul_nt(
    tiles: Tiles,
    (m, k, n): (usize, usize, usize),
    a: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    dst: &mut [f32],
) -> candle_core::Result<()> {
    match tiles {
        Tiles::Avx512 => super::qgemv::wide_cpu()?,
        Tiles::Avx2 if super::qgemv::available() => {}
        Tiles::Avx2 => candle_core::bail!("sgemm: this CPU lacks AVX2/FMA"),
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
    match tiles {
        Tiles::Avx512 => panels::<wide::Kernel>((m, k, n), a, w, bias, dst),
        Tiles::Avx2 => panels::<narrow::Kernel>((m, k, n), a, w, bias, dst),
    }
    Ok(())
}

/// Where a tile's sums start: zero, the panel's bias, or the outputs already in `dst` (the
/// slices of `k` after the first).
#[derive(Clone, Copy)]
enum Start {
    Zero,
    Bias(*const f32),
    Dst,
}

/// One ISA's tiles. The functions are `unsafe`: the caller has checked the CPU.
trait Kernel {
    /// Weight rows per panel.
    const NR: usize;
    /// Activation rows per tile.
    const MR: usize;
    /// The weight rows `rows` (at most `NR`), values `k0..k0 + kc`, into `packed`: value `kk`
    /// of row `j` at `kk·NR + j`, rows past `rows` zero.
    unsafe fn pack(
        w: &[f32],
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
fn panels<K: Kernel>(
    (m, k, n): (usize, usize, usize),
    a: &[f32],
    w: &[f32],
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

/// The AVX-512 F tiles.
#[cfg(target_arch = "x86_64")]
mod wide {
    use super::Start;
    use std::arch::x86_64::*;
    use std::ops::Range;

    /// Weight rows per panel: three 16-lane vectors.
    const NR: usize = 48;

    pub(super) struct Kernel;

    impl super::Kernel for Kernel {
        const NR: usize = NR;
        const MR: usize = 8;
        unsafe fn pack(
            w: &[f32],
            k: usize,
            rows: Range<usize>,
            k0: usize,
            kc: usize,
            packed: &mut Vec<f32>,
        ) {
            pack(w, k, rows, k0, kc, packed)
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
            tiles(r, a, lda, b, kc, c, ldc, width, start)
        }
    }

    /// [`tile`] for `r` rows.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f")]
    unsafe fn tiles(
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
            8 => tile::<8>(a, lda, b, kc, c, ldc, width, start),
            7 => tile::<7>(a, lda, b, kc, c, ldc, width, start),
            6 => tile::<6>(a, lda, b, kc, c, ldc, width, start),
            5 => tile::<5>(a, lda, b, kc, c, ldc, width, start),
            4 => tile::<4>(a, lda, b, kc, c, ldc, width, start),
            3 => tile::<3>(a, lda, b, kc, c, ldc, width, start),
            2 => tile::<2>(a, lda, b, kc, c, ldc, width, start),
            _ => tile::<1>(a, lda, b, kc, c, ldc, width, start),
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

/// The AVX2/FMA tiles.
#[cfg(target_arch = "x86_64")]
mod narrow {
    use super::Start;
    use std::arch::x86_64::*;
    use std::ops::Range;

    /// Weight rows per panel: two 8-lane vectors.
    const NR: usize = 16;

    pub(super) struct Kernel;

    impl super::Kernel for Kernel {
        const NR: usize = NR;
        const MR: usize = 6;
        unsafe fn pack(
            w: &[f32],
            k: usize,
            rows: Range<usize>,
            k0: usize,
            kc: usize,
            packed: &mut Vec<f32>,
        ) {
            pack(w, k, rows, k0, kc, packed)
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
            tiles(r, a, lda, b, kc, c, ldc, width, start)
        }
    }

    /// [`tile`] for `r` rows.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn tiles(
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
            6 => tile::<6>(a, lda, b, kc, c, ldc, width, start),
            5 => tile::<5>(a, lda, b, kc, c, ldc, width, start),
            4 => tile::<4>(a, lda, b, kc, c, ldc, width, start),
            3 => tile::<3>(a, lda, b, kc, c, ldc, width, start),
            2 => tile::<2>(a, lda, b, kc, c, ldc, width, start),
            _ => tile::<1>(a, lda, b, kc, c, ldc, width, start),
        }
    }

    /// Lanes `0..live` of an 8-lane vector, as `maskload`/`maskstore` take them.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn lanes(live: usize) -> __m256i {
        _mm256_cmpgt_epi32(
            _mm256_set1_epi32(live as i32),
            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
        )
    }

    /// As the AVX-512 pack: 8 rows × 8 values at a time, transposed in registers.
    #[target_feature(enable = "avx2,fma")]
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
        for g in 0..NR / 8 {
            let live = rows.len().saturating_sub(8 * g).min(8);
            let mut kk = 0;
            while kk < kc {
                let rem = 8.min(kc - kk);
                let mask = lanes(rem);
                let r: [__m256; 8] = std::array::from_fn(|t| {
                    if t < live {
                        let src = w.as_ptr().add((rows.start + 8 * g + t) * k + k0 + kk);
                        _mm256_maskload_ps(src, mask)
                    } else {
                        _mm256_setzero_ps()
                    }
                });
                for (u, v) in transpose8(r).iter().enumerate().take(rem) {
                    _mm256_storeu_ps(out.add((kk + u) * NR + 8 * g), *v);
                }
                kk += 8;
            }
        }
    }

    /// The 8 × 8 transpose of `r` (`out[j][i] = r[i][j]`): 32-bit unpacks, 64-bit shuffles
    /// within 128-bit lanes, then a 128-bit lane exchange.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
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
        std::array::from_fn(|j| {
            let c = j % 4;
            if j < 4 {
                _mm256_permute2f128_ps::<0x20>(u[c], u[4 + c])
            } else {
                _mm256_permute2f128_ps::<0x31>(u[c], u[4 + c])
            }
        })
    }

    #[allow(clippy::too_many_arguments)]
    #[inline]
    #[target_feature(enable = "avx2,fma")]
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
        let masks: [__m256i; 2] =
            std::array::from_fn(|v| lanes(width.saturating_sub(8 * v).min(8)));
        let mut acc = [[_mm256_setzero_ps(); 2]; R];
        match start {
            Start::Zero => {}
            Start::Bias(bias) => {
                let row: [__m256; 2] =
                    std::array::from_fn(|v| _mm256_maskload_ps(bias.add(8 * v), masks[v]));
                acc = [row; R];
            }
            Start::Dst => {
                for (r, acc) in acc.iter_mut().enumerate() {
                    for (v, x) in acc.iter_mut().enumerate() {
                        *x = _mm256_maskload_ps(c.add(r * ldc + 8 * v), masks[v]);
                    }
                }
            }
        }
        for kk in 0..kc {
            let bk = b.add(kk * NR);
            let b0 = _mm256_loadu_ps(bk);
            let b1 = _mm256_loadu_ps(bk.add(8));
            for (r, acc) in acc.iter_mut().enumerate() {
                let x = _mm256_broadcast_ss(&*a.add(r * lda + kk));
                acc[0] = _mm256_fmadd_ps(x, b0, acc[0]);
                acc[1] = _mm256_fmadd_ps(x, b1, acc[1]);
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            for (v, x) in acc.iter().enumerate() {
                _mm256_maskstore_ps(c.add(r * ldc + 8 * v), masks[v], *x);
            }
        }
    }
}

/// Never called: `matmul_nt` errs before (`wide_cpu`, `available`) on other architectures.
#[cfg(not(target_arch = "x86_64"))]
mod wide {
    pub(super) struct Kernel;
    impl super::Kernel for Kernel {
        const NR: usize = 48;
        const MR: usize = 8;
        unsafe fn pack(
            _: &[f32],
            _: usize,
            _: std::ops::Range<usize>,
            _: usize,
            _: usize,
            _: &mut Vec<f32>,
        ) {
            unreachable!("sgemm: x86 only")
        }
        unsafe fn tile(
            _: usize,
            _: *const f32,
            _: usize,
            _: *const f32,
            _: usize,
            _: *mut f32,
            _: usize,
            _: usize,
            _: super::Start,
        ) {
            unreachable!("sgemm: x86 only")
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod narrow {
    pub(super) use super::wide::Kernel;
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
    fn here() -> Vec<Tiles> {
        let never = |_: &str| false;
        match chosen(crate::vlm::qgemv::cpu_has, never) {
            Some(Tiles::Avx512) => vec![Tiles::Avx2, Tiles::Avx512],
            Some(Tiles::Avx2) => vec![Tiles::Avx2],
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
        for tiles in [Tiles::Avx2, Tiles::Avx512] {
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

    #[test]
    fn chosen_follows_the_cpu() {
        let has = |list: &'static str| move |f: &str| list.split(' ').any(|x| x == f);
        let never = |_: &str| false;
        let xeon = "avx2 fma f16c avx512f avx512bw avx512_vnni";
        assert_eq!(chosen(has(xeon), never), Some(Tiles::Avx512));
        assert_eq!(chosen(has("avx2 fma f16c"), never), Some(Tiles::Avx2));
        assert_eq!(chosen(has("avx2 fma"), never), None);
        assert_eq!(
            chosen(has(xeon), |k| k == "POINTACT_QGEMV_AVX2"),
            Some(Tiles::Avx2)
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
