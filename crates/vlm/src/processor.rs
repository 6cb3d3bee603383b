//! Qwen2.5-VL's image processor: an RGB image in, `pixel_values` + `image_grid_thw` out, equal to
//! transformers 4.51.3's (slow, PIL-based) `Qwen2VLImageProcessor`, which is what
//! `AutoProcessor` loads for `qwen2_5_vl` checkpoints (Embodied-R1 pins that version).
//!
//! The steps, in transformers' order:
//! 1. Convert to 8-bit RGB (PIL `convert("RGB")`: alpha dropped, grey replicated).
//! 2. [`smart_resize`] to sides that are multiples of
//!    `patch_size · merge_size` (28) with the pixel count in `[min_pixels, max_pixels]`.
//! 3. Resize to that size with Pillow's BICUBIC filter on the uint8 image ([`resize_bicubic_pil`];
//!    skipped when the size does not change, as Pillow then returns a copy).
//! 4. Rescale: `level as f64 · rescale_factor` (1/255), rounded to f32.
//! 5. Normalise in f32: `(x − mean) / std`, OpenAI-CLIP mean/std by default.
//! 6. Repeat the frame to `temporal_patch_size` (2) frames and cut it into patches: rows are ordered
//!    by `merge_size × merge_size` block (row-major over blocks), then row-major inside a block;
//!    each row holds `[channel][frame][py][px]`, i.e. `3·2·14·14 = 1176` values, which is the
//!    flattening of the vision tower's Conv3d kernel. `image_grid_thw = [1, H/14, W/14]`.
//!
//! # Agreement with Python
//! On an image whose sides are already multiples of 28 (no resize) the output is bit-identical to
//! transformers'. With a resize, [`resize_bicubic_pil`] reproduces Pillow's fixed-point algorithm,
//! including Pillow 13's choice of which pass runs first ([`PassOrder`]); it matched Pillow 13.0
//! bit for bit on the fixture (`crates/vlm/src/tests/vlm_processor.rs`) and on 410 random and hand-picked size
//! pairs (sides 1–5000 px, noise and patterns, up- and downscaling; a one-off check, not in the
//! suite). Pillow 12 and older always resample horizontally first, which moves a few levels near
//! sharp edges ([`PassOrder::HorizontalFirst`] reproduces that; the fixture README gives the
//! measured size of the difference).
//!
//! # What is not mirrored
//! * `size` in `preprocessor_config.json` is ignored, as 4.51.3 ignores it (its constructor replaces
//!   a valid `size` with the defaults and then applies `min_pixels`/`max_pixels`); only the top-level
//!   `min_pixels`/`max_pixels` count, else the class defaults.
//! * Only the configuration Qwen2.5-VL ships is supported: `do_resize`, `do_convert_rgb` true and
//!   `resample` 3 (BICUBIC); other values are a typed error rather than a silent difference.
//!   `do_rescale`, `do_normalize`, `rescale_factor`, mean and std are honoured.
//! * Images that are not 8-bit (16-bit PNG, float) are converted to 8-bit RGB by the `image`
//!   crate's rules, which need not match PIL's.
//! * Videos and batches of several images are not handled (single still images only).

use std::path::{Path, PathBuf};

use image::{DynamicImage, RgbImage};
use serde::Deserialize;

use super::image_map::{
    smart_resize, ImageSize, MappingError, ModelImageMap, DEFAULT_MAX_PIXELS, DEFAULT_MIN_PIXELS,
    PRETRAINED_MAX_PIXELS,
};

/// OpenAI-CLIP per-channel mean (transformers `OPENAI_CLIP_MEAN`), the processor default.
/// Written as f64 and rounded to f32, like numpy does with the Python floats.
pub const CLIP_MEAN: [f32; 3] = [
    0.48145466_f64 as f32,
    0.4578275_f64 as f32,
    0.40821073_f64 as f32,
];
/// OpenAI-CLIP per-channel standard deviation (transformers `OPENAI_CLIP_STD`).
pub const CLIP_STD: [f32; 3] = [
    0.26862954_f64 as f32,
    0.26130258_f64 as f32,
    0.27577711_f64 as f32,
];

/// PIL's `Image.Resampling.BICUBIC`, the only `resample` value supported.
const PIL_BICUBIC: u32 = 3;

