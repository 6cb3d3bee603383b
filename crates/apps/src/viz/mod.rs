//! rerun logging: an observer of a run, never a stage of it.
//!
//! The pipeline flows one way (camera → pointer → geometry → executor → robot) and reports what it
//! did through [`crate::executor::Event`]s; [`Viz::on_event`] turns each event into rerun
//! entities, so nothing in the pipeline knows that it is being watched. The few calls that are not
//! events (an image without depth for `pointact point`, the model's timings, an episode's outcome)
//! have their own intention-named methods. Entity paths live only in this module.
//!
//! Where it goes ([`Sink`], the CLI's `--rerun`): `save:FILE.rrd`, `spawn` (starts a `rerun`
//! viewer found in PATH, listening on 127.0.0.1 only) or `connect[:URL]` (a running viewer,
//! default `rerun+http://127.0.0.1:9876/proxy`).
//!
//! Built without the `viz` feature, [`Viz::open`] fails with [`VizError::NotBuilt`] and every
//! other method is unreachable (a `Viz` cannot exist), so the CLI keeps its flag and says why it
//! cannot honour it.
//!
//! # What is logged where (timeline `sim_time`: the camera's and the robot's clock)
//! | entity | what |
//! | --- | --- |
//! | `world` | robot base frame, z up (static) |
//! | `world/camera` | `base_from_camera` (the calibrated extrinsics) |
//! | `world/camera/image` | pinhole, OpenCV/RealSense optical frame (RDF) |
//! | `world/camera/image/rgb`, `…/depth` | colour; depth as u16 millimetres with meter 1000 |
//! | `world/camera/image/points/<ability>`, `…/trace/<ability>` | the answer's points (labelled) and, for VTG, its trace |
//! | `world/cloud` | the frame's point cloud in the base frame, coloured |
//! | `world/table` | the estimated table plane (a thin box) |
//! | `world/targets/{grasp,place,trace}` | the answers lifted to 3D |
//! | `world/robot/<robot>/<link>` | each link's pose by forward kinematics of the executed states; URDF primitives below it (static) |
//! | `world/plan/tcp` | the planned tool path, one strip per motion |
//! | `plan/joints/<joint>` | planned joint positions over the `plan_time` timeline |
//! | `robot/joints/<joint>`, `robot/gripper_width` | every executed state as scalars |
//! | `pointing/<ability>` | the query and the model's reasoning (markdown) |
//! | `plan/steps` | the plan as a table (markdown) |
//! | `timings/<stage>` | wall-clock seconds per stage, as the observer saw them |
//! | `log` | one text line per event |
//! | `eval/success` | per episode, on the `episode` timeline (`eval sim`) |
//! | `dataset/<video key>`, `…/points/<ability>` | `dataset view`: the episode's MP4 (static) and a frame reference per frame; the points asked before it moved (static) |
//! | `dataset/state/<name>`, `dataset/plan_step` | `dataset view`: the recorded state and plan step per frame |
//! | `train/<metric>`, `train/<task>/<metric>`, `train/eval/…` | `train grpo`'s metrics per update, on the `train_step` timeline |

#[cfg(feature = "viz")]
mod record;
#[cfg(feature = "viz")]
pub use record::Viz;

#[cfg(not(feature = "viz"))]
mod off;
#[cfg(not(feature = "viz"))]
pub use off::Viz;

use std::path::PathBuf;

/// Default address of a viewer started with `rerun` (gRPC proxy on loopback).
pub(crate) const DEFAULT_CONNECT_URL: &str = "rerun+http://127.0.0.1:9876/proxy";

/// Entity paths, in one place (the module table above lists them; it is the public contract).
#[cfg_attr(not(feature = "viz"), allow(dead_code))]
pub(crate) mod paths {
    pub(crate) const WORLD: &str = "world";
    pub(crate) const CAMERA: &str = "world/camera";
    pub(crate) const PINHOLE: &str = "world/camera/image";
    pub(crate) const RGB: &str = "world/camera/image/rgb";
    pub(crate) const DEPTH: &str = "world/camera/image/depth";
    pub(crate) const CLOUD: &str = "world/cloud";
    pub(crate) const TABLE: &str = "world/table";
    pub(crate) const GRASP: &str = "world/targets/grasp";
    pub(crate) const PLACE: &str = "world/targets/place";
    pub(crate) const TRACE_3D: &str = "world/targets/trace";
    pub(crate) const PLAN_TCP: &str = "world/plan/tcp";
    pub(crate) const PLAN_STEPS: &str = "plan/steps";
    pub(crate) const LOG: &str = "log";
    pub(crate) const GRIPPER_WIDTH: &str = "robot/gripper_width";
    pub(crate) const EVAL_SUCCESS: &str = "eval/success";

