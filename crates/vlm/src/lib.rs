//! Qwen2.5-VL (Embodied-R1-3B) on candle.
//!
//! * [`files`]: a `--model` spec → [`ModelFiles`]: a local folder (`config.json`, single or
//!   sharded safetensors via `model.safetensors.index.json`, `tokenizer.json`, optional side
//!   files), or a Hugging Face repo id looked up in the hub cache first and downloaded by [`hub`]
//!   otherwise (never with `HF_HUB_OFFLINE`); failures say how to pass a local folder.
//! * [`hub`]: our hub client ([`HubClient`]): connect and read timeouts, a progress bar per file,
//!   the cache layout `huggingface_hub` shares (`refs/`, `blobs/`, `snapshots/`), files renamed
//!   into place only when complete; typed [`HubError`]s naming file, URL and limit.
//! * [`tokenizer`]: [`Qwen25Tokenizer`]: `tokenizer.json` through the `tokenizers` crate, the chat
//!   template rendered with `minijinja` as transformers renders it (trim/lstrip blocks,
//!   `raise_exception`), the single `<|image_pad|>` expanded to the image's token count, and
//!   one-shot and streaming ([`TokenStream`]) decoding. Equal to transformers 4.51.3's
//!   `Qwen2_5_VLProcessor` ids on the fixture (`tests/vlm_tokenizer.rs`).
//! * [`processor`]: the image processor, equal to transformers 4.51.3's `Qwen2VLImageProcessor`
//!   (RGB, `smart_resize`, Pillow-exact bicubic resize, rescale, CLIP normalisation, temporal
//!   duplication, patch order, `image_grid_thw`). Plain `Vec<f32>` out, no candle types.
//! * [`config`]: `config.json` → [`Qwen25VlConfig`] (text part, [`VisionConfig`], M-RoPE
//!   sections, special-token ids), from the flat layout of transformers 4.51.3 or the nested
//!   `text_config` layout of newer releases, validated with typed [`ConfigError`]s.
//! * [`vision`]: the vision tower [`Qwen25VisionModel`] (`visual.*` weights in the classic names;
//!   [`weights`] maps the transformers >= 4.52 and mlx-vlm names onto them): patch embedding as
//!   one Linear, 2-D rotary in f32, window permutation, window/full-attention blocks, patch merger
//!   with exact GELU, raster-order output. Matches transformers 4.51.3 on the fixture within
//!   ~1e-6 relative (`crates/vlm/src/tests/vlm_vision.rs`; the fixture's golden run had its rotary `inv_freq`
//!   rounded to bf16, reproduced by `with_bf16_rotary_freqs`). Load on CPU as F32:
//!   `VarBuilder::from_mmaped_safetensors(&[path], DType::F32, &Device::Cpu)`, then
//!   `Qwen25VisionModel::new(vision_cfg, vb.pp("visual"))` with `cfg.vision` (`None` for a text-only
//!   Qwen2 checkpoint, which [`Qwen25Vl`] runs without a tower).
//!
//! * [`rope`], [`text`], [`model`]: 3-D M-RoPE position ids, the Qwen2 decoder (GQA, KV cache
//!   sized to the sequence, tied or untied `lm_head`; a decode step's attention reads the cache
//!   in place, split over the pool by KV head: [`attend`]), and the two towers joined at the
//!   `<|image_pad|>` rows; [`generate`]: greedy / top-p decoding with repetition penalty and stop
//!   ids. Golden parity with transformers 4.51.3 in `crates/vlm/src/tests/vlm_text.rs` (logits ~1e-6 relative,
//!   greedy tokens identical).
//! * [`budget`]: the activation memory one image costs and the largest image that fits a budget
//!   (attention grows with the square of the patch count: a 12 MP photo would need tens of GB).
//! * [`linear`]: in-process Q8_0 / Q4K linears ([`qgemv`]: our AVX2 and AVX-512 row kernels for
//!   decode's few-row products; [`qgemm`]: our Q4K tiles for prefill's many rows; [`sgemm`]:
//!   our f32 tiles for dense products of many rows, the f32 prefill and the vision tower; both
//!   take a bf16 checkpoint's dense weights as stored, widened in registers:
//!   [`linear::keeps_bf16`]);
//!   [`qcache`]: their blocks cached beside the
//!   checkpoint after the first quantized load; [`weights`]: tensor-by-tensor safetensors reading;
//!   [`image_map`]: `smart_resize` and the map between the model's pixels and the image's;
//!   [`heap`]: freed activation buffers kept in the heap once a model runs (no page faults per op).
//!
//! The model knows tensors, images and tokens only: the `qwen` pointing backend that wraps it
//! (abilities, frames, answer parsing) is `pointing::qwen`.
//!
//! Training: the fused candle ops of inference (rms_norm, softmax, rope) have no backward pass,
//! so [`TextModel::forward_train`] runs the decoder with their differentiable forms
//! ([`Kernels`]); [`TextModel::make_trainable`] turns chosen weights into `Var`s in place and
//! [`TextModel::named_weights`] gives them back under checkpoint names. Decoding takes a batch
//! of continuations of one prompt ([`Qwen25Vl::fork`], [`Qwen25Vl::decode_batch`]: GRPO's
//! groups). The vision tower has no training path (it is frozen in training).
//!
//! Devices: [`device`]'s [`DeviceSpec`] (`--device cpu|cuda|cuda:N`). With the `cuda` feature the
//! dense f32 model runs on a CUDA GPU through candle's CUDA backend (the same ops; [`attend`]'s
//! CPU decode path steps aside for candle's); quantized weights stay CPU-only.

