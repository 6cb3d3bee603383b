//! The Qwen2.5-VL vision tower on candle (transformers 4.51.3 `Qwen2_5_VisionTransformerPretrainedModel`).
//!
//! Pipeline for `pixel_values` `[N, 1176]` (from [`super::ImageProcessor`]) and `grid_thw`:
//! 1. patch embedding: the Conv3d (kernel = stride = `(2, 14, 14)`, no bias) as one Linear with
//!    the kernel reshaped to `[hidden, 1176]` — the processor already flattens patches in the
//!    kernel's `(C, T, ph, pw)` order;
//! 2. 2-D rotary angles per patch, `[row·inv_freq, col·inv_freq]`, in merge-block order, in f32;
//! 3. window permutation: merged tokens (2×2 patch groups) reordered window by window
//!    ([`window_index`]), the rotary table with them;
//! 4. `depth` pre-RMSNorm blocks: attention within windows, or over each whole frame for the
//!    blocks in `fullatt_block_indexes`; SwiGLU MLP with biases;
//! 5. merger: RMSNorm, 2×2 groups concatenated, Linear → exact (erf) GELU → Linear;
//! 6. the window permutation undone, so image tokens come out in raster order.
//!
//! Attention is computed segment by segment (no N×N mask). Rotary tables and softmax run in f32
//! whatever the weight dtype; on CPU load the weights as F32 (candle has no bf16 CPU gemm).

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{rms_norm, Linear, RmsNorm, VarBuilder};

use super::config::{VisionConfig, VISION_RMS_NORM_EPS, VISION_ROPE_THETA};
use super::linear::{linear_bytes, tensor_bytes, Proj, Quant, SwiGlu};

/// Errors from running the vision tower.
#[derive(Debug, thiserror::Error)]
pub enum VisionError {
    /// An image grid has a zero side, a height or width not a multiple of `spatial_merge_size`, or
    /// a patch count that overflows.
    #[error("image grid {grid:?} is invalid: {reason}")]
    Grid {
        /// The grid `[t, h, w]`, in patches.
        grid: [usize; 3],
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The vision tower was run with no image grid.
    #[error("no image grid given")]
    NoImages,
    /// `pixel_values` is not `[Σ t·h·w, patch_dim]` for the grids given.
    #[error(
        "pixel_values have shape {got:?}, but the grids need [{patches}, {patch_dim}] \
         (sum of t·h·w patches, each in_channels·temporal_patch·patch² wide)"
    )]
    PixelValues {
        /// The shape received.
        got: Vec<usize>,
        /// Total patches the grids need (rows expected).
        patches: usize,
        /// Width of one flattened patch the config needs (columns expected).
        patch_dim: usize,
    },
    /// A tensor operation failed.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

/// The window permutation of merged tokens and the attention segments it induces
/// (transformers' `get_window_index`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowIndex {
    /// For each position in window order, the merged-token id (raster order over all images).
    pub index: Vec<usize>,
    /// Cumulative patch counts per window as transformers returns them (empty windows repeat
    /// the previous value), starting with 0.
    pub cu_seqlens_raw: Vec<usize>,
    /// `cu_seqlens_raw` with consecutive duplicates removed: the window attention segments.
    pub cu_seqlens: Vec<usize>,
}

fn check_grids(cfg: &VisionConfig, grid_thw: &[[usize; 3]]) -> Result<usize, VisionError> {
    if grid_thw.is_empty() {
        return Err(VisionError::NoImages);
    }
    let m = cfg.spatial_merge_size;
    let mut total = 0usize;
    for &grid in grid_thw {
        let [t, h, w] = grid;
        if t == 0 || h == 0 || w == 0 {
            return Err(VisionError::Grid {
                grid,
                reason: "every side must be positive",
            });
        }
        if h % m != 0 || w % m != 0 {
            return Err(VisionError::Grid {
                grid,
                reason: "height and width (in patches) must be multiples of spatial_merge_size",
            });
        }
        total = t
            .checked_mul(h)
            .and_then(|x| x.checked_mul(w))
            .and_then(|x| x.checked_add(total))
            .ok_or(VisionError::Grid {
                grid,
                reason: "patch count overflows",
            })?;
    }
    Ok(total)
}