    /// The answer's 2D points for one ability (`reg`, `rrg`, `ofg`, `vtg`).
    pub(crate) fn points_2d(ability: &str) -> String {
        format!("world/camera/image/points/{ability}")
    }
    /// A depth check's move of an answered point (arrow from the answer to where it went).
    pub(crate) fn correction(what: &str) -> String {
        format!("world/camera/image/corrections/{}", what.replace(' ', "_"))
    }
    /// The answer's 2D trace (VTG).
    pub(crate) fn trace_2d(ability: &str) -> String {
        format!("world/camera/image/trace/{ability}")
    }
    /// Query and reasoning of one ability.
    pub(crate) fn pointing(ability: &str) -> String {
        format!("pointing/{ability}")
    }
    /// One link of one robot (its pose; the geometry sits below it).
    pub(crate) fn link(robot: &str, link: &str) -> String {
        format!("world/robot/{robot}/{link}")
    }
    /// An executed joint position.
    pub(crate) fn joint(joint: &str) -> String {
        format!("robot/joints/{joint}")
    }
    /// A planned joint position.
    pub(crate) fn planned_joint(joint: &str) -> String {
        format!("plan/joints/{joint}")
    }
    /// Seconds spent in a stage.
    pub(crate) fn timing(stage: &str) -> String {
        format!("timings/{stage}")
    }
    /// A dataset episode's video feature (`dataset view`), e.g. `dataset/observation.images.front`.
    pub(crate) fn dataset_video(key: &str) -> String {
        format!("dataset/{key}")
    }
    /// A dataset episode's answered points for one ability, drawn over its video.
    pub(crate) fn dataset_points(key: &str, ability: &str) -> String {
        format!("dataset/{key}/points/{ability}")
    }
    /// One entry of a dataset episode's `observation.state`.
    pub(crate) fn dataset_state(name: &str) -> String {
        format!("dataset/state/{name}")
    }
    /// The plan step executing in a dataset episode.
    pub(crate) const DATASET_PLAN_STEP: &str = "dataset/plan_step";
    /// A training metric (`train grpo`): `train/reward`, `train/point_rec/reward`,
    /// `eval/point_rec/reward`, ….
    pub(crate) fn training(name: &str) -> String {
        format!("train/{name}")
    }
}

/// Timeline names.
#[cfg_attr(not(feature = "viz"), allow(dead_code))]
pub(crate) mod timelines {
    /// The camera's and the robot's clock (simulation time in the simulator), seconds.
    pub(crate) const SIM_TIME: &str = "sim_time";
    /// Seconds since the plan starts, for planned joint positions.
    pub(crate) const PLAN_TIME: &str = "plan_time";
    /// Episode number of an evaluation.
    pub(crate) const EPISODE: &str = "episode";
    /// Update number of a training run.
    pub(crate) const TRAIN_STEP: &str = "train_step";
}

/// Where the recording goes (`--rerun`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sink {
    /// Write an `.rrd` file (`save:FILE.rrd`); open it later with `rerun FILE.rrd`.
    Save(PathBuf),
    /// Start a viewer (`rerun` in PATH) bound to loopback and stream to it (`spawn`).
    Spawn,
    /// Stream to a running viewer (`connect` or `connect:URL`).
    Connect(String),
}

impl std::str::FromStr for Sink {
    type Err = VizError;

    fn from_str(s: &str) -> Result<Self, VizError> {
        let bad = |why: &str| VizError::BadSink {
            given: s.to_string(),
            why: why.to_string(),
        };
        if s == "spawn" {
            return Ok(Sink::Spawn);
        }
        if s == "connect" {
            return Ok(Sink::Connect(DEFAULT_CONNECT_URL.to_string()));
        }
        if let Some(url) = s.strip_prefix("connect:") {
            if url.is_empty() {
                return Err(bad("`connect:` needs a URL (or write plain `connect`)"));
            }
            return Ok(Sink::Connect(url.to_string()));
        }
        if let Some(file) = s.strip_prefix("save:") {
            if file.is_empty() {
                return Err(bad("`save:` needs a file name, e.g. save:run.rrd"));
            }
            return Ok(Sink::Save(PathBuf::from(file)));
        }
        Err(bad("unknown form"))
    }
}

