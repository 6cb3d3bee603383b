//! Qwen2 text checkpoints (`Qwen2ForCausalLM`) through the VLM's config, loader, decoder and
//! generation, against transformers 4.51.3 on the tiny random model of
//! `tests/fixtures/qwen2_text_tiny/` (made by `tests/fixtures/gen_qwen2_text_golden.py`): logits
//! at every position within 1e-4 · max|golden|, greedy continuations identical (of random ids and
//! of a chat prompt rendered and tokenised as transformers' `apply_chat_template` does); the
//! quantized loads; and the config errors a wrong file gets.

use std::collections::HashMap;
use std::path::PathBuf;

use candle_core::{DType, Device, Tensor};

use super::vlm_fixture::{fixture_in, golden_in, i64s};
use crate::{
    generate, ConfigError, GenerationConfig, LogitsAt, ModelError, ModelFiles, Quant,
    Qwen25Tokenizer, Qwen25Vl, Qwen25VlConfig, SafetensorsReader, Sampling,
};

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

/// Loaded as the pointing backend and the trainer load a model: resolved files, the shared
/// config reader, the weights reader.
fn load(quant: Quant) -> Qwen25Vl {
    let files = ModelFiles::from_dir(fixture("")).expect("files");
    let cfg = Qwen25VlConfig::from_file(&files.config).expect("config");
    let vb = SafetensorsReader::open(&files.weights)
        .expect("weights")
        .into_var_builder(DType::F32, &Device::Cpu);
    Qwen25Vl::new(&cfg, quant, vb).expect("model")
}

/// f32 logits at every position of `input`.
fn logits(model: &mut Qwen25Vl, input: &[u32]) -> Tensor {
    let prompt = model.prepare(input, &[]).unwrap();
    model
        .prefill(&prompt, 0, LogitsAt::All, false)
        .unwrap()
        .logits
        .squeeze(0)
        .unwrap()
}

/// transformers' `generate(do_sample=False)` with the fixture's generation config: greedy, no
/// repetition penalty, stop after eos.
fn greedy(model: &mut Qwen25Vl, input: &[u32], eos: &[u32]) -> Vec<u32> {
    let cfg = GenerationConfig {
        max_new_tokens: 16,
        sampling: Sampling::Greedy,
        repetition_penalty: 1.0,
        stop_ids: eos.to_vec(),
        ..GenerationConfig::default()
    };
    generate(model, input, &[], &cfg, &mut |_| true)
        .unwrap()
        .tokens
}

#[test]
fn the_config_is_read_as_transformers_does() {
    let cfg = Qwen25VlConfig::from_file(fixture("config.json")).unwrap();
    assert!(cfg.vision.is_none(), "a text model has no vision part");
    let t = &cfg.text;
    assert_eq!(
        (t.vocab_size, t.hidden_size, t.num_hidden_layers),
        (1024, 64, 2)
    );
    assert_eq!(
        (t.num_attention_heads, t.num_key_value_heads, t.head_dim),
        (4, 2, 16)
    );
    assert!(t.tie_word_embeddings);
    assert_eq!(t.mrope_section.iter().sum::<usize>(), t.head_dim / 2);
    assert_eq!(cfg.tokens.eos_token_ids, vec![1012]);
    assert_eq!(cfg.tokens.bos_token_id, Some(1010));
    // The tokenizer's ids for the same strings (`<|im_end|>`, `<|endoftext|>`).
    let tok = Qwen25Tokenizer::from_dir(fixture("")).unwrap();
    tok.check_token_ids(&cfg.tokens, false).unwrap();
    let special = tok.special_ids();
    assert_eq!((special.im_end, special.endoftext), (1012, Some(1010)));
}

#[test]
fn logits_at_every_position_equal_transformers() {
    let g = golden();
    let input = ids(&g, "input_ids");
    assert_eq!(input.len(), 24);
    let ours = logits(&mut load(Quant::F32), &input);
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
    let ours = greedy(&mut load(Quant::F32), &ids(&g, "input_ids"), &[1012, 1010]);
    assert_eq!(ours, want);
}

/// The chat path `ask` and the trainer use: the Qwen2.5-Instruct template from
/// `tokenizer_config.json` (default system message included) rendered and tokenised to
/// transformers' ids, then a greedy reply equal to transformers'.
#[test]
fn a_chat_prompt_and_its_reply_equal_transformers() {
    let g = golden();
    let tok = Qwen25Tokenizer::from_dir(fixture("")).unwrap();
    let user = "Question: which object is closest to the mug?\nA. the pan\nB. the pepper";
    let chat = tok.text_prompt_ids(user, None).unwrap();
    assert_eq!(chat, ids(&g, "chat_ids"));
    let rendered = tok.render_text_prompt(user, None).unwrap();
    assert!(
        rendered.contains("You are Qwen, created by Alibaba Cloud."),
        "{rendered}"
    );
    let reply = greedy(&mut load(Quant::F32), &chat, &[1012, 1010]);
    assert_eq!(reply, ids(&g, "chat_greedy_ids"));
}

/// A text model asked about an image says so instead of failing somewhere in the decoder.
#[test]
fn images_given_to_a_text_model_are_refused_by_name() {
    let model = load(Quant::F32);
    let image = crate::ImageInput {
        pixel_values: Tensor::zeros((4, 1176), DType::F32, &Device::Cpu).unwrap(),
        grid_thw: [1, 2, 2],
    };
    assert!(matches!(
        model.prepare(&[1, 2, 3], &[image]),
        Err(ModelError::NoVisionTower)
    ));
}

#[test]
fn sliding_windows_and_missing_keys_are_refused_with_the_key() {
    // The VL fixture's config keeps its vision part.
    let vl = std::fs::read_to_string(super::vlm_fixture::fixture("config.json")).unwrap();
    assert!(Qwen25VlConfig::from_json_str(&vl).unwrap().vision.is_some());
    let text = std::fs::read_to_string(fixture("config.json")).unwrap();
    let sliding = text.replace(
        "\"use_sliding_window\": false",
        "\"use_sliding_window\": true",
    );
    assert_ne!(sliding, text);
    match Qwen25VlConfig::from_json_str(&sliding) {
        Err(ConfigError::Invalid { field, .. }) => assert_eq!(field, "use_sliding_window"),
        other => panic!("expected a sliding-window error, got {other:?}"),
    }
    let no_vocab = text.replace("\"vocab_size\": 1024", "\"vocab\": 1024");
    assert_ne!(no_vocab, text);
    assert!(matches!(
        Qwen25VlConfig::from_json_str(&no_vocab),
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
    let err = |quant| crate::max_abs_diff(&logits(&mut load(quant), &input), want) / scale;
    let q4 = err(Quant::Q4K);
    assert!(q4 <= 1e-4, "q4k (dense fallback): relative {q4:e}");
    let q8 = err(Quant::Q8_0);
    eprintln!("q8_0 logits: relative {q8:.3e}");
    let top = |t: &Tensor| t.argmax(1).unwrap().to_vec1::<u32>().unwrap();
    let q8_top = top(&logits(&mut load(Quant::Q8_0), &input));
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
