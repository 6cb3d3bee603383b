//! What a policy and its evaluator exchange, SimplerEnv style: the evaluator owns the world and
//! sends an observation each control step; the policy answers with an action for the arm's
//! controller. This is the contract between the bridge server (the policy) and any evaluator
//! (SimplerEnv through `sim/simplerenv/run.py`, or the built-in simulator through [`super::client`]
//! and `runner::remote`), written once as plain data so both ends share it. The observations carry
//! what SimplerEnv's WidowX interface gives a policy: RGB, z-depth, intrinsics, a world→camera
//! extrinsic, the base and TCP poses, `qpos` (6 arm joints + 2 finger joints) and the controller's
//! target pose.

use k::nalgebra::Isometry3;

use crate::camera::Frame;

/// SimplerEnv's control mode names (interface strings).
pub(crate) const DELTA_EE_MODE: &str = "arm_pd_ee_target_delta_pose_align2_gripper_pd_joint_pos";
pub(crate) const JOINT_POS_MODE: &str = "arm_pd_joint_pos_gripper_pd_joint_pos";

/// Finger joint targets the stock gripper controller maps `[-1, 1]` onto (m; +1 = open).
pub(crate) const GRIPPER_ACTION_RANGE: (f64, f64) = (0.014, 0.038);

/// How actions drive the arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlMode {
    /// 7-D `[dx, dy, dz, rotvec, gripper]`: SimplerEnv's stock WidowX controller.
    DeltaEe,
    /// 8-D `[6 joint targets (rad), 2 finger targets (m)]`: the joint-position controller SoFar
    /// and the FSD / Embodied-R1 evaluations added to SimplerEnv.
    JointPos,
}

impl ControlMode {
    /// The interface string SimplerEnv uses for this mode.
    pub fn name(self) -> &'static str {
        match self {
            ControlMode::DeltaEe => DELTA_EE_MODE,
            ControlMode::JointPos => JOINT_POS_MODE,
        }
    }

    /// Parses SimplerEnv's mode name, or the short aliases `delta`/`delta_ee` and
    /// `joint`/`joint_pos`; `None` for anything else.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            DELTA_EE_MODE | "delta" | "delta_ee" => Some(ControlMode::DeltaEe),
            JOINT_POS_MODE | "joint" | "joint_pos" => Some(ControlMode::JointPos),
            _ => None,
        }
    }

    /// Entries in one action.
    pub(crate) fn action_len(self) -> usize {
        match self {
            ControlMode::DeltaEe => 7,
            ControlMode::JointPos => 8,
        }
    }
}

/// What the evaluator says when an episode begins.
#[derive(Debug, Clone, PartialEq)]
pub struct EpisodeStart {
    /// The evaluator's task name (`widowx_carrot_on_plate`, or our `bridge/carrot_on_plate`).
    pub task: String,
    /// The language instruction the policy is given.
    pub instruction: String,
    /// The evaluator's id of this episode (`ready` repeats it).
    pub episode_id: u64,
    /// How the policy's actions will drive the arm.
    pub control_mode: ControlMode,
    /// Control steps per second (SimplerEnv's Bridge tasks: 5).
    pub control_freq: f64,
    /// The evaluator's step budget (official SimplerEnv: 60 or 120).
    pub max_steps: u64,
}

/// An object in the evaluator's segmentation, and its part in the task.
#[derive(Debug, Clone, PartialEq)]
pub struct LabelledObject {
    /// Its id in [`Labels::ids`].
    pub id: u32,
    /// A phrase that names it ("carrot", "green block").
    pub name: String,
    /// Its part in the task.
    pub role: ObjectRole,
}

/// The part an object plays in the task, as the evaluator labels it (`source`, `target`, `other`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectRole {
    /// The object the task moves.
    Source,
    /// Where it goes (the support or container).
    Target,
    /// Anything else in the scene (distractors, the table).
    Other,
}

impl ObjectRole {
    pub(crate) fn name(self) -> &'static str {
        match self {
            ObjectRole::Source => "source",
            ObjectRole::Target => "target",
            ObjectRole::Other => "other",
        }
    }

    pub(crate) fn from_name(name: &str) -> Option<Self> {
        match name {
            "source" => Some(ObjectRole::Source),
            "target" => Some(ObjectRole::Target),
            "other" => Some(ObjectRole::Other),
            _ => None,
        }
    }
}

