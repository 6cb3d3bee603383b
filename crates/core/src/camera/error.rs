//! The camera's errors, its sources' included, in a file of their own: every source returns a
//! [`CameraError`], which wraps each source's own error, so neither has to import the other.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use crate::geometry::GeometryError;

/// The wire version this build speaks; bumped on any change to the frame layout or header.
pub const WIRE_VERSION: u32 = 1;
/// Largest width or height of a served frame, pixels: the crate's image limit (the simulator's
/// `sim::scene::MAX_IMAGE_SIDE`, which `camera` may not import; a test keeps them equal).
pub const MAX_SIDE: u32 = 8192;
/// Camera sources the CLI knows, for the message of an unusable spec.
pub(crate) const KNOWN_SCHEMES: &str = "replay:DIR (recorded frames), sim[:TASK] (the simulator's camera), realsense[:SERIAL] (feature `realsense`), tcp:HOST:PORT (a frame server, e.g. `pointact emulate xarm --sim`)";
/// What the user sees when no camera answers: the two things that fix it nearly every time.
pub const NO_DEVICE_MESSAGE: &str =
    "no RealSense device found: check the USB3 cable, `rs-enumerate-devices`";

pub(crate) fn list_or_none(serials: &[String]) -> String {
    if serials.is_empty() {
        "none".into()
    } else {
        serials.join(", ")
    }
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
    Replay(#[from] ReplayError),
    /// Talking to a frame server (`tcp:HOST:PORT`): connect, timeout, or a malformed answer.
    #[error(transparent)]
    Net(#[from] NetError),
    /// Opening or reading a RealSense device.
    #[error(transparent)]
    RealSense(#[from] RealSenseError),
    /// The source exists but this build lacks it (a cargo feature), or another layer opens it.
    #[error("{0}")]
    NotInThisBuild(String),
}

/// Errors of reading recorded frames; each names the file or folder it is about.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// A file or folder that is missing or cannot be read.
    #[error("{}: cannot read: {source}", file.display())]
    Io {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A PNG that does not decode (truncated, not a PNG, ...).
    #[error("{}: cannot decode: {message}", file.display())]
    Decode { file: PathBuf, message: String },
    /// A PNG with the wrong pixel type: colour must be 8-bit RGB, depth 16-bit gray.
    #[error("{}: expected {expected} pixels, found {found}", file.display())]
    PixelFormat {
        file: PathBuf,
        expected: &'static str,
        found: String,
    },
    /// `depth.png` and `rgb.png` of one frame differ in size.
    #[error(
        "{}: depth image is {depth_w}x{depth_h} but rgb.png beside it is {rgb_w}x{rgb_h}",
        file.display()
    )]
    DepthSize {
        file: PathBuf,
        depth_w: u32,
        depth_h: u32,
        rgb_w: u32,
        rgb_h: u32,
    },
    /// `camera.toml` describes a different image size than the PNGs next to it.
    #[error(
        "{}: intrinsics are for {intrinsics_w}x{intrinsics_h} but the images are {image_w}x{image_h}",
        file.display()
    )]
    IntrinsicsSize {
        file: PathBuf,
        intrinsics_w: usize,
        intrinsics_h: usize,
        image_w: usize,
        image_h: usize,
    },
    /// `frame.toml` that is not valid TOML or has a bad field (`field` is empty for syntax errors).
    #[error("{}: field `{field}`: {reason}", file.display())]
    Field {
        file: PathBuf,
        field: &'static str,
        reason: String,
    },
    /// A folder with neither `rgb.png` nor frame sub-folders.
    #[error("{}: no recorded frame here (no rgb.png and no sub-folders)", dir.display())]
    NoFrames { dir: PathBuf },
    /// Every frame has been returned once and the camera does not loop.
    #[error("{}: replay exhausted after {frames} frames", dir.display())]
    Exhausted { dir: PathBuf, frames: usize },
    /// A camera spec that is not `replay:DIR`.
    #[error("camera spec {spec:?}: {reason}; known: {KNOWN_SCHEMES}")]
    Spec { spec: String, reason: String },
}

/// What can go wrong between a [`RemoteCamera`] and its server. Every message names the server.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// Resolving or connecting failed (nothing listens there, or it did not accept in time).
    #[error("camera server {addr}: cannot connect: {source} (is `pointact emulate … --sim` running and serving frames there?)")]
    Connect {
        addr: String,
        #[source]
        source: io::Error,
    },
    /// No (complete) answer within the time limit.
    #[error("camera server {addr}: no answer within {timeout:?} while {during}")]
    Timeout {
        addr: String,
        timeout: Duration,
        during: &'static str,
    },
    /// The server closed the connection before answering (after one reconnect).
    #[error("camera server {addr}: connection closed before an answer")]
    Closed { addr: String },
    /// The answer stopped before its announced end.
    #[error(
        "camera server {addr}: truncated answer: {what} ended after {got} of {expected} bytes"
    )]
    Truncated {
        addr: String,
        what: &'static str,
        got: usize,
        expected: usize,
    },
    /// A socket error other than a timeout or a close.
    #[error("camera server {addr}: {during}: {source}")]
    Io {
        addr: String,
        during: &'static str,
        #[source]
        source: io::Error,
    },
    /// The answer does not start like a frame server's.
    #[error("camera server {addr}: not a pointact frame server (answer starts with {found:02x?}, expected \"PAFF\" or \"PAFE\")")]
    BadMagic { addr: String, found: [u8; 4] },
    /// The server speaks another version of the wire format.
    #[error("camera server {addr}: wire version {found}, this build speaks {WIRE_VERSION}: run the same pointact build on both sides")]
    Version { addr: String, found: u32 },
    /// The header announces a frame larger than [`MAX_SIDE`] on a side.
    #[error("camera server {addr}: frame of {width}x{height} exceeds the limit of {MAX_SIDE}x{MAX_SIDE}")]
    TooLarge {
        addr: String,
        width: u64,
        height: u64,
    },
    /// A header or length that is not what the format allows.
    #[error("camera server {addr}: malformed answer: {reason}")]
    Malformed { addr: String, reason: String },
}

#[derive(Debug, thiserror::Error)]
pub enum RealSenseError {
    #[error("{NO_DEVICE_MESSAGE}")]
    NoDevice,
    #[error(
        "no RealSense device with serial {wanted}; connected: {}",
        list_or_none(found)
    )]
    WrongSerial { wanted: String, found: Vec<String> },
    #[error(
        "the {device} cannot stream {stream}: {reason} (`rs-enumerate-devices` lists its modes)"
    )]
    StreamNotSupported {
        device: String,
        stream: String,
        reason: String,
    },
    #[error("no frames from the {device} within {} ms: is another program using it? (USB2 ports are too slow for 640x480 colour + depth)", timeout.as_millis())]
    Timeout { device: String, timeout: Duration },
    #[error(
        "the {stream} stream uses the {model} distortion model, which pointact cannot deproject"
    )]
    UnsupportedDistortion { stream: String, model: String },
    #[error("temporal median: {0}")]
    Median(String),
    #[error("invalid RealSense option `{field}`: {reason}")]
    InvalidOption { field: &'static str, reason: String },
    /// Anything else librealsense reported, with what we were doing.
    #[error("librealsense, while {doing}: {message}")]
    Library { doing: String, message: String },
    #[error(transparent)]
    Geometry(#[from] GeometryError),
}
