//! Checkpoints that name their tensors in the transformers ≥ 4.52 or the mlx-vlm layout load into
//! the same model as the fixture's own (transformers 4.51.3) names: a renamed, sharded copy of the
//! tiny fixture (`model.safetensors.index.json` + 2 shards, written here with the `safetensors`
//! crate) gives bit-identical logits, and the whole `qwen` loader takes it. Unknown and mixed
//! names are refused with errors that list the expected prefixes.

mod common;

use common::temp_dir as tmpdir;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use candle_core::{DType, Device};
use pointact::pointing::qwen::{QwenOptions, QwenPointer};
use pointact::pointing::Ability;
use pointact::vlm::NameScheme;
use pointact::vlm::{
    GenerationConfig, LogitsAt, ModelFiles, Quant, Qwen25Vl, Qwen25VlConfig, SafetensorsReader,
    WeightsError,
};
use safetensors::tensor::TensorView;
use safetensors::SafeTensors;

mod vlm_fixture;
use vlm_fixture::*;

/// transformers ≥ 4.52 (`_checkpoint_conversion_mapping` of `Qwen2_5_VLForConditionalGeneration`).
fn nested_name(name: &str) -> String {
    if let Some(rest) = name.strip_prefix("visual.") {
        format!("model.visual.{rest}")
    } else if let Some(rest) = name.strip_prefix("model.") {
        format!("model.language_model.{rest}")
    } else {
        name.to_owned()
    }
}

/// mlx-vlm (`Qwen2_5_VL.sanitize`'s `transform_key`).
fn mlx_name(name: &str) -> String {
    if let Some(rest) = name.strip_prefix("visual.") {
        format!("vision_tower.{rest}")
    } else if let Some(rest) = name.strip_prefix("model.") {
        format!("language_model.model.{rest}")
    } else if let Some(rest) = name.strip_prefix("lm_head.") {
        format!("language_model.lm_head.{rest}")
    } else {
        name.to_owned()
    }
}

/// One stored tensor: dtype, shape, bytes.
type Stored = (safetensors::Dtype, Vec<usize>, Vec<u8>);

