//! `pointact bench …`: the subcommands and their arguments. They live here, not in the binary, so
//! the benchmarks' modules stay private: the binary hands over the parsed command and the crate
//! prints the report.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, Subcommand};

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Our IK solver vs k::JacobianIkSolver (and pytracik when installed) on the same random poses.
    Ik(IkBenchCli),
    /// Depth image -> base-frame point cloud, vs numpy doing the same vectorised math.
    Cloud(CloudBenchCli),
    /// Simulator camera frames per second on one thread, vs the same renderer without culling.
    Render(RenderBenchCli),
    /// Qwen2.5-VL-3B on candle vs PyTorch transformers, full size, same random weights; the text
    /// decoder also vs llama.cpp on GGUFs of those weights, and against the memory-bandwidth limit.
    Vlm(VlmBenchCli),
    /// One Q4K prefill product at a time (the 3B's four shapes): our tiles vs candle's repacked
    /// tiles as prefill used them vs the f32 gemm on the dequantized weight; the results are
    /// checked against each other. Seconds, where `bench vlm` takes minutes.
    Qgemm(QgemmBenchCli),
    /// A checked trajectory streamed through XarmRobot to the xArm emulator (servo mode): achieved
    /// rate and period jitter, vs the same servo loop with a sink that does nothing.
    Servo(ServoBenchCli),
    /// Load on the bridge server: N evaluator connections at 5 Hz on loopback (kinematic
    /// evaluators, one rendered frame per task); server latency and lost or reordered messages,
    /// vs one connection alone.
    Bridge(BridgeBenchCli),
    /// A process that stays up, loaded for a long time on loopback: serve bridge (16 evaluators
    /// at 5 Hz and a hostile client), serve rewards (10^6 items, bad ones among them) or the
    /// xArm servo loop (250 Hz); errors, resident memory, descriptors, threads and the latency p99
    /// per window.
    Soak(SoakBenchCli),
    /// Collision-aware planning on >= 200 fixed xArm 6 tabletop problems (boxes, shelf, wall,
    /// clutter from a simulated depth cloud), vs OMPL's RRTConnect (Python bindings) with the same
    /// collision model behind its validity callback.
    Plan(PlanBenchCli),
    /// Embodied-R1's rewards: our port (train::rewards) vs the released Python function on the
    /// same batch, one thread each (--reference names the released embodiedr1.py).
    Rewards(RewardsBenchCli),
    /// GRPO steps/s and tokens/s of our trainer vs TRL's GRPOTrainer on the same tiny
    /// Qwen2.5-VL, image prompts, group size, completion length and CPU threads (TRL is installed
    /// into ~/.cache/pointact/grpo-peer from PyPI by benches/grpo_peer/setup.sh on first use).
    Grpo(GrpoBenchCli),
    /// One configuration of `bench vlm`, run by it in a child process (internal).
    #[command(name = "vlm-worker", hide = true)]
    VlmWorker(VlmWorkerCli),
}

#[derive(Args)]
pub struct IkBenchCli {
    /// Built-in robot name (xarm6, widowx250) or a folder holding robot.toml + URDF.
    #[arg(long, default_value = "xarm6")]
    robot: String,
    /// Number of random reachable poses.
    #[arg(long, default_value_t = 5000)]
    n: usize,
    /// Seed of the random joint vectors (same poses for every solver).
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Skip the Python peer (pytracik) even when it is installed.
    #[arg(long)]
    no_python: bool,
}

#[derive(Args)]
pub struct CloudBenchCli {
    /// Timed repetitions per implementation.
    #[arg(long, default_value_t = 50)]
    iters: usize,
    /// Python interpreter with numpy for the peer measurement.
    #[arg(long, default_value = "python3")]
    python: String,
}

#[derive(Args)]
pub struct QgemmBenchCli {
    /// Activation rows (prompt tokens; `bench vlm`'s prompt has 545).
    #[arg(long, default_value_t = 545, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    rows: u64,
    /// Timed repetitions of each side; the best counts.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=1000))]
    reps: u64,
}

#[derive(Args)]
pub struct RenderBenchCli {
    /// Frames timed for our renderer (the brute-force peer times a fifth of them).
    #[arg(long, default_value_t = 30)]
    frames: usize,
}

