//! The `pointact` command line: arguments, one file per command, and what they print. Commands
//! parse, call the library and print; the work itself lives in the library.

pub mod ask;
pub mod calibrate;
pub mod capture;
pub mod dataset;
#[cfg(test)]
mod doc_check;
pub mod emulate;
pub mod eval;
pub mod fit;
pub mod point;
pub mod reference;
pub mod run;
pub mod run_robot;
pub mod serve;
pub mod stages;
pub mod train;
pub mod train_grpo;

use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Result;
use clap::{Args, Parser, Subcommand};

/// `pointact --version`: the crate version and the commit it was built from (build.rs).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    include_str!(concat!(env!("OUT_DIR"), "/commit.txt")),
    ")"
);

#[derive(Parser)]
#[command(
    name = "pointact",
    version = VERSION,
    about = "Robot manipulation by pointing (Embodied-R1 points -> 3D -> safe motion)"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Run one task end to end (default: the built-in simulated tabletop with the oracle pointer).
    Run(Box<run::RunCli>),
    /// Ask the pointing model for REG/RRG/OFG/VTG points on one image (JSON + overlay PNG).
    Point(point::PointCli),
    /// Ask a spatial question about a video (Embodied-R): key frames, a vision model's
    /// descriptions, a language model's <think>/<answer> reasoning.
    Ask(Box<ask::AskCli>),
    /// The key frames Embodied-R would keep of a video (ORB + homography overlap).
    Keyframes(ask::KeyframesCli),
    /// Evaluate over a task suite (simulator or SimplerEnv bridge).
    Eval {
        #[command(subcommand)]
        which: eval::EvalCommand,
    },
    /// Inspect LeRobotDataset folders (what `--dataset` writes).
    Dataset {
        #[command(subcommand)]
        which: dataset::DatasetCommand,
    },
    /// Serve the policy to external evaluators (SimplerEnv bridge).
    Serve {
        #[command(subcommand)]
        which: serve::ServeCommand,
    },
    /// Emulate robot controllers (xArm controller, Dynamixel bus) on this machine for tests and demos.
    Emulate {
        #[command(subcommand)]
        which: emulate::EmulateCommand,
    },
    /// Calibrate the camera (hand-eye).
    Calibrate {
        #[command(subcommand)]
        which: calibrate::CalibrateCommand,
    },
    /// Grab RGB-D frames from a RealSense into a recorded-frames folder (DIR/0000, DIR/0001, …).
    Capture(capture::CaptureCli),
    /// Fit models from robot descriptions (the planner's collision spheres).
    Fit {
        #[command(subcommand)]
        which: fit::FitCommand,
    },
    /// Training: GRPO records and Robot-R1 questions from the simulator; the GRPO trainer.
    Train {
        #[command(subcommand)]
        which: train::TrainCommand,
    },
    /// Benchmarks against a peer measured in the same run.
    Bench {
        #[command(subcommand)]
        which: pointact_bench::BenchCommand,
    },
    /// Print reference material generated from this binary (the command-line reference).
    Print {
        #[command(subcommand)]
        which: reference::PrintCommand,
    },
}

/// `--rerun`: log the run to rerun (feature `viz`).
#[derive(Args)]
pub struct RerunCli {
    /// Log to rerun: save:FILE.rrd (open later with `rerun FILE.rrd`), spawn (start a `rerun`
    /// viewer from PATH, listening on 127.0.0.1) or connect[:URL] (a running viewer; default
    /// rerun+http://127.0.0.1:9876/proxy).
    #[arg(long, value_name = "save:FILE.rrd|spawn|connect[:URL]")]
    pub rerun: Option<pointact::viz::Sink>,
}

