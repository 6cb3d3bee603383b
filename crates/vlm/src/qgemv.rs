//! Decode-time products: a few activation rows times a Q4K, Q8_0 or dense f32 weight, with our
//! own AVX2 dot products over the compact ggml blocks (and over plain f32 rows), and AVX-512
//! ones for Q4K and f32 where the CPU has AVX-512 F/BW/VNNI ([`row_kernels`]).
//!
//! Why our own: decode reads every weight once per token, so its speed is how close the dot
//! product comes to the memory bandwidth, and candle 0.11.1's ggml kernels (reached through
//! `k_quants::matmul`) are compute-bound on one core of this project's AVX2 machines.
//!
//! * **Q4K** (`avx::vec_dot_q4k_q8k` in candle: 11.7 GB/s from L2, the same from memory): it
//!   unpacks the six-bit scales in general-purpose registers and moves them into a vector lane
//!   by lane, sums the activation's block sums again for every weight row, and converts the two
//!   f16 factors through an out-of-line call (2 % of decode in a profile). Here the scales are
//!   unpacked with two byte shuffles and a per-lane shift, each scale is spread over its lanes
//!   by one in-lane shuffle, the activation's 32-value sums are formed once per product, and
//!   the f16 factors convert with F16C: 19 GB/s from L2 on one core, and the 2-thread product
//!   runs at the memory's pace (26 against 23 GB/s for `k=2048, n=11008`, 20 copies to defeat
//!   the caches).
//! * **Q8_0** (candle: 5.5 GB/s on one core, 14 GB/s on two): one 34-byte block per step with
//!   an out-of-line f16 conversion for each of the two factors. Here two blocks per step share
//!   one F16C conversion, the activation's factors are converted once per product, and two
//!   accumulators keep the adds independent: 13.7 / 23.9 GB/s on one / two threads, 33 GB/s
//!   on two with the weights prefetched 2 KiB ahead (both kernels prefetch).
//!
//! * **f32** (`--quant f32` decode: 15 GB of weights per token for the 3B): candle hands a
//!   one-row product to the `gemm` crate, which reached 62 % of the triad bandwidth in a 4-layer
//!   `bench vlm` here, and 15 GB/s against PyTorch's 32 GB/s on an AVX-512 Xeon.
//!   Here each weight row is one sequential stream: four independent FMA accumulators, the
//!   stream prefetched 2 KiB ahead, rows split across the pool like the quantized kernels.
//!   Only for products outside autograd ([`super::linear`] checks): no backward pass here.
//! * **AVX-512** (2-core AMD EPYC with AVX-512, `k=2048, n=11008`, AVX2 → AVX-512): Q4K
//!   27 → 41 GB/s on one core from L3, 37–39 → 40–44 GB/s on two from memory; f32 rows 114 →
//!   135 GB/s from L2 and memory-bound (42–45 GB/s) either way. A whole q4k decode in
//!   `bench vlm` (same binary, `POINTACT_QGEMV_AVX2=1` for the AVX2 side): 18.7–19.1 →
//!   20.3–20.5 tok/s, 86–93 % of the bandwidth limit. Q8_0 stays AVX2 (memory-bound there).
//!
//! The maths is ggml's formats against candle's own quantization of the activation (Q8K for
//! Q4K, Q8_0 for Q8_0), so the only difference from `k_quants::matmul` is the order of the
//! float additions (`tests`: within 1e-5 of the largest output). Q4K: super-blocks of 256
//! weights, `d`, `dmin` as f16, 8 sub-blocks of 32 with six-bit scale `sc` and min `m`,
//! weight = `d·sc·q − dmin·m`, `q` in 0..16; per super-block
//! `y.d · (d · Σ_j sc_j Σ q·y_q − dmin · Σ_j m_j Σ y_q)`. Q8_0: blocks of 32 int8 under one f16
//! `d`; per block `d_w·d_y·Σ w_q·y_q`.
//!
//! Not a layout change: the blocks stay exactly as ggml, the quantized cache and GGUF export
//! write them; prefill (many rows) goes elsewhere ([`super::linear::QBlocks`]).

use candle_core::quantized::k_quants::{BlockQ4K, BlockQ8K, BlockQ8_0, GgmlType};

/// Bytes of a ggml Q4K block: `d`, `dmin` (f16), 12 scale bytes, 128 quant bytes.
const Q4K_BYTES: usize = 144;
/// Bytes of a ggml Q8K block: `d` (f32), 256 quants (i8), 16 sums of 16 quants (i16).
const Q8K_BYTES: usize = 292;
/// Bytes of a ggml Q8_0 block: `d` (f16), 32 quants (i8).
const Q8_0_BYTES: usize = 34;
pub(super) const QK_K: usize = 256;
const QK8_0: usize = 32;

const _: () = assert!(std::mem::size_of::<BlockQ4K>() == Q4K_BYTES);
const _: () = assert!(std::mem::size_of::<BlockQ8K>() == Q8K_BYTES);
const _: () = assert!(std::mem::size_of::<BlockQ8_0>() == Q8_0_BYTES);

/// Whether this CPU runs [`q4k`], [`q8_0`] and [`dense`] (AVX2, FMA and F16C); the caller uses
/// candle's kernel otherwise.
pub(crate) fn available() -> bool {
    row_kernels(cpu_has, |_| false).is_some()
}

/// [`available`], for the kernel tests: where it is not, says the test was skipped.
#[cfg(test)]
pub(crate) fn available_or_skip() -> bool {
    let here = available();
    if !here {
        eprintln!("skipped: no AVX2/FMA/F16C here");
    }
    here
}

/// Which of our row kernels run: AVX2 ones, or the AVX-512 ones for Q4K and f32 (Q8_0 stays
/// AVX2: the 2-byte factor between its 32-byte blocks breaks the 64-byte loads).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowKernels {
    /// The 256-bit AVX2 + FMA kernels.
    Avx2,
    /// The 512-bit AVX-512 kernels for Q4K and f32; Q8_0 still runs the AVX2 one.
    Avx512,
}

impl RowKernels {
    /// As `bench vlm`'s kernels line names the width (`avx2`, `avx512`).
    pub fn name(self) -> &'static str {
        match self {
            RowKernels::Avx2 => "avx2",
            RowKernels::Avx512 => "avx512",
        }
    }
}

