//! One simulated episode end to end: build the seeded scene (the world: `SimRobot`, `SimCamera`,
//! the judge), put the robot at home, run the task with the chosen pointer, let the scene settle,
//! and judge success from the final object poses.
//!
//! Async and runtime-free: the caller's runtime drives it (the CLI's, a test's, a server's), and
//! the future is `Send`, so episodes can run side by side on a multi-threaded runtime.

use std::sync::Arc;

use k::nalgebra::{Point3, Vector3};

use super::task::{run_task, RunError, RunOutcome};
use crate::camera::Camera;
use crate::executor::{Branch, Event, GraspParams};
use crate::kinematics::RobotModel;
use crate::pointing::consensus::Consensus;
use crate::pointing::Pointer;
use crate::robot::Robot;
use crate::safety::SafetyConfig;
use crate::sim::devices::{calibration_error, SharedWorld, SimCamera, SimRobot};
use crate::sim::judge;
use crate::sim::oracle::{LabelSource, OracleObject, OracleOptions, OraclePointer, OracleTruth};
use crate::sim::render::RenderOptions;
use crate::sim::tasks::{self, Episode, ObjectChoice, Target};

/// How to run one simulated episode: branch, pointer, rendering, speed and perturbations.
#[derive(Debug, Clone)]
pub struct EpisodeOptions {
    /// Which plan to execute (affordance points or a visual trace); default affordance.
    pub branch: Branch,
    /// Settings of the oracle pointer, when it is the one asked.
    pub oracle: OracleOptions,
    /// How the camera renders; its `seed` also draws the calibration error.
    pub render: RenderOptions,
    /// Plan and check without moving the robot (the episode then fails); default false.
    pub dry_run: bool,
    /// Fraction (0, 1] of the planned speed (`SafetyConfig::speed_scale`).
    pub speed_scale: f64,
    /// The table height the gate is told (base frame, m; the camera's must agree within
    /// `TABLE_AGREEMENT_M`); `None`: the scene's own.
    pub table_z: Option<f64>,
    /// Seconds the scene may take to come to rest before judging.
    pub settle_s: f64,
    /// A hand-eye calibration error (mm, degrees): the executor is given a camera pose off by
    /// this much (drawn from `render.seed`); the world and the ground truth keep the true one.
    pub calib_error_mm: f64,
    /// The rotation part of the calibration error, degrees (default 0).
    pub calib_error_deg: f64,
    /// Ask the pointer this many times per question and keep the medoid answer
    /// (`pointing::consensus`); 1 asks once.
    pub samples: usize,
}

impl Default for EpisodeOptions {
    fn default() -> Self {
        EpisodeOptions {
            branch: Branch::Affordance,
            oracle: OracleOptions::default(),
            render: RenderOptions::default(),
            dry_run: false,
            speed_scale: 1.0,
            table_z: None,
            settle_s: 3.0,
            calib_error_mm: 0.0,
            calib_error_deg: 0.0,
            samples: 1,
        }
    }
}

/// How a simulated episode went.
#[derive(Debug)]
pub struct EpisodeResult {
    /// The judge's verdict, counted only when the plan was executed.
    pub success: bool,
    /// The judge's explanation, or the error that ended the episode.
    pub detail: String,
    /// The run's error, if it stopped early (the robot was left at rest).
    pub error: Option<RunError>,
    /// Whether the plan reached the robot (false on a dry run or an early stop).
    pub executed: bool,
    /// Plan steps that reached the robot.
    pub steps_executed: usize,
    /// Whether the arm ended away from its home pose.
    pub moved: bool,
    /// Simulated seconds.
    pub sim_time_s: f64,
    /// The camera's look after the plan ran (`None`: it did not run to the end).
    pub verdict: Option<crate::executor::Verdict>,
}

/// Why an episode could not be run at all (as opposed to running and failing).
#[derive(Debug, thiserror::Error)]
pub enum EpisodeError {
    /// The episode could not be set up (scene, robot model, world, devices); the message says what.
    #[error("{0}")]
    Setup(String),
}

