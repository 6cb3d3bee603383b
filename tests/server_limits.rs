//! Servers under clients that take without giving back: out of file descriptors (each started
//! with a limit of 48 descriptors and sent 80 idle sockets), or left with work nobody waits for.
//!
//! | test | checks |
//! | --- | --- |
//! | `an_exhausted_descriptor_table_does_not_spin_the_accept_loop` | `serve bridge`: over the next 2 s the server keeps to well under half a core (a failing accept is retried after a growing pause, not at once) and writes under 64 KiB of log (one warning a second, with a count of the rest); after the sockets close it serves a WebSocket client again |
//! | `the_xarm_emulator_outlives_an_exhausted_descriptor_table` | `emulate xarm`: the same bounds on CPU and log while 80 sockets hold its command port, the process still running; after they close, a new command client is accepted and its real-time report stream delivers a report |
//! | `an_abandoned_reward_request_stops_scoring` | `serve rewards`: a batch of some 15 s of CPU is sent and its connection closed once scoring is under way; from a second after the close the server uses under 0.4 of a core (scoring stops at the next item instead of running on for nobody) |

use std::io::{BufRead, BufReader, Read};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// CPU seconds (user + system) of process `pid` so far, from `/proc/PID/stat`.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the server's stat");
    // Fields after the command name (which is in parentheses): state is field 3; utime and stime
    // are fields 14 and 15, in clock ticks (100 a second on Linux).
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    ticks as f64 / 100.0
}

