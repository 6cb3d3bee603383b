//! The GRPO objective (`train::grpo::objective`) against PyTorch: 40 cases of fixed
//! log-probs, rewards and masks (`tests/fixtures/gen_grpo_loss_golden.py`, torch 2.5.1, float64)
//! across every advantage mode, clip setting, KL estimator and aggregation; ours must give the
//! same advantages, loss, gradient with respect to the policy's log-probs (candle's autograd vs
//! torch's) and clip statistics.

use candle_core::{Device, Tensor, Var};
use pointact::train::grpo::objective::{
    advantages, aggregate, kl, policy_loss, AdvantageMode, Aggregation, Clip, KlKind,
};
use serde_json::Value;

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .expect("an array")
        .iter()
        .map(|x| x.as_f64().expect("a number"))
        .collect()
}

fn close(a: f64, b: f64, what: &str) {
    assert!(
        (a - b).abs() <= 1e-9 * (1.0 + b.abs()),
        "{what}: ours {a}, torch {b}"
    );
}

#[test]
fn the_objective_and_its_gradient_equal_pytorch() {
    let text = std::fs::read_to_string(concat!(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../.."),
        "/tests/fixtures/grpo_loss_golden.json"
    ))
    .expect("the fixture");
    let doc: Value = serde_json::from_str(&text).expect("JSON");
    let cases = doc["cases"].as_array().expect("cases");
    assert!(cases.len() >= 40);
    let mut kinds = std::collections::BTreeSet::new();
    for c in cases {
        let name = c["name"].as_str().unwrap();
        let (b, t, group) = (
            c["b"].as_u64().unwrap() as usize,
            c["t"].as_u64().unwrap() as usize,
            c["group"].as_u64().unwrap() as usize,
        );
        let tensor = |key: &str| Tensor::from_vec(floats(&c[key]), (b, t), &Device::Cpu).unwrap();
        let a = &c["advantage"];
        let mode = match a["kind"].as_str().unwrap() {
            "group" => AdvantageMode::Group {
                eps: a["eps"].as_f64().unwrap(),
                unbiased: a["unbiased"].as_bool().unwrap(),
            },
            "batch_std" => AdvantageMode::BatchStd {
                eps: a["eps"].as_f64().unwrap(),
                unbiased: a["unbiased"].as_bool().unwrap(),
            },
            "no_std" => AdvantageMode::NoStd,
            "rloo" => AdvantageMode::Rloo,
            k => panic!("{k}"),
        };
        let clip = Clip {
            low: c["clip"]["low"].as_f64().unwrap(),
            high: c["clip"]["high"].as_f64().unwrap(),
            dual: c["clip"]["dual"].as_f64(),
        };
        let kl_kind = match c["kl"]["kind"].as_str().unwrap() {
            "k1" => KlKind::K1,
            "abs" => KlKind::Abs,
            "k2" => KlKind::K2,
            "k3" => KlKind::K3,
            k => panic!("{k}"),
        };
        let coef = c["kl"]["coef"].as_f64().unwrap();
        let agg = match c["aggregation"]["kind"].as_str().unwrap() {
            "token_mean" => Aggregation::TokenMean,
            "seq_mean_token_mean" => Aggregation::SeqMeanTokenMean,
            "seq_mean_token_sum" => Aggregation::SeqMeanTokenSum,
            "seq_mean_token_sum_norm" => Aggregation::SeqMeanTokenSumNorm {
                max_len: c["aggregation"]["max_len"].as_u64().unwrap() as usize,
            },
            k => panic!("{k}"),
        };
        kinds.insert(
            format!("{mode:?}")
                .split([' ', '{'])
                .next()
                .unwrap()
                .to_string(),
        );
        let e = &c["expect"];
        let (adv, _) = advantages(&floats(&c["rewards"]), group, mode);
        for (i, (x, y)) in adv.iter().zip(floats(&e["advantages"])).enumerate() {
            close(*x, y, &format!("{name} advantage {i}"));
        }
        let logp = Var::from_tensor(&tensor("logp")).unwrap();
        let (old, reference, mask) = (tensor("old_logp"), tensor("ref_logp"), tensor("mask"));
        let adv_t = Tensor::new(adv.as_slice(), &Device::Cpu).unwrap();
        let pl = policy_loss(logp.as_tensor(), &old, &adv_t, &mask, clip).unwrap();
        let k = kl(logp.as_tensor(), &reference, kl_kind).unwrap();
        let total = (&pl.per_token + (k * coef).unwrap()).unwrap();
        let loss = aggregate(&total, &mask, agg).unwrap();
        close(
            loss.to_scalar::<f64>().unwrap(),
            e["loss"].as_f64().unwrap(),
            &format!("{name} loss"),
        );
        close(
            pl.clip_fraction,
            e["clip_fraction"].as_f64().unwrap(),
            &format!("{name} clip fraction"),
        );
        close(
            pl.dual_clip_fraction,
            e["dual_clip_fraction"].as_f64().unwrap(),
            &format!("{name} dual"),
        );
        close(
            pl.approx_kl,
            e["approx_kl"].as_f64().unwrap(),
            &format!("{name} ppo_kl"),
        );
        let grads = loss.backward().unwrap();
        let g: Vec<f64> = grads
            .get(logp.as_tensor())
            .expect("a gradient reaches the log-probs")
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        for (i, (x, y)) in g.iter().zip(floats(&e["grad"])).enumerate() {
            close(*x, y, &format!("{name} gradient {i}"));
        }
    }
    assert_eq!(kinds.len(), 4, "every advantage mode: {kinds:?}");
}
