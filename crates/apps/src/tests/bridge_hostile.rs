//! `serve bridge` against observations that are finite but absurd, or that disagree with
//! themselves.
//!
//! | test | checks |
//! | --- | --- |
//! | `a_recorded_maniskill3_observation_agrees_with_itself` | the observation ManiSkill3 sent at the reset of the carrot task (`tests/fixtures/maniskill3_obs.npz`, the `msg_*` entries) passes [`check::observation`]; the same with the TCP given in the base frame, 10 m away, joints of 100 rad and 1e300, a finger at 1 m, or a target 1e30 m out is refused, naming the field and the distance |
//! | `connections_are_bounded_in_number_and_time` | on loopback: a socket that never starts the WebSocket handshake is closed after the handshake timeout; a client that handshakes and goes silent is closed after the idle timeout while one that keeps sending is served; with `max_connections` 2 held by idle sockets, a third is closed at once, and a freed slot serves a reset again, of an episode id past 2^63 |
//! | `waiting_episodes_hold_no_thread` | on a runtime of 2 workers and 4 blocking threads, 24 clients reset an episode and send nothing; one more client is still answered `ready` and an action for its first observation |
//! | `absurd_observations_never_become_absurd_actions` | a property over seeded random streams, delta and joint mode, on the real server over loopback: after a valid first observation, each further one has its TCP, target, base pose or joints moved by amounts from a millimetre to 1e300; every answer is either a text naming a field or an action that passes [`check::action`] (finite, inside the controller's per-step bounds, joint targets inside the limits); a first observation that is absurd gets a text, never a hold at its joints |
//! | `sizes_are_bounded_and_said` | a 9 MB instruction is refused at the reset naming the field and the 4096-byte limit, and the connection still resets with a short one; a 66 MiB frame is answered with a close frame of code 1009 naming the limit, not a dropped socket |
//! | `unfinished_frames_are_bounded_over_all_connections` | with a 4 MiB bound, one client stalls 2.5 MiB into a 3 MiB frame; a second doing the same is closed with 1013 naming `--max-unfinished-mib`; a third is then served a reset while the first still stalls (the closed connection's share was given back) |
//! | `protocol_violations_are_closed_with_their_code` | an unmasked frame and a reserved opcode are answered with a close frame of code 1002, a text frame that is not UTF-8 with 1007, each with tungstenite's reason, not a dropped socket |
//! | `observation_sizes_fit_the_frame` | the largest image served (1920×1200) with float64 depth and a 4-channel int32 segmentation encodes inside the frame limit and decodes; 4096×4096 is refused naming 1920x1200; an answer's detail is cut to 1024 bytes at a character boundary |

use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::sync::oneshot;

use super::bridge_server::{bridge_episode, small_observation, with_field, FirstObservation};
use pointact::bridge::check;
use pointact::bridge::protocol::{ClientMessage, ServerMessage};
use pointact::bridge::remote::{ControlMode, EpisodeStart, Observation, RemoteError};
use pointact::bridge::{BridgeClient, BridgeServer, ServerLimits, SessionConfig};
use pointact::camera::{Frame, RgbImage};
use pointact::geometry::{DepthImage, Intrinsics};
use pointact::kinematics::RobotModel;
use pointact::nalgebra::{Isometry3, Quaternion, Translation3, UnitQuaternion, Vector3};
use pointact::runner::pointer::SessionPointer;
use pointact::runner::remote::{run_remote_episode, RemoteOptions};

fn widowx() -> RobotModel {
    RobotModel::builtin("widowx250").expect("the built-in widowx250")
}

/// `[x, y, z, qw, qx, qy, qz]` as a pose.
fn pose(v: [f64; 7]) -> Isometry3<f64> {
    Isometry3::from_parts(
        Translation3::new(v[0], v[1], v[2]),
        UnitQuaternion::from_quaternion(Quaternion::new(v[3], v[4], v[5], v[6])),
    )
}

