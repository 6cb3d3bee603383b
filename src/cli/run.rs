//! `pointact run`: one task end to end in the simulator, every stage printed; with `--xarm` or
//! `--widowx`, one typed instruction on a physical arm (`run_robot`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use pointact::executor::{Branch, Event};
use pointact::pointing::{ModelOptions, PointerKind};
use pointact::runner::pointer::EpisodePointer;
use pointact::runner::{run_episode_with, EpisodeOptions, EpisodeResult};
use pointact::sim::tasks;

use super::{announce_model, end_stream, finish_viz, runtime, stages::print_event, RerunCli};

#[derive(Args)]
#[command(group(clap::ArgGroup::new("hardware").args(["xarm", "widowx"])))]
pub struct RunCli {
    /// Task id (`tabletop/<id>`, `bridge/<id>` or a unique id); default: tabletop/pepper_in_pan.
    #[arg(long)]
    task: Option<String>,
    /// A scene TOML to use instead of the task's built-in scene (same object names).
    #[arg(long)]
    scene: Option<PathBuf>,
    /// Robot override (xarm6, widowx250); default: the task's robot, or the arm --xarm/--widowx
    /// names.
    #[arg(long)]
    robot: Option<String>,
    /// What to do, in the executor's words ("put the pepper in the pan", "pick up the knife by
    /// the handle"); replaces the task's instruction. Required with --xarm/--widowx.
    #[arg(long)]
    instruction: Option<String>,
    /// Run on a physical xArm 6 (or `pointact emulate xarm`): its controller's address, HOST or
    /// HOST:PORT (command port; default 502, the other ports from driver.toml).
    #[arg(long, conflicts_with_all = ["widowx", "task", "scene", "record"])]
    xarm: Option<String>,
    /// Run on a physical WidowX 250 (or `pointact emulate widowx`): its serial port.
    #[arg(long, conflicts_with_all = ["task", "scene", "record"])]
    widowx: Option<String>,
    /// With --xarm/--widowx: driver settings (default: the built-in robot-configs/<robot>/driver.toml).
    #[arg(long, requires = "hardware")]
    driver: Option<PathBuf>,
    /// With --xarm/--widowx: realsense[:SERIAL] (default), tcp:HOST:PORT (`emulate xarm --sim`'s
    /// camera) or replay:DIR.
    #[arg(long, requires = "hardware")]
    camera: Option<String>,
    /// With --xarm/--widowx: the calibration file placing the camera in the robot base frame
    /// (`pointact calibrate hand-eye`); required with a RealSense.
    #[arg(long, requires = "hardware")]
    calibration: Option<PathBuf>,
    /// With --xarm/--widowx: execute the checked plan without asking.
    #[arg(long, requires = "hardware")]
    yes: bool,
    /// Fraction (0, 1] of the planned speed (default: 0.25 on a robot, 1 in the simulator).
    #[arg(long, value_parser = super::values::speed_scale)]
    speed_scale: Option<f64>,
    /// Height of the table top in the robot base frame (m), as you measured it: the camera's
    /// table must agree within 3 cm or the run stops before any motion. Default: the scene's table
    /// in the simulator; on a robot, the table the camera measures.
    #[arg(long, allow_hyphen_values = true, value_parser = super::values::table_z)]
    table_z: Option<f64>,
    /// Executor branch: p (affordance: grasp + place points) or v (visual trace).
    #[arg(long, default_value = "p")]
    branch: Branch,
    /// Pointing backend: oracle (simulator ground truth), qwen (local model, --model DIR) or
    /// openai (a vLLM/SGLang server, --endpoint URL). Default: oracle in the simulator, qwen on a
    /// robot (the oracle needs the simulator's ground truth).
    #[arg(long, value_enum)]
    pointer: Option<PointerKind>,
    #[command(flatten)]
    model: ModelOptions,
    /// Episode seed (object layout, noise).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    #[command(flatten)]
    conditions: super::ConditionsCli,
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
    dataset: super::DatasetCli,
    #[command(flatten)]
    rerun: RerunCli,
}

