//! `pointact bench soak`: a process that stays up, under load for a long time on loopback, watched
//! window by window: errors, resident memory, open file descriptors, threads and the latency p99 of
//! each window. What a leak, a descriptor that is never closed or a queue that grows looks like
//! only shows after many minutes; the other benches run for seconds.
//!
//! Targets (each on 127.0.0.1, as the matching `serve`/`emulate` command runs it):
//!
//! * `bridge`: `serve bridge`, in a process of its own (what is measured is the server alone),
//!   with `bench bridge`'s 16 kinematic evaluators at 5 Hz, and beside
//!   them a hostile client that, in turn, sends a frame that is not msgpack (the server must answer
//!   it and keep the connection), resets and leaves mid-episode without `episode_end`, and opens a
//!   connection only to drop it;
//! * `rewards`: `serve rewards` scoring batches of 1000 items (`bench rewards`' stage-2 mix, its
//!   malformed answers included) until `--items`; among them items that are not objects or lack a
//!   field (answered in place), bodies that are not JSON (400) and requests cut mid-body;
//! * `servo`: `XarmRobot` streaming there-and-back trajectories to the xArm emulator at 250 Hz;
//! * `xarm-tasks`: `emulate xarm --sim`'s emulator and camera, with `pointact run --xarm`
//!   processes doing a task one after another against them (`soak_tasks`).
//!
//! Verdict: no unexpected error; resident memory at the end within 5 % of the end of the first
//! window (the warm-up: allocator pools, caches and thread stacks filled); descriptors the same at
//! every window's end; threads at the last window's end no more than at some earlier window's end
//! (a runtime's blocking pool starts and retires threads as work comes, so the count at an instant
//! moves by one or two; a leak sets a new high in every window); the last window's p99 within
//! twice the first's (drift beyond the noise of a shared machine). The figures go to docs/performance.md with the command, the CPU
//! and the date.

use std::fmt;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::json;

use super::bridge::{fixtures, percentile, phase};
use crate::cpu_model;
use pointact_apps::bridge::protocol::ClientMessage;
use pointact_apps::bridge::remote::{ControlMode, EpisodeStart, RemotePolicy};
use pointact_apps::bridge::BridgeClient;

/// Growth of resident memory allowed after the warm-up window.
pub const MAX_RSS_GROWTH: f64 = 0.05;
/// The last window's p99 may be this many times the first's.
pub const MAX_P99_DRIFT: f64 = 2.0;

/// What to soak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SoakTarget {
    Bridge,
    Rewards,
    Servo,
    XarmTasks,
}

pub struct SoakArgs {
    pub target: SoakTarget,
    /// Length of the run (min); `rewards` ends at `items` if that comes first.
    pub minutes: f64,
    /// Windows the run is cut into (each reports apart).
    pub windows: usize,
    /// `rewards`: items to score in all.
    pub items: u64,
    /// `xarm-tasks`: tasks to run in all.
    pub tasks: u64,
    /// `bridge`: evaluator connections.
    pub connections: usize,
    /// `bridge`: the evaluator's arm the server is started for.
    pub robot: String,
}

/// A process's use of the machine, from /proc.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    pub rss_kib: u64,
    pub fds: usize,
    pub threads: usize,
}

/// This process's use: /proc/self/status (VmRSS, Threads) and the count of /proc/self/fd.
pub fn usage() -> Usage {
    usage_of("self")
}

/// The same for process `pid` ("self" for this one).
fn usage_of(pid: &str) -> Usage {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Usage {
        rss_kib: field("VmRSS:"),
        fds: std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count()),
        threads: field("Threads:") as usize,
    }
}

/// One window's figures.
#[derive(Debug, Clone, Default)]
pub struct Window {
    pub seconds: f64,
    /// Work done: actions answered, items scored, setpoints sent.
    pub ops: u64,
    /// Unexpected failures; the first few in words.
    pub errors: u64,
    pub first_errors: Vec<String>,
    /// Faults made on purpose (hostile frames, cut requests, bad items) and answered as they must.
    pub provoked: u64,
    /// Latency of each op (ms): server time per action, round trip per batch, servo period
    /// deviation; emptied into `p50_ms`/`p99_ms` when the window ends, before the process is
    /// measured (a window of the servo loop holds 150 000 of them: 1.2 MB that would read as
    /// growth).
    pub latencies_ms: Vec<f64>,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    /// The process at the window's end.
    pub usage: Usage,
}

