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

/// The CPU model, from /proc/cpuinfo where there is one, with its widest vector unit: virtual
/// machines often report only "AMD EPYC", and AVX2-only and AVX-512 machines of that name differ.
pub(crate) fn cpu_model() -> String {
    let name = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    #[cfg(target_arch = "x86_64")]
    let name = {
        let vector = if std::arch::is_x86_feature_detected!("avx512f") {
            "AVX-512"
        } else if std::arch::is_x86_feature_detected!("avx2") {
            "AVX2, no AVX-512"
        } else {
            "no AVX2"
        };
        format!("{name} ({vector})")
    };
    name
}

#[cfg(test)]
mod tests;
