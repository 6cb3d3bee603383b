//! The benchmark's model: a random-weight Qwen2.5-VL-3B with Embodied-R1-3B's exact layout,
//! written once as a sharded Hugging Face folder that both candle and transformers load.
//!
//! Why random weights: the benchmark measures speed and memory, which depend on shapes, not on
//! values, and must run on a machine that has never downloaded anything. Why still "scaled like
//! a trained model": with badly scaled weights activations overflow or collapse, and then neither
//! the timings (denormals, NaN paths) nor the greedy-token parity check between the two sides
//! mean anything. Matrices are N(0, 1/fan_in) (each linear keeps the activation scale), norm
//! weights ≈ 1, biases and the embedding table small, like a trained checkpoint's.
//!
//! Why a folder on disk and a marker: 7.5 GB of bf16 take minutes to generate, so the folder is
//! reused while the marker (seed, generator version, hash of both configs) matches. Tensors are
//! drawn per fixed-size chunk from their own seeded stream, so the bytes do not depend on the
//! thread count. Memory stays at about one shard: tensors are generated, narrowed to bf16 and
//! written shard by shard.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use indicatif::ProgressBar;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::error::VlmBenchError;
use pointact_vlm::WEIGHTS_INDEX_FILE as SHARD_INDEX_FILE;
use pointact_vlm::{ImageProcessorConfig, Qwen25VlConfig};

/// Seed of the benchmark's weights unless `--seed` says otherwise.
pub(crate) const DEFAULT_SEED: u64 = 0x3B_5EED;
/// Names the weight recipe; bump it whenever [`Init`] or the chunking changes, so that old
/// folders are regenerated instead of silently reused.
const GENERATOR: &str = "pointact-bench-vlm-weights-v1";
/// Written last; its presence with matching fields means the folder is complete.
const MARKER_FILE: &str = "pointact-bench-vlm.json";
/// Hugging Face's default shard limit ("2GB" = 2·10⁹ bytes).
const MAX_SHARD_BYTES: u64 = 2_000_000_000;
/// Elements drawn from one random stream; fixed so the weights do not depend on the threads.
const CHUNK: usize = 1 << 20;

/// Text layers and vision blocks of Qwen2.5-VL-3B.
const TEXT_LAYERS: usize = 36;
const VISION_DEPTH: usize = 32;
const FULL_ATTENTION_BLOCKS: [usize; 4] = [7, 15, 23, 31];

/// Qwen2.5-VL-3B-Instruct's `config.json` (= Embodied-R1-3B's), in the flat layout transformers
/// 4.51.3 writes, optionally cut to `layers` text layers and vision blocks for quick runs. A cut
/// tower keeps the full-attention blocks that still exist, and at least its last block, so that
/// both attention kinds stay exercised as in the real model.
pub fn config_json(layers: Option<usize>) -> serde_json::Value {
    let text_layers = layers.map_or(TEXT_LAYERS, |n| n.clamp(1, TEXT_LAYERS));
    let depth = layers.map_or(VISION_DEPTH, |n| n.clamp(1, VISION_DEPTH));
    let mut full: Vec<usize> = FULL_ATTENTION_BLOCKS
        .into_iter()
        .filter(|&b| b < depth)
        .collect();
    if full.is_empty() {
        full.push(depth - 1);
    }
    // Two literals: one would exceed `json!`'s macro recursion limit.
    let vision = serde_json::json!({
        "depth": depth,
        "hidden_act": "silu",
        "hidden_size": 1280,
        "intermediate_size": 3420,
        "num_heads": 16,
        "in_chans": 3,
        "out_hidden_size": 2048,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "spatial_patch_size": 14,
        "window_size": 112,
        "fullatt_block_indexes": full,
        "tokens_per_second": 2,
        "temporal_patch_size": 2
    });
    let mut config = serde_json::json!({
        "architectures": ["Qwen2_5_VLForConditionalGeneration"],
        "model_type": "qwen2_5_vl",
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "vision_start_token_id": 151652,
        "vision_end_token_id": 151653,
        "vision_token_id": 151654,
        "image_token_id": 151655,
        "video_token_id": 151656,
        "hidden_act": "silu",
        "hidden_size": 2048,
        "initializer_range": 0.02,
        "intermediate_size": 11008,
        "max_position_embeddings": 128000,
        "max_window_layers": 70,
        "num_attention_heads": 16,
        "num_hidden_layers": text_layers,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-6,
        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
        "rope_theta": 1000000.0,
        "sliding_window": 32768,
        "tie_word_embeddings": true,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.51.3",
        "use_cache": true,
        "use_sliding_window": false,
        "vocab_size": 151936
    });
    config["vision_config"] = vision;
    config
}

