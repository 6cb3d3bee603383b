//! The tokenizer and chat template against transformers 4.51.3 on the fixture of
//! `tests/fixtures/qwen25vl_tiny/` (golden `input_ids` and the rendered prompt stored in the
//! metadata of `golden.safetensors`, made by `tests/fixtures/gen_qwen25vl_golden.py`).

mod common;

use common::temp_dir;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use pointact::pointing::Ability;
use pointact::vlm::{
    ImageProcessor, Qwen25Tokenizer, Qwen25VlConfig, TemplateSource, TokenizerError,
    QWEN2_VL_CHAT_TEMPLATE,
};
use safetensors::{Dtype, SafeTensors};

/// Ids the fixture model generates greedily from the golden prompt (`generated_ids`).
const GENERATED: [u32; 8] = [821, 412, 903, 404, 136, 276, 91, 806];

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/qwen25vl_tiny")
        .join(name)
}

fn fixture_dir() -> PathBuf {
    fixture("")
}

fn golden_bytes() -> Vec<u8> {
    std::fs::read(fixture("golden.safetensors")).expect("read golden.safetensors")
}

fn golden_i64s(bytes: &[u8], name: &str) -> Vec<i64> {
    let st = SafeTensors::deserialize(bytes).expect("parse golden.safetensors");
    let t = st.tensor(name).expect(name);
    assert_eq!(t.dtype(), Dtype::I64, "{name}");
    t.data()
        .chunks_exact(8)
        .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

fn golden_metadata(bytes: &[u8]) -> HashMap<String, String> {
    let (_, meta) = SafeTensors::read_metadata(bytes).expect("golden header");
    meta.metadata().clone().expect("golden metadata")
}

fn tokenizer() -> Qwen25Tokenizer {
    Qwen25Tokenizer::from_dir(fixture_dir()).expect("fixture tokenizer")
}

fn reg_prompt() -> String {
    Ability::Reg.prompt("the red block")
}

/// The 266 golden ids: the REG prompt with 108 image tokens, tokenised as the processor does.
#[test]
fn input_ids_equal_transformers_for_reg_prompt() {
    let bytes = golden_bytes();
    let golden: Vec<u32> = golden_i64s(&bytes, "input_ids")
        .into_iter()
        .map(|id| u32::try_from(id).unwrap())
        .collect();
    assert_eq!(golden.len(), 266);
    let tok = tokenizer();
    assert!(matches!(
        tok.template_source(),
        TemplateSource::TokenizerConfig(p) if p.ends_with("tokenizer_config.json")
    ));
    // The image-token count comes from the image processor, as in the pipeline.
    let img = image::open(fixture("image.png")).unwrap();
    let processor =
        ImageProcessor::from_preprocessor_config(fixture("preprocessor_config.json")).unwrap();
    let n_image = processor.preprocess(&img).unwrap().num_image_tokens();
    assert_eq!(n_image, 108);
    let ids = tok.prompt_ids(&reg_prompt(), None, n_image).unwrap();
    assert_eq!(ids, golden);
}

/// The rendered (unexpanded) prompt equals the one stored in the golden metadata.
#[test]
fn rendered_prompt_equals_golden_metadata() {
    let meta = golden_metadata(&golden_bytes());
    assert_eq!(meta["instruction"], "the red block");
    assert_eq!(meta["transformers"], "4.51.3");
    let rendered = tokenizer().render_prompt(&reg_prompt(), None).unwrap();
    assert_eq!(rendered, meta["prompt"]);
}

/// Special-token ids from the tokenizer equal the golden metadata and `config.json`; a
/// mismatching config is a typed error naming the token.
#[test]
fn special_ids_agree_with_config_and_golden() {
    let tok = tokenizer();
    let ids = tok.special_ids();
    let meta = golden_metadata(&golden_bytes());
    let golden: HashMap<String, u32> = serde_json::from_str(&meta["special_token_ids"]).unwrap();
    assert_eq!(golden["<|im_start|>"], ids.im_start);
    assert_eq!(golden["<|im_end|>"], ids.im_end);
    assert_eq!(golden["<|vision_start|>"], ids.vision_start);
    assert_eq!(golden["<|vision_end|>"], ids.vision_end);
    assert_eq!(golden["<|image_pad|>"], ids.image_pad);
    assert_eq!(golden["<|video_pad|>"], ids.video_pad);
    assert_eq!(Some(golden["<|endoftext|>"]), ids.endoftext);
    assert_eq!(Some(golden["<|vision_pad|>"]), ids.vision_pad);

    let cfg = Qwen25VlConfig::from_file(fixture("config.json")).unwrap();
    tok.check_token_ids(&cfg.tokens, true).unwrap();

    let mut bad = cfg.tokens.clone();
    bad.image_token_id = ids.video_pad;
    let err = tok.check_token_ids(&bad, true).unwrap_err();
    assert!(
        matches!(
            err,
            TokenizerError::TokenIdMismatch { token: "<|image_pad|>", field: "image_token_id", config_id, tokenizer_id }
                if config_id == ids.video_pad && tokenizer_id == ids.image_pad
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("<|image_pad|>"), "{err}");

    let mut bad = cfg.tokens.clone();
    bad.vision_end_token_id = 5;
    let err = tok.check_token_ids(&bad, true).unwrap_err();
    assert!(err.to_string().contains("<|vision_end|>"), "{err}");

    let mut bad = cfg.tokens.clone();
    bad.eos_token_ids = vec![ids.im_end, 7];
    let err = tok.check_token_ids(&bad, true).unwrap_err();
    assert!(
        matches!(
            err,
            TokenizerError::NotSpecialId {
                field: "eos_token_id",
                id: 7
            }
        ),
        "{err:?}"
    );
}

/// Each special-token string encodes to its single id (they are added tokens).
#[test]
fn special_tokens_are_single_ids() {
    let tok = tokenizer();
    let ids = tok.special_ids();
    let text =
        "<|im_start|>user\n<|vision_start|><|image_pad|><|image_pad|><|vision_end|>hi<|im_end|>";
    let enc = tok.encode(text).unwrap();
    assert_eq!(enc[0], ids.im_start);
    assert_eq!(
        enc.iter().filter(|&&id| id == ids.image_pad).count(),
        2,
        "{enc:?}"
    );
    assert_eq!(*enc.last().unwrap(), ids.im_end);
    assert_eq!(tok.decode(&enc).unwrap(), text);
}

/// The built-in fallback is the fixture's (Qwen2-VL) template, byte for byte.
#[test]
fn builtin_template_is_the_qwen2_vl_one() {
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("tokenizer_config.json")).unwrap())
            .unwrap();
    assert_eq!(
        cfg["chat_template"].as_str().unwrap(),
        QWEN2_VL_CHAT_TEMPLATE
    );
}

