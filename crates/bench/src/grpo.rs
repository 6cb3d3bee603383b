//! `pointact bench grpo`: our GRPO trainer (`train::grpo`, candle) against TRL's `GRPOTrainer`
//! (PyTorch, `benches/grpo_peer/trl_peer.py`) on the same tiny Qwen2.5-VL, image, prompt, group
//! size, completion length, reward and CPU thread count, in one run: steps/s and generated
//! tokens/s, and their ratio (the goal: at least 2x TRL).
//!
//! The workload of one optimizer step, identical on both sides: `batch` prompts (the image,
//! resized to `max_pixels`, and one question) × `group` sampled completions (temperature 1, no
//! top-p or top-k) of exactly `max_new_tokens` tokens — ours stops on no token (its stop list is
//! an id outside the vocabulary), TRL sets `min_new_tokens = max_new_tokens` so EOS is never
//! sampled — the reward `characters of the decoded completion / 100`, group advantages scaled by
//! the group's unbiased std (eps 1e-4, TRL's), the token-mean loss (ours `TokenMean`, TRL
//! `loss_type="bnpo"`; with equal lengths also equal to the per-sequence mean) with the ratio
//! clipped to [0.8, 1.2] (no dual clip), one update per batch (`num_iterations` 1, no gradient
//! accumulation), AdamW (weight decay 0, constant learning rate), gradient norm clipped to 1,
//! float32, the text decoder trained and the vision tower frozen on both sides (the trainable
//! counts are checked equal), no KL unless `--beta` (k3 on both sides).
//!
//! What cannot be made equal: each side samples its own tokens (the compute does not depend on
//! which), TRL never samples EOS (its `min_new_tokens`) nor the five vision special tokens (a
//! sampled `<|image_pad|>` makes transformers' training forward fail; ours reads responses as
//! text), and each trainer keeps its own structure: ours runs the vision tower and the prompt
//! prefill once per prompt and decodes the group on a forked KV cache, TRL runs generation and
//! the training forward over `batch × group` full rows (vision included). That structure is what
//! is measured.
//!
//! Each side runs in its own process per thread count: ours is this binary re-run as
//! `bench grpo --worker REQUEST` with `RAYON_NUM_THREADS` set (candle reads it once, when its
//! pools start), TRL is the peer with `OMP_NUM_THREADS` and `torch.set_num_threads`. Both time
//! `steps` steps after one untimed warm-up step; the sides run one after the other, never at once.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{anyhow, bail, ensure, Context};
use serde::{Deserialize, Serialize};

use crate::pointing::qwen::{QwenOptions, QwenPointer};
use crate::train::grpo::objective::{AdvantageMode, Aggregation, Clip, KlKind};
use crate::train::grpo::optim::{AdamWOptions, Schedule};
use crate::train::grpo::rollout::RolloutConfig;
use crate::train::grpo::trainer::{GrpoOptions, GrpoTrainer, Sample, Scorer, Tune};

/// The question after the image (both sides render it with the model's chat template).
pub(crate) const QUESTION: &str = "Point to the red block.";
/// Never a token id: ours then stops on nothing and every completion is `max_new_tokens` long.
const NO_STOP: u32 = u32::MAX;

/// The tiny fixture model (random weights, 1024-token tokenizer).
pub fn default_model() -> PathBuf {
    crate::workspace_root().join("tests/fixtures/qwen25vl_tiny")
}

/// Options of `pointact bench grpo`.
#[derive(Debug, Clone)]
pub struct GrpoBenchArgs {
    pub model: PathBuf,
    pub image: PathBuf,
    /// Timed steps (after one warm-up step).
    pub steps: usize,
    /// Prompts per step.
    pub batch: usize,
    /// Completions per prompt.
    pub group: usize,
    /// Tokens per completion, exactly.
    pub max_new_tokens: usize,
    /// Thread counts to measure, each on both sides.
    pub threads: Vec<usize>,
    /// The image processor's pixel budget on both sides.
    pub max_pixels: u64,
    pub lr: f64,
    /// KL coefficient (k3 estimator); 0: off, no reference model.
    pub beta: f64,
    pub seed: u64,
    /// The peer's Python; `None`: `benches/grpo_peer/setup.sh` makes its venv.
    pub python: Option<String>,
    /// Run the TRL peer.
    pub peer: bool,
}

