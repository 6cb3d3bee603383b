//! The controller's report streams, read in background tasks that keep the newest frame.
//!
//! Why background tasks: the controller pushes reports whether or not anyone reads them (250 Hz on
//! 30000, 5 Hz on 30002). A client that only read them when it needed a value would find the
//! kernel buffer full of stale frames, and could not tell a dead link from an idle one. Each task
//! reads its socket continuously, keeps the newest decoded frame in a `watch` channel and marks
//! the link faulted when it closes, when a frame does not decode or is older than the one before
//! it (a link that reorders frames cannot be trusted), or when no complete frame has
//! arrived for `report_timeout_s` (a silent stream is a dead link: moving without feedback is not
//! safe). The client checks that mark before every command.
//!
//! The real-time task also records the executed joint states while a motion runs
//! (`Robot::take_states`).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::proto::{ProtoError, ReportReader};
use crate::{JointState, RobotError};

/// Most states one recording keeps: ten minutes at 250 Hz. A caller that never takes its states
/// must not grow the process without bound; later states are dropped (and counted).
pub(crate) const MAX_RECORDED_STATES: usize = 150_000;

/// Why a report stream stopped being usable.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum LinkFault {
    /// No complete frame for this many seconds.
    Silent(f64),
    /// The socket closed or failed.
    Closed(String),
    /// A frame that does not decode: the stream cannot be trusted any more.
    Malformed(String),
}

/// What a report task publishes.
#[derive(Debug, Clone)]
pub(crate) struct LinkState<R> {
    /// The newest frame and when it arrived.
    pub latest: Option<(Arc<R>, Instant)>,
    /// Frames decoded so far.
    pub frames: u64,
    pub fault: Option<LinkFault>,
}

impl<R> Default for LinkState<R> {
    fn default() -> Self {
        LinkState {
            latest: None,
            frames: 0,
            fault: None,
        }
    }
}

/// One report stream: its reader task and what it last saw.
pub(crate) struct ReportStream<R> {
    /// Names the stream in errors ("real-time report (port 30000)").
    what: String,
    timeout: Duration,
    rx: watch::Receiver<LinkState<R>>,
    task: JoinHandle<()>,
}

impl<R: Send + Sync + 'static> ReportStream<R> {
    /// Starts reading `stream`; `on_frame` sees every decoded frame on the reader task. `stamp`
    /// gives a frame's time (µs) where the stream carries one: time going back faults the link.
    pub(crate) fn spawn(
        what: String,
        stream: TcpStream,
        timeout: Duration,
        frames: FrameKind<R>,
        on_frame: impl FnMut(&R) + Send + 'static,
    ) -> Self {
        let (tx, rx) = watch::channel(LinkState::default());
        let task = tokio::spawn(read_reports(stream, timeout, frames, tx, on_frame));
        ReportStream {
            what,
            timeout,
            rx,
            task,
        }
    }

    /// Waits until the first frame arrived (or the link faulted). The task itself faults the link
    /// after `timeout` of silence; the outer bound only guards against a starved task.
    pub(crate) async fn first_frame(&mut self) -> Result<(), RobotError> {
        let bound = self.timeout * 2 + Duration::from_millis(100);
        // `Ok(true)`: a frame or a fault was published; `Ok(false)`: the task ended without
        // publishing one (aborted or panicked).
        let waited = tokio::time::timeout(
            bound,
            self.rx.wait_for(|l| l.frames > 0 || l.fault.is_some()),
        )
        .await
        .map(|r| r.is_ok());
        match waited {
            Ok(true) => self.check(),
            Ok(false) => Err(RobotError::Disconnected(format!(
                "{}: the reader stopped",
                self.what
            ))),
            Err(_) => Err(RobotError::Timeout(self.timeout.as_secs_f64())),
        }
    }

    /// `Ok` while the stream delivers frames; the fault as a typed error once it does not. A
    /// frame older than the timeout counts as silence even before the task noticed (a starved
    /// runtime must not hide a dead link).
    pub(crate) fn check(&self) -> Result<(), RobotError> {
        let l = self.rx.borrow();
        if let Some(f) = &l.fault {
            return Err(self.fault_error(f));
        }
        if let Some((_, at)) = &l.latest {
            let age = at.elapsed();
            if age > self.timeout {
                return Err(self.fault_error(&LinkFault::Silent(age.as_secs_f64())));
            }
        }
        Ok(())
    }

    fn fault_error(&self, f: &LinkFault) -> RobotError {
        match f {
            LinkFault::Silent(s) => {
                tracing::warn!("{}: no frame for {s:.2} s", self.what);
                RobotError::Timeout(*s)
            }
            LinkFault::Closed(why) => RobotError::Disconnected(format!("{}: {why}", self.what)),
            LinkFault::Malformed(why) => RobotError::Protocol(format!("{}: {why}", self.what)),
        }
    }

    /// The newest frame, if any arrived.
    pub(crate) fn latest(&self) -> Option<Arc<R>> {
        self.rx.borrow().latest.as_ref().map(|(r, _)| r.clone())
    }
}

