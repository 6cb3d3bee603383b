//! Linear layers that are either dense f32 or quantized in-process (`--quant q8_0|q4k`).
//!
//! Why in-process: the checkpoint ships bf16 safetensors; converting it to GGUF would be a second
//! artefact to keep in sync. Each f32 weight is turned into ggml Q8_0 / Q4K blocks at load time
//! and multiplied by candle's SIMD kernels ([`QBlocks`] says which kernel when, and why we hold
//! the blocks ourselves). A weight whose input width is not a multiple of the block size cannot be blocked
//! (Qwen2.5-VL-3B's vision `down_proj`, k = 3420) and stays dense — never silently wrong.
//!
//! Training: a dense projection's weight can become a `Var` (full fine-tuning), or a frozen one
//! can carry a [`Lora`] adapter (PEFT's LoRA) that training moves instead.

use std::fmt;
use std::str::FromStr;

use std::sync::Arc;

use candle_core::quantized::k_quants::{self, BlockQ4K, BlockQ8_0};
use candle_core::quantized::{GgmlDType, GgmlType, QMatMul, QStorage, QTensor};
use candle_core::{DType, Device, Module, Storage, Tensor, Var};

use super::text::TrainableWeight;
use candle_nn::VarBuilder;
use rand::Rng;
use rayon::prelude::*;

/// Weight format of the quantizable linears.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Quant {
    /// Dense f32 (exact; the reference for the golden tests).
    #[default]
    F32,
    /// 8-bit blocks of 32 (ggml Q8_0): ~1/4 of f32 bytes, near-lossless.
    Q8_0,
    /// 4-bit k-quants in super-blocks of 256 (ggml Q4K): ~1/7 of f32 bytes.
    Q4K,
}

impl Quant {
    /// The ggml block format, `None` for dense.
    pub fn ggml(self) -> Option<GgmlDType> {
        match self {
            Quant::F32 => None,
            Quant::Q8_0 => Some(GgmlDType::Q8_0),
            Quant::Q4K => Some(GgmlDType::Q4K),
        }
    }

    /// Whether a weight with input width `in_dim` can be stored in this format.
    pub fn fits(self, in_dim: usize) -> bool {
        self.ggml()
            .is_none_or(|d| in_dim.is_multiple_of(d.block_size()))
    }

    /// Bytes of one row of `in_dim` weights in ggml blocks; `None` when dense or `in_dim` does
    /// not fit the block size.
    pub fn row_bytes(self, in_dim: usize) -> Option<usize> {
        let d = self.ggml().filter(|_| self.fits(in_dim))?;
        Some(in_dim / d.block_size() * d.type_size())
    }
}

impl fmt::Display for Quant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Quant::F32 => "f32",
            Quant::Q8_0 => "q8_0",
            Quant::Q4K => "q4k",
        })
    }
}

impl FromStr for Quant {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "f32" | "none" => Ok(Quant::F32),
            "q8_0" | "q8" => Ok(Quant::Q8_0),
            "q4k" | "q4_k" => Ok(Quant::Q4K),
            other => Err(format!(
                "unknown quantization `{other}` (expected f32, q8_0 or q4k)"
            )),
        }
    }
}

/// `y = x·Wᵀ (+ b)` with `W` dense or quantized.
#[derive(Debug, Clone)]
pub enum Proj {
    Dense(candle_nn::Linear),
    Quantized { w: QBlocks, bias: Option<Tensor> },
}

impl Proj {
    /// Reads `weight` `[out, in]` (and `bias` `[out]` when `bias`) under `vb` and stores it in
    /// `quant` when the input width fits the block size, dense otherwise.
    pub fn load(
        in_dim: usize,
        out_dim: usize,
        bias: bool,
        quant: Quant,
        vb: VarBuilder,
    ) -> candle_core::Result<Self> {
        let b = if bias {
            Some(vb.get(out_dim, "bias")?)
        } else {
            None
        };
        if let Some(w) = QBlocks::from_backend(quant, in_dim, &[(vb.clone(), out_dim)])? {
            return Ok(Proj::Quantized { w, bias: b });
        }
        let w = vb.get((out_dim, in_dim), &dense_name("weight", quant, in_dim, &vb))?;
        Self::from_weight(w, b, quant)
    }

    /// Wraps an existing weight (e.g. the tied embedding table as `lm_head`).
    pub(crate) fn from_weight(
        w: Tensor,
        bias: Option<Tensor>,
        quant: Quant,
    ) -> candle_core::Result<Self> {
        let in_dim = w.dim(1)?;
        match quant {
            Quant::F32 => Ok(Proj::Dense(candle_nn::Linear::new(w, bias))),
            _ if !quant.fits(in_dim) => Ok(Proj::Dense(candle_nn::Linear::new(w, bias))),
            Quant::Q8_0 => Ok(Proj::Quantized {
                w: QBlocks::Q8_0(quantize_rows(&w.to_dtype(DType::F32)?)?),
                bias,
            }),
            Quant::Q4K => Ok(Proj::Quantized {
                w: QBlocks::Q4K(quantize_rows(&w.to_dtype(DType::F32)?)?),
                bias,
            }),
        }
    }

    /// A projection by `w`, which is `weight` under `vb` already read (the tied embedding table
    /// as `lm_head`, f32, or bf16 as stored); quantized blocks come from the backend when it
    /// serves them ([`QBlocks::from_backend`]), else from `w` in f32; a dense one is `w`
    /// itself where our kernels take it bf16 ([`keeps_bf16`]).
    pub(crate) fn tied(w: Tensor, quant: Quant, vb: &VarBuilder) -> candle_core::Result<Self> {
        let (rows, in_dim) = w.dims2()?;
        match QBlocks::from_backend(quant, in_dim, &[(vb.clone(), rows)])? {
            Some(q) => Ok(Proj::Quantized { w: q, bias: None }),
            // The table itself where our kernels take it bf16 (see `keeps_bf16`).
            None if w.dtype() == DType::BF16 && keeps_bf16(w.device()) => {
                Self::from_weight(w, None, quant)
            }
            None => Self::from_weight(w.to_dtype(DType::F32)?, None, quant),
        }
    }

    /// The dense layer, or an error naming `name` for a quantized one (training and checkpoints
    /// need f32 weights: there is no gradient through ggml blocks).
    fn dense(&self, name: &str) -> candle_core::Result<&candle_nn::Linear> {
        match self {
            Proj::Dense(l) => Ok(l),
            Proj::Quantized { .. } => candle_core::bail!(
                "{name} is quantized: training and checkpoints need the model loaded in f32"
            ),
        }
    }

    /// Makes the weight and bias (when `select` picks `{name}.weight` / `{name}.bias`)
    /// [`Var`]s in place; see `TextModel::make_trainable`.
    pub fn make_trainable(
        &mut self,
        name: &str,
        select: &dyn Fn(&str) -> bool,
    ) -> candle_core::Result<Vec<TrainableWeight>> {
        let l = self.dense(name)?;
        let (w_name, b_name) = (format!("{name}.weight"), format!("{name}.bias"));
        let mut out = Vec::new();
        let mut w = l.weight().clone();
        let mut b = l.bias().cloned();
        if select(&w_name) {
            // Trained in f32: a bf16-kept weight is widened (exactly) first.
            let var = Var::from_tensor(&w.to_dtype(DType::F32)?)?;
            w = var.as_tensor().clone();
            out.push(TrainableWeight::whole(&w_name, var));
        }
        if let Some(bias) = b.as_mut().filter(|_| select(&b_name)) {
            let var = Var::from_tensor(bias)?;
            *bias = var.as_tensor().clone();
            out.push(TrainableWeight::whole(&b_name, var));
        }
        *self = Proj::Dense(candle_nn::Linear::new(w, b));
        Ok(out)
    }

    /// `{name}.weight` (and `.bias`) as they are now.
    pub fn named_weights(&self, name: &str) -> candle_core::Result<Vec<(String, Tensor)>> {
        let l = self.dense(name)?;
        let mut out = vec![(format!("{name}.weight"), l.weight().clone())];
        if let Some(b) = l.bias() {
            out.push((format!("{name}.bias"), b.clone()));
        }
        Ok(out)
    }

    /// The same weights outside autograd: each tensor `detach`ed (shared storage, no copy; an
    /// optimiser's in-place update shows through). Why: sampling with trained weights builds
    /// an autograd graph per operation, which the KV cache keeps alive for the whole rollout,
    /// and it keeps the decode rows off our kernels ([`dense_forward`]).
    pub fn detached(&self) -> Proj {
        match self {
            Proj::Dense(l) => Proj::Dense(candle_nn::Linear::new(
                l.weight().detach(),
                l.bias().map(Tensor::detach),
            )),
            Proj::Quantized { w, bias } => Proj::Quantized {
                w: w.clone(),
                bias: bias.as_ref().map(Tensor::detach),
            },
        }
    }

    /// A bf16-kept dense weight ([`keeps_bf16`]) widened to f32 for good.
    pub(crate) fn widen(&mut self) -> candle_core::Result<()> {
        if let Proj::Dense(l) = self {
            if l.weight().dtype() == DType::BF16 {
                *l = candle_nn::Linear::new(l.weight().to_dtype(DType::F32)?, l.bias().cloned());
            }
        }
        Ok(())
    }

    /// Whether the weight is stored quantized.
    pub fn is_quantized(&self) -> bool {
        matches!(self, Proj::Quantized { .. })
    }

