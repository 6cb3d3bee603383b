//! The xArm client and `XarmRobot` against the in-process controller emulator (and, for faults,
//! small fake servers and a logging proxy): connect, bring-up, planned moves with wait, read-back
//! against our own FK, a refused target and its recovery, the gripper through the RS-485 tunnel,
//! servo streaming of a checked trajectory; then a dropped link, a controller error during
//! motion, a silent report stream and malformed frames, each a typed error with the arm stopped.
//!
//! Every socket is on 127.0.0.1 with an ephemeral port. The emulator runs on its own thread and
//! runtime (`EmulatorThread`) so its 250 Hz clock does not compete with the client's tasks. Every test body runs
//! under `guard` so a hang fails the test instead of stalling the suite.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::settings::XarmSettings;
use crate::xarm::emulator::{Controller, EmulatorOptions, EmulatorThread, KinematicArm};
use crate::xarm::proto::{
    reg, set_state, tool_reg, Command, Feedback, FrameReader, Mode, Reply, Request, Response,
    RobotState, RtReport, Status,
};
use crate::xarm::{XarmClient, XarmRobot};
use crate::{settings, Robot, RobotError};
use pointact_core::kinematics::RobotModel;
use pointact_core::nalgebra::{Isometry3, Translation3, Vector3};
use pointact_core::planning::{limit_tool_speed, JointPath, Trajectory};
use pointact_core::safety::{CheckedTrajectory, SafetyConfig, SafetyGate};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const VERSION: &str = "6,6,XI1304,AC1303,v2.3.0";

pub(super) fn model() -> Arc<RobotModel> {
    Arc::new(RobotModel::builtin("xarm6").unwrap())
}

pub(super) fn home() -> Vec<f64> {
    model().home().to_vec()
}

/// Runs a test body on a two-worker runtime, failing (not hanging) after 30 s.
pub(super) fn guard<F: Future<Output = ()>>(f: F) {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            tokio::time::timeout(Duration::from_secs(30), f)
                .await
                .expect("the test hung");
        });
}

/// The emulator on its own thread (`EmulatorThread`), with the arm starting at `q`.
pub(super) struct Emu {
    pub(super) command: u16,
    pub(super) report: u16,
    pub(super) rt: u16,
    pub(super) controller: Arc<Mutex<Controller>>,
    _thread: EmulatorThread,
}

impl Emu {
    pub(super) fn start(q: Vec<f64>) -> Emu {
        let options = EmulatorOptions {
            command_port: 0,
            report_port: 0,
            rt_port: 0,
            ..EmulatorOptions::default()
        };
        let t = EmulatorThread::start(options, Box::new(KinematicArm::new(model(), q))).unwrap();
        let [command, report, rt] = t.ports;
        Emu {
            command,
            report,
            rt,
            controller: t.controller.clone(),
            _thread: t,
        }
    }

    pub(super) fn settings(&self) -> XarmSettings {
        settings_for(self.command, self.report, self.rt)
    }

    pub(super) fn state(&self) -> (RobotState, u8, (u8, u8)) {
        let c = self.controller.lock().unwrap();
        (c.state(), c.mode(), c.codes())
    }

    pub(super) fn joints(&self) -> Vec<f64> {
        self.controller.lock().unwrap().joints().to_vec()
    }
}

/// The shipped xarm6 settings pointed at test ports, with short timeouts so faults surface fast.
pub(super) fn settings_for(command: u16, report: u16, rt: u16) -> XarmSettings {
    let mut s = settings::builtin("xarm6")
        .unwrap()
        .as_xarm()
        .unwrap()
        .clone();
    s.network.command_port = command;
    s.network.state_report_port = report;
    s.network.realtime_report_port = rt;
    s.network.connect_timeout_s = 1.0;
    s.network.command_timeout_s = 1.0;
    s.network.report_timeout_s = 0.5;
    s.gripper.motion_timeout_s = 3.0;
    s
}

async fn client(settings: &XarmSettings) -> Result<XarmClient, RobotError> {
    XarmClient::connect(settings, &model().config.gripper).await
}

