//! Frames in: colour + aligned depth + intrinsics + where the camera is, from the simulator
//! (`sim::devices::SimCamera`) or from recorded-frame folders ([`replay::ReplayCamera`], written by
//! [`record::write_frame`]) and from RealSense devices ([`realsense`], the device itself behind the
//! `realsense` feature). Everything downstream takes a
//! `Frame`, so a pointer or executor never knows which camera produced it.

pub mod realsense;
pub mod record;
pub mod replay;

use k::nalgebra::Isometry3;

use crate::geometry::{DepthImage, GeometryError, Intrinsics};

pub use image::RgbImage;

/// Ground-truth labels per pixel; only the simulator has them (the oracle pointer reads them).
#[derive(Debug, Clone, PartialEq)]
pub struct Segmentation {
    /// Instance id per pixel, row-major (see `sim` for the id scheme).
    pub instance: Vec<u16>,
    /// Functional-part id per pixel within its instance (0 = none).
    pub part: Vec<u8>,
}

/// One RGB-D observation. Depth is aligned to the colour image and uses its intrinsics.
#[derive(Debug, Clone)]
pub struct Frame {
    pub rgb: RgbImage,
    pub depth: DepthImage,
    pub intrinsics: Intrinsics,
    /// Camera (OpenCV optical frame) → robot base.
    pub base_from_camera: Isometry3<f64>,
    pub segmentation: Option<Segmentation>,
    /// Capture time, seconds (device or simulation clock).
    pub stamp_s: f64,
}

#[derive(Debug, thiserror::Error)]
pub enum CameraError {
    #[error("colour image is {rgb_w}x{rgb_h} but depth is {depth_w}x{depth_h}")]
    SizeMismatch {
        rgb_w: usize,
        rgb_h: usize,
        depth_w: usize,
        depth_h: usize,
    },
    #[error(transparent)]
    Geometry(#[from] GeometryError),
    #[error("camera: {0}")]
    Device(String),
    /// Reading recorded frames; the error names the file.
    #[error(transparent)]
    Replay(#[from] replay::ReplayError),
    /// Opening or reading a RealSense device.
    #[error(transparent)]
    RealSense(#[from] realsense::RealSenseError),
}

impl Frame {
    /// Checks that colour, depth, intrinsics and labels describe the same image.
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
        if let Some(s) = &self.segmentation {
            if s.instance.len() != w * h || s.part.len() != w * h {
                return Err(CameraError::Device(format!(
                    "segmentation has {} labels for a {w}x{h} image",
                    s.instance.len()
                )));
            }
        }
        Ok(())
    }
}

/// A source of frames.
pub trait Camera {
    fn capture(&mut self) -> Result<Frame, CameraError>;
}
