//! `pointact eval sim`: every task of a suite over seeded episodes, a success table per task, and a
//! JSON record of every episode (task, seed, success, the judge's or the error's words).
//!
//! Nothing finished is lost: a run can be stopped between episodes (a flag the caller sets, e.g.
//! on Ctrl-C) and still returns the report of what finished, and a run can resume from such a
//! report, skipping the episodes it already holds.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};

use super::episode::{run_episode, EpisodeOptions};
use super::record::{DatasetRecorder, Kept};
use crate::dataset::DatasetError;
use crate::executor::Event;
use crate::sim::tasks::Suite;

/// One episode of a suite run, as the JSON report holds it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EpisodeRecord {
    /// The task's full id (`suite/id`).
    pub task: String,
    /// The episode's seed.
    pub seed: u64,
    /// The judge's verdict (false when the plan did not run or the episode errored).
    pub success: bool,
    /// Whether the plan reached the robot.
    pub executed: bool,
    /// The judge's explanation, or the error that ended the episode.
    pub detail: String,
    /// Simulated seconds (0 when the episode could not be set up).
    pub sim_time_s: f64,
    /// Plan steps that reached the robot (0: refused before any motion).
    #[serde(default)]
    pub steps_run: usize,
    /// The camera's verdict after the plan ran (absent when nothing ran, and in older reports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified: Option<bool>,
    /// Its reason.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub camera: String,
}

/// How the closed loop's own verdicts compare with the judge's, over a report's episodes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CameraTally {
    /// Judged failures refused before any motion (a typed error: the run knew).
    pub refused: usize,
    /// Judged failures that ran and that the camera called "not verified" (caught).
    pub caught: usize,
    /// Judged failures that ran and that the camera called "verified" (claimed wrongly).
    pub false_claims: usize,
    /// Judged failures that ran with no verdict (an error after motion began).
    pub stopped: usize,
    /// Judged successes the camera verified, and those it did not (false alarms).
    pub confirmed: usize,
    pub false_alarms: usize,
}

impl CameraTally {
    pub(crate) fn failures(&self) -> usize {
        self.refused + self.caught + self.false_claims + self.stopped
    }
}

/// Successes of one task over the run's seeds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskSummary {
    /// The task's full id.
    pub task: String,
    /// The task's language instruction.
    pub instruction: String,
    /// Episodes of this task that finished.
    pub episodes: usize,
    /// Those the judge counted as successes.
    pub successes: usize,
}

fn one() -> usize {
    1
}

fn ideal() -> String {
    "ideal".into()
}

/// The report of a suite run (`pointact eval sim`): its conditions, a summary per task and every
/// episode; written as JSON and read back to resume a run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EvalReport {
    /// The suite's name.
    pub suite: String,
    /// The branch executed (`Affordance` or `Trace`).
    pub branch: String,
    /// The oracle's pixel noise, standard deviation per coordinate (px).
    pub noise_px: f64,
    /// The other conditions (older reports lack them: ideal sensor, no errors).
    #[serde(default = "ideal")]
    pub sensor: String,
    /// The oracle's probability of dropping each point (0 in older reports).
    #[serde(default)]
    pub drop_prob: f64,
    /// The oracle's probability of a confused answer (0 in older reports).
    #[serde(default)]
    pub outlier_prob: f64,
    /// Translation part of the simulated hand-eye calibration error, mm (0 in older reports).
    #[serde(default)]
    pub calib_error_mm: f64,
    /// Rotation part of the simulated hand-eye calibration error, degrees (0 in older reports).
    #[serde(default)]
    pub calib_error_deg: f64,
    /// Answers per question, the medoid kept (older reports: 1).
    #[serde(default = "one")]
    pub samples: usize,
    /// The seeds every task was run with.
    pub seeds: Vec<u64>,
    /// One summary per task that has a finished episode.
    pub tasks: Vec<TaskSummary>,
    /// The finished episodes, in run order.
    pub episodes: Vec<EpisodeRecord>,
    /// The run was stopped before every episode finished (written only when true).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
}

impl EvalReport {
    /// The report of `episodes` (finished ones, in run order) of `suite` over `seeds`: one summary
    /// per task that has any.
    pub fn new(
        suite: Suite,
        options: &EpisodeOptions,
        seeds: &[u64],
        episodes: Vec<EpisodeRecord>,
        interrupted: bool,
    ) -> Self {
        let tasks = suite
            .tasks()
            .iter()
            .filter_map(|spec| {
                let id = spec.full_id();
                let mine: Vec<&EpisodeRecord> = episodes.iter().filter(|e| e.task == id).collect();
                (!mine.is_empty()).then(|| TaskSummary {
                    task: id.clone(),
                    instruction: spec.instruction.to_string(),
                    episodes: mine.len(),
                    successes: mine.iter().filter(|e| e.success).count(),
                })
            })
            .collect();
        EvalReport {
            suite: suite.name().to_string(),
            branch: format!("{:?}", options.branch),
            noise_px: options.oracle.noise_px,
            sensor: options.render.sensor_name().to_string(),
            drop_prob: options.oracle.drop_prob,
            outlier_prob: options.oracle.outlier_prob,
            calib_error_mm: options.calib_error_mm,
            calib_error_deg: options.calib_error_deg,
            samples: options.samples,
            seeds: seeds.to_vec(),
            tasks,
            episodes,
            interrupted,
        }
    }

