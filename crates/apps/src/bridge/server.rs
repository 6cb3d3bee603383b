//! `pointact serve bridge`: the WebSocket server. One task per connection, one episode per
//! connection (openpi's convention: the client opens a connection per episode), as many
//! connections at once as clients open.
//!
//! Every fault stays on its connection: an unreadable frame, an unknown message, a wrong array or
//! a message out of order is answered with a text frame naming the problem (openpi's client raises
//! it as `RuntimeError`) and the episode goes on waiting for a good one; a client that leaves ends
//! its episode with the arm held. Nothing a client sends can take the server down.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use pointact_core::listener::{Accepted, BoundedListener};

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

use super::check;
use super::protocol::{
    decode_client_with, encode_metadata, encode_server, ClientMessage, Images, Metadata,
    ServerMessage,
};
use super::remote::{Action, EpisodeStart, Observation, PolicyStatus};
use super::session::{hold_after, spawn_episode, EpisodeEnd, EpisodeLink, SessionConfig};
use super::wire::MAX_FRAME_BYTES;
use crate::kinematics::RobotModel;

/// How many connections a server takes at once, and how long each may keep it waiting.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServerLimits {
    /// Connections served at once; one more is closed as soon as it is accepted, so idle
    /// sockets cannot take every descriptor (64).
    pub max_connections: usize,
    /// The WebSocket handshake must be complete within this (10 s).
    pub handshake_timeout: Duration,
    /// A connection that completes no frame for this long is closed (300 s): a stalled partial
    /// frame holds its buffer, up to the frame limit, only until then. Evaluators send a frame
    /// per control step; a policy's own planning is not the client's idle time.
    pub idle_timeout: Duration,
    /// Bytes of frames not yet complete held at once over all connections (1 GiB). Each
    /// connection alone is bounded by the frame limit (65 MiB), but 64 clients stalling in the
    /// middle of their frames would hold 4 GiB until their idle timeouts; a connection that
    /// reads while the total is at the bound is closed with 1013 (try again later).
    pub max_unfinished_bytes: usize,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            max_connections: 64,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            max_unfinished_bytes: 1 << 30,
        }
    }
}

/// A bound server, not yet serving.
pub struct BridgeServer {
    listener: TcpListener,
    config: Arc<SessionConfig>,
    limits: ServerLimits,
}

impl BridgeServer {
    /// Binds `addr` (`127.0.0.1:8000`; port 0 picks a free one, see [`BridgeServer::local_addr`]).
    pub async fn bind(addr: &str, config: SessionConfig) -> io::Result<Self> {
        Ok(BridgeServer {
            listener: TcpListener::bind(addr).await?,
            config: Arc::new(config),
            limits: ServerLimits::default(),
        })
    }

