//! The `Pointer` seam: anything that answers an ability + instruction on a frame with points.
//! Backends: the simulator's oracle (`sim::oracle`), the local Qwen2.5-VL (`qwen`) and a remote
//! OpenAI-compatible server (`openai`). Every backend returns the model's raw text, parsed by the
//! one parser, so a backend can never hand the executor points that skipped validation.

use super::openai::OpenAiError;
use super::{parse_answer, Ability, ModelImageMap, PointAnswer, PointingError};
use pointact_core::camera::Frame;

/// A parsed answer and the map from the model's pixels to the frame's pixels.
#[derive(Debug, Clone)]
pub struct Pointing {
    /// What the model answered, parsed and validated, in the model's pixels.
    pub answer: PointAnswer,
    /// How the model's image was resized from the frame, to map the points back.
    pub map: ModelImageMap,
}

impl Pointing {
    /// Parses `raw` as the backend's reply for an image the model saw through `map`.
    pub fn parse(raw: &str, ability: Ability, map: ModelImageMap) -> Result<Self, PointerError> {
        let answer = parse_answer(raw, ability, map.model())?;
        Ok(Pointing { answer, map })
    }

    /// The points in the frame's own pixels.
    pub fn points_px(&self) -> Vec<[f64; 2]> {
        self.answer.to_original(&self.map)
    }
}

/// Why a pointing query failed.
#[derive(Debug, thiserror::Error)]
pub enum PointerError {
    /// (No `#[source]`: the message already holds the parser's, and error chains would repeat it.)
    #[error("the model's answer is unusable: {0}")]
    Answer(PointingError),
    /// The instruction names no object in view (the simulator's oracle resolves phrases against the
    /// scene).
    #[error("no object in view matches `{phrase}`")]
    NoSuchObject {
        /// The object phrase as given.
        phrase: String,
    },
    /// The backend failed to answer: a model error, a thread that stopped, or no usable sample.
    #[error("pointer backend: {0}")]
    Backend(String),
    /// The OpenAI-compatible server could not be used (unreachable, timed out, HTTP error, bad body).
    #[error("openai backend: {0}")]
    Remote(OpenAiError),
}

impl From<PointingError> for PointerError {
    fn from(e: PointingError) -> Self {
        PointerError::Answer(e)
    }
}

/// A pointing backend: asked an ability and an instruction on a frame, it answers with points.
pub trait Pointer {
    /// Backend name for logs ("oracle", "qwen", "openai").
    fn name(&self) -> &str;
    /// Asks for `ability` on `frame` with `instruction` (the text that fills the prompt template).
    fn point(
        &mut self,
        frame: &Frame,
        ability: Ability,
        instruction: &str,
    ) -> Result<Pointing, PointerError>;
}

/// A boxed backend is a backend, so the CLI can choose one at run time.
impl<P: Pointer + ?Sized> Pointer for Box<P> {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn point(
        &mut self,
        frame: &Frame,
        ability: Ability,
        instruction: &str,
    ) -> Result<Pointing, PointerError> {
        (**self).point(frame, ability, instruction)
    }
}

impl From<OpenAiError> for PointerError {
    fn from(e: OpenAiError) -> Self {
        PointerError::Remote(e)
    }
}