/// What both sides read (`request.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Request {
    pub model_dir: PathBuf,
    pub image: PathBuf,
    pub question: String,
    pub max_pixels: u64,
    pub batch: usize,
    pub group: usize,
    pub max_new_tokens: usize,
    pub steps: usize,
    pub threads: usize,
    pub lr: f64,
    pub beta: f64,
    pub seed: u64,
}

/// What one side measured (the peer prints the same fields).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// Timed steps.
    pub steps: usize,
    /// Their wall time, s.
    pub seconds: f64,
    pub step_seconds: Vec<f64>,
    /// Of the timed steps' wall time: generating and scoring the completions (ours: vision,
    /// prefill, decoding, rewards; TRL: its `_generate_and_score_completions`), s.
    #[serde(default)]
    pub rollout_seconds: Option<f64>,
    /// Prompt length, image tokens included.
    pub prompt_tokens: usize,
    pub image_tokens: usize,
    /// Shortest and longest completion (tokens) over the run.
    pub min_length: Option<f64>,
    pub max_length: Option<f64>,
    /// Trainable parameters.
    pub trainable: usize,
    /// Threads the side's kernels ran on.
    pub threads: usize,
    pub version: String,
}

impl Measured {
    pub(crate) fn steps_per_s(&self) -> f64 {
        self.steps as f64 / self.seconds
    }

    fn median_step_s(&self) -> f64 {
        let mut s = self.step_seconds.clone();
        s.sort_by(f64::total_cmp);
        s.get(s.len() / 2).copied().unwrap_or(f64::NAN)
    }
}

/// One thread count: ours, and TRL's measurement or why there is none.
#[derive(Debug, Clone)]
pub struct Row {
    pub threads: usize,
    pub ours: Measured,
    pub peer: Result<Measured, String>,
}

pub struct GrpoBenchReport {
    pub cpu: String,
    pub args: GrpoBenchArgs,
    pub rows: Vec<Row>,
}

impl GrpoBenchReport {
    fn tokens_per_step(&self) -> f64 {
        (self.args.batch * self.args.group * self.args.max_new_tokens) as f64
    }
}

impl std::fmt::Display for GrpoBenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let a = &self.args;
        let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
        writeln!(f, "cpu       {} ({cores} logical cores)", self.cpu)?;
        if let Some(r) = self.rows.first() {
            writeln!(
                f,
                "model     {} ({} trainable: text decoder, vision frozen; f32)",
                a.model.display(),
                r.ours.trainable
            )?;
            writeln!(
                f,
                "workload  {} prompts x {} completions x {} new tokens (exactly) per step; \
                 prompt {} tokens ({} image tokens, max_pixels {}); {}; lr {:e}",
                a.batch,
                a.group,
                a.max_new_tokens,
                r.ours.prompt_tokens,
                r.ours.image_tokens,
                a.max_pixels,
                if a.beta > 0.0 {
                    format!("k3 KL, beta {}", a.beta)
                } else {
                    "no KL".to_string()
                },
                a.lr
            )?;
        }
        writeln!(
            f,
            "timing    {} steps after 1 untimed warm-up step, each side in its own process",
            a.steps
        )?;
        writeln!(
            f,
            "{:>7}  {:<30} {:>8} {:>10} {:>14} {:>10}",
            "threads", "trainer", "steps/s", "tokens/s", "median s/step", "rollout %"
        )?;
        let tps = self.tokens_per_step();
        let mut version = None;
        for r in &self.rows {
            let line = |f: &mut std::fmt::Formatter<'_>, name: &str, m: &Measured| {
                writeln!(
                    f,
                    "{:>7}  {:<30} {:>8.3} {:>10.0} {:>14.3} {:>10}",
                    r.threads,
                    name,
                    m.steps_per_s(),
                    m.steps_per_s() * tps,
                    m.median_step_s(),
                    m.rollout_seconds
                        .map_or("-".to_string(), |r| format!("{:.0}", 100.0 * r / m.seconds))
                )
            };
            line(f, "pointact GrpoTrainer (candle)", &r.ours)?;
            match &r.peer {
                Ok(p) => {
                    line(f, "TRL GRPOTrainer (torch)", p)?;
                    writeln!(
                        f,
                        "{:>7}  ratio ours / TRL: {:.2}x (goal >= 2x)",
                        "",
                        r.ours.steps_per_s() / p.steps_per_s()
                    )?;
                    version = Some(p.version.clone());
                }
                Err(why) => writeln!(f, "{:>7}  TRL: not measured: {why}", "")?,
            }
        }
        if let Some(r) = self.rows.first() {
            writeln!(f, "ours      {}", r.ours.version)?;
        }
        match version {
            Some(v) => write!(f, "peer      {v}"),
            None => write!(f, "peer      (none)"),
        }
    }
}

