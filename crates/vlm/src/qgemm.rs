//! Prefill-time Q4K products: many activation rows (a prompt) times a Q4K weight, as int8
//! products on our own tiles, in place of candle 0.11.1's repacked tiles
//! (`quantized/repack_x86.rs`).
//!
//! Why our own: candle copies the weight's blocks and repacks the copy for every product, and
//! quantizes the activation with scalar code (`roundf` per value); in a q4k `bench vlm`
//! prefill on the 2-core AVX-512 EPYC that was ~25 % on top of its kernel (`perf`: `pack`,
//! `BlockQ8K::from_float`, `roundf`, the copy). On an AVX2-only CPU its Q4K tile holds 4
//! activation rows × 16 weight rows of f32 and int32 accumulators (32 vectors where AVX2 has
//! 16 registers) and a q4k prefill there measured 0.89× transformers f32 while our f32
//! prefill was 1.12–1.20× (README). Here the activation is quantized once, vectorised
//! ([`super::qgemv::quantize_q8k`]), and the weights are repacked one panel of 16 rows at a
//! time, which then stays in cache while every activation row passes it:
//!
//! * **AVX-512 F/BW/VNNI** ([`x86::tile16`]): a panel of 16 weight rows is repacked
//!   ([`x86::pack16`]: four consecutive weights of each row side by side as bytes, the
//!   sub-block scales as f32 vectors across the rows) and each `vpdpbusd` multiplies 4 weights
//!   of all 16 rows by 4 activation bytes broadcast; 8 activation rows per tile, so each
//!   weight vector loaded serves 8 `vpdpbusd`. The scales apply in f32 per 32-value sub-block
//!   (the 16 lanes are 16 rows, each with its own scale). 2 threads, 545 rows: ~1 TOP/s
//!   against 420–490 GOP/s for candle's tiles as prefill used them.
//! * **AVX-VNNI without AVX-512** (Intel client CPUs since Alder Lake; [`x86::tile16_256`]):
//!   the same panels, each 16-row vector as two 256-bit halves, 2 activation rows per tile
//!   (12 accumulators in 16 registers). Measured only on the AVX-512 EPYC with its AVX-512
//!   tiles switched off (`POINTACT_QGEMV_AVX2=1`): 91 ms against 170 ms for candle's AVX-VNNI
//!   tiles as prefill used them (545 × 2048 × 22016, 2 threads).
//! * **AVX2** ([`x86::tile16_avx2`]): the same panels; per four weights a `maddubs` (u8 × i8
//!   pairs into i16) against the activation's four bytes broadcast, summed in i16 over a
//!   32-value sub-block, then one `madd` against the rows' six-bit scales into i32. The usual
//!   AVX2 Q4K dot product (llama.cpp's, candle's, and ours before) takes a `madd` per
//!   `maddubs`, and AVX2 cores have two vector multiply ports for both. Measured
//!   only as AVX2 code on the AVX-512 EPYC (`POINTACT_QGEMV_AVX2=1 POINTACT_QGEMM_AVX2=1
//!   MISTRALRS_FORCE_AVX2=1 pointact bench qgemm`): 8.0–97 ms against 13.3–155 ms for our
//!   previous in-place 4 × 2 tile and 16–203 ms for candle's AVX2 tiles.
//!
//! [`chosen`] decides, `bench vlm` reports it, `POINTACT_QGEMM_CANDLE=1` hands the products back
//! to candle. The maths is that of [`super::qgemv`]'s Q4K rows (integer sums per sub-block, the
//! same Q8K activation), so results differ from candle's only in the order of float additions.

use candle_core::quantized::k_quants::{BlockQ4K, BlockQ8K, GgmlType};

use super::qgemv::{quantize_q8k, QK_K};

/// Activation rows of one AVX2 tile ([`x86::tile16_avx2`]): 2 × 2 vectors each of i16 sums,
/// i32 sums and f32 accumulators, the panel's two weight vectors and the broadcast fill 15 of
/// the 16 registers; 3 rows measured slower (`bench qgemm`, AVX2 code on the Zen 5: 1.5–1.9×
/// candle's AVX2 tiles against 1.9–2.1×).
const AVX2_ROWS: usize = 2;
/// Our tiles for Q4K products of many rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tiles {
    /// `maddubs` summed in i16, one `madd` per sub-block ([`x86::tile16_avx2`]).
    Avx2,
    /// `vpdpbusd` on 256-bit vectors over the repacked panels ([`x86::tile16_256`]).
    AvxVnni,
    /// `vpdpbusd` on 512-bit vectors over the repacked panels ([`x86::tile16`]).
    Avx512Vnni,
}

impl Tiles {
    /// The tier's name as reports print it (`avx2`, `avx-vnni`, `avx512-vnni`).
    pub fn name(self) -> &'static str {
        match self {
            Tiles::Avx2 => "avx2",
            Tiles::AvxVnni => "avx-vnni",
            Tiles::Avx512Vnni => "avx512-vnni",
        }
    }
}

