//! GRPO records made from generated spatial questions (`train spatial-data --records`): each
//! question's prompt is exactly what `ask` gives its reasoning model, its answer a
//! [`SpatialTruth`]. Apart from the reward (`spatial`) because the record reader reads the
//! reward's ground truth, and these records are written with the reader's format.

use std::path::Path;

use super::data::{write_records, DataError, RecordLine, IMAGE_MARKER, JSONL_NAME};
use super::spatial::{SpatialTruth, TASK_TYPE};
use crate::ask::eval::{question_text, questions_in, EvalSpatialError, OracleDescriber, Sequences};
use crate::ask::{ask, AskOptions};
use crate::train::consistency::{ReferenceError, ReferenceModel};

/// Captures the reasoning prompt `ask` builds, replying in format so that `ask` completes.
struct PromptCapture(Option<String>);

impl ReferenceModel for PromptCapture {
    fn reply(&mut self, _: &str, user: &str, _: usize, _: f64) -> Result<String, ReferenceError> {
        self.0 = Some(user.to_owned());
        Ok("<think></think><answer>A</answer>".into())
    }
}

/// GRPO records of the questions in `questions` (a `questions.jsonl` of `train spatial-data`):
/// each question's prompt is the one `ask` gives the reasoning model with the oracle describer
/// (the sequence's key frames as `ask` selects them, their `descriptions.json` words, then
/// `ask::prompts::reasoning_prompt` with `ask::eval::question_text`), the answer its
/// [`SpatialTruth`]. No images: the records are text-only.
pub(crate) fn spatial_records(
    questions: &Path,
    options: &AskOptions,
) -> Result<Vec<RecordLine>, EvalSpatialError> {
    let all = questions_in(questions, None)?;
    let mut sequences = Sequences::new(questions, true);
    let mut lines = Vec::with_capacity(all.len());
    for q in &all {
        let bad = |reason: String| EvalSpatialError::Sequence {
            sequence: questions
                .parent()
                .unwrap_or(Path::new("."))
                .join(&q.sequence),
            reason,
        };
        let (video, said) = sequences.of(q)?;
        let mut describer = OracleDescriber::new(video, said);
        let mut capture = PromptCapture(None);
        let text = question_text(q);
        ask(
            video,
            &text,
            &mut describer,
            &mut capture,
            options,
            &mut |_| {},
        )
        .map_err(|e| bad(e.to_string()))?;
        let prompt = capture
            .0
            .ok_or_else(|| bad("the reasoning model was not asked".into()))?;
        debug_assert!(!prompt.contains(IMAGE_MARKER));
        lines.push(RecordLine {
            id: q.id.clone(),
            problem: prompt,
            answer: SpatialTruth::of(q).ground_truth(),
            images: Vec::new(),
            ability: Some(TASK_TYPE.into()),
            task: Some(q.question_type.name().into()),
            seed: None,
            reference: None,
        });
    }
    Ok(lines)
}

/// Why spatial records could not be made.
#[derive(Debug, thiserror::Error)]
pub enum SpatialRecordsError {
    /// The questions, a sequence's frames or its descriptions could not be read.
    #[error(transparent)]
    Questions(#[from] EvalSpatialError),
    /// The records could not be written.
    #[error(transparent)]
    Write(#[from] DataError),
}

/// Writes the records of `questions` (see [`spatial_records`]) as `records.jsonl` beside it, the
/// file `pointact train grpo --data` reads; returns its path and how many records it holds.
pub fn write_spatial_records(
    questions: &Path,
    options: &AskOptions,
) -> Result<(std::path::PathBuf, usize), SpatialRecordsError> {
    let lines = spatial_records(questions, options)?;
    let path = questions
        .parent()
        .unwrap_or(Path::new("."))
        .join(JSONL_NAME);
    write_records(&path, &lines)?;
    Ok((path, lines.len()))
}
