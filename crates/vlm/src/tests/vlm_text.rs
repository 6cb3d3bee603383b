//! The text decoder, M-RoPE positions and generation against transformers 4.51.3 on the tiny
//! random Qwen2.5-VL of `tests/fixtures/qwen25vl_tiny/` (golden tensors from
//! `tests/fixtures/gen_qwen25vl_golden.py`).
//!
//! Tolerance: max |ours − golden| ≤ 1e-4 · max |golden| per tensor, f32 on both sides. Greedy
//! tokens must be identical.

use crate::rope::{rope_index, RopeError};
use crate::{
    apply_repetition_penalty, generate, GenerationConfig, ImageInput, LogitsAt, ModelError, Quant,
    Qwen25Vl, Qwen25VlConfig, SafetensorsReader, StopReason,
};
use candle_core::{DType, Device, Tensor};

use super::vlm_fixture::*;

/// The whole model as the golden run had it (bf16-rounded rotary frequencies, see
/// `Qwen25VisionModel::with_bf16_rotary_freqs`).
fn full_model(cfg: &Qwen25VlConfig, quant: Quant) -> Qwen25Vl {
    Qwen25Vl::new(cfg, quant, weights())
        .expect("model")
        .with_bf16_rotary_freqs()
        .unwrap()
}

fn input_ids(g: &std::collections::HashMap<String, Tensor>) -> Vec<u32> {
    i64s(g, "input_ids").iter().map(|&x| x as u32).collect()
}

fn image(g: &std::collections::HashMap<String, Tensor>) -> ImageInput {
    ImageInput {
        pixel_values: golden_pixel_values(g),
        grid_thw: grid(g),
    }
}

#[test]
fn rope_index_matches_transformers() {
    let g = golden();
    let cfg = config();
    let ids = input_ids(&g);
    let idx = rope_index(&ids, &[grid(&g)], 2, &cfg.tokens).unwrap();
    let want = i64s(&g, "position_ids"); // [3, 1, 266]
    let n = ids.len();
    assert_eq!(n, 266);
    for axis in 0..3 {
        let ours: Vec<i64> = idx.ids[axis].iter().map(|&x| i64::from(x)).collect();
        assert_eq!(ours, want[axis * n..(axis + 1) * n], "axis {axis}");
    }
    assert_eq!(idx.delta, i64s(&g, "rope_deltas")[0]);
    assert_eq!(idx.delta, -96);
    // Decoding continues one past the largest prompt id on all axes.
    let max = idx.ids.iter().flatten().max().copied().unwrap();
    assert_eq!(idx.decode_position(0), max + 1);
}

#[test]
fn rope_index_rejects_mismatched_images() {
    let g = golden();
    let cfg = config();
    let ids = input_ids(&g);
    // One pad too few.
    let mut short = ids.clone();
    let first_pad = short
        .iter()
        .position(|&t| t == cfg.tokens.image_token_id)
        .unwrap();
    short.remove(first_pad);
    assert!(matches!(
        rope_index(&short, &[grid(&g)], 2, &cfg.tokens),
        Err(RopeError::ImageTokens {
            found: 107,
            needed: 108,
            ..
        })
    ));
    // Image tokens but no grid.
    assert!(matches!(
        rope_index(&ids, &[], 2, &cfg.tokens),
        Err(RopeError::ImageCount { given: 0, .. })
    ));
    // A grid but no image in the prompt.
    let text_only = [1u32, 2, 3];
    assert!(matches!(
        rope_index(&text_only, &[grid(&g)], 2, &cfg.tokens),
        Err(RopeError::ImageCount { found: 0, given: 1 })
    ));
    // A pad outside a vision block.
    let stray = [1u32, cfg.tokens.image_token_id, 3];
    assert_eq!(
        rope_index(&stray, &[], 2, &cfg.tokens),
        Err(RopeError::StrayImageToken { pos: 1 })
    );
    // Text only: positions 0..n, delta 0.
    let idx = rope_index(&text_only, &[], 2, &cfg.tokens).unwrap();
    assert_eq!(idx.ids[1], vec![0, 1, 2]);
    assert_eq!(idx.delta, 0);
}