pub(super) fn checked(from: &[f64], to: &[f64], robot_at: &[f64]) -> CheckedTrajectory {
    let m = model();
    let lim = &m.config.limits;
    // Slow (0.4 rad/s): every servo step stays far below the emulator's speed check even when
    // this loaded machine delivers two setpoints close together.
    let t = Trajectory::time_parameterize(
        JointPath {
            waypoints: vec![from.to_vec(), to.to_vec()],
        },
        &vec![0.4; from.len()],
        &lim.joint_acceleration,
    )
    .unwrap();
    let t = limit_tool_speed(t, &m, lim.cartesian_speed).unwrap();
    SafetyGate::new(&m, SafetyConfig::default())
        .check(t, robot_at, 1.0, &[])
        .unwrap()
}

pub(super) fn max_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .fold(0.0f64, |m, (x, y)| m.max((x - y).abs()))
}

fn assert_pose_near(a: &Isometry3<f64>, b: &Isometry3<f64>, tol_m: f64, tol_rad: f64) {
    let dt = (a.translation.vector - b.translation.vector).norm();
    let dr = a.rotation.angle_to(&b.rotation);
    assert!(dt <= tol_m && dr <= tol_rad, "{a} vs {b}: {dt} m, {dr} rad");
}

// ---------------------------------------------------------------------------------------------
// A proxy on the command socket: logs every request.

struct Proxy {
    port: u16,
    log: Arc<Mutex<Vec<Request>>>,
}

impl Proxy {
    /// Forwards one client to `upstream` and logs its requests (faults of every kind on the
    /// link: `super::xarm_link_faults`).
    async fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let log = Arc::new(Mutex::new(Vec::new()));
        let log2 = log.clone();
        tokio::spawn(async move {
            let (down, _) = listener.accept().await.unwrap();
            let up = TcpStream::connect(("127.0.0.1", upstream)).await.unwrap();
            let (mut down_rd, mut down_wr) = down.into_split();
            let (mut up_rd, mut up_wr) = up.into_split();
            let back = tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                while let Ok(n) = up_rd.read(&mut buf).await {
                    if n == 0 || down_wr.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
            let mut reader = FrameReader::new();
            let mut buf = vec![0u8; 4096];
            'fwd: while let Ok(n) = down_rd.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                reader.push(&buf[..n]);
                while let Ok(Some(frame)) = reader.next_frame() {
                    log2.lock().unwrap().push(Request::decode(&frame).unwrap());
                    if up_wr.write_all(&frame).await.is_err() {
                        break 'fwd;
                    }
                }
            }
            back.abort();
        });
        Proxy { port, log }
    }

    fn funcodes(&self) -> Vec<(u8, Vec<u8>)> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .map(|r| (r.funcode, r.params.clone()))
            .collect()
    }

    /// Index of the last request with `funcode`.
    fn last(&self, funcode: u8) -> Option<usize> {
        self.funcodes().iter().rposition(|(f, _)| *f == funcode)
    }

    /// Whether a SET_STATE 4 (stop) came after the request at `index`.
    fn stopped_after(&self, index: usize) -> bool {
        self.funcodes()[index + 1..]
            .iter()
            .any(|(f, p)| *f == reg::SET_STATE && p == &[set_state::STOP])
    }
}

// ---------------------------------------------------------------------------------------------
// The scenario

