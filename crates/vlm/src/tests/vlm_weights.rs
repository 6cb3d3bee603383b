//! The tensor-by-tensor safetensors reader: same model as candle's memory map, shards, and
//! errors that name the tensor or file at fault.

use super::temp::temp_dir as tmpdir;
use std::collections::HashMap;

use crate::{LogitsAt, Quant, Qwen25Vl, SafetensorsReader, WeightsError};
use candle_core::{DType, Device, Tensor};

use super::vlm_fixture::*;

/// The model from `reader` (F32 on the CPU).
fn load(cfg: &crate::Qwen25VlConfig, reader: SafetensorsReader) -> candle_core::Result<Qwen25Vl> {
    Qwen25Vl::new(
        cfg,
        Quant::F32,
        reader.into_var_builder(DType::F32, &Device::Cpu),
    )
}

fn fixture_tensors() -> HashMap<String, Tensor> {
    candle_core::safetensors::load(fixture("model.safetensors"), &Device::Cpu).unwrap()
}

fn last_logits(m: &mut Qwen25Vl) -> Vec<f32> {
    let g = golden();
    let ids: Vec<u32> = i64s(&g, "input_ids").iter().map(|&x| x as u32).collect();
    let img = crate::ImageInput {
        pixel_values: golden_pixel_values(&g),
        grid_thw: grid(&g),
    };
    let p = m.prepare(&ids, &[img]).unwrap();
    m.prefill(&p, 0, LogitsAt::Last, false)
        .unwrap()
        .logits
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap()
}

#[test]
fn reader_builds_the_same_model_as_the_memory_map() {
    let cfg = config();
    let reader = SafetensorsReader::open(&[fixture("model.safetensors")]).unwrap();
    assert_eq!(reader.names().len(), 80);
    assert_eq!(reader.total_bytes(), 238_368 * 2); // bf16
    let mut ours = load(&cfg, reader).unwrap();
    let mut mmap = Qwen25Vl::new(&cfg, Quant::F32, weights()).unwrap();
    assert_eq!(last_logits(&mut ours), last_logits(&mut mmap));
}

