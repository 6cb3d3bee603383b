//! pointact's applications, above the task runtime and the simulator: `runner` (simulated
//! episodes and suites, the bridge's episodes, the emulated path), `bridge` (a policy server and
//! client for evaluators such as SimplerEnv), `train` (rewards and the GRPO trainer), `calibrate`
//! (hand-eye) and `viz` (rerun logging).
//!
//! Why a crate of its own: these are the callers of the loop; nothing below them (the runtime, the
//! simulator, the drivers, the model) may import them, and the compiler now holds that.

#![warn(missing_docs)]

pub mod ask;
pub mod bridge;
pub mod calibrate;
pub mod dataset;
pub mod runner;
pub mod train;
pub mod values;
pub mod viz;

// The layers below under the names the modules use (`crate::robot`, `crate::sim`, …).
/// The nalgebra that `k` 0.32 is built on (0.30): one nalgebra in every signature.
use k::nalgebra;
use pointact_core::{camera, geometry, kinematics, planning, safety};
use pointact_pointing as pointing;
use pointact_robot as robot;
use pointact_runtime::executor;
use pointact_sim as sim;
use pointact_vlm as vlm;

#[cfg(test)]
mod tests;

// The tests name the library as its users do (`pointact::runner`, `pointact::sim`, …).
#[cfg(test)]
extern crate self as pointact;
