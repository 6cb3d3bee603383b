//! Frames over loopback TCP: [`serve`] hands the frames of a camera owned by one process to
//! [`RemoteCamera`]s in others (`--camera tcp:HOST:PORT`).
//!
//! Why: `pointact emulate xarm --sim TASK` runs the simulator behind an emulated xArm in one
//! process, and a separate `pointact run --xarm ADDR` must see what the simulator's camera sees.
//! The simulated world cannot be shared across processes, so its camera is: the emulator serves
//! captures, and the runner's `RemoteCamera` is just another [`Camera`]. The server binds
//! 127.0.0.1 only ([`bind_local`]): this is plumbing between local processes, not a network
//! camera.
//!
//! # Wire format (version 1)
//!
//! Integers are little-endian. One request, one answer, in turn, on one connection (a client
//! keeps its connection between captures; the server serialises captures across connections).
//!
//! Request, 8 bytes: [`REQUEST_MAGIC`] `PAF?`, then the client's `u32` [`WIRE_VERSION`].
//!
//! Frame answer:
//!
//! | bytes | content |
//! | --- | --- |
//! | 4 | [`FRAME_MAGIC`] `PAFF` |
//! | 4 | `u32` wire version (1) |
//! | 4 | `u32` header length `n` (at most [`MAX_HEADER_BYTES`]) |
//! | n | header, UTF-8 TOML (below) |
//! | w·h·3 | RGB8, row-major, no padding |
//! | w·h·2 | depth, `u16`, metres = value × `depth_scale_m`, 0 = no depth |
//!
//! The header holds `width`, `height` (each in `1..=`[`MAX_SIDE`]), `stamp_s`, `depth_scale_m`
//! (the server sends [`RECORD_DEPTH_SCALE_M`], 0.1 mm, as recordings use; a client accepts any
//! finite positive scale), `translation = [x, y, z]` and `rotation_xyzw = [x, y, z, w]` (unit
//! quaternion) of `base_from_camera`, and an `[intrinsics]` table in the field names of
//! [`Intrinsics`] (as calibration files write it, `model` snake_case). TOML rather than JSON
//! because the toml crate writes floats in shortest round-trip form and parses them exactly, so
//! intrinsics, pose and stamp arrive bit-identical. Depth travels as 0.1 mm `u16`, the recording
//! format's choice: exact to 0.05 mm up to 6.5 m, at half the bytes of f32.
//!
//! Error answer: [`ERROR_MAGIC`] `PAFE`, `u32` version, `u32` length `m` (at most
//! [`MAX_MESSAGE_BYTES`]), `m` bytes of UTF-8 message. A capture that fails on the server is
//! answered this way (the client returns [`CameraError::Device`] with the message) and the
//! connection stays usable: a renderer hiccup is not a network fault. The error layout will not
//! change with the version, so any client can read why a newer or older server refused it.
//!
//! The client checks everything before trusting it: magic, version, header fields finite and
//! consistent, sizes within [`MAX_SIDE`], byte counts exact. Buffers grow as bytes arrive, so a
//! header that lies about its size costs at most a chunk, never a large allocation.

use std::future::Future;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k::nalgebra::{Isometry3, Quaternion, Translation3, UnitQuaternion};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use crate::listener::{Accepted, BoundedListener};

use super::error::CameraError;
pub(crate) use super::error::WIRE_VERSION;
pub use super::error::{NetError, MAX_SIDE};
use super::frame::{Camera, Frame, RgbImage};
use super::record::{depth_to_record_units, RECORD_DEPTH_SCALE_M};
use crate::geometry::{DepthImage, Intrinsics};

/// What a client sends to ask for one frame (followed by its `u32` wire version).
pub(crate) const REQUEST_MAGIC: [u8; 4] = *b"PAF?";
/// First bytes of a frame answer.
pub(crate) const FRAME_MAGIC: [u8; 4] = *b"PAFF";
/// First bytes of an error answer.
pub(crate) const ERROR_MAGIC: [u8; 4] = *b"PAFE";
/// Largest accepted header. A real one is under 1 KiB; the cap only bounds what a broken peer can
/// make us buffer.
pub(crate) const MAX_HEADER_BYTES: u32 = 64 * 1024;
/// Largest accepted error message (longer ones are cut by the server).
pub(crate) const MAX_MESSAGE_BYTES: u32 = 64 * 1024;
/// Per-capture time limit of `--camera tcp:…` (and a sane default for [`RemoteCamera::connect`]):
/// a simulated render takes tens of milliseconds, so 10 s means the server is stuck or gone.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the server waits for a client to take an answer before dropping that connection, so
/// a client that stopped reading cannot hold a connection task forever.
const SERVER_WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Payload buffers grow by at most this much ahead of the bytes that actually arrived.
const READ_CHUNK: usize = 1 << 20;
/// A quaternion further than this from unit norm is not a rotation (the server sends nalgebra's
/// unit quaternions, off by ~1e-16).
const QUATERNION_NORM_TOLERANCE: f64 = 1e-6;

