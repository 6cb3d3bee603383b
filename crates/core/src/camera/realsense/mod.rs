//! Intel RealSense (D4xx, L515) as a [`Camera`](super::Camera).
//!
//! Two halves, so that the arithmetic is tested by every build and the device code only where
//! librealsense2 is there:
//! * this module (always compiled): the typed errors, the options, the temporal median over N
//!   depth frames, depth-unit scaling and the conversion of librealsense's `rs2_intrinsics` fields to
//!   our [`Intrinsics`];
//! * [`device`] (feature `realsense`, realsense-rust over librealsense2): opening the device,
//!   streaming colour + depth at 640×480, aligning depth to colour with librealsense's `align`
//!   processing block and reading intrinsics and depth scale from the device.
//!
//! librealsense's own conventions are kept: depth is raw `u16` units × the device's depth scale
//! (0.001 m on D4xx by default, 0.00025 m fixed on the L515: always read it, never assume it), and 0
//! means "no data".

#[cfg(feature = "realsense")]
pub mod device;

use std::time::Duration;

use k::nalgebra::Isometry3;

pub use crate::camera::error::{RealSenseError, NO_DEVICE_MESSAGE};
use crate::geometry::{DepthImage, Distortion, Intrinsics};

/// How to open and read the camera. The defaults match what the pointing pipeline expects.
#[derive(Debug, Clone)]
pub struct RealSenseOptions {
    /// Open the device with this serial number (default: the only/first one connected).
    pub serial: Option<String>,
    /// Colour and depth size; depth is aligned to colour, so both end up this size.
    pub width: usize,
    /// Image height, px (default 480; `width` defaults to 640).
    pub height: usize,
    /// Stream rate of both streams, frames per second (default 30).
    pub fps: usize,
    /// Frames per [`Camera::capture`](super::Camera::capture): their depth is combined by a
    /// per-pixel temporal median (zeros ignored) to suppress flicker; the colour is the last
    /// frame's. 1 = no median.
    pub median_frames: usize,
    /// Frames dropped after the pipeline starts, while auto-exposure settles.
    pub warmup_frames: usize,
    /// How long to wait for one frame before [`RealSenseError::Timeout`].
    pub timeout: Duration,
    /// Camera optical frame → robot base (from hand-eye calibration; identity = camera frame).
    pub base_from_camera: Isometry3<f64>,
}

impl Default for RealSenseOptions {
    fn default() -> Self {
        RealSenseOptions {
            serial: None,
            width: 640,
            height: 480,
            fps: 30,
            median_frames: 1,
            warmup_frames: 15,
            timeout: Duration::from_secs(5),
            base_from_camera: Isometry3::identity(),
        }
    }
}

impl RealSenseOptions {
    #[cfg_attr(not(feature = "realsense"), allow(dead_code))] // the device's code and the tests use it
    pub(crate) fn validate(&self) -> Result<(), RealSenseError> {
        let bad = |field, reason: String| Err(RealSenseError::InvalidOption { field, reason });
        if self.width == 0 || self.height == 0 {
            return bad(
                "width/height",
                format!("must be > 0, got {}x{}", self.width, self.height),
            );
        }
        if self.fps == 0 {
            return bad("fps", "must be > 0".into());
        }
        if self.median_frames == 0 {
            return bad("median_frames", "must be >= 1 (1 = no median)".into());
        }
        if self.timeout.is_zero() {
            return bad("timeout", "must be > 0".into());
        }
        Ok(())
    }
}

/// librealsense's `rs2_distortion` ordinals (`rs_types.h`, stable since 2.0; the `realsense`
/// feature's tests check them against realsense-sys's bindings). Without the feature only the
/// tests convert intrinsics (the conversion is checked without the library), hence the allow.
#[cfg_attr(not(feature = "realsense"), allow(dead_code))]
pub(crate) mod rs2_distortion {
    /// `RS2_DISTORTION_NONE`: a pure pinhole.
    pub const NONE: i32 = 0;
    /// `RS2_DISTORTION_MODIFIED_BROWN_CONRADY`: Brown-Conrady with the tangential terms applied
    /// to the radially distorted point.
    pub(crate) const MODIFIED_BROWN_CONRADY: i32 = 1;
    /// `RS2_DISTORTION_INVERSE_BROWN_CONRADY`: Brown-Conrady that undistorts instead of
    /// distorting.
    pub(crate) const INVERSE_BROWN_CONRADY: i32 = 2;
    /// `RS2_DISTORTION_FTHETA`: an F-theta fisheye model.
    pub(crate) const FTHETA: i32 = 3;
    /// `RS2_DISTORTION_BROWN_CONRADY`: the standard (OpenCV) Brown-Conrady model.
    pub(crate) const BROWN_CONRADY: i32 = 4;
    /// `RS2_DISTORTION_KANNALA_BRANDT4`: a four-coefficient Kannala-Brandt fisheye model.
    pub(crate) const KANNALA_BRANDT4: i32 = 5;
}

