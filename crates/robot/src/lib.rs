//! pointact's robots behind one trait: the simulator, the xArm controller (`xarm::XarmRobot`), and the
//! WidowX 250 on its Dynamixel bus (`dynamixel`).
//!
//! The trait is async because real drivers wait on sockets and serial ports (tokio); compute stays
//! synchronous. A `Robot` only accepts motions that passed the `safety` gate (`CheckedTrajectory`,
//! `CheckedGripper`), so no code path can move a robot without the checks.

#![warn(missing_docs)]

pub mod dynamixel;
pub mod servo;
pub mod settings;
pub mod xarm;

use std::sync::Arc;

use pointact_core::kinematics::RobotModel;
use pointact_core::safety::{CheckedGripper, CheckedTrajectory};

/// Why a `Robot` call failed. Every driver maps its own faults onto these, so callers can react
/// the same way whichever robot is behind the trait.
#[derive(Debug, thiserror::Error)]
pub enum RobotError {
    /// The link to the robot (socket or serial port) failed or was closed; the text says which
    /// and why.
    #[error("connection to the robot lost: {0}")]
    Disconnected(String),
    /// The robot's controller reported an error or refused a command.
    #[error("robot controller error {code}: {detail}")]
    Controller {
        /// The controller's own error or warning number.
        code: i32,
        /// What the code means, and what the driver was doing when it came.
        detail: String,
    },
    /// The robot did not answer within the given time (s).
    #[error("robot did not answer within {0:.1} s")]
    Timeout(f64),
    /// The driver stopped the motion because it could not be completed as commanded (the arm
    /// ended off the trajectory, the controller left its motion state, ...); the text says why.
    #[error("robot stopped: {0}")]
    Stopped(String),
    /// The servo loop got no new setpoint for `silent_s` and stopped the arm.
    #[error("robot stopped: no new setpoint for {silent_s:.2} s (the trajectory feed stalled)")]
    Watchdog {
        /// How long the feed had been silent when the loop stopped (s).
        silent_s: f64,
    },
    /// A servo setpoint was not answered within the servo watchdog's period (a link that stalled
    /// or lost a frame, a controller that stopped answering); the arm was stopped.
    #[error(
        "robot stopped: a servo setpoint was not answered within {waited_s:.2} s (the servo \
         watchdog): the link stalled or the controller stopped answering"
    )]
    LinkStalled {
        /// How long the driver waited for the answer (s).
        waited_s: f64,
    },
    /// The simulator behind the simulated robot failed.
    #[error("simulator: {0}")]
    Sim(String),
    /// The controller sent bytes the driver cannot read (a malformed or unexpected frame); the
    /// driver drops the connection, since nothing after such a frame can be trusted.
    #[error("robot protocol error: {0}")]
    Protocol(String),
    /// The driver was given settings that cannot drive this robot (found before anything moved).
    #[error("robot driver settings: {0}")]
    Config(String),
    /// A fault on a Dynamixel bus (WidowX): a servo's hardware error naming its joint, a refused
    /// instruction, a malformed packet, a servo set up differently from `driver.toml`. Timeouts
    /// and a lost port are reported as `Timeout` and `Disconnected` like every driver's.
    #[error("dynamixel bus: {0}")]
    Dynamixel(dynamixel::DynamixelError),
}

/// One observed state of the arm: what was executed, as opposed to what was planned.
#[derive(Debug, Clone, PartialEq)]
pub struct JointState {
    /// The driver's clock (s): simulation time, or the controller report's stamp; `None` when the
    /// driver keeps no clock (the state was read once after a command).
    pub stamp_s: Option<f64>,
    /// Arm joint positions (rad), in `model().config.arm_joints` order.
    pub q: Vec<f64>,
    /// Distance between the fingers (m).
    pub gripper_width: f64,
}

/// What every driver offers. Implementations stop the arm before returning any error from a motion.
// The futures are awaited on the caller's task (no spawning), so they need not be `Send`.
#[allow(async_fn_in_trait)]
pub trait Robot {
    /// The kinematic model the driver was configured with.
    fn model(&self) -> &Arc<RobotModel>;
    /// Current arm joint positions (rad), in `model().config.arm_joints` order.
    async fn joint_positions(&mut self) -> Result<Vec<f64>, RobotError>;
    /// Current distance between the fingers (m).
    async fn gripper_width(&mut self) -> Result<f64, RobotError>;
    /// Follows a checked trajectory to its end.
    async fn execute(&mut self, trajectory: &CheckedTrajectory) -> Result<(), RobotError>;
    /// Moves the fingers to a checked width and waits until they stop (closing on an object stops
    /// early).
    async fn set_gripper(&mut self, command: CheckedGripper) -> Result<(), RobotError>;
    /// Stops all motion now.
    async fn stop(&mut self) -> Result<(), RobotError>;
    /// The states observed while the commands since the last call ran, oldest first, and forgets
    /// them. Drivers that receive a state stream (or step a simulation) record it so the executed
    /// motion can be shown over time; the default records nothing.
    fn take_states(&mut self) -> Vec<JointState> {
        Vec::new()
    }
}

/// A bus error as the `Robot` trait reports it: timeouts and a lost port keep their meaning.
impl From<dynamixel::DynamixelError> for RobotError {
    fn from(e: dynamixel::DynamixelError) -> Self {
        use dynamixel::DynamixelError;
        match e {
            DynamixelError::Timeout { timeout_s, .. } => RobotError::Timeout(timeout_s),
            DynamixelError::Io(e) => RobotError::Disconnected(format!("serial port: {e}")),
            other => RobotError::Dynamixel(other),
        }
    }
}

#[cfg(test)]
mod tests;
