//! AprilTag detection with `kornia-apriltag` (pure Rust, Apache-2.0; a port of the AprilTag 3 C
//! detector whose sub-pixel differences from the C library are listed in its `PARITY.md`).
//!
//! The crate reports each tag's quad corners in *image* order (clockwise from the top-right of the
//! picture), not in the tag's own order, and a homography from tag coordinates (`[-1, 1]²`, x to
//! the right and y down the printed tag) to pixels that already includes the decoded rotation.
//! The corners here come from that homography, so they follow the printed tag whatever way it is
//! turned in the image: top-left, top-right, bottom-right, bottom-left of the tag (see
//! [`super`] for the frame).

use kornia_apriltag::family::TagFamilyKind;
use kornia_apriltag::{AprilTagDecoder, DecodeTagsConfig};
use kornia_image::{Image, ImageSize};

use super::{TargetError, FAMILY};
use crate::camera::RgbImage;

/// One tag in an image.
#[derive(Debug, Clone, PartialEq)]
pub struct TagDetection {
    /// Always [`FAMILY`].
    pub family: &'static str,
    /// Tag id within the family.
    pub id: u16,
    /// Bits that had to be corrected to reach the code (0 on a clean image).
    pub hamming: u8,
    /// The AprilTag "decision margin": mean distance of the data bits from the black/white
    /// threshold, in grey levels. Clean, sharp tags give tens; below ~10 the decode is shaky.
    pub decision_margin: f32,
    /// Corners in pixels `(u, v)` (integer coordinates at pixel centres, as everywhere in the
    /// crate): top-left, top-right, bottom-right, bottom-left of the printed tag.
    pub corners: [[f64; 2]; 4],
    /// Image of the tag centre (the homography's, not the corners' mean).
    pub center: [f64; 2],
}

/// A detector for tag36h11, reusable across images (its buffers are sized on the first image and
/// rebuilt when the size changes).
pub struct TagDetector {
    config: DecodeTagsConfig,
    decoder: Option<(ImageSize, AprilTagDecoder)>,
}

impl std::fmt::Debug for TagDetector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TagDetector")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl TagDetector {
    /// tag36h11 at full resolution: the quad search runs on the full image (no decimation), since
    /// a calibration tag 0.5–1 m away covers only 40–100 pixels and its corners are what we
    /// measure.
    pub fn new() -> Result<Self, TargetError> {
        let mut config = DecodeTagsConfig::new(vec![TagFamilyKind::Tag36H11])
            .map_err(|e| TargetError::Detector(e.to_string()))?;
        config.downscale_factor = 1;
        Ok(TagDetector {
            config,
            decoder: None,
        })
    }

    /// Every tag36h11 tag in the image (possibly none).
    pub(crate) fn detect(&mut self, rgb: &RgbImage) -> Result<Vec<TagDetection>, TargetError> {
        let size = ImageSize {
            width: rgb.width() as usize,
            height: rgb.height() as usize,
        };
        let gray = Image::<u8, 1>::new(size, to_gray(rgb))
            .map_err(|e| TargetError::Detector(e.to_string()))?;
        let decoder = match &mut self.decoder {
            Some((s, d)) if *s == size => d,
            slot => {
                let d = AprilTagDecoder::new(self.config.clone(), size)
                    .map_err(|e| TargetError::Detector(e.to_string()))?;
                &mut slot.insert((size, d)).1
            }
        };
        decoder.clear();
        let found = decoder
            .decode(&gray)
            .map_err(|e| TargetError::Detector(e.to_string()))?;
        let mut out: Vec<TagDetection> = found
            .iter()
            .map(|d| {
                let at = |x: f32, y: f32| {
                    let p = d.quad.homography_project(x, y);
                    [
                        p.x as f64 - DETECTOR_PIXEL_OFFSET,
                        p.y as f64 - DETECTOR_PIXEL_OFFSET,
                    ]
                };
                TagDetection {
                    family: FAMILY,
                    id: d.id,
                    hamming: d.hamming,
                    decision_margin: d.decision_margin,
                    corners: [at(-1.0, -1.0), at(1.0, -1.0), at(1.0, 1.0), at(-1.0, 1.0)],
                    center: at(0.0, 0.0),
                }
            })
            .filter(|t| {
                t.corners
                    .iter()
                    .flatten()
                    .chain(&t.center)
                    .all(|v| v.is_finite())
            })
            .collect();
        out.sort_by(|a, b| {
            a.id.cmp(&b.id)
                .then(b.decision_margin.total_cmp(&a.decision_margin))
        });
        Ok(out)
    }

    /// The tag with id `id` (the most confident one if it appears twice); a typed error when no
    /// tag, or only other ids, are in the image.
    pub fn detect_id(&mut self, rgb: &RgbImage, id: u16) -> Result<TagDetection, TargetError> {
        let all = self.detect(rgb)?;
        if all.is_empty() {
            return Err(TargetError::NoTag);
        }
        let seen: Vec<u16> = all.iter().map(|t| t.id).collect();
        all.into_iter()
            .find(|t| t.id == id)
            .ok_or(TargetError::WrongId { expected: id, seen })
    }
}

/// The detector reports corners with pixel centres at `+0.5` (the AprilTag C library's
/// convention, which the port keeps: pixel `i` spans `[i, i + 1)`); ours are at integers.
/// Measured on rendered tags: the mean corner offset was (+0.50, +0.50) px before this shift.
pub(crate) const DETECTOR_PIXEL_OFFSET: f64 = 0.5;

/// Linear-light luminance (Rec. 709 weights on the decoded sRGB values), scaled to 8 bits.
///
/// Why linear: an edge pixel half covered by white reads 50 % of the white level only in linear
/// light. Camera images are gamma-encoded, which lifts partly covered pixels (50 % coverage of
/// white on black encodes to ~70 % of the range), so a detector thresholding or fitting gradients
/// on the encoded values sees the black square ~0.2 px smaller on every side; measured on
/// rendered tags this moved an 8 cm tag 2-4 mm closer at 0.5-0.8 m. Decoding first removes that.
fn to_gray(rgb: &RgbImage) -> Vec<u8> {
    let lut: Vec<f64> = (0..256)
        .map(|v| crate::sim::render::srgb_to_linear(v as f64 / 255.0))
        .collect();
    rgb.pixels()
        .map(|p| {
            let [r, g, b] = p.0.map(|c| lut[usize::from(c)]);
            let y = 0.2126 * r + 0.7152 * g + 0.0722 * b;
            (y * 255.0).round().clamp(0.0, 255.0) as u8
        })
        .collect()
}