/// Why an image or a preprocessor config cannot be processed.
#[derive(Debug, thiserror::Error)]
pub enum ProcessorError {
    /// The preprocessor config file could not be read.
    #[error("cannot read preprocessor config {path}: {source}")]
    ReadConfig {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The preprocessor config is not JSON of the expected shape.
    #[error("preprocessor config {origin} is not a valid Qwen2VLImageProcessor config: {source}")]
    ParseConfig {
        /// The file path, or `"<string>"`.
        origin: String,
        /// The parser's complaint.
        source: serde_json::Error,
    },
    /// A config value is out of range or asks for behaviour this port does not implement.
    #[error("preprocessor config: `{key}` {reason}")]
    InvalidConfig {
        /// The offending key.
        key: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The image has no pixels.
    #[error("image is empty ({width}x{height}); need at least 28x28 pixels")]
    EmptyImage {
        /// Width of the image given.
        width: u32,
        /// Height of the image given.
        height: u32,
    },
    /// `smart_resize` refused the image size (too small, aspect ratio above 200, budget too small).
    #[error(transparent)]
    Size(#[from] MappingError),
    /// The output buffer cannot be allocated (an absurd `min_pixels`).
    #[error("pixel_values for a {width}x{height} model image do not fit in memory")]
    TooLarge {
        /// Resized width.
        width: u32,
        /// Resized height.
        height: u32,
    },
}

/// The settings of `Qwen2VLImageProcessor`, validated. `Default` is the class defaults
/// (`min_pixels` 3136, `max_pixels` 1 003 520); [`Self::qwen25vl_instruct`] is what the
/// Qwen2.5-VL-Instruct `preprocessor_config.json` sets (and what Embodied-R1 inherits).
#[derive(Debug, Clone, PartialEq)]
pub struct ImageProcessorConfig {
    /// Lower bound of the resized pixel count.
    pub min_pixels: u64,
    /// Upper bound of the resized pixel count.
    pub max_pixels: u64,
    /// Side of a vision patch in pixels (14).
    pub patch_size: u32,
    /// Frames per temporal patch; a still image is repeated this many times (2).
    pub temporal_patch_size: u32,
    /// Side of the block of patches merged into one LLM token (2).
    pub merge_size: u32,
    /// Per-channel mean subtracted after rescaling.
    pub image_mean: [f32; 3],
    /// Per-channel standard deviation divided by after subtracting the mean.
    pub image_std: [f32; 3],
    /// Multiplier from uint8 levels to `[0, 1]` (1/255), applied in f64.
    pub rescale_factor: f64,
    /// Whether to rescale (transformers `do_rescale`).
    pub do_rescale: bool,
    /// Whether to normalise (transformers `do_normalize`).
    pub do_normalize: bool,
}

impl Default for ImageProcessorConfig {
    fn default() -> Self {
        ImageProcessorConfig {
            min_pixels: DEFAULT_MIN_PIXELS,
            max_pixels: DEFAULT_MAX_PIXELS,
            patch_size: 14,
            temporal_patch_size: 2,
            merge_size: 2,
            image_mean: CLIP_MEAN,
            image_std: CLIP_STD,
            rescale_factor: 1.0 / 255.0,
            do_rescale: true,
            do_normalize: true,
        }
    }
}

/// A per-channel value as transformers accepts it: one number for all channels, or one each.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum PerChannel {
    All(f64),
    Each(Vec<f64>),
}

/// The JSON file as written (every key optional; unknown keys such as `image_processor_type`,
/// `processor_class` or `size` are ignored).
#[derive(Debug, Deserialize)]
struct RawConfig {
    min_pixels: Option<u64>,
    max_pixels: Option<u64>,
    patch_size: Option<u32>,
    temporal_patch_size: Option<u32>,
    merge_size: Option<u32>,
    image_mean: Option<PerChannel>,
    image_std: Option<PerChannel>,
    rescale_factor: Option<f64>,
    do_rescale: Option<bool>,
    do_normalize: Option<bool>,
    do_resize: Option<bool>,
    do_convert_rgb: Option<bool>,
    resample: Option<u32>,
}

fn per_channel(key: &'static str, v: PerChannel) -> Result<[f32; 3], ProcessorError> {
    // Python builds `np.array(values, dtype=np.float32)` from Python floats: f64 rounded to f32.
    match v {
        PerChannel::All(x) => Ok([x as f32; 3]),
        PerChannel::Each(xs) => match *xs.as_slice() {
            [a, b, c] => Ok([a as f32, b as f32, c as f32]),
            _ => Err(ProcessorError::InvalidConfig {
                key,
                reason: format!("must have 3 values (one per RGB channel), got {}", xs.len()),
            }),
        },
    }
}

impl ImageProcessorConfig {
    /// The values of Qwen2.5-VL-Instruct's `preprocessor_config.json`: the class defaults but
    /// `max_pixels` = 12 845 056 (28·28·16384).
    pub fn qwen25vl_instruct() -> Self {
        ImageProcessorConfig {
            max_pixels: PRETRAINED_MAX_PIXELS,
            ..Self::default()
        }
    }

    /// Parses a `preprocessor_config.json` text; missing keys take the class defaults.
    pub fn from_json_str(json: &str) -> Result<Self, ProcessorError> {
        Self::parse(json, "<string>")
    }

    /// Reads a `preprocessor_config.json` (e.g. from a Hugging Face model folder).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ProcessorError> {
        let path = path.as_ref();
        let text = pointact_input::read_text(path, pointact_input::MAX_CONFIG_BYTES).map_err(
            |source| ProcessorError::ReadConfig {
                path: path.to_path_buf(),
                source,
            },
        )?;
        Self::parse(&text, &path.display().to_string())
    }

    fn parse(json: &str, origin: &str) -> Result<Self, ProcessorError> {
        let raw: RawConfig =
            serde_json::from_str(json).map_err(|source| ProcessorError::ParseConfig {
                origin: origin.to_owned(),
                source,
            })?;
        if raw.do_resize == Some(false) {
            return Err(unsupported("do_resize", "false"));
        }
        if raw.do_convert_rgb == Some(false) {
            return Err(unsupported("do_convert_rgb", "false"));
        }
        if let Some(r) = raw.resample.filter(|&r| r != PIL_BICUBIC) {
            return Err(unsupported("resample", &r.to_string()));
        }
        let d = Self::default();
        let cfg = ImageProcessorConfig {
            min_pixels: raw.min_pixels.unwrap_or(d.min_pixels),
            max_pixels: raw.max_pixels.unwrap_or(d.max_pixels),
            patch_size: raw.patch_size.unwrap_or(d.patch_size),
            temporal_patch_size: raw.temporal_patch_size.unwrap_or(d.temporal_patch_size),
            merge_size: raw.merge_size.unwrap_or(d.merge_size),
            image_mean: raw
                .image_mean
                .map(|v| per_channel("image_mean", v))
                .transpose()?
                .unwrap_or(d.image_mean),
            image_std: raw
                .image_std
                .map(|v| per_channel("image_std", v))
                .transpose()?
                .unwrap_or(d.image_std),
            rescale_factor: raw.rescale_factor.unwrap_or(d.rescale_factor),
            do_rescale: raw.do_rescale.unwrap_or(d.do_rescale),
            do_normalize: raw.do_normalize.unwrap_or(d.do_normalize),
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks the values the processor relies on (positive sizes, finite mean, non-zero std).
    pub(crate) fn validate(&self) -> Result<(), ProcessorError> {
        let positive = |key, v: u32| {
            if v == 0 {
                Err(ProcessorError::InvalidConfig {
                    key,
                    reason: "must be positive".into(),
                })
            } else {
                Ok(())
            }
        };
        positive("patch_size", self.patch_size)?;
        positive("temporal_patch_size", self.temporal_patch_size)?;
        positive("merge_size", self.merge_size)?;
        if self.patch_size.checked_mul(self.merge_size).is_none() {
            return Err(ProcessorError::InvalidConfig {
                key: "merge_size",
                reason: "times patch_size overflows".into(),
            });
        }
        let p = self.patch_size as usize;
        if p.checked_mul(p)
            .and_then(|pp| pp.checked_mul(3 * self.temporal_patch_size as usize))
            .is_none()
        {
            return Err(ProcessorError::InvalidConfig {
                key: "patch_size",
                reason: "3 · temporal_patch_size · patch_size² overflows".into(),
            });
        }
        if self.image_mean.iter().any(|m| !m.is_finite()) {
            return Err(ProcessorError::InvalidConfig {
                key: "image_mean",
                reason: format!("must be finite, got {:?}", self.image_mean),
            });
        }
        if self.image_std.iter().any(|s| !s.is_finite() || *s == 0.0) {
            return Err(ProcessorError::InvalidConfig {
                key: "image_std",
                reason: format!("must be finite and non-zero, got {:?}", self.image_std),
            });
        }
        if !self.rescale_factor.is_finite() {
            return Err(ProcessorError::InvalidConfig {
                key: "rescale_factor",
                reason: format!("must be finite, got {}", self.rescale_factor),
            });
        }
        Ok(())
    }

    /// The side multiple `smart_resize` enforces: `patch_size · merge_size`.
    pub(crate) fn factor(&self) -> u32 {
        self.patch_size * self.merge_size
    }

    /// Values per patch row of `pixel_values`: `3 · temporal_patch_size · patch_size²`.
    pub(crate) fn patch_dim(&self) -> usize {
        3 * self.temporal_patch_size as usize * (self.patch_size as usize).pow(2)
    }

    /// The f32 value each uint8 level of channel `c` becomes, with transformers' arithmetic:
    /// rescale in f64 then cast to f32, normalise in f32.
    fn level_table(&self) -> [[f32; 256]; 3] {
        let mut lut = [[0.0f32; 256]; 3];
        for (c, row) in lut.iter_mut().enumerate() {
            for (level, v) in row.iter_mut().enumerate() {
                let x = if self.do_rescale {
                    (level as f64 * self.rescale_factor) as f32
                } else {
                    level as f32
                };
                *v = if self.do_normalize {
                    (x - self.image_mean[c]) / self.image_std[c]
                } else {
                    x
                };
            }
        }
        lut
    }
}

fn unsupported(key: &'static str, value: &str) -> ProcessorError {
    ProcessorError::InvalidConfig {
        key,
        reason: format!(
            "= {value} is not supported (only the Qwen2.5-VL defaults: do_resize and \
             do_convert_rgb true, resample 3 = BICUBIC)"
        ),
    }
}

/// One preprocessed image: what the vision tower takes.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessedImage {
    /// Row-major `[num_patches, patch_dim]` (patch_dim = 1176 for Qwen2.5-VL), in the processor's
    /// merge-block patch order.
    pub pixel_values: Vec<f32>,
    /// `[t, h, w]` in patches: `[1, model_height/14, model_width/14]` for a still image.
    pub grid_thw: [u32; 3],
    /// Values per row of `pixel_values`.
    pub patch_dim: usize,
    /// Patches per side of a merged block (2); `grid_thw` products divided by its square give
    /// the number of `<|image_pad|>` tokens.
    pub merge_size: u32,
    /// The image as given.
    pub original_size: ImageSize,
    /// The image the model sees (after `smart_resize`); model answers are in these pixels.
    pub model_size: ImageSize,
}

impl ProcessedImage {
    /// Rows of `pixel_values`: `t · h · w`.
    pub fn num_patches(&self) -> usize {
        self.grid_thw.iter().map(|&g| g as usize).product()
    }

    /// How many `<|image_pad|>` tokens stand for this image in the prompt (what the HF processor
    /// expands the single pad to): `t · h · w / merge_size²`.
    pub fn num_image_tokens(&self) -> usize {
        self.num_patches() / (self.merge_size as usize).pow(2)
    }

    /// The map from the model's pixels back to the original image's.
    pub fn model_image_map(&self) -> Result<ModelImageMap, MappingError> {
        ModelImageMap::new(self.original_size, self.model_size)
    }
}

/// `Qwen2VLImageProcessor` for single still images. See the module docs for the steps.
#[derive(Debug, Clone)]
pub struct ImageProcessor {
    config: ImageProcessorConfig,
    lut: [[f32; 256]; 3],
}

impl Default for ImageProcessor {
    /// The processor as `Qwen2VLImageProcessor()` builds it (class defaults).
    fn default() -> Self {
        let config = ImageProcessorConfig::default();
        let lut = config.level_table();
        ImageProcessor { config, lut }
    }
}

impl ImageProcessor {
    /// A processor with a validated config.
    pub fn new(config: ImageProcessorConfig) -> Result<Self, ProcessorError> {
        config.validate()?;
        let lut = config.level_table();
        Ok(ImageProcessor { config, lut })
    }

    /// A processor from a `preprocessor_config.json`.
    pub fn from_preprocessor_config(path: impl AsRef<Path>) -> Result<Self, ProcessorError> {
        Self::new(ImageProcessorConfig::from_file(path)?)
    }

    /// The settings in use.
    pub fn config(&self) -> &ImageProcessorConfig {
        &self.config
    }

    /// The size an `original` image is resized to (what the model will see).
    pub(crate) fn model_size(&self, original: ImageSize) -> Result<ImageSize, ProcessorError> {
        if original.width == 0 || original.height == 0 {
            return Err(ProcessorError::EmptyImage {
                width: original.width,
                height: original.height,
            });
        }
        let (h, w) = smart_resize(
            original.height,
            original.width,
            self.config.factor(),
            self.config.min_pixels,
            self.config.max_pixels,
        )?;
        Ok(ImageSize::new(w, h))
    }

    /// Processes any image the `image` crate decoded, after converting it to 8-bit RGB.
    pub fn preprocess(&self, image: &DynamicImage) -> Result<ProcessedImage, ProcessorError> {
        match image {
            DynamicImage::ImageRgb8(rgb) => self.preprocess_rgb(rgb),
            other => self.preprocess_rgb(&other.to_rgb8()),
        }
    }

    /// Processes an 8-bit RGB image.
    pub fn preprocess_rgb(&self, image: &RgbImage) -> Result<ProcessedImage, ProcessorError> {
        let original = ImageSize::new(image.width(), image.height());
        let model = self.model_size(original)?;
        let p = self.config.patch_size as usize;
        let m = self.config.merge_size as usize;
        let tps = self.config.temporal_patch_size as usize;
        let (w, h) = (model.width as usize, model.height as usize);
        let (gh, gw) = (h / p, w / p);
        let patch_dim = self.config.patch_dim();
        let too_large = || ProcessorError::TooLarge {
            width: model.width,
            height: model.height,
        };
        // Sizes with checked arithmetic, and the two big buffers reserved before any work, so an
        // absurd `min_pixels` is an error rather than an overflow or an allocation abort.
        let plane_len = w
            .checked_mul(h)
            .and_then(|n| n.checked_mul(3))
            .ok_or_else(too_large)?;
        let len = (gh * gw).checked_mul(patch_dim).ok_or_else(too_large)?;
        let mut planes: Vec<f32> = Vec::new();
        planes
            .try_reserve_exact(plane_len)
            .map_err(|_| too_large())?;
        let mut out: Vec<f32> = Vec::new();
        out.try_reserve_exact(len).map_err(|_| too_large())?;

        let resized;
        let img = if model == original {
            image
        } else {
            resized = resize_bicubic_pil(image, model.width, model.height);
            &resized
        };

        // Normalised planes [c][y][x]; every level maps through the table built with
        // transformers' arithmetic, so values are bit-identical to numpy's.
        for c in 0..3 {
            planes.extend(img.pixels().map(|px| self.lut[c][usize::from(px.0[c])]));
        }
        // Patch rows: merge blocks row-major, then patches row-major inside a block.
        // Columns: [channel][frame][py][px]; every frame is the same image.
        for bh in 0..gh / m {
            for bw in 0..gw / m {
                for mh in 0..m {
                    for mw in 0..m {
                        let (y0, x0) = ((bh * m + mh) * p, (bw * m + mw) * p);
                        for c in 0..3 {
                            let plane = &planes[c * w * h..(c + 1) * w * h];
                            for _frame in 0..tps {
                                for py in 0..p {
                                    let start = (y0 + py) * w + x0;
                                    out.extend_from_slice(&plane[start..start + p]);
                                }
                            }
                        }
                    }
                }
            }
        }
        debug_assert_eq!(out.len(), len);
        Ok(ProcessedImage {
            pixel_values: out,
            grid_thw: [1, gh as u32, gw as u32],
            patch_dim,
            merge_size: self.config.merge_size,
            original_size: original,
            model_size: model,
        })
    }
}

/// Fractional bits of Pillow's fixed-point resampling coefficients for 8-bit images (32 − 8 − 2).
const PRECISION_BITS: u32 = 22;
/// Half-width of the bicubic kernel in source pixels at scale 1.
const BICUBIC_SUPPORT: f64 = 2.0;

/// Keys' cubic convolution kernel with a = −0.5 (Catmull-Rom), Pillow's BICUBIC.
fn bicubic(x: f64) -> f64 {
    const A: f64 = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        (((x - 5.0) * x + 8.0) * x - 4.0) * A
    } else {
        0.0
    }
}

/// Fixed-point weights of a 1-D resampling from `in_size` to `out_size` samples.
struct AxisWeights {
    /// Taps per output sample (room reserved; `spans` says how many are used).
    ksize: usize,
    /// For each output sample: first source index and number of taps.
    spans: Vec<(usize, usize)>,
    /// `out_size × ksize` weights scaled by 2^PRECISION_BITS.
    weights: Vec<i32>,
}

impl AxisWeights {
    fn new(in_size: u32, out_size: u32) -> Self {
        let scale = f64::from(in_size) / f64::from(out_size);
        // Downscaling widens the kernel by the scale (antialiasing); upscaling keeps it.
        let filterscale = scale.max(1.0);
        let support = BICUBIC_SUPPORT * filterscale;
        let ksize = support.ceil() as usize * 2 + 1;
        let inv = 1.0 / filterscale;
        let mut spans = Vec::with_capacity(out_size as usize);
        let mut weights = vec![0i32; out_size as usize * ksize];
        let mut w = vec![0.0f64; ksize];
        for (xx, row) in weights.chunks_exact_mut(ksize).enumerate() {
            let center = (xx as f64 + 0.5) * scale;
            // `as i64` truncates toward zero, like the C `(int)` cast Pillow uses.
            let xmin = ((center - support + 0.5) as i64).max(0);
            let xmax = ((center + support + 0.5) as i64).min(i64::from(in_size));
            let count = usize::try_from(xmax - xmin).unwrap_or(0).min(ksize);
            let mut total = 0.0;
            for (x, wx) in w.iter_mut().enumerate().take(count) {
                *wx = bicubic(((x as i64 + xmin) as f64 - center + 0.5) * inv);
                total += *wx;
            }
            for (k, wx) in row.iter_mut().zip(&w).take(count) {
                let v = if total != 0.0 { wx / total } else { *wx };
                let scaled = v * f64::from(1u32 << PRECISION_BITS);
                // Round half away from zero, then truncate (Pillow's `(int)(x ± 0.5)`).
                *k = if scaled < 0.0 {
                    (scaled - 0.5) as i32
                } else {
                    (scaled + 0.5) as i32
                };
            }
            spans.push((xmin as usize, count));
        }
        AxisWeights {
            ksize,
            spans,
            weights,
        }
    }

