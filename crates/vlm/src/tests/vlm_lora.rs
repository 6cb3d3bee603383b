//! LoRA on the text decoder (the trainer offers full fine-tuning or LoRA on chosen modules) on
//! the tiny Qwen2.5-VL of `tests/fixtures/qwen25vl_tiny/`:
//! * adapters go exactly where `select` says, under PEFT's names, PEFT-initialised from the seed;
//!   a quantized model, a second adapter on a linear and a second rank are refused, all or nothing;
//! * with B = 0 the adapted model is the base model, bit for bit (inference and training forward);
//! * with B ≠ 0 it is the model loaded from the merged weights of `named_weights()` (prefill,
//!   KV-cached greedy decoding and training forward), so a merged checkpoint needs no LoRA support;
//! * a loss on the training forward reaches every A and B and no base weight; at B = 0 A's
//!   gradient is exactly zero (PEFT's known behaviour); gradients agree with finite differences.

use std::cell::RefCell;
use std::collections::HashSet;

use crate::{
    generate, GenerationConfig, ImageInput, LogitsAt, PreparedPrompt, Quant, Qwen25Vl, Sampling,
    TrainableWeight,
};
use candle_core::{DType, Device, Tensor, D};
use candle_nn::VarBuilder;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::vlm_fixture::*;

const RANK: usize = 4;
const ALPHA: f64 = 8.0;
const LINEARS: [&str; 7] = [
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
];

fn base_model() -> Qwen25Vl {
    Qwen25Vl::new(&config(), Quant::F32, weights())
        .unwrap()
        .with_bf16_rotary_freqs()
        .unwrap()
}

fn ids_and_image() -> (Vec<u32>, ImageInput) {
    let g = golden();
    let ids = i64s(&g, "input_ids").iter().map(|&x| x as u32).collect();
    let image = ImageInput {
        pixel_values: golden_pixel_values(&g),
        grid_thw: grid(&g),
    };
    (ids, image)
}

fn prompt(model: &Qwen25Vl) -> PreparedPrompt {
    let (ids, image) = ids_and_image();
    model.prepare(&ids, &[image]).unwrap()
}

/// Logits of every prompt position from the inference prefill and from the training forward.
fn logits(model: &mut Qwen25Vl, p: &PreparedPrompt) -> (Tensor, Tensor) {
    let inference = model.prefill(p, 1, LogitsAt::All, false).unwrap().logits;
    let train = model
        .text
        .forward_train(&p.embeds.unsqueeze(0).unwrap(), &p.positions.ids, 0)
        .unwrap()
        .squeeze(0)
        .unwrap();
    (inference, train)
}

/// `max |got − want| / max |want|`.
fn rel(got: &Tensor, want: &Tensor) -> f32 {
    assert_eq!(got.dims(), want.dims());
    max_abs(&(got - want).unwrap()) / max_abs(want)
}

fn bits(t: &Tensor) -> Vec<u32> {
    let v: Vec<f32> = t.flatten_all().unwrap().to_vec1().unwrap();
    v.iter().map(|x| x.to_bits()).collect()
}

/// A tensor of `dims` uniform on `[−scale, scale)`, from `seed`.
fn uniform(dims: &[usize], scale: f32, seed: u64) -> Tensor {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let n = dims.iter().product();
    let v: Vec<f32> = (0..n).map(|_| rng.gen_range(-scale..scale)).collect();
    Tensor::from_vec(v, dims, &Device::Cpu).unwrap()
}

fn is_b(p: &TrainableWeight) -> bool {
    p.name().ends_with(".lora_B.weight")
}

/// Sets every B to small random values (B = 0 would make the adapters no-ops).
fn randomise_b(params: &[TrainableWeight], seed: u64) {
    for (i, p) in params.iter().filter(|p| is_b(p)).enumerate() {
        p.var
            .set(&uniform(p.var.dims(), 0.05, seed + i as u64))
            .unwrap();
    }
}

