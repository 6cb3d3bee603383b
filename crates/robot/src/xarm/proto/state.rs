//! The controller's state, mode, error and warning codes, with their meanings.

use super::*;

/// GET_STATE values (UFACTORY `p08-system-state-11-20.md`; UFACTORY user manual §2.1.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum RobotState {
    /// Reported briefly when a motion starts; clients treat it like `Moving`.
    Starting = 0,
    /// A motion is being executed.
    Moving = 1,
    /// Standby: ready, nothing queued ("sleeping").
    Ready = 2,
    /// Motion paused (SET_STATE 3); the queue is kept and resumes with SET_STATE 0.
    Paused = 3,
    /// Stopped: the power-on state, after SET_STATE 4 and after an error; motion commands are
    /// discarded until SET_STATE 0.
    Stopped = 4,
    /// Configuration changed ("system reset"): after enabling, a mode switch or a TCP/load change;
    /// like `Stopped` until SET_STATE 0.
    ConfigChanged = 5,
    /// Slowing down to a stop (after SET_STATE 6).
    Decelerating = 6,
}

impl RobotState {
    pub(crate) fn from_u8(v: u8) -> Option<RobotState> {
        use RobotState::*;
        Some(match v {
            0 => Starting,
            1 => Moving,
            2 => Ready,
            3 => Paused,
            4 => Stopped,
            5 => ConfigChanged,
            6 => Decelerating,
            _ => return None,
        })
    }
    /// Whether motion commands would be discarded (status bit 0x10).
    pub(crate) fn not_ready(self) -> bool {
        matches!(self, RobotState::Stopped | RobotState::ConfigChanged)
    }
}

/// SET_STATE values.
pub(crate) mod set_state {
    /// Start / resume: ready for motion.
    pub(crate) const START: u8 = 0;
    pub(crate) const PAUSE: u8 = 3;
    /// Stop now and drop every queued command.
    pub(crate) const STOP: u8 = 4;
    pub(crate) const DECELERATE_STOP: u8 = 6;
}

/// SET_MODE values (UFACTORY `p08-system-state-11-20.md`,
/// `support_articles/faq/robot-state-and-mode-explanation.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Mode {
    /// Controller-planned moves (MOVE_LINE, MOVE_JOINT, ...), queued.
    Position = 0,
    /// Streamed targets (MOVE_SERVOJ, MOVE_SERVO_CART), newest applied, no queue.
    Servo = 1,
    /// Manual (teach) mode: the arm can be moved by hand, joint by joint.
    JointTeach = 2,
    /// Manual (teach) mode with the tool's orientation held.
    CartesianTeach = 3,
    /// Joint velocity control: commands set joint speeds instead of targets.
    JointVelocity = 4,
    /// Cartesian velocity control: commands set the TCP's linear and angular speed.
    CartesianVelocity = 5,
    /// Online joint planning: a new joint target replaces the one being moved to, re-planned at
    /// once.
    JointOnline = 6,
    /// Online Cartesian planning: a new TCP target replaces the one being moved to.
    CartesianOnline = 7,
}

impl Mode {
    pub(crate) fn from_u8(v: u8) -> Option<Mode> {
        use Mode::*;
        Some(match v {
            0 => Position,
            1 => Servo,
            2 => JointTeach,
            3 => CartesianTeach,
            4 => JointVelocity,
            5 => CartesianVelocity,
            6 => JointOnline,
            7 => CartesianOnline,
            _ => return None,
        })
    }
}