/// Which of our tiles Q4K products of many rows take, for CPU features named as
/// /proc/cpuinfo names them (`has`) and the environment (`env`): the AVX-512 ones where
/// [`super::qgemv::row_kernels`] takes its AVX-512 rows (AVX-512 F/BW/VNNI, unless
/// `POINTACT_QGEMV_AVX2=1`), else the AVX-VNNI ones where the CPU has it (Intel since Alder
/// Lake; unless `POINTACT_QGEMM_AVX2=1`), else the AVX2 ones; `None` for candle's repacked
/// tiles: on CPUs without AVX2/FMA/F16C, or with `POINTACT_QGEMM_CANDLE=1` (the switches are
/// there to compare the kernels on one machine).
pub fn chosen(has: impl Fn(&str) -> bool, env: impl Fn(&str) -> bool) -> Option<Tiles> {
    use super::qgemv::RowKernels;
    match super::qgemv::row_kernels(&has, &env)? {
        _ if env("POINTACT_QGEMM_CANDLE") => None,
        RowKernels::Avx512 => Some(Tiles::Avx512Vnni),
        RowKernels::Avx2 if has("avx_vnni") && !env("POINTACT_QGEMM_AVX2") => Some(Tiles::AvxVnni),
        RowKernels::Avx2 => Some(Tiles::Avx2),
    }
}

/// [`chosen`] on this machine, decided once per process (asked for every product).
pub fn chosen_here() -> Option<Tiles> {
    static CHOSEN: std::sync::OnceLock<Option<Tiles>> = std::sync::OnceLock::new();
    *CHOSEN.get_or_init(|| chosen(super::qgemv::cpu_has, super::qgemv::switch_on))
}

/// The activation rows in Q8K, with what the min term needs per sub-block.
struct Activation {
    /// `[m, k/256]` blocks.
    blocks: Vec<BlockQ8K>,
    /// Per block, the sum of each 32-value sub-block's quants: the min term of a block is
    /// `d · dmin · Σ_j m_j · sums[j]`.
    sums: Vec<[f32; 8]>,
}

impl Activation {
    /// Quantizes the `m` rows of `lhs` (`k` values each) across candle's pool.
    fn new(lhs: &[f32], m: usize, k: usize) -> Self {
        let nb = k / QK_K;
        let mut blocks = vec![BlockQ8K::zeros(); m * nb];
        let mut sums = vec![[0f32; 8]; m * nb];
        let (at, sums_at) = (blocks.as_mut_ptr() as usize, sums.as_mut_ptr() as usize);
        candle_core::utils::barrier_pool().execute_chunked(m, |rows| {
            for i in rows {
                // SAFETY: each row `i < m` is written by exactly one work item, and its `nb`
                // blocks and sums lie inside the `m·nb` buffers.
                let (dst, sums) = unsafe {
                    (
                        std::slice::from_raw_parts_mut((at as *mut BlockQ8K).add(i * nb), nb),
                        std::slice::from_raw_parts_mut((sums_at as *mut [f32; 8]).add(i * nb), nb),
                    )
                };
                quantize_q8k(&lhs[i * k..(i + 1) * k], dst);
                for (b, s) in dst.iter().zip(sums) {
                    *s = super::qgemv::sub_block_sums(b).map(f32::from);
                }
            }
        });
        Self { blocks, sums }
    }
}

/// `dst = lhs · wᵀ` for the `m` rows of `lhs` (`[m, k]`) and the `n` Q4K rows of `w`
/// (`[n, k/256]` blocks), `dst` `[m, n]`. An error where the CPU lacks AVX2/FMA/F16C or the
/// shapes disagree.
pub fn q4k(
    (m, k, n): (usize, usize, usize),
    lhs: &[f32],
    w: &[BlockQ4K],
    dst: &mut [f32],
) -> candle_core::Result<()> {
    if !super::qgemv::available() {
        candle_core::bail!("qgemm: this CPU lacks AVX2/FMA/F16C");
    }
    super::qgemv::check_shapes("qgemm", (m, k, n), QK_K, (lhs.len(), w.len(), dst.len()))?;
    let Some(tiles) = chosen_here() else {
        candle_core::bail!("qgemm: not chosen on this machine (POINTACT_QGEMM_CANDLE=1)");
    };
    q4k_on(tiles, (m, k, n), lhs, w, dst)
}