/// The frame header, as it travels (see the module docs).
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireHeader {
    width: u64,
    height: u64,
    stamp_s: f64,
    depth_scale_m: f64,
    translation: [f64; 3],
    rotation_xyzw: [f64; 4],
    intrinsics: Intrinsics,
}

// ---- encoding (server side, public so that tests and tools can speak the format) ---------------

/// The frame answer for `frame`. Refuses (as [`CameraError::Device`] or the frame's own check)
/// what a client would reject, so a server never sends a frame that cannot be read.
pub(crate) fn encode_frame(frame: &Frame) -> Result<Vec<u8>, CameraError> {
    frame.validate()?;
    let (w, h) = (frame.rgb.width(), frame.rgb.height());
    if w > MAX_SIDE || h > MAX_SIDE {
        return Err(CameraError::Device(format!(
            "frame of {w}x{h} exceeds the frame server's limit of {MAX_SIDE}x{MAX_SIDE}"
        )));
    }
    let iso = &frame.base_from_camera;
    let t = iso.translation.vector;
    let q = iso.rotation.quaternion().coords;
    let header = WireHeader {
        width: w as u64,
        height: h as u64,
        stamp_s: frame.stamp_s,
        depth_scale_m: RECORD_DEPTH_SCALE_M,
        translation: [t.x, t.y, t.z],
        rotation_xyzw: [q.x, q.y, q.z, q.w],
        intrinsics: frame.intrinsics.clone(),
    };
    check_header_numbers(&header)
        .map_err(|r| CameraError::Device(format!("frame to serve: {r}")))?;
    let text = toml::to_string(&header)
        .map_err(|e| CameraError::Device(format!("frame to serve: header: {e}")))?;
    let pixels = (w as usize) * (h as usize);
    let mut out = Vec::with_capacity(12 + text.len() + pixels * 5);
    out.extend_from_slice(&FRAME_MAGIC);
    out.extend_from_slice(&WIRE_VERSION.to_le_bytes());
    out.extend_from_slice(&(text.len() as u32).to_le_bytes());
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(frame.rgb.as_raw());
    for &d in &frame.depth.data {
        out.extend_from_slice(&depth_to_record_units(d).to_le_bytes());
    }
    Ok(out)
}

/// The error answer carrying `message`, cut to [`MAX_MESSAGE_BYTES`] at a character boundary.
pub(crate) fn encode_error(message: &str) -> Vec<u8> {
    let msg = &message.as_bytes()[..message.floor_char_boundary(MAX_MESSAGE_BYTES as usize)];
    let mut out = Vec::with_capacity(12 + msg.len());
    out.extend_from_slice(&ERROR_MAGIC);
    out.extend_from_slice(&WIRE_VERSION.to_le_bytes());
    out.extend_from_slice(&(msg.len() as u32).to_le_bytes());
    out.extend_from_slice(msg);
    out
}

/// The numbers of a header that both sides check: everything finite, a positive depth scale, a
/// unit quaternion. Intrinsics and sizes are checked by their owners.
fn check_header_numbers(h: &WireHeader) -> Result<(), String> {
    if !h.stamp_s.is_finite() {
        return Err(format!("stamp_s must be finite, got {}", h.stamp_s));
    }
    let scale = h.depth_scale_m;
    if !(scale.is_finite() && scale > 0.0 && (scale as f32).is_normal()) {
        return Err(format!("depth_scale_m must be finite and > 0, got {scale}"));
    }
    if let Some(v) = h.translation.iter().find(|v| !v.is_finite()) {
        return Err(format!("translation must be finite, got {v}"));
    }
    if let Some(v) = h.rotation_xyzw.iter().find(|v| !v.is_finite()) {
        return Err(format!("rotation_xyzw must be finite, got {v}"));
    }
    let norm = h.rotation_xyzw.iter().map(|v| v * v).sum::<f64>().sqrt();
    if (norm - 1.0).abs() > QUATERNION_NORM_TOLERANCE {
        return Err(format!(
            "rotation_xyzw must be a unit quaternion, its norm is {norm}"
        ));
    }
    Ok(())
}

