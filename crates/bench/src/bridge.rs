//! `pointact bench bridge`: a load script for the bridge server (`serve bridge`). N evaluator
//! connections at once (16 by default), each sending an observation every control period (5 Hz)
//! for a fixed time (2 minutes), on loopback; the goals are no dropped or reordered message and a
//! p99 server latency (`server_ms`, frame in → answer out) of at most 5 ms, the first observation
//! of each episode excluded (it includes the pointer and the planning, reported apart).
//!
//! Each connection runs real episodes of the server's plan (our four Bridge tasks in turn, the
//! oracle pointer), but its evaluator is kinematic so that 16 of them fit beside the server on a
//! small machine: the camera frame (RGB, depth, segmentation; SimplerEnv's runner sends the
//! segmentation every step, so do we) is rendered once per task before the load and sent
//! unchanged every step, while the arm follows the server's actions through SimplerEnv's
//! controller ([`SimplerController`], the same as `eval bridge` uses): joints, TCP and target
//! pose change every step as the server's plan drives them. Fingers follow the gripper command at
//! once, except that they stop at a 26 mm object ([`OBJECT_FINGER_M`]) when commanded narrower:
//! the server's grasp check then sees an object in the hand, as it would in a simulator.
//!
//! Pacing: a connection sends its next observation one period after it sent the previous one (at
//! once if the answer came later, counted as late); connections start spread over one period, as
//! independent evaluators would. An episode ends when the server terminates it or after the step
//! budget; the connection then sends `episode_end` and opens a new connection for the next one
//! (one episode per connection, openpi's convention). Episodes still running at the end of the
//! run are cut (and ended properly).
//!
//! The peer, measured in the same run: the same server and client with one connection alone,
//! for a few seconds before the load: the ratios say what sharing the machine with the other
//! connections costs.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k::nalgebra::Isometry3;

use crate::camera::{Camera, Frame};
use crate::cpu_model;
use crate::kinematics::RobotModel;
use crate::runner::prepare_episode;
use crate::runner::remote::{labels_for, SimplerController};
use crate::sim::devices::SimCamera;
use crate::sim::tasks::Suite;
use pointact_apps::bridge::protocol::{encode_client, ClientMessage, ServerMessage};
use pointact_apps::bridge::remote::{
    ControlMode, EpisodeStart, Labels, Observation, PolicyStatus, RemotePolicy,
};
use pointact_apps::bridge::{BridgeClient, BridgeServer, SessionConfig};

/// The goal on the server's p99 latency, first observations excluded (ms).
pub(crate) const GOAL_P99_SERVER_MS: f64 = 5.0;

/// Where the kinematic evaluator's fingers stop when commanded narrower (finger joint, m): a
/// 26 mm object between the pads (the WidowX's fingers stand at 0.015 closed and 0.037 open, the
/// pad gap being twice the joint above 0.015). The server closes to 0.015 on a grasp and checks
/// that the fingers stopped above 1 mm of gap.
pub(crate) const OBJECT_FINGER_M: f64 = 0.028;

/// Which server to load.
pub enum BridgeTarget {
    /// One started in this process on a free loopback port, with these settings.
    InProcess(SessionConfig),
    /// One running elsewhere (`ws://HOST:PORT` or `HOST:PORT`), oracle pointer and WidowX.
    External(String),
}

/// Options of `pointact bench bridge`.
pub struct BridgeBenchArgs {
    pub target: BridgeTarget,
    /// Connections at once.
    pub connections: usize,
    /// Observations per second on each connection.
    pub rate_hz: f64,
    /// Length of the load (s).
    pub seconds: f64,
    /// Step budget per episode.
    pub max_steps: u64,
    /// Length of the one-connection peer run before the load (s; 0 skips it).
    pub solo_seconds: f64,
}

#[derive(Debug, thiserror::Error)]
pub enum BridgeBenchError {
    #[error(
        "--connections must be in 1..=256, --rate-hz in (0, 50], --seconds in [1, 3600], \
         --solo-seconds in [0, 600] and --max-steps at least 2"
    )]
    Args,
    #[error("preparing the observations: {0}")]
    Scene(String),
    #[error("the in-process server: {0}")]
    Server(String),
}

