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
    InvalidIntrinsics {
        /// The offending intrinsics field.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },

    /// librealsense asserts on this direction for this model (a forward-distorted image cannot be
    /// deprojected); we refuse instead of returning an undistorted-as-if-pinhole ray.
    #[error(
        "distortion model {model:?} cannot be deprojected (librealsense only projects with it)"
    )]
    NotDeprojectable {
        /// The camera's distortion model.
        model: Distortion,
    },

    /// Projection of a point on or behind the camera plane (z <= 0) has no pixel.
    #[error("cannot project a point with z = {z} m: it is not in front of the camera")]
    BehindCamera {
        /// The point's depth in the camera frame, m.
        z: f64,
    },

    /// An input or a result that is NaN or infinite.
    #[error("non-finite value in {what}")]
    NonFinite {
        /// Which input or result it was.
        what: &'static str,
    },

    /// A pose or end-effector delta that came from outside and is not one (wrong length,
    /// non-finite, a quaternion that is not unit length).
    #[error("invalid pose: {0}")]
    InvalidPose(String),

    /// A pixel outside the image.
    #[error("pixel ({u}, {v}) is outside the {width}x{height} image")]
    PixelOutsideImage {
        /// Column of the pixel, px.
        u: f64,
        /// Row of the pixel, px.
        v: f64,
        /// Image width, px.
        width: usize,
        /// Image height, px.
        height: usize,
    },

    /// Not enough valid depth around a pixel for a trustworthy estimate.
    #[error(
        "too little valid depth around pixel ({u}, {v}): {valid} of {total} pixels valid, \
         need a fraction of at least {min_fraction}"
    )]
    TooFewValidDepth {
        /// Column of the pixel, px.
        u: f64,
        /// Row of the pixel, px.
        v: f64,
        /// Pixels with valid depth in the window.
        valid: usize,
        /// Pixels in the window.
        total: usize,
        /// Smallest fraction of valid pixels accepted, in [0, 1].
        min_fraction: f32,
    },

    /// The depth image and the intrinsics describe different image sizes.
    #[error(
        "depth image is {depth_width}x{depth_height} but the intrinsics are for \
         {intrinsics_width}x{intrinsics_height} (align depth to the stream the intrinsics belong to)"
    )]
    SizeMismatch {
        /// Width of the depth image, px.
        depth_width: usize,
        /// Height of the depth image, px.
        depth_height: usize,
        /// Image width of the intrinsics, px.
        intrinsics_width: usize,
        /// Image height of the intrinsics, px.
        intrinsics_height: usize,
    },

    /// The pixel buffer length does not match width x height.
    #[error("depth buffer holds {got} values but {width}x{height} needs {expected}")]
    BufferLength {
        /// Image width, px.
        width: usize,
        /// Image height, px.
        height: usize,
        /// `width * height`.
        expected: usize,
        /// Values in the buffer.
        got: usize,
    },

    /// An option value outside its allowed range.
    #[error("invalid option `{field}`: {reason}")]
    InvalidOption {
        /// The option's name.
        field: &'static str,
        /// Why its value is invalid.
        reason: String,
    },

    /// Plane fitting found too few points on any candidate plane.
    #[error("plane fit: best plane has {inliers} inliers among {points} points, need {required}")]
    TooFewInliers {
        /// Inliers of the best plane found.
        inliers: usize,
        /// Inliers needed to accept a plane.
        required: usize,
        /// Points the plane was fitted to.
        points: usize,
    },

    /// Too few points (or waypoints) for the requested computation.
    #[error("{what}: got {got}, need at least {needed}")]
    TooFew {
        /// What was counted, e.g. the points of a fit.
        what: &'static str,
        /// How many were given.
        got: usize,
        /// The minimum needed.
        needed: usize,
    },

    /// A calibration file that could not be read.
    #[error("{}: cannot read: {source}", file.display())]
    Io {
        /// The calibration file.
        file: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },

    /// A calibration file that is not valid TOML or does not have the expected shape.
    #[error("{}: {message}", file.display())]
    Parse {
        /// The calibration file.
        file: PathBuf,
        /// The parser's message.
        message: String,
    },

    /// A calibration field with a bad value; `field` is a dotted path such as
    /// `extrinsics.rotation[1][2]`.
    #[error("{}: field `{field}`: {reason}", file.display())]
    Calibration {
        /// The calibration file.
        file: PathBuf,
        /// Dotted path of the offending field.
        field: String,
        /// What is wrong with its value.
        reason: String,
    },
}
