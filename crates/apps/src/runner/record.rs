//! Simulated episodes kept as LeRobotDataset episodes (`--dataset DIR` on `run` and `eval sim`).
//!
//! The arm's every physics step is seen by a `SimRobot` step observer; every `1 / fps` seconds of
//! simulated time it keeps the joints, the finger gap, the gripper command, the plan step running
//! and a snapshot of the scene. After the episode the snapshots are rendered by the episode's own
//! camera and encoded. Only motion is recorded: while the pointer thinks, simulated time stands
//! still, so a frame there would show nothing new.
//!
//! Per frame: `observation.state` (joints, rad; finger gap, m), `observation.ee_pose` (TCP in the
//! base frame: x, y, z in m and the quaternion x, y, z, w), `action` (the joint targets and
//! gripper width commanded for the next frame, as a teleoperated recording pairs an observation
//! with the command that follows it; the last frame holds), `action.ee_pose` (the TCP pose those
//! targets give), `pointact.plan_step` (the plan step executing, -1 before the first) and
//! `observation.images.front` (the scene camera). Per episode, beside lerobot's columns:
//! `pointact/task_id`, `pointact/seed`, `pointact/branch`, `pointact/success`, `pointact/detail`
//! and `pointact/points` (every question asked and the points answered, in frame pixels, JSON).

use std::path::Path;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use super::episode::{
    prepare_episode, run_prepared, sim_camera, EpisodeError, EpisodeOptions, EpisodeResult,
};
use crate::dataset::VideoOptions;
use crate::dataset::{
    Cell, Column, DatasetError, DatasetSpec, DatasetWriter, EpisodeInput, Feature,
};
use crate::executor::{Branch, Event};
use crate::kinematics::RobotModel;
use crate::pointing::consensus::Consensus;
use crate::pointing::Pointer;
use crate::sim::devices::SimRobot;
use crate::sim::oracle::{OraclePointer, OracleTruth};
use crate::sim::render::render_rgb_reusing;
use crate::sim::tasks::Episode;
use crate::sim::RenderScene;

/// Frames the renderer may be ahead of the coder (each a 640×480×3 buffer).
const RENDER_AHEAD: usize = 8;

/// The video feature of the scene camera.
pub const CAMERA_KEY: &str = "observation.images.front";

/// The features a dataset of `model`'s episodes holds, with a `width`×`height` camera.
pub fn dataset_spec(model: &RobotModel, fps: u32, width: u32, height: u32) -> DatasetSpec {
    let mut joints: Vec<String> = model
        .joint_limits()
        .iter()
        .map(|j| j.name.clone())
        .collect();
    joints.push("gripper_width".into());
    let joints: Vec<&str> = joints.iter().map(String::as_str).collect();
    let pose = ["x", "y", "z", "qx", "qy", "qz", "qw"];
    DatasetSpec {
        fps,
        robot_type: model.name().to_string(),
        features: vec![
            ("observation.state".into(), Feature::vector(&joints)),
            ("observation.ee_pose".into(), Feature::vector(&pose)),
            ("action".into(), Feature::vector(&joints)),
            ("action.ee_pose".into(), Feature::vector(&pose)),
            ("pointact.plan_step".into(), Feature::int_scalar()),
            (CAMERA_KEY.into(), Feature::video(width, height)),
        ],
        video: VideoOptions {
            fps,
            ..VideoOptions::default()
        },
    }
}

/// One kept instant of an episode.
struct Sample {
    q: Vec<f64>,
    gripper_width: f64,
    /// The commanded finger gap, m.
    gripper_target: f64,
    plan_step: i64,
    scene: RenderScene,
}

/// What the step observer keeps.
struct Samples {
    every: usize,
    steps: usize,
    kept: Vec<Sample>,
}

/// An open dataset and how episodes go into it.
pub struct DatasetRecorder {
    writer: DatasetWriter,
    fps: u32,
    only_success: bool,
}

/// What recording did with an episode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// Appended, with this many frames.
    Frames(usize),
    /// Not appended: `--only-success` and the episode failed.
    Skipped,
    /// Not appended: nothing moved (refused before motion, or a dry run), so there is no
    /// demonstration to keep.
    NoMotion,
}