impl Window {
    pub(crate) fn error(&mut self, what: String) {
        self.errors += 1;
        if self.first_errors.len() < 3 {
            self.first_errors.push(what);
        }
    }

    /// Ends the window: the percentiles kept, the samples freed, this process measured.
    pub(crate) fn close(&mut self, seconds: f64) {
        self.close_measuring(seconds, "self");
    }

    /// [`Self::close`], measuring process `pid` (the server under soak, when it runs apart).
    fn close_measuring(&mut self, seconds: f64, pid: &str) {
        self.seconds = seconds;
        self.p50_ms = percentile(&self.latencies_ms, 50.0);
        self.p99_ms = percentile(&self.latencies_ms, 99.0);
        self.latencies_ms = Vec::new();
        self.usage = usage_of(pid);
    }
}

pub struct SoakReport {
    pub cpu: String,
    pub target: String,
    /// What each window's latency is.
    pub latency: &'static str,
    pub start: Usage,
    pub windows: Vec<Window>,
}

impl SoakReport {
    /// Resident memory growth from the end of the first window to the end of the last.
    pub fn rss_growth(&self) -> Option<f64> {
        let first = self.windows.first()?.usage.rss_kib as f64;
        let last = self.windows.last()?.usage.rss_kib as f64;
        (first > 0.0).then(|| (last - first) / first)
    }

    /// The last window's p99 over the first's.
    pub fn p99_drift(&self) -> Option<f64> {
        let first = self.windows.first()?.p99_ms?;
        let last = self.windows.last()?.p99_ms?;
        (first > 0.0).then(|| last / first)
    }

    /// Threads at the last window's end no more than at some earlier window's end.
    pub fn threads_bounded(&self) -> bool {
        let ends: Vec<usize> = self.windows.iter().map(|w| w.usage.threads).collect();
        match ends.split_last() {
            Some((last, earlier)) if !earlier.is_empty() => earlier.iter().any(|&t| t >= *last),
            _ => false,
        }
    }

    fn constant(&self, f: impl Fn(&Usage) -> usize) -> bool {
        self.windows
            .windows(2)
            .all(|w| f(&w[0].usage) == f(&w[1].usage))
    }

    pub fn errors(&self) -> u64 {
        self.windows.iter().map(|w| w.errors).sum()
    }

    /// Every goal met (at least two windows: one to warm up, one to compare).
    pub fn passed(&self) -> bool {
        self.windows.len() >= 2
            && self.errors() == 0
            && self.rss_growth().is_some_and(|g| g <= MAX_RSS_GROWTH)
            && self.constant(|u| u.fds)
            && self.threads_bounded()
            && self.p99_drift().is_some_and(|d| d <= MAX_P99_DRIFT)
    }
}

impl fmt::Display for SoakReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "cpu       {}", self.cpu)?;
        writeln!(f, "target    {}", self.target)?;
        writeln!(f, "latency   {}", self.latency)?;
        writeln!(
            f,
            "start     rss {} MiB, {} fds, {} threads",
            self.start.rss_kib / 1024,
            self.start.fds,
            self.start.threads
        )?;
        writeln!(f, "{}", header())?;
        let mut end = 0.0;
        for (i, w) in self.windows.iter().enumerate() {
            end += w.seconds;
            writeln!(f, "{}", row(i + 1, end, w))?;
        }
        let pct = |v: Option<f64>| v.map_or("-".into(), |g| format!("{:+.1} %", 100.0 * g));
        writeln!(
            f,
            "rss       {} after the first window (goal <= {:.0} %)",
            pct(self.rss_growth()),
            100.0 * MAX_RSS_GROWTH
        )?;
        writeln!(
            f,
            "fds       {}; threads {}",
            if self.constant(|u| u.fds) {
                "constant"
            } else {
                "CHANGED"
            },
            if self.constant(|u| u.threads) {
                "constant"
            } else if self.threads_bounded() {
                "within the range seen before the last window"
            } else {
                "GREW to a new high in the last window"
            }
        )?;
        writeln!(
            f,
            "p99       last window / first: {} (goal <= {MAX_P99_DRIFT})",
            self.p99_drift().map_or("-".into(), |d| format!("{d:.2}"))
        )?;
        write!(
            f,
            "verdict   {}",
            if self.passed() { "PASS" } else { "FAIL" }
        )
    }
}