/// A plain model (no LoRA) loaded from the fixture with the text weights replaced by `lora`'s
/// `named_weights()`: what loading a merged checkpoint gives.
fn merged_model(lora: &Qwen25Vl) -> Qwen25Vl {
    let mut tensors =
        candle_core::safetensors::load(fixture("model.safetensors"), &Device::Cpu).unwrap();
    let merged = lora.text.named_weights().unwrap();
    assert_eq!(merged.len(), 2 * 12 + 2, "the checkpoint's text tensors");
    for (name, t) in merged {
        assert!(tensors.contains_key(&name), "{name}: not a checkpoint name");
        assert!(!t.is_variable(), "{name}: a merged weight is a snapshot");
        tensors.insert(name, t);
    }
    let vb = VarBuilder::from_tensors(tensors, DType::F32, &Device::Cpu);
    Qwen25Vl::new(&config(), Quant::F32, vb)
        .unwrap()
        .with_bf16_rotary_freqs()
        .unwrap()
}

/// Adapters on q_proj and v_proj only: exactly those, named as PEFT names them, shaped
/// `[rank, in]` / `[out, rank]`, A uniform within PEFT's ±1/√in and reproducible from the seed,
/// B zero; `select` sees the 14 module names; the config and the PEFT export agree. A second
/// adapter on a linear or a second rank is refused with the model unchanged; more modules at the
/// same rank are added.
#[test]
fn select_picks_only_the_named_linears() {
    let mut model = base_model();
    let seen = RefCell::new(Vec::new());
    let select = |m: &str| {
        seen.borrow_mut().push(m.to_string());
        m.ends_with(".q_proj") || m.ends_with(".v_proj")
    };
    let params = model.text.add_lora(&select, RANK, ALPHA, 11).unwrap();
    let modules: Vec<String> = (0..2)
        .flat_map(|l| LINEARS.map(|m| format!("model.layers.{l}.{m}")))
        .collect();
    assert_eq!(*seen.borrow(), modules);

    let want: Vec<String> = (0..2)
        .flat_map(|l| {
            ["q_proj", "v_proj"].into_iter().flat_map(move |m| {
                ["A", "B"].map(|x| {
                    format!("base_model.model.model.layers.{l}.self_attn.{m}.lora_{x}.weight")
                })
            })
        })
        .collect();
    let names: Vec<String> = params.iter().map(TrainableWeight::name).collect();
    assert_eq!(names, want);
    assert_eq!(params.len(), 2 * 2 * 2);

    let cfg = config().text;
    let (h, hd) = (cfg.hidden_size, cfg.head_dim);
    let bound = 1.0 / (h as f32).sqrt();
    for p in &params {
        let out = if p.name().contains("q_proj") {
            cfg.num_attention_heads * hd
        } else {
            cfg.num_key_value_heads * hd
        };
        let dims = if is_b(p) { [out, RANK] } else { [RANK, h] };
        assert_eq!(p.var.dims(), dims, "{}", p.name());
        assert_eq!(p.parts, vec![(p.name(), 0, dims[0])]);
        let m = max_abs(p.var.as_tensor());
        if is_b(p) {
            assert_eq!(m, 0.0, "{}: B starts at zero", p.name());
        } else {
            assert!(m < bound && m > 0.9 * bound, "{}: max |A| {m}", p.name());
        }
    }
    // The same seed draws the same A, another seed another.
    let a = |seed| {
        let mut m = base_model();
        let p = m.text.add_lora(&select, RANK, ALPHA, seed).unwrap();
        bits(p[0].var.as_tensor())
    };
    assert_eq!(a(11), bits(params[0].var.as_tensor()));
    assert_ne!(a(12), bits(params[0].var.as_tensor()));

    let config = model.text.lora_config().unwrap();
    assert_eq!(
        config,
        (RANK, ALPHA, vec!["q_proj".into(), "v_proj".into()])
    );
    let exported = model.text.lora_weights();
    assert_eq!(
        exported.iter().map(|e| e.0.clone()).collect::<Vec<_>>(),
        want
    );
    for ((_, t), p) in exported.iter().zip(&params) {
        assert_eq!(t.id(), p.var.as_tensor().id());
    }

    // Refusals leave the model as it was.
    let err = model
        .text
        .add_lora(
            &|m| m.ends_with(".k_proj") || m.ends_with("1.self_attn.q_proj"),
            RANK,
            ALPHA,
            1,
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("model.layers.1.self_attn.q_proj already has a LoRA adapter"),
        "{err}"
    );
    let err = model
        .text
        .add_lora(&|m| m.ends_with(".k_proj"), 8, ALPHA, 1)
        .unwrap_err()
        .to_string();
    assert!(err.contains("rank 4 and alpha 8"), "{err}");
    assert_eq!(model.text.lora_config().unwrap(), config);
    assert_eq!(model.text.lora_weights().len(), 8);
    // The same rank and alpha on more modules: added.
    let more = model
        .text
        .add_lora(&|m| m.ends_with(".k_proj"), RANK, ALPHA, 1)
        .unwrap();
    assert_eq!(more.len(), 4);
    assert_eq!(
        model.text.lora_config().unwrap().2,
        vec!["q_proj", "k_proj", "v_proj"]
    );
}

