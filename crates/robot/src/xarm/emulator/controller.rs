//! The emulated controller: a pure state machine over `proto` commands and an explicit clock.
//!
//! No sockets and no wall clock here: `handle` takes a request and the time it arrived, `advance`
//! moves the model to a time, and the reports are built from the state. The server
//! (`super::Emulator`) feeds it from the network; tests drive it directly with made-up times, so
//! motion timing is checked without sleeping.
//!
//! What is modelled (xArm-Python-SDK v1.18.4 `xarm/core/wrapper/uxbus_cmd*.py` and `xarm/x3/*.py`,
//! the UFACTORY private TCP protocol docs, UFACTORY manual §2.1.3; docs/references.md §1):
//! * state machine: power-on state 4 (stopped) with motors disabled; MOTION_EN and SET_MODE lead
//!   to state 5 (configuration changed), SET_TCP_OFFSET / SET_LOAD_PARAM too; SET_STATE 0 makes
//!   the arm ready (2), 3 pauses, 4 stops and drops the queue; motion commands while not ready are
//!   discarded with status 0x10;
//! * position mode (0): MOVE_LINE (straight TCP line, IK along it), MOVE_RELATIVE, MOVE_JOINT,
//!   MOVE_HOME queue up (cmdnum) and run one after the other with trapezoidal timing at the
//!   commanded speed and acceleration, clamped to the joint speed limits of the URDF;
//! * servo mode (1): MOVE_SERVOJ / MOVE_SERVO_CART set the newest target, approached at the
//!   joints' maximum speed; a step that needs more than that speed is refused with an error;
//! * errors stop the arm (state 4, status 0x40) until CLEAN_ERR and SET_STATE 0: C21 (no IK
//!   solution / IK branch jump along a line), C23 (joint target beyond its limits), C24 (servo step
//!   too fast for the joints), C60 (servo-joint step too fast for the TCP, > 1200 mm/s); warnings
//!   refuse one command and leave the arm alone: W11 (queue full), W12 (bad parameters),
//!   W13 (unknown funcode);
//! * feedback frames (0xFF) for commands sent while SET_FEEDBACK_TYPE asked for them;
//! * the tool board and the xArm Gripper behind the RS-485 tunnel (`super::tool`).
//!
//! Not modelled: dynamics (torques, currents read 0), collisions, the safety boundary, blending
//! (radius), velocity and teach modes (accepted as modes, but nothing moves), the Modbus-TCP
//! protocol (prot 0, answered with an "illegal function" exception), and every register not in
//! `proto::reg` (warning 13).

use crate::xarm::proto::joints_to_wire;
use std::collections::VecDeque;
use std::sync::Arc;

use super::arm::EmulatedArm;
use super::tool::ToolBoard;
use crate::xarm::proto::{
    feedback_code, feedback_kind, pose_from_wire, pose_from_wire_axis_angle, pose_to_wire, prot,
    set_state, ArmStatus, Command, ControllerError, ControllerWarning, Coord, Feedback, Mode,
    MotionBounds, ProtoError, Reply, Request, Response, RichReport, RichTail, RobotState, RtReport,
    Status,
};
use pointact_core::geometry::interp::SePath;
use pointact_core::geometry::interp::ROTATION_LENGTH_M_PER_RAD;
use pointact_core::kinematics::{IkOptions, IkSolver, RobotModel};
use pointact_core::nalgebra::{Isometry3, Translation3, UnitQuaternion, Vector3};
use pointact_core::planning::{JointPath, Trajectory};

/// Identifies one client connection, so feedback frames go back to the socket that asked.
pub type ConnId = u64;

/// Commands the controller queues at most (firmware maximum, the SDK's `XCONF.MAX_CMD_NUM`); more
/// is W11.
pub const MAX_QUEUE: usize = 1024;
/// Hardware ceilings (UFACTORY `p04robot-specifications.md`): TCP speed (mm/s) and acceleration
/// (mm/s²), joint acceleration (rad/s²). Faster requests are clamped, as the controller clamps
/// them.
const MAX_TCP_SPEED: f64 = 1000.0;
const MAX_TCP_ACC: f64 = 50_000.0;
const MAX_JOINT_ACC: f64 = 20.0;
/// The xArm controller's control period (250 Hz): the longest step [`Controller::advance`] takes.
pub const CONTROL_PERIOD_S: f64 = 1.0 / 250.0;
/// Servo-joint mode: the TCP may not move faster than this (mm/s), error C60 (UFACTORY
/// `support_articles/software/how-to-solve-c60-error.md`: 1200 mm/s for the xArm series).
const SERVOJ_MAX_TCP_SPEED: f64 = 1200.0;
/// Servo targets are expected at 30..250 Hz (UFACTORY Studio manual, `ufactory_studio_cn.md`,
/// mode 1): the time a step may take is the gap since the previous target, clamped to that range,
/// so a far target is too fast at any rate.
const SERVO_MIN_PERIOD: f64 = CONTROL_PERIOD_S;
const SERVO_MAX_PERIOD: f64 = 1.0 / 30.0;

/// How many control periods a late tick is caught up in at most (a minute's worth).
const MAX_CATCH_UP_TICKS: f64 = 15_000.0;