#[test]
fn shards_load_like_one_file_and_duplicates_are_refused() {
    let cfg = config();
    let dir = tmpdir("shards");
    let all = fixture_tensors();
    let (vis, txt): (HashMap<_, _>, HashMap<_, _>) =
        all.into_iter().partition(|(k, _)| k.starts_with("visual."));
    let a = dir.join("model-00001-of-00002.safetensors");
    let b = dir.join("model-00002-of-00002.safetensors");
    candle_core::safetensors::save(&vis, &a).unwrap();
    candle_core::safetensors::save(&txt, &b).unwrap();
    let reader = SafetensorsReader::open(&[a.clone(), b.clone()]).unwrap();
    let mut sharded = load(&cfg, reader).unwrap();
    let mut mmap = Qwen25Vl::new(&cfg, Quant::F32, weights()).unwrap();
    assert_eq!(last_logits(&mut sharded), last_logits(&mut mmap));

    match SafetensorsReader::open(&[a.clone(), a.clone()]) {
        Err(WeightsError::Duplicate { name, .. }) => assert!(name.starts_with("visual.")),
        other => panic!("expected a duplicate error, got {other:?}"),
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn missing_tensor_and_wrong_shape_are_named() {
    let cfg = config();
    let dir = tmpdir("missing");
    let mut all = fixture_tensors();
    all.remove("model.layers.1.mlp.up_proj.weight");
    let path = dir.join("model.safetensors");
    candle_core::safetensors::save(&all, &path).unwrap();
    let reader = SafetensorsReader::open(std::slice::from_ref(&path)).unwrap();
    let err = load(&cfg, reader).unwrap_err().to_string();
    assert!(err.contains("model.layers.1.mlp.up_proj.weight"), "{err}");
    assert!(err.contains("missing"), "{err}");

    let mut wide = cfg.clone();
    wide.text.intermediate_size = 256;
    let reader = SafetensorsReader::open(&[fixture("model.safetensors")]).unwrap();
    let err = load(&wide, reader).unwrap_err().to_string();
    assert!(err.contains("model.layers.0.mlp.gate_proj.weight"), "{err}");
    assert!(
        err.contains("[128, 64]") && err.contains("[256, 64]"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn untied_head_needs_lm_head_weight() {
    let mut cfg = config();
    cfg.text.tie_word_embeddings = false;
    let reader = SafetensorsReader::open(&[fixture("model.safetensors")]).unwrap();
    let err = load(&cfg, reader).unwrap_err().to_string();
    assert!(err.contains("lm_head.weight"), "{err}");
    // With its own head (here a copy of the embeddings) the untied model gives the same logits.
    let dir = tmpdir("untied");
    let mut all = fixture_tensors();
    all.insert(
        "lm_head.weight".into(),
        all["model.embed_tokens.weight"].clone(),
    );
    let path = dir.join("model.safetensors");
    candle_core::safetensors::save(&all, &path).unwrap();
    let reader = SafetensorsReader::open(std::slice::from_ref(&path)).unwrap();
    let mut untied = load(&cfg, reader).unwrap();
    let mut tied = Qwen25Vl::new(&config(), Quant::F32, weights()).unwrap();
    assert_eq!(last_logits(&mut untied), last_logits(&mut tied));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn corrupt_files_are_rejected_with_their_path() {
    let dir = tmpdir("corrupt");
    let bytes = std::fs::read(fixture("model.safetensors")).unwrap();
    let cut = dir.join("truncated.safetensors");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    match SafetensorsReader::open(std::slice::from_ref(&cut)) {
        Err(WeightsError::Format { path, reason }) => {
            assert_eq!(path, cut);
            assert!(reason.contains("offsets"), "{reason}");
        }
        other => panic!("expected a format error, got {other:?}"),
    }
    let junk = dir.join("junk.safetensors");
    std::fs::write(&junk, b"hello").unwrap();
    assert!(matches!(
        SafetensorsReader::open(std::slice::from_ref(&junk)),
        Err(WeightsError::Format { .. })
    ));
    let gone = dir.join("absent.safetensors");
    assert!(matches!(
        SafetensorsReader::open(std::slice::from_ref(&gone)),
        Err(WeightsError::Io { .. })
    ));
    assert!(matches!(
        SafetensorsReader::open(&[]),
        Err(WeightsError::Empty)
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Found by `fuzz_readers`: the byte count of a shape and the end offset were computed with
/// wrapping arithmetic, so a shape of 2^63 + 16 BF16 elements "was" 32 bytes and opened, and an
/// offset near `u64::MAX` wrapped back into the file.
#[test]
fn sizes_and_offsets_that_overflow_are_refused() {
    let dir = tmpdir("overflow");
    let data = [0u8; 32];
    let cases = [
        (format!("[{}]", (1u64 << 63) + 16), "[0, 32]".to_string()),
        (
            "[16]".to_string(),
            format!("[{}, {}]", u64::MAX - 31, u64::MAX),
        ),
    ];
    for (shape, offsets) in cases {
        let header = format!(
            r#"{{"visual.merger.ln_q.bias":{{"dtype":"BF16","shape":{shape},"data_offsets":{offsets}}}}}"#
        );
        let path = dir.join("overflow.safetensors");
        let mut file = (header.len() as u64).to_le_bytes().to_vec();
        file.extend(header.as_bytes());
        file.extend(data);
        std::fs::write(&path, file).unwrap();
        match SafetensorsReader::open(std::slice::from_ref(&path)) {
            Err(WeightsError::Format { path: p, reason }) => {
                assert_eq!(p, path);
                assert!(reason.contains("offsets"), "{reason}");
            }
            other => panic!("{shape} {offsets}: expected a format error, got {other:?}"),
        }
    }
    // The same header with honest numbers opens.
    let header =
        r#"{"visual.merger.ln_q.bias":{"dtype":"BF16","shape":[16],"data_offsets":[0,32]}}"#;
    let path = dir.join("honest.safetensors");
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend(header.as_bytes());
    file.extend(data);
    std::fs::write(&path, file).unwrap();
    let reader = SafetensorsReader::open(std::slice::from_ref(&path)).unwrap();
    assert_eq!(
        reader.shape("visual.merger.ln_q.bias"),
        Some(&[16usize][..])
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn weight_bytes_count_every_stored_tensor_once() {
    let cfg = config();
    let dense = Qwen25Vl::new(&cfg, Quant::F32, weights()).unwrap();
    // All 238 368 parameters as f32; the tied lm_head shares the embedding table.
    assert_eq!(dense.weight_bytes(), 238_368 * 4);
    // Q8_0 (34 bytes per block of 32) replaces the 7 linears of both layers and adds a quantized
    // copy of the tied head (the f32 table stays for the lookup).
    let t = &cfg.text;
    let (h, kv, i) = (
        t.hidden_size,
        t.num_key_value_heads * t.head_dim,
        t.intermediate_size,
    );
    let linears = t.num_hidden_layers * (2 * h * h + 2 * kv * h + 3 * i * h);
    let head = t.vocab_size * h;
    let q8 = |n: usize| n / 32 * 34;
    let quantized = Qwen25Vl::new(&cfg, Quant::Q8_0, weights()).unwrap();
    assert_eq!(
        quantized.weight_bytes(),
        238_368 * 4 - linears * 4 + q8(linears) + q8(head)
    );
}
