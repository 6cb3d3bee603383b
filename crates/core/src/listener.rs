//! Accepting TCP connections for a server that must stay up whatever its clients do: a bounded
//! number of connections at once, and accept errors that wait instead of spinning.
//!
//! Every server of the workspace (`serve bridge`, `serve rewards`, the frame server, the xArm
//! emulator's ports) accepts through [`BoundedListener`], so that idle sockets cannot take every
//! file descriptor and an exhausted descriptor table (`EMFILE`, which `accept` returns at once and
//! again on every retry, with the pending connection still queued) neither ends the server nor
//! spins a core writing warnings.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A connection with a free slot; the slot is released when `slot` is dropped.
pub struct Accepted {
    /// The client's stream.
    pub stream: TcpStream,
    /// The client's address, for logs.
    pub peer: SocketAddr,
    /// Held for as long as the connection is served.
    pub slot: OwnedSemaphorePermit,
}

/// A listener serving at most `max_connections` clients at once; one more is closed as soon as
/// it is accepted (the client sees the connection end, never a hang).
pub struct BoundedListener {
    listener: TcpListener,
    slots: Arc<Semaphore>,
    max_connections: usize,
    what: &'static str,
    backoff: AcceptBackoff,
}

impl BoundedListener {
    /// Wraps `listener`; `what` names the server in its warnings (`"bridge"`).
    pub fn new(listener: TcpListener, max_connections: usize, what: &'static str) -> Self {
        let max_connections = max_connections.max(1);
        BoundedListener {
            listener,
            slots: Arc::new(Semaphore::new(max_connections)),
            max_connections,
            what,
            backoff: AcceptBackoff::default(),
        }
    }

    /// The address the listener is bound to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The next connection that has a slot. A failed accept (a connection reset while queued,
    /// no descriptor left) waits 10 ms, doubling to 1 s while failures go on; connections past
    /// the limit are closed. Both are logged at most once a second, with a count of the rest.
    /// Cancel-safe: a caller may drop the future (a `select!` on shutdown) at any await.
    pub async fn accept(&mut self) -> Accepted {
        loop {
            let (stream, peer) = match self.listener.accept().await {
                Ok(a) => {
                    self.backoff.delay = Duration::ZERO;
                    a
                }
                Err(e) => {
                    self.backoff.wait(self.what, &e).await;
                    continue;
                }
            };
            match self.slots.clone().try_acquire_owned() {
                Ok(slot) => return Accepted { stream, peer, slot },
                Err(_) => {
                    let (what, max) = (self.what, self.max_connections);
                    self.backoff.report(|n| {
                        format!("{what}: {peer} closed, {max} connections are open already (--max-connections; {n} more since the last report)")
                    });
                    drop(stream);
                }
            }
        }
    }
}

/// The wait after failed accepts, and the once-a-second reporting.
#[derive(Default)]
struct AcceptBackoff {
    delay: Duration,
    last_report: Option<Instant>,
    unreported: u64,
}

impl AcceptBackoff {
    async fn wait(&mut self, what: &str, e: &io::Error) {
        self.delay = (self.delay * 2).clamp(Duration::from_millis(10), Duration::from_secs(1));
        self.report(|n| {
            format!("{what}: accept failed: {e} ({n} more since the last report); waiting before the next accept")
        });
        tokio::time::sleep(self.delay).await;
    }

    fn report(&mut self, message: impl FnOnce(u64) -> String) {
        let now = Instant::now();
        if self
            .last_report
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
        {
            self.unreported += 1;
            return;
        }
        tracing::warn!("{}", message(self.unreported));
        self.last_report = Some(now);
        self.unreported = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn a_connection_past_the_limit_is_closed_and_a_freed_slot_serves() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let mut bounded = BoundedListener::new(l, 1, "test");
        let _first = TcpStream::connect(addr).await.unwrap();
        let held = bounded.accept().await;
        // Two more while the first holds the only slot: each is accepted and closed at once.
        let mut second = TcpStream::connect(addr).await.unwrap();
        let mut third = TcpStream::connect(addr).await.unwrap();
        let accepting = tokio::spawn(async move { bounded.accept().await.peer });
        for s in [&mut second, &mut third] {
            let mut buf = [0u8; 1];
            let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
                .await
                .expect("a connection past the limit is closed, not left hanging");
            assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
        }
        assert!(
            !accepting.is_finished(),
            "a connection was served past the limit"
        );
        // A freed slot serves the next one.
        drop(held);
        let fourth = TcpStream::connect(addr).await.unwrap();
        let peer = tokio::time::timeout(Duration::from_secs(5), accepting)
            .await
            .expect("a freed slot serves")
            .unwrap();
        assert_eq!(peer, fourth.local_addr().unwrap());
    }
}
