//! `pointact emulate xarm` over real sockets (ephemeral ports only: `tests/xarm_sdk.rs` is the one
//! test that binds 30002): the binary's three sockets and its clean Ctrl-C exit, and the library
//! emulator driven through the codec by a client written with `robot::xarm::proto` — what the
//! async driver will do.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use common::emulator::{EmulatorProcess, FREE_PORTS};
use pointact::robot::xarm::proto::{
    feedback_code, feedback_kind, prot, Command as Cmd, FrameReader, Incoming, Mode, MoveJoint,
    Reply, ReportReader, Request, RichReport, RobotState, RtReport,
};

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the emulator");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Sends one command and reads frames until its reply (feedback frames are returned too).
fn call(s: &mut TcpStream, r: &mut FrameReader, cmd: Cmd, tid: u16) -> (Reply, Vec<Incoming>) {
    s.write_all(&cmd.request(tid, prot::PRIVATE_V3).encode().unwrap())
        .unwrap();
    let mut others = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        while let Some(f) = r.next_frame().unwrap() {
            match Incoming::decode(&f).unwrap() {
                Incoming::Response(resp) if resp.tid == tid => {
                    return (resp.reply().unwrap(), others)
                }
                other => others.push(other),
            }
        }
        let n = s.read(&mut buf).expect("read a reply");
        assert!(n > 0, "the emulator closed the connection");
        r.push(&buf[..n]);
    }
}

fn read_report(port: u16) -> Vec<Vec<u8>> {
    let mut s = connect(port);
    let mut rd = ReportReader::new();
    let mut frames = Vec::new();
    let mut buf = [0u8; 4096];
    while frames.len() < 2 {
        let n = s.read(&mut buf).expect("read a report");
        assert!(n > 0, "report stream closed");
        rd.push(&buf[..n]);
        while let Some(f) = rd.next_frame().unwrap() {
            frames.push(f);
        }
    }
    frames
}

#[test]
fn binary_serves_three_sockets_and_ends_cleanly_on_ctrl_c() {
    let mut emu = EmulatorProcess::spawn(&[&FREE_PORTS[..], &["--rt-hz", "100"][..]].concat());
    let mut s = connect(emu.command_port);
    let mut r = FrameReader::new();
    let (v, _) = call(&mut s, &mut r, Cmd::GetVersion, 1);
    assert_eq!(v, Reply::Version("6,6,XI1304,AC1303,v2.3.0".into()));
    let (st, _) = call(&mut s, &mut r, Cmd::GetState, 2);
    assert_eq!(
        st,
        Reply::State(RobotState::Stopped as u8),
        "power-on state"
    );

    let rich = read_report(emu.report_port);
    let first = RichReport::decode(&rich[0]).unwrap();
    assert_eq!(first.status.state, RobotState::Stopped as u8);
    assert_eq!(first.axis, 6);
    assert_eq!(first.status.tcp_pose[0], 207.0);
    let rt = read_report(emu.rt_port);
    let (a, b) = (
        RtReport::decode(&rt[0]).unwrap(),
        RtReport::decode(&rt[1]).unwrap(),
    );
    assert!(
        b.timestamp_us > a.timestamp_us,
        "the real-time clock advances"
    );

    // Ctrl-C (SIGINT): a clean exit with status 0.
    let pid = emu.child.id().to_string();
    let kill = Command::new("kill").args(["-INT", &pid]).status().unwrap();
    assert!(kill.success());
    let status = emu.child.wait().unwrap();
    let mut rest = String::new();
    let _ = emu.stdout.read_to_string(&mut rest);
    assert!(
        status.success(),
        "exit {status} after Ctrl-C; printed {rest}"
    );
    assert!(rest.contains("stopped"), "{rest}");
}