#[test]
fn connect_bring_up_and_joint_move_with_wait_read_back_against_our_fk() {
    let emu = Emu::start(vec![0.0; 6]);
    guard(async {
        let m = model();
        let mut c = client(&emu.settings()).await.unwrap();
        assert_eq!(c.version_text(), VERSION);
        assert_eq!((c.version().axis, c.version().major), (6, 2));
        assert_eq!(c.dof(), 6);
        // Power-on: stopped until enabled and started (UFACTORY
        // `support_articles/faq/robot-state-and-mode-explanation.md`; docs/references.md §2).
        assert_eq!(c.state().await.unwrap(), RobotState::Stopped);
        c.clean_error().await.unwrap();
        c.motion_enable(true).await.unwrap();
        assert_eq!(c.state().await.unwrap(), RobotState::ConfigChanged);
        c.set_mode(Mode::Position).await.unwrap();
        c.set_tcp_offset(&m.tip_from_flange()).await.unwrap();
        c.set_load(0.82, [0.0, 0.0, 0.048]).await.unwrap();
        c.start().await.unwrap();
        assert_eq!(c.state().await.unwrap(), RobotState::Ready);
        assert_eq!(c.error_warn().await.unwrap(), (None, None));

        let target = home();
        c.move_joint(&target, true).await.unwrap();
        // The wait returned only once the arm arrived.
        assert!(max_diff(&emu.joints(), &target) < 1e-6);
        let q = c.joint_positions().await.unwrap();
        assert!(max_diff(&q, &target) < 1e-5, "{q:?}");
        let pose = c.tcp_pose().await.unwrap();
        assert_pose_near(&pose, &m.fk(&q).unwrap(), 1e-4, 1e-4);
        // The real-time stream shows the same arm.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let rt = c.latest_rt().unwrap();
        let rt_q: Vec<f64> = rt.actual_joints.position[..6]
            .iter()
            .map(|v| f64::from(*v))
            .collect();
        assert!(max_diff(&rt_q, &target) < 1e-5);
        assert_eq!(rt.mode, Mode::Position as u8);
        assert!(c.latest_rich().is_some());
    });
}

#[test]
fn absolute_and_relative_cartesian_moves_end_where_asked() {
    let emu = Emu::start(home());
    guard(async {
        let m = model();
        let mut robot = XarmRobot::connect(m.clone(), &emu.settings())
            .await
            .unwrap();
        let c = robot.client();
        let start = c.tcp_pose().await.unwrap();
        assert_pose_near(&start, &m.fk(&home()).unwrap(), 1e-4, 1e-4);

        let target =
            Isometry3::from_parts(Translation3::new(0.04, 0.03, -0.05), Default::default()) * start;
        c.move_line(&target, true).await.unwrap();
        let pose = c.tcp_pose().await.unwrap();
        assert_pose_near(&pose, &target, 5e-4, 2e-3);
        let q = c.joint_positions().await.unwrap();
        assert_pose_near(&m.fk(&q).unwrap(), &target, 5e-4, 2e-3);

        c.move_relative(Vector3::new(0.0, -0.02, 0.03), [0.0; 3], true)
            .await
            .unwrap();
        let after = c.tcp_pose().await.unwrap();
        let moved = after.translation.vector - pose.translation.vector;
        assert!(
            (moved - Vector3::new(0.0, -0.02, 0.03)).norm() < 5e-4,
            "{moved}"
        );
        assert_eq!(emu.state().0, RobotState::Ready);
    });
}

