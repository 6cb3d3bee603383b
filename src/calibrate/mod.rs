//! Camera calibration against the robot: where a fixed (third-person) camera is in the robot's
//! base frame.
//!
//! | submodule | holds |
//! | --- | --- |
//! | [`handeye`] | eye-to-hand AX = XB: [`solve_eye_to_hand`] with Tsai-Lenz or Park-Martin, residuals, typed errors for too few or degenerate poses |
//! | [`file`] | the recorded pose pairs (JSON) and the atomic write of `calibration/<camera>.toml` |
//! | [`target`] | the image side: AprilTag detection, the tag pose by PnP, calibration views in the simulator, sessions on disk |
//!
//! The image side produces [`HandEyeSample`]s; [`handeye`] works on poses only, so it is tested against OpenCV on synthetic poses
//! (`tests/calibrate_handeye.rs`, fixture script `tests/fixtures/gen_handeye_golden.py`).

pub mod file;
pub mod handeye;
pub mod target;

pub use file::{load_samples, solve_and_write, write_calibration, CalibrateError};
pub use handeye::{
    solve_eye_to_hand, HandEyeError, HandEyeSample, HandEyeSolution, Method, Residuals,
    SampleResidual,
};
