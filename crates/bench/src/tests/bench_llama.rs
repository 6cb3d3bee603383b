//! The llama.cpp anchor of `bench vlm` on the tiny Qwen2.5-VL of `tests/fixtures/qwen25vl_tiny`:
//! the GGUF we write, read back with candle's reader (keys and their exact types, tensor names,
//! shapes, layout, values), our bytes-per-token against the model's own weight count, and — when
//! node-llama-cpp is installed (`POINTACT_LLAMA_PEER` = its folder, made by
//! `benches/llama_peer/setup.sh`) — llama.cpp's next-token distribution on the F32 GGUF against
//! our model's on the same token ids.
//!
//! The tiny model's widths (64, 128) are not multiples of 256: its Q4K GGUF is all F32, as our
//! Q4K load of it is dense; Q8_0 (blocks of 32) quantizes every linear and the head.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use crate::vlm::{bandwidth, gguf, llama};
use candle_core::quantized::gguf_file::{Content, Value, VersionedMagic};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{DType, Device, Tensor};
use indicatif::ProgressBar;

use pointact_vlm::{
    weight_files, LogitsAt, Quant, Qwen25Vl, Qwen25VlConfig, SafetensorsReader, TextModel,
};

fn fixture_dir() -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("tests/fixtures/qwen25vl_tiny")
}

fn config() -> Qwen25VlConfig {
    Qwen25VlConfig::from_file(fixture_dir().join("config.json")).unwrap()
}

fn reader() -> SafetensorsReader {
    SafetensorsReader::open(&weight_files(&fixture_dir()).unwrap().0).unwrap()
}

/// Writes the fixture's GGUF in `quant` into a fresh temporary folder (`tag`: one per test,
/// they run in parallel).
fn write_gguf(quant: Quant, tag: &str) -> (super::temp::TempDir, PathBuf) {
    let tmp = super::temp::TempDir::new(&format!("gguf-{tag}"));
    let path = tmp.join(format!("tiny-{quant}.gguf"));
    gguf::write(&fixture_dir(), quant, &path, &ProgressBar::hidden()).unwrap();
    (tmp, path)
}

fn read_gguf(path: &Path) -> Content {
    Content::read(&mut std::fs::File::open(path).unwrap()).unwrap()
}

/// Every key llama.cpp needs, with its exact type and value.
fn check_metadata(c: &Content) {
    let m = &c.metadata;
    let u32_of = |k: &str| match m.get(k) {
        Some(Value::U32(v)) => *v,
        other => panic!("{k}: want U32, got {other:?}"),
    };
    let f32_of = |k: &str| match m.get(k) {
        Some(Value::F32(v)) => *v,
        other => panic!("{k}: want F32, got {other:?}"),
    };
    let str_of = |k: &str| match m.get(k) {
        Some(Value::String(v)) => v.clone(),
        other => panic!("{k}: want String, got {other:?}"),
    };
    assert_eq!(str_of("general.architecture"), "qwen2");
    assert_eq!(u32_of("qwen2.context_length"), 4096);
    assert_eq!(u32_of("qwen2.embedding_length"), 64);
    assert_eq!(u32_of("qwen2.block_count"), 2);
    assert_eq!(u32_of("qwen2.feed_forward_length"), 128);
    assert_eq!(u32_of("qwen2.attention.head_count"), 4);
    assert_eq!(u32_of("qwen2.attention.head_count_kv"), 2);
    assert_eq!(u32_of("qwen2.rope.dimension_count"), 16);
    assert_eq!(f32_of("qwen2.attention.layer_norm_rms_epsilon"), 1e-6);
    assert_eq!(f32_of("qwen2.rope.freq_base"), 1e6);
    assert_eq!(str_of("tokenizer.ggml.model"), "gpt2");
    assert_eq!(str_of("tokenizer.ggml.pre"), "qwen2");
    assert_eq!(u32_of("tokenizer.ggml.bos_token_id"), 1010);
    assert_eq!(u32_of("tokenizer.ggml.eos_token_id"), 1012);
    let array = |k: &str| match m.get(k) {
        Some(Value::Array(v)) => v.clone(),
        other => panic!("{k}: want Array, got {other:?}"),
    };
    let tokens: Vec<String> = array("tokenizer.ggml.tokens")
        .iter()
        .map(|v| match v {
            Value::String(s) => s.clone(),
            other => panic!("token {other:?} is not a String"),
        })
        .collect();
    assert_eq!(tokens.len(), 1024, "one token per embedding row");
    assert_eq!(tokens.iter().collect::<HashSet<_>>().len(), 1024, "unique");
    assert_eq!(tokens[1012], "<|im_end|>");
    let types = array("tokenizer.ggml.token_type");
    assert_eq!(types.len(), 1024);
    assert!(types.iter().all(|v| matches!(v, Value::I32(1 | 3 | 5))));
    let merges = array("tokenizer.ggml.merges");
    assert!(!merges.is_empty());
    for merge in &merges {
        let Value::String(s) = merge else {
            panic!("merge {merge:?} is not a String")
        };
        // Both halves and their concatenation are tokens (else llama.cpp's BPE has no rank).
        let (a, b) = s.split_once(' ').unwrap();
        for t in [a.to_owned(), b.to_owned(), format!("{a}{b}")] {
            assert!(tokens.contains(&t), "merge {s}: {t} is no token");
        }
    }
}

