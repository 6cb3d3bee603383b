//! The controller model driven with explicit times (no sockets, no sleeping).

use super::*;
use crate::xarm::emulator::{ArmReading, KinematicArm};
use crate::xarm::proto::{
    gripper_reg, i32_to_registers, reg, Feedback, Incoming, LineCommon, MoveJoint, MoveLine,
    RtuReply, RtuRequest, ServoCartesian, ServoJoint,
};

const READY_POSE: [f64; 6] = [0.0, -0.6, -0.9, 0.0, 1.5, 0.0];

struct Rig {
    c: Controller,
    tid: u16,
}

impl Rig {
    fn new() -> Rig {
        let model = Arc::new(RobotModel::builtin("xarm6").unwrap());
        let arm = KinematicArm::new(model, vec![0.0; 6]);
        Rig {
            c: Controller::new(Box::new(arm), ControllerConfig::default()),
            tid: 0,
        }
    }

    fn send(&mut self, cmd: Command, t: f64) -> Response {
        self.tid += 1;
        let req = cmd.request(self.tid, prot::PRIVATE_V3);
        self.c.handle(1, &req, t).expect("a reply")
    }

    /// SERVO_J to joints `q` (rad) at time `t`.
    fn servo_joints(&mut self, q: &[f64], t: f64) -> Response {
        let mut joints = [0f32; 7];
        for (j, v) in joints.iter_mut().zip(q) {
            *j = *v as f32;
        }
        self.send(
            Command::ServoJoint(ServoJoint {
                joints,
                speed: 0.0,
                acc: 0.0,
                mvtime: 0.0,
            }),
            t,
        )
    }

    fn reply(&mut self, cmd: Command, t: f64) -> Reply {
        self.send(cmd, t).reply().unwrap()
    }

    /// Enable, position mode, ready: the SDK examples' start-up (`example/wrapper/common/`).
    fn ready(&mut self, mode: Mode, t: f64) {
        self.send(
            Command::MotionEnable {
                axis: 8,
                enable: true,
            },
            t,
        );
        self.send(
            Command::SetMode {
                mode: mode as u8,
                detection: Some(0),
            },
            t,
        );
        let r = self.send(Command::SetState(0), t);
        assert_eq!(r.status, Status::OK);
    }

    fn move_joint(&mut self, q: &[f64], speed: f32, acc: f32, t: f64) -> Response {
        let mut joints = [0f32; 7];
        for (j, v) in joints.iter_mut().zip(q) {
            *j = *v as f32;
        }
        self.send(
            Command::MoveJoint(MoveJoint {
                joints,
                speed,
                acc,
                mvtime: 0.0,
                only_check: None,
            }),
            t,
        )
    }

    fn tcp(&mut self, t: f64) -> [f32; 6] {
        match self.reply(Command::GetTcpPose, t) {
            Reply::Pose(p) => p,
            r => panic!("{r:?}"),
        }
    }

    fn errors(&mut self, t: f64) -> (u8, u8) {
        match self.reply(Command::GetError, t) {
            Reply::ErrorWarn { error, warn } => (error, warn),
            r => panic!("{r:?}"),
        }
    }
}

fn line_to(pose: [f32; 6], speed: f32) -> Command {
    Command::MoveLine(MoveLine::to(pose, speed, 2000.0))
}

