//! One evaluator episode on the server: the task loop (`pointact_runtime::task::run_task`) with the
//! evaluator as the world.
//!
//! The evaluator's observations are the camera ([`BridgeCamera`]: the frame of the observation now
//! waiting for an answer) and the robot's state ([`BridgeRobot`]); the robot's commands become the
//! answers. Every motion still goes through the runner and its safety gate first: `execute`
//! receives a `CheckedTrajectory` and samples it at the evaluator's control rate, turning each
//! sample into the stock controller's delta (`geometry::ee_delta::delta_for`, tracking the planned
//! absolute pose from the controller's own target) or into joint targets. So a bridge episode is a
//! `run` on a robot that happens to be a simulator elsewhere, and the same bad-input rules hold:
//! a failed plan, a refused step or a lost connection ends in a held arm and a stated reason.
//!
//! The episode is a task of the server's runtime ([`spawn_episode`]) that talks to its connection's
//! task through two channels, one observation in, one action out: an episode waiting for the
//! evaluator holds no thread. Its steps are computed off the runtime's workers ([`OffWorkers`]):
//! pointing and planning take tens of milliseconds with the oracle and seconds with a model on the
//! CPU, and must not stall the connections that share the worker, so each poll of the episode runs
//! under `tokio::task::block_in_place`, which hands the worker's other tasks to another thread for
//! as long as the poll computes.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use k::nalgebra::Point3;
use tokio::sync::mpsc;

use super::remote::{
    Action, ControlMode, EpisodeStart, Observation, PolicyStatus, GRIPPER_ACTION_RANGE,
};
use crate::camera::{Camera, CameraError, Frame};
use crate::executor::{Branch, Event};
use crate::geometry::ee_delta::{delta_for, EeDelta};
use crate::kinematics::{pose_error, RobotModel};
use crate::pointing::{Pointer, PointerError};
use crate::robot::{Robot, RobotError};
use crate::safety::{CheckedGripper, CheckedTrajectory, SafetyConfig};
use pointact_runtime::task::run_task;

/// Where each session's pointer comes from: the server is handed one (the CLI's choice of the
/// oracle over the evaluator's labels, or a place in one shared model's queue), so the bridge
/// knows no backend and reads no simulator.
pub trait SessionPointers: Send + Sync {
    /// The backend's name, for the server's metadata and logs.
    fn name(&self) -> &str;
    /// The pointer of the episode `episode_id` of `task`, whose first observation is `first`.
    fn for_session(
        &self,
        first: &Observation,
        task: &str,
        episode_id: u64,
    ) -> Result<Box<dyn Pointer + Send>, PointerError>;
}

/// What every session of a server shares.
#[derive(Clone)]
pub struct SessionConfig {
    /// Hands each episode its pointer; its name goes into the server's metadata.
    pub pointer: Arc<dyn SessionPointers>,
    /// The evaluator's arm (SimplerEnv's WidowX: `widowx250`, whose tip link is SimplerEnv's
    /// `ee_gripper_link`).
    pub model: Arc<RobotModel>,
    /// Which plan the episodes execute (affordance points or a visual trace); default affordance.
    pub branch: Branch,
    /// The gate's settings; `table_z` is in the robot-base frame.
    pub safety: SafetyConfig,
    /// Control steps a gripper command may take to settle, and an arm to reach the end of a motion.
    pub settle_steps: u32,
    /// How close (m, rad) the measured TCP must come to the end of each motion.
    pub reach_tolerance: (f64, f64),
}

impl SessionConfig {
    /// Settings for `model` with the affordance branch, the default gate, 10 settle steps and a
    /// reach tolerance of 1 cm / 0.1 rad.
    pub fn new(pointer: impl SessionPointers + 'static, model: Arc<RobotModel>) -> Self {
        SessionConfig {
            pointer: Arc::new(pointer),
            model,
            branch: Branch::Affordance,
            safety: SafetyConfig::default(),
            settle_steps: 10,
            reach_tolerance: (0.01, 0.1),
        }
    }
}

