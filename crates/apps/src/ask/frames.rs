//! The video `pointact ask` reasons over: a folder of images, a recorded-frames folder, or a
//! live camera for some seconds, as frames with their times and the rate they were taken at.
//!
//! Why the rate matters: Embodied-R first brings a video to one frame per second
//! (`downsample_video`), then picks key frames among those; the rate decides which frames are
//! looked at. A folder of images has no clock, so its rate is given (default 1: every image
//! counts); a recording has capture times, and a live camera stamps its frames.

use std::path::{Path, PathBuf};

use image::RgbImage;

use crate::camera::replay::{read_frame, ReplayCamera};
use crate::camera::Camera;

/// Frames in order, with their times (seconds from the first) and the rate they came at.
#[derive(Debug, Clone)]
pub struct Video {
    /// The images, in order.
    pub frames: Vec<RgbImage>,
    /// Each frame's time in seconds, the first at 0.
    pub stamps_s: Vec<f64>,
    /// Frames per second (≥ 1 means `int(fps)`-th frames are kept by the 1 fps sampling).
    pub fps: f64,
    /// Where each frame came from (a file, a frame folder, or `camera #i`), for messages.
    pub names: Vec<String>,
}

/// Why frames cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum FramesError {
    /// The folder holds no image (or no frame folder).
    #[error("no frames in {dir}: expected images (.png, .jpg, .jpeg) or recorded frame folders")]
    NoFrames {
        /// The folder looked in.
        dir: PathBuf,
    },
    /// A file or folder could not be read.
    #[error("cannot read {path}: {reason}")]
    Unreadable {
        /// The file or folder.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// The camera failed while recording.
    #[error("the camera failed after {frames} frames: {reason}")]
    Camera {
        /// Frames taken before the failure.
        frames: usize,
        /// What the camera said.
        reason: String,
    },
}

fn is_image(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| matches!(e.to_ascii_lowercase().as_str(), "png" | "jpg" | "jpeg"))
}

/// The images of `dir` (`.png`, `.jpg`, `.jpeg`; hidden files and other files ignored) in name
/// order — zero-pad numbered names (`0009` before `0010`) — taken at `fps`.
pub fn frames_dir(dir: &Path, fps: f64) -> Result<Video, FramesError> {
    let unreadable = |path: &Path, e: &dyn std::fmt::Display| FramesError::Unreadable {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| unreadable(dir, &e))? {
        let path = entry.map_err(|e| unreadable(dir, &e))?.path();
        let hidden = path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('.'));
        if !hidden && path.is_file() && is_image(&path) {
            paths.push(path);
        }
    }
    if paths.is_empty() {
        return Err(FramesError::NoFrames {
            dir: dir.to_path_buf(),
        });
    }
    paths.sort();
    let fps = if fps.is_finite() && fps > 0.0 {
        fps
    } else {
        1.0
    };
    let mut frames = Vec::with_capacity(paths.len());
    for path in &paths {
        let image = crate::camera::image_file::read_rgb(path).map_err(|e| unreadable(path, &e))?;
        frames.push(image);
    }
    Ok(Video {
        stamps_s: (0..frames.len()).map(|i| i as f64 / fps).collect(),
        frames,
        fps,
        names: paths.iter().map(|p| p.display().to_string()).collect(),
    })
}

/// A recorded-frames folder (`pointact run --record`, `pointact capture`: one folder per frame
/// with `rgb.png` and `frame.toml`), its rate from the capture times.
pub fn record_dir(dir: &Path) -> Result<Video, FramesError> {
    let camera = ReplayCamera::open(dir).map_err(|e| FramesError::Unreadable {
        path: dir.to_path_buf(),
        reason: e.to_string(),
    })?;
    let mut frames = Vec::new();
    let mut stamps = Vec::new();
    let mut names = Vec::new();
    for frame_dir in camera.frame_dirs() {
        let frame = read_frame(frame_dir).map_err(|e| FramesError::Unreadable {
            path: frame_dir.clone(),
            reason: e.to_string(),
        })?;
        frames.push(frame.rgb);
        stamps.push(frame.stamp_s);
        names.push(frame_dir.display().to_string());
    }
    Ok(timed(frames, stamps, names))
}

/// Frames from `camera` until `seconds` have passed on its clock or on ours (a source whose
/// stamps stand still, e.g. a replay, would otherwise be recorded forever); at least two frames.
pub fn record_camera(camera: &mut dyn Camera, seconds: f64) -> Result<Video, FramesError> {
    let mut frames = Vec::new();
    let mut stamps = Vec::new();
    let started = std::time::Instant::now();
    loop {
        let frame = camera.capture().map_err(|e| FramesError::Camera {
            frames: frames.len(),
            reason: e.to_string(),
        })?;
        frames.push(frame.rgb);
        stamps.push(frame.stamp_s);
        let elapsed = stamps[stamps.len() - 1] - stamps[0];
        let done =
            elapsed >= seconds || elapsed.is_nan() || started.elapsed().as_secs_f64() >= seconds;
        if frames.len() >= 2 && done {
            break;
        }
    }
    let names = (0..frames.len()).map(|i| format!("camera #{i}")).collect();
    Ok(timed(frames, stamps, names))
}

/// Times from the first frame's, and the rate from the median step between frames (1 fps when
/// the stamps do not increase: a recording without a clock).
fn timed(frames: Vec<RgbImage>, stamps: Vec<f64>, names: Vec<String>) -> Video {
    let mut steps: Vec<f64> = stamps
        .windows(2)
        .map(|w| w[1] - w[0])
        .filter(|d| d.is_finite() && *d > 0.0)
        .collect();
    steps.sort_by(f64::total_cmp);
    let clocked = !steps.is_empty() && steps.len() + 1 == stamps.len();
    let (fps, stamps_s) = if clocked {
        let t0 = stamps[0];
        (
            1.0 / steps[steps.len() / 2],
            stamps.iter().map(|s| s - t0).collect(),
        )
    } else {
        (1.0, (0..stamps.len()).map(|i| i as f64).collect())
    };
    Video {
        frames,
        stamps_s,
        fps,
        names,
    }
}
