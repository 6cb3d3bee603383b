//! The JSON that `pointact point` prints: what was asked, what the model said, and the points in
//! both the model's and the image's pixels — everything a script needs without re-parsing text.

use std::path::Path;

use serde::Serialize;

use super::{Ability, PointerError, Pointing};

/// A size in pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Size {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
}

/// One answered (or failed) pointing query.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PointReport {
    /// The ability asked for, as its command-line name (`reg`, `rrg`, `ofg`, `vtg`).
    pub ability: String,
    /// The instruction that filled the prompt template.
    pub instruction: String,
    /// Points in the given image's pixels, `[x, y]` (x = column); VTG in trajectory order.
    pub points: Vec<[f64; 2]>,
    /// The same points in the pixels of the resized image the model saw.
    pub model_points: Vec<[f64; 2]>,
    /// Size of the given image, when an answer was parsed.
    pub image: Option<Size>,
    /// Size of the resized image the model saw, when an answer was parsed.
    pub model_image: Option<Size>,
    /// The model's reasoning before its answer, if it gave any.
    pub reasoning: Option<String>,
    /// The model's full reply.
    pub raw: Option<String>,
    /// Why the query failed; absent from the JSON on success.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Path of the overlay image written for this query; absent from the JSON when none was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overlay: Option<String>,
}

impl PointReport {
    /// From a parsed answer (if any) and the backend's raw reply (if it has one apart from the
    /// answer).
    pub fn new(
        ability: Ability,
        instruction: &str,
        pointing: Option<&Pointing>,
        raw: Option<&str>,
    ) -> Self {
        let size = |s: super::ImageSize| Size {
            width: s.width,
            height: s.height,
        };
        PointReport {
            ability: ability.as_str().to_string(),
            instruction: instruction.to_string(),
            points: pointing.map(Pointing::points_px).unwrap_or_default(),
            model_points: pointing
                .map(|p| p.answer.points.clone())
                .unwrap_or_default(),
            image: pointing.map(|p| size(p.map.original())),
            model_image: pointing.map(|p| size(p.map.model())),
            reasoning: pointing.and_then(|p| p.answer.reasoning.clone()),
            raw: pointing
                .map(|p| p.answer.raw.clone())
                .or_else(|| raw.map(str::to_string)),
            error: None,
            overlay: None,
        }
    }

    /// Records why the query failed; keeps the model's raw text when the error carries it.
    pub fn with_error(mut self, e: &PointerError) -> Self {
        if self.raw.is_none() {
            if let PointerError::Answer(pe) = e {
                self.raw = Some(pe.raw().to_string());
            }
        }
        self.error = Some(e.to_string());
        self
    }

    /// Records the path of the overlay image drawn for this query.
    pub fn with_overlay(mut self, path: &Path) -> Self {
        self.overlay = Some(path.display().to_string());
        self
    }
}
