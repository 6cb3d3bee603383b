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
    Run(RunCli),
    /// Ask the pointing model for REG/RRG/OFG/VTG points on one image (JSON + overlay PNG).
    Point(PointCli),
    /// Evaluate over a task suite (simulator or SimplerEnv bridge).
    Eval {
        #[command(subcommand)]
        which: EvalCommand,
    },
    /// Serve the policy to external evaluators (SimplerEnv bridge).
    Serve,
    /// Emulate robot controllers (xArm controller, Dynamixel bus) for tests and demos.
    Emulate,
    /// Calibrate the camera (hand-eye).
    Calibrate {
        #[command(subcommand)]
        which: CalibrateCommand,
    },
    /// Grab RGB-D frames from a RealSense into a recorded-frames folder (DIR/0000, DIR/0001, …).
    Capture(CaptureCli),
    /// Fine-tune the pointing model with GRPO.
    Train,
    /// Benchmarks against a peer measured in the same run.
    Bench {
        #[command(subcommand)]
        which: BenchCommand,
    },
}

#[derive(Args)]
struct RunCli {
    /// Task id (`tabletop/<id>`, `bridge/<id>` or a unique id); default: tabletop/pepper_in_pan.
    #[arg(long)]
    task: Option<String>,
    /// A scene TOML to use instead of the task's built-in scene (same object names).
    #[arg(long)]
    scene: Option<std::path::PathBuf>,
    /// Robot override (xarm6, widowx250); default: the task's robot.
    #[arg(long)]
    robot: Option<String>,
    /// Executor branch: p (affordance: grasp + place points) or v (visual trace).
    #[arg(long, default_value = "p")]
    branch: String,
    /// Pointing backend: oracle (simulator ground truth), qwen (local model, --model DIR) or
    /// openai (a vLLM/SGLang server, --endpoint URL).
    #[arg(long, default_value = "oracle")]
    pointer: String,
    #[command(flatten)]
    model: ModelCli,
    /// Episode seed (object layout, noise).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Gaussian pixel noise of the oracle pointer (px).
    #[arg(long, default_value_t = 0.0)]
    noise_px: f64,
    /// Plan and check every motion, move nothing.
    #[arg(long)]
    dry_run: bool,
    /// Save every observed frame as DIR/0000, DIR/0001, … (rgb.png, depth.png, camera.toml, frame.toml).
    #[arg(long)]
    record: Option<std::path::PathBuf>,
    #[command(flatten)]
    rerun: RerunCli,
}

/// `--rerun`: log the run to rerun (feature `viz`).
#[derive(Args)]
struct RerunCli {
    /// Log to rerun: save:FILE.rrd (open later with `rerun FILE.rrd`), spawn (start a `rerun`
    /// viewer from PATH, listening on 127.0.0.1) or connect[:URL] (a running viewer; default
    /// rerun+http://127.0.0.1:9876/proxy).
    #[arg(long, value_name = "save:FILE.rrd|spawn|connect[:URL]")]
    rerun: Option<pointact::viz::Sink>,
}

impl RerunCli {
    /// The recording, when `--rerun` was given.
    fn open(&self, app_id: &'static str) -> Result<Option<pointact::viz::Viz>> {
        let Some(sink) = &self.rerun else {
            return Ok(None);
        };
        let viz = pointact::viz::Viz::open(app_id, sink)?;
        if let pointact::viz::Sink::Save(path) = sink {
            eprintln!("rerun     recording to {}", path.display());
        }
        Ok(Some(viz))
    }
}

/// Flushes the recording; a logging error fails the command after its own output.
fn finish_viz(viz: Option<pointact::viz::Viz>) -> Result<()> {
    if let Some(v) = viz {
        v.finish()?;
    }
    Ok(())
}