/// The rule for [`RowKernels`], for CPU features named as /proc/cpuinfo names them (`has`) and
/// the environment (`env`): AVX-512 F, BW and VNNI (Intel since Cascade Lake, AMD since Zen 4)
/// take the AVX-512 kernels unless `POINTACT_QGEMV_AVX2=1` (to compare the two on one
/// machine); `None`: not even AVX2, FMA and F16C. One rule for the products here and
/// `bench vlm`'s report.
pub fn row_kernels(has: impl Fn(&str) -> bool, env: impl Fn(&str) -> bool) -> Option<RowKernels> {
    if !(has("avx2") && has("fma") && has("f16c")) {
        None
    } else if has("avx512f") && has("avx512bw") && has("avx512_vnni") && !env("POINTACT_QGEMV_AVX2")
    {
        Some(RowKernels::Avx512)
    } else {
        Some(RowKernels::Avx2)
    }
}

/// Whether the environment switch `name` is on (`name=1`): the `env` the kernel rules take on
/// this machine (`POINTACT_QGEMV_AVX2`, `POINTACT_SGEMM_GEMM`, `MISTRALRS_FORCE_AVX2`, …).
pub fn switch_on(name: &str) -> bool {
    std::env::var(name).as_deref() == Ok("1")
}

/// Whether this CPU has `feature`, spelled as /proc/cpuinfo spells it (the spelling
/// [`row_kernels`] and `linear::candle_quant_tier` take); false for names not listed here.
pub(crate) fn cpu_has(feature: &str) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        match feature {
            "avx2" => std::is_x86_feature_detected!("avx2"),
            "fma" => std::is_x86_feature_detected!("fma"),
            "f16c" => std::is_x86_feature_detected!("f16c"),
            "avx512f" => std::is_x86_feature_detected!("avx512f"),
            "avx512bw" => std::is_x86_feature_detected!("avx512bw"),
            "avx512_vnni" => std::is_x86_feature_detected!("avx512vnni"),
            "avx_vnni" => std::is_x86_feature_detected!("avxvnni"),
            _ => false,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = feature;
        false
    }
}

/// An error unless this CPU has what the AVX-512 kernels need (the environment aside): the
/// guard that makes asking for them on another CPU an error, not an illegal instruction.
pub(super) fn wide_cpu() -> candle_core::Result<()> {
    if row_kernels(cpu_has, |_| false) != Some(RowKernels::Avx512) {
        candle_core::bail!("qgemv: this CPU lacks AVX-512 F/BW/VNNI");
    }
    Ok(())
}

/// [`row_kernels`] on this machine, decided once per process (asked for every product).
pub(super) fn wide() -> bool {
    static WIDE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WIDE.get_or_init(|| row_kernels(cpu_has, switch_on) == Some(RowKernels::Avx512))
}

/// One activation row in Q8K, with the sums its dot products need per 32-value sub-block.
struct Q8KRow {
    blocks: Vec<BlockQ8K>,
    /// `bsums[2j] + bsums[2j+1]` of each block: the activation's sum over sub-block `j`.
    sums: Vec<[i16; 8]>,
    /// For the AVX-512 kernel only (else empty): each block's 256 quants with its 32-value
    /// sub-blocks in the order 0 2 1 3 4 6 5 7. Why: one 64-byte load of Q4K quants holds
    /// sub-blocks 4h, 4h+2 in its low nibbles and 4h+1, 4h+3 in its high ones, so in this order
    /// the matching activation bytes are one 64-byte load each. The row is reordered once and
    /// read by every weight row of the product.
    wide: Vec<[i8; QK_K]>,
}

impl Q8KRow {
    fn new(x: &[f32], wide: bool) -> Self {
        let nb = x.len() / QK_K;
        let mut blocks = vec![BlockQ8K::zeros(); nb];
        quantize_q8k(x, &mut blocks);
        let sums = blocks.iter().map(sub_block_sums).collect();
        let wide = if wide {
            const ORDER: [usize; 8] = [0, 2, 1, 3, 4, 6, 5, 7];
            blocks
                .iter()
                .map(|b| {
                    let q = &block_bytes(b)[4..4 + QK_K];
                    std::array::from_fn(|i| q[32 * ORDER[i / 32] + i % 32] as i8)
                })
                .collect()
        } else {
            Vec::new()
        };
        Self { blocks, sums, wide }
    }
}

/// `x` (whole blocks of 256 values) in candle's Q8K, bit for bit as `BlockQ8K::from_float`
/// (tests), vectorised where [`available`] holds. Why: candle's loop rounds each value by a call
/// to libm's `roundf`, and it runs on the calling thread before every decode product while the
/// pool's other thread waits: 2.2 % of a q4k decode's samples (`perf`, 240 tokens, 2 threads),
/// and below 0.4 % this way.
pub(super) fn quantize_q8k(x: &[f32], blocks: &mut [BlockQ8K]) {
    if !available() || x.len() != blocks.len() * QK_K {
        return BlockQ8K::from_float(x, blocks);
    }
    for (xb, b) in x.chunks_exact(QK_K).zip(blocks) {
        // SAFETY: AVX2/FMA/F16C are here (`available`); `xb` is one block's 256 values.
        unsafe { x86::q8k(xb, b) }
    }
}

/// The sums of a Q8K block's quants over each of its eight 32-value sub-blocks, from its 16
/// sums of 16 (what the Q4K min term needs, in [`Q8KRow`] and in `qgemm`'s activation).
pub(super) fn sub_block_sums(b: &BlockQ8K) -> [i16; 8] {
    let bytes = block_bytes(b);
    let bsum = |i: usize| i16::from_le_bytes([bytes[260 + 2 * i], bytes[261 + 2 * i]]);
    // Sums of 32 int8 values: |Σ| ≤ 32·128, which fits i16.
    std::array::from_fn(|j| bsum(2 * j) + bsum(2 * j + 1))
}

fn block_bytes<T>(b: &T) -> &[u8] {
    // SAFETY: ggml blocks are `repr(C)` plain data without padding (candle asserts each
    // block's size is the sum of its fields), so every byte is initialised.
    unsafe { std::slice::from_raw_parts((b as *const T).cast(), std::mem::size_of::<T>()) }
}

/// One activation row in Q8_0 (candle's quantization) and its factors as f32.
struct Q8_0Row {
    blocks: Vec<BlockQ8_0>,
    d: Vec<f32>,
}

