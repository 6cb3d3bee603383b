//! The hand-eye calibration target: an AprilTag (family tag36h11) held by the gripper, seen by a
//! fixed camera (eye-to-hand).
//!
//! What this module produces is the `camera_from_target` half of every hand-eye sample; the robot
//! gives the `base_from_gripper` half, and `calibrate::handeye` solves AX = XB from the pairs.
//!
//! | step | where | what |
//! | --- | --- | --- |
//! | detect | [`detect`] | AprilTag corners in an RGB image (`kornia-apriltag`, pure Rust) |
//! | pose | [`pnp`] | tag pose from its 4 corners: homography, then Levenberg–Marquardt on the reprojection error |
//! | pattern | [`pattern`] | the tag's black/white cells from the detector's own code table, as a printable texture |
//! | views | [`views`] | robot poses that show the tag to the camera, moving through the safety gate, capture; frames + poses → observations |
//! | session | [`session`] | a capture session on disk: recorded frames plus `poses.json` |
//!
//! # The target frame
//!
//! Origin at the centre of the tag, **z out of the printed face** (towards a camera that sees
//! it), **x to the right and y up** of the tag as it is printed (its canonical orientation, the
//! one the family's code is defined in). The tag size is the edge of the black square (the
//! AprilTag convention: the white border outside it is not counted). Corners are always listed
//! top-left, top-right, bottom-right, bottom-left of the printed tag, i.e. at
//! `(−s, s)`, `(s, s)`, `(s, −s)`, `(−s, −s)` with `s` = size / 2 — OpenCV's
//! `SOLVEPNP_IPPE_SQUARE` order and axes.
//!
//! # Measured (`crates/apps/src/tests/calibrate_target.rs`, 8 cm tag, 640 × 480, fx = 605)
//!
//! * Corners of tags drawn by the simulator: worst 0.21 px from the exact projection.
//! * Detection + PnP on rendered tags at 0.5–0.8 m: mean 0.54 mm / 0.41°, worst 0.81 mm / 1.43° (the
//!   rotation outlier is a frontal view: four corners of a small square pin down its tilt poorly).
//! * The simulated calibration capture (xArm 6, 10 views at 0.75–0.81 m, tag tilted ±25° about
//!   both in-plane axes and rolled ±40°): mean 0.71 mm / 0.32°, worst 1.46 mm / 0.74°.
//! * PnP alone with 0.1 px corner noise: RMS 0.4–2.1 mm and 0.1–0.8° from 0.4 m to 1.0 m; noiseless,
//!   under 0.05 mm and 0.005° with or without Brown-Conrady distortion.

pub(crate) mod detect;
pub(crate) mod pattern;
pub mod pnp;
pub mod session;
pub mod views;

use crate::camera::CameraError;

/// The only family the target uses: the usual calibration family (36 bits, minimum Hamming
/// distance 11, 587 ids), robust to a few bit errors and never confused with another id.
pub(crate) const FAMILY: &str = "tag36h11";

/// The family's code table, from the detector crate itself.
pub(crate) fn family() -> Result<kornia_apriltag::family::TagFamily, TargetError> {
    kornia_apriltag::family::TagFamily::tag36_h11()
        .map_err(|e| TargetError::Detector(e.to_string()))
}

/// How many ids the family has.
fn family_size() -> Result<usize, TargetError> {
    Ok(family()?.code_data.len())
}

/// What the camera is looking for.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TagTarget {
    /// Tag family; only [`FAMILY`] is supported.
    pub family: String,
    /// Tag id within the family.
    pub id: u16,
    /// Edge of the black square, metres.
    pub size_m: f64,
}

impl TagTarget {
    /// A tag36h11 tag.
    pub fn tag36h11(id: u16, size_m: f64) -> Self {
        TagTarget {
            family: FAMILY.to_string(),
            id,
            size_m,
        }
    }

    /// Checks the family, the id and the size.
    pub(crate) fn validate(&self) -> Result<(), TargetError> {
        if self.family != FAMILY {
            return Err(TargetError::Target(format!(
                "family `{}` is not supported; print a {FAMILY} tag",
                self.family
            )));
        }
        let ids = family_size()?;
        if usize::from(self.id) >= ids {
            return Err(TargetError::Target(format!(
                "id {} does not exist in {FAMILY} (ids 0..{ids})",
                self.id
            )));
        }
        if !(self.size_m.is_finite() && self.size_m > 0.0) {
            return Err(TargetError::Target(format!(
                "tag size {} m must be positive (the edge of the black square)",
                self.size_m
            )));
        }
        Ok(())
    }
}

/// Why a view gave no target pose, or a target could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// No tag of the family anywhere in the image.
    #[error("no {FAMILY} tag found in the image (is the tag in view, lit, not blurred, and its white border visible?)")]
    NoTag,
    /// Tags were found, but not the one expected.
    #[error("{FAMILY} tag {expected} not in the image; saw id(s) {seen:?} (print the target as {FAMILY} id {expected})")]
    WrongId {
        /// The id of the configured target.
        expected: u16,
        /// The ids found instead.
        seen: Vec<u16>,
    },
    /// The detector itself failed (image size, configuration).
    #[error("AprilTag detector: {0}")]
    Detector(String),
    /// The corners do not determine a pose (degenerate, behind the camera, not finite).
    #[error("tag pose: {0}")]
    Pose(String),
    /// A bad target description (family, id, size).
    #[error("calibration target: {0}")]
    Target(String),
    /// The camera failed to capture a view.
    #[error(transparent)]
    Camera(#[from] CameraError),
    /// A capture session on disk that cannot be read or written; names the file.
    #[error("{file}: {reason}")]
    Session {
        /// The session file (or folder).
        file: String,
        /// What went wrong.
        reason: String,
    },
    /// The robot could not be moved to a view (refused by the gate, unreachable, driver error).
    #[error("robot: {0}")]
    Robot(String),
}
