//! Quantized weights in ggml blocks that we own, and which kernel multiplies them when.

use super::*;

/// A quantized weight `[n, k]` in ggml blocks, row after row, owned by us rather than by a
/// candle `QTensor`.
///
/// Why not `QTensor`: on x86 candle 0.11 repacks a `QTensor`'s Q4K (and, with VNNI, Q8_0) blocks
/// into a wider tile layout on first use and keeps both for the tensor's lifetime — 0.75 byte
/// per Q4K weight next to the original 0.5625, which put the 3B model's peak memory at 1.5x its
/// weights. Measured on this project's 2-core AVX2 machine (`k=2048, n=11008`): for one row
/// (decode) candle's plain ggml kernel (`k_quants::matmul`) over the compact blocks takes 4.0 ms
/// against 7.4 ms through the repacked tiles, and for 545 rows (prefill) the tiles win, 350 ms
/// against 780 ms. So: few rows run a plain kernel on our blocks (our own, [`crate::qgemv`],
/// where AVX2 is; else candle's); many rows run our tiles on the same blocks
/// ([`crate::qgemm`], Q4K where AVX2 is), else hand a temporary `QTensor` (a copy of the
/// blocks) to candle, which repacks it for that one product and frees both afterwards. That
/// copy and repack, O(n·k) against O(m·n·k) for the product, still cost a third of a 545-row
/// product's time (`k=2048, n=11008`: 53 ms with them against 32 ms on tiles kept).
#[derive(Debug, Clone)]
pub(crate) enum QBlocks {
    /// ggml Q8_0 blocks (`--quant q8_0`).
    Q8_0(Arc<QRows<BlockQ8_0>>),
    /// ggml Q4K super-blocks (`--quant q4k`).
    Q4K(Arc<QRows<BlockQ4K>>),
}

/// Blocks of one matrix and its shape.
pub(crate) struct QRows<T> {
    pub(super) blocks: Vec<T>,
    pub(super) n: usize,
    pub(super) k: usize,
}

impl<T: GgmlType> fmt::Debug for QRows<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "QRows<{:?}>[{}, {}]", T::DTYPE, self.n, self.k)
    }
}

/// Whether candle 0.11.1 runs Q8_0 products of many rows through its repacked int8 tiles:
/// only where the CPU has VNNI (`vpdpbusd`: AVX-512 VNNI, or AVX-VNNI), as its
/// `quantized/repack_x86.rs` selects (`MISTRALRS_FORCE_AVX2=1` forbids them,
/// `MISTRALRS_FORCE_AVXVNNI=1` asks for them); `bench::vlm::kernels` reports the same rule.
/// Elsewhere candle falls back to one ggml dot product per (row, column), which made a q8_0
/// prefill of 545 tokens take 114 s on the 2-core AVX2 machine against 23 s for q4k; there the
/// product runs as f32 `gemm` over the dequantized weight instead.
/// Decided once per process: it is asked for every Q8_0 product (~145 per decoded token).
pub(super) fn candle_tiles_q8_0() -> bool {
    static TILES: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TILES.get_or_init(candle_tiles_q8_0_now)
}

fn candle_tiles_q8_0_now() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        matches!(
            candle_quant_tier(crate::qgemv::cpu_has, crate::qgemv::switch_on),
            Some(CandleTier::Avx512Vnni | CandleTier::AvxVnni)
        )
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether a weight of `n` rows of `k` values has the shape candle 0.11.1's repacked tiles take:
/// `n` a multiple of the tile's 16 rows and `k` of 256, for Q8_0 too (`repack_x86.rs`,
/// `select`). Other shapes fall back to one ggml dot product per (row, column): the vision
/// tower's 3420-row MLP `gate_proj`/`up_proj` under `--vision-quant q8_0` spent 44 % of a
/// `bench vlm` run's samples in `vec_dot_q8_0_q8_0` and took the tower from 8.6 s (f32) to
/// 31 s on 2 AVX-512 cores. Such products run as f32 `gemm` over the dequantized weight instead.
pub(super) fn candle_tile_shape(n: usize, k: usize) -> bool {
    n.is_multiple_of(16) && k.is_multiple_of(256)
}