/// How an episode ended, from the evaluator's side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// The server terminated it with status `done`.
    Done,
    /// The server terminated it with status `failed`.
    Failed,
    /// The step budget ran out first.
    Budget,
    /// The run ended first.
    Cut,
    /// The link or the protocol failed (counted in the errors).
    Broken,
}

/// What one phase (the peer or the load) measured, all connections together.
#[derive(Debug, Clone, Default)]
pub struct PhaseStats {
    pub connections: usize,
    pub seconds: f64,
    /// Requests sent (reset, infer, episode_end) and answers received to them.
    pub sent: u64,
    pub received: u64,
    /// Observations sent, and their frames' bytes.
    pub infer_sent: u64,
    pub infer_bytes: u64,
    /// Actions received, and their frames' bytes.
    pub actions: u64,
    pub action_bytes: u64,
    /// Actions whose `step` was not the observation's.
    pub reordered: u64,
    /// Error frames, link failures, unusable answers; the first few in words.
    pub errors: u64,
    pub first_errors: Vec<String>,
    /// Actions without `server_ms`.
    pub untimed: u64,
    /// Server latency of observations after the first of their episode (ms).
    pub server_ms: Vec<f64>,
    /// Round trip measured by the client (send → answer decoded) of the same (ms).
    pub rtt_ms: Vec<f64>,
    /// The same two for first observations (pointer and planning included).
    pub first_server_ms: Vec<f64>,
    pub first_rtt_ms: Vec<f64>,
    /// Observations sent later than their period said (the answer to the previous came late).
    pub late: u64,
    pub done: u64,
    pub failed: u64,
    pub budget: u64,
    pub cut: u64,
    pub broken: u64,
    /// Control steps of episodes that ended done.
    pub done_steps: u64,
    /// The first few failure details.
    pub failures: Vec<String>,
}

impl PhaseStats {
    fn error(&mut self, what: String) {
        self.errors += 1;
        if self.first_errors.len() < 5 {
            self.first_errors.push(what);
        }
    }

    fn merge(&mut self, o: PhaseStats) {
        self.sent += o.sent;
        self.received += o.received;
        self.infer_sent += o.infer_sent;
        self.infer_bytes += o.infer_bytes;
        self.actions += o.actions;
        self.action_bytes += o.action_bytes;
        self.reordered += o.reordered;
        self.errors += o.errors;
        for e in o.first_errors {
            if self.first_errors.len() < 5 {
                self.first_errors.push(e);
            }
        }
        self.untimed += o.untimed;
        self.server_ms.extend(o.server_ms);
        self.rtt_ms.extend(o.rtt_ms);
        self.first_server_ms.extend(o.first_server_ms);
        self.first_rtt_ms.extend(o.first_rtt_ms);
        self.late += o.late;
        self.done += o.done;
        self.failed += o.failed;
        self.budget += o.budget;
        self.cut += o.cut;
        self.broken += o.broken;
        self.done_steps += o.done_steps;
        for f in o.failures {
            if self.failures.len() < 5 {
                self.failures.push(f);
            }
        }
    }

    fn count(&mut self, ending: Ending, steps: u64) {
        match ending {
            Ending::Done => {
                self.done += 1;
                self.done_steps += steps;
            }
            Ending::Failed => self.failed += 1,
            Ending::Budget => self.budget += 1,
            Ending::Cut => self.cut += 1,
            Ending::Broken => self.broken += 1,
        }
    }

    /// Every request answered, every answer to its own step, no error.
    pub(crate) fn lossless(&self) -> bool {
        self.sent == self.received && self.reordered == 0 && self.errors == 0
    }

    /// Observations answered per second, all connections together.
    pub(crate) fn messages_per_s(&self) -> f64 {
        self.actions as f64 / self.seconds.max(1e-9)
    }
}

