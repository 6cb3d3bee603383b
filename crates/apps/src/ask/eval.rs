//! `eval spatial`: the `ask` pipeline on generated spatial questions (`train spatial-data`),
//! scored as VSI-Bench scores (`train::spatial::score`: letters by exact match, numbers by Mean
//! Relative Accuracy) into its per-type table (`SpatialTally`).
//!
//! Any `ask` configuration is evaluated the same way: the describer is a model (our Qwen2.5-VL or
//! a server) or the oracle — the simulator's own words for each frame (`descriptions.json`), what
//! a perfect vision model would say, so the table then measures the reasoning model alone. A
//! reply without the `<think>`/`<answer>` format scores 0 (it answered nothing), as does a
//! question whose model call failed; both are counted and named in the row, and the run goes on.

use std::path::{Path, PathBuf};

use image::RgbImage;

use super::frames::{frames_dir, FramesError, Video};
use super::{ask, AskError, AskOptions, Describer};
use crate::train::consistency::ReferenceModel;
use crate::train::spatial::{
    load_questions, score, SpatialError, SpatialQuestion, SpatialTally, DESCRIPTIONS_NAME,
};

/// The simulator's words for the frames of one sequence: the description of the frame shown
/// last (the current key frame), found by its pixels among the sequence's frames.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OracleDescriber<'a> {
    frames: &'a [RgbImage],
    descriptions: &'a [String],
}

impl<'a> OracleDescriber<'a> {
    /// The describer of `video`'s frames, whose descriptions are `descriptions` (frame order).
    pub(crate) fn new(video: &'a Video, descriptions: &'a [String]) -> Self {
        OracleDescriber {
            frames: &video.frames,
            descriptions,
        }
    }
}

impl Describer for OracleDescriber<'_> {
    fn describe(
        &mut self,
        images: &[&RgbImage],
        _prompt: &str,
        _max_tokens: usize,
    ) -> Result<String, String> {
        let current = images.last().ok_or("no image to describe")?;
        let index = self
            .frames
            .iter()
            .position(|f| f == *current)
            .ok_or("the image is not a frame of this sequence")?;
        self.descriptions
            .get(index)
            .cloned()
            .ok_or_else(|| format!("no oracle description for frame {index}"))
    }
}

/// What describes the key frames in an evaluation.
pub enum DescriberChoice<'a> {
    /// The simulator's own descriptions (`descriptions.json` beside each sequence's frames).
    Oracle,
    /// A vision model.
    Model(&'a mut dyn Describer),
}

/// One question's outcome.
#[derive(Debug, Clone)]
pub struct SpatialRow {
    /// The question's id.
    pub id: String,
    /// Its score in [0, 1].
    pub score: f64,
    /// The parsed answer, when the reply had the format.
    pub answer: Option<String>,
    /// Why there is no answer (no format, a failed call), when there is none.
    pub note: Option<String>,
}

/// Why an evaluation cannot run.
#[derive(Debug, thiserror::Error)]
pub enum EvalSpatialError {
    /// The questions file is missing or malformed.
    #[error(transparent)]
    Questions(#[from] SpatialError),
    /// The file holds no question.
    #[error("no questions in {0}")]
    Empty(PathBuf),
    /// A sequence's frames or oracle descriptions cannot be read.
    #[error("sequence {sequence}: {reason}")]
    Sequence {
        /// The sequence folder.
        sequence: PathBuf,
        /// What went wrong.
        reason: String,
    },
}

/// The text a question is asked with: the question, then its options one per line
/// (`Options:` first, as VSI-Bench's prompts list them).
pub(crate) fn question_text(q: &SpatialQuestion) -> String {
    if q.options.is_empty() {
        q.question.clone()
    } else {
        format!("{}\nOptions:\n{}", q.question, q.options.join("\n"))
    }
}

/// The questions of a `questions.jsonl`, the first `limit` when given; none is an error.
pub(crate) fn questions_in(
    path: &Path,
    limit: Option<usize>,
) -> Result<Vec<SpatialQuestion>, EvalSpatialError> {
    let mut all = load_questions(path)?;
    if let Some(n) = limit {
        all.truncate(n);
    }
    if all.is_empty() {
        return Err(EvalSpatialError::Empty(path.to_path_buf()));
    }
    Ok(all)
}

/// The frames (and, for the oracle, the descriptions) of the sequence a question is about, read
/// when the question names another sequence than the last one: `train spatial-data` writes a
/// sequence's questions together, so each sequence is read once and only one is held.
pub(crate) struct Sequences {
    root: PathBuf,
    oracle: bool,
    last: Option<(String, Video, Vec<String>)>,
}

impl Sequences {
    /// The sequences beside `questions`; `oracle` also reads their descriptions.
    pub(crate) fn new(questions: &Path, oracle: bool) -> Self {
        Sequences {
            root: questions.parent().unwrap_or(Path::new(".")).to_path_buf(),
            oracle,
            last: None,
        }
    }