/// The poses and joints ManiSkill3 3.0.1 sent at the reset of `PutCarrotOnPlateInScene-v1`
/// episode 0 (`tests/fixtures/maniskill3_obs.npz`: `msg_base_pose`, `msg_tcp_pose`, `msg_qpos`,
/// `msg_target_pose`), with a blank 4×3 image: the checks read no pixels.
fn maniskill3_reset() -> Observation {
    let (w, h) = (4, 3);
    let frame = Frame {
        rgb: RgbImage::from_raw(w as u32, h as u32, vec![0; w * h * 3]).expect("rgb"),
        depth: DepthImage {
            width: w,
            height: h,
            data: vec![0.5; w * h],
        },
        intrinsics: Intrinsics::pinhole(w, h, 5.0, 5.0, 1.5, 1.0),
        base_from_camera: Isometry3::identity(),
        stamp_s: 0.0,
    };
    Observation {
        step: 0,
        frame,
        camera_from_world: Isometry3::identity(),
        world_from_base: pose([
            0.14699998497962952,
            0.02800000086426735,
            0.8700000047683716,
            4.5702108764089644e-11,
            0.0,
            0.0,
            1.0000001192092896,
        ]),
        world_from_tcp: pose([
            -0.14506939053535461,
            0.034091461449861526,
            1.0053209066390991,
            0.008083805441856384,
            -0.7268655300140381,
            0.005257070064544678,
            0.6867120862007141,
        ]),
        qpos: vec![
            -0.01840776950120926,
            0.03988350182771683,
            0.22242721915245056,
            -0.004601940046995878,
            1.3652429580688477,
            0.0015339800156652927,
            0.03700000047683716,
            0.03700000047683716,
        ],
        base_from_target: pose([
            0.2920694351196289,
            -0.006091460585594177,
            0.13532090187072754,
            0.6867121458053589,
            0.005257070530205965,
            0.7268655896186829,
            -0.008083806373178959,
        ]),
        labels: None,
    }
}

fn refused(model: &RobotModel, obs: &Observation, field: &str) -> String {
    match check::observation(model, obs) {
        Ok(()) => panic!("an observation with a bad {field} passed"),
        Err(e) => {
            assert!(e.contains(field), "{e} does not name {field}");
            e
        }
    }
}

#[test]
fn a_recorded_maniskill3_observation_agrees_with_itself() {
    let model = widowx();
    let good = maniskill3_reset();
    check::observation(&model, &good).expect("ManiSkill3's own observation");

    // The TCP sent in the base frame instead of the world's: half a metre off.
    let mut o = good.clone();
    o.world_from_tcp = good.base_from_tcp();
    let e = refused(&model, &o, "\"tcp_pose\"");
    assert!(e.contains(" mm "), "{e}");
    // 10 m away, and 1e300.
    for far in [10.0, 1e300] {
        let mut o = good.clone();
        o.world_from_tcp.translation.vector.x += far;
        refused(&model, &o, "\"tcp_pose\"");
    }
    // The base pose moved (the TCP then disagrees with the joints).
    let mut o = good.clone();
    o.world_from_base.translation.vector.z -= 0.5;
    refused(&model, &o, "\"tcp_pose\"");
    // Joints in degrees, or absurd.
    for q in [100.0, 1e300, -1e30] {
        let mut o = good.clone();
        o.qpos[0] = q;
        let e = refused(&model, &o, "\"qpos\"[0]");
        assert!(
            e.contains("waist") && e.contains("outside its limits"),
            "{e}"
        );
    }
    let mut o = good.clone();
    o.qpos[7] = 1.0;
    refused(&model, &o, "\"qpos\"[7]");
    // A target far outside the arm's workspace.
    for far in [2.0, 1e30] {
        let mut o = good.clone();
        o.base_from_target.translation.vector.y += far;
        refused(&model, &o, "\"target_pose\"");
    }
    // Within the slack: a joint 0.01 rad past its limit, the TCP 5 mm off.
    let mut o = good.clone();
    o.world_from_tcp.translation.vector.z += 0.005;
    check::observation(&model, &o).expect("5 mm of TCP disagreement is rounding");
}