/// The servo speed check averages over at least this much time: a stream whose packets were
/// bunched by scheduling (this emulator is not a real-time controller, and a loaded machine delays
/// its tick) is judged by the speed it asks for over 100 ms, not by two packets that arrived
/// 0.1 ms apart. A jump is still a jump: 100 ms at the joints' speed limit is a fraction of a
/// radian.
const SERVO_WINDOW: f64 = 0.1;
/// The longest span a speed is averaged over: a target after a pause is judged as if it came at
/// most this long after the one before.
const SERVO_LONGEST_SPAN: f64 = 0.5;
/// IK samples along a line: at most this far apart (mm, rad).
const LINE_STEP_MM: f64 = 2.0;
const LINE_STEP_RAD: f64 = 0.02;
/// Most samples one line may use (a 1 m line at 2 mm).
const LINE_MAX_SAMPLES: usize = 1000;
/// A joint change between neighbouring line samples above this means the IK jumped branches:
/// the line cannot be followed continuously (C21).
const LINE_MAX_JOINT_JUMP: f64 = 0.35;
/// Report values that do not depend on the state.
const TEMPERATURE_C: i8 = 30;

/// How the emulated controller introduces itself.
#[derive(Debug, Clone, PartialEq)]
pub struct ControllerConfig {
    /// GET_VERSION text; must match the SDK's version regex (`xarm/x3/base.py`, docs/references.md
    /// §1).
    pub version: String,
    /// Arm serial number answered to GET_ROBOT_SN.
    pub robot_sn: String,
    /// Control box serial number answered to GET_ROBOT_SN.
    pub control_box_sn: String,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            version: "6,6,XI1304,AC1303,v2.3.0".into(),
            robot_sn: "XI130400000000".into(),
            control_box_sn: "AC130300000000".into(),
        }
    }
}

/// A planned motion: joint positions as a function of time since its start.
#[derive(Debug, Clone)]
enum Plan {
    /// Straight in joint space.
    Joint(Trajectory),
    /// Through IK samples equally spaced along a TCP line; `profile` maps time to the distance
    /// along it (one coordinate, mm).
    Line {
        profile: Trajectory,
        length: f64,
        samples: Vec<Vec<f64>>,
    },
}

impl Plan {
    fn duration(&self) -> f64 {
        match self {
            Plan::Joint(t) => t.duration(),
            Plan::Line { profile, .. } => profile.duration(),
        }
    }

    fn sample(&self, t: f64) -> Vec<f64> {
        match self {
            Plan::Joint(traj) => traj.sample(t),
            Plan::Line {
                profile,
                length,
                samples,
            } => {
                let s = profile.sample(t).first().copied().unwrap_or(0.0);
                let f = if *length > 0.0 {
                    (s / length).clamp(0.0, 1.0)
                } else {
                    1.0
                };
                let x = f * (samples.len() - 1) as f64;
                let i = (x.floor() as usize).min(samples.len().saturating_sub(2));
                if samples.len() < 2 {
                    return samples[0].clone();
                }
                let u = (x - i as f64).clamp(0.0, 1.0);
                samples[i]
                    .iter()
                    .zip(&samples[i + 1])
                    .map(|(a, b)| a + u * (b - a))
                    .collect()
            }
        }
    }

    fn end(&self) -> Vec<f64> {
        match self {
            Plan::Joint(t) => t.end().to_vec(),
            Plan::Line { samples, .. } => samples.last().cloned().unwrap_or_default(),
        }
    }
}

/// Who to tell when a motion starts or ends.
#[derive(Debug, Clone, Copy)]
struct Tag {
    conn: ConnId,
    tid: u16,
    prot: u16,
    funcode: u8,
    task: u16,
    /// `feedback_kind` bits in force when the command arrived.
    feedback: u8,
}

#[derive(Debug, Clone)]
struct Motion {
    plan: Plan,
    tag: Tag,
}

#[derive(Debug, Clone)]
struct Active {
    motion: Motion,
    elapsed: f64,
}

/// The newest servo-mode target.
#[derive(Debug, Clone)]
struct ServoTarget {
    q: Vec<f64>,
    /// When it arrived (s).
    at: f64,
}

/// The emulated xArm controller.
pub struct Controller {
    arm: Box<dyn EmulatedArm>,
    model: Arc<RobotModel>,
    ik: IkSolver,
    config: ControllerConfig,
    dof: usize,
    /// Model time of the last `advance` (s).
    time: f64,
    state: RobotState,
    mode: u8,
    enable_bits: u8,
    error: u8,
    warn: u8,
    /// Measured joints, and their velocity and acceleration (finite differences per step).
    q: Vec<f64>,
    qd: Vec<f64>,
    qdd: Vec<f64>,
    /// What the controller asks the arm for.
    setpoint: Vec<f64>,
    queue: VecDeque<Motion>,
    active: Option<Active>,
    servo: Option<ServoTarget>,
    /// Accepted servo targets: the newest one at least `SERVO_WINDOW` old and every one after it.
    servo_history: std::collections::VecDeque<ServoTarget>,
    tcp_offset_wire: [f32; 6],
    /// `flange_from_tcp` set by SET_TCP_OFFSET.
    tcp_offset: Isometry3<f64>,
    load: [f32; 4],
    feedback_type: u8,
    next_task: u16,
    tool: ToolBoard,
    outbox: Vec<(ConnId, Vec<u8>)>,
    report_counter: u32,
}

/// A motion command's planning outcome.
enum Planned {
    Ok(Plan),
    Error(ControllerError),
    Warning(ControllerWarning),
}