    /// Weighted sum of `count` samples read by `sample(i)` for output `o`, rounded and clamped
    /// to a uint8 level.
    #[inline]
    fn apply(&self, o: usize, sample: impl Fn(usize) -> u8) -> u8 {
        let (start, count) = self.spans[o];
        let k = &self.weights[o * self.ksize..o * self.ksize + count];
        let mut acc: i64 = 1 << (PRECISION_BITS - 1);
        for (i, &kw) in k.iter().enumerate() {
            acc += i64::from(sample(start + i)) * i64::from(kw);
        }
        (acc >> PRECISION_BITS).clamp(0, 255) as u8
    }
}

/// Which resampling pass Pillow runs first when both axes change size. The passes round to uint8
/// in between, so the order changes some output levels (by a few levels next to sharp edges).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PassOrder {
    /// Pillow 13 and later (python-pillow/Pillow PR #9549): vertical first when the height shrinks
    /// by more than twice as many pixels as the width does (`in_h − out_h > 2·(in_w − out_w)`,
    /// so always when only the height shrinks, e.g. 640×480 → 644×476), else horizontal first.
    /// This is what the committed golden data was made with.
    #[default]
    Pillow13,
    /// Pillow 12 and earlier: always horizontal first. What a 2025 environment pinned to
    /// transformers 4.51.3 (Embodied-R1's training and evaluation) would most likely have used.
    HorizontalFirst,
}