/// A random observation derived from `good`: one or two fields moved by a random amount, from a
/// millimetre to 1e300, in a random direction.
fn perturbed(good: &Observation, rng: &mut ChaCha8Rng) -> Observation {
    let mut o = good.clone();
    let scale = [1e-3, 1e-2, 0.1, 1.0, 10.0, 100.0, 1e30, 1e300][rng.gen_range(0..8)];
    let amount = scale * if rng.gen_bool(0.5) { 1.0 } else { -1.0 };
    let axis = rng.gen_range(0..3);
    for _ in 0..rng.gen_range(1..=2) {
        match rng.gen_range(0..5) {
            0 => o.world_from_tcp.translation.vector[axis] += amount,
            1 => o.base_from_target.translation.vector[axis] += amount,
            2 => o.world_from_base.translation.vector[axis] += amount,
            3 => {
                let i = rng.gen_range(0..o.qpos.len());
                o.qpos[i] += amount;
            }
            _ => {
                let turn =
                    UnitQuaternion::from_scaled_axis(Vector3::new(0.0, 0.0, amount.min(3.0)));
                o.world_from_tcp.rotation = turn * o.world_from_tcp.rotation;
            }
        }
    }
    o
}

/// The first observation the SimplerEnv stand-in sends for the spoon task.
async fn stand_in_observation() -> Observation {
    let episode = bridge_episode("bridge/spoon_on_towel", 0);
    let mut first = FirstObservation(None);
    let mut cheap = RemoteOptions::default();
    cheap.episode.settle_s = 0.0;
    run_remote_episode(&episode, &cheap, &mut first)
        .await
        .expect("record an observation");
    first.0.expect("an observation")
}

