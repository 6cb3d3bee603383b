//! The frame server and `RemoteCamera` (`camera::net`): frames survive the trip (colour exact,
//! depth to the 0.1 mm step, intrinsics, pose and stamp bit-identical), the served camera's errors
//! reach the client as `CameraError::Device`, and every malformed, truncated, oversized, closed or
//! silent answer is a typed error within the timeout, never a panic or a hang.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crate::camera::net::{
    self, bind_local, encode_error, encode_frame, serve, NetError, RemoteCamera, ERROR_MAGIC,
    FRAME_MAGIC, MAX_MESSAGE_BYTES, MAX_SIDE, WIRE_VERSION,
};
use crate::camera::{Camera, CameraError, CameraSpec, Frame, RgbImage};
use crate::geometry::{DepthImage, Distortion, Intrinsics};
use k::nalgebra::{Isometry3, Translation3, UnitQuaternion, Vector3};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Short enough that a test about a silent server ends quickly, long enough for a loaded CI box.
const SHORT: Duration = Duration::from_millis(500);
/// For answers that do come: generous, since it only bounds a failing test.
const LONG: Duration = Duration::from_secs(20);

const W: usize = 37;
const H: usize = 23;

/// Frame number `k`, the same every time it is built: random colour, depth up to 6 m with NaN, 0,
/// negative and infinite holes, distorted intrinsics with awkward numbers, a non-trivial pose,
/// and a stamp that is no short binary fraction. The stamp encodes `k` (see [`index_of`]).
fn synthetic_frame(k: u64) -> Frame {
    let mut rng = ChaCha8Rng::seed_from_u64(k);
    let rgb = RgbImage::from_fn(W as u32, H as u32, |_, _| {
        image::Rgb([rng.gen(), rng.gen(), rng.gen()])
    });
    let data = (0..W * H)
        .map(|i| match i % 13 {
            0 => f32::NAN,
            5 => 0.0,
            7 => -0.25,
            11 => f32::INFINITY,
            _ => rng.gen_range(0.1f32..=6.0),
        })
        .collect();
    let intrinsics = Intrinsics {
        model: Distortion::BrownConrady,
        coeffs: [0.113, -0.0231, 0.00071, -0.00042, 0.00123],
        ..Intrinsics::pinhole(W, H, 41.234567891, 40.987654321, 18.3, 11.1)
    };
    let rotation = UnitQuaternion::from_axis_angle(
        &k::nalgebra::Unit::new_normalize(Vector3::new(0.3, -1.0, 0.2 + k as f64)),
        0.7 + 0.1 * k as f64,
    );
    Frame {
        rgb,
        depth: DepthImage::new(W, H, data).unwrap(),
        intrinsics,
        base_from_camera: Isometry3::from_parts(
            Translation3::new(0.412345, -0.1 * k as f64, 0.987654321),
            rotation,
        ),
        stamp_s: 1000.0 + k as f64 / 3.0,
    }
}

fn index_of(frame: &Frame) -> u64 {
    ((frame.stamp_s - 1000.0) * 3.0).round() as u64
}

fn valid(d: f32) -> bool {
    d.is_finite() && d > 0.0
}

/// Colour exact; depth within half the 0.1 mm step (plus f32 rounding of the metre value) where it
/// was valid, invalid where it was not; intrinsics, pose and stamp bit-identical.
fn assert_same(got: &Frame, want: &Frame) {
    assert_eq!(got.rgb.dimensions(), want.rgb.dimensions());
    assert_eq!(got.rgb.as_raw(), want.rgb.as_raw(), "colour");
    assert_eq!((got.depth.width, got.depth.height), (W, H));
    for (i, (&g, &w)) in got.depth.data.iter().zip(&want.depth.data).enumerate() {
        if valid(w) {
            assert!(
                valid(g) && (g - w).abs() <= 0.05e-3 + 1e-6,
                "depth[{i}]: sent {w}, got {g}"
            );
        } else {
            assert!(!valid(g), "depth[{i}]: sent invalid {w}, got {g}");
        }
    }
    assert_eq!(got.intrinsics, want.intrinsics);
    assert_eq!(got.base_from_camera, want.base_from_camera);
    assert_eq!(got.stamp_s.to_bits(), want.stamp_s.to_bits());
    got.validate().unwrap();
}

