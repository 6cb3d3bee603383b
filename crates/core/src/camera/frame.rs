//! The frame every camera yields and the trait they implement.

use k::nalgebra::Isometry3;

use super::error::CameraError;
use crate::geometry::{DepthImage, Intrinsics};

pub use image::RgbImage;

/// One RGB-D observation. Depth is aligned to the colour image and uses its intrinsics. A frame
/// carries no ground truth: the simulator keeps its labels to itself (`sim::devices`), so nothing
/// downstream of a camera can lean on what a real camera does not give.
#[derive(Debug, Clone)]
pub struct Frame {
    /// The colour image, 8-bit RGB.
    pub rgb: RgbImage,
    /// Depth in metres per pixel, aligned to `rgb` (same size).
    pub depth: DepthImage,
    /// Pinhole intrinsics (and distortion) of the colour image, px.
    pub intrinsics: Intrinsics,
    /// Camera (OpenCV optical frame) → robot base.
    pub base_from_camera: Isometry3<f64>,
    /// Capture time, seconds (device or simulation clock).
    pub stamp_s: f64,
}

impl Frame {
    /// Checks that colour, depth and intrinsics describe the same image.
    pub fn validate(&self) -> Result<(), CameraError> {
        let (w, h) = (self.rgb.width() as usize, self.rgb.height() as usize);
        if (w, h) != (self.depth.width, self.depth.height) {
            return Err(CameraError::SizeMismatch {
                rgb_w: w,
                rgb_h: h,
                depth_w: self.depth.width,
                depth_h: self.depth.height,
            });
        }
        self.intrinsics.validate()?;
        if (self.intrinsics.width, self.intrinsics.height) != (w, h) {
            return Err(CameraError::SizeMismatch {
                rgb_w: w,
                rgb_h: h,
                depth_w: self.intrinsics.width,
                depth_h: self.intrinsics.height,
            });
        }
        Ok(())
    }
}

/// A source of frames.
pub trait Camera {
    /// Takes the next frame; blocks until one is available or the source fails.
    fn capture(&mut self) -> Result<Frame, CameraError>;
}

/// A boxed camera is a camera, so a source chosen at run time plugs in anywhere.
impl<C: Camera + ?Sized> Camera for Box<C> {
    fn capture(&mut self) -> Result<Frame, CameraError> {
        (**self).capture()
    }
}