/// Nearest-rank percentile of `v` (`p` in 0..=100); `None` when empty.
pub(crate) fn percentile(v: &[f64], p: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * s.len() as f64).ceil() as usize;
    Some(s[rank.clamp(1, s.len()) - 1])
}

pub struct BridgeBenchReport {
    pub cpu: String,
    pub cores: usize,
    pub load_before: String,
    pub target: String,
    pub rate_hz: f64,
    pub max_steps: u64,
    pub observation: String,
    pub solo: Option<PhaseStats>,
    pub load: PhaseStats,
}

impl BridgeBenchReport {
    pub(crate) fn p99_server_ms(&self) -> Option<f64> {
        percentile(&self.load.server_ms, 99.0)
    }

    /// Both goals met.
    pub fn passed(&self) -> bool {
        self.load.lossless()
            && self.load.untimed == 0
            && self
                .p99_server_ms()
                .is_some_and(|p| p <= GOAL_P99_SERVER_MS)
    }
}

/// One task's observation, rendered once.
pub(crate) struct Fixture {
    pub(crate) task: String,
    pub(crate) instruction: String,
    frame: Frame,
    labels: Labels,
    camera_from_world: Isometry3<f64>,
    model: Arc<RobotModel>,
}

/// The fixture's observation of step 0, the arm at home.
pub(crate) fn first_observation(fixture: &Fixture) -> Observation {
    let home = fixture.model.home().to_vec();
    let world_from_tcp = fixture
        .model
        .fk(&home)
        .unwrap_or_else(|_| Isometry3::identity());
    let finger = fixture.model.config.gripper.open_units;
    let mut qpos = home;
    qpos.extend([finger, finger]);
    Observation {
        step: 0,
        frame: fixture.frame.clone(),
        camera_from_world: fixture.camera_from_world,
        world_from_base: Isometry3::identity(),
        world_from_tcp,
        qpos,
        base_from_target: world_from_tcp,
        labels: Some(fixture.labels.clone()),
    }
}

/// The first observation of every Bridge task (seed 0) from our simulator.
pub(crate) fn fixtures() -> Result<Vec<Fixture>, BridgeBenchError> {
    let scene = |e: &dyn fmt::Display| BridgeBenchError::Scene(e.to_string());
    let mut out = Vec::new();
    for spec in Suite::Bridge.tasks() {
        let episode = spec.instantiate(0).map_err(|e| scene(&e))?;
        let prepared = prepare_episode(&episode).map_err(|e| scene(&e))?;
        let mut camera = SimCamera::new(prepared.world.clone(), Default::default());
        let frame = camera.capture().map_err(|e| scene(&e))?;
        let labels = labels_for(&prepared, &episode, &frame)
            .ok_or_else(|| scene(&"the simulator kept no labels of its frame"))?;
        out.push(Fixture {
            task: episode.task.clone(),
            instruction: episode.instruction.clone(),
            camera_from_world: frame.base_from_camera.inverse(),
            frame,
            labels,
            model: prepared.model.clone(),
        });
    }
    if out.is_empty() {
        return Err(scene(&"the bridge suite has no task"));
    }
    Ok(out)
}

/// Settings every connection of a phase shares.
struct Plan {
    addr: String,
    period: Duration,
    rate_hz: f64,
    max_steps: u64,
    deadline: Instant,
}