/// How to reach the pointing model (backends `qwen` and `openai`).
#[derive(Args, Clone)]
struct ModelCli {
    /// qwen: a local Hugging Face folder or a hub repo id (offline: pass a folder);
    /// openai: the model name the server serves.
    #[arg(long, default_value = pointact::pointing::openai::DEFAULT_MODEL)]
    model: String,
    /// qwen: weight format of the text decoder: f32 (exact), q8_0 or q4k (faster, smaller).
    #[arg(long, default_value = "f32")]
    quant: String,
    /// qwen: weight format of the vision tower's linears (f32 keeps the image features exact;
    /// layers whose width fits no block stay f32 anyway).
    #[arg(long, default_value = "f32")]
    vision_quant: String,
    /// Pixel budget of the image processor (default: the model's preprocessor_config.json).
    /// For openai these must equal the server's own limits, or points are scaled wrong.
    #[arg(long)]
    min_pixels: Option<u64>,
    #[arg(long)]
    max_pixels: Option<u64>,
    /// Longest reply, in tokens.
    #[arg(long, default_value_t = 1024)]
    max_new_tokens: usize,
    /// 0 = greedy (Embodied-R1's setting); above 0 samples with --top-p.
    #[arg(long, default_value_t = 0.0)]
    temperature: f64,
    #[arg(long, default_value_t = 1.0)]
    top_p: f64,
    /// Seed of the sampler (with --temperature > 0).
    #[arg(long, default_value_t = 0)]
    sample_seed: u64,
    #[arg(long, default_value_t = 1.05)]
    repetition_penalty: f32,
    /// openai: base URL of the server (POST {endpoint}/chat/completions).
    #[arg(long, default_value = pointact::pointing::openai::DEFAULT_ENDPOINT)]
    endpoint: String,
    /// openai: bearer token (default: $OPENAI_API_KEY).
    #[arg(long)]
    api_key: Option<String>,
    /// openai: seconds per attempt before giving up on the server.
    #[arg(long, default_value_t = 120.0)]
    timeout_s: f64,
    /// openai: retries after a connection error, timeout, 429 or 5xx.
    #[arg(long, default_value_t = 3)]
    retries: u32,
}

impl ModelCli {
    fn qwen_options(&self) -> Result<pointact::vlm::pointer::QwenOptions> {
        use pointact::vlm::{GenerationConfig, Sampling};
        Ok(pointact::vlm::pointer::QwenOptions {
            quant: self.quant.parse().map_err(anyhow::Error::msg)?,
            vision_quant: self.vision_quant.parse().map_err(anyhow::Error::msg)?,
            min_pixels: self.min_pixels,
            max_pixels: self.max_pixels,
            generation: GenerationConfig {
                max_new_tokens: self.max_new_tokens,
                sampling: if self.temperature > 0.0 {
                    Sampling::TopP {
                        temperature: self.temperature,
                        top_p: self.top_p,
                    }
                } else {
                    Sampling::Greedy
                },
                repetition_penalty: self.repetition_penalty,
                seed: self.sample_seed,
                ..GenerationConfig::default()
            },
            ..Default::default()
        })
    }

    /// Loads the local model; its reply is streamed to stderr as it is generated.
    fn qwen(&self) -> Result<pointact::vlm::pointer::QwenPointer> {
        eprintln!("model     {} ({})", self.model, self.quant);
        let p = pointact::vlm::pointer::QwenPointer::load(&self.model, self.qwen_options()?)?;
        Ok(p.with_text_stream(|piece| {
            use std::io::Write;
            if !STREAMING.swap(true, std::sync::atomic::Ordering::Relaxed) {
                eprint!("reply     ");
            }
            eprint!("{piece}");
            let _ = std::io::stderr().flush();
        }))
    }

    fn openai(&self) -> Result<pointact::pointing::openai::OpenAiPointer> {
        use pointact::pointing::openai::{OpenAiConfig, OpenAiPointer};
        let base = OpenAiConfig::new(&self.endpoint, &self.model);
        let cfg = OpenAiConfig {
            api_key: self.api_key.clone().or(base.api_key.clone()),
            timeout: std::time::Duration::from_secs_f64(self.timeout_s),
            retries: self.retries,
            max_tokens: self.max_new_tokens as u32,
            temperature: self.temperature,
            repetition_penalty: f64::from(self.repetition_penalty),
            min_pixels: self.min_pixels.unwrap_or(base.min_pixels),
            max_pixels: self.max_pixels.unwrap_or(base.max_pixels),
            ..base
        };
        Ok(OpenAiPointer::new(cfg)?)
    }
}

#[derive(Args)]
struct PointCli {
    /// The image, a PNG (8- or 16-bit, RGB/RGBA/gray; converted to 8-bit RGB).
    #[arg(long, required_unless_present = "camera")]
    image: Option<std::path::PathBuf>,
    /// Instead of --image, one frame from a camera: sim[:TASK], replay:DIR or realsense[:SERIAL].
    /// The model sees its RGB; the JSON adds the points lifted to 3D (camera and base frame)
    /// with the frame's depth, intrinsics and extrinsics.
    #[arg(long, conflicts_with = "image")]
    camera: Option<String>,
    /// reg, rrg, ofg or vtg.
    #[arg(long)]
    ability: String,
    /// The text that fills the ability's prompt template.
    #[arg(long)]
    instruction: String,
    /// qwen (local, default) or openai (remote server).
    #[arg(long, default_value = "qwen")]
    pointer: String,
    #[command(flatten)]
    model: ModelCli,
    /// Where to write the overlay PNG (default: <image stem>.<ability>.png beside the image).
    #[arg(long)]
    overlay: Option<std::path::PathBuf>,
    #[command(flatten)]
    rerun: RerunCli,
}