/// llama.cpp's layout: tensor `k`'s offset is the sum of the 32-padded sizes before it.
fn check_layout(c: &Content) {
    let mut infos: Vec<_> = c.tensor_infos.values().collect();
    infos.sort_by_key(|i| i.offset);
    let mut next = 0u64;
    for i in infos {
        assert_eq!(i.offset, next);
        let size =
            (i.shape.elem_count() / i.ggml_dtype.block_size() * i.ggml_dtype.type_size()) as u64;
        next += size.div_ceil(32) * 32;
    }
    assert_eq!(c.magic, VersionedMagic::GgufV2);
}

fn values(t: &Tensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_vec1::<f32>().unwrap()
}

/// Writes the fixture in `quant`, reads it back and compares every tensor with the checkpoint's.
fn round_trip(quant: Quant, want_types: &HashMap<&str, GgmlDType>) {
    let (_tmp, path) = write_gguf(quant, &format!("round-trip-{quant}"));
    let c = read_gguf(&path);
    check_metadata(&c);
    check_layout(&c);
    let cfg = config();
    let planned = gguf::plan(&cfg.text, quant);
    let names: HashSet<&str> = c.tensor_infos.keys().map(String::as_str).collect();
    let want_names: HashSet<&str> = planned.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, want_names);
    // token_embd, 12 per layer (2 norms, q/k/v with biases, o, gate, up, down), output_norm,
    // and a quantized head when the format quantizes it.
    let head = usize::from(names.contains("output.weight"));
    assert_eq!(names.len(), 1 + 2 * 12 + 1 + head);
    let r = reader();
    let mut f = std::fs::File::open(&path).unwrap();
    for p in &planned {
        let info = &c.tensor_infos[&p.name];
        assert_eq!(info.shape.dims(), p.shape.as_slice(), "{} shape", p.name);
        let ty = want_types
            .iter()
            .find(|(suffix, _)| p.name.ends_with(*suffix))
            .map(|(_, t)| *t)
            .unwrap_or(GgmlDType::F32);
        assert_eq!(info.ggml_dtype, ty, "{} type", p.name);
        let src = r.read(&p.source, DType::F32, &Device::Cpu).unwrap();
        let got = c.tensor(&mut f, &p.name, &Device::Cpu).unwrap();
        let deq = values(&got.dequantize(&Device::Cpu).unwrap());
        let src_v = values(&src);
        if ty == GgmlDType::F32 {
            assert_eq!(deq, src_v, "{} differs from the checkpoint", p.name);
            continue;
        }
        // Bit-identical to candle's own quantizer (= our loader's blocks) ...
        let own = QTensor::quantize(&src, ty).unwrap();
        assert_eq!(
            got.data().unwrap(),
            own.data().unwrap(),
            "{} blocks",
            p.name
        );
        // ... and within one quantization step (amax / 127 for Q8_0) of the source, per block.
        for (b, (d, s)) in deq.chunks(32).zip(src_v.chunks(32)).enumerate() {
            let amax = s.iter().fold(0f32, |m, x| m.max(x.abs()));
            for (x, y) in d.iter().zip(s) {
                assert!(
                    (x - y).abs() <= amax / 127.0 + 1e-7,
                    "{} block {b}: {x} vs {y}",
                    p.name
                );
            }
        }
    }
}

