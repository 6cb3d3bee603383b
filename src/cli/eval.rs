//! `pointact eval sim`: a suite of simulated tasks over seeded episodes, with a progress bar, a
//! success table and a JSON record. (`eval bridge` waits for the SimplerEnv bridge.)

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, Subcommand};
use pointact::executor::Branch;
use pointact::runner::{run_suite_observed, EpisodeOptions, SuiteEvent};
use pointact::sim::oracle::OracleOptions;
use pointact::sim::tasks::Suite;

use super::{finish_viz, runtime, RerunCli};

#[derive(Subcommand)]
pub enum EvalCommand {
    /// All tasks of a simulated suite over seeded episodes.
    Sim(EvalSimCli),
    /// SimplerEnv through the bridge.
    Bridge,
}

#[derive(Args)]
pub struct EvalSimCli {
    /// tabletop (8 xArm 6 tasks) or bridge (4 WidowX tasks).
    #[arg(long, default_value = "tabletop")]
    suite: String,
    /// p (affordance) or v (visual trace).
    #[arg(long, default_value = "p")]
    branch: Branch,
    /// Gaussian pixel noise of the oracle pointer (px, finite, >= 0).
    #[arg(long, default_value_t = 0.0, value_parser = super::values::non_negative)]
    noise_px: f64,
    /// Probability that the oracle drops each point, in [0, 1].
    #[arg(long, default_value_t = 0.0, value_parser = super::values::probability)]
    drop_prob: f64,
    /// Episodes per task (seeds 0..N), 1 to 100000.
    #[arg(long, default_value_t = 24, value_parser = super::values::episodes)]
    episodes: u64,
    /// Write every episode's result here.
    #[arg(long, default_value = "eval-sim.json")]
    json: PathBuf,
    #[command(flatten)]
    rerun: RerunCli,
}

pub fn run(which: EvalCommand) -> Result<ExitCode> {
    match which {
        EvalCommand::Sim(a) => sim(a),
        EvalCommand::Bridge => super::not_built("`eval bridge` (SimplerEnv bridge)"),
    }
}

fn sim(a: EvalSimCli) -> Result<ExitCode> {
    let suite = Suite::parse(&a.suite)?;
    let opts = EpisodeOptions {
        branch: a.branch,
        oracle: OracleOptions {
            noise_px: a.noise_px,
            drop_prob: a.drop_prob,
            ..Default::default()
        },
        ..Default::default()
    };
    let seeds: Vec<u64> = (0..a.episodes).collect();
    let bar = indicatif::ProgressBar::new((suite.tasks().len() * seeds.len()) as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} episodes ({eta}) {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut viz = a.rerun.open("pointact-eval")?;
    let mut ok = 0;
    let report = runtime()?.block_on(run_suite_observed(suite, &seeds, &opts, &mut |e| match e {
        SuiteEvent::Started { task, seed } => {
            if let Some(v) = viz.as_mut() {
                v.begin_episode(&format!("{task} seed {seed}"));
            }
        }
        SuiteEvent::Episode(e) => {
            if let Some(v) = viz.as_mut() {
                v.on_event(&e);
            }
        }
        SuiteEvent::Finished {
            done,
            total: _,
            record: r,
        } => {
            ok += r.success as usize;
            bar.set_position(done as u64);
            bar.set_message(format!("{ok}/{done} succeeded"));
            if let Some(v) = viz.as_mut() {
                v.log_outcome(r.success, &r.detail);
            }
        }
    }));
    bar.finish_and_clear();
    finish_viz(viz)?;
    println!("{report}");
    std::fs::write(&a.json, serde_json::to_string_pretty(&report)?)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", a.json.display()))?;
    println!("wrote {}", a.json.display());
    Ok(ExitCode::SUCCESS)
}