#[derive(Args)]
struct CaptureCli {
    /// Output folder; frames go to DIR/0000, DIR/0001, … (rgb.png, depth.png, camera.toml, frame.toml).
    #[arg(long)]
    out: std::path::PathBuf,
    /// How many frames to write.
    #[arg(long, default_value_t = 1)]
    frames: usize,
    /// Device frames per written frame: their depth is combined by a per-pixel temporal median
    /// (zeros ignored); 1 = no median.
    #[arg(long, default_value_t = 1)]
    median: usize,
    /// Serial number of the RealSense to open (default: the first one found).
    #[arg(long)]
    serial: Option<String>,
    /// A calibration file whose [extrinsics] place the camera in the robot base frame (default:
    /// identity, i.e. points stay in the camera frame).
    #[arg(long)]
    calibration: Option<std::path::PathBuf>,
    /// Replace the frames of a non-empty --out folder.
    #[arg(long)]
    force: bool,
}

#[derive(Subcommand)]
enum CalibrateCommand {
    /// Eye-to-hand: where a fixed camera is in the robot base frame, from pose pairs of a target
    /// held by the gripper. Writes DIR/<camera>.toml only when the solve succeeds.
    HandEye(HandEyeCli),
}

#[derive(Args)]
struct HandEyeCli {
    /// Recorded pose pairs, JSON (format: calibration/README.md, "Recorded pose pairs").
    #[arg(long)]
    samples: Option<std::path::PathBuf>,
    /// Camera name: the file written is DIR/<camera>.toml (default: front; with --sim: sim).
    #[arg(long)]
    camera: Option<String>,
    /// tsai (Tsai-Lenz 1989) or park (Park-Martin 1994).
    #[arg(long, default_value = "park")]
    method: pointact::calibrate::Method,
    /// Folder of the calibration files.
    #[arg(long, default_value = "calibration")]
    out: std::path::PathBuf,
    /// A recorded session: numbered frame folders + poses.json (see calibration/README.md);
    /// the tag is detected in every frame.
    #[arg(long, conflicts_with = "samples")]
    frames: Option<std::path::PathBuf>,
    /// Calibrate the simulator's camera: the tag rides on the simulated xArm 6's tool, and the
    /// result is compared with the camera's true pose.
    #[arg(long, conflicts_with_all = ["samples", "frames"])]
    sim: bool,
    /// With --sim: views to plan.
    #[arg(long, default_value_t = 24)]
    views: usize,
    /// With --sim: edge of the tag's black square, metres.
    #[arg(long, default_value_t = 0.10)]
    tag_size: f64,
    /// With --sim: also write the captured session here (replayable with --frames).
    #[arg(long)]
    save_session: Option<std::path::PathBuf>,
}

#[derive(Subcommand)]
enum EvalCommand {
    /// All tasks of a simulated suite over seeded episodes.
    Sim(EvalSimCli),
    /// SimplerEnv through the bridge.
    Bridge,
}