#[test]
fn prefill_matches_transformers_hidden_states_and_logits() {
    let g = golden();
    let cfg = config();
    let mut m = full_model(&cfg, Quant::F32);
    let prompt = m.prepare(&input_ids(&g), &[image(&g)]).unwrap();
    let out = m.prefill(&prompt, 0, LogitsAt::All, true).unwrap();
    assert_eq!(out.hidden_states.len(), 3);
    for (i, h) in out.hidden_states.iter().enumerate() {
        assert_close(
            &format!("text_hidden_{i}"),
            h,
            &g[&format!("text_hidden_{i}")],
        );
    }
    let pos: Vec<u32> = i64s(&g, "logits_positions")
        .iter()
        .map(|&p| p as u32)
        .collect();
    let at = Tensor::from_vec(pos.clone(), pos.len(), &Device::Cpu).unwrap();
    let ours = out
        .logits
        .index_select(&at, 0)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    assert_close("logits", &ours, &g["logits"]);
}

fn golden_generation(rp: f32, suffix: &str) {
    let g = golden();
    let cfg = config();
    let mut m = full_model(&cfg, Quant::F32);
    let gen_cfg = GenerationConfig {
        max_new_tokens: 8,
        repetition_penalty: rp,
        keep_logits: true,
        ..GenerationConfig::default()
    };
    let mut streamed = Vec::new();
    let out = generate(&mut m, &input_ids(&g), &[image(&g)], &gen_cfg, &mut |t| {
        streamed.push(t);
        true
    })
    .unwrap();
    let want: Vec<u32> = i64s(&g, &format!("generated_ids{suffix}"))
        .iter()
        .map(|&x| x as u32)
        .collect();
    assert_eq!(out.tokens, want);
    assert_eq!(want, vec![821, 412, 903, 404, 136, 276, 91, 806]);
    assert_eq!(streamed, out.tokens);
    assert_eq!(out.stop, StopReason::MaxNewTokens);
    assert_eq!(out.timings.decode_steps, 7);
    let vocab = cfg.text.vocab_size;
    let flat: Vec<f32> = out.step_logits.concat();
    let ours = Tensor::from_vec(flat, (1, 8, vocab), &Device::Cpu).unwrap();
    assert_close(
        &format!("generated_logits{suffix}"),
        &ours,
        &g[&format!("generated_logits{suffix}")],
    );
    if rp != 1.0 {
        // The processed scores: our penalty applied to the golden raw logits equals theirs.
        let raw = g[&format!("generated_logits{suffix}")]
            .squeeze(0)
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();
        let mut history = input_ids(&g);
        let mut scores = Vec::new();
        for (step, row) in raw.iter().enumerate() {
            let mut l = row.clone();
            apply_repetition_penalty(&mut l, &history, rp);
            scores.extend(l);
            history.push(want[step]);
        }
        let ours = Tensor::from_vec(scores, (1, 8, vocab), &Device::Cpu).unwrap();
        assert_close("generated_scores_rp", &ours, &g["generated_scores_rp"]);
    }
}

#[test]
fn greedy_generation_matches_transformers() {
    golden_generation(1.0, "");
}

#[test]
fn greedy_generation_with_repetition_penalty_matches_transformers() {
    golden_generation(1.05, "_rp");
}

#[test]
fn generation_stops_on_a_stop_token_and_on_request() {
    let g = golden();
    let cfg = config();
    let mut m = full_model(&cfg, Quant::F32);
    let ids = input_ids(&g);
    // Pretend the third greedy token is end-of-turn.
    let gen_cfg = GenerationConfig {
        max_new_tokens: 8,
        repetition_penalty: 1.0,
        stop_ids: vec![903],
        ..GenerationConfig::default()
    };
    let out = generate(&mut m, &ids, &[image(&g)], &gen_cfg, &mut |_| true).unwrap();
    assert_eq!(out.tokens, vec![821, 412, 903]);
    assert_eq!(out.stop, StopReason::Stop(903));
    // The callback cancels after two tokens.
    let mut n = 0;
    let out = generate(
        &mut m,
        &ids,
        &[image(&g)],
        &GenerationConfig {
            stop_ids: vec![],
            ..gen_cfg
        },
        &mut |_| {
            n += 1;
            n < 2
        },
    )
    .unwrap();
    assert_eq!(out.tokens, vec![821, 412]);
    assert_eq!(out.stop, StopReason::Cancelled);
}

