//! Frames in: colour + aligned depth + intrinsics + where the camera is, from the simulator
//! (`sim::devices::SimCamera`) or from recorded-frame folders ([`replay::ReplayCamera`], written by
//! [`record::write_frame`]) and from RealSense devices ([`realsense`], the device itself behind the
//! `realsense` feature), and from another process's camera over loopback TCP ([`net`]).
//! Everything downstream takes a `Frame`, so a pointer or executor never knows which camera
//! produced it.

pub mod calibrated;
pub mod lift;
pub mod net;
pub mod realsense;
pub mod record;
pub mod replay;

use k::nalgebra::Isometry3;

use crate::geometry::{DepthImage, GeometryError, Intrinsics};

pub use image::RgbImage;

/// One RGB-D observation. Depth is aligned to the colour image and uses its intrinsics. A frame
/// carries no ground truth: the simulator keeps its labels to itself (`sim::devices`), so nothing
/// downstream of a camera can lean on what a real camera does not give.
#[derive(Debug, Clone)]
pub struct Frame {
    pub rgb: RgbImage,
    pub depth: DepthImage,
    pub intrinsics: Intrinsics,
    /// Camera (OpenCV optical frame) → robot base.
    pub base_from_camera: Isometry3<f64>,
    /// Capture time, seconds (device or simulation clock).
    pub stamp_s: f64,
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
    Replay(#[from] replay::ReplayError),
    /// Talking to a frame server (`tcp:HOST:PORT`): connect, timeout, or a malformed answer.
    #[error(transparent)]
    Net(#[from] net::NetError),
    /// Opening or reading a RealSense device.
    #[error(transparent)]
    RealSense(#[from] realsense::RealSenseError),
    /// The source exists but this build lacks it (a cargo feature), or another layer opens it.
    #[error("{0}")]
    NotInThisBuild(String),
}

/// What pointact was built without when the `realsense` feature is off (exit code 2 in the CLI).
pub const NO_REALSENSE: &str = "pointact was built without the `realsense` feature; rebuild with `--features realsense` (see docs/install.md, RealSense)";

/// Where frames come from, as the command line names it (`--camera`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CameraSpec {
    /// `sim[:TASK]`: the built-in simulator's camera over a task's seed-0 scene (opened by the
    /// runner, which owns simulated worlds).
    Sim { task: Option<String> },
    /// `replay:DIR`: recorded frames, in order.
    Replay { dir: std::path::PathBuf },
    /// `realsense[:SERIAL]`: a RealSense device (feature `realsense`).
    RealSense { serial: Option<String> },
    /// `tcp:HOST:PORT`: frames served by another pointact process ([`net::serve`], e.g. the
    /// simulator behind `pointact emulate xarm --sim`), read by [`net::RemoteCamera`].
    Tcp { addr: String },
}

impl std::str::FromStr for CameraSpec {
    type Err = CameraError;
    fn from_str(spec: &str) -> Result<Self, CameraError> {
        let (scheme, rest) = spec.split_once(':').unwrap_or((spec, ""));
        let nonempty = (!rest.is_empty()).then(|| rest.to_string());
        match scheme {
            "sim" => Ok(CameraSpec::Sim { task: nonempty }),
            "realsense" => Ok(CameraSpec::RealSense { serial: nonempty }),
            "tcp" => match net::check_addr(rest) {
                Ok(()) => Ok(CameraSpec::Tcp {
                    addr: rest.to_string(),
                }),
                Err(reason) => Err(replay::ReplayError::Spec {
                    spec: spec.to_string(),
                    reason,
                }
                .into()),
            },
            // Recorded folders keep their own error wording (it names the spec and the folder).
            _ => replay::parse_spec(spec).map(|dir| CameraSpec::Replay { dir }),
        }
    }
}

/// Opens a recorded-frames folder, a RealSense or a frame server (connecting now, with
/// [`net::DEFAULT_TIMEOUT`] per capture). The simulator's camera needs its world: the
/// runner opens `sim` specs (`runner::open_camera`), so here it is an error.
pub fn open(spec: &CameraSpec) -> Result<Box<dyn Camera>, CameraError> {
    match spec {
        CameraSpec::Replay { dir } => Ok(Box::new(replay::ReplayCamera::open(dir)?)),
        CameraSpec::RealSense { serial } => open_realsense(serial.clone()),
        CameraSpec::Tcp { addr } => Ok(Box::new(net::RemoteCamera::connect(
            addr,
            net::DEFAULT_TIMEOUT,
        )?)),
        CameraSpec::Sim { .. } => Err(CameraError::NotInThisBuild(
            "the simulator's camera is opened with its world (runner::open_camera)".into(),
        )),
    }
}

#[cfg(feature = "realsense")]
fn open_realsense(serial: Option<String>) -> Result<Box<dyn Camera>, CameraError> {
    use realsense::{device::RealSenseCamera, RealSenseOptions};
    Ok(Box::new(RealSenseCamera::open(RealSenseOptions {
        serial,
        ..Default::default()
    })?))
}

#[cfg(not(feature = "realsense"))]
fn open_realsense(_serial: Option<String>) -> Result<Box<dyn Camera>, CameraError> {
    Err(CameraError::NotInThisBuild(NO_REALSENSE.into()))
}

impl Frame {
    /// Checks that colour, depth and intrinsics describe the same image.
    pub fn validate(&self) -> Result<(), CameraError> {
        let (w, h) = (self.rgb.width() as usize, self.rgb.height() as usize);
        if (w, h) != (self.depth.width, self.depth.height) {
            return Err(CameraError::SizeMismatch {
                rgb_w: w,
                rgb_h: h,
                depth_w: self.depth.width,
                depth_h: self.depth.height,
            });
        }
        self.intrinsics.validate()?;
        if (self.intrinsics.width, self.intrinsics.height) != (w, h) {
            return Err(CameraError::SizeMismatch {
                rgb_w: w,
                rgb_h: h,
                depth_w: self.intrinsics.width,
                depth_h: self.intrinsics.height,
            });
        }
        Ok(())
    }
}

/// A source of frames.
pub trait Camera {
    fn capture(&mut self) -> Result<Frame, CameraError>;
}

/// A boxed camera is a camera, so a source chosen at run time plugs in anywhere.
impl<C: Camera + ?Sized> Camera for Box<C> {
    fn capture(&mut self) -> Result<Frame, CameraError> {
        (**self).capture()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn camera_specs_parse_every_source() {
        let p = |s: &str| s.parse::<CameraSpec>();
        assert_eq!(p("sim").unwrap(), CameraSpec::Sim { task: None });
        assert_eq!(
            p("sim:bridge/carrot_on_plate").unwrap(),
            CameraSpec::Sim {
                task: Some("bridge/carrot_on_plate".into())
            }
        );
        assert_eq!(
            p("replay:/tmp/frames").unwrap(),
            CameraSpec::Replay {
                dir: "/tmp/frames".into()
            }
        );
        assert_eq!(
            p("realsense:123").unwrap(),
            CameraSpec::RealSense {
                serial: Some("123".into())
            }
        );
        assert_eq!(
            p("tcp:127.0.0.1:5600").unwrap(),
            CameraSpec::Tcp {
                addr: "127.0.0.1:5600".into()
            }
        );
        assert_eq!(
            p("tcp:[::1]:5600").unwrap(),
            CameraSpec::Tcp {
                addr: "[::1]:5600".into()
            }
        );
        // A frame server needs a host and a usable port.
        for bad in [
            "tcp:",
            "tcp:5600",
            "tcp::5600",
            "tcp:localhost:0",
            "tcp:localhost:99999",
        ] {
            assert!(
                p(bad).unwrap_err().to_string().contains("HOST:PORT"),
                "{bad}"
            );
        }
        // A folder is required, and unknown schemes are named.
        assert!(p("replay:").unwrap_err().to_string().contains("replay:DIR"));
        assert!(p("webcam:0").unwrap_err().to_string().contains("webcam"));
        // The simulator's camera is the runner's to open.
        assert!(matches!(
            open(&CameraSpec::Sim { task: None }),
            Err(CameraError::NotInThisBuild(_))
        ));
    }
}