    /// Bytes held by the weight and bias, as stored (quantized blocks count at their size).
    pub fn weight_bytes(&self) -> usize {
        match self {
            Proj::Dense(l) => linear_bytes(l),
            Proj::Quantized { w, bias } => w.bytes() + bias.as_ref().map_or(0, tensor_bytes),
        }
    }
}

/// A decoder weight as a checkpoint writes it: a tensor at hand (a view of the model's own), or
/// a LoRA-adapted weight `W + ΔW` that is made only when asked for.
///
/// Why not merge up front: the merged copies of every adapted linear together are as large as
/// the decoder (11 GB for the 3B's seven linears per layer), on top of the model; a checkpoint
/// written one tensor at a time ([`CheckpointTensor::get`] as each is written) holds one.
pub enum CheckpointTensor<'a> {
    Ready(Tensor),
    Merged { base: Tensor, lora: &'a Lora },
}

impl CheckpointTensor<'_> {
    pub fn dims(&self) -> &[usize] {
        match self {
            CheckpointTensor::Ready(t) | CheckpointTensor::Merged { base: t, .. } => t.dims(),
        }
    }

    /// The tensor (merging a LoRA weight now), outside any autograd graph, a bf16-kept weight
    /// widened (exactly) to the f32 the model computes in ([`keeps_bf16`]).
    pub fn get(&self) -> candle_core::Result<Tensor> {
        let widened = |t: &Tensor| t.to_dtype(computed_in(t.dtype()));
        match self {
            CheckpointTensor::Ready(t) => widened(t),
            CheckpointTensor::Merged { base, lora } => {
                Ok((widened(base)? + lora.delta()?)?.detach())
            }
        }
    }
}

/// Projections of the same input stored as one (q|k|v, gate|up): one weight `[Σ out, in]`, one
/// multiplication, outputs split along the last axis. A lone projection (`o_proj`, `down_proj`)
/// is the one-part case, so that every linear of the decoder goes through the same training,
/// checkpoint and LoRA code.
///
/// Why: the input is read once instead of once per projection — in decode, where each
/// multiplication is a memory-bound pass over the weights with a fixed dispatch cost, three or
/// two calls become one; in prefill the small k/v products (256 wide) join the big q product.
/// Each output element is still the same dot product of one weight row with the input.
///
/// Each part may carry a [`Lora`] adapter, added to that part's output only: PEFT adapts
/// `q_proj`, `k_proj` and `v_proj` as separate modules, and the fused base weight stays as it is.
#[derive(Debug, Clone)]
pub struct FusedProj {
    proj: Proj,
    parts: Vec<Part>,
}

/// One projection of a [`FusedProj`]: its checkpoint name, its rows of the fused weight, its
/// adapter.
#[derive(Debug, Clone)]
struct Part {
    name: String,
    rows: usize,
    lora: Option<Lora>,
}

impl FusedProj {
    /// Reads `<name>.weight` `[out, in]` (and `<name>.bias`) for each `(name, out)` under `vb`
    /// and concatenates them in that order.
    pub fn load(
        in_dim: usize,
        parts: &[(&str, usize)],
        bias: bool,
        quant: Quant,
        vb: VarBuilder,
    ) -> candle_core::Result<Self> {
        let b = if bias {
            let bs = parts
                .iter()
                .map(|&(name, out)| vb.pp(name).get(out, "bias"))
                .collect::<candle_core::Result<Vec<_>>>()?;
            Some(Tensor::cat(&bs, 0)?)
        } else {
            None
        };
        let backend_parts: Vec<_> = parts.iter().map(|&(n, out)| (vb.pp(n), out)).collect();
        let proj = match QBlocks::from_backend(quant, in_dim, &backend_parts)? {
            Some(w) => Proj::Quantized { w, bias: b },
            None => {
                // A backend that reads the stacked name `a:ra+b:rb.weight` puts each part straight
                // into its rows of one tensor (`SafetensorsReader`: no concatenated copy).
                let stacked = parts
                    .iter()
                    .map(|(name, rows)| format!("{name}:{rows}"))
                    .collect::<Vec<_>>()
                    .join("+");
                let stacked = format!("{stacked}.weight");
                let total: usize = parts.iter().map(|(_, rows)| rows).sum();
                let w = if parts.len() > 1 && vb.contains_tensor(&stacked) {
                    vb.get((total, in_dim), &dense_name(&stacked, quant, in_dim, &vb))?
                } else {
                    let ws = parts
                        .iter()
                        .map(|&(name, out)| {
                            let part = vb.pp(name);
                            part.get((out, in_dim), &dense_name("weight", quant, in_dim, &part))
                        })
                        .collect::<candle_core::Result<Vec<_>>>()?;
                    // Parts stored in different types meet in f32.
                    let ws = if ws.iter().all(|w| w.dtype() == ws[0].dtype()) {
                        ws
                    } else {
                        ws.iter()
                            .map(|w| w.to_dtype(DType::F32))
                            .collect::<candle_core::Result<Vec<_>>>()?
                    };
                    Tensor::cat(&ws, 0)?
                };
                Proj::from_weight(w, b, quant)?
            }
        };
        Ok(Self {
            proj,
            parts: parts
                .iter()
                .map(|&(name, rows)| Part {
                    name: name.to_string(),
                    rows,
                    lora: None,
                })
                .collect(),
        })
    }

    /// [`Proj::widen`] of the fused weight.
    pub(crate) fn widen(&mut self) -> candle_core::Result<()> {
        self.proj.widen()
    }

    /// The outputs of each part, in load order: views into one result, plus the part's adapter
    /// where it has one.
    pub fn forward(&self, xs: &Tensor) -> candle_core::Result<Vec<Tensor>> {
        let y = self.proj.forward(xs)?;
        let mut start = 0;
        self.parts
            .iter()
            .map(|p| {
                let out = y.narrow(candle_core::D::Minus1, start, p.rows)?;
                start += p.rows;
                match &p.lora {
                    Some(lora) => out + lora.forward(xs)?,
                    None => Ok(out),
                }
            })
            .collect()
    }

    /// The output of a one-part projection (the whole product: no copy).
    pub fn forward_one(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        let mut outs = self.forward(xs)?;
        match outs.len() {
            1 => Ok(outs.remove(0)),
            n => candle_core::bail!("forward_one on a projection of {n} parts"),
        }
    }

    /// Bytes of the weight and bias as stored, and of the adapters.
    pub fn weight_bytes(&self) -> usize {
        self.proj.weight_bytes() + self.adapters().map(|(_, l)| l.bytes()).sum::<usize>()
    }

    /// Makes the fused weight one [`Var`] (and the fused bias another) when `select` picks any
    /// of the parts' `{prefix}.{name}.weight` (`.bias`). Why one `Var` for the fused tensor
    /// rather than one per part: the fused weight is what the forward multiplies by; parts
    /// concatenated at load would leave it a stale copy once the optimiser moves them.
    pub fn make_trainable(
        &mut self,
        prefix: &str,
        select: &dyn Fn(&str) -> bool,
    ) -> candle_core::Result<Vec<TrainableWeight>> {
        let l = self.proj.dense(prefix)?;
        let parts = |suffix: &str| -> Vec<(String, usize, usize)> {
            let mut start = 0;
            self.parts
                .iter()
                .map(|p| {
                    start += p.rows;
                    (
                        format!("{prefix}.{}.{suffix}", p.name),
                        start - p.rows,
                        p.rows,
                    )
                })
                .collect()
        };
        let mut out = Vec::new();
        let mut w = l.weight().clone();
        let mut b = l.bias().cloned();
        let wp = parts("weight");
        if wp.iter().any(|p| select(&p.0)) {
            let var = Var::from_tensor(&w.to_dtype(DType::F32)?)?;
            w = var.as_tensor().clone();
            out.push(TrainableWeight { var, parts: wp });
        }
        let bp = parts("bias");
        if let Some(bias) = b.as_mut().filter(|_| bp.iter().any(|p| select(&p.0))) {
            let var = Var::from_tensor(bias)?;
            *bias = var.as_tensor().clone();
            out.push(TrainableWeight { var, parts: bp });
        }
        self.proj = Proj::Dense(candle_nn::Linear::new(w, b));
        Ok(out)
    }

    /// Each part's weight (and bias) under `{prefix}.{name}.weight`, split from the fused one.
    /// A part with an adapter gives its merged weight `W + (alpha/rank)·B·A` (a snapshot, not
    /// tracked), so that a checkpoint loads in a model without LoRA support.
    /// The same projection and adapters outside autograd ([`Proj::detached`]).
    pub fn detached(&self) -> FusedProj {
        FusedProj {
            proj: self.proj.detached(),
            parts: self
                .parts
                .iter()
                .map(|p| Part {
                    lora: p.lora.as_ref().map(Lora::detached),
                    ..p.clone()
                })
                .collect(),
        }
    }

    pub fn named_weights(
        &self,
        prefix: &str,
    ) -> candle_core::Result<Vec<(String, CheckpointTensor<'_>)>> {
        let l = self.proj.dense(prefix)?;
        let mut out = Vec::new();
        let mut start = 0;
        for p in &self.parts {
            let w = l.weight().narrow(0, start, p.rows)?;
            let w = match &p.lora {
                Some(lora) => CheckpointTensor::Merged { base: w, lora },
                None => CheckpointTensor::Ready(w),
            };
            out.push((format!("{prefix}.{}.weight", p.name), w));
            if let Some(b) = l.bias() {
                out.push((
                    format!("{prefix}.{}.bias", p.name),
                    CheckpointTensor::Ready(b.narrow(0, start, p.rows)?),
                ));
            }
            start += p.rows;
        }
        Ok(out)
    }

