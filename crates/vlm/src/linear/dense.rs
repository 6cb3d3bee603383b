//! Dense f32 products: our row kernels and tiles where they win, and the bf16-kept weights
//! they widen in registers.

use super::*;

/// Rows below which a dense f32 product runs [`crate::qgemv::dense`] (decode, a GRPO group)
/// instead of candle's `gemm`. Measured on the 2-core AVX2 machine, 2 threads, `k=2048,
/// n=11008` (6 copies, out of cache): 1 row 4.4 → 3.0 ms, 4 rows 10.9 → 4.4 ms (gemm's few-row
/// path packs the activations and falls to 8 GB/s), 8 rows 12.2 → 7.3 ms, 15 rows 13.7 →
/// 12.3 ms; at 32 rows gemm's tiles win (17.8 against 26.3 ms).
pub(crate) const DENSE_FEW_ROWS: usize = 12;

/// Weights of fewer elements stay with `gemm`: they sit in the cache, and the pool's dispatch
/// costs more than the product (64×64, one row: 1.5 µs gemm, 2.1 µs ours; 128×1024: 30 →
/// 22 µs ours).
pub(super) const DENSE_FEW_MIN_WEIGHTS: usize = 1 << 16;

/// `candle_nn::Linear::forward`, except for untracked f32 products on the CPU against a weight
/// of at least [`DENSE_FEW_MIN_WEIGHTS`] values:
/// - fewer than [`DENSE_FEW_ROWS`] rows (decode, a GRPO group) go through our row kernel
///   where AVX2 is ([`crate::qgemv`]; f32 decode of a 4-layer 3B in `bench vlm` 8.8 →
///   12.4–13.2 tok/s, 62 → 67–72 % of the triad bandwidth);
/// - more rows (a prompt, an image's patches) through our tiles where AVX2 is
///   ([`crate::sgemm`]; on AVX-512 1.1–1.6× `gemm`'s `x86-v4` kernels on the 3B's prefill and
///   vision shapes, 3–5× at 16–64 rows), the bias added in the same pass.
///
/// Only outside autograd: a weight, bias or input that a backward pass tracks (training) keeps
/// candle's differentiable matmul.
pub(super) fn dense_forward(l: &candle_nn::Linear, xs: &Tensor) -> candle_core::Result<Tensor> {
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
        crate::qgemv::available().then_some(DenseKernel::Rows)
    } else {
        crate::sgemm::chosen_here().map(DenseKernel::Tiles)
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
    fn run<W: crate::qgemv::DenseElem>(
        kernel: DenseKernel,
        (m, k, n): (usize, usize, usize),
        lhs: &[f32],
        w: &[W],
        bias: Option<&[f32]>,
        dst: &mut [f32],
    ) -> candle_core::Result<()> {
        match kernel {
            DenseKernel::Rows => crate::qgemv::dense((m, k, n), lhs, w, dst),
            DenseKernel::Tiles(tiles) => {
                crate::sgemm::matmul_nt(tiles, (m, k, n), lhs, w, bias, dst)
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
pub(super) fn with_cpu<T: candle_core::WithDType, R>(
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
    /// [`crate::qgemv::dense`]: few rows, memory-bound.
    Rows,
    /// [`crate::sgemm::matmul_nt`]: many rows, compute-bound.
    Tiles(crate::qgemv::RowKernels),
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
    pub(super) w: Tensor,
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
/// [`crate::weights::AS_STORED`]) rather than widened to f32 at load: on the CPU where our
/// kernels take bf16 weights ([`crate::qgemv::dense`] for few rows, [`crate::sgemm`]'s tiles
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
            crate::qgemv::row_kernels(crate::qgemv::cpu_has, |_| false),
            crate::sgemm::chosen_here(),
            crate::qgemv::switch_on,
        )
}

/// [`keeps_bf16`]'s rule for the CPU's row kernels (`rows`, [`crate::qgemv::row_kernels`]),
/// tiles (`tiles`, [`crate::sgemm::chosen`]) and the environment (`env`): one rule for the
/// loader and `bench vlm`'s kernels line.
pub fn keeps_bf16_with(
    rows: Option<crate::qgemv::RowKernels>,
    tiles: Option<crate::qgemv::RowKernels>,
    env: impl Fn(&str) -> bool,
) -> bool {
    rows.is_some() && tiles.is_some() && !env("POINTACT_DENSE_F32")
}

/// The dtype a weight stored in `dtype` computes in: f32 for a bf16-kept one ([`keeps_bf16`]).
pub(super) fn computed_in(dtype: DType) -> DType {
    match dtype {
        DType::BF16 => DType::F32,
        other => other,
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
