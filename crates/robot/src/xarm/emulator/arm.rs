//! The seam between the emulated controller and the arm it moves.
//!
//! The controller (`super::controller`) plans and times every motion and sends joint setpoints
//! each tick; an `EmulatedArm` says where the joints and fingers actually are. The default,
//! `KinematicArm`, follows the setpoints exactly. A simulator-backed arm (physics, contacts,
//! objects stopping the fingers) implements the same trait from outside `robot`: `robot` must
//! not import `sim` (`sim` is a layer above `robot`), so the simulator plugs in, not the reverse.

use std::sync::Arc;

use pointact_core::kinematics::RobotModel;

/// Where the arm is after a step.
#[derive(Debug, Clone, PartialEq)]
pub struct ArmReading {
    /// Joint positions (rad), one per arm joint of the model.
    pub q: Vec<f64>,
    /// Finger opening in [0, 1] (0 closed, 1 open).
    pub gripper_opening: f64,
    /// The fingers are held apart by an object (the gripper reports "object detected").
    pub gripper_blocked: bool,
}

/// An arm the emulated controller drives.
pub trait EmulatedArm: Send {
    /// The kinematic model: joint count and limits, FK and IK for the controller's planning.
    fn model(&self) -> &Arc<RobotModel>;
    /// Where the arm is now, without moving it (read once at power-on).
    fn reading(&self) -> ArmReading;
    /// Advances the arm by `dt` seconds towards joint setpoint `q` (rad) and finger opening
    /// `gripper_opening` (0 closed .. 1 open), and reports where it is.
    fn step(&mut self, dt: f64, q: &[f64], gripper_opening: f64) -> ArmReading;
}

/// An ideal arm: the joints are wherever the controller last put them, and nothing ever stops the
/// fingers. Enough to exercise a driver's protocol handling, timing and error paths.
pub struct KinematicArm {
    model: Arc<RobotModel>,
    q: Vec<f64>,
    opening: f64,
}

impl KinematicArm {
    /// Starts at `q` (rad) with the fingers open.
    pub fn new(model: Arc<RobotModel>, q: Vec<f64>) -> Self {
        KinematicArm {
            model,
            q,
            opening: 1.0,
        }
    }
}

impl EmulatedArm for KinematicArm {
    fn model(&self) -> &Arc<RobotModel> {
        &self.model
    }

    fn reading(&self) -> ArmReading {
        ArmReading {
            q: self.q.clone(),
            gripper_opening: self.opening,
            gripper_blocked: false,
        }
    }

    fn step(&mut self, _dt: f64, q: &[f64], gripper_opening: f64) -> ArmReading {
        if q.len() == self.q.len() {
            self.q.copy_from_slice(q);
        }
        self.opening = gripper_opening.clamp(0.0, 1.0);
        self.reading()
    }
}
