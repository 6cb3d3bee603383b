//! The `pointact` command line: parses arguments and calls the library. Nothing else lives here.

use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "pointact",
    version,
    about = "Robot manipulation by pointing (Embodied-R1 points -> 3D -> safe motion)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one task end to end (default: the built-in simulated tabletop with the oracle pointer).
    Run,
    /// Ask the pointing model for REG/RRG/OFG/VTG points on one image.
    Point,
    /// Evaluate over a task suite (simulator or SimplerEnv bridge).
    Eval,
    /// Serve the policy to external evaluators (SimplerEnv bridge).
    Serve,
    /// Emulate robot controllers (xArm controller, Dynamixel bus) for tests and demos.
    Emulate,
    /// Calibrate the camera (hand-eye).
    Calibrate,
    /// Fine-tune the pointing model with GRPO.
    Train,
    /// Benchmarks against a peer measured in the same run.
    Bench {
        #[command(subcommand)]
        which: BenchCommand,
    },
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Our IK solver vs k::JacobianIkSolver (and pytracik when installed) on the same random poses.
    Ik(IkBenchCli),
    /// Depth image -> base-frame point cloud, vs numpy doing the same vectorised math.
    Cloud(CloudBenchCli),
    /// Simulator camera frames per second on one thread, vs the same renderer without culling.
    Render(RenderBenchCli),
    /// Qwen2.5-VL-3B on candle vs PyTorch transformers.
    Vlm,
}

#[derive(Args)]
struct IkBenchCli {
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
struct CloudBenchCli {
    /// Timed repetitions per implementation.
    #[arg(long, default_value_t = 50)]
    iters: usize,
    /// Python interpreter with numpy for the peer measurement.
    #[arg(long, default_value = "python3")]
    python: String,
}

#[derive(Args)]
struct RenderBenchCli {
    /// Frames timed for our renderer (the brute-force peer times a fifth of them).
    #[arg(long, default_value_t = 30)]
    frames: usize,
}

/// Exit code for subcommands whose issue has not landed: distinct from success (0) and failure (1).
const NOT_BUILT: u8 = 2;

fn not_built(what: &str) -> Result<ExitCode> {
    eprintln!("not built yet: {what}");
    Ok(ExitCode::from(NOT_BUILT))
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match real_main(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn real_main(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Run => not_built("`run` (simulator, executors: issue 3)"),
        Command::Point => not_built("`point` (Qwen2.5-VL on candle: issue 4)"),
        Command::Eval => not_built("`eval` (simulator task suites: issue 3)"),
        Command::Serve => not_built("`serve` (SimplerEnv bridge)"),
        Command::Emulate => not_built("`emulate` (xArm / Dynamixel emulators)"),
        Command::Calibrate => not_built("`calibrate` (hand-eye calibration: issue 5)"),
        Command::Train => not_built("`train` (GRPO trainer)"),
        Command::Bench { which } => match which {
            BenchCommand::Ik(a) => {
                let report = pointact::bench::ik::run(&pointact::bench::ik::IkBenchArgs {
                    robot: a.robot,
                    n: a.n,
                    seed: a.seed,
                    python_peer: !a.no_python,
                })?;
                println!("{report}");
                Ok(ExitCode::SUCCESS)
            }
            BenchCommand::Cloud(a) => {
                let report =
                    pointact::bench::cloud::run(&pointact::bench::cloud::CloudBenchArgs {
                        iters: a.iters,
                        python: a.python,
                    })?;
                println!("{report}");
                Ok(ExitCode::SUCCESS)
            }
            BenchCommand::Render(a) => {
                let report =
                    pointact::bench::render::run(&pointact::bench::render::RenderBenchArgs {
                        frames: a.frames,
                    })?;
                println!("{report}");
                Ok(ExitCode::SUCCESS)
            }
            BenchCommand::Vlm => not_built("`bench vlm` (Qwen2.5-VL on candle: issue 4)"),
        },
    }
}