/// LoRA needs dense weights: a quantized model is refused, with a message that says so, and
/// keeps no adapter.
#[test]
fn a_quantized_model_is_refused() {
    let mut model = Qwen25Vl::new(&config(), Quant::Q8_0, weights()).unwrap();
    let err = model
        .text
        .add_lora(&|_| true, RANK, ALPHA, 0)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("model.layers.0.self_attn.q_proj is quantized") && err.contains("f32"),
        "{err}"
    );
    assert!(model.text.lora_config().is_none());
}

/// At initialisation (B = 0) every linear adapted, the logits are the base model's bit for bit,
/// in the inference prefill and in the training forward.
#[test]
fn zero_b_gives_the_base_logits_exactly() {
    let mut base = base_model();
    let p = prompt(&base);
    let (want_inf, want_train) = logits(&mut base, &p);
    let mut lora = base_model();
    let params = lora.text.add_lora(&|_| true, RANK, ALPHA, 1).unwrap();
    assert_eq!(params.len(), 2 * 7 * 2);
    let (inf, train) = logits(&mut lora, &p);
    assert!(bits(&inf) == bits(&want_inf), "inference logits moved");
    assert!(bits(&train) == bits(&want_train), "training logits moved");
}

/// With random B, the adapted model gives the logits of a plain model loaded from the merged
/// `named_weights()` (1e-5 relative): prefill, the training forward, and greedy decoding on the
/// KV cache (same tokens, same step logits) — and they are not the base model's.
#[test]
fn merged_weights_give_the_adapted_logits() {
    let mut lora = base_model();
    let params = lora.text.add_lora(&|_| true, RANK, ALPHA, 2).unwrap();
    randomise_b(&params, 3);
    let mut merged = merged_model(&lora);
    assert!(merged.text.lora_config().is_none());
    let p = prompt(&lora);
    let (inf, train) = logits(&mut lora, &p);
    let (want_inf, want_train) = logits(&mut merged, &p);
    let (e_inf, e_train) = (rel(&inf, &want_inf), rel(&train, &want_train));
    println!("merged vs adapted: prefill {e_inf:.2e}, training {e_train:.2e}");
    assert!(e_inf <= 1e-5, "prefill logits differ by {e_inf:e}");
    assert!(e_train <= 1e-5, "training logits differ by {e_train:e}");
    let (base_inf, _) = logits(&mut base_model(), &p);
    let moved = rel(&inf, &base_inf);
    assert!(
        moved > 1e-2,
        "the adapters barely moved the logits ({moved:e})"
    );

    let (ids, image) = ids_and_image();
    let cfg = GenerationConfig {
        max_new_tokens: 6,
        sampling: Sampling::Greedy,
        repetition_penalty: 1.0,
        keep_logits: true,
        ..GenerationConfig::default()
    };
    let run = |m: &mut Qwen25Vl| {
        generate(m, &ids, std::slice::from_ref(&image), &cfg, &mut |_| true).unwrap()
    };
    let (got, want) = (run(&mut lora), run(&mut merged));
    assert_eq!(got.tokens, want.tokens);
    for (step, (g, w)) in got.step_logits.iter().zip(&want.step_logits).enumerate() {
        let (g, w) = (
            Tensor::new(g.as_slice(), &Device::Cpu).unwrap(),
            Tensor::new(w.as_slice(), &Device::Cpu).unwrap(),
        );
        let e = rel(&g, &w);
        assert!(e <= 1e-5, "decode step {step}: logits differ by {e:e}");
    }
}

