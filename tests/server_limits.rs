//! `pointact serve bridge` out of file descriptors: the process is started with a limit of 48
//! descriptors and 80 idle sockets are opened to it. Asserted over the next 2 s: the server keeps
//! to well under half a core (a failing accept is retried after a growing pause, not at once) and
//! writes under 64 KiB of log (one warning a second, with a count of the rest); after the sockets
//! close it serves a WebSocket client again.

use std::io::{BufRead, BufReader, Read};
use std::net::TcpStream;
use std::process::{Command, Stdio};
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
    let bin = env!("CARGO_BIN_EXE_pointact");
    let mut server = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -n 48 && exec '{bin}' serve bridge --addr 127.0.0.1:0 --max-connections 4096"
        ))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the server");
    let mut stdout = BufReader::new(server.stdout.take().expect("stdout"));
    let mut line = String::new();
    let addr = loop {
        line.clear();
        if stdout.read_line(&mut line).expect("read stdout") == 0 {
            let _ = server.kill();
            panic!("the server exited before listening");
        }
        if let Some(rest) = line.trim().strip_prefix("listening ws://") {
            break rest.split('/').next().expect("address").to_string();
        }
    };
    let mut stderr = server.stderr.take().expect("stderr");
    let log = std::thread::spawn(move || {
        let mut all = Vec::new();
        let _ = stderr.read_to_end(&mut all);
        all
    });

    let sockets: Vec<TcpStream> = (0..80)
        .filter_map(|_| TcpStream::connect(&addr).ok())
        .collect();
    assert!(
        sockets.len() >= 60,
        "only {} sockets connected",
        sockets.len()
    );
    let before = cpu_seconds(server.id());
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    let used = cpu_seconds(server.id()) - before;
    let spent = t.elapsed().as_secs_f64();
    drop(sockets);
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
    let _ = server.kill();
    let _ = server.wait();
    let log = log.join().expect("the log reader");
    assert!(
        used < 0.4 * spent,
        "the server used {used:.2} s of CPU in {spent:.2} s while out of descriptors"
    );
    assert!(
        log.len() < 64 * 1024,
        "{} bytes of log in {spent:.1} s; the first lines:\n{}",
        log.len(),
        String::from_utf8_lossy(&log[..log.len().min(2000)])
    );
    assert!(served, "no handshake after the descriptors were freed");
}