#[derive(Args)]
struct EvalSimCli {
    /// tabletop (8 xArm 6 tasks) or bridge (4 WidowX tasks).
    #[arg(long, default_value = "tabletop")]
    suite: String,
    /// p (affordance) or v (visual trace).
    #[arg(long, default_value = "p")]
    branch: String,
    /// Gaussian pixel noise of the oracle pointer (px).
    #[arg(long, default_value_t = 0.0)]
    noise_px: f64,
    /// Probability that the oracle drops each point.
    #[arg(long, default_value_t = 0.0)]
    drop_prob: f64,
    /// Episodes per task (seeds 0..N).
    #[arg(long, default_value_t = 24)]
    episodes: u64,
    /// Write every episode's result here.
    #[arg(long, default_value = "eval-sim.json")]
    json: std::path::PathBuf,
    #[command(flatten)]
    rerun: RerunCli,
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Our IK solver vs k::JacobianIkSolver (and pytracik when installed) on the same random poses.
    Ik(IkBenchCli),
    /// Depth image -> base-frame point cloud, vs numpy doing the same vectorised math.
    Cloud(CloudBenchCli),
    /// Simulator camera frames per second on one thread, vs the same renderer without culling.
    Render(RenderBenchCli),
    /// Qwen2.5-VL-3B on candle vs PyTorch transformers, full size, same random weights.
    Vlm(VlmBenchCli),
    /// One configuration of `bench vlm`, run by it in a child process (internal).
    #[command(name = "vlm-worker", hide = true)]
    VlmWorker(VlmWorkerCli),
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

/// Whether a model reply is being streamed to stderr (the next printed line must start fresh).
static STREAMING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Ends a streamed reply's line, if one is open.
fn end_stream() {
    if STREAMING.swap(false, std::sync::atomic::Ordering::Relaxed) {
        eprintln!();
    }
}

#[derive(Args)]
struct VlmBenchCli {
    /// Threads on both sides (default: all available).
    #[arg(long)]
    threads: Option<usize>,
    /// New tokens per run; the first comes from prefill, the rest are timed as decode.
    #[arg(long, default_value_t = 32)]
    decode_tokens: usize,
    /// Our configurations, comma-separated: f32, q8_0, q4k.
    #[arg(long, value_delimiter = ',', default_value = "f32,q4k")]
    quant: Vec<pointact::vlm::Quant>,
    /// Checkpoint folder (generated once, reused while seed and config match);
    /// default ~/.cache/pointact/bench-vlm-3b (…-L<N> with --layers).
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
    /// Python interpreter for the transformers peer (it installs a venv when torch is missing).
    #[arg(long, default_value = "python3")]
    python: String,
    /// Cut both towers to N layers for quick runs (default: full size, 36 text / 32 vision).
    #[arg(long)]
    layers: Option<usize>,
    /// Input image size, WIDTHxHEIGHT.
    #[arg(long, default_value = "640x480", value_parser = pointact::bench::vlm::parse_size)]
    image: (u32, u32),
    /// Measure our side only.
    #[arg(long)]
    skip_peer: bool,
    /// Print the report as JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Seed of the random weights.
    #[arg(long, default_value_t = pointact::bench::vlm::checkpoint::DEFAULT_SEED)]
    seed: u64,
}

#[derive(Args)]
struct VlmWorkerCli {
    /// request.json written by `bench vlm`.
    #[arg(long)]
    request: std::path::PathBuf,
    #[arg(long)]
    quant: pointact::vlm::Quant,
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
        Command::Run(a) => run(a),
        Command::Point(a) => point(a),
        Command::Eval { which } => match which {
            EvalCommand::Sim(a) => eval_sim(a),
            EvalCommand::Bridge => not_built("`eval bridge` (SimplerEnv bridge)"),
        },
        Command::Serve => not_built("`serve` (SimplerEnv bridge)"),
        Command::Emulate => not_built("`emulate` (xArm / Dynamixel emulators)"),
        Command::Calibrate { which } => match which {
            CalibrateCommand::HandEye(a) => calibrate_hand_eye(a),
        },
        Command::Capture(a) => capture(a),
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
            BenchCommand::Vlm(a) => bench_vlm(a),
            BenchCommand::VlmWorker(a) => {
                let m = pointact::bench::vlm::worker::run(&a.request, a.quant)?;
                println!("{}", serde_json::to_string(&m)?);
                Ok(ExitCode::SUCCESS)
            }
        },
    }
}