/// Runs the benchmark: the peer (one connection) then the load.
pub fn run(args: BridgeBenchArgs) -> Result<BridgeBenchReport, BridgeBenchError> {
    let ok = (1..=256).contains(&args.connections)
        && args.rate_hz.is_finite()
        && args.rate_hz > 0.0
        && args.rate_hz <= 50.0
        && (1.0..=3600.0).contains(&args.seconds)
        && (0.0..=600.0).contains(&args.solo_seconds)
        && args.max_steps >= 2;
    if !ok {
        return Err(BridgeBenchError::Args);
    }
    let load_before = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|t| t.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "-".into());
    let fixtures = Arc::new(fixtures()?);
    let f0 = &fixtures[0];
    let labels_bytes = f0.labels.ids.len() * 4;
    let observation = format!(
        "{}x{} rgb + f32 depth + u32 segmentation ({:.2} MB of pixels), {} tasks",
        f0.frame.rgb.width(),
        f0.frame.rgb.height(),
        (f0.frame.rgb.as_raw().len() + f0.frame.depth.data.len() * 4 + labels_bytes) as f64 / 1e6,
        fixtures.len()
    );

    let (addr, server, target) = match args.target {
        BridgeTarget::External(a) => (a.clone(), None, a),
        BridgeTarget::InProcess(config) => {
            let s = InProcessServer::start(config)?;
            let target = format!(
                "in-process server ws://{}/ (pointer {}, robot {}): a multi-thread runtime (a \
                 worker per core, as `serve bridge`), each episode a task of it (no thread of its own)",
                s.addr, s.pointer, s.robot
            );
            (s.addr.to_string(), Some(s), target)
        }
    };

    let solo = if args.solo_seconds > 0.0 {
        Some(phase(
            &fixtures,
            &addr,
            1,
            args.rate_hz,
            args.solo_seconds,
            args.max_steps,
        ))
    } else {
        None
    };
    let load = phase(
        &fixtures,
        &addr,
        args.connections,
        args.rate_hz,
        args.seconds,
        args.max_steps,
    );
    drop(server);
    Ok(BridgeBenchReport {
        cpu: cpu_model(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        load_before,
        target,
        rate_hz: args.rate_hz,
        max_steps: args.max_steps,
        observation,
        solo,
        load,
    })
}

/// `connections` client threads (each its own current_thread runtime and one connection at a
/// time) for `seconds`.
pub(crate) fn phase(
    fixtures: &Arc<Vec<Fixture>>,
    addr: &str,
    connections: usize,
    rate_hz: f64,
    seconds: f64,
    max_steps: u64,
) -> PhaseStats {
    let period = Duration::from_secs_f64(1.0 / rate_hz);
    let start = Instant::now();
    let plan = Arc::new(Plan {
        addr: addr.to_string(),
        period,
        rate_hz,
        max_steps,
        deadline: start + Duration::from_secs_f64(seconds),
    });
    let threads: Vec<_> = (0..connections)
        .map(|i| {
            let plan = plan.clone();
            let fixtures = fixtures.clone();
            let offset = period.mul_f64(i as f64 / connections as f64);
            std::thread::Builder::new()
                .name(format!("bench-client-{i}"))
                .spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build();
                    let mut stats = PhaseStats::default();
                    match rt {
                        Ok(rt) => rt.block_on(async {
                            tokio::time::sleep(offset).await;
                            client_loop(i, connections, &fixtures, &plan, &mut stats).await
                        }),
                        Err(e) => stats.error(format!("client runtime: {e}")),
                    }
                    stats
                })
        })
        .collect();
    let mut total = PhaseStats::default();
    for t in threads {
        match t {
            Ok(handle) => match handle.join() {
                Ok(s) => total.merge(s),
                Err(_) => total.error("a client thread panicked".into()),
            },
            Err(e) => total.error(format!("cannot start a client thread: {e}")),
        }
    }
    total.connections = connections;
    total.seconds = start.elapsed().as_secs_f64();
    total
}

/// One connection's episodes until the deadline, the tasks in turn.
async fn client_loop(
    index: usize,
    connections: usize,
    fixtures: &[Fixture],
    plan: &Plan,
    stats: &mut PhaseStats,
) {
    let mut n = 0u64;
    while Instant::now() < plan.deadline {
        let fixture = &fixtures[(index + n as usize * connections) % fixtures.len()];
        let episode_id = index as u64 * 1_000_000 + n;
        let (ending, steps) = episode(fixture, episode_id, plan, stats).await;
        stats.count(ending, steps);
        if ending == Ending::Broken {
            // Not a tight loop against a server that refuses.
            tokio::time::sleep(plan.period).await;
        }
        n += 1;
    }
}

