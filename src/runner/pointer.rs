//! The pointer of a simulated episode, chosen by [`PointerKind`]: the oracle needs the episode's
//! ground truth, which exists only once the episode's world is built, so the choice is made first
//! (a model is loaded once, before any world) and the pointer is finished per episode.

use crate::pointing::{
    open, ModelOptions, ModelPointer, Pointer, PointerError, PointerKind, TextStream,
};
use crate::sim::oracle::{OracleOptions, OraclePointer, OracleTruth};

/// A chosen pointer, waiting for the episode's ground truth.
pub enum EpisodePointer {
    Oracle(OracleOptions),
    Model(ModelPointer),
}

impl EpisodePointer {
    /// Chooses the backend: the oracle with `oracle` settings, or a model opened by
    /// [`crate::pointing::open`] (`on_text` receives a local model's reply as it is generated).
    pub fn open(
        kind: PointerKind,
        model: &ModelOptions,
        oracle: OracleOptions,
        on_text: Option<TextStream>,
    ) -> Result<Self, PointerError> {
        Ok(match kind {
            PointerKind::Oracle => EpisodePointer::Oracle(oracle),
            _ => EpisodePointer::Model(open(kind, model, on_text)?),
        })
    }

    /// The pointer of the episode whose ground truth is `truth` (unused by model backends).
    pub fn for_episode(self, truth: OracleTruth) -> Box<dyn Pointer + Send> {
        match self {
            EpisodePointer::Oracle(o) => Box::new(OraclePointer::new(truth, o)),
            EpisodePointer::Model(m) => Box::new(m),
        }
    }
}
