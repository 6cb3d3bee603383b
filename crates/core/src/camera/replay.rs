//! Recorded frames back in: [`read_frame`] is the inverse of [`super::record::write_frame`], and
//! [`ReplayCamera`] plays a folder of recordings through the [`Camera`] trait, so a pointer or
//! executor can be re-run on real captures without the camera attached.
//!
//! Every error names the file that caused it: a replay usually fails on a folder someone copied
//! by hand, and that person needs to know which file to look at.

use std::path::{Path, PathBuf};

use image::DynamicImage;
use serde::Deserialize;

use super::error::CameraError;
pub use super::error::ReplayError;
use super::frame::{Camera, Frame};
use super::record::RECORD_DEPTH_SCALE_M;
use crate::geometry::calibration::CameraCalibration;
use crate::geometry::DepthImage;

/// `frame.toml` as written by `write_frame`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FrameFile {
    /// Absent in folders written before the scale was recorded; those used
    /// [`RECORD_DEPTH_SCALE_M`], so it is the default.
    depth_scale_m: Option<f64>,
    stamp_s: f64,
}

/// Reads one frame folder written by [`super::record::write_frame`].
///
/// Depth value 0 is "no data" and stays 0 (invalid, see [`DepthImage`]). If `frame.toml` has no
/// `depth_scale_m` (older recordings), [`RECORD_DEPTH_SCALE_M`] is used: that was the only scale
/// ever written. The camera name in `camera.toml` is not part of a [`Frame`] and is dropped;
/// frames carry no ground-truth labels.
pub fn read_frame(dir: &Path) -> Result<Frame, CameraError> {
    std::fs::metadata(dir).map_err(|source| io(dir, source))?;
    let rgb_path = dir.join("rgb.png");
    let rgb = match decode_png(&rgb_path)? {
        DynamicImage::ImageRgb8(img) => img,
        other => return Err(pixel_format(&rgb_path, "8-bit RGB", &other).into()),
    };
    let depth_path = dir.join("depth.png");
    let raw = match decode_png(&depth_path)? {
        DynamicImage::ImageLuma16(img) => img,
        other => return Err(pixel_format(&depth_path, "16-bit gray", &other).into()),
    };
    if rgb.dimensions() != raw.dimensions() {
        return Err(ReplayError::DepthSize {
            file: depth_path,
            depth_w: raw.width(),
            depth_h: raw.height(),
            rgb_w: rgb.width(),
            rgb_h: rgb.height(),
        }
        .into());
    }
    let (w, h) = (rgb.width() as usize, rgb.height() as usize);

    let frame_path = dir.join("frame.toml");
    let meta = read_frame_file(&frame_path)?;
    let scale = meta.depth_scale_m.unwrap_or(RECORD_DEPTH_SCALE_M);
    let depth = DepthImage::from_u16(w, h, raw.as_raw(), scale as f32)?;

    let cam_path = dir.join("camera.toml");
    let text = crate::input::read_text(&cam_path, crate::input::MAX_CONFIG_BYTES)
        .map_err(|source| io(&cam_path, source))?;
    let cal = CameraCalibration::from_toml_str(&text, &cam_path)?;
    let k = cal.intrinsics;
    if (k.width, k.height) != (w, h) {
        return Err(ReplayError::IntrinsicsSize {
            file: cam_path,
            intrinsics_w: k.width,
            intrinsics_h: k.height,
            image_w: w,
            image_h: h,
        }
        .into());
    }
    let frame = Frame {
        rgb,
        depth,
        intrinsics: k,
        base_from_camera: cal.extrinsics.base_from_camera,
        stamp_s: meta.stamp_s,
    };
    frame.validate()?;
    Ok(frame)
}

fn io(file: &Path, source: std::io::Error) -> ReplayError {
    ReplayError::Io {
        file: file.to_path_buf(),
        source,
    }
}

fn decode_png(path: &Path) -> Result<DynamicImage, ReplayError> {
    let bytes = crate::input::read_bytes(path, super::image_file::MAX_DECODED_BYTES)
        .map_err(|source| io(path, source))?;
    image::load_from_memory_with_format(&bytes, image::ImageFormat::Png).map_err(|e| {
        ReplayError::Decode {
            file: path.to_path_buf(),
            message: e.to_string(),
        }
    })
}

fn pixel_format(file: &Path, expected: &'static str, found: &DynamicImage) -> ReplayError {
    ReplayError::PixelFormat {
        file: file.to_path_buf(),
        expected,
        found: format!("{:?}", found.color()),
    }
}