    /// Adds a [`Lora`] adapter (A drawn from `rng`, B = 0) to each part whose module name
    /// `{prefix}.{name}` `select` picks, and returns its A and B under their PEFT names. Refused
    /// for a quantized weight (the merged checkpoint needs the dense one) and for a part that
    /// already has an adapter.
    pub fn add_lora(
        &mut self,
        prefix: &str,
        select: &dyn Fn(&str) -> bool,
        rank: usize,
        alpha: f64,
        rng: &mut impl Rng,
    ) -> candle_core::Result<Vec<TrainableWeight>> {
        let mut out = Vec::new();
        for part in &mut self.parts {
            let module = format!("{prefix}.{}", part.name);
            if !select(&module) {
                continue;
            }
            let w = self.proj.dense(&module)?.weight();
            if part.lora.is_some() {
                candle_core::bail!("{module} already has a LoRA adapter");
            }
            // The adapter trains in the activations' type, f32 beside a bf16-kept base.
            let dtype = computed_in(w.dtype());
            let lora = Lora::new(w.dim(1)?, part.rows, rank, alpha, rng, dtype, w.device())?;
            out.extend(lora.trainable(&module)?);
            part.lora = Some(lora);
        }
        Ok(out)
    }

    /// The parts' adapters with the parts' names, in load order.
    pub fn adapters(&self) -> impl Iterator<Item = (&str, &Lora)> {
        self.parts
            .iter()
            .filter_map(|p| p.lora.as_ref().map(|l| (p.name.as_str(), l)))
    }
}

/// A LoRA adapter on one projection `W` `[out, in]`, with PEFT's semantics:
/// `y = x·Wᵀ + b + (alpha/rank)·(x·Aᵀ)·Bᵀ`, `A` `[rank, in]` and `B` `[out, rank]` both [`Var`]s.
///
/// Why PEFT's: its initialisation (B = 0) starts training exactly at the base model, and its
/// tensor names and scaling make our adapters a PEFT `adapter_model.safetensors`. Why the
/// product goes through the rank (`(x·Aᵀ)·Bᵀ`, not `x·(B·A)ᵀ`): `rank·(in + out)` multiply-adds
/// per row instead of `in·out`, and no `[out, in]` tensor per step.
#[derive(Debug, Clone)]
pub struct Lora {
    /// `Var`s' tensors while training (the trainer holds the `Var`s), plain tensors in a
    /// [`Lora::detached`] copy.
    a: Tensor,
    b: Tensor,
    alpha: f64,
}

impl Lora {
    /// PEFT's `reset_lora_parameters`: A is `kaiming_uniform_(a=√5)`, i.e. uniform on
    /// `[−1/√in, 1/√in)` (gain `√(2/(1+5))`, bound `√3·gain/√in`), drawn from `rng` row by
    /// row; B is zero.
    pub fn new(
        in_dim: usize,
        out_dim: usize,
        rank: usize,
        alpha: f64,
        rng: &mut impl Rng,
        dtype: DType,
        device: &Device,
    ) -> candle_core::Result<Self> {
        if rank == 0 || !alpha.is_finite() {
            candle_core::bail!("LoRA needs a rank of at least 1 and a finite alpha (got rank {rank}, alpha {alpha})");
        }
        let bound = 1.0 / (in_dim as f64).sqrt();
        let a: Vec<f32> = (0..rank * in_dim)
            .map(|_| rng.gen_range(-bound..bound) as f32)
            .collect();
        let a = Tensor::from_vec(a, (rank, in_dim), device)?.to_dtype(dtype)?;
        Ok(Self {
            a: Var::from_tensor(&a)?.as_tensor().clone(),
            b: Var::zeros((out_dim, rank), dtype, device)?
                .as_tensor()
                .clone(),
            alpha,
        })
    }

    pub fn rank(&self) -> usize {
        self.a.dims()[0]
    }

    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    /// `alpha / rank`, PEFT's `scaling` (without rsLoRA).
    pub fn scale(&self) -> f64 {
        self.alpha / self.rank() as f64
    }

    /// `(alpha/rank)·(x·Aᵀ)·Bᵀ` for `xs` `[..., in]`.
    pub fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        let down = candle_nn::Linear::new(self.a.clone(), None).forward(xs)?;
        candle_nn::Linear::new(self.b.clone(), None)
            .forward(&down)?
            .affine(self.scale(), 0.0)
    }

    /// `(alpha/rank)·B·A` `[out, in]`: what merging adds to the base weight.
    pub fn delta(&self) -> candle_core::Result<Tensor> {
        self.b.matmul(&self.a)?.affine(self.scale(), 0.0)
    }

    fn bytes(&self) -> usize {
        tensor_bytes(&self.a) + tensor_bytes(&self.b)
    }

    /// A and B of the adapter on `module` (`model.layers.0.self_attn.q_proj`) as training
    /// weights under their PEFT names.
    fn trainable(&self, module: &str) -> candle_core::Result<[TrainableWeight; 2]> {
        // `from_tensor` of a variable shares it: the `Var`s made in `new`.
        Ok([
            TrainableWeight::whole(&peft_name(module, "A"), Var::from_tensor(&self.a)?),
            TrainableWeight::whole(&peft_name(module, "B"), Var::from_tensor(&self.b)?),
        ])
    }

    /// The same adapter outside autograd (shared storage): see [`Proj::detached`].
    fn detached(&self) -> Lora {
        Lora {
            a: self.a.detach(),
            b: self.b.detach(),
            alpha: self.alpha,
        }
    }

    /// A and B of the adapter on `module` under their PEFT names, as they are now.
    pub fn peft_weights(&self, module: &str) -> [(String, Tensor); 2] {
        [
            (peft_name(module, "A"), self.a.clone()),
            (peft_name(module, "B"), self.b.clone()),
        ]
    }
}

/// PEFT's key for an adapter matrix: the `PeftModel` holds the transformers model as
/// `base_model.model`, and saved adapters drop the adapter name (`default`).
fn peft_name(module: &str, matrix: &str) -> String {
    format!("base_model.model.{module}.lora_{matrix}.weight")
}

/// `down(silu(gate(x)) * up(x))`, the MLP of both Qwen2.5-VL towers (`mlp.gate_proj`,
/// `mlp.up_proj`, `mlp.down_proj`; biases in the vision tower only), gate and up fused.
#[derive(Debug, Clone)]
pub struct SwiGlu {
    /// Visible to the decoder, which walks its linears for training, checkpoints and LoRA.
    pub(crate) gate_up: FusedProj,
    pub(crate) down_proj: FusedProj,
    /// Whether `silu(gate)·up` runs as one vectorised pass ([`super::vmath::silu_mul`]) where
    /// autograd does not track it, rather than as candle's two ops ([`SwiGlu::fused_activation`]).
    fused_act: bool,
}

impl SwiGlu {
    /// The same MLP outside autograd ([`Proj::detached`]).
    pub fn detached(&self) -> SwiGlu {
        SwiGlu {
            gate_up: self.gate_up.detached(),
            down_proj: self.down_proj.detached(),
            fused_act: self.fused_act,
        }
    }

    /// The activation as one vectorised pass outside autograd, in every pass. Only for an MLP
    /// whose every pass is untracked or whose tracked passes need not match the untracked ones
    /// to the bit: the vision tower (frozen in training). Not the text decoder: GRPO compares
    /// the log-probabilities of an untracked pass (the rollout's) with a tracked one (the
    /// loss's), and with the two kernels (whose `exp` differs in the last bits) an interrupted
    /// and resumed training run no longer equalled an uninterrupted one (`tests/grpo_run.rs`: a
    /// weight 1e-5 apart after 4 steps). The decoder asks per pass instead
    /// ([`Self::forward_act`]).
    pub fn fused_activation(mut self) -> Self {
        self.fused_act = true;
        self
    }

    /// Reads `gate_proj`, `up_proj` (`[inter, hidden]`) and `down_proj` (`[hidden, inter]`) under
    /// `vb`. Each is stored in `quant` where its input width fits the block size (3B vision:
    /// `down_proj`'s 3420 does not, so it stays f32).
    pub fn load(
        hidden: usize,
        inter: usize,
        bias: bool,
        quant: Quant,
        vb: VarBuilder,
    ) -> candle_core::Result<Self> {
        Ok(Self {
            gate_up: FusedProj::load(
                hidden,
                &[("gate_proj", inter), ("up_proj", inter)],
                bias,
                quant,
                vb.clone(),
            )?,
            down_proj: FusedProj::load(inter, &[("down_proj", hidden)], bias, quant, vb)?,
            fused_act: false,
        })
    }

    pub fn weight_bytes(&self) -> usize {
        self.gate_up.weight_bytes() + self.down_proj.weight_bytes()
    }