/// A frame server on its own runtime, stopped (and awaited) on drop.
struct Served {
    rt: tokio::runtime::Runtime,
    addr: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Served {
    fn start(
        camera: impl FnMut() -> Result<Frame, CameraError> + Send + 'static,
        rt: tokio::runtime::Runtime,
    ) -> Served {
        let listener = rt.block_on(bind_local(0)).unwrap();
        let addr = listener.local_addr().unwrap();
        assert!(addr.ip().is_loopback(), "{addr}");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = rt.spawn(serve(listener, 64, camera, async move {
            let _ = stopped.await;
        }));
        Served {
            rt,
            addr: addr.to_string(),
            stop: Some(stop),
            task: Some(task),
        }
    }

    fn new(camera: impl FnMut() -> Result<Frame, CameraError> + Send + 'static) -> Served {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        Self::start(camera, rt)
    }

    /// Stops the server and waits for `serve` to return.
    fn stop(&mut self) {
        if let (Some(stop), Some(task)) = (self.stop.take(), self.task.take()) {
            let _ = stop.send(());
            self.rt
                .block_on(async { tokio::time::timeout(LONG, task).await })
                .expect("serve returns after shutdown")
                .unwrap();
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if !thread::panicking() {
            self.stop();
        }
    }
}

/// A camera that serves `synthetic_frame(1)`, `(2)`, … in order.
fn counting_camera() -> impl FnMut() -> Result<Frame, CameraError> + Send + 'static {
    let mut k = 0;
    move || {
        k += 1;
        Ok(synthetic_frame(k))
    }
}

fn net_error(r: Result<Frame, CameraError>) -> NetError {
    match r {
        Err(CameraError::Net(e)) => e,
        Err(e) => panic!("expected a network error, got {e:?}"),
        Ok(_) => panic!("expected a network error, got a frame"),
    }
}

#[test]
fn frames_round_trip_exactly() {
    let server = Served::new(counting_camera());
    let mut cam = RemoteCamera::connect(&server.addr, LONG).unwrap();
    assert_eq!(cam.addr(), server.addr);
    for k in 1..=4 {
        let frame = cam.capture().unwrap();
        assert_eq!(index_of(&frame), k, "captures in order");
        assert_same(&frame, &synthetic_frame(k));
    }
}

#[test]
fn two_clients_at_once_get_every_frame_once() {
    let server = Served::new(counting_camera());
    let per_client = 5;
    let clients: Vec<_> = (0..2)
        .map(|_| {
            let addr = server.addr.clone();
            thread::spawn(move || {
                let mut cam = RemoteCamera::connect(&addr, LONG).unwrap();
                (0..per_client)
                    .map(|_| {
                        let frame = cam.capture().unwrap();
                        let k = index_of(&frame);
                        assert_same(&frame, &synthetic_frame(k));
                        k
                    })
                    .collect::<Vec<u64>>()
            })
        })
        .collect();
    let mut seen: Vec<u64> = clients
        .into_iter()
        .flat_map(|c| {
            let ks = c.join().unwrap();
            assert!(ks.windows(2).all(|p| p[0] < p[1]), "{ks:?}");
            ks
        })
        .collect();
    seen.sort();
    // Captures are serialised: each one ran once, for exactly one client.
    assert_eq!(seen, (1..=2 * per_client as u64).collect::<Vec<_>>());
}

#[test]
fn camera_open_connects_tcp_specs() {
    let server = Served::new(counting_camera());
    let spec: CameraSpec = format!("tcp:{}", server.addr).parse().unwrap();
    assert_eq!(
        spec,
        CameraSpec::Tcp {
            addr: server.addr.clone()
        }
    );
    let mut cam = crate::camera::open(&spec).unwrap();
    assert_same(&cam.capture().unwrap(), &synthetic_frame(1));
}

#[test]
fn the_served_cameras_error_reaches_the_client_and_the_connection_survives() {
    let mut k = 0;
    let server = Served::new(move || {
        k += 1;
        match k {
            1 => Err(CameraError::Device("renderer lost its GPU context".into())),
            // A frame that cannot be served (colour and depth sizes differ) is refused by the
            // server, not sent.
            2 => {
                let mut f = synthetic_frame(2);
                f.depth = DepthImage::new(1, 1, vec![1.0]).unwrap();
                Ok(f)
            }
            3 => panic!("camera bug"),
            _ => Ok(synthetic_frame(k)),
        }
    });
    let mut cam = RemoteCamera::connect(&server.addr, LONG).unwrap();
    match cam.capture() {
        Err(CameraError::Device(m)) => {
            assert!(m.contains("renderer lost its GPU context"), "{m}");
            assert!(m.contains(&server.addr), "{m}");
        }
        other => panic!("expected the server's error, got {other:?}"),
    }
    match cam.capture() {
        Err(CameraError::Device(m)) => assert!(m.contains("37x23 but depth is 1x1"), "{m}"),
        other => panic!("expected the size mismatch, got {other:?}"),
    }
    match cam.capture() {
        Err(CameraError::Device(m)) => assert!(m.contains("panicked"), "{m}"),
        other => panic!("expected the panic's error answer, got {other:?}"),
    }
    assert_same(&cam.capture().unwrap(), &synthetic_frame(4));
}

#[test]
fn captures_do_not_block_the_servers_runtime() {
    // One runtime thread: if a capture ran on it, nothing else could be answered meanwhile.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let listener = rt.block_on(bind_local(0)).unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (started_tx, started) = mpsc::channel::<()>();
    let (release, gate) = mpsc::channel::<()>();
    let (started_tx, gate) = (
        std::sync::Mutex::new(started_tx),
        std::sync::Mutex::new(gate),
    );
    let mut k = 0;
    let camera = move || {
        k += 1;
        if k == 1 {
            started_tx.lock().unwrap().send(()).unwrap();
            gate.lock().unwrap().recv_timeout(LONG).unwrap();
        }
        Ok(synthetic_frame(k))
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = thread::spawn(move || {
        rt.block_on(serve(listener, 64, camera, async move {
            let _ = stopped.await;
        }))
    });

    let first = {
        let addr = addr.clone();
        thread::spawn(move || RemoteCamera::connect(&addr, LONG).unwrap().capture())
    };
    started.recv_timeout(LONG).unwrap();
    // While the first capture is held, another connection is still answered (a bad request gets
    // its error frame).
    let mut raw = TcpStream::connect(&addr).unwrap();
    raw.set_read_timeout(Some(LONG)).unwrap();
    raw.write_all(b"NOPE\x01\x00\x00\x00").unwrap();
    let mut magic = [0u8; 4];
    raw.read_exact(&mut magic).unwrap();
    assert_eq!(magic, ERROR_MAGIC);
    release.send(()).unwrap();
    assert_same(&first.join().unwrap().unwrap(), &synthetic_frame(1));
    stop.send(()).unwrap();
    server.join().unwrap();
}

#[test]
fn shutdown_stops_serving() {
    let mut server = Served::new(counting_camera());
    let addr = server.addr.clone();
    let mut cam = RemoteCamera::connect(&addr, LONG).unwrap();
    cam.capture().unwrap();
    server.stop();
    // The open connection is gone and nothing listens any more.
    assert!(matches!(
        net_error(cam.capture()),
        NetError::Closed { .. } | NetError::Connect { .. }
    ));
    assert!(matches!(
        net_error(
            RemoteCamera::connect(&addr, SHORT)
                .map(|_| unreachable!("connected to a stopped server"))
        ),
        NetError::Connect { .. }
    ));
}

#[test]
fn bind_local_names_a_taken_port() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let first = rt.block_on(bind_local(0)).unwrap();
    let port = first.local_addr().unwrap().port();
    let e = rt.block_on(bind_local(port)).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse);
    let m = e.to_string();
    assert!(
        m.contains(&format!("127.0.0.1:{port}")) && m.contains("pick another port"),
        "{m}"
    );
}

