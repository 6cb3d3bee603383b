//! Qwen2.5-VL (Embodied-R1-3B) on candle — issue 4, being built in pieces.
//!
//! Built so far:
//! * [`processor`]: the image processor, equal to transformers 4.51.3's `Qwen2VLImageProcessor`
//!   (RGB, `smart_resize`, Pillow-exact bicubic resize, rescale, CLIP normalisation, temporal
//!   duplication, patch order, `image_grid_thw`). Plain `Vec<f32>` out, no candle types, so it is
//!   usable and tested before any tensor library is in the tree.
//!
//! Not built yet (the module has no candle dependency at all): the config parser, the vision
//! tower, the M-RoPE text model, weight loading from a local Hugging Face folder, the tokenizer
//! and chat template, and generation. Their golden data already exists:
//! `tests/fixtures/qwen25vl_tiny/` holds a tiny random-weight Qwen2.5-VL, its tokenizer and chat
//! template, and reference tensors from transformers 4.51.3 for every stage
//! (`tests/fixtures/gen_qwen25vl_golden.py` regenerates them).

pub mod processor;

pub use processor::{
    resize_bicubic_pil, resize_bicubic_pil_with, ImageProcessor, ImageProcessorConfig, PassOrder,
    ProcessedImage, ProcessorError, CLIP_MEAN, CLIP_STD,
};