/// How an episode ended, for the last answers and the `ended` message.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct EpisodeEnd {
    pub status: PolicyStatus,
    pub detail: String,
}

/// The connection's ends of an episode's channels.
pub(crate) struct EpisodeLink {
    pub observations: mpsc::Sender<Arc<Observation>>,
    pub actions: mpsc::Receiver<Action>,
}

/// Starts `start`'s episode as a task of the current runtime; it waits for the first observation.
/// The handle yields how it ended.
pub(crate) fn spawn_episode(
    start: EpisodeStart,
    config: SessionConfig,
) -> (EpisodeLink, tokio::task::JoinHandle<EpisodeEnd>) {
    let (obs_tx, obs_rx) = mpsc::channel(1);
    let (act_tx, act_rx) = mpsc::channel(1);
    let join = tokio::spawn(OffWorkers(Box::pin(run_episode(
        start, config, obs_rx, act_tx,
    ))));
    (
        EpisodeLink {
            observations: obs_tx,
            actions: act_rx,
        },
        join,
    )
}

async fn run_episode(
    start: EpisodeStart,
    config: SessionConfig,
    mut observations: mpsc::Receiver<Arc<Observation>>,
    actions: mpsc::Sender<Action>,
) -> EpisodeEnd {
    let failed = |detail: String| EpisodeEnd {
        status: PolicyStatus::Failed,
        detail,
    };
    let Some(first) = observations.recv().await else {
        return failed("the evaluator left before the first observation".into());
    };
    let mut pointer = match config
        .pointer
        .for_session(&first, &start.task, start.episode_id)
    {
        Ok(p) => p,
        Err(e) => return failed(format!("pointer: {e}")),
    };
    let current = Arc::new(Mutex::new(first));
    let model = config.model.clone();
    let open = model.config.gripper.open_units;
    let mut robot = BridgeRobot {
        model: model.clone(),
        mode: start.control_mode,
        dt: 1.0 / start.control_freq,
        current: current.clone(),
        observations,
        actions,
        finger: open,
        settle_steps: config.settle_steps,
        reach_tolerance: config.reach_tolerance,
    };
    let mut camera = BridgeCamera { current };
    let mut on_event = |e: Event<'_>| {
        if let Event::Step { index, label } = e {
            tracing::debug!(task = %start.task, episode = start.episode_id, index, label, "step");
        }
    };
    match run_task(
        &mut robot,
        &mut camera,
        &mut pointer,
        &start.instruction,
        config.branch,
        config.safety.clone(),
        &mut |_| true,
        &mut on_event,
    )
    .await
    {
        Ok(o) => EpisodeEnd {
            status: PolicyStatus::Done,
            detail: format!("plan of {} steps executed", o.plan.steps.len()),
        },
        Err(e) => failed(e.to_string()),
    }
}

/// A future polled off the runtime's workers (see the module's doc): on a multi-thread runtime
/// each poll runs under `block_in_place`; on a current-thread runtime (where that is not allowed,
/// and nothing else would run meanwhile anyway) it is polled directly.
struct OffWorkers<F>(Pin<Box<F>>);

impl<F: Future> Future for OffWorkers<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let inner = self.0.as_mut();
        let multi_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if multi_thread {
            tokio::task::block_in_place(|| inner.poll(cx))
        } else {
            inner.poll(cx)
        }
    }
}

/// The frame of the observation waiting for an answer.
struct BridgeCamera {
    current: Arc<Mutex<Arc<Observation>>>,
}

impl Camera for BridgeCamera {
    fn capture(&mut self) -> Result<Frame, CameraError> {
        let frame = self
            .current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .frame
            .clone();
        if frame.depth.data.is_empty() {
            // The server keeps the images of an episode's first observation only
            // (`protocol::Images::CheckOnly` after it): a capture later must not plan on nothing.
            return Err(CameraError::Device(
                "the bridge kept no images of this observation (only the first one's)".into(),
            ));
        }
        Ok(frame)
    }
}