/// The tier of candle 0.11.1's repacked x86 tiles (`quantized/repack_x86.rs`, `select`/`level`)
/// for CPU features named as /proc/cpuinfo names them (`has`) and the environment (`env`):
/// `MISTRALRS_FORCE_AVX2=1` forbids VNNI, `MISTRALRS_FORCE_AVXVNNI=1` asks for AVX-VNNI.
/// `None`: no tiles (candle's generic dot products). Q4K takes tiles at every tier, Q8_0 only
/// at the VNNI ones. One rule for both the product's routing here and `bench vlm`'s report.
pub fn candle_quant_tier(
    has: impl Fn(&str) -> bool,
    env: impl Fn(&str) -> bool,
) -> Option<CandleTier> {
    let (force_avx2, force_vnni) = (env("MISTRALRS_FORCE_AVX2"), env("MISTRALRS_FORCE_AVXVNNI"));
    if !force_avx2 && !force_vnni && has("avx512f") && has("avx512_vnni") {
        Some(CandleTier::Avx512Vnni)
    } else if !force_avx2 && (force_vnni || has("avx_vnni")) && has("avx2") {
        Some(CandleTier::AvxVnni)
    } else if has("avx2") && has("fma") {
        Some(CandleTier::Avx2)
    } else {
        None
    }
}

/// See [`candle_quant_tier`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CandleTier {
    /// AVX-512 VNNI tiles (Q4K and Q8_0).
    Avx512Vnni,
    /// AVX-VNNI tiles (Q4K and Q8_0).
    AvxVnni,
    /// AVX2 + FMA tiles (Q4K only).
    Avx2,
}

impl CandleTier {
    /// The tier's name as reports print it (`avx512-vnni`, `avx-vnni`, `avx2`).
    pub fn name(self) -> &'static str {
        match self {
            CandleTier::Avx512Vnni => "avx512-vnni",
            CandleTier::AvxVnni => "avx-vnni",
            CandleTier::Avx2 => "avx2",
        }
    }
}

/// A kernel for products of few rows: `(m, k, n)`, `lhs` `[m, k]`, the blocks, `dst` `[m, n]`.
pub(super) type FewRows<T> =
    fn((usize, usize, usize), &[f32], &[T], &mut [f32]) -> candle_core::Result<()>;

/// How a quantized product of [`PACKED_MIN_ROWS`] rows or more runs.
enum ManyRows<T> {
    /// Our kernel over the blocks ([`crate::qgemm`]).
    Ours(FewRows<T>),
    /// Candle's repacked tiles on a temporary `QTensor` copy of the blocks.
    Candle,
    /// The f32 `gemm` on the weight dequantized for this one product.
    Dense,
}

/// Rows at or above which a quantized product takes the many-row kernels (see [`QBlocks`]).
/// Set for candle's tiles; ours ([`crate::qgemm`]) already beat the row kernels from about 16
/// rows (`k=2048, n=11008`, AVX-512 EPYC), not yet measured elsewhere, so it stays.
pub(crate) const PACKED_MIN_ROWS: usize = 32;

/// Quantizes `w` `[n, k]` row by row, in parallel (each row is whole blocks: `k` fits).
pub(super) fn quantize_rows<T: GgmlType>(w: &Tensor) -> candle_core::Result<Arc<QRows<T>>> {
    let (n, k) = w.dims2()?;
    let w = w.to_dtype(DType::F32)?.contiguous()?;
    let per_row = k / T::BLCK_SIZE;
    let mut blocks = vec![T::zeros(); n * per_row];
    {
        let (storage, layout) = w.storage_and_layout();
        let Storage::Cpu(cpu) = &*storage else {
            candle_core::bail!("quantized weights are built on the CPU");
        };
        let data = &cpu.as_slice::<f32>()?[layout.start_offset()..layout.start_offset() + n * k];
        blocks
            .par_chunks_mut(per_row)
            .zip(data.par_chunks(k))
            .for_each(|(dst, row)| T::from_float(row, dst));
    }
    Ok(Arc::new(QRows { blocks, n, k }))
}

/// `w` `[n, k]` as the ggml blocks a quantized [`Proj`] of it holds, as bytes (what
/// [`crate::qcache`] stores). `k` must fit `quant`'s block size.
pub(crate) fn quantize_bytes(w: &Tensor, quant: Quant) -> candle_core::Result<Vec<u8>> {
    fn bytes<T: GgmlType>(r: Arc<QRows<T>>) -> Vec<u8> {
        block_bytes(&r.blocks).to_vec()
    }
    match quant {
        Quant::Q8_0 => quantize_rows::<BlockQ8_0>(w).map(bytes),
        Quant::Q4K => quantize_rows::<BlockQ4K>(w).map(bytes),
        Quant::F32 => candle_core::bail!("quantize_bytes: f32 is not a block format"),
    }
}