fn start(episode_id: u64, mode: ControlMode) -> ClientMessage {
    ClientMessage::Reset(EpisodeStart {
        task: "hostile".into(),
        instruction: "put the spoon on the towel".into(),
        episode_id,
        control_mode: mode,
        control_freq: 5.0,
        max_steps: 60,
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn absurd_observations_never_become_absurd_actions() {
    let model = Arc::new(widowx());
    let config = SessionConfig::new(SessionPointer::Oracle(Default::default()), model.clone());
    let server = BridgeServer::bind("127.0.0.1:0", config)
        .await
        .expect("bind a loopback port");
    let addr = server.local_addr().expect("bound address").to_string();
    let (_stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(server.serve(async {
        let _ = stopped.await;
    }));

    let good = stand_in_observation().await;
    check::observation(&model, &good).expect("the stand-in's observation agrees with itself");

    let (mut actions, mut refusals) = (0, 0);
    for (k, mode) in [ControlMode::DeltaEe, ControlMode::JointPos]
        .into_iter()
        .cycle()
        .take(6)
        .enumerate()
    {
        let mut rng = ChaCha8Rng::seed_from_u64(k as u64);
        let mut c = BridgeClient::connect(&addr).await.expect("connect");
        match c.request(&start(k as u64, mode)).await {
            Ok(ServerMessage::Ready { .. }) => {}
            other => panic!("reset: {other:?}"),
        }
        // Odd streams start with an absurd observation: a text, never a hold at its joints.
        let mut step = 0;
        if k % 2 == 1 {
            let mut o = good.clone();
            o.qpos[0] = [100.0, 1e300, -7.0][k % 3];
            match c.request(&ClientMessage::Infer(Box::new(o))).await {
                Err(RemoteError::Policy(text)) => {
                    assert!(text.contains("\"qpos\"[0]"), "{text}");
                    refusals += 1;
                }
                other => panic!("an absurd first observation was answered {other:?}"),
            }
        }
        for i in 0..40 {
            let mut o = if i == 0 {
                good.clone()
            } else {
                perturbed(&good, &mut rng)
            };
            o.step = step;
            match c.request(&ClientMessage::Infer(Box::new(o))).await {
                Ok(ServerMessage::Action(a)) => {
                    check::action(&model, mode, &a.values).unwrap_or_else(|e| {
                        panic!("stream {k}, observation {i}: the server sent {a:?}: {e}")
                    });
                    actions += 1;
                    step += 1;
                }
                Err(RemoteError::Policy(text)) => {
                    assert!(
                        text.starts_with("pointact bridge: ") && text.contains('"'),
                        "a refusal names its field: {text}"
                    );
                    assert!(i > 0, "the valid observation was refused: {text}");
                    refusals += 1;
                    step += 1;
                }
                other => panic!("stream {k}, observation {i}: {other:?}"),
            }
        }
    }
    eprintln!("{actions} actions, {refusals} refusals");
    assert!(
        actions >= 6 && refusals >= 20,
        "{actions} actions, {refusals} refusals"
    );
}

/// A server on a free loopback port with `limits`, serving until the returned sender is dropped.
async fn limited_server(limits: ServerLimits) -> (String, oneshot::Sender<()>) {
    let config = SessionConfig::new(
        SessionPointer::Oracle(Default::default()),
        Arc::new(widowx()),
    );
    let server = BridgeServer::bind("127.0.0.1:0", config)
        .await
        .expect("bind a loopback port")
        .with_limits(limits);
    let addr = server.local_addr().expect("bound address").to_string();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(server.serve(async {
        let _ = stopped.await;
    }));
    (addr, stop)
}

/// Whether the server closes `socket` within `within` (a read returns end of file or an error).
async fn closed_within(socket: &mut tokio::net::TcpStream, within: Duration) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, socket.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn connections_are_bounded_in_number_and_time() {
    // A socket that never starts the handshake is closed after the handshake timeout.
    let (addr, _stop) = limited_server(ServerLimits {
        max_connections: 8,
        handshake_timeout: Duration::from_millis(300),
        idle_timeout: Duration::from_millis(600),
        ..ServerLimits::default()
    })
    .await;
    let mut silent = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    assert!(
        closed_within(&mut silent, Duration::from_secs(3)).await,
        "a socket without a handshake stayed open"
    );
    // A client that handshakes and then sends nothing is closed after the idle timeout; one
    // that keeps talking is not.
    let mut idle = BridgeClient::connect(&addr).await.expect("connect");
    let mut busy = BridgeClient::connect(&addr).await.expect("connect");
    for i in 0..4 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let text = {
            busy.send_raw(vec![0xc1]).await.expect("send");
            busy.next_text().await.expect("the busy client is answered")
        };
        assert!(text.contains("unreadable"), "{i}: {text}");
    }
    match idle.request(&start(1, ControlMode::DeltaEe)).await {
        // The server's close frame, or the socket already gone.
        Err(RemoteError::Link(_)) => {}
        Err(RemoteError::Policy(e)) if e.contains("Close") => {}
        other => panic!("an idle connection stayed open: {other:?}"),
    }

    // One connection more than the limit is closed at once; a freed slot serves again.
    let (addr, _stop) = limited_server(ServerLimits {
        max_connections: 2,
        handshake_timeout: Duration::from_secs(30),
        idle_timeout: Duration::from_secs(30),
        ..ServerLimits::default()
    })
    .await;
    let held: Vec<_> = futures_util::future::join_all(
        (0..2).map(|_| tokio::net::TcpStream::connect(addr.clone())),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut third = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    assert!(
        closed_within(&mut third, Duration::from_secs(2)).await,
        "a connection past --max-connections was kept"
    );
    drop(held);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut c = BridgeClient::connect(&addr)
        .await
        .expect("a freed slot serves");
    // An episode id from 2^63 up travels as msgpack's uint 64: still a non-negative integer.
    let id = (1u64 << 63) + 5;
    match c.request(&start(id, ControlMode::DeltaEe)).await {
        Ok(ServerMessage::Ready { episode_id, .. }) => assert_eq!(episode_id, id),
        other => panic!("reset after slots were freed: {other:?}"),
    }
}

/// Episodes that were reset and wait for their first observation hold no thread: on a runtime of
/// 2 workers and 4 blocking threads, 24 of them leave a further client served (an episode per
/// blocking thread would queue its `reset` behind them forever).
#[test]
fn waiting_episodes_hold_no_thread() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(4)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let (addr, _stop) = limited_server(ServerLimits::default()).await;
        let good = stand_in_observation().await;
        let mut waiting = Vec::new();
        for k in 0..24 {
            let mut c = BridgeClient::connect(&addr).await.expect("connect");
            match c.request(&start(100 + k, ControlMode::DeltaEe)).await {
                Ok(ServerMessage::Ready { .. }) => waiting.push(c),
                other => panic!("reset {k}: {other:?}"),
            }
        }
        let mut c = BridgeClient::connect(&addr).await.expect("connect");
        let served = tokio::time::timeout(Duration::from_secs(60), async {
            match c.request(&start(1, ControlMode::DeltaEe)).await {
                Ok(ServerMessage::Ready { .. }) => {}
                other => panic!("reset: {other:?}"),
            }
            c.request(&ClientMessage::Infer(Box::new(good))).await
        })
        .await
        .expect("a client beside 24 waiting episodes is answered");
        match served {
            Ok(ServerMessage::Action(a)) => {
                check::action(&widowx(), ControlMode::DeltaEe, &a.values).expect("a valid action")
            }
            other => panic!("the first observation was answered {other:?}"),
        }
        drop(waiting);
    });
}

#[tokio::test(flavor = "multi_thread")]
async fn sizes_are_bounded_and_said() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
    use tokio_tungstenite::tungstenite::Message;
    let (addr, _stop) = limited_server(ServerLimits::default()).await;

    // A 9 MB instruction is refused at the reset, naming the field and the limit: it would
    // otherwise travel into every log line and every answer that quotes it.
    let mut c = BridgeClient::connect(&addr).await.expect("connect");
    let mut big = start(1, ControlMode::DeltaEe);
    if let ClientMessage::Reset(s) = &mut big {
        s.instruction = "put the spoon on the towel ".repeat(350_000);
    }
    match c.request(&big).await {
        Err(RemoteError::Policy(t)) => assert!(
            t.contains("\"instruction\"") && t.contains("9450000 bytes, at most 4096"),
            "{}",
            &t[..t.len().min(300)]
        ),
        other => panic!("a 9 MB instruction was answered {other:?}"),
    }
    // The same connection still resets with a sentence-long one.
    match c.request(&start(2, ControlMode::DeltaEe)).await {
        Ok(ServerMessage::Ready { episode_id: 2, .. }) => {}
        other => panic!("reset after a refused one: {other:?}"),
    }

    // A frame over the limit is answered with a close frame saying so (1009, message too big).
    let (mut tx, mut rx) = raw_client(&addr).await.split();
    let sender = tokio::spawn(async move {
        let _ = tx.send(Message::Binary(vec![0x90; 66 << 20].into())).await;
        tx
    });
    let frame = close_frame(&mut rx).await;
    assert_eq!(frame.code, CloseCode::Size);
    assert!(
        frame.reason.contains("the bridge's limit"),
        "{}",
        frame.reason
    );
    let _ = sender.await;
}