/// Controller error codes (GET_ERROR, report byte 89), from the SDK's `ControllerErrorCodeMap`
/// (`xarm/core/config/x_code.py`). An error stops the arm (state 4) until CLEAN_ERR and
/// SET_STATE 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ControllerError {
    /// 1: the emergency stop button on the control box is pushed in.
    EmergencyStop,
    /// 2: the control box's emergency IO is triggered.
    EmergencyIo,
    /// 3: the three-state switch's emergency stop is pressed.
    ThreeStateSwitchStop,
    /// 10: a servo motor error (no joint named); 11..=17: servo motor of joint 1..=7.
    Servo {
        /// Joint 1..=7 whose servo failed; `None` for code 10.
        joint: Option<u8>,
    },
    /// 18.
    ForceTorqueSensorComm,
    /// 19: end-effector (tool RS-485) communication.
    EndEffectorComm,
    /// 21: kinematic error — no joint solution along the path.
    Kinematic,
    /// 22.
    SelfCollision,
    /// 23: a joint angle would leave its limits.
    JointLimit,
    /// 24: a speed above the limit was asked for.
    SpeedLimit,
    /// 25.
    Planning,
    /// 26.
    LinuxRt,
    /// 27.
    CommandReply,
    /// 28.
    EndModuleComm,
    /// 30.
    FeedbackSpeed,
    /// 31: abnormal current, read as a collision.
    Collision,
    /// 32.
    CircleCalculation,
    /// 33.
    ControllerGpio,
    /// 34.
    RecordingTimeout,
    /// 35.
    SafetyBoundary,
    /// 36.
    TooManyDelayCommands,
    /// 37.
    ManualModeMotion,
    /// 38.
    AbnormalJointAngle,
    /// 39.
    PowerBoardComm,
    /// 40.
    TrajectorySolve,
    /// 41.
    FrictionFile,
    /// 42.
    CalibrationFile,
    /// 50..=53: six-axis force/torque sensor read, mode, zero, overload.
    ForceTorqueSensor(u8),
    /// 60: linear (TCP) speed above the limit in servo-joint mode.
    ServoJLinearSpeed,
    /// 110.
    BaseBoardComm,
    /// 111.
    ControlBox485,
    /// Any other code.
    Other(u8),
}

impl ControllerError {
    /// `None` for 0 (no error).
    pub(crate) fn from_code(code: u8) -> Option<ControllerError> {
        use ControllerError::*;
        Some(match code {
            0 => return None,
            1 => EmergencyStop,
            2 => EmergencyIo,
            3 => ThreeStateSwitchStop,
            10 => Servo { joint: None },
            11..=17 => Servo {
                joint: Some(code - 10),
            },
            18 => ForceTorqueSensorComm,
            19 => EndEffectorComm,
            21 => Kinematic,
            22 => SelfCollision,
            23 => JointLimit,
            24 => SpeedLimit,
            25 => Planning,
            26 => LinuxRt,
            27 => CommandReply,
            28 => EndModuleComm,
            30 => FeedbackSpeed,
            31 => Collision,
            32 => CircleCalculation,
            33 => ControllerGpio,
            34 => RecordingTimeout,
            35 => SafetyBoundary,
            36 => TooManyDelayCommands,
            37 => ManualModeMotion,
            38 => AbnormalJointAngle,
            39 => PowerBoardComm,
            40 => TrajectorySolve,
            41 => FrictionFile,
            42 => CalibrationFile,
            50..=53 => ForceTorqueSensor(code),
            60 => ServoJLinearSpeed,
            110 => BaseBoardComm,
            111 => ControlBox485,
            other => Other(other),
        })
    }

    pub(crate) fn code(self) -> u8 {
        use ControllerError::*;
        match self {
            EmergencyStop => 1,
            EmergencyIo => 2,
            ThreeStateSwitchStop => 3,
            Servo { joint: None } => 10,
            Servo { joint: Some(j) } => 10u8.saturating_add(j),
            ForceTorqueSensorComm => 18,
            EndEffectorComm => 19,
            Kinematic => 21,
            SelfCollision => 22,
            JointLimit => 23,
            SpeedLimit => 24,
            Planning => 25,
            LinuxRt => 26,
            CommandReply => 27,
            EndModuleComm => 28,
            FeedbackSpeed => 30,
            Collision => 31,
            CircleCalculation => 32,
            ControllerGpio => 33,
            RecordingTimeout => 34,
            SafetyBoundary => 35,
            TooManyDelayCommands => 36,
            ManualModeMotion => 37,
            AbnormalJointAngle => 38,
            PowerBoardComm => 39,
            TrajectorySolve => 40,
            FrictionFile => 41,
            CalibrationFile => 42,
            ForceTorqueSensor(c) => c,
            ServoJLinearSpeed => 60,
            BaseBoardComm => 110,
            ControlBox485 => 111,
            Other(c) => c,
        }
    }