    /// `q`'s frames and descriptions (empty unless `oracle`).
    pub(crate) fn of(
        &mut self,
        q: &SpatialQuestion,
    ) -> Result<(&Video, &[String]), EvalSpatialError> {
        if self.last.as_ref().is_none_or(|(s, ..)| *s != q.sequence) {
            let dir = self.root.join(&q.sequence);
            let bad = |reason: String| EvalSpatialError::Sequence {
                sequence: dir.clone(),
                reason,
            };
            let video = frames_dir(&dir, q.fps).map_err(|e: FramesError| bad(e.to_string()))?;
            let said = if self.oracle {
                let path = dir.join(DESCRIPTIONS_NAME);
                let said: Vec<String> =
                    pointact_core::input::read_text(&path, pointact_core::input::MAX_CONFIG_BYTES)
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
                said
            } else {
                Vec::new()
            };
            self.last = Some((q.sequence.clone(), video, said));
        }
        let Some((_, video, said)) = &self.last else {
            unreachable!("read above")
        };
        Ok((video, said))
    }
}

/// Asks every question of `questions` (a `questions.jsonl`; the first `limit` when given) and
/// tallies the scores; `on_row` sees each outcome with its position and the total.
pub fn eval_spatial(
    questions: &Path,
    mut describer: DescriberChoice<'_>,
    reasoner: &mut dyn ReferenceModel,
    options: &AskOptions,
    limit: Option<usize>,
    on_row: &mut dyn FnMut(&SpatialQuestion, &SpatialRow, usize, usize),
) -> Result<SpatialTally, EvalSpatialError> {
    let all = questions_in(questions, limit)?;
    let mut sequences = Sequences::new(questions, matches!(describer, DescriberChoice::Oracle));
    let mut tally = SpatialTally::default();
    let total = all.len();
    for (i, q) in all.iter().enumerate() {
        let (video, said) = sequences.of(q)?;
        let mut oracle = OracleDescriber::new(video, said);
        let describer: &mut dyn Describer = match &mut describer {
            DescriberChoice::Model(d) => &mut **d,
            DescriberChoice::Oracle => &mut oracle,
        };
        let row = match ask(
            video,
            &question_text(q),
            describer,
            reasoner,
            options,
            &mut |_| {},
        ) {
            Ok(report) => SpatialRow {
                id: q.id.clone(),
                score: score(q, &report.reply),
                answer: Some(report.answer),
                note: None,
            },
            Err(AskError::NoFormat { .. }) => SpatialRow {
                id: q.id.clone(),
                score: 0.0,
                answer: None,
                note: Some("reply without the <think>/<answer> format".into()),
            },
            Err(e) => SpatialRow {
                id: q.id.clone(),
                score: 0.0,
                answer: None,
                note: Some(e.to_string()),
            },
        };
        tally.add(q.question_type, row.score);
        on_row(q, &row, i, total);
    }
    Ok(tally)
}
