//! Runs tasks on a *world*: a camera and a robot (plus a judge when simulated), connected in the
//! one direction data flows: camera → pointer → executor → safety → robot.
//!
//! * [`task`]: one task on any camera, pointer and robot ([`run_task`]): capture, the executor's
//!   plan, the safety gate over the whole plan, then motion with closed-loop checks; every stage
//!   is an [`Event`](crate::executor::Event) for the CLI and `viz`.
//! * [`episode`]: one simulated episode (the simulator as the world, judged at the end);
//!   [`eval`]: the `eval sim` suites over seeded episodes; [`emulated`]: the same episode with the
//!   xArm driver and the controller emulator between the runner and the simulated arm.
//! * [`remote`]: episodes whose actions come from a policy over a link (the bridge), SimplerEnv's
//!   observation and controller contract, and `eval bridge`'s evaluator side on our simulator.
//! * [`record`]: simulated episodes appended to a LeRobotDataset (`--dataset`).
//! * [`pointer`]: the pointer of a simulated episode, oracle or model; [`open_camera`]: any
//!   `--camera` source, the simulator's included.
//!
//! Async done once: nothing here creates a runtime. The caller's runtime (the CLI's, a test's, a
//! server's) drives these futures, and they are `Send` so a multi-threaded runtime can run
//! several episodes at once.

pub(crate) mod emulated;
pub(crate) mod episode;
pub mod eval;
pub mod pointer;
pub mod record;
pub mod remote;
pub(crate) use pointact_runtime::task;

pub use emulated::{run_episode_xarm, SimXarm};
pub use episode::{
    oracle_truth, prepare_episode, run_episode, run_episode_with, run_prepared, EpisodeError,
    EpisodeOptions, EpisodeResult, PreparedEpisode,
};
pub use task::{run_task, RunError, RunOutcome};

use crate::camera::{self, Camera, CameraError, CameraSpec};
use crate::sim::devices::{SharedWorld, SimCamera};
use crate::sim::tasks;

/// Opens a `--camera` source. `sim[:TASK]` is the simulator's camera over the task's seed-0 scene,
/// settled for 2 s (the default task when none is named); the rest is `camera::open`.
pub fn open_camera(spec: &CameraSpec) -> Result<Box<dyn Camera + Send>, CameraError> {
    match spec {
        CameraSpec::Sim { task } => {
            let sim = |e: &dyn std::fmt::Display| CameraError::Device(format!("simulator: {e}"));
            let ep = tasks::task(task.as_deref().unwrap_or(tasks::DEFAULT_TASK))
                .and_then(|t| t.instantiate(0))
                .map_err(|e| sim(&e))?;
            let model = ep.robot_model().map_err(|e| sim(&e))?;
            let world = SharedWorld::new(ep.world(model).map_err(|e| sim(&e))?);
            world.lock().settle(2.0);
            Ok(Box::new(SimCamera::new(world, Default::default())))
        }
        other => camera::open(other),
    }
}