/// [`q4k`] through `tiles` (an error where this CPU lacks them); shapes checked by the caller.
fn q4k_on(
    tiles: Tiles,
    (m, k, n): (usize, usize, usize),
    lhs: &[f32],
    w: &[BlockQ4K],
    dst: &mut [f32],
) -> candle_core::Result<()> {
    match tiles {
        Tiles::Avx2 => {}
        Tiles::AvxVnni if super::qgemv::cpu_has("avx_vnni") => {}
        Tiles::AvxVnni => candle_core::bail!("qgemm: this CPU lacks AVX-VNNI"),
        Tiles::Avx512Vnni => super::qgemv::wide_cpu()?,
    }
    let act = Activation::new(lhs, m, k);
    match tiles {
        Tiles::Avx2 => panels16(
            (m, k, n),
            &act,
            w,
            dst,
            x86::tile16_avx2::<AVX2_ROWS>,
            x86::tile16_avx2::<1>,
        ),
        Tiles::AvxVnni => panels16(
            (m, k, n),
            &act,
            w,
            dst,
            x86::tile16_256::<2>,
            x86::tile16_256::<1>,
        ),
        Tiles::Avx512Vnni => panels16(
            (m, k, n),
            &act,
            w,
            dst,
            x86::tile16::<{ x86::VNNI_ROWS }>,
            x86::tile16::<1>,
        ),
    }
    Ok(())
}

/// A kernel over one repacked panel: the panel, the activation, the first block of the first
/// of `R` activation rows, the results (16 weight rows each).
type Tile16<const R: usize> =
    unsafe fn(&[x86::Packed], &Activation, usize, &mut [[f32; x86::LANES]; R]);

