//! A loopback emulator of the xArm controller (`pointact emulate xarm`): the command socket, the
//! 30002 "rich" report stream and the 30000 real-time report stream, serving an emulated arm.
//!
//! Why it exists: the driver (and the official SDK, in `tests/xarm_sdk.rs`) can be exercised end
//! to end without a robot — connection, state machine, motion timing, errors, the gripper tunnel,
//! report parsing. The behaviour lives in `Controller` (pure, clocked by its caller); this module
//! only moves bytes between sockets and it. Which arm moves is behind `EmulatedArm`: the default
//! `KinematicArm` follows the controller's setpoints exactly; a simulator-backed arm can be plugged
//! in from outside `robot` (which must not import `sim`).
//!
//! Sockets listen on 127.0.0.1 only: the emulator is for this machine's tests and demos, never a
//! stand-in for a controller on the network.

mod arm;
mod controller;
mod thread;
mod tool;

pub use arm::{ArmReading, EmulatedArm, KinematicArm};
pub use controller::{ConnId, Controller, ControllerConfig};
pub use thread::EmulatorThread;

use std::collections::HashMap;
use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinSet;

use pointact_core::listener::{Accepted, BoundedListener};

use super::proto::{FrameReader, Request};

/// Where and how fast the emulator serves.
#[derive(Debug, Clone, PartialEq)]
pub struct EmulatorOptions {
    /// Command socket (a real controller: 502). 0 picks a free port.
    pub command_port: u16,
    /// "Rich" report stream (30002). The SDK picks the report layout by this port number, so an
    /// SDK client needs exactly 30002 here.
    pub report_port: u16,
    /// Real-time report stream (30000).
    pub rt_port: u16,
    /// Rich report rate (Hz); the controller sends 5.
    pub report_hz: f64,
    /// Real-time report rate (Hz), also the rate the model is stepped at; the controller sends 250.
    pub rt_hz: f64,
    /// Version and serial numbers the controller answers with.
    pub controller: ControllerConfig,
    /// Connections served at once on each socket; one more is closed as soon as it is accepted,
    /// so clients cannot take the emulator's last file descriptor.
    pub max_connections: usize,
}

impl Default for EmulatorOptions {
    fn default() -> Self {
        EmulatorOptions {
            command_port: 502,
            report_port: 30002,
            rt_port: 30000,
            report_hz: 5.0,
            rt_hz: 250.0,
            controller: ControllerConfig::default(),
            max_connections: 64,
        }
    }
}

/// Why the emulator could not start or serve.
#[derive(Debug, thiserror::Error)]
pub enum EmulatorError {
    /// One of the three sockets could not be bound (port taken, or privileged).
    #[error("cannot listen on 127.0.0.1:{port} for the {what}: {source}{hint}")]
    Bind {
        /// Which socket: command socket or one of the report streams.
        what: &'static str,
        /// The port asked for.
        port: u16,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
        /// A suggestion for the common causes (privileged port, port in use); may be empty.
        hint: &'static str,
    },
    /// A report rate in `EmulatorOptions` is not finite or not in (0, 1000] Hz.
    #[error("report rates must be finite and in (0, 1000] Hz, got {0}")]
    Rate(f64),
    /// A socket operation failed after binding (reading the local address, accepting, ...).
    #[error("emulator socket error: {0}")]
    Io(#[from] std::io::Error),
}

/// A bound, not yet running emulator: the sockets exist (so their ports are known) before
/// `run` starts serving.
pub struct Emulator {
    command: TcpListener,
    report: TcpListener,
    rt: TcpListener,
    addrs: [SocketAddr; 3],
    controller: Arc<Mutex<Controller>>,
    options: EmulatorOptions,
}

async fn listen(what: &'static str, port: u16) -> Result<TcpListener, EmulatorError> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, port))
        .await
        .map_err(|source| {
            let hint = match source.kind() {
                std::io::ErrorKind::PermissionDenied => {
                    " (ports below 1024 need root or CAP_NET_BIND_SERVICE: pick another port, \
                     e.g. --port 15502, and point the client at it)"
                }
                std::io::ErrorKind::AddrInUse => {
                    " (another emulator or program is listening there: stop it or pick another port)"
                }
                _ => "",
            };
            EmulatorError::Bind {
                what,
                port,
                source,
                hint,
            }
        })
}

fn lock(c: &Mutex<Controller>) -> MutexGuard<'_, Controller> {
    // A panic while holding the lock leaves a usable model (every update is a plain assignment).
    c.lock().unwrap_or_else(|p| p.into_inner())
}

