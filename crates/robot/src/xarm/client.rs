//! An async client of the xArm controller (its private TCP protocol as xArm-Python-SDK v1.18.4
//! speaks it; see `super::proto`): the command socket, the 30000 real-time and 30002 rich report
//! streams, state and mode changes, planned moves with their wait, servo streaming (as a
//! `ServoSink`), and the xArm Gripper through the RS-485 tunnel (`super::gripper`).
//!
//! Rules every call keeps, because a robot on the other end turns a hung or half-understood call
//! into an arm that keeps moving:
//!
//! * every await is bounded by a timeout from `driver.toml` (`XarmSettings`): the connect, each
//!   request, the report streams (silence for `report_timeout_s` is a dead link), and every wait
//!   for a motion (its bound derived from the move's length and speeds);
//! * one request in flight: it carries a fresh transaction id and only the reply with that id
//!   answers it; replies with another id (late answers to a request that timed out) are dropped,
//!   feedback frames (funcode 0xFF) are kept aside, and a reply that does not echo the protocol id
//!   and funcode is a protocol error;
//! * any fault while the arm may be moving — a controller error, a timeout, a dead report stream —
//!   commands a stop (SET_STATE 4) before the error is returned. When the command socket itself is
//!   the fault (closed, garbled, or its last request unanswered), the stop goes out on a new
//!   connection of its own: the controller serves several command clients at once (xArm Studio
//!   beside a script), and a stop queued behind a stalled request would come too late;
//! * a servo setpoint unanswered within the servo watchdog's period (`XarmRobot` sets it) is a
//!   stalled link: `RobotError::LinkStalled`, and the stop above;
//! * a closed socket is `RobotError::Disconnected`, a timeout `RobotError::Timeout`, bytes that do
//!   not decode `RobotError::Protocol`, and a controller error or warning code
//!   `RobotError::Controller` with the code's meaning. After a protocol error or a lost socket the
//!   client refuses every further command (the stream can no longer be trusted): reconnect.
//!
//! Units at this API are pointact's (m, rad, base frame); the wire's mm are converted here.

use super::proto::joints_to_wire;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::proto::{
    parse_version, pose_from_wire, pose_to_wire, prot, set_state, Command, ControllerError,
    ControllerWarning, Coord, Feedback, FirmwareVersion, FrameReader, Incoming, Mode, MoveJoint,
    MoveLine, MoveRelative, Reply, Request, Response, RichReport, RobotState, RtReport,
    ServoCartesian, ServoJoint, Status,
};
use super::report::{lock, FrameKind, Recording, ReportStream, SharedRecording};
use crate::servo::{self, ServoSink};
use crate::settings::XarmSettings;
use crate::{JointState, RobotError};
use pointact_core::geometry::interp::ROTATION_LENGTH_M_PER_RAD;
use pointact_core::kinematics::GripperConfig;
use pointact_core::nalgebra::{Isometry3, Vector3};

/// How often a wait asks the controller for its state: the SDK's `wait_move` sleeps 50 ms.
const POLL: Duration = Duration::from_millis(50);
/// Consecutive idle polls (state 2, nothing queued) that end a wait. One could be the instant
/// between two queued moves; the SDK also asks for two.
const SETTLED_POLLS: u32 = 2;
/// Protocol id 3 is what the SDK switches to from firmware 1.8.6 on (xArm-Python-SDK v1.18.4
/// `xarm/x3/base.py`, `version_is_ge(1, 8, 6)`).
const PROT_V3_FROM: (u32, u32, u32) = (1, 8, 6);
/// Firmware that takes SET_MODE's detection byte (1.10.0) and the common MOVE_LINE form
/// (1.11.100): `version_is_ge` in the SDK's `xarm/x3/base.py` and `xarm/x3/xarm.py`.
const SET_MODE_DETECTION_FROM: (u32, u32, u32) = (1, 10, 0);
const MOVE_LINE_COMMON_FROM: (u32, u32, u32) = (1, 11, 100);

/// Why the command socket is no longer usable.
#[derive(Debug, Clone)]
enum Lost {
    Closed(String),
    Protocol(String),
}

impl Lost {
    fn error(&self) -> RobotError {
        match self {
            Lost::Closed(w) => RobotError::Disconnected(w.clone()),
            Lost::Protocol(w) => RobotError::Protocol(w.clone()),
        }
    }
}

/// The command socket: framing, transaction ids, and the one request in flight.
struct CommandLink {
    stream: Option<TcpStream>,
    lost: Option<Lost>,
    reader: FrameReader,
    buf: Vec<u8>,
    tid: u16,
    prot: u16,
    /// A request is being written: a timeout now leaves half a frame on the wire.
    writing: bool,
    feedback: Option<Feedback>,
    stale_replies: u64,
    /// The last request timed out unanswered: a stop must not queue behind it.
    stalled: bool,
}