#[test]
fn start_up_sequence_answers_like_the_recorded_controller() {
    let mut r = Rig::new();
    assert_eq!(r.c.state(), RobotState::Stopped);
    // Recorded frames (docs/references.md §2): MOTION_EN -> 0x10, GET_STATE -> 5 (0x10),
    // SET_MODE -> 0x10, SET_STATE 0 -> 0, GET_STATE -> 2.
    let en = r.send(
        Command::MotionEnable {
            axis: 8,
            enable: true,
        },
        0.0,
    );
    assert_eq!(en.status, Status(0x10));
    let st = r.send(Command::GetState, 0.0);
    assert_eq!(
        (st.status, st.reply().unwrap()),
        (Status(0x10), Reply::State(5))
    );
    let m = r.send(
        Command::SetMode {
            mode: 0,
            detection: Some(0),
        },
        0.0,
    );
    assert_eq!(m.status, Status(0x10));
    assert_eq!(r.send(Command::SetState(0), 0.0).status, Status::OK);
    assert_eq!(r.reply(Command::GetState, 0.0), Reply::State(2));
    // Zero joints: flange at (207, 0, 112) mm pointing down (xarm_ros2 `xarm6.urdf.xacro`; the
    // recorded get_position reply, docs/references.md §2).
    let p = r.tcp(0.0);
    assert!(
        (p[0] - 207.0).abs() < 0.01 && p[1].abs() < 0.01 && (p[2] - 112.0).abs() < 0.01,
        "{p:?}"
    );
    assert!((p[3].abs() - std::f32::consts::PI).abs() < 1e-4);
}

#[test]
fn motion_before_set_state_is_discarded_with_not_ready() {
    let mut r = Rig::new();
    r.send(
        Command::MotionEnable {
            axis: 8,
            enable: true,
        },
        0.0,
    );
    let resp = r.move_joint(&[0.3, 0.0, 0.0, 0.0, 0.0, 0.0], 1.0, 10.0, 0.0);
    assert!(resp.status.not_ready());
    r.c.advance(2.0);
    assert_eq!(r.c.joints()[0], 0.0, "a discarded move must not run");
    assert_eq!(r.c.cmdnum(), 0);
}

#[test]
fn joint_move_follows_a_trapezoid_at_the_commanded_speed() {
    let mut r = Rig::new();
    r.ready(Mode::Position, 0.0);
    let resp = r.move_joint(&[0.5, 0.0, 0.0, 0.0, 0.0, 0.0], 0.5, 5.0, 0.0);
    assert_eq!(resp.status, Status::OK);
    assert!(matches!(
        resp.reply().unwrap(),
        Reply::MoveAck { task: 1, .. }
    ));
    // 0.5 rad at 0.5 rad/s with 5 rad/s²: 0.1 s ramps, T = 0.5/0.5 + 0.5/5 = 1.1 s.
    r.c.advance(0.004);
    r.c.advance(0.55);
    assert_eq!(r.c.state(), RobotState::Moving);
    let mid = r.c.joints()[0];
    assert!(
        (mid - 0.25).abs() < 1e-3,
        "half way at half time, got {mid}"
    );
    r.c.advance(1.0);
    assert!((r.c.joints()[0] - 0.5).abs() > 1e-3, "not there before T");
    r.c.advance(1.12);
    r.c.advance(1.13);
    assert_eq!(r.c.state(), RobotState::Ready);
    assert!((r.c.joints()[0] - 0.5).abs() < 1e-9);
    assert_eq!(r.reply(Command::GetState, 1.2), Reply::State(2));
}

/// Records every step the controller asks of the arm: (dt, joint 0).
struct StepLog {
    inner: KinematicArm,
    steps: Arc<std::sync::Mutex<Vec<(f64, f64)>>>,
}

impl EmulatedArm for StepLog {
    fn model(&self) -> &Arc<RobotModel> {
        self.inner.model()
    }
    fn reading(&self) -> ArmReading {
        self.inner.reading()
    }
    fn step(&mut self, dt: f64, q: &[f64], gripper_opening: f64) -> ArmReading {
        self.steps.lock().unwrap().push((dt, q[0]));
        self.inner.step(dt, q, gripper_opening)
    }
}