// ---- server -------------------------------------------------------------------------------------

/// A listener on 127.0.0.1:`port` (0 picks a free port; read it with `local_addr`). Loopback
/// only: the frames are for processes on this machine. A port already taken is an
/// [`io::ErrorKind::AddrInUse`] error whose message says so and what to do.
pub async fn bind_local(port: u16) -> io::Result<TcpListener> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, port))
        .await
        .map_err(|e| {
            let hint = match e.kind() {
                io::ErrorKind::AddrInUse => {
                    " (another frame server or program listens there: stop it or pick another port)"
                }
                io::ErrorKind::PermissionDenied => {
                    " (ports below 1024 need root: pick another port)"
                }
                _ => "",
            };
            io::Error::new(
                e.kind(),
                format!("cannot serve frames on 127.0.0.1:{port}: {e}{hint}"),
            )
        })
}

/// Serves frames from `camera` to every client of `listener` until `shutdown` completes, at most
/// `max_connections` at once (one more is closed at once; a failed accept backs off).
///
/// Each connection is its own task and answers one request at a time. Captures run on tokio's
/// blocking pool (a render takes tens of milliseconds; the runtime keeps accepting and answering
/// meanwhile) and one at a time across all connections, since a camera captures one frame at a
/// time. A capture error, or a frame that cannot be encoded, is answered as an error frame; a
/// client that sends something other than a request gets an error frame and is disconnected.
/// An idle connection has no time limit: a runner may think for minutes between captures.
///
/// On shutdown, listening stops and connections are dropped; a capture already running finishes
/// on its blocking thread.
pub async fn serve<C, S>(listener: TcpListener, max_connections: usize, camera: C, shutdown: S)
where
    C: FnMut() -> Result<Frame, CameraError> + Send + 'static,
    S: Future<Output = ()>,
{
    let camera = Arc::new(Mutex::new(camera));
    let mut conns = JoinSet::new();
    let mut listener = BoundedListener::new(listener, max_connections, "frame server");
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            Accepted { stream, peer, slot } = listener.accept() => {
                tracing::debug!(%peer, "frame client connected");
                let _ = stream.set_nodelay(true);
                let connection = serve_connection(stream, peer, Arc::clone(&camera));
                conns.spawn(async move {
                    let _slot = slot;
                    connection.await
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    conns.shutdown().await;
}

async fn serve_connection<C>(
    mut stream: tokio::net::TcpStream,
    peer: SocketAddr,
    camera: Arc<Mutex<C>>,
) where
    C: FnMut() -> Result<Frame, CameraError> + Send + 'static,
{
    loop {
        let mut request = [0u8; 8];
        if stream.read_exact(&mut request).await.is_err() {
            // The client hung up (the normal end of a connection) or sent a partial request.
            return;
        }
        let refusal = if request[..4] != REQUEST_MAGIC {
            Some(format!(
                "not a frame request: expected \"PAF?\" and a u32 version, got {:02x?}",
                &request[..4]
            ))
        } else {
            let version = u32::from_le_bytes([request[4], request[5], request[6], request[7]]);
            (version != WIRE_VERSION).then(|| {
                format!("client speaks wire version {version}, this server {WIRE_VERSION}: run the same pointact build on both sides")
            })
        };
        if let Some(message) = refusal {
            tracing::warn!(%peer, %message, "frame server: refusing a client");
            let _ = tokio::time::timeout(
                SERVER_WRITE_TIMEOUT,
                stream.write_all(&encode_error(&message)),
            )
            .await;
            return;
        }
        let cam = Arc::clone(&camera);
        let answer = tokio::task::spawn_blocking(move || {
            // A camera that panicked before leaves the lock poisoned; its next capture says for
            // itself whether it still works.
            let mut capture = cam.lock().unwrap_or_else(|p| p.into_inner());
            match (*capture)().and_then(|frame| encode_frame(&frame)) {
                Ok(bytes) => bytes,
                Err(e) => encode_error(&e.to_string()),
            }
        })
        .await
        .unwrap_or_else(|_| encode_error("the served camera panicked during capture"));
        match tokio::time::timeout(SERVER_WRITE_TIMEOUT, stream.write_all(&answer)).await {
            Ok(Ok(())) => {}
            _ => return,
        }
    }
}

// ---- client -------------------------------------------------------------------------------------

/// A [`Camera`] whose frames come from a [`serve`]r, over blocking std sockets (the `Camera`
/// trait is synchronous; one capture is one request and one answer).
///
/// Every capture must complete within the timeout given to [`RemoteCamera::connect`] (a deadline
/// for the whole answer, not per read, so a server trickling bytes cannot stall it either). If
/// the server closed the connection between captures (it restarted, or dropped an idle client),
/// the capture reconnects once. After any other failure the connection is dropped, since the
/// stream's position is unknown, and the next capture starts on a new one.
#[derive(Debug)]
pub struct RemoteCamera {
    addr: String,
    timeout: Duration,
    stream: Option<TcpStream>,
}

/// Why one request/answer exchange failed.
enum Failure {
    /// The connection was closed before any byte of an answer: worth one reconnect.
    ClosedBeforeAnswer,
    Net(NetError),
}

impl From<NetError> for Failure {
    fn from(e: NetError) -> Self {
        Failure::Net(e)
    }
}

fn is_closed(kind: io::ErrorKind) -> bool {
    matches!(
        kind,
        io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::NotConnected
            | io::ErrorKind::UnexpectedEof
    )
}

impl RemoteCamera {
    /// Connects to a frame server at `addr` (`HOST:PORT`). `timeout` bounds the connect and every
    /// later capture (use [`DEFAULT_TIMEOUT`] unless there is a reason); it must be non-zero.
    /// Connecting now, not at the first capture, makes a missing server an error before anything
    /// else starts.
    pub fn connect(addr: &str, timeout: Duration) -> Result<Self, CameraError> {
        if timeout.is_zero() {
            return Err(CameraError::Device(format!(
                "camera server {addr}: the timeout must be > 0"
            )));
        }
        let stream = open_stream(addr, timeout)?;
        Ok(RemoteCamera {
            addr: addr.to_string(),
            timeout,
            stream: Some(stream),
        })
    }

    /// The server's address, as given to [`RemoteCamera::connect`].
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// One request and its answer on `stream`. `Ok(Err(_))` is the server's error answer.
    fn exchange(&self, stream: &mut TcpStream) -> Result<Result<Frame, CameraError>, Failure> {
        let deadline = Instant::now() + self.timeout;
        let mut request = [0u8; 8];
        request[..4].copy_from_slice(&REQUEST_MAGIC);
        request[4..].copy_from_slice(&WIRE_VERSION.to_le_bytes());
        if let Err(e) = stream.write_all(&request) {
            return Err(match e.kind() {
                k if is_closed(k) => Failure::ClosedBeforeAnswer,
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
                    self.timeout_error("sending the request").into()
                }
                _ => NetError::Io {
                    addr: self.addr.clone(),
                    during: "sending the request",
                    source: e,
                }
                .into(),
            });
        }
        let mut reader = DeadlineReader {
            stream,
            deadline,
            camera: self,
        };

        let mut prefix = [0u8; 12];
        match reader.fill(&mut prefix) {
            Ok(()) => {}
            Err(ReadFail::Eof { got: 0 }) => return Err(Failure::ClosedBeforeAnswer),
            Err(e) => {
                return Err(reader
                    .net_error(e, "the answer's first bytes", prefix.len())
                    .into())
            }
        }
        let magic = [prefix[0], prefix[1], prefix[2], prefix[3]];
        let version = u32::from_le_bytes([prefix[4], prefix[5], prefix[6], prefix[7]]);
        let len = u32::from_le_bytes([prefix[8], prefix[9], prefix[10], prefix[11]]);
        if magic == ERROR_MAGIC {
            // The error layout is the same in every version, so read it before the version check.
            if len > MAX_MESSAGE_BYTES {
                return Err(self
                    .malformed(format!(
                        "error message of {len} bytes (at most {MAX_MESSAGE_BYTES})"
                    ))
                    .into());
            }
            let msg = reader.payload(len as usize, "the error message")?;
            let msg = String::from_utf8_lossy(&msg);
            return Ok(Err(CameraError::Device(format!(
                "server {}: {msg}",
                self.addr
            ))));
        }
        if magic != FRAME_MAGIC {
            return Err(NetError::BadMagic {
                addr: self.addr.clone(),
                found: magic,
            }
            .into());
        }
        if version != WIRE_VERSION {
            return Err(NetError::Version {
                addr: self.addr.clone(),
                found: version,
            }
            .into());
        }
        if len == 0 || len > MAX_HEADER_BYTES {
            return Err(self
                .malformed(format!("header of {len} bytes (1 to {MAX_HEADER_BYTES})"))
                .into());
        }
        let header = reader.payload(len as usize, "the header")?;
        let (w, h, intrinsics, base_from_camera, stamp_s, scale) = self.parse_header(&header)?;
        let pixels = w * h;
        let rgb = reader.payload(pixels * 3, "the colour image")?;
        let raw = reader.payload(pixels * 2, "the depth image")?;
        let raw: Vec<u16> = raw
            .chunks_exact(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .collect();
        let rgb = RgbImage::from_raw(w as u32, h as u32, rgb)
            .ok_or_else(|| self.malformed("colour buffer does not match the size".into()))?;
        let depth = DepthImage::from_u16(w, h, &raw, scale as f32)
            .map_err(|e| self.malformed(format!("depth: {e}")))?;
        Ok(Ok(Frame {
            rgb,
            depth,
            intrinsics,
            base_from_camera,
            stamp_s,
        }))
    }

    /// Checks a header and returns width, height, intrinsics, pose, stamp and depth scale.
    #[allow(clippy::type_complexity)]
    fn parse_header(
        &self,
        bytes: &[u8],
    ) -> Result<(usize, usize, Intrinsics, Isometry3<f64>, f64, f64), NetError> {
        let text = std::str::from_utf8(bytes)
            .map_err(|e| self.malformed(format!("header is not UTF-8: {e}")))?;
        let h: WireHeader =
            toml::from_str(text).map_err(|e| self.malformed(format!("header: {e}")))?;
        if h.width > MAX_SIDE as u64 || h.height > MAX_SIDE as u64 {
            return Err(NetError::TooLarge {
                addr: self.addr.clone(),
                width: h.width,
                height: h.height,
            });
        }
        if h.width == 0 || h.height == 0 {
            return Err(self.malformed(format!("empty frame {}x{}", h.width, h.height)));
        }
        let (w, h_px) = (h.width as usize, h.height as usize);
        check_header_numbers(&h).map_err(|r| self.malformed(format!("header: {r}")))?;
        h.intrinsics
            .validate()
            .map_err(|e| self.malformed(format!("header: {e}")))?;
        if (h.intrinsics.width, h.intrinsics.height) != (w, h_px) {
            return Err(self.malformed(format!(
                "intrinsics are for {}x{} but the frame is {w}x{h_px}",
                h.intrinsics.width, h.intrinsics.height
            )));
        }
        let [qx, qy, qz, qw] = h.rotation_xyzw;
        let q = Quaternion::new(qw, qx, qy, qz);
        // The server sends nalgebra's unit quaternion; keep its coordinates as they are so the
        // pose arrives bit-identical, and renormalise only one that is off by more than rounding.
        let rotation = if (q.norm() - 1.0).abs() <= 1e-12 {
            UnitQuaternion::new_unchecked(q)
        } else {
            UnitQuaternion::new_normalize(q)
        };
        let [tx, ty, tz] = h.translation;
        let pose = Isometry3::from_parts(Translation3::new(tx, ty, tz), rotation);
        Ok((w, h_px, h.intrinsics, pose, h.stamp_s, h.depth_scale_m))
    }

    fn malformed(&self, reason: String) -> NetError {
        NetError::Malformed {
            addr: self.addr.clone(),
            reason,
        }
    }

    fn timeout_error(&self, during: &'static str) -> NetError {
        NetError::Timeout {
            addr: self.addr.clone(),
            timeout: self.timeout,
            during,
        }
    }
}

impl Camera for RemoteCamera {
    fn capture(&mut self) -> Result<Frame, CameraError> {
        // A connection that existed before this call may have been closed by the server since.
        let (mut stream, may_retry) = match self.stream.take() {
            Some(s) => (s, true),
            None => (open_stream(&self.addr, self.timeout)?, false),
        };
        let outcome = match self.exchange(&mut stream) {
            Err(Failure::ClosedBeforeAnswer) if may_retry => {
                tracing::debug!(addr = %self.addr, "frame server closed the connection; reconnecting");
                stream = open_stream(&self.addr, self.timeout)?;
                self.exchange(&mut stream)
            }
            other => other,
        };
        match outcome {
            Ok(answer) => {
                // Frame or error answer: either way the stream is at a message boundary.
                self.stream = Some(stream);
                answer
            }
            Err(Failure::ClosedBeforeAnswer) => Err(NetError::Closed {
                addr: self.addr.clone(),
            }
            .into()),
            Err(Failure::Net(e)) => Err(e.into()),
        }
    }
}

/// Resolves `addr` and connects to the first address that accepts within `timeout`.
fn open_stream(addr: &str, timeout: Duration) -> Result<TcpStream, NetError> {
    let connect_err = |source| NetError::Connect {
        addr: addr.to_string(),
        source,
    };
    let mut last = io::Error::new(io::ErrorKind::NotFound, "the address resolves to nothing");
    for sa in addr.to_socket_addrs().map_err(connect_err)? {
        match TcpStream::connect_timeout(&sa, timeout) {
            Ok(stream) => {
                let setup = stream
                    .set_nodelay(true)
                    .and_then(|()| stream.set_write_timeout(Some(timeout)));
                setup.map_err(connect_err)?;
                return Ok(stream);
            }
            Err(e) => last = e,
        }
    }
    Err(connect_err(last))
}

enum ReadFail {
    /// The peer closed the connection after `got` bytes of the part being read.
    Eof {
        got: usize,
    },
    Timeout,
    Io(io::Error),
}

/// Reads from a stream against one deadline for the whole answer: before each read the socket's
/// timeout is set to the time left.
struct DeadlineReader<'a> {
    stream: &'a mut TcpStream,
    deadline: Instant,
    camera: &'a RemoteCamera,
}

impl DeadlineReader<'_> {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), ReadFail> {
        let mut got = 0;
        while got < buf.len() {
            let left = self.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ReadFail::Timeout);
            }
            self.stream
                .set_read_timeout(Some(left))
                .map_err(ReadFail::Io)?;
            match self.stream.read(&mut buf[got..]) {
                Ok(0) => return Err(ReadFail::Eof { got }),
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if is_closed(e.kind()) => return Err(ReadFail::Eof { got }),
                // The socket's timeout fired: the deadline check at the top of the loop decides
                // (the kernel may wake a little early).
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => return Err(ReadFail::Io(e)),
            }
        }
        Ok(())
    }

    /// `len` bytes (already checked against the format's limits), in a buffer that grows by at
    /// most [`READ_CHUNK`] ahead of what arrived.
    fn payload(&mut self, len: usize, what: &'static str) -> Result<Vec<u8>, NetError> {
        let mut buf = Vec::with_capacity(len.min(READ_CHUNK));
        while buf.len() < len {
            let start = buf.len();
            let end = len.min(start + start.max(READ_CHUNK));
            buf.resize(end, 0);
            if let Err(e) = self.fill(&mut buf[start..end]) {
                let e = match e {
                    ReadFail::Eof { got } => ReadFail::Eof { got: start + got },
                    other => other,
                };
                return Err(self.net_error(e, what, len));
            }
        }
        Ok(buf)
    }

    fn net_error(&self, e: ReadFail, what: &'static str, expected: usize) -> NetError {
        let addr = self.camera.addr.clone();
        match e {
            ReadFail::Eof { got } => NetError::Truncated {
                addr,
                what,
                got,
                expected,
            },
            ReadFail::Timeout => self.camera.timeout_error("reading the answer"),
            ReadFail::Io(source) => NetError::Io {
                addr,
                during: "reading the answer",
                source,
            },
        }
    }
}

/// Whether `s` is a `HOST:PORT` a [`RemoteCamera`] can be pointed at: a non-empty host and a
/// non-zero port. Resolution is left to the connect.
pub(crate) fn check_addr(s: &str) -> Result<(), String> {
    let (host, port) = s.rsplit_once(':').ok_or_else(|| {
        format!("`{s}` has no port: tcp needs HOST:PORT, e.g. tcp:127.0.0.1:5600")
    })?;
    if host.is_empty() {
        return Err(format!(
            "`{s}` has no host: tcp needs HOST:PORT, e.g. tcp:127.0.0.1:5600"
        ));
    }
    match port.parse::<u16>() {
        Ok(p) if p != 0 => Ok(()),
        _ => Err(format!(
            "`{port}` is not a port (1 to 65535): tcp needs HOST:PORT, e.g. tcp:127.0.0.1:5600"
        )),
    }
}