fn calibrate_hand_eye(a: HandEyeCli) -> Result<ExitCode> {
    use pointact::calibrate::{self, file, sim, target::session};
    let camera = a
        .camera
        .clone()
        .unwrap_or_else(|| if a.sim { "sim" } else { "front" }.to_string());
    let mut truth = None;
    let (s, path, poses) = if let Some(samples_path) = &a.samples {
        let samples = file::load_samples(samples_path)?;
        let (s, path) = file::solve_and_write(&samples, a.method, &a.out, &camera)?;
        (s, path, samples.len())
    } else {
        let (views, target) = if a.sim {
            let mut opts = sim::SimCalibrationOptions {
                views: a.views,
                ..Default::default()
            };
            opts.target.size_m = a.tag_size;
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()?;
            let run = rt.block_on(sim::capture_sim_session(&opts))?;
            for v in &run.skipped {
                eprintln!("skipped   view {}: {}", v.view, v.reason);
            }
            if let Some(dir) = &a.save_session {
                session::write_session(dir, &run.info, &run.views)?;
                println!("session   {}", dir.display());
            }
            truth = Some(run.base_from_camera);
            (run.views, run.info.target)
        } else if let Some(dir) = &a.frames {
            let s = session::read_session(dir)?;
            (s.views, s.info.target)
        } else {
            anyhow::bail!(
                "give --samples FILE.json (recorded pose pairs), --frames DIR (a recorded session) \
                 or --sim (format: calibration/README.md)"
            );
        };
        let c = calibrate::calibrate_views(&views, &target, a.method, &a.out, &camera)?;
        for v in &c.skipped {
            eprintln!("no tag    view {}: {}", v.view, v.reason);
        }
        (c.solution, c.path, c.used.len())
    };
    println!("hand-eye  {} ({poses} poses, eye-to-hand)", s.method);
    println!("sample    rotation (deg)  translation (mm)");
    for (i, r) in s.residuals.per_sample.iter().enumerate() {
        println!(
            "{i:>6}    {:>14.4}  {:>16.3}",
            r.rotation_deg, r.translation_mm
        );
    }
    let r = &s.residuals;
    println!(
        "rms       {:>14.4}  {:>16.3}\nmax       {:>14.4}  {:>16.3}",
        r.rotation_rms_deg, r.translation_rms_mm, r.rotation_max_deg, r.translation_max_mm
    );
    let print_pose = |name: &str, iso: &pointact::nalgebra::Isometry3<f64>| {
        let t = iso.translation.vector;
        let q = iso.rotation;
        println!(
            "{name} t = ({:.4}, {:.4}, {:.4}) m, q = (w {:.6}, x {:.6}, y {:.6}, z {:.6})",
            t.x, t.y, t.z, q.w, q.i, q.j, q.k
        );
    };
    print_pose("base_from_camera   ", &s.base_from_camera);
    print_pose("gripper_from_target", &s.gripper_from_target);
    if let Some(truth) = truth {
        let d = truth.inverse() * s.base_from_camera;
        println!(
            "truth     the simulator's camera: off by {:.3} mm, {:.4} deg",
            d.translation.vector.norm() * 1e3,
            d.rotation.angle().to_degrees()
        );
    }
    println!("wrote     {}", path.display());
    Ok(ExitCode::SUCCESS)
}

fn bench_vlm(a: VlmBenchCli) -> Result<ExitCode> {
    use pointact::bench::vlm;
    let threads = a
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let report = vlm::run(&vlm::VlmBenchArgs {
        threads,
        decode_tokens: a.decode_tokens,
        quants: a.quant,
        dir: a.dir,
        python: a.python,
        layers: a.layers,
        image: a.image,
        skip_peer: a.skip_peer,
        seed: a.seed,
    })?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{report}");
    }
    Ok(ExitCode::SUCCESS)
}

fn run(a: RunCli) -> Result<ExitCode> {
    use pointact::sim::{episode, tasks};
    let branch: pointact::executor::plan::Branch = a.branch.parse().map_err(anyhow::Error::msg)?;
    let spec = tasks::task(a.task.as_deref().unwrap_or(tasks::DEFAULT_TASK))?;
    let mut ep = spec.instantiate(a.seed)?;
    if let Some(path) = &a.scene {
        // The file's own layout replaces the seeded one; object names must match the task's.
        ep.scene = pointact::sim::Scene::load(path)?;
    }
    if let Some(r) = &a.robot {
        ep.robot = r.clone();
    }
    println!(
        "task      {} (seed {}, robot {}, branch {:?})",
        spec.full_id(),
        a.seed,
        ep.robot,
        branch
    );
    let opts = episode::EpisodeOptions {
        branch,
        oracle: pointact::sim::oracle::OracleOptions {
            noise_px: a.noise_px,
            seed: a.seed,
            ..Default::default()
        },
        dry_run: a.dry_run,
        ..Default::default()
    };
    let mut viz = a.rerun.open("pointact-run")?;
    let mut record_err = None;
    let mut captures = 0usize;
    let mut on_event = |e: pointact::executor::run::Event<'_>| {
        print_event(&e);
        if let Some(v) = viz.as_mut() {
            v.on_event(&e);
        }
        if let (pointact::executor::run::Event::Captured(frame), Some(dir)) = (&e, &a.record) {
            // One numbered folder per capture: what `camera::replay::ReplayCamera` plays back.
            let dir = dir.join(format!("{captures:04}"));
            captures += 1;
            match pointact::camera::record::write_frame(frame, &dir) {
                Ok(()) => println!("recorded  {}", dir.display()),
                Err(err) => record_err = Some(err),
            }
        }
    };
    let result = match a.pointer.as_str() {
        "oracle" => episode::run_episode(&ep, &opts, &mut on_event)?,
        "qwen" => {
            let pointer = a.model.qwen()?;
            episode::run_episode_with(&ep, &opts, |c| c, |_| pointer, &mut on_event)?
        }
        "openai" => {
            let pointer = a.model.openai()?;
            episode::run_episode_with(&ep, &opts, |c| c, |_| pointer, &mut on_event)?
        }
        other => anyhow::bail!("unknown pointer `{other}` (expected oracle, qwen or openai)"),
    };
    end_stream();
    if let Some(v) = viz.as_mut() {
        v.log_outcome(result.success, &result.detail);
    }
    let code = outcome(&a, &result, record_err);
    finish_viz(viz)?;
    code
}

