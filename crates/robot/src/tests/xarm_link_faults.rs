//! Faults on the link between `XarmRobot` and the controller, made by an in-process proxy in front
//! of the emulator's three sockets, one test per fault: a delay spike under the servo watchdog's
//! period (ridden out) and one past it, a lost segment, report frames delivered out of order, a link
//! cut mid-trajectory, and a controller that stops answering. For each: the arm is stopped (for a
//! stall, before the late setpoint lands), the error names the fault, no setpoint that reached the
//! controller jumps, and a new connection then runs a trajectory cleanly.
//!
//! TCP itself never loses or reorders bytes; these are the faults a link shows to the application
//! (a switch that buffers, a cable pulled, a controller that hangs), made at frame boundaries so
//! that each test is deterministic.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

use super::xarm_client::{checked, guard, home, max_diff, model, settings_for, Emu};
use crate::xarm::proto::{reg, set_state, Command, FrameReader, ReportReader, Request, RobotState};
use crate::xarm::XarmRobot;
use crate::{Robot, RobotError};

/// What the proxy does to the command socket at the servo setpoint after `AFTER` forwarded ones.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    /// Holds that setpoint for this long; everything behind it on the socket waits too.
    Delay(Duration),
    /// Never forwards it (nor anything after it on that socket).
    Lose,
    /// Closes both sides instead of forwarding it.
    Cut,
    /// Forwards nothing more on any socket, and answers no new connection.
    Hang,
    /// The setpoint is forwarded; the next two real-time report frames are swapped.
    SwapReports,
}

/// Servo setpoints forwarded before the fault.
const AFTER: usize = 20;

/// One request as the emulator received it, in the order it arrived there.
#[derive(Debug, Clone)]
struct Forwarded {
    /// Which command connection (0: the driver's, 1 and up: later ones).
    conn: usize,
    req: Request,
}

/// The proxy: three listening ports in front of the emulator's, and the log of what reached it.
struct FaultLink {
    command: u16,
    report: u16,
    rt: u16,
    log: Arc<Mutex<Vec<Forwarded>>>,
    hung: Arc<AtomicBool>,
}

impl FaultLink {
    async fn start(emu: &Emu, fault: Fault) -> FaultLink {
        let log = Arc::new(Mutex::new(Vec::new()));
        let hung = Arc::new(AtomicBool::new(false));
        let swap = Arc::new(AtomicBool::new(false));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let command = listener.local_addr().unwrap().port();
        let (upstream, log2) = (emu.command, log.clone());
        let (hung2, swap2) = (hung.clone(), swap.clone());
        tokio::spawn(async move {
            let mut conn = 0;
            while let Ok((down, _)) = listener.accept().await {
                let up = TcpStream::connect(("127.0.0.1", upstream)).await.unwrap();
                let link = Link {
                    conn,
                    fault: (conn == 0).then_some(fault),
                    log: log2.clone(),
                    hung: hung2.clone(),
                    swap: swap2.clone(),
                };
                tokio::spawn(command_link(down, up, link));
                conn += 1;
            }
        });
        FaultLink {
            command,
            report: report_link(emu.report, None, hung.clone()).await,
            rt: report_link(emu.rt, Some(swap), hung.clone()).await,
            log,
            hung,
        }
    }

    fn settings(&self) -> crate::settings::XarmSettings {
        settings_for(self.command, self.report, self.rt)
    }

    fn log(&self) -> Vec<Forwarded> {
        self.log.lock().unwrap().clone()
    }

    /// The servo setpoints the emulator received on the driver's connection, in order.
    fn setpoints(&self) -> Vec<Vec<f64>> {
        self.log()
            .iter()
            .filter(|f| f.conn == 0 && f.req.funcode == reg::MOVE_SERVOJ)
            .map(
                |f| match Command::decode(f.req.funcode, &f.req.params).unwrap() {
                    Command::ServoJoint(s) => s.joints[..6].iter().map(|v| f64::from(*v)).collect(),
                    other => panic!("{other:?}"),
                },
            )
            .collect()
    }

