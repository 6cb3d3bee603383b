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

/// Everything a camera source can fail with; each source's own error is wrapped in a variant.
#[derive(Debug, thiserror::Error)]
pub enum CameraError {
    /// A frame whose colour and depth images differ in size.
    #[error("colour image is {rgb_w}x{rgb_h} but depth is {depth_w}x{depth_h}")]
    SizeMismatch {
        /// Width of the colour image, px.
        rgb_w: usize,
        /// Height of the colour image, px.
        rgb_h: usize,
        /// Width of the depth image, px.
        depth_w: usize,
        /// Height of the depth image, px.
        depth_h: usize,
    },
    /// Invalid intrinsics or another geometric check on the frame failed.
    #[error(transparent)]
    Geometry(#[from] GeometryError),
    /// Any other camera failure, e.g. writing a recorded frame; the message says what and where.
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
        /// The file or folder the error is about.
        file: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A PNG that does not decode (truncated, not a PNG, ...).
    #[error("{}: cannot decode: {message}", file.display())]
    Decode {
        /// The file or folder the error is about.
        file: PathBuf,
        /// The decoder's message.
        message: String,
    },
    /// A PNG with the wrong pixel type: colour must be 8-bit RGB, depth 16-bit gray.
    #[error("{}: expected {expected} pixels, found {found}", file.display())]
    PixelFormat {
        /// The file or folder the error is about.
        file: PathBuf,
        /// The pixel type this image must have.
        expected: &'static str,
        /// The pixel type the image has.
        found: String,
    },
    /// `depth.png` and `rgb.png` of one frame differ in size.
    #[error(
        "{}: depth image is {depth_w}x{depth_h} but rgb.png beside it is {rgb_w}x{rgb_h}",
        file.display()
    )]
    DepthSize {
        /// The depth image.
        file: PathBuf,
        /// Width of the depth image, px.
        depth_w: u32,
        /// Height of the depth image, px.
        depth_h: u32,
        /// Width of `rgb.png`, px.
        rgb_w: u32,
        /// Height of `rgb.png`, px.
        rgb_h: u32,
    },
    /// `camera.toml` describes a different image size than the PNGs next to it.
    #[error(
        "{}: intrinsics are for {intrinsics_w}x{intrinsics_h} but the images are {image_w}x{image_h}",
        file.display()
    )]
    IntrinsicsSize {
        /// The `camera.toml` file.
        file: PathBuf,
        /// Image width the intrinsics are for, px.
        intrinsics_w: usize,
        /// Image height the intrinsics are for, px.
        intrinsics_h: usize,
        /// Width of the recorded images, px.
        image_w: usize,
        /// Height of the recorded images, px.
        image_h: usize,
    },
    /// `frame.toml` that is not valid TOML or has a bad field (`field` is empty for syntax errors).
    #[error("{}: field `{field}`: {reason}", file.display())]
    Field {
        /// The `frame.toml` file.
        file: PathBuf,
        /// The offending field; empty for a syntax error.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A folder with neither `rgb.png` nor frame sub-folders.
    #[error("{}: no recorded frame here (no rgb.png and no sub-folders)", dir.display())]
    NoFrames {
        /// The folder that was searched.
        dir: PathBuf,
    },
    /// Every frame has been returned once and the camera does not loop.
    #[error("{}: replay exhausted after {frames} frames", dir.display())]
    Exhausted {
        /// The replayed folder.
        dir: PathBuf,
        /// How many frames were returned.
        frames: usize,
    },
    /// A camera spec that is not `replay:DIR`.
    #[error("camera spec {spec:?}: {reason}; known: {KNOWN_SCHEMES}")]
    Spec {
        /// The spec as given.
        spec: String,
        /// Why it is not usable.
        reason: String,
    },
}