/// One episode on a new connection: reset, paced observations until the server terminates, the
/// budget or the deadline, then `episode_end`.
async fn episode(
    fixture: &Fixture,
    episode_id: u64,
    plan: &Plan,
    stats: &mut PhaseStats,
) -> (Ending, u64) {
    let mut client = match BridgeClient::connect(&plan.addr).await {
        Ok(c) => c,
        Err(e) => {
            stats.error(format!("connect: {e}"));
            return (Ending::Broken, 0);
        }
    };
    // A missing answer is a dropped message, not a wait: no answer may take this long.
    client.timeout = Duration::from_secs(30);
    let mode = ControlMode::DeltaEe;
    let start = EpisodeStart {
        task: fixture.task.clone(),
        instruction: fixture.instruction.clone(),
        episode_id,
        control_mode: mode,
        control_freq: plan.rate_hz,
        max_steps: plan.max_steps,
    };
    stats.sent += 1;
    match client.reset(&start).await {
        Ok(()) => stats.received += 1,
        Err(e) => {
            stats.error(format!("reset: {e}"));
            return (Ending::Broken, 0);
        }
    }
    let model = fixture.model.clone();
    let gripper = model.config.gripper;
    let mut ctl = match SimplerController::new(model.clone(), model.home().to_vec()) {
        Ok(c) => c,
        Err(e) => {
            stats.error(format!("controller: {e}"));
            return (Ending::Broken, 0);
        }
    };
    let mut obs = Observation {
        step: 0,
        frame: fixture.frame.clone(),
        camera_from_world: fixture.camera_from_world,
        world_from_base: Isometry3::identity(),
        world_from_tcp: Isometry3::identity(),
        qpos: Vec::new(),
        base_from_target: Isometry3::identity(),
        labels: Some(fixture.labels.clone()),
    };
    let (lo, hi) = (
        gripper.closed_units.min(gripper.open_units),
        gripper.closed_units.max(gripper.open_units),
    );
    let mut ending = Ending::Budget;
    let mut steps = 0;
    let mut due = Instant::now();
    while steps < plan.max_steps {
        if Instant::now() >= plan.deadline {
            ending = Ending::Cut;
            break;
        }
        // Our simulator's world frame is the robot base, as in `eval bridge`.
        obs.step = steps;
        obs.world_from_tcp = match model.fk(ctl.q()) {
            Ok(p) => p,
            Err(e) => {
                stats.error(format!("fk: {e}"));
                ending = Ending::Broken;
                break;
            }
        };
        let finger = ctl.finger().clamp(lo, hi).max(OBJECT_FINGER_M.min(hi));
        obs.qpos.clear();
        obs.qpos.extend_from_slice(ctl.q());
        obs.qpos.extend([finger, finger]);
        obs.base_from_target = *ctl.target();
        // Encode without copying the images: the observation moves into the message and back.
        let msg = ClientMessage::Infer(Box::new(obs));
        let encoded = encode_client(&msg);
        let ClientMessage::Infer(back) = msg else {
            unreachable!("built as infer")
        };
        obs = *back;
        let frame = match encoded {
            Ok(f) => f,
            Err(e) => {
                stats.error(format!("encode: {e}"));
                ending = Ending::Broken;
                break;
            }
        };
        // Encoded ahead, sent on time.
        tokio::time::sleep_until(due.into()).await;
        let sent_at = Instant::now();
        if sent_at > due + Duration::from_millis(2) {
            stats.late += 1;
        }
        due = sent_at + plan.period;
        stats.sent += 1;
        stats.infer_sent += 1;
        stats.infer_bytes += frame.len() as u64;
        let answer = client.request_encoded(frame, "infer").await;
        let rtt = sent_at.elapsed().as_secs_f64() * 1e3;
        let action = match answer {
            Ok(ServerMessage::Action(a)) => a,
            Ok(other) => {
                stats.received += 1;
                stats.error(format!("step {steps}: expected an action, got {other:?}"));
                ending = Ending::Broken;
                break;
            }
            Err(e) => {
                stats.error(format!("step {steps}: {e}"));
                ending = Ending::Broken;
                break;
            }
        };
        stats.received += 1;
        stats.actions += 1;
        stats.action_bytes += client.last_reply_bytes() as u64;
        if action.step != steps {
            stats.reordered += 1;
        }
        match client.last_server_ms() {
            Some(ms) if steps == 0 => {
                stats.first_server_ms.push(ms);
                stats.first_rtt_ms.push(rtt);
            }
            Some(ms) => {
                stats.server_ms.push(ms);
                stats.rtt_ms.push(rtt);
            }
            None => stats.untimed += 1,
        }
        if let Err(e) = ctl.apply(mode, &action.values) {
            stats.error(format!("step {steps}: {e}"));
            ending = Ending::Broken;
            break;
        }
        steps += 1;
        if action.terminate {
            ending = match action.status {
                PolicyStatus::Done => Ending::Done,
                _ => {
                    if stats.failures.len() < 5 {
                        stats.failures.push(format!(
                            "{} #{episode_id} step {}: {}",
                            fixture.task, action.step, action.detail
                        ));
                    }
                    Ending::Failed
                }
            };
            break;
        }
    }
    if ending != Ending::Broken {
        // The kinematic evaluator judges nothing: it reports no success.
        stats.sent += 1;
        match client.end(false, steps).await {
            Ok(()) => stats.received += 1,
            Err(e) => {
                stats.error(format!("episode_end: {e}"));
                ending = Ending::Broken;
            }
        }
    }
    (ending, steps)
}

