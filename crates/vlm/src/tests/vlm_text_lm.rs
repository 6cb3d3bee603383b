//! Qwen2 text checkpoints (`Qwen2ForCausalLM`) through the VLM's decoder, against transformers
//! 4.51.3 on the tiny random model of `tests/fixtures/qwen2_text_tiny/` (made by
//! `tests/fixtures/gen_qwen2_text_golden.py`): logits at every position within 1e-4 · max|golden|,
//! greedy continuation identical; and the config errors a wrong file gets.

use std::collections::HashMap;
use std::path::PathBuf;

use candle_core::{DType, Device, Tensor};

use super::vlm_fixture::{fixture_in, golden_in, i64s};
use crate::{ConfigError, Quant, Qwen2TextConfig, Qwen2TextLm, SafetensorsReader};

fn fixture(name: &str) -> PathBuf {
    fixture_in("qwen2_text_tiny", name)
}

fn golden() -> HashMap<String, Tensor> {
    golden_in("qwen2_text_tiny")
}

fn ids(g: &HashMap<String, Tensor>, name: &str) -> Vec<u32> {
    i64s(g, name)
        .into_iter()
        .map(|x| u32::try_from(x).unwrap())
        .collect()
}

fn load(quant: Quant) -> Qwen2TextLm {
    let cfg = Qwen2TextConfig::from_file(fixture("config.json")).expect("config");
    let vb = SafetensorsReader::open(&[fixture("model.safetensors")])
        .expect("weights")
        .into_var_builder(DType::F32, &Device::Cpu);
    Qwen2TextLm::new(&cfg, quant, vb).expect("model")
}

#[test]
fn the_config_is_read_as_transformers_does() {
    let cfg = Qwen2TextConfig::from_file(fixture("config.json")).unwrap();
    let t = &cfg.text;
    assert_eq!(
        (t.vocab_size, t.hidden_size, t.num_hidden_layers),
        (300, 64, 2)
    );
    assert_eq!(
        (t.num_attention_heads, t.num_key_value_heads, t.head_dim),
        (4, 2, 16)
    );
    assert!(t.tie_word_embeddings);
    assert_eq!(t.mrope_section.iter().sum::<usize>(), t.head_dim / 2);
    assert_eq!(cfg.eos_token_ids, vec![299]);
    assert_eq!(cfg.bos_token_id, Some(298));
}

#[test]
fn logits_at_every_position_equal_transformers() {
    let g = golden();
    let input = ids(&g, "input_ids");
    assert_eq!(input.len(), 24);
    let ours = load(Quant::F32).logits(&input).unwrap();
    let want = &g["logits"];
    assert_eq!(ours.dims(), want.dims());
    let scale = crate::max_abs(want);
    let err = crate::max_abs_diff(&ours, want);
    eprintln!("max |ours - transformers| = {err:e} of max |logit| {scale}");
    assert!(scale > 1.0, "golden logits too flat to test: {scale}");
    assert!(
        err <= 1e-4 * scale,
        "max |ours - transformers| = {err} (scale {scale})"
    );
}

#[test]
fn greedy_ids_equal_transformers_generate() {
    let g = golden();
    let want = ids(&g, "greedy_ids");
    assert!(!want.is_empty());
    let ours = load(Quant::F32).greedy(&ids(&g, "input_ids"), 16).unwrap();
    assert_eq!(ours, want);
}

#[test]
fn a_vision_language_config_or_sliding_windows_are_refused_with_the_key() {
    let vl = std::fs::read_to_string(super::vlm_fixture::fixture("config.json")).unwrap();
    match Qwen2TextConfig::from_json_str(&vl) {
        Err(ConfigError::Invalid {
            field: "model_type",
            value,
            ..
        }) => {
            assert!(value.contains("qwen2_5_vl"), "{value}")
        }
        other => panic!("expected a model_type error, got {other:?}"),
    }
    let text = std::fs::read_to_string(fixture("config.json")).unwrap();
    let sliding = text.replace(
        "\"use_sliding_window\": false",
        "\"use_sliding_window\": true",
    );
    assert_ne!(sliding, text);
    match Qwen2TextConfig::from_json_str(&sliding) {
        Err(ConfigError::Invalid { field, .. }) => assert_eq!(field, "use_sliding_window"),
        other => panic!("expected a sliding-window error, got {other:?}"),
    }
    let no_vocab = text.replace("\"vocab_size\": 300", "\"vocab\": 300");
    assert!(matches!(
        Qwen2TextConfig::from_json_str(&no_vocab),
        Err(ConfigError::Missing("vocab_size"))
    ));
}

/// The quantized paths of the VLM serve the text model too: Q4K keeps the tiny widths (64, 128:
/// not multiples of its 256-blocks) dense and must then equal transformers as f32 does; Q8_0
/// (32-blocks) quantizes every linear and the tied head: it must differ, and still pick
/// transformers' most likely token at three positions in four or more. (This fixture's weights
/// are drawn large so that greedy decoding is decisive; that also makes Q8_0's rounding show, about
/// 7 % of the largest logit, where the VLM fixture's small weights keep it under 5 %: vlm_text.rs.)
#[test]
fn quantized_loads_stay_close_to_transformers() {
    let g = golden();
    let input = ids(&g, "input_ids");
    let want = &g["logits"];
    let scale = crate::max_abs(want);
    let err = |quant| crate::max_abs_diff(&load(quant).logits(&input).unwrap(), want) / scale;
    let q4 = err(Quant::Q4K);
    assert!(q4 <= 1e-4, "q4k (dense fallback): relative {q4:e}");
    let q8 = err(Quant::Q8_0);
    eprintln!("q8_0 logits: relative {q8:.3e}");
    let top = |t: &Tensor| t.argmax(1).unwrap().to_vec1::<u32>().unwrap();
    let q8_top = top(&load(Quant::Q8_0).logits(&input).unwrap());
    let same = q8_top
        .iter()
        .zip(top(want))
        .filter(|(a, b)| **a == *b)
        .count();
    eprintln!("q8_0 top-1 equal at {same} of {}", q8_top.len());
    assert!(q8 > 1e-7, "q8_0 must actually quantize");
    assert!(
        4 * same >= 3 * q8_top.len(),
        "q8_0 changed the top token at {} of {} positions",
        q8_top.len() - same,
        q8_top.len()
    );
}