/// Window order of the merged tokens of `grid_thw` (transformers' `get_window_index`).
///
/// Per image, the `(h/m) × (w/m)` merged grid is cut into `side × side` windows
/// (`side` = [`VisionConfig::window_merged_side`]), padded at the bottom and right (with a whole
/// extra row/column of empty windows when the side divides evenly, as transformers does); windows
/// are enumerated row-major per frame, tokens row-major inside each window.
pub(crate) fn window_index(
    cfg: &VisionConfig,
    grid_thw: &[[usize; 3]],
) -> Result<WindowIndex, VisionError> {
    check_grids(cfg, grid_thw)?;
    let m = cfg.spatial_merge_size;
    let unit = cfg.merge_unit();
    let side = cfg.window_merged_side();
    let mut index = Vec::new();
    let mut cu_raw = vec![0usize];
    let mut offset = 0usize;
    for &[t, h, w] in grid_thw {
        let (lh, lw) = (h / m, w / m);
        let n_win_h = (lh + side - lh % side) / side;
        let n_win_w = (lw + side - lw % side) / side;
        for frame in 0..t {
            let base = offset + frame * lh * lw;
            for wy in 0..n_win_h {
                for wx in 0..n_win_w {
                    let mut count = 0usize;
                    for y in wy * side..((wy + 1) * side).min(lh) {
                        for x in wx * side..((wx + 1) * side).min(lw) {
                            index.push(base + y * lw + x);
                            count += 1;
                        }
                    }
                    let last = *cu_raw.last().unwrap_or(&0);
                    cu_raw.push(last + count * unit);
                }
            }
        }
        offset += t * lh * lw;
    }
    let mut cu = cu_raw.clone();
    cu.dedup();
    Ok(WindowIndex {
        index,
        cu_seqlens_raw: cu_raw,
        cu_seqlens: cu,
    })
}

/// `(row, col)` of every patch in the processor's order (merge blocks row-major, then row-major
/// inside each block; frames repeated), as transformers' `rot_pos_emb` builds them.
pub(crate) fn patch_positions(
    cfg: &VisionConfig,
    grid_thw: &[[usize; 3]],
) -> Result<Vec<(usize, usize)>, VisionError> {
    let total = check_grids(cfg, grid_thw)?;
    let m = cfg.spatial_merge_size;
    let mut pos = Vec::with_capacity(total);
    for &[t, h, w] in grid_thw {
        for _ in 0..t {
            for by in 0..h / m {
                for bx in 0..w / m {
                    for iy in 0..m {
                        for ix in 0..m {
                            pos.push((by * m + iy, bx * m + ix));
                        }
                    }
                }
            }
        }
    }
    Ok(pos)
}

/// `cu_seqlens` of the full-attention blocks: one segment per frame of each image.
fn full_cu_seqlens(grid_thw: &[[usize; 3]]) -> Vec<usize> {
    let mut cu = vec![0usize];
    for &[t, h, w] in grid_thw {
        for _ in 0..t {
            let last = *cu.last().unwrap_or(&0);
            cu.push(last + h * w);
        }
    }
    cu
}

/// Intermediate results of one vision forward pass, for golden tests and debugging.
#[derive(Debug, Clone)]
pub struct VisionTrace {
    /// `[N, hidden]` patch embeddings, processor (raster/merge-block) order.
    pub patch_embed: Tensor,
    /// `[N, head_dim/2]` rotary angles (f32), processor order.
    pub rot_pos_emb: Tensor,
    /// The window permutation and attention segments the blocks used.
    pub window: WindowIndex,
    /// Output of each block, `[N, hidden]`, in **window order**.
    pub blocks: Vec<Tensor>,
    /// `[N/4, out_hidden]` image-token embeddings, raster order.
    pub embeds: Tensor,
}

/// `visual.patch_embed`: the Conv3d as a Linear over flattened patches.
#[derive(Debug, Clone)]
struct PatchEmbed {
    proj: Linear,
}

impl PatchEmbed {
    fn new(cfg: &VisionConfig, vb: VarBuilder) -> candle_core::Result<Self> {
        let w = vb.pp("proj").get(
            (
                cfg.hidden_size,
                cfg.in_channels,
                cfg.temporal_patch_size,
                cfg.patch_size,
                cfg.patch_size,
            ),
            "weight",
        )?;
        let w = w.reshape((cfg.hidden_size, cfg.patch_dim()))?;
        Ok(Self {
            proj: Linear::new(w, None),
        })
    }

    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        self.proj.forward(xs)
    }
}