// ---- fake servers -------------------------------------------------------------------------------

/// A server that answers its n-th connection with `answers[n]` (after reading the 8-byte request)
/// and closes it; once the answers are spent it stops listening, so a further connect is refused.
fn fake_server(answers: Vec<Vec<u8>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    thread::spawn(move || {
        for answer in answers {
            let Ok((mut s, _)) = listener.accept() else {
                return;
            };
            s.set_read_timeout(Some(LONG)).unwrap();
            let mut request = [0u8; 8];
            if s.read_exact(&mut request).is_err() {
                continue;
            }
            assert_eq!(&request[..4], b"PAF?");
            assert_eq!(request[4..], WIRE_VERSION.to_le_bytes());
            // The client may hang up as soon as it has seen enough.
            let _ = s.write_all(&answer);
        }
    });
    addr
}

/// One fake answer, one capture.
fn answer_once(answer: Vec<u8>) -> Result<Frame, CameraError> {
    let addr = fake_server(vec![answer]);
    RemoteCamera::connect(&addr, LONG)?.capture()
}

/// A frame answer with a hand-written header and `payload` after it.
fn frame_bytes(version: u32, header: &str, payload: &[u8]) -> Vec<u8> {
    let mut b = FRAME_MAGIC.to_vec();
    b.extend_from_slice(&version.to_le_bytes());
    b.extend_from_slice(&(header.len() as u32).to_le_bytes());
    b.extend_from_slice(header.as_bytes());
    b.extend_from_slice(payload);
    b
}

