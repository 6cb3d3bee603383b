//! The checkpoint's text decoder as a GGUF file that llama.cpp loads: the quantized anchor of
//! `pointact bench vlm` ([`super::llama`]) runs on exactly our weights.
//!
//! Architecture `qwen2`, not `qwen2vl`: fed token ids only, all three M-RoPE position axes carry
//! the same value, so Qwen2.5-VL's text decoder *is* Qwen2 (same tensors, NEOX rotary over the
//! whole head, same base); and llama.cpp v0.4.0 (bundled by node-llama-cpp 3.21.1) never reads
//! `qwen2vl.attention.layer_norm_rms_epsilon` (its RMSNorm runs with eps 0), while `qwen2` does.
//! Speed is the same either way.
//!
//! Same ggml type for the same weight as ours ([`pointact_vlm::linear`]), so that the comparison
//! is of kernels, not of formats: every linear of a layer and `lm_head` in the `Quant`'s blocks
//! when its input width is a multiple of the block size (dense F32 otherwise, as ours); norms and
//! biases F32; the embedding table F32, because ours gathers its rows in f32. A tied `lm_head`
//! that ours quantizes is a second, quantized copy in our model, so it is written as its own
//! `output.weight` (llama's Q4_K_M would put a Q6_K tied table instead); a dense tied one is
//! shared, so `output.weight` is left out and llama.cpp ties it to `token_embd` as ours does.
//! Blocks come from candle's `from_float`, the same code our loader uses: bit-identical weights.
//!
//! Tokenizer: llama.cpp requires one, although the benchmark feeds ids. A minimal byte-level BPE
//! (`gpt2`, pre-tokenizer `qwen2`): GPT-2's 256 byte tokens, a few merges and their results,
//! `<|endoftext|>` / `<|im_end|>` as control tokens at the config's bos / eos ids, and unique
//! `[PAD{i}]` fillers up to the embedding table's row count (llama.cpp checks they match).

use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{DType, Device};
use indicatif::ProgressBar;
use serde::Serialize;

use super::error::VlmBenchError;
use pointact_vlm::{weight_files, Quant, Qwen25VlConfig, SafetensorsReader, TextConfig, TokenIds};

/// The llama.cpp architecture written (see the module doc for why not `qwen2vl`).
pub(crate) const ARCH: &str = "qwen2";
/// Names the writer; a cached file with another value is rewritten.
pub(crate) const WRITER: &str = "pointact-bench-vlm-gguf-v1";
const WRITER_KEY: &str = "pointact.writer";
/// Merges of the minimal tokenizer (byte-level symbols, `Ġ` = space).
const MERGES: [(&str, &str); 5] = [("Ġ", "t"), ("Ġ", "a"), ("h", "e"), ("i", "n"), ("r", "e")];
/// llama.cpp token types.
const NORMAL: i32 = 1;
const CONTROL: i32 = 3;
const UNUSED: i32 = 5;

/// One tensor of the file: its GGUF name, the checkpoint tensor it comes from, its shape (row
/// major, `[out, in]` as in the checkpoint) and its type.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    pub name: String,
    pub source: String,
    pub shape: Vec<usize>,
    pub dtype: GgmlDType,
}

impl Planned {
    /// Bytes of the tensor in its type.
    pub(crate) fn bytes(&self) -> u64 {
        let n: usize = self.shape.iter().product();
        (n / self.dtype.block_size() * self.dtype.type_size()) as u64
    }
}

/// Type of a linear weight `[out, in]` in `quant`, as our loader stores it.
fn linear_type(quant: Quant, in_dim: usize) -> GgmlDType {
    match quant.ggml() {
        Some(d) if quant.fits(in_dim) => d,
        _ => GgmlDType::F32,
    }
}

