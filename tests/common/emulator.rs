//! `pointact emulate xarm` as a child process, for tests that talk to it over sockets.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, Stdio};

/// Arguments that bind every socket to a free port (printed in the banner).
pub const FREE_PORTS: [&str; 6] = ["--port", "0", "--report-port", "0", "--rt-port", "0"];

/// A running emulator; killed when dropped (a test that fails half way leaves nothing behind).
pub struct EmulatorProcess {
    pub child: Child,
    pub command_port: u16,
    pub report_port: u16,
    pub rt_port: u16,
    /// The rest of its stdout (after the `ready` line).
    pub stdout: BufReader<ChildStdout>,
    /// Everything it printed up to `ready`.
    pub banner: String,
}

impl EmulatorProcess {
    /// Starts `pointact emulate xarm ARGS` and reads the ports it bound from its banner.
    pub fn spawn(args: &[&str]) -> EmulatorProcess {
        let mut child = Command::new(env!("CARGO_BIN_EXE_pointact"))
            .args(["emulate", "xarm"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start pointact emulate xarm");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut banner = String::new();
        let mut ports = [None; 3];
        loop {
            let mut line = String::new();
            let n = stdout
                .read_line(&mut line)
                .expect("read the emulator's banner");
            if n == 0 {
                let status = child.wait();
                panic!(
                    "the emulator exited before it was ready ({status:?}); it printed:\n{banner}"
                );
            }
            banner.push_str(&line);
            let mut words = line.split_whitespace();
            let slot = match words.next() {
                Some("command") => 0,
                Some("report") => 1,
                Some("real-time") => 2,
                Some("ready") => break,
                _ => continue,
            };
            let addr = words.next().expect("an address after the label");
            let port = addr.rsplit(':').next().and_then(|p| p.parse::<u16>().ok());
            ports[slot] = port;
        }
        let [Some(command_port), Some(report_port), Some(rt_port)] = ports else {
            panic!("the banner lacks a port:\n{banner}");
        };
        EmulatorProcess {
            child,
            command_port,
            report_port,
            rt_port,
            stdout,
            banner,
        }
    }
}

impl Drop for EmulatorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