#[test]
fn servo_cartesian_targets_are_followed_in_servo_mode() {
    let emu = Emu::start(home());
    guard(async {
        let m = model();
        let mut robot = XarmRobot::connect(m.clone(), &emu.settings())
            .await
            .unwrap();
        let c = robot.client();
        let start = c.tcp_pose().await.unwrap();
        c.set_mode(Mode::Servo).await.unwrap();
        c.start().await.unwrap();
        // 30 targets about 1 mm apart, one per 10 ms: about 0.1 m/s down and sideways.
        let mut target = start;
        for i in 1..=30 {
            let step = Vector3::new(0.0, 0.0005, -0.001) * f64::from(i);
            target = Isometry3::from_parts(Translation3::from(step), Default::default()) * start;
            c.servo_cartesian(&target).await.unwrap();
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let pose = c.tcp_pose().await.unwrap();
        assert_pose_near(&pose, &target, 5e-4, 2e-3);
        assert_eq!(emu.state().1, Mode::Servo as u8);
        assert_eq!(c.error_warn().await.unwrap(), (None, None));
    });
}

#[test]
fn an_unreachable_target_is_a_typed_error_with_a_stop_and_clean_error_recovers() {
    let emu = Emu::start(home());
    guard(async {
        let m = model();
        let proxy = Proxy::start(emu.command).await;
        let s = settings_for(proxy.port, emu.report, emu.rt);
        let mut robot = XarmRobot::connect(m.clone(), &s).await.unwrap();
        let c = robot.client();
        let far = Isometry3::from_parts(
            Translation3::new(1.5, 0.0, 0.3),
            c.tcp_pose().await.unwrap().rotation,
        );
        let err = c.move_line(&far, true).await.unwrap_err();
        assert!(
            matches!(&err, RobotError::Controller { code: 21, detail } if detail.contains("kinematic")),
            "{err}"
        );
        let line = proxy.last(reg::MOVE_LINE).unwrap();
        assert!(proxy.stopped_after(line), "{:?}", proxy.funcodes());
        assert_eq!(c.state().await.unwrap(), RobotState::Stopped);
        // Moves are refused until the error is cleaned.
        let refused = c.move_joint(&home(), true).await.unwrap_err();
        assert!(
            matches!(refused, RobotError::Controller { code: 21, .. }),
            "{refused}"
        );

        c.clean_error().await.unwrap();
        c.start().await.unwrap();
        assert_eq!(c.error_warn().await.unwrap(), (None, None));
        let mut goal = home();
        goal[0] += 0.2;
        c.move_joint(&goal, true).await.unwrap();
        assert!(max_diff(&c.joint_positions().await.unwrap(), &goal) < 1e-5);
    });
}

#[test]
fn gripper_enable_move_with_wait_and_read_back() {
    let emu = Emu::start(home());
    guard(async {
        let m = model();
        let gate = SafetyGate::new(&m, SafetyConfig::default());
        let mut robot = XarmRobot::connect(m.clone(), &emu.settings())
            .await
            .unwrap();
        // Someone re-bauded the tool bus (index 5 = 115200): the gripper no longer answers until
        // the client sets it back, as the SDK's baud check does.
        let c = robot.client();
        for (addr, value) in [
            (tool_reg::SET_BAUD_INDEX, 5.0),
            (tool_reg::SOFT_REBOOT, 1.0),
        ] {
            c.request(Command::TgpioWrite16 {
                host: 9,
                addr,
                value,
                extra: vec![],
            })
            .await
            .unwrap();
        }
        let open = m.config.gripper.open_width;
        assert!((robot.gripper_width().await.unwrap() - open).abs() < 1e-9);
        let baud = robot
            .client()
            .request(Command::TgpioRead16 {
                host: 9,
                addr: tool_reg::BAUD_INDEX,
            })
            .await
            .unwrap()
            .1;
        assert_eq!(baud, Reply::Register(11), "back at 2 Mbps");

        robot
            .set_gripper(gate.check_gripper(0.03).unwrap())
            .await
            .unwrap();
        assert!(robot.client().gripper_is_enabled());
        // The wait returned with the fingers there: 0.03 m is 296.5 → 297 pulses of 850.
        let pulses = robot.client().pulses_for_width(0.03);
        assert_eq!(pulses, 297);
        assert_eq!(emu.controller.lock().unwrap().gripper_position(), pulses);
        let width = robot.gripper_width().await.unwrap();
        assert!((width - 0.03).abs() < 1e-4, "{width}");
        assert_eq!(robot.client().gripper_error().await.unwrap(), 0);
        // The states recorded while the fingers moved carry the widths read.
        let states = robot.take_states();
        assert!(!states.is_empty());
        assert!((states.last().unwrap().gripper_width - width).abs() < 1e-3);

        robot
            .set_gripper(gate.check_gripper(open).unwrap())
            .await
            .unwrap();
        assert_eq!(emu.controller.lock().unwrap().gripper_position(), 850);
    });
}

#[test]
fn execute_streams_a_checked_trajectory_in_servo_mode_to_its_end() {
    let emu = Emu::start(home());
    guard(async {
        let m = model();
        let proxy = Proxy::start(emu.command).await;
        let s = settings_for(proxy.port, emu.report, emu.rt);
        let mut robot = XarmRobot::connect(m.clone(), &s).await.unwrap();
        let start = robot.joint_positions().await.unwrap();
        let mut goal = start.clone();
        goal[0] += 0.25;
        goal[2] -= 0.15;
        let t = checked(&start, &goal, &start);
        robot.execute(&t).await.unwrap();

        let q = robot.joint_positions().await.unwrap();
        assert!(max_diff(&q, &goal) < 1e-4, "{q:?}");
        // Back in position mode, ready, no error.
        assert_eq!(
            emu.state(),
            (RobotState::Ready, Mode::Position as u8, (0, 0))
        );
        // Every sample went out as a SERVOJ, in servo mode.
        let log = proxy.funcodes();
        let servo = log.iter().filter(|(f, _)| *f == reg::MOVE_SERVOJ).count();
        let samples = t.trajectory().samples(t.dt()).len();
        assert_eq!(servo, samples);
        let first = log
            .iter()
            .position(|(f, _)| *f == reg::MOVE_SERVOJ)
            .unwrap();
        let mode1 = log
            .iter()
            .position(|(f, p)| *f == reg::SET_MODE && p[0] == 1);
        assert!(mode1.is_some_and(|i| i < first));
        let stats = robot.last_servo_stats().unwrap();
        assert_eq!(stats.sent, samples);
        // The executed states: in time order, from the start to the end.
        let states = robot.take_states();
        assert!(states.len() > 10, "{}", states.len());
        let stamps: Vec<f64> = states.iter().map(|s| s.stamp_s.unwrap()).collect();
        assert!(stamps.windows(2).all(|w| w[1] >= w[0]));
        assert!(max_diff(&states[0].q, &start) < 0.05);
        assert!(max_diff(&states.last().unwrap().q, &goal) < 1e-3);
        assert!(robot.take_states().is_empty(), "taken states are forgotten");
    });
}

// ---------------------------------------------------------------------------------------------
// Faults

#[test]
fn a_controller_error_during_servo_motion_is_typed_and_the_arm_is_stopped() {
    let emu = Emu::start(home());
    guard(async {
        let m = model();
        let proxy = Proxy::start(emu.command).await;
        let s = settings_for(proxy.port, emu.report, emu.rt);
        let mut robot = XarmRobot::connect(m.clone(), &s).await.unwrap();
        // A trajectory checked against where the arm is *not*: its first setpoint is 0.3 rad
        // away, a step over the joints' speed limit, which the controller answers with C24.
        let mut elsewhere = home();
        elsewhere[0] += 0.3;
        let mut goal = elsewhere.clone();
        goal[0] += 0.1;
        let t = checked(&elsewhere, &goal, &elsewhere);
        let err = robot.execute(&t).await.unwrap_err();
        assert!(
            matches!(&err, RobotError::Controller { code: 24, detail } if detail.contains("speed")),
            "{err}"
        );
        let servo = proxy.last(reg::MOVE_SERVOJ).unwrap();
        assert!(proxy.stopped_after(servo), "{:?}", proxy.funcodes());
        assert_eq!(emu.state().0, RobotState::Stopped);
        assert!(
            max_diff(&emu.joints(), &home()) < 1e-6,
            "the arm did not jump"
        );
        // Recoverable: the bring-up again, then the arm moves.
        robot.startup().await.unwrap();
        let mut next = home();
        next[1] += 0.1;
        let t = checked(&home(), &next, &home());
        robot.execute(&t).await.unwrap();
    });
}

#[test]
fn a_report_stream_that_goes_silent_is_a_timeout_and_stops_the_arm() {
    let emu = Emu::start(home());
    guard(async {
        let m = model();
        let proxy = Proxy::start(emu.command).await;
        // A real-time stream that forwards the emulator's until told to go quiet (the socket
        // stays open: silence, not a close).
        let quiet = Arc::new(AtomicBool::new(false));
        let rt_port = stalling_stream(emu.rt, quiet.clone()).await;
        let s = settings_for(proxy.port, emu.report, rt_port);
        let mut robot = XarmRobot::connect(m.clone(), &s).await.unwrap();
        let start = home();
        let mut goal = start.clone();
        goal[0] += 0.5;
        let t = checked(&start, &goal, &start);
        let (result, ()) = tokio::join!(robot.execute(&t), async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            quiet.store(true, Ordering::SeqCst);
        });
        let err = result.unwrap_err();
        assert!(matches!(err, RobotError::Timeout(s) if s >= 0.5), "{err}");
        let servo = proxy.last(reg::MOVE_SERVOJ).unwrap();
        assert!(proxy.stopped_after(servo), "{:?}", proxy.funcodes());
        assert_eq!(emu.state().0, RobotState::Stopped);
        // Nothing else runs on a dead feed.
        let again = robot.joint_positions().await.unwrap_err();
        assert!(matches!(again, RobotError::Timeout(_)), "{again}");
    });
}

