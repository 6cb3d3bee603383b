//! pointact: robot manipulation by pointing.
//!
//! Data flows one way: `camera` → `pointing` → `geometry` → `executor` → `safety` → `robot`.
//! Each module owns one pipeline stage and says in its own doc comment what it holds; a module may
//! use those below it in this flow, never those above. Around the pipeline: `vlm` (the model the
//! pointer runs: the crate `pointact-vlm`, which imports nothing of ours, re-exported here), `kinematics` and `planning` (used by the executor and the safety gate), `sim` (a
//! world to run in), `runner` (the task loop), `bridge` (a policy server for evaluators), `train`
//! (rewards and the GRPO trainer), `calibrate` (hand-eye), `viz` (rerun logging) and `bench`.

pub mod bench;
pub mod bridge;
pub mod calibrate;
pub mod runner;
pub mod train;
pub mod viz;
pub use pointact_core::{camera, geometry, kinematics, planning, safety};
pub use pointact_pointing as pointing;
pub use pointact_robot as robot;
pub use pointact_runtime::executor;
pub use pointact_sim as sim;
pub use pointact_vlm as vlm;

/// Re-export of the nalgebra that `k` 0.32 is built on (0.30). Every robot-math type in the crate
/// comes from here so that there is exactly one nalgebra in the public API.
pub use k::nalgebra;