/// The head of the window table.
fn header() -> String {
    format!(
        "{:>6} {:>8} {:>10} {:>7} {:>9} {:>9} {:>9} {:>8} {:>5} {:>7}",
        "window",
        "end (s)",
        "ops",
        "errors",
        "provoked",
        "p50 ms",
        "p99 ms",
        "rss MiB",
        "fds",
        "threads"
    )
}

/// Window `index` (from 1), ending `end_s` after the start, as a row of the table, with its first
/// errors on lines of their own.
fn row(index: usize, end_s: f64, w: &Window) -> String {
    let ms = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2}"));
    let mut row = format!(
        "{:>6} {:>8.0} {:>10} {:>7} {:>9} {:>9} {:>9} {:>8.1} {:>5} {:>7}",
        index,
        end_s,
        w.ops,
        w.errors,
        w.provoked,
        ms(w.p50_ms),
        ms(w.p99_ms),
        w.usage.rss_kib as f64 / 1024.0,
        w.usage.fds,
        w.usage.threads
    );
    for e in &w.first_errors {
        row.push_str(&format!("\n         error: {e}"));
    }
    row
}

/// The windows closed so far. Each is written to stderr as it closes, as the report's row, so that
/// an hour-long soak shows where it is and one cut short keeps the figures of the windows it
/// closed (the report itself comes only at the end).
pub(crate) struct Closed {
    windows: Vec<Window>,
}

impl Closed {
    pub(crate) fn with_capacity(windows: usize) -> Self {
        Closed {
            windows: Vec::with_capacity(windows),
        }
    }

    pub(crate) fn push(&mut self, w: Window) {
        self.push_to(w, &mut std::io::stderr().lock());
    }

    fn push_to(&mut self, w: Window, out: &mut impl Write) {
        // Progress only: a closed stderr must not end the soak.
        if self.windows.is_empty() {
            let _ = writeln!(out, "{}", header());
        }
        // Summed in the order the report sums them, so the two print the same end.
        let end_s = self.windows.iter().map(|w| w.seconds).sum::<f64>() + w.seconds;
        let _ = writeln!(out, "{}", row(self.windows.len() + 1, end_s, &w));
        self.windows.push(w);
    }

    pub(crate) fn into_windows(self) -> Vec<Window> {
        self.windows
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SoakError {
    #[error(
        "--minutes must be in (0, 1440], --windows in 2..=1000, --items at least 1000, --tasks in \
         1..=100000 and --connections in 1..=256"
    )]
    Args,
    #[error("{0}")]
    Setup(String),
}

/// Runs the soak and reports it.
pub fn run(args: SoakArgs) -> Result<SoakReport, SoakError> {
    let ok = args.minutes > 0.0
        && args.minutes <= 1440.0
        && (2..=1000).contains(&args.windows)
        && args.items >= 1000
        && (1..=100_000).contains(&args.tasks)
        && (1..=256).contains(&args.connections);
    if !ok {
        return Err(SoakError::Args);
    }
    let window = Duration::from_secs_f64(args.minutes * 60.0 / args.windows as f64);
    let name = clap::ValueEnum::to_possible_value(&args.target).map_or_else(
        || format!("{:?}", args.target),
        |v| v.get_name().to_string(),
    );
    eprintln!(
        "soak {name}: up to {} min in {} windows of {:.0} s; a row as each window ends, the \
         report at the end",
        args.minutes,
        args.windows,
        window.as_secs_f64()
    );
    let here = usage();
    let (target, latency, apart, windows) = match args.target {
        SoakTarget::Bridge => bridge(args.robot.clone(), args.connections, args.windows, window)?,
        SoakTarget::Rewards => rewards(args.items, args.windows, window)?,
        SoakTarget::Servo => servo(args.windows, window)?,
        SoakTarget::XarmTasks => super::soak_tasks::tasks(args.tasks, args.windows, window)?,
    };
    Ok(SoakReport {
        cpu: cpu_model(),
        target,
        latency,
        start: apart.unwrap_or(here),
        windows,
    })
}