fn read_frame_file(path: &Path) -> Result<FrameFile, ReplayError> {
    let field = |field: &'static str, reason: String| ReplayError::Field {
        file: path.to_path_buf(),
        field,
        reason,
    };
    let text = crate::input::read_text(path, crate::input::MAX_CONFIG_BYTES)
        .map_err(|source| io(path, source))?;
    let meta: FrameFile = toml::from_str(&text).map_err(|e| field("", e.to_string()))?;
    if let Some(s) = meta.depth_scale_m {
        // Depth is kept in f32 metres: the scale must survive the cast (1e-50 becomes 0, 1e39
        // infinity) and keep 65535 units finite. No sensor's unit is above a metre.
        if !(f64::from(f32::MIN_POSITIVE)..=1.0).contains(&s) {
            return Err(field(
                "depth_scale_m",
                format!(
                    "must be in [{:e}, 1] metres per unit, got {s}",
                    f32::MIN_POSITIVE
                ),
            ));
        }
    }
    if !meta.stamp_s.is_finite() {
        return Err(field(
            "stamp_s",
            format!("must be finite, got {}", meta.stamp_s),
        ));
    }
    Ok(meta)
}

/// Plays recorded frames back as a [`Camera`].
///
/// Frames are read from disk at each [`Camera::capture`], so a long recording costs no memory and
/// a broken folder fails at the frame it belongs to, with its file named.
#[derive(Debug, Clone)]
pub struct ReplayCamera {
    root: PathBuf,
    frames: Vec<PathBuf>,
    next: usize,
    looping: bool,
}

impl ReplayCamera {
    /// Opens one frame folder (it holds `rgb.png`) or a folder of frame folders, played in name
    /// order: write them with zero-padded numbers (`0009` before `0010`). Hidden entries
    /// (`.name`) and plain files beside the frame folders are ignored.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, CameraError> {
        let root = dir.as_ref().to_path_buf();
        let frames = if root.join("rgb.png").is_file() {
            vec![root.clone()]
        } else {
            let entries = std::fs::read_dir(&root).map_err(|source| io(&root, source))?;
            let mut dirs = Vec::new();
            for entry in entries {
                let entry = entry.map_err(|source| io(&root, source))?;
                let hidden = entry.file_name().to_string_lossy().starts_with('.');
                if !hidden && entry.path().is_dir() {
                    dirs.push(entry.path());
                }
            }
            dirs.sort();
            dirs
        };
        if frames.is_empty() {
            return Err(ReplayError::NoFrames { dir: root }.into());
        }
        Ok(ReplayCamera {
            root,
            frames,
            next: 0,
            looping: false,
        })
    }

    /// Whether to start again at the first frame after the last (default: no, an error).
    pub fn looping(mut self, looping: bool) -> Self {
        self.looping = looping;
        self
    }

    /// The frame folders, in the order they are played.
    pub fn frame_dirs(&self) -> &[PathBuf] {
        &self.frames
    }
}

impl Camera for ReplayCamera {
    fn capture(&mut self) -> Result<Frame, CameraError> {
        if self.next == self.frames.len() {
            if !self.looping {
                return Err(ReplayError::Exhausted {
                    dir: self.root.clone(),
                    frames: self.frames.len(),
                }
                .into());
            }
            self.next = 0;
        }
        let frame = read_frame(&self.frames[self.next])?;
        self.next += 1;
        Ok(frame)
    }
}

/// Parses the CLI camera string `replay:DIR` into a [`ReplayCamera`] (not looping).
///
/// The other sources are opened elsewhere (`camera::open`; the simulator's camera needs its
/// world), so any other spec is an error that lists what exists.
pub fn from_spec(spec: &str) -> Result<ReplayCamera, CameraError> {
    ReplayCamera::open(parse_spec(spec)?)
}

/// The folder of a `replay:DIR` spec.
pub(crate) fn parse_spec(spec: &str) -> Result<std::path::PathBuf, CameraError> {
    let err = |reason: String| ReplayError::Spec {
        spec: spec.to_string(),
        reason,
    };
    let (scheme, rest) = spec.split_once(':').unwrap_or((spec, ""));
    match scheme {
        "replay" if rest.is_empty() => Err(err("replay needs a folder: replay:DIR".into()).into()),
        "replay" => Ok(rest.into()),
        "sim" | "realsense" | "tcp" => {
            Err(err(format!("`{scheme}` is not a recorded-frames source")).into())
        }
        _ => Err(err(format!("unknown scheme `{scheme}`")).into()),
    }
}