/// Runs the benchmark (see the module doc). Must run inside the `pointact` binary: our side is
/// this executable re-run with `bench grpo --worker`.
pub fn run(args: &GrpoBenchArgs) -> anyhow::Result<GrpoBenchReport> {
    ensure!(args.steps >= 1, "--steps must be at least 1");
    ensure!(args.batch >= 1, "--batch must be at least 1");
    ensure!(
        args.group >= 2,
        "--group must be at least 2 (advantages need a group)"
    );
    ensure!(
        args.max_new_tokens >= 1,
        "--max-new-tokens must be at least 1"
    );
    ensure!(
        !args.threads.is_empty() && args.threads.iter().all(|&t| t >= 1),
        "--threads must be at least 1"
    );
    let model = std::fs::canonicalize(&args.model)
        .with_context(|| format!("model folder {}", args.model.display()))?;
    let image = std::fs::canonicalize(&args.image)
        .with_context(|| format!("image {}", args.image.display()))?;

    let work = work_dir()?;
    let result = measure(args, &model, &image, &work);
    let _ = std::fs::remove_dir_all(&work); // best effort: a temporary folder
    result
}

fn measure(
    args: &GrpoBenchArgs,
    model: &Path,
    image: &Path,
    work: &Path,
) -> anyhow::Result<GrpoBenchReport> {
    let python = if args.peer {
        match &args.python {
            Some(p) => Ok(p.clone()),
            None => setup_peer(),
        }
    } else {
        Err("--no-python".to_string())
    };
    let mut rows = Vec::new();
    for &threads in &args.threads {
        let request = Request {
            model_dir: model.to_path_buf(),
            image: image.to_path_buf(),
            question: QUESTION.to_string(),
            max_pixels: args.max_pixels,
            batch: args.batch,
            group: args.group,
            max_new_tokens: args.max_new_tokens,
            steps: args.steps,
            threads,
            lr: args.lr,
            beta: args.beta,
            seed: args.seed,
        };
        let path = work.join(format!("request-{threads}.json"));
        std::fs::write(&path, serde_json::to_string_pretty(&request)?)
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("bench grpo: ours, {threads} thread(s)");
        let ours = spawn_worker(&path, threads)?;
        check_length(&ours, args.max_new_tokens, "ours")?;
        let peer = match &python {
            Ok(py) => {
                eprintln!("bench grpo: TRL, {threads} thread(s) ({py})");
                run_peer(py, &path, threads)
            }
            Err(why) => Err(why.clone()),
        };
        if let Ok(p) = &peer {
            check_length(p, args.max_new_tokens, "TRL")?;
            ensure!(
                (p.prompt_tokens, p.image_tokens, p.trainable)
                    == (ours.prompt_tokens, ours.image_tokens, ours.trainable),
                "the sides disagree on the workload: TRL has {} prompt tokens ({} image), {} \
                     trainable; ours {} ({}), {}",
                p.prompt_tokens,
                p.image_tokens,
                p.trainable,
                ours.prompt_tokens,
                ours.image_tokens,
                ours.trainable
            );
        }
        rows.push(Row {
            threads,
            ours,
            peer,
        });
    }
    Ok(GrpoBenchReport {
        cpu: crate::cpu_model(),
        args: GrpoBenchArgs {
            model: model.to_path_buf(),
            image: image.to_path_buf(),
            ..args.clone()
        },
        rows,
    })
}

