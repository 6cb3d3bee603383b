//! From a frame's pixels to 3D points: the one place a pixel becomes a point, so the executor and
//! the simulator's oracle (which must never see each other) lift pixels the same way.

use k::nalgebra::Point3;

use super::frame::Frame;
use crate::geometry::{robust_depth, GeometryError, RobustDepthOptions};

/// Why a pixel could not be lifted to a 3D point.
#[derive(Debug, thiserror::Error)]
pub enum LiftError {
    /// Too little valid depth in the window around the pixel, or the pixel is outside the image.
    #[error("no usable depth at pixel ({u:.1}, {v:.1}): {source}")]
    Depth {
        /// Column of the pixel, px.
        u: f64,
        /// Row of the pixel, px.
        v: f64,
        /// The robust-depth error.
        #[source]
        source: GeometryError,
    },
    /// Deprojecting the pixel failed (e.g. a distortion model that cannot be deprojected).
    #[error(transparent)]
    Geometry(#[from] GeometryError),
}

/// Base-frame point under pixel `px`, using a robust depth from the window around it.
pub fn lift(
    frame: &Frame,
    px: [f64; 2],
    opts: &RobustDepthOptions,
) -> Result<Point3<f64>, LiftError> {
    let d = robust_depth(&frame.depth, px[0], px[1], opts).map_err(|source| LiftError::Depth {
        u: px[0],
        v: px[1],
        source,
    })?;
    let p_cam = frame.intrinsics.deproject(px, d as f64)?;
    Ok(frame.base_from_camera * Point3::from(p_cam))
}

/// One answered pixel lifted to 3D, as `pointact point --camera` reports it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LiftedPoint {
    /// `[u, v]` in the frame's pixels.
    pub pixel: [f64; 2],
    /// Camera optical frame (x right, y down, z forward), metres; `None` without usable depth.
    pub camera: Option<[f64; 3]>,
    /// Robot base frame, metres (through the frame's `base_from_camera`).
    pub base: Option<[f64; 3]>,
    /// Why the point could not be lifted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// [`lift`] for each pixel, keeping failures per point (one pixel without depth does not hide the
/// others) and giving the camera-frame point too, so a report can be checked against either frame.
pub fn lift_points(
    frame: &Frame,
    pixels: &[[f64; 2]],
    opts: &RobustDepthOptions,
) -> Vec<LiftedPoint> {
    let camera_from_base = frame.base_from_camera.inverse();
    pixels
        .iter()
        .map(|&px| match lift(frame, px, opts) {
            Ok(base) => {
                let cam = camera_from_base * base;
                LiftedPoint {
                    pixel: px,
                    camera: Some([cam.x, cam.y, cam.z]),
                    base: Some([base.x, base.y, base.z]),
                    error: None,
                }
            }
            Err(e) => LiftedPoint {
                pixel: px,
                camera: None,
                base: None,
                error: Some(e.to_string()),
            },
        })
        .collect()
}