impl<R> Drop for ReportStream<R> {
    fn drop(&mut self) {
        // The task owns the socket: ending it closes the connection.
        self.task.abort();
    }
}

/// How a stream's frames are read: the decoder, and the frame's time stamp (µs) if it has one.
pub(crate) struct FrameKind<R> {
    pub decode: fn(&[u8]) -> Result<R, ProtoError>,
    pub stamp: fn(&R) -> Option<u64>,
}

async fn read_reports<R>(
    mut stream: TcpStream,
    timeout: Duration,
    frames: FrameKind<R>,
    tx: watch::Sender<LinkState<R>>,
    mut on_frame: impl FnMut(&R),
) {
    let FrameKind { decode, stamp } = frames;
    let mut last_stamp: Option<u64> = None;
    let mut reader = ReportReader::new();
    let mut buf = vec![0u8; 8192];
    // Silence is measured from the last complete frame, so a trickle of bytes that never
    // completes one is still a dead link.
    let mut deadline = Instant::now() + timeout;
    let fault = 'read: loop {
        loop {
            match reader.next_frame() {
                Ok(Some(frame)) => match decode(&frame) {
                    Ok(r) => {
                        if let (Some(before), Some(now)) = (last_stamp, stamp(&r)) {
                            if now < before {
                                break 'read LinkFault::Malformed(format!(
                                    "frames out of order: stamp {now} µs after {before} µs"
                                ));
                            }
                        }
                        last_stamp = stamp(&r).or(last_stamp);
                        on_frame(&r);
                        let now = Instant::now();
                        deadline = now + timeout;
                        tx.send_modify(|l| {
                            l.latest = Some((Arc::new(r), now));
                            l.frames += 1;
                        });
                    }
                    Err(e) => break 'read LinkFault::Malformed(e.to_string()),
                },
                Ok(None) => break,
                Err(e) => break 'read LinkFault::Malformed(e.to_string()),
            }
        }
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => break LinkFault::Silent(timeout.as_secs_f64()),
            Ok(Ok(0)) => {
                let why = if reader.buffered() > 0 {
                    format!(
                        "closed by the controller in the middle of a frame ({} bytes of it arrived)",
                        reader.buffered()
                    )
                } else {
                    "closed by the controller".to_string()
                };
                break LinkFault::Closed(why);
            }
            Ok(Err(e)) => break LinkFault::Closed(e.to_string()),
            Ok(Ok(n)) => reader.push(&buf[..n]),
        }
    };
    tx.send_modify(|l| l.fault = Some(fault));
}

/// Executed states recorded from the real-time stream while a motion runs.
#[derive(Debug, Default)]
pub(crate) struct Recording {
    pub on: bool,
    pub states: Vec<JointState>,
    /// States not kept because `MAX_RECORDED_STATES` was reached.
    pub dropped: usize,
    /// The newest gripper width the driver read (m): the real-time report does not carry it.
    pub gripper_width: f64,
}

impl Recording {
    pub(crate) fn push(&mut self, state: JointState) {
        if !self.on {
            return;
        }
        if self.states.len() < MAX_RECORDED_STATES {
            self.states.push(state);
        } else {
            self.dropped += 1;
        }
    }
}

/// The recording shared between the real-time task and the client.
pub(crate) type SharedRecording = Arc<Mutex<Recording>>;

pub(crate) fn lock(r: &SharedRecording) -> MutexGuard<'_, Recording> {
    // Every update is a plain push or assignment: a panic elsewhere leaves it usable.
    r.lock().unwrap_or_else(|p| p.into_inner())
}
