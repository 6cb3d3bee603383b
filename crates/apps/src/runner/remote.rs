//! Episodes driven by a policy on the other end of a link (the messages: `bridge::remote`).
//!
//! [`run_remote_episode`] is the evaluator side on the built-in simulator (`pointact eval bridge`):
//! the simulator stands in for SimplerEnv. It reproduces SimplerEnv's WidowX interface where it
//! matters to a policy: observations with RGB, z-depth, intrinsics, a world→camera extrinsic, the
//! base and TCP poses, `qpos` (6 arm joints + 2 finger joints) and the controller's target pose;
//! the stock delta end-effector controller (`geometry::ee_delta::apply_delta` on the previous
//! *target*, IK from the current joints, the joints kept where IK fails) or absolute joint targets;
//! the gripper mapped from `[-1, 1]` to finger positions; a step budget. The world is judged by our
//! simulator's judge, as in `eval sim`, so the two evaluations are comparable.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use k::nalgebra::{Isometry3, Point3};

use super::episode::{prepare_episode, EpisodeError, EpisodeOptions};
use super::eval::{EpisodeRecord, EvalReport};
use super::record::{DatasetRecorder, Kept};
use crate::bridge::remote::{
    ControlMode, EpisodeStart, LabelledObject, Labels, ObjectRole, Observation, PolicyStatus,
    RemoteError, RemotePolicy, GRIPPER_ACTION_RANGE,
};
use crate::camera::{Camera, Frame};
use crate::dataset::DatasetError;
use crate::geometry::ee_delta::{apply_delta, EeDelta};
use crate::kinematics::{IkOptions, IkSolver, KinematicsError, RobotModel};
use crate::robot::xarm::emulator::EmulatedArm as _;
use crate::sim::devices::{SimArm, SimCamera};
use crate::sim::tasks::{Episode, Suite, Target};
use crate::sim::{judge, SimWorld};

/// Settings of the evaluator side.
#[derive(Debug, Clone)]
pub struct RemoteOptions {
    /// Episode settings the evaluator side reuses (rendering, settle time, …).
    pub episode: EpisodeOptions,
    /// How the policy's actions drive the arm; default delta end-effector.
    pub control_mode: ControlMode,
    /// Control steps per second; default 5 (SimplerEnv's Bridge tasks).
    pub control_freq: f64,
    /// Step budget per episode. Our simulator has no official one; the default leaves a plan at
    /// the WidowX's planned speed time to finish.
    pub max_steps: u64,
    /// Send the segmentation and object roles (an oracle pointer needs them).
    pub send_labels: bool,
}

impl Default for RemoteOptions {
    fn default() -> Self {
        RemoteOptions {
            episode: EpisodeOptions::default(),
            control_mode: ControlMode::DeltaEe,
            control_freq: 5.0,
            max_steps: 300,
            send_labels: true,
        }
    }
}

/// How one remote episode went.
#[derive(Debug, Clone)]
pub struct RemoteEpisode {
    /// The judge's verdict.
    pub success: bool,
    /// The judge's words.
    pub detail: String,
    /// Control steps taken.
    pub steps: u64,
    /// The policy's last status and words.
    pub policy_status: PolicyStatus,
    /// The policy's words with that status.
    pub policy_detail: String,
    /// Simulated seconds.
    pub sim_time_s: f64,
}

/// What a recording sees of a remote episode (`eval bridge --dataset`): `per_step` frames per
/// control step, each handed to `on_frame` with the world and the arm's joints; the first before
/// any action. A control step is then driven as `per_step` equal parts of its motion (the same
/// straight line in joint space, the same physics steps).
pub(crate) struct FrameTap<'a> {
    pub per_step: usize,
    pub on_frame: &'a mut (dyn FnMut(&SimWorld, &[f64]) + Send),
}

