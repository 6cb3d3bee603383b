//! A camera placed by a calibration file: a physical camera knows its pixels, not where it stands,
//! so every frame gets the base-from-camera pose that `pointact calibrate hand-eye` wrote.

use k::nalgebra::Isometry3;

use super::error::CameraError;
use super::frame::{Camera, Frame};

/// Wraps a camera and stamps every frame it captures with a fixed `base_from_camera`.
pub struct Calibrated<C> {
    /// The wrapped camera; its own `base_from_camera` is overwritten.
    pub camera: C,
    /// Camera (OpenCV optical frame) → robot base, from the calibration file.
    pub base_from_camera: Isometry3<f64>,
}

impl<C: Camera> Camera for Calibrated<C> {
    fn capture(&mut self) -> Result<Frame, CameraError> {
        let mut frame = self.camera.capture()?;
        frame.base_from_camera = self.base_from_camera;
        Ok(frame)
    }
}