/// The raw bytes of ggml blocks.
pub(super) fn block_bytes<T: GgmlType>(blocks: &[T]) -> &[u8] {
    // SAFETY: ggml blocks are `repr(C)` plain data without padding (candle asserts each block's
    // size is the sum of its fields), so every byte is initialised.
    unsafe { std::slice::from_raw_parts(blocks.as_ptr().cast(), std::mem::size_of_val(blocks)) }
}

/// The raw bytes of ggml blocks, writable.
fn block_bytes_mut<T: GgmlType>(blocks: &mut [T]) -> &mut [u8] {
    // SAFETY: as in `block_bytes`; and the fields are integers and f16s (a `u16` inside), for
    // which every byte pattern is a valid value, so any bytes written make valid blocks.
    unsafe {
        std::slice::from_raw_parts_mut(blocks.as_mut_ptr().cast(), std::mem::size_of_val(blocks))
    }
}

impl<T: GgmlType + 'static> QRows<T> {
    /// Stacks the ggml block bytes of `parts` (`U8` tensors `[rows, bytes per row]`, on the
    /// CPU) into one `[n, k]` matrix.
    fn from_bytes(parts: &[Tensor], n: usize, k: usize) -> candle_core::Result<Arc<Self>>
    where
        T: crate::heap::ZeroBits,
    {
        let mut blocks = crate::heap::zeroed::<T>(n * (k / T::BLCK_SIZE));
        let dst = block_bytes_mut(&mut blocks);
        let mut at = 0;
        for t in parts {
            let t = t.contiguous()?;
            let (storage, layout) = t.storage_and_layout();
            let Storage::Cpu(cpu) = &*storage else {
                candle_core::bail!("quantized weights are built on the CPU");
            };
            let start = layout.start_offset();
            let src = &cpu.as_slice::<u8>()?[start..start + t.elem_count()];
            let Some(to) = dst.get_mut(at..at + src.len()) else {
                candle_core::bail!("quantized weight [{n}, {k}]: more block bytes than it holds");
            };
            to.copy_from_slice(src);
            at += src.len();
        }
        if at != dst.len() {
            candle_core::bail!(
                "quantized weight [{n}, {k}]: {at} block bytes, {} expected",
                dst.len()
            );
        }
        Ok(Arc::new(Self { blocks, n, k }))
    }

    pub(super) fn bytes(&self) -> usize {
        std::mem::size_of_val(self.blocks.as_slice())
    }

    /// The weight `[n, k]` in f32, row by row across candle's thread pool: a transient copy
    /// (4 bytes per weight) that lives for one product.
    pub(super) fn dequantize(&self, device: &Device) -> candle_core::Result<Tensor> {
        let (n, k) = (self.n, self.k);
        let per_row = k / T::BLCK_SIZE;
        let mut w = vec![0f32; n * k];
        let at = w.as_mut_ptr() as usize;
        candle_core::utils::barrier_pool().execute_chunked(n, |rows| {
            for r in rows {
                // SAFETY: each row `r < n` is written by exactly one work item, and its `k`
                // values lie inside the `n·k` buffer.
                let dst = unsafe { std::slice::from_raw_parts_mut((at as *mut f32).add(r * k), k) };
                T::to_float(&self.blocks[r * per_row..(r + 1) * per_row], dst);
            }
        });
        Tensor::from_vec(w, (n, k), device)
    }

    /// `xs` `[..., k]` → `[..., n]`, in `xs`'s dtype; fewer than [`PACKED_MIN_ROWS`] rows go
    /// through `few_rows` (a `k_quants::matmul`-shaped kernel over our blocks), more as
    /// `many_rows` says.
    fn forward(
        &self,
        xs: &Tensor,
        few_rows: FewRows<T>,
        many_rows: ManyRows<T>,
    ) -> candle_core::Result<Tensor> {
        let dims = xs.dims();
        let Some((&k, lead)) = dims.split_last() else {
            candle_core::bail!("quantized linear: a scalar input");
        };
        if k != self.k {
            candle_core::bail!(
                "quantized linear: input width {k}, weight expects {}",
                self.k
            );
        }
        let m: usize = lead.iter().product();
        if !xs.device().is_cpu() {
            candle_core::bail!("quantized linear: the quantized kernels run on the CPU only");
        }
        let x32 = xs.to_dtype(DType::F32)?;
        let ours = |kernel: FewRows<T>| -> candle_core::Result<Tensor> {
            let mut dst = vec![0f32; m * self.n];
            // Read where it lies, as `dense_forward` does: a copy of a prompt's 545 × 11008
            // input to `down_proj` was ~24 MB per layer.
            let x32 = x32.contiguous()?;
            with_cpu::<f32, _>(&x32, m * k, |lhs| {
                kernel((m, k, self.n), lhs, &self.blocks, &mut dst)
            })?;
            let mut out = lead.to_vec();
            out.push(self.n);
            Tensor::from_vec(dst, out, xs.device())
        };
        let y = match many_rows {
            _ if m < PACKED_MIN_ROWS => ours(few_rows)?,
            ManyRows::Ours(kernel) => ours(kernel)?,
            ManyRows::Dense => {
                let w = self.dequantize(xs.device())?;
                x32.reshape((m, k))?
                    .matmul(&w.t()?)?
                    .reshape(lead.iter().copied().chain([self.n]).collect::<Vec<_>>())?
            }
            ManyRows::Candle => {
                let q = QTensor::new(QStorage::Cpu(Box::new(self.blocks.clone())), (self.n, k))?;
                QMatMul::from_qtensor(q)?.forward(&x32)?
            }
        };
        y.to_dtype(xs.dtype())
    }
}