/// A starved emulator ticks late: 0.6 s of a motion arrive in one `advance`. The arm behind the
/// seam (the simulator's physics, holding an object) must still be led along the trapezoid in
/// control periods, not along one chord with a jump in velocity at each end.
#[test]
fn a_late_tick_is_caught_up_in_control_periods_along_the_trajectory() {
    let model = Arc::new(RobotModel::builtin("xarm6").unwrap());
    let steps = Arc::new(std::sync::Mutex::new(Vec::new()));
    let arm = StepLog {
        inner: KinematicArm::new(model, vec![0.0; 6]),
        steps: steps.clone(),
    };
    let mut r = Rig {
        c: Controller::new(Box::new(arm), ControllerConfig::default()),
        tid: 0,
    };
    r.ready(Mode::Position, 0.0);
    let (speed, acc) = (0.5, 5.0);
    r.move_joint(
        &[0.5, 0.0, 0.0, 0.0, 0.0, 0.0],
        speed as f32,
        acc as f32,
        0.0,
    );
    r.c.advance(0.004);
    steps.lock().unwrap().clear();
    r.c.advance(0.6);
    let steps = steps.lock().unwrap().clone();
    assert!(steps.len() >= 100, "{} steps for 596 ms", steps.len());
    let total: f64 = steps.iter().map(|s| s.0).sum();
    assert!((total - 0.596).abs() < 1e-9, "{total}");
    for &(dt, _) in &steps {
        assert!(dt < 2.0 * CONTROL_PERIOD_S, "a step of {dt} s");
    }
    // Velocities between consecutive steps: never faster than commanded, and never a jump larger
    // than the acceleration allows over two periods.
    let v: Vec<f64> = steps
        .windows(2)
        .map(|w| (w[1].1 - w[0].1) / w[1].0)
        .collect();
    for x in &v {
        assert!(*x <= speed + 1e-9, "{x} rad/s");
    }
    for w in v.windows(2) {
        assert!(
            (w[1] - w[0]).abs() <= acc * 4.0 * CONTROL_PERIOD_S,
            "{} -> {} rad/s",
            w[0],
            w[1]
        );
    }
    // Where the one long step would also have ended: on the trapezoid at t = 0.6 s.
    let want = 0.5 * acc * 0.1 * 0.1 + speed * (0.6 - 0.1);
    let end = steps.last().unwrap().1;
    assert!((end - want).abs() < 1e-6, "{end} vs {want}");
}

#[test]
fn joint_target_beyond_limits_raises_c23_until_cleared() {
    let mut r = Rig::new();
    r.ready(Mode::Position, 0.0);
    // joint2 is limited to [-2.059, 2.0944] rad.
    let resp = r.move_joint(&[0.0, 2.5, 0.0, 0.0, 0.0, 0.0], 0.5, 5.0, 0.0);
    assert!(resp.status.error() && resp.status.not_ready());
    assert_eq!(r.errors(0.1), (23, 0));
    assert_eq!(
        ControllerError::from_code(23),
        Some(ControllerError::JointLimit)
    );
    // Moves are discarded until the error is cleaned and the state set again.
    let again = r.move_joint(&[0.2, 0.0, 0.0, 0.0, 0.0, 0.0], 0.5, 5.0, 0.2);
    assert!(again.status.error());
    assert_eq!(
        r.send(Command::SetState(0), 0.3).status.0 & Status::ERROR,
        Status::ERROR
    );
    r.send(Command::CleanError, 0.4);
    assert_eq!(r.errors(0.4), (0, 0));
    assert_eq!(r.c.state(), RobotState::Stopped);
    assert_eq!(r.send(Command::SetState(0), 0.5).status, Status::OK);
    assert_eq!(
        r.move_joint(&[0.2, 0.0, 0.0, 0.0, 0.0, 0.0], 0.5, 5.0, 0.6)
            .status,
        Status::OK
    );
}