impl DatasetRecorder {
    /// Opens (or creates) the dataset at `dir` for `model`'s episodes seen by a
    /// `width`×`height` camera; refuses a folder holding another robot's or another feature
    /// set's dataset. Call before anything runs.
    pub fn open(
        dir: &Path,
        model: &RobotModel,
        fps: u32,
        (width, height): (u32, u32),
        only_success: bool,
    ) -> Result<Self, DatasetError> {
        let spec = dataset_spec(model, fps, width, height);
        Ok(DatasetRecorder {
            writer: DatasetWriter::open(dir, &spec)?,
            fps,
            only_success,
        })
    }

    /// [`Self::open`] for the robot and camera `episode` runs with under `options` (its world is
    /// built, not run).
    pub fn open_for(
        dir: &Path,
        episode: &Episode,
        options: &EpisodeOptions,
        fps: u32,
        only_success: bool,
    ) -> Result<Self, DatasetError> {
        let setup = |e: &dyn std::fmt::Display| {
            DatasetError::Episode(format!("cannot set up {}: {e}", episode.task))
        };
        let prepared = prepare_episode(episode).map_err(|e| setup(&e))?;
        let camera = sim_camera(&prepared.world, options);
        let size = (camera.pinhole().width(), camera.pinhole().height());
        Self::open(dir, &prepared.model, fps, size, only_success)
    }

    /// The dataset's writer (its info, its folder).
    pub fn writer(&self) -> &DatasetWriter {
        &self.writer
    }