/// What a target reports: what it ran, what its latency is, the measured process at its start
/// when that is not this one, and the windows.
pub(crate) type Soaked = (String, &'static str, Option<Usage>, Vec<Window>);

// ---------------------------------------------------------------------------------------------
// serve bridge

fn bridge(
    robot: String,
    connections: usize,
    windows: usize,
    window: Duration,
) -> Result<Soaked, SoakError> {
    let setup = |e: &dyn fmt::Display| SoakError::Setup(e.to_string());
    let fixtures = Arc::new(fixtures().map_err(|e| setup(&e))?);
    let mut server = ServerProcess::start(&robot)?;
    let addr = server.addr.clone();
    let pid = server.child.id().to_string();
    let at_start = usage_of(&pid);
    let target = format!(
        "`pointact serve bridge --pointer oracle --robot {robot}` (pid {pid}, ws://{addr}/; \
         resident memory, descriptors and threads are its own): {connections} evaluators at 5 Hz \
         and a hostile client"
    );
    let mut out = Closed::with_capacity(windows);
    for _ in 0..windows {
        let deadline = Instant::now() + window;
        let hostile = {
            let (addr, fixtures) = (addr.clone(), fixtures.clone());
            std::thread::spawn(move || hostile_client(&addr, &fixtures[0], deadline))
        };
        let stats = phase(
            &fixtures,
            &addr,
            connections,
            5.0,
            window.as_secs_f64(),
            120,
        );
        let mut w = hostile.join().unwrap_or_else(|_| {
            let mut w = Window::default();
            w.error("the hostile client panicked".into());
            w
        });
        w.ops = stats.actions;
        w.latencies_ms = stats.server_ms.clone();
        let lost = stats.sent.saturating_sub(stats.received) + stats.reordered;
        if lost > 0 {
            w.error(format!(
                "{lost} requests unanswered or answered out of order"
            ));
        }
        for e in stats.first_errors.iter().take(stats.errors as usize) {
            w.error(e.clone());
        }
        let seconds = stats.seconds;
        drop(stats);
        if let Ok(Some(status)) = server.child.try_wait() {
            w.error(format!("the server exited: {status}"));
        }
        w.close_measuring(seconds, &pid);
        out.push(w);
    }
    drop(server);
    Ok((
        target,
        "server time per action after each episode's first (ms)",
        Some(at_start),
        out.into_windows(),
    ))
}

/// Until `deadline`, once a second in turn: a frame that is not msgpack (answered with an error
/// text, the connection kept: an episode is then run on it to prove it), an episode left after one
/// step without `episode_end`, a connection opened and dropped.
/// `pointact serve bridge` as a user starts it, in a process of its own on a free loopback port;
/// interrupted (as Ctrl-C would) when dropped.
struct ServerProcess {
    child: std::process::Child,
    addr: String,
}

impl ServerProcess {
    fn start(robot: &str) -> Result<ServerProcess, SoakError> {
        use std::io::BufRead;
        let setup = |e: &dyn fmt::Display| SoakError::Setup(format!("serve bridge: {e}"));
        let exe = std::env::current_exe().map_err(|e| setup(&e))?;
        let mut child = std::process::Command::new(exe)
            .args([
                "serve",
                "bridge",
                "--addr",
                "127.0.0.1:0",
                "--pointer",
                "oracle",
            ])
            .args(["--robot", robot])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| setup(&e))?;
        let stdout = child.stdout.take().ok_or_else(|| setup(&"no stdout"))?;
        let mut lines = std::io::BufReader::new(stdout).lines();
        let addr = loop {
            match lines.next() {
                Some(Ok(l)) => {
                    if let Some(rest) = l.strip_prefix("listening ws://") {
                        break rest.split('/').next().unwrap_or_default().to_string();
                    }
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(setup(&"it exited before listening"));
                }
            }
        };
        // The rest of its output is read and dropped, so it never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Ok(ServerProcess { child, addr })
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn hostile_client(addr: &str, fixture: &super::bridge::Fixture, deadline: Instant) -> Window {
    let mut w = Window::default();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            w.error(format!("hostile runtime: {e}"));
            return w;
        }
    };
    rt.block_on(async {
        let mut turn = 0u64;
        while Instant::now() + Duration::from_secs(1) < deadline {
            tokio::time::sleep(Duration::from_secs(1)).await;
            turn += 1;
            let mut client = match BridgeClient::connect(addr).await {
                Ok(c) => c,
                Err(e) => {
                    w.error(format!("hostile connect: {e}"));
                    continue;
                }
            };
            client.timeout = Duration::from_secs(30);
            match turn % 3 {
                0 => {
                    let garbage: Vec<u8> = (0..64u8).map(|b| b.wrapping_mul(37) ^ 0xc1).collect();
                    if let Err(e) = client.send_raw(garbage).await {
                        w.error(format!("hostile frame: {e}"));
                        continue;
                    }
                    match client.next_text().await {
                        Ok(_) => w.provoked += 1,
                        Err(e) => w.error(format!("no answer to a broken frame: {e}")),
                    }
                    let start = start_of(fixture, 9_000_000 + turn);
                    if let Err(e) = client.reset(&start).await {
                        w.error(format!("reset after a broken frame: {e}"));
                    }
                    let _ = client.end(false, 0).await;
                }
                1 => {
                    let start = start_of(fixture, 9_000_000 + turn);
                    if let Err(e) = client.reset(&start).await {
                        w.error(format!("hostile reset: {e}"));
                        continue;
                    }
                    // One observation, then gone: no episode_end, the socket just closes.
                    let obs = super::bridge::first_observation(fixture);
                    match client.request(&ClientMessage::Infer(Box::new(obs))).await {
                        Ok(_) => w.provoked += 1,
                        Err(e) => w.error(format!("hostile infer: {e}")),
                    }
                }
                _ => w.provoked += 1,
            }
            drop(client);
        }
    });
    w
}