#[derive(Args)]
pub struct ServoBenchCli {
    /// Built-in robot name (xarm6) or a folder holding robot.toml, URDF and driver.toml.
    #[arg(long, default_value = "xarm6")]
    robot: String,
    /// Setpoints per second (the controller takes up to 250).
    #[arg(long, default_value_t = 250.0)]
    rate_hz: f64,
    /// Length of the streamed trajectory (s), at least the ~1.8 s it takes at the joint limits.
    #[arg(long, default_value_t = 4.0)]
    seconds: f64,
    /// Command port of a running `pointact emulate xarm` (or controller) to stream to; without
    /// it an emulator is started in this process.
    #[arg(long)]
    port: Option<u16>,
    /// Its address.
    #[arg(long, default_value = "127.0.0.1")]
    address: String,
    /// Its rich report port.
    #[arg(long, default_value_t = 30002)]
    report_port: u16,
    /// Its real-time report port.
    #[arg(long, default_value_t = 30000)]
    rt_port: u16,
}

#[derive(Args)]
pub struct PlanBenchCli {
    /// Problems per scene family (4 families).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub per_family: u64,
    /// Seed of the problem set (the default is the published set).
    #[arg(long, default_value_t = 14)]
    pub seed: u64,
    /// Time budget per problem for both planners (s).
    #[arg(long, default_value_t = 5.0, value_parser = pointact_apps::values::non_negative)]
    pub time_limit: f64,
    /// Skip OMPL (which the first run installs into ~/.cache/pointact/planpy from PyPI).
    #[arg(long)]
    pub no_peer: bool,
    /// Where the exported problems and OMPL's answers go.
    #[arg(long, default_value = "target/bench-plan")]
    pub out: std::path::PathBuf,
}

#[derive(Args)]
pub struct RewardsBenchCli {
    /// Items in the batch.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub items: u64,
    /// Seed of the batch.
    #[arg(long, default_value_t = 16)]
    pub seed: u64,
    /// The released verl/utils/reward_score/embodiedr1.py (github.com/pickxiguapi/Embodied-R1 at
    /// e599e95); without it only ours is timed.
    #[arg(long)]
    pub reference: Option<std::path::PathBuf>,
    /// The Python that imports it, with its packages (tests/fixtures/gen_rewards_golden.py lists
    /// the pins).
    #[arg(long, default_value = "python3")]
    pub python: String,
    /// Each side scores whole rounds of the batch for at least this long (s).
    #[arg(long, default_value_t = 3.0, value_parser = pointact_apps::values::non_negative)]
    pub min_seconds: f64,
    /// Where the batch is written for the Python side.
    #[arg(long, default_value = "target/bench-rewards")]
    pub out: std::path::PathBuf,
}

#[derive(Args)]
pub struct GrpoBenchCli {
    /// Model folder both trainers load (default: the tiny fixture tests/fixtures/qwen25vl_tiny).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Image of every prompt (default: the fixture's image.png).
    #[arg(long)]
    pub image: Option<PathBuf>,
    /// Timed steps per side (after one untimed warm-up step).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub steps: u64,
    /// Prompts per step.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub batch: u64,
    /// Completions per prompt (GRPO's group size).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(2..=4096))]
    pub group: u64,
    /// Tokens of every completion, exactly (no stop token on either side).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=65_536))]
    pub max_new_tokens: u64,
    /// CPU threads of both sides; comma-separated to measure several (e.g. 1,2).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub threads: Vec<usize>,
    /// Pixel budget of the image processor on both sides (112x84: 12 image tokens).
    #[arg(long, default_value_t = 112 * 84)]
    pub max_pixels: u64,
    /// Learning rate (AdamW, constant).
    #[arg(long, default_value_t = 1e-5, value_parser = pointact_apps::values::non_negative)]
    pub lr: f64,
    /// KL coefficient to the frozen start model (k3 estimator); 0 = off, no reference model.
    #[arg(long, default_value_t = 0.0, value_parser = pointact_apps::values::non_negative)]
    pub beta: f64,
    /// Seed of the sampling.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Python of the TRL peer's venv (default: benches/grpo_peer/setup.sh makes it under
    /// ~/.cache/pointact/grpo-peer and installs the pinned trl, transformers and torch).
    #[arg(long)]
    pub python: Option<String>,
    /// Measure ours only.
    #[arg(long)]
    pub no_python: bool,
    /// Internal: run our side on this request.json and print its measurement.
    #[arg(long, hide = true)]
    pub worker: Option<PathBuf>,
}