/// The fixture's tensors as stored (bf16), by their own names.
fn fixture_tensors() -> BTreeMap<String, Stored> {
    let bytes = std::fs::read(fixture("model.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    st.iter()
        .map(|(name, v)| {
            (
                name.to_owned(),
                (v.dtype(), v.shape().to_vec(), v.data().to_vec()),
            )
        })
        .collect()
}

/// `[o, i, t, h, w]` → `[o, t, h, w, i]` (MLX's channels-last Conv3d), on raw elements of
/// `elem` bytes.
fn to_channels_last((dtype, shape, data): &Stored) -> Stored {
    let &[o, i, t, h, w] = shape.as_slice() else {
        panic!("a Conv3d weight has 5 dims, not {shape:?}")
    };
    let elem = dtype.bitsize() / 8;
    let mut out = Vec::with_capacity(data.len());
    for a in 0..o {
        for b in 0..t {
            for c in 0..h {
                for d in 0..w {
                    for e in 0..i {
                        let src = (((a * i + e) * t + b) * h + c) * w + d;
                        out.extend_from_slice(&data[src * elem..(src + 1) * elem]);
                    }
                }
            }
        }
    }
    (*dtype, vec![o, t, h, w, i], out)
}

/// A model folder with `tensors` in two shards (vision and text tensors interleaved across
/// both, by sorted name), `model.safetensors.index.json`, and the fixture's config and tokenizer
/// files.
fn write_sharded(dir: &Path, tensors: &BTreeMap<String, Stored>) {
    let shards = [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ];
    let mut weight_map = serde_json::Map::new();
    let mut parts: [Vec<(&str, TensorView)>; 2] = [Vec::new(), Vec::new()];
    for (i, (name, (dtype, shape, data))) in tensors.iter().enumerate() {
        parts[i % 2].push((name, TensorView::new(*dtype, shape.clone(), data).unwrap()));
        weight_map.insert(name.clone(), shards[i % 2].into());
    }
    for (part, shard) in parts.into_iter().zip(shards) {
        safetensors::serialize_to_file(part, None, &dir.join(shard)).unwrap();
    }
    let total: usize = tensors.values().map(|t| t.2.len()).sum();
    let index = serde_json::json!({
        "metadata": { "total_size": total },
        "weight_map": weight_map,
    });
    std::fs::write(
        dir.join("model.safetensors.index.json"),
        serde_json::to_string_pretty(&index).unwrap(),
    )
    .unwrap();
    for f in [
        "config.json",
        "generation_config.json",
        "preprocessor_config.json",
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ] {
        std::fs::copy(fixture(f), dir.join(f)).unwrap();
    }
}

/// Loads a model folder as `QwenPointer` does (files → reader → model, F32 on the CPU) and
/// returns the layout the reader detected and the last-position logits of the golden prompt.
fn logits_of(dir: &Path, cfg: &Qwen25VlConfig) -> (NameScheme, Vec<f32>) {
    let files = ModelFiles::from_dir(dir).unwrap();
    let reader = SafetensorsReader::open(&files.weights).unwrap();
    let scheme = reader.scheme();
    let mut m = Qwen25Vl::new(
        cfg,
        Quant::F32,
        reader.into_var_builder(DType::F32, &Device::Cpu),
    )
    .unwrap();
    let g = golden();
    let ids: Vec<u32> = i64s(&g, "input_ids").iter().map(|&x| x as u32).collect();
    let img = pointact::vlm::ImageInput {
        pixel_values: golden_pixel_values(&g),
        grid_thw: grid(&g),
    };
    let p = m.prepare(&ids, &[img]).unwrap();
    let logits = m
        .prefill(&p, 0, LogitsAt::Last, false)
        .unwrap()
        .logits
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    (scheme, logits)
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn transformers_452_names_in_shards_give_identical_logits() {
    let cfg = config();
    let dir = tmpdir("nested");
    let renamed: BTreeMap<String, Stored> = fixture_tensors()
        .into_iter()
        .map(|(k, v)| (nested_name(&k), v))
        .collect();
    assert!(renamed.contains_key("model.language_model.layers.0.mlp.up_proj.weight"));
    assert!(renamed.contains_key("model.visual.patch_embed.proj.weight"));
    write_sharded(&dir, &renamed);

    let files = ModelFiles::from_dir(&dir).unwrap();
    assert_eq!(files.weights.len(), 2);
    assert!(files.weights_index.is_some());
    let reader = SafetensorsReader::open(&files.weights).unwrap();
    assert_eq!(reader.names().len(), 80);
    assert_eq!(
        reader.stored_name("model.embed_tokens.weight"),
        Some("model.language_model.embed_tokens.weight")
    );
    assert_eq!(
        reader.stored_name("visual.merger.mlp.0.weight"),
        Some("model.visual.merger.mlp.0.weight")
    );

    let (scheme, ours) = logits_of(&dir, &cfg);
    assert_eq!(scheme, NameScheme::TransformersNested);
    let (orig_scheme, want) = logits_of(&fixture(""), &cfg);
    assert_eq!(orig_scheme, NameScheme::Transformers);
    assert_eq!(ours.len(), cfg.text.vocab_size);
    assert!(bits(&ours) == bits(&want), "renamed logits differ");

    // The whole `qwen` loader (config, tokenizer, processor, reader) takes the folder and gives
    // transformers' greedy tokens for the golden prompt, as with the fixture's own names.
    let mut p = QwenPointer::from_files(
        files,
        QwenOptions {
            generation: GenerationConfig {
                max_new_tokens: 8,
                ..GenerationConfig::default()
            },
            progress: false,
            ..QwenOptions::default()
        },
    )
    .unwrap();
    let img = image::open(fixture("image.png")).unwrap().to_rgb8();
    let (reply, _) = p.ask(&img, Ability::Reg, "the red block").unwrap();
    let golden_tokens: Vec<u32> = i64s(&golden(), "generated_ids_rp")
        .iter()
        .map(|&x| x as u32)
        .collect();
    assert_eq!(reply.tokens, golden_tokens);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// mlx-vlm names, the patch embedding channels-last, and an untied head
/// (`language_model.lm_head.weight`, a copy of the embeddings, so the logits stay the same).
#[test]
fn mlx_names_in_shards_give_identical_logits() {
    let mut cfg = config();
    let dir = tmpdir("mlx");
    let mut tensors = fixture_tensors();
    tensors.insert(
        "lm_head.weight".into(),
        tensors["model.embed_tokens.weight"].clone(),
    );
    let renamed: BTreeMap<String, Stored> = tensors
        .into_iter()
        .map(|(k, v)| {
            let v = if k == "visual.patch_embed.proj.weight" {
                to_channels_last(&v)
            } else {
                v
            };
            (mlx_name(&k), v)
        })
        .collect();
    assert_eq!(
        renamed["vision_tower.patch_embed.proj.weight"].1,
        [32, 2, 14, 14, 3]
    );
    assert!(renamed.contains_key("language_model.lm_head.weight"));
    write_sharded(&dir, &renamed);

    let (_, want) = logits_of(&fixture(""), &cfg);
    cfg.text.tie_word_embeddings = false;
    let (scheme, ours) = logits_of(&dir, &cfg);
    assert_eq!(scheme, NameScheme::Mlx);
    assert!(bits(&ours) == bits(&want), "renamed logits differ");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Writes `tensors` (stored names → fixture names) as one file in `dir` and opens it.
fn open_renamed(
    dir: &Path,
    file: &str,
    names: &[(&str, &str)],
) -> Result<SafetensorsReader, WeightsError> {
    let all = fixture_tensors();
    let views: Vec<(&str, TensorView)> = names
        .iter()
        .map(|&(to, from)| {
            let (dtype, shape, data) = &all[from];
            (to, TensorView::new(*dtype, shape.clone(), data).unwrap())
        })
        .collect();
    let path = dir.join(file);
    safetensors::serialize_to_file(views, None, &path).unwrap();
    SafetensorsReader::open(&[path])
}

#[test]
fn unknown_and_mixed_names_are_refused_with_the_expected_prefixes() {
    let dir = tmpdir("refused");
    let expected = [
        "`model.*`",
        "`visual.*`",
        "`lm_head.*`",
        "`model.language_model.*`",
        "`model.visual.*`",
        "`language_model.model.*`",
        "`language_model.lm_head.*`",
        "`vision_tower.*`",
    ];

    let err = open_renamed(
        &dir,
        "unknown.safetensors",
        &[
            ("transformer.h.0.attn.weight", "model.norm.weight"),
            ("encoder.weight", "visual.merger.ln_q.weight"),
        ],
    )
    .unwrap_err();
    assert!(matches!(err, WeightsError::UnknownNames { .. }), "{err:?}");
    let msg = err.to_string();
    for p in expected {
        assert!(msg.contains(p), "{p} not in: {msg}");
    }
    assert!(
        msg.contains("encoder.weight") && msg.contains("unknown.safetensors"),
        "{msg}"
    );

    let err = open_renamed(
        &dir,
        "mixed.safetensors",
        &[
            ("model.norm.weight", "model.norm.weight"),
            (
                "model.visual.merger.ln_q.weight",
                "visual.merger.ln_q.weight",
            ),
        ],
    )
    .unwrap_err();
    match &err {
        WeightsError::MixedNames {
            first,
            first_scheme,
            second,
            second_scheme,
            ..
        } => {
            assert_eq!(
                (first.as_str(), *first_scheme),
                ("model.norm.weight", NameScheme::Transformers)
            );
            assert_eq!(
                (second.as_str(), *second_scheme),
                (
                    "model.visual.merger.ln_q.weight",
                    NameScheme::TransformersNested
                )
            );
        }
        other => panic!("expected mixed names, got {other:?}"),
    }
    let msg = err.to_string();
    for p in expected {
        assert!(msg.contains(p), "{p} not in: {msg}");
    }

    // A bare `lm_head.*` is a transformers name: next to mlx-vlm names it is a mix too.
    let err = open_renamed(
        &dir,
        "mixed_head.safetensors",
        &[
            ("language_model.model.norm.weight", "model.norm.weight"),
            ("lm_head.weight", "model.embed_tokens.weight"),
        ],
    )
    .unwrap_err();
    assert!(matches!(err, WeightsError::MixedNames { .. }), "{err:?}");

    // MLX-quantized checkpoints are named as such.
    let err = open_renamed(
        &dir,
        "mlx_q4.safetensors",
        &[
            ("language_model.model.norm.weight", "model.norm.weight"),
            (
                "language_model.model.layers.0.mlp.up_proj.scales",
                "model.norm.weight",
            ),
        ],
    )
    .unwrap_err();
    assert!(matches!(err, WeightsError::MlxQuantized { .. }), "{err:?}");
    assert!(err.to_string().contains("up_proj.scales"), "{err}");

    // A tensor missing from a renamed checkpoint is named both ways.
    let reader = open_renamed(
        &dir,
        "partial.safetensors",
        &[("model.language_model.norm.weight", "model.norm.weight")],
    )
    .unwrap();
    assert_eq!(reader.scheme(), NameScheme::TransformersNested);
    let err = Qwen25Vl::new(
        &config(),
        Quant::F32,
        reader.into_var_builder(DType::F32, &Device::Cpu),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("missing"), "{err}");
    assert!(
        err.contains("`visual.patch_embed.proj.weight`")
            && err.contains("`model.visual.patch_embed.proj.weight`"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn names_map_both_ways() {
    let canonical = [
        "model.layers.3.self_attn.q_proj.weight",
        "model.embed_tokens.weight",
        "model.norm.weight",
        "visual.blocks.0.attn.qkv.bias",
        "lm_head.weight",
    ];
    let want: HashMap<NameScheme, [&str; 5]> = HashMap::from([
        (NameScheme::Transformers, canonical),
        (
            NameScheme::TransformersNested,
            [
                "model.language_model.layers.3.self_attn.q_proj.weight",
                "model.language_model.embed_tokens.weight",
                "model.language_model.norm.weight",
                "model.visual.blocks.0.attn.qkv.bias",
                "lm_head.weight",
            ],
        ),
        (
            NameScheme::Mlx,
            [
                "language_model.model.layers.3.self_attn.q_proj.weight",
                "language_model.model.embed_tokens.weight",
                "language_model.model.norm.weight",
                "vision_tower.blocks.0.attn.qkv.bias",
                "language_model.lm_head.weight",
            ],
        ),
    ]);
    for scheme in NameScheme::ALL {
        for (c, s) in canonical.iter().zip(want[&scheme]) {
            assert_eq!(scheme.to_stored(c).as_deref(), Some(s), "{scheme}");
            assert_eq!(scheme.to_canonical(s).as_deref(), Some(*c), "{scheme}");
        }
    }
    // The test's own renamings are the ones the reader undoes.
    for c in canonical {
        assert_eq!(
            NameScheme::TransformersNested.to_stored(c).unwrap(),
            nested_name(c)
        );
        assert_eq!(NameScheme::Mlx.to_stored(c).unwrap(), mlx_name(c));
    }
}
