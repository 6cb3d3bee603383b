//! `Viz` when the crate is built without the `viz` feature: it cannot be opened, so none of its
//! methods can run; they exist so callers compile the same way with and without rerun.

use super::{Sink, VizError};
use crate::camera::RgbImage;
use crate::executor::Event;
use crate::pointing::{Ability, Pointing};

/// Uninhabited: [`Viz::open`] always fails with [`VizError::NotBuilt`].
pub struct Viz {
    never: std::convert::Infallible,
}

// The same methods as the real `Viz` (viz/record.rs), whose docs say what each logs; here none
// is reachable, since no `Viz` can be made.
#[allow(missing_docs)]
impl Viz {
    pub fn open(_app_id: &'static str, _sink: &Sink) -> Result<Viz, VizError> {
        Err(VizError::NotBuilt)
    }
    pub fn on_event(&mut self, _event: &Event<'_>) {
        match self.never {}
    }
    pub fn begin_episode(&mut self, _label: &str) {
        match self.never {}
    }
    pub fn log_outcome(&mut self, _success: bool, _detail: &str) {
        match self.never {}
    }
    pub fn log_dataset_episode(&mut self, _ep: &crate::dataset::read::EpisodeFrames) {
        match self.never {}
    }
    pub fn log_image(&mut self, _rgb: &RgbImage) {
        match self.never {}
    }
    pub fn log_answer(&mut self, _ability: Ability, _query: &str, _pointing: &Pointing) {
        match self.never {}
    }
    pub fn log_keyframe(&mut self, _index: usize, _stamp_s: f64, _rgb: &RgbImage, _text: &str) {
        match self.never {}
    }
    pub fn log_reasoning(&mut self, _question: &str, _think: &str, _answer: &str) {
        match self.never {}
    }
    pub fn log_timing(&mut self, _stage: &str, _seconds: f64) {
        match self.never {}
    }
    pub fn log_training(&mut self, _step: u64, _metrics: &[(String, f64)]) {
        match self.never {}
    }
    pub fn finish(self) -> Result<(), VizError> {
        match self.never {}
    }
}