/// Qwen2.5-VL-Instruct's `preprocessor_config.json`, from the crate's own values.
pub(crate) fn preprocessor_json() -> serde_json::Value {
    let c = ImageProcessorConfig::qwen25vl_instruct();
    serde_json::json!({
        "min_pixels": c.min_pixels,
        "max_pixels": c.max_pixels,
        "patch_size": c.patch_size,
        "temporal_patch_size": c.temporal_patch_size,
        "merge_size": c.merge_size,
        "image_mean": c.image_mean,
        "image_std": c.image_std,
        "do_rescale": c.do_rescale,
        "do_normalize": c.do_normalize,
        "do_resize": true,
        "do_convert_rgb": true,
        "resample": 3,
        "rescale_factor": c.rescale_factor,
        "image_processor_type": "Qwen2VLImageProcessor",
        "processor_class": "Qwen2_5_VLProcessor"
    })
}

/// How one tensor is drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Init {
    /// N(0, 1/fan_in): a linear (or the patch-embedding convolution) that keeps the scale.
    Matrix { fan_in: usize },
    /// N(0, 0.02²): the token embedding table (tied to `lm_head`), as small as trained ones.
    Embedding,
    /// 1 + N(0, 0.02²): an RMSNorm gain.
    Norm,
    /// N(0, 0.02²).
    Bias,
}

/// One checkpoint tensor: Hugging Face name, shape and how it is drawn.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TensorSpec {
    pub name: String,
    pub shape: Vec<usize>,
    pub init: Init,
}

impl TensorSpec {
    fn new(name: String, shape: Vec<usize>) -> Self {
        let init = if name.ends_with(".bias") {
            Init::Bias
        } else if name == "model.embed_tokens.weight" {
            Init::Embedding
        } else if shape.len() == 1 {
            Init::Norm
        } else {
            Init::Matrix {
                fan_in: shape[1..].iter().product(),
            }
        };
        TensorSpec { name, shape, init }
    }

    pub(crate) fn elem_count(&self) -> usize {
        self.shape.iter().product()
    }

    fn bf16_bytes(&self) -> u64 {
        self.elem_count() as u64 * 2
    }
}

