//! The lens distortion models a camera's intrinsics name (librealsense's `rs2_distortion`).

use serde::{Deserialize, Serialize};

/// Lens distortion model, named and ordered as librealsense's `rs2_distortion` subset we support.
///
/// Kannala-Brandt and F-theta (fisheye T265 streams) are not supported: no camera of this project
/// uses them, and a driver meeting one should fail loudly rather than guess.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Distortion {
    /// Pinhole; coefficients are ignored (L515 depth, simulator cameras).
    #[default]
    None,
    /// Forward Brown-Conrady (L515 colour since SDK 2.44; D400 colour in newer firmware).
    BrownConrady,
    /// librealsense's "inverse" Brown-Conrady (D400 colour in older SDKs; coefficients are zero).
    InverseBrownConrady,
    /// Forward-only model: projection works, deprojection is an error.
    ModifiedBrownConrady,
}

impl Distortion {
    /// The snake_case name used in calibration files.
    pub fn name(self) -> &'static str {
        match self {
            Distortion::None => "none",
            Distortion::BrownConrady => "brown_conrady",
            Distortion::InverseBrownConrady => "inverse_brown_conrady",
            Distortion::ModifiedBrownConrady => "modified_brown_conrady",
        }
    }

    /// Parses the snake_case name used in calibration files.
    pub fn from_name(name: &str) -> Option<Self> {
        [
            Distortion::None,
            Distortion::BrownConrady,
            Distortion::InverseBrownConrady,
            Distortion::ModifiedBrownConrady,
        ]
        .into_iter()
        .find(|d| d.name() == name)
    }

    /// Whether [`Intrinsics::deproject`](super::Intrinsics::deproject) works with this model.
    pub(crate) fn can_deproject(self) -> bool {
        self != Distortion::ModifiedBrownConrady
    }
}
