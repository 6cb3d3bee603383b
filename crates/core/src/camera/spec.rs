//! Where frames come from, as the command line names it, and opening it.

use super::error::{CameraError, ReplayError};
use super::frame::Camera;
use super::{net, replay};

/// What pointact was built without when the `realsense` feature is off (exit code 2 in the CLI).
pub const NO_REALSENSE: &str = "pointact was built without the `realsense` feature; rebuild with `--features realsense` (see docs/install.md, RealSense)";

/// Where frames come from, as the command line names it (`--camera`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CameraSpec {
    /// `sim[:TASK]`: the built-in simulator's camera over a task's seed-0 scene (opened by the
    /// runner, which owns simulated worlds).
    Sim {
        /// The task whose scene is shown (`sim:TASK`); `None` for plain `sim`.
        task: Option<String>,
    },
    /// `replay:DIR`: recorded frames, in order.
    Replay {
        /// Folder of one recorded frame or of numbered frame folders.
        dir: std::path::PathBuf,
    },
    /// `realsense[:SERIAL]`: a RealSense device (feature `realsense`).
    RealSense {
        /// Serial number of the device to open; `None` for the first one connected.
        serial: Option<String>,
    },
    /// `tcp:HOST:PORT`: frames served by another pointact process ([`net::serve`], e.g. the
    /// simulator behind `pointact emulate xarm --sim`), read by [`net::RemoteCamera`].
    Tcp {
        /// The server's `HOST:PORT`.
        addr: String,
    },
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
                Err(reason) => Err(ReplayError::Spec {
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
pub fn open(spec: &CameraSpec) -> Result<Box<dyn Camera + Send>, CameraError> {
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
fn open_realsense(serial: Option<String>) -> Result<Box<dyn Camera + Send>, CameraError> {
    use super::realsense::{device::RealSenseCamera, RealSenseOptions};
    Ok(Box::new(RealSenseCamera::open(RealSenseOptions {
        serial,
        ..Default::default()
    })?))
}

#[cfg(not(feature = "realsense"))]
fn open_realsense(_serial: Option<String>) -> Result<Box<dyn Camera + Send>, CameraError> {
    Err(CameraError::NotInThisBuild(NO_REALSENSE.into()))
}
