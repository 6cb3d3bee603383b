//! GRPO records made from generated spatial questions (`train spatial-data --records`): each
//! question's prompt is exactly what `ask` gives its reasoning model, its answer a
//! [`SpatialTruth`]. Apart from the reward (`spatial`) because the record reader reads the
//! reward's ground truth, and these records are written with the reader's format.

use std::path::Path;

use super::data::{write_records, DataError, RecordLine, IMAGE_MARKER, JSONL_NAME};
use super::spatial::{SpatialTruth, TASK_TYPE};
use crate::ask::eval::{question_text, EvalSpatialError, OracleDescriber};
use crate::ask::frames::frames_dir;
use crate::ask::{ask, AskOptions};
use crate::train::consistency::{ReferenceError, ReferenceModel};
use crate::train::spatial::{load_questions, DESCRIPTIONS_NAME};

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
    let all = load_questions(questions)?;
    if all.is_empty() {
        return Err(EvalSpatialError::Empty(questions.to_path_buf()));
    }
    let root = questions.parent().unwrap_or(Path::new("."));
    let mut loaded: Option<(String, OracleDescriber, crate::ask::Video)> = None;
    let mut lines = Vec::with_capacity(all.len());
    for q in &all {
        let dir = root.join(&q.sequence);
        let bad = |reason: String| EvalSpatialError::Sequence {
            sequence: dir.clone(),
            reason,
        };
        if loaded.as_ref().is_none_or(|(s, _, _)| *s != q.sequence) {
            let video = frames_dir(&dir, q.fps).map_err(|e| bad(e.to_string()))?;
            let path = dir.join(DESCRIPTIONS_NAME);
            let said: Vec<String> = std::fs::read_to_string(&path)
                .map_err(|e| e.to_string())
                .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
                .map_err(|e| bad(format!("{}: {e}", path.display())))?;
            if said.len() != video.frames.len() {
                return Err(bad(format!(
                    "{} descriptions for {} frames",
                    said.len(),
                    video.frames.len()
                )));
            }
            loaded = Some((
                q.sequence.clone(),
                OracleDescriber::new(&video, said),
                video,
            ));
        }
        let Some((_, describer, video)) = loaded.as_mut() else {
            unreachable!("loaded above")
        };
        let mut capture = PromptCapture(None);
        let text = question_text(q);
        ask(video, &text, describer, &mut capture, options, &mut |_| {})
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