/// The evaluator's arm: each command is answered to the waiting observation, and the next
/// observation is the arm's new state.
struct BridgeRobot {
    model: Arc<RobotModel>,
    mode: ControlMode,
    /// Seconds per control step.
    dt: f64,
    current: Arc<Mutex<Arc<Observation>>>,
    observations: mpsc::Receiver<Arc<Observation>>,
    actions: mpsc::Sender<Action>,
    /// The finger target now commanded (joint units, m).
    finger: f64,
    settle_steps: u32,
    reach_tolerance: (f64, f64),
}

impl BridgeRobot {
    fn now(&self) -> Arc<Observation> {
        self.current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The gripper entry of a delta action for the commanded finger target.
    fn gripper_action(&self) -> f64 {
        let (lo, hi) = GRIPPER_ACTION_RANGE;
        (2.0 * (self.finger - lo) / (hi - lo) - 1.0).clamp(-1.0, 1.0)
    }

    /// The action that puts the arm at joints `q` (its tip pose, in delta mode).
    fn action_towards(&self, q: &[f64], now: &Observation) -> Result<Vec<f64>, RobotError> {
        Ok(match self.mode {
            ControlMode::DeltaEe => {
                let desired = self
                    .model
                    .fk(q)
                    .map_err(|e| RobotError::Sim(e.to_string()))?;
                let tcp = now.base_from_tcp().translation.vector;
                let d = delta_for(&desired, &now.base_from_target, &Point3::from(tcp));
                let mut a = d.to_array().to_vec();
                a.push(self.gripper_action());
                a
            }
            ControlMode::JointPos => {
                let mut a = q.to_vec();
                a.extend([self.finger, self.finger]);
                a
            }
        })
    }

    /// The action that holds the arm at its controller target.
    fn hold_action(&self, now: &Observation) -> Vec<f64> {
        match self.mode {
            ControlMode::DeltaEe => {
                let mut a = EeDelta::ZERO.to_array().to_vec();
                a.push(self.gripper_action());
                a
            }
            ControlMode::JointPos => {
                let n = self.model.joint_limits().len();
                let mut a = now.qpos[..n].to_vec();
                a.extend([self.finger, self.finger]);
                a
            }
        }
    }

    /// Answers the waiting observation with `values` and waits for the next one.
    async fn exchange(&mut self, values: Vec<f64>) -> Result<Arc<Observation>, RobotError> {
        let step = self.now().step;
        let lost = || {
            RobotError::Disconnected(
                "the evaluator stopped the episode (episode_end before the plan finished, or the connection closed)"
                    .into(),
            )
        };
        self.actions
            .send(Action {
                step,
                values,
                terminate: false,
                status: PolicyStatus::Moving,
                detail: String::new(),
            })
            .await
            .map_err(|_| lost())?;
        let next = self.observations.recv().await.ok_or_else(lost)?;
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = next.clone();
        Ok(next)
    }

    fn fingers(&self, o: &Observation) -> f64 {
        let n = self.model.joint_limits().len();
        (o.qpos[n] + o.qpos[n + 1]) / 2.0
    }
}

impl Robot for BridgeRobot {
    fn model(&self) -> &Arc<RobotModel> {
        &self.model
    }

    async fn joint_positions(&mut self) -> Result<Vec<f64>, RobotError> {
        let n = self.model.joint_limits().len();
        Ok(self.now().qpos[..n].to_vec())
    }

    async fn gripper_width(&mut self) -> Result<f64, RobotError> {
        let units = self.fingers(&self.now());
        Ok(self.model.config.gripper.width_for_units(units))
    }