/// Ground-truth segmentation an evaluator may send (SimplerEnv's actor ids): only an oracle
/// pointer reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct Labels {
    /// Image width (px), the same as the frame's.
    pub width: usize,
    /// Image height (px), the same as the frame's.
    pub height: usize,
    /// Object id per pixel, row-major.
    pub ids: Vec<u32>,
    /// The objects whose ids appear in `ids`, with their names and roles.
    pub objects: Vec<LabelledObject>,
}

/// One control step's observation. The frame's `base_from_camera` is derived from the extrinsic
/// and the base pose (`inv(camera_from_world · world_from_base)`), as every modular SimplerEnv
/// baseline does it.
#[derive(Debug, Clone)]
pub struct Observation {
    /// The evaluator's control step this observation belongs to; the action answers it.
    pub step: u64,
    /// RGB, z-depth (m; 0 = none) and intrinsics of the evaluator's camera.
    pub frame: Frame,
    /// `extrinsic_cv`: world → camera, OpenCV axes.
    pub camera_from_world: Isometry3<f64>,
    /// `base_pose`: the robot base in the world.
    pub world_from_base: Isometry3<f64>,
    /// `tcp_pose`: the TCP (the model's tip link) in the world.
    pub world_from_tcp: Isometry3<f64>,
    /// 6 arm joints then 2 finger joints (m).
    pub qpos: Vec<f64>,
    /// The arm controller's current target pose, robot-base frame.
    pub base_from_target: Isometry3<f64>,
    /// Ground-truth segmentation, when the evaluator sends one (`segmentation` and `objects`).
    pub labels: Option<Labels>,
}

impl Observation {
    /// The TCP in the robot-base frame.
    pub(crate) fn base_from_tcp(&self) -> Isometry3<f64> {
        self.world_from_base.inverse() * self.world_from_tcp
    }
}

/// Where the policy stands, sent with every action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyStatus {
    /// Looking and planning (the first observation), or moving through the plan.
    Moving,
    /// The plan ran to its end; hold actions follow.
    Done,
    /// The plan failed or was refused; the arm is held where it is.
    Failed,
}

impl PolicyStatus {
    pub(crate) fn name(self) -> &'static str {
        match self {
            PolicyStatus::Moving => "moving",
            PolicyStatus::Done => "done",
            PolicyStatus::Failed => "failed",
        }
    }

    pub(crate) fn from_name(name: &str) -> Option<Self> {
        match name {
            "moving" => Some(PolicyStatus::Moving),
            "done" => Some(PolicyStatus::Done),
            "failed" => Some(PolicyStatus::Failed),
            _ => None,
        }
    }
}

/// The policy's answer to one observation.
#[derive(Debug, Clone, PartialEq)]
pub struct Action {
    /// The observation's step it answers.
    pub step: u64,
    /// [`ControlMode::action_len`] values.
    pub values: Vec<f64>,
    /// The policy has nothing more to do (done or failed); further actions hold the arm.
    pub terminate: bool,
    /// Where the policy stands after this step.
    pub status: PolicyStatus,
    /// A human-readable note on the status (why it failed, …); may be empty.
    pub detail: String,
}

/// Why a remote policy could not answer.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// The link to the policy failed (connect, send, receive, closed).
    #[error("policy link: {0}")]
    Link(String),
    /// The policy answered something this side cannot use, or an error message.
    #[error("policy answered: {0}")]
    Policy(String),
}

/// A policy at the other end of a link (the bridge client, in `bridge`). One episode per value:
/// `reset`, then `act` once per control step, then `end`.
#[allow(async_fn_in_trait)]
pub trait RemotePolicy {
    /// Starts an episode; the policy must accept it before the first `act`.
    async fn reset(&mut self, start: &EpisodeStart) -> Result<(), RemoteError>;
    /// Sends one control step's observation and returns the policy's action for it.
    async fn act(&mut self, observation: &Observation) -> Result<Action, RemoteError>;
    /// Tells the policy the episode is over, with the evaluator's verdict and the steps run.
    async fn end(&mut self, success: bool, steps: u64) -> Result<(), RemoteError>;
}