/// SimplerEnv's arm controller on a kinematic arm: the stock delta end-effector controller
/// (`apply_delta` on the previous *target*, IK from the current joints, the joints kept where IK
/// fails) or absolute joint targets, and the gripper action mapped onto a finger target. The
/// evaluator side of [`run_remote_episode`] drives our simulated arm with it; `bench bridge` uses
/// it alone, as a kinematic evaluator.
pub struct SimplerController {
    model: Arc<RobotModel>,
    ik: IkSolver,
    q: Vec<f64>,
    target: Isometry3<f64>,
    /// Finger joint target (m).
    finger: f64,
}

impl SimplerController {
    /// At joints `q` (the target is their tip pose), fingers open.
    pub fn new(model: Arc<RobotModel>, q: Vec<f64>) -> Result<Self, KinematicsError> {
        let ik = IkSolver::new(
            &model,
            IkOptions {
                position_tolerance: 1e-4,
                rotation_tolerance: 1e-3,
                max_iterations: 100,
                max_attempts: 1,
                ..IkOptions::default()
            },
        );
        Ok(SimplerController {
            target: model.fk(&q)?,
            finger: model.config.gripper.open_units,
            model,
            ik,
            q,
        })
    }

    /// The arm joints now.
    pub fn q(&self) -> &[f64] {
        &self.q
    }

    /// The controller's target pose, robot-base frame.
    pub fn target(&self) -> &Isometry3<f64> {
        &self.target
    }

    /// The finger joint target (m).
    pub fn finger(&self) -> f64 {
        self.finger
    }

    /// The gripper opening (0 closed .. 1 open) a finger target stands for.
    pub(crate) fn finger_to_opening(&self, finger: f64) -> f64 {
        let g = &self.model.config.gripper;
        g.opening_for_width(g.width_for_units(finger))
    }

    /// The joint target and finger target after `action`; a malformed action holds.
    pub fn apply(&mut self, mode: ControlMode, a: &[f64]) -> Result<(), String> {
        if a.len() != mode.action_len() || a.iter().any(|v| !v.is_finite()) {
            return Err(format!(
                "action {a:?} is not {} finite numbers for {}",
                mode.action_len(),
                mode.name()
            ));
        }
        match mode {
            ControlMode::DeltaEe => {
                let delta = EeDelta::from_slice(&a[..6]).map_err(|e| e.to_string())?;
                let current = self.model.fk(&self.q).map_err(|e| e.to_string())?;
                self.target = apply_delta(
                    &delta,
                    &self.target,
                    &Point3::from(current.translation.vector),
                );
                // As SimplerEnv: IK from the current joints; where it fails the arm stays.
                if let Ok(sol) = self.ik.solve(&self.target, &self.q) {
                    self.q = sol.q;
                }
                let (lo, hi) = GRIPPER_ACTION_RANGE;
                self.finger = lo + (a[6].clamp(-1.0, 1.0) + 1.0) / 2.0 * (hi - lo);
            }
            ControlMode::JointPos => {
                let limits = self.model.joint_limits();
                self.q = a[..6]
                    .iter()
                    .zip(limits)
                    .map(|(v, l)| v.clamp(l.lower, l.upper))
                    .collect();
                self.target = self.model.fk(&self.q).map_err(|e| e.to_string())?;
                self.finger = a[6];
            }
        }
        Ok(())
    }
}

/// The labels of `frame` from the simulator, with the episode's roles (`None` when the frame is
/// not the simulator's last capture).
pub fn labels_for(
    prepared: &super::episode::PreparedEpisode,
    episode: &Episode,
    frame: &Frame,
) -> Option<Labels> {
    let seg = prepared.world.labels_of(frame)?;
    let target = match &episode.target {
        Target::Object { name, .. } => Some(name.as_str()),
        _ => None,
    };
    let objects = prepared
        .truth
        .objects
        .iter()
        .map(|o| LabelledObject {
            id: o.instance as u32,
            name: o.aliases.first().cloned().unwrap_or_else(|| o.name.clone()),
            role: if o.name == episode.object {
                ObjectRole::Source
            } else if Some(o.name.as_str()) == target {
                ObjectRole::Target
            } else {
                ObjectRole::Other
            },
        })
        .collect();
    Some(Labels {
        width: seg.width,
        height: seg.height,
        ids: seg.instance.iter().map(|i| *i as u32).collect(),
        objects,
    })
}

