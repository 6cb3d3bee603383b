//! The Rust image processor against transformers 4.51.3's `Qwen2VLImageProcessor`, on the golden
//! data of `tests/fixtures/qwen25vl_tiny/` (made by `tests/fixtures/gen_qwen25vl_golden.py`).

use std::path::{Path, PathBuf};

use crate::processor::{CLIP_MEAN, CLIP_STD};
use crate::{resize_bicubic_pil_with, PassOrder};
use crate::{ImageProcessor, ImageProcessorConfig, ProcessorError};
use crate::{ImageSize, MappingError};
use safetensors::{Dtype, SafeTensors};

fn fixture(name: &str) -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .join("tests/fixtures/qwen25vl_tiny")
        .join(name)
}

struct Golden {
    bytes: Vec<u8>,
}

impl Golden {
    fn load() -> Self {
        Golden {
            bytes: std::fs::read(fixture("golden.safetensors")).expect("read golden.safetensors"),
        }
    }

    fn tensors(&self) -> SafeTensors<'_> {
        SafeTensors::deserialize(&self.bytes).expect("parse golden.safetensors")
    }

    fn shape(&self, name: &str) -> Vec<usize> {
        self.tensors().tensor(name).expect(name).shape().to_vec()
    }

    fn f32s(&self, name: &str) -> Vec<f32> {
        let st = self.tensors();
        let t = st.tensor(name).expect(name);
        assert_eq!(t.dtype(), Dtype::F32, "{name}");
        t.data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    }

    fn i64s(&self, name: &str) -> Vec<i64> {
        let st = self.tensors();
        let t = st.tensor(name).expect(name);
        assert_eq!(t.dtype(), Dtype::I64, "{name}");
        t.data()
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
            .collect()
    }

    fn u8s(&self, name: &str) -> Vec<u8> {
        let st = self.tensors();
        let t = st.tensor(name).expect(name);
        assert_eq!(t.dtype(), Dtype::U8, "{name}");
        t.data().to_vec()
    }

    /// HF's `pixel_values` [N, 1176], decoded from the lossless level encoding the fixture uses:
    /// `pv[i, c*392 + t*196 + k] = lut[c, levels[i, c*196 + k]]` for both frames t.
    fn pixel_values(&self, levels_name: &str) -> (Vec<f32>, usize) {
        let lut = self.f32s("pixel_values_lut");
        let levels = self.u8s(levels_name);
        assert_eq!(self.shape(levels_name)[1], 588);
        let n = levels.len() / 588;
        let mut pv = Vec::with_capacity(n * 1176);
        for row in levels.chunks_exact(588) {
            for c in 0..3 {
                for _t in 0..2 {
                    pv.extend(
                        row[c * 196..(c + 1) * 196]
                            .iter()
                            .map(|&l| lut[c * 256 + usize::from(l)]),
                    );
                }
            }
        }
        (pv, n)
    }
}

fn processor() -> ImageProcessor {
    ImageProcessor::from_preprocessor_config(fixture("preprocessor_config.json"))
        .expect("fixture preprocessor_config.json")
}

fn grid(g: &Golden, name: &str) -> [u32; 3] {
    let v = g.i64s(name);
    assert_eq!(v.len(), 3);
    [v[0] as u32, v[1] as u32, v[2] as u32]
}

#[test]
fn fixture_config_is_the_instruct_one() {
    let p = processor();
    assert_eq!(p.config(), &ImageProcessorConfig::qwen25vl_instruct());
    assert_eq!(p.config().min_pixels, 3136);
    assert_eq!(p.config().max_pixels, 12_845_056);
}