#[derive(Args)]
pub struct BridgeBenchCli {
    /// Evaluator connections at once.
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// Observations per second on each connection (SimplerEnv's Bridge tasks: 5).
    #[arg(long, default_value_t = 5.0)]
    rate_hz: f64,
    /// Length of the load (s).
    #[arg(long, default_value_t = 120.0)]
    seconds: f64,
    /// Step budget per episode.
    #[arg(long, default_value_t = 120)]
    max_steps: u64,
    /// Length of the one-connection peer run before the load (s; 0 skips it).
    #[arg(long, default_value_t = 10.0)]
    solo_seconds: f64,
    /// A running `pointact serve bridge` (oracle pointer, widowx250) to load instead of one
    /// started in this process (`ws://HOST:PORT` or `HOST:PORT`).
    #[arg(long)]
    server: Option<String>,
}

#[derive(Args)]
pub struct SoakBenchCli {
    /// What to soak: bridge, rewards, servo or xarm-tasks.
    #[arg(long, value_enum)]
    target: crate::soak::SoakTarget,
    /// Length of the run (min); rewards ends at --items and xarm-tasks at --tasks if that comes
    /// first.
    #[arg(long, default_value_t = 60.0)]
    minutes: f64,
    /// Windows the run is cut into; the first is the warm-up the others are compared with.
    #[arg(long, default_value_t = 6)]
    windows: usize,
    /// rewards: items to score in all.
    #[arg(long, default_value_t = 1_000_000)]
    items: u64,
    /// xarm-tasks: `pointact run --xarm` processes, one after another.
    #[arg(long, default_value_t = 200)]
    tasks: u64,
    /// bridge: evaluator connections at once.
    #[arg(long, default_value_t = 16)]
    connections: usize,
}

#[derive(Args)]
pub struct VlmBenchCli {
    /// Threads on both sides (default: all available).
    #[arg(long)]
    threads: Option<usize>,
    /// New tokens per run; the first comes from prefill, the rest are timed as decode.
    #[arg(long, default_value_t = 32)]
    decode_tokens: usize,
    /// Our configurations, comma-separated: f32, q8_0, q4k.
    #[arg(long, value_delimiter = ',', default_value = "f32,q4k")]
    quant: Vec<pointact_vlm::Quant>,
    /// Where our side runs: cpu, cuda or cuda:N (a `cuda` build; f32 only, so pass --quant f32).
    /// The peers run on the CPU.
    #[arg(long, default_value = "cpu")]
    device: pointact_vlm::DeviceSpec,
    /// The vision tower's linears in our quantized columns (as `--vision-quant` of the pointing
    /// commands): f32, q8_0 or q4k. The f32 column and transformers stay f32.
    #[arg(long, default_value = "f32")]
    vision_quant: pointact_vlm::Quant,
    /// Checkpoint folder (generated once, reused while seed and config match);
    /// default ~/.cache/pointact/bench-vlm-3b (…-L<N> with --layers).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Python interpreter for the transformers peer (it installs a venv when torch is missing).
    #[arg(long, default_value = "python3")]
    python: String,
    /// Cut both towers to N layers for quick runs (default: full size, 36 text / 32 vision).
    #[arg(long)]
    layers: Option<usize>,
    /// Input image size, WIDTHxHEIGHT.
    #[arg(long, default_value = "640x480", value_parser = crate::vlm::parse_size)]
    image: (u32, u32),
    /// Measure our side only (no transformers).
    #[arg(long)]
    skip_peer: bool,
    /// On a non-Intel CPU, run transformers' MKL on its Intel code path (a one-function shim,
    /// compiled with `cc` and preloaded, answers MKL's vendor check): MKL picks its sgemm by CPU
    /// vendor, so on AMD it runs AVX2 code even where the CPU has AVX-512; this is the peer an
    /// Intel CPU with the same vector units would give.
    #[arg(long)]
    peer_mkl_intel: bool,
    /// Also time the questions of one affordance-branch task about the frame (REG, RRG, REG for
    /// the default task), each asked cold and then reusing the frame's vision rows and prompt
    /// keys/values, and the time from the frame to the first reply.
    #[arg(long)]
    task: bool,
    /// llama.cpp formats, comma-separated (default: the quantized ones among --quant): GGUFs of
    /// the same weights with our types per tensor, written next to the checkpoint; node-llama-cpp
    /// 3.21.1 is installed into ~/.cache/pointact/llama-peer from npm on first use (needs node >= 20).
    #[arg(long, value_delimiter = ',')]
    llama: Option<Vec<pointact_vlm::Quant>>,
    /// No llama.cpp columns.
    #[arg(long)]
    skip_llama: bool,
    /// Print the report as JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Seed of the random weights.
    #[arg(long, default_value_t = crate::vlm::checkpoint::DEFAULT_SEED)]
    seed: u64,
    /// Quantize at every load instead of using the quantized weights cached in the checkpoint
    /// folder (the first quantized run writes them; later runs time loading them).
    #[arg(long)]
    no_quant_cache: bool,
    /// Rounds of transformers' f32 load and ours, alternated (load only), after the runs, when
    /// both f32 sides ran: the load row shows each side's best. Both loads are mostly the kernel
    /// zeroing fresh pages, which on a VM depends on what ran just before. 0: one load each.
    #[arg(long, default_value_t = 2)]
    load_rounds: usize,
}

