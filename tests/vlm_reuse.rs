//! One frame, many questions (`vlm::generate_reusing`, `PromptCache`): the second question about
//! the same image starts from the first one's vision rows and prompt keys/values, and answers as
//! if asked cold — same greedy tokens, logits equal up to float rounding — on the tiny random
//! Qwen2.5-VL of `tests/fixtures/qwen25vl_tiny/`. A different image, or none, reuses nothing.

use pointact::pointing::qwen::{QwenOptions, QwenPointer};
use pointact::pointing::Ability;
use pointact::vlm::{
    generate, generate_reusing, Generation, GenerationConfig, ImageInput, PromptCache, Quant,
    Qwen25Vl,
};

mod vlm_fixture;
use vlm_fixture::*;

fn cfg() -> GenerationConfig {
    GenerationConfig {
        max_new_tokens: 8,
        keep_logits: true,
        ..GenerationConfig::default()
    }
}

/// A question through `cache` (greedy, 8 tokens, every step's logits kept).
fn warm_ask(
    m: &mut Qwen25Vl,
    ids: &[u32],
    image: &ImageInput,
    cache: &mut PromptCache,
) -> Generation {
    generate_reusing(
        m,
        ids,
        std::slice::from_ref(image),
        &cfg(),
        &mut |_| true,
        cache,
    )
    .unwrap()
}

/// The same question asked cold.
fn cold_ask(m: &mut Qwen25Vl, ids: &[u32], image: &ImageInput) -> Generation {
    generate(m, ids, std::slice::from_ref(image), &cfg(), &mut |_| true).unwrap()
}

/// Largest |a − b| over every step's logits, relative to the largest |b|.
fn rel_diff(a: &Generation, b: &Generation) -> f32 {
    assert_eq!(a.step_logits.len(), b.step_logits.len());
    let mut worst = 0f32;
    let mut scale = 0f32;
    for (x, y) in a.step_logits.iter().zip(&b.step_logits) {
        for (p, q) in x.iter().zip(y) {
            worst = worst.max((p - q).abs());
            scale = scale.max(q.abs());
        }
    }
    worst / scale
}

#[test]
fn a_second_question_about_the_same_image_reuses_it_and_answers_as_cold() {
    let g = golden();
    let c = config();
    let mut m = Qwen25Vl::new(&c, Quant::F32, weights()).unwrap();
    let image = ImageInput {
        pixel_values: golden_pixel_values(&g),
        grid_thw: grid(&g),
    };
    let first: Vec<u32> = i64s(&g, "input_ids").iter().map(|&x| x as u32).collect();
    // Another question: the same template, system and image, a different instruction (the
    // last 12 tokens before `<|im_end|>\n<|im_start|>assistant\n` replaced).
    let n = first.len();
    let mut second = first.clone();
    for (i, t) in second[n - 17..n - 5].iter_mut().enumerate() {
        *t = 300 + i as u32;
    }
    let common = n - 17;
    let mut cache = PromptCache::new();
    let a = warm_ask(&mut m, &first, &image, &mut cache);
    assert!(!a.timings.vision_reused);
    assert_eq!(a.timings.reused_tokens, 0);
    assert_eq!(a.tokens, cold_ask(&mut m, &first, &image).tokens);

    let warm = warm_ask(&mut m, &second, &image, &mut cache);
    let cold = cold_ask(&mut m, &second, &image);
    assert!(warm.timings.vision_reused);
    assert_eq!(warm.timings.reused_tokens, common);
    assert_eq!(warm.tokens, cold.tokens);
    let d = rel_diff(&warm, &cold);
    assert!(d < 1e-5, "warm vs cold logits differ by {d:e} (relative)");

    // The very same prompt again: everything but its last token comes from the cache.
    let again = warm_ask(&mut m, &second, &image, &mut cache);
    assert_eq!(again.timings.reused_tokens, n - 1);
    assert_eq!(again.tokens, cold.tokens);
    assert!(rel_diff(&again, &cold) < 1e-5);

    // Another frame with the same size (same token ids!): nothing reused, exactly the cold run.
    let other = ImageInput {
        pixel_values: (image.pixel_values.clone() * 0.5).unwrap(),
        grid_thw: image.grid_thw,
    };
    let warm = warm_ask(&mut m, &second, &other, &mut cache);
    let cold = cold_ask(&mut m, &second, &other);
    assert!(!warm.timings.vision_reused);
    assert_eq!(warm.timings.reused_tokens, 0);
    assert_eq!(warm.step_logits, cold.step_logits);

    // A cleared cache starts cold too.
    cache.clear();
    let warm = warm_ask(&mut m, &second, &image, &mut cache);
    assert_eq!(warm.timings.reused_tokens, 0);
}

/// The pointer keeps the frame between questions: REG then RRG about one image, the RRG reply
/// equals the one a pointer that forgot the frame gives.
#[test]
fn the_qwen_pointer_reuses_the_frame_across_a_tasks_questions() {
    let mut p = QwenPointer::load(
        fixture("").to_str().unwrap(),
        QwenOptions {
            generation: GenerationConfig {
                max_new_tokens: 6,
                ..GenerationConfig::default()
            },
            progress: false,
            ..QwenOptions::default()
        },
    )
    .unwrap();
    let img = image::open(fixture("image.png")).unwrap().to_rgb8();
    let (reg, _) = p.ask(&img, Ability::Reg, "the red block").unwrap();
    assert_eq!(reg.timings.reused_tokens, 0);
    let (rrg, _) = p
        .ask(&img, Ability::Rrg, "put the red block left of the cup")
        .unwrap();
    assert!(rrg.timings.vision_reused);
    // 336x252 → 24x18 patches → 108 image tokens, all before the question.
    assert!(
        rrg.timings.reused_tokens > 108,
        "{} prompt tokens reused",
        rrg.timings.reused_tokens
    );
    p.forget_frame();
    let (cold, _) = p
        .ask(&img, Ability::Rrg, "put the red block left of the cup")
        .unwrap();
    assert_eq!(cold.timings.reused_tokens, 0);
    assert!(!cold.timings.vision_reused);
    assert_eq!(rrg.tokens, cold.tokens);
    assert_eq!(rrg.text, cold.text);
}