#[test]
fn pixel_values_equal_transformers_without_resize() {
    let g = Golden::load();
    let img = image::open(fixture("image.png")).expect("image.png");
    let out = processor().preprocess(&img).unwrap();
    let (want, n) = g.pixel_values("pixel_values_levels");
    assert_eq!(out.grid_thw, grid(&g, "image_grid_thw"));
    assert_eq!(out.grid_thw, [1, 18, 24]);
    assert_eq!(out.original_size, ImageSize::new(336, 252));
    assert_eq!(out.model_size, ImageSize::new(336, 252));
    assert_eq!(out.num_patches(), n);
    assert_eq!(out.patch_dim, 1176);
    assert_eq!(out.num_image_tokens(), 108);
    assert_eq!(out.pixel_values.len(), want.len());
    let max_abs = out
        .pixel_values
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(max_abs <= 1e-6, "max |rust - hf| = {max_abs}");
    // In fact bit-identical: same uint8 levels, same f64/f32 arithmetic.
    assert_eq!(out.pixel_values, want);
}

/// Image tokens the golden prompt holds = what the processor says the image needs.
#[test]
fn image_token_count_matches_golden_prompt() {
    let g = Golden::load();
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("config.json")).unwrap()).unwrap();
    let image_token = cfg["image_token_id"].as_i64().unwrap();
    let pads = g
        .i64s("input_ids")
        .iter()
        .filter(|&&t| t == image_token)
        .count();
    let img = image::open(fixture("image.png")).unwrap();
    assert_eq!(
        processor().preprocess(&img).unwrap().num_image_tokens(),
        pads
    );
}

/// Mean and max of |a − b| over two equally long slices.
fn abs_diff_stats(a: &[f32], b: &[f32]) -> (f64, f32) {
    assert_eq!(a.len(), b.len());
    let mean = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from((x - y).abs()))
        .sum::<f64>()
        / a.len() as f64;
    let max = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max);
    (mean, max)
}

/// The resized image (300×200 → 308×196: width up, height down, so both passes and the
/// pass-order rule matter): the grid must match exactly, the values within a tolerance.
///
/// Measured against the golden data (transformers 4.51.3 + Pillow 13.0.0):
/// * `resize_bicubic_pil` (Pillow 13 pass order): mean |diff| = 0, max |diff| = 0 — every resized
///   uint8 level equal. Asserted: both ≤ 1e-6.
/// * the same resampler with Pillow ≤ 12's order (always horizontal first), i.e. what an older
///   Pillow would have produced: mean |diff| = 1.513e-3, max |diff| = 0.2133 (15 uint8 levels at
///   the sawtooth edges of the blue channel; 3.7 % of levels differ). Asserted: ≤ 1.6e-3 / 0.22,
///   so this test also bounds how far the two Pillow generations are apart on this image.
#[test]
fn pixel_values_close_to_transformers_with_resize() {
    let g = Golden::load();
    let img = image::open(fixture("image_resize.png")).expect("image_resize.png");
    assert_eq!((img.width(), img.height()), (300, 200));
    let p = processor();
    let out = p.preprocess(&img).unwrap();
    let (want, n) = g.pixel_values("pixel_values_resize_levels");
    assert_eq!(out.grid_thw, grid(&g, "image_grid_thw_resize"));
    assert_eq!(out.grid_thw, [1, 14, 22]);
    assert_eq!(out.model_size, ImageSize::new(308, 196));
    assert_eq!(out.num_patches(), n);
    let (mean_abs, max_abs) = abs_diff_stats(&out.pixel_values, &want);
    println!("Pillow 13 order: mean |diff| = {mean_abs:e}, max |diff| = {max_abs:e}");
    assert!(mean_abs <= 1e-6, "mean |rust - hf| = {mean_abs}");
    assert!(max_abs <= 1e-6, "max |rust - hf| = {max_abs}");

    // Same pipeline, older Pillow's pass order: resize first, then process the (already 28-multiple)
    // result, which the processor passes through unchanged.
    let legacy = resize_bicubic_pil_with(&img.to_rgb8(), 308, 196, PassOrder::HorizontalFirst);
    let out_legacy = p.preprocess_rgb(&legacy).unwrap();
    assert_eq!(out_legacy.grid_thw, [1, 14, 22]);
    let (mean_abs, max_abs) = abs_diff_stats(&out_legacy.pixel_values, &want);
    println!("Pillow <= 12 order: mean |diff| = {mean_abs:e}, max |diff| = {max_abs:e}");
    assert!(mean_abs <= 1.6e-3, "mean |legacy - hf| = {mean_abs}");
    assert!(max_abs <= 0.22, "max |legacy - hf| = {max_abs}");
}