/// `visual.blocks.i.attn`: fused qkv, 2-D rotary on q and k, segment-wise softmax attention.
#[derive(Debug, Clone)]
struct VisionAttention {
    qkv: Proj,
    proj: Proj,
    num_heads: usize,
    head_dim: usize,
}

impl VisionAttention {
    fn new(cfg: &VisionConfig, quant: Quant, vb: VarBuilder) -> candle_core::Result<Self> {
        let h = cfg.hidden_size;
        Ok(Self {
            qkv: Proj::load(h, 3 * h, true, quant, vb.pp("qkv"))?,
            proj: Proj::load(h, h, true, quant, vb.pp("proj"))?,
            num_heads: cfg.num_heads,
            head_dim: cfg.head_dim(),
        })
    }

    /// `xs` `[N, hidden]`; `cos`/`sin` `[N, head_dim/2]` f32; `cu_seqlens` segment bounds.
    fn forward(
        &self,
        xs: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        cu_seqlens: &[usize],
    ) -> candle_core::Result<Tensor> {
        let (n, hidden) = xs.dims2()?;
        let dtype = xs.dtype();
        // [N, 3·hidden] → [3, heads, N, head_dim]: q | k | v, each split into heads.
        let qkv = self
            .qkv
            .forward(xs)?
            .reshape((n, 3, self.num_heads, self.head_dim))?
            .permute((1, 2, 0, 3))?;
        let rotate = |t: Tensor| -> candle_core::Result<Tensor> {
            let t = t.to_dtype(DType::F32)?.unsqueeze(0)?.contiguous()?;
            candle_nn::rotary_emb::rope(&t, cos, sin)?
                .squeeze(0)?
                .to_dtype(dtype)
        };
        let q = rotate(qkv.get(0)?)?;
        let k = rotate(qkv.get(1)?)?;
        let v = qkv.get(2)?.contiguous()?;
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        let mut outs = Vec::with_capacity(cu_seqlens.len().saturating_sub(1));
        for seg in cu_seqlens.windows(2) {
            let (start, len) = (seg[0], seg[1] - seg[0]);
            if len == 0 {
                continue;
            }
            let k = k.narrow(1, start, len)?.contiguous()?;
            let v = v.narrow(1, start, len)?.contiguous()?;
            let rows = attention_chunk_rows(self.num_heads, len);
            segment_attention(&q.narrow(1, start, len)?, &k, &v, scale, rows, &mut outs)?;
        }
        // [heads, N, head_dim] → [N, hidden]
        let out = Tensor::cat(&outs, 1)?
            .transpose(0, 1)?
            .reshape((n, hidden))?;
        self.proj.forward(&out)
    }
}

/// Bytes one chunk of f32 attention scores (`[heads, rows, len]`) may take. A full-attention block
/// attends over every patch of a frame: unchunked, a 1.6 MP image on the 3B model (16 heads, 8192
/// patches) would hold 4.3 GB of scores twice over, and a 12 MP photo 275 GB.
///
/// Why under 32 MiB: buffers from 32 MiB up bypass the heap (`vlm::heap`, glibc's mmap
/// threshold), so each is a fresh mapping whose pages the kernel faults in and zeroes. At 128
/// MiB, a 640×480 frame's four full-attention blocks (1 564 patches, 156 MB of scores each, in
/// two chunks) mapped about 1.9 GB of fresh pages per frame (the scores, their scaled copy, the
/// softmax): `clear_page_erms` was 6.2 % of the vision tower's samples on the 2-core AVX-512 AMD
/// (`perf record` of `bench vlm --quant q4k`), 0.7 % at this size.
pub(crate) const ATTENTION_CHUNK_BYTES: usize = 30 << 20;

/// Query rows per attention chunk for a segment of `len` keys: as many as fit
/// [`ATTENTION_CHUNK_BYTES`], at least one, at most `len`.
pub fn attention_chunk_rows(heads: usize, len: usize) -> usize {
    (ATTENTION_CHUNK_BYTES / (4 * heads * len).max(1)).clamp(1, len.max(1))
}