    /// The same server with other [`ServerLimits`].
    pub fn with_limits(mut self, limits: ServerLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The address the listener is bound to (with the port picked when `bind` was given 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` completes; connections still open are then closed (a close frame;
    /// their episodes end with the arm held).
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> io::Result<()> {
        let (closing, closed) = tokio::sync::watch::channel(false);
        let metadata = Arc::new(encode_metadata(&Metadata {
            version: env!("CARGO_PKG_VERSION").to_string(),
            pointer: self.config.pointer.name().to_string(),
        }));
        tokio::pin!(shutdown);
        let limits = self.limits;
        let unfinished = Arc::new(Unfinished {
            held: AtomicUsize::new(0),
            max: limits.max_unfinished_bytes,
        });
        let mut listener =
            BoundedListener::new(self.listener, limits.max_connections, "serve bridge");
        loop {
            tokio::select! {
                _ = &mut shutdown => {
                    let _ = closing.send(true);
                    return Ok(());
                }
                Accepted { stream, peer, slot } = listener.accept() => {
                    let config = self.config.clone();
                    let metadata = metadata.clone();
                    let closed = closed.clone();
                    let stream = Metered { stream, held: 0, all: unfinished.clone() };
                    tokio::spawn(async move {
                        let _slot = slot;
                        if let Err(e) = connection(stream, config, &metadata, closed, limits).await {
                            tracing::info!("{peer}: connection ended: {e}");
                        }
                        // Off the async workers: trimming walks every heap under its lock.
                        let _ = tokio::task::spawn_blocking(give_freed_pages_back).await;
                    });
                }
            }
        }
    }
}

/// Where a connection's one episode stands.
enum State {
    /// Connected, no `reset` yet.
    Idle,
    Running(Box<Running>),
    /// `episode_end` was answered.
    Ended,
}

struct Running {
    start: EpisodeStart,
    /// `None` once the episode has ended.
    link: Option<EpisodeLink>,
    join: Option<tokio::task::JoinHandle<EpisodeEnd>>,
    end: Option<EpisodeEnd>,
    last_step: Option<u64>,
    last_action: Option<Action>,
}

impl Running {
    /// How the episode ended (waits for its thread, which has stopped or is stopping).
    async fn finish(&mut self) -> EpisodeEnd {
        if let Some(end) = &self.end {
            return end.clone();
        }
        self.link = None;
        let end = match self.join.take() {
            Some(j) => j.await.unwrap_or_else(|e| EpisodeEnd {
                status: PolicyStatus::Failed,
                detail: format!("the episode's thread failed: {e}"),
            }),
            None => EpisodeEnd {
                status: PolicyStatus::Failed,
                detail: "the episode ended".into(),
            },
        };
        self.end = Some(end.clone());
        end
    }

    /// The answer to `obs`: the episode's action, or a hold once it has ended. An action that
    /// fails [`check::action`] is never sent: the episode fails and the arm is held.
    async fn answer(&mut self, obs: Arc<Observation>, model: &RobotModel) -> Action {
        let mode = self.start.control_mode;
        if let Some(link) = &mut self.link {
            if link.observations.send(obs.clone()).await.is_ok() {
                if let Some(a) = link.actions.recv().await {
                    match check::action(model, mode, &a.values) {
                        Ok(()) => {
                            self.last_action = Some(a.clone());
                            return a;
                        }
                        Err(why) => {
                            tracing::warn!(
                                "episode {:?}: refused an action: {why}",
                                self.start.task
                            );
                            self.link = None;
                            self.end = Some(EpisodeEnd {
                                status: PolicyStatus::Failed,
                                detail: format!("refused to send the policy's action: {why}"),
                            });
                        }
                    }
                }
            }
        }
        let end = self.finish().await;
        Action {
            step: obs.step,
            values: hold_after(mode, self.last_action.as_ref(), &obs, model),
            terminate: true,
            status: end.status,
            detail: end.detail,
        }
    }
}

/// Bytes of unfinished frames over all connections, and the most they may be.
struct Unfinished {
    held: AtomicUsize,
    max: usize,
}

/// Why a connection's read was refused: the unfinished frames of all connections are at
/// [`ServerLimits::max_unfinished_bytes`].
#[derive(Debug, thiserror::Error)]
#[error("{0} bytes of unfinished frames held over all connections (--max-unfinished-mib): try again later")]
struct UnfinishedFull(usize);

/// A connection's socket, counting what it reads toward [`Unfinished`] until tungstenite hands
/// over a complete message ([`Metered::finished`]).
struct Metered {
    stream: TcpStream,
    held: usize,
    all: Arc<Unfinished>,
}

impl Metered {
    /// What was read so far made whole messages: it is no longer held.
    fn finished(&mut self) {
        self.all.held.fetch_sub(self.held, Ordering::Relaxed);
        self.held = 0;
    }
}

impl Drop for Metered {
    fn drop(&mut self) {
        self.finished();
    }
}

impl AsyncRead for Metered {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let held = this.all.held.load(Ordering::Relaxed);
        if held >= this.all.max {
            return Poll::Ready(Err(io::Error::other(UnfinishedFull(held))));
        }
        let before = buf.filled().len();
        let read = Pin::new(&mut this.stream).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        this.held += n;
        this.all.held.fetch_add(n, Ordering::Relaxed);
        read
    }
}

impl AsyncWrite for Metered {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Closes `ws` with `code` and `why` (cut to the 123 bytes a close frame has room for, RFC 6455
/// section 5.5) and reads away, for a while, what the client is still sending: closing on unread
/// data resets the connection, and the reset can destroy the close frame before the client reads
/// it. The bytes read away are not kept.
async fn close_and_drain(
    ws: &mut tokio_tungstenite::WebSocketStream<Metered>,
    code: CloseCode,
    why: &str,
) {
    let frame = CloseFrame {
        code,
        reason: why[..why.floor_char_boundary(123)].to_string().into(),
    };
    let _ = ws.close(Some(frame)).await;
    ws.get_mut().finished();
    discard_input(
        &mut ws.get_mut().stream,
        Duration::from_secs(2),
        2 * MAX_FRAME_BYTES,
    )
    .await;
}

async fn connection(
    stream: Metered,
    config: Arc<SessionConfig>,
    metadata: &[u8],
    mut closed: tokio::sync::watch::Receiver<bool>,
    limits: ServerLimits,
) -> Result<(), String> {
    // Frames as large as the wire format allows, no larger (tungstenite's default is 64 MiB too,
    // but the bound is ours to state).
    let ws_config = WebSocketConfig::default()
        .max_message_size(Some(MAX_FRAME_BYTES))
        .max_frame_size(Some(MAX_FRAME_BYTES));
    let _ = stream.stream.set_nodelay(true);
    let handshake = tokio_tungstenite::accept_async_with_config(stream, Some(ws_config));
    let mut ws = tokio::time::timeout(limits.handshake_timeout, handshake)
        .await
        .map_err(|_| {
            format!(
                "no websocket handshake within {:.1} s (--handshake-timeout-s)",
                limits.handshake_timeout.as_secs_f64()
            )
        })?
        .map_err(|e| format!("websocket handshake: {e}"))?;
    ws.send(Message::Binary(metadata.to_vec().into()))
        .await
        .map_err(|e| e.to_string())?;
    let mut state = State::Idle;
    loop {
        let msg = tokio::select! {
            m = tokio::time::timeout(limits.idle_timeout, ws.next()) => match m {
                Ok(Some(m)) => {
                    ws.get_mut().finished();
                    m
                }
                Ok(None) => break,
                Err(_) => {
                    let _ = ws.close(None).await;
                    return Err(format!(
                        "no complete frame for {:.1} s (--idle-timeout-s): closed",
                        limits.idle_timeout.as_secs_f64()
                    ));
                }
            },
            // The server is shutting down (or gone): say goodbye.
            _ = async { closed.wait_for(|c| *c).await.map(|_| ()) } => {
                let _ = ws.close(None).await;
                break;
            }
        };
        let bytes = match msg {
            Ok(Message::Binary(b)) => b,
            Ok(Message::Text(_)) => {
                let e = "pointact bridge: send msgpack in binary frames, not text";
                ws.send(Message::text(e)).await.map_err(|e| e.to_string())?;
                continue;
            }
            Ok(Message::Close(_)) => break,
            Ok(_) => continue,
            // A frame past the limit: say so in the close frame (1009, "message too big") rather
            // than drop the socket, so the client can tell why.
            Err(WsError::Capacity(e)) => {
                let why = format!("a frame over {MAX_FRAME_BYTES} bytes, the bridge's limit");
                close_and_drain(&mut ws, CloseCode::Size, &why).await;
                return Err(format!("closed (1009): {e}"));
            }
            Err(WsError::Io(e)) if e.get_ref().is_some_and(|i| i.is::<UnfinishedFull>()) => {
                close_and_drain(&mut ws, CloseCode::Again, &e.to_string()).await;
                return Err(format!("closed (1013): {e}"));
            }
            // A frame the protocol forbids (unmasked, reserved bits or opcodes, a fragmented
            // control frame) or text that is not UTF-8: the close codes RFC 6455 section 7.4.1
            // gives them, so the client learns why.
            Err(e @ (WsError::Protocol(_) | WsError::Utf8(_))) => {
                let code = match e {
                    WsError::Utf8(_) => CloseCode::Invalid,
                    _ => CloseCode::Protocol,
                };
                close_and_drain(&mut ws, code, &e.to_string()).await;
                return Err(format!("closed ({}): {e}", u16::from(code)));
            }
            Err(e) => return Err(e.to_string()),
        };
        let received = Instant::now();
        let reply = handle(&mut state, &bytes, &config).await;
        let out = match reply {
            Ok((msg, timed)) => {
                let mut frame = encode_server(&msg);
                if timed {
                    append_server_ms(&mut frame, received.elapsed().as_secs_f64() * 1e3);
                }
                Message::Binary(frame.into())
            }
            Err(e) => Message::text(format!("pointact bridge: {e}")),
        };
        ws.send(out).await.map_err(|e| e.to_string())?;
        if matches!(state, State::Ended) {
            let _ = ws.close(None).await;
            break;
        }
    }
    Ok(())
}

/// Reads and drops what `stream` receives until it ends, `within` passes or `most` bytes came.
async fn discard_input(stream: &mut TcpStream, within: Duration, most: usize) {
    use tokio::io::AsyncReadExt;
    let deadline = tokio::time::Instant::now() + within;
    let mut buf = vec![0u8; 64 << 10];
    let mut left = most;
    while left > 0 {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => left = left.saturating_sub(n),
            _ => return,
        }
    }
}

/// Adds `server_ms` (time from the frame's arrival to its answer) as the last entry of an encoded
/// map: the count in the map's header goes up by one.
fn append_server_ms(frame: &mut Vec<u8>, ms: f64) {
    // Server messages are fixmaps (fewer than 16 entries): header 0x80 | n.
    if let Some(h) = frame.first_mut() {
        if *h & 0xf0 == 0x80 && *h & 0x0f < 15 {
            *h += 1;
            frame.extend_from_slice(&[0xa9]);
            frame.extend_from_slice(b"server_ms");
            frame.push(0xcb);
            frame.extend_from_slice(&ms.to_be_bytes());
        }
    }
}

/// One client frame → the answer (and whether it is timed), or the error to send as text.
async fn handle(
    state: &mut State,
    bytes: &bytes::Bytes,
    config: &SessionConfig,
) -> Result<(ServerMessage, bool), String> {
    // Images are converted for the first observation only: the episode plans from it.
    let images = match state {
        State::Running(run) if run.last_step.is_some() => Images::CheckOnly,
        _ => Images::Keep,
    };
    let msg = decode_client_with(bytes, images).map_err(|e| e.to_string())?;
    match (&mut *state, msg) {
        (State::Idle, ClientMessage::Reset(start)) => {
            let (link, join) = spawn_episode(start.clone(), config.clone());
            let ready = ServerMessage::Ready {
                episode_id: start.episode_id,
                control_mode: start.control_mode,
            };
            tracing::info!(
                // The task is the client's text: quoted, so a newline in it cannot forge a line.
                "episode {:?} #{}: {:?} ({})",
                start.task,
                start.episode_id,
                start.instruction,
                start.control_mode.name()
            );
            *state = State::Running(Box::new(Running {
                start,
                link: Some(link),
                join: Some(join),
                end: None,
                last_step: None,
                last_action: None,
            }));
            Ok((ready, false))
        }
        (State::Idle, m) => Err(format!("{:?} before \"reset\": start the episode first", m.kind())),
        (State::Running(_), ClientMessage::Reset(_)) | (State::Ended, ClientMessage::Reset(_)) => {
            Err("one episode per connection: this one was already reset (open a new connection for the next episode)".into())
        }
        (State::Ended, m) => Err(format!(
            "{:?} after \"episode_end\": this connection's episode is over",
            m.kind()
        )),
        (State::Running(run), ClientMessage::Infer(obs)) => {
            if let Some(last) = run.last_step {
                if obs.step <= last {
                    return Err(format!(
                        "observation of step {} after step {last}: steps must increase",
                        obs.step
                    ));
                }
            }
            check::observation(&config.model, &obs)?;
            let mut obs = *obs;
            obs.frame.stamp_s = obs.step as f64 / run.start.control_freq;
            run.last_step = Some(obs.step);
            let action = run.answer(Arc::new(obs), &config.model).await;
            Ok((ServerMessage::Action(action), true))
        }
        (State::Running(run), ClientMessage::EpisodeEnd { success, steps }) => {
            let end = run.finish().await;
            tracing::info!(
                "episode {:?} #{}: policy {} ({:?}); evaluator: success {success} after {steps} steps",
                run.start.task,
                run.start.episode_id,
                end.status.name(),
                end.detail
            );
            *state = State::Ended;
            Ok((
                ServerMessage::Ended {
                    status: end.status,
                    detail: end.detail,
                },
                false,
            ))
        }
    }
}

/// Makes glibc's malloc serve every block of 4 MiB or more with a mapping of its own, returned to
/// the system when freed. `serve bridge` calls it first, and `bench bridge` for its in-process
/// server, so that the bench measures the server as it runs.
///
/// Why: a bridge episode makes and drops blocks of several MB while it plans (a point cloud
/// lifted from a 640×480 depth image is 7 MB) beside the 3.4 MB observations every action brings.
/// Once such a block is freed glibc raises its mmap threshold to that block's size (mallopt(3),
/// M_MMAP_THRESHOLD, "dynamic adjustment"), so after warm-up they all come from the per-thread
/// heaps, which fragment and are not given back: 16 evaluators held 747-817 MiB after 10-40
/// minutes, moving by window. Fixing the threshold (which also turns the adjustment off) at
/// 4 MiB, above the observations, keeps those on the heaps (at 1 MiB each one's fresh pages
/// doubled the p99 server time) and maps the rest.
pub fn return_large_blocks_to_the_system() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; it runs before the server's threads start,
    // and a refusal (0) leaves glibc's default in place.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 4 << 20);
    }
}

/// Hands the free pages inside glibc's heaps back to the system (malloc_trim(3)) each time a
/// connection closes. Why: with the fixed threshold the episodes' planning blocks stay on the
/// per-thread heaps, which then took about 30 minutes of 16 evaluators to reach their size
/// (414 → 518 MiB over an hour); trimming after each episode held the server at 25–27 MiB.
/// Trimming at most every 10 s instead left 177–349 MiB at the windows' ends, moving with the
/// moment of the last trim, and no lower p99.
fn give_freed_pages_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases memory malloc holds free; it takes each arena's lock.
    unsafe {
        libc::malloc_trim(0);
    }
}