/// The header of a `w` x `h` frame as the module docs describe it, written by hand.
fn header(w: u64, h: u64) -> String {
    format!(
        "width = {w}\nheight = {h}\nstamp_s = 12.5\ndepth_scale_m = 0.001\n\
         translation = [0.5, -0.25, 1.0]\nrotation_xyzw = [0.0, 0.0, 0.6, 0.8]\n\n\
         [intrinsics]\nwidth = {w}\nheight = {h}\nfx = 100.0\nfy = 101.0\ncx = 0.5\ncy = 0.75\n"
    )
}

/// The pixels of a 2x1 frame: colour, then depth 1.5 m and no depth at scale 0.001.
fn payload_2x1() -> Vec<u8> {
    let mut p = vec![1, 2, 3, 4, 5, 6];
    p.extend_from_slice(&1500u16.to_le_bytes());
    p.extend_from_slice(&0u16.to_le_bytes());
    p
}

#[test]
fn a_hand_written_frame_decodes_as_documented() {
    let frame = answer_once(frame_bytes(WIRE_VERSION, &header(2, 1), &payload_2x1())).unwrap();
    assert_eq!(frame.rgb.as_raw(), &[1, 2, 3, 4, 5, 6]);
    assert!((frame.depth.data[0] - 1.5).abs() < 1e-6);
    assert_eq!(frame.depth.data[1], 0.0);
    assert_eq!(
        frame.intrinsics,
        Intrinsics::pinhole(2, 1, 100.0, 101.0, 0.5, 0.75)
    );
    assert_eq!(frame.stamp_s, 12.5);
    assert_eq!(
        frame.base_from_camera.translation.vector,
        Vector3::new(0.5, -0.25, 1.0)
    );
    let q = frame.base_from_camera.rotation.quaternion().coords;
    assert_eq!([q.x, q.y, q.z, q.w], [0.0, 0.0, 0.6, 0.8]);
}

#[test]
fn answers_that_are_not_frames_are_bad_magic() {
    for answer in [
        b"HTTP/1.1 400 Bad Request\r\n\r\n".to_vec(),
        [
            b"PAFX".as_slice(),
            &frame_bytes(1, &header(2, 1), &payload_2x1())[4..],
        ]
        .concat(),
        vec![0u8; 64],
    ] {
        let e = net_error(answer_once(answer.clone()));
        assert!(
            matches!(e, NetError::BadMagic { found, .. } if found[..] == answer[..4]),
            "{e}"
        );
        assert!(e.to_string().contains("not a pointact frame server"), "{e}");
    }
}

#[test]
fn another_wire_version_is_named() {
    let e = net_error(answer_once(frame_bytes(2, &header(2, 1), &payload_2x1())));
    assert!(matches!(e, NetError::Version { found: 2, .. }), "{e}");
}

