//! The `qwen` pointer backend end to end on the tiny random fixture: PNG → image processor →
//! chat template + tokenizer → vision tower + decoder → greedy tokens → answer parser.
//!
//! The fixture's weights are random, so its reply is gibberish: the test checks that the whole
//! chain reproduces transformers' greedy tokens for the same image and prompt, and that a reply
//! without points is a typed error that carries the raw text.

use pointact::pointing::qwen::{QwenOptions, QwenPointer};
use pointact::pointing::{Ability, PointerError, PointingError};
use pointact::vlm::{GenerationConfig, Quant};

mod vlm_fixture;
use vlm_fixture::*;

fn pointer(max_new_tokens: usize) -> QwenPointer {
    QwenPointer::load(
        fixture("").to_str().unwrap(),
        QwenOptions {
            generation: GenerationConfig {
                max_new_tokens,
                ..GenerationConfig::default()
            },
            progress: false,
            ..QwenOptions::default()
        },
    )
    .expect("fixture model loads")
}

#[test]
fn image_to_tokens_matches_transformers_and_no_points_is_a_typed_error() {
    let g = golden();
    let mut p = pointer(8);
    let img = image::open(fixture("image.png")).unwrap().to_rgb8();
    let (reply, pointing) = p.ask(&img, Ability::Reg, "the red block").unwrap();
    // Same prompt as the golden run (266 ids) → same 8 greedy tokens (repetition penalty 1.05).
    assert_eq!(reply.timings.prompt_tokens, 266);
    let want: Vec<u32> = i64s(&g, "generated_ids_rp")
        .iter()
        .map(|&x| x as u32)
        .collect();
    assert_eq!(reply.tokens, want);
    assert_eq!(reply.model_size, reply.original_size); // 336x252: no resize
    match pointing {
        Err(PointerError::Answer(e)) => {
            assert!(
                matches!(e, PointingError::MissingPointBlock { .. }),
                "{e:?}"
            );
            assert_eq!(e.raw(), reply.text);
        }
        other => panic!("random weights cannot answer with points: {other:?}"),
    }
    assert_eq!(p.last_reply().unwrap().tokens, want);
}

#[test]
fn streamed_text_equals_the_decoded_reply() {
    let streamed = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let sink = streamed.clone();
    let mut p = pointer(12).with_text_stream(move |s| sink.lock().unwrap().push_str(s));
    let img = image::open(fixture("image_resize.png")).unwrap().to_rgb8();
    let (reply, _) = p.ask(&img, Ability::Vtg, "move the block left").unwrap();
    assert_eq!(reply.tokens.len(), 12);
    assert_eq!(*streamed.lock().unwrap(), reply.text);
    // 300x200 is resized for the model to 308x196.
    assert_eq!(
        (reply.model_size.width, reply.model_size.height),
        (308, 196)
    );
}

#[test]
fn images_too_small_and_missing_models_are_clear_errors() {
    let mut p = pointer(2);
    let tiny = image::RgbImage::new(10, 10);
    let err = p.ask(&tiny, Ability::Reg, "x").unwrap_err().to_string();
    assert!(err.contains("qwen"), "{err}");
    let err = QwenPointer::load("/nonexistent/model/dir", QwenOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("/nonexistent/model/dir"), "{err}");
    // Quantized load of the same folder works (Q8_0 fits the fixture's 64-wide linears); no
    // cache beside the fixture (tests/vlm_qcache.rs covers the cache).
    let q = QwenPointer::load(
        fixture("").to_str().unwrap(),
        QwenOptions {
            quant: Quant::Q8_0,
            quant_cache: pointact::vlm::qcache::CacheOptions::off(),
            progress: false,
            ..QwenOptions::default()
        },
    );
    assert!(q.is_ok());
}