#[test]
fn f32_gguf_holds_the_checkpoint_exactly() {
    round_trip(Quant::F32, &HashMap::new());
    // Tied and dense: llama.cpp ties `output` to `token_embd` as our model shares it.
    assert!(!gguf::plan(&config().text, Quant::F32)
        .iter()
        .any(|p| p.name == "output.weight"));
}

#[test]
fn q8_0_gguf_quantizes_what_we_quantize() {
    let linear = [
        "attn_q.weight",
        "attn_k.weight",
        "attn_v.weight",
        "attn_output.weight",
        "ffn_gate.weight",
        "ffn_up.weight",
        "ffn_down.weight",
        "output.weight",
    ];
    let types: HashMap<&str, GgmlDType> = linear.iter().map(|&n| (n, GgmlDType::Q8_0)).collect();
    round_trip(Quant::Q8_0, &types);
}

#[test]
fn q4k_of_the_tiny_model_stays_dense_like_ours() {
    // 64 and 128 wide inputs do not fill a 256-element super-block: dense, as our loader does.
    round_trip(Quant::Q4K, &HashMap::new());
}

#[test]
fn bytes_per_token_are_our_decoders_weights() {
    let cfg = config();
    // The table as a quantized decoder holds it: as the fixture stores it, bf16.
    let embedding = (cfg.text.vocab_size * cfg.text.hidden_size * 2) as u64;
    // Our loader keeps the fixture's dense weights bf16 where our kernels take them.
    let dense_bf16 = pointact_vlm::linear::keeps_bf16(&Device::Cpu);
    // One row of the table: bf16 then, else as the GGUF (llama.cpp's f32 `token_embd`) has it.
    let row = (cfg.text.hidden_size * if dense_bf16 { 2 } else { 4 }) as u64;
    for quant in [Quant::F32, Quant::Q8_0] {
        let vb = reader().into_var_builder(DType::F32, &Device::Cpu);
        let model = TextModel::new(&cfg.text, quant, vb).unwrap();
        let held = model.weight_bytes() as u64;
        // f32: the tied table is the head, read whole; q8_0: the head is its own quantized copy
        // and only one row of the table is gathered.
        let want = match quant {
            Quant::F32 => held,
            _ => held - embedding + row,
        };
        assert_eq!(
            bandwidth::bytes_per_token(&cfg.text, quant, dense_bf16),
            want,
            "{quant}"
        );
    }
}