    /// [`Module::forward`] in an inference pass when `inference` (the activation as one pass,
    /// which no gradient crosses, as none crosses candle's fused kernels that such a pass also
    /// runs), else as [`Self::fused_activation`] says. The text decoder passes whether it runs
    /// its inference kernels: its training passes, tracked or not, all take candle's ops, so
    /// their log-probabilities stay equal to the bit; and a LoRA model's inference pass (its
    /// adapters tracked) runs the same kernels as the base model's.
    pub fn forward_act(&self, xs: &Tensor, inference: bool) -> candle_core::Result<Tensor> {
        let [gate, up]: [Tensor; 2] = self
            .gate_up
            .forward(xs)?
            .try_into()
            .expect("gate_up has two parts");
        let fused = if inference {
            super::vmath::silu_mul(&gate.detach(), &up.detach())?
        } else if self.fused_act {
            super::vmath::silu_mul(&gate, &up)?
        } else {
            None
        };
        let act = match fused {
            Some(act) => act,
            None => (gate.silu()? * up)?,
        };
        self.down_proj.forward_one(&act)
    }
}

impl Module for SwiGlu {
    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        self.forward_act(xs, false)
    }
}

/// A quantized weight `[n, k]` in ggml blocks, row after row, owned by us rather than by a
/// candle `QTensor`.
///
/// Why not `QTensor`: on x86 candle 0.11 repacks a `QTensor`'s Q4K (and, with VNNI, Q8_0) blocks
/// into a wider tile layout on first use and keeps both for the tensor's lifetime — 0.75 byte
/// per Q4K weight next to the original 0.5625, which put the 3B model's peak memory at 1.5x its
/// weights. Measured on this project's 2-core AVX2 machine (`k=2048, n=11008`): for one row
/// (decode) candle's plain ggml kernel (`k_quants::matmul`) over the compact blocks takes 4.0 ms
/// against 7.4 ms through the repacked tiles, and for 545 rows (prefill) the tiles win, 350 ms
/// against 780 ms. So: few rows run a plain kernel on our blocks (our own, [`super::qgemv`],
/// where AVX2 is; else candle's); many rows run our tiles on the same blocks
/// ([`super::qgemm`], Q4K where AVX2 is), else hand a temporary `QTensor` (a copy of the
/// blocks) to candle, which repacks it for that one product and frees both afterwards. That
/// copy and repack, O(n·k) against O(m·n·k) for the product, still cost a third of a 545-row
/// product's time (`k=2048, n=11008`: 53 ms with them against 32 ms on tiles kept).
#[derive(Debug, Clone)]
pub enum QBlocks {
    Q8_0(Arc<QRows<BlockQ8_0>>),
    Q4K(Arc<QRows<BlockQ4K>>),
}

