//! pointact's task runtime: the executor (instruction → the points to ask for → a plan) and the
//! task loop that drives it over any camera, pointer and robot (`task::run_task`).
//!
//! Why a crate of its own: the loop and the executor must never read simulator ground truth, the
//! viewer or the applications that drive them; here the compiler holds that rule, since nothing
//! above (the simulator, `viz`, the bridge, the trainer) is a dependency.

#![warn(missing_docs)]

pub mod executor;
pub mod task;