#[test]
fn an_exhausted_descriptor_table_does_not_spin_the_accept_loop() {
    if !cfg!(target_os = "linux") {
        return;
    }
    let mut server = Limited::start("serve bridge --addr 127.0.0.1:0 --max-connections 4096");
    let addr = server.line_after("listening ws://");
    let addr = addr.split('/').next().expect("address").to_string();
    let starved = server.starve(&addr);
    // Freed descriptors: a WebSocket handshake is answered again (the metadata frame follows).
    std::thread::sleep(Duration::from_millis(1500));
    let mut ws = TcpStream::connect(&addr).expect("connect after the sockets closed");
    ws.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    use std::io::Write;
    write!(
        ws,
        "GET / HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    .unwrap();
    let mut answer = [0u8; 12];
    let served = ws.read_exact(&mut answer).is_ok() && answer.starts_with(b"HTTP/1.1 101");
    server.stop_and_check(starved);
    assert!(served, "no handshake after the descriptors were freed");
}

#[test]
fn the_xarm_emulator_outlives_an_exhausted_descriptor_table() {
    if !cfg!(target_os = "linux") {
        return;
    }
    let mut server =
        Limited::start("emulate xarm --port 0 --report-port 0 --rt-port 0 --max-connections 4096");
    let command = server.line_after("command").trim().to_string();
    let rt = server.line_after("real-time").trim().to_string();
    let starved = server.starve(&command);
    assert!(
        server
            .child
            .try_wait()
            .expect("the emulator's status")
            .is_none(),
        "the emulator exited while out of descriptors"
    );
    std::thread::sleep(Duration::from_millis(1500));
    // A command client is served again, and the real-time stream (250 Hz) delivers.
    let client = TcpStream::connect(&command).expect("a command client after the sockets closed");
    let mut stream = TcpStream::connect(&rt).expect("the real-time stream");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut report = [0u8; 64];
    let delivered = stream.read_exact(&mut report).is_ok();
    drop(client);
    server.stop_and_check(starved);
    assert!(
        delivered,
        "no real-time report after the descriptors were freed"
    );
}

#[test]
fn an_abandoned_reward_request_stops_scoring() {
    if !cfg!(target_os = "linux") {
        return;
    }
    let mut server = Limited::start("serve rewards --addr 127.0.0.1:0");
    let addr = server.line_after("listening http://");
    let addr = addr.split('/').next().expect("address").to_string();
    // 60 items of 2000 points against a 1999-vertex ring: 4·10^6 point-in-polygon tests each,
    // a quarter of a second of one core, under both the item and the batch limits.
    let points: Vec<String> = (0..2000)
        .map(|i| format!("[{}, {}]", 100 + i % 50, 100 + i / 50))
        .collect();
    let ring: Vec<String> = (0..1999)
        .map(|k| {
            let a = k as f64 * std::f64::consts::TAU / 1999.0;
            format!(
                "[{:.3}, {:.3}]",
                300.0 + 200.0 * a.cos(),
                300.0 + 200.0 * a.sin()
            )
        })
        .collect();
    let item = serde_json::json!({
        "response": format!("<think>t</think><answer><point>[{}]</point></answer>", points.join(", ")),
        "ground_truth": format!("<type>point_rec</type>{{\"segmentation\": [{}]}}", ring.join(", ")),
    });
    let body = serde_json::json!({ "items": vec![item; 60] }).to_string();
    let pid = server.child.id();
    let start = cpu_seconds(pid);
    let mut client = TcpStream::connect(&addr).expect("connect");
    use std::io::Write;
    write!(
        client,
        "POST /score HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("send the batch");
    // Close only once scoring is under way (reading and parsing the body take a fraction of
    // this), so the close lands on work in progress.
    let deadline = Instant::now() + Duration::from_secs(60);
    while cpu_seconds(pid) - start < 1.0 {
        assert!(Instant::now() < deadline, "the batch was never scored");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(client);
    std::thread::sleep(Duration::from_secs(1));
    let idle = server.cpu_over(Duration::from_secs(2));
    server.stop_and_check(idle);
}

/// A `pointact` process with at most 48 descriptors, its stdout read line by line and its log
/// (stderr) collected.
struct Limited {
    child: Child,
    stdout: BufReader<std::process::ChildStdout>,
    log: Option<std::thread::JoinHandle<Vec<u8>>>,
}

/// CPU seconds a server used over a span of wall time in which it should have been idle.
struct Starved {
    used: f64,
    spent: f64,
}

impl Limited {
    fn start(args: &str) -> Limited {
        let bin = env!("CARGO_BIN_EXE_pointact");
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(format!("ulimit -n 48 && exec '{bin}' {args}"))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the server");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut stderr = child.stderr.take().expect("stderr");
        let log = std::thread::spawn(move || {
            let mut all = Vec::new();
            let _ = stderr.read_to_end(&mut all);
            all
        });
        Limited {
            child,
            stdout,
            log: Some(log),
        }
    }

    /// The rest of the first stdout line that starts with `prefix`.
    fn line_after(&mut self, prefix: &str) -> String {
        let mut line = String::new();
        loop {
            line.clear();
            if self.stdout.read_line(&mut line).expect("read stdout") == 0 {
                let _ = self.child.kill();
                panic!("the server exited before printing {prefix:?}");
            }
            if let Some(rest) = line.trim().strip_prefix(prefix) {
                return rest.to_string();
            }
        }
    }

    /// Holds 80 idle sockets to `addr` for 2 s, measuring the server's CPU meanwhile.
    fn starve(&self, addr: &str) -> Starved {
        let sockets: Vec<TcpStream> = (0..80)
            .filter_map(|_| TcpStream::connect(addr).ok())
            .collect();
        assert!(
            sockets.len() >= 60,
            "only {} sockets connected",
            sockets.len()
        );
        self.cpu_over(Duration::from_secs(2))
    }

    /// The server's CPU over the next `span` of wall time.
    fn cpu_over(&self, span: Duration) -> Starved {
        let before = cpu_seconds(self.child.id());
        let t = Instant::now();
        std::thread::sleep(span);
        Starved {
            used: cpu_seconds(self.child.id()) - before,
            spent: t.elapsed().as_secs_f64(),
        }
    }

    /// Stops the server and asserts it kept its CPU and its log small over the span measured.
    fn stop_and_check(mut self, starved: Starved) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let log = self
            .log
            .take()
            .expect("the log reader")
            .join()
            .expect("the log reader");
        let Starved { used, spent } = starved;
        assert!(
            used < 0.4 * spent,
            "the server used {used:.2} s of CPU in {spent:.2} s while it should have idled"
        );
        assert!(
            log.len() < 64 * 1024,
            "{} bytes of log in {spent:.1} s; the first lines:\n{}",
            log.len(),
            String::from_utf8_lossy(&log[..log.len().min(2000)])
        );
    }
}