    async fn execute(&mut self, trajectory: &CheckedTrajectory) -> Result<(), RobotError> {
        let traj = trajectory.trajectory();
        let n = (traj.duration() / self.dt).ceil().max(1.0) as usize;
        for i in 1..=n {
            let q = traj.sample((i as f64 * self.dt).min(traj.duration()));
            let now = self.now();
            let a = self.action_towards(&q, &now)?;
            self.exchange(a).await?;
        }
        // The evaluator's controller lags (PD drive, IK): give it a few steps to arrive, holding
        // the end pose, and insist that it does before the next motion starts from there.
        let end = traj.end().to_vec();
        let want = self
            .model
            .fk(&end)
            .map_err(|e| RobotError::Sim(e.to_string()))?;
        let (pos_tol, rot_tol) = self.reach_tolerance;
        let mut now = self.now();
        for _ in 0..self.settle_steps {
            let (pe, re) = pose_error(&now.base_from_tcp(), &want);
            if pe <= pos_tol && re <= rot_tol {
                return Ok(());
            }
            let a = self.action_towards(&end, &now)?;
            now = self.exchange(a).await?;
        }
        let (pe, re) = pose_error(&now.base_from_tcp(), &want);
        if pe <= pos_tol && re <= rot_tol {
            return Ok(());
        }
        Err(RobotError::Stopped(format!(
            "the evaluator's arm stands {:.1} mm and {:.1}° from the end of the planned motion \
             after {} extra steps: its controller did not follow (IK failure or a blocked arm)",
            pe * 1e3,
            re.to_degrees(),
            self.settle_steps
        )))
    }

    async fn set_gripper(&mut self, command: CheckedGripper) -> Result<(), RobotError> {
        self.finger = self.model.config.gripper.units_for_width(command.width());
        let mut last = self.fingers(&self.now());
        // Already there (the gripper starts open): no control step is spent on it, since the
        // evaluator's step budget is short (SimplerEnv: 60 steps).
        if (last - self.finger).abs() < 5e-4 {
            return Ok(());
        }
        // At least two steps (the command must reach the fingers), then until they stop.
        for i in 0..self.settle_steps.max(2) {
            let now = self.now();
            let a = self.hold_action(&now);
            let next = self.exchange(a).await?;
            let f = self.fingers(&next);
            if i >= 1 && (f - last).abs() < 5e-4 {
                break;
            }
            last = f;
        }
        Ok(())
    }

    async fn stop(&mut self) -> Result<(), RobotError> {
        // Nothing to send: once the episode ends, the connection answers every observation with
        // a hold action.
        Ok(())
    }
}

/// The answer that holds the arm after the episode ended (or failed): no arm delta (the
/// controller keeps its target) or the last joint targets, and the gripper as last commanded.
/// Joint and finger targets are kept within their limits: an observation may stand a little past
/// them (see [`super::check::JOINT_SLACK_RAD`]), a hold never asks for that.
pub(crate) fn hold_after(
    mode: ControlMode,
    last: Option<&Action>,
    now: &Observation,
    model: &RobotModel,
) -> Vec<f64> {
    let limits = model.joint_limits();
    match mode {
        ControlMode::DeltaEe => {
            let g = last
                .and_then(|a| a.values.get(6).copied())
                .unwrap_or(1.0)
                .clamp(-1.0, 1.0);
            let mut a = EeDelta::ZERO.to_array().to_vec();
            a.push(g);
            a
        }
        ControlMode::JointPos => {
            let mut a = match last {
                Some(a) if a.values.len() == limits.len() + 2 => a.values.clone(),
                _ => now.qpos.clone(),
            };
            let (lo, hi) = super::check::finger_range(model);
            for (i, v) in a.iter_mut().enumerate() {
                *v = match limits.get(i) {
                    Some(l) => v.clamp(l.lower, l.upper),
                    None => v.clamp(lo, hi),
                };
            }
            a
        }
    }
}