impl Controller {
    /// A controller driving `arm`, powered on: motors disabled, state 4, mode 0, at time 0.
    pub fn new(arm: Box<dyn EmulatedArm>, config: ControllerConfig) -> Self {
        let model = arm.model().clone();
        let dof = model.joint_limits().len();
        let ik = IkSolver::new(
            &model,
            IkOptions {
                max_attempts: 1,
                max_iterations: 100,
                ..IkOptions::default()
            },
        );
        let mut c = Controller {
            arm,
            ik,
            config,
            dof,
            time: 0.0,
            state: RobotState::Stopped,
            mode: Mode::Position as u8,
            enable_bits: 0,
            error: 0,
            warn: 0,
            q: vec![0.0; dof],
            qd: vec![0.0; dof],
            qdd: vec![0.0; dof],
            setpoint: vec![0.0; dof],
            queue: VecDeque::new(),
            active: None,
            servo: None,
            servo_history: std::collections::VecDeque::new(),
            tcp_offset_wire: [0.0; 6],
            tcp_offset: Isometry3::identity(),
            load: [0.0; 4],
            feedback_type: 0,
            next_task: 1,
            tool: ToolBoard::default(),
            outbox: Vec::new(),
            report_counter: 0,
            model,
        };
        // Where the arm is at power-on.
        let reading = c.arm.reading();
        if reading.q.len() == dof {
            c.q = reading.q.clone();
            c.setpoint = reading.q;
        }
        c
    }

    /// The kinematic model of the emulated arm.
    pub fn model(&self) -> &Arc<RobotModel> {
        &self.model
    }

    /// The controller state GET_STATE reports (moving, paused, stopped, ...).
    pub fn state(&self) -> RobotState {
        self.state
    }

    /// The motion mode set by SET_MODE (a `Mode` value: 0 position, 1 servo, ...).
    pub fn mode(&self) -> u8 {
        self.mode
    }

    /// (error, warning) codes.
    pub fn codes(&self) -> (u8, u8) {
        (self.error, self.warn)
    }

    /// Measured joint positions (rad).
    pub fn joints(&self) -> &[f64] {
        &self.q
    }

    /// Gripper position register (pulses).
    pub fn gripper_position(&self) -> i32 {
        self.tool.gripper.position()
    }

    /// Commands queued or running (GET_CMDNUM).
    pub fn cmdnum(&self) -> u16 {
        (self.queue.len() + self.active.is_some() as usize).min(u16::MAX as usize) as u16
    }

    /// Feedback frames produced since the last call, with the connection each is for.
    pub fn take_outbox(&mut self) -> Vec<(ConnId, Vec<u8>)> {
        std::mem::take(&mut self.outbox)
    }

    /// What a client waits on in the reports: state, mode, error, warning and the enabled motors.
    pub fn reported_status(&self) -> (u8, u8, u8, u8, u8) {
        (
            self.state as u8,
            self.mode,
            self.error,
            self.warn,
            self.enable_bits,
        )
    }

    /// The status byte every reply carries.
    pub fn status(&self) -> Status {
        let mut s = 0;
        if self.error != 0 {
            s |= Status::ERROR;
        }
        if self.warn != 0 {
            s |= Status::WARNING;
        }
        if self.state.not_ready() {
            s |= Status::NOT_READY;
        }
        Status(s)
    }

    fn all_enabled_bits(&self) -> u8 {
        ((1u16 << self.dof.min(8)) - 1) as u8
    }

    /// Pose of the TCP (flange and the controller's TCP offset) for joints `q`.
    fn tcp_pose(&self, q: &[f64]) -> Isometry3<f64> {
        self.model
            .fk_flange(q)
            .map(|f| f * self.tcp_offset)
            .unwrap_or_else(|_| Isometry3::identity())
    }

    /// The joints the last queued (or running) motion ends at: where a new motion starts.
    fn last_target(&self) -> Vec<f64> {
        if let Some(m) = self.queue.back() {
            return m.plan.end();
        }
        if let Some(a) = &self.active {
            return a.motion.plan.end();
        }
        self.setpoint.clone()
    }

    // -----------------------------------------------------------------------------------------
    // Time

    /// Moves the model to time `now` (s): runs the motion queue or the servo target, the gripper,
    /// and steps the arm. Times before the last one are ignored.
    ///
    /// A late tick (the emulator's process starved on a loaded machine) is caught up in sub-ticks
    /// shorter than two [`CONTROL_PERIOD_S`], as the real controller would have run them: in one long
    /// step the arm behind the seam would be driven along a chord of the trajectory, with a jump
    /// in velocity at each end, and the simulator's fingers lose a held object to such jumps.
    pub fn advance(&mut self, now: f64) {
        let dt = now - self.time;
        if dt.is_nan() || dt <= 0.0 {
            return;
        }
        // Whole periods: a tick a little late (4.01 ms) stays one step.
        let n = (dt / CONTROL_PERIOD_S).floor().max(1.0);
        let start = self.time;
        // Beyond this a clock jump is not a starved tick; one step as before, not millions.
        if n > MAX_CATCH_UP_TICKS {
            self.advance_by(now, dt);
            return;
        }
        let n = n as usize;
        for i in 1..=n {
            let t = if i == n {
                now
            } else {
                start + dt * i as f64 / n as f64
            };
            self.advance_by(t, dt / n as f64);
        }
    }