#[test]
fn a_report_stream_that_never_speaks_fails_the_connect_with_a_timeout() {
    let emu = Emu::start(home());
    guard(async {
        let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = silent.local_addr().unwrap().port();
        let held = tokio::spawn(async move {
            let (sock, _) = silent.accept().await.unwrap();
            tokio::time::sleep(Duration::from_secs(20)).await;
            drop(sock);
        });
        let err = client(&settings_for(emu.command, emu.report, port))
            .await
            .err()
            .expect("connect must fail");
        assert!(matches!(err, RobotError::Timeout(s) if s >= 0.5), "{err}");
        held.abort();
    });
}

/// Forwards the report stream at `upstream` to one client until `quiet` is set, then holds the
/// socket open and sends nothing.
async fn stalling_stream(upstream: u16, quiet: Arc<AtomicBool>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (mut down, _) = listener.accept().await.unwrap();
        let mut up = TcpStream::connect(("127.0.0.1", upstream)).await.unwrap();
        let mut buf = vec![0u8; 8192];
        while let Ok(n) = up.read(&mut buf).await {
            if n == 0 || quiet.load(Ordering::SeqCst) {
                break;
            }
            if down.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        tokio::time::sleep(Duration::from_secs(20)).await;
        drop(down);
    });
    port
}