#[test]
fn model_map_round_trips_through_the_processor() {
    let img = image::open(fixture("image_resize.png")).unwrap();
    let out = processor().preprocess(&img).unwrap();
    let map = out.model_image_map().unwrap();
    assert_eq!(map.original(), ImageSize::new(300, 200));
    assert_eq!(map.model(), ImageSize::new(308, 196));
    assert_eq!(map.to_original([308.0, 196.0]), [300.0, 200.0]);
}

#[test]
fn camera_frame_sizes() {
    let p = ImageProcessor::new(ImageProcessorConfig::qwen25vl_instruct()).unwrap();
    let frame = image::RgbImage::new(640, 480);
    let out = p.preprocess_rgb(&frame).unwrap();
    assert_eq!(out.model_size, ImageSize::new(644, 476));
    assert_eq!(out.grid_thw, [1, 34, 46]);
    assert_eq!(out.num_patches(), 1564);
    assert_eq!(out.num_image_tokens(), 391);
    assert_eq!(out.pixel_values.len(), 1564 * 1176);
    // A black frame: every value is the normalised level 0 of its channel.
    let zero: [f32; 3] = std::array::from_fn(|c| (0.0 - CLIP_MEAN[c]) / CLIP_STD[c]);
    for row in out.pixel_values.chunks_exact(1176) {
        for (c, z) in zero.iter().enumerate() {
            assert!(row[c * 392..(c + 1) * 392].iter().all(|v| v == z));
        }
    }
}

#[test]
fn bad_images_are_typed_errors() {
    let p = processor();
    let empty = image::RgbImage::new(0, 0);
    assert!(matches!(
        p.preprocess_rgb(&empty),
        Err(ProcessorError::EmptyImage {
            width: 0,
            height: 0
        })
    ));
    let thin = image::RgbImage::new(100, 0);
    assert!(matches!(
        p.preprocess_rgb(&thin),
        Err(ProcessorError::EmptyImage { .. })
    ));
    let small = image::RgbImage::new(27, 100);
    assert!(matches!(
        p.preprocess_rgb(&small),
        Err(ProcessorError::Size(MappingError::TooSmall {
            height: 100,
            width: 27,
            factor: 28
        }))
    ));
    // 6000 / 28 > 200: transformers raises "absolute aspect ratio must be smaller than 200".
    let strip = image::RgbImage::new(6000, 28);
    let err = p.preprocess_rgb(&strip).unwrap_err();
    assert!(
        matches!(
            err,
            ProcessorError::Size(MappingError::AspectRatio {
                height: 28,
                width: 6000
            })
        ),
        "{err}"
    );
    assert!(err.to_string().contains("aspect ratio"));
    // Exactly 200:1 is still accepted (Python compares with `>`).
    assert!(p.preprocess_rgb(&image::RgbImage::new(5600, 28)).is_ok());
    // An absurd pixel floor: a typed error, not an allocation abort.
    let greedy = ImageProcessor::new(ImageProcessorConfig {
        min_pixels: 1 << 60,
        max_pixels: u64::MAX,
        ..ImageProcessorConfig::default()
    })
    .unwrap();
    assert!(matches!(
        greedy.preprocess_rgb(&image::RgbImage::new(28, 28)),
        Err(ProcessorError::TooLarge { .. } | ProcessorError::Size(MappingError::Overflow { .. }))
    ));
}

#[test]
fn missing_or_broken_config_files_are_typed_errors() {
    let missing = ImageProcessor::from_preprocessor_config(fixture("no_such_file.json"));
    assert!(matches!(missing, Err(ProcessorError::ReadConfig { .. })));
    let broken = ImageProcessorConfig::from_json_str("{\"min_pixels\": \"many\"}");
    assert!(matches!(broken, Err(ProcessorError::ParseConfig { .. })));
}