    /// One control tick of `dt` s ending at `now`.
    fn advance_by(&mut self, now: f64, dt: f64) {
        self.time = now;
        let opening = self.tool.gripper.step(dt);
        let moving_state = matches!(
            self.state,
            RobotState::Moving | RobotState::Ready | RobotState::Starting
        );
        if moving_state && self.mode == Mode::Position as u8 {
            self.run_queue(dt);
        } else if moving_state && self.mode == Mode::Servo as u8 {
            self.run_servo(dt);
        }
        let reading = self.arm.step(dt, &self.setpoint, opening);
        if reading.q.len() == self.dof {
            for j in 0..self.dof {
                let v = (reading.q[j] - self.q[j]) / dt;
                self.qdd[j] = (v - self.qd[j]) / dt;
                self.qd[j] = v;
            }
            self.q = reading.q;
        }
        self.tool
            .gripper
            .observe(reading.gripper_opening, reading.gripper_blocked);
    }

    fn run_queue(&mut self, dt: f64) {
        if self.active.is_none() {
            if let Some(m) = self.queue.pop_front() {
                self.notify(&m.tag, feedback_kind::MOTION_START, feedback_code::SUCCESS);
                self.active = Some(Active {
                    motion: m,
                    elapsed: 0.0,
                });
            }
        }
        let mut finished = None;
        if let Some(a) = &mut self.active {
            a.elapsed += dt;
            self.setpoint = a.motion.plan.sample(a.elapsed);
            if a.elapsed >= a.motion.plan.duration() {
                finished = Some(a.motion.tag);
            }
        }
        if let Some(tag) = finished {
            self.active = None;
            self.notify(&tag, feedback_kind::MOTION_FINISH, feedback_code::SUCCESS);
        }
        self.state = if self.active.is_some() || !self.queue.is_empty() {
            RobotState::Moving
        } else {
            RobotState::Ready
        };
    }

    fn run_servo(&mut self, dt: f64) {
        let Some(target) = self.servo.as_ref().map(|s| s.q.clone()) else {
            self.state = RobotState::Ready;
            return;
        };
        let mut arrived = true;
        for (j, l) in self.model.joint_limits().iter().enumerate() {
            let max_step = l.velocity * dt;
            let d = target[j] - self.setpoint[j];
            if d.abs() <= max_step {
                self.setpoint[j] = target[j];
            } else {
                self.setpoint[j] += max_step * d.signum();
                arrived = false;
            }
        }
        self.state = if arrived {
            RobotState::Ready
        } else {
            RobotState::Moving
        };
    }

    /// Queues a feedback frame if the command asked for this kind.
    fn notify(&mut self, tag: &Tag, kind: u8, code: u8) {
        if tag.feedback & kind == 0 {
            return;
        }
        let f = Feedback {
            tid: tag.tid,
            prot: tag.prot,
            status: Status::OK,
            kind,
            funcode: tag.funcode,
            task: tag.task,
            code,
            time_us: (self.time * 1e6) as u64,
        };
        self.outbox.push((tag.conn, f.encode()));
    }

    /// Drops every motion (discarded feedback for those that asked) and holds the arm where it is.
    fn stop_motion(&mut self) {
        let mut dropped: Vec<Tag> = self.queue.drain(..).map(|m| m.tag).collect();
        if let Some(a) = self.active.take() {
            dropped.insert(0, a.motion.tag);
        }
        for tag in dropped {
            self.notify(&tag, feedback_kind::MOTION_FINISH, feedback_code::DISCARDED);
        }
        self.servo = None;
        self.servo_history.clear();
        self.setpoint = self.q.clone();
    }

    /// An error: the arm stops and is not ready until CLEAN_ERR and SET_STATE 0.
    fn raise(&mut self, e: ControllerError) {
        tracing::info!("emulated controller error {e}");
        self.error = e.code();
        self.stop_motion();
        self.state = RobotState::Stopped;
    }

    fn warn(&mut self, w: ControllerWarning) {
        tracing::info!("emulated controller warning {w}");
        self.warn = w.code();
    }

    // -----------------------------------------------------------------------------------------
    // Commands

    /// Answers one request that arrived at time `now` on connection `conn`; `None` when the
    /// controller sends no reply (the SDK's heartbeat).
    pub fn handle(&mut self, conn: ConnId, req: &Request, now: f64) -> Option<Response> {
        self.advance(now);
        if req.prot == prot::HEARTBEAT {
            return None;
        }
        if req.prot == prot::MODBUS_TCP {
            // Standard Modbus TCP: the byte after the length is the unit id, then the function;
            // answer "illegal function" in that framing.
            let function = req.params.first().copied().unwrap_or(0);
            return Some(Response {
                tid: req.tid,
                prot: req.prot,
                funcode: req.funcode,
                status: Status(function | 0x80),
                payload: vec![crate::xarm::proto::modbus_exception::ILLEGAL_FUNCTION],
            });
        }
        let payload = match req.command() {
            Ok(cmd) => self.execute(conn, req, cmd, now),
            Err(ProtoError::UnknownFuncode(_)) => {
                self.warn(ControllerWarning::UnknownCommand);
                Reply::Empty
            }
            Err(e) => {
                tracing::debug!(
                    "emulated controller: bad parameters for {}: {e}",
                    req.funcode
                );
                self.warn(ControllerWarning::BadParameter);
                empty_reply(req.funcode)
            }
        };
        Some(Response::to(req, self.status(), payload.encode_payload()))
    }

