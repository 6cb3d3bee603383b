//! `pointact eval sim`: every task of a suite over seeded episodes, a success table per task, and a
//! JSON record of every episode (task, seed, success, the judge's or the error's words).

use std::fmt;

use serde::Serialize;

use super::episode::{run_episode, EpisodeOptions};
use crate::executor::Event;
use crate::sim::tasks::Suite;

#[derive(Debug, Clone, Serialize)]
pub struct EpisodeRecord {
    pub task: String,
    pub seed: u64,
    pub success: bool,
    pub executed: bool,
    pub detail: String,
    pub sim_time_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct TaskSummary {
    pub task: String,
    pub instruction: String,
    pub episodes: usize,
    pub successes: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct EvalReport {
    pub suite: String,
    pub branch: String,
    pub noise_px: f64,
    pub seeds: Vec<u64>,
    pub tasks: Vec<TaskSummary>,
    pub episodes: Vec<EpisodeRecord>,
}

impl EvalReport {
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
    run_suite_observed(suite, seeds, options, &mut |e| {
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
    Started { task: &'a str, seed: u64 },
    /// The executor's events of the running episode.
    Episode(Event<'a>),
    /// An episode ended; `done` of `total` are finished.
    Finished {
        done: usize,
        total: usize,
        record: &'a EpisodeRecord,
    },
}

/// [`run_suite`], with every episode's executor events passed on.
pub async fn run_suite_observed(
    suite: Suite,
    seeds: &[u64],
    options: &EpisodeOptions,
    observe: &mut (dyn FnMut(SuiteEvent<'_>) + Send),
) -> EvalReport {
    let tasks = suite.tasks();
    let total = tasks.len() * seeds.len();
    let mut episodes = Vec::with_capacity(total);
    let mut summaries = Vec::new();
    for spec in &tasks {
        let mut successes = 0;
        for &seed in seeds {
            let mut opts = options.clone();
            // Noise differs per episode but is reproducible from the seed.
            opts.oracle.seed = seed ^ 0x9e37_79b9_7f4a_7c15;
            let task = spec.full_id();
            observe(SuiteEvent::Started { task: &task, seed });
            let record = match spec.instantiate(seed) {
                Ok(ep) => {
                    match run_episode(&ep, &opts, &mut |e| observe(SuiteEvent::Episode(e))).await {
                        Ok(r) => EpisodeRecord {
                            task: spec.full_id(),
                            seed,
                            success: r.success,
                            executed: r.executed,
                            detail: r.detail,
                            sim_time_s: r.sim_time_s,
                        },
                        Err(e) => failed(spec.full_id(), seed, e.to_string()),
                    }
                }
                Err(e) => failed(spec.full_id(), seed, e.to_string()),
            };
            successes += record.success as usize;
            episodes.push(record);
            observe(SuiteEvent::Finished {
                done: episodes.len(),
                total,
                record: episodes.last().expect("just pushed"),
            });
        }
        summaries.push(TaskSummary {
            task: spec.full_id(),
            instruction: spec.instruction.to_string(),
            episodes: seeds.len(),
            successes,
        });
    }
    EvalReport {
        suite: suite.name().to_string(),
        branch: format!("{:?}", options.branch),
        noise_px: options.oracle.noise_px,
        seeds: seeds.to_vec(),
        tasks: summaries,
        episodes,
    }
}

fn failed(task: String, seed: u64, detail: String) -> EpisodeRecord {
    EpisodeRecord {
        task,
        seed,
        success: false,
        executed: false,
        detail,
        sim_time_s: 0.0,
    }
}

impl fmt::Display for EvalReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "suite {} | branch {} | oracle pointer, noise {} px | {} seeds per task",
            self.suite,
            self.branch,
            self.noise_px,
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
        write!(
            f,
            "{:<34} {:>4}/{:<4} {:>7.1}%",
            "all",
            s,
            n,
            100.0 * self.success_rate()
        )
    }
}