/// Softmax attention of queries `q` `[heads, len, d]` over `k`, `v` `[heads, len, d]`, `rows`
/// query rows at a time, the outputs pushed in order. Each query row's softmax only sees its own
/// scores, so chunking changes the peak memory, not the result.
fn segment_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
    rows: usize,
    outs: &mut Vec<Tensor>,
) -> candle_core::Result<()> {
    let (_, len, _) = q.dims3()?;
    let dtype = q.dtype();
    let kt = k.t()?;
    let mut r0 = 0;
    while r0 < len {
        let r = rows.max(1).min(len - r0);
        let q = q.narrow(1, r0, r)?.contiguous()?;
        let att = q.matmul(&kt)?;
        let att = match super::vmath::scaled_softmax(&att, scale as f32)? {
            Some(p) => p,
            None => {
                let att = (att * scale)?.to_dtype(DType::F32)?;
                candle_nn::ops::softmax_last_dim(&att)?
            }
        }
        .to_dtype(dtype)?;
        outs.push(att.matmul(v)?);
        r0 += r;
    }
    Ok(())
}

/// `visual.blocks.i`: pre-RMSNorm attention and MLP with residuals.
#[derive(Debug, Clone)]
struct VisionBlock {
    norm1: RmsNorm,
    norm2: RmsNorm,
    attn: VisionAttention,
    /// SwiGLU with biases (`visual.blocks.i.mlp`).
    mlp: SwiGlu,
}

impl VisionBlock {
    fn new(cfg: &VisionConfig, quant: Quant, vb: VarBuilder) -> candle_core::Result<Self> {
        Ok(Self {
            norm1: rms_norm(cfg.hidden_size, VISION_RMS_NORM_EPS, vb.pp("norm1"))?,
            norm2: rms_norm(cfg.hidden_size, VISION_RMS_NORM_EPS, vb.pp("norm2"))?,
            attn: VisionAttention::new(cfg, quant, vb.pp("attn"))?,
            mlp: SwiGlu::load(
                cfg.hidden_size,
                cfg.intermediate_size,
                true,
                quant,
                vb.pp("mlp"),
            )?
            .fused_activation(),
        })
    }

    fn forward(
        &self,
        xs: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        cu_seqlens: &[usize],
    ) -> candle_core::Result<Tensor> {
        let xs = (xs
            + self
                .attn
                .forward(&self.norm1.forward(xs)?, cos, sin, cu_seqlens)?)?;
        &xs + self.mlp.forward(&self.norm2.forward(&xs)?)?
    }
}

/// `visual.merger`: RMSNorm per patch, 2×2 groups concatenated, Linear → GELU (erf) → Linear.
#[derive(Debug, Clone)]
struct PatchMerger {
    ln_q: RmsNorm,
    fc1: Proj,
    fc2: Proj,
    merged_dim: usize,
}

impl PatchMerger {
    fn new(cfg: &VisionConfig, quant: Quant, vb: VarBuilder) -> candle_core::Result<Self> {
        let merged_dim = cfg.hidden_size * cfg.merge_unit();
        let mlp = vb.pp("mlp");
        Ok(Self {
            ln_q: rms_norm(cfg.hidden_size, VISION_RMS_NORM_EPS, vb.pp("ln_q"))?,
            fc1: Proj::load(merged_dim, merged_dim, true, quant, mlp.pp("0"))?,
            fc2: Proj::load(merged_dim, cfg.out_hidden_size, true, quant, mlp.pp("2"))?,
            merged_dim,
        })
    }

    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        let xs = self.ln_q.forward(xs)?.reshape(((), self.merged_dim))?;
        // nn.GELU() default: the exact erf form (candle's `.gelu()` is the tanh approximation).
        let xs = self.fc1.forward(&xs)?.gelu_erf()?;
        self.fc2.forward(&xs)
    }
}

/// The Qwen2.5-VL vision tower (`visual.*` weights).
#[derive(Debug, Clone)]
pub struct Qwen25VisionModel {
    patch_embed: PatchEmbed,
    blocks: Vec<VisionBlock>,
    merger: PatchMerger,
    /// `head_dim/4` rotary frequencies, f32.
    inv_freq: Vec<f32>,
    cfg: VisionConfig,
    device: Device,
    dtype: DType,
}

impl Qwen25VisionModel {
    /// Builds the tower from `vb` (usually `vb.pp("visual")`). The config must be valid
    /// ([`VisionConfig::validate`]); a wrong config is reported as a candle error.
    pub fn new(cfg: &VisionConfig, vb: VarBuilder) -> candle_core::Result<Self> {
        Self::new_quantized(cfg, Quant::F32, vb)
    }

