//! A training run: data order, steps, held-out evaluation, metrics, checkpoints, resume and
//! interruption. `pointact train grpo` is this loop behind a command line.
//!
//! * Order: each epoch is a seeded shuffle of the records (`seed + epoch`); `samples_seen` in the
//!   checkpoint says where a resumed run continues, so a resumed run sees the same questions in
//!   the same order as an uninterrupted one.
//! * A record whose image cannot be read is skipped with a warning and counted (never a crash
//!   mid-run); the next record takes its place in the batch.
//! * Metrics: one JSON line per step (with `"kind": "train"`) and per evaluation (`"kind": "eval"`)
//!   in `OUT/metrics.jsonl`; on resume, lines of steps after the checkpoint are dropped first, so
//!   the file always describes one history.
//! * Interruption: `stop` is checked between steps; the run then saves a checkpoint (unless the
//!   last step was just saved) and returns [`RunEnd::Interrupted`]. A second Ctrl-C kills the
//!   process (the CLI's handler); the previous checkpoint is intact either way (see
//!   [`super::checkpoint`]).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use super::checkpoint::{self, CheckpointError, TrainerState};
use super::data::{Record, RecordKind};
use super::spatial::{spatial_reward, NoReference, SpatialScoring, RELEASED_CONSISTENCY_WEIGHT};
use super::trainer::{EvalMetrics, GrpoTrainer, Sample, Scorer, StepMetrics, TrainError};
use crate::train::{env_reward, rewards, robot_r1};

/// How long a run is and what it writes.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Output folder: checkpoints and `metrics.jsonl`.
    pub out: PathBuf,
    /// Updates to reach (a resumed run continues to this total).
    pub steps: u64,
    /// Questions per step (each gets G rollouts).
    pub batch: usize,
    /// A checkpoint every this many steps (and at the end); 0: only at the end.
    pub save_every: u64,
    /// Checkpoints kept.
    pub keep: usize,
    /// A held-out evaluation every this many steps (and before the first, and at the end);
    /// 0: never.
    pub eval_every: u64,
    /// Shuffle the records each epoch (seeded); `false` keeps the file's order (for data laid
    /// out in balanced batches).
    pub shuffle: bool,
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// The run reached its step count.
    Finished,
    /// `stop` was set; a checkpoint of the last step was saved.
    Interrupted,
}

