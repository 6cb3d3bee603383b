//! The one error type of the geometry module.
//!
//! Every variant carries the numbers a user needs to act on it (sizes, counts, the file and the
//! field), because these errors usually surface far from where the bad data came in: a camera
//! driver, a recorded-frames folder or a hand-edited calibration file.

use std::path::PathBuf;

use super::distortion::Distortion;

/// Errors of the geometry module.
#[derive(Debug, thiserror::Error)]
pub enum GeometryError {
    /// Intrinsics that cannot describe a camera (zero focal length, empty image, NaN, ...).
    #[error("invalid intrinsics: `{field}` {reason}")]
    InvalidIntrinsics { field: &'static str, reason: String },

    /// librealsense asserts on this direction for this model (a forward-distorted image cannot be
    /// deprojected); we refuse instead of returning an undistorted-as-if-pinhole ray.
    #[error(
        "distortion model {model:?} cannot be deprojected (librealsense only projects with it)"
    )]
    NotDeprojectable { model: Distortion },

    /// Projection of a point on or behind the camera plane (z <= 0) has no pixel.
    #[error("cannot project a point with z = {z} m: it is not in front of the camera")]
    BehindCamera { z: f64 },

    /// An input or a result that is NaN or infinite.
    #[error("non-finite value in {what}")]
    NonFinite { what: &'static str },

    /// A pose or end-effector delta that came from outside and is not one (wrong length,
    /// non-finite, a quaternion that is not unit length).
    #[error("invalid pose: {0}")]
    InvalidPose(String),

    /// A pixel outside the image.
    #[error("pixel ({u}, {v}) is outside the {width}x{height} image")]
    PixelOutsideImage {
        u: f64,
        v: f64,
        width: usize,
        height: usize,
    },

    /// Not enough valid depth around a pixel for a trustworthy estimate.
    #[error(
        "too little valid depth around pixel ({u}, {v}): {valid} of {total} pixels valid, \
         need a fraction of at least {min_fraction}"
    )]
    TooFewValidDepth {
        u: f64,
        v: f64,
        valid: usize,
        total: usize,
        min_fraction: f32,
    },

    /// The depth image and the intrinsics describe different image sizes.
    #[error(
        "depth image is {depth_width}x{depth_height} but the intrinsics are for \
         {intrinsics_width}x{intrinsics_height} (align depth to the stream the intrinsics belong to)"
    )]
    SizeMismatch {
        depth_width: usize,
        depth_height: usize,
        intrinsics_width: usize,
        intrinsics_height: usize,
    },

    /// The pixel buffer length does not match width x height.
    #[error("depth buffer holds {got} values but {width}x{height} needs {expected}")]
    BufferLength {
        width: usize,
        height: usize,
        expected: usize,
        got: usize,
    },

    /// An option value outside its allowed range.
    #[error("invalid option `{field}`: {reason}")]
    InvalidOption { field: &'static str, reason: String },

    /// Plane fitting found too few points on any candidate plane.
    #[error("plane fit: best plane has {inliers} inliers among {points} points, need {required}")]
    TooFewInliers {
        inliers: usize,
        required: usize,
        points: usize,
    },

    /// Too few points (or waypoints) for the requested computation.
    #[error("{what}: got {got}, need at least {needed}")]
    TooFew {
        what: &'static str,
        got: usize,
        needed: usize,
    },

    /// A calibration file that could not be read.
    #[error("{}: cannot read: {source}", file.display())]
    Io {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A calibration file that is not valid TOML or does not have the expected shape.
    #[error("{}: {message}", file.display())]
    Parse { file: PathBuf, message: String },

    /// A calibration field with a bad value; `field` is a dotted path such as
    /// `extrinsics.rotation[1][2]`.
    #[error("{}: field `{field}`: {reason}", file.display())]
    Calibration {
        file: PathBuf,
        field: String,
        reason: String,
    },
}