/// A plain WebSocket client of the server at `addr`, past the handshake and the metadata frame,
/// for frames `BridgeClient` would never send.
async fn raw_client(
    addr: &str,
) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>> {
    use futures_util::StreamExt;
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}"))
        .await
        .expect("connect");
    let _metadata = ws.next().await.expect("metadata").expect("metadata");
    ws
}

/// The close frame the server sends next (other messages skipped), within 10 s.
async fn close_frame<S>(rx: &mut S) -> tokio_tungstenite::tungstenite::protocol::CloseFrame
where
    S: futures_util::Stream<
            Item = Result<
                tokio_tungstenite::tungstenite::Message,
                tokio_tungstenite::tungstenite::Error,
            >,
        > + Unpin,
{
    use futures_util::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match rx.next().await {
                Some(Ok(Message::Close(frame))) => return frame,
                Some(Ok(_)) => continue,
                other => panic!("no close frame: {other:?}"),
            }
        }
    })
    .await
    .expect("a close frame within 10 s")
    .expect("a close frame with a code")
}

#[tokio::test(flavor = "multi_thread")]
async fn unfinished_frames_are_bounded_over_all_connections() {
    use tokio::io::AsyncWriteExt;
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
    let (addr, _stop) = limited_server(ServerLimits {
        max_unfinished_bytes: 4 << 20,
        ..ServerLimits::default()
    })
    .await;
    // A client that starts a 3 MiB binary frame (masked, as a client's must be; a zero mask
    // leaves the payload as sent) and sends 2.5 MiB of it.
    let stall = || async {
        let mut ws = raw_client(&addr).await;
        let mut frame = vec![0x82, 0x80 | 127];
        frame.extend_from_slice(&(3u64 << 20).to_be_bytes());
        frame.extend_from_slice(&[0; 4]);
        frame.resize(frame.len() + (5 << 19), 0x90);
        let _ = ws.get_mut().write_all(&frame).await;
        ws
    };
    let first = stall().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut second = stall().await;
    let frame = close_frame(&mut second).await;
    assert_eq!(frame.code, CloseCode::Again);
    assert!(
        frame.reason.contains("--max-unfinished-mib"),
        "{}",
        frame.reason
    );
    drop(second);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut c = BridgeClient::connect(&addr).await.expect("connect");
    match c.request(&start(3, ControlMode::DeltaEe)).await {
        Ok(ServerMessage::Ready { episode_id: 3, .. }) => {}
        other => panic!("a reset beside one stalled client: {other:?}"),
    }
    drop(first);
}