impl PassOrder {
    fn vertical_first(self, (in_w, in_h): (u32, u32), (out_w, out_h): (u32, u32)) -> bool {
        match self {
            PassOrder::HorizontalFirst => false,
            PassOrder::Pillow13 => {
                out_h < in_h
                    && i64::from(in_h) - i64::from(out_h) > 2 * (i64::from(in_w) - i64::from(out_w))
            }
        }
    }
}

/// Resizes an 8-bit RGB image to `width × height` exactly as Pillow's
/// `Image.resize(size, Image.BICUBIC)` does (8-bit path, no `reducing_gap`, which is how
/// transformers calls it), with Pillow 13's pass order; see [`resize_bicubic_pil_with`].
pub fn resize_bicubic_pil(src: &RgbImage, width: u32, height: u32) -> RgbImage {
    resize_bicubic_pil_with(src, width, height, PassOrder::Pillow13)
}

/// [`resize_bicubic_pil`] with an explicit [`PassOrder`].
///
/// The filter is Keys' cubic convolution with a = −0.5 — the same kernel as the `image` crate's
/// `FilterType::CatmullRom` — with Pillow's conventions around it: sample centres at
/// `(i + 0.5)·scale`, the kernel stretched by the scale when downscaling (antialiasing), weights
/// normalised to sum 1 and rounded to 22-bit fixed point, two separable passes, each rounded and
/// clamped to uint8, and an axis whose size does not change is not resampled at all (no pass, so
/// no rounding). The `image` crate's resize uses the same kernel but float weights, an f32
/// intermediate and always the vertical pass first, so it moves some levels against Pillow (see
/// the fixture README for measurements); this function matched Pillow 13.0 bit for bit on the
/// fixture and on randomised sizes. An empty target gives an empty image, an empty source a black
/// one; nothing panics.
pub fn resize_bicubic_pil_with(
    src: &RgbImage,
    width: u32,
    height: u32,
    order: PassOrder,
) -> RgbImage {
    let (in_w, in_h) = src.dimensions();
    if (in_w, in_h) == (width, height) {
        return src.clone();
    }
    if width == 0 || height == 0 {
        return RgbImage::new(width, height);
    }
    let raw = src.as_raw();
    let data = match (width != in_w, height != in_h) {
        (true, false) => resample_rows(raw, in_w, in_h, width),
        (false, true) => resample_columns(raw, in_w, in_h, height),
        _ if order.vertical_first((in_w, in_h), (width, height)) => {
            let tmp = resample_columns(raw, in_w, in_h, height);
            resample_rows(&tmp, in_w, height, width)
        }
        _ => {
            let tmp = resample_rows(raw, in_w, in_h, width);
            resample_columns(&tmp, width, in_h, height)
        }
    };
    // The buffer is exactly width·height·3 bytes by construction.
    RgbImage::from_raw(width, height, data).unwrap_or_else(|| RgbImage::new(width, height))
}