#[derive(Args)]
pub struct VlmWorkerCli {
    /// request.json written by `bench vlm`.
    #[arg(long)]
    request: PathBuf,
    #[arg(long)]
    quant: pointact_vlm::Quant,
    #[arg(long, default_value = "f32")]
    vision_quant: pointact_vlm::Quant,
    #[arg(long, default_value = "cpu")]
    device: pointact_vlm::DeviceSpec,
    #[arg(long)]
    no_quant_cache: bool,
}

/// Runs one benchmark and prints its report; the exit code says whether it passed (the bridge's
/// load test fails on lost or reordered messages).
pub fn run(which: BenchCommand) -> Result<ExitCode> {
    match which {
        BenchCommand::Ik(a) => {
            let report = crate::ik::run(&crate::ik::IkBenchArgs {
                robot: a.robot,
                n: a.n,
                seed: a.seed,
                python_peer: !a.no_python,
            })?;
            println!("{report}");
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Cloud(a) => {
            let report = crate::cloud::run(&crate::cloud::CloudBenchArgs {
                iters: a.iters,
                python: a.python,
            })?;
            println!("{report}");
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Render(a) => {
            let report = crate::render::run(&crate::render::RenderBenchArgs { frames: a.frames })?;
            println!("{report}");
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Vlm(a) => bench_vlm(a),
        BenchCommand::Qgemm(a) => {
            use crate::qgemm;
            let report = qgemm::run(&qgemm::QgemmBenchArgs {
                rows: a.rows as usize,
                shapes: qgemm::SHAPES_3B.to_vec(),
                reps: a.reps as usize,
            })?;
            println!("{report}");
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Servo(a) => {
            use crate::servo;
            let args = servo::ServoBenchArgs {
                robot: a.robot,
                rate_hz: a.rate_hz,
                seconds: a.seconds,
                target: a.port.map(|p| (a.address, p, a.report_port, a.rt_port)),
            };
            let report = current_thread()?.block_on(servo::run(&args))?;
            println!("{report}");
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Bridge(a) => bench_bridge(a),
        BenchCommand::Soak(a) => bench_soak(a),
        BenchCommand::Plan(a) => {
            let report = crate::plan::run(&crate::plan::PlanBenchArgs {
                per_family: a.per_family as usize,
                seed: a.seed,
                time_limit_s: a.time_limit.max(0.01),
                peer: !a.no_peer,
                out_dir: a.out,
            })
            .map_err(anyhow::Error::msg)?;
            println!("{report}");
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Rewards(a) => {
            use crate::rewards::{run, RewardsBenchArgs};
            let report = run(&RewardsBenchArgs {
                items: a.items as usize,
                seed: a.seed,
                reference: a.reference,
                python: a.python,
                min_seconds: a.min_seconds.max(0.1),
                out_dir: a.out,
            })?;
            println!("{report}");
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Grpo(a) => bench_grpo(a),
        BenchCommand::VlmWorker(a) => {
            let m = crate::vlm::worker::run(
                &a.request,
                (a.quant, a.vision_quant),
                a.device,
                a.no_quant_cache,
            )?;
            println!("{}", serde_json::to_string(&m)?);
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn bench_grpo(a: GrpoBenchCli) -> Result<ExitCode> {
    use crate::grpo;
    if let Some(request) = a.worker {
        let m = grpo::worker(&request)?;
        println!("{}", serde_json::to_string(&m)?);
        return Ok(ExitCode::SUCCESS);
    }
    let model = a.model.unwrap_or_else(grpo::default_model);
    let image = a
        .image
        .unwrap_or_else(|| grpo::default_model().join("image.png"));
    let report = grpo::run(&grpo::GrpoBenchArgs {
        model,
        image,
        steps: a.steps as usize,
        batch: a.batch as usize,
        group: a.group as usize,
        max_new_tokens: a.max_new_tokens as usize,
        threads: a.threads,
        max_pixels: a.max_pixels,
        lr: a.lr,
        beta: a.beta,
        seed: a.seed,
        python: a.python,
        peer: !a.no_python,
    })?;
    println!("{report}");
    Ok(ExitCode::SUCCESS)
}

fn bench_bridge(a: BridgeBenchCli) -> Result<ExitCode> {
    use crate::bridge::{self, BridgeTarget};

    let target = match a.server {
        Some(addr) => BridgeTarget::External(addr),
        None => BridgeTarget::InProcess(default_bridge_config()?),
    };
    let report = bridge::run(bridge::BridgeBenchArgs {
        target,
        connections: a.connections,
        rate_hz: a.rate_hz,
        seconds: a.seconds,
        max_steps: a.max_steps,
        solo_seconds: a.solo_seconds,
    })?;
    println!("{report}");
    Ok(verdict(report.passed()))
}

/// A bench with goals exits 0 when it met them.
fn verdict(passed: bool) -> ExitCode {
    if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `serve bridge`'s defaults: the WidowX of SimplerEnv's Bridge tasks, the oracle pointer, the
/// affordance branch, the default gate.
fn default_bridge_config() -> Result<pointact_apps::bridge::SessionConfig> {
    Ok(pointact_apps::bridge::SessionConfig::new(
        pointact_apps::runner::pointer::SessionPointer::Oracle(
            pointact_sim::oracle::OracleOptions::default(),
        ),
        std::sync::Arc::new(pointact_core::kinematics::RobotModel::resolve("widowx250")?),
    ))
}

fn bench_soak(a: SoakBenchCli) -> Result<ExitCode> {
    let report = crate::soak::run(crate::soak::SoakArgs {
        target: a.target,
        minutes: a.minutes,
        windows: a.windows,
        items: a.items,
        tasks: a.tasks,
        connections: a.connections,
        robot: "widowx250".into(),
    })?;
    println!("{report}");
    Ok(verdict(report.passed()))
}

fn bench_vlm(a: VlmBenchCli) -> Result<ExitCode> {
    use crate::vlm;
    let threads = a
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let llama = a.llama.unwrap_or_else(|| {
        let quantized = a.quant.iter().filter(|q| q.ggml().is_some());
        quantized.copied().collect()
    });
    let report = vlm::run(&vlm::VlmBenchArgs {
        threads,
        decode_tokens: a.decode_tokens,
        llama,
        skip_llama: a.skip_llama,
        quants: a.quant,
        vision_quant: a.vision_quant,
        device: a.device,
        dir: a.dir,
        python: a.python,
        layers: a.layers,
        image: a.image,
        skip_peer: a.skip_peer,
        peer_mkl_intel: a.peer_mkl_intel,
        task: a.task,
        seed: a.seed,
        no_quant_cache: a.no_quant_cache,
        load_rounds: a.load_rounds,
    })?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{report}");
    }
    Ok(ExitCode::SUCCESS)
}

/// A runtime on this thread for the benchmarks that drive async code (the servo loop).
fn current_thread() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}