impl CommandLink {
    fn new(stream: TcpStream) -> Self {
        CommandLink {
            stream: Some(stream),
            lost: None,
            reader: FrameReader::new(),
            buf: vec![0; 4096],
            tid: 0,
            prot: prot::PRIVATE,
            writing: false,
            feedback: None,
            stale_replies: 0,
            stalled: false,
        }
    }

    fn lose(&mut self, why: Lost) {
        tracing::warn!("xarm command socket given up: {why:?}");
        self.stream = None;
        self.lost.get_or_insert(why);
    }

    fn check(&self) -> Result<(), RobotError> {
        match &self.lost {
            Some(l) => Err(l.error()),
            None => Ok(()),
        }
    }

    /// Sends `req` and returns its reply, within `timeout`.
    async fn transact(&mut self, req: Request, timeout: Duration) -> Result<Response, RobotError> {
        self.check()?;
        let bytes = req.encode().map_err(|e| {
            RobotError::Protocol(format!("cannot encode funcode {}: {e}", req.funcode))
        })?;
        match tokio::time::timeout(timeout, self.exchange(&req, &bytes)).await {
            Ok(Ok(r)) => {
                self.stalled = false;
                Ok(r)
            }
            Ok(Err(e)) => {
                match &e {
                    RobotError::Disconnected(w) => self.lose(Lost::Closed(w.clone())),
                    RobotError::Protocol(w) => self.lose(Lost::Protocol(w.clone())),
                    _ => {}
                }
                Err(e)
            }
            Err(_) => {
                self.stalled = true;
                if self.writing {
                    self.lose(Lost::Closed(
                        "a request timed out half-written; the command stream lost its framing"
                            .into(),
                    ));
                }
                Err(RobotError::Timeout(timeout.as_secs_f64()))
            }
        }
    }

    async fn exchange(&mut self, req: &Request, bytes: &[u8]) -> Result<Response, RobotError> {
        let CommandLink {
            stream,
            reader,
            buf,
            writing,
            feedback,
            stale_replies,
            ..
        } = self;
        let Some(stream) = stream.as_mut() else {
            return Err(RobotError::Disconnected("command socket closed".into()));
        };
        *writing = true;
        stream
            .write_all(bytes)
            .await
            .map_err(|e| RobotError::Disconnected(format!("command socket: {e}")))?;
        *writing = false;
        let protocol = |e: &dyn std::fmt::Display| {
            RobotError::Protocol(format!(
                "command socket, reply to funcode {}: {e}",
                req.funcode
            ))
        };
        loop {
            while let Some(frame) = reader.next_frame().map_err(|e| protocol(&e))? {
                match Incoming::decode(&frame).map_err(|e| protocol(&e))? {
                    Incoming::Feedback(f) => *feedback = Some(f),
                    Incoming::Response(r) if r.tid != req.tid => {
                        // A late reply to a request that timed out: its caller is gone.
                        *stale_replies += 1;
                        tracing::debug!("xarm: dropped a stale reply (tid {})", r.tid);
                    }
                    Incoming::Response(r) => {
                        if r.prot != req.prot {
                            return Err(protocol(&format!(
                                "protocol id {} where {} was sent",
                                r.prot, req.prot
                            )));
                        }
                        if r.funcode != req.funcode {
                            return Err(protocol(&format!("funcode {} in the reply", r.funcode)));
                        }
                        return Ok(r);
                    }
                }
            }
            let n = stream
                .read(buf)
                .await
                .map_err(|e| RobotError::Disconnected(format!("command socket: {e}")))?;
            if n == 0 {
                let mid = match reader.buffered() {
                    0 => String::new(),
                    b => format!(" in the middle of a frame ({b} bytes of it arrived)"),
                };
                return Err(RobotError::Disconnected(format!(
                    "command socket closed by the controller{mid}"
                )));
            }
            reader.push(&buf[..n]);
        }
    }
}

/// A connected xArm controller.
pub struct XarmClient {
    link: CommandLink,
    rt: ReportStream<RtReport>,
    rich: ReportStream<RichReport>,
    recording: SharedRecording,
    version: FirmwareVersion,
    version_text: String,
    settings: XarmSettings,
    pub(super) gripper: GripperConfig,
    /// Joints the controller reports (the version string's axis count).
    dof: usize,
    pub(super) gripper_bus_checked: bool,
    pub(super) gripper_enabled: bool,
    /// How long a servo setpoint may go unanswered (the servo loop's watchdog period, set by
    /// `XarmRobot`); `None`: the command timeout.
    pub(super) servo_reply_timeout: Option<Duration>,
}