/// Horizontal pass: `rgb` is `w × h`, the result `out_w × h`.
fn resample_rows(rgb: &[u8], w: u32, h: u32, out_w: u32) -> Vec<u8> {
    let ax = AxisWeights::new(w, out_w);
    let (iw, ow) = (w as usize, out_w as usize);
    let mut out = vec![0u8; ow * h as usize * 3];
    for (row_in, row_out) in rgb.chunks_exact(iw * 3).zip(out.chunks_exact_mut(ow * 3)) {
        for (xx, px) in row_out.chunks_exact_mut(3).enumerate() {
            for (c, v) in px.iter_mut().enumerate() {
                *v = ax.apply(xx, |x| row_in[x * 3 + c]);
            }
        }
    }
    out
}

/// Vertical pass: `rgb` is `w × h`, the result `w × out_h`.
fn resample_columns(rgb: &[u8], w: u32, h: u32, out_h: u32) -> Vec<u8> {
    let ax = AxisWeights::new(h, out_h);
    let stride = w as usize * 3;
    let mut out = vec![0u8; stride * out_h as usize];
    for (yy, row_out) in out.chunks_exact_mut(stride).enumerate() {
        for (i, v) in row_out.iter_mut().enumerate() {
            *v = ax.apply(yy, |y| rgb[y * stride + i]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bicubic_kernel_values() {
        assert_eq!(bicubic(0.0), 1.0);
        assert_eq!(bicubic(1.0), 0.0);
        assert_eq!(bicubic(-2.0), 0.0);
        assert_eq!(bicubic(0.5), 0.5625);
        assert_eq!(bicubic(1.5), -0.0625);
    }

    #[test]
    fn weights_sum_to_one_in_fixed_point() {
        for (i, o) in [
            (300, 308),
            (200, 196),
            (640, 320),
            (13, 97),
            (97, 13),
            (5, 1),
        ] {
            let ax = AxisWeights::new(i, o);
            for (oi, &(start, count)) in ax.spans.iter().enumerate() {
                assert!(start + count <= i as usize);
                let s: i64 = ax.weights[oi * ax.ksize..oi * ax.ksize + count]
                    .iter()
                    .map(|&k| i64::from(k))
                    .sum();
                assert!(
                    (s - (1 << PRECISION_BITS)).abs() <= count as i64,
                    "{i}->{o}: {s}"
                );
            }
        }
    }

    #[test]
    fn resize_keeps_constant_images_and_identity() {
        let img = RgbImage::from_pixel(37, 23, image::Rgb([10, 128, 255]));
        for (w, h) in [(56, 28), (28, 56), (12, 7), (37, 60)] {
            let r = resize_bicubic_pil(&img, w, h);
            assert_eq!(r.dimensions(), (w, h));
            assert!(r.pixels().all(|p| p.0 == [10, 128, 255]));
        }
        let grad = RgbImage::from_fn(30, 20, |x, y| image::Rgb([x as u8 * 8, y as u8 * 12, 7]));
        assert_eq!(resize_bicubic_pil(&grad, 30, 20), grad);
        assert_eq!(resize_bicubic_pil(&grad, 0, 5).dimensions(), (0, 5));
    }

    #[test]
    fn pillow13_pass_order_rule() {
        let vf = |i, o| PassOrder::Pillow13.vertical_first(i, o);
        assert!(vf((300, 200), (308, 196))); // only the height shrinks
        assert!(vf((640, 480), (644, 476)));
        assert!(vf((117, 157), (65, 48))); // 109 > 2 * 52
        assert!(!vf((111, 81), (95, 49))); // 32 == 2 * 16: not more than twice
        assert!(!vf((81, 89), (46, 25))); // 64 < 2 * 35
        assert!(!vf((50, 80), (100, 90))); // both grow
        assert!(!vf((200, 300), (196, 308))); // only the width shrinks
        assert!(!PassOrder::HorizontalFirst.vertical_first((300, 200), (308, 196)));
    }

    #[test]
    fn patch_order_and_columns() {
        // A 56x56 image: 4x4 patches of 14, one 2x2 merge block per quadrant. Each pixel encodes
        // its position so the expected element of pixel_values can be computed independently.
        let img = RgbImage::from_fn(56, 56, |x, y| {
            image::Rgb([(x * 4) as u8, (y * 4) as u8, ((x + y) % 256) as u8])
        });
        let cfg = ImageProcessorConfig {
            do_normalize: false,
            do_rescale: false,
            ..ImageProcessorConfig::default()
        };
        let proc = ImageProcessor::new(cfg).unwrap();
        let out = proc.preprocess_rgb(&img).unwrap();
        assert_eq!(out.grid_thw, [1, 4, 4]);
        assert_eq!(out.patch_dim, 1176);
        assert_eq!(out.num_patches(), 16);
        assert_eq!(out.num_image_tokens(), 4);
        assert_eq!(out.pixel_values.len(), 16 * 1176);
        for row in 0..16 {
            // row = block_row*8 + block_col*4 + in_block_row*2 + in_block_col
            let (b, q) = (row / 4, row % 4);
            let (pr, pc) = ((b / 2) * 2 + q / 2, (b % 2) * 2 + q % 2);
            for col in 0..1176 {
                let (c, t, py, px) = (col / 392, (col / 196) % 2, (col / 14) % 14, col % 14);
                let _ = t; // both frames are the same image
                let (x, y) = (pc * 14 + px, pr * 14 + py);
                let want = img.get_pixel(x as u32, y as u32).0[c] as f32;
                assert_eq!(
                    out.pixel_values[row * 1176 + col],
                    want,
                    "row {row} col {col}"
                );
            }
        }
    }

    #[test]
    fn level_table_matches_python_arithmetic() {
        // (0 * (1/255) -> 0.0) and (255 * (1/255) -> 1.0) in f64, then the f32 normalisation.
        let lut = ImageProcessorConfig::default().level_table();
        assert_eq!(lut[0][0], (0.0f32 - CLIP_MEAN[0]) / CLIP_STD[0]);
        assert_eq!(lut[2][255], (1.0f32 - CLIP_MEAN[2]) / CLIP_STD[2]);
        assert!(lut.iter().all(|ch| ch.windows(2).all(|w| w[0] < w[1])));
    }

    #[test]
    fn config_parsing() {
        let cfg = ImageProcessorConfig::from_json_str(
            r#"{"min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14,
                "temporal_patch_size": 2, "merge_size": 2,
                "image_mean": [0.48145466, 0.4578275, 0.40821073],
                "image_std": [0.26862954, 0.26130258, 0.27577711],
                "image_processor_type": "Qwen2VLImageProcessor",
                "processor_class": "Qwen2_5_VLProcessor"}"#,
        )
        .unwrap();
        assert_eq!(cfg, ImageProcessorConfig::qwen25vl_instruct());
        // Missing keys: class defaults. `size` is ignored like in transformers 4.51.3.
        let cfg = ImageProcessorConfig::from_json_str(
            r#"{"size": {"shortest_edge": 100, "longest_edge": 200}, "image_mean": 0.5}"#,
        )
        .unwrap();
        assert_eq!(cfg.min_pixels, DEFAULT_MIN_PIXELS);
        assert_eq!(cfg.max_pixels, DEFAULT_MAX_PIXELS);
        assert_eq!(cfg.image_mean, [0.5; 3]);
        for bad in [
            r#"{"image_std": [0.2, 0.0, 0.2]}"#,
            r#"{"image_mean": [0.2, 0.2]}"#,
            r#"{"patch_size": 0}"#,
            r#"{"resample": 2}"#,
            r#"{"do_resize": false}"#,
        ] {
            assert!(
                matches!(
                    ImageProcessorConfig::from_json_str(bad),
                    Err(ProcessorError::InvalidConfig { .. })
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            ImageProcessorConfig::from_json_str("{\"min_pixels\": -1}"),
            Err(ProcessorError::ParseConfig { .. })
        ));
    }
}