/// What happened, as it happens (for progress bars and viewers).
pub enum RunEvent<'a> {
    /// An update was taken.
    Step(&'a StepMetrics),
    /// The held-out set was evaluated.
    Eval(&'a EvalMetrics),
    /// A checkpoint was written to this folder.
    Saved(&'a Path),
    /// A record was skipped (its id, why).
    Skipped(&'a str, &'a str),
}

/// Errors of a run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A training step or evaluation failed.
    #[error(transparent)]
    Train(#[from] TrainError),
    /// Saving or loading a checkpoint failed.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The output folder or the metrics file could not be created, read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// There is no training record, or every one in a row failed to load.
    #[error("no training record could be read (every image failed to load)")]
    NoData,
}

/// The end of a run and its last evaluation.
#[derive(Debug, Clone)]
pub struct RunSummary {
    /// Whether the run finished or was interrupted.
    pub end: RunEnd,
    /// Updates taken in all, a resumed run's earlier ones included.
    pub steps: u64,
    /// The first evaluation of this run (`None`: no held-out set, or evaluation off).
    pub first_eval: Option<EvalMetrics>,
    /// The latest evaluation of this run.
    pub last_eval: Option<EvalMetrics>,
    /// Records skipped because their image could not be read.
    pub skipped_images: usize,
    /// The checkpoint folder written last.
    pub last_checkpoint: Option<PathBuf>,
}

/// Scores a response to a record of `kind` with its reward: the released functions, the
/// environment reward (a simulated episode, run to its end in place), Robot-R1's, Embodied-R's
/// (`spatial`: released weights, no reference model, so the consistency term reads the think
/// text, and no question; [`score_with`] chooses them). Components `overall` first.
pub fn score(
    kind: RecordKind,
    response: &str,
    ground_truth: &str,
) -> Result<Vec<(String, f64)>, String> {
    let mut none = NoReference;
    let mut spatial = SpatialScoring {
        reference: &mut none,
        consistency_weight: RELEASED_CONSISTENCY_WEIGHT,
    };
    score_with(kind, response, ground_truth, None, &mut spatial)
}

/// [`score`] with the question (the user text; Embodied-R's consistency reward sends it to the
/// reference model) and how spatial records are scored.
pub fn score_with(
    kind: RecordKind,
    response: &str,
    ground_truth: &str,
    question: Option<&str>,
    spatial: &mut SpatialScoring<'_>,
) -> Result<Vec<(String, f64)>, String> {
    let named = |v: &[(&str, f64)]| v.iter().map(|(k, x)| (k.to_string(), *x)).collect();
    match kind {
        RecordKind::Released(_) => rewards::score(response, ground_truth)
            .map(|s| named(s.components()))
            .map_err(|e| e.to_string()),
        RecordKind::Env => env_reward::env_reward(response, ground_truth)
            .map(|s| named(&s.components))
            .map_err(|e| e.to_string()),
        RecordKind::RobotR1 => robot_r1::reward(response, ground_truth)
            .map(|s| {
                named(&[
                    ("overall", s.overall),
                    ("format", s.format),
                    ("answer", s.answer),
                ])
            })
            .map_err(|e| e.to_string()),
        RecordKind::Spatial => spatial_reward(response, ground_truth, question, spatial),
    }
}

/// A record with its image read; a spatial record is text-only, asked with Embodied-R's
/// reasoning system prompt (`--system SYSTEM_PROMPT` of the released `train/train_8GPUs.sh`).
pub fn sample(record: &Record) -> Result<Sample, String> {
    if record.kind == RecordKind::Spatial {
        return Ok(Sample {
            id: record.id.clone(),
            task: record.kind.name().to_string(),
            question: record.question.clone(),
            image: None,
            system: Some(crate::ask::prompts::REASONING_SYSTEM.to_string()),
            ground_truth: record.ground_truth.clone(),
        });
    }
    let path = record
        .images
        .first()
        .ok_or_else(|| "the record has no image".to_string())?;
    let image = crate::camera::image_file::read_rgb(path).map_err(|e| e.to_string())?;
    Ok(Sample {
        id: record.id.clone(),
        task: record.kind.name().to_string(),
        question: record.question.clone(),
        image: Some(image),
        system: None,
        ground_truth: record.ground_truth.clone(),
    })
}

/// The order of epoch `epoch`: a seeded shuffle of `0..n`, or `0..n` itself.
fn epoch_order(n: usize, seed: u64, epoch: u64, shuffle: bool) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    if shuffle {
        order.shuffle(&mut ChaCha8Rng::seed_from_u64(seed.wrapping_add(epoch)));
    }
    order
}

/// Runs steps until `opts.steps`, from `state` (a fresh state or a checkpoint's).
#[allow(clippy::too_many_arguments)]
pub fn run(
    trainer: &mut GrpoTrainer,
    train: &[Record],
    eval: &[Sample],
    scorer: &Scorer<'_>,
    opts: &RunOptions,
    state: &mut TrainerState,
    stop: &AtomicBool,
    on_event: &mut dyn FnMut(RunEvent<'_>),
) -> Result<RunSummary, RunError> {
    if train.is_empty() {
        return Err(RunError::NoData);
    }
    // Text-only prompts past the model's positions end the run now, not at the step that
    // first draws them.
    for r in train.iter().filter(|r| r.kind == RecordKind::Spatial) {
        if let Ok(s) = sample(r) {
            trainer.check_text_prompt(&s)?;
        }
    }
    for s in eval {
        trainer.check_text_prompt(s)?;
    }
    fs::create_dir_all(&opts.out).map_err(|source| RunError::Io {
        path: opts.out.clone(),
        source,
    })?;
    let metrics_path = opts.out.join("metrics.jsonl");
    truncate_metrics(&metrics_path, state.step)?;
    let mut metrics = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&metrics_path)
        .map_err(|source| RunError::Io {
            path: metrics_path.clone(),
            source,
        })?;
    let mut write_line = |kind: &str, value: &dyn erased::Json| -> Result<(), RunError> {
        let line = value.line(kind);
        writeln!(metrics, "{line}")
            .and_then(|_| metrics.flush())
            .map_err(|source| RunError::Io {
                path: metrics_path.clone(),
                source,
            })
    };
    let mut summary = RunSummary {
        end: RunEnd::Finished,
        steps: state.step,
        first_eval: None,
        last_eval: None,
        skipped_images: 0,
        last_checkpoint: None,
    };
    let evaluate = |trainer: &mut GrpoTrainer,
                    summary: &mut RunSummary,
                    write_line: &mut dyn FnMut(&str, &dyn erased::Json) -> Result<(), RunError>,
                    on_event: &mut dyn FnMut(RunEvent<'_>)|
     -> Result<(), RunError> {
        if eval.is_empty() {
            return Ok(());
        }
        let e = trainer.evaluate(eval, scorer)?;
        write_line("eval", &e)?;
        on_event(RunEvent::Eval(&e));
        if summary.first_eval.is_none() {
            summary.first_eval = Some(e.clone());
        }
        summary.last_eval = Some(e);
        Ok(())
    };
    if opts.eval_every > 0 {
        evaluate(trainer, &mut summary, &mut write_line, on_event)?;
    }
    let mut saved_at = None;
    let mut order: Option<(u64, Vec<usize>)> = None;
    while state.step < opts.steps {
        if stop.load(Ordering::Relaxed) {
            summary.end = RunEnd::Interrupted;
            break;
        }
        // The next batch, skipping unreadable records.
        let mut batch = Vec::with_capacity(opts.batch);
        let mut failures_in_a_row = 0usize;
        while batch.len() < opts.batch {
            let n = train.len() as u64;
            let epoch = state.samples_seen / n;
            let at = (state.samples_seen % n) as usize;
            // One shuffle per epoch, not per record (a 200 k-record epoch would otherwise
            // shuffle 200 k indices for every question).
            if order.as_ref().is_none_or(|(e, _)| *e != epoch) {
                order = Some((
                    epoch,
                    epoch_order(train.len(), state.seed, epoch, opts.shuffle),
                ));
            }
            let record = &train[order.as_ref().map_or(at, |(_, o)| o[at])];
            state.samples_seen += 1;
            match sample(record) {
                Ok(s) => {
                    batch.push(s);
                    failures_in_a_row = 0;
                }
                Err(why) => {
                    tracing::warn!("skipping record {}: {why}", record.id);
                    on_event(RunEvent::Skipped(&record.id, &why));
                    summary.skipped_images += 1;
                    failures_in_a_row += 1;
                    if failures_in_a_row >= train.len() {
                        return Err(RunError::NoData);
                    }
                }
            }
        }
        let m = trainer.step(&batch, scorer, state.seed.wrapping_add(state.step))?;
        state.step = trainer.step;
        write_line("train", &m)?;
        on_event(RunEvent::Step(&m));
        if opts.eval_every > 0 && state.step.is_multiple_of(opts.eval_every) {
            evaluate(trainer, &mut summary, &mut write_line, on_event)?;
        }
        if opts.save_every > 0 && state.step.is_multiple_of(opts.save_every) {
            let dir = checkpoint::save(trainer, &opts.out, state, opts.keep)?;
            on_event(RunEvent::Saved(&dir));
            summary.last_checkpoint = Some(dir);
            saved_at = Some(state.step);
        }
    }
    if summary.end == RunEnd::Finished
        && opts.eval_every > 0
        && !state.step.is_multiple_of(opts.eval_every)
    {
        evaluate(trainer, &mut summary, &mut write_line, on_event)?;
    }
    if saved_at != Some(state.step) {
        let dir = checkpoint::save(trainer, &opts.out, state, opts.keep)?;
        on_event(RunEvent::Saved(&dir));
        summary.last_checkpoint = Some(dir);
    }
    summary.steps = state.step;
    Ok(summary)
}

/// Keeps the lines of `path` whose `step` is below `step` (all of them on a fresh run's
/// missing file); rewrites the file through a temporary one.
fn truncate_metrics(path: &Path, step: u64) -> Result<(), RunError> {
    let Ok(text) = fs::read_to_string(path) else {
        return Ok(());
    };
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| {
            serde_json::from_str::<serde_json::Value>(l)
                .ok()
                .and_then(|v| v.get("step").and_then(|s| s.as_u64()))
                .is_some_and(|s| {
                    let eval = l.contains("\"kind\":\"eval\"");
                    // An eval line at step s was taken after s updates: keep it when s is
                    // within the checkpoint's history.
                    if eval {
                        s <= step
                    } else {
                        s < step
                    }
                })
        })
        .collect();
    let tmp = path.with_extension("jsonl.partial");
    let mut body = kept.join("\n");
    if !body.is_empty() {
        body.push('\n');
    }
    fs::write(&tmp, body)
        .and_then(|_| fs::rename(&tmp, path))
        .map_err(|source| RunError::Io {
            path: path.to_path_buf(),
            source,
        })
}

/// JSON lines of different metric types through one writer.
mod erased {
    use super::Serialize;

    pub trait Json {
        /// The value as one JSON object line with a `"kind"` field.
        fn line(&self, kind: &str) -> String;
    }

    impl<T: Serialize> Json for T {
        fn line(&self, kind: &str) -> String {
            let mut v = serde_json::to_value(self).unwrap_or(serde_json::Value::Null);
            let mut out = serde_json::Map::new();
            out.insert("kind".into(), kind.into());
            if let serde_json::Value::Object(m) = &mut v {
                out.extend(std::mem::take(m));
            }
            serde_json::Value::Object(out).to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epochs_are_seeded_permutations() {
        let a = epoch_order(10, 3, 0, true);
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(sorted, (0..10).collect::<Vec<_>>());
        assert_eq!(a, epoch_order(10, 3, 0, true));
        assert_ne!(a, epoch_order(10, 3, 1, true));
        assert_eq!(epoch_order(10, 3, 1, false), sorted);
    }

    #[test]
    fn metrics_after_the_checkpoint_are_dropped_on_resume() {
        let dir = std::env::temp_dir().join(format!("pointact-metrics-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let p = dir.join("metrics.jsonl");
        fs::write(
            &p,
            "{\"kind\":\"eval\",\"step\":0}\n{\"kind\":\"train\",\"step\":0}\n\
             {\"kind\":\"train\",\"step\":1}\n{\"kind\":\"eval\",\"step\":2}\n\
             {\"kind\":\"train\",\"step\":2}\n",
        )
        .unwrap();
        truncate_metrics(&p, 2).unwrap();
        let text = fs::read_to_string(&p).unwrap();
        assert_eq!(
            text,
            "{\"kind\":\"eval\",\"step\":0}\n{\"kind\":\"train\",\"step\":0}\n\
             {\"kind\":\"train\",\"step\":1}\n{\"kind\":\"eval\",\"step\":2}\n"
        );
        fs::remove_dir_all(&dir).unwrap();
    }
}
