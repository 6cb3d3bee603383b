//! `pointact train`: training data and the GRPO trainer (`train grpo`, in `train_grpo.rs`). `train questions` writes
//! Robot-R1's multiple-choice questions from demonstrations recorded in the simulator; `train
//! data` writes GRPO prompt records from simulated scenes (`train::grpo::data`); `train
//! spatial-data` writes VSI-Bench-style questions about videos of simulated scenes
//! (`train::spatial`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, Subcommand};
use pointact::pointing::Ability;
use pointact::sim::tasks::Suite;
use pointact::train::grpo::data::{self, DataOptions};
use pointact::train::robot_r1::{generate, QuestionOptions};
use pointact::train::spatial::{self, SpatialOptions};

#[derive(Subcommand)]
pub enum TrainCommand {
    /// GRPO fine-tuning of the pointing model on JSONL records (full or LoRA; checkpoints that
    /// `pointact point --model` loads; metrics JSONL; resume).
    Grpo(Box<super::train_grpo::GrpoCli>),
    /// Robot-R1's questions (next waypoint, current state, movement direction; four options, one
    /// correct) from oracle demonstrations of a simulated task: JSONL records + PNG frames.
    Questions(QuestionsCli),
    /// GRPO prompt records from the simulator (EasyR1 JSONL: problem, answer, images): per task
    /// and seed one frame, resized to what the model sees, and one question per ability with its
    /// ground truth from the scene (REG point_rec, OFG grounding_rec, RRG fsd_free_point, VTG
    /// fsd_visual_trace).
    Data(DataCli),
    /// VSI-Bench-style spatial questions with exact answers: per task and seed a video of a
    /// camera walking around the table (PNG frames + truth.json), and one with the task's object
    /// moved halfway; questions.jsonl (counting, distances, sizes, relative distance and
    /// direction, appearance order, which way an object was moved).
    SpatialData(SpatialDataCli),
}

#[derive(Args)]
pub struct SpatialDataCli {
    /// Suite whose tasks lay out the scenes: tabletop, bridge or clutter.
    #[arg(long, default_value = "tabletop", value_parser = parse_suite)]
    suite: Suite,
    /// Only these tasks of the suite (id or suite/id; repeatable). Default: all.
    #[arg(long = "task")]
    tasks: Vec<String>,
    /// Seeds per task (S..S+N).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    seeds: u64,
    /// First seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Frames per video.
    #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(u64).range(2..=10_000))]
    frames: u64,
    /// Nominal frames per second of the videos.
    #[arg(long, default_value_t = 2.0, value_parser = parse_fps)]
    fps: f64,
    /// Frame size, WIDTHxHEIGHT (32 to 4096 each).
    #[arg(long, default_value = "320x240", value_parser = parse_size)]
    size: (u32, u32),
    /// No videos with the task's object moved halfway (no object_moved_direction questions).
    #[arg(long)]
    no_moved: bool,
    /// Also write records.jsonl for `train grpo`: each question as Embodied-R's reasoning prompt
    /// over the oracle descriptions of its key frames (text-only `spatial` records).
    #[arg(long)]
    records: bool,
    /// Write into a non-empty --out (files of the same names are replaced).
    #[arg(long)]
    force: bool,
    /// Output folder (questions.jsonl, sequences/<id>/).
    #[arg(long, default_value = "spatial-data")]
    out: PathBuf,
}

/// A frame rate: a finite number of frames per second above 0.
fn parse_fps(s: &str) -> Result<f64, String> {
    let v = super::values::non_negative(s)?;
    if v > 0.0 {
        Ok(v)
    } else {
        Err("0 is outside (0, inf): give frames per second above 0".into())
    }
}

/// `WIDTHxHEIGHT`, each in [32, 4096].
fn parse_size(s: &str) -> Result<(u32, u32), String> {
    let (w, h) = s
        .split_once(['x', 'X'])
        .ok_or_else(|| format!("`{s}`: expected WIDTHxHEIGHT, e.g. 320x240"))?;
    let side = |v: &str| -> Result<u32, String> {
        let n: u32 = v
            .trim()
            .parse()
            .map_err(|_| format!("`{v}` in `{s}` is not a whole number of pixels"))?;
        if (32..=4096).contains(&n) {
            Ok(n)
        } else {
            Err(format!("{n} px in `{s}` is outside [32, 4096]"))
        }
    };
    Ok((side(w)?, side(h)?))
}