/// Every tensor of the GGUF for `cfg` in `quant`, in file order.
pub fn plan(cfg: &TextConfig, quant: Quant) -> Vec<Planned> {
    let (h, i, v) = (cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size);
    let q = cfg.num_attention_heads * cfg.head_dim;
    let kv = cfg.num_key_value_heads * cfg.head_dim;
    let mut out = Vec::new();
    let mut add = |name: String, source: String, shape: Vec<usize>| {
        let dtype = match shape.as_slice() {
            [_, in_dim] if name != "token_embd.weight" => linear_type(quant, *in_dim),
            _ => GgmlDType::F32,
        };
        out.push(Planned {
            name,
            source,
            shape,
            dtype,
        });
    };
    add(
        "token_embd.weight".into(),
        "model.embed_tokens.weight".into(),
        vec![v, h],
    );
    for l in 0..cfg.num_hidden_layers {
        let (b, m) = (format!("blk.{l}"), format!("model.layers.{l}"));
        add(
            format!("{b}.attn_norm.weight"),
            format!("{m}.input_layernorm.weight"),
            vec![h],
        );
        for (ours, theirs, rows) in [
            ("q_proj", "attn_q", q),
            ("k_proj", "attn_k", kv),
            ("v_proj", "attn_v", kv),
        ] {
            let src = format!("{m}.self_attn.{ours}");
            add(
                format!("{b}.{theirs}.weight"),
                format!("{src}.weight"),
                vec![rows, h],
            );
            add(
                format!("{b}.{theirs}.bias"),
                format!("{src}.bias"),
                vec![rows],
            );
        }
        add(
            format!("{b}.attn_output.weight"),
            format!("{m}.self_attn.o_proj.weight"),
            vec![h, q],
        );
        add(
            format!("{b}.ffn_norm.weight"),
            format!("{m}.post_attention_layernorm.weight"),
            vec![h],
        );
        add(
            format!("{b}.ffn_gate.weight"),
            format!("{m}.mlp.gate_proj.weight"),
            vec![i, h],
        );
        add(
            format!("{b}.ffn_up.weight"),
            format!("{m}.mlp.up_proj.weight"),
            vec![i, h],
        );
        add(
            format!("{b}.ffn_down.weight"),
            format!("{m}.mlp.down_proj.weight"),
            vec![h, i],
        );
    }
    add(
        "output_norm.weight".into(),
        "model.norm.weight".into(),
        vec![h],
    );
    if !cfg.tie_word_embeddings {
        add("output.weight".into(), "lm_head.weight".into(), vec![v, h]);
    } else if linear_type(quant, h) != GgmlDType::F32 {
        add(
            "output.weight".into(),
            "model.embed_tokens.weight".into(),
            vec![v, h],
        );
    }
    out
}

/// GPT-2's byte-to-unicode table: printable bytes stand for themselves, the other 68 for
/// U+0100 onwards in byte order (so every byte is one visible character).
fn byte_symbols() -> Vec<String> {
    let printable = |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
    let mut shifted = 0;
    (0u32..256)
        .map(|b| {
            let c = if printable(b) {
                b
            } else {
                shifted += 1;
                255 + shifted
            };
            char::from_u32(c).map(String::from).unwrap_or_default()
        })
        .collect()
}

/// The minimal vocabulary: `(tokens, token types, bos, eos)`; `n_vocab` rows, all unique.
fn vocab(n_vocab: usize, ids: &TokenIds) -> (Vec<String>, Vec<i32>, Option<u32>, Option<u32>) {
    let mut tokens = byte_symbols();
    tokens.extend(MERGES.iter().map(|(a, b)| format!("{a}{b}")));
    let ordinary = tokens.len();
    let mut types = vec![NORMAL; ordinary];
    for i in ordinary..n_vocab {
        tokens.push(format!("[PAD{i}]"));
        types.push(UNUSED);
    }
    tokens.truncate(n_vocab);
    types.truncate(n_vocab);
    // A control token only where it replaces a filler (never a byte token).
    let mut control = |id: Option<u32>, text: &str| {
        let id = id.filter(|&i| (ordinary..n_vocab).contains(&(i as usize)))?;
        tokens[id as usize] = text.to_owned();
        types[id as usize] = CONTROL;
        Some(id)
    };
    let eos = control(ids.eos_token_ids.first().copied(), "<|im_end|>");
    let bos = control(
        ids.bos_token_id.filter(|&b| Some(b) != eos),
        "<|endoftext|>",
    );
    (tokens, types, bos, eos.or(bos))
}

