//! The `qwen` backend asked without an image (`QwenPointer::reply`, the consistency reward's
//! in-process reference model) on the tiny random fixture: the chat template's plain-string
//! branch, the same tokenizer as the image path, and decoding through the KV cache equal to a
//! from-scratch forward pass at every step.

use pointact::pointing::qwen::{QwenOptions, QwenPointer};
use pointact::train::consistency::{
    QwenReference, ReferenceModel, REFERENCE_MAX_TOKENS, REFERENCE_SYSTEM, REFERENCE_TEMPERATURE,
};
use pointact::vlm::{apply_repetition_penalty, argmax, LogitsAt, Quant, Qwen25Tokenizer, Qwen25Vl};

use super::vlm_fixture::*;

fn pointer() -> QwenPointer {
    QwenPointer::load(
        fixture("").to_str().unwrap(),
        QwenOptions {
            progress: false,
            ..QwenOptions::default()
        },
    )
    .expect("fixture model loads")
}

#[test]
fn text_prompt_is_the_image_prompt_without_its_image() {
    let tok = Qwen25Tokenizer::from_dir(fixture("")).unwrap();
    let user = "Question: which?\n\nThinking process: B fits.";
    let text = tok
        .render_text_prompt(user, Some(REFERENCE_SYSTEM))
        .unwrap();
    assert_eq!(
        text,
        format!(
            "<|im_start|>system\n{REFERENCE_SYSTEM}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n\
             <|im_start|>assistant\n"
        )
    );
    // The image path renders the same turn with the vision block in front of the text.
    let with_image = tok.render_prompt(user, Some(REFERENCE_SYSTEM)).unwrap();
    assert_eq!(
        with_image.replace("<|vision_start|><|image_pad|><|vision_end|>", ""),
        text
    );
    // Without a system message the template's default one is used, as for images.
    let default = tok.render_text_prompt(user, None).unwrap();
    assert!(default.starts_with("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"));
    let ids = tok.text_prompt_ids(user, Some(REFERENCE_SYSTEM)).unwrap();
    assert_eq!(ids, tok.encode(&text).unwrap());
    let special = tok.special_ids();
    assert!(!ids.contains(&special.image_pad));
    assert_eq!(ids[0], special.im_start);
}

#[test]
fn greedy_reply_equals_a_full_forward_at_every_step() {
    let mut p = pointer();
    let user = "This is a multiple-choice question. Please respond with only one letter (A-H):";
    let reply = p.reply(REFERENCE_SYSTEM, user, 6, 0.0).unwrap();
    assert!(!reply.tokens.is_empty() && reply.tokens.len() <= 6);
    assert_eq!(
        p.reply(REFERENCE_SYSTEM, user, 6, 0.0).unwrap().tokens,
        reply.tokens
    );

    // The same prompt through the model directly, no cache: every greedy token is the arg-max of
    // the penalised logits of a fresh forward pass over everything before it.
    let tok = Qwen25Tokenizer::from_dir(fixture("")).unwrap();
    let prompt = tok.text_prompt_ids(user, Some(REFERENCE_SYSTEM)).unwrap();
    let cfg = config();
    let mut m = Qwen25Vl::new(&cfg, Quant::F32, weights()).unwrap();
    let mut seq = prompt.clone();
    for &want in &reply.tokens {
        let prepared = m.prepare(&seq, &[]).unwrap();
        let out = m.prefill(&prepared, 0, LogitsAt::Last, false).unwrap();
        let mut logits: Vec<f32> = out.logits.squeeze(0).unwrap().to_vec1().unwrap();
        apply_repetition_penalty(&mut logits, &seq, 1.05);
        assert_eq!(argmax(&logits), want);
        seq.push(want);
    }
    assert_eq!(reply.text, tok.inner().decode(&reply.tokens, true).unwrap());
}

#[test]
fn sampled_replies_repeat_and_the_reference_backend_passes_them_on() {
    let mut p = pointer();
    let a = p.reply("s", "u", 5, REFERENCE_TEMPERATURE).unwrap();
    let b = p.reply("s", "u", 5, REFERENCE_TEMPERATURE).unwrap();
    assert_eq!(a.tokens, b.tokens);
    let mut reference = QwenReference::new(p);
    let text = reference.reply("s", "u", 5, REFERENCE_TEMPERATURE).unwrap();
    assert_eq!(text, a.text);
    let long = reference
        .reply(REFERENCE_SYSTEM, "x", REFERENCE_MAX_TOKENS, 0.0)
        .unwrap();
    assert!(!long.contains("<|im_end|>"));
}
