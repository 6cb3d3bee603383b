//! Spatial questions about videos of simulated scenes, VSI-Bench style (Yang et al. 2024,
//! "Thinking in Space", arXiv 2412.14171), with exact answers from the simulator: the data
//! Embodied-R (Zhao et al. 2025, arXiv 2504.12680) trains its reasoning on, made where every
//! answer is known.
//!
//! * [`walk`]: a camera walking around the table, rendered frame by frame (and the recorded
//!   changes: the task run by the simulated arm halfway through).
//! * [`truth`]: each frame's camera and objects in view, each object's pose and size.
//! * [`questions`]: VSI-Bench's question types asked of that truth, with margins.
//! * [`score`]: VSI-Bench's scoring (letters by exact match, numbers by Mean Relative Accuracy)
//!   and its per-type table.
//! * [`describe`]: the oracle describer (what a perfect VLM would say about a frame).
//!
//! # Output ([`generate`])
//! For each task of the suite and each seed, one sequence of the settled scene
//! (`<suite>-<task>-s<seed>`) and, for tasks that put their object somewhere, one with the task
//! run halfway through (`…-moved`):
//! * `OUT/sequences/<id>/0000.png …`: the frames, `width` × `height`, at `fps` frames per second
//!   of the walk;
//! * `OUT/sequences/<id>/truth.json`: the sequence's truth (`truth::SequenceTruth`): `id`, `task`,
//!   `seed`, `scene`, `fps`, `min_pixels`, `table_height`, `objects` (name, phrase, category,
//!   instance, pose `{translation, rotation_xyzw}`, centre, `size_m` along the object's own axes),
//!   `moved` (object, start and end pose and centre, `first_frame_after`) for a recorded change,
//!   and `frames` (index, `time_s`, image, `world_from_camera` as a row-major 4 × 4 in OpenCV's
//!   optical frame, intrinsics, and `visible`: name, phrase, instance, pixels, inclusive `bbox`
//!   `[u_min, v_min, u_max, v_max]`, centre);
//! * `OUT/sequences/<id>/descriptions.json`: the oracle describer's words for each frame (a
//!   list of strings, frame order);
//! * `OUT/questions.jsonl`: one [`SpatialQuestion`] a line.
//!
//! Deterministic: the same options give the same bytes.

pub(crate) mod describe;
mod options;
pub(crate) mod questions;
pub(crate) mod score;
pub(crate) mod truth;
pub(crate) mod walk;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

pub use options::SpatialOptions;
pub use questions::{AnswerKind, QuestionType, SpatialQuestion};
pub use score::{score, SpatialTally};

use crate::sim::tasks::{fnv1a, TaskError};

/// The JSONL [`generate`] writes in its output folder.
pub(crate) const QUESTIONS_NAME: &str = "questions.jsonl";
/// The folder of the sequences, beside the JSONL.
pub(crate) const SEQUENCES_DIR: &str = "sequences";
/// Each sequence's truth file.
pub(crate) const TRUTH_NAME: &str = "truth.json";
/// Each sequence's oracle descriptions, one string per frame (a JSON list).
pub(crate) const DESCRIPTIONS_NAME: &str = "descriptions.json";

/// Errors of generating the data.
#[derive(Debug, thiserror::Error)]
pub enum SpatialError {
    /// The options ask for nothing or for an unusable size or rate.
    #[error("spatial data options: {0}")]
    Options(String),
    /// An unknown task id.
    #[error(transparent)]
    Task(#[from] TaskError),
    /// A file or folder could not be written.
    #[error("{}: {message}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The error, in words.
        message: String,
    },
}

fn io_err(path: &Path, e: impl std::fmt::Display) -> SpatialError {
    SpatialError::Io {
        path: path.to_owned(),
        message: e.to_string(),
    }
}

/// Where [`generate`] is, after each sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpatialProgress {
    /// Sequences tried.
    pub done: usize,
    /// Sequences in the whole run.
    pub total: usize,
    /// Questions made so far.
    pub questions: usize,
}

/// What [`generate`] made.
#[derive(Debug, Clone, PartialEq)]
pub struct SpatialSummary {
    /// Sequences written.
    pub sequences: usize,
    /// Frames written.
    pub frames: usize,
    /// Questions per type.
    pub questions: BTreeMap<QuestionType, usize>,
    /// Sequences or questions left out, and why (`<sequence id>: reason`).
    pub skipped: Vec<String>,
    /// The JSONL written.
    pub jsonl: PathBuf,
}

impl SpatialSummary {
    /// Questions written, all types together.
    pub fn total_questions(&self) -> usize {
        self.questions.values().sum()
    }
}

fn check(opts: &SpatialOptions) -> Result<(), SpatialError> {
    let bad = |m: String| Err(SpatialError::Options(m));
    if opts.seeds == 0 {
        return bad("no seeds asked for".into());
    }
    if opts.frames < 2 {
        return bad(format!("{} frames: a video needs at least 2", opts.frames));
    }
    if !(opts.fps.is_finite() && opts.fps > 0.0) {
        return bad(format!("fps {} must be > 0", opts.fps));
    }
    for (name, side) in [("width", opts.width), ("height", opts.height)] {
        if !(32..=4096).contains(&side) {
            return bad(format!("{name} {side} is outside [32, 4096] pixels"));
        }
    }
    Ok(())
}

