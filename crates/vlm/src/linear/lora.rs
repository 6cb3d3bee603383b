//! PEFT's LoRA adapter on a frozen projection: what training moves instead of the weight.

use super::*;

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
    pub(super) a: Tensor,
    pub(super) b: Tensor,
    pub(super) alpha: f64,
}

impl Lora {
    /// PEFT's `reset_lora_parameters`: A is `kaiming_uniform_(a=√5)`, i.e. uniform on
    /// `[−1/√in, 1/√in)` (gain `√(2/(1+5))`, bound `√3·gain/√in`), drawn from `rng` row by
    /// row; B is zero.
    pub(crate) fn new(
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

    pub(crate) fn rank(&self) -> usize {
        self.a.dims()[0]
    }

    pub(crate) fn alpha(&self) -> f64 {
        self.alpha
    }

    /// `alpha / rank`, PEFT's `scaling` (without rsLoRA).
    pub(crate) fn scale(&self) -> f64 {
        self.alpha / self.rank() as f64
    }

    /// `(alpha/rank)·(x·Aᵀ)·Bᵀ` for `xs` `[..., in]`.
    pub(crate) fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        let down = candle_nn::Linear::new(self.a.clone(), None).forward(xs)?;
        candle_nn::Linear::new(self.b.clone(), None)
            .forward(&down)?
            .affine(self.scale(), 0.0)
    }

    /// `(alpha/rank)·B·A` `[out, in]`: what merging adds to the base weight.
    pub(crate) fn delta(&self) -> candle_core::Result<Tensor> {
        self.b.matmul(&self.a)?.affine(self.scale(), 0.0)
    }

    pub(super) fn bytes(&self) -> usize {
        tensor_bytes(&self.a) + tensor_bytes(&self.b)
    }

    /// A and B of the adapter on `module` (`model.layers.0.self_attn.q_proj`) as training
    /// weights under their PEFT names.
    pub(super) fn trainable(&self, module: &str) -> candle_core::Result<[TrainableWeight; 2]> {
        // `from_tensor` of a variable shares it: the `Var`s made in `new`.
        Ok([
            TrainableWeight::whole(&peft_name(module, "A"), Var::from_tensor(&self.a)?),
            TrainableWeight::whole(&peft_name(module, "B"), Var::from_tensor(&self.b)?),
        ])
    }

    /// The same adapter outside autograd (shared storage): see [`Proj::detached`].
    pub(super) fn detached(&self) -> Lora {
        Lora {
            a: self.a.detach(),
            b: self.b.detach(),
            alpha: self.alpha,
        }
    }

    /// A and B of the adapter on `module` under their PEFT names, as they are now.
    pub(crate) fn peft_weights(&self, module: &str) -> [(String, Tensor); 2] {
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

/// A weight that training updates: the [`Var`] and the checkpoint tensors it holds, each as
/// `(name, first row, rows)` along the output axis (several for a fused `q|k|v` or `gate|up`).
#[derive(Debug, Clone)]
pub struct TrainableWeight {
    /// The trainable tensor the optimizer updates; `[Σ rows, in]` for a fused projection.
    pub var: Var,
    /// The checkpoint tensors inside [`Self::var`], each `(name, first row, rows)` along the output
    /// axis.
    pub parts: Vec<(String, usize, usize)>,
}

impl TrainableWeight {
    pub(crate) fn whole(name: &str, var: Var) -> Self {
        let rows = var.dims().first().copied().unwrap_or(1);
        Self {
            var,
            parts: vec![(name.to_string(), 0, rows)],
        }
    }

    /// One name for the whole `Var` (the checkpoint name, or the parts' joined with `|`).
    pub fn name(&self) -> String {
        self.parts
            .iter()
            .map(|p| p.0.as_str())
            .collect::<Vec<_>>()
            .join("|")
    }
}