/// Mean negative log-probability of fixed tokens at the last 16 positions, from the training
/// forward.
fn loss(model: &Qwen25Vl, p: &PreparedPrompt) -> Tensor {
    const N: usize = 16;
    let s = p.embeds.dim(0).unwrap();
    let logits = model
        .text
        .forward_train(&p.embeds.unsqueeze(0).unwrap(), &p.positions.ids, s - N)
        .unwrap();
    let logp = candle_nn::ops::log_softmax(&logits, D::Minus1).unwrap();
    let targets: Vec<u32> = (0..N as u32).map(|i| (i * 61 + 7) % 1000).collect();
    let idx = Tensor::from_vec(targets, (1, N, 1), &Device::Cpu).unwrap();
    logp.gather(&idx, D::Minus1)
        .unwrap()
        .mean_all()
        .unwrap()
        .neg()
        .unwrap()
}

/// The loss reaches every A and B and nothing else that is a `Var` (the base weights are frozen
/// tensors, outside the gradient's reach). At B = 0, A's gradient is exactly zero and B's is not
/// (PEFT's known behaviour: B moves first); once B ≠ 0 every A and B has a finite, non-zero one.
#[test]
fn gradients_reach_every_adapter_and_no_base_weight() {
    let mut model = base_model();
    let params = model.text.add_lora(&|_| true, RANK, ALPHA, 4).unwrap();
    let p = prompt(&model);
    let adapters: HashSet<_> = params.iter().map(|w| w.var.as_tensor().id()).collect();
    assert_eq!(adapters.len(), 2 * 7 * 2);

    let l = loss(&model, &p);
    let g = l.backward().unwrap();
    for w in &params {
        let grad = g
            .get(w.var.as_tensor())
            .unwrap_or_else(|| panic!("{}: no gradient", w.name()));
        let m = max_abs(grad);
        if is_b(w) {
            assert!(
                m > 0.0 && m.is_finite(),
                "{}: gradient {m} at B = 0",
                w.name()
            );
        } else {
            assert_eq!(m, 0.0, "{}: A's gradient at B = 0", w.name());
        }
    }

    randomise_b(&params, 5);
    let l = loss(&model, &p);
    let vars: HashSet<_> = l
        .sorted_nodes()
        .iter()
        .filter(|n| n.is_variable())
        .map(|n| n.id())
        .collect();
    assert_eq!(vars, adapters, "the Vars the loss depends on");
    let g = l.backward().unwrap();
    for w in &params {
        let m = max_abs(g.get(w.var.as_tensor()).unwrap());
        assert!(m > 0.0 && m.is_finite(), "{}: gradient {m}", w.name());
    }
}

/// `(L(w + h·d) − L(w − h·d)) / 2h` against `⟨∇L, d⟩` for a random direction `d` in one A and
/// one B (f32: the tolerance is 2 %).
#[test]
fn adapter_gradients_agree_with_finite_differences() {
    let mut model = base_model();
    let params = model.text.add_lora(&|_| true, RANK, ALPHA, 6).unwrap();
    randomise_b(&params, 7);
    let p = prompt(&model);
    let g = loss(&model, &p).backward().unwrap();
    let checked = [
        "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
        "base_model.model.model.layers.1.mlp.down_proj.lora_B.weight",
    ];
    for (i, name) in checked.into_iter().enumerate() {
        let var = &params.iter().find(|w| w.name() == name).unwrap().var;
        let w0 = var.as_tensor().copy().unwrap();
        let d = uniform(var.dims(), 1.0, 100 + i as u64);
        let grad = g.get(var.as_tensor()).unwrap();
        let analytic: f32 = (grad * &d).unwrap().sum_all().unwrap().to_scalar().unwrap();
        let h = 5e-2 * max_abs(&w0) / max_abs(&d);
        let at = |sign: f32| -> f32 {
            var.set(&(&w0 + (&d * f64::from(sign * h)).unwrap()).unwrap())
                .unwrap();
            loss(&model, &p).to_scalar().unwrap()
        };
        let numeric = (at(1.0) - at(-1.0)) / (2.0 * h);
        var.set(&w0).unwrap();
        println!("{name}: analytic {analytic}, finite differences {numeric}");
        let tol = 0.02 * analytic.abs().max(numeric.abs());
        assert!(
            (analytic - numeric).abs() <= tol,
            "{name}: analytic {analytic}, finite differences {numeric}"
        );
    }
}