/// The questions of one sequence's truth, with their ids and the sequence's path, and why a
/// recorded change gives none.
pub(crate) fn questions_of(seq: &truth::SequenceTruth) -> (Vec<SpatialQuestion>, Option<String>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seq.seed ^ fnv1a(&seq.id));
    let (drafts, why) = if seq.moved.is_some() {
        match questions::moved_question(seq, &mut rng) {
            Ok(d) => (vec![d], None),
            Err(e) => (Vec::new(), Some(e)),
        }
    } else {
        (questions::static_questions(seq, &mut rng), None)
    };
    let mut per_type: BTreeMap<QuestionType, usize> = BTreeMap::new();
    let out = drafts
        .into_iter()
        .map(|d| {
            let n = per_type.entry(d.question_type).or_default();
            let id = format!("{}/{}/{n}", seq.id, d.question_type.name());
            *n += 1;
            SpatialQuestion {
                id,
                sequence: format!("{SEQUENCES_DIR}/{}", seq.id),
                fps: seq.fps,
                kind: if d.question_type.is_number() {
                    AnswerKind::Number
                } else {
                    AnswerKind::Choice
                },
                question_type: d.question_type,
                question: d.question,
                options: d.options,
                answer: d.answer,
            }
        })
        .collect();
    (out, why)
}

/// Renders the sequences and writes them with their questions (see the module docs);
/// `progress` sees every finished sequence. A sequence that cannot be made is listed in the
/// summary, not an error; a file that cannot be written is.
pub fn generate(
    opts: &SpatialOptions,
    progress: &mut dyn FnMut(&SpatialProgress),
) -> Result<SpatialSummary, SpatialError> {
    check(opts)?;
    let tasks = opts.suite.select(&opts.tasks)?;
    let seq_dir = opts.out.join(SEQUENCES_DIR);
    std::fs::create_dir_all(&seq_dir).map_err(|e| io_err(&seq_dir, e))?;
    let jsonl = opts.out.join(QUESTIONS_NAME);
    let seeds = opts.seed..opts.seed.saturating_add(opts.seeds);
    let kinds: &[bool] = if opts.moved { &[false, true] } else { &[false] };
    let total = tasks.len() * seeds.clone().count() * kinds.len();
    let mut summary = SpatialSummary {
        sequences: 0,
        frames: 0,
        questions: BTreeMap::new(),
        skipped: Vec::new(),
        jsonl: jsonl.clone(),
    };
    let mut text = String::new();
    let mut done = 0;
    let mut made = 0;
    for spec in &tasks {
        for seed in seeds.clone() {
            for &moved in kinds {
                done += 1;
                let id = walk::sequence_id(&spec.full_id(), seed, moved);
                match walk::record(spec, seed, opts, moved) {
                    Ok(rec) => {
                        let (qs, why) = questions_of(&rec.truth);
                        if let Some(why) = why {
                            summary.skipped.push(format!("{id}: {why}"));
                        }
                        write_sequence(&seq_dir, &rec)?;
                        summary.sequences += 1;
                        summary.frames += rec.images.len();
                        for q in qs {
                            *summary.questions.entry(q.question_type).or_default() += 1;
                            made += 1;
                            text.push_str(
                                &serde_json::to_string(&q).map_err(|e| io_err(&jsonl, e))?,
                            );
                            text.push('\n');
                        }
                    }
                    Err(why) => {
                        tracing::warn!(sequence = %id, "no sequence: {why}");
                        summary.skipped.push(format!("{id}: {why}"));
                    }
                }
                progress(&SpatialProgress {
                    done,
                    total,
                    questions: made,
                });
            }
        }
    }
    let tmp = jsonl.with_extension("jsonl.tmp");
    std::fs::write(&tmp, text).map_err(|e| io_err(&tmp, e))?;
    std::fs::rename(&tmp, &jsonl).map_err(|e| io_err(&jsonl, e))?;
    Ok(summary)
}

fn write_sequence(seq_dir: &Path, rec: &walk::Recorded) -> Result<(), SpatialError> {
    let dir = seq_dir.join(&rec.truth.id);
    std::fs::create_dir_all(&dir).map_err(|e| io_err(&dir, e))?;
    for (img, f) in rec.images.iter().zip(&rec.truth.frames) {
        let path = dir.join(&f.image);
        img.save(&path).map_err(|e| io_err(&path, e))?;
    }
    let path = dir.join(TRUTH_NAME);
    let json = serde_json::to_string_pretty(&rec.truth).map_err(|e| io_err(&path, e))?;
    std::fs::write(&path, json + "\n").map_err(|e| io_err(&path, e))?;
    let said: Vec<String> = (0..rec.truth.frames.len())
        .map(|i| describe::describe(&rec.truth, i))
        .collect();
    let path = dir.join(DESCRIPTIONS_NAME);
    let json = serde_json::to_string_pretty(&said).map_err(|e| io_err(&path, e))?;
    std::fs::write(&path, json + "\n").map_err(|e| io_err(&path, e))
}

/// Reads a `questions.jsonl` (blank lines skipped); a line that is not a question is an error
/// naming it.
pub fn load_questions(path: &Path) -> Result<Vec<SpatialQuestion>, SpatialError> {
    let text = pointact_core::input::read_text(path, pointact_core::input::MAX_DATA_BYTES)
        .map_err(|e| io_err(path, e))?;
    let text = text
        .strip_prefix(crate::train::grpo::data::UTF8_BOM)
        .unwrap_or(&text);
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| io_err(path, format!("line {}: {e}", i + 1)))
        })
        .collect()
}