// ---------------------------------------------------------------------------------------------
// Malformed frames: a fake command socket scripted per request (the emulator serves the reports)

/// What the fake controller does with a request.
enum Answer {
    Send(Vec<u8>),
    /// Sends the bytes, then closes the connection.
    SendAndClose(Vec<u8>),
}

/// Serves one command connection: `answer` gets each request and says what to send back.
async fn fake_controller(mut answer: impl FnMut(&Request) -> Answer + Send + 'static) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (mut sock, _) = listener.accept().await.unwrap();
        let mut reader = FrameReader::new();
        let mut buf = vec![0u8; 4096];
        loop {
            let n = match sock.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            reader.push(&buf[..n]);
            while let Ok(Some(frame)) = reader.next_frame() {
                let req = Request::decode(&frame).unwrap();
                let (bytes, close) = match answer(&req) {
                    Answer::Send(b) => (b, false),
                    Answer::SendAndClose(b) => (b, true),
                };
                if sock.write_all(&bytes).await.is_err() || close {
                    return;
                }
            }
        }
    });
    port
}

fn reply(req: &Request, payload: Reply) -> Vec<u8> {
    Response::to(req, Status::OK, payload.encode_payload())
        .encode()
        .unwrap()
}

fn version(req: &Request) -> Vec<u8> {
    reply(req, Reply::Version(VERSION.into()))
}

async fn connect_to_fake(
    emu: &Emu,
    answer: impl FnMut(&Request) -> Answer + Send + 'static,
) -> Result<XarmClient, RobotError> {
    let port = fake_controller(answer).await;
    client(&settings_for(port, emu.report, emu.rt)).await
}