impl Q8_0Row {
    fn new(x: &[f32]) -> Self {
        let mut blocks = vec![BlockQ8_0::zeros(); x.len() / QK8_0];
        BlockQ8_0::from_float(x, &mut blocks);
        let d = blocks
            .iter()
            .map(|b| {
                let bytes = block_bytes(b);
                half::f16::from_le_bytes([bytes[0], bytes[1]]).to_f32()
            })
            .collect();
        Self { blocks, d }
    }
}

/// `dst[i·n + c] = Σ lhs[i·k + ..] · w[c]` for the `m` rows of `lhs` (`[m, k]`) and the `n`
/// Q4K rows of `w` (`[n, k/256]` blocks). Call only where [`available`] holds.
pub(crate) fn q4k(
    mkn: (usize, usize, usize),
    lhs: &[f32],
    w: &[BlockQ4K],
    dst: &mut [f32],
) -> candle_core::Result<()> {
    q4k_on(wide(), mkn, lhs, w, dst)
}

/// [`q4k`] through the AVX-512 kernel (`wide`, where [`row_kernels`] allows it) or the AVX2 one.
fn q4k_on(
    wide: bool,
    mkn: (usize, usize, usize),
    lhs: &[f32],
    w: &[BlockQ4K],
    dst: &mut [f32],
) -> candle_core::Result<()> {
    let quantize = |x: &[f32]| Q8KRow::new(x, wide);
    products(wide, mkn, QK_K, lhs, w, dst, quantize, |row, y| {
        // SAFETY: `products` checked `available()`, and AVX-512 F/BW/VNNI (`wide_cpu`) where
        // `wide`; `y` has its reordered quants exactly when `wide`; equal block counts.
        unsafe {
            if wide {
                x86::q4k_512(row, y)
            } else {
                x86::q4k(row, y)
            }
        }
    })
}

/// As [`q4k`], for Q8_0 rows (`[n, k/32]` blocks).
pub(crate) fn q8_0(
    mkn: (usize, usize, usize),
    lhs: &[f32],
    w: &[BlockQ8_0],
    dst: &mut [f32],
) -> candle_core::Result<()> {
    products(false, mkn, QK8_0, lhs, w, dst, Q8_0Row::new, |row, y| {
        // SAFETY: as in `q4k`.
        unsafe { x86::q8_0(row, y) }
    })
}

/// A dense weight's stored value: f32, or bf16 as the checkpoint stores it (see
/// [`super::linear`]: an f32 model keeps a bf16 checkpoint's weights bf16). A bf16 value widens
/// exactly (its bits are the top half of an f32), in registers as it is loaded, so every
/// kernel over bf16 weights gives the same sums, in the same order, as over the widened f32
/// ones, bit for bit, while reading half the bytes.
pub trait DenseElem: Copy + Send + Sync + 'static {
    /// Stored bf16 (else f32).
    const BF16: bool;
    /// The value as f32 (exact).
    fn widen(self) -> f32;
}

impl DenseElem for f32 {
    const BF16: bool = false;
    fn widen(self) -> f32 {
        self
    }
}

impl DenseElem for half::bf16 {
    const BF16: bool = true;
    fn widen(self) -> f32 {
        self.to_f32()
    }
}

/// As [`q4k`], for dense rows (`w` `[n, k]`, row-major, f32 or bf16): `dst = lhs · wᵀ`. Call
/// only where [`available`] holds.
pub(crate) fn dense<W: DenseElem>(
    mkn: (usize, usize, usize),
    lhs: &[f32],
    w: &[W],
    dst: &mut [f32],
) -> candle_core::Result<()> {
    dense_on(wide(), mkn, lhs, w, dst)
}

/// [`dense`] through the AVX-512 kernel (`wide`) or the AVX2 one, as [`q4k_on`].
fn dense_on<W: DenseElem>(
    wide: bool,
    mkn: (usize, usize, usize),
    lhs: &[f32],
    w: &[W],
    dst: &mut [f32],
) -> candle_core::Result<()> {
    products(wide, mkn, 1, lhs, w, dst, <[f32]>::to_vec, |row, y| {
        // SAFETY: as in `q4k_on`; `row` and `y` are both `k` long.
        unsafe {
            if wide {
                x86::dense_512(row, y)
            } else {
                x86::dense(row, y)
            }
        }
    })
}

/// An error unless a product of `(m, k, n)` in blocks of `block` values fits `lhs`, the
/// weight's block count and `dst` (their lengths): a wrong shape is an error, never a read
/// or write outside them. `who` names the kernel in the message.
pub(super) fn check_shapes(
    who: &str,
    (m, k, n): (usize, usize, usize),
    block: usize,
    (lhs, blocks, dst): (usize, usize, usize),
) -> candle_core::Result<()> {
    if k % block != 0 || lhs != m * k || blocks != n * (k / block) || dst != m * n {
        candle_core::bail!(
            "{who}: shapes (m {m}, k {k}, n {n}) against lhs {lhs}, {blocks} blocks, dst {dst}"
        );
    }
    Ok(())
}

/// The shared frame of the kernels: the CPU and shape checks (`wide`: the caller's `dot` runs
/// AVX-512 code), the activation rows quantized once, and the weight rows (columns of the
/// product) split across candle's thread pool — the one its own kernels use, so the two never
/// compete for cores. Each weight row is read once from memory for all `m` activation rows.
// Eight: the product's own five, its block size, and the two steps that differ per format.
#[allow(clippy::too_many_arguments)]
fn products<W: Sync, Y: Sync>(
    wide: bool,
    (m, k, n): (usize, usize, usize),
    block: usize,
    lhs: &[f32],
    w: &[W],
    dst: &mut [f32],
    quantize: impl Fn(&[f32]) -> Y,
    dot: impl Fn(&[W], &Y) -> f32 + Sync,
) -> candle_core::Result<()> {
    if !available() {
        candle_core::bail!("qgemv: this CPU lacks AVX2/FMA/F16C");
    }
    if wide {
        wide_cpu()?;
    }
    check_shapes("qgemv", (m, k, n), block, (lhs.len(), w.len(), dst.len()))?;
    let nb = k / block;
    let rows: Vec<Y> = lhs.chunks(k).map(quantize).collect();
    let dst_at = dst.as_mut_ptr() as usize;
    candle_core::utils::barrier_pool().execute_chunked(n, |cols| {
        for c in cols {
            let row = &w[c * nb..(c + 1) * nb];
            for (i, y) in rows.iter().enumerate() {
                let v = dot(row, y);
                // SAFETY: each (i, c) is written by exactly one work item (columns are split
                // across the pool without overlap), and `i·n + c < m·n = dst.len()`.
                unsafe { *(dst_at as *mut f32).add(i * n + c) = v };
            }
        }
    });
    Ok(())
}