#[test]
fn sampling_is_seeded_and_top_p_tiny_is_greedy() {
    use crate::Sampling;
    let g = golden();
    let cfg = config();
    let mut m = full_model(&cfg, Quant::F32);
    let ids = input_ids(&g);
    let run = |m: &mut Qwen25Vl, sampling, seed| {
        let c = GenerationConfig {
            max_new_tokens: 6,
            sampling,
            seed,
            repetition_penalty: 1.0,
            ..GenerationConfig::default()
        };
        generate(m, &ids, &[image(&g)], &c, &mut |_| true)
            .unwrap()
            .tokens
    };
    let hot = Sampling::TopP {
        temperature: 5.0,
        top_p: 1.0,
    };
    let a = run(&mut m, hot, 7);
    let b = run(&mut m, hot, 7);
    assert_eq!(a, b, "same seed, same tokens");
    let c = run(&mut m, hot, 8);
    assert_ne!(a, c, "a hot sampler with another seed differs");
    // top_p so small that only the most likely token survives = greedy.
    let nucleus = Sampling::TopP {
        temperature: 1.0,
        top_p: 1e-9,
    };
    assert_eq!(run(&mut m, nucleus, 3), vec![821, 412, 903, 404, 136, 276]);
}

#[test]
fn quantized_text_model_stays_close() {
    // The fixture's text widths (64, 128) fit Q8_0's 32-blocks but not Q4K's 256: Q4K keeps them
    // dense (and must then be exact), Q8_0 quantizes them.
    let g = golden();
    let cfg = config();
    let ids = input_ids(&g);
    let mut q4 = full_model(&cfg, Quant::Q4K);
    let p = q4.prepare(&ids, &[image(&g)]).unwrap();
    let out = q4.prefill(&p, 0, LogitsAt::All, false).unwrap();
    let pos = Tensor::new(&[265u32], &Device::Cpu).unwrap();
    let last = out.logits.index_select(&pos, 0).unwrap();
    let want = g["logits"].squeeze(0).unwrap().narrow(0, 6, 1).unwrap();
    assert_close("q4k (dense fallback) logits", &last, &want);

    let mut q8 = full_model(&cfg, Quant::Q8_0);
    let p = q8.prepare(&ids, &[image(&g)]).unwrap();
    let out = q8.prefill(&p, 0, LogitsAt::Last, false).unwrap();
    let (err, scale) = max_errors("q8_0 last logits", &out.logits, &want);
    println!("q8_0 last logits: relative {:.3e}", err / scale);
    assert!(err / scale > 1e-7, "q8_0 must actually quantize");
    assert!(err / scale < 0.05, "q8_0 drifted: {}", err / scale);
}