/// Whether something listens at the viewer address of `url` (`rerun+http://HOST:PORT/…`), within
/// `timeout`. The SDK connects lazily and reports a dead viewer only when the recording is flushed,
/// which is after a run has moved the arm; this makes `--rerun connect:` fail before anything moves.
#[cfg_attr(not(feature = "viz"), allow(dead_code))]
pub(crate) fn probe_viewer(url: &str, timeout: std::time::Duration) -> Result<(), String> {
    use std::net::{TcpStream, ToSocketAddrs};
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or_default();
    let addrs: Vec<_> = authority
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve `{authority}`: {e}"))?
        .collect();
    let mut last = format!("`{authority}` resolves to no address");
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(_) => return Ok(()),
            Err(e) => last = format!("no viewer answers at {addr}: {e}"),
        }
    }
    Err(last)
}

/// Why rerun logging could not start or failed.
#[derive(Debug, thiserror::Error)]
pub enum VizError {
    /// The binary was built with `--no-default-features`.
    #[error(
        "--rerun: built without the viz feature; rebuild with it (`cargo build --release`, the \
         default, or `--features viz`) to log to rerun"
    )]
    NotBuilt,
    /// The `--rerun` argument names no sink.
    #[error(
        "--rerun `{given}`: {why}; use save:FILE.rrd, spawn, connect or connect:URL \
         (e.g. connect:{DEFAULT_CONNECT_URL})"
    )]
    BadSink {
        /// The argument as given.
        given: String,
        /// What is wrong with it.
        why: String,
    },
    /// The rerun viewer could not be spawned (none installed, or it failed to start).
    #[error(
        "cannot start the rerun viewer: {0}. Install one of the same version (`cargo install \
         rerun-cli --version 0.36.3` or `pip install rerun-sdk==0.36.3`) or use --rerun save:FILE.rrd"
    )]
    Spawn(String),
    /// The recording could not be opened: the file not created, or no viewer at the URL.
    #[error("cannot open the rerun recording ({sink}): {detail}")]
    Open {
        /// The sink (`save:FILE` or `connect:URL`).
        sink: String,
        /// Why it failed.
        detail: String,
    },
    /// The first logging error of the run (later ones are dropped: logging never stops a run).
    #[error("rerun logging failed: {0}")]
    Log(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_three_sink_forms() {
        assert_eq!(
            "save:out/run.rrd".parse::<Sink>().unwrap(),
            Sink::Save(PathBuf::from("out/run.rrd"))
        );
        assert_eq!("spawn".parse::<Sink>().unwrap(), Sink::Spawn);
        assert_eq!(
            "connect".parse::<Sink>().unwrap(),
            Sink::Connect(DEFAULT_CONNECT_URL.into())
        );
        assert_eq!(
            "connect:rerun+http://127.0.0.1:9000/proxy"
                .parse::<Sink>()
                .unwrap(),
            Sink::Connect("rerun+http://127.0.0.1:9000/proxy".into())
        );
    }

    #[test]
    fn a_viewer_address_is_probed_before_use() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let t = std::time::Duration::from_secs(2);
        assert!(probe_viewer(&format!("rerun+http://127.0.0.1:{port}/proxy"), t).is_ok());
        drop(listener);
        let e = probe_viewer(&format!("rerun+http://127.0.0.1:{port}/proxy"), t).unwrap_err();
        assert!(e.contains("no viewer answers"), "{e}");
        assert!(probe_viewer("rerun+http://no-such-host.invalid:9876/proxy", t).is_err());
    }

    #[test]
    fn rejects_unknown_and_empty_forms_naming_the_valid_ones() {
        for bad in ["", "save:", "connect:", "file.rrd", "serve"] {
            let e = bad.parse::<Sink>().unwrap_err().to_string();
            assert!(e.contains("save:FILE.rrd, spawn, connect"), "{bad}: {e}");
        }
    }
}