#[test]
fn malformed_and_truncated_command_frames_are_typed_errors() {
    let emu = Emu::start(home());
    guard(async {
        // A header that declares an empty body.
        let err = connect_to_fake(&emu, |r| {
            let mut b = version(r);
            b.truncate(6);
            b[4] = 0;
            b[5] = 0;
            Answer::Send(b)
        })
        .await
        .err()
        .unwrap();
        assert!(matches!(err, RobotError::Protocol(_)), "{err}");

        // A GET_VERSION reply whose payload is 3 bytes, not 40.
        let err = connect_to_fake(&emu, |r| Answer::Send(reply(r, Reply::State(2))))
            .await
            .err()
            .unwrap();
        assert!(
            matches!(&err, RobotError::Protocol(w) if w.contains("GET_VERSION")),
            "{err}"
        );

        // A reply that does not echo the protocol id.
        let err = connect_to_fake(&emu, |r| {
            let mut b = version(r);
            b[3] ^= 1;
            Answer::Send(b)
        })
        .await
        .err()
        .unwrap();
        assert!(
            matches!(&err, RobotError::Protocol(w) if w.contains("protocol id")),
            "{err}"
        );

        // A reply that does not echo the funcode.
        let err = connect_to_fake(&emu, |r| {
            let mut b = version(r);
            b[6] = reg::GET_STATE;
            Answer::Send(b)
        })
        .await
        .err()
        .unwrap();
        assert!(matches!(&err, RobotError::Protocol(_)), "{err}");

        // Half a frame, then the socket closes.
        let err = connect_to_fake(&emu, |r| {
            let mut b = version(r);
            b.truncate(20);
            Answer::SendAndClose(b)
        })
        .await
        .err()
        .unwrap();
        assert!(
            matches!(&err, RobotError::Disconnected(w) if w.contains("middle of a frame")),
            "{err}"
        );

        // After connecting, a GET_STATE reply naming a state that does not exist: a protocol
        // error, and the client refuses to go on on that stream.
        let mut c = connect_to_fake(&emu, |r| match r.funcode {
            reg::GET_VERSION => Answer::Send(version(r)),
            _ => Answer::Send(reply(r, Reply::State(42))),
        })
        .await
        .unwrap();
        let err = c.state().await.unwrap_err();
        assert!(matches!(err, RobotError::Protocol(_)), "{err}");
        let again = c.joint_positions().await.unwrap_err();
        assert!(matches!(again, RobotError::Protocol(_)), "{again}");
    });
}

#[test]
fn stale_replies_and_feedback_frames_are_skipped_and_a_silent_controller_times_out() {
    let emu = Emu::start(home());
    guard(async {
        // Before each real reply: a reply to an older transaction and a feedback frame.
        let mut c = connect_to_fake(&emu, |r| {
            let mut stale = r.clone();
            stale.tid = r.tid.wrapping_sub(1);
            let mut out = reply(&stale, Reply::State(1));
            out.extend(
                Feedback {
                    tid: r.tid,
                    prot: r.prot,
                    status: Status::OK,
                    kind: 2,
                    funcode: reg::MOVE_LINE,
                    task: 7,
                    code: 0,
                    time_us: 1,
                }
                .encode(),
            );
            match r.funcode {
                reg::GET_VERSION => out.extend(version(r)),
                reg::GET_STATE => out.extend(reply(r, Reply::State(2))),
                // Anything else: no answer at all.
                _ => {}
            }
            Answer::Send(out)
        })
        .await
        .unwrap();
        assert_eq!(c.state().await.unwrap(), RobotState::Ready);
        assert_eq!(c.stale_replies(), 2);
        assert_eq!(c.last_feedback().map(|f| f.task), Some(7));
        let err = c.joint_positions().await.unwrap_err();
        assert!(matches!(err, RobotError::Timeout(s) if s == 1.0), "{err}");
        // A timed-out request leaves the stream usable: its late reply would be dropped.
        assert_eq!(c.state().await.unwrap(), RobotState::Ready);
    });
}

#[test]
fn a_malformed_report_frame_is_a_protocol_error() {
    let emu = Emu::start(home());
    guard(async {
        // A real-time stream whose first frame declares 100 bytes: framed, but not a report.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut frame = RtReport::default().encode();
            frame.truncate(100);
            frame[..4].copy_from_slice(&100u32.to_be_bytes());
            let _ = sock.write_all(&frame).await;
            tokio::time::sleep(Duration::from_secs(20)).await;
        });
        let err = client(&settings_for(emu.command, emu.report, port))
            .await
            .err()
            .unwrap();
        assert!(
            matches!(&err, RobotError::Protocol(w) if w.contains("real-time")),
            "{err}"
        );
    });
}