/// What the oracle knows, from the episode's ground truth.
pub fn oracle_truth(episode: &Episode, shared: &SharedWorld) -> OracleTruth {
    let world = shared.lock();
    // A task that names its object by a relation ("the nearest object") makes that phrase an alias
    // of the chosen object; taken from the task's own instruction, so an edited instruction cannot
    // invent a referent.
    let phrase = tasks::task(&episode.task)
        .ok()
        .filter(|spec| matches!(spec.object, ObjectChoice::NearestToCamera(_)))
        .and_then(|spec| crate::executor::parse_instruction(spec.instruction).ok())
        .map(|i| i.object);
    let objects = world
        .scene()
        .objects
        .iter()
        .filter_map(|o| {
            let mut aliases: Vec<String> = o.aliases.iter().map(|a| a.to_lowercase()).collect();
            aliases.push(o.name.to_lowercase().replace('_', " "));
            // The referring expression of the instruction ("the nearest object") names the object.
            if o.name == episode.object {
                aliases.extend(phrase.clone());
            }
            Some(OracleObject {
                name: o.name.clone(),
                aliases,
                instance: world.instance_of(&o.name)?,
                parts: o
                    .parts
                    .iter()
                    .filter_map(|p| Some((p.clone(), o.part_id(p)?)))
                    .collect(),
            })
        })
        .collect();
    let place_target = match &episode.target {
        Target::None => None,
        _ => episode.target_region_world(&world).map(|r| {
            let c = r.frame_from_region.translation.vector;
            let half = r.shape.local_half_extents();
            let down = r.frame_from_region.rotation * Vector3::new(0.0, 0.0, -half.z);
            Point3::from(c + down)
        }),
    };
    let grasp = GraspParams::default();
    OracleTruth {
        labels: LabelSource::World(shared.clone()),
        objects,
        manipulated: episode.object.clone(),
        place_target,
        trace_lift: grasp.trace_lift,
        pick_up_lift: grasp.pick_up_lift,
    }
}