    /// [`Self::new`] with the block and merger linears in `quant` where their input width fits
    /// the block size (the rest, and the patch embedding, stay dense).
    pub(crate) fn new_quantized(
        cfg: &VisionConfig,
        quant: Quant,
        vb: VarBuilder,
    ) -> candle_core::Result<Self> {
        cfg.validate().map_err(candle_core::Error::wrap)?;
        let patch_embed = PatchEmbed::new(cfg, vb.pp("patch_embed"))?;
        let blocks = (0..cfg.depth)
            .map(|i| VisionBlock::new(cfg, quant, vb.pp("blocks").pp(i)))
            .collect::<candle_core::Result<Vec<_>>>()?;
        let merger = PatchMerger::new(cfg, quant, vb.pp("merger"))?;
        // VisionRotaryEmbedding(dim = head_dim/2): inv_freq = 1/θ^(2j/dim), all in f32.
        let dim = cfg.head_dim() / 2;
        let inv_freq = (0..dim)
            .step_by(2)
            .map(|j| 1.0 / VISION_ROPE_THETA.powf(j as f32 / dim as f32))
            .collect();
        Ok(Self {
            patch_embed,
            blocks,
            merger,
            inv_freq,
            cfg: cfg.clone(),
            device: vb.device().clone(),
            dtype: vb.dtype(),
        })
    }

    /// Rounds the rotary frequencies to bf16 (and back to f32), as transformers has them after
    /// the module was cast with `.to(torch.bfloat16)`: `inv_freq` is a buffer, so the cast rounds
    /// it and casting back to f32 does not restore it. The fixture's golden run did exactly that
    /// (its `rot_pos_emb` holds 0.10009765625 for 0.1). A model loaded straight in f32 or with
    /// `torch_dtype` keeps f32 frequencies, which is this type's default.
    pub fn with_bf16_rotary_freqs(mut self) -> candle_core::Result<Self> {
        self.inv_freq = super::rope::round_to_bf16(self.inv_freq)?;
        Ok(self)
    }

    /// The `head_dim/4` rotary frequencies in use (f32).
    pub fn rotary_inv_freq(&self) -> &[f32] {
        &self.inv_freq
    }

    /// Bytes held by the tower's weights (for memory reports: peak RSS against model size).
    pub(crate) fn weight_bytes(&self) -> usize {
        let blocks: usize = self
            .blocks
            .iter()
            .map(|b| {
                tensor_bytes(b.norm1.weight())
                    + tensor_bytes(b.norm2.weight())
                    + b.attn.qkv.weight_bytes()
                    + b.attn.proj.weight_bytes()
                    + b.mlp.weight_bytes()
            })
            .sum();
        let m = &self.merger;
        linear_bytes(&self.patch_embed.proj)
            + blocks
            + tensor_bytes(m.ln_q.weight())
            + m.fc1.weight_bytes()
            + m.fc2.weight_bytes()
    }

    /// Image-token embeddings `[Σ t·h·w/4, out_hidden]` (raster order per image) for
    /// `pixel_values` `[Σ t·h·w, 1176]` and one `[t, h, w]` grid (in patches) per image.
    pub fn forward(
        &self,
        pixel_values: &Tensor,
        grid_thw: &[[usize; 3]],
    ) -> Result<Tensor, VisionError> {
        Ok(self.run(pixel_values, grid_thw, false)?.embeds)
    }

    /// [`Self::forward`], keeping every intermediate result.
    pub fn forward_traced(
        &self,
        pixel_values: &Tensor,
        grid_thw: &[[usize; 3]],
    ) -> Result<VisionTrace, VisionError> {
        self.run(pixel_values, grid_thw, true)
    }

    /// Rotary angles `[N, head_dim/2]` (f32): `[row·inv_freq, col·inv_freq]` per patch, in the
    /// processor's patch order.
    pub(crate) fn rot_pos_emb(&self, grid_thw: &[[usize; 3]]) -> Result<Tensor, VisionError> {
        let pos = patch_positions(&self.cfg, grid_thw)?;
        let k = self.inv_freq.len();
        let mut data = Vec::with_capacity(pos.len() * 2 * k);
        for &(row, col) in &pos {
            data.extend(self.inv_freq.iter().map(|&f| row as f32 * f));
            data.extend(self.inv_freq.iter().map(|&f| col as f32 * f));
        }
        Ok(Tensor::from_vec(data, (pos.len(), 2 * k), &self.device)?)
    }