/// The fields of librealsense's `rs2_intrinsics`, as the C struct holds them (f32, `ppx`/`ppy`,
/// the model as its enum ordinal).
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(not(feature = "realsense"), allow(dead_code))]
pub(crate) struct Rs2IntrinsicsFields {
    /// Image width, px.
    pub width: i32,
    /// Image height, px.
    pub height: i32,
    /// Principal point, column, px.
    pub ppx: f32,
    /// Principal point, row, px.
    pub ppy: f32,
    /// Focal length along x, px.
    pub fx: f32,
    /// Focal length along y, px.
    pub fy: f32,
    /// Distortion model, an [`rs2_distortion`] ordinal.
    pub model: i32,
    /// Distortion coefficients `[k1, k2, p1, p2, k3]`.
    pub coeffs: [f32; 5],
}

/// Our [`Intrinsics`] from librealsense's, for the stream named `stream` (used in errors).
///
/// The numbers are widened f32 → f64 exactly (no rounding: the deprojection then matches
/// `rs2_deproject_pixel_to_point` run on the same f32 values). The coefficient order is the same
/// (`[k1, k2, p1, p2, k3]`). F-theta and Kannala-Brandt (fisheye streams, never colour on D4xx or
/// L515) are refused rather than silently treated as pinhole; the result is validated.
#[cfg_attr(not(feature = "realsense"), allow(dead_code))]
pub(crate) fn intrinsics_from_rs2(
    raw: &Rs2IntrinsicsFields,
    stream: &str,
) -> Result<Intrinsics, RealSenseError> {
    use rs2_distortion as d;
    let model = match raw.model {
        d::NONE => Distortion::None,
        d::MODIFIED_BROWN_CONRADY => Distortion::ModifiedBrownConrady,
        d::INVERSE_BROWN_CONRADY => Distortion::InverseBrownConrady,
        d::BROWN_CONRADY => Distortion::BrownConrady,
        other => {
            let model = match other {
                d::FTHETA => "f-theta".to_string(),
                d::KANNALA_BRANDT4 => "Kannala-Brandt".to_string(),
                n => format!("unknown (rs2_distortion {n})"),
            };
            return Err(RealSenseError::UnsupportedDistortion {
                stream: stream.into(),
                model,
            });
        }
    };
    let size = |v: i32, field: &'static str| {
        usize::try_from(v).map_err(|_| RealSenseError::InvalidOption {
            field,
            reason: format!("the device reported {v}"),
        })
    };
    let k = Intrinsics {
        width: size(raw.width, "intrinsics.width")?,
        height: size(raw.height, "intrinsics.height")?,
        fx: f64::from(raw.fx),
        fy: f64::from(raw.fy),
        cx: f64::from(raw.ppx),
        cy: f64::from(raw.ppy),
        model,
        coeffs: raw.coeffs.map(f64::from),
    };
    k.validate()?;
    Ok(k)
}

/// Per-pixel temporal median of `frames` (raw depth units, row-major, all the same length),
/// ignoring zeros (no data). A pixel with no valid sample stays 0. With an even number of valid
/// samples the median is the mean of the middle two, so the result is in (half-)units, as `f32`.
///
/// Why: RealSense depth flickers by a few units from frame to frame and drops pixels at edges;
/// the median of ~10 frames (what Embodied-R1.5's real-robot code does) removes both without
/// blurring across object boundaries the way a spatial filter would.
#[cfg_attr(not(feature = "realsense"), allow(dead_code))] // the device's code and the tests use it
pub(crate) fn temporal_median(frames: &[&[u16]]) -> Result<Vec<f32>, RealSenseError> {
    let first = frames
        .first()
        .ok_or_else(|| RealSenseError::Median("no frames".into()))?;
    if let Some((i, f)) = frames
        .iter()
        .enumerate()
        .find(|(_, f)| f.len() != first.len())
    {
        return Err(RealSenseError::Median(format!(
            "frame {i} has {} pixels, frame 0 has {}",
            f.len(),
            first.len()
        )));
    }
    let mut samples: Vec<u16> = Vec::with_capacity(frames.len());
    let out = (0..first.len())
        .map(|p| {
            samples.clear();
            samples.extend(frames.iter().map(|f| f[p]).filter(|&d| d != 0));
            if samples.is_empty() {
                return 0.0;
            }
            samples.sort_unstable();
            let n = samples.len();
            if n % 2 == 1 {
                f32::from(samples[n / 2])
            } else {
                (f32::from(samples[n / 2 - 1]) + f32::from(samples[n / 2])) / 2.0
            }
        })
        .collect();
    Ok(out)
}

/// Depth in metres from raw device units and the device's depth scale (metres per unit); 0 stays
/// 0 (no data). The arithmetic is f64 then rounded once to f32, so 1000 units × 0.001 is exactly
/// the f32 nearest 1.0 m.
#[cfg_attr(not(feature = "realsense"), allow(dead_code))] // the device's code and the tests use it
pub(crate) fn depth_from_units(
    width: usize,
    height: usize,
    units: &[f32],
    depth_scale_m: f32,
) -> Result<DepthImage, RealSenseError> {
    if !(depth_scale_m.is_finite() && depth_scale_m > 0.0) {
        return Err(RealSenseError::InvalidOption {
            field: "depth_scale_m",
            reason: format!("the device reported {depth_scale_m}; it must be finite and > 0"),
        });
    }
    let scale = f64::from(depth_scale_m);
    let data = units
        .iter()
        .map(|&u| (f64::from(u) * scale) as f32)
        .collect();
    Ok(DepthImage::new(width, height, data)?)
}
