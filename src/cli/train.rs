//! `pointact train`: training data and (a later issue) the GRPO trainer. `train questions` writes
//! Robot-R1's multiple-choice questions from demonstrations recorded in the simulator.

use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, Subcommand};
use pointact::train::robot_r1::{generate, QuestionOptions};

use super::not_built;

#[derive(Subcommand)]
pub enum TrainCommand {
    /// GRPO fine-tuning of the pointing model (not built yet).
    Grpo,
    /// Robot-R1's questions (next waypoint, current state, movement direction; four options, one
    /// correct) from oracle demonstrations of a simulated task: JSONL records + PNG frames.
    Questions(QuestionsCli),
}

#[derive(Args)]
pub struct QuestionsCli {
    /// Simulated task (suite/id), e.g. tabletop/pepper_in_pan.
    #[arg(long, default_value = "tabletop/pepper_in_pan")]
    task: String,
    /// Episodes (seeds 0..N); only those the judge calls a success give questions.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    episodes: u64,
    /// Least distance between the position options (m).
    #[arg(long, default_value_t = 0.04, value_parser = super::values::non_negative)]
    delta_m: f64,
    /// Output folder (records `robot_r1-<suite>-<id>.jsonl`, frames under `images/`).
    #[arg(long, default_value = "robot-r1-questions")]
    out: std::path::PathBuf,
}

pub fn run(which: TrainCommand) -> Result<ExitCode> {
    match which {
        TrainCommand::Grpo => not_built("`train grpo` (the GRPO trainer, issue #17)"),
        TrainCommand::Questions(a) => {
            let options = QuestionOptions {
                delta_m: a.delta_m,
                ..QuestionOptions::default()
            };
            let s = generate(&a.task, 0..a.episodes, &options, &a.out)?;
            println!(
                "{}: {} episodes, {} demonstrations, {} questions ({} next waypoint, {} current state, {} movement), {} images in {}",
                s.task,
                s.episodes,
                s.demonstrations,
                s.questions,
                s.waypoint,
                s.state,
                s.movement,
                s.images,
                a.out.display()
            );
            for (seed, why) in &s.failed {
                println!("left out seed {seed}: {why}");
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