/// A folder with only `tokenizer.json` falls back to the built-in template and renders and
/// tokenises exactly as with the fixture's template.
#[test]
fn fallback_template_renders_identically() {
    let dir = temp_dir("fallback");
    std::fs::copy(fixture("tokenizer.json"), dir.join("tokenizer.json")).unwrap();
    let tok = Qwen25Tokenizer::from_dir(&dir).unwrap();
    assert_eq!(tok.template_source(), &TemplateSource::BuiltIn);
    let reference = tokenizer();
    for system in [None, Some("You point at things.")] {
        assert_eq!(
            tok.render_prompt(&reg_prompt(), system).unwrap(),
            reference.render_prompt(&reg_prompt(), system).unwrap()
        );
    }
    let meta = golden_metadata(&golden_bytes());
    assert_eq!(
        tok.render_prompt(&reg_prompt(), None).unwrap(),
        meta["prompt"]
    );
    assert_eq!(
        tok.prompt_ids(&reg_prompt(), None, 108).unwrap(),
        reference.prompt_ids(&reg_prompt(), None, 108).unwrap()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `chat_template.jinja` beats `chat_template.json`, which beats `tokenizer_config.json`; the
/// JSON may hold a list of named templates (then "default" is used).
#[test]
fn template_file_precedence() {
    let dir = temp_dir("precedence");
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(fixture(f), dir.join(f)).unwrap();
    }
    let custom = QWEN2_VL_CHAT_TEMPLATE.replace("You are a helpful assistant.", "From json.");
    let json = serde_json::json!({ "chat_template": custom });
    std::fs::write(dir.join("chat_template.json"), json.to_string()).unwrap();
    let tok = Qwen25Tokenizer::from_dir(&dir).unwrap();
    assert!(matches!(
        tok.template_source(),
        TemplateSource::ChatTemplateJson(_)
    ));
    assert!(tok
        .render_prompt("x", None)
        .unwrap()
        .starts_with("<|im_start|>system\nFrom json.<|im_end|>\n"));

    let listed = serde_json::json!({ "chat_template": [
        { "name": "tool_use", "template": "unused" },
        { "name": "default", "template": custom },
    ]});
    std::fs::write(dir.join("chat_template.json"), listed.to_string()).unwrap();
    let tok = Qwen25Tokenizer::from_dir(&dir).unwrap();
    assert!(tok.render_prompt("x", None).unwrap().contains("From json."));

    let jinja = QWEN2_VL_CHAT_TEMPLATE.replace("You are a helpful assistant.", "From jinja.");
    std::fs::write(dir.join("chat_template.jinja"), &jinja).unwrap();
    let tok = Qwen25Tokenizer::from_dir(&dir).unwrap();
    assert!(matches!(tok.template_source(), TemplateSource::Jinja(_)));
    assert!(tok
        .render_prompt("x", None)
        .unwrap()
        .contains("From jinja."));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A system message replaces the template's default one.
#[test]
fn system_message_replaces_the_default() {
    let rendered = tokenizer()
        .render_prompt("point at the cup", Some("You point at things."))
        .unwrap();
    assert_eq!(
        rendered,
        "<|im_start|>system\nYou point at things.<|im_end|>\n<|im_start|>user\n\
         <|vision_start|><|image_pad|><|vision_end|>point at the cup<|im_end|>\n\
         <|im_start|>assistant\n"
    );
}

/// Templates render with transformers' Jinja settings: trim_blocks and lstrip_blocks on.
#[test]
fn blocks_are_trimmed_like_transformers() {
    let tok = tokenizer().with_chat_template(
        "{% for m in messages %}\n    {% if true %}\n{{ m['role'] }}\n    {% endif %}\n{% endfor %}",
    );
    assert_eq!(tok.template_source(), &TemplateSource::Custom);
    assert_eq!(tok.render_prompt("x", Some("s")).unwrap(), "system\nuser\n");
}

/// `raise_exception` in a template surfaces its message as a typed error.
#[test]
fn raise_exception_reaches_the_caller() {
    let tok = tokenizer().with_chat_template(
        "{% if messages|length > 1 %}{{ raise_exception('only one turn, please') }}{% endif %}",
    );
    let err = tok.render_prompt("x", Some("s")).unwrap_err();
    assert!(matches!(err, TokenizerError::Template(_)), "{err:?}");
    assert!(err.to_string().contains("only one turn, please"), "{err}");
}

/// A template that emits no image placeholder gives an error naming the token.
#[test]
fn template_without_image_token_is_a_clear_error() {
    let tok = tokenizer().with_chat_template(
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] %}{% if c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}<|im_start|>assistant\n",
    );
    let err = tok.prompt_ids(&reg_prompt(), None, 108).unwrap_err();
    assert!(
        matches!(
            err,
            TokenizerError::ImagePlaceholders {
                token: "<|image_pad|>",
                found: 0
            }
        ),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains("<|image_pad|>") && msg.contains("0"), "{msg}");

    let err = tokenizer().prompt_ids(&reg_prompt(), None, 0).unwrap_err();
    assert!(matches!(err, TokenizerError::NoImageTokens), "{err:?}");
}

