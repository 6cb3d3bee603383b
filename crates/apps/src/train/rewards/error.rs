//! Where the released reward function raises instead of returning a score.

use super::pyjson::JsonError;

/// Where the released function raises instead of returning a score.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RewardError {
    /// No `<type>…</type>` in the ground truth (Python: `AttributeError` on `None.group`).
    #[error("ground truth has no <type>…</type> tag")]
    MissingType,
    /// A `<type>` the released dispatch does not know (Python: `ValueError: Unknown type`).
    #[error("unknown ground-truth type `{0}`")]
    UnknownType(String),
    /// The `point_ref` ground-truth payload failed `json.loads`, which the released code calls
    /// outside its `try` (only when the response has a `<point>` block). Every other task parses
    /// its ground truth inside a `try`, and every `assert` the released code makes is inside one
    /// too: those never raise, they zero the task term.
    #[error("point_ref ground truth: {0}")]
    GroundTruth(JsonError),
}

impl RewardError {
    /// The Python exception class the released code raises here.
    pub fn python_exception(&self) -> &'static str {
        match self {
            RewardError::MissingType => "AttributeError",
            RewardError::UnknownType(_) => "ValueError",
            RewardError::GroundTruth(e) => e.python_class(),
        }
    }
}