/// Every completion must have had exactly `len` tokens, or the two sides did different work.
fn check_length(m: &Measured, len: usize, side: &str) -> anyhow::Result<()> {
    let want = len as f64;
    ensure!(
        m.min_length == Some(want) && m.max_length == Some(want),
        "{side}: completions of {:?}..{:?} tokens, not exactly {len}",
        m.min_length,
        m.max_length
    );
    Ok(())
}

fn work_dir() -> anyhow::Result<PathBuf> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!(
        "pointact-bench-grpo-{}-{nanos}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// Runs `benches/grpo_peer/setup.sh` (venv and pinned packages, first run only) and returns its
/// Python; `Err` says why there is none (reported, not fatal).
fn setup_peer() -> Result<String, String> {
    let script = crate::workspace_root().join("benches/grpo_peer/setup.sh");
    eprintln!(
        "bench grpo: setting up the TRL peer ({}) ...",
        script.display()
    );
    let out = Command::new("bash")
        .arg(&script)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} failed ({}); its messages are above",
            script.display(),
            out.status
        ));
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .ok_or_else(|| "setup.sh printed no python".to_string())
}

/// Parses the last stdout line of a side as [`Measured`].
fn parse_last_line(stdout: &[u8]) -> Result<Measured, String> {
    let text = String::from_utf8_lossy(stdout);
    let line = text.lines().last().unwrap_or("");
    serde_json::from_str(line).map_err(|e| format!("unreadable output ({e}): {line}"))
}

/// Runs the TRL peer on `request` with `threads` threads.
fn run_peer(python: &str, request: &Path, threads: usize) -> Result<Measured, String> {
    let script = crate::workspace_root().join("benches/grpo_peer/trl_peer.py");
    let n = threads.to_string();
    let out = Command::new(python)
        .arg(&script)
        .arg(request)
        // Read by OpenMP / MKL when torch loads; the script also calls torch.set_num_threads.
        .env("OMP_NUM_THREADS", &n)
        .env("MKL_NUM_THREADS", &n)
        .env("TOKENIZERS_PARALLELISM", "false")
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run `{python}` ({e}); pass --python PATH"))?;
    if !out.status.success() {
        return Err(format!(
            "trl_peer.py failed ({}); its messages are above",
            out.status
        ));
    }
    parse_last_line(&out.stdout)
}

/// Runs our side in a child process of this binary with `threads` threads.
fn spawn_worker(request: &Path, threads: usize) -> anyhow::Result<Measured> {
    let exe = std::env::current_exe().context("cannot find this executable")?;
    let n = threads.to_string();
    let out = Command::new(&exe)
        .args(["bench", "grpo", "--worker"])
        .arg(request)
        .env("RAYON_NUM_THREADS", &n)
        .env("CANDLE_NUM_THREADS", &n)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot start {}", exe.display()))?;
    if !out.status.success() {
        bail!("our worker failed ({}); its messages are above", out.status);
    }
    parse_last_line(&out.stdout).map_err(|e| anyhow!("our worker: {e}"))
}

