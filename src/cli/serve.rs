//! `pointact serve bridge`: the policy server SimplerEnv's runner (`sim/simplerenv/run.py`), the
//! stock openpi client and `pointact eval bridge` connect to. `pointact serve rewards`: the
//! released rewards over HTTP for Python trainers (`python/pointact_rewards.py`).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use pointact::bridge::{BridgeServer, ServerLimits, SessionConfig};
use pointact::executor::Branch;
use pointact::kinematics::RobotModel;
use pointact::pointing::{ModelOptions, PointerKind};
use pointact::runner::pointer::SessionPointer;
use pointact::safety::SafetyConfig;
use pointact::sim::oracle::OracleOptions;

use super::{announce_model, server_runtime};

#[derive(Subcommand)]
pub enum ServeCommand {
    /// WebSocket + msgpack policy server (openpi encoding): one episode per connection.
    Bridge(Box<ServeBridgeCli>),
    /// Batch reward service: POST /score with {"items": [{"response", "ground_truth"}, ...]}
    /// answers the released Embodied-R1 score dicts in order (python/pointact_rewards.py calls it
    /// from verl or EasyR1).
    Rewards(ServeRewardsCli),
}

#[derive(Args)]
pub struct ServeRewardsCli {
    /// Address to listen on (port 0: any free port; the address is printed). 0.0.0.0 serves the
    /// other nodes of a Ray cluster.
    #[arg(long, default_value = "127.0.0.1:8765")]
    addr: String,
    /// Largest request body (MiB); a larger declared Content-Length is answered 413 at once.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=4096))]
    max_body_mib: u64,
    /// Request bodies held at once over all connections (MiB); a request past it gets 503.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..=65536))]
    max_bodies_mib: u64,
    /// Most items in one request.
    #[arg(long, default_value_t = 65_536, value_parser = clap::value_parser!(u64).range(1..))]
    max_items: u64,
    /// Most point-in-polygon edge tests (predicted points times polygon vertices) one item may
    /// need; an item over it is answered with an error in place.
    #[arg(long, default_value_t = 4_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    max_polygon_tests: u64,
    /// Most point-in-polygon edge tests all items of one request may need together (about 15 s
    /// of one core by default); a request over it is refused whole with 413 before scoring.
    #[arg(long, default_value_t = 256_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    max_batch_polygon_tests: u64,
    /// Connections served at once; one more is closed as soon as it arrives.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    max_connections: u64,
    /// Seconds a request's headers may take, counted from the connection's previous request
    /// (an idle kept-alive connection is closed after it).
    #[arg(long, default_value_t = 30.0, value_parser = super::values::timeout_seconds)]
    header_timeout_s: f64,
    /// Seconds a request's body may take after its headers (408 after that).
    #[arg(long, default_value_t = 60.0, value_parser = super::values::timeout_seconds)]
    body_timeout_s: f64,
}

#[derive(Args)]
pub struct ServeBridgeCli {
    /// Address to listen on (port 0: any free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:8000")]
    addr: String,
    /// Pointing backend: oracle (from the segmentation and object list the evaluator sends),
    /// qwen (local model, --model DIR; one model shared by all connections) or openai.
    #[arg(long, value_enum, default_value = "oracle")]
    pointer: PointerKind,
    #[command(flatten)]
    model: ModelOptions,
    /// The evaluator's arm: a built-in robot (widowx250 is SimplerEnv's WidowX) or a robot folder.
    #[arg(long, default_value = "widowx250")]
    robot: String,
    /// Executor branch: p (affordance) or v (visual trace).
    #[arg(long, default_value = "p")]
    branch: Branch,
    /// Table top height in the robot-base frame (m), as measured in the evaluator's scene: the
    /// table the observations' depth shows must agree within 3 cm, or the episode stops before any
    /// action. Default: the table the depth shows (SimplerEnv's WidowX stands on its table, z = 0).
    #[arg(long, allow_hyphen_values = true, value_parser = super::values::table_z)]
    table_z: Option<f64>,
    /// Gaussian pixel noise of the oracle pointer (px, finite, >= 0), drawn per episode from
    /// --seed, the task and the episode id.
    #[arg(long, default_value_t = 0.0, value_parser = super::values::non_negative)]
    noise_px: f64,
    /// Seed of the oracle's noise.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Connections served at once; one more is closed as soon as it arrives.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    max_connections: u64,
    /// Seconds a client has to finish the WebSocket handshake.
    #[arg(long, default_value_t = 10.0, value_parser = super::values::timeout_seconds)]
    handshake_timeout_s: f64,
    /// Seconds a connection may go without completing a frame before it is closed.
    #[arg(long, default_value_t = 300.0, value_parser = super::values::timeout_seconds)]
    idle_timeout_s: f64,
    /// Unfinished frames held at once over all connections (MiB); a connection that reads past
    /// it is closed with 1013 (try again later).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(128..=65536))]
    max_unfinished_mib: u64,
}

