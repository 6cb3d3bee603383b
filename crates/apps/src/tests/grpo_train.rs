//! Gradients that flow through the GRPO trainer, on the tiny random Qwen2.5-VL of
//! `tests/fixtures/qwen25vl_tiny/`:
//! * the training forward (differentiable RMSNorm/softmax/rope, no cache) gives the inference
//!   path's logits;
//! * a group of rollouts decoded as one batch on a forked KV cache gives, token for token, what
//!   one-at-a-time generation gives (greedy: the transformers golden ids; sampled: the same
//!   seeded draws);
//! * the training pass's log-probabilities of those rollouts equal the ones recorded while
//!   sampling, within 1e-4;
//! * every trainable weight of the decoder receives a non-zero gradient from the GRPO loss;
//! * that gradient agrees with central finite differences of the loss.

use candle_core::{backprop::GradStore, Device, Tensor, Var};
use pointact::train::grpo::objective::{
    advantages, aggregate, kl, policy_loss, AdvantageMode, Aggregation, Clip, KlKind,
};
use pointact::train::grpo::policy::{response_logprobs, TokenLogprobs};
use pointact::train::grpo::rollout::{rollouts, RolloutConfig};
use pointact::vlm::{
    generate, GenerationConfig, ImageInput, LogitsAt, Quant, Qwen25Vl, Sampling, TextModel,
    TrainableWeight,
};

use super::vlm_fixture::*;

struct Fixture {
    model: Qwen25Vl,
    ids: Vec<u32>,
    image: ImageInput,
}

fn fixture_model() -> Fixture {
    let g = golden();
    let model = Qwen25Vl::new(&config(), Quant::F32, weights())
        .unwrap()
        .with_bf16_rotary_freqs()
        .unwrap();
    Fixture {
        model,
        ids: i64s(&g, "input_ids").iter().map(|&x| x as u32).collect(),
        image: ImageInput {
            pixel_values: golden_pixel_values(&g),
            grid_thw: grid(&g),
        },
    }
}

fn vision_rows(f: &Fixture) -> Vec<Tensor> {
    vec![f
        .model
        .vision
        .as_ref()
        .unwrap()
        .forward(&f.image.pixel_values, &[f.image.grid_thw])
        .unwrap()]
}

#[test]
fn the_training_forward_gives_the_inference_logits() {
    let mut f = fixture_model();
    let prompt = f.model.prepare(&f.ids, &[f.image.clone()]).unwrap();
    let want = f
        .model
        .prefill(&prompt, 1, LogitsAt::All, false)
        .unwrap()
        .logits;
    let s = prompt.embeds.dim(0).unwrap();
    let got = f
        .model
        .text
        .forward_train(
            &prompt.embeds.unsqueeze(0).unwrap(),
            &prompt.positions.ids,
            0,
        )
        .unwrap()
        .squeeze(0)
        .unwrap();
    assert_eq!(got.dims(), &[s, config().text.vocab_size]);
    let err = max_abs(&(&got - &want).unwrap());
    assert!(
        err <= 1e-5 * max_abs(&want),
        "training logits differ from inference by {err}"
    );
    // Only the asked-for positions: logits from 100 on are rows 100.. of the full ones.
    let tail = f
        .model
        .text
        .forward_train(
            &prompt.embeds.unsqueeze(0).unwrap(),
            &prompt.positions.ids,
            100,
        )
        .unwrap()
        .squeeze(0)
        .unwrap();
    let err = max_abs(&(&tail - &want.narrow(0, 100, s - 100).unwrap()).unwrap());
    assert!(err <= 1e-5 * max_abs(&want), "tail logits differ by {err}");
}

