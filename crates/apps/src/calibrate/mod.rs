//! Camera calibration against the robot: where a fixed (third-person) camera is in the robot's
//! base frame.
//!
//! | submodule | holds |
//! | --- | --- |
//! | [`handeye`] | eye-to-hand AX = XB: [`solve_eye_to_hand`] with Tsai-Lenz or Park-Martin, residuals, typed errors for too few or degenerate poses |
//! | [`file`] | the recorded pose pairs (JSON), the sanity check of a solve ([`SanityLimits`], the likely mistake) and the atomic write of `calibration/<camera>.toml` |
//! | [`sim`] | the whole procedure on the simulator's camera, whose true pose is known |
//! | [`target`] | the image side: AprilTag detection, the tag pose by PnP, calibration views in the simulator, sessions on disk |
//!
//! The image side produces [`HandEyeSample`]s; [`handeye`] works on poses only, so it is tested against OpenCV on synthetic poses
//! (`tests/calibrate_handeye.rs`, fixture script `tests/fixtures/gen_handeye_golden.py`).

pub mod file;
pub(crate) mod handeye;
pub mod sim;
pub mod target;

pub use handeye::{
    solve_eye_to_hand, HandEyeError, HandEyeOptions, HandEyeSample, HandEyeSolution, Method,
    Residuals, SampleResidual, TsaiOptions, MAX_SAMPLES,
};

use file::{CalibrateError, CalibrateOptions};
use std::path::{Path, PathBuf};

use target::views::{observe_target, CalibrationView, SkippedView};
use target::TagTarget;

/// What [`calibrate_views`] did.
#[derive(Debug, Clone)]
pub struct ViewsCalibration {
    /// The hand-eye solve from the usable views.
    pub solution: HandEyeSolution,
    /// The calibration file written.
    pub path: PathBuf,
    /// Views whose tag pose went into the solve.
    pub used: Vec<usize>,
    /// Views without a usable tag, and why.
    pub skipped: Vec<SkippedView>,
    /// `Some` when the solve failed the sanity check and was written only because of
    /// [`CalibrateOptions::force`].
    pub forced: Option<file::Implausibility>,
}

/// Images to calibration file: the tag's pose in every view (detection + PnP), the eye-to-hand
/// solve, and the atomic write of `dir/<camera>.toml` — only when the solve succeeds, so a failed
/// run leaves an existing file as it was; so does a solve that fails the sanity check
/// ([`SanityLimits`]) unless forced. `options`: a [`Method`], a [`HandEyeOptions`] or a
/// [`CalibrateOptions`].
pub fn calibrate_views(
    views: &[CalibrationView],
    target: &TagTarget,
    options: impl Into<CalibrateOptions>,
    dir: &Path,
    camera: &str,
) -> Result<ViewsCalibration, CalibrateError> {
    let (seen, skipped) = observe_target(views, target)?;
    let samples: Vec<HandEyeSample> = seen.iter().map(HandEyeSample::from).collect();
    let w = file::solve_check_and_write(&samples, options, dir, camera)?;
    Ok(ViewsCalibration {
        solution: w.solution,
        path: w.path,
        forced: w.forced,
        used: seen.iter().map(|o| o.view).collect(),
        skipped,
    })
}