#[test]
fn move_line_keeps_the_tcp_on_the_straight_line() {
    let mut r = Rig::new();
    r.ready(Mode::Position, 0.0);
    r.move_joint(&READY_POSE, 1.0, 10.0, 0.0);
    r.c.advance(3.0);
    r.c.advance(3.1);
    let a = r.tcp(3.1);
    let mut b = a;
    b[0] += 60.0;
    b[2] -= 40.0;
    let resp = r.send(line_to(b, 100.0), 3.1);
    assert_eq!(resp.status, Status::OK, "{:?}", r.c.codes());
    // Sample the path: every point within 0.1 mm of the segment a-b.
    let (pa, pb) = (
        Vector3::new(a[0] as f64, a[1] as f64, a[2] as f64),
        Vector3::new(b[0] as f64, b[1] as f64, b[2] as f64),
    );
    let dir = (pb - pa).normalize();
    let mut t = 3.1;
    let mut seen_mid = false;
    while r.c.state() != RobotState::Ready || t < 3.2 {
        t += 0.02;
        r.c.advance(t);
        let p = r.tcp(t);
        let v = Vector3::new(p[0] as f64, p[1] as f64, p[2] as f64) - pa;
        let off_line = (v - dir * v.dot(&dir)).norm();
        assert!(off_line < 0.1, "{off_line} mm off the line at t = {t}");
        let along = v.dot(&dir);
        seen_mid |= along > 20.0 && along < 50.0;
        assert!(t < 10.0, "line never finished");
    }
    assert!(seen_mid);
    // 72 mm at 100 mm/s, 2000 mm/s²: 0.77 s.
    assert!((t - 3.1 - 0.77).abs() < 0.1, "took {} s", t - 3.1);
    let end = r.tcp(t);
    for i in 0..3 {
        assert!((end[i] - b[i]).abs() < 0.05, "{end:?} vs {b:?}");
    }
}

#[test]
fn unreachable_line_raises_c21_and_does_not_move() {
    let mut r = Rig::new();
    r.ready(Mode::Position, 0.0);
    r.move_joint(&READY_POSE, 1.0, 10.0, 0.0);
    r.c.advance(3.0);
    r.c.advance(3.1);
    let before = r.c.joints().to_vec();
    let resp = r.send(
        line_to([1500.0, 0.0, 300.0, std::f32::consts::PI, 0.0, 0.0], 100.0),
        3.1,
    );
    assert!(resp.status.error());
    assert_eq!(r.errors(3.2), (21, 0));
    r.c.advance(4.0);
    assert_eq!(r.c.joints(), &before[..]);
    // Only-check answers the same question without raising anything.
    r.send(Command::CleanError, 4.0);
    r.send(Command::SetState(0), 4.0);
    let check = Command::MoveLine(MoveLine {
        only_check: Some(1),
        ..MoveLine::to(
            [1500.0, 0.0, 300.0, std::f32::consts::PI, 0.0, 0.0],
            100.0,
            2000.0,
        )
    });
    let resp = r.send(check, 4.1);
    assert_eq!(resp.status, Status::OK);
    assert_eq!(
        resp.reply().unwrap(),
        Reply::MoveAck {
            task: 0,
            check: Some(21)
        }
    );
    assert_eq!(r.errors(4.1), (0, 0));
}

#[test]
fn relative_and_tool_frame_lines_move_from_the_last_target() {
    let mut r = Rig::new();
    r.ready(Mode::Position, 0.0);
    r.move_joint(&READY_POSE, 1.0, 10.0, 0.0);
    r.c.advance(3.0);
    let a = r.tcp(3.0);
    let rel = Command::MoveRelative(crate::xarm::proto::MoveRelative::linear(
        [0.0, 30.0, 0.0, 0.0, 0.0, 0.0],
        100.0,
        2000.0,
    ));
    assert_eq!(r.send(rel, 3.0).status, Status::OK);
    // Tool frame: the gripper points down, so +z in the tool frame is -z in the base frame.
    let tool = Command::MoveLine(MoveLine {
        common: Some(LineCommon {
            radius: -1.0,
            coord: Coord::Tool,
            axis_angle: false,
        }),
        ..MoveLine::to([0.0, 0.0, 20.0, 0.0, 0.0, 0.0], 100.0, 2000.0)
    });
    assert_eq!(r.send(tool, 3.0).status, Status::OK);
    assert_eq!(r.c.cmdnum(), 2);
    let mut t = 3.0;
    while r.c.cmdnum() > 0 {
        t += 0.05;
        r.c.advance(t);
        assert!(t < 8.0);
    }
    r.c.advance(t + 0.01);
    let b = r.tcp(t + 0.01);
    assert!((b[1] - a[1] - 30.0).abs() < 0.05, "{a:?} -> {b:?}");
    assert!(
        (a[2] - b[2]).abs() > 5.0,
        "the tool-frame move changes z: {a:?} -> {b:?}"
    );
}

