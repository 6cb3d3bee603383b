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

mod dense;
mod lora;
mod qblocks;
mod quant;
pub use dense::*;
pub use lora::*;
pub use qblocks::*;
pub use quant::Quant;

use std::fmt;

use std::sync::Arc;

use candle_core::quantized::k_quants::{self, BlockQ4K, BlockQ8_0};
use candle_core::quantized::{GgmlType, QMatMul, QStorage, QTensor};
use candle_core::{DType, Device, Module, Storage, Tensor, Var};

use candle_nn::VarBuilder;
use rand::Rng;
use rayon::prelude::*;

/// `y = x·Wᵀ (+ b)` with `W` dense or quantized.
#[derive(Debug, Clone)]
pub(crate) enum Proj {
    /// A dense f32 (or bf16-kept) weight with its optional bias, through candle's `Linear`.
    Dense(candle_nn::Linear),
    /// A weight quantized into ggml blocks, multiplied by the quantized kernels.
    Quantized {
        /// The quantized weight `[out, in]`.
        w: QBlocks,
        /// The bias `[out]`, if the layer has one.
        bias: Option<Tensor>,
    },
}

impl Proj {
    /// Reads `weight` `[out, in]` (and `bias` `[out]` when `bias`) under `vb` and stores it in
    /// `quant` when the input width fits the block size, dense otherwise.
    pub(crate) fn load(
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
    pub(crate) fn make_trainable(
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
    pub(crate) fn named_weights(&self, name: &str) -> candle_core::Result<Vec<(String, Tensor)>> {
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
    pub(crate) fn detached(&self) -> Proj {
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

    /// Bytes held by the weight and bias, as stored (quantized blocks count at their size).
    pub(crate) fn weight_bytes(&self) -> usize {
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
    /// A tensor ready to write as is.
    Ready(Tensor),
    /// A LoRA-adapted weight, merged to `W + ΔW` by [`CheckpointTensor::get`].
    Merged {
        /// The frozen weight `W` `[out, in]`, as the model holds it.
        base: Tensor,
        /// The adapter whose `ΔW` is added.
        lora: &'a Lora,
    },
}

impl CheckpointTensor<'_> {
    /// Shape of the tensor, `[out, in]` for a weight (the same for a merged one).
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
pub(crate) struct FusedProj {
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
    pub(crate) fn load(
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
    pub(crate) fn forward(&self, xs: &Tensor) -> candle_core::Result<Vec<Tensor>> {
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
    pub(crate) fn forward_one(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        let mut outs = self.forward(xs)?;
        match outs.len() {
            1 => Ok(outs.remove(0)),
            n => candle_core::bail!("forward_one on a projection of {n} parts"),
        }
    }

    /// Bytes of the weight and bias as stored, and of the adapters.
    pub(crate) fn weight_bytes(&self) -> usize {
        self.proj.weight_bytes() + self.adapters().map(|(_, l)| l.bytes()).sum::<usize>()
    }

    /// Makes the fused weight one [`Var`] (and the fused bias another) when `select` picks any
    /// of the parts' `{prefix}.{name}.weight` (`.bias`). Why one `Var` for the fused tensor
    /// rather than one per part: the fused weight is what the forward multiplies by; parts
    /// concatenated at load would leave it a stale copy once the optimiser moves them.
    pub(crate) fn make_trainable(
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
    pub(crate) fn detached(&self) -> FusedProj {
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

    pub(crate) fn named_weights(
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
    pub(crate) fn add_lora(
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
    pub(crate) fn adapters(&self) -> impl Iterator<Item = (&str, &Lora)> {
        self.parts
            .iter()
            .filter_map(|p| p.lora.as_ref().map(|l| (p.name.as_str(), l)))
    }
}

/// `down(silu(gate(x)) * up(x))`, the MLP of both Qwen2.5-VL towers (`mlp.gate_proj`,
/// `mlp.up_proj`, `mlp.down_proj`; biases in the vision tower only), gate and up fused.
#[derive(Debug, Clone)]
pub(crate) struct SwiGlu {
    /// Visible to the decoder, which walks its linears for training, checkpoints and LoRA.
    pub(crate) gate_up: FusedProj,
    pub(crate) down_proj: FusedProj,
    /// Whether `silu(gate)·up` runs as one vectorised pass ([`super::vmath::silu_mul`]) where
    /// autograd does not track it, rather than as candle's two ops ([`SwiGlu::fused_activation`]).
    fused_act: bool,
}

impl SwiGlu {
    /// The same MLP outside autograd ([`Proj::detached`]).
    pub(crate) fn detached(&self) -> SwiGlu {
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
    /// and resumed training run no longer equalled an uninterrupted one (`crates/apps/src/tests/grpo_run.rs`: a
    /// weight 1e-5 apart after 4 steps). The decoder asks per pass instead
    /// ([`Self::forward_act`]).
    pub(crate) fn fused_activation(mut self) -> Self {
        self.fused_act = true;
        self
    }

    /// Reads `gate_proj`, `up_proj` (`[inter, hidden]`) and `down_proj` (`[hidden, inter]`) under
    /// `vb`. Each is stored in `quant` where its input width fits the block size (3B vision:
    /// `down_proj`'s 3420 does not, so it stays f32).
    pub(crate) fn load(
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

    pub(crate) fn weight_bytes(&self) -> usize {
        self.gate_up.weight_bytes() + self.down_proj.weight_bytes()
    }

    /// [`Module::forward`] in an inference pass when `inference` (the activation as one pass,
    /// which no gradient crosses, as none crosses candle's fused kernels that such a pass also
    /// runs), else as [`Self::fused_activation`] says. The text decoder passes whether it runs
    /// its inference kernels: its training passes, tracked or not, all take candle's ops, so
    /// their log-probabilities stay equal to the bit; and a LoRA model's inference pass (its
    /// adapters tracked) runs the same kernels as the base model's.
    pub(crate) fn forward_act(&self, xs: &Tensor, inference: bool) -> candle_core::Result<Tensor> {
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
mod tests;
