//! Linear layers that are either dense f32 or quantized in-process (`--quant q8_0|q4k`).
//!
//! Why in-process: the checkpoint ships bf16 safetensors; converting it to GGUF would be a second
//! artefact to keep in sync. Each f32 weight is turned into ggml Q8_0 / Q4K blocks at load time
//! and multiplied by candle's SIMD kernels ([`QBlocks`] says which kernel when, and why we hold
//! the blocks ourselves). A weight whose input width is not a multiple of the block size cannot be blocked
//! (Qwen2.5-VL-3B's vision `down_proj`, k = 3420) and stays dense — never silently wrong.

use std::fmt;
use std::str::FromStr;

use std::sync::Arc;

use candle_core::quantized::k_quants::{self, BlockQ4K, BlockQ8_0};
use candle_core::quantized::{GgmlDType, GgmlType, QMatMul, QStorage, QTensor};
use candle_core::{DType, Module, Storage, Tensor};
use candle_nn::VarBuilder;
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
        match quant {
            Quant::F32 => Ok(Proj::Dense(candle_nn::Linear::new(w, bias))),
            _ if !quant.fits(in_dim) => Ok(Proj::Dense(candle_nn::Linear::new(w, bias))),
            Quant::Q8_0 => Ok(Proj::Quantized {
                w: QBlocks::Q8_0(quantize_rows(&w)?),
                bias,
            }),
            Quant::Q4K => Ok(Proj::Quantized {
                w: QBlocks::Q4K(quantize_rows(&w)?),
                bias,
            }),
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
            Proj::Quantized { w, bias } => w.bytes() + bias.as_ref().map_or(0, tensor_bytes),
        }
    }
}

/// Several projections of the same input stored as one (q|k|v, gate|up): one weight
/// `[Σ out, in]`, one multiplication, outputs split along the last axis.
///
/// Why: the input is read once instead of once per projection — in decode, where each
/// multiplication is a memory-bound pass over the weights with a fixed dispatch cost, three or
/// two calls become one; in prefill the small k/v products (256 wide) join the big q product.
/// Each output element is still the same dot product of one weight row with the input.
#[derive(Debug, Clone)]
pub struct FusedProj {
    proj: Proj,
    outs: Vec<usize>,
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
        let mut ws = Vec::with_capacity(parts.len());
        let mut bs = Vec::with_capacity(parts.len());
        for &(name, out) in parts {
            ws.push(vb.pp(name).get((out, in_dim), "weight")?);
            if bias {
                bs.push(vb.pp(name).get(out, "bias")?);
            }
        }
        let w = Tensor::cat(&ws, 0)?;
        drop(ws);
        let b = if bias {
            Some(Tensor::cat(&bs, 0)?)
        } else {
            None
        };
        Ok(Self {
            proj: Proj::from_weight(w, b, quant)?,
            outs: parts.iter().map(|p| p.1).collect(),
        })
    }

    /// The outputs of each part, in load order (views into one result).
    pub fn forward(&self, xs: &Tensor) -> candle_core::Result<Vec<Tensor>> {
        let y = self.proj.forward(xs)?;
        let mut start = 0;
        self.outs
            .iter()
            .map(|&n| {
                let part = y.narrow(candle_core::D::Minus1, start, n);
                start += n;
                part
            })
            .collect()
    }

    pub fn weight_bytes(&self) -> usize {
        self.proj.weight_bytes()
    }
}

/// `down(silu(gate(x)) * up(x))`, the MLP of both Qwen2.5-VL towers (`mlp.gate_proj`,
/// `mlp.up_proj`, `mlp.down_proj`; biases in the vision tower only), gate and up fused.
#[derive(Debug, Clone)]
pub struct SwiGlu {
    gate_up: FusedProj,
    down_proj: Proj,
}

impl SwiGlu {
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
            down_proj: Proj::load(inter, hidden, bias, quant, vb.pp("down_proj"))?,
        })
    }

    pub fn weight_bytes(&self) -> usize {
        self.gate_up.weight_bytes() + self.down_proj.weight_bytes()
    }
}

impl Module for SwiGlu {
    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        let [gate, up]: [Tensor; 2] = self
            .gate_up
            .forward(xs)?
            .try_into()
            .expect("gate_up has two parts");
        self.down_proj.forward(&(gate.silu()? * up)?)
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
/// against 780 ms. So: few rows run the plain kernel on our blocks; many rows hand a temporary
/// `QTensor` (a copy of the blocks) to candle, which repacks it for that one product and frees
/// both afterwards. The copy and repack are O(n·k), against O(m·n·k) for the product.
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

/// Rows at or above which a product goes through candle's repacked kernels (see [`QBlocks`]).
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

impl<T: GgmlType + 'static> QRows<T> {
    fn bytes(&self) -> usize {
        std::mem::size_of_val(self.blocks.as_slice())
    }

    /// `xs` `[..., k]` → `[..., n]`, in `xs`'s dtype.
    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
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
        let y = if m >= PACKED_MIN_ROWS {
            let q = QTensor::new(QStorage::Cpu(Box::new(self.blocks.clone())), (self.n, k))?;
            QMatMul::from_qtensor(q)?.forward(&x32)?
        } else {
            let lhs = x32.flatten_all()?.to_vec1::<f32>()?;
            let mut dst = vec![0f32; m * self.n];
            k_quants::matmul((m, k, self.n), &lhs, &self.blocks, &mut dst)?;
            let mut out = lead.to_vec();
            out.push(self.n);
            Tensor::from_vec(dst, out, xs.device())?
        };
        y.to_dtype(xs.dtype())
    }
}

impl QBlocks {
    /// Bytes of the blocks.
    pub fn bytes(&self) -> usize {
        match self {
            QBlocks::Q8_0(r) => r.bytes(),
            QBlocks::Q4K(r) => r.bytes(),
        }
    }

    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            QBlocks::Q8_0(r) => r.forward(xs),
            QBlocks::Q4K(r) => r.forward(xs),
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

    /// Our blocks give what candle's own `QTensor` path gives for the same weight, on both sides
    /// of [`PACKED_MIN_ROWS`] (plain kernel below, repacked above), and hold the same bytes.
    #[test]
    fn quantized_rows_match_candle_qtensor() {
        let (n, k) = (48, 512);
        let w = weight(n, k, 1);
        for quant in [Quant::Q8_0, Quant::Q4K] {
            let proj = Proj::from_weight(w.clone(), None, quant).unwrap();
            let q = QTensor::quantize(&w, quant.ggml().unwrap()).unwrap();
            assert_eq!(proj.weight_bytes(), q.storage_size_in_bytes(), "{quant}");
            let reference = QMatMul::from_qtensor(q).unwrap();
            for m in [1, 3, PACKED_MIN_ROWS - 1, PACKED_MIN_ROWS, 40] {
                let x = weight(m, k, 7 + m as u64).affine(20.0, 0.0).unwrap();
                let ours = proj.forward(&x).unwrap();
                assert_eq!(ours.dims(), &[m, n]);
                let err = max_rel(&ours, &reference.forward(&x).unwrap());
                assert!(err < 1e-4, "{quant} m={m}: max relative error {err}");
            }
            // Leading batch dims are kept.
            let x = weight(6, k, 3).reshape((2, 3, k)).unwrap();
            assert_eq!(proj.forward(&x).unwrap().dims(), &[2, 3, n]);
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
