//! pointact: robot manipulation by pointing.
//!
//! Data flows one way: `camera` → `pointing` → `geometry` → `executor` → `safety` → `robot`.
//! Each module owns one pipeline stage; see `DESIGN.md` (shared) for the map. Modules whose
//! issue has not landed yet hold only their doc comment, so nothing pretends to work.

pub mod bench;
pub mod bridge;
pub mod calibrate;
pub mod camera;
pub mod executor;
pub mod geometry;
pub mod kinematics;
pub mod planning;
pub mod pointing;
pub mod robot;
pub mod runner;
pub mod safety;
pub mod sim;
pub mod train;
pub mod viz;
pub mod vlm;

/// Re-export of the nalgebra that `k` 0.32 is built on (0.30). Every robot-math type in the crate
/// comes from here so that there is exactly one nalgebra in the public API.
pub use k::nalgebra;