    /// Whether `earlier` (a report read back for `--resume`) was made with these settings; the
    /// reason when not.
    pub fn check_resumable(
        earlier: &EvalReport,
        suite: Suite,
        options: &EpisodeOptions,
        seeds: &[u64],
    ) -> Result<(), String> {
        let now = EvalReport::new(suite, options, seeds, Vec::new(), false);
        let pairs = [
            ("suite", earlier.suite.clone(), now.suite),
            ("branch", earlier.branch.clone(), now.branch),
            (
                "noise_px",
                earlier.noise_px.to_string(),
                now.noise_px.to_string(),
            ),
            ("sensor", earlier.sensor.clone(), now.sensor),
            (
                "drop_prob",
                earlier.drop_prob.to_string(),
                now.drop_prob.to_string(),
            ),
            (
                "outlier_prob",
                earlier.outlier_prob.to_string(),
                now.outlier_prob.to_string(),
            ),
            (
                "calib_error_mm",
                earlier.calib_error_mm.to_string(),
                now.calib_error_mm.to_string(),
            ),
            (
                "calib_error_deg",
                earlier.calib_error_deg.to_string(),
                now.calib_error_deg.to_string(),
            ),
            (
                "samples",
                earlier.samples.to_string(),
                now.samples.to_string(),
            ),
            (
                "seeds",
                format!("{:?}", earlier.seeds),
                format!("{:?}", now.seeds),
            ),
        ];
        for (what, was, is) in pairs {
            if was != is {
                return Err(format!("it was made with {what} {was}, this run has {is}"));
            }
        }
        Ok(())
    }

    /// The conditions in words: "oracle noise 16 px, realsense sensor, calibration off 2 mm 0.2°".
    pub fn conditions(&self) -> String {
        let mut parts = vec![format!("oracle pointer, noise {} px", self.noise_px)];
        if self.drop_prob > 0.0 {
            parts.push(format!("drop {}", self.drop_prob));
        }
        if self.outlier_prob > 0.0 {
            parts.push(format!("outliers {}", self.outlier_prob));
        }
        if self.samples > 1 {
            parts.push(format!("medoid of {} answers", self.samples));
        }
        parts.push(format!("{} sensor", self.sensor));
        if self.calib_error_mm != 0.0 || self.calib_error_deg != 0.0 {
            parts.push(format!(
                "calibration off {} mm {}°",
                self.calib_error_mm, self.calib_error_deg
            ));
        }
        parts.join(", ")
    }

    /// The camera's verdicts against the judge's.
    pub(crate) fn camera_tally(&self) -> CameraTally {
        let mut t = CameraTally::default();
        for e in &self.episodes {
            match (e.success, e.verified) {
                (true, Some(true)) => t.confirmed += 1,
                (true, _) => t.false_alarms += 1,
                (false, Some(true)) => t.false_claims += 1,
                (false, Some(false)) => t.caught += 1,
                (false, None) if e.executed || e.steps_run > 0 => t.stopped += 1,
                (false, None) => t.refused += 1,
            }
        }
        t
    }

    /// Fraction of the finished episodes the judge counted as successes (0 when there are none).
    pub fn success_rate(&self) -> f64 {
        let n = self.episodes.len().max(1);
        self.episodes.iter().filter(|e| e.success).count() as f64 / n as f64
    }
}

/// Runs `seeds` episodes of every task in `suite`; `progress(done, total, record)` after each.
pub async fn run_suite(
    suite: Suite,
    seeds: &[u64],
    options: &EpisodeOptions,
    progress: &mut (dyn FnMut(usize, usize, &EpisodeRecord) + Send),
) -> EvalReport {
    let never = AtomicBool::new(false);
    run_suite_observed(suite, seeds, options, Vec::new(), &never, None, &mut |e| {
        if let SuiteEvent::Finished {
            done,
            total,
            record,
        } = e
        {
            progress(done, total, record)
        }
    })
    .await
}