/// A folder without `tokenizer.json` is a typed error naming the path.
#[test]
fn missing_tokenizer_json_is_a_typed_error() {
    let dir = temp_dir("missing");
    let err = Qwen25Tokenizer::from_dir(&dir).unwrap_err();
    let want = dir.join("tokenizer.json");
    assert!(
        matches!(&err, TokenizerError::MissingTokenizer { path } if *path == want),
        "{err:?}"
    );
    assert!(
        err.to_string().contains(&want.display().to_string()),
        "{err}"
    );

    std::fs::write(dir.join("tokenizer.json"), "{ not json").unwrap();
    let err = Qwen25Tokenizer::from_dir(&dir).unwrap_err();
    assert!(matches!(err, TokenizerError::Load { .. }), "{err:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Streams `ids` one at a time; returns the chunks (finish's remainder last) and how many steps
/// returned nothing.
fn stream_chunks(tok: &Qwen25Tokenizer, ids: &[u32]) -> (Vec<String>, usize) {
    let mut stream = tok.stream();
    let mut chunks = Vec::new();
    let mut held = 0;
    for &id in ids {
        match stream.step(id).unwrap() {
            Some(text) => chunks.push(text),
            None => held += 1,
        }
    }
    chunks.extend(stream.finish().unwrap());
    (chunks, held)
}

/// Streaming the golden generated ids gives the one-shot decode.
#[test]
fn streaming_decode_of_generated_ids_equals_one_shot() {
    let bytes = golden_bytes();
    let golden: Vec<i64> = golden_i64s(&bytes, "generated_ids");
    assert_eq!(golden, GENERATED.map(i64::from));
    let tok = tokenizer();
    let one_shot = tok.decode(&GENERATED).unwrap();
    assert!(!one_shot.is_empty());
    let (chunks, _) = stream_chunks(&tok, &GENERATED);
    assert_eq!(chunks.concat(), one_shot);

    // The whole golden prompt, special tokens and 108 pads included.
    let prompt: Vec<u32> = golden_i64s(&bytes, "input_ids")
        .into_iter()
        .map(|id| id as u32)
        .collect();
    let (chunks, _) = stream_chunks(&tok, &prompt);
    assert_eq!(chunks.concat(), tok.decode(&prompt).unwrap());
}

/// Characters whose UTF-8 bytes span several byte-level tokens are emitted whole, never as
/// U+FFFD halves.
#[test]
fn streaming_holds_back_split_characters() {
    let tok = tokenizer();
    let text = "Le bloc rouge é à 😀 → ok";
    let ids = tok.encode(text).unwrap();
    assert_eq!(tok.decode(&ids).unwrap(), text);
    let (chunks, held) = stream_chunks(&tok, &ids);
    assert!(held > 0, "no character was split across tokens: {ids:?}");
    for chunk in &chunks {
        assert!(!chunk.contains('\u{FFFD}'), "{chunks:?}");
    }
    assert_eq!(chunks.concat(), text);

    // Ids that stop inside a character: finish() returns the lossy remainder, like decode().
    let emoji = tok.encode("😀").unwrap();
    assert!(emoji.len() > 1, "{emoji:?}");
    let cut = &emoji[..emoji.len() - 1];
    let (chunks, _) = stream_chunks(&tok, cut);
    assert_eq!(chunks.concat(), tok.decode(cut).unwrap());
    assert!(chunks.concat().ends_with('\u{FFFD}'));
}
