//! Simulated episodes kept as LeRobotDataset episodes (`--dataset DIR` on `run`, `eval sim` and
//! `eval bridge`).
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
use super::remote::{run_remote_episode_tapped, FrameTap, RemoteEpisode, RemoteOptions};
use crate::bridge::remote::RemotePolicy;
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
use crate::sim::render::{IncrementalRenderer, PinholeCamera, RenderOptions};
use crate::sim::tasks::Episode;
use crate::sim::{RenderScene, SimWorld};

pub mod robot;

/// Frames the renderer may be ahead of the coder (each a 640×480×3 buffer).
const RENDER_AHEAD: usize = 8;

/// The video feature of the scene camera.
pub const CAMERA_KEY: &str = "observation.images.front";
/// The depth video of the scene camera (`--dataset-depth`), named as lerobot's examples name a
/// camera's depth stream.
pub const DEPTH_KEY: &str = "observation.images.front_depth";

/// The features a dataset of `model`'s episodes holds, with a `width`×`height` camera, and its
/// depth when `depth`.
pub fn dataset_spec(
    model: &RobotModel,
    fps: u32,
    (width, height): (u32, u32),
    depth: bool,
) -> DatasetSpec {
    let mut joints: Vec<String> = model
        .joint_limits()
        .iter()
        .map(|j| j.name.clone())
        .collect();
    joints.push("gripper_width".into());
    let joints: Vec<&str> = joints.iter().map(String::as_str).collect();
    let pose = ["x", "y", "z", "qx", "qy", "qz", "qw"];
    let video = VideoOptions {
        fps,
        ..VideoOptions::default()
    };
    let mut spec = DatasetSpec {
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
        video,
    };
    if depth {
        let quantizer = crate::dataset::depth::DepthQuantizer::default();
        spec.features.push((
            DEPTH_KEY.into(),
            Feature::depth_video(width, height, fps, video.gop, &quantizer),
        ));
    }
    spec
}

/// One kept instant of an episode.
struct Sample {
    q: Vec<f64>,
    gripper_width: f64,
    /// The commanded finger gap, m.
    gripper_target: f64,
    plan_step: i64,
}

/// What the step observer keeps: the samples and the scene at each.
struct Samples {
    every: usize,
    steps: usize,
    kept: Vec<Sample>,
    scenes: Vec<RenderScene>,
}

/// An open dataset and how episodes go into it.
///
/// Episodes are rendered, coded and appended on a thread of their own while the next episode
/// runs: the simulation keeps one core, the dataset the other. At most [`QUEUED`] episodes wait
/// while another is written; [`DatasetRecorder::settle`] waits for all of them.
pub struct DatasetRecorder {
    fps: u32,
    /// The frames' size (the dataset's video feature).
    size: (u32, u32),
    only_success: bool,
    /// The dataset keeps depth (`DEPTH_KEY`).
    depth: bool,
    state: WriterState,
}

/// Episodes waiting for the writer thread beyond the one it is writing. Why several: where the
/// writer is slower than the simulation (2 cores, 640×480), a queue of one made the simulation
/// wait for it after every episode, with a core idle whenever the writer's renderer and coder
/// were not both busy; with a few waiting, the simulation runs ahead and the writer then has both
/// cores to catch up. A waiting episode is its states and scenes (a few hundred kB, no pixels),
/// and eight are written in a few seconds, which is what Ctrl-C waits for at most.
const QUEUED: usize = 8;

/// Where the dataset's writer is.
enum WriterState {
    /// Here: nothing is being written.
    Idle(Box<DatasetWriter>),
    /// On the writer thread, with episodes in flight.
    Writing(WriterThread),
    /// Lost: the writer thread panicked.
    Lost,
}

/// The writer thread: episodes in, one result per episode out, the writer back at the end.
struct WriterThread {
    jobs: std::sync::mpsc::SyncSender<Captured>,
    results: std::sync::mpsc::Receiver<Result<Kept, DatasetError>>,
    thread: std::thread::JoinHandle<Box<DatasetWriter>>,
}

/// An episode as captured, waiting to be rendered, coded and appended.
struct Captured {
    model: Arc<RobotModel>,
    samples: Vec<Sample>,
    pictures: Pictures,
    instruction: String,
    extras: Vec<(String, Cell)>,
}