fn at_least(v: &FirmwareVersion, min: (u32, u32, u32)) -> bool {
    (v.major, v.minor, v.patch) >= min
}

async fn open(settings: &XarmSettings, port: u16, what: &str) -> Result<TcpStream, RobotError> {
    let n = &settings.network;
    let addr = format!("{}:{port}", n.address);
    let stream = tokio::time::timeout(n.connect_timeout(), TcpStream::connect(&addr))
        .await
        .map_err(|_| RobotError::Timeout(n.connect_timeout_s))?
        .map_err(|e| {
            RobotError::Disconnected(format!("cannot connect to the {what} at {addr}: {e}"))
        })?;
    // Servo setpoints are small frames sent at up to 250 Hz: Nagle would batch them.
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// The controller's error as a typed robot error, with its meaning.
pub(crate) fn controller_error(e: ControllerError) -> RobotError {
    RobotError::Controller {
        code: i32::from(e.code()),
        detail: e.meaning().to_string(),
    }
}

/// A controller warning (a refused command) as a typed robot error.
pub(crate) fn controller_warning(w: ControllerWarning) -> RobotError {
    RobotError::Controller {
        code: i32::from(w.code()),
        detail: format!("warning {w} (the command was refused)"),
    }
}

/// The actual joints (rad) of a real-time report.
fn rt_joints(r: &RtReport, dof: usize) -> Vec<f64> {
    r.actual_joints.position[..dof]
        .iter()
        .map(|v| f64::from(*v))
        .collect()
}

impl XarmClient {
    /// Connects the command socket and both report streams, asks the firmware version
    /// (GET_VERSION, as the SDK's connect does, docs/references.md §1), switches to protocol id 3
    /// where the firmware expects it, and waits for the first frame of each report stream.
    /// `gripper` (robot.toml) maps finger widths onto the gripper's pulses. Nothing is enabled or
    /// moved.
    pub async fn connect(
        settings: &XarmSettings,
        gripper: &GripperConfig,
    ) -> Result<XarmClient, RobotError> {
        let n = &settings.network;
        let command = open(settings, n.command_port, "command socket").await?;
        let rt_stream = open(
            settings,
            n.realtime_report_port,
            "real-time report (firmware >= 2.1.0)",
        )
        .await?;
        let rich_stream = open(settings, n.state_report_port, "state report").await?;
        let mut link = CommandLink::new(command);
        let reply = link
            .transact(
                Command::GetVersion.request(1, prot::PRIVATE),
                n.command_timeout(),
            )
            .await?;
        let text = match reply.reply() {
            Ok(Reply::Version(t)) => t,
            Ok(other) => {
                return Err(RobotError::Protocol(format!(
                    "GET_VERSION answered {other:?}"
                )))
            }
            Err(e) => return Err(RobotError::Protocol(format!("GET_VERSION reply: {e}"))),
        };
        let version = parse_version(&text).map_err(|e| {
            RobotError::Protocol(format!("version string `{text}` does not parse: {e}"))
        })?;
        link.tid = 1;
        if at_least(&version, PROT_V3_FROM) {
            link.prot = prot::PRIVATE_V3;
        }
        let dof = (version.axis as usize).min(7);
        let recording: SharedRecording = Arc::new(Mutex::new(Recording::default()));
        let rec = recording.clone();
        let rt = ReportStream::spawn(
            format!("real-time report (port {})", n.realtime_report_port),
            rt_stream,
            n.report_timeout(),
            FrameKind {
                decode: RtReport::decode,
                stamp: |r| Some(r.timestamp_us),
            },
            move |r: &RtReport| {
                let mut rec = lock(&rec);
                let width = rec.gripper_width;
                rec.push(JointState {
                    stamp_s: Some(r.timestamp_us as f64 * 1e-6),
                    q: rt_joints(r, dof),
                    gripper_width: width,
                });
            },
        );
        let rich = ReportStream::spawn(
            format!("state report (port {})", n.state_report_port),
            rich_stream,
            n.report_timeout(),
            FrameKind {
                decode: RichReport::decode,
                stamp: |_| None,
            },
            |_| {},
        );
        let mut client = XarmClient {
            link,
            rt,
            rich,
            recording,
            version,
            version_text: text,
            settings: settings.clone(),
            gripper: *gripper,
            dof,
            gripper_bus_checked: false,
            gripper_enabled: false,
            servo_reply_timeout: None,
        };
        client.rt.first_frame().await?;
        client.rich.first_frame().await?;
        tracing::info!(
            "xarm: connected to {} (firmware {}, {} axes)",
            settings.network.address,
            client.version_text,
            client.dof
        );
        Ok(client)
    }

    /// The parsed GET_VERSION answer.
    pub fn version(&self) -> &FirmwareVersion {
        &self.version
    }

    /// The GET_VERSION text as the controller sent it.
    pub fn version_text(&self) -> &str {
        &self.version_text
    }

    /// Arm joints the controller drives.
    pub fn dof(&self) -> usize {
        self.dof
    }

    pub(crate) fn settings(&self) -> &XarmSettings {
        &self.settings
    }

    /// The newest real-time report (250 Hz): state, mode, target and actual joints and TCP.
    pub fn latest_rt(&self) -> Option<Arc<RtReport>> {
        self.rt.latest()
    }

    /// The newest rich report (5 Hz): error and warning codes, enable and brake bits.
    pub fn latest_rich(&self) -> Option<Arc<RichReport>> {
        self.rich.latest()
    }

    /// The newest feedback frame (0xFF) the controller sent on the command socket.
    pub fn last_feedback(&self) -> Option<Feedback> {
        self.link.feedback
    }

    /// Replies dropped because they answered an earlier request (one that timed out).
    pub fn stale_replies(&self) -> u64 {
        self.link.stale_replies
    }

    /// `Ok` while the command socket and both report streams work.
    pub(crate) fn check_links(&self) -> Result<(), RobotError> {
        self.link.check()?;
        self.rt.check()?;
        self.rich.check()
    }

    /// `e`, or — when the command socket is gone — the loss itself, naming `e`: whatever failed
    /// afterwards (a stop that could not be sent) follows from the loss.
    pub(crate) fn lost_link(&self, e: RobotError) -> RobotError {
        match (&self.link.lost, e) {
            (None, e) => e,
            (Some(_), e @ (RobotError::Disconnected(_) | RobotError::Protocol(_))) => e,
            (Some(l), e) => match l.error() {
                RobotError::Protocol(w) => RobotError::Protocol(format!("{w} ({e})")),
                RobotError::Disconnected(w) => RobotError::Disconnected(format!("{w} ({e})")),
                other => other,
            },
        }
    }

    /// One request with the command timeout: the reply's status byte and typed payload.
    pub async fn request(&mut self, cmd: Command) -> Result<(Status, Reply), RobotError> {
        let timeout = self.settings.network.command_timeout();
        self.request_within(cmd, timeout).await
    }

    async fn request_within(
        &mut self,
        cmd: Command,
        timeout: Duration,
    ) -> Result<(Status, Reply), RobotError> {
        let tid = self.link.tid % u16::MAX + 1;
        self.link.tid = tid;
        let req = cmd.request(tid, self.link.prot);
        let resp = self.link.transact(req, timeout).await?;
        match resp.reply() {
            Ok(r) => Ok((resp.status, r)),
            Err(e) => {
                let why = format!("reply to funcode {}: {e}", resp.funcode);
                self.link.lose(Lost::Protocol(why.clone()));
                Err(RobotError::Protocol(why))
            }
        }
    }

    fn unexpected(&mut self, what: &str, reply: &Reply) -> RobotError {
        let why = format!("{what} answered {reply:?}");
        self.link.lose(Lost::Protocol(why.clone()));
        RobotError::Protocol(why)
    }

    // -----------------------------------------------------------------------------------------
    // State, mode, errors

    /// CLEAN_ERR and CLEAN_WAR: clears the controller's error and warning. The arm stays
    /// stopped until `start`.
    pub async fn clean_error(&mut self) -> Result<(), RobotError> {
        self.request(Command::CleanError).await?;
        self.clean_warn().await
    }

    pub(crate) async fn clean_warn(&mut self) -> Result<(), RobotError> {
        self.request(Command::CleanWarn).await?;
        Ok(())
    }

    /// MOTION_EN for all joints (axis 8). Slower to answer than other commands
    /// (`motion_enable_timeout_s`).
    pub async fn motion_enable(&mut self, enable: bool) -> Result<(), RobotError> {
        let timeout = self.settings.network.motion_enable_timeout();
        self.request_within(Command::MotionEnable { axis: 8, enable }, timeout)
            .await?;
        Ok(())
    }

    /// SET_MODE. The controller then waits for SET_STATE 0 (`start`).
    pub async fn set_mode(&mut self, mode: Mode) -> Result<(), RobotError> {
        let detection = at_least(&self.version, SET_MODE_DETECTION_FROM).then_some(0);
        self.request(Command::SetMode {
            mode: mode as u8,
            detection,
        })
        .await?;
        Ok(())
    }

    /// SET_STATE with one of `proto::set_state`.
    pub async fn set_state(&mut self, state: u8) -> Result<(), RobotError> {
        self.request(Command::SetState(state)).await?;
        Ok(())
    }

    /// GET_STATE.
    pub async fn state(&mut self) -> Result<RobotState, RobotError> {
        Ok(self.state_with_status().await?.1)
    }

    async fn state_with_status(&mut self) -> Result<(Status, RobotState), RobotError> {
        let (status, reply) = self.request(Command::GetState).await?;
        match reply {
            Reply::State(s) => match RobotState::from_u8(s) {
                Some(state) => Ok((status, state)),
                None => {
                    let why = format!("GET_STATE answered state {s}, which does not exist");
                    self.link.lose(Lost::Protocol(why.clone()));
                    Err(RobotError::Protocol(why))
                }
            },
            other => Err(self.unexpected("GET_STATE", &other)),
        }
    }

    /// GET_CMDNUM: motions queued or running.
    pub(crate) async fn cmdnum(&mut self) -> Result<u16, RobotError> {
        match self.request(Command::GetCmdnum).await?.1 {
            Reply::Cmdnum(n) => Ok(n),
            other => Err(self.unexpected("GET_CMDNUM", &other)),
        }
    }

    /// SET_STATE 0, then waits (bounded by the command timeout) until the controller leaves the
    /// stopped / configuration-changed states; if it does not, the reason as a typed error.
    pub async fn start(&mut self) -> Result<(), RobotError> {
        self.set_state(set_state::START).await?;
        let deadline = Instant::now() + self.settings.network.command_timeout();
        loop {
            let (status, state) = self.state_with_status().await?;
            if !state.not_ready() {
                return Ok(());
            }
            if status.error() || Instant::now() >= deadline {
                return Err(match self.fault().await? {
                    Some(e) => e,
                    None => RobotError::Stopped(format!(
                        "the controller stays in state {state:?} after SET_STATE 0 (are the \
                         motors enabled?)"
                    )),
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// GET_ERROR: the controller's error and warning, typed.
    pub async fn error_warn(
        &mut self,
    ) -> Result<(Option<ControllerError>, Option<ControllerWarning>), RobotError> {
        match self.request(Command::GetError).await?.1 {
            Reply::ErrorWarn { error, warn } => Ok((
                ControllerError::from_code(error),
                ControllerWarning::from_code(warn),
            )),
            other => Err(self.unexpected("GET_ERROR", &other)),
        }
    }

    /// The controller's error (or else its warning) as a typed error; `None` when it has
    /// neither. A warning is cleared once read: it refused one command and must not make the
    /// next one look refused too.
    pub(crate) async fn fault(&mut self) -> Result<Option<RobotError>, RobotError> {
        match self.error_warn().await? {
            (Some(e), _) => Ok(Some(controller_error(e))),
            (None, Some(w)) => {
                self.clean_warn().await?;
                Ok(Some(controller_warning(w)))
            }
            (None, None) => Ok(None),
        }
    }

    /// SET_STATE 4: stop now and drop every queued motion. On the command socket while it works;
    /// on a new connection when it is gone, garbled or its last request went unanswered (or this
    /// stop does).
    pub(crate) async fn stop(&mut self) -> Result<(), RobotError> {
        if self.link.lost.is_none() && !self.link.stalled {
            match self.set_state(set_state::STOP).await {
                Err(RobotError::Timeout(_)) => {}
                other => return other,
            }
        }
        self.stop_on_new_connection().await
    }

    /// SET_STATE 4 on a command connection of its own, closed afterwards; bounded by the connect
    /// and command timeouts.
    async fn stop_on_new_connection(&self) -> Result<(), RobotError> {
        let n = &self.settings.network;
        tracing::warn!("xarm: sending the stop on a new command connection");
        let stream = open(
            &self.settings,
            n.command_port,
            "command socket (for a stop)",
        )
        .await?;
        let mut link = CommandLink::new(stream);
        link.prot = self.link.prot;
        link.transact(
            Command::SetState(set_state::STOP).request(1, link.prot),
            n.command_timeout(),
        )
        .await
        .map(|_| ())
        .map_err(|e| match e {
            RobotError::Timeout(s) => RobotError::Stopped(format!(
                "a stop on a new command connection was not answered within {s:.1} s"
            )),
            e => e,
        })
    }

    /// Stops the arm (best effort) and returns `cause`; see `servo::stop_then`.
    pub(crate) async fn stop_then(&mut self, cause: RobotError) -> RobotError {
        let e = servo::stop_then(self, cause).await;
        self.lost_link(e)
    }

    /// Why a motion command with this reply status did not run, if it did not.
    async fn refusal(&mut self, status: Status) -> Option<RobotError> {
        if status.error() || status.warning() {
            match self.fault().await {
                Ok(Some(e)) => return Some(e),
                Ok(None) => {}
                Err(e) => return Some(e),
            }
        }
        if status.not_ready() {
            let state = self.latest_rt().map(|r| r.state);
            return Some(RobotError::Stopped(format!(
                "the controller discarded the motion: not ready (report state {state:?}); it \
                 needs enabled motors and SET_STATE 0, after CLEAN_ERR if it has an error"
            )));
        }
        None
    }

    // -----------------------------------------------------------------------------------------
    // Configuration

    /// SET_TCP_OFFSET: the controller's TCP in the flange frame, so its poses (GET_TCP_POSE,
    /// MOVE_LINE) refer to the fingertip like pointact's model.
    pub async fn set_tcp_offset(
        &mut self,
        flange_from_tcp: &Isometry3<f64>,
    ) -> Result<(), RobotError> {
        self.request(Command::SetTcpOffset(pose_to_wire(flange_from_tcp)))
            .await?;
        Ok(())
    }

    /// SET_LOAD_PARAM: payload mass (kg) and centre of mass in the flange frame (m), so the
    /// controller's collision detection expects the gripper's weight.
    pub async fn set_load(&mut self, mass_kg: f64, com_m: [f64; 3]) -> Result<(), RobotError> {
        self.request(Command::SetLoad {
            mass: mass_kg as f32,
            com: com_m.map(|v| (v * 1000.0) as f32),
        })
        .await?;
        Ok(())
    }

    // -----------------------------------------------------------------------------------------
    // Reads

    /// GET_JOINT_POS: joint angles (rad), `dof` of them.
    pub async fn joint_positions(&mut self) -> Result<Vec<f64>, RobotError> {
        match self.request(Command::GetJointPos).await?.1 {
            Reply::Joints(j) => Ok(j[..self.dof].iter().map(|v| f64::from(*v)).collect()),
            other => Err(self.unexpected("GET_JOINT_POS", &other)),
        }
    }

    /// GET_TCP_POSE: `base_from_tcp` (m) of the controller's TCP (see `set_tcp_offset`).
    pub async fn tcp_pose(&mut self) -> Result<Isometry3<f64>, RobotError> {
        match self.request(Command::GetTcpPose).await?.1 {
            Reply::Pose(p) => Ok(pose_from_wire(&p)),
            other => Err(self.unexpected("GET_TCP_POSE", &other)),
        }
    }

    // -----------------------------------------------------------------------------------------
    // Planned moves (position mode 0)

    /// MOVE_JOINT to `q` (rad) at the settings' joint speed; with `wait`, returns when the arm
    /// has arrived.
    pub async fn move_joint(&mut self, q: &[f64], wait: bool) -> Result<(), RobotError> {
        self.check_dof(q)?;
        let m = &self.settings.motion;
        let (v, a) = (m.joint_speed, m.joint_acceleration);
        let cmd = Command::MoveJoint(MoveJoint {
            joints: joints_to_wire(q),
            speed: v as f32,
            acc: a as f32,
            mvtime: 0.0,
            only_check: None,
        });
        // The move's bound: the joint that travels furthest, on a trapezoid.
        let estimate = match self.latest_rt() {
            Some(r) => {
                let far = q
                    .iter()
                    .zip(&r.actual_joints.position)
                    .fold(0.0f64, |m, (t, c)| m.max((t - f64::from(*c)).abs()));
                far / v + v / a
            }
            None => std::f64::consts::TAU / v + v / a,
        };
        self.motion(cmd, wait, estimate).await
    }

    /// MOVE_LINE: a straight TCP line to `base_from_tcp` (m) at the settings' TCP speed.
    pub async fn move_line(&mut self, pose: &Isometry3<f64>, wait: bool) -> Result<(), RobotError> {
        let m = &self.settings.motion;
        let (v, a) = (m.tcp_speed, m.tcp_acceleration);
        let mut line = MoveLine::to(pose_to_wire(pose), (v * 1000.0) as f32, (a * 1000.0) as f32);
        if !at_least(&self.version, MOVE_LINE_COMMON_FROM) {
            line.common = None;
            line.only_check = None;
        }
        let from = self.tcp_pose().await?;
        let estimate = line_length(&from, pose) / v + v / a;
        self.motion(Command::MoveLine(line), wait, estimate).await
    }

    /// MOVE_RELATIVE (83): a straight TCP line by `translation` (m, base frame) with
    /// roll/pitch/yaw increments `rpy` (rad) added to the current orientation.
    pub async fn move_relative(
        &mut self,
        translation: Vector3<f64>,
        rpy: [f64; 3],
        wait: bool,
    ) -> Result<(), RobotError> {
        let m = &self.settings.motion;
        let (v, a) = (m.tcp_speed, m.tcp_acceleration);
        let t = translation * 1000.0;
        let cmd = Command::MoveRelative(MoveRelative::linear(
            [
                t.x as f32,
                t.y as f32,
                t.z as f32,
                rpy[0] as f32,
                rpy[1] as f32,
                rpy[2] as f32,
            ],
            (v * 1000.0) as f32,
            (a * 1000.0) as f32,
        ));
        let turn = rpy.iter().map(|r| r.abs()).sum::<f64>();
        let length = translation.norm().max(turn * ROTATION_LENGTH_M_PER_RAD);
        self.motion(cmd, wait, length / v + v / a).await
    }

    /// Sends a planned motion; on any refusal or fault, stops the arm and returns the error.
    async fn motion(
        &mut self,
        cmd: Command,
        wait: bool,
        estimate_s: f64,
    ) -> Result<(), RobotError> {
        // A move queued earlier without wait may still be running.
        if let Err(e) = self.check_links() {
            return Err(self.stop_then(e).await);
        }
        let status = match self.request(cmd).await {
            Ok((status, _)) => status,
            Err(e) => return Err(self.stop_then(e).await),
        };
        if let Some(e) = self.refusal(status).await {
            return Err(self.stop_then(e).await);
        }
        if wait {
            self.wait_motion(self.motion_timeout(estimate_s)).await?;
        }
        Ok(())
    }

    /// How long to wait for a motion the ideal trapezoid says takes `estimate_s`: twice that
    /// (the controller slows lines where a joint would be too fast, and clamps speeds) plus one
    /// command timeout for it to start.
    pub(crate) fn motion_timeout(&self, estimate_s: f64) -> Duration {
        let s = 2.0 * estimate_s.max(0.0) + self.settings.network.command_timeout_s;
        Duration::from_secs_f64(s)
    }

    /// Polls GET_STATE (as the SDK's `wait_move`) until the controller is idle with nothing
    /// queued on two polls in a row. A controller error, a stop, a dead link or `timeout` stops
    /// the arm and is returned.
    pub(crate) async fn wait_motion(&mut self, timeout: Duration) -> Result<(), RobotError> {
        let deadline = Instant::now() + timeout;
        let mut settled = 0;
        loop {
            match self.poll_idle().await {
                Ok(true) => settled += 1,
                Ok(false) => settled = 0,
                Err(e) => return Err(self.stop_then(e).await),
            }
            if settled >= SETTLED_POLLS {
                return Ok(());
            }
            if Instant::now() + POLL > deadline {
                let e = RobotError::Timeout(timeout.as_secs_f64());
                return Err(self.stop_then(e).await);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// One poll of a wait: `true` when idle, `false` while moving, `Err` when the motion ended
    /// in a fault.
    async fn poll_idle(&mut self) -> Result<bool, RobotError> {
        self.check_links()?;
        let (status, state) = self.state_with_status().await?;
        if status.error() {
            if let Some(e) = self.fault().await? {
                return Err(e);
            }
        }
        match state {
            RobotState::Starting
            | RobotState::Moving
            | RobotState::Decelerating
            | RobotState::Paused => Ok(false),
            RobotState::Ready => Ok(self.cmdnum().await? == 0),
            RobotState::Stopped | RobotState::ConfigChanged => Err(match self.fault().await? {
                Some(e) => e,
                None => RobotError::Stopped(format!(
                    "the controller stopped ({state:?}) before the motion finished"
                )),
            }),
        }
    }

    fn check_dof(&self, q: &[f64]) -> Result<(), RobotError> {
        if q.len() != self.dof || q.iter().any(|v| !v.is_finite()) {
            return Err(RobotError::Config(format!(
                "a joint target needs {} finite angles, got {q:?}",
                self.dof
            )));
        }
        Ok(())
    }

    // -----------------------------------------------------------------------------------------
    // Servo streaming (mode 1)

    /// MOVE_SERVO_CART: the newest TCP target `base_from_tcp` (m), applied at once (servo mode).
    pub async fn servo_cartesian(&mut self, pose: &Isometry3<f64>) -> Result<(), RobotError> {
        let m = &self.settings.motion;
        let cmd = Command::ServoCartesian(ServoCartesian {
            pose: pose_to_wire(pose),
            speed: (m.tcp_speed * 1000.0) as f32,
            acc: (m.tcp_acceleration * 1000.0) as f32,
            coord: Coord::Base,
        });
        match self.servo_target(cmd).await {
            Ok(()) => Ok(()),
            Err(e) => Err(self.stop_then(e).await),
        }
    }

    /// A servo joint target without the stop: the servo loop stops the arm itself.
    async fn servo_joints_target(&mut self, q: &[f64]) -> Result<(), RobotError> {
        self.check_dof(q)?;
        let m = &self.settings.motion;
        // Speed and acceleration are reserved in servo mode; the SDK sends its defaults
        // (the recorded servoj frame, docs/references.md §2), and so do we.
        let cmd = Command::ServoJoint(ServoJoint {
            joints: joints_to_wire(q),
            speed: m.joint_speed as f32,
            acc: m.joint_acceleration as f32,
            mvtime: 0.0,
        });
        self.servo_target(cmd).await
    }

    async fn servo_target(&mut self, cmd: Command) -> Result<(), RobotError> {
        self.check_links()?;
        let (status, _) = match self.servo_reply_timeout {
            Some(bound) => self.request_within(cmd, bound).await.map_err(|e| match e {
                RobotError::Timeout(waited_s) => RobotError::LinkStalled { waited_s },
                e => e,
            })?,
            None => self.request(cmd).await?,
        };
        match self.refusal(status).await {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Waits (at most `timeout`) until the real-time report's actual joints are within `tol`
    /// (rad) of `q`; returns them as last seen. Used before leaving servo mode, which stops the
    /// arm where it is.
    pub(crate) async fn settle(
        &mut self,
        q: &[f64],
        tol: f64,
        timeout: Duration,
    ) -> Result<Vec<f64>, RobotError> {
        let deadline = Instant::now() + timeout;
        loop {
            self.check_links()?;
            let now = self
                .latest_rt()
                .map(|r| rt_joints(&r, self.dof))
                .unwrap_or_default();
            let near = now.len() == q.len() && now.iter().zip(q).all(|(a, b)| (a - b).abs() <= tol);
            if near || Instant::now() >= deadline {
                return Ok(now);
            }
            // Half a real-time period.
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    // -----------------------------------------------------------------------------------------
    // Recording (`Robot::take_states`)

    /// Starts keeping every real-time state until `stop_recording`.
    pub(crate) fn start_recording(&mut self) {
        lock(&self.recording).on = true;
    }

    /// Ends the recording with one more state: the newest real-time joints with the newest
    /// gripper width, so the last state shows where the command left the arm and the fingers
    /// (a width read after the last real-time frame would otherwise be missing).
    pub(crate) fn stop_recording(&mut self) {
        let latest = self.latest_rt();
        let mut rec = lock(&self.recording);
        if let Some(r) = latest.filter(|_| rec.on) {
            let state = JointState {
                stamp_s: Some(r.timestamp_us as f64 * 1e-6),
                q: rt_joints(&r, self.dof),
                gripper_width: rec.gripper_width,
            };
            rec.push(state);
        }
        rec.on = false;
    }

    /// The states recorded so far, oldest first, and forgets them.
    pub(crate) fn take_states(&mut self) -> Vec<JointState> {
        let mut r = lock(&self.recording);
        if r.dropped > 0 {
            tracing::warn!(
                "xarm: {} real-time states were not kept (recording full)",
                r.dropped
            );
            r.dropped = 0;
        }
        std::mem::take(&mut r.states)
    }

    /// The finger width recorded with the next states (m).
    pub(super) fn record_gripper_width(&mut self, width: f64) {
        lock(&self.recording).gripper_width = width;
    }
}

/// Path length of a line for the timeout estimate (m): a rotation counts as geometry's
/// equivalent translation.
fn line_length(from: &Isometry3<f64>, to: &Isometry3<f64>) -> f64 {
    let t = (to.translation.vector - from.translation.vector).norm();
    let r = from.rotation.angle_to(&to.rotation);
    t.max(r * ROTATION_LENGTH_M_PER_RAD)
}

/// The servo seam: `servo::follow` streams a checked trajectory through this.
impl ServoSink for XarmClient {
    async fn send(&mut self, q: &[f64]) -> Result<(), RobotError> {
        self.servo_joints_target(q).await
    }

    async fn stop(&mut self) -> Result<(), RobotError> {
        XarmClient::stop(self).await
    }
}
