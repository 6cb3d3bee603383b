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
                unsafe { std::ptr::write_bytes((b as *mut BlockQ4K).cast::<u8>().add(16), 0, 128) }
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
            QMatMul::from_qtensor(QTensor::quantize(&w, quant.ggml().unwrap()).unwrap()).unwrap();
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
            println!(
                "{quant} m={m}: error/bound at most {worst:.3} (ours), {worst_candle:.3} (QMatMul)"
            );
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
                } else if (quant == Quant::Q8_0 && !candle_tiles_q8_0()) || !candle_tile_shape(n, k)
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
        } else if let Some(tiles) = crate::sgemm::chosen_here().filter(|_| m >= DENSE_FEW_ROWS) {
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
        bits(&Proj::Dense(small.clone()).forward(&x).unwrap()) == bits(&small.forward(&x).unwrap())
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