fn start_of(fixture: &super::bridge::Fixture, episode_id: u64) -> EpisodeStart {
    EpisodeStart {
        task: fixture.task.clone(),
        instruction: fixture.instruction.clone(),
        episode_id,
        control_mode: ControlMode::DeltaEe,
        control_freq: 5.0,
        max_steps: 120,
    }
}

// ---------------------------------------------------------------------------------------------
// serve rewards

/// Items per request.
const BATCH: usize = 1000;

fn rewards(items: u64, windows: usize, window: Duration) -> Result<Soaked, SoakError> {
    use pointact_apps::train::service::{RewardService, ServiceConfig};
    let setup = |e: &dyn fmt::Display| SoakError::Setup(e.to_string());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| setup(&e))?;
    let service = rt
        .block_on(RewardService::bind("127.0.0.1:0", ServiceConfig::default()))
        .map_err(|e| setup(&e))?;
    let addr = service.local_addr().map_err(|e| setup(&e))?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = rt.spawn(service.serve(async {
        let _ = stopped.await;
    }));
    let target = format!(
        "serve rewards in process (http://{addr}/score): {items} items in batches of {BATCH}, \
         bad items, bodies that are not JSON and requests cut mid-body among them"
    );
    let per_window = items.div_ceil(windows as u64);
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut conn: Option<TcpStream> = None;
    let mut out = Closed::with_capacity(windows);
    let mut request = 0u64;
    let mut scored_total = 0u64;
    for _ in 0..windows {
        let began = Instant::now();
        let mut w = Window::default();
        let mut scored = 0u64;
        while scored < per_window && scored_total < items && began.elapsed() < window {
            request += 1;
            if request.is_multiple_of(97) {
                // A request cut mid-body: the server must drop it and keep serving.
                let mut s = match TcpStream::connect(addr) {
                    Ok(s) => s,
                    Err(e) => {
                        w.error(format!("connect: {e}"));
                        continue;
                    }
                };
                let _ = s.write_all(
                    b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"items\": [",
                );
                w.provoked += 1;
                continue;
            }
            let (body, bad) = if request.is_multiple_of(89) {
                (b"{\"items\": [not json".to_vec(), true)
            } else {
                (batch_body(&mut rng), false)
            };
            let sent = Instant::now();
            match post(&mut conn, addr, &body) {
                Ok((status, text)) => {
                    w.latencies_ms.push(sent.elapsed().as_secs_f64() * 1e3);
                    match (bad, status) {
                        (true, 400) => w.provoked += 1,
                        (false, 200) => {
                            let n = count_results(&text);
                            if n != BATCH {
                                w.error(format!("{n} results for {BATCH} items"));
                            }
                            // Bad items are answered in place with an error.
                            w.provoked += text.matches("\"error\"").count() as u64;
                            scored += BATCH as u64;
                            w.ops += BATCH as u64;
                        }
                        (_, s) => w.error(format!("HTTP {s}: {}", &text[..text.len().min(200)])),
                    }
                }
                Err(e) => {
                    w.error(format!("request {request}: {e}"));
                    conn = None;
                }
            }
        }
        scored_total += scored;
        w.close(began.elapsed().as_secs_f64());
        out.push(w);
    }
    drop(conn);
    let _ = stop.send(());
    let _ = rt.block_on(server);
    Ok((
        target,
        "round trip per batch of 1000 (ms)",
        None,
        out.into_windows(),
    ))
}