/// Where an episode's frames come from, one per sample.
enum Pictures {
    /// The simulator's scenes, rendered by `camera` on the writer thread.
    Rendered {
        scenes: Vec<RenderScene>,
        camera: PinholeCamera,
        render: RenderOptions,
    },
    /// A real camera's frames (and depth), already at the dataset's size, waiting in spool files.
    Spooled(robot::Spools),
}

/// What recording did with an episode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// Given to the dataset with this many frames, for the writer thread to append: whether
    /// the write succeeded comes from [`DatasetRecorder::settle`] (or from the next episode's
    /// recording).
    Frames(usize),
    /// Not appended: `--only-success` and the episode failed.
    Skipped,
    /// Not appended: nothing moved (refused before motion, or a dry run), so there is no
    /// demonstration to keep.
    NoMotion,
}

impl DatasetRecorder {
    /// Opens (or creates) the dataset at `dir` for `model`'s episodes seen by a
    /// `width`×`height` camera (and its depth when `depth`); refuses a folder holding another
    /// robot's or another feature set's dataset. Call before anything runs.
    pub fn open(
        dir: &Path,
        model: &RobotModel,
        fps: u32,
        (width, height): (u32, u32),
        only_success: bool,
        depth: bool,
    ) -> Result<Self, DatasetError> {
        let spec = dataset_spec(model, fps, (width, height), depth);
        Ok(DatasetRecorder {
            state: WriterState::Idle(Box::new(DatasetWriter::open(dir, &spec)?)),
            fps,
            size: (width, height),
            only_success,
            depth,
        })
    }

    /// [`Self::open`] for the robot and camera `episode` runs with under `options` (its world is
    /// built, not run), the frames `size` (`None`: the camera's own size).
    pub fn open_for(
        dir: &Path,
        episode: &Episode,
        options: &EpisodeOptions,
        fps: u32,
        size: Option<(u32, u32)>,
        only_success: bool,
        depth: bool,
    ) -> Result<Self, DatasetError> {
        let setup = |e: &dyn std::fmt::Display| {
            DatasetError::Episode(format!("cannot set up {}: {e}", episode.task))
        };
        let prepared = prepare_episode(episode).map_err(|e| setup(&e))?;
        let camera = sim_camera(&prepared.world, options);
        let size = size.unwrap_or((camera.pinhole().width(), camera.pinhole().height()));
        Self::open(dir, &prepared.model, fps, size, only_success, depth)
    }

    /// Waits until every episode given to the dataset is written, and returns the writer (its
    /// info, its folder), or the first write that failed since the last call.
    pub fn settle(&mut self) -> Result<&DatasetWriter, DatasetError> {
        let mut first_err = None;
        if matches!(self.state, WriterState::Writing(_)) {
            let WriterState::Writing(t) = std::mem::replace(&mut self.state, WriterState::Lost)
            else {
                unreachable!("matched just above")
            };
            let WriterThread {
                jobs,
                results,
                thread,
            } = t;
            drop(jobs);
            for r in results.iter() {
                if let Err(e) = r {
                    first_err.get_or_insert(e);
                }
            }
            if let Ok(writer) = thread.join() {
                self.state = WriterState::Idle(writer);
            }
        }
        match (&self.state, first_err) {
            (_, Some(e)) => Err(e),
            (WriterState::Idle(w), None) => Ok(w),
            _ => Err(lost()),
        }
    }