/// The frame of every tile: the weight rows split across candle's pool in panels of
/// [`x86::LANES`] (16), each panel repacked once ([`x86::pack16`]: four consecutive weights
/// of each of the 16 rows side by side, the shape `vpdpbusd` and `maddubs` take) and then run
/// against every activation row, `R` at a time through `tile` and the rest one by one
/// (`one`). A part panel is padded with zero rows whose results are dropped.
fn panels16<const R: usize>(
    (m, k, n): (usize, usize, usize),
    act: &Activation,
    w: &[BlockQ4K],
    dst: &mut [f32],
    tile: Tile16<R>,
    one: Tile16<1>,
) {
    use x86::LANES;
    let nb = k / QK_K;
    let dst_at = dst.as_mut_ptr() as usize;
    candle_core::utils::barrier_pool().execute_chunked(n.div_ceil(LANES), |panels| {
        let mut packed = Vec::new();
        for p in panels {
            let cols = p * LANES..((p + 1) * LANES).min(n);
            // SAFETY: the caller checked the CPU (`q4k_on`).
            unsafe { x86::pack16(&w[cols.start * nb..cols.end * nb], nb, &mut packed) };
            let mut i = 0;
            while i < m {
                let rows = if m - i >= R { R } else { 1 };
                let mut out = [[0f32; LANES]; R];
                // SAFETY: the caller checked the CPU; `packed` holds `nb` blocks and rows
                // `i..i + rows` of `act` exist (`rows` fills `out` from the top).
                unsafe {
                    if rows == R {
                        tile(&packed, act, i * nb, &mut out)
                    } else {
                        let first = (&mut out[..1]).try_into().expect("one row");
                        one(&packed, act, i * nb, first)
                    }
                };
                for (t, o) in out.iter().enumerate().take(rows) {
                    // SAFETY: each (row, column) is written by exactly one work item (panels
                    // of columns do not overlap), inside `m·n`.
                    let at = unsafe { (dst_at as *mut f32).add((i + t) * n + cols.start) };
                    unsafe { std::ptr::copy_nonoverlapping(o.as_ptr(), at, cols.len()) };
                }
                i += rows;
            }
        }
    });
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Activation, BlockQ4K, QK_K};
    use std::arch::x86_64::*;

    /// Weight rows per AVX-512 panel: one per f32 lane of a 512-bit vector.
    pub(super) const LANES: usize = 16;
    /// Activation rows of one AVX-512 tile.
    pub(super) const VNNI_ROWS: usize = 8;

    /// One 256-value block of a 16-row panel, repacked for `vpdpbusd`: `q[g][r]` holds the
    /// four weights `4g..4g+4` of row `r` as bytes (0..16), `scales[j][r]` is `d·sc_j` and
    /// `mins[j][r]` is `dmin·m_j` of sub-block `j`. Rows past the matrix are all zero.
    #[repr(C, align(64))]
    pub(super) struct Packed {
        q: [[u32; LANES]; QK_K / 4],
        scales: [[f32; LANES]; 8],
        mins: [[f32; LANES]; 8],
        /// `sc16[j][2r]` = `sc16[j][2r + 1]` = row `r`'s six-bit scale of sub-block `j`: the
        /// two i16 lanes a `maddubs` leaves per row, which one `madd` then scales and joins
        /// ([`tile16_avx2`]).
        sc16: [[i16; 2 * LANES]; 8],
        /// Each row's `d`.
        d: [f32; LANES],
    }

    /// Repacks the `rows ≤ 16` weight rows `w` (`nb` blocks each) into `out`, one [`Packed`]
    /// per block. Eight rows at a time: each row's values come out of its block along a vector
    /// (32 weights, 8 scales), and a panel stores them across rows, so every eight vectors of
    /// eight rows are transposed in registers ([`transpose8`]) and stored whole. Why: the
    /// scalar scatter this replaced (64 four-byte stores per row and block, 64 bytes apart, and
    /// 32 for the scales) was 7.3 % of a q4k prefill's samples (3B, 2 threads, AVX-512 AMD,
    /// `perf record` of `bench vlm --quant q4k`): the 1.7 GB of blocks are repacked every pass.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn pack16(w: &[BlockQ4K], nb: usize, out: &mut Vec<Packed>) {
        let rows = w.len() / nb;
        let lo_nibbles = _mm256_set1_epi8(0x0f);
        // Each panel of a work item overwrites the blocks the previous one left, in place
        // (every field of all 16 rows, zeros past the matrix): building each block on the
        // stack and moving it into `out` added ~20 % to the repack (`perf` of `bench qgemm`).
        if out.len() != nb {
            out.clear();
            // SAFETY: `Packed` is integers and floats only, for which all-zero bytes are 0.
            out.resize_with(nb, || std::mem::zeroed());
        }
        for (b, p) in out.iter_mut().enumerate() {
            for half in 0..LANES / 8 {
                let r0 = 8 * half;
                let row = |i: usize| {
                    (r0 + i < rows).then(|| (&w[(r0 + i) * nb + b] as *const BlockQ4K).cast::<u8>())
                };
                let zero = _mm256_setzero_si256();
                // The 256 weights as bytes, 32 per vector `c`: chunk `c / 2` of 32 quant bytes
                // holds weights 64h..64h+32 in its low nibbles and 64h+32..64h+64 in its high
                // ones.
                for c in 0..QK_K / 32 {
                    let v: [__m256i; 8] = std::array::from_fn(|i| match row(i) {
                        Some(wp) => {
                            let v = _mm256_loadu_si256(wp.add(16 + 32 * (c / 2)) as *const __m256i);
                            let v = if c % 2 == 0 {
                                v
                            } else {
                                _mm256_srli_epi16::<4>(v)
                            };
                            _mm256_and_si256(v, lo_nibbles)
                        }
                        None => zero,
                    });
                    for (g, t) in transpose8(v).into_iter().enumerate() {
                        _mm256_storeu_si256(p.q[8 * c + g].as_mut_ptr().add(r0).cast(), t);
                    }
                }
                let mut d = [0f32; 8];
                let mut scales = [zero; 8];
                let mut mins = [zero; 8];
                let mut sc16 = [zero; 8];
                for i in 0..8 {
                    let Some(wp) = row(i) else { continue };
                    let dm = _mm_cvtph_ps(_mm_cvtsi32_si128((wp as *const i32).read_unaligned()));
                    d[i] = _mm_cvtss_f32(dm);
                    let dmin = _mm_cvtss_f32(_mm_movehdup_ps(dm));
                    let sm = crate::qgemv::scales_mins(wp.add(4));
                    let sc = _mm256_cvtepu8_epi32(sm);
                    let mn = _mm256_cvtepu8_epi32(_mm_srli_si128::<8>(sm));
                    scales[i] = _mm256_castps_si256(_mm256_mul_ps(
                        _mm256_cvtepi32_ps(sc),
                        _mm256_set1_ps(d[i]),
                    ));
                    mins[i] = _mm256_castps_si256(_mm256_mul_ps(
                        _mm256_cvtepi32_ps(mn),
                        _mm256_set1_ps(dmin),
                    ));
                    // The scale in both i16 halves of a lane: row r's pair `sc16[j][2r..2r + 2]`.
                    sc16[i] = _mm256_or_si256(sc, _mm256_slli_epi32::<16>(sc));
                }
                _mm256_storeu_ps(p.d.as_mut_ptr().add(r0), _mm256_loadu_ps(d.as_ptr()));
                let (scales, mins, sc16) = (transpose8(scales), transpose8(mins), transpose8(sc16));
                for j in 0..8 {
                    _mm256_storeu_si256(p.scales[j].as_mut_ptr().add(r0).cast(), scales[j]);
                    _mm256_storeu_si256(p.mins[j].as_mut_ptr().add(r0).cast(), mins[j]);
                    _mm256_storeu_si256(p.sc16[j].as_mut_ptr().add(2 * r0).cast(), sc16[j]);
                }
            }
        }
    }

    /// The 8 × 8 matrix of 32-bit values whose row `i` is `r[i]`, transposed: lane `i` of
    /// result `j` is lane `j` of `r[i]`.
    #[inline(always)]
    unsafe fn transpose8(r: [__m256i; 8]) -> [__m256i; 8] {
        // Pairs of rows interleaved by 32 bits, then by 64 (each 128-bit half holds four
        // columns' first four rows), then the halves of rows 0–3 and 4–7 joined.
        let t: [__m256i; 8] = std::array::from_fn(|i| {
            let (a, b) = (r[2 * (i / 2)], r[2 * (i / 2) + 1]);
            if i % 2 == 0 {
                _mm256_unpacklo_epi32(a, b)
            } else {
                _mm256_unpackhi_epi32(a, b)
            }
        });
        // u[0..4] from rows 0–3 (t[0..4]), u[4..8] from rows 4–7: columns {0,4}, {1,5},
        // {2,6}, {3,7}.
        let u: [__m256i; 8] = std::array::from_fn(|i| {
            let (q, c) = (4 * (i / 4), i % 4);
            let (a, b) = (t[q + c / 2], t[q + 2 + c / 2]);
            if c % 2 == 0 {
                _mm256_unpacklo_epi64(a, b)
            } else {
                _mm256_unpackhi_epi64(a, b)
            }
        });
        std::array::from_fn(|j| {
            if j < 4 {
                _mm256_permute2x128_si256::<0x20>(u[j], u[4 + j])
            } else {
                _mm256_permute2x128_si256::<0x31>(u[j - 4], u[j])
            }
        })
    }

    /// `out[t][r] = Σ a_t · w_r` for `R` activation rows (blocks of row `t` from
    /// `act.blocks[a + t·nb]`) against the 16 weight rows of `packed`: per four weights one
    /// `vpdpbusd` (16 rows × 4 u8·i8 products into 16 int32 lanes) against the activation's
    /// four bytes broadcast; per 32-value sub-block the lanes go to f32 times the rows'
    /// `d·sc_j`, less `dmin·m_j` times the activation's sub-block sum; per block times the
    /// activation's `d`. |Σ| of one sub-block's lane ≤ 32·15·128 < 2³¹.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
    pub(super) unsafe fn tile16<const R: usize>(
        packed: &[Packed],
        act: &Activation,
        a: usize,
        out: &mut [[f32; LANES]; R],
    ) {
        let nb = packed.len();
        let mut acc = [_mm512_setzero_ps(); R];
        for (b, p) in packed.iter().enumerate() {
            let ap: [*const u8; R] =
                std::array::from_fn(|t| act.blocks.as_ptr().add(a + t * nb + b).cast::<u8>());
            let mut blk = [_mm512_setzero_ps(); R];
            for j in 0..8 {
                let mut isum = [_mm512_setzero_si512(); R];
                for g in 0..8 {
                    let wv = _mm512_load_si512(p.q[8 * j + g].as_ptr() as *const _);
                    for t in 0..R {
                        let y = (ap[t].add(4 + 32 * j + 4 * g) as *const i32).read_unaligned();
                        isum[t] = _mm512_dpbusd_epi32(isum[t], wv, _mm512_set1_epi32(y));
                    }
                }
                let sc = _mm512_load_ps(p.scales[j].as_ptr());
                let mn = _mm512_load_ps(p.mins[j].as_ptr());
                for t in 0..R {
                    let sum = act.sums[a + t * nb + b][j];
                    blk[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), sc, blk[t]);
                    blk[t] = _mm512_fnmadd_ps(mn, _mm512_set1_ps(sum), blk[t]);
                }
            }
            for t in 0..R {
                let d = (ap[t] as *const f32).read_unaligned();
                acc[t] = _mm512_fmadd_ps(blk[t], _mm512_set1_ps(d), acc[t]);
            }
        }
        for t in 0..R {
            _mm512_storeu_ps(out[t].as_mut_ptr(), acc[t]);
        }
    }

    /// [`tile16`] on 256-bit vectors (AVX-VNNI, no AVX-512): each panel row group is two
    /// vectors of 8 rows, and 2 activation rows per tile keep the 12 accumulators in the 16
    /// registers. The sub-block's i32 lanes go to f32 as in [`tile16`] ([`Vnni`]).
    #[target_feature(enable = "avxvnni,avx2,fma,f16c")]
    pub(super) unsafe fn tile16_256<const R: usize>(
        packed: &[Packed],
        act: &Activation,
        a: usize,
        out: &mut [[f32; LANES]; R],
    ) {
        tile256::<Vnni, R>(packed, act, a, out)
    }

    /// [`tile16`] for AVX2 without VNNI ([`Maddubs`]): per four weights one `maddubs` (16
    /// rows as two vectors × 4 u8·i8 products → two i16 pair sums per row) against the
    /// activation's four bytes broadcast, summed in i16 over the sub-block's 8 groups (|Σ| ≤
    /// 16·15·128 = 30 720 < 2¹⁵, so no saturation), then one `madd` against the rows' six-bit
    /// scales (`sc16`) joins each row's two lanes into i32 (|Σ| over a block ≤ 8·63·2·30 720
    /// < 2³¹). Against a `madd` per `maddubs`, as llama.cpp's and candle's AVX2 Q4K dot
    /// products (and our in-place tile before this one) do, that is one multiply in nine
    /// instead of one in two: AVX2 cores have two vector multiply ports, and the int8 products
    /// were bound on them. Per block, the rows' `d` and the min term `dmin·m_j` times the
    /// activation's sub-block sums go in f32, times the activation's `d`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn tile16_avx2<const R: usize>(
        packed: &[Packed],
        act: &Activation,
        a: usize,
        out: &mut [[f32; LANES]; R],
    ) {
        tile256::<Maddubs, R>(packed, act, a, out)
    }

    /// What differs between the 256-bit tiles: how a group of four weights of 8 rows joins a
    /// sub-block's integer sums, how a finished sub-block joins its block, and what the block
    /// comes to in f32 (before the activation's `d`). Inlined into each tile's
    /// `target_feature` function, so the intrinsics compile for that feature set.
    trait Sum256 {
        /// A block's running value for one activation row and 8 weight rows.
        type Block: Copy;
        unsafe fn zero() -> Self::Block;
        /// `s` plus the products of the four weights `w` (each lane one row) and the four
        /// activation bytes broadcast in `y`.
        unsafe fn group(s: __m256i, w: __m256i, y: __m256i) -> __m256i;
        /// `blk` with sub-block `j` (sums `s`, rows `8h..8h + 8`; `at` = `(j, h)`) joined;
        /// `sum`: the activation's sum over the sub-block.
        unsafe fn sub_block(
            blk: Self::Block,
            s: __m256i,
            p: &Packed,
            at: (usize, usize),
            sum: f32,
        ) -> Self::Block;
        /// The block in f32; `sums`: the activation's sub-block sums.
        unsafe fn block(blk: Self::Block, p: &Packed, h: usize, sums: &[f32; 8]) -> __m256;
    }

    /// `vpdpbusd` into i32; each sub-block to f32 at once (times `d·sc_j`, less the min term).
    struct Vnni;
    /// `maddubs` summed in i16; each sub-block scaled by `madd` into i32; f32 once per block.
    struct Maddubs;

    impl Sum256 for Vnni {
        type Block = __m256;
        #[inline(always)]
        unsafe fn zero() -> __m256 {
            _mm256_setzero_ps()
        }
        #[inline(always)]
        unsafe fn group(s: __m256i, w: __m256i, y: __m256i) -> __m256i {
            _mm256_dpbusd_avx_epi32(s, w, y)
        }
        #[inline(always)]
        unsafe fn sub_block(
            blk: __m256,
            s: __m256i,
            p: &Packed,
            (j, h): (usize, usize),
            sum: f32,
        ) -> __m256 {
            let sc = _mm256_load_ps(p.scales[j].as_ptr().add(8 * h));
            let mn = _mm256_load_ps(p.mins[j].as_ptr().add(8 * h));
            let f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), sc, blk);
            _mm256_fnmadd_ps(mn, _mm256_set1_ps(sum), f)
        }
        #[inline(always)]
        unsafe fn block(blk: __m256, _: &Packed, _: usize, _: &[f32; 8]) -> __m256 {
            blk
        }
    }

    impl Sum256 for Maddubs {
        type Block = __m256i;
        #[inline(always)]
        unsafe fn zero() -> __m256i {
            _mm256_setzero_si256()
        }
        #[inline(always)]
        unsafe fn group(s: __m256i, w: __m256i, y: __m256i) -> __m256i {
            _mm256_add_epi16(s, _mm256_maddubs_epi16(w, y))
        }
        #[inline(always)]
        unsafe fn sub_block(
            blk: __m256i,
            s: __m256i,
            p: &Packed,
            (j, h): (usize, usize),
            _: f32,
        ) -> __m256i {
            let sc = _mm256_load_si256(p.sc16[j].as_ptr().add(16 * h) as *const __m256i);
            _mm256_add_epi32(blk, _mm256_madd_epi16(s, sc))
        }
        #[inline(always)]
        unsafe fn block(blk: __m256i, p: &Packed, h: usize, sums: &[f32; 8]) -> __m256 {
            let d = _mm256_load_ps(p.d.as_ptr().add(8 * h));
            let mut f = _mm256_mul_ps(_mm256_cvtepi32_ps(blk), d);
            for (j, sum) in sums.iter().enumerate() {
                let mn = _mm256_load_ps(p.mins[j].as_ptr().add(8 * h));
                f = _mm256_fnmadd_ps(mn, _mm256_set1_ps(*sum), f);
            }
            f
        }
    }

    /// The 256-bit tiles' one loop: [`tile16`]'s contract, the 16 rows as two halves of 8.
    #[inline(always)]
    unsafe fn tile256<W: Sum256, const R: usize>(
        packed: &[Packed],
        act: &Activation,
        a: usize,
        out: &mut [[f32; LANES]; R],
    ) {
        let nb = packed.len();
        let mut acc = [[_mm256_setzero_ps(); 2]; R];
        for (b, p) in packed.iter().enumerate() {
            let ap: [*const u8; R] =
                std::array::from_fn(|t| act.blocks.as_ptr().add(a + t * nb + b).cast::<u8>());
            let mut blk = [[W::zero(); 2]; R];
            for j in 0..8 {
                let mut s = [[_mm256_setzero_si256(); 2]; R];
                for g in 0..8 {
                    let row = p.q[8 * j + g].as_ptr();
                    let wv = [0, 8].map(|h| _mm256_load_si256(row.add(h) as *const __m256i));
                    for t in 0..R {
                        let y = (ap[t].add(4 + 32 * j + 4 * g) as *const i32).read_unaligned();
                        let y = _mm256_set1_epi32(y);
                        for h in 0..2 {
                            s[t][h] = W::group(s[t][h], wv[h], y);
                        }
                    }
                }
                for h in 0..2 {
                    for t in 0..R {
                        let sum = act.sums[a + t * nb + b][j];
                        blk[t][h] = W::sub_block(blk[t][h], s[t][h], p, (j, h), sum);
                    }
                }
            }
            for t in 0..R {
                let ad = _mm256_set1_ps((ap[t] as *const f32).read_unaligned());
                for h in 0..2 {
                    let sums = &act.sums[a + t * nb + b];
                    acc[t][h] = _mm256_fmadd_ps(W::block(blk[t][h], p, h, sums), ad, acc[t][h]);
                }
            }
        }
        for (o, acc) in out.iter_mut().zip(acc) {
            for (h, v) in acc.into_iter().enumerate() {
                _mm256_storeu_ps(o.as_mut_ptr().add(8 * h), v);
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod x86 {
    pub(super) const LANES: usize = 16;
    pub(super) const VNNI_ROWS: usize = 8;
    pub(super) struct Packed;
    pub(super) unsafe fn pack16(_: &[super::BlockQ4K], _: usize, _: &mut Vec<Packed>) {
        unreachable!("qgemm::q4k checks for AVX2 first")
    }
    pub(super) unsafe fn tile16<const R: usize>(
        _: &[Packed],
        _: &super::Activation,
        _: usize,
        _: &mut [[f32; LANES]; R],
    ) {
        unreachable!("qgemm::q4k checks for AVX-512 first")
    }
    pub(super) unsafe fn tile16_256<const R: usize>(
        _: &[Packed],
        _: &super::Activation,
        _: usize,
        _: &mut [[f32; LANES]; R],
    ) {
        unreachable!("qgemm::q4k checks for AVX-VNNI first")
    }
    pub(super) unsafe fn tile16_avx2<const R: usize>(
        _: &[Packed],
        _: &super::Activation,
        _: usize,
        _: &mut [[f32; LANES]; R],
    ) {
        unreachable!("qgemm::q4k checks for AVX2 first")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::k_quants;

    /// Ours (every tile this CPU runs: [`here`]) against candle's ggml kernel
    /// (`k_quants::matmul`) on the same blocks, equal up to float summation order: row counts
    /// that fill whole tiles and leave rows over, weight counts that leave a part panel or give
    /// a work item several panels, one activation row all zero, weights exercising every scale
    /// and min bit (`qgemv::tests::weights`).
    #[test]
    fn equals_candles_ggml_kernel_on_the_same_blocks() {
        if !super::super::qgemv::available_or_skip() {
            return;
        }
        // (5, 256, 773): 49 panels, so a work item repacks several into the blocks it reuses.
        for (m, k, n) in [
            (4, 256, 4),
            (37, 512, 67),
            (9, 1024, 33),
            (1, 256, 3),
            (5, 256, 773),
        ] {
            let mut blocks = vec![BlockQ4K::zeros(); n * k / QK_K];
            BlockQ4K::from_float(&crate::qgemv::tests::weights(n, k), &mut blocks);
            let mut x = crate::qgemv::tests::lcg(11 + m as u64, m * k);
            if m > 2 {
                x[k..2 * k].iter_mut().for_each(|v| *v = 0.0);
            }
            let mut want = vec![0f32; m * n];
            k_quants::matmul((m, k, n), &x, &blocks, &mut want).unwrap();
            let scale = want.iter().fold(0f32, |a, v| a.max(v.abs()));
            for tiles in here() {
                let mut got = vec![f32::NAN; m * n];
                q4k_on(tiles, (m, k, n), &x, &blocks, &mut got).unwrap();
                for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (a - b).abs() <= 1e-5 * scale,
                        "{tiles:?} (m {m}, k {k}, n {n}) [{i}]: ours {a}, candle {b}"
                    );
                }
            }
        }
    }

    /// The largest sums the integer paths can meet, against candle's ggml kernel: every nibble
    /// 15, every six-bit scale and min 63, and an activation whose quants are all −128 (a
    /// row of −1.0) or all 127 (+1.0). The AVX2 tile sums 16 such products per i16 lane
    /// (−30 720: one more group would wrap).
    #[test]
    fn the_largest_sums_do_not_wrap() {
        if !super::super::qgemv::available() {
            return;
        }
        let (m, k, n) = (3, 512, 17);
        let mut blocks = vec![BlockQ4K::zeros(); n * k / QK_K];
        for b in &mut blocks {
            // SAFETY: BlockQ4K is ggml's 144-byte block: `d`, `dmin` (f16), 12 bytes of
            // packed scales and mins, 128 bytes of nibbles; all 0xff = every field's maximum.
            let bytes =
                unsafe { std::slice::from_raw_parts_mut((b as *mut BlockQ4K).cast::<u8>(), 144) };
            bytes.fill(0xff);
            bytes[..4].copy_from_slice(&[0x00, 0x3c, 0x00, 0x38]); // d = 1.0, dmin = 0.5
        }
        let mut x = vec![-1f32; m * k];
        x[k..2 * k].iter_mut().for_each(|v| *v = 1.0);
        let mut want = vec![0f32; m * n];
        k_quants::matmul((m, k, n), &x, &blocks, &mut want).unwrap();
        let scale = want.iter().fold(0f32, |a, v| a.max(v.abs()));
        assert!(scale > 1e5, "the case is the extreme one: {scale}");
        for tiles in here() {
            let mut got = vec![f32::NAN; m * n];
            q4k_on(tiles, (m, k, n), &x, &blocks, &mut got).unwrap();
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-5 * scale,
                    "{tiles:?} [{i}]: ours {a}, candle {b}"
                );
            }
        }
    }

    /// The tiles this CPU runs, by [`chosen`]'s rule with each switch: AVX2 always, and the
    /// AVX-VNNI and AVX-512 ones where it has them.
    fn here() -> Vec<Tiles> {
        let has = crate::qgemv::cpu_has;
        let mut tiles = vec![Tiles::Avx2];
        for switch in ["POINTACT_QGEMV_AVX2", ""] {
            if let Some(t) = chosen(has, |k: &str| k == switch).filter(|t| !tiles.contains(t)) {
                tiles.push(t);
            }
        }
        eprintln!("tiles run here: {tiles:?}");
        tiles
    }

    /// A shape that does not fit is an error, never a write outside `dst`.
    #[test]
    fn a_shape_that_does_not_fit_is_an_error() {
        if !super::super::qgemv::available() {
            return;
        }
        let blocks = vec![BlockQ4K::zeros(); 4];
        let x = vec![0f32; 2 * 512];
        let mut dst = vec![0f32; 3];
        assert!(q4k((2, 512, 2), &x, &blocks, &mut dst).is_err());
        assert!(q4k((2, 500, 2), &x, &blocks, &mut [0f32; 4]).is_err());
    }

    /// The choice: ours wherever our row kernels run, the widest VNNI the CPU has; candle's
    /// on request.
    #[test]
    fn chosen_follows_the_cpu() {
        let cpu = |list: &'static [&'static str]| move |f: &str| list.contains(&f);
        let none = |_: &str| false;
        let avx2 = cpu(&["avx2", "fma", "f16c"]);
        assert_eq!(chosen(avx2, none), Some(Tiles::Avx2));
        assert_eq!(chosen(avx2, |k: &str| k == "POINTACT_QGEMM_CANDLE"), None);
        let client = cpu(&["avx2", "fma", "f16c", "avx_vnni"]);
        assert_eq!(chosen(client, none), Some(Tiles::AvxVnni));
        assert_eq!(
            chosen(client, |k: &str| k == "POINTACT_QGEMM_AVX2"),
            Some(Tiles::Avx2)
        );
        let wide = cpu(&["avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni"]);
        assert_eq!(chosen(wide, none), Some(Tiles::Avx512Vnni));
        assert_eq!(
            chosen(wide, |k: &str| k == "POINTACT_QGEMV_AVX2"),
            Some(Tiles::Avx2)
        );
        let zen5 = cpu(&[
            "avx2",
            "fma",
            "f16c",
            "avx512f",
            "avx512bw",
            "avx512_vnni",
            "avx_vnni",
        ]);
        assert_eq!(
            chosen(zen5, |k: &str| k == "POINTACT_QGEMV_AVX2"),
            Some(Tiles::AvxVnni)
        );
        assert_eq!(chosen(cpu(&["avx2", "fma"]), none), None);
        assert_eq!(chosen(cpu(&["avx2", "fma", "avx_vnni"]), none), None);
    }
}