/// For [`super::qgemm`]'s tiles, which unpack the same scale bytes.
#[cfg(target_arch = "x86_64")]
pub(super) use x86::scales_mins;

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{BlockQ4K, BlockQ8_0, DenseElem, Q8KRow, Q8_0Row, Q8_0_BYTES, QK_K};
    use std::arch::x86_64::*;

    /// How far ahead of the block in use the weights are prefetched. Why prefetch at all: the
    /// weight rows are one long sequential stream, yet the hardware prefetcher alone left the
    /// 2-thread Q8_0 product at 26 GB/s; asking for the line 2 KiB ahead made it 33 GB/s
    /// (`k=2048, n=11008`, 10 copies; 1 KiB: 31, 4 KiB: 32). A prefetch past the matrix's end
    /// is harmless (it never faults), hence `wrapping_add`.
    const PREFETCH: usize = 2048;

    /// As [`PREFETCH`], for the AVX-512 Q4K kernel, which walks the stream about half again as
    /// fast: 2-thread product `k=2048, n=11008`, 20 copies, 2 and 4 KiB alternated eight times on
    /// the AVX-512 AMD, median 31.1 → 34.0 GB/s (in three such sets 4 KiB led; 8 KiB between).
    const PREFETCH_WIDE: usize = 4096;

    /// The 8 scales then the 8 mins of a Q4K block (six bits each, one byte each), from its
    /// 12 packed bytes at `s`: scales 0-3 and mins 0-3 are the low six bits of bytes 0-3 and
    /// 4-7; scales 4-7 are the low nibbles of bytes 8-11 under the top two bits of bytes 0-3;
    /// mins 4-7 the high nibbles of bytes 8-11 under the top two bits of bytes 4-7.
    #[inline(always)]
    pub(crate) unsafe fn scales_mins(s: *const u8) -> __m128i {
        // Bytes 12..16 (the first quants) come along and are dropped.
        let v = _mm_loadu_si128(s as *const __m128i);
        let low = _mm_shuffle_epi8(
            v,
            _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11),
        );
        // The mins' nibbles are the high ones: shift that dword down before masking.
        let low = _mm_srlv_epi32(low, _mm_setr_epi32(0, 0, 0, 4));
        let low = _mm_and_si128(
            low,
            _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f),
        );
        let top = _mm_shuffle_epi8(
            v,
            _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7),
        );
        // (byte >> 6) << 4, bytewise: the dword shift brings the next byte's bits into bits
        // 6-7 only, which the mask drops.
        let top = _mm_and_si128(_mm_srli_epi32(top, 2), _mm_set1_epi8(0x30));
        _mm_or_si128(low, top)
    }

    /// The dot product of one Q4K weight row with one Q8K activation row.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn q4k(w: &[BlockQ4K], y: &Q8KRow) -> f32 {
        let lo_nibbles = _mm256_set1_epi8(0x0f);
        // pshufb masks spreading scale byte `s` over the 16 i16 lanes of each 128-bit half.
        let spread: [__m256i; 8] =
            std::array::from_fn(|s| _mm256_set1_epi16(0xff00u16 as i16 | s as i16));
        let mut acc = _mm256_setzero_ps();
        let mut acc_min = _mm_setzero_ps();
        for ((wb, yb), ysum) in w.iter().zip(&y.blocks).zip(&y.sums) {
            let wp = (wb as *const BlockQ4K).cast::<u8>();
            let yp = (yb as *const super::BlockQ8K).cast::<u8>();
            let (dm, sm) = q4k_head(PREFETCH, wp, yp, ysum, &mut acc_min);
            let scales = _mm256_broadcastsi128_si256(sm);
            let qs = wp.add(16);
            let q8 = yp.add(4);
            let mut sum = _mm256_setzero_si256();
            // 64 weights per step: low nibbles are sub-block 2j, high nibbles 2j+1.
            for j in 0..QK_K / 64 {
                let q4 = _mm256_loadu_si256(qs.add(32 * j) as *const __m256i);
                let lo = _mm256_and_si256(q4, lo_nibbles);
                let hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), lo_nibbles);
                let y_lo = _mm256_loadu_si256(q8.add(64 * j) as *const __m256i);
                let y_hi = _mm256_loadu_si256(q8.add(64 * j + 32) as *const __m256i);
                let p_lo = _mm256_madd_epi16(
                    _mm256_maddubs_epi16(lo, y_lo),
                    _mm256_shuffle_epi8(scales, spread[2 * j]),
                );
                let p_hi = _mm256_madd_epi16(
                    _mm256_maddubs_epi16(hi, y_hi),
                    _mm256_shuffle_epi8(scales, spread[2 * j + 1]),
                );
                sum = _mm256_add_epi32(sum, _mm256_add_epi32(p_lo, p_hi));
            }
            acc = _mm256_fmadd_ps(_mm256_broadcastss_ps(dm), _mm256_cvtepi32_ps(sum), acc);
        }
        let s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
        let s = _mm_sub_ps(s, acc_min);
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    /// What both Q4K kernels do once per block, before its quants: prefetch the block `ahead`
    /// bytes ahead, convert `[d, dmin]` times the activation's `d` (returned, as
    /// lanes 0 and 1), unpack the scales and mins (returned), and add `dmin·y.d·Σ_j m_j Σ y_q`
    /// to `acc_min` (the min term, subtracted at the end).
    #[inline(always)]
    unsafe fn q4k_head(
        ahead: usize,
        wp: *const u8,
        yp: *const u8,
        ysum: &[i16; 8],
        acc_min: &mut __m128,
    ) -> (__m128, __m128i) {
        // The block's three cache lines.
        for line in [0, 64, 128] {
            _mm_prefetch::<_MM_HINT_T0>(wp.wrapping_add(ahead + line) as *const i8);
        }
        let yd = _mm_set1_ps((yp as *const f32).read_unaligned());
        let dm = _mm_mul_ps(
            _mm_cvtph_ps(_mm_cvtsi32_si128((wp as *const i32).read_unaligned())),
            yd,
        );
        let sm = scales_mins(wp.add(4));
        // The mins (bytes 8..16) widened to i16, times the activation's sub-block sums.
        let mins = _mm_shuffle_epi8(
            sm,
            _mm_setr_epi8(8, -1, 9, -1, 10, -1, 11, -1, 12, -1, 13, -1, 14, -1, 15, -1),
        );
        let mins_y = _mm_madd_epi16(mins, _mm_loadu_si128(ysum.as_ptr() as *const __m128i));
        *acc_min = _mm_fmadd_ps(
            _mm_shuffle_ps::<0x55>(dm, dm),
            _mm_cvtepi32_ps(mins_y),
            *acc_min,
        );
        (dm, sm)
    }

    /// [`q4k`] on AVX-512: 128 weights per step (one 64-byte load of quants, against the
    /// activation's reordered quants, `Q8KRow::wide`), and the scaled pair sums accumulated by
    /// VNNI's `vpdpwssd` instead of a multiply and an add. Same integer sums per sub-block as
    /// the AVX2 kernel, so the same float result up to the order of the final additions.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
    pub(super) unsafe fn q4k_512(w: &[BlockQ4K], y: &Q8KRow) -> f32 {
        let lo_nibbles = _mm512_set1_epi8(0x0f);
        // pshufb masks spreading scale byte `a` over the i16 lanes of the low 256 bits and
        // `b` over the high 256 bits: the sub-blocks one load's low (or high) nibbles hold.
        let spread = |a: i16, b: i16| {
            let a = _mm512_set1_epi16(0xff00u16 as i16 | a);
            _mm512_inserti64x4::<1>(a, _mm256_set1_epi16(0xff00u16 as i16 | b))
        };
        let spread = [spread(0, 2), spread(1, 3), spread(4, 6), spread(5, 7)];
        let mut acc = _mm512_setzero_ps();
        let mut acc_min = _mm_setzero_ps();
        for (((wb, yb), ysum), yq) in w.iter().zip(&y.blocks).zip(&y.sums).zip(&y.wide) {
            let wp = (wb as *const BlockQ4K).cast::<u8>();
            let yp = (yb as *const super::BlockQ8K).cast::<u8>();
            let (dm, sm) = q4k_head(PREFETCH_WIDE, wp, yp, ysum, &mut acc_min);
            let scales = _mm512_broadcast_i32x4(sm);
            let qs = wp.add(16);
            let q8 = yq.as_ptr();
            let mut sum = _mm512_setzero_si512();
            for h in 0..2 {
                let q4 = _mm512_loadu_si512(qs.add(64 * h) as *const _);
                let lo = _mm512_and_si512(q4, lo_nibbles);
                let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(q4), lo_nibbles);
                let y_lo = _mm512_loadu_si512(q8.add(128 * h) as *const _);
                let y_hi = _mm512_loadu_si512(q8.add(128 * h + 64) as *const _);
                sum = _mm512_dpwssd_epi32(
                    sum,
                    _mm512_maddubs_epi16(lo, y_lo),
                    _mm512_shuffle_epi8(scales, spread[2 * h]),
                );
                sum = _mm512_dpwssd_epi32(
                    sum,
                    _mm512_maddubs_epi16(hi, y_hi),
                    _mm512_shuffle_epi8(scales, spread[2 * h + 1]),
                );
            }
            let d = _mm512_broadcastss_ps(dm);
            acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(sum), acc);
        }
        let s = _mm_sub_ps(_mm_setzero_ps(), acc_min);
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm512_reduce_add_ps(acc) + _mm_cvtss_f32(s)
    }

    /// `d_w·d_y·Σ w·y` of one 32-value block pair, added to `acc`; `d` is `d_w·d_y` in lane 0.
    /// `maddubs` multiplies unsigned by signed bytes, so the weight's sign moves onto the
    /// activation: |w| · sign(w)·y (|−128| = 128 is right as an unsigned byte; the activation
    /// is candle's quantization, within ±127, so negating it cannot overflow, and pair sums
    /// stay within 2·128·127 < 2¹⁵).
    #[inline(always)]
    unsafe fn q8_0_block(w: *const u8, y: *const u8, d: __m128, acc: __m256) -> __m256 {
        let w = _mm256_loadu_si256(w as *const __m256i);
        let y = _mm256_loadu_si256(y as *const __m256i);
        let pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(y, w));
        let sums = _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
        _mm256_fmadd_ps(_mm256_broadcastss_ps(d), _mm256_cvtepi32_ps(sums), acc)
    }

    /// The dot product of one Q8_0 weight row with one Q8_0 activation row.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn q8_0(w: &[BlockQ8_0], y: &Q8_0Row) -> f32 {
        let wp = w.as_ptr().cast::<u8>();
        let yp = y.blocks.as_ptr().cast::<u8>();
        let at = |b: usize| b * Q8_0_BYTES;
        let mut acc = [_mm256_setzero_ps(); 2];
        let nb = w.len();
        let mut b = 0;
        while b + 2 <= nb {
            _mm_prefetch::<_MM_HINT_T0>(wp.wrapping_add(at(b) + PREFETCH) as *const i8);
            // Both blocks' f16 factors in one conversion.
            let d0 = (wp.add(at(b)) as *const u16).read_unaligned() as i32;
            let d1 = (wp.add(at(b + 1)) as *const u16).read_unaligned() as i32;
            let dw = _mm_cvtph_ps(_mm_cvtsi32_si128(d0 | (d1 << 16)));
            let dy = _mm_castpd_ps(_mm_load_sd(y.d.as_ptr().add(b) as *const f64));
            let d = _mm_mul_ps(dw, dy);
            acc[0] = q8_0_block(wp.add(at(b) + 2), yp.add(at(b) + 2), d, acc[0]);
            acc[1] = q8_0_block(
                wp.add(at(b + 1) + 2),
                yp.add(at(b + 1) + 2),
                _mm_movehdup_ps(d),
                acc[1],
            );
            b += 2;
        }
        if b < nb {
            let d0 = (wp.add(at(b)) as *const u16).read_unaligned() as i32;
            let d = _mm_mul_ss(_mm_cvtph_ps(_mm_cvtsi32_si128(d0)), _mm_set_ss(y.d[b]));
            acc[0] = q8_0_block(wp.add(at(b) + 2), yp.add(at(b) + 2), d, acc[0]);
        }
        let acc = _mm256_add_ps(acc[0], acc[1]);
        let s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    /// Eight weights from `p` as f32 (bf16 widened: zero-extended, shifted into the top half).
    #[inline(always)]
    unsafe fn load8<W: DenseElem>(p: *const W) -> __m256 {
        if W::BF16 {
            let h = _mm_loadu_si128(p as *const __m128i);
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
        } else {
            _mm256_loadu_ps(p as *const f32)
        }
    }

    /// Sixteen weights from `p` as f32, the lanes outside `mask` zero and not read.
    #[inline(always)]
    unsafe fn load16_masked<W: DenseElem>(p: *const W, mask: __mmask16) -> __m512 {
        if W::BF16 {
            let h = _mm512_maskz_loadu_epi16(__mmask32::from(mask), p as *const i16);
            let h = _mm512_castsi512_si256(h);
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
        } else {
            _mm512_maskz_loadu_ps(mask, p as *const f32)
        }
    }

    /// Sixteen weights from `p` as f32.
    #[inline(always)]
    unsafe fn load16<W: DenseElem>(p: *const W) -> __m512 {
        if W::BF16 {
            let h = _mm256_loadu_si256(p as *const __m256i);
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
        } else {
            _mm512_loadu_ps(p as *const f32)
        }
    }

    /// Prefetches the cache lines that `values` weights from `at` span.
    #[inline(always)]
    unsafe fn prefetch<W: DenseElem>(at: *const u8, values: usize) {
        let mut line = 0;
        while line < values * std::mem::size_of::<W>() {
            _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(line) as *const i8);
            line += 64;
        }
    }

    /// The dot product of a weight row (f32 or bf16) and an f32 row of equal length: 32 values
    /// per step into four accumulators, so that consecutive FMAs do not wait on each other.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dense<W: DenseElem>(w: &[W], y: &[f32]) -> f32 {
        let k = w.len().min(y.len());
        let (wp, yp) = (w.as_ptr(), y.as_ptr());
        let size = std::mem::size_of::<W>();
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i + 32 <= k {
            prefetch::<W>(wp.cast::<u8>().wrapping_add(size * i + PREFETCH), 32);
            for (j, a) in acc.iter_mut().enumerate() {
                let at = i + 8 * j;
                *a = _mm256_fmadd_ps(load8(wp.add(at)), _mm256_loadu_ps(yp.add(at)), *a);
            }
            i += 32;
        }
        while i + 8 <= k {
            acc[0] = _mm256_fmadd_ps(load8(wp.add(i)), _mm256_loadu_ps(yp.add(i)), acc[0]);
            i += 8;
        }
        let acc = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        let s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        let mut total = _mm_cvtss_f32(s);
        while i < k {
            total += (*wp.add(i)).widen() * *yp.add(i);
            i += 1;
        }
        total
    }

    /// One block of [`super::quantize_q8k`]: candle's steps (the first value of the largest
    /// magnitude, NaN skipped, sets `iscale = −127/max`; each value `round(iscale·x)`, ties
    /// away from zero, clamped to ±127/−128, NaN to 0; 16 sums of 16; `d = 1/iscale`) on 8
    /// lanes. The rounding is exact: `x − trunc(x)` has no rounding error, so comparing it
    /// with ½ decides the tie as `f32::round` does.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn q8k(x: &[f32], y: &mut super::BlockQ8K) {
        use super::{Q8K_BYTES, QK_K};
        assert_eq!(x.len(), QK_K);
        let xp = x.as_ptr();
        let out = (y as *mut super::BlockQ8K).cast::<u8>();
        let sign = _mm256_set1_ps(-0.0);
        let abs = |i: usize| _mm256_andnot_ps(sign, _mm256_loadu_ps(xp.add(i)));
        // `max_ps(a, b)` is `b` when `a` is NaN: NaN values never become the maximum.
        let mut amax = _mm256_setzero_ps();
        for i in (0..QK_K).step_by(8) {
            amax = _mm256_max_ps(abs(i), amax);
        }
        let mut lanes = [0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), amax);
        let amax = lanes.iter().fold(0f32, |m, &v| m.max(v));
        if amax == 0.0 {
            // All zeros (or NaN): `d`, the quants and the sums are 0, as in candle.
            std::ptr::write_bytes(out, 0, Q8K_BYTES);
            return;
        }
        let mut first = 0;
        for i in (0..QK_K).step_by(8) {
            let hit = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(abs(i), _mm256_set1_ps(amax)));
            if hit != 0 {
                first = i + hit.trailing_zeros() as usize;
                break;
            }
        }
        let iscale = -127f32 / x[first];
        let scale = _mm256_set1_ps(iscale);
        let (half, one) = (_mm256_set1_ps(0.5), _mm256_set1_ps(1.0));
        let (lo, hi) = (_mm256_set1_ps(-128.0), _mm256_set1_ps(127.0));
        let quant = |i: usize| {
            let v = _mm256_mul_ps(_mm256_loadu_ps(xp.add(i)), scale);
            let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(v);
            let away =
                _mm256_cmp_ps::<_CMP_GE_OQ>(_mm256_andnot_ps(sign, _mm256_sub_ps(v, t)), half);
            let r = _mm256_add_ps(
                t,
                _mm256_and_ps(away, _mm256_or_ps(_mm256_and_ps(v, sign), one)),
            );
            // NaN → 0 (Rust's `as i8`), before the clamp (`max_ps(NaN, c)` would give `c`).
            let r = _mm256_and_ps(r, _mm256_cmp_ps::<_CMP_ORD_Q>(r, r));
            _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi))
        };
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        for g in 0..QK_K / 32 {
            let [a, b, c, d] = [0, 8, 16, 24].map(|o| quant(32 * g + o));
            // packs works within 128-bit halves: dwords come out as a0-3 b0-3 c0-3 d0-3 a4-7
            // b4-7 c4-7 d4-7, put back in order by one permutation.
            let bytes = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
            let bytes = _mm256_permutevar8x32_epi32(bytes, order);
            _mm256_storeu_si256(out.add(4 + 32 * g) as *mut __m256i, bytes);
            // Sums of values 0-15 and 16-31 of the group.
            let h = _mm256_hadd_epi32(_mm256_add_epi32(a, b), _mm256_add_epi32(c, d));
            let h = _mm256_hadd_epi32(h, h);
            let s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
            let sums = [
                _mm_cvtsi128_si32(s) as i16,
                _mm_extract_epi32::<1>(s) as i16,
            ];
            for (j, v) in sums.iter().enumerate() {
                let at = out.add(4 + QK_K + 2 * (2 * g + j));
                std::ptr::copy_nonoverlapping(v.to_le_bytes().as_ptr(), at, 2);
            }
        }
        std::ptr::copy_nonoverlapping((1.0 / iscale).to_le_bytes().as_ptr(), out, 4);
    }

    /// [`dense`] on AVX-512: 64 values per step into four accumulators; the tail of fewer
    /// than 64 goes through one masked step per 16 values.
    #[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
    pub(super) unsafe fn dense_512<W: DenseElem>(w: &[W], y: &[f32]) -> f32 {
        let k = w.len().min(y.len());
        let (wp, yp) = (w.as_ptr(), y.as_ptr());
        let size = std::mem::size_of::<W>();
        let mut acc = [_mm512_setzero_ps(); 4];
        let mut i = 0;
        while i + 64 <= k {
            prefetch::<W>(wp.cast::<u8>().wrapping_add(size * i + PREFETCH), 64);
            for (j, a) in acc.iter_mut().enumerate() {
                let at = i + 16 * j;
                *a = _mm512_fmadd_ps(load16(wp.add(at)), _mm512_loadu_ps(yp.add(at)), *a);
            }
            i += 64;
        }
        while i < k {
            let mask = ((1u32 << (k - i).min(16)) - 1) as __mmask16;
            acc[0] = _mm512_fmadd_ps(
                load16_masked(wp.add(i), mask),
                _mm512_maskz_loadu_ps(mask, yp.add(i)),
                acc[0],
            );
            i += 16;
        }
        let acc = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
        _mm512_reduce_add_ps(acc)
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod x86 {
    pub(super) unsafe fn q4k(_: &[super::BlockQ4K], _: &super::Q8KRow) -> f32 {
        unreachable!("qgemv::available() is false off x86_64")
    }
    pub(super) unsafe fn q8_0(_: &[super::BlockQ8_0], _: &super::Q8_0Row) -> f32 {
        unreachable!("qgemv::available() is false off x86_64")
    }
    pub(super) unsafe fn dense<W>(_: &[W], _: &[f32]) -> f32 {
        unreachable!("qgemv::available() is false off x86_64")
    }
    pub(super) unsafe fn q4k_512(_: &[super::BlockQ4K], _: &super::Q8KRow) -> f32 {
        unreachable!("qgemv::available() is false off x86_64")
    }
    pub(super) unsafe fn dense_512<W>(_: &[W], _: &[f32]) -> f32 {
        unreachable!("qgemv::available() is false off x86_64")
    }
    pub(super) unsafe fn q8k(_: &[f32], _: &mut super::BlockQ8K) {
        unreachable!("qgemv::available() is false off x86_64")
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use candle_core::quantized::k_quants;

    pub(crate) fn lcg(seed: u64, n: usize) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5
            })
            .collect()
    }

    /// Weights that exercise every scale and min bit of Q4K and both signs and the extremes of
    /// Q8_0: random rows, a constant row (all-equal quants), a row with outliers (six-bit
    /// scales at their top values, most int8 quants near zero), a row alternating sign with
    /// an offset (non-zero mins).
    pub(crate) fn weights(n: usize, k: usize) -> Vec<f32> {
        let mut w = lcg(1, n * k);
        w[..k].iter_mut().for_each(|v| *v = 0.25);
        for (i, v) in w[k..2 * k].iter_mut().enumerate() {
            *v *= if i % 97 == 0 { 40.0 } else { 0.01 };
        }
        for (i, v) in w[2 * k..3 * k].iter_mut().enumerate() {
            *v = if i % 2 == 0 { -*v } else { *v + 3.0 };
        }
        w
    }

    type FewRows<T> =
        fn((usize, usize, usize), &[f32], &[T], &mut [f32]) -> candle_core::Result<()>;

    /// Our Q8K quantization of an activation equals candle's `BlockQ8K::from_float` byte for
    /// byte: random blocks at three scales, exact halves after scaling (ties go away from zero)
    /// with the largest magnitude twice in opposite signs (the first one sets the sign), a
    /// zero block, NaN and infinities among the values, an all-NaN block, and a block whose
    /// largest value is subnormal (its scale overflows to infinity).
    #[test]
    fn q8k_quantization_equals_candle() {
        if !available_or_skip() {
            return;
        }
        let mut x = Vec::new();
        for scale in [1e-3f32, 1.0, 1e4] {
            x.extend(lcg(3, QK_K).iter().map(|v| v * scale));
        }
        for first in [-127f32, 127.0] {
            let mut b: Vec<f32> = (0..QK_K).map(|i| (i % 200) as f32 * 0.5 - 50.25).collect();
            b.iter_mut().step_by(3).for_each(|v| *v = v.trunc() + 0.5);
            (b[5], b[6], b[9]) = (first, -first, -first);
            x.extend(b);
        }
        x.extend([0f32; QK_K]);
        let mut b = lcg(4, QK_K);
        (b[1], b[30], b[100], b[255]) = (f32::NAN, f32::INFINITY, f32::NEG_INFINITY, f32::NAN);
        x.extend(b);
        x.extend([f32::NAN; QK_K]);
        let mut b = vec![0f32; QK_K];
        (b[7], b[8], b[200]) = (1e-40, -3e-41, 5e-41);
        x.extend(b);
        let nb = x.len() / QK_K;
        let (mut ours, mut want) = (vec![BlockQ8K::zeros(); nb], vec![BlockQ8K::zeros(); nb]);
        quantize_q8k(&x, &mut ours);
        BlockQ8K::from_float(&x, &mut want);
        for (i, (o, w)) in ours.iter().zip(&want).enumerate() {
            assert_eq!(block_bytes(o), block_bytes(w), "block {i}");
        }
    }

    /// Ours against candle's ggml kernel (`k_quants::matmul`) on the same blocks: equal up to
    /// float summation order, for one row (decode) and three (a GRPO group, one of them zero).
    fn equals_candle<T: GgmlType>(k: usize, n: usize, ours: FewRows<T>) {
        let mut blocks = vec![T::zeros(); n * k / T::BLCK_SIZE];
        T::from_float(&weights(n, k), &mut blocks);
        for m in [1usize, 3] {
            let mut x = lcg(7 + m as u64, m * k);
            if m == 3 {
                x[k..2 * k].iter_mut().for_each(|v| *v = 0.0);
            }
            let mut got = vec![0f32; m * n];
            ours((m, k, n), &x, &blocks, &mut got).unwrap();
            let mut reference = vec![0f32; m * n];
            k_quants::matmul((m, k, n), &x, &blocks, &mut reference).unwrap();
            let scale = reference.iter().fold(0f32, |a, v| a.max(v.abs()));
            for (i, (a, b)) in got.iter().zip(&reference).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-5 * scale,
                    "{:?} m {m}, element {i}: ours {a}, candle {b} (scale {scale})",
                    T::DTYPE
                );
            }
            if m == 3 {
                assert!(got[n..2 * n].iter().all(|v| *v == 0.0));
            }
        }
    }

    /// The kernel choices this CPU can run: AVX2, and AVX-512 where it has it.
    fn choices() -> Vec<bool> {
        let wide = row_kernels(cpu_has, |_| false) == Some(RowKernels::Avx512);
        if !wide {
            eprintln!("AVX-512 kernels not run: this CPU lacks AVX-512 F/BW/VNNI");
        }
        [false, true].into_iter().filter(|w| !w || wide).collect()
    }

    #[test]
    fn equals_candles_ggml_kernels_on_the_same_blocks() {
        if !available_or_skip() {
            return;
        }
        equals_candle::<BlockQ4K>(1024, 37, |mkn, x, w, d| q4k_on(false, mkn, x, w, d));
        if choices().contains(&true) {
            equals_candle::<BlockQ4K>(1024, 37, |mkn, x, w, d| q4k_on(true, mkn, x, w, d));
        }
        equals_candle::<BlockQ8_0>(1024, 37, q8_0);
        // An odd block count (k = 15·32) takes the Q8_0 kernel's one-block tail.
        equals_candle::<BlockQ8_0>(480, 5, q8_0);
    }

    /// The f32 rows against the same sums taken in f64, for widths that exercise each
    /// kernel's body (32 / 64 wide) and tails (8-wide and scalar / masked).
    #[test]
    fn f32_rows_equal_the_sums_in_double_precision() {
        if !available_or_skip() {
            return;
        }
        for ((k, n), wide) in [(1024usize, 37usize), (1000, 5), (1003, 6), (7, 3), (64, 3)]
            .into_iter()
            .flat_map(|kn| choices().into_iter().map(move |w| (kn, w)))
        {
            let w = weights(n, k);
            for m in [1usize, 3] {
                let x = lcg(11 + m as u64, m * k);
                let mut got = vec![0f32; m * n];
                dense_on(wide, (m, k, n), &x, &w, &mut got).unwrap();
                for i in 0..m {
                    for c in 0..n {
                        let exact: f64 = (0..k)
                            .map(|j| x[i * k + j] as f64 * w[c * k + j] as f64)
                            .sum();
                        let size: f64 = (0..k)
                            .map(|j| (x[i * k + j] as f64 * w[c * k + j] as f64).abs())
                            .sum();
                        let got = got[i * n + c] as f64;
                        assert!(
                            (got - exact).abs() <= 1e-6 * size.max(1.0),
                            "k {k} m {m} row {i} col {c} (avx512 {wide}): {got} against {exact}"
                        );
                    }
                }
            }
        }
        let mut dst = vec![0f32; 2];
        assert!(dense((1, 8, 2), &[0.0; 8], &[0.0f32; 15], &mut dst).is_err());
        assert!(dense((1, 8, 2), &[0.0; 8], &[half::bf16::ZERO; 15], &mut dst).is_err());
    }

    /// bf16 rows give the bits of the same rows widened to f32 (the sums and their order are
    /// the same), for every width the f32 test takes, one and three activation rows.
    #[test]
    fn bf16_rows_equal_the_widened_f32_rows_bit_for_bit() {
        if !available_or_skip() {
            return;
        }
        for ((k, n), wide) in [(1024usize, 37usize), (1000, 5), (1003, 6), (7, 3), (64, 3)]
            .into_iter()
            .flat_map(|kn| choices().into_iter().map(move |w| (kn, w)))
        {
            let w: Vec<half::bf16> = weights(n, k)
                .into_iter()
                .map(half::bf16::from_f32)
                .collect();
            let widened: Vec<f32> = w.iter().map(|v| v.to_f32()).collect();
            for m in [1usize, 3] {
                let x = lcg(5 + m as u64, m * k);
                let (mut got, mut want) = (vec![0f32; m * n], vec![0f32; m * n]);
                dense_on(wide, (m, k, n), &x, &w, &mut got).unwrap();
                dense_on(wide, (m, k, n), &x, &widened, &mut want).unwrap();
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "k {k} n {n} m {m} (avx512 {wide})");
                assert!(got.iter().any(|v| *v != 0.0));
            }
        }
    }

    #[test]
    fn a_shape_that_does_not_fit_is_an_error_not_a_wild_write() {
        if !available() {
            return;
        }
        let blocks = vec![BlockQ4K::zeros(); 4];
        let mut dst = vec![0f32; 2];
        let x = vec![0f32; 512];
        // 2 weight rows of 512 need 4 blocks: right. dst for m=1 needs 2: right.
        assert!(q4k((1, 512, 2), &x, &blocks, &mut dst).is_ok());
        assert!(q4k((1, 512, 3), &x, &blocks, &mut dst).is_err());
        assert!(q4k((1, 500, 2), &x[..500], &blocks, &mut dst).is_err());
        assert!(q4k((2, 512, 2), &x, &blocks, &mut dst).is_err());
        let blocks = vec![BlockQ8_0::zeros(); 32];
        assert!(q8_0((1, 512, 2), &x, &blocks, &mut dst).is_ok());
        assert!(q8_0((1, 512, 3), &x, &blocks, &mut dst).is_err());
        assert!(q8_0((1, 500, 2), &x[..500], &blocks, &mut dst).is_err());
    }
}