#[test]
fn the_shared_prefix_pass_gives_the_full_pass_logits() {
    let f = fixture_model();
    let prompt = f
        .model
        .prepare(&f.ids, std::slice::from_ref(&f.image))
        .unwrap();
    let (s, h) = prompt.embeds.dims2().unwrap();
    // Three "responses" of 5 tokens: rows of the embedding table.
    let ids: Vec<u32> = (0..15).map(|i| (i * 37 + 11) % 1000).collect();
    let weights = f.model.text.named_weights().unwrap();
    let table = &weights
        .iter()
        .find(|(n, _)| n == "model.embed_tokens.weight")
        .unwrap()
        .1;
    let suffix = table
        .index_select(&Tensor::from_vec(ids, 15, &Device::Cpu).unwrap(), 0)
        .unwrap()
        .reshape((3, 5, h))
        .unwrap();
    let pos = prompt.positions.with_generated(5);
    let shared = f
        .model
        .text
        .forward_train_shared(&prompt.embeds.unsqueeze(0).unwrap(), &suffix, &pos)
        .unwrap();
    assert_eq!(shared.dims(), &[3, 5, config().text.vocab_size]);
    let full_in = Tensor::cat(
        &[
            &prompt
                .embeds
                .unsqueeze(0)
                .unwrap()
                .repeat((3, 1, 1))
                .unwrap(),
            &suffix,
        ],
        1,
    )
    .unwrap();
    let full = f
        .model
        .text
        .forward_train(&full_in, &pos, s - 1)
        .unwrap()
        .narrow(1, 0, 5)
        .unwrap();
    let err = max_abs(&(&shared - &full).unwrap());
    assert!(err <= 1e-5 * max_abs(&full), "shared vs full: {err}");
}

#[test]
fn a_batched_group_decodes_what_one_at_a_time_generation_decodes() {
    let mut f = fixture_model();
    let prompt = f.model.prepare(&f.ids, &[f.image.clone()]).unwrap();
    // Greedy: three copies, each the transformers golden ids.
    let greedy = RolloutConfig {
        group: 3,
        max_new_tokens: 8,
        temperature: 0.0,
        ..RolloutConfig::default()
    };
    for r in rollouts(&mut f.model, &prompt, &greedy, 0).unwrap() {
        assert_eq!(r.tokens, vec![821, 412, 903, 404, 136, 276, 91, 806]);
        assert!(!r.stopped);
    }
    // Sampled: rollout i is generation with seed 40 + i (no repetition penalty in rollouts).
    let sampled = RolloutConfig {
        group: 4,
        max_new_tokens: 12,
        temperature: 1.3,
        top_p: 0.95,
        stop_ids: vec![1012],
    };
    let group = rollouts(&mut f.model, &prompt, &sampled, 40).unwrap();
    let distinct: std::collections::HashSet<_> = group.iter().map(|r| &r.tokens).collect();
    assert!(distinct.len() > 1, "four samples at T=1.3 were all equal");
    for (i, r) in group.iter().enumerate() {
        let cfg = GenerationConfig {
            max_new_tokens: 12,
            sampling: Sampling::TopP {
                temperature: 1.3,
                top_p: 0.95,
            },
            repetition_penalty: 1.0,
            seed: 40 + i as u64,
            stop_ids: vec![1012],
            keep_logits: false,
        };
        let one = generate(&mut f.model, &f.ids, &[f.image.clone()], &cfg, &mut |_| {
            true
        })
        .unwrap();
        assert_eq!(r.tokens, one.tokens, "rollout {i}");
        assert_eq!(r.logprobs.len(), r.tokens.len());
        assert!(r.logprobs.iter().all(|&l| l.is_finite() && l <= 0.0));
    }
}

/// The policy (every decoder weight a `Var`), its frozen reference and a sampled group.
struct Setup {
    f: Fixture,
    reference: TextModel,
    params: Vec<TrainableWeight>,
    rows: Vec<Tensor>,
    responses: Vec<Vec<u32>>,
    recorded: Vec<Vec<f32>>,
}

const TEMPERATURE: f64 = 0.9;

fn rollout_config() -> RolloutConfig {
    RolloutConfig {
        group: 4,
        max_new_tokens: 10,
        temperature: TEMPERATURE,
        top_p: 1.0,
        // A frequent token as "stop" so that lengths differ and padding is exercised.
        stop_ids: vec![412, 903],
    }
}

fn setup() -> Setup {
    let mut f = fixture_model();
    let reference = f.model.text.clone();
    let params = f.model.text.make_trainable(&|_| true).unwrap();
    let rows = vision_rows(&f);
    let prompt = f.model.prepare(&f.ids, &[f.image.clone()]).unwrap();
    let group = rollouts(&mut f.model, &prompt, &rollout_config(), 7).unwrap();
    Setup {
        f,
        reference,
        params,
        rows,
        responses: group.iter().map(|r| r.tokens.clone()).collect(),
        recorded: group.iter().map(|r| r.logprobs.clone()).collect(),
    }
}