#[test]
fn stop_drops_the_queue_and_holds_the_arm() {
    let mut r = Rig::new();
    r.ready(Mode::Position, 0.0);
    r.move_joint(&[1.0, 0.0, 0.0, 0.0, 0.0, 0.0], 0.5, 5.0, 0.0);
    r.move_joint(&[0.0, 0.0, 0.0, 0.0, 0.0, 0.0], 0.5, 5.0, 0.0);
    assert_eq!(r.reply(Command::GetCmdnum, 0.0), Reply::Cmdnum(2));
    r.c.advance(0.5);
    let held = r.c.joints()[0];
    assert!(held > 0.0);
    let resp = r.send(Command::SetState(4), 0.5);
    assert!(resp.status.not_ready());
    r.c.advance(2.0);
    assert_eq!(r.c.state(), RobotState::Stopped);
    assert_eq!(r.c.cmdnum(), 0);
    assert!((r.c.joints()[0] - held).abs() < 1e-9);
}

#[test]
fn feedback_frames_report_the_finish_of_requested_moves() {
    let mut r = Rig::new();
    r.ready(Mode::Position, 0.0);
    r.send(Command::SetFeedbackType(feedback_kind::MOTION_FINISH), 0.0);
    let mv = r.move_joint(&[0.1, 0.0, 0.0, 0.0, 0.0, 0.0], 1.0, 10.0, 0.0);
    r.send(Command::SetFeedbackType(0), 0.0);
    assert!(r.c.take_outbox().is_empty());
    r.c.advance(0.1);
    r.c.advance(1.0);
    let out = r.c.take_outbox();
    assert_eq!(out.len(), 1);
    let Incoming::Feedback(f) = Incoming::decode(&out[0].1).unwrap() else {
        panic!("not a feedback frame")
    };
    assert_eq!(
        (f.tid, f.funcode, f.kind, f.code),
        (
            mv.tid,
            reg::MOVE_JOINT,
            feedback_kind::MOTION_FINISH,
            feedback_code::SUCCESS
        )
    );
    let Reply::MoveAck { task, .. } = mv.reply().unwrap() else {
        panic!()
    };
    assert_eq!(f.task, task);
    let _: Feedback = f;
}