/// What happens during a suite, in order, for observers that follow every episode (`--rerun`).
pub enum SuiteEvent<'a> {
    /// An episode begins (before its scene is built).
    Started {
        /// The task's full id (`suite/id`).
        task: &'a str,
        /// The episode's seed.
        seed: u64,
    },
    /// The executor's events of the running episode.
    Episode(Event<'a>),
    /// An episode ended; `done` of `total` are finished.
    Finished {
        /// Episodes finished so far, this one and any resumed ones included.
        done: usize,
        /// Episodes in the whole run.
        total: usize,
        /// This episode's record.
        record: &'a EpisodeRecord,
    },
    /// The episode just finished went to the dataset (`--dataset`), or was left out, or could
    /// not be written.
    Recorded(&'a Result<Kept, DatasetError>),
}

/// [`run_suite`], with every episode's executor events passed on. Episodes found in `resumed`
/// (by task and seed) are not run again: their records are reported as they are. `stop` is read
/// between episodes; once set, the report of what finished comes back with `interrupted`. With a
/// `recorder`, every episode run is also appended to its dataset ([`SuiteEvent::Recorded`]).
pub async fn run_suite_observed(
    suite: Suite,
    seeds: &[u64],
    options: &EpisodeOptions,
    resumed: Vec<EpisodeRecord>,
    stop: &AtomicBool,
    mut recorder: Option<&mut DatasetRecorder>,
    observe: &mut (dyn FnMut(SuiteEvent<'_>) + Send),
) -> EvalReport {
    let tasks = suite.tasks();
    let total = tasks.len() * seeds.len();
    let mut episodes = Vec::with_capacity(total);
    let mut interrupted = false;
    'tasks: for spec in &tasks {
        for &seed in seeds {
            let task = spec.full_id();
            let earlier = resumed.iter().find(|r| r.task == task && r.seed == seed);
            let record = match earlier {
                Some(r) => r.clone(),
                None => {
                    if stop.load(Ordering::Relaxed) {
                        interrupted = true;
                        break 'tasks;
                    }
                    let mut opts = options.clone();
                    // Noise differs per episode but is reproducible from the seed.
                    seed_episode(&mut opts, seed);
                    observe(SuiteEvent::Started { task: &task, seed });
                    match spec.instantiate(seed) {
                        Ok(ep) => {
                            let observed = &mut |e: Event<'_>| observe(SuiteEvent::Episode(e));
                            let run = match recorder.as_deref_mut() {
                                Some(rec) => {
                                    match rec.run_episode(&ep, seed, &opts, observed).await {
                                        Ok((r, kept)) => {
                                            observe(SuiteEvent::Recorded(&kept));
                                            Ok(r)
                                        }
                                        Err(e) => Err(e),
                                    }
                                }
                                None => run_episode(&ep, &opts, observed).await,
                            };
                            match run {
                                Ok(r) => EpisodeRecord {
                                    task: task.clone(),
                                    seed,
                                    success: r.success,
                                    executed: r.executed,
                                    detail: r.detail,
                                    sim_time_s: r.sim_time_s,
                                    steps_run: r.steps_executed,
                                    verified: r.verdict.as_ref().map(|v| v.verified),
                                    camera: r.verdict.map(|v| v.detail).unwrap_or_default(),
                                },
                                Err(e) => failed(task.clone(), seed, e.to_string()),
                            }
                        }
                        Err(e) => failed(task.clone(), seed, e.to_string()),
                    }
                }
            };
            episodes.push(record);
            observe(SuiteEvent::Finished {
                done: episodes.len(),
                total,
                record: episodes.last().expect("just pushed"),
            });
        }
    }
    EvalReport::new(suite, options, seeds, episodes, interrupted)
}

/// The per-episode seeds of the oracle's noise and the sensor's, from the episode seed: the same
/// in `eval sim` and `run --seed`, so any episode of an evaluation can be rerun alone.
pub fn seed_episode(options: &mut EpisodeOptions, seed: u64) {
    options.oracle.seed = seed ^ 0x9e37_79b9_7f4a_7c15;
    options.render.seed = seed;
}

fn failed(task: String, seed: u64, detail: String) -> EpisodeRecord {
    EpisodeRecord {
        task,
        seed,
        success: false,
        executed: false,
        detail,
        sim_time_s: 0.0,
        steps_run: 0,
        verified: None,
        camera: String::new(),
    }
}

impl fmt::Display for EvalReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "suite {} | branch {} | {} | {} seeds per task",
            self.suite,
            self.branch,
            self.conditions(),
            self.seeds.len()
        )?;
        writeln!(
            f,
            "{:<34} {:>9} {:>8}  instruction",
            "task", "success", "rate"
        )?;
        for t in &self.tasks {
            writeln!(
                f,
                "{:<34} {:>4}/{:<4} {:>7.1}%  {}",
                t.task,
                t.successes,
                t.episodes,
                100.0 * t.successes as f64 / t.episodes.max(1) as f64,
                t.instruction
            )?;
        }
        let n = self.episodes.len();
        let s = self.episodes.iter().filter(|e| e.success).count();
        if self.interrupted {
            writeln!(
                f,
                "(interrupted: {n} of {} episodes finished)",
                self.seeds.len()
                    * crate::sim::tasks::Suite::parse(&self.suite).map_or(0, |s| s.tasks().len())
            )?;
        }
        write!(
            f,
            "{:<34} {:>4}/{:<4} {:>7.1}%",
            "all",
            s,
            n,
            100.0 * self.success_rate()
        )?;
        // Only where the runner looked again (not in remote evaluations).
        if self.episodes.iter().any(|e| e.verified.is_some()) {
            let t = self.camera_tally();
            write!(
                f,
                "\ncamera check: of {} failures {} refused before motion, {} caught by the camera, {} stopped, {} claimed verified wrongly; of {} successes {} verified, {} not",
                t.failures(),
                t.refused,
                t.caught,
                t.stopped,
                t.false_claims,
                t.confirmed + t.false_alarms,
                t.confirmed,
                t.false_alarms
            )?;
        }
        Ok(())
    }
}
