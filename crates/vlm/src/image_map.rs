//! From the pixels the model saw to the pixels of the camera image, and back.
//!
//! Qwen2.5-VL answers in absolute pixel coordinates of the image *after* its processor resized it
//! (`smart_resize`: both sides a multiple of 28, pixel count within a budget), not of the image we
//! sent. Every point must therefore be scaled per axis before it is lifted to 3D; skipping this is a
//! silent few-percent error on 640×480 frames and a large one on anything the processor downsizes.

/// Vision patch side in pixels (Qwen2.5-VL `patch_size`).
pub const PATCH_SIZE: u32 = 14;
/// Side of the square of patches merged into one LLM token (Qwen2.5-VL `merge_size`).
pub const MERGE_SIZE: u32 = 2;
/// The side multiple `smart_resize` enforces: `PATCH_SIZE * MERGE_SIZE` = 28.
pub const FACTOR: u32 = PATCH_SIZE * MERGE_SIZE;
/// `Qwen2VLImageProcessor`'s class default `min_pixels` (56·56).
pub const DEFAULT_MIN_PIXELS: u64 = 56 * 56;
/// `Qwen2VLImageProcessor`'s class default `max_pixels` (28·28·1280).
pub const DEFAULT_MAX_PIXELS: u64 = 28 * 28 * 1280;
/// The `max_pixels` that the Qwen2.5-VL-Instruct `preprocessor_config.json` sets (28·28·16384), i.e.
/// what `AutoProcessor.from_pretrained` loads unless the caller overrides it.
pub const PRETRAINED_MAX_PIXELS: u64 = 28 * 28 * 16384;
/// The `min_pixels` Embodied-R1's evaluation scripts pass (256·28·28).
pub const ER1_EVAL_MIN_PIXELS: u64 = 256 * 28 * 28;
/// The (smaller of the two) `max_pixels` Embodied-R1's evaluation scripts pass.
pub const ER1_EVAL_MAX_PIXELS: u64 = 1_605_632;
/// `smart_resize` rejects images whose long side exceeds this multiple of the short side.
pub const MAX_ASPECT_RATIO: u32 = 200;

/// Width and height of an image in pixels. Which image (original or model input) is said by the
/// name of the variable or field holding it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ImageSize {
    /// Columns (the range of `u` / `x`).
    pub width: u32,
    /// Rows (the range of `v` / `y`).
    pub height: u32,
}

impl ImageSize {
    /// Width first, like `(u, v)` = `(x, y)` everywhere else in the crate (note `smart_resize` takes
    /// height first, like the Python it mirrors).
    pub const fn new(width: u32, height: u32) -> Self {
        ImageSize { width, height }
    }

    /// Whether a continuous pixel coordinate lies on the image, edges included: `x` in `[0, width]`,
    /// `y` in `[0, height]`. NaN is never inside.
    pub fn contains(&self, [x, y]: [f64; 2]) -> bool {
        (0.0..=f64::from(self.width)).contains(&x) && (0.0..=f64::from(self.height)).contains(&y)
    }
}

impl std::fmt::Display for ImageSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x{}", self.width, self.height)
    }
}

/// Why an image cannot be resized for, or mapped from, the model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MappingError {
    /// `factor` was 0 (Python raises `ZeroDivisionError`).
    #[error("smart_resize factor must be positive, got 0")]
    ZeroFactor,
    /// A side is shorter than `factor`; transformers refuses these too.
    #[error(
        "image {height}x{width} (h x w) is too small: both sides must be at least {factor} pixels"
    )]
    TooSmall {
        /// Input height.
        height: u32,
        /// Input width.
        width: u32,
        /// The factor the sides were checked against.
        factor: u32,
    },
    /// The long side is more than [`MAX_ASPECT_RATIO`] times the short side.
    #[error("image {height}x{width} (h x w) has an aspect ratio above {MAX_ASPECT_RATIO}; crop it first")]
    AspectRatio {
        /// Input height.
        height: u32,
        /// Input width.
        width: u32,
    },
    /// The pixel budget is so small that a side would round down to 0. Python returns the 0 and
    /// fails later in the processor; we stop here with the reason.
    #[error("max_pixels {max_pixels} is too small for image {height}x{width} (h x w): a side would be 0")]
    BudgetTooSmall {
        /// Input height.
        height: u32,
        /// Input width.
        width: u32,
        /// The pixel budget given.
        max_pixels: u64,
    },
    /// The resized size does not fit in `u32` (an absurd `min_pixels`).
    #[error(
        "min_pixels {min_pixels} makes image {height}x{width} (h x w) resize beyond u32 pixels"
    )]
    Overflow {
        /// Input height.
        height: u32,
        /// Input width.
        width: u32,
        /// The pixel floor given.
        min_pixels: u64,
    },
    /// A map between images needs both to have area; a zero side would divide by zero.
    #[error("cannot map between images {original} (original) and {model} (model): a side is 0")]
    ZeroSize {
        /// The original (camera) image size.
        original: ImageSize,
        /// The model-input image size.
        model: ImageSize,
    },
}