/// The group's log-probabilities under `text` (the policy or the frozen reference).
fn logprobs(s: &Setup, text: &TextModel) -> TokenLogprobs {
    response_logprobs(
        &s.f.model,
        text,
        &s.f.ids,
        std::slice::from_ref(&s.f.image),
        &s.rows,
        &s.responses,
        TEMPERATURE,
    )
    .unwrap()
}

#[test]
fn training_logprobs_equal_the_logprobs_recorded_while_sampling() {
    let s = setup();
    let lp = logprobs(&s, &s.f.model.text);
    let got: Vec<Vec<f32>> = lp.logp.to_vec2().unwrap();
    let mask: Vec<Vec<f32>> = lp.mask.to_vec2().unwrap();
    let lens: Vec<usize> = s.responses.iter().map(Vec::len).collect();
    assert!(
        lens.iter().any(|&l| l < lens[0]) || lens.iter().any(|&l| l > lens[0]),
        "want responses of different lengths, got {lens:?}"
    );
    for (i, rec) in s.recorded.iter().enumerate() {
        for (j, &want) in rec.iter().enumerate() {
            let d = (got[i][j] - want).abs();
            assert!(d <= 1e-4, "rollout {i} token {j}: {} vs {want}", got[i][j]);
        }
        assert_eq!(mask[i].iter().filter(|&&m| m == 1.0).count(), rec.len());
    }
    // The reference (the same weights, frozen) agrees too.
    let r = logprobs(&s, &s.reference);
    let err = max_abs(&((&r.logp - &lp.logp).unwrap() * &lp.mask).unwrap());
    assert!(err <= 1e-5, "reference log-probs differ by {err}");
}

/// What the trainer samples with, `Qwen25Vl::detached`, draws the same tokens as the trainable
/// model, builds no autograd graph, and shares the weights' storage: an optimiser's in-place
/// update shows through without a copy.
#[test]
fn a_detached_policy_samples_the_same_without_a_graph() {
    let s = setup();
    let tracked = s.f.model.clone();
    let mut policy = s.f.model.detached();
    let prompt = tracked
        .prepare(&s.f.ids, std::slice::from_ref(&s.f.image))
        .unwrap();
    assert!(
        prompt.embeds.track_op(),
        "the trainable model's embeddings are tracked"
    );
    let free = policy
        .prepare(&s.f.ids, std::slice::from_ref(&s.f.image))
        .unwrap();
    assert!(!free.embeds.track_op());
    let group = rollouts(&mut policy, &free, &rollout_config(), 7).unwrap();
    for (i, r) in group.iter().enumerate() {
        assert_eq!(r.tokens, s.responses[i], "rollout {i}");
        for (a, b) in r.logprobs.iter().zip(&s.recorded[i]) {
            assert!((a - b).abs() <= 1e-5, "rollout {i}: {a} vs {b}");
        }
    }
    let w = &s.params[0];
    let (name, _, _) = &w.parts[0];
    let find = |m: &Qwen25Vl| {
        m.text
            .named_weights()
            .unwrap()
            .into_iter()
            .find(|(n, _)| n == name)
            .unwrap()
            .1
    };
    let before = find(&policy).copy().unwrap();
    w.var.set(&(w.var.as_tensor() + 1.0).unwrap()).unwrap();
    let d = max_abs(&(find(&policy) - (before + 1.0).unwrap()).unwrap());
    assert!(
        d == 0.0,
        "{name}: the detached copy did not see the update ({d})"
    );
}

/// The GRPO loss of the fixed group with rewards 0, 1, 0.5, 0.25 against `old` log-probs.
fn loss(s: &Setup, old: &Tensor) -> Tensor {
    let lp = logprobs(s, &s.f.model.text);
    let r = logprobs(s, &s.reference);
    let (adv, _) = advantages(&[0.0, 1.0, 0.5, 0.25], 4, AdvantageMode::default());
    let adv: Vec<f32> = adv.iter().map(|&a| a as f32).collect();
    let adv = Tensor::new(adv.as_slice(), &Device::Cpu).unwrap();
    let pl = policy_loss(&lp.logp, old, &adv, &lp.mask, Clip::default()).unwrap();
    let klt = kl(&lp.logp, &r.logp, KlKind::K3).unwrap();
    let per_token = (pl.per_token + (klt * 0.04).unwrap()).unwrap();
    aggregate(&per_token, &lp.mask, Aggregation::TokenMean).unwrap()
}