/// Our reader keeps weights as the checkpoint stores them (bf16) where that changes no result:
/// a quantized decoder's embedding table (it only gathers rows; its tied `lm_head` is blocks of
/// its own), and, where our kernels take bf16 (`linear::keeps_bf16`), every dense weight: the
/// 2-D weights whose width the blocks do not fit (all of them in an f32 model) and the table
/// with its tied head. Each such weight takes half the bytes of the f32 one candle's loader
/// makes, and the logits are the same bit for bit (bf16 widens exactly, the sums keep their
/// order).
#[test]
fn our_reader_keeps_bf16_weights_as_stored_with_the_same_logits() {
    let g = golden();
    let cfg = config();
    let ids = input_ids(&g);
    let ours = |quant| {
        let reader = SafetensorsReader::open(&[fixture("model.safetensors")]).unwrap();
        Qwen25Vl::new(
            &cfg,
            quant,
            reader.into_var_builder(DType::F32, &Device::Cpu),
        )
        .expect("model")
        .with_bf16_rotary_freqs()
        .unwrap()
    };
    let bits = |m: &mut Qwen25Vl| -> Vec<u32> {
        let p = m.prepare(&ids, &[image(&g)]).unwrap();
        let logits = m.prefill(&p, 0, LogitsAt::All, false).unwrap().logits;
        let v: Vec<f32> = logits.flatten_all().unwrap().to_vec1().unwrap();
        v.iter().map(|x| x.to_bits()).collect()
    };
    let reader = SafetensorsReader::open(&[fixture("model.safetensors")]).unwrap();
    let table = "model.embed_tokens.weight";
    let elems = |name: &str| reader.shape(name).unwrap().iter().product::<usize>();
    let keeps = crate::linear::keeps_bf16(&Device::Cpu);
    for quant in [Quant::F32, Quant::Q8_0, Quant::Q4K] {
        // Bytes saved: 2 per value of each weight kept bf16 rather than widened to f32.
        let kept: usize = reader
            .names()
            .into_iter()
            .filter(|&n| {
                // `Qwen25Vl::new` quantizes the decoder only: the vision tower is f32.
                let q = if n.starts_with("visual.") {
                    Quant::F32
                } else {
                    quant
                };
                let dense_2d = n.ends_with(".weight")
                    && matches!(reader.shape(n), Some(&[_, k]) if q == Quant::F32 || !q.fits(k));
                if n == table {
                    quant != Quant::F32 || keeps
                } else {
                    keeps && dense_2d
                }
            })
            .map(|n| 2 * elems(n))
            .sum();
        let (mut ours, mut candles) = (ours(quant), full_model(&cfg, quant));
        assert_eq!(
            candles.weight_bytes() - ours.weight_bytes(),
            kept,
            "{quant}: bytes saved"
        );
        assert!(
            quant == Quant::F32 && !keeps || kept >= 2 * elems(table),
            "{quant}: the table is kept"
        );
        assert!(
            bits(&mut ours) == bits(&mut candles),
            "{quant}: logits differ"
        );
    }
}

/// Training's `widen_dense` turns every bf16-kept weight of the decoder into f32 (the decoder
/// then holds what candle's f32 loader gives) and changes no logit.
#[test]
fn widen_dense_holds_f32_with_the_same_logits() {
    let g = golden();
    let cfg = config();
    let ids = input_ids(&g);
    let reader = SafetensorsReader::open(&[fixture("model.safetensors")]).unwrap();
    let mut ours = Qwen25Vl::new(
        &cfg,
        Quant::F32,
        reader.into_var_builder(DType::F32, &Device::Cpu),
    )
    .unwrap()
    .with_bf16_rotary_freqs()
    .unwrap();
    let bits = |m: &mut Qwen25Vl| -> Vec<u32> {
        let p = m.prepare(&ids, &[image(&g)]).unwrap();
        let logits = m.prefill(&p, 0, LogitsAt::All, false).unwrap().logits;
        let v: Vec<f32> = logits.flatten_all().unwrap().to_vec1().unwrap();
        v.iter().map(|x| x.to_bits()).collect()
    };
    let before = bits(&mut ours);
    ours.text.widen_dense().unwrap();
    let candles = full_model(&cfg, Quant::F32);
    assert_eq!(ours.text.weight_bytes(), candles.text.weight_bytes());
    assert!(bits(&mut ours) == before, "widening changed the logits");
}

#[test]
fn bad_inputs_are_typed_errors() {
    let g = golden();
    let cfg = config();
    let mut m = full_model(&cfg, Quant::F32);
    assert!(matches!(m.prepare(&[], &[]), Err(ModelError::EmptyPrompt)));
    assert!(matches!(
        m.prepare(&[5, 99_999], &[]),
        Err(ModelError::TokenId {
            id: 99_999,
            pos: 1,
            ..
        })
    ));
    let ids = input_ids(&g);
    let bad = ImageInput {
        pixel_values: Tensor::zeros((432, 100), candle_core::DType::F32, &Device::Cpu).unwrap(),
        grid_thw: grid(&g),
    };
    assert!(matches!(
        m.prepare(&ids, &[bad]),
        Err(ModelError::PatchDim { patch_dim: 100, .. })
    ));
    // Decoding before any prompt.
    let mut fresh = full_model(&cfg, Quant::F32);
    assert!(fresh.decode(1, 0).is_err());
    // Decoding past the allocated cache.
    let p = m.prepare(&ids, &[image(&g)]).unwrap();
    m.prefill(&p, 1, LogitsAt::Last, false).unwrap();
    m.decode(821, 0).unwrap();
    assert!(matches!(
        m.decode(412, 1),
        Err(ModelError::CacheFull { .. })
    ));
}
