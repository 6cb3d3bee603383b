//! Linear layers that are either dense f32 or quantized in-process (`--quant q8_0|q4k`).
//!
//! Why in-process: the checkpoint ships bf16 safetensors; converting it to GGUF would be a second
//! artefact to keep in sync. candle's `QTensor::quantize` turns an f32 weight into Q8_0 / Q4K
//! blocks at load time, and `QMatMul` multiplies f32 activations with them on the CPU's SIMD
//! kernels. A weight whose input width is not a multiple of the block size cannot be blocked
//! (Qwen2.5-VL-3B's vision `down_proj`, k = 3420) and stays dense — never silently wrong.

use std::fmt;
use std::str::FromStr;

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Module, Tensor};
use candle_nn::VarBuilder;

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
    Quantized { w: QMatMul, bias: Option<Tensor> },
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
        let w = vb.get((out_dim, in_dim), "weight")?;
        let b = if bias {
            Some(vb.get(out_dim, "bias")?)
        } else {
            None
        };
        Self::from_weight(w, b, quant)
    }

    /// Wraps an existing weight (e.g. the tied embedding table as `lm_head`).
    pub fn from_weight(w: Tensor, bias: Option<Tensor>, quant: Quant) -> candle_core::Result<Self> {
        let in_dim = w.dim(1)?;
        match quant.ggml() {
            Some(dtype) if quant.fits(in_dim) => {
                let q = QTensor::quantize(&w, dtype)?;
                Ok(Proj::Quantized {
                    w: QMatMul::from_qtensor(q)?,
                    bias,
                })
            }
            _ => Ok(Proj::Dense(candle_nn::Linear::new(w, bias))),
        }
    }

    /// Whether the weight is stored quantized.
    pub fn is_quantized(&self) -> bool {
        matches!(self, Proj::Quantized { .. })
    }

    /// Bytes held by the weight and bias, as stored (quantized blocks count at their size).
    pub fn weight_bytes(&self) -> usize {
        match self {
            Proj::Dense(l) => linear_bytes(l),
            Proj::Quantized { w, bias } => {
                let w = match w {
                    QMatMul::QTensor(q) => q.storage_size_in_bytes(),
                    QMatMul::Tensor(t) | QMatMul::TensorF16(t) => tensor_bytes(t),
                };
                w + bias.as_ref().map_or(0, tensor_bytes)
            }
        }
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
            Proj::Dense(l) => l.forward(xs),
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