    fn execute(&mut self, conn: ConnId, req: &Request, cmd: Command, now: f64) -> Reply {
        match cmd {
            Command::GetVersion => Reply::Version(self.config.version.clone()),
            Command::GetRobotSn => Reply::RobotSn {
                robot: self.config.robot_sn.clone(),
                control_box: self.config.control_box_sn.clone(),
            },
            Command::GetState => Reply::State(self.state as u8),
            Command::GetCmdnum => Reply::Cmdnum(self.cmdnum()),
            Command::GetError => Reply::ErrorWarn {
                error: self.error,
                warn: self.warn,
            },
            Command::CleanError => {
                self.error = 0;
                Reply::Empty
            }
            Command::CleanWarn => {
                self.warn = 0;
                Reply::Empty
            }
            Command::MotionEnable { axis, enable } => {
                let bits = match axis {
                    8 => self.all_enabled_bits(),
                    a if a >= 1 && (a as usize) <= self.dof => 1 << (a - 1),
                    _ => {
                        self.warn(ControllerWarning::BadParameter);
                        return Reply::Empty;
                    }
                };
                self.stop_motion();
                if enable {
                    self.enable_bits |= bits;
                    // An uncleared error keeps the arm stopped.
                    if self.error == 0 {
                        self.state = RobotState::ConfigChanged;
                    }
                } else {
                    self.enable_bits &= !bits;
                    self.state = RobotState::Stopped;
                }
                Reply::Empty
            }
            Command::SetMode { mode, .. } => {
                if Mode::from_u8(mode).is_none() {
                    self.warn(ControllerWarning::BadParameter);
                    return Reply::Empty;
                }
                self.stop_motion();
                self.mode = mode;
                if self.state != RobotState::Stopped {
                    self.state = RobotState::ConfigChanged;
                }
                Reply::Empty
            }
            Command::SetState(s) => {
                self.set_state(s);
                Reply::Empty
            }
            Command::SetTcpOffset(o) => {
                if o.iter().any(|v| !v.is_finite()) {
                    self.warn(ControllerWarning::BadParameter);
                    return Reply::Empty;
                }
                self.stop_motion();
                self.tcp_offset_wire = o;
                self.tcp_offset = pose_from_wire(&o);
                self.config_changed();
                Reply::Empty
            }
            Command::SetLoad { mass, com } => {
                if !(mass.is_finite() && mass >= 0.0 && com.iter().all(|v| v.is_finite())) {
                    self.warn(ControllerWarning::BadParameter);
                    return Reply::Empty;
                }
                self.stop_motion();
                self.load = [mass, com[0], com[1], com[2]];
                self.config_changed();
                Reply::Empty
            }
            Command::GetTcpPose => Reply::Pose(pose_to_wire(&self.tcp_pose(&self.q))),
            Command::GetJointPos => Reply::Joints(joints_to_wire(&self.q)),
            Command::SetFeedbackType(t) => {
                self.feedback_type = t;
                Reply::Empty
            }
            Command::TgpioRead16 { host, addr } => Reply::Register(self.tool.read16(host, addr)),
            Command::TgpioWrite16 {
                host, addr, value, ..
            } => {
                self.tool.write16(host, addr, value);
                Reply::Empty
            }
            Command::Rs485 { host, pdu } => match self.tool.rs485(host, &pdu) {
                Ok(answer) => Reply::Rs485 { host, pdu: answer },
                Err(_) => {
                    self.warn(ControllerWarning::BadParameter);
                    Reply::Rs485 { host, pdu: vec![] }
                }
            },
            Command::ServoJoint(_) | Command::ServoCartesian(_) => {
                self.servo_command(&cmd, now);
                Reply::Empty
            }
            Command::MoveLine(_)
            | Command::MoveJoint(_)
            | Command::MoveHome(_)
            | Command::MoveRelative(_) => self.motion_command(conn, req, &cmd),
        }
    }

    fn config_changed(&mut self) {
        if self.state != RobotState::Stopped {
            self.state = RobotState::ConfigChanged;
        }
    }

    fn set_state(&mut self, s: u8) {
        match s {
            set_state::START => {
                let enabled = self.enable_bits & self.all_enabled_bits() == self.all_enabled_bits();
                if self.error != 0 || !enabled {
                    return;
                }
                self.state = if self.active.is_some() || !self.queue.is_empty() {
                    RobotState::Moving
                } else {
                    RobotState::Ready
                };
            }
            set_state::PAUSE => {
                if matches!(self.state, RobotState::Moving | RobotState::Ready) {
                    self.state = RobotState::Paused;
                }
            }
            set_state::STOP | set_state::DECELERATE_STOP => {
                self.stop_motion();
                self.state = RobotState::Stopped;
            }
            _ => self.warn(ControllerWarning::BadParameter),
        }
    }

    /// Whether a motion command may run now; `false` discards it (the status byte says why).
    fn motion_allowed(&self, want_mode: Mode) -> bool {
        if self.error != 0 || self.state.not_ready() {
            return false;
        }
        if self.mode != want_mode as u8 {
            tracing::debug!(
                "emulated controller: motion for mode {want_mode:?} ignored in mode {}",
                self.mode
            );
            return false;
        }
        true
    }