    /// Index in the log of the first SET_STATE 4 (stop), and the connection it came on.
    fn stop(&self) -> Option<(usize, usize)> {
        self.log().iter().enumerate().find_map(|(i, f)| {
            (f.req.funcode == reg::SET_STATE && f.req.params == [set_state::STOP])
                .then_some((i, f.conn))
        })
    }
}

/// One command connection through the proxy.
struct Link {
    /// 0: the driver's connection, 1 and up: later ones.
    conn: usize,
    /// Strikes at the servo setpoint after `AFTER` forwarded ones (the driver's connection only).
    fault: Option<Fault>,
    log: Arc<Mutex<Vec<Forwarded>>>,
    hung: Arc<AtomicBool>,
    /// Set to have the real-time stream swap its next two frames.
    swap: Arc<AtomicBool>,
}

/// Forwards one command connection, striking with its fault.
async fn command_link(down: TcpStream, up: TcpStream, link: Link) {
    let Link {
        conn,
        fault,
        log,
        hung,
        swap,
    } = link;
    let (mut down_rd, down_wr) = down.into_split();
    let (up_rd, mut up_wr) = up.into_split();
    let back = tokio::spawn(replies(up_rd, down_wr, hung.clone()));
    let mut reader = FrameReader::new();
    let mut buf = vec![0u8; 4096];
    let mut servo = 0;
    'fwd: while let Ok(n) = down_rd.read(&mut buf).await {
        if n == 0 {
            break;
        }
        reader.push(&buf[..n]);
        while let Ok(Some(frame)) = reader.next_frame() {
            if hung.load(Ordering::SeqCst) {
                continue;
            }
            let req = Request::decode(&frame).unwrap();
            if req.funcode == reg::MOVE_SERVOJ {
                servo += 1;
                if servo == AFTER + 1 {
                    match fault {
                        Some(Fault::Delay(d)) => tokio::time::sleep(d).await,
                        Some(Fault::Lose) => {
                            // The rest of this socket is lost with it: hold it open, forward nothing.
                            while let Ok(n) = down_rd.read(&mut buf).await {
                                if n == 0 {
                                    break;
                                }
                            }
                            break 'fwd;
                        }
                        Some(Fault::Cut) => break 'fwd,
                        Some(Fault::Hang) => {
                            hung.store(true, Ordering::SeqCst);
                            continue;
                        }
                        Some(Fault::SwapReports) => swap.store(true, Ordering::SeqCst),
                        None => {}
                    }
                }
            }
            log.lock().unwrap().push(Forwarded { conn, req });
            if up_wr.write_all(&frame).await.is_err() {
                break 'fwd;
            }
        }
    }
    // Dropping both halves of both sockets closes the link.
    back.abort();
}

