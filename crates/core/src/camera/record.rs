//! Recorded frames on disk: `rgb.png` (8-bit RGB), `depth.png` (16-bit, metres = value × scale),
//! `camera.toml` (intrinsics and extrinsics), `frame.toml` (depth scale, capture time). `pointact run --record DIR` writes one
//! folder per capture; [`super::replay`] reads the same format back.

use std::path::Path;

use super::error::CameraError;
use super::frame::Frame;
use crate::geometry::calibration::CameraCalibration;
use crate::geometry::calibration::Extrinsics;

/// Depth unit of recorded frames: 0.1 mm (finer than RealSense's 1 mm, still 6.5 m of range).
pub(crate) const RECORD_DEPTH_SCALE_M: f64 = 1e-4;

/// One depth value (metres) in units of [`RECORD_DEPTH_SCALE_M`]: 0 for no depth (NaN, ±inf,
/// 0 or negative), otherwise rounded and clamped to `1..=65535` so a measured pixel never turns
/// into "no depth". The one conversion for everything that stores depth as u16 (recordings here,
/// the frame server's wire format in [`super::net`]).
pub(crate) fn depth_to_record_units(depth_m: f32) -> u16 {
    if depth_m.is_finite() && depth_m > 0.0 {
        (depth_m as f64 / RECORD_DEPTH_SCALE_M)
            .round()
            .clamp(1.0, 65535.0) as u16
    } else {
        0
    }
}

/// Writes `frame` into `dir` (created if missing) as `rgb.png`, `depth.png`, `camera.toml` and
/// `frame.toml`, the format [`super::replay`] reads.
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
        .map(|&d| depth_to_record_units(d))
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

/// The folder of frame `index` in a recording: `root/0000`, `root/0001`, … (zero-padded, so name
/// order is capture order, which is how [`super::replay::ReplayCamera`] plays them).
pub fn frame_dir(root: &Path, index: usize) -> std::path::PathBuf {
    root.join(format!("{index:04}"))
}

/// Proves that files can be created in `dir` (a probe file, removed again), so that a recording
/// that would fail does so before a robot moves, not after.
pub fn check_writable(dir: &Path) -> Result<(), CameraError> {
    let probe = dir.join(format!(".pointact-write-probe-{}", std::process::id()));
    std::fs::write(&probe, b"")
        .and_then(|()| std::fs::remove_file(&probe))
        .map_err(|e| CameraError::Device(format!("{} is not writable: {e}", dir.display())))
}

/// Makes `dir` ready for a new recording without ever mixing two: a missing or empty folder is
/// fine; a non-empty one is an error unless `force`, and then its numbered frame folders (names of
/// digits only) are removed so that no frame of the old recording plays after the new ones. Other
/// entries are left alone.
pub fn prepare_out_dir(dir: &Path, force: bool) -> Result<(), CameraError> {
    let io = |e: std::io::Error| CameraError::Device(format!("{}: {e}", dir.display()));
    if dir.exists() && !dir.is_dir() {
        return Err(CameraError::Device(format!(
            "{} exists and is not a folder",
            dir.display()
        )));
    }
    if dir.is_dir() {
        let entries: Vec<_> = std::fs::read_dir(dir)
            .map_err(io)?
            .collect::<Result<_, _>>()
            .map_err(io)?;
        if !entries.is_empty() && !force {
            return Err(CameraError::Device(format!(
                "{} is not empty ({} entries): choose another folder, or pass --force to replace its frames",
                dir.display(),
                entries.len()
            )));
        }
        for e in entries {
            let name = e.file_name();
            let numbered = name
                .to_str()
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
            if numbered && e.path().is_dir() {
                std::fs::remove_dir_all(e.path()).map_err(io)?;
            }
        }
    }
    std::fs::create_dir_all(dir).map_err(io)
}