#[test]
fn setup_without_node_says_so_and_exits_3() {
    // `bench vlm` turns exit 3 into a skipped column with this message as the reason.
    let bin = super::temp::TempDir::new("no-node-bin");
    std::os::unix::fs::symlink("/usr/bin/dirname", bin.join("dirname")).unwrap();
    let script = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .join("benches/llama_peer/setup.sh");
    let out = std::process::Command::new("/bin/bash")
        .arg(script)
        .env("PATH", bin.path())
        .env(llama::PEER_ENV, bin.join("peer"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("node not found: install Node.js >= 20"),
        "{err}"
    );
    assert!(!bin.join("peer").exists(), "nothing installed");
}

/// The installed peer, or `None` after saying why the test is skipped.
fn peer() -> Option<PathBuf> {
    let Some(dir) = std::env::var_os(llama::PEER_ENV).map(PathBuf::from) else {
        println!(
            "skipped: {} is not set (bash benches/llama_peer/setup.sh installs the peer)",
            llama::PEER_ENV
        );
        return None;
    };
    if !dir
        .join("node_modules/node-llama-cpp/package.json")
        .is_file()
    {
        println!("skipped: no node-llama-cpp in {}", dir.display());
        return None;
    }
    Some(dir)
}

/// A text-only prompt of ordinary ids (the fixture's specials start at 1010).
const PROMPT: [u32; 12] = [15, 300, 7, 999, 42, 512, 64, 81, 700, 3, 250, 128];

/// Our next-token probabilities after `PROMPT` (f32, exact rotary frequencies as llama.cpp).
fn our_probs() -> Vec<f64> {
    let cfg = config();
    let vb = reader().into_var_builder(DType::F32, &Device::Cpu);
    let mut model = Qwen25Vl::new(&cfg, Quant::F32, vb).unwrap();
    let prepared = model.prepare(&PROMPT, &[]).unwrap();
    let out = model.prefill(&prepared, 1, LogitsAt::Last, false).unwrap();
    let logits: Vec<f64> = values(&out.logits.flatten_all().unwrap())
        .into_iter()
        .map(f64::from)
        .collect();
    let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let exp: Vec<f64> = logits.iter().map(|l| (l - max).exp()).collect();
    let sum: f64 = exp.iter().sum();
    exp.into_iter().map(|e| e / sum).collect()
}

#[test]
fn llama_cpp_predicts_what_we_predict() {
    let Some(peer) = peer() else { return };
    let (_tmp, path) = write_gguf(Quant::F32, "parity");
    let theirs = llama::next_token_probs(&peer, &path, &PROMPT, 1, 10).expect("llama.cpp peer");
    let ours = our_probs();
    assert_eq!(theirs.len(), 10);
    let mut ranked: Vec<usize> = (0..ours.len()).collect();
    ranked.sort_by(|&a, &b| ours[b].total_cmp(&ours[a]));
    assert_eq!(theirs[0].0 as usize, ranked[0], "most likely token");
    // Relative 1e-4: both sides f32, llama.cpp without flash attention (whose f16 rounding of K
    // and V alone moves these probabilities by ~1e-3 relative). Seen: ~1e-6 relative.
    let rel = 1e-4;
    let mut worst = 0f64;
    for &(id, p) in &theirs {
        let o = ours[id as usize];
        println!("token {id:4}: llama.cpp {p:.8}, ours {o:.8}");
        assert!(
            (p - o).abs() <= rel * o,
            "token {id}: llama.cpp {p}, ours {o}"
        );
        worst = worst.max((p - o).abs() / o);
    }
    println!("largest relative difference {worst:.1e}");
    // The tolerance must be able to tell tokens apart, else the check proves nothing.
    let spread = theirs[0].1 - theirs[9].1;
    assert!(
        spread > 100.0 * rel * theirs[0].1,
        "top-10 spread {spread} too flat"
    );
}

#[test]
fn llama_cpp_bench_makes_exactly_the_tokens_asked() {
    let Some(peer) = peer() else { return };
    let (_tmp, path) = write_gguf(Quant::Q8_0, "bench");
    let prompt = llama::clamp_ids(&[5, 1500, 9, 2047, 33, 100, 101, 102, 103, 104], 1024);
    assert_eq!(prompt[1], 1500 - 1024);
    let m = llama::run(&peer, &path, &prompt, 6, 1).expect("llama.cpp peer");
    assert_eq!(m.prompt_tokens, prompt.len());
    assert_eq!(m.tokens.len(), 6);
    assert_eq!(m.decode_steps, 5);
    assert!(m.prompt_tok_s > 0.0 && m.decode_tok_s > 0.0, "{m:?}");
    assert!(m.version.contains("3.21.1"), "{}", m.version);
}
