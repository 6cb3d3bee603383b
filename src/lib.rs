//! pointact: robot manipulation by pointing.
//!
//! Data flows one way: `camera` → `pointing` → `geometry` → `executor` → `safety` → `robot`.
//! Each stage lives in a crate of the workspace, and this crate re-exports them under one name so
//! that a user (and the tests) write `pointact::robot`, `pointact::executor`, … The crates, bottom
//! up: `pointact-vlm` (the model the pointer runs; imports nothing of ours), `pointact-core`
//! (`geometry`, `kinematics`, `camera`, `planning`, `safety`), `pointact-robot` (drivers,
//! emulators, the servo loop), `pointact-pointing`, `pointact-sim` (a world to run in) and
//! `pointact-runtime` (the executor and the task loop, which cannot see the simulator), then
//! `pointact-apps` (`runner`: simulated episodes and suites; `bridge`; `train`; `calibrate`;
//! `viz`). The benchmarks (`pointact-bench`) belong to the binary, not to this library.

pub use pointact_apps::{ask, bridge, calibrate, dataset, runner, train, values, viz};
pub use pointact_core::{camera, geometry, input, kinematics, planning, safety};
pub use pointact_pointing as pointing;
pub use pointact_robot as robot;
pub use pointact_runtime::executor;
pub use pointact_sim as sim;
pub use pointact_vlm as vlm;

/// Re-export of the nalgebra that `k` 0.32 is built on (0.30). Every robot-math type in the crate
/// comes from here so that there is exactly one nalgebra in the public API.
pub use k::nalgebra;
