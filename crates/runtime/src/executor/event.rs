//! What happens while a task runs, in order: the executor's own stages (table, answers, plan,
//! obstacles) and the runner's (frame, robot, gate, steps). The CLI prints them and `viz` logs
//! them; neither needs to know who emitted which.

use std::sync::Arc;

use super::plan::Plan;
use pointact_core::camera::Frame;
use pointact_core::kinematics::RobotModel;
use pointact_pointing::{Ability, Pointing};
use pointact_robot::JointState;

/// One thing that happened during a task, passed to the caller's `on_event` as it happens.
#[derive(Debug)]
pub enum Event<'a> {
    /// The instruction the task runs, sent once before anything else.
    Instruction(&'a str),
    /// The frame everything below was computed from.
    Captured(&'a Frame),
    /// The robot the task runs on and its state before anything moves (for visualisation).
    Robot {
        /// The robot's kinematic model.
        model: &'a Arc<RobotModel>,
        /// Joint positions and gripper width at the start of this attempt.
        state: &'a JointState,
    },
    /// The pointer was asked something and answered (planning, or the check after the plan ran).
    Asked {
        /// What kind of question (REG, RRG, OFG, VTG).
        ability: Ability,
        /// The query text sent to the pointer.
        query: &'a str,
        /// The parsed answer.
        pointing: &'a Pointing,
    },
    /// Height of the table top estimated from the depth cloud, base frame z, m.
    TableHeight(f64),
    /// An answered point moved by a depth check (object-aware points).
    Corrected(&'a super::correct::Correction),
    /// Occupied 1 cm cells of the depth cloud the free-space moves avoid.
    Obstacles {
        /// Number of occupied cells.
        count: usize,
    },
    /// The executor's plan, before the safety gate checks it.
    Planned(&'a Plan),
    /// Every step of the plan passed the safety gate.
    Checked {
        /// Number of checked steps.
        steps: usize,
    },
    /// The run is a dry run: the checked plan is not executed.
    DryRun,
    /// Step `index` of the plan starts executing.
    Step {
        /// Index into the plan's steps.
        index: usize,
        /// The step's label, for display.
        label: &'a str,
    },
    /// A gripper step that should close the fingers on the object did, and their width says they
    /// hold something.
    GraspHeld {
        /// Gripper width after closing, m.
        width: f64,
    },
    /// The closed loop starts over: why (the grasp closed on nothing), and which attempt comes.
    Retry {
        /// Why the previous attempt was abandoned, as a sentence.
        why: &'a str,
        /// Number of the attempt that comes next (counting from 1).
        attempt: usize,
    },
    /// The camera's look after the plan ran: did the object end where the plan meant it to
    /// (`executor::verify`)?
    Verified(&'a Verdict),
    /// What the arm did while step `index` ran: the driver's recorded states, or one state read
    /// after the step when the driver records none. Sent whether the step succeeded or not.
    Moved {
        /// Index into the plan's steps.
        index: usize,
        /// The states the arm went through, in order.
        states: &'a [JointState],
    },
}

/// The camera's verdict, with a sentence saying why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Whether the camera saw the object end where the plan meant it to.
    pub verified: bool,
    /// One sentence saying why, or what could not be checked.
    pub detail: String,
}

impl Verdict {
    /// The verdict as one printable line ("verified by camera: …" or "not verified: …").
    pub fn line(&self) -> String {
        let head = if self.verified {
            "verified by camera"
        } else {
            "not verified"
        };
        format!("{head}: {}", self.detail)
    }
}