/// Runs `episode` with the oracle pointer and the simulated camera; `on_event` sees every stage
/// (the CLI prints them).
pub async fn run_episode(
    episode: &Episode,
    options: &EpisodeOptions,
    on_event: &mut (dyn FnMut(Event<'_>) + Send),
) -> Result<EpisodeResult, EpisodeError> {
    let oracle = options.oracle.clone();
    let samples = options.samples;
    run_episode_with(
        episode,
        options,
        |camera| camera,
        |truth| Consensus {
            inner: OraclePointer::new(truth, oracle),
            samples,
        },
        on_event,
    )
    .await
}

/// A simulated episode's world before anything moves: the seeded scene settled, the robot model,
/// and what the oracle pointer may know. Any driver whose arm moves `world` can then run it
/// ([`run_prepared`]): `SimRobot` directly, or the xArm driver through the emulator
/// ([`super::emulated`]).
pub struct PreparedEpisode {
    /// The settled simulated world, shared by the robot and camera devices.
    pub world: SharedWorld,
    /// The robot's kinematic model.
    pub model: Arc<RobotModel>,
    /// The ground truth an oracle pointer may read.
    pub truth: OracleTruth,
}

/// Builds and settles `episode`'s world (its scene checked first).
pub fn prepare_episode(episode: &Episode) -> Result<PreparedEpisode, EpisodeError> {
    let setup = |e: &dyn std::fmt::Display| EpisodeError::Setup(e.to_string());
    episode.check_scene().map_err(|e| setup(&e))?;
    let model = episode.robot_model().map_err(|e| setup(&e))?;
    let world = SharedWorld::new(episode.world(model.clone()).map_err(|e| setup(&e))?);
    let truth = oracle_truth(episode, &world);
    world.lock().settle(2.0);
    Ok(PreparedEpisode {
        world,
        model,
        truth,
    })
}

/// Like `run_episode`, with the camera wrapped and the pointer built by the caller (tests use this
/// to corrupt depth or to point somewhere wrong on purpose).
pub async fn run_episode_with<C: Camera, P: Pointer>(
    episode: &Episode,
    options: &EpisodeOptions,
    wrap_camera: impl FnOnce(SimCamera) -> C,
    make_pointer: impl FnOnce(OracleTruth) -> P,
    on_event: &mut (dyn FnMut(Event<'_>) + Send),
) -> Result<EpisodeResult, EpisodeError> {
    let setup = |e: &dyn std::fmt::Display| EpisodeError::Setup(e.to_string());
    let prepared = prepare_episode(episode)?;
    let world = prepared.world.clone();
    let model = prepared.model.clone();
    let mut robot = SimRobot::new(world.clone(), model.clone(), model.home().to_vec())
        .map_err(|e| setup(&e))?;
    let mut camera = wrap_camera(sim_camera(&world, options));
    let mut pointer = make_pointer(prepared.truth);
    run_prepared(
        episode,
        options,
        &world,
        &mut robot,
        &mut camera,
        &mut pointer,
        &mut |_| true,
        on_event,
    )
    .await
}

/// The episode's camera: its sensor model, and its calibration error if any.
pub(crate) fn sim_camera(world: &SharedWorld, options: &EpisodeOptions) -> SimCamera {
    let camera = SimCamera::new(world.clone(), options.render.clone());
    if options.calib_error_mm != 0.0 || options.calib_error_deg != 0.0 {
        camera.with_pose_error(calibration_error(
            options.calib_error_mm,
            options.calib_error_deg,
            options.render.seed,
        ))
    } else {
        camera
    }
}

/// [`run_prepared`] driven to its end in place ([`run_now`]: the simulator's devices answer every
/// call at once), every plan approved, no event watched: a simulated run as the data generators
/// (`train questions`, `train spatial-data`) record it.
pub(crate) fn run_prepared_now<R: Robot, C: Camera, P: Pointer>(
    episode: &Episode,
    options: &EpisodeOptions,
    world: &SharedWorld,
    robot: &mut R,
    camera: &mut C,
    pointer: &mut P,
) -> Result<EpisodeResult, EpisodeError> {
    run_now(run_prepared(
        episode,
        options,
        world,
        robot,
        camera,
        pointer,
        &mut |_| true,
        &mut |_| {},
    ))
}

/// Runs a prepared episode on `robot` (whose arm moves `world`, starting at home) and judges the
/// world when the run ends, however it ends. `approve` sees the checked plan (see `run_task`).
#[allow(clippy::too_many_arguments)]
pub async fn run_prepared<R: Robot, C: Camera, P: Pointer>(
    episode: &Episode,
    options: &EpisodeOptions,
    world: &SharedWorld,
    robot: &mut R,
    camera: &mut C,
    pointer: &mut P,
    approve: &mut (dyn FnMut(&crate::executor::Plan) -> bool + Send),
    on_event: &mut (dyn FnMut(Event<'_>) + Send),
) -> Result<EpisodeResult, EpisodeError> {
    let setup = |e: &dyn std::fmt::Display| EpisodeError::Setup(e.to_string());
    let home = robot.model().home().to_vec();
    let table_z = options
        .table_z
        .unwrap_or_else(|| world.lock().scene().table.height);
    let safety = SafetyConfig {
        table_z,
        dry_run: options.dry_run,
        speed_scale: options.speed_scale,
        ..SafetyConfig::default()
    };
    let mut steps_executed = 0;
    let mut count = |e: Event<'_>| {
        if let Event::Step { .. } = e {
            steps_executed += 1;
        }
        on_event(e)
    };
    let outcome: Result<RunOutcome, RunError> = run_task(
        robot,
        camera,
        pointer,
        &episode.instruction,
        options.branch,
        safety,
        approve,
        &mut count,
    )
    .await;
    let final_q = robot.joint_positions().await.map_err(|e| setup(&e))?;
    let mut w = world.lock();
    w.settle(options.settle_s);
    let judgement = judge(&mut w, episode);
    let sim_time_s = w.time();
    // 1e-5 rad: above the f32 rounding of a driver's wire format (the xArm sends f32 radians),
    // far below any motion.
    let moved = final_q.iter().zip(&home).any(|(a, b)| (a - b).abs() > 1e-5);
    Ok(match outcome {
        Ok(o) => EpisodeResult {
            success: judgement.success && o.executed,
            detail: judgement.detail,
            error: None,
            executed: o.executed,
            steps_executed,
            moved,
            sim_time_s,
            verdict: o.verdict,
        },
        Err(e) => EpisodeResult {
            success: false,
            detail: e.to_string(),
            error: Some(e),
            executed: false,
            steps_executed,
            moved,
            sim_time_s,
            verdict: None,
        },
    })
}

/// Drives a future whose every await completes at once (the simulator's devices never wait) to
/// its end without a runtime: a simulated episode's camera and arm answer every call at once, so
/// callers that are plain functions (the trainer's rewards, the demonstration recorder) run an
/// episode with no runtime of their own and no nested one, from inside the CLI's runtime too.
pub(crate) fn run_now<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::yield_now();
    }
}