/// Blocks of one matrix and its shape.
pub struct QRows<T> {
    blocks: Vec<T>,
    n: usize,
    k: usize,
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
fn candle_tiles_q8_0() -> bool {
    static TILES: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TILES.get_or_init(candle_tiles_q8_0_now)
}

fn candle_tiles_q8_0_now() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        matches!(
            candle_quant_tier(super::qgemv::cpu_has, super::qgemv::switch_on),
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
fn candle_tile_shape(n: usize, k: usize) -> bool {
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
    Avx512Vnni,
    AvxVnni,
    Avx2,
}

impl CandleTier {
    pub fn name(self) -> &'static str {
        match self {
            CandleTier::Avx512Vnni => "avx512-vnni",
            CandleTier::AvxVnni => "avx-vnni",
            CandleTier::Avx2 => "avx2",
        }
    }
}

/// A kernel for products of few rows: `(m, k, n)`, `lhs` `[m, k]`, the blocks, `dst` `[m, n]`.
type FewRows<T> = fn((usize, usize, usize), &[f32], &[T], &mut [f32]) -> candle_core::Result<()>;

/// How a quantized product of [`PACKED_MIN_ROWS`] rows or more runs.
enum ManyRows<T> {
    /// Our kernel over the blocks ([`super::qgemm`]).
    Ours(FewRows<T>),
    /// Candle's repacked tiles on a temporary `QTensor` copy of the blocks.
    Candle,
    /// The f32 `gemm` on the weight dequantized for this one product.
    Dense,
}

/// Rows at or above which a quantized product takes the many-row kernels (see [`QBlocks`]).
/// Set for candle's tiles; ours ([`super::qgemm`]) already beat the row kernels from about 16
/// rows (`k=2048, n=11008`, AVX-512 EPYC), not yet measured elsewhere, so it stays.
pub const PACKED_MIN_ROWS: usize = 32;

/// Quantizes `w` `[n, k]` row by row, in parallel (each row is whole blocks: `k` fits).
fn quantize_rows<T: GgmlType>(w: &Tensor) -> candle_core::Result<Arc<QRows<T>>> {
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
/// [`super::qcache`] stores). `k` must fit `quant`'s block size.
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
fn block_bytes<T: GgmlType>(blocks: &[T]) -> &[u8] {
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
        T: super::heap::ZeroBits,
    {
        let mut blocks = super::heap::zeroed::<T>(n * (k / T::BLCK_SIZE));
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

    fn bytes(&self) -> usize {
        std::mem::size_of_val(self.blocks.as_slice())
    }

    /// The weight `[n, k]` in f32, row by row across candle's thread pool: a transient copy
    /// (4 bytes per weight) that lives for one product.
    fn dequantize(&self, device: &Device) -> candle_core::Result<Tensor> {
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
    /// [`super::qcache`] does; candle's own backends have no such names. Why through the
    /// `VarBuilder`: the model code stays ordinary `vb.pp(..)` code, and each weight is named
    /// exactly as in the checkpoint.
    fn from_backend(
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
    pub fn bytes(&self) -> usize {
        match self {
            QBlocks::Q8_0(r) => r.bytes(),
            QBlocks::Q4K(r) => r.bytes(),
        }
    }

    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        /// Our row kernel where the CPU runs it, else candle's.
        fn few_rows<T: GgmlType>(ours: FewRows<T>) -> FewRows<T> {
            if super::qgemv::available() {
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
                few_rows(super::qgemv::q8_0),
                candle_or_dense(candle_tiles_q8_0() && candle_tile_shape(r.n, r.k)),
            ),
            QBlocks::Q4K(r) => {
                let many = if super::qgemm::chosen_here().is_some() {
                    ManyRows::Ours(super::qgemm::q4k)
                } else {
                    candle_or_dense(candle_tile_shape(r.n, r.k))
                };
                r.forward(xs, few_rows(super::qgemv::q4k), many)
            }
        }
    }
}

/// Rows below which a dense f32 product runs [`super::qgemv::dense`] (decode, a GRPO group)
/// instead of candle's `gemm`. Measured on the 2-core AVX2 machine, 2 threads, `k=2048,
/// n=11008` (6 copies, out of cache): 1 row 4.4 → 3.0 ms, 4 rows 10.9 → 4.4 ms (gemm's few-row
/// path packs the activations and falls to 8 GB/s), 8 rows 12.2 → 7.3 ms, 15 rows 13.7 →
/// 12.3 ms; at 32 rows gemm's tiles win (17.8 against 26.3 ms).
pub const DENSE_FEW_ROWS: usize = 12;

/// Weights of fewer elements stay with `gemm`: they sit in the cache, and the pool's dispatch
/// costs more than the product (64×64, one row: 1.5 µs gemm, 2.1 µs ours; 128×1024: 30 →
/// 22 µs ours).
const DENSE_FEW_MIN_WEIGHTS: usize = 1 << 16;

/// `candle_nn::Linear::forward`, except for untracked f32 products on the CPU against a weight
/// of at least [`DENSE_FEW_MIN_WEIGHTS`] values:
/// - fewer than [`DENSE_FEW_ROWS`] rows (decode, a GRPO group) go through our row kernel
///   where AVX2 is ([`super::qgemv`]; f32 decode of a 4-layer 3B in `bench vlm` 8.8 →
///   12.4–13.2 tok/s, 62 → 67–72 % of the triad bandwidth);
/// - more rows (a prompt, an image's patches) through our tiles where AVX2 is
///   ([`super::sgemm`]; on AVX-512 1.1–1.6× `gemm`'s `x86-v4` kernels on the 3B's prefill and
///   vision shapes, 3–5× at 16–64 rows), the bias added in the same pass.
///
/// Only outside autograd: a weight, bias or input that a backward pass tracks (training) keeps
/// candle's differentiable matmul.
fn dense_forward(l: &candle_nn::Linear, xs: &Tensor) -> candle_core::Result<Tensor> {
    let w = l.weight();
    let (n, k) = w.dims2()?;
    let dims = xs.dims();
    let m = xs.elem_count().checked_div(k).unwrap_or(0);
    let plain = xs.device().is_cpu()
        && matches!(w.dtype(), DType::F32 | DType::BF16)
        && xs.dtype() == DType::F32
        && dims.last() == Some(&k)
        && m > 0
        && n * k >= DENSE_FEW_MIN_WEIGHTS
        && w.is_contiguous()
        && l.bias()
            .is_none_or(|b| b.dtype() == DType::F32 && b.dims() == [n])
        && !xs.track_op()
        && !w.track_op()
        && !l.bias().is_some_and(Tensor::track_op);
    let ours = if !plain {
        None
    } else if m < DENSE_FEW_ROWS {
        super::qgemv::available().then_some(DenseKernel::Rows)
    } else {
        super::sgemm::chosen_here().map(DenseKernel::Tiles)
    };
    let Some(kernel) = ours else {
        if xs.track_op() && !w.track_op() && dims.last() == Some(&k) && m > 0 {
            return frozen_forward(l, xs, m, n);
        }
        if w.dtype() == DType::BF16 && xs.dtype() != DType::BF16 {
            // A bf16-kept weight widened for this product only (see `keeps_bf16`).
            let widened = candle_nn::Linear::new(w.to_dtype(xs.dtype())?, l.bias().cloned());
            return widened.forward(xs);
        }
        return l.forward(xs);
    };
    let bias = match (kernel, l.bias()) {
        (DenseKernel::Tiles(_), Some(b)) => Some(b.to_vec1::<f32>()?),
        _ => None,
    };
    let mut dst = vec![0f32; m * n];
    // The activation is read where it lies (a copy of a prompt's 545 × 11008 input is ~24 MB
    // per `down_proj`), as is the weight (`plain` checked it contiguous).
    let xs = xs.contiguous()?;
    fn run<W: super::qgemv::DenseElem>(
        kernel: DenseKernel,
        (m, k, n): (usize, usize, usize),
        lhs: &[f32],
        w: &[W],
        bias: Option<&[f32]>,
        dst: &mut [f32],
    ) -> candle_core::Result<()> {
        match kernel {
            DenseKernel::Rows => super::qgemv::dense((m, k, n), lhs, w, dst),
            DenseKernel::Tiles(tiles) => {
                super::sgemm::matmul_nt(tiles, (m, k, n), lhs, w, bias, dst)
            }
        }
    }
    with_cpu::<f32, _>(&xs, m * k, |lhs| match w.dtype() {
        DType::BF16 => with_cpu::<half::bf16, _>(w, n * k, |w| {
            run(kernel, (m, k, n), lhs, w, bias.as_deref(), &mut dst)
        }),
        _ => with_cpu::<f32, _>(w, n * k, |w| {
            run(kernel, (m, k, n), lhs, w, bias.as_deref(), &mut dst)
        }),
    })?;
    let mut out = dims[..dims.len() - 1].to_vec();
    out.push(n);
    let y = Tensor::from_vec(dst, out, xs.device())?;
    match (kernel, l.bias()) {
        (DenseKernel::Rows, Some(b)) => y.broadcast_add(b),
        _ => Ok(y),
    }
}

/// `f` over the first `len` values of a contiguous `T` CPU tensor, where the tensor holds them.
fn with_cpu<T: candle_core::WithDType, R>(
    t: &Tensor,
    len: usize,
    f: impl FnOnce(&[T]) -> candle_core::Result<R>,
) -> candle_core::Result<R> {
    let (storage, layout) = t.storage_and_layout();
    let Storage::Cpu(cpu) = &*storage else {
        candle_core::bail!("linear: a CPU tensor expected");
    };
    let start = layout.start_offset();
    f(&cpu.as_slice::<T>()?[start..start + len])
}

/// Which of our kernels a dense f32 product takes ([`dense_forward`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DenseKernel {
    /// [`super::qgemv::dense`]: few rows, memory-bound.
    Rows,
    /// [`super::sgemm::matmul_nt`]: many rows, compute-bound.
    Tiles(super::qgemv::RowKernels),
}

/// `xs · wᵀ` for a weight that is not trained (LoRA's base, the modules full fine-tuning
/// leaves out, a tied `lm_head`) under an input that is: the gradient flows to the input only.
///
/// Why not candle's matmul: its backward computes the gradient of *both* operands
/// (`backprop.rs`, `Op::Matmul`), whether or not the weight is trained, and keeps every one in
/// the gradient store until the pass ends: a second copy of every frozen weight (15 GB for the
/// 3B, 1.2 GB for its `lm_head` alone) and a weight-sized product per linear per step. This
/// op multiplies with the same kernel (the storage's own matmul) and answers only `∂L/∂x`.
fn frozen_forward(
    l: &candle_nn::Linear,
    xs: &Tensor,
    m: usize,
    n: usize,
) -> candle_core::Result<Tensor> {
    let dims = xs.dims();
    let k = dims[dims.len() - 1];
    let x2 = xs.contiguous()?.reshape((m, k))?;
    let y = x2.apply_op1(FrozenRhs {
        w: l.weight().clone(),
    })?;
    let mut out = dims[..dims.len() - 1].to_vec();
    out.push(n);
    let y = y.reshape(out)?;
    match l.bias() {
        Some(b) => y.broadcast_add(b),
        None => Ok(y),
    }
}

/// `x [m, k] · wᵀ` for `w` `[n, k]` with a backward pass for `x` alone (see [`frozen_forward`]).
/// A bf16-kept `w` ([`keeps_bf16`]) is widened for each product and dropped after it: the
/// graph keeps the weight as stored, so a training pass does not hold an f32 copy of every
/// frozen weight until its backward pass.
struct FrozenRhs {
    w: Tensor,
}

impl FrozenRhs {
    /// `w` in the type it computes in (a transient f32 copy of a bf16-kept weight).
    fn computed(&self) -> candle_core::Result<Tensor> {
        self.w.to_dtype(computed_in(self.w.dtype()))
    }

    /// The product on one backend: the storage's own matmul, the kernel `Tensor::matmul` runs.
    fn forward_on<S: candle_core::backend::BackendStorage>(
        &self,
        x: &S,
        layout: &candle_core::Layout,
        pick: impl Fn(&Storage) -> Option<&S>,
    ) -> candle_core::Result<(S, candle_core::Shape)> {
        let (m, k) = layout.shape().dims2()?;
        let w_t = self.computed()?.t()?;
        let (wk, n) = w_t.dims2()?;
        if wk != k {
            candle_core::bail!("frozen linear: input width {k}, weight expects {wk}");
        }
        let (storage, w_layout) = w_t.storage_and_layout();
        let Some(w) = pick(&storage) else {
            candle_core::bail!("frozen linear: the input and the weight are on different devices");
        };
        Ok((x.matmul(w, (1, m, n, k), layout, w_layout)?, (m, n).into()))
    }
}

impl candle_core::CustomOp1 for FrozenRhs {
    fn name(&self) -> &'static str {
        "frozen-linear"
    }

    fn cpu_fwd(
        &self,
        x: &candle_core::CpuStorage,
        layout: &candle_core::Layout,
    ) -> candle_core::Result<(candle_core::CpuStorage, candle_core::Shape)> {
        self.forward_on(x, layout, |s| match s {
            Storage::Cpu(w) => Some(w),
            _ => None,
        })
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        x: &candle_core::CudaStorage,
        layout: &candle_core::Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, candle_core::Shape)> {
        self.forward_on(x, layout, |s| match s {
            Storage::Cuda(w) => Some(w),
            _ => None,
        })
    }

    fn bwd(&self, _x: &Tensor, _y: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(grad.matmul(&self.computed()?)?))
    }
}

/// Whether a dense weight stays bf16 where the checkpoint stores it so (read through
/// [`super::weights::AS_STORED`]) rather than widened to f32 at load: on the CPU where our
/// kernels take bf16 weights ([`super::qgemv::dense`] for few rows, [`super::sgemm`]'s tiles
/// for many), unless `POINTACT_DENSE_F32=1` (to compare the two in one binary).
///
/// Why: the products are the same, bit for bit (bf16 widens exactly, in registers, and every
/// sum keeps its order), while the weights take half the memory and f32 decode, which reads
/// every weight once per token, reads half the bytes. Products our kernels do not take (a
/// tracked input in training, a weight under [`DENSE_FEW_MIN_WEIGHTS`] values, another
/// device) widen the weight for that product; training widens the weights it moves for good.
pub fn keeps_bf16(device: &Device) -> bool {
    device.is_cpu()
        && keeps_bf16_with(
            super::qgemv::row_kernels(super::qgemv::cpu_has, |_| false),
            super::sgemm::chosen_here(),
            super::qgemv::switch_on,
        )
}

/// [`keeps_bf16`]'s rule for the CPU's row kernels (`rows`, [`super::qgemv::row_kernels`]),
/// tiles (`tiles`, [`super::sgemm::chosen`]) and the environment (`env`): one rule for the
/// loader and `bench vlm`'s kernels line.
pub fn keeps_bf16_with(
    rows: Option<super::qgemv::RowKernels>,
    tiles: Option<super::qgemv::RowKernels>,
    env: impl Fn(&str) -> bool,
) -> bool {
    rows.is_some() && tiles.is_some() && !env("POINTACT_DENSE_F32")
}

/// The dtype a weight stored in `dtype` computes in: f32 for a bf16-kept one ([`keeps_bf16`]).
fn computed_in(dtype: DType) -> DType {
    match dtype {
        DType::BF16 => DType::F32,
        other => other,
    }
}

/// The name under `vb` to ask for a dense weight `leaf` of input width `in_dim` by: with
/// [`super::weights::AS_STORED`] (bf16 as stored, see [`keeps_bf16`]) where the weight will be
/// dense (`quant` f32, or a width its blocks do not fit) and the backend serves that name.
fn dense_name(leaf: &str, quant: Quant, in_dim: usize, vb: &VarBuilder) -> String {
    let as_stored = format!("{leaf}{}", super::weights::AS_STORED);
    let dense = quant == Quant::F32 || !quant.fits(in_dim);
    if dense && keeps_bf16(vb.device()) && vb.contains_tensor(&as_stored) {
        as_stored
    } else {
        leaf.to_string()
    }
}

/// Bytes of a tensor's elements (what a contiguous copy of it occupies).
pub(crate) fn tensor_bytes(t: &Tensor) -> usize {
    t.elem_count() * t.dtype().size_in_bytes()
}

/// Bytes of a dense linear's weight and bias.
pub(crate) fn linear_bytes(l: &candle_nn::Linear) -> usize {
    tensor_bytes(l.weight()) + l.bias().map_or(0, tensor_bytes)
}

impl Module for Proj {
    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Proj::Dense(l) => dense_forward(l, xs),
            Proj::Quantized { w, bias } => {
                let y = w.forward(xs)?;
                match bias {
                    Some(b) => y.broadcast_add(b),
                    None => Ok(y),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use candle_core::Device;

    use super::*;

    fn weight(n: usize, k: usize, seed: u64) -> Tensor {
        // Deterministic, not constant per row: a hash of (seed, index) mapped to [-0.05, 0.05).
        let data: Vec<f32> = (0..n * k)
            .map(|i| {
                let h = (i as u64 ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15))
                    .wrapping_mul(0xbf58_476d_1ce4_e5b9);
                ((h >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.1
            })
            .collect();
        Tensor::from_vec(data, (n, k), &Device::Cpu).unwrap()
    }

    fn max_rel(a: &Tensor, b: &Tensor) -> f32 {
        let a: Vec<f32> = a.flatten_all().unwrap().to_vec1().unwrap();
        let b: Vec<f32> = b.flatten_all().unwrap().to_vec1().unwrap();
        assert_eq!(a.len(), b.len());
        let scale = b.iter().fold(0f32, |m, v| m.max(v.abs()));
        a.iter()
            .zip(&b)
            .fold(0f32, |m, (x, y)| m.max((x - y).abs()))
            / scale
    }

    /// `2^-24`, the unit roundoff of f32.
    const U: f64 = f32::EPSILON as f64 / 2.0;

    fn dequantize<T: GgmlType>(blocks: &[T], len: usize) -> Vec<f32> {
        let mut out = vec![0f32; len];
        T::to_float(blocks, &mut out);
        out
    }

    /// What a quantized [`Proj`] holds, as f32 `[n, k]`: the dequantized weight `W`, and per
    /// element the size `b ≥ 0` of the offset the format subtracts (Q4K stores each sub-block as
    /// `a·q − b` with `q ∈ 0..=15`; Q8_0 has none), and the stored block bytes.
    fn stored(proj: &Proj) -> (Vec<f32>, Vec<f32>, Vec<u8>) {
        match proj {
            Proj::Quantized {
                w: QBlocks::Q8_0(r),
                ..
            } => (
                dequantize(&r.blocks, r.n * r.k),
                vec![0.0; r.n * r.k],
                block_bytes(&r.blocks).to_vec(),
            ),
            Proj::Quantized {
                w: QBlocks::Q4K(r), ..
            } => {
                // With every 4-bit `q` zeroed a block dequantizes to `-b`. BlockQ4K is
                // `{ d: f16, dmin: f16, scales: [u8; 12], qs: [u8; 128] }`, `repr(C)`.
                assert_eq!(std::mem::size_of::<BlockQ4K>(), 144);
                let mut zeroed = r.blocks.clone();
                for b in &mut zeroed {
                    // SAFETY: bytes 16..144 of the block are its `qs` (see above); any byte
                    // value is a valid `u8`.
                    unsafe {
                        std::ptr::write_bytes((b as *mut BlockQ4K).cast::<u8>().add(16), 0, 128)
                    }
                }
                let offsets = dequantize(&zeroed, r.n * r.k).iter().map(|v| -v).collect();
                (
                    dequantize(&r.blocks, r.n * r.k),
                    offsets,
                    block_bytes(&r.blocks).to_vec(),
                )
            }
            Proj::Dense(_) => panic!("expected a quantized projection"),
        }
    }

    /// Per activation, a bound on `|x − x̂|`, `x̂` being what a kernel multiplies after
    /// quantizing the activations to 8 bits. Derivation (candle 0.11's `from_float`s):
    ///
    /// * Q8_0 blocks of 32: `d = amax/127`, `q = round(x/d)`, `x̂ = f16(d)·q`. Rounding to the
    ///   nearest integer is off by at most 1/2 step, i.e. `d/2`; `x/d` in f32 adds ≤ 2u relative
    ///   (≤ 254u steps); the f16 scale is off by ≤ 2⁻¹¹·d (`d` in f16's normal range, ≥ 2⁻¹⁴,
    ///   as here), times `|q| ≤ 127`. So
    ///   `|x − x̂| ≤ amax₃₂/127 · (1/2 + 254u + 127·2⁻¹¹)`.
    /// * Q8K blocks of 256: `iscale = -127/max`, `q = round(iscale·x)` (|q| ≤ 127, so the clamp
    ///   to -128..=127 never bites), `x̂ = (1/iscale)·q` with an f32 scale. So
    ///   `|x − x̂| ≤ amax₂₅₆/127 · (1/2 + 508u)`.
    ///
    /// Which one a kernel uses depends on the weight format *and the CPU*: the plain ggml kernel
    /// (`k_quants::matmul`, our decode path) pairs Q8_0 weights with Q8_0 activations and Q4K
    /// with Q8K, while candle's repacked x86 kernels quantize the activations to Q8K for both,
    /// and on AVX-512 VNNI they take Q8_0 weights too (on AVX2 they do not). So for Q8_0 weights
    /// the bound is the larger of the two; for Q4K it is Q8K's.
    fn activation_errors(x: &[f32], quant: Quant) -> Vec<f64> {
        assert!(x.len().is_multiple_of(256));
        let amax = |l: usize, size: usize| {
            let start = l / size * size;
            x[start..start + size]
                .iter()
                .fold(0f64, |m, v| m.max(f64::from(v.abs())))
        };
        (0..x.len())
            .map(|l| {
                let q8k = amax(l, 256) / 127.0 * (0.5 + 508.0 * U);
                match quant {
                    Quant::Q8_0 => {
                        let d = amax(l, 32) / 127.0;
                        assert!(d >= 2f64.powi(-14), "scale {d} below f16's normal range");
                        q8k.max(d * (0.5 + 254.0 * U + 127.0 / 2048.0))
                    }
                    Quant::Q4K => q8k,
                    Quant::F32 => unreachable!("dense weights quantize nothing"),
                }
            })
            .collect()
    }

    /// The exact product `x·Wᵀ` (in f64, of the f32 values) of `x` `[m, k]` with the
    /// dequantized weight `w` `[n, k]`, and for each output the bound a quantized kernel's result
    /// must stay within:
    ///
    /// `Σ_l |w_l|·e_l  +  γ·Σ_l (|w_l| + 2·b_l)·(|x_l| + e_l)`,  `γ = 2·(k/32 + 8)·u`.
    ///
    /// The first term is the activation quantization ([`activation_errors`] `e_l`): the kernel
    /// computes `Σ w_l·x̂_l` with the stored weights, exactly in integers within a block. The
    /// second is f32 slack: the kernel scales each block's (or Q4K sub-block's, twice: the
    /// `a·q` and the `b` part) integer sum by a product of f32 scales and adds up those ≤ 2k/32
    /// terms in some order, each rounding ≤ u relative to the magnitudes `(a·q_l + b_l)·|x̂_l|
    /// = (|w_l| + 2b_l)·|x̂_l|` at most; the reference's own dequantization rounds too. `γ`
    /// covers that with a factor of 2 to spare; for these sizes it is orders of magnitude below
    /// the first term, which is what the kernels actually use up.
    fn exact_and_bound(
        x: &[f32],
        w: &[f32],
        offsets: &[f32],
        (m, k, n): (usize, usize, usize),
        quant: Quant,
    ) -> (Vec<f64>, Vec<f64>) {
        let gamma = 2.0 * (k / 32 + 8) as f64 * U;
        let mut exact = vec![0f64; m * n];
        let mut bound = vec![0f64; m * n];
        for i in 0..m {
            let xi = &x[i * k..(i + 1) * k];
            let e = activation_errors(xi, quant);
            for j in 0..n {
                let wj = &w[j * k..(j + 1) * k];
                let bj = &offsets[j * k..(j + 1) * k];
                let (mut y, mut quantization, mut slack) = (0f64, 0f64, 0f64);
                for (((&wl, &xl), &bl), &el) in wj.iter().zip(xi).zip(bj).zip(&e) {
                    let (wl, xl) = (f64::from(wl), f64::from(xl));
                    y += wl * xl;
                    quantization += wl.abs() * el;
                    slack += (wl.abs() + 2.0 * f64::from(bl)) * (xl.abs() + el);
                }
                exact[i * n + j] = y;
                bound[i * n + j] = quantization + gamma * slack;
            }
        }
        (exact, bound)
    }

    /// The largest `|got − exact| / bound` and the outputs (flat indices) over their bound.
    fn over_bound(got: &Tensor, exact: &[f64], bound: &[f64]) -> (f64, Vec<usize>) {
        let got: Vec<f32> = got.flatten_all().unwrap().to_vec1().unwrap();
        assert_eq!(got.len(), exact.len());
        let mut worst = 0f64;
        let mut over = Vec::new();
        for (i, ((&g, &y), &b)) in got.iter().zip(exact).zip(bound).enumerate() {
            let ratio = (f64::from(g) - y).abs() / b;
            worst = worst.max(ratio);
            if ratio > 1.0 {
                over.push(i);
            }
        }
        (worst, over)
    }

    /// Row counts on both sides of [`PACKED_MIN_ROWS`]: plain kernel below, candle's own above.
    const ROWS: [usize; 5] = [1, 3, PACKED_MIN_ROWS - 1, PACKED_MIN_ROWS, 40];

    fn activations(m: usize, k: usize) -> Tensor {
        weight(m, k, 7 + m as u64).affine(20.0, 0.0).unwrap()
    }

    /// Every quantized path (decode rows through the plain ggml kernel on our blocks, prefill
    /// rows through candle's `QMatMul`), and candle's own `QMatMul` for every row count, stays
    /// within the activation-quantization bound of the exact product of the dequantized weights
    /// — whichever kernels this CPU selects (see [`activation_errors`]).
    #[test]
    fn quantized_rows_stay_within_the_activation_quantization_bound() {
        let (n, k) = (48, 512);
        let w = weight(n, k, 1);
        for quant in [Quant::Q8_0, Quant::Q4K] {
            let proj = Proj::from_weight(w.clone(), None, quant).unwrap();
            let (wq, offsets, _) = stored(&proj);
            let candle =
                QMatMul::from_qtensor(QTensor::quantize(&w, quant.ggml().unwrap()).unwrap())
                    .unwrap();
            for m in ROWS {
                let x = activations(m, k);
                let xs: Vec<f32> = x.flatten_all().unwrap().to_vec1().unwrap();
                let (exact, bound) = exact_and_bound(&xs, &wq, &offsets, (m, k, n), quant);
                let ours = proj.forward(&x).unwrap();
                assert_eq!(ours.dims(), &[m, n]);
                let (worst, over) = over_bound(&ours, &exact, &bound);
                assert!(
                    over.is_empty(),
                    "{quant} m={m}: {} outputs over the bound, worst {worst:.2}x",
                    over.len()
                );
                let (worst_candle, over) = over_bound(&candle.forward(&x).unwrap(), &exact, &bound);
                assert!(
                    over.is_empty(),
                    "{quant} m={m}: candle's QMatMul has {} outputs over the bound, worst {worst_candle:.2}x",
                    over.len()
                );
                println!("{quant} m={m}: error/bound at most {worst:.3} (ours), {worst_candle:.3} (QMatMul)");
            }
        }
    }

    /// The bound catches a wrong weight: a projection built from the weight with one block of
    /// one row shifted by that block's largest magnitude, in the direction of the first
    /// activation row's signs, is over the bound of the right weight's exact product at that
    /// output — on both sides of [`PACKED_MIN_ROWS`] — and only in that weight row.
    #[test]
    fn a_wrong_block_breaks_the_bound() {
        let (n, k) = (48, 512);
        let w = weight(n, k, 1);
        let (row, block) = (5, 1);
        for quant in [Quant::Q8_0, Quant::Q4K] {
            let (wq, offsets, _) = stored(&Proj::from_weight(w.clone(), None, quant).unwrap());
            let size = quant.ggml().unwrap().block_size();
            let cols = block * size..(block + 1) * size;
            for m in [1, PACKED_MIN_ROWS] {
                let x = activations(m, k);
                let xs: Vec<f32> = x.flatten_all().unwrap().to_vec1().unwrap();
                let mut wrong: Vec<f32> = w.flatten_all().unwrap().to_vec1().unwrap();
                let shift = wrong[row * k..][cols.clone()]
                    .iter()
                    .fold(0f32, |a, v| a.max(v.abs()));
                for l in cols.clone() {
                    wrong[row * k + l] += shift * xs[l].signum();
                }
                let wrong = Tensor::from_vec(wrong, (n, k), &Device::Cpu).unwrap();
                let proj = Proj::from_weight(wrong, None, quant).unwrap();
                let (exact, bound) = exact_and_bound(&xs, &wq, &offsets, (m, k, n), quant);
                let (worst, over) = over_bound(&proj.forward(&x).unwrap(), &exact, &bound);
                println!("{quant} m={m}: wrong block at {worst:.1}x the bound");
                assert!(
                    over.contains(&row),
                    "{quant} m={m}: the wrong block went unnoticed (worst {worst:.2}x)"
                );
                assert!(
                    over.iter().all(|i| i % n == row),
                    "{quant} m={m}: outputs of right weight rows over the bound: {over:?}"
                );
            }
        }
    }

    /// The same kernel gives the same bits: our blocks are candle's quantizer's bytes, decode rows
    /// equal a direct call of the few-row kernel (`qgemv` where it runs, else
    /// `k_quants::matmul`; `qgemv`'s own test holds it to `k_quants`) on blocks quantized
    /// in one go, and prefill rows equal candle's `QMatMul` over `QTensor::quantize` (Q8_0
    /// without candle's int8 tiles: the f32 product with the dequantized weight) — the kernels
    /// our paths call by construction, on any CPU.
    #[test]
    fn quantized_rows_equal_the_kernels_they_call() {
        fn plain<T: GgmlType>(
            w: &[f32],
            x: &[f32],
            (m, k, n): (usize, usize, usize),
            kernel: FewRows<T>,
        ) -> Vec<f32> {
            let mut blocks = vec![T::zeros(); n * k / T::BLCK_SIZE];
            T::from_float(w, &mut blocks);
            let mut dst = vec![0f32; m * n];
            kernel((m, k, n), x, &blocks, &mut dst).unwrap();
            dst
        }
        let ours = crate::qgemv::available();
        let q4k_kernel: FewRows<BlockQ4K> = if ours {
            crate::qgemv::q4k
        } else {
            k_quants::matmul
        };
        let q8_0_kernel: FewRows<BlockQ8_0> = if ours {
            crate::qgemv::q8_0
        } else {
            k_quants::matmul
        };
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        // 48 rows fit candle's 16-row tiles; 40 do not (its generic path: ours is the dense one).
        for (n, k) in [(48, 512), (40, 512)] {
            assert_eq!(candle_tile_shape(n, k), n == 48);
            let w = weight(n, k, 1);
            let ws: Vec<f32> = w.flatten_all().unwrap().to_vec1().unwrap();
            for quant in [Quant::Q8_0, Quant::Q4K] {
                let proj = Proj::from_weight(w.clone(), None, quant).unwrap();
                let q = QTensor::quantize(&w, quant.ggml().unwrap()).unwrap();
                assert_eq!(proj.weight_bytes(), q.storage_size_in_bytes(), "{quant}");
                assert!(
                    stored(&proj).2 == *q.data().unwrap(),
                    "{quant}: other block bytes"
                );
                let candle = QMatMul::from_qtensor(q).unwrap();
                for m in ROWS {
                    let x = activations(m, k);
                    let xs: Vec<f32> = x.flatten_all().unwrap().to_vec1().unwrap();
                    let ours: Vec<f32> = proj
                        .forward(&x)
                        .unwrap()
                        .flatten_all()
                        .unwrap()
                        .to_vec1()
                        .unwrap();
                    let want: Vec<f32> = if m < PACKED_MIN_ROWS {
                        match quant {
                            Quant::Q8_0 => plain(&ws, &xs, (m, k, n), q8_0_kernel),
                            _ => plain(&ws, &xs, (m, k, n), q4k_kernel),
                        }
                    } else if quant == Quant::Q4K && crate::qgemm::chosen_here().is_some() {
                        plain(&ws, &xs, (m, k, n), crate::qgemm::q4k)
                    } else if (quant == Quant::Q8_0 && !candle_tiles_q8_0())
                        || !candle_tile_shape(n, k)
                    {
                        // f32 gemm over the dequantized weight.
                        let dense = QTensor::quantize(&w, quant.ggml().unwrap())
                            .unwrap()
                            .dequantize(&Device::Cpu)
                            .unwrap();
                        x.matmul(&dense.t().unwrap())
                            .unwrap()
                            .flatten_all()
                            .unwrap()
                            .to_vec1()
                            .unwrap()
                    } else {
                        candle
                            .forward(&x)
                            .unwrap()
                            .flatten_all()
                            .unwrap()
                            .to_vec1()
                            .unwrap()
                    };
                    assert!(
                        bits(&ours) == bits(&want),
                        "{quant} m={m}: not the kernel's bits"
                    );
                }
                // Leading batch dims are kept.
                let x = weight(6, k, 3).reshape((2, 3, k)).unwrap();
                assert_eq!(proj.forward(&x).unwrap().dims(), &[2, 3, n]);
            }
        }
    }

    /// The bits of an f32 tensor's values, for bit-for-bit comparisons.
    fn bits(t: &Tensor) -> Vec<u32> {
        let v: Vec<f32> = t.flatten_all().unwrap().to_vec1().unwrap();
        v.iter().map(|f| f.to_bits()).collect()
    }

    /// A bf16-kept weight gives the bits of the same weight widened to f32, for every product
    /// our kernels take (rows, tiles, with a bias) and those they do not (a weight under
    /// [`DENSE_FEW_MIN_WEIGHTS`], a tracked input, which still gets its gradient); training
    /// widens it for good, and a LoRA adapter on it is f32.
    #[test]
    fn a_bf16_weight_gives_the_widened_weights_bits() {
        for (n, k) in [(300, 256), (64, 64)] {
            let w16 = weight(n, k, 7).to_dtype(DType::BF16).unwrap();
            let w32 = w16.to_dtype(DType::F32).unwrap();
            let b = weight(1, n, 8).squeeze(0).unwrap();
            let kept = Proj::Dense(candle_nn::Linear::new(w16.clone(), Some(b.clone())));
            let widened = Proj::Dense(candle_nn::Linear::new(w32.clone(), Some(b.clone())));
            for m in [1, 3, DENSE_FEW_ROWS, 40] {
                let x = activations(m, k).reshape((1, m, k)).unwrap();
                let got = kept.forward(&x).unwrap();
                assert_eq!(got.dtype(), DType::F32);
                assert!(
                    bits(&got) == bits(&widened.forward(&x).unwrap()),
                    "[{n}, {k}] m={m}"
                );
            }
            // A tracked input (a LoRA adapter's training) through the frozen bf16 weight.
            let xv = Var::from_tensor(&activations(2, k)).unwrap();
            let y = kept.forward(xv.as_tensor()).unwrap();
            let y32 = widened.forward(xv.as_tensor()).unwrap();
            assert!(bits(&y) == bits(&y32));
            let g = y.sum_all().unwrap().backward().unwrap();
            let g = g.get(xv.as_tensor()).expect("the input's gradient");
            let g32 = y32.sum_all().unwrap().backward().unwrap();
            assert!(bits(g) == bits(g32.get(xv.as_tensor()).unwrap()));
        }
        let mut p = Proj::Dense(candle_nn::Linear::new(
            weight(300, 256, 9).to_dtype(DType::BF16).unwrap(),
            None,
        ));
        let vars = p.make_trainable("x", &|_| true).unwrap();
        assert_eq!(vars[0].var.as_tensor().dtype(), DType::F32);
        let mut fused = FusedProj {
            proj: Proj::Dense(candle_nn::Linear::new(
                weight(300, 256, 10).to_dtype(DType::BF16).unwrap(),
                None,
            )),
            parts: vec![Part {
                name: "q_proj".into(),
                rows: 300,
                lora: None,
            }],
        };
        let mut rng = <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(1);
        let adapters = fused.add_lora("m", &|_| true, 4, 8.0, &mut rng).unwrap();
        assert!(adapters
            .iter()
            .all(|a| a.var.as_tensor().dtype() == DType::F32));
        let merged = fused.named_weights("m").unwrap();
        let merged = merged[0].1.get().unwrap();
        assert_eq!(merged.dtype(), DType::F32);
    }

    /// Dense f32 products: few rows against a large weight are `qgemv::f32`'s bits plus the
    /// bias, many rows `sgemm::matmul_nt`'s bits (bias in the kernel) where AVX2 is, every
    /// other product candle's `Linear`'s bits; all within 1e-5 of candle's; a tracked weight
    /// (training) keeps candle's matmul and its gradient.
    #[test]
    fn dense_rows_equal_the_kernels_they_call() {
        let (n, k) = (300, 256);
        assert!(n * k >= DENSE_FEW_MIN_WEIGHTS);
        let w = weight(n, k, 4);
        let b = weight(1, n, 5).squeeze(0).unwrap();
        let l = candle_nn::Linear::new(w.clone(), Some(b.clone()));
        let ws: Vec<f32> = w.flatten_all().unwrap().to_vec1().unwrap();
        for m in [1, 3, DENSE_FEW_ROWS - 1, DENSE_FEW_ROWS, 40] {
            let x = activations(m, k).reshape((1, m, k)).unwrap();
            let ours = Proj::Dense(l.clone()).forward(&x).unwrap();
            assert_eq!(ours.dims(), &[1, m, n]);
            let xs: Vec<f32> = x.flatten_all().unwrap().to_vec1().unwrap();
            let want = if m < DENSE_FEW_ROWS && crate::qgemv::available() {
                let mut dst = vec![0f32; m * n];
                crate::qgemv::dense((m, k, n), &xs, &ws, &mut dst).unwrap();
                Tensor::from_vec(dst, (1, m, n), &Device::Cpu)
                    .unwrap()
                    .broadcast_add(&b)
                    .unwrap()
            } else if let Some(tiles) = crate::sgemm::chosen_here().filter(|_| m >= DENSE_FEW_ROWS)
            {
                let bs: Vec<f32> = b.to_vec1().unwrap();
                let mut dst = vec![0f32; m * n];
                crate::sgemm::matmul_nt(tiles, (m, k, n), &xs, &ws, Some(&bs), &mut dst).unwrap();
                Tensor::from_vec(dst, (1, m, n), &Device::Cpu).unwrap()
            } else {
                l.forward(&x).unwrap()
            };
            assert!(bits(&ours) == bits(&want), "m={m}: not the kernel's bits");
            let exact = l.forward(&x).unwrap();
            let diff = (&ours - &exact).unwrap().abs().unwrap().max_all().unwrap();
            let scale = exact.abs().unwrap().max_all().unwrap();
            assert!(
                diff.to_scalar::<f32>().unwrap() <= 1e-5 * scale.to_scalar::<f32>().unwrap(),
                "m={m}: far from candle's product"
            );
        }
        // A small weight stays with gemm (its bits), and so does a tracked one, with gradients.
        let small = candle_nn::Linear::new(weight(64, 64, 6), None);
        let x = activations(1, 64);
        assert!(
            bits(&Proj::Dense(small.clone()).forward(&x).unwrap())
                == bits(&small.forward(&x).unwrap())
        );
        let v = Var::from_tensor(&w).unwrap();
        let tracked = Proj::Dense(candle_nn::Linear::new(v.as_tensor().clone(), None));
        let y = tracked.forward(&activations(1, k)).unwrap();
        let grads = y.sum_all().unwrap().backward().unwrap();
        let g = grads.get(v.as_tensor()).expect("the weight's gradient");
        assert!(
            g.abs()
                .unwrap()
                .sum_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap()
                > 0.0
        );
    }

    /// A frozen weight under a trained input: the same output and input gradient as candle's
    /// matmul, bit for bit (the same kernel both ways), and no gradient for the weight, which
    /// candle's own backward would store (a second copy of every frozen weight).
    #[test]
    fn a_frozen_weight_passes_the_gradient_to_its_input_only() {
        let (n, k) = (300, 256);
        let w = weight(n, k, 8);
        let b = weight(1, n, 9).squeeze(0).unwrap();
        let l = candle_nn::Linear::new(w.clone(), Some(b));
        let r = weight(5, n, 10).reshape((1, 5, n)).unwrap();
        for m in [1usize, 5] {
            let x = Var::from_tensor(&activations(m, k).reshape((1, m, k)).unwrap()).unwrap();
            let r = r.narrow(1, 0, m).unwrap();
            let ours = Proj::Dense(l.clone()).forward(x.as_tensor()).unwrap();
            let theirs = l.forward(x.as_tensor()).unwrap();
            assert_eq!(ours.dims(), &[1, m, n]);
            let same = |a: &Tensor, b: &Tensor| {
                let a: Vec<f32> = a.flatten_all().unwrap().to_vec1().unwrap();
                let b: Vec<f32> = b.flatten_all().unwrap().to_vec1().unwrap();
                a.iter().zip(&b).all(|(a, b)| a.to_bits() == b.to_bits())
            };
            assert!(same(&ours, &theirs), "m={m}: other outputs");
            let g_ours = (&ours * &r).unwrap().sum_all().unwrap().backward().unwrap();
            let g_theirs = (&theirs * &r)
                .unwrap()
                .sum_all()
                .unwrap()
                .backward()
                .unwrap();
            let (gx, gx_ref) = (
                g_ours.get(x.as_tensor()).expect("the input's gradient"),
                g_theirs.get(x.as_tensor()).unwrap(),
            );
            assert!(same(gx, gx_ref), "m={m}: another input gradient");
            // The store has no iterator; its Debug form lists every gradient with its dims.
            // candle's keeps one for the transposed weight `[k, n]`, ours none of that size.
            let weight_sized = format!("dims {k}, {n};");
            assert!(format!("{g_theirs:?}").contains(&weight_sized));
            assert!(
                !format!("{g_ours:?}").contains(&weight_sized),
                "m={m}: a gradient for the frozen weight"
            );
        }
    }

    #[test]
    fn quantized_rows_reject_a_wrong_width() {
        let proj = Proj::from_weight(weight(16, 256, 2), None, Quant::Q4K).unwrap();
        let err = proj.forward(&weight(1, 512, 3)).unwrap_err().to_string();
        assert!(err.contains("input width 512, weight expects 256"), "{err}");
    }

    /// A fused projection splits into exactly what the separate projections give.
    #[test]
    fn fused_projection_equals_its_parts() {
        let k = 256;
        let parts = [("a", 32usize), ("b", 16), ("c", 16)];
        let mut tensors = HashMap::new();
        for (i, &(name, out)) in parts.iter().enumerate() {
            tensors.insert(format!("{name}.weight"), weight(out, k, 10 + i as u64));
            tensors.insert(
                format!("{name}.bias"),
                weight(1, out, 20 + i as u64).squeeze(0).unwrap(),
            );
        }
        let vb = VarBuilder::from_tensors(tensors, DType::F32, &Device::Cpu);
        for quant in [Quant::F32, Quant::Q8_0, Quant::Q4K] {
            let fused = FusedProj::load(k, &parts, true, quant, vb.clone()).unwrap();
            let x = weight(2, k, 99)
                .affine(10.0, 0.0)
                .unwrap()
                .unsqueeze(0)
                .unwrap();
            let outs = fused.forward(&x).unwrap();
            assert_eq!(outs.len(), 3);
            let mut bytes = 0;
            for (&(name, out), got) in parts.iter().zip(&outs) {
                let single = Proj::load(k, out, true, quant, vb.pp(name)).unwrap();
                bytes += single.weight_bytes();
                let want = single.forward(&x).unwrap();
                assert_eq!(got.dims(), want.dims());
                let err = max_rel(got, &want);
                assert!(err < 1e-6, "{quant} {name}: {err}");
            }
            assert_eq!(fused.weight_bytes(), bytes, "{quant}");
        }
    }
}
