//! An emulator serving from its own thread and runtime, for tests and benchmarks that drive it
//! from the same process.
//!
//! Why a thread of its own: a controller is another machine. On the caller's runtime the
//! emulator's 250 Hz tick would compete with the client's tasks for the same workers, and its
//! timing would depend on what the caller does; on its own current-thread runtime it keeps its
//! clock like a separate controller would.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use tokio::sync::oneshot;

use super::{Controller, EmulatedArm, Emulator, EmulatorError, EmulatorOptions};

/// A running emulator; shut down (every connection closed) when dropped.
pub struct EmulatorThread {
    /// Command, rich report and real-time report ports it bound.
    pub ports: [u16; 3],
    /// The controller model, for inspection.
    pub controller: Arc<Mutex<Controller>>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl EmulatorThread {
    /// Binds (ports 0 pick free ones) and starts serving; returns once the sockets exist.
    pub fn start(
        options: EmulatorOptions,
        arm: Box<dyn EmulatedArm>,
    ) -> Result<EmulatorThread, EmulatorError> {
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = tx.send(Err(EmulatorError::Io(e)));
                    return;
                }
            };
            rt.block_on(async move {
                let emu = match Emulator::bind(options, arm).await {
                    Ok(e) => e,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                };
                let ports = [
                    emu.command_addr().port(),
                    emu.report_addr().port(),
                    emu.rt_addr().port(),
                ];
                let _ = tx.send(Ok((ports, emu.controller())));
                if let Err(e) = emu
                    .run(async {
                        let _ = stopped.await;
                    })
                    .await
                {
                    tracing::warn!("xarm emulator thread: {e}");
                }
            });
        });
        let (ports, controller) = rx.recv().map_err(|_| {
            EmulatorError::Io(std::io::Error::other("the emulator thread ended at start"))
        })??;
        Ok(EmulatorThread {
            ports,
            controller,
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for EmulatorThread {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
