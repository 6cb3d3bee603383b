//! Recorded frames on disk: `rgb.png` (8-bit RGB), `depth.png` (16-bit, metres = value × scale),
//! `camera.toml` (intrinsics and extrinsics), `frame.toml` (depth scale, capture time). `pointact run --record DIR` writes one
//! folder per capture; [`super::replay`] reads the same format back.

use std::path::Path;

use super::{CameraError, Frame};
use crate::geometry::{CameraCalibration, Extrinsics};

/// Depth unit of recorded frames: 0.1 mm (finer than RealSense's 1 mm, still 6.5 m of range).
pub const RECORD_DEPTH_SCALE_M: f64 = 1e-4;

pub fn write_frame(frame: &Frame, dir: &Path) -> Result<(), CameraError> {
    let io = |e: std::io::Error| CameraError::Device(format!("{}: {e}", dir.display()));
    std::fs::create_dir_all(dir).map_err(io)?;
    frame
        .rgb
        .save(dir.join("rgb.png"))
        .map_err(|e| CameraError::Device(format!("{}: {e}", dir.join("rgb.png").display())))?;
    let raw: Vec<u16> = frame
        .depth
        .data
        .iter()
        .map(|d| {
            if d.is_finite() && *d > 0.0 {
                (*d as f64 / RECORD_DEPTH_SCALE_M)
                    .round()
                    .clamp(1.0, 65535.0) as u16
            } else {
                0
            }
        })
        .collect();
    let img = image::ImageBuffer::<image::Luma<u16>, Vec<u16>>::from_raw(
        frame.depth.width as u32,
        frame.depth.height as u32,
        raw,
    )
    .ok_or_else(|| CameraError::Device("depth buffer size mismatch".into()))?;
    img.save(dir.join("depth.png"))
        .map_err(|e| CameraError::Device(format!("{}: {e}", dir.join("depth.png").display())))?;
    let cal = CameraCalibration {
        intrinsics: frame.intrinsics.clone(),
        extrinsics: Extrinsics {
            camera: "recorded".into(),
            base_from_camera: frame.base_from_camera,
        },
    };
    std::fs::write(dir.join("camera.toml"), cal.to_toml_string()?).map_err(io)?;
    std::fs::write(
        dir.join("frame.toml"),
        format!(
            "# metres per unit of depth.png, and capture time\ndepth_scale_m = {RECORD_DEPTH_SCALE_M}\nstamp_s = {}\n",
            frame.stamp_s
        ),
    )
    .map_err(io)?;
    Ok(())
}