#![warn(missing_docs)]

pub(crate) mod attend;
pub mod budget;
pub(crate) mod config;
pub(crate) mod device;
pub(crate) mod files;
pub(crate) mod generate;
pub(crate) mod heap;
pub mod hub;
pub(crate) mod image_map;
pub mod linear;
pub(crate) mod model;
pub(crate) mod processor;
pub mod qcache;
pub mod qgemm;
pub mod qgemv;
pub(crate) mod rope;
pub mod sgemm;
pub(crate) mod text;
pub(crate) mod tokenizer;
pub(crate) mod vision;
pub(crate) mod vmath;
pub(crate) mod weights;

pub use config::{ConfigError, Qwen25VlConfig, TextConfig, TokenIds, VisionConfig};
pub use device::{DeviceError, DeviceSpec};
pub use files::{
    shard_names, weight_files, FilesError, ModelFiles, ModelOrigin, WEIGHTS_INDEX_FILE,
};

pub use generate::{
    apply_repetition_penalty, argmax, generate, generate_reusing, sample_token, Generation,
    GenerationConfig, PromptCache, Sampling, StopReason, Timings,
};
pub use image_map::{
    smart_resize, ImageSize, MappingError, ModelImageMap, DEFAULT_MAX_PIXELS, DEFAULT_MIN_PIXELS,
    ER1_EVAL_MAX_PIXELS, ER1_EVAL_MIN_PIXELS, FACTOR, PRETRAINED_MAX_PIXELS,
};
pub use linear::{CheckpointTensor, Quant};
pub use model::{ImageInput, ModelError, PreparedPrompt, Qwen25Vl};
pub use processor::{
    resize_bicubic_pil, resize_bicubic_pil_with, ImageProcessor, ImageProcessorConfig, PassOrder,
    ProcessedImage, ProcessorError,
};

pub use text::{Kernels, LogitsAt, TextModel, TextOutput, TrainableWeight};
pub use tokenizer::{
    Qwen25Tokenizer, SpecialTokenIds, TemplateSource, TokenStream, TokenizerError,
    QWEN2_VL_CHAT_TEMPLATE,
};
pub use vision::{attention_chunk_rows, Qwen25VisionModel, VisionError, VisionTrace, WindowIndex};
pub use weights::{NameScheme, SafetensorsReader, WeightsError};

#[cfg(test)]
use candle_core::Tensor;

/// The largest `|x|` of an f32 tensor: the scale the unit tests' tolerances are relative to.
#[cfg(test)]
pub(crate) fn max_abs(t: &Tensor) -> f32 {
    t.abs()
        .and_then(|d| d.max_all())
        .and_then(|d| d.to_scalar::<f32>())
        .expect("an f32 tensor")
}

/// The largest `|a − b|` of two f32 tensors of one shape: the unit tests' closeness measure.
#[cfg(test)]
pub(crate) fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b)
        .and_then(|d| d.abs())
        .and_then(|d| d.max_all())
        .and_then(|d| d.to_scalar::<f32>())
        .expect("two f32 tensors of one shape")
}

#[cfg(test)]
mod tests;

// The tests' shared tiny-model fixture names this crate by its name, as the workspace's other
// tests do.
#[cfg(test)]
extern crate self as pointact_vlm;
