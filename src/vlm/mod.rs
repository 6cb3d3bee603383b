//! Qwen2.5-VL (Embodied-R1-3B) on candle — issue 4, being built in pieces.
//!
//! Built so far:
//! * [`processor`]: the image processor, equal to transformers 4.51.3's `Qwen2VLImageProcessor`
//!   (RGB, `smart_resize`, Pillow-exact bicubic resize, rescale, CLIP normalisation, temporal
//!   duplication, patch order, `image_grid_thw`). Plain `Vec<f32>` out, no candle types.
//! * [`config`]: `config.json` → [`Qwen25VlConfig`] (text part, [`VisionConfig`], M-RoPE
//!   sections, special-token ids), from the flat layout of transformers 4.51.3 or the nested
//!   `text_config` layout of newer releases, validated with typed [`ConfigError`]s.
//!
//! Not built yet: the vision tower, the M-RoPE text model (`model.*` weights: 3-D position ids,
//! image-row scatter, decoder, tied lm_head), weight loading from a local Hugging Face folder (sharded
//! `model.safetensors.index.json`), the tokenizer and chat template, and generation. Their
//! golden data already exists: `tests/fixtures/qwen25vl_tiny/` holds a tiny random-weight
//! Qwen2.5-VL, its tokenizer and chat template, and reference tensors from transformers 4.51.3
//! for every stage (`tests/fixtures/gen_qwen25vl_golden.py` regenerates them).

pub mod config;
pub mod processor;

pub use config::{ConfigError, Qwen25VlConfig, TextConfig, TokenIds, VisionConfig};

pub use processor::{
    resize_bicubic_pil, resize_bicubic_pil_with, ImageProcessor, ImageProcessorConfig, PassOrder,
    ProcessedImage, ProcessorError, CLIP_MEAN, CLIP_STD,
};
