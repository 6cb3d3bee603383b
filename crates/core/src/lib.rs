//! pointact's ground floor: the geometry, kinematics, cameras, motion planning and the safety gate
//! that every layer above stands on (drivers, pointing, the simulator, the executor).
//!
//! Imports nothing else of pointact's, so a change in a driver, the model or the task loop never
//! rebuilds it. Inside, the modules keep the one-way flow: `geometry` is pure maths; `kinematics`
//! and `camera` use only it; `planning` uses both; `safety` re-checks what planning made with
//! planning's collision model.

#![warn(missing_docs)]

pub mod camera;
pub mod geometry;
pub mod kinematics;
pub mod listener;
pub mod planning;
pub mod safety;

/// Re-export of the nalgebra that `k` 0.32 is built on (0.30). Every robot-math type comes from
/// here so that there is exactly one nalgebra in the public API.
pub use k::nalgebra;
/// Bounded reading of whole input files (the `pointact-input` crate, shared with the model crate).
pub use pointact_input as input;

#[cfg(test)]
mod tests;
