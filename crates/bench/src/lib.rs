//! Benchmarks behind `pointact bench`. Each one measures a peer in the same run and prints ratios;
//! none of them runs in the test suite (tests never assert wall-clock times).
//!
//! Why a crate of its own: the benchmarks are not part of the library a user links; only the
//! binary and a few tests (which share its problem generators) depend on them.

pub(crate) mod bridge;
mod cli;
pub use cli::{run, BenchCommand};
pub(crate) mod cloud;
pub(crate) mod grpo;
pub mod ik;
pub(crate) mod plan;
pub(crate) mod qgemm;
pub mod render;
pub(crate) mod rewards;
pub(crate) mod servo;
pub(crate) mod soak;
mod soak_tasks;
pub mod vlm;

// The layers under the names the modules use (`crate::robot`, `crate::runner`, …).
use k::nalgebra;
use pointact_apps::{runner, train};
use pointact_core::{camera, geometry, kinematics, planning, safety};
use pointact_pointing as pointing;
use pointact_robot as robot;
use pointact_runtime::executor;
use pointact_sim as sim;

/// The workspace root, where the peers' scripts (`benches/`) and the fixtures (`tests/fixtures/`)
/// live: the benchmarks run from a source checkout.
fn workspace_root() -> &'static std::path::Path {
    std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

#[cfg(test)]
mod tests;