/// Runs `episode` on our simulator with `policy` choosing every action, then judges the world as
/// `eval sim` does (after letting it settle).
pub(crate) async fn run_remote_episode<P: RemotePolicy>(
    episode: &Episode,
    options: &RemoteOptions,
    policy: &mut P,
) -> Result<RemoteEpisode, EpisodeError> {
    run_remote_episode_tapped(episode, options, policy, None).await
}

/// [`run_remote_episode`] with the frames a recording keeps handed to `tap`.
pub(crate) async fn run_remote_episode_tapped<P: RemotePolicy>(
    episode: &Episode,
    options: &RemoteOptions,
    policy: &mut P,
    mut tap: Option<FrameTap<'_>>,
) -> Result<RemoteEpisode, EpisodeError> {
    let setup = |e: &dyn std::fmt::Display| EpisodeError::Setup(e.to_string());
    let prepared = prepare_episode(episode)?;
    let model = prepared.model.clone();
    let home = model.home().to_vec();
    let mut arm =
        SimArm::new(prepared.world.clone(), model.clone(), home.clone()).map_err(|e| setup(&e))?;
    let mut camera = SimCamera::new(prepared.world.clone(), options.episode.render.clone());
    let gripper = model.config.gripper;
    let mut ctl = SimplerController::new(model.clone(), home).map_err(|e| setup(&e))?;
    let start = EpisodeStart {
        task: episode.task.clone(),
        instruction: episode.instruction.clone(),
        episode_id: episode.seed,
        control_mode: options.control_mode,
        control_freq: options.control_freq,
        max_steps: options.max_steps,
    };
    let link = |e: RemoteError| EpisodeError::Setup(e.to_string());
    policy.reset(&start).await.map_err(link)?;
    let dt = 1.0 / options.control_freq;
    if let Some(t) = tap.as_mut() {
        (t.on_frame)(&prepared.world.lock(), &ctl.q);
    }
    let (mut status, mut policy_detail) = (PolicyStatus::Moving, String::new());
    let mut steps = 0;
    while steps < options.max_steps {
        let frame = camera.capture().map_err(|e| setup(&e))?;
        let labels = if options.send_labels {
            labels_for(&prepared, episode, &frame)
        } else {
            None
        };
        let opening = prepared.world.lock().gripper_opening();
        let finger = gripper.units_for_width(
            gripper.closed_width + opening * (gripper.open_width - gripper.closed_width),
        );
        let mut qpos = ctl.q.clone();
        qpos.extend([finger, finger]);
        let base_from_tcp = model.fk(&ctl.q).map_err(|e| setup(&e))?;
        // Our simulator's world frame is the robot base.
        let camera_from_world = frame.base_from_camera.inverse();
        let observation = Observation {
            step: steps,
            frame,
            camera_from_world,
            world_from_base: Isometry3::identity(),
            world_from_tcp: base_from_tcp,
            qpos,
            base_from_target: ctl.target,
            labels,
        };
        let action = policy.act(&observation).await.map_err(link)?;
        status = action.status;
        policy_detail = action.detail.clone();
        if action.step != steps {
            return Err(setup(&format!(
                "the policy answered step {} to observation {steps}",
                action.step
            )));
        }
        ctl.apply(options.control_mode, &action.values)
            .map_err(|e| setup(&e))?;
        let opening = ctl.finger_to_opening(ctl.finger);
        match tap.as_mut() {
            None => {
                arm.step(dt, &ctl.q, opening);
            }
            Some(t) => {
                let from = arm.reading().q;
                let parts = t.per_step.max(1);
                for i in 1..=parts {
                    let f = i as f64 / parts as f64;
                    let qi: Vec<f64> = from
                        .iter()
                        .zip(&ctl.q)
                        .map(|(a, b)| a + f * (b - a))
                        .collect();
                    let r = arm.step(dt / parts as f64, &qi, opening);
                    (t.on_frame)(&prepared.world.lock(), &r.q);
                }
            }
        }
        steps += 1;
        if action.terminate {
            break;
        }
    }
    let (success, detail, sim_time_s) = {
        let mut w = prepared.world.lock();
        w.settle(options.episode.settle_s);
        let j = judge(&mut w, episode);
        (j.success, j.detail, w.time())
    };
    policy.end(success, steps).await.map_err(link)?;
    Ok(RemoteEpisode {
        success,
        detail,
        steps,
        policy_status: status,
        policy_detail,
        sim_time_s,
    })
}