/// The key-value metadata llama.cpp needs for `cfg` (exact value types matter: it checks them).
pub(crate) fn metadata(cfg: &TextConfig, ids: &TokenIds) -> Vec<(String, Value)> {
    let u32v = |x: usize| Value::U32(x as u32);
    let key = |k: &str| format!("{ARCH}.{k}");
    let (tokens, types, bos, eos) = vocab(cfg.vocab_size, ids);
    let mut kv = vec![
        (
            "general.architecture".to_owned(),
            Value::String(ARCH.into()),
        ),
        (
            "general.name".to_owned(),
            Value::String("pointact bench-vlm Qwen2.5-VL text decoder (random weights)".into()),
        ),
        (WRITER_KEY.to_owned(), Value::String(WRITER.into())),
        (key("context_length"), u32v(cfg.max_position_embeddings)),
        (key("embedding_length"), u32v(cfg.hidden_size)),
        (key("block_count"), u32v(cfg.num_hidden_layers)),
        (key("feed_forward_length"), u32v(cfg.intermediate_size)),
        (key("attention.head_count"), u32v(cfg.num_attention_heads)),
        (
            key("attention.head_count_kv"),
            u32v(cfg.num_key_value_heads),
        ),
        (
            key("attention.layer_norm_rms_epsilon"),
            Value::F32(cfg.rms_norm_eps as f32),
        ),
        (key("rope.freq_base"), Value::F32(cfg.rope_theta as f32)),
        (key("rope.dimension_count"), u32v(cfg.head_dim)),
        (
            "tokenizer.ggml.model".to_owned(),
            Value::String("gpt2".into()),
        ),
        (
            "tokenizer.ggml.pre".to_owned(),
            Value::String("qwen2".into()),
        ),
        (
            "tokenizer.ggml.tokens".to_owned(),
            Value::Array(tokens.into_iter().map(Value::String).collect()),
        ),
        (
            "tokenizer.ggml.token_type".to_owned(),
            Value::Array(types.into_iter().map(Value::I32).collect()),
        ),
        (
            "tokenizer.ggml.merges".to_owned(),
            Value::Array(
                MERGES
                    .iter()
                    .map(|(a, b)| Value::String(format!("{a} {b}")))
                    .collect(),
            ),
        ),
    ];
    for (name, id) in [("bos", bos), ("eos", eos)] {
        if let Some(id) = id {
            kv.push((format!("tokenizer.ggml.{name}_token_id"), Value::U32(id)));
        }
    }
    kv
}

/// Writes the text decoder of the checkpoint folder `model_dir` as a GGUF in `quant` to `out`
/// (through a temporary file, renamed when complete). `bar` counts tensors.
pub fn write(
    model_dir: &Path,
    quant: Quant,
    out: &Path,
    bar: &ProgressBar,
) -> Result<(), VlmBenchError> {
    let cfg = Qwen25VlConfig::from_file(model_dir.join("config.json"))?;
    let reader = SafetensorsReader::open(&weight_files(model_dir)?.0)?;
    let planned = plan(&cfg.text, quant);
    bar.set_length(planned.len() as u64);
    let mut tensors = Vec::with_capacity(planned.len());
    for p in &planned {
        let t = reader.read(&p.source, DType::F32, &Device::Cpu)?;
        if t.dims() != p.shape.as_slice() {
            return Err(VlmBenchError::Mismatch(format!(
                "{} is {:?} in the checkpoint, the config implies {:?}",
                p.source,
                t.dims(),
                p.shape
            )));
        }
        tensors.push(QTensor::quantize(&t, p.dtype)?);
        bar.inc(1);
    }
    let kv = metadata(&cfg.text, &cfg.tokens);
    let kv: Vec<(&str, &Value)> = kv.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let named: Vec<(&str, &QTensor)> = planned
        .iter()
        .zip(&tensors)
        .map(|(p, t)| (p.name.as_str(), t))
        .collect();
    let tmp = out.with_extension("gguf.partial");
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| VlmBenchError::Io { path, source }
    };
    let mut file = std::io::BufWriter::new(std::fs::File::create(&tmp).map_err(io(&tmp))?);
    gguf_file::write(&mut file, &kv, &named)?;
    let file = file.into_inner().map_err(|e| VlmBenchError::Io {
        path: tmp.clone(),
        source: e.into_error(),
    })?;
    file.sync_all().map_err(io(&tmp))?;
    std::fs::rename(&tmp, out).map_err(io(out))
}