#[test]
fn servo_mode_applies_the_newest_target_and_refuses_too_fast_steps() {
    let mut r = Rig::new();
    r.ready(Mode::Position, 0.0);
    r.move_joint(&READY_POSE, 1.0, 10.0, 0.0);
    r.c.advance(3.0);
    r.ready(Mode::Servo, 3.0);
    let mut q = READY_POSE;
    let mut t = 3.0;
    for _ in 0..20 {
        q[0] += 0.005;
        t += 0.01;
        let resp = r.servo_joints(&q, t);
        assert_eq!(resp.status, Status::OK, "{:?}", r.c.codes());
    }
    r.c.advance(t + 0.05);
    assert!((r.c.joints()[0] - q[0]).abs() < 1e-6);
    // A Cartesian servo step of 1 mm in x.
    let mut p = r.tcp(t + 0.05);
    p[0] += 1.0;
    let resp = r.send(
        Command::ServoCartesian(ServoCartesian {
            pose: p,
            speed: 0.0,
            acc: 0.0,
            coord: Coord::Base,
        }),
        t + 0.06,
    );
    assert_eq!(resp.status, Status::OK, "{:?}", r.c.codes());
    r.c.advance(t + 0.2);
    let now = r.tcp(t + 0.2);
    assert!((now[0] - p[0]).abs() < 0.05, "{now:?} vs {p:?}");
    // A one-radian jump cannot be done in a servo period: C24, the arm stops.
    let mut far = [0f32; 7];
    for (j, v) in far.iter_mut().zip(&q) {
        *j = *v as f32;
    }
    far[0] += 1.0;
    let resp = r.send(
        Command::ServoJoint(ServoJoint {
            joints: far,
            speed: 0.0,
            acc: 0.0,
            mvtime: 0.0,
        }),
        t + 0.21,
    );
    assert!(resp.status.error());
    assert_eq!(r.errors(t + 0.22).0, 24);
    assert_eq!(r.c.state(), RobotState::Stopped);
}

/// Sends `n` servo-joint targets moving joint 0 by `step` rad each, the k-th at `at(k)`; returns
/// the controller's error code after them (0 = none).
fn servo_stream(step: f64, n: usize, at: impl Fn(usize) -> f64) -> u8 {
    let mut r = Rig::new();
    r.ready(Mode::Position, 0.0);
    r.move_joint(&READY_POSE, 1.0, 10.0, 0.0);
    r.c.advance(3.0);
    r.ready(Mode::Servo, 3.0);
    let mut q = READY_POSE;
    let mut last = 3.0;
    for k in 0..n {
        q[0] += step;
        last = 3.0 + at(k);
        let resp = r.servo_joints(&q, last);
        if resp.status.error() {
            break;
        }
    }
    r.errors(last + 0.001).0
}

/// The servo speed check is an average over at least 100 ms, so a stream at a legal speed whose
/// packets arrived bunched (a stalled emulator tick, a loaded machine) is not refused, while a
/// stream that is too fast on average still is, whatever its packet spacing. (With the check
/// over one packet gap, the bunched packets were C24.)
#[test]
fn bunched_servo_packets_of_a_legal_stream_are_accepted_and_a_fast_stream_is_not() {
    let v = Rig::new().c.model.joint_limits()[0].velocity;
    // 100 Hz at 80 % of the speed limit; packets 20..25 arrive together after a 50 ms stall.
    let legal = 0.8 * v * 0.01;
    let bunched = |k: usize| {
        if (20..25).contains(&k) {
            0.01 * 25.0
        } else {
            0.01 * (k as f64 + 1.0)
        }
    };
    assert_eq!(servo_stream(legal, 40, bunched), 0);
    // The same spacing without the stall is of course fine too.
    assert_eq!(servo_stream(legal, 40, |k| 0.01 * (k as f64 + 1.0)), 0);
    // Twice the speed limit, evenly spaced or bunched: C24.
    let fast = 2.0 * v * 0.01;
    assert_eq!(servo_stream(fast, 40, |k| 0.01 * (k as f64 + 1.0)), 24);
    assert_eq!(servo_stream(fast, 40, bunched), 24);
}

#[test]
fn servo_commands_outside_servo_mode_do_nothing() {
    let mut r = Rig::new();
    r.ready(Mode::Position, 0.0);
    let mut joints = [0f32; 7];
    joints[0] = 0.01;
    let resp = r.send(
        Command::ServoJoint(ServoJoint {
            joints,
            speed: 0.0,
            acc: 0.0,
            mvtime: 0.0,
        }),
        0.0,
    );
    assert_eq!(resp.status, Status::OK);
    r.c.advance(1.0);
    assert_eq!(r.c.joints()[0], 0.0);
}