#[test]
fn truncated_answers_are_typed_errors() {
    let full = encode_frame(&synthetic_frame(1)).unwrap();
    let header_len = u32::from_le_bytes(full[8..12].try_into().unwrap()) as usize;
    let rgb_start = 12 + header_len;
    let depth_start = rgb_start + W * H * 3;
    assert_eq!(full.len(), depth_start + W * H * 2, "layout as documented");
    for (cut, what) in [
        (2, "the answer's first bytes"),
        (10, "the answer's first bytes"),
        (12 + header_len / 2, "the header"),
        (rgb_start, "the colour image"),
        (rgb_start + 100, "the colour image"),
        (depth_start + 1, "the depth image"),
        (full.len() - 1, "the depth image"),
    ] {
        let e = net_error(answer_once(full[..cut].to_vec()));
        assert!(
            matches!(e, NetError::Truncated { what: w, .. } if w == what),
            "cut at {cut}: {e}"
        );
    }
    // An error answer cut short, too.
    let err = encode_error("out of memory");
    let e = net_error(answer_once(err[..err.len() - 3].to_vec()));
    assert!(
        matches!(
            e,
            NetError::Truncated {
                what: "the error message",
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn oversized_claims_are_refused_before_reading_them() {
    // 100000 x 100000 would be 50 GB of pixels: refused from the header alone.
    let e = net_error(answer_once(frame_bytes(1, &header(100_000, 100_000), &[])));
    assert!(
        matches!(
            e,
            NetError::TooLarge {
                width: 100_000,
                height: 100_000,
                ..
            }
        ),
        "{e}"
    );
    let e = net_error(answer_once(frame_bytes(
        1,
        &header(MAX_SIDE as u64 + 1, 1),
        &[],
    )));
    assert!(matches!(e, NetError::TooLarge { .. }), "{e}");
    // A header or message length beyond the format's caps.
    for magic in [FRAME_MAGIC, ERROR_MAGIC] {
        let mut b = magic.to_vec();
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&u32::MAX.to_le_bytes());
        let e = net_error(answer_once(b));
        assert!(matches!(e, NetError::Malformed { .. }), "{e}");
    }
    let mut b = ERROR_MAGIC.to_vec();
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(&(MAX_MESSAGE_BYTES + 1).to_le_bytes());
    assert!(matches!(
        net_error(answer_once(b)),
        NetError::Malformed { .. }
    ));
    // The largest allowed frame may be announced; the bytes that never come are a truncation,
    // not a 335 MB allocation up front (nor a hang: the server closes).
    let e = net_error(answer_once(frame_bytes(
        1,
        &header(MAX_SIDE as u64, MAX_SIDE as u64),
        &[7; 1000],
    )));
    assert!(
        matches!(
            e,
            NetError::Truncated {
                what: "the colour image",
                got: 1000,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn malformed_headers_are_refused() {
    let good = header(2, 1);
    let cases: Vec<(String, &str)> = vec![
        (good.replace("stamp_s = 12.5", "stamp_s = nan"), "stamp_s"),
        (
            good.replace("depth_scale_m = 0.001", "depth_scale_m = 0.0"),
            "depth_scale_m",
        ),
        (
            good.replace("[0.5, -0.25, 1.0]", "[0.5, inf, 1.0]"),
            "translation",
        ),
        (
            good.replace("[0.0, 0.0, 0.6, 0.8]", "[0.0, 0.0, 1.2, 1.6]"),
            "unit quaternion",
        ),
        (good.replace("fx = 100.0", "fx = -100.0"), "fx"),
        (
            good.replace("[intrinsics]\nwidth = 2", "[intrinsics]\nwidth = 3"),
            "intrinsics are for 3x1",
        ),
        (
            good.replace(
                "width = 2\nheight = 1\nstamp",
                "width = 0\nheight = 1\nstamp",
            ),
            "empty frame",
        ),
        (
            good.replace("width = 2\nheight", "width = -2\nheight"),
            "header",
        ),
        (format!("colour = \"red\"\n{good}"), "colour"),
        (good.replace("stamp_s = 12.5\n", ""), "stamp_s"),
        ("\u{0}\u{1} not toml [[[".into(), "header"),
    ];
    for (text, needle) in cases {
        let e = net_error(answer_once(frame_bytes(1, &text, &payload_2x1())));
        assert!(
            matches!(e, NetError::Malformed { ref reason, .. } if reason.contains(needle)),
            "{needle}: {e}"
        );
    }
    let mut not_utf8 = frame_bytes(1, &good, &payload_2x1());
    not_utf8[12] = 0xff;
    assert!(matches!(
        net_error(answer_once(not_utf8)),
        NetError::Malformed { .. }
    ));
}

#[test]
fn a_server_that_hangs_up_is_closed() {
    // It closes without answering, also on the one reconnect.
    let addr = fake_server(vec![vec![], vec![]]);
    let mut cam = RemoteCamera::connect(&addr, LONG).unwrap();
    let e = net_error(cam.capture());
    assert!(matches!(e, NetError::Closed { .. }), "{e}");
    // The server is gone: the next capture fails too (refused, or reset if it raced the
    // listener's close), and does not hang.
    assert!(matches!(
        net_error(cam.capture()),
        NetError::Connect { .. } | NetError::Closed { .. }
    ));
}

#[test]
fn reconnects_once_when_the_server_closed_between_captures() {
    // Each connection gets one frame, then the server closes it.
    let addr = fake_server(vec![
        encode_frame(&synthetic_frame(1)).unwrap(),
        encode_frame(&synthetic_frame(2)).unwrap(),
    ]);
    let mut cam = RemoteCamera::connect(&addr, LONG).unwrap();
    assert_same(&cam.capture().unwrap(), &synthetic_frame(1));
    assert_same(&cam.capture().unwrap(), &synthetic_frame(2));
}

#[test]
fn a_bad_answer_drops_the_connection_and_the_next_capture_starts_fresh() {
    let addr = fake_server(vec![
        b"garbage!garbage!".to_vec(),
        encode_frame(&synthetic_frame(3)).unwrap(),
    ]);
    let mut cam = RemoteCamera::connect(&addr, LONG).unwrap();
    assert!(matches!(
        net_error(cam.capture()),
        NetError::BadMagic { .. }
    ));
    assert_same(&cam.capture().unwrap(), &synthetic_frame(3));
}

#[test]
fn nothing_listening_is_a_connect_error() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    match RemoteCamera::connect(&addr, SHORT) {
        Err(CameraError::Net(e @ NetError::Connect { .. })) => {
            assert!(e.to_string().contains(&addr), "{e}")
        }
        other => panic!("expected a connect error, got {other:?}"),
    }
    assert!(RemoteCamera::connect(&addr, Duration::ZERO).is_err());
}

/// A server that accepts and then sends `drip` bytes every 100 ms forever (nothing when empty),
/// until the client goes away.
fn silent_server(drip: &'static [u8]) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    thread::spawn(move || {
        let Ok((mut s, _)) = listener.accept() else {
            return;
        };
        // A minute at most, so the thread ends even if a test leaves its client open.
        for tick in 0..600 {
            thread::sleep(Duration::from_millis(100));
            if !drip.is_empty() && s.write_all(&[drip[tick % drip.len()]]).is_err() {
                return;
            }
        }
    });
    addr
}

#[test]
fn a_server_that_never_answers_times_out() {
    let addr = silent_server(b"");
    let mut cam = RemoteCamera::connect(&addr, SHORT).unwrap();
    let start = Instant::now();
    let e = net_error(cam.capture());
    let took = start.elapsed();
    assert!(matches!(e, NetError::Timeout { .. }), "{e}");
    assert!(took >= SHORT, "gave up after {took:?}, before the timeout");
    assert!(took < Duration::from_secs(5), "took {took:?}");
}

#[test]
fn a_trickling_server_times_out_on_the_whole_answer() {
    // One byte every 100 ms keeps every single read alive; the deadline is for the answer.
    let addr = silent_server(b"PAFF\x01\x00\x00\x00\x40\x00\x00\x00width = 1\n");
    let mut cam = RemoteCamera::connect(&addr, SHORT).unwrap();
    let start = Instant::now();
    let e = net_error(cam.capture());
    assert!(matches!(e, NetError::Timeout { .. }), "{e}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn the_error_answer_is_cut_to_its_limit() {
    let long = "é".repeat(MAX_MESSAGE_BYTES as usize);
    let b = encode_error(&long);
    let len = u32::from_le_bytes(b[8..12].try_into().unwrap());
    assert!(len <= MAX_MESSAGE_BYTES && len as usize == b.len() - 12);
    assert!(
        std::str::from_utf8(&b[12..]).is_ok(),
        "cut at a character boundary"
    );
    assert_eq!(net::DEFAULT_TIMEOUT, Duration::from_secs(10));
}