/// `--sim` refuses a scene whose robot is not an xArm 6 and an unknown task before binding
/// anything (the served case is `tests/cli_robot_run.rs`); bad versions are refused at parse time.
#[test]
fn sim_scenes_for_other_robots_and_bad_versions_are_refused() {
    let sim = |task: &str| {
        Command::new(env!("CARGO_BIN_EXE_pointact"))
            .args(["emulate", "xarm", "--sim", task])
            .args(FREE_PORTS)
            .output()
            .unwrap()
    };
    let o = sim("bridge/carrot_on_plate");
    assert_eq!(o.status.code(), Some(1));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("widowx250") && e.contains("xArm 6"), "{e}");
    let o = sim("tabletop/no_such_task");
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no_such_task"));
    let o = Command::new(env!("CARGO_BIN_EXE_pointact"))
        .args(["emulate", "xarm", "--version", "v2.3.0", "--port", "0"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("axis,type,robot-sn,box-sn"));
}

#[test]
fn library_emulator_reports_motion_finish_by_feedback_frame() {
    use pointact::kinematics::RobotModel;
    use pointact::robot::xarm::emulator::{Emulator, EmulatorOptions, KinematicArm};
    use std::sync::Arc;

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let model = Arc::new(RobotModel::builtin("xarm6").unwrap());
    let arm = KinematicArm::new(model, vec![0.0; 6]);
    let options = EmulatorOptions {
        command_port: 0,
        report_port: 0,
        rt_port: 0,
        ..EmulatorOptions::default()
    };
    let emu = rt.block_on(Emulator::bind(options, Box::new(arm))).unwrap();
    let port = emu.command_addr().port();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = rt.spawn(emu.run(async {
        let _ = stop_rx.await;
    }));

    let mut s = connect(port);
    let mut r = FrameReader::new();
    call(
        &mut s,
        &mut r,
        Cmd::MotionEnable {
            axis: 8,
            enable: true,
        },
        1,
    );
    call(
        &mut s,
        &mut r,
        Cmd::SetMode {
            mode: Mode::Position as u8,
            detection: Some(0),
        },
        2,
    );
    call(&mut s, &mut r, Cmd::SetState(0), 3);
    call(
        &mut s,
        &mut r,
        Cmd::SetFeedbackType(feedback_kind::MOTION_FINISH),
        4,
    );
    let mut joints = [0f32; 7];
    joints[0] = 0.3;
    let (ack, _) = call(
        &mut s,
        &mut r,
        Cmd::MoveJoint(MoveJoint {
            joints,
            speed: 1.0,
            acc: 10.0,
            mvtime: 0.0,
            only_check: None,
        }),
        5,
    );
    let Reply::MoveAck { task, .. } = ack else {
        panic!("{ack:?}")
    };
    call(&mut s, &mut r, Cmd::SetFeedbackType(0), 6);
    // Poll the state until the feedback frame for tid 5 has come in.
    let mut finished = None;
    for tid in 7..2000u16 {
        let (_, extra) = call(&mut s, &mut r, Cmd::GetState, tid);
        finished = extra.into_iter().find_map(|i| match i {
            Incoming::Feedback(f) if f.tid == 5 => Some(f),
            _ => None,
        });
        if finished.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let f = finished.expect("a motion-finish feedback frame");
    assert_eq!(
        (f.kind, f.code, f.task),
        (feedback_kind::MOTION_FINISH, feedback_code::SUCCESS, task)
    );
    let (q, _) = call(&mut s, &mut r, Cmd::GetJointPos, 3000);
    let Reply::Joints(q) = q else { panic!("{q:?}") };
    assert!((q[0] - 0.3).abs() < 1e-6, "{q:?}");
    // A request in the old protocol id is echoed in it.
    s.write_all(
        &Request {
            tid: 9,
            prot: prot::PRIVATE,
            funcode: 13,
            params: vec![],
        }
        .encode()
        .unwrap(),
    )
    .unwrap();
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).unwrap();
    assert_eq!(&buf[2..4], &[0, 2], "{:?}", &buf[..n]);

    let _ = stop_tx.send(());
    rt.block_on(server).unwrap().unwrap();
}