#[test]
fn unknown_funcodes_and_bad_parameters_are_warnings() {
    let mut r = Rig::new();
    r.ready(Mode::Position, 0.0);
    let req = Request {
        tid: 99,
        prot: 3,
        funcode: 200,
        params: vec![],
    };
    let resp = r.c.handle(1, &req, 0.0).unwrap();
    assert!(resp.status.warning() && !resp.status.error());
    assert_eq!(r.errors(0.0), (0, 13));
    r.send(Command::CleanWarn, 0.0);
    let bad = Request {
        tid: 100,
        prot: 3,
        funcode: reg::MOVE_JOINT,
        params: vec![0; 17],
    };
    let resp = r.c.handle(1, &bad, 0.0).unwrap();
    assert!(resp.status.warning());
    assert_eq!(r.errors(0.0), (0, 12));
    // Warnings refuse a command but leave the arm ready.
    assert_eq!(r.c.state(), RobotState::Ready);
    // The SDK heartbeat gets no answer.
    let hb = Request {
        tid: 0,
        prot: prot::HEARTBEAT,
        funcode: 0,
        params: vec![0],
    };
    assert!(r.c.handle(1, &hb, 0.0).is_none());
}

#[test]
fn gripper_behind_the_tunnel_moves_over_time() {
    let mut r = Rig::new();
    let tunnel = |pdu: Vec<u8>| Command::Rs485 { host: 9, pdu };
    assert_eq!(
        r.reply(
            Command::TgpioRead16 {
                host: 9,
                addr: crate::xarm::proto::tool_reg::BAUD_INDEX
            },
            0.0
        ),
        Reply::Register(11)
    );
    let enable = RtuRequest::WriteMultiple {
        slave: 8,
        addr: gripper_reg::ENABLE,
        values: vec![1],
    };
    r.send(tunnel(enable.encode()), 0.0);
    let target = RtuRequest::WriteMultiple {
        slave: 8,
        addr: gripper_reg::TARGET_POSITION,
        values: i32_to_registers(400).to_vec(),
    };
    let Reply::Rs485 { pdu, .. } = r.reply(tunnel(target.encode()), 0.0) else {
        panic!()
    };
    assert!(matches!(
        RtuReply::decode(&pdu).unwrap(),
        RtuReply::WriteMultiple { count: 2, .. }
    ));
    r.c.advance(0.2);
    let p = r.c.gripper_position();
    assert!(p < 850 && p > 400, "moving, at {p}");
    r.c.advance(2.0);
    assert_eq!(r.c.gripper_position(), 400);
    let read = RtuRequest::ReadHolding {
        slave: 8,
        addr: gripper_reg::POSITION,
        count: 2,
    };
    let Reply::Rs485 { pdu, .. } = r.reply(tunnel(read.encode()), 2.0) else {
        panic!()
    };
    assert_eq!(
        RtuReply::decode(&pdu).unwrap(),
        RtuReply::ReadHolding {
            slave: 8,
            values: i32_to_registers(400).to_vec()
        }
    );
}

#[test]
fn reports_carry_the_state_and_decode() {
    let mut r = Rig::new();
    r.ready(Mode::Position, 0.0);
    r.move_joint(&[0.2, 0.0, 0.0, 0.0, 0.0, 0.0], 1.0, 10.0, 0.0);
    r.c.advance(0.1);
    let rich = RichReport::decode(&r.c.rich_report().encode()).unwrap();
    assert_eq!(rich.status.state, RobotState::Moving as u8);
    assert_eq!(rich.status.enable_bits, 0x3F);
    assert!(rich.status.joints[0] > 0.0);
    assert!(crate::xarm::proto::parse_version("6,6,XI1304,AC1303,v2.3.0").is_ok());
    assert_eq!(rich.version, "v2.3.0");
    let rt = RtReport::decode(&r.c.rt_report().encode()).unwrap();
    assert_eq!(rt.timestamp_us, 100_000);
    assert!(rt.actual_joints.velocity[0] > 0.0);
    assert_eq!(rt.actual_joints.position, rich.status.joints);
}