#[tokio::test(flavor = "multi_thread")]
async fn protocol_violations_are_closed_with_their_code() {
    use tokio::io::AsyncWriteExt;
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
    let (addr, _stop) = limited_server(ServerLimits::default()).await;
    // Raw frames: FIN and opcode, then the length (the mask bit set: a zero mask follows).
    let masked = |op: u8, payload: &[u8]| {
        let mut f = vec![0x80 | op, 0x80 | payload.len() as u8, 0, 0, 0, 0];
        f.extend_from_slice(payload);
        f
    };
    let cases: [(&str, Vec<u8>, CloseCode, &str); 3] = [
        (
            "an unmasked binary frame",
            vec![0x82, 0x01, 0x90],
            CloseCode::Protocol,
            "unmasked",
        ),
        (
            "a reserved data opcode",
            masked(0x3, b"x"),
            CloseCode::Protocol,
            "opcode",
        ),
        (
            "text that is not UTF-8",
            masked(0x1, &[0xff, 0xfe]),
            CloseCode::Invalid,
            "utf-8",
        ),
    ];
    for (what, bytes, code, said) in cases {
        let mut ws = raw_client(&addr).await;
        ws.get_mut().write_all(&bytes).await.expect("send");
        let frame = close_frame(&mut ws).await;
        assert_eq!(frame.code, code, "{what}: {}", frame.reason);
        assert!(
            frame.reason.to_lowercase().contains(said),
            "{what}: {}",
            frame.reason
        );
    }
}

#[test]
fn observation_sizes_fit_the_frame() {
    use pointact::bridge::protocol::{decode_client, encode_client};
    use pointact::bridge::wire::{Dtype, NdArray, Value};
    // The largest image served, with the largest depth and segmentation encodings a client may
    // send (float64; SimplerEnv's (H, W, 4) int32): inside the frame limit, and decoded.
    let frame_of = |w: usize, h: usize| {
        let mut o = small_observation();
        o.frame.rgb = RgbImage::new(w as u32, h as u32);
        o.frame.depth = DepthImage {
            width: w,
            height: h,
            data: vec![0.5; w * h],
        };
        o.frame.intrinsics =
            Intrinsics::pinhole(w, h, 500.0, 500.0, w as f64 / 2.0, h as f64 / 2.0);
        let labels = o.labels.as_mut().expect("labels");
        (labels.width, labels.height, labels.ids) = (w, h, vec![0; w * h]);
        let frame = encode_client(&ClientMessage::Infer(Box::new(o))).expect("encode");
        let depth = NdArray::new(Dtype::F64, vec![h, w], vec![0u8; w * h * 8]).unwrap();
        let frame = with_field(&frame, "depth", Value::NdArray(depth));
        let seg = NdArray::new(Dtype::I32, vec![h, w, 4], vec![0u8; w * h * 16]).unwrap();
        with_field(&frame, "segmentation", Value::NdArray(seg))
    };
    let largest = frame_of(1920, 1200);
    assert!(largest.len() > 60_000_000, "{}", largest.len());
    match decode_client(&largest) {
        Ok(ClientMessage::Infer(o)) => assert_eq!(o.frame.rgb.dimensions(), (1920, 1200)),
        other => panic!("the largest observation served: {other:?}"),
    }
    let small = frame_of(64, 48);
    let e = decode_client(&with_field(
        &small,
        "rgb",
        Value::NdArray(
            NdArray::new(Dtype::U8, vec![4096, 4096, 3], vec![0u8; 4096 * 4096 * 3]).unwrap(),
        ),
    ))
    .map(|_| ())
    .unwrap_err()
    .to_string();
    assert!(e.contains("4096x4096") && e.contains("1920x1200"), "{e}");

    // An answer's detail is cut at 1024 bytes, at a character boundary, ending in an ellipsis.
    let long = "é".repeat(2000);
    let cut = pointact::bridge::protocol::bounded_detail(&long);
    assert!(cut.len() <= 1024 && cut.ends_with('…'), "{}", cut.len());
    assert!(cut.len() > 1000, "{}", cut.len());
    assert_eq!(pointact::bridge::protocol::bounded_detail("short"), "short");
}