/// What `run` prints and returns once the episode is over.
fn outcome(
    a: &RunCli,
    result: &pointact::sim::episode::EpisodeResult,
    record_err: Option<pointact::camera::CameraError>,
) -> Result<ExitCode> {
    if let Some(err) = record_err {
        return Err(anyhow::anyhow!("--record failed: {err}"));
    }
    if a.dry_run {
        println!("outcome   dry run: every motion planned and checked, nothing moved");
        return Ok(if result.error.is_none() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    println!(
        "outcome   {} ({:.1} s simulated): {}",
        if result.success { "SUCCESS" } else { "FAILURE" },
        result.sim_time_s,
        result.detail
    );
    Ok(if result.success {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `pointact point`: one image, one question, points as JSON on stdout and an overlay PNG.
fn point(a: PointCli) -> Result<ExitCode> {
    use pointact::pointing::{overlay, Ability};
    let ability: Ability = a.ability.parse()?;
    let mut viz = a.rerun.open("pointact-point")?;
    let (img, frame) = match (&a.image, &a.camera) {
        (Some(path), _) => (
            image::open(path)
                .map_err(|e| anyhow::anyhow!("cannot read image {}: {e}", path.display()))?
                .to_rgb8(),
            None,
        ),
        (None, Some(spec)) => match frame_from_spec(spec)? {
            Some(f) => (f.rgb.clone(), Some(f)),
            None => return Ok(ExitCode::from(NOT_BUILT)),
        },
        (None, None) => anyhow::bail!("give --image PNG or --camera SPEC"),
    };
    let (reply, pointing) = match a.pointer.as_str() {
        "qwen" => {
            let mut p = a.model.qwen()?;
            let (reply, pointing) = p.ask(&img, ability, &a.instruction)?;
            end_stream();
            if reply.model_size != reply.original_size {
                eprintln!(
                    "image     {}x{} seen by the model as {}x{}",
                    reply.original_size.width,
                    reply.original_size.height,
                    reply.model_size.width,
                    reply.model_size.height
                );
            }
            let t = reply.timings;
            if let Some(v) = viz.as_mut() {
                v.log_timing("vlm/vision", t.vision_s);
                v.log_timing("vlm/prefill", t.prefill_s);
                v.log_timing("vlm/decode", t.decode_s);
            }
            eprintln!(
                "timing    vision {:.2} s, prefill {:.2} s ({} tokens), decode {:.2} tok/s",
                t.vision_s,
                t.prefill_s,
                t.prompt_tokens,
                t.decode_tokens_per_s()
            );
            (Some(reply), pointing)
        }
        "openai" => {
            let mut p = a.model.openai()?;
            (None, p.ask(&img, ability, &a.instruction))
        }
        other => anyhow::bail!("unknown pointer `{other}` for point (expected qwen or openai)"),
    };
    let report = pointact::pointing::PointReport::new(
        ability,
        &a.instruction,
        pointing.as_ref().ok(),
        reply.as_ref().map(|r| r.text.as_str()),
    );
    if let Some(v) = viz.as_mut() {
        // A camera frame brings depth and a pose: log it whole (as `run` does), else the image.
        match &frame {
            Some(f) => v.on_event(&pointact::executor::run::Event::Captured(f)),
            None => v.log_image(&img),
        }
        if let Ok(p) = &pointing {
            v.log_answer(ability, &a.instruction, p);
        }
    }
    finish_viz(viz)?;
    let pointing = match pointing {
        Ok(p) => p,
        Err(e) => {
            println!("{}", serde_json::to_string_pretty(&report.with_error(&e))?);
            return Err(e.into());
        }
    };
    let overlay_path = a.overlay.clone().unwrap_or_else(|| match &a.image {
        Some(image) => {
            let stem = image
                .file_stem()
                .map_or_else(|| "image".into(), |s| s.to_string_lossy().into_owned());
            image.with_file_name(format!("{stem}.{}.png", ability.as_str()))
        }
        None => format!("camera.{}.png", ability.as_str()).into(),
    });
    overlay::draw_points(&img, ability, &pointing.points_px())
        .save(&overlay_path)
        .map_err(|e| anyhow::anyhow!("cannot write overlay {}: {e}", overlay_path.display()))?;
    let mut json = serde_json::to_value(report.with_overlay(&overlay_path))?;
    if let Some(frame) = &frame {
        // Objects (REG/OFG/VTG) by a low depth percentile, places (RRG) by the median, as the
        // executor lifts them.
        use pointact::geometry::RobustDepthOptions;
        let opts = match ability {
            Ability::Rrg => RobustDepthOptions::surface(),
            _ => RobustDepthOptions::grasp(),
        };
        let lifted = pointact::executor::perceive::lift_points(frame, &pointing.points_px(), &opts);
        json["lifted"] = serde_json::to_value(lifted)?;
    }
    println!("{}", serde_json::to_string_pretty(&json)?);
    Ok(ExitCode::SUCCESS)
}

/// What `capture` and `--camera realsense` say in a build without the feature (exit code 2).
#[cfg(not(feature = "realsense"))]
const NO_REALSENSE: &str = "pointact was built without the `realsense` feature; rebuild with `--features realsense` (see README)";

/// One frame from a `--camera` spec: `sim[:TASK]` (the task's seed-0 scene, settled),
/// `replay:DIR` (its first frame) or `realsense[:SERIAL]`. `None` = not in this build (the
/// message is printed; exit 2).
fn frame_from_spec(spec: &str) -> Result<Option<pointact::camera::Frame>> {
    use pointact::camera::Camera;
    let (scheme, rest) = spec.split_once(':').unwrap_or((spec, ""));
    match scheme {
        "sim" => {
            use pointact::sim::{devices::SimCamera, tasks};
            let task = if rest.is_empty() {
                tasks::DEFAULT_TASK
            } else {
                rest
            };
            let ep = tasks::task(task)?.instantiate(0)?;
            let mut world = ep.world(ep.robot_model()?)?;
            world.settle(2.0);
            let world = std::rc::Rc::new(std::cell::RefCell::new(world));
            Ok(Some(SimCamera::new(world, Default::default()).capture()?))
        }
        "realsense" => {
            #[cfg(feature = "realsense")]
            {
                use pointact::camera::realsense::{device::RealSenseCamera, RealSenseOptions};
                let serial = (!rest.is_empty()).then(|| rest.to_string());
                let mut cam = RealSenseCamera::open(RealSenseOptions {
                    serial,
                    ..Default::default()
                })?;
                Ok(Some(cam.capture()?))
            }
            #[cfg(not(feature = "realsense"))]
            {
                eprintln!("{NO_REALSENSE}");
                Ok(None)
            }
        }
        _ => Ok(Some(pointact::camera::replay::from_spec(spec)?.capture()?)),
    }
}

/// `pointact capture`: frames from a RealSense into a recorded-frames folder.
fn capture(a: CaptureCli) -> Result<ExitCode> {
    #[cfg(not(feature = "realsense"))]
    {
        let _ = a;
        eprintln!("{NO_REALSENSE}");
        Ok(ExitCode::from(NOT_BUILT))
    }
    #[cfg(feature = "realsense")]
    {
        use pointact::camera::realsense::{device::RealSenseCamera, RealSenseOptions};
        use pointact::camera::{record, Camera};
        anyhow::ensure!(a.frames >= 1, "--frames must be at least 1");
        let base_from_camera = match &a.calibration {
            Some(path) => pointact::geometry::Extrinsics::load(path)?.base_from_camera,
            None => pointact::nalgebra::Isometry3::identity(),
        };
        // The device first: a failed open leaves --out untouched.
        let mut cam = RealSenseCamera::open(RealSenseOptions {
            serial: a.serial.clone(),
            median_frames: a.median,
            base_from_camera,
            ..Default::default()
        })?;
        let info = cam.info().clone();
        println!(
            "camera    {} serial {} firmware {}, depth scale {} m/unit",
            info.name, info.serial, info.firmware, info.depth_scale_m
        );
        record::prepare_out_dir(&a.out, a.force)?;
        for i in 0..a.frames {
            let frame = cam.capture()?;
            let dir = record::frame_dir(&a.out, i);
            record::write_frame(&frame, &dir)?;
            println!(
                "captured  {} ({} valid depth pixels)",
                dir.display(),
                frame.depth.valid_count()
            );
        }
        Ok(ExitCode::SUCCESS)
    }
}

fn print_event(e: &pointact::executor::run::Event<'_>) {
    end_stream();
    use pointact::executor::plan::Step;
    use pointact::executor::run::Event;
    match e {
        Event::Instruction(i) => println!("instruct  {i}"),
        Event::Captured(f) => println!(
            "camera    {}x{} RGB-D, {} valid depth pixels",
            f.depth.width,
            f.depth.height,
            f.depth.valid_count()
        ),
        Event::TableHeight(z) => println!("table     z = {z:.4} m"),
        Event::Obstacles { count } => {
            println!("obstacles {count} occupied 3 cm voxels on the table")
        }
        Event::Asked {
            ability,
            query,
            pointing,
        } => {
            let pts: Vec<String> = pointing
                .points_px()
                .iter()
                .map(|p| format!("({:.0}, {:.0})", p[0], p[1]))
                .collect();
            println!(
                "{:<9} `{query}` -> {}",
                ability.as_str().to_uppercase(),
                pts.join(" ")
            );
            if let Some(r) = &pointing.answer.reasoning {
                println!("          think: {r}");
            }
        }
        Event::Planned(plan) => {
            let t = &plan.targets;
            if let Some(g) = t.grasp {
                let v = g.translation.vector;
                println!("grasp     ({:.3}, {:.3}, {:.3}) m", v.x, v.y, v.z);
            }
            if let Some(p) = t.place {
                let v = p.translation.vector;
                println!("place     ({:.3}, {:.3}, {:.3}) m", v.x, v.y, v.z);
            }
            if !t.trace.is_empty() {
                let pts: Vec<String> = t
                    .trace
                    .iter()
                    .map(|p| format!("({:.2}, {:.2}, {:.2})", p.x, p.y, p.z))
                    .collect();
                println!("trace     {}", pts.join(" "));
            }
            for (i, s) in plan.steps.iter().enumerate() {
                match s {
                    Step::Move {
                        label, trajectory, ..
                    } => {
                        println!("plan {i:>2}   {label:<24} {:.2} s", trajectory.duration())
                    }
                    Step::Gripper { label, width, .. } => {
                        println!("plan {i:>2}   {label:<24} gripper -> {:.1} mm", width * 1e3)
                    }
                }
            }
        }
        Event::Checked { steps } => println!("safety    all {steps} steps passed the gate"),
        Event::DryRun => println!("dry run   nothing will move"),
        Event::Step { index, label } => println!("execute {index:>2} {label}"),
        Event::GraspHeld { width } => println!("grasp     held, fingers at {:.1} mm", width * 1e3),
        // Robot states are for the rerun log; the step lines already say what moved.
        Event::Robot { .. } | Event::Moved { .. } => {}
    }
}

fn eval_sim(a: EvalSimCli) -> Result<ExitCode> {
    use pointact::sim::{episode, eval, tasks};
    let suite = tasks::Suite::parse(&a.suite)?;
    let branch: pointact::executor::plan::Branch = a.branch.parse().map_err(anyhow::Error::msg)?;
    let opts = episode::EpisodeOptions {
        branch,
        oracle: pointact::sim::oracle::OracleOptions {
            noise_px: a.noise_px,
            drop_prob: a.drop_prob,
            ..Default::default()
        },
        ..Default::default()
    };
    let seeds: Vec<u64> = (0..a.episodes).collect();
    let bar = indicatif::ProgressBar::new((suite.tasks().len() * seeds.len()) as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} episodes ({eta}) {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut viz = a.rerun.open("pointact-eval")?;
    let mut ok = 0;
    let report = eval::run_suite_observed(suite, &seeds, &opts, &mut |e| match e {
        eval::SuiteEvent::Started { task, seed } => {
            if let Some(v) = viz.as_mut() {
                v.begin_episode(&format!("{task} seed {seed}"));
            }
        }
        eval::SuiteEvent::Episode(e) => {
            if let Some(v) = viz.as_mut() {
                v.on_event(&e);
            }
        }
        eval::SuiteEvent::Finished {
            done,
            total: _,
            record: r,
        } => {
            ok += r.success as usize;
            bar.set_position(done as u64);
            bar.set_message(format!("{ok}/{done} succeeded"));
            if let Some(v) = viz.as_mut() {
                v.log_outcome(r.success, &r.detail);
            }
        }
    });
    bar.finish_and_clear();
    finish_viz(viz)?;
    println!("{report}");
    std::fs::write(&a.json, serde_json::to_string_pretty(&report)?)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", a.json.display()))?;
    println!("wrote {}", a.json.display());
    Ok(ExitCode::SUCCESS)
}