impl RerunCli {
    /// The recording, when `--rerun` was given.
    pub fn open(&self, app_id: &'static str) -> Result<Option<pointact::viz::Viz>> {
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
pub fn finish_viz(viz: Option<pointact::viz::Viz>) -> Result<()> {
    if let Some(v) = viz {
        v.finish()?;
    }
    Ok(())
}

/// Exit code for subcommands whose issue has not landed, or a source this build lacks: distinct
/// from success (0) and failure (1).
pub const NOT_BUILT: u8 = 2;

/// Exit code after Ctrl-C (128 + SIGINT, as shells report it).
pub const INTERRUPTED: u8 = 130;

/// An error that ends a command because of Ctrl-C: printed like any error, but the process exits
/// with [`INTERRUPTED`], as every command stopped by Ctrl-C does.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Interrupted(pub String);

/// The one async runtime of the process: commands that drive robots (simulated or not) block on
/// the library's futures here; the library never creates a runtime.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// A runtime with a worker per core, for servers: one connection's large frame (a 3.4 MB
/// observation) must not hold up the answers to the others.
pub fn server_runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// Whether a model reply is being streamed to stderr (the next printed line must start fresh).
static STREAMING: AtomicBool = AtomicBool::new(false);

/// Streams a local model's reply to stderr as it is generated, after a `reply` label.
pub fn stream_to_stderr() -> pointact::pointing::TextStream {
    Box::new(|piece: &str| {
        use std::io::Write;
        if !STREAMING.swap(true, Ordering::Relaxed) {
            eprint!("reply     ");
        }
        eprint!("{piece}");
        let _ = std::io::stderr().flush();
    })
}

/// Ends a streamed reply's line, if one is open.
pub fn end_stream() {
    if STREAMING.swap(false, Ordering::Relaxed) {
        eprintln!();
    }
}

/// Where episodes are kept as a LeRobotDataset (`run` in the simulator and on a robot, `eval
/// sim`, `eval bridge`).
#[derive(Args, Clone, Debug)]
pub struct DatasetCli {
    /// Append every episode to this LeRobotDataset v3.0 folder (created when absent; a dataset of
    /// another robot, fps or feature set is refused before anything moves).
    #[arg(long)]
    pub dataset: Option<std::path::PathBuf>,
    /// Frames per second of the dataset, 1 to 60.
    #[arg(long, default_value_t = 10, value_parser = values::dataset_fps, requires = "dataset")]
    pub dataset_fps: u64,
    /// Frame size of the dataset's video, WIDTHxHEIGHT (even sides): the scene camera's view at
    /// that size (its intrinsics scaled). Default: the camera's own size. The size is part of
    /// the dataset: appending at another size is refused.
    #[arg(long, value_parser = values::dataset_size, requires = "dataset")]
    pub dataset_size: Option<(u32, u32)>,
    /// Keep only the episodes the judge counts as successes.
    #[arg(long, requires = "dataset")]
    pub only_success: bool,
    /// Also keep the scene camera's depth, as lerobot stores a depth map: a video of 12-bit
    /// log-quantised depth (HEVC, lossless), `observation.images.front_depth`; on a robot, the
    /// camera's aligned depth of the same frames.
    #[arg(long, requires = "dataset")]
    pub dataset_depth: bool,
}

impl DatasetCli {
    /// Opens the dataset for `episode`'s robot and camera, or `None` without `--dataset`.
    pub fn open(
        &self,
        episode: &pointact::sim::tasks::Episode,
        options: &pointact::runner::EpisodeOptions,
    ) -> Result<Option<pointact::runner::record::DatasetRecorder>> {
        let Some(dir) = &self.dataset else {
            return Ok(None);
        };
        let recorder = pointact::runner::record::DatasetRecorder::open_for(
            dir,
            episode,
            options,
            self.dataset_fps as u32,
            self.dataset_size,
            self.only_success,
            self.dataset_depth,
        );
        self.announce(dir, recorder).map(Some)
    }

    /// Opens the dataset for a robot run of `model` seen by a camera of `camera_size`, or `None`
    /// without `--dataset`.
    pub fn open_robot(
        &self,
        model: &pointact::kinematics::RobotModel,
        camera_size: (u32, u32),
    ) -> Result<Option<pointact::runner::record::DatasetRecorder>> {
        let Some(dir) = &self.dataset else {
            return Ok(None);
        };
        let recorder = pointact::runner::record::DatasetRecorder::open(
            dir,
            model,
            self.dataset_fps as u32,
            self.dataset_size.unwrap_or(camera_size),
            self.only_success,
            self.dataset_depth,
        );
        self.announce(dir, recorder).map(Some)
    }

    /// Says what the opened dataset at `dir` holds so far.
    fn announce(
        &self,
        dir: &std::path::Path,
        recorder: Result<
            pointact::runner::record::DatasetRecorder,
            pointact::dataset::DatasetError,
        >,
    ) -> Result<pointact::runner::record::DatasetRecorder> {
        let mut recorder =
            recorder.map_err(|e| anyhow::anyhow!("--dataset {}: {e}", dir.display()))?;
        let info = recorder
            .settle()
            .map_err(|e| anyhow::anyhow!("--dataset {}: {e}", dir.display()))?
            .info();
        println!(
            "dataset   {} ({} episodes, {} frames so far, {} fps)",
            dir.display(),
            info.total_episodes,
            info.total_frames,
            info.fps
        );
        Ok(recorder)
    }
}

/// What happened to an episode's dataset entry, as one line.
pub fn recorded_line(
    kept: &Result<pointact::runner::record::Kept, pointact::dataset::DatasetError>,
) -> String {
    use pointact::runner::record::Kept;
    match kept {
        Ok(Kept::Frames(n)) => format!("dataset   episode appended ({n} frames)"),
        Ok(Kept::Skipped) => "dataset   episode left out (--only-success)".to_string(),
        Ok(Kept::NoMotion) => "dataset   episode left out: nothing moved".to_string(),
        Err(e) => format!("dataset   episode NOT written: {e}"),
    }
}

/// The conditions a simulated episode runs under: how well the oracle points, how the depth
/// sensor behaves and how far off the camera calibration is (shared by `run` and `eval sim`).
#[derive(Args, Clone, Debug)]
pub struct ConditionsCli {
    /// Gaussian pixel noise of the oracle pointer (px, finite, >= 0).
    #[arg(long, default_value_t = 0.0, value_parser = values::non_negative)]
    pub noise_px: f64,
    /// Probability that the oracle drops each point, in [0, 1].
    #[arg(long, default_value_t = 0.0, value_parser = values::probability)]
    pub drop_prob: f64,
    /// Probability that an oracle answer is confused, in [0, 1]: its points land on another
    /// object or on the table, as a model that misread the scene would answer.
    #[arg(long, default_value_t = 0.0, value_parser = values::probability)]
    pub outlier_prob: f64,
    /// Depth sensor model: ideal (exact depth) or realsense (depth noise growing with distance²,
    /// holes along silhouettes).
    #[arg(long, default_value = "ideal", value_parser = ["ideal", "realsense"])]
    pub sensor: String,
    /// Hand-eye calibration error given to the executor (mm, a random direction per episode); the
    /// simulated world keeps the true camera pose.
    #[arg(long, default_value_t = 0.0, value_parser = values::non_negative)]
    pub calib_error_mm: f64,
    /// Hand-eye calibration error (degrees, about a random axis through the camera per episode).
    #[arg(long, default_value_t = 0.0, value_parser = values::non_negative)]
    pub calib_error_deg: f64,
    /// Ask the pointer K times per question and keep the medoid answer, 1 to 32 (the oracle
    /// redraws its noise; a model needs a temperature above 0 to answer differently).
    #[arg(long, default_value_t = 1, value_parser = values::samples)]
    pub samples: usize,
}

impl ConditionsCli {
    /// These conditions on top of `opts` (the oracle's seed and the others stay).
    pub fn apply(&self, opts: &mut pointact::runner::EpisodeOptions) {
        opts.oracle.noise_px = self.noise_px;
        opts.oracle.drop_prob = self.drop_prob;
        opts.oracle.outlier_prob = self.outlier_prob;
        let seed = opts.render.seed;
        opts.render =
            pointact::sim::render::RenderOptions::sensor(&self.sensor).unwrap_or_default();
        opts.render.seed = seed;
        opts.calib_error_mm = self.calib_error_mm;
        opts.calib_error_deg = self.calib_error_deg;
        opts.samples = self.samples;
    }
}

/// A flag Ctrl-C sets, read by a suite between episodes; a second Ctrl-C ends the process at once.
pub fn stop_on_ctrl_c() -> Result<std::sync::Arc<AtomicBool>> {
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    signal_hook::flag::register_conditional_shutdown(
        signal_hook::consts::SIGINT,
        INTERRUPTED.into(),
        stop.clone(),
    )?;
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    Ok(stop)
}

/// Says which model is loading (before the progress bar), for backends that load one.
pub fn announce_model(kind: pointact::pointing::PointerKind, m: &pointact::pointing::ModelOptions) {
    if kind == pointact::pointing::PointerKind::Qwen {
        if m.device.is_cpu() {
            eprintln!("model     {} ({})", m.model, m.quant);
        } else {
            eprintln!("model     {} ({}, {})", m.model, m.quant, m.device);
        }
    }
}

pub use pointact::values;