/// The child side (`bench grpo --worker REQUEST`): loads the model, builds the trainer with the
/// settings of the module doc, runs one warm-up step and times `steps` more.
pub fn worker(request: &Path) -> anyhow::Result<Measured> {
    let req: Request = serde_json::from_str(
        &std::fs::read_to_string(request)
            .with_context(|| format!("reading {}", request.display()))?,
    )?;
    let dir = req.model_dir.to_string_lossy();
    let parts = QwenPointer::load(
        &dir,
        QwenOptions {
            progress: false,
            max_pixels: Some(req.max_pixels),
            ..QwenOptions::default()
        },
    )?
    .into_parts();
    let img = image::open(&req.image)
        .with_context(|| format!("image {}", req.image.display()))?
        .to_rgb8();
    let image_tokens = parts.processor.preprocess_rgb(&img)?.num_image_tokens();
    let prompt_tokens = parts
        .tokenizer
        .prompt_ids(&req.question, parts.system.as_deref(), image_tokens)?
        .len();

    let options = GrpoOptions {
        rollout: RolloutConfig {
            group: req.group,
            max_new_tokens: req.max_new_tokens,
            temperature: 1.0,
            top_p: 1.0,
            stop_ids: vec![NO_STOP],
        },
        advantage: AdvantageMode::Group {
            eps: 1e-4,
            unbiased: true,
        },
        drop_flat_groups: false,
        clip: Clip {
            low: 0.2,
            high: 0.2,
            dual: None,
        },
        kl: (req.beta > 0.0).then_some((KlKind::K3, req.beta)),
        aggregation: Aggregation::TokenMean,
        adamw: AdamWOptions {
            lr: req.lr,
            weight_decay: 0.0,
            ..AdamWOptions::default()
        },
        schedule: Schedule::Constant { warmup: 0 },
        max_grad_norm: Some(1.0),
        ..GrpoOptions::default()
    };
    let mut trainer = GrpoTrainer::new(parts, &Tune::Full { modules: vec![] }, options, None)?;
    // `new` fills an empty stop list from the model; keep ours (stop on nothing) regardless.
    trainer.options.rollout.stop_ids = vec![NO_STOP];
    let batch: Vec<Sample> = (0..req.batch)
        .map(|i| Sample {
            id: format!("q{i}"),
            task: "length".into(),
            question: req.question.clone(),
            image: Some(img.clone()),
            system: None,
            ground_truth: String::new(),
        })
        .collect();
    let length_reward =
        |response: &str, _gt: &str, _question: &str| -> Result<Vec<(String, f64)>, String> {
            Ok(vec![(
                "overall".to_string(),
                response.chars().count() as f64 / 100.0,
            )])
        };
    let scorer: &Scorer<'_> = &length_reward;

    let (mut min_len, mut max_len) = (f64::INFINITY, f64::NEG_INFINITY);
    let mut step_seconds = Vec::with_capacity(req.steps);
    let mut rollout_seconds = 0.0;
    let mut start = None;
    for k in 0..=req.steps {
        let t = Instant::now();
        let m = trainer.step(&batch, scorer, req.seed.wrapping_add(k as u64))?;
        if k == 0 {
            start = Some(Instant::now()); // the warm-up step is not timed
        } else {
            step_seconds.push(t.elapsed().as_secs_f64());
            rollout_seconds += m.rollout_seconds;
        }
        if let Some(why) = m.skipped {
            bail!("step {k} was skipped ({why}): the timing would not be a full step");
        }
        // All responses were truncated at max_new_tokens: each has exactly that many tokens.
        let len = if m.truncated == 1.0 {
            m.response_length
        } else {
            f64::NAN
        };
        min_len = min_len.min(len);
        max_len = max_len.max(len);
    }
    let seconds = start.map_or(f64::NAN, |s| s.elapsed().as_secs_f64());
    Ok(Measured {
        steps: req.steps,
        seconds,
        step_seconds,
        rollout_seconds: Some(rollout_seconds),
        prompt_tokens,
        image_tokens,
        min_length: min_len.is_finite().then_some(min_len),
        max_length: max_len.is_finite().then_some(max_len),
        trainable: trainer.trainable_count(),
        threads: candle_core::utils::get_num_threads(),
        version: format!("pointact {}, candle 0.11", env!("CARGO_PKG_VERSION")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peer_output_parses_and_rates_are_per_timed_step() {
        let line = br#"noise
{"steps": 4, "seconds": 2.0, "step_seconds": [0.4, 0.6, 0.5, 0.5], "prompt_tokens": 52,
 "image_tokens": 12, "min_length": 32.0, "max_length": 32.0, "trainable": 139840,
 "threads": 1, "version": "trl", "rollout_seconds": 1.0}"#;
        // The JSON must be one line; a multi-line object is refused, not half-read.
        assert!(parse_last_line(line).is_err());
        let one_line = String::from_utf8_lossy(line).replace('\n', " ");
        let m = parse_last_line(one_line.trim_start_matches("noise ").as_bytes()).unwrap();
        assert_eq!(m.steps_per_s(), 2.0);
        assert_eq!(m.median_step_s(), 0.5);
        assert_eq!(m.rollout_seconds, Some(1.0));
        assert!(check_length(&m, 32, "x").is_ok());
        assert!(check_length(&m, 31, "x").is_err());
    }
}