    fn run(
        &self,
        pixel_values: &Tensor,
        grid_thw: &[[usize; 3]],
        trace: bool,
    ) -> Result<VisionTrace, VisionError> {
        let n = check_grids(&self.cfg, grid_thw)?;
        let patch_dim = self.cfg.patch_dim();
        if pixel_values.dims() != [n, patch_dim] {
            return Err(VisionError::PixelValues {
                got: pixel_values.dims().to_vec(),
                patches: n,
                patch_dim,
            });
        }
        let unit = self.cfg.merge_unit();
        let hidden = self.cfg.hidden_size;
        let xs = pixel_values.to_device(&self.device)?.to_dtype(self.dtype)?;
        let patch_embed = self.patch_embed.forward(&xs)?;
        let rot = self.rot_pos_emb(grid_thw)?;
        let window = window_index(&self.cfg, grid_thw)?;

        // Window order, at merge-group granularity.
        let idx: Vec<u32> = window.index.iter().map(|&i| i as u32).collect();
        let idx = Tensor::from_vec(idx, window.index.len(), &self.device)?;
        let mut xs = patch_embed
            .reshape((n / unit, unit * hidden))?
            .index_select(&idx, 0)?
            .reshape((n, hidden))?;
        let rot_w = rot
            .reshape((n / unit, ()))?
            .index_select(&idx, 0)?
            .reshape((n, ()))?;
        let cos = rot_w.cos()?.contiguous()?;
        let sin = rot_w.sin()?.contiguous()?;

        let full_cu = full_cu_seqlens(grid_thw);
        let mut blocks = Vec::new();
        for (i, block) in self.blocks.iter().enumerate() {
            let cu = if self.cfg.is_full_attention(i) {
                &full_cu
            } else {
                &window.cu_seqlens
            };
            xs = block.forward(&xs, &cos, &sin, cu)?;
            if trace {
                blocks.push(xs.clone());
            }
        }
        let merged = self.merger.forward(&xs)?;

        // Undo the window order: row window.index[i] of the output is merged[i].
        let mut reverse = vec![0u32; window.index.len()];
        for (pos, &tok) in window.index.iter().enumerate() {
            reverse[tok] = pos as u32;
        }
        let reverse = Tensor::from_vec(reverse, window.index.len(), &self.device)?;
        let embeds = merged.index_select(&reverse, 0)?;
        Ok(VisionTrace {
            patch_embed,
            rot_pos_emb: rot,
            window,
            blocks,
            embeds,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Chunking the query rows must not change the attention output: the reference is one
    /// chunk holding every row (the unchunked computation).
    #[test]
    fn chunked_attention_equals_one_chunk() {
        let dev = Device::Cpu;
        let (heads, len, d) = (2, 37, 8);
        let q = Tensor::randn(0f32, 1.0, (heads, len, d), &dev).unwrap();
        let k = Tensor::randn(0f32, 1.0, (heads, len, d), &dev).unwrap();
        let v = Tensor::randn(0f32, 1.0, (heads, len, d), &dev).unwrap();
        let run = |rows: usize| {
            let mut outs = Vec::new();
            segment_attention(&q, &k, &v, 0.35, rows, &mut outs).unwrap();
            assert_eq!(outs.len(), len.div_ceil(rows));
            Tensor::cat(&outs, 1).unwrap()
        };
        let whole = run(len);
        for rows in [1, 5, 36] {
            let diff = crate::max_abs_diff(&run(rows), &whole);
            assert!(diff <= 1e-6, "{rows} rows: {diff}");
        }
    }

    #[test]
    fn chunk_rows_bound_the_score_matrix() {
        // 3B vision (16 heads) at a 12.8 MP image's 65 536 patches: 7 rows of 65 536 keys.
        let rows = attention_chunk_rows(16, 65_536);
        assert!(4 * 16 * rows * 65_536 <= ATTENTION_CHUNK_BYTES);
        assert!(4 * 16 * (rows + 1) * 65_536 > ATTENTION_CHUNK_BYTES);
        // Small segments are one chunk; huge ones still make progress one row at a time.
        assert_eq!(attention_chunk_rows(2, 64), 64);
        assert_eq!(attention_chunk_rows(16, usize::MAX / 64), 1);
    }
}