    fn motion_command(&mut self, conn: ConnId, req: &Request, cmd: &Command) -> Reply {
        let only_check = match cmd {
            Command::MoveLine(m) => m.only_check,
            Command::MoveJoint(m) => m.only_check,
            Command::MoveHome(m) => m.only_check,
            Command::MoveRelative(m) => m.only_check,
            _ => None,
        };
        let checking = only_check.is_some_and(|c| c > 0);
        if !checking && !self.motion_allowed(Mode::Position) {
            return Reply::MoveAck {
                task: 0,
                check: only_check,
            };
        }
        if !checking && self.queue.len() + 1 >= MAX_QUEUE {
            self.warn(ControllerWarning::CacheFull);
            return Reply::MoveAck {
                task: 0,
                check: only_check,
            };
        }
        let start = self.last_target();
        let planned = self.plan(cmd, &start);
        if checking {
            let result = match planned {
                Planned::Ok(_) => 0,
                Planned::Error(e) => e.code(),
                Planned::Warning(w) => w.code(),
            };
            return Reply::MoveAck {
                task: 0,
                check: Some(result),
            };
        }
        match planned {
            Planned::Ok(plan) => {
                let task = self.next_task;
                self.next_task = self.next_task.wrapping_add(1).max(1);
                let tag = Tag {
                    conn,
                    tid: req.tid,
                    prot: req.prot,
                    funcode: req.funcode,
                    task,
                    feedback: self.feedback_type,
                };
                self.queue.push_back(Motion { plan, tag });
                self.state = RobotState::Moving;
                Reply::MoveAck {
                    task,
                    check: only_check,
                }
            }
            Planned::Error(e) => {
                self.raise(e);
                Reply::MoveAck {
                    task: 0,
                    check: only_check,
                }
            }
            Planned::Warning(w) => {
                self.warn(w);
                Reply::MoveAck {
                    task: 0,
                    check: only_check,
                }
            }
        }
    }

    /// Plans a position-mode motion from joints `start`.
    fn plan(&mut self, cmd: &Command, start: &[f64]) -> Planned {
        match cmd {
            Command::MoveJoint(m) => {
                let target: Vec<f64> = m.joints[..self.dof].iter().map(|v| *v as f64).collect();
                self.plan_joint(start, target, m.speed, m.acc)
            }
            Command::MoveHome(m) => self.plan_joint(start, vec![0.0; self.dof], m.speed, m.acc),
            Command::MoveLine(m) => {
                if !all_finite(&m.pose) {
                    return Planned::Warning(ControllerWarning::BadParameter);
                }
                let (coord, axis_angle) = m
                    .common
                    .map(|c| (c.coord, c.axis_angle))
                    .unwrap_or((Coord::Base, false));
                let delta = if axis_angle {
                    pose_from_wire_axis_angle(&m.pose)
                } else {
                    pose_from_wire(&m.pose)
                };
                let target = match coord {
                    Coord::Base => delta,
                    Coord::Tool => self.tcp_pose(start) * delta,
                };
                self.plan_line(start, target, m.speed, m.acc)
            }
            Command::MoveRelative(m) => {
                if !all_finite(&m.offset) {
                    return Planned::Warning(ControllerWarning::BadParameter);
                }
                if m.joint {
                    let target: Vec<f64> = start
                        .iter()
                        .zip(&m.offset)
                        .map(|(q, d)| q + *d as f64)
                        .collect();
                    return self.plan_joint(start, target, m.speed, m.acc);
                }
                let from = self.tcp_pose(start);
                let d = &m.offset;
                let translation = Translation3::from(
                    from.translation.vector
                        + Vector3::new(d[0] as f64, d[1] as f64, d[2] as f64) / 1000.0,
                );
                let rotation = if m.axis_angle {
                    UnitQuaternion::from_scaled_axis(Vector3::new(
                        d[3] as f64,
                        d[4] as f64,
                        d[5] as f64,
                    )) * from.rotation
                } else {
                    // Roll, pitch and yaw add up, as the SDK's own fallback computes it.
                    let (r, p, y) = from.rotation.euler_angles();
                    UnitQuaternion::from_euler_angles(
                        r + d[3] as f64,
                        p + d[4] as f64,
                        y + d[5] as f64,
                    )
                };
                self.plan_line(
                    start,
                    Isometry3::from_parts(translation, rotation),
                    m.speed,
                    m.acc,
                )
            }
            _ => Planned::Warning(ControllerWarning::UnknownCommand),
        }
    }

    fn plan_joint(&self, start: &[f64], target: Vec<f64>, speed: f32, acc: f32) -> Planned {
        if !(positive(speed) && positive(acc) && target.iter().all(|v| v.is_finite())) {
            return Planned::Warning(ControllerWarning::BadParameter);
        }
        if self.model.check_limits(&target).is_err() {
            return Planned::Error(ControllerError::JointLimit);
        }
        let vel: Vec<f64> = self
            .model
            .joint_limits()
            .iter()
            .map(|l| l.velocity.min(speed as f64))
            .collect();
        let acc = vec![MAX_JOINT_ACC.min(acc as f64); self.dof];
        let path = JointPath {
            waypoints: vec![start.to_vec(), target],
        };
        match Trajectory::time_parameterize(path, &vel, &acc) {
            Ok(t) => Planned::Ok(Plan::Joint(t)),
            Err(_) => Planned::Warning(ControllerWarning::BadParameter),
        }
    }

