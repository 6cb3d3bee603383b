//! `config.json` parsing: the fixture's flat 4.51.3 layout, the nested `text_config` layout of
//! newer transformers, and the typed validation errors.

use std::path::Path;

use crate::{ConfigError, Qwen25VlConfig};

fn fixture_json() -> String {
    std::fs::read_to_string(
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .join("tests/fixtures/qwen25vl_tiny/config.json"),
    )
    .expect("fixture config.json")
}

fn edit(json: &str, f: impl FnOnce(&mut serde_json::Value)) -> String {
    let mut v: serde_json::Value = serde_json::from_str(json).unwrap();
    f(&mut v);
    v.to_string()
}

#[test]
fn parses_the_fixture_flat_layout() {
    let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .join("tests/fixtures/qwen25vl_tiny/config.json");
    let c = Qwen25VlConfig::from_file(path).unwrap();
    let t = &c.text;
    assert_eq!(
        (t.vocab_size, t.hidden_size, t.intermediate_size),
        (1024, 64, 128)
    );
    assert_eq!(
        (
            t.num_hidden_layers,
            t.num_attention_heads,
            t.num_key_value_heads
        ),
        (2, 4, 2)
    );
    assert_eq!(t.head_dim, 16);
    assert_eq!(t.mrope_section, vec![2, 3, 3]);
    assert_eq!(t.rms_norm_eps, 1e-6);
    assert_eq!(t.rope_theta, 1e6);
    assert!(t.tie_word_embeddings);
    let v = c.vision.as_ref().expect("a vision config");
    assert_eq!(
        (v.depth, v.hidden_size, v.intermediate_size, v.num_heads),
        (4, 32, 48, 2)
    );
    assert_eq!(v.out_hidden_size, 64);
    assert_eq!(v.fullatt_block_indexes, vec![1, 3]);
    assert_eq!(v.head_dim(), 16);
    assert_eq!(v.patch_dim(), 1176);
    assert_eq!(v.merge_unit(), 4);
    assert_eq!(v.window_merged_side(), 4);
    assert!(v.is_full_attention(1) && !v.is_full_attention(0));
    assert_eq!(v.tokens_per_second, 2);
    let k = &c.tokens;
    assert_eq!(k.bos_token_id, Some(1010));
    assert_eq!(k.eos_token_ids, vec![1012]);
    assert_eq!(k.image_token_id, 1022);
    assert_eq!(k.video_token_id, 1023);
    assert_eq!(k.vision_start_token_id, 1019);
    assert_eq!(k.vision_end_token_id, 1020);
    assert_eq!(k.vision_token_id, Some(1021));
}

/// The layout transformers 4.53+ writes: decoder keys (and `rope_scaling`) in `text_config`.
#[test]
fn parses_the_nested_text_config_layout() {
    let flat = Qwen25VlConfig::from_json_str(&fixture_json()).unwrap();
    let nested = edit(&fixture_json(), |v| {
        let top = v.as_object_mut().unwrap();
        let mut text = serde_json::Map::new();
        for key in [
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "rms_norm_eps",
            "rope_theta",
            "rope_scaling",
            "max_position_embeddings",
            "tie_word_embeddings",
            "hidden_act",
            "bos_token_id",
            "eos_token_id",
        ] {
            text.insert(key.to_owned(), top.remove(key).unwrap());
        }
        text.insert("model_type".into(), "qwen2_5_vl_text".into());
        top.insert("text_config".into(), text.into());
    });
    let c = Qwen25VlConfig::from_json_str(&nested).unwrap();
    assert_eq!(c, flat);
}

#[test]
fn top_level_wins_over_text_config_and_eos_may_be_a_list() {
    let json = edit(&fixture_json(), |v| {
        v["text_config"] = serde_json::json!({"hidden_size": 999, "vocab_size": 5});
        v["eos_token_id"] = serde_json::json!([1012, 1010]);
    });
    let c = Qwen25VlConfig::from_json_str(&json).unwrap();
    assert_eq!(c.text.hidden_size, 64);
    assert_eq!(c.text.vocab_size, 1024);
    assert_eq!(c.tokens.eos_token_ids, vec![1012, 1010]);
}