/// Every tensor of a Qwen2.5-VL checkpoint with `cfg`'s sizes, in transformers 4.51.3's names
/// (`visual.*`, `model.*`); no `lm_head.weight` when the embeddings are tied, as in the 3B file.
pub(crate) fn tensor_specs(cfg: &Qwen25VlConfig) -> Vec<TensorSpec> {
    // The bench builds its checkpoints from a Qwen2.5-VL config, which always has a vision part.
    let Some(v) = &cfg.vision else {
        return Vec::new();
    };
    let t = &cfg.text;
    let mut specs = Vec::new();
    let mut add = |name: String, shape: Vec<usize>| specs.push(TensorSpec::new(name, shape));
    add(
        "visual.patch_embed.proj.weight".into(),
        vec![
            v.hidden_size,
            v.in_channels,
            v.temporal_patch_size,
            v.patch_size,
            v.patch_size,
        ],
    );
    let (h, i) = (v.hidden_size, v.intermediate_size);
    for b in 0..v.depth {
        let p = format!("visual.blocks.{b}");
        add(format!("{p}.norm1.weight"), vec![h]);
        add(format!("{p}.norm2.weight"), vec![h]);
        for (name, out, inp) in [
            ("attn.qkv", 3 * h, h),
            ("attn.proj", h, h),
            ("mlp.gate_proj", i, h),
            ("mlp.up_proj", i, h),
            ("mlp.down_proj", h, i),
        ] {
            add(format!("{p}.{name}.weight"), vec![out, inp]);
            add(format!("{p}.{name}.bias"), vec![out]);
        }
    }
    let merged = h * v.merge_unit();
    add("visual.merger.ln_q.weight".into(), vec![h]);
    add("visual.merger.mlp.0.weight".into(), vec![merged, merged]);
    add("visual.merger.mlp.0.bias".into(), vec![merged]);
    add(
        "visual.merger.mlp.2.weight".into(),
        vec![v.out_hidden_size, merged],
    );
    add("visual.merger.mlp.2.bias".into(), vec![v.out_hidden_size]);

    let (h, kv) = (t.hidden_size, t.num_key_value_heads * t.head_dim);
    let q = t.num_attention_heads * t.head_dim;
    add("model.embed_tokens.weight".into(), vec![t.vocab_size, h]);
    for l in 0..t.num_hidden_layers {
        let p = format!("model.layers.{l}");
        add(format!("{p}.input_layernorm.weight"), vec![h]);
        add(format!("{p}.post_attention_layernorm.weight"), vec![h]);
        for (name, out) in [("q_proj", q), ("k_proj", kv), ("v_proj", kv)] {
            add(format!("{p}.self_attn.{name}.weight"), vec![out, h]);
            add(format!("{p}.self_attn.{name}.bias"), vec![out]);
        }
        add(format!("{p}.self_attn.o_proj.weight"), vec![h, q]);
        add(
            format!("{p}.mlp.gate_proj.weight"),
            vec![t.intermediate_size, h],
        );
        add(
            format!("{p}.mlp.up_proj.weight"),
            vec![t.intermediate_size, h],
        );
        add(
            format!("{p}.mlp.down_proj.weight"),
            vec![h, t.intermediate_size],
        );
    }
    add("model.norm.weight".into(), vec![h]);
    if !t.tie_word_embeddings {
        add("lm_head.weight".into(), vec![t.vocab_size, h]);
    }
    specs
}

/// Draws `spec`'s values (f32) from the stream of (`seed`, tensor name).
pub(crate) fn generate(spec: &TensorSpec, seed: u64) -> Vec<f32> {
    let (mean, std) = match spec.init {
        Init::Matrix { fan_in } => (0.0, 1.0 / (fan_in.max(1) as f32).sqrt()),
        Init::Embedding | Init::Bias => (0.0, 0.02),
        Init::Norm => (1.0, 0.02),
    };
    let stream_seed = seed ^ crate::sim::tasks::fnv1a(&spec.name);
    let mut data = vec![0f32; spec.elem_count()];
    data.par_chunks_mut(CHUNK)
        .enumerate()
        .for_each(|(c, chunk)| {
            let mut rng = ChaCha8Rng::seed_from_u64(stream_seed);
            rng.set_stream(c as u64);
            fill_normal(&mut rng, chunk, mean, std);
        });
    data
}

/// Box–Muller: two normal samples per two uniforms.
fn fill_normal(rng: &mut ChaCha8Rng, out: &mut [f32], mean: f32, std: f32) {
    for pair in out.chunks_mut(2) {
        // 1 − U ∈ (0, 1], so the logarithm is finite.
        let u1 = 1.0 - rng.gen::<f32>();
        let u2 = rng.gen::<f32>();
        let r = (-2.0 * u1.ln()).sqrt() * std;
        let (s, c) = (std::f32::consts::TAU * u2).sin_cos();
        pair[0] = mean + r * c;
        if let Some(x) = pair.get_mut(1) {
            *x = mean + r * s;
        }
    }
}