/// The server on its own thread and a multi-thread runtime (as `serve bridge`); dropping it stops
/// the server.
pub(crate) struct InProcessServer {
    pub(crate) addr: std::net::SocketAddr,
    pub(crate) pointer: String,
    pub(crate) robot: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl InProcessServer {
    pub(crate) fn start(config: SessionConfig) -> Result<Self, BridgeBenchError> {
        // The allocator as `serve bridge` sets it.
        pointact_apps::bridge::return_large_blocks_to_the_system();
        let err = |e: &dyn fmt::Display| BridgeBenchError::Server(e.to_string());
        let pointer = config.pointer.name().to_string();
        let robot = config.model.name().to_string();
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("bench-bridge-server".into())
            .spawn(move || {
                // As `serve bridge` runs it: a worker per core.
                let rt = match tokio::runtime::Builder::new_multi_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = addr_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                rt.block_on(async move {
                    let server = match BridgeServer::bind("127.0.0.1:0", config).await {
                        Ok(s) => s,
                        Err(e) => {
                            let _ = addr_tx.send(Err(e.to_string()));
                            return;
                        }
                    };
                    let _ = addr_tx.send(server.local_addr().map_err(|e| e.to_string()));
                    let _ = server
                        .serve(async {
                            let _ = stopped.await;
                        })
                        .await;
                });
            })
            .map_err(|e| err(&e))?;
        let addr = addr_rx
            .recv()
            .map_err(|_| err(&"the server thread ended before binding"))?
            .map_err(|e| err(&e))?;
        Ok(InProcessServer {
            addr,
            pointer,
            robot,
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for InProcessServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn ms(v: Option<f64>) -> String {
    v.map_or("-".into(), |x| format!("{x:.2}"))
}

fn row(f: &mut fmt::Formatter<'_>, name: &str, v: &[f64]) -> fmt::Result {
    writeln!(
        f,
        "  {:<34} {:>7} {:>8} {:>8} {:>8} {:>8}",
        name,
        v.len(),
        ms(percentile(v, 50.0)),
        ms(percentile(v, 90.0)),
        ms(percentile(v, 99.0)),
        ms(percentile(v, 100.0)),
    )
}

fn phase_block(f: &mut fmt::Formatter<'_>, title: &str, s: &PhaseStats) -> fmt::Result {
    writeln!(
        f,
        "{title}: {} connection{} for {:.1} s",
        s.connections,
        if s.connections == 1 { "" } else { "s" },
        s.seconds
    )?;
    writeln!(
        f,
        "  {:<34} {:>7} {:>8} {:>8} {:>8} {:>8}",
        "latency (ms)", "n", "p50", "p90", "p99", "max"
    )?;
    row(f, "server_ms, steps >= 1", &s.server_ms)?;
    row(f, "client round trip, steps >= 1", &s.rtt_ms)?;
    row(f, "server_ms, step 0 (pointer+plan)", &s.first_server_ms)?;
    row(f, "client round trip, step 0", &s.first_rtt_ms)?;
    let per = |b: u64, n: u64| if n > 0 { b as f64 / n as f64 } else { 0.0 };
    writeln!(
        f,
        "  messages     {:.1} observations/s answered; {} requests sent, {} answered, {} reordered, \
         {} errors, {} actions without server_ms, {} sent late (> 2 ms behind the period)",
        s.messages_per_s(),
        s.sent,
        s.received,
        s.reordered,
        s.errors,
        s.untimed,
        s.late
    )?;
    writeln!(
        f,
        "  bytes        {:.0} per observation, {:.0} per action",
        per(s.infer_bytes, s.infer_sent),
        per(s.action_bytes, s.actions)
    )?;
    writeln!(
        f,
        "  episodes     {} done (mean {:.1} steps), {} failed, {} out of budget, {} cut by the \
         end of the run, {} broken",
        s.done,
        per(s.done_steps, s.done),
        s.failed,
        s.budget,
        s.cut,
        s.broken
    )?;
    for e in &s.first_errors {
        writeln!(f, "  error        {e}")?;
    }
    for e in &s.failures {
        writeln!(f, "  failed       {e}")?;
    }
    Ok(())
}

impl fmt::Display for BridgeBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let l = &self.load;
        writeln!(
            f,
            "bench bridge  {} connections at {} Hz for {:.0} s on loopback, budget {} steps per \
             episode",
            l.connections, self.rate_hz, l.seconds, self.max_steps
        )?;
        writeln!(
            f,
            "cpu           {} ({} cores available; 1-min load average {} before the run)",
            self.cpu, self.cores, self.load_before
        )?;
        writeln!(f, "server        {}", self.target)?;
        writeln!(
            f,
            "clients       {} threads, one current_thread runtime and one connection at a time \
             each; kinematic evaluator (SimplerController), frame rendered once per task",
            l.connections
        )?;
        writeln!(f, "observation   {}", self.observation)?;
        if let Some(s) = &self.solo {
            phase_block(f, "peer", s)?;
        }
        phase_block(f, "load", l)?;
        if let Some(s) = &self.solo {
            let ratio = |a: &[f64], b: &[f64], p| match (percentile(a, p), percentile(b, p)) {
                (Some(x), Some(y)) if y > 0.0 => format!("{:.2}x", x / y),
                _ => "-".into(),
            };
            writeln!(
                f,
                "load / peer   server_ms p50 {}, p99 {}; round trip p50 {}, p99 {}",
                ratio(&l.server_ms, &s.server_ms, 50.0),
                ratio(&l.server_ms, &s.server_ms, 99.0),
                ratio(&l.rtt_ms, &s.rtt_ms, 50.0),
                ratio(&l.rtt_ms, &s.rtt_ms, 99.0),
            )?;
        }
        let pass = |b| if b { "PASS" } else { "FAIL" };
        writeln!(
            f,
            "{}  no dropped or reordered message ({} of {} requests answered, {} reordered, {} \
             errors)",
            pass(l.lossless()),
            l.received,
            l.sent,
            l.reordered,
            l.errors
        )?;
        write!(
            f,
            "{}  p99 server latency, pointer excluded: {} ms (goal <= {GOAL_P99_SERVER_MS} ms)",
            pass(
                l.untimed == 0
                    && self
                        .p99_server_ms()
                        .is_some_and(|p| p <= GOAL_P99_SERVER_MS)
            ),
            ms(self.p99_server_ms())
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_is_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), Some(50.0));
        assert_eq!(percentile(&v, 99.0), Some(99.0));
        assert_eq!(percentile(&v, 100.0), Some(100.0));
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&[], 50.0), None);
    }
}