pub fn run(a: RunCli) -> Result<ExitCode> {
    if a.dry_run && a.dataset.dataset.is_some() {
        anyhow::bail!("--dataset keeps episodes that move; a --dry-run moves nothing");
    }
    let target = match (&a.xarm, &a.widowx) {
        (Some(addr), _) => Some(super::run_robot::Target::Xarm(addr.clone())),
        (None, Some(port)) => Some(super::run_robot::Target::Widowx(port.clone())),
        (None, None) => None,
    };
    if let Some(target) = target {
        let expected = match target {
            super::run_robot::Target::Xarm(_) => "xarm6",
            super::run_robot::Target::Widowx(_) => "widowx250",
        };
        if let Some(r) = a.robot.as_deref().filter(|r| *r != expected) {
            anyhow::bail!("--robot {r} does not match the arm --xarm/--widowx names ({expected})");
        }
        let instruction = a.instruction.as_deref().ok_or_else(|| {
            anyhow::anyhow!("a run on a robot needs --instruction \"...\" (what to do)")
        })?;
        return super::run_robot::run(super::run_robot::RobotRun {
            target,
            driver: a.driver.as_deref(),
            instruction,
            branch: a.branch,
            camera: a.camera.as_deref().unwrap_or("realsense"),
            calibration: a.calibration.as_deref(),
            pointer: a.pointer.unwrap_or(PointerKind::Qwen),
            model: &a.model,
            speed_scale: a.speed_scale,
            table_z: a.table_z,
            dry_run: a.dry_run,
            yes: a.yes,
            dataset: &a.dataset,
        });
    }
    let spec = tasks::task(a.task.as_deref().unwrap_or(tasks::DEFAULT_TASK))?;
    let mut ep = spec.instantiate(a.seed)?;
    if let Some(path) = &a.scene {
        // The file's own layout replaces the seeded one (object names must match the task's), and
        // the target is worked out again from it.
        ep = spec.episode_in(ep, pointact::sim::scene::Scene::load(path)?)?;
    }
    if let Some(r) = &a.robot {
        ep.robot = r.clone();
    }
    if let Some(text) = &a.instruction {
        ep.instruction = text.clone();
    }
    println!(
        "task      {} (seed {}, robot {}, branch {:?})",
        spec.full_id(),
        a.seed,
        ep.robot,
        a.branch
    );
    let mut opts = EpisodeOptions {
        branch: a.branch,
        dry_run: a.dry_run,
        speed_scale: a.speed_scale.unwrap_or(1.0),
        table_z: a.table_z,
        ..Default::default()
    };
    a.conditions.apply(&mut opts);
    // As `eval sim` seeds its episodes: `run --task T --seed S` replays that episode.
    pointact::runner::eval::seed_episode(&mut opts, a.seed);
    let oracle = opts.oracle.clone();
    // Every side effect is made ready before anything moves: a recording folder that cannot be
    // written fails the run here, not after the arm has moved.
    if let Some(dir) = &a.record {
        pointact::camera::record::prepare_out_dir(dir, a.force)?;
        pointact::camera::record::check_writable(dir)?;
    }
    let mut recorder = a.dataset.open(&ep, &opts)?;
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
    let kind = a.pointer.unwrap_or(PointerKind::Oracle);
    announce_model(kind, &a.model);
    let pointer = EpisodePointer::open(kind, &a.model, oracle, Some(super::stream_to_stderr()))?;
    let make_pointer = |truth| pointact::pointing::consensus::Consensus {
        inner: pointer.for_episode(truth),
        samples: opts.samples,
    };
    let mut dataset_err = None;
    let result = match recorder.as_mut() {
        Some(rec) => {
            let (result, kept) = runtime()?.block_on(rec.run_episode_with(
                &ep,
                a.seed,
                &opts,
                make_pointer,
                &mut on_event,
            ))?;
            // The episode is written on the recorder's thread: wait for it.
            let kept = kept.and_then(|k| rec.settle().map(|_| k));
            println!("{}", super::recorded_line(&kept));
            dataset_err = kept.err();
            result
        }
        None => runtime()?.block_on(run_episode_with(
            &ep,
            &opts,
            |c| c,
            make_pointer,
            &mut on_event,
        ))?,
    };
    end_stream();
    if let Some(e) = dataset_err {
        anyhow::bail!("--dataset: the episode could not be written: {e}");
    }
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
        if result.error.is_some() {
            // Planning stopped before the end (the pointer found nothing, a target was out of
            // reach): say why, as a run without --dry-run would.
            println!(
                "outcome   dry run stopped, nothing moved: {}",
                result.detail
            );
            return Ok(ExitCode::FAILURE);
        }
        println!("outcome   dry run: every motion planned and checked, nothing moved");
        return Ok(ExitCode::SUCCESS);
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