/// `train spatial-data`: refuses a non-empty --out without --force, generates with a progress
/// bar, then prints the counts per question type.
fn run_spatial(a: SpatialDataCli) -> Result<ExitCode> {
    let non_empty = std::fs::read_dir(&a.out).is_ok_and(|mut d| d.next().is_some());
    if non_empty && !a.force {
        anyhow::bail!(
            "{} is not empty: choose another --out or add --force",
            a.out.display()
        );
    }
    let records = a.records;
    let options = SpatialOptions {
        suite: a.suite,
        tasks: a.tasks,
        seeds: a.seeds,
        seed: a.seed,
        frames: usize::try_from(a.frames)?,
        fps: a.fps,
        width: a.size.0,
        height: a.size.1,
        moved: !a.no_moved,
        out: a.out,
    };
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} videos ({eta}) {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let s = spatial::generate(&options, &mut |p| {
        bar.set_length(p.total as u64);
        bar.set_position(p.done as u64);
        bar.set_message(format!("{} questions", p.questions));
    })?;
    bar.finish_and_clear();
    println!(
        "{} questions from {} videos ({} frames, {}x{}) -> {}",
        s.total_questions(),
        s.sequences,
        s.frames,
        options.width,
        options.height,
        s.jsonl.display()
    );
    for (t, n) in &s.questions {
        println!("  {t:<28} {n}");
    }
    for skipped in &s.skipped {
        println!("left out {skipped}");
    }
    if records {
        let (path, n) = pointact::train::grpo::spatial_records::write_spatial_records(
            &s.jsonl,
            &pointact::ask::AskOptions::default(),
        )?;
        println!("{n} GRPO records -> {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
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

#[derive(Args)]
pub struct DataCli {
    /// Suite whose tasks to use: tabletop, bridge or clutter.
    #[arg(long, default_value = "tabletop", value_parser = parse_suite)]
    suite: Suite,
    /// Only these tasks of the suite (id or suite/id; repeatable). Default: all.
    #[arg(long = "task")]
    tasks: Vec<String>,
    /// Episodes per task (seeds S..S+N).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    episodes: u64,
    /// First seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Abilities to ask, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "reg,rrg,ofg,vtg")]
    abilities: Vec<Ability>,
    /// Pixel budget of the saved frames (smart_resize's max_pixels; default: Embodied-R1's eval).
    #[arg(long, default_value_t = data::DEFAULT_MAX_PIXELS,
          value_parser = clap::value_parser!(u64).range(data::MIN_PIXELS..))]
    max_pixels: u64,
    /// Output folder (records.jsonl, frames under images/).
    #[arg(long, default_value = "grpo-data")]
    out: PathBuf,
}

fn parse_suite(s: &str) -> Result<Suite, String> {
    Suite::parse(s).map_err(|e| e.to_string())
}

/// `train data`: generates with a progress bar, then prints the summary.
fn run_data(a: DataCli) -> Result<ExitCode> {
    let options = DataOptions {
        suite: a.suite,
        tasks: a.tasks,
        episodes: a.episodes,
        seed: a.seed,
        abilities: a.abilities,
        max_pixels: a.max_pixels,
        out: a.out,
    };
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} episodes ({eta}) {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let s = data::generate(&options, &mut |p| {
        bar.set_length(p.total as u64);
        bar.set_position(p.done as u64);
        bar.set_message(format!("{} records", p.records));
    })?;
    bar.finish_and_clear();
    let per: Vec<String> = s.records.iter().map(|(a, n)| format!("{a} {n}")).collect();
    let size = s
        .image_size
        .map(|[w, h]| format!(" ({w}x{h})"))
        .unwrap_or_default();
    println!(
        "{} records ({}) from {} episodes, {} images{size} -> {}",
        s.total_records(),
        per.join(", "),
        s.episodes,
        s.images,
        s.jsonl.display()
    );
    for skipped in &s.skipped {
        println!("left out {skipped}");
    }
    Ok(ExitCode::SUCCESS)
}

pub fn run(which: TrainCommand) -> Result<ExitCode> {
    match which {
        TrainCommand::Grpo(a) => super::train_grpo::run(*a),
        TrainCommand::Data(a) => run_data(a),
        TrainCommand::SpatialData(a) => run_spatial(a),
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