impl Emulator {
    /// Binds the three sockets on 127.0.0.1 around a controller driving `arm`.
    pub async fn bind(
        options: EmulatorOptions,
        arm: Box<dyn EmulatedArm>,
    ) -> Result<Emulator, EmulatorError> {
        for hz in [options.report_hz, options.rt_hz] {
            if !(hz.is_finite() && hz > 0.0 && hz <= 1000.0) {
                return Err(EmulatorError::Rate(hz));
            }
        }
        let command = listen("command socket", options.command_port).await?;
        let report = listen("rich report stream", options.report_port).await?;
        let rt = listen("real-time report stream", options.rt_port).await?;
        let addrs = [
            command.local_addr()?,
            report.local_addr()?,
            rt.local_addr()?,
        ];
        let controller = Arc::new(Mutex::new(Controller::new(arm, options.controller.clone())));
        Ok(Emulator {
            command,
            report,
            rt,
            addrs,
            controller,
            options,
        })
    }

    /// Where the command socket listens (its port is known even when 0 was asked for).
    pub fn command_addr(&self) -> SocketAddr {
        self.addrs[0]
    }

    /// Where the rich report stream listens.
    pub fn report_addr(&self) -> SocketAddr {
        self.addrs[1]
    }

    /// Where the real-time report stream listens.
    pub fn rt_addr(&self) -> SocketAddr {
        self.addrs[2]
    }

    /// The controller model, for inspection (tests).
    pub(crate) fn controller(&self) -> Arc<Mutex<Controller>> {
        self.controller.clone()
    }

    /// Serves until `shutdown` completes (or a listener fails); every connection is closed when it
    /// returns. Needs a tokio runtime with I/O and time enabled.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), EmulatorError> {
        let start = Instant::now();
        let clock = move || start.elapsed().as_secs_f64();
        let (rt_tx, _) = broadcast::channel::<Arc<Vec<u8>>>(64);
        let (rich_tx, _) = broadcast::channel::<Arc<Vec<u8>>>(8);
        let conns: Conns = Arc::new(Mutex::new(HashMap::new()));

        let ticker = tick(
            self.controller.clone(),
            conns.clone(),
            clock,
            self.options.rt_hz,
            self.options.report_hz,
            rt_tx.clone(),
            rich_tx.clone(),
        );
        let max = self.options.max_connections;
        let commands = serve_commands(
            BoundedListener::new(self.command, max, "xarm emulator command socket"),
            self.controller.clone(),
            conns,
            Reports {
                rt: rt_tx.clone(),
                rich: rich_tx.clone(),
            },
            clock,
        );
        let reports = serve_stream(
            BoundedListener::new(self.report, max, "xarm emulator report stream"),
            rich_tx,
        );
        let rt = serve_stream(
            BoundedListener::new(self.rt, max, "xarm emulator real-time stream"),
            rt_tx,
        );
        tokio::select! {
            _ = shutdown => {}
            _ = commands => {}
            _ = reports => {}
            _ = rt => {}
            _ = ticker => {}
        }
        Ok(())
    }
}

/// Per command connection: where its feedback frames go.
type Conns = Arc<Mutex<HashMap<ConnId, mpsc::UnboundedSender<Vec<u8>>>>>;

fn deliver(conns: &Conns, frames: Vec<(ConnId, Vec<u8>)>) {
    if frames.is_empty() {
        return;
    }
    let map = conns.lock().unwrap_or_else(|p| p.into_inner());
    for (conn, bytes) in frames {
        if let Some(tx) = map.get(&conn) {
            let _ = tx.send(bytes);
        }
    }
}

/// Steps the model at the real-time rate and publishes both report streams.
async fn tick(
    controller: Arc<Mutex<Controller>>,
    conns: Conns,
    clock: impl Fn() -> f64,
    rt_hz: f64,
    report_hz: f64,
    rt_tx: broadcast::Sender<Arc<Vec<u8>>>,
    rich_tx: broadcast::Sender<Arc<Vec<u8>>>,
) {
    let mut rt_every = tokio::time::interval(Duration::from_secs_f64(1.0 / rt_hz));
    let mut rich_every = tokio::time::interval(Duration::from_secs_f64(1.0 / report_hz));
    rt_every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    rich_every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = rt_every.tick() => {
                let (frame, out) = {
                    let mut c = lock(&controller);
                    c.advance(clock());
                    (c.rt_report().encode(), c.take_outbox())
                };
                deliver(&conns, out);
                // No receivers is fine: nobody is connected.
                let _ = rt_tx.send(Arc::new(frame));
            }
            _ = rich_every.tick() => {
                let (frame, out) = {
                    let mut c = lock(&controller);
                    c.advance(clock());
                    (c.rich_report().encode(), c.take_outbox())
                };
                deliver(&conns, out);
                let _ = rich_tx.send(Arc::new(frame));
            }
        }
    }
}