    /// A straight TCP line from the pose at `start` to `target`: IK samples along it, each seeded
    /// with the previous one; timing from the TCP speed and acceleration (mm), slowed where a
    /// joint would exceed its speed limit.
    fn plan_line(
        &mut self,
        start: &[f64],
        target: Isometry3<f64>,
        speed: f32,
        acc: f32,
    ) -> Planned {
        if !(positive(speed) && positive(acc)) {
            return Planned::Warning(ControllerWarning::BadParameter);
        }
        let from = self.tcp_pose(start);
        let Ok(path) = SePath::new(&[from, target]) else {
            return Planned::Warning(ControllerWarning::BadParameter);
        };
        let trans_mm = (target.translation.vector - from.translation.vector).norm() * 1000.0;
        let angle = from.rotation.angle_to(&target.rotation);
        let steps = ((trans_mm / LINE_STEP_MM).max(angle / LINE_STEP_RAD).ceil() as usize).max(1);
        if steps > LINE_MAX_SAMPLES {
            return Planned::Error(ControllerError::Kinematic);
        }
        // The IK's tip is the model's TCP (robot.toml); the controller's TCP is the flange plus
        // its own offset: convert each sample.
        let model_tip = self.model.tip_from_flange();
        let to_ik = self.tcp_offset.inverse() * model_tip;
        let mut samples = Vec::with_capacity(steps + 1);
        samples.push(start.to_vec());
        let mut seed = start.to_vec();
        for i in 1..=steps {
            let pose = path.sample(i as f64 / steps as f64) * to_ik;
            let Ok(sol) = self.ik.solve(&pose, &seed) else {
                return Planned::Error(ControllerError::Kinematic);
            };
            let jump = sol
                .q
                .iter()
                .zip(&seed)
                .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
            if jump > LINE_MAX_JOINT_JUMP {
                return Planned::Error(ControllerError::Kinematic);
            }
            seed = sol.q.clone();
            samples.push(sol.q);
        }
        // Path length in mm; a rotation in place counts as geometry's equivalent translation.
        let length = trans_mm.max(angle * ROTATION_LENGTH_M_PER_RAD * 1000.0);
        let v = (speed as f64).min(MAX_TCP_SPEED);
        let a = (acc as f64).min(MAX_TCP_ACC);
        let Ok(profile) = Trajectory::time_parameterize(
            JointPath {
                waypoints: vec![vec![0.0], vec![length]],
            },
            &[v],
            &[a],
        ) else {
            return Planned::Warning(ControllerWarning::BadParameter);
        };
        // Joint speed along the path = |dq/ds| · v; slow the whole line down where it exceeds a
        // joint's limit.
        let ds = length / steps as f64;
        let mut factor = 1.0f64;
        if ds > 0.0 {
            for w in samples.windows(2) {
                for (j, l) in self.model.joint_limits().iter().enumerate() {
                    let joint_speed = (w[1][j] - w[0][j]).abs() / ds * v;
                    factor = factor.max(joint_speed / l.velocity);
                }
            }
        }
        Planned::Ok(Plan::Line {
            profile: profile.slowed(factor),
            length,
            samples,
        })
    }

    /// Servo mode: the newest target replaces the previous one at once, if the joints can reach
    /// it within one servo period at their maximum speed.
    fn servo_command(&mut self, cmd: &Command, now: f64) {
        if !self.motion_allowed(Mode::Servo) {
            return;
        }
        let prev = self
            .servo
            .as_ref()
            .map(|s| s.q.clone())
            .unwrap_or_else(|| self.setpoint.clone());
        // What the speed is measured from: the newest target at least `SERVO_WINDOW` old (the
        // average speed over at least the window; a pause counts for at most
        // `SERVO_LONGEST_SPAN`), else the oldest one kept, else (the first target) the setpoint
        // over one slowest servo period.
        let anchor = self
            .servo_history
            .iter()
            .rev()
            .find(|s| now - s.at >= SERVO_WINDOW)
            .or(self.servo_history.front());
        let (from, period) = match anchor {
            Some(a) => (
                a.q.clone(),
                (now - a.at).clamp(SERVO_MIN_PERIOD, SERVO_LONGEST_SPAN),
            ),
            None => (prev.clone(), SERVO_MAX_PERIOD),
        };
        let (target, tcp_limit, tcp_error) = match cmd {
            Command::ServoJoint(s) => {
                if !all_finite(&s.joints) {
                    self.warn(ControllerWarning::BadParameter);
                    return;
                }
                let q: Vec<f64> = s.joints[..self.dof].iter().map(|v| *v as f64).collect();
                if self.model.check_limits(&q).is_err() {
                    self.raise(ControllerError::JointLimit);
                    return;
                }
                (q, SERVOJ_MAX_TCP_SPEED, ControllerError::ServoJLinearSpeed)
            }
            Command::ServoCartesian(s) => {
                if !all_finite(&s.pose) {
                    self.warn(ControllerWarning::BadParameter);
                    return;
                }
                let pose = pose_from_wire(&s.pose);
                let target = match s.coord {
                    Coord::Base => pose,
                    Coord::Tool => self.tcp_pose(&prev) * pose,
                };
                let ik_target = target * self.tcp_offset.inverse() * self.model.tip_from_flange();
                let Ok(sol) = self.ik.solve(&ik_target, &prev) else {
                    self.raise(ControllerError::Kinematic);
                    return;
                };
                (sol.q, MAX_TCP_SPEED, ControllerError::SpeedLimit)
            }
            _ => return,
        };
        let too_fast_joint = target
            .iter()
            .zip(&from)
            .zip(self.model.joint_limits())
            .any(|((a, b), l)| (a - b).abs() / period > l.velocity);
        if too_fast_joint {
            self.raise(ControllerError::SpeedLimit);
            return;
        }
        let tcp_speed = (self.tcp_pose(&target).translation.vector
            - self.tcp_pose(&from).translation.vector)
            .norm()
            * 1000.0
            / period;
        if tcp_speed > tcp_limit {
            self.raise(tcp_error);
            return;
        }
        // Keep one target at least a window old (the anchor of the next check) and those after it.
        while self
            .servo_history
            .get(1)
            .is_some_and(|s| now - s.at >= SERVO_WINDOW)
        {
            self.servo_history.pop_front();
        }
        self.servo_history.push_back(ServoTarget {
            q: target.clone(),
            at: now,
        });
        self.servo = Some(ServoTarget { q: target, at: now });
        self.state = RobotState::Moving;
    }

