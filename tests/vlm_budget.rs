//! The activation budget (`vlm::budget`): the estimate never undercounts the largest tensor the
//! model allocates, `pixels_within` returns the largest fitting image, and on the real 3B shape the
//! processor's pretrained `max_pixels` (the 12 MP photo case that aborted) does not fit the default
//! budget while Embodied-R1's evaluation resolution does.

use pointact::pointing::qwen::DEFAULT_ACTIVATION_BUDGET;
use pointact::vlm::attention_chunk_rows;
use pointact::vlm::budget::{activation_bytes, pixels_within, PROMPT_ALLOWANCE};
use pointact::vlm::Qwen25VlConfig;
use pointact::vlm::{ER1_EVAL_MAX_PIXELS, FACTOR, PRETRAINED_MAX_PIXELS};
use pointact_bench::vlm::checkpoint::config_json;

fn full_3b() -> Qwen25VlConfig {
    Qwen25VlConfig::from_json_str(&config_json(None).to_string()).unwrap()
}

fn tiny() -> Qwen25VlConfig {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/qwen25vl_tiny");
    Qwen25VlConfig::from_file(dir.join("config.json")).unwrap()
}

const TOKEN_PIXELS: u64 = (FACTOR as u64) * (FACTOR as u64);

/// The biggest single tensors of one forward pass: a chunk of a full-attention block's f32 scores
/// `[heads, rows, N]` and the prefill's `[heads, S, S]`.
fn largest_tensors(cfg: &Qwen25VlConfig, pixels: u64, extra: u64) -> (u64, u64) {
    let v = cfg.vision.as_ref().expect("a vision config");
    let n = pixels / (v.patch_size as u64).pow(2);
    let s = n / (v.spatial_merge_size as u64).pow(2) + extra;
    let rows = attention_chunk_rows(v.num_heads, n as usize) as u64;
    (
        v.num_heads as u64 * rows * n * 4,
        cfg.text.num_attention_heads as u64 * s * s * 4,
    )
}

#[test]
fn the_estimate_covers_the_largest_tensors_and_grows_with_the_square() {
    for cfg in [tiny(), full_3b()] {
        for tokens in [1u64, 64, 1_000, 16_384] {
            let pixels = tokens * TOKEN_PIXELS;
            let est = activation_bytes(&cfg, pixels, PROMPT_ALLOWANCE);
            let (vision, text) = largest_tensors(&cfg, pixels, PROMPT_ALLOWANCE);
            assert!(est.vision_bytes >= vision, "{tokens} tokens: {est:?}");
            assert!(est.text_bytes >= text, "{tokens} tokens: {est:?}");
            assert_eq!(est.patches, tokens * 4);
            assert_eq!(est.sequence, tokens + PROMPT_ALLOWANCE);
        }
        // Quadratic (the prefill scores), not linear: 4x the pixels costs more than 8x the memory.
        let a = activation_bytes(&cfg, 4_096 * TOKEN_PIXELS, 0).total_bytes();
        let b = activation_bytes(&cfg, 16_384 * TOKEN_PIXELS, 0).total_bytes();
        assert!(b > 8 * a, "{a} -> {b}");
    }
}

#[test]
fn pixels_within_is_the_largest_whole_token_count_that_fits() {
    for cfg in [tiny(), full_3b()] {
        for budget in [
            1u64 << 20,
            50 << 20,
            1 << 30,
            DEFAULT_ACTIVATION_BUDGET,
            64 << 30,
        ] {
            let p = pixels_within(&cfg, budget, PROMPT_ALLOWANCE);
            assert_eq!(p % TOKEN_PIXELS, 0);
            if p > 0 {
                assert!(activation_bytes(&cfg, p, PROMPT_ALLOWANCE).total_bytes() <= budget);
            }
            let next = activation_bytes(&cfg, p + TOKEN_PIXELS, PROMPT_ALLOWANCE);
            assert!(
                next.total_bytes() > budget,
                "{budget}: {p} is not the largest"
            );
        }
    }
    // Nothing fits a budget smaller than the prompt's own activations.
    assert_eq!(pixels_within(&full_3b(), 1 << 10, PROMPT_ALLOWANCE), 0);
}

#[test]
fn the_3b_model_caps_a_photo_at_the_pretrained_max_pixels_but_not_the_eval_resolution() {
    let cfg = full_3b();
    let photo = activation_bytes(&cfg, PRETRAINED_MAX_PIXELS, PROMPT_ALLOWANCE);
    assert!(
        photo.total_bytes() > 30 << 30,
        "a 12.8 MP image should need tens of GB: {photo:?}"
    );
    let fit = pixels_within(&cfg, DEFAULT_ACTIVATION_BUDGET, PROMPT_ALLOWANCE + 1024);
    assert!(fit < PRETRAINED_MAX_PIXELS, "{fit}");
    assert!(fit >= ER1_EVAL_MAX_PIXELS, "{fit}");
}