/// What can go wrong between a [`RemoteCamera`] and its server. Every message names the server.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// Resolving or connecting failed (nothing listens there, or it did not accept in time).
    #[error("camera server {addr}: cannot connect: {source} (is `pointact emulate … --sim` running and serving frames there?)")]
    Connect {
        /// The server's address, as given (`HOST:PORT`).
        addr: String,
        /// The resolver's or socket's error.
        #[source]
        source: io::Error,
    },
    /// No (complete) answer within the time limit.
    #[error("camera server {addr}: no answer within {timeout:?} while {during}")]
    Timeout {
        /// The server's address, as given (`HOST:PORT`).
        addr: String,
        /// The time limit that ran out.
        timeout: Duration,
        /// What the client was doing, e.g. `reading the answer`.
        during: &'static str,
    },
    /// The server closed the connection before answering (after one reconnect).
    #[error("camera server {addr}: connection closed before an answer")]
    Closed {
        /// The server's address, as given (`HOST:PORT`).
        addr: String,
    },
    /// The answer stopped before its announced end.
    #[error(
        "camera server {addr}: truncated answer: {what} ended after {got} of {expected} bytes"
    )]
    Truncated {
        /// The server's address, as given (`HOST:PORT`).
        addr: String,
        /// The part of the answer that was cut short (header, colour, depth, ...).
        what: &'static str,
        /// Bytes received.
        got: usize,
        /// Bytes announced.
        expected: usize,
    },
    /// A socket error other than a timeout or a close.
    #[error("camera server {addr}: {during}: {source}")]
    Io {
        /// The server's address, as given (`HOST:PORT`).
        addr: String,
        /// What the client was doing, e.g. `sending the request`.
        during: &'static str,
        /// The socket's error.
        #[source]
        source: io::Error,
    },
    /// The answer does not start like a frame server's.
    #[error("camera server {addr}: not a pointact frame server (answer starts with {found:02x?}, expected \"PAFF\" or \"PAFE\")")]
    BadMagic {
        /// The server's address, as given (`HOST:PORT`).
        addr: String,
        /// The first four bytes of the answer.
        found: [u8; 4],
    },
    /// The server speaks another version of the wire format.
    #[error("camera server {addr}: wire version {found}, this build speaks {WIRE_VERSION}: run the same pointact build on both sides")]
    Version {
        /// The server's address, as given (`HOST:PORT`).
        addr: String,
        /// The server's wire version.
        found: u32,
    },
    /// The header announces a frame larger than [`MAX_SIDE`] on a side.
    #[error("camera server {addr}: frame of {width}x{height} exceeds the limit of {MAX_SIDE}x{MAX_SIDE}")]
    TooLarge {
        /// The server's address, as given (`HOST:PORT`).
        addr: String,
        /// Announced frame width, px.
        width: u64,
        /// Announced frame height, px.
        height: u64,
    },
    /// A header or length that is not what the format allows.
    #[error("camera server {addr}: malformed answer: {reason}")]
    Malformed {
        /// The server's address, as given (`HOST:PORT`).
        addr: String,
        /// What is wrong with the answer.
        reason: String,
    },
}

/// Errors of opening or reading an Intel RealSense camera.
#[derive(Debug, thiserror::Error)]
pub enum RealSenseError {
    /// No RealSense device is connected (or librealsense cannot see it).
    #[error("{NO_DEVICE_MESSAGE}")]
    NoDevice,
    /// Devices are connected, but none has the requested serial number.
    #[error(
        "no RealSense device with serial {wanted}; connected: {}",
        list_or_none(found)
    )]
    WrongSerial {
        /// The serial number asked for.
        wanted: String,
        /// Serial numbers of the connected devices.
        found: Vec<String>,
    },
    /// The device has no mode for the requested stream (resolution, format or rate).
    #[error(
        "the {device} cannot stream {stream}: {reason} (`rs-enumerate-devices` lists its modes)"
    )]
    StreamNotSupported {
        /// The device's name.
        device: String,
        /// The requested stream, e.g. its resolution and format.
        stream: String,
        /// Why it cannot be streamed.
        reason: String,
    },
    /// The device delivered no frames within the time limit.
    #[error("no frames from the {device} within {} ms: is another program using it? (USB2 ports are too slow for 640x480 colour + depth)", timeout.as_millis())]
    Timeout {
        /// The device's name.
        device: String,
        /// The time limit that ran out.
        timeout: Duration,
    },
    /// A stream's intrinsics use a distortion model that cannot be deprojected here.
    #[error(
        "the {stream} stream uses the {model} distortion model, which pointact cannot deproject"
    )]
    UnsupportedDistortion {
        /// The stream (colour or depth).
        stream: String,
        /// The distortion model librealsense reports.
        model: String,
    },
    /// The depth frames for the temporal median are missing or differ in size.
    #[error("temporal median: {0}")]
    Median(String),
    /// A RealSense option that is out of range.
    #[error("invalid RealSense option `{field}`: {reason}")]
    InvalidOption {
        /// The option's name.
        field: &'static str,
        /// Why its value is invalid.
        reason: String,
    },
    /// Anything else librealsense reported, with what we were doing.
    #[error("librealsense, while {doing}: {message}")]
    Library {
        /// What pointact was asking librealsense to do.
        doing: String,
        /// librealsense's message.
        message: String,
    },
    /// Invalid intrinsics or another geometric check failed.
    #[error(transparent)]
    Geometry(#[from] GeometryError),
}
