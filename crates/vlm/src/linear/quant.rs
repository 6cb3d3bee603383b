//! The weight formats a linear can hold: dense f32 or ggml blocks.

use std::fmt;
use std::str::FromStr;

use candle_core::quantized::GgmlDType;

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