/// Accepts command clients for as long as the emulator runs (a failed accept waits and retries:
/// running out of descriptors refuses clients, it does not stop the controller).
async fn serve_commands(
    mut listener: BoundedListener,
    controller: Arc<Mutex<Controller>>,
    conns: Conns,
    reports: Reports,
    clock: impl Fn() -> f64 + Copy + Send + 'static,
) {
    let mut tasks = JoinSet::new();
    let mut next_id: ConnId = 1;
    loop {
        let Accepted { stream, peer, slot } = listener.accept().await;
        let _ = stream.set_nodelay(true);
        tracing::info!("xarm emulator: command connection from {peer}");
        let id = next_id;
        next_id += 1;
        let connection = command_connection(
            stream,
            id,
            controller.clone(),
            conns.clone(),
            reports.clone(),
            clock,
        );
        tasks.spawn(async move {
            let _slot = slot;
            connection.await
        });
        // Reap finished connections so the set does not grow.
        while tasks.try_join_next().is_some() {}
    }
}

/// Where the report streams' frames go: the ticker publishes at the report rates, and a command
/// that changes what a client waits on publishes at once (see [`command_connection`]).
#[derive(Clone)]
struct Reports {
    rt: broadcast::Sender<Arc<Vec<u8>>>,
    rich: broadcast::Sender<Arc<Vec<u8>>>,
}

/// One command client. A command that changes the state, mode, error, warning or enabled motors
/// also publishes both reports at once, before its reply is written: the SDK takes the error it
/// checks before every wait from the last report (`XArmAPI.error_code` with reports on), so after
/// `clean_error()` a motion with `wait=True` issued within the 200 ms of a 5 Hz rich report would
/// still see the old error and give up ("wait_feedback, xarm has error"). That the controller
/// reports such a change at once is inferred from scripts written for the real arm, which run
/// this recovery flow without a pause; the developer manual gives the report rates only.
async fn command_connection(
    stream: TcpStream,
    id: ConnId,
    controller: Arc<Mutex<Controller>>,
    conns: Conns,
    reports: Reports,
    clock: impl Fn() -> f64,
) {
    let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
    conns
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(id, tx);
    let (mut rd, mut wr) = stream.into_split();
    let mut reader = FrameReader::new();
    let mut buf = vec![0u8; 8192];
    'conn: loop {
        tokio::select! {
            n = rd.read(&mut buf) => {
                let n = match n {
                    Ok(0) | Err(_) => break 'conn,
                    Ok(n) => n,
                };
                reader.push(&buf[..n]);
                loop {
                    let frame = match reader.next_frame() {
                        Ok(Some(f)) => f,
                        Ok(None) => break,
                        Err(e) => {
                            // The stream lost its framing; a controller drops such a client.
                            tracing::warn!("xarm emulator: closing a command connection: {e}");
                            break 'conn;
                        }
                    };
                    let Ok(req) = Request::decode(&frame) else { break 'conn };
                    let (resp, out, pushed) = {
                        let mut c = lock(&controller);
                        let before = c.reported_status();
                        let r = c.handle(id, &req, clock());
                        let pushed = (c.reported_status() != before)
                            .then(|| (c.rt_report().encode(), c.rich_report().encode()));
                        (r, c.take_outbox(), pushed)
                    };
                    if let Some((rt, rich)) = pushed {
                        // No receivers is fine: no report client is connected.
                        let _ = reports.rt.send(Arc::new(rt));
                        let _ = reports.rich.send(Arc::new(rich));
                        tokio::task::yield_now().await;
                    }
                    if let Some(r) = resp {
                        let Ok(bytes) = r.encode() else { break 'conn };
                        if wr.write_all(&bytes).await.is_err() {
                            break 'conn;
                        }
                    }
                    deliver(&conns, out);
                    // One read can hold hundreds of pipelined commands (a checked line runs IK
                    // along it): the tick, the report streams and the other clients get their
                    // turn between two of them, as on a controller whose real-time loop never
                    // waits for the command parser.
                    tokio::task::yield_now().await;
                }
            }
            Some(bytes) = rx.recv() => {
                if wr.write_all(&bytes).await.is_err() {
                    break 'conn;
                }
            }
        }
    }
    conns.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
}

/// Accepts report clients and copies every published frame to each.
async fn serve_stream(mut listener: BoundedListener, frames: broadcast::Sender<Arc<Vec<u8>>>) {
    let mut tasks = JoinSet::new();
    loop {
        let Accepted {
            mut stream, slot, ..
        } = listener.accept().await;
        let _ = stream.set_nodelay(true);
        let mut rx = frames.subscribe();
        tasks.spawn(async move {
            let _slot = slot;
            loop {
                match rx.recv().await {
                    Ok(f) => {
                        if stream.write_all(&f).await.is_err() {
                            break;
                        }
                    }
                    // A slow reader misses frames, as on the controller; it keeps the newest.
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => break,
                }
            }
        });
        while tasks.try_join_next().is_some() {}
    }
}