pub fn run(which: ServeCommand) -> Result<ExitCode> {
    match which {
        ServeCommand::Bridge(a) => bridge(*a),
        ServeCommand::Rewards(a) => rewards(a),
    }
}

fn rewards(a: ServeRewardsCli) -> Result<ExitCode> {
    use pointact::train::service::{RewardService, ServiceConfig};
    let config = ServiceConfig {
        max_body_bytes: (a.max_body_mib as usize) << 20,
        max_bodies_bytes: (a.max_bodies_mib as usize) << 20,
        max_items: a.max_items as usize,
        max_polygon_tests: a.max_polygon_tests,
        max_batch_polygon_tests: a.max_batch_polygon_tests,
        max_connections: a.max_connections as usize,
        header_timeout: Duration::from_secs_f64(a.header_timeout_s),
        body_timeout: Duration::from_secs_f64(a.body_timeout_s),
    };
    let rt = server_runtime()?;
    rt.block_on(async {
        let service = RewardService::bind(&a.addr, config)
            .await
            .with_context(|| format!("cannot listen on {}", a.addr))?;
        let addr = service.local_addr()?;
        println!("listening http://{addr}/score (Embodied-R1 rewards as released; GET /health)");
        service.serve(until_ctrl_c()).await?;
        println!("stopped");
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// The session settings `serve bridge` and `eval bridge` share.
pub fn session_config(
    pointer: SessionPointer,
    robot: &str,
    branch: Branch,
    table_z: Option<f64>,
) -> Result<SessionConfig> {
    let model = Arc::new(RobotModel::resolve(robot).with_context(|| format!("robot {robot:?}"))?);
    let mut config = SessionConfig::new(pointer, model);
    config.branch = branch;
    config.safety = SafetyConfig {
        table_z: table_z.unwrap_or(0.0),
        table_stated: table_z.is_some(),
        ..SafetyConfig::default()
    };
    Ok(config)
}

fn bridge(a: ServeBridgeCli) -> Result<ExitCode> {
    pointact::bridge::return_large_blocks_to_the_system();
    announce_model(a.pointer, &a.model);
    if a.noise_px > 0.0 && a.pointer != PointerKind::Oracle {
        anyhow::bail!(
            "--noise-px applies to the oracle pointer only (this server uses {})",
            a.pointer.as_str()
        );
    }
    let oracle = OracleOptions {
        noise_px: a.noise_px,
        seed: a.seed,
        ..OracleOptions::default()
    };
    let pointer = SessionPointer::open(a.pointer, &a.model, oracle)?;
    let config = session_config(pointer, &a.robot, a.branch, a.table_z)?;
    let rt = server_runtime()?;
    rt.block_on(async {
        let server = BridgeServer::bind(&a.addr, config)
            .await
            .with_context(|| format!("cannot listen on {}", a.addr))?
            .with_limits(ServerLimits {
                max_connections: a.max_connections as usize,
                handshake_timeout: Duration::from_secs_f64(a.handshake_timeout_s),
                idle_timeout: Duration::from_secs_f64(a.idle_timeout_s),
                max_unfinished_bytes: (a.max_unfinished_mib as usize) << 20,
            });
        let addr = server.local_addr()?;
        let noise = if a.noise_px > 0.0 {
            format!(", noise {} px, seed {}", a.noise_px, a.seed)
        } else {
            String::new()
        };
        println!(
            "listening ws://{addr}/ (pointer {}{noise}, robot {}, branch {})",
            a.pointer.as_str(),
            a.robot,
            match a.branch {
                Branch::Affordance => "p",
                Branch::Trace => "v",
            }
        );
        server.serve(until_ctrl_c()).await?;
        println!("stopped");
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Says how to stop a server (the lines before it reach a piped reader at once) and completes on
/// Ctrl-C: the shutdown future both servers take.
fn until_ctrl_c() -> impl std::future::Future<Output = ()> {
    use std::io::Write;
    println!("Ctrl-C stops the server");
    let _ = std::io::stdout().flush();
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}