/// Forwards the controller's replies until the proxy hangs.
async fn replies(mut up_rd: OwnedReadHalf, mut down_wr: OwnedWriteHalf, hung: Arc<AtomicBool>) {
    let mut buf = vec![0u8; 4096];
    while let Ok(n) = up_rd.read(&mut buf).await {
        if n == 0 {
            break;
        }
        if hung.load(Ordering::SeqCst) {
            continue;
        }
        if down_wr.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
}

/// A report stream through the proxy: whole frames forwarded until the proxy hangs; once `swap`
/// is set, the next two frames go out in each other's place (once).
async fn report_link(upstream: u16, swap: Option<Arc<AtomicBool>>, hung: Arc<AtomicBool>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut down, _)) = listener.accept().await {
            let mut up = TcpStream::connect(("127.0.0.1", upstream)).await.unwrap();
            let (hung, swap) = (hung.clone(), swap.clone());
            tokio::spawn(async move {
                let mut reader = ReportReader::new();
                let mut buf = vec![0u8; 8192];
                let mut held: Option<Vec<u8>> = None;
                while let Ok(n) = up.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    reader.push(&buf[..n]);
                    while let Ok(Some(frame)) = reader.next_frame() {
                        if hung.load(Ordering::SeqCst) {
                            continue;
                        }
                        let now = swap
                            .as_ref()
                            .is_some_and(|s| s.swap(false, Ordering::SeqCst));
                        if now {
                            held = Some(frame);
                            continue;
                        }
                        let mut out = frame;
                        if let Some(h) = held.take() {
                            out.extend_from_slice(&h);
                        }
                        if down.write_all(&out).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    port
}

/// A trajectory of a few seconds from home (0.4 rad on the base joint), the robot at home.
fn long_move() -> (Vec<f64>, pointact_core::safety::CheckedTrajectory) {
    let start = home();
    let mut goal = start.clone();
    goal[0] += 0.4;
    let t = checked(&start, &goal, &start);
    assert!(t.trajectory().samples(t.dt()).len() > 4 * AFTER);
    (goal, t)
}

/// No two setpoints that reached the controller are farther apart than the trajectory's own
/// largest step (a catch-up after a stall would be), and the first starts at home.
fn assert_no_jump(sent: &[Vec<f64>], t: &pointact_core::safety::CheckedTrajectory) {
    let samples = t.trajectory().samples(t.dt());
    let step = samples
        .windows(2)
        .map(|w| max_diff(&w[0].1, &w[1].1))
        .fold(0.0f64, f64::max);
    assert!(!sent.is_empty());
    assert!(max_diff(&sent[0], &home()) <= step + 1e-5, "{:?}", sent[0]);
    for w in sent.windows(2) {
        // f32 on the wire: 1e-5 rad of rounding.
        assert!(
            max_diff(&w[0], &w[1]) <= step + 1e-5,
            "a jump of {} rad (step {step})",
            max_diff(&w[0], &w[1])
        );
    }
}

/// The arm stopped where the last setpoint that reached it put it.
fn assert_stopped_at_last_setpoint(emu: &Emu, sent: &[Vec<f64>]) {
    assert_eq!(emu.state().0, RobotState::Stopped);
    let last = sent.last().unwrap();
    assert!(
        max_diff(&emu.joints(), last) < 0.01,
        "{:?} vs {last:?}",
        emu.joints()
    );
}

/// A new connection straight to the controller brings the arm up and runs a trajectory.
async fn next_run_connects_cleanly(emu: &Emu) {
    let mut robot = XarmRobot::connect(model(), &emu.settings()).await.unwrap();
    let q = robot.joint_positions().await.unwrap();
    let mut goal = q.clone();
    goal[1] += 0.05;
    robot.execute(&checked(&q, &goal, &q)).await.unwrap();
    assert!(max_diff(&emu.joints(), &goal) < 0.01);
}

/// The driver, through a proxy making `fault`, streams [`long_move`]: the proxy, the robot, the
/// trajectory and how the stream ended.
async fn stream_through(
    emu: &Emu,
    fault: Fault,
) -> (
    FaultLink,
    XarmRobot,
    pointact_core::safety::CheckedTrajectory,
    Result<(), RobotError>,
) {
    let link = FaultLink::start(emu, fault).await;
    let mut robot = XarmRobot::connect(model(), &link.settings()).await.unwrap();
    let (_, t) = long_move();
    let result = robot.execute(&t).await;
    (link, robot, t, result)
}

/// After a fault: no jump among the setpoints that reached the arm, a stop that reached it (on a
/// connection of its own when `elsewhere`), the arm at rest where the last setpoint put it, and
/// a clean next run.
async fn assert_stopped_cleanly(
    emu: &Emu,
    link: &FaultLink,
    t: &pointact_core::safety::CheckedTrajectory,
    elsewhere: bool,
) {
    let sent = link.setpoints();
    assert_no_jump(&sent, t);
    let (_, conn) = link.stop().expect("a stop reached the controller");
    assert_eq!(conn != 0, elsewhere, "the stop came on connection {conn}");
    assert_stopped_at_last_setpoint(emu, &sent);
    next_run_connects_cleanly(emu).await;
}

#[test]
fn a_delay_spike_under_the_watchdog_is_ridden_out_without_a_jump() {
    let emu = Emu::start(home());
    guard(async {
        let (link, _robot, t, result) =
            stream_through(&emu, Fault::Delay(Duration::from_millis(50))).await;
        result.unwrap();
        let goal = t.trajectory().end().to_vec();
        let sent = link.setpoints();
        assert_no_jump(&sent, &t);
        // Every sample went out, in order: the spike delayed the trajectory, it skipped nothing.
        assert_eq!(sent.len(), t.trajectory().samples(t.dt()).len());
        assert!(max_diff(&emu.joints(), &goal) < 0.01);
        assert!(link.stop().is_none(), "nothing stopped the arm");
    });
}

#[test]
fn a_delay_spike_past_the_watchdog_stops_the_arm_before_the_late_setpoint_lands() {
    let emu = Emu::start(home());
    guard(async {
        let (link, _robot, t, result) =
            stream_through(&emu, Fault::Delay(Duration::from_millis(500))).await;
        let err = result.unwrap_err();
        assert!(
            matches!(err, RobotError::LinkStalled { waited_s } if waited_s <= 0.2 + 1e-9),
            "{err}"
        );
        assert!(err.to_string().contains("servo watchdog"), "{err}");
        // The stop went out on a connection of its own and reached the controller before the
        // delayed setpoint, which the stopped controller then discarded.
        let (stop_at, _) = link.stop().expect("a stop");
        tokio::time::sleep(Duration::from_millis(600)).await;
        let late = link
            .log()
            .iter()
            .rposition(|f| f.req.funcode == reg::MOVE_SERVOJ)
            .unwrap();
        assert!(stop_at < late, "the stop landed after the late setpoint");
        let sent = link.setpoints();
        assert_eq!(sent.len(), AFTER + 1, "the late setpoint landed, once");
        assert_stopped_at_last_setpoint(&emu, &sent[..AFTER]);
        assert_no_jump(&sent, &t);
        next_run_connects_cleanly(&emu).await;
    });
}

#[test]
fn a_lost_segment_is_a_stall_that_stops_the_arm() {
    let emu = Emu::start(home());
    guard(async {
        let (link, _robot, t, result) = stream_through(&emu, Fault::Lose).await;
        let err = result.unwrap_err();
        assert!(matches!(err, RobotError::LinkStalled { .. }), "{err}");
        let sent = link.setpoints();
        assert_eq!(
            sent.len(),
            AFTER,
            "nothing after the lost setpoint reached the arm"
        );
        assert_stopped_cleanly(&emu, &link, &t, true).await;
    });
}

#[test]
fn report_frames_out_of_order_are_a_protocol_fault_that_stops_the_arm() {
    let emu = Emu::start(home());
    guard(async {
        let (link, _robot, t, result) = stream_through(&emu, Fault::SwapReports).await;
        let err = result.unwrap_err();
        assert!(
            matches!(&err, RobotError::Protocol(w) if w.contains("out of order")),
            "{err}"
        );
        let sent = link.setpoints();
        assert!(sent.len() > AFTER && sent.len() < t.trajectory().samples(t.dt()).len());
        // The command socket still works: the stop goes on it.
        assert_stopped_cleanly(&emu, &link, &t, false).await;
    });
}

#[test]
fn a_link_cut_mid_trajectory_stops_the_arm_over_a_new_connection() {
    let emu = Emu::start(home());
    guard(async {
        let (link, mut robot, t, result) = stream_through(&emu, Fault::Cut).await;
        let err = result.unwrap_err();
        assert!(matches!(err, RobotError::Disconnected(_)), "{err}");
        assert_eq!(link.setpoints().len(), AFTER);
        // Later calls on the dead client say so at once instead of waiting on a dead socket.
        let again = robot.joint_positions().await.unwrap_err();
        assert!(matches!(again, RobotError::Disconnected(_)), "{again}");
        assert_stopped_cleanly(&emu, &link, &t, true).await;
    });
}

#[test]
fn a_controller_that_stops_answering_is_a_stall_and_the_unanswered_stop_is_named() {
    let emu = Emu::start(home());
    guard(async {
        let (link, _robot, t, result) = stream_through(&emu, Fault::Hang).await;
        let text = result.unwrap_err().to_string();
        assert!(
            text.contains("servo watchdog") && text.contains("stop on a new command connection"),
            "{text}"
        );
        let sent = link.setpoints();
        assert_eq!(sent.len(), AFTER);
        assert_no_jump(&sent, &t);
        // The controller never heard the stop; the arm holds the last setpoint it took.
        assert!(link.stop().is_none());
        assert!(max_diff(&emu.joints(), sent.last().unwrap()) < 0.01);
        assert!(link.hung.load(Ordering::SeqCst));
        next_run_connects_cleanly(&emu).await;
    });
}