    /// What the code means, in the SDK's words (shortened).
    pub(crate) fn meaning(self) -> &'static str {
        use ControllerError::*;
        match self {
            EmergencyStop => "the emergency stop button on the control box is pushed in",
            EmergencyIo => "the emergency IO of the control box is triggered",
            ThreeStateSwitchStop => "the emergency stop of the three-state switch is pressed",
            Servo { joint: None } => "servo motor error",
            Servo { joint: Some(_) } => "servo motor error on one joint (joint = code - 10)",
            ForceTorqueSensorComm => "force/torque sensor communication error",
            EndEffectorComm => "end-effector communication error (tool RS-485)",
            Kinematic => "kinematic error: no joint solution for the path; re-plan it",
            SelfCollision => "self-collision: the arm is about to hit itself",
            JointLimit => "joint angle exceeds its limit",
            SpeedLimit => "speed exceeds the limit",
            Planning => "planning error: re-plan the path or reduce the speed",
            LinuxRt => "Linux real-time error",
            CommandReply => "command reply error",
            EndModuleComm => "end module communication error",
            FeedbackSpeed => "feedback speed exceeds the limit",
            Collision => "collision caused abnormal current",
            CircleCalculation => "three-point circle calculation error",
            ControllerGpio => "controller GPIO error",
            RecordingTimeout => "trajectory recording timeout",
            SafetyBoundary => "safety boundary limit reached",
            TooManyDelayCommands => "too many delayed commands",
            ManualModeMotion => "abnormal movement in manual mode",
            AbnormalJointAngle => "abnormal joint angle",
            PowerBoardComm => "communication error between the power board's master and slave ICs",
            TrajectorySolve => "solution failure of an error-free joint trajectory",
            FrictionFile => "the friction file's content is invalid",
            CalibrationFile => "the calibration file's content is invalid",
            ForceTorqueSensor(_) => {
                "six-axis force/torque sensor error (read, mode, zero or overload)"
            }
            ServoJLinearSpeed => "linear speed exceeded the limit in servo-joint mode",
            BaseBoardComm => "robot arm base board communication error",
            ControlBox485 => "control box external RS-485 device communication error",
            Other(_) => "other error",
        }
    }
}

impl fmt::Display for ControllerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "C{}: {}", self.code(), self.meaning())
    }
}

/// Controller warning codes (GET_ERROR's second byte, report byte 90), from the SDK's
/// `ControllerWarnCodeMap`. A warning refuses one command; the arm keeps going. CLEAN_WAR clears it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ControllerWarning {
    /// 11: the command cache is full.
    CacheFull,
    /// 12: a command's parameters are wrong.
    BadParameter,
    /// 13: the funcode does not exist.
    UnknownCommand,
    /// 14: the command's parameters have no solution (e.g. no IK solution).
    NoSolution,
    /// 15: the Modbus command queue is full.
    ModbusFull,
    /// Any other code.
    Other(u8),
}

impl ControllerWarning {
    pub(crate) fn from_code(code: u8) -> Option<ControllerWarning> {
        use ControllerWarning::*;
        Some(match code {
            0 => return None,
            11 => CacheFull,
            12 => BadParameter,
            13 => UnknownCommand,
            14 => NoSolution,
            15 => ModbusFull,
            other => Other(other),
        })
    }

    pub(crate) fn code(self) -> u8 {
        use ControllerWarning::*;
        match self {
            CacheFull => 11,
            BadParameter => 12,
            UnknownCommand => 13,
            NoSolution => 14,
            ModbusFull => 15,
            Other(c) => c,
        }
    }

    pub(crate) fn meaning(self) -> &'static str {
        use ControllerWarning::*;
        match self {
            CacheFull => "the controller's command cache is full",
            BadParameter => "a command parameter is wrong",
            UnknownCommand => "the command code does not exist",
            NoSolution => "the command's parameters have no solution",
            ModbusFull => "the Modbus command queue is full",
            Other(_) => "other warning",
        }
    }
}

impl fmt::Display for ControllerWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "W{}: {}", self.code(), self.meaning())
    }
}