/// The size Qwen2VLImageProcessor resizes an image of `height`×`width` to: `(height, width)`, both
/// multiples of `factor`, pixel count pulled into `[min_pixels, max_pixels]`.
///
/// Mirrors `smart_resize` in transformers 4.51.3 (`image_processing_qwen2_vl.py`, the version
/// Embodied-R1 pins) step for step, in the same float operations, so the model-input size, and with it
/// every coordinate the model emits, matches Python exactly. Python's `round` is round-half-to-even
/// (`70/28 = 2.5` rounds to 2, giving 56), hence `round_ties_even`. The only departures are typed
/// errors where Python raises, or returns a 0 side (`BudgetTooSmall`), or where the result would not
/// fit `u32` (`Overflow`). Exact float agreement holds while `height·width` and the pixel limits stay
/// below 2^53, i.e. for every real image.
pub fn smart_resize(
    height: u32,
    width: u32,
    factor: u32,
    min_pixels: u64,
    max_pixels: u64,
) -> Result<(u32, u32), MappingError> {
    if factor == 0 {
        return Err(MappingError::ZeroFactor);
    }
    if height < factor || width < factor {
        return Err(MappingError::TooSmall {
            height,
            width,
            factor,
        });
    }
    let (long, short) = (height.max(width), height.min(width));
    // Python compares the float `long / short` with 200; for u32 sides the integer test is the same.
    if u64::from(long) > u64::from(MAX_ASPECT_RATIO) * u64::from(short) {
        return Err(MappingError::AspectRatio { height, width });
    }

    let f = f64::from(factor);
    let (h, w) = (f64::from(height), f64::from(width));
    // round(x / f) <= x / f + 1 fits u64 for u32 inputs, and times a u32 factor fits u128.
    let round_by = |x: f64| u128::from((x / f).round_ties_even() as u64) * u128::from(factor);
    let (mut h_bar, mut w_bar) = (round_by(h), round_by(w));
    let area = u64::from(height) * u64::from(width);

    if h_bar * w_bar > u128::from(max_pixels) {
        let beta = (area as f64 / max_pixels as f64).sqrt();
        h_bar = u128::from((h / beta / f).floor() as u64) * u128::from(factor);
        w_bar = u128::from((w / beta / f).floor() as u64) * u128::from(factor);
        if h_bar == 0 || w_bar == 0 {
            return Err(MappingError::BudgetTooSmall {
                height,
                width,
                max_pixels,
            });
        }
    } else if h_bar * w_bar < u128::from(min_pixels) {
        let beta = (min_pixels as f64 / area as f64).sqrt();
        // `as u64` saturates on huge values; the u32 conversion below then reports the overflow.
        h_bar = u128::from((h * beta / f).ceil() as u64) * u128::from(factor);
        w_bar = u128::from((w * beta / f).ceil() as u64) * u128::from(factor);
    }

    match (u32::try_from(h_bar), u32::try_from(w_bar)) {
        (Ok(h_out), Ok(w_out)) => Ok((h_out, w_out)),
        _ => Err(MappingError::Overflow {
            height,
            width,
            min_pixels,
        }),
    }
}

/// The per-axis scale between the original image and the image the model saw.
///
/// Both sizes are known non-zero (checked on construction), so the maps never divide by zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelImageMap {
    original: ImageSize,
    model: ImageSize,
}

impl ModelImageMap {
    /// A map between an `original` image and the `model` input it was resized to.
    pub fn new(original: ImageSize, model: ImageSize) -> Result<Self, MappingError> {
        if original.width == 0 || original.height == 0 || model.width == 0 || model.height == 0 {
            return Err(MappingError::ZeroSize { original, model });
        }
        Ok(ModelImageMap { original, model })
    }

    /// The map Qwen2.5-VL's processor implies for an `original` image under the given pixel limits
    /// (factor [`FACTOR`]), e.g. `(DEFAULT_MIN_PIXELS, PRETRAINED_MAX_PIXELS)` for the stock
    /// `AutoProcessor`, or whatever the backend actually configures; the limits must be the ones the
    /// processor used or the map is wrong.
    pub fn for_qwen25vl(
        original: ImageSize,
        min_pixels: u64,
        max_pixels: u64,
    ) -> Result<Self, MappingError> {
        let (h, w) = smart_resize(
            original.height,
            original.width,
            FACTOR,
            min_pixels,
            max_pixels,
        )?;
        ModelImageMap::new(original, ImageSize::new(w, h))
    }

    /// The original (camera) image size.
    pub fn original(&self) -> ImageSize {
        self.original
    }

    /// The size of the image the model saw; model answers are in these pixels.
    pub fn model(&self) -> ImageSize {
        self.model
    }

    /// A point in model pixels to original pixels: `x·W_orig/W_model`, `y·H_orig/H_model`.
    /// Continuous coordinates, so the model image's right edge maps to the original's right edge.
    pub fn to_original(&self, [x_model_px, y_model_px]: [f64; 2]) -> [f64; 2] {
        [
            x_model_px * f64::from(self.original.width) / f64::from(self.model.width),
            y_model_px * f64::from(self.original.height) / f64::from(self.model.height),
        ]
    }

    /// A point in original pixels to model pixels (the inverse of [`Self::to_original`]), e.g. to
    /// express oracle ground truth the way the model would have answered.
    pub fn to_model(&self, [x, y]: [f64; 2]) -> [f64; 2] {
        [
            x * f64::from(self.model.width) / f64::from(self.original.width),
            y * f64::from(self.model.height) / f64::from(self.original.height),
        ]
    }
}