    // -----------------------------------------------------------------------------------------
    // Reports

    fn arm_status(&self) -> ArmStatus {
        let enabled = self.enable_bits;
        ArmStatus {
            state: self.state as u8,
            mode: self.mode,
            cmdnum: self.cmdnum(),
            joints: joints_to_wire(&self.q),
            tcp_pose: pose_to_wire(&self.tcp_pose(&self.q)),
            joint_torques: [0.0; 7],
            // Brakes are released exactly on the enabled joints.
            brake_bits: enabled,
            enable_bits: enabled,
            error: self.error,
            warn: self.warn,
            tcp_offset: self.tcp_offset_wire,
            tcp_load: self.load,
            collision_sensitivity: 3,
            teach_sensitivity: 3,
            gravity: [0.0, 0.0, -1.0],
        }
    }

    /// The 30002 frame for the current state (each call counts one report).
    pub fn rich_report(&mut self) -> RichReport {
        self.report_counter = self.report_counter.wrapping_add(1);
        let max_joint_speed = self
            .model
            .joint_limits()
            .iter()
            .map(|l| l.velocity)
            .fold(0.0f64, f64::max) as f32;
        let version = self
            .config
            .version
            .rsplit(',')
            .next()
            .unwrap_or("")
            .to_string();
        let tcp_speed = self.tcp_velocity().norm();
        RichReport {
            status: self.arm_status(),
            robot_type: 6,
            axis: self.dof as u8,
            master_id: 0xAA,
            slave_id: 0x55,
            motor_tid: 0,
            motor_fid: 0,
            version,
            tcp_bounds: MotionBounds {
                jerk: 100_000.0,
                min_acc: 1.0,
                max_acc: MAX_TCP_ACC as f32,
                min_speed: 0.1,
                max_speed: MAX_TCP_SPEED as f32,
            },
            joint_bounds: MotionBounds {
                jerk: 500.0,
                min_acc: 0.01,
                max_acc: MAX_JOINT_ACC as f32,
                min_speed: 0.01,
                max_speed: max_joint_speed,
            },
            rot_jerk: 500.0,
            max_rot_acc: MAX_JOINT_ACC as f32,
            servo_codes: [[0, 0]; 7],
            tgpio_codes: [0, 0],
            tail: Some(RichTail {
                temperatures: [TEMPERATURE_C; 7],
                target_tcp_speed: tcp_speed as f32,
                target_joint_speeds: joints_to_wire(&self.qd),
                counter: self.report_counter,
                world_offset: [0.0; 6],
            }),
        }
    }

    /// The 30000 frame for the current state.
    pub fn rt_report(&self) -> RtReport {
        let mut r = RtReport {
            timestamp_us: (self.time * 1e6) as u64,
            state: self.state as u8,
            mode: self.mode,
            cmdnum: self.cmdnum(),
            ..RtReport::default()
        };
        r.target_joints.position = joints_to_wire(&self.setpoint);
        r.actual_joints.position = joints_to_wire(&self.q);
        r.actual_joints.velocity = joints_to_wire(&self.qd);
        r.actual_joints.acceleration = joints_to_wire(&self.qdd);
        r.target_tcp.pose = pose_to_wire(&self.tcp_pose(&self.setpoint));
        r.actual_tcp.pose = pose_to_wire(&self.tcp_pose(&self.q));
        let v = self.tcp_velocity();
        r.actual_tcp.speed = [v.x as f32, v.y as f32, v.z as f32, 0.0, 0.0, 0.0];
        r
    }

    /// Linear TCP velocity (mm/s) from the measured joint velocity.
    fn tcp_velocity(&self) -> Vector3<f64> {
        let h = 1e-3;
        let ahead: Vec<f64> = self
            .q
            .iter()
            .zip(&self.qd)
            .map(|(q, v)| q + v * h)
            .collect();
        (self.tcp_pose(&ahead).translation.vector - self.tcp_pose(&self.q).translation.vector)
            * 1000.0
            / h
    }
}

/// The payload shape a funcode's reply has when the command was refused before it ran.
fn empty_reply(funcode: u8) -> Reply {
    use crate::xarm::proto::reg;
    match funcode {
        reg::MOVE_LINE | reg::MOVE_JOINT | reg::MOVE_HOME | reg::MOVE_RELATIVE => Reply::MoveAck {
            task: 0,
            check: None,
        },
        _ => Reply::Empty,
    }
}

fn all_finite(v: &[f32]) -> bool {
    v.iter().all(|x| x.is_finite())
}

fn positive(v: f32) -> bool {
    v.is_finite() && v > 0.0
}

#[cfg(test)]
mod tests;
