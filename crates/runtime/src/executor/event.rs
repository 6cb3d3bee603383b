//! What happens while a task runs, in order: the executor's own stages (table, answers, plan,
//! obstacles) and the runner's (frame, robot, gate, steps). The CLI prints them and `viz` logs
//! them; neither needs to know who emitted which.

use std::sync::Arc;

use super::plan::Plan;
use pointact_core::camera::Frame;
use pointact_core::kinematics::RobotModel;
use pointact_pointing::{Ability, Pointing};
use pointact_robot::JointState;

#[derive(Debug)]
pub enum Event<'a> {
    Instruction(&'a str),
    /// The frame everything below was computed from.
    Captured(&'a Frame),
    /// The robot the task runs on and its state before anything moves (for visualisation).
    Robot {
        model: &'a Arc<RobotModel>,
        state: &'a JointState,
    },
    Asked {
        ability: Ability,
        query: &'a str,
        pointing: &'a Pointing,
    },
    TableHeight(f64),
    /// An answered point moved by a depth check (object-aware points).
    Corrected(&'a super::correct::Correction),
    /// Occupied 1 cm cells of the depth cloud the free-space moves avoid.
    Obstacles {
        count: usize,
    },
    Planned(&'a Plan),
    Checked {
        steps: usize,
    },
    DryRun,
    Step {
        index: usize,
        label: &'a str,
    },
    GraspHeld {
        width: f64,
    },
    /// The closed loop starts over: why (the grasp closed on nothing), and which attempt comes.
    Retry {
        why: &'a str,
        attempt: usize,
    },
    /// The camera's look after the plan ran: did the object end where the plan meant it to
    /// (`executor::verify`)?
    Verified(&'a Verdict),
    /// What the arm did while step `index` ran: the driver's recorded states, or one state read
    /// after the step when the driver records none. Sent whether the step succeeded or not.
    Moved {
        index: usize,
        states: &'a [JointState],
    },
}

/// The camera's verdict, with a sentence saying why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub verified: bool,
    pub detail: String,
}

impl Verdict {
    pub fn line(&self) -> String {
        let head = if self.verified {
            "verified by camera"
        } else {
            "not verified"
        };
        format!("{head}: {}", self.detail)
    }
}
