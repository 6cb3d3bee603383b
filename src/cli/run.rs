//! `pointact run`: one task end to end in the simulator, every stage printed.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use pointact::executor::{Branch, Event};
use pointact::pointing::{ModelOptions, PointerKind};
use pointact::runner::{run_episode_with, EpisodeOptions, EpisodePointer, EpisodeResult};
use pointact::sim::oracle::OracleOptions;
use pointact::sim::tasks;

use super::{announce_model, end_stream, finish_viz, print::print_event, runtime, RerunCli};

#[derive(Args)]
pub struct RunCli {
    /// Task id (`tabletop/<id>`, `bridge/<id>` or a unique id); default: tabletop/pepper_in_pan.
    #[arg(long)]
    task: Option<String>,
    /// A scene TOML to use instead of the task's built-in scene (same object names).
    #[arg(long)]
    scene: Option<PathBuf>,
    /// Robot override (xarm6, widowx250); default: the task's robot.
    #[arg(long)]
    robot: Option<String>,
    /// Executor branch: p (affordance: grasp + place points) or v (visual trace).
    #[arg(long, default_value = "p")]
    branch: Branch,
    /// Pointing backend: oracle (simulator ground truth), qwen (local model, --model DIR) or
    /// openai (a vLLM/SGLang server, --endpoint URL).
    #[arg(long, value_enum, default_value = "oracle")]
    pointer: PointerKind,
    #[command(flatten)]
    model: ModelOptions,
    /// Episode seed (object layout, noise).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Gaussian pixel noise of the oracle pointer (px, finite, >= 0).
    #[arg(long, default_value_t = 0.0, value_parser = super::values::non_negative)]
    noise_px: f64,
    /// Plan and check every motion, move nothing.
    #[arg(long)]
    dry_run: bool,
    /// Save every observed frame as DIR/0000, DIR/0001, … (rgb.png, depth.png, camera.toml, frame.toml).
    /// A non-empty DIR is refused (before anything moves) unless --force.
    #[arg(long)]
    record: Option<PathBuf>,
    /// With --record: replace the frames of a non-empty folder.
    #[arg(long, requires = "record")]
    force: bool,
    #[command(flatten)]
    rerun: RerunCli,
}

pub fn run(a: RunCli) -> Result<ExitCode> {
    let spec = tasks::task(a.task.as_deref().unwrap_or(tasks::DEFAULT_TASK))?;
    let mut ep = spec.instantiate(a.seed)?;
    if let Some(path) = &a.scene {
        // The file's own layout replaces the seeded one (object names must match the task's), and
        // the target is worked out again from it.
        ep = spec.episode_in(ep, pointact::sim::Scene::load(path)?)?;
    }
    if let Some(r) = &a.robot {
        ep.robot = r.clone();
    }
    println!(
        "task      {} (seed {}, robot {}, branch {:?})",
        spec.full_id(),
        a.seed,
        ep.robot,
        a.branch
    );
    let oracle = OracleOptions {
        noise_px: a.noise_px,
        seed: a.seed,
        ..Default::default()
    };
    let opts = EpisodeOptions {
        branch: a.branch,
        oracle: oracle.clone(),
        dry_run: a.dry_run,
        ..Default::default()
    };
    // Every side effect is made ready before anything moves: a recording folder that cannot be
    // written fails the run here, not after the arm has moved.
    if let Some(dir) = &a.record {
        pointact::camera::record::prepare_out_dir(dir, a.force)?;
        pointact::camera::record::check_writable(dir)?;
    }
    let mut viz = a.rerun.open("pointact-run")?;
    let mut record_err = None;
    let mut captures = 0usize;
    let mut on_event = |e: Event<'_>| {
        print_event(&e);
        if let Some(v) = viz.as_mut() {
            v.on_event(&e);
        }
        if let (Event::Captured(frame), Some(dir)) = (&e, &a.record) {
            // One numbered folder per capture: what `camera::replay::ReplayCamera` plays back.
            let dir = dir.join(format!("{captures:04}"));
            captures += 1;
            match pointact::camera::record::write_frame(frame, &dir) {
                Ok(()) => println!("recorded  {}", dir.display()),
                Err(err) => record_err = Some(err),
            }
        }
    };
    announce_model(a.pointer, &a.model);
    let pointer =
        EpisodePointer::open(a.pointer, &a.model, oracle, Some(super::stream_to_stderr()))?;
    let result = runtime()?.block_on(run_episode_with(
        &ep,
        &opts,
        |c| c,
        |truth| pointer.for_episode(truth),
        &mut on_event,
    ))?;
    end_stream();
    if let Some(v) = viz.as_mut() {
        v.log_outcome(result.success, &result.detail);
    }
    let code = outcome(&a, &result, record_err);
    finish_viz(viz)?;
    code
}

/// What `run` prints and returns once the episode is over.
fn outcome(
    a: &RunCli,
    result: &EpisodeResult,
    record_err: Option<pointact::camera::CameraError>,
) -> Result<ExitCode> {
    if let Some(err) = record_err {
        return Err(anyhow::anyhow!("--record failed: {err}"));
    }
    if a.dry_run {
        println!("outcome   dry run: every motion planned and checked, nothing moved");
        return Ok(if result.error.is_none() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    println!(
        "outcome   {} ({:.1} s simulated): {}",
        if result.success { "SUCCESS" } else { "FAILURE" },
        result.sim_time_s,
        result.detail
    );
    Ok(if result.success {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