/// A GGUF ready for llama.cpp.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct GgufFile {
    pub path: PathBuf,
    pub bytes: u64,
    /// Reused from an earlier run (else written now, taking `write_s`).
    pub reused: bool,
    pub write_s: f64,
}

/// `DIR/llama-{quant}.gguf`, next to the checkpoint it is made from.
pub(crate) fn path_for(model_dir: &Path, quant: Quant) -> PathBuf {
    model_dir.join(format!("llama-{quant}.gguf"))
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Whether `gguf` can be reused: written by this writer, and newer than every file it was made
/// from (a regenerated checkpoint makes it stale).
fn fresh(gguf: &Path, model_dir: &Path) -> bool {
    let Some(written) = modified(gguf) else {
        return false;
    };
    let Ok((mut sources, _)) = weight_files(model_dir) else {
        return false;
    };
    sources.push(model_dir.join("config.json"));
    let newer = sources
        .iter()
        .all(|s| modified(s).is_some_and(|t| t <= written));
    let ours = || -> Option<bool> {
        let mut f = std::fs::File::open(gguf).ok()?;
        let content = gguf_file::Content::read(&mut f).ok()?;
        Some(content.metadata.get(WRITER_KEY)?.to_string().ok()? == WRITER)
    };
    newer && ours().unwrap_or(false)
}

/// The GGUF of `model_dir` in `quant`: reused when fresh, written otherwise.
pub(crate) fn ensure(
    model_dir: &Path,
    quant: Quant,
    bar: &ProgressBar,
) -> Result<GgufFile, VlmBenchError> {
    let path = path_for(model_dir, quant);
    let reused = fresh(&path, model_dir);
    let t0 = Instant::now();
    if !reused {
        write(model_dir, quant, &path, bar)?;
    }
    let bytes = std::fs::metadata(&path)
        .map_err(|source| VlmBenchError::Io {
            path: path.clone(),
            source,
        })?
        .len();
    Ok(GgufFile {
        path,
        bytes,
        reused,
        write_s: if reused {
            0.0
        } else {
            t0.elapsed().as_secs_f64()
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg_3b() -> Qwen25VlConfig {
        let json = super::super::checkpoint::config_json(None).to_string();
        Qwen25VlConfig::from_json_str(&json).unwrap()
    }

    #[test]
    fn types_follow_our_loader() {
        let cfg = cfg_3b();
        let p = plan(&cfg.text, Quant::Q4K);
        // 1 embedding + 36 × 12 + final norm + a quantized copy of the tied table.
        assert_eq!(p.len(), 1 + 36 * 12 + 2);
        let ty = |n: &str| p.iter().find(|t| t.name == n).unwrap().dtype;
        assert_eq!(ty("token_embd.weight"), GgmlDType::F32);
        assert_eq!(ty("output.weight"), GgmlDType::Q4K);
        assert_eq!(ty("blk.0.ffn_down.weight"), GgmlDType::Q4K); // 11008 = 43 · 256
        assert_eq!(ty("blk.35.attn_q.bias"), GgmlDType::F32);
        assert_eq!(ty("blk.3.ffn_norm.weight"), GgmlDType::F32);
        // Dense: tied, shared, left out.
        assert!(plan(&cfg.text, Quant::F32)
            .iter()
            .all(|t| t.name != "output.weight" && t.dtype == GgmlDType::F32));
    }

    #[test]
    fn vocabulary_is_unique_and_full() {
        let cfg = cfg_3b();
        let (tokens, types, bos, eos) = vocab(cfg.text.vocab_size, &cfg.tokens);
        assert_eq!(tokens.len(), 151_936);
        assert_eq!(types.len(), tokens.len());
        let unique: std::collections::HashSet<&String> = tokens.iter().collect();
        assert_eq!(unique.len(), tokens.len());
        assert_eq!((bos, eos), (Some(151_643), Some(151_645)));
        assert_eq!(tokens[151_645], "<|im_end|>");
        assert_eq!(tokens[b'\n' as usize], "Ċ");
        assert_eq!(tokens[b' ' as usize], "Ġ");
        assert_eq!(tokens[b'A' as usize], "A");
    }
}