impl QBlocks {
    /// The `weight`s `[rows, in_dim]` under each `(vb, rows)`, stacked in order, when the
    /// `VarBuilder`'s backend serves them already quantized; `None` when it does not (the caller
    /// then quantizes the f32 weights itself) or when `quant` is dense or does not fit `in_dim`.
    ///
    /// The protocol: a backend that can serve `X.weight` in `quant` answers `X.weight.<quant>`
    /// (e.g. `….up_proj.weight.q4k`) with a `U8` tensor `[rows, bytes per row]` of ggml blocks.
    /// [`crate::qcache`] does; candle's own backends have no such names. Why through the
    /// `VarBuilder`: the model code stays ordinary `vb.pp(..)` code, and each weight is named
    /// exactly as in the checkpoint.
    pub(super) fn from_backend(
        quant: Quant,
        in_dim: usize,
        parts: &[(VarBuilder, usize)],
    ) -> candle_core::Result<Option<QBlocks>> {
        let Some(row_bytes) = quant.row_bytes(in_dim) else {
            return Ok(None);
        };
        let key = format!("weight.{quant}");
        if !parts.iter().all(|(vb, _)| vb.contains_tensor(&key)) {
            return Ok(None);
        }
        let bytes = parts
            .iter()
            .map(|(vb, rows)| {
                let t = vb.get_with_hints_dtype(
                    (*rows, row_bytes),
                    &key,
                    Default::default(),
                    DType::U8,
                )?;
                if t.dims() != [*rows, row_bytes] || t.dtype() != DType::U8 {
                    candle_core::bail!(
                        "{}.{key}: {:?} {:?} served, U8 [{rows}, {row_bytes}] expected",
                        vb.prefix(),
                        t.dtype(),
                        t.dims()
                    );
                }
                Ok(t)
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        let n = parts.iter().map(|(_, rows)| rows).sum();
        Ok(Some(match quant {
            Quant::Q8_0 => QBlocks::Q8_0(QRows::from_bytes(&bytes, n, in_dim)?),
            Quant::Q4K => QBlocks::Q4K(QRows::from_bytes(&bytes, n, in_dim)?),
            Quant::F32 => return Ok(None),
        }))
    }

    /// Bytes of the blocks.
    pub(crate) fn bytes(&self) -> usize {
        match self {
            QBlocks::Q8_0(r) => r.bytes(),
            QBlocks::Q4K(r) => r.bytes(),
        }
    }

    pub(super) fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        /// Our row kernel where the CPU runs it, else candle's.
        fn few_rows<T: GgmlType>(ours: FewRows<T>) -> FewRows<T> {
            if crate::qgemv::available() {
                ours
            } else {
                k_quants::matmul::<T>
            }
        }
        /// Candle's repacked tiles where they take the shape, else the f32 gemm.
        fn candle_or_dense<T>(tiles: bool) -> ManyRows<T> {
            if tiles {
                ManyRows::Candle
            } else {
                ManyRows::Dense
            }
        }
        match self {
            QBlocks::Q8_0(r) => r.forward(
                xs,
                few_rows(crate::qgemv::q8_0),
                candle_or_dense(candle_tiles_q8_0() && candle_tile_shape(r.n, r.k)),
            ),
            QBlocks::Q4K(r) => {
                let many = if crate::qgemm::chosen_here().is_some() {
                    ManyRows::Ours(crate::qgemm::q4k)
                } else {
                    candle_or_dense(candle_tile_shape(r.n, r.k))
                };
                r.forward(xs, few_rows(crate::qgemv::q4k), many)
            }
        }
    }
}