fn old_logprobs(s: &Setup) -> Tensor {
    logprobs(s, &s.f.model.text).logp.detach()
}

fn grads(s: &Setup, old: &Tensor) -> (f32, GradStore) {
    let l = loss(s, old);
    let v = l.to_scalar::<f32>().unwrap();
    (v, l.backward().unwrap())
}

#[test]
fn every_trainable_weight_receives_a_gradient() {
    let s = setup();
    // Every tensor of the decoder is covered by exactly one Var.
    let names: Vec<String> =
        s.f.model
            .text
            .named_weights()
            .unwrap()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
    let covered: Vec<String> = s
        .params
        .iter()
        .flat_map(|p| p.parts.iter().map(|q| q.0.clone()))
        .collect();
    let mut a = names.clone();
    let mut b = covered.clone();
    a.sort();
    b.sort();
    assert_eq!(a, b);
    assert_eq!(
        names.len(),
        2 * 12 + 2,
        "2 layers of 12 tensors, embeddings, final norm"
    );
    let old = old_logprobs(&s);
    let (_, g) = grads(&s, &old);
    for p in &s.params {
        let grad = g
            .get(p.var.as_tensor())
            .unwrap_or_else(|| panic!("{} has no gradient", p.name()));
        let n = max_abs(grad);
        assert!(n > 0.0 && n.is_finite(), "{}: gradient {n}", p.name());
    }
}

/// A fixed pseudo-random direction shaped like `like`, entries uniform in [-1, 1).
///
/// Why fixed: with a fresh `randn_like` direction each run, about 1 run in 25 drew one along
/// which the f32 central difference missed by ~15 % (q_proj, analytic −0.043 against −0.049),
/// a flaky failure that said nothing about the gradient.
fn direction(like: &Tensor, seed: u64) -> Tensor {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let v: Vec<f32> = (0..like.elem_count())
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect();
    Tensor::from_vec(v, like.shape(), like.device()).unwrap()
}

/// `(L(w + h·d) − L(w − h·d)) / 2h` against `⟨∇L, d⟩` for a fixed pseudo-random direction `d`
/// in each of several weights (f32: the tolerance is 2 %).
#[test]
fn gradients_agree_with_finite_differences() {
    let s = setup();
    let old = old_logprobs(&s);
    let (_, g) = grads(&s, &old);
    let mut checked = 0;
    for p in &s.params {
        let name = p.name();
        let wanted = name.contains("embed_tokens")
            || name.contains("layers.0.self_attn.q_proj.weight")
            || name.contains("layers.1.self_attn.q_proj.bias")
            || name.contains("layers.0.input_layernorm")
            || name.contains("layers.1.mlp.down_proj")
            || name.contains("model.norm");
        if !wanted {
            continue;
        }
        let var: &Var = &p.var;
        let w0 = var.as_tensor().copy().unwrap();
        let d = direction(&w0, checked as u64 + 1);
        let grad = g.get(var.as_tensor()).unwrap();
        let analytic: f32 = (grad * &d).unwrap().sum_all().unwrap().to_scalar().unwrap();
        let h = 1e-2 * max_abs(&w0).max(1e-3) / max_abs(&d);
        let at = |sign: f64| -> f32 {
            var.set(&(&w0 + (&d * (sign * h as f64)).unwrap()).unwrap())
                .unwrap();
            loss(&s, &old).to_scalar::<f32>().unwrap()
        };
        let numeric = (at(1.0) - at(-1.0)) / (2.0 * h);
        var.set(&w0).unwrap();
        eprintln!("{name}: analytic {analytic} numeric {numeric}");
        let tol = 0.02 * analytic.abs().max(numeric.abs()) + 1e-4;
        assert!(
            (analytic - numeric).abs() <= tol,
            "{name}: analytic {analytic}, finite differences {numeric}"
        );
        checked += 1;
    }
    assert_eq!(checked, 6);
}