/// Where `eval bridge --dataset` keeps its episodes, and who hears how each went in.
pub struct SuiteDataset<'a> {
    /// The open dataset.
    pub recorder: &'a mut DatasetRecorder,
    /// `pointact/branch` of every episode: `p` or `v` for our own server, `remote` for another.
    pub branch: String,
    /// Told how each episode went into the dataset (an error stops the caller's run).
    pub on_kept: &'a mut (dyn FnMut(&Result<Kept, DatasetError>) + Send),
}

/// [`run_remote_episode`] over every task of `suite` and `seeds`, one policy per episode from
/// `connect` (the bridge opens one connection per episode); the same report as `eval sim`.
pub async fn run_remote_suite<P, F, C>(
    suite: Suite,
    seeds: &[u64],
    options: &RemoteOptions,
    mut connect: C,
    stop: &AtomicBool,
    mut dataset: Option<SuiteDataset<'_>>,
    progress: &mut (dyn FnMut(usize, usize, &EpisodeRecord) + Send),
) -> EvalReport
where
    P: RemotePolicy,
    F: Future<Output = Result<P, RemoteError>>,
    C: FnMut() -> F,
{
    let tasks = suite.tasks();
    let total = tasks.len() * seeds.len();
    let mut episodes = Vec::with_capacity(total);
    let mut interrupted = false;
    'tasks: for spec in &tasks {
        for &seed in seeds {
            if stop.load(Ordering::Relaxed) {
                interrupted = true;
                break 'tasks;
            }
            let task = spec.full_id();
            let outcome = match spec.instantiate(seed) {
                Err(e) => Err(e.to_string()),
                Ok(ep) => match connect().await {
                    Err(e) => Err(e.to_string()),
                    Ok(mut policy) => match dataset.as_mut() {
                        None => run_remote_episode(&ep, options, &mut policy)
                            .await
                            .map_err(|e| e.to_string()),
                        Some(d) => d
                            .recorder
                            .run_remote_episode(&ep, seed, options, &d.branch, &mut policy)
                            .await
                            .map(|(r, kept)| {
                                (d.on_kept)(&kept);
                                r
                            })
                            .map_err(|e| e.to_string()),
                    },
                },
            };
            let record = match outcome {
                Ok(r) => EpisodeRecord {
                    task,
                    seed,
                    success: r.success,
                    executed: r.policy_status == PolicyStatus::Done,
                    detail: if r.policy_status == PolicyStatus::Failed {
                        format!("{} (policy: {})", r.detail, r.policy_detail)
                    } else {
                        r.detail
                    },
                    sim_time_s: r.sim_time_s,
                    // The bridge's episodes report no step count or camera verdict.
                    steps_run: 0,
                    verified: None,
                    camera: String::new(),
                },
                Err(detail) => EpisodeRecord {
                    task,
                    seed,
                    success: false,
                    executed: false,
                    detail,
                    sim_time_s: 0.0,
                    steps_run: 0,
                    verified: None,
                    camera: String::new(),
                },
            };
            episodes.push(record);
            progress(episodes.len(), total, episodes.last().expect("just pushed"));
        }
    }
    EvalReport::new(suite, &options.episode, seeds, episodes, interrupted)
}