/// What identifies a finished folder (`pointact-bench-vlm.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Marker {
    generator: String,
    seed: u64,
    /// FNV-1a of `config.json` and `preprocessor_config.json` as written.
    config_hash: String,
    /// Shard file names, in order.
    files: Vec<String>,
    /// Tensor bytes (bf16) in all shards.
    total_bytes: u64,
}

/// A ready checkpoint folder.
#[derive(Debug, Clone)]
pub(crate) struct Checkpoint {
    pub dir: PathBuf,
    pub config: Qwen25VlConfig,
    /// Shards, in order.
    pub files: Vec<PathBuf>,
    /// Tensor bytes (bf16) on disk.
    pub bytes: u64,
    pub params: u64,
    /// Whether an existing folder was reused (else generated now, taking `generate_s`).
    pub reused: bool,
    pub generate_s: f64,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> VlmBenchError + '_ {
    move |source| VlmBenchError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Assigns consecutive tensors to shards of at most [`MAX_SHARD_BYTES`] (a tensor larger than
/// that gets a shard of its own), returning each tensor's shard number and the shard count.
fn plan_shards(specs: &[TensorSpec]) -> (Vec<usize>, usize) {
    let mut shard_of = Vec::with_capacity(specs.len());
    let (mut shard, mut used) = (0usize, 0u64);
    for s in specs {
        let b = s.bf16_bytes();
        if used > 0 && used + b > MAX_SHARD_BYTES {
            shard += 1;
            used = 0;
        }
        used += b;
        shard_of.push(shard);
    }
    (shard_of, shard + 1)
}

/// Makes sure `dir` holds the benchmark checkpoint for `seed` and `layers` (generating it when
/// the marker is missing or differs) and returns it. `bar` shows generation progress in bytes.
pub(crate) fn ensure(
    dir: &Path,
    seed: u64,
    layers: Option<usize>,
    bar: &ProgressBar,
) -> Result<Checkpoint, VlmBenchError> {
    let config_text = serde_json::to_string_pretty(&config_json(layers))?;
    let preprocessor_text = serde_json::to_string_pretty(&preprocessor_json())?;
    let config = Qwen25VlConfig::from_json_str(&config_text)?;
    let specs = tensor_specs(&config);
    let (shard_of, n_shards) = plan_shards(&specs);
    let names: Vec<String> = (1..=n_shards)
        .map(|i| format!("model-{i:05}-of-{n_shards:05}.safetensors"))
        .collect();
    let total_bytes: u64 = specs.iter().map(TensorSpec::bf16_bytes).sum();
    let params: u64 = specs.iter().map(|s| s.elem_count() as u64).sum();
    let hash = crate::sim::tasks::fnv1a(&format!("{config_text}\n{preprocessor_text}"));
    let want = Marker {
        generator: GENERATOR.into(),
        seed,
        config_hash: format!("{hash:016x}"),
        files: names.clone(),
        total_bytes,
    };
    let files: Vec<PathBuf> = names.iter().map(|n| dir.join(n)).collect();
    let marker_path = dir.join(MARKER_FILE);
    let found: Option<Marker> = std::fs::read_to_string(&marker_path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    let checkpoint = |reused, generate_s| Checkpoint {
        dir: dir.to_path_buf(),
        config: config.clone(),
        files: files.clone(),
        bytes: total_bytes,
        params,
        reused,
        generate_s,
    };
    if found.as_ref() == Some(&want) && files.iter().all(|f| f.is_file()) {
        return Ok(checkpoint(true, 0.0));
    }

    let t0 = Instant::now();
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    // Only what an earlier run of this generator wrote is removed; other files stay.
    let _ = std::fs::remove_file(&marker_path);
    if let Some(old) = found {
        for f in old.files {
            let _ = std::fs::remove_file(dir.join(f));
        }
    }
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(io_err(&path))
    };
    write("config.json", &config_text)?;
    write("preprocessor_config.json", &preprocessor_text)?;

    bar.set_length(total_bytes);
    bar.set_position(0);
    let mut weight_map = serde_json::Map::new();
    let mut pending: HashMap<String, Tensor> = HashMap::new();
    for (k, spec) in specs.iter().enumerate() {
        let shard = shard_of[k];
        bar.set_message(format!("{} ({})", names[shard], spec.name));
        let values = generate(spec, seed);
        let t =
            Tensor::from_vec(values, spec.shape.as_slice(), &Device::Cpu)?.to_dtype(DType::BF16)?;
        pending.insert(spec.name.clone(), t);
        weight_map.insert(spec.name.clone(), names[shard].clone().into());
        bar.inc(spec.bf16_bytes());
        let last_of_shard = shard_of.get(k + 1) != Some(&shard);
        if last_of_shard {
            candle_core::safetensors::save(&pending, &files[shard])?;
            pending.clear();
        }
    }
    let index = serde_json::json!({
        "metadata": {"total_size": total_bytes},
        "weight_map": weight_map,
    });
    write(SHARD_INDEX_FILE, &serde_json::to_string_pretty(&index)?)?;
    write(MARKER_FILE, &serde_json::to_string_pretty(&want)?)?;
    Ok(checkpoint(false, t0.elapsed().as_secs_f64()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_config_has_the_3b_sizes_and_824_tensors() {
        let cfg = Qwen25VlConfig::from_json_str(&config_json(None).to_string()).unwrap();
        assert_eq!(cfg.text.num_hidden_layers, 36);
        assert_eq!(cfg.text.head_dim, 128);
        assert_eq!(
            cfg.vision.as_ref().unwrap().fullatt_block_indexes,
            vec![7, 15, 23, 31]
        );
        let specs = tensor_specs(&cfg);
        // 390 vision + 434 text tensors, no lm_head (tied): the published 3B file.
        assert_eq!(specs.len(), 824);
        let params: usize = specs.iter().map(TensorSpec::elem_count).sum();
        assert_eq!(params, 3_754_622_976);
    }

    #[test]
    fn cut_configs_keep_a_valid_full_attention_block() {
        for (layers, full) in [(1, vec![0]), (2, vec![1]), (8, vec![7]), (20, vec![7, 15])] {
            let cfg = Qwen25VlConfig::from_json_str(&config_json(Some(layers)).to_string())
                .unwrap_or_else(|e| panic!("--layers {layers}: {e}"));
            let v = cfg.vision.as_ref().unwrap();
            assert_eq!(v.fullatt_block_indexes, full, "--layers {layers}");
            assert_eq!(cfg.text.num_hidden_layers, layers);
        }
    }

    #[test]
    fn shards_respect_the_limit_and_keep_order() {
        let cfg = Qwen25VlConfig::from_json_str(&config_json(None).to_string()).unwrap();
        let specs = tensor_specs(&cfg);
        let (shard_of, n) = plan_shards(&specs);
        assert!(shard_of.windows(2).all(|w| w[0] <= w[1]));
        let mut sizes = vec![0u64; n];
        for (s, &k) in specs.iter().zip(&shard_of) {
            sizes[k] += s.bf16_bytes();
        }
        assert!(sizes.iter().all(|&b| b <= MAX_SHARD_BYTES), "{sizes:?}");
        assert_eq!(n, 4);
    }

    #[test]
    fn weights_are_deterministic_and_scaled() {
        let spec = TensorSpec::new("model.layers.0.mlp.down_proj.weight".into(), vec![64, 4096]);
        let a = generate(&spec, 7);
        assert_eq!(a, generate(&spec, 7));
        assert_ne!(a, generate(&spec, 8));
        let n = a.len() as f64;
        let mean = a.iter().map(|&x| x as f64).sum::<f64>() / n;
        let var = a.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
        assert!(mean.abs() < 1e-3, "mean {mean}");
        assert!(
            (var * 4096.0 - 1.0).abs() < 0.02,
            "var·fan_in {}",
            var * 4096.0
        );
        let norm = generate(&TensorSpec::new("model.norm.weight".into(), vec![2048]), 7);
        assert!(norm.iter().all(|&x| (x - 1.0).abs() < 0.2));
    }
}