    /// Hands `captured` to the writer thread (started at the first episode). A write that
    /// failed since the last call is returned instead, and `captured` is not kept: nothing more
    /// should be recorded once an episode could not be.
    fn queue(&mut self, captured: Captured) -> Result<(), DatasetError> {
        if matches!(self.state, WriterState::Idle(_)) {
            let WriterState::Idle(mut writer) =
                std::mem::replace(&mut self.state, WriterState::Lost)
            else {
                unreachable!("matched just above")
            };
            let (jobs, inbox) = std::sync::mpsc::sync_channel::<Captured>(QUEUED);
            let (outbox, results) = std::sync::mpsc::channel();
            let thread = std::thread::Builder::new()
                .name("dataset-writer".into())
                .spawn(move || {
                    yield_to_the_run();
                    for job in inbox {
                        if outbox.send(append_captured(&mut writer, job)).is_err() {
                            break;
                        }
                    }
                    writer
                })
                .map_err(|e| {
                    DatasetError::Episode(format!("cannot start the writer thread: {e}"))
                })?;
            self.state = WriterState::Writing(WriterThread {
                jobs,
                results,
                thread,
            });
        }
        let WriterState::Writing(t) = &mut self.state else {
            return Err(lost());
        };
        while let Ok(r) = t.results.try_recv() {
            r?;
        }
        if t.jobs.send(captured).is_err() {
            // The thread is gone (it panicked): `settle` says so.
            return self.settle().map(|_| ());
        }
        Ok(())
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
            scenes: Vec::new(),
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
                        gripper_target: gripper.width_for_opening(opening),
                        plan_step: step_now.load(Ordering::Relaxed),
                    });
                    s.scenes.push(w.render_scene());
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
                } => asked.push(asked_json(*ability, query, pointing)),
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
        let (kept, scenes) = {
            let mut s = samples.lock().unwrap_or_else(|p| p.into_inner());
            (std::mem::take(&mut s.kept), std::mem::take(&mut s.scenes))
        };
        let captured = Captured {
            model,
            samples: kept,
            pictures: Pictures::Rendered {
                scenes,
                camera: resized(camera.pinhole(), self.size),
                render: options.render.clone(),
            },
            instruction: episode.instruction.clone(),
            extras: episode_extras(
                &episode.task,
                seed as i64,
                branch_name(options.branch),
                result.success,
                &result.detail,
                serde_json::Value::Array(asked),
            ),
        };
        let kept = self.keep(result.success, result.steps_executed > 0, captured);
        Ok((result, kept))
    }

    /// Hands an episode to the writer, unless `--only-success` leaves a failure out or nothing
    /// moved (no demonstration to keep).
    fn keep(
        &mut self,
        success: bool,
        moved: bool,
        captured: Captured,
    ) -> Result<Kept, DatasetError> {
        if self.only_success && !success {
            return Ok(Kept::Skipped);
        }
        let n = captured.samples.len();
        if !moved || n < 2 {
            return Ok(Kept::NoMotion);
        }
        self.queue(captured).map(|()| Kept::Frames(n))
    }

    /// Runs `episode` on our simulator with `policy` choosing every action (`eval bridge`), and
    /// appends it: the dataset's frames are parts of the control steps (its fps a whole multiple
    /// of the control frequency), the plan step is -1 throughout (the plan, if any, is the
    /// policy's), `pointact/branch` is `branch` and `pointact/points` is empty (the points stay
    /// on the policy's side).
    pub async fn run_remote_episode<P: RemotePolicy>(
        &mut self,
        episode: &Episode,
        seed: u64,
        options: &RemoteOptions,
        branch: &str,
        policy: &mut P,
    ) -> Result<(RemoteEpisode, Result<Kept, DatasetError>), EpisodeError> {
        let per_step =
            frames_per_control_step(self.fps, options.control_freq).map_err(EpisodeError::Setup)?;
        let mut kept: Vec<Sample> = Vec::new();
        let mut scenes: Vec<RenderScene> = Vec::new();
        let mut pinhole: Option<PinholeCamera> = None;
        let mut model: Option<Arc<RobotModel>> = None;
        let mut on_frame = |w: &SimWorld, q: &[f64]| {
            let gripper = w.robot().config.gripper;
            let width = |opening: f64| gripper.width_for_opening(opening);
            pinhole.get_or_insert_with(|| w.scene().camera.pinhole.clone());
            model.get_or_insert_with(|| w.robot().clone());
            kept.push(Sample {
                q: q.to_vec(),
                gripper_width: width(w.gripper_opening()),
                gripper_target: width(w.robot_command().1),
                plan_step: -1,
            });
            scenes.push(w.render_scene());
        };
        let result = run_remote_episode_tapped(
            episode,
            options,
            policy,
            Some(FrameTap {
                per_step,
                on_frame: &mut on_frame,
            }),
        )
        .await?;
        let (Some(pinhole), Some(model)) = (pinhole, model) else {
            // No frame at all: the episode ended before its first observation.
            return Ok((result, Ok(Kept::NoMotion)));
        };
        let captured = Captured {
            model,
            samples: kept,
            pictures: Pictures::Rendered {
                scenes,
                camera: resized(&pinhole, self.size),
                render: options.episode.render.clone(),
            },
            instruction: episode.instruction.clone(),
            extras: episode_extras(
                &episode.task,
                seed as i64,
                branch,
                result.success,
                &result.detail,
                serde_json::Value::Array(Vec::new()),
            ),
        };
        let kept = self.keep(result.success, result.steps > 0, captured);
        Ok((result, kept))
    }
}