/// A batch of `bench rewards`' items, one in 50 replaced by an item that is not an object or
/// lacks a field.
fn batch_body(rng: &mut ChaCha8Rng) -> Vec<u8> {
    let seed = rng.gen::<u64>();
    let items: Vec<serde_json::Value> = super::rewards::batch(BATCH, seed)
        .into_iter()
        .map(|(response, gt)| match rng.gen_range(0..100) {
            0 => json!(["not", "an", "object"]),
            1 => json!({ "response": response }),
            _ => json!({ "response": response, "ground_truth": gt }),
        })
        .collect();
    serde_json::to_vec(&json!({ "items": items })).unwrap_or_default()
}

fn count_results(text: &str) -> usize {
    serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| v.get("results").and_then(|r| r.as_array()).map(Vec::len))
        .unwrap_or(0)
}

/// One POST /score on a kept-alive connection (opened when there is none): status and body.
fn post(
    conn: &mut Option<TcpStream>,
    addr: std::net::SocketAddr,
    body: &[u8],
) -> std::io::Result<(u16, String)> {
    if conn.is_none() {
        let s = TcpStream::connect(addr)?;
        s.set_read_timeout(Some(Duration::from_secs(60)))?;
        *conn = Some(s);
    }
    let s = conn.as_mut().expect("connected above");
    write!(
        s,
        "POST /score HTTP/1.1\r\nHost: soak\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )?;
    s.write_all(body)?;
    // Headers, then exactly Content-Length bytes of body.
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte)? == 0 {
            return Err(std::io::Error::other("closed before the answer's headers"));
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).to_string();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse::<u16>().ok())
        .unwrap_or(0);
    let len = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())
                .flatten()
        })
        .ok_or_else(|| std::io::Error::other("an answer without Content-Length"))?;
    let mut out = vec![0u8; len];
    s.read_exact(&mut out)?;
    if status != 200 {
        // The server may close after an error answer: start the next request afresh.
        *conn = None;
    }
    Ok((status, String::from_utf8_lossy(&out).to_string()))
}

// ---------------------------------------------------------------------------------------------
// the servo loop