#[test]
fn mrope_type_is_ignored_and_in_chans_is_accepted() {
    let json = edit(&fixture_json(), |v| {
        v["rope_scaling"] = serde_json::json!({"type": "mrope", "mrope_section": [2, 3, 3]});
        let vc = v["vision_config"].as_object_mut().unwrap();
        vc.remove("in_channels");
        vc.insert("in_chans".into(), 3.into());
    });
    let c = Qwen25VlConfig::from_json_str(&json).unwrap();
    assert_eq!(c.text.mrope_section, vec![2, 3, 3]);
    assert_eq!(c.vision.as_ref().map(|v| v.in_channels), Some(3));
}

#[test]
fn typed_validation_errors() {
    let bad = |f: &dyn Fn(&mut serde_json::Value)| {
        Qwen25VlConfig::from_json_str(&edit(&fixture_json(), f)).unwrap_err()
    };
    let e = bad(&|v| v["rope_scaling"]["mrope_section"] = serde_json::json!([2, 3, 4]));
    assert!(
        matches!(
            &e,
            ConfigError::MropeSection {
                sum: 9,
                half_head_dim: 8,
                ..
            }
        ),
        "{e}"
    );
    let e = bad(&|v| v["rope_scaling"]["mrope_section"] = serde_json::json!([4, 4]));
    assert!(
        matches!(
            &e,
            ConfigError::Invalid {
                field: "rope_scaling.mrope_section",
                ..
            }
        ),
        "{e}"
    );
    let e = bad(&|v| {
        v.as_object_mut().unwrap().remove("rope_scaling");
    });
    assert!(
        matches!(&e, ConfigError::Missing("rope_scaling.mrope_section")),
        "{e}"
    );
    // hidden 32 / 4 heads = head_dim 8: divisible by 4 -> fine; 32 / 8 heads = 4 fine; 24 / 4 = 6 not.
    let e = bad(&|v| {
        v["vision_config"]["hidden_size"] = 24.into();
        v["vision_config"]["num_heads"] = 4.into();
    });
    assert!(
        matches!(&e, ConfigError::VisionHeadDim { head_dim: 6, .. }),
        "{e}"
    );
    let e = bad(&|v| v["vision_config"]["fullatt_block_indexes"] = serde_json::json!([1, 4]));
    assert!(
        matches!(&e, ConfigError::FullAttBlocks { depth: 4, .. }),
        "{e}"
    );
    let e = bad(&|v| v["num_key_value_heads"] = 3.into());
    assert!(
        matches!(
            &e,
            ConfigError::Invalid {
                field: "num_key_value_heads",
                ..
            }
        ),
        "{e}"
    );
    let e = bad(&|v| v["vision_config"]["out_hidden_size"] = 32.into());
    assert!(
        matches!(
            &e,
            ConfigError::OutHidden {
                vision: 32,
                text: 64
            }
        ),
        "{e}"
    );
    let e = bad(&|v| v["image_token_id"] = 5000.into());
    assert!(
        matches!(
            &e,
            ConfigError::Invalid {
                field: "image_token_id",
                ..
            }
        ),
        "{e}"
    );
    let e = bad(&|v| {
        v.as_object_mut().unwrap().remove("hidden_size");
    });
    assert!(matches!(&e, ConfigError::Missing("hidden_size")), "{e}");
    let e = bad(&|v| {
        v.as_object_mut().unwrap().remove("vision_config");
    });
    assert!(matches!(&e, ConfigError::Missing("vision_config")), "{e}");
    let e = bad(&|v| v["vision_config"]["window_size"] = 20.into());
    assert!(
        matches!(
            &e,
            ConfigError::Invalid {
                field: "vision_config.window_size",
                ..
            }
        ),
        "{e}"
    );
    assert!(matches!(
        Qwen25VlConfig::from_json_str("{not json").unwrap_err(),
        ConfigError::Json(_)
    ));
    assert!(matches!(
        Qwen25VlConfig::from_file("/nonexistent/config.json").unwrap_err(),
        ConfigError::Io { .. }
    ));
}