/// Dataset frames per control step of a remote episode: `fps` must be a whole multiple of the
/// control frequency, so every frame falls on the arm's own motion, never between two guesses.
pub fn frames_per_control_step(fps: u32, control_freq: f64) -> Result<usize, String> {
    let ratio = fps as f64 / control_freq;
    if control_freq > 0.0 && ratio >= 1.0 && (ratio - ratio.round()).abs() < 1e-9 {
        Ok(ratio.round() as usize)
    } else {
        Err(format!(
            "a dataset of remote episodes takes frames within the {control_freq} Hz control \
             steps: its fps must be a whole multiple of {control_freq}, not {fps}"
        ))
    }
}

/// One question and its answer as `pointact/points` lists them.
fn asked_json(
    ability: crate::pointing::Ability,
    query: &str,
    pointing: &crate::pointing::Pointing,
) -> serde_json::Value {
    serde_json::json!({
        "ability": format!("{ability:?}"),
        "query": query,
        "points_px": pointing.points_px(),
    })
}

/// The code `pointact/branch` holds for an executor branch.
fn branch_name(branch: Branch) -> &'static str {
    match branch {
        Branch::Affordance => "p",
        Branch::Trace => "v",
    }
}

/// pointact's columns of the episodes table, beside lerobot's.
fn episode_extras(
    task_id: &str,
    seed: i64,
    branch: &str,
    success: bool,
    detail: &str,
    points: serde_json::Value,
) -> Vec<(String, Cell)> {
    vec![
        (
            "pointact/task_id".to_string(),
            Cell::Str(task_id.to_string()),
        ),
        ("pointact/seed".to_string(), Cell::I64(seed)),
        ("pointact/branch".to_string(), Cell::Str(branch.to_string())),
        ("pointact/success".to_string(), Cell::Bool(success)),
        ("pointact/detail".to_string(), Cell::Str(detail.to_string())),
        ("pointact/points".to_string(), Cell::Str(points.to_string())),
    ]
}

/// `camera` seeing the same view in a `width`×`height` image: focal lengths and principal point
/// scaled per axis, pixel centres kept (OpenCV's `resize` convention), distortion unchanged (it
/// acts on normalised coordinates).
fn resized(camera: &PinholeCamera, (width, height): (u32, u32)) -> PinholeCamera {
    let mut c = camera.clone();
    let k = &mut c.intrinsics;
    let (sx, sy) = (
        width as f64 / k.width as f64,
        height as f64 / k.height as f64,
    );
    k.fx *= sx;
    k.fy *= sy;
    k.cx = (k.cx + 0.5) * sx - 0.5;
    k.cy = (k.cy + 0.5) * sy - 0.5;
    k.width = width as usize;
    k.height = height as usize;
    c
}

impl Drop for DatasetRecorder {
    /// An early return must not end the process in the middle of a write: the episodes handed
    /// over are finished first (a failure was reported by `queue` or `settle`, or is lost with
    /// the error that caused the early return).
    fn drop(&mut self) {
        let _ = self.settle();
    }
}

/// Lowers the calling thread's scheduling priority to nice 10 (the renderer threads it starts
/// inherit it). Why: the run is what matters and the dataset can wait. At the default priority the
/// writer's renderer and coder took two thirds of a core from the simulation whenever all three
/// were busy on two cores, and the suite took 10–25 % longer; below it, the writer uses what the
/// run leaves (it needs less CPU time than the simulation, and the queue evens out the bursts),
/// and on a robot it cannot delay the control loop. Where the call is refused the writer runs at
/// the default priority, as before.
fn yield_to_the_run() {
    #[cfg(target_os = "linux")]
    // SAFETY: setpriority(2) with `who` 0 changes the calling thread's nice value only (Linux
    // keeps one per thread); it reads and writes no memory of ours.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, 10);
    }
}