    /// Runs `episode` (seeded by `seed`) like [`super::episode::run_episode`], with the oracle
    /// pointer, and appends it.
    pub async fn run_episode(
        &mut self,
        episode: &Episode,
        seed: u64,
        options: &EpisodeOptions,
        on_event: &mut (dyn FnMut(Event<'_>) + Send),
    ) -> Result<(EpisodeResult, Result<Kept, DatasetError>), EpisodeError> {
        let (oracle, samples) = (options.oracle.clone(), options.samples);
        self.run_episode_with(
            episode,
            seed,
            options,
            |truth| Consensus {
                inner: OraclePointer::new(truth, oracle),
                samples,
            },
            on_event,
        )
        .await
    }

    /// [`Self::run_episode`] with the pointer built by the caller (`run --pointer qwen`).
    pub async fn run_episode_with<P: Pointer>(
        &mut self,
        episode: &Episode,
        seed: u64,
        options: &EpisodeOptions,
        make_pointer: impl FnOnce(OracleTruth) -> P,
        on_event: &mut (dyn FnMut(Event<'_>) + Send),
    ) -> Result<(EpisodeResult, Result<Kept, DatasetError>), EpisodeError> {
        let setup = |e: &dyn std::fmt::Display| EpisodeError::Setup(e.to_string());
        let prepared = prepare_episode(episode)?;
        let world = prepared.world.clone();
        let model = prepared.model.clone();
        let dt = world.lock().dt();
        let every = ((1.0 / (self.fps as f64 * dt)).round() as usize).max(1);
        let samples = Arc::new(Mutex::new(Samples {
            every,
            steps: 0,
            kept: Vec::new(),
        }));
        let plan_step = Arc::new(AtomicI64::new(-1));
        let (sink, step_now) = (samples.clone(), plan_step.clone());
        let gripper = model.config.gripper;
        let mut robot = SimRobot::new(world.clone(), model.clone(), model.home().to_vec())
            .map_err(|e| setup(&e))?
            .with_step_observer(Box::new(move |w, state| {
                let mut s = sink.lock().unwrap_or_else(|p| p.into_inner());
                if s.steps.is_multiple_of(s.every) {
                    let opening = w.robot_command().1;
                    s.kept.push(Sample {
                        q: state.q.clone(),
                        gripper_width: state.gripper_width,
                        gripper_target: gripper.closed_width
                            + opening * (gripper.open_width - gripper.closed_width),
                        plan_step: step_now.load(Ordering::Relaxed),
                        scene: w.render_scene(),
                    });
                }
                s.steps += 1;
            }));
        let mut camera = sim_camera(&world, options);
        let mut pointer = make_pointer(prepared.truth);
        let mut asked: Vec<serde_json::Value> = Vec::new();
        let mut watch = |e: Event<'_>| {
            match &e {
                Event::Step { index, .. } => plan_step.store(*index as i64, Ordering::Relaxed),
                Event::Asked {
                    ability,
                    query,
                    pointing,
                } => asked.push(serde_json::json!({
                    "ability": format!("{ability:?}"),
                    "query": query,
                    "points_px": pointing.points_px(),
                })),
                _ => {}
            }
            on_event(e)
        };
        let result = run_prepared(
            episode,
            options,
            &world,
            &mut robot,
            &mut camera,
            &mut pointer,
            &mut |_| true,
            &mut watch,
        )
        .await?;
        drop(robot);
        let kept = std::mem::take(&mut samples.lock().unwrap_or_else(|p| p.into_inner()).kept);
        if self.only_success && !result.success {
            return Ok((result, Ok(Kept::Skipped)));
        }
        if result.steps_executed == 0 || kept.len() < 2 {
            return Ok((result, Ok(Kept::NoMotion)));
        }
        let pinhole = camera.pinhole().clone();
        let render_options = options.render.clone();
        // Rendering and coding run side by side: a scoped thread renders the frames in order,
        // each re-tracing only what moved since the one before (`render_rgb_reusing`, byte for
        // byte the full render), while this thread codes them and computes the statistics. The
        // channel is bounded, so at most a few frames wait in memory.
        let render_frames = |tx: std::sync::mpsc::SyncSender<Vec<u8>>| {
            let mut previous: Option<Vec<u8>> = None;
            for (j, sample) in kept.iter().enumerate() {
                let before = previous.as_deref().map(|rgb| (&kept[j - 1].scene, rgb));
                let rgb = render_rgb_reusing(&sample.scene, &pinhole, &render_options, before);
                previous = Some(rgb.clone());
                if tx.send(rgb).is_err() {
                    return; // the writer stopped early (its error is the one reported)
                }
            }
        };
        let extras = vec![
            (
                "pointact/task_id".to_string(),
                Cell::Str(episode.task.clone()),
            ),
            ("pointact/seed".to_string(), Cell::I64(seed as i64)),
            (
                "pointact/branch".to_string(),
                Cell::Str(match options.branch {
                    Branch::Affordance => "p".into(),
                    Branch::Trace => "v".into(),
                }),
            ),
            ("pointact/success".to_string(), Cell::Bool(result.success)),
            (
                "pointact/detail".to_string(),
                Cell::Str(result.detail.clone()),
            ),
            (
                "pointact/points".to_string(),
                Cell::Str(serde_json::Value::Array(asked).to_string()),
            ),
        ];
        let writer = &mut self.writer;
        let appended = episode_columns(&model, &kept).and_then(|columns| {
            let n = kept.len();
            std::thread::scope(|scope| {
                let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(RENDER_AHEAD);
                scope.spawn(move || render_frames(tx));
                // Frames are asked for once each, in order: the channel's order.
                let mut frame = |_: usize| {
                    rx.recv()
                        .map_err(|_| "the renderer stopped before the last frame".to_string())
                };
                writer.append(EpisodeInput {
                    task: &episode.instruction,
                    frames: n,
                    columns,
                    videos: vec![(CAMERA_KEY, &mut frame)],
                    extras,
                })
            })?;
            Ok(Kept::Frames(n))
        });
        Ok((result, appended))
    }
}

/// The frame columns of `kept`: states, actions (the next frame's command), poses, plan steps.
fn episode_columns(
    model: &RobotModel,
    kept: &[Sample],
) -> Result<Vec<(&'static str, Column)>, DatasetError> {
    if kept.is_empty() {
        return Err(DatasetError::Episode(
            "the arm never moved: no frame to record".into(),
        ));
    }
    let pose = |q: &[f64]| -> Result<[f32; 7], DatasetError> {
        let t = model
            .fk(q)
            .map_err(|e| DatasetError::Episode(format!("a recorded state has no pose: {e}")))?;
        let (p, r) = (t.translation.vector, t.rotation.coords);
        Ok([p.x, p.y, p.z, r.x, r.y, r.z, r.w].map(|v| v as f32))
    };
    let (mut state, mut action, mut ee, mut ee_action, mut step) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (i, s) in kept.iter().enumerate() {
        let next = kept.get(i + 1).unwrap_or(s);
        state.extend(s.q.iter().map(|&v| v as f32));
        state.push(s.gripper_width as f32);
        action.extend(next.q.iter().map(|&v| v as f32));
        action.push(next.gripper_target as f32);
        ee.extend(pose(&s.q)?);
        ee_action.extend(pose(&next.q)?);
        step.push(s.plan_step);
    }
    Ok(vec![
        ("observation.state", Column::F32(state)),
        ("observation.ee_pose", Column::F32(ee)),
        ("action", Column::F32(action)),
        ("action.ee_pose", Column::F32(ee_action)),
        ("pointact.plan_step", Column::I64(step)),
    ])
}