fn servo(windows: usize, window: Duration) -> Result<Soaked, SoakError> {
    use super::servo::{soak_robot, there_and_back};
    use crate::robot::Robot;
    let setup = |e: &dyn fmt::Display| SoakError::Setup(e.to_string());
    let rate_hz = 250.0;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| setup(&e))?;
    let (target, out) = rt.block_on(async {
        let (mut robot, _emulator, target) = soak_robot(rate_hz).await.map_err(|e| setup(&e))?;
        let trajectory = there_and_back(&robot, rate_hz, 4.0).map_err(|e| setup(&e))?;
        let mut out = Closed::with_capacity(windows);
        for _ in 0..windows {
            let began = Instant::now();
            let mut w = Window::default();
            while began.elapsed() < window {
                let result = robot.execute(&trajectory).await;
                // As the runner does after each motion: the recorded states are taken.
                robot.take_states();
                match result {
                    Ok(()) => {
                        if let Some(s) = robot.last_servo_stats() {
                            w.ops += s.sent as u64;
                            let nominal = 1.0 / rate_hz;
                            w.latencies_ms
                                .extend(s.periods_s.iter().map(|p| (p - nominal).abs() * 1e3));
                        }
                    }
                    Err(e) => {
                        w.error(format!("execute: {e}"));
                        // Back to a working arm before the next trajectory.
                        if let Err(e) = robot.startup().await {
                            w.error(format!("startup: {e}"));
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                    }
                }
            }
            w.close(began.elapsed().as_secs_f64());
            out.push(w);
        }
        Ok::<_, SoakError>((target, out))
    })?;
    Ok((
        format!("{target}, there-and-back trajectories at {rate_hz} Hz"),
        "servo period deviation from 4 ms (ms)",
        None,
        out.into_windows(),
    ))
}

#[cfg(test)]
mod verdict_tests {
    use super::*;

    fn report(ends: &[(u64, usize, usize)]) -> SoakReport {
        SoakReport {
            cpu: "test".into(),
            target: "test".into(),
            latency: "ms",
            start: Usage::default(),
            windows: ends
                .iter()
                .map(|&(rss_kib, fds, threads)| Window {
                    p99_ms: Some(1.0),
                    usage: Usage {
                        rss_kib,
                        fds,
                        threads,
                    },
                    ..Window::default()
                })
                .collect(),
        }
    }

    #[test]
    fn each_window_is_shown_as_it_closes_as_the_report_shows_it() {
        let windows = report(&[(1000, 14, 18), (2048, 14, 19)]).windows;
        let mut closed = Closed::with_capacity(2);
        let mut shown = Vec::new();
        for (i, mut w) in windows.into_iter().enumerate() {
            w.seconds = 600.0;
            w.ops = 48_400 + i as u64;
            if i == 1 {
                w.error("the server exited".into());
            }
            closed.push_to(w, &mut shown);
        }
        let shown = String::from_utf8(shown).unwrap();
        let lines: Vec<&str> = shown.lines().collect();
        assert_eq!(lines.len(), 4, "{shown}");
        assert!(lines[0].trim_start().starts_with("window"), "{shown}");
        let cells: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(&cells[..4], ["2", "1200", "48401", "1"], "{shown}");
        assert_eq!(cells[7], "2.0", "rss in MiB: {shown}");
        assert_eq!(lines[3].trim(), "error: the server exited");
        // The live rows are the final report's, word for word.
        let report = SoakReport {
            windows: closed.into_windows(),
            ..report(&[])
        };
        assert!(
            report.to_string().contains(&shown),
            "{report}\n---\n{shown}"
        );
    }

    #[test]
    fn a_pool_may_move_a_leak_may_not() {
        // A blocking thread alive at one window's end and not at another's: within the range.
        assert!(report(&[(1000, 14, 18), (1000, 14, 19), (1000, 14, 19)]).passed());
        assert!(report(&[(1000, 14, 19), (1000, 14, 18), (1000, 14, 19)]).passed());
        // A new high at the end: one thread more per window.
        assert!(!report(&[(1000, 14, 18), (1000, 14, 19), (1000, 14, 20)]).passed());
        // Descriptors stay strict, memory within 5 % of the warm-up's end.
        assert!(!report(&[(1000, 14, 18), (1000, 15, 18)]).passed());
        assert!(report(&[(1000, 14, 18), (1050, 14, 18)]).passed());
        assert!(!report(&[(1000, 14, 18), (1051, 14, 18)]).passed());
        // One window alone proves nothing.
        assert!(!report(&[(1000, 14, 18)]).passed());
    }
}