/// The error of a writer thread that panicked.
fn lost() -> DatasetError {
    DatasetError::Episode("the dataset's writer thread panicked".into())
}

/// Renders, codes and appends one captured episode (on the writer thread).
///
/// Rendering and coding run side by side: a scoped thread renders the frames in order, each
/// re-tracing only what moved since the one before (`IncrementalRenderer`, byte for byte the
/// full render), while this thread codes them and computes the statistics. The channel is
/// bounded, so at most a few frames wait in memory.
fn append_captured(writer: &mut DatasetWriter, c: Captured) -> Result<Kept, DatasetError> {
    let Captured {
        model,
        samples: kept,
        pictures,
        instruction,
        extras,
    } = c;
    let columns = episode_columns(&model, &kept)?;
    let n = kept.len();
    let depth = writer.info().features.get(DEPTH_KEY).is_some();
    let (scenes, camera, render) = match pictures {
        Pictures::Rendered {
            scenes,
            camera,
            render,
        } => (scenes, camera, render),
        Pictures::Spooled(robot::Spools {
            rgb: mut spool,
            depth: mut depth_spool,
        }) => {
            let counts = [Some(&spool), depth_spool.as_ref()].map(|s| s.map(|s| s.frames()));
            if counts.iter().flatten().any(|&f| f != n) || depth_spool.is_some() != depth {
                return Err(DatasetError::Episode(format!(
                    "camera frames (colour, depth) {counts:?} for {n} states, depth kept: {depth}"
                )));
            }
            let mut frame = |i: usize| spool.read(i).map_err(|e| e.to_string());
            let mut videos: Vec<(&str, crate::dataset::writer::FrameSource<'_>)> =
                vec![(CAMERA_KEY, &mut frame)];
            let mut depth_frame = |i: usize| match depth_spool.as_mut() {
                Some(s) => s.read(i).map_err(|e| e.to_string()),
                None => Err("no depth was recorded".to_string()),
            };
            if depth {
                videos.push((DEPTH_KEY, &mut depth_frame));
            }
            writer.append(EpisodeInput {
                task: &instruction,
                frames: n,
                columns,
                videos,
                extras,
            })?;
            return Ok(Kept::Frames(n));
        }
    };
    // Colour, and depth (little-endian float32 metres) when the dataset keeps it.
    let render_frames = |tx: std::sync::mpsc::SyncSender<(Vec<u8>, Vec<u8>)>| {
        let mut renderer = IncrementalRenderer::new(camera.clone(), render.clone());
        for scene in &scenes {
            let rgb = renderer.render(scene).to_vec();
            let metres = if depth {
                renderer
                    .depth()
                    .iter()
                    .flat_map(|d| d.to_le_bytes())
                    .collect()
            } else {
                Vec::new()
            };
            if tx.send((rgb, metres)).is_err() {
                return; // the writer stopped early (its error is the one reported)
            }
        }
    };
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<(Vec<u8>, Vec<u8>)>(RENDER_AHEAD);
        scope.spawn(move || render_frames(tx));
        // The writer asks each video for frame i in turn, colour first (the features' order):
        // the colour frame's depth waits here for the depth video's turn.
        let pending = std::cell::RefCell::new(None::<Vec<u8>>);
        let mut frame = |_: usize| {
            let (rgb, metres) = rx
                .recv()
                .map_err(|_| "the renderer stopped before the last frame".to_string())?;
            *pending.borrow_mut() = Some(metres);
            Ok(rgb)
        };
        let mut depth_frame = |i: usize| {
            pending
                .borrow_mut()
                .take()
                .ok_or_else(|| format!("depth frame {i} asked before its colour frame"))
        };
        let mut videos: Vec<(&str, crate::dataset::writer::FrameSource<'_>)> =
            vec![(CAMERA_KEY, &mut frame)];
        if depth {
            videos.push((DEPTH_KEY, &mut depth_frame));
        }
        writer.append(EpisodeInput {
            task: &instruction,
            frames: n,
            columns,
            videos,
            extras,
        })
    })?;
    Ok(Kept::Frames(n))
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
