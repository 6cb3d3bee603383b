//! `pointact train grpo`: GRPO fine-tuning of the pointing model on JSONL records
//! (`train::grpo::run` behind flags), with a progress bar, metrics JSONL, checkpoints and resume.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use pointact::pointing::qwen::{QwenOptions, QwenParts, QwenPointer};
use pointact::train::grpo::checkpoint::{self, TrainerState};
use pointact::train::grpo::data::load_records;
use pointact::train::grpo::objective::{AdvantageMode, Aggregation, Clip, KlKind};
use pointact::train::grpo::optim::{AdamWOptions, Schedule};
use pointact::train::grpo::rollout::RolloutConfig;
use pointact::train::grpo::run::{self, RunEnd, RunEvent, RunOptions};
use pointact::train::grpo::spatial::{NoReference, SpatialScoring};
use pointact::train::grpo::trainer::{
    EvalMetrics, GrpoOptions, GrpoTrainer, StepMetrics, TaskMetrics, Tune,
};

#[derive(Clone, Copy, ValueEnum)]
pub enum AdvantageArg {
    /// (r − mean) / (std + 1e-6) per group (GRPO; EasyR1).
    Group,
    /// Group mean, batch std.
    BatchStd,
    /// r − mean (Dr.GRPO).
    NoStd,
    /// Leave-one-out baseline.
    Rloo,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum KlArg {
    /// low_var_kl (k3), EasyR1's.
    K3,
    /// k1: log π − log π_ref per token.
    K1,
    /// |k1|.
    Abs,
    /// k2: ½ (log π − log π_ref)².
    K2,
    /// No KL term and no reference model.
    None,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum AggArg {
    /// All response tokens of the batch / their count (DAPO, verl).
    TokenMean,
    /// Each response's token mean, then the mean (the GRPO paper).
    SeqMeanTokenMean,
    /// Each response's token sum, then the mean.
    SeqMeanTokenSum,
    /// Each response's token sum / max-new-tokens, then the mean (Dr.GRPO).
    SeqMeanTokenSumNorm,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum ScheduleArg {
    /// Linear warm-up, then the peak --lr (EasyR1's default).
    Constant,
    /// Linear warm-up, then a cosine from the peak down over --steps.
    Cosine,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum TuneArg {
    /// Full fine-tuning of the chosen decoder weights.
    Full,
    /// LoRA adapters on the chosen decoder linears.
    Lora,
}

#[derive(Args)]
pub struct GrpoCli {
    /// The model to start from: a Hugging Face folder (or hub repo id in the cache).
    #[arg(long)]
    model: String,
    /// Training records (EasyR1 JSONL: problem, answer with its `<type>`, images), e.g. from
    /// `pointact train data`.
    #[arg(long)]
    data: PathBuf,
    /// Held-out records, scored with greedy answers before, during and after training.
    #[arg(long)]
    eval_data: Option<PathBuf>,
    /// At most this many held-out records.
    #[arg(long, default_value_t = 64)]
    eval_max: usize,
    /// Evaluate every N steps (0: never).
    #[arg(long, default_value_t = 10)]
    eval_every: u64,
    /// Run folder: checkpoints, metrics.jsonl.
    #[arg(long, default_value = "grpo-run")]
    out: PathBuf,
    /// Total updates.
    #[arg(long, default_value_t = 100)]
    steps: u64,
    /// Questions per update.
    #[arg(long, default_value_t = 4)]
    batch: usize,
    /// Responses per question (G).
    #[arg(long, default_value_t = 5)]
    group: usize,
    /// Longest sampled response, in tokens (a longer one is cut and counted as truncated).
    #[arg(long, default_value_t = 256)]
    max_new_tokens: usize,
    /// Sampling temperature of the rollouts (> 0 for a group to answer differently).
    #[arg(long, default_value_t = 1.0, value_parser = super::values::non_negative)]
    temperature: f64,
    /// Nucleus sampling of the rollouts, in [0, 1] (1 keeps every token).
    #[arg(long, default_value_t = 1.0, value_parser = super::values::probability)]
    top_p: f64,
    /// How a response's reward becomes its advantage.
    #[arg(long, value_enum, default_value = "group")]
    advantage: AdvantageArg,
    /// Leave groups whose rewards are all equal out of the loss (DAPO's dynamic sampling).
    #[arg(long)]
    drop_flat_groups: bool,
    /// Ratio clip below 1.
    #[arg(long, default_value_t = 0.2, value_parser = super::values::non_negative)]
    clip_low: f64,
    /// Ratio clip above 1 (> clip-low: DAPO's clip-higher).
    #[arg(long, default_value_t = 0.3, value_parser = super::values::non_negative)]
    clip_high: f64,
    /// Dual clip for negative advantages (0: off).
    #[arg(long, default_value_t = 3.0, value_parser = super::values::non_negative)]
    dual_clip: f64,
    /// KL penalty to the frozen starting model, per token.
    #[arg(long, value_enum, default_value = "k3")]
    kl: KlArg,
    /// Weight of the KL term in the loss.
    #[arg(long, default_value_t = 1e-2, value_parser = super::values::non_negative)]
    kl_coef: f64,
    /// How per-token losses of a batch are averaged into one.
    #[arg(long, value_enum, default_value = "token-mean")]
    loss_agg: AggArg,
    /// Peak learning rate of AdamW.
    #[arg(long, default_value_t = 1e-6, value_parser = super::values::non_negative)]
    lr: f64,
    /// AdamW's decoupled weight decay.
    #[arg(long, default_value_t = 1e-2, value_parser = super::values::non_negative)]
    weight_decay: f64,
    /// Updates of linear learning-rate warm-up (0: none).
    #[arg(long, default_value_t = 0)]
    warmup: u64,
    /// Learning-rate schedule after the warm-up.
    #[arg(long, value_enum, default_value = "constant")]
    schedule: ScheduleArg,
    /// Global gradient-norm limit (0: none).
    #[arg(long, default_value_t = 1.0, value_parser = super::values::non_negative)]
    max_grad_norm: f64,
    /// What trains: the chosen decoder weights themselves, or LoRA adapters on them (the vision
    /// tower stays frozen either way).
    #[arg(long, value_enum, default_value = "full")]
    tune: TuneArg,
    /// Which decoder weights train: names containing any of these (e.g. q_proj,v_proj); empty:
    /// all (full) or all seven linears per layer (LoRA).
    #[arg(long, value_delimiter = ',')]
    modules: Vec<String>,
    /// LoRA: rank of each adapter.
    #[arg(long, default_value_t = 16)]
    lora_rank: usize,
    /// LoRA: scale numerator (the update is alpha / rank · B·A, as PEFT).
    #[arg(long, default_value_t = 32.0, value_parser = super::values::non_negative)]
    lora_alpha: f64,
    /// Image pixel budget of the processor (fewer pixels: fewer image tokens, faster steps).
    #[arg(long)]
    max_pixels: Option<u64>,
    /// A checkpoint every N steps (and at the end, and on Ctrl-C).
    #[arg(long, default_value_t = 20)]
    save_every: u64,
    /// Checkpoints kept.
    #[arg(long, default_value_t = 2)]
    keep: usize,
    /// Keep the records' file order instead of a seeded shuffle per epoch.
    #[arg(long)]
    no_shuffle: bool,
    /// Continue from OUT/latest (same flags; the step count continues to --steps).
    #[arg(long)]
    resume: bool,
    /// Non-finite steps in a row that stop the run.
    #[arg(long, default_value_t = 3)]
    max_nan_steps: usize,
    /// `spatial` records: weight of Embodied-R's logic-consistency reward (0.2 as released; 0
    /// trains on 0.7 accuracy + 0.1 format alone). Its judge is the think text's own answer (the
    /// released fallback), not a reference model.
    #[arg(long, default_value_t = 0.2, value_parser = super::values::non_negative)]
    consistency_weight: f64,
    /// Seed of the data shuffle, the LoRA adapters' initialisation and the rollouts' sampling.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    #[command(flatten)]
    rerun: super::RerunCli,
    /// CPU threads of the tensor kernels (default: all cores). For tiny models 1 is often
    /// fastest: the thread pool's synchronisation costs more than small products gain.
    #[arg(long)]
    threads: Option<usize>,
    /// Where the policy (and the KL reference) run: cpu, cuda or cuda:N (a `cuda` build).
    #[arg(long, default_value = "cpu")]
    device: pointact::vlm::DeviceSpec,
}

impl GrpoCli {
    fn options(&self) -> GrpoOptions {
        GrpoOptions {
            rollout: RolloutConfig {
                group: self.group.max(1),
                max_new_tokens: self.max_new_tokens,
                temperature: self.temperature,
                top_p: self.top_p,
                stop_ids: Vec::new(),
            },
            advantage: match self.advantage {
                AdvantageArg::Group => AdvantageMode::default(),
                AdvantageArg::BatchStd => AdvantageMode::BatchStd {
                    eps: 1e-6,
                    unbiased: true,
                },
                AdvantageArg::NoStd => AdvantageMode::NoStd,
                AdvantageArg::Rloo => AdvantageMode::Rloo,
            },
            drop_flat_groups: self.drop_flat_groups,
            clip: Clip {
                low: self.clip_low,
                high: self.clip_high,
                dual: (self.dual_clip > 0.0).then_some(self.dual_clip),
            },
            kl: match self.kl {
                KlArg::None => None,
                KlArg::K3 => Some((KlKind::K3, self.kl_coef)),
                KlArg::K1 => Some((KlKind::K1, self.kl_coef)),
                KlArg::Abs => Some((KlKind::Abs, self.kl_coef)),
                KlArg::K2 => Some((KlKind::K2, self.kl_coef)),
            },
            aggregation: match self.loss_agg {
                AggArg::TokenMean => Aggregation::TokenMean,
                AggArg::SeqMeanTokenMean => Aggregation::SeqMeanTokenMean,
                AggArg::SeqMeanTokenSum => Aggregation::SeqMeanTokenSum,
                AggArg::SeqMeanTokenSumNorm => Aggregation::SeqMeanTokenSumNorm {
                    max_len: self.max_new_tokens,
                },
            },
            adamw: AdamWOptions {
                lr: self.lr,
                weight_decay: self.weight_decay,
                ..AdamWOptions::default()
            },
            schedule: match self.schedule {
                ScheduleArg::Constant => Schedule::Constant {
                    warmup: self.warmup,
                },
                ScheduleArg::Cosine => Schedule::Cosine {
                    warmup: self.warmup,
                    total: self.steps,
                    min_ratio: 0.0,
                },
            },
            max_grad_norm: (self.max_grad_norm > 0.0).then_some(self.max_grad_norm),
            max_nan_steps: self.max_nan_steps.max(1),
        }
    }

    fn tune(&self) -> Tune {
        match self.tune {
            TuneArg::Full => Tune::Full {
                modules: self.modules.clone(),
            },
            TuneArg::Lora => Tune::Lora {
                rank: self.lora_rank.max(1),
                alpha: self.lora_alpha,
                modules: self.modules.clone(),
                seed: self.seed,
            },
        }
    }

    fn load(&self, spec: &str) -> Result<QwenParts> {
        let opts = QwenOptions {
            max_pixels: self.max_pixels,
            device: self.device,
            ..QwenOptions::default()
        };
        Ok(QwenPointer::load(spec, opts)
            .with_context(|| format!("loading {spec}"))?
            .into_parts())
    }
}

pub fn run(a: GrpoCli) -> Result<ExitCode> {
    if let Some(n) = a.threads {
        // Read by the tensor kernels' thread pool when it first starts (below).
        std::env::set_var("RAYON_NUM_THREADS", n.max(1).to_string());
    }
    let (train, skipped) = load_records(&a.data)?;
    for line in skipped.to_string().lines() {
        eprintln!("warning: {}: {line}", a.data.display());
    }
    if train.is_empty() {
        bail!("{}: no usable training record", a.data.display());
    }
    let eval_records = match &a.eval_data {
        Some(p) => {
            let (r, skipped) = load_records(p)?;
            for line in skipped.to_string().lines() {
                eprintln!("warning: {}: {line}", p.display());
            }
            r
        }
        None => Vec::new(),
    };
    let mut eval = Vec::new();
    for r in eval_records.iter().take(a.eval_max) {
        match run::sample(r) {
            Ok(s) => eval.push(s),
            Err(why) => eprintln!("warning: held-out record {} left out: {why}", r.id),
        }
    }

    let options = a.options();
    let tune = a.tune();
    let resume_from = if a.resume {
        checkpoint::latest(&a.out)?
    } else {
        if checkpoint::latest(&a.out)?.is_some() {
            bail!(
                "{} already holds a run: pass --resume to continue it, or another --out",
                a.out.display()
            );
        }
        None
    };
    let (mut trainer, mut state) = match &resume_from {
        None => {
            let parts = a.load(&a.model)?;
            // Absolute, so that `--resume` from another folder finds the KL reference and the
            // LoRA base again.
            let base = std::fs::canonicalize(&parts.files.dir).unwrap_or(parts.files.dir.clone());
            let trainer = GrpoTrainer::new(parts, &tune, options, None)?;
            let state = TrainerState {
                step: 0,
                seed: a.seed,
                base_model: base,
                samples_seen: 0,
                settings: settings(&a),
            };
            (trainer, state)
        }
        Some(dir) => resume(&a, dir, &tune, options)?,
    };
    eprintln!(
        "training {} weights ({} values) of {} on {} records{}; run folder {}",
        trainer.params().len(),
        trainer.trainable_count(),
        state.base_model.display(),
        train.len(),
        if eval.is_empty() {
            String::new()
        } else {
            format!(", {} held out", eval.len())
        },
        a.out.display()
    );

    let kinds: std::collections::HashMap<String, _> = train
        .iter()
        .chain(&eval_records)
        .map(|r| (r.ground_truth.clone(), r.kind))
        .collect();
    let scorer = |response: &str, gt: &str, question: &str| {
        let kind = kinds
            .get(gt)
            .copied()
            .or_else(|| pointact::train::grpo::data::classify(gt).ok())
            .ok_or_else(|| "unknown ground truth".to_string())?;
        let mut judge = NoReference;
        let mut spatial = SpatialScoring {
            reference: &mut judge,
            consistency_weight: a.consistency_weight,
        };
        run::score_with(kind, response, gt, Some(question), &mut spatial)
    };
    let stop = super::stop_on_ctrl_c()?;
    let bar = indicatif::ProgressBar::new(a.steps);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} steps ({eta}) {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar.set_position(state.step);
    let opts = RunOptions {
        out: a.out.clone(),
        steps: a.steps,
        batch: a.batch.max(1),
        save_every: a.save_every,
        keep: a.keep,
        eval_every: if eval.is_empty() { 0 } else { a.eval_every },
        shuffle: !a.no_shuffle,
    };
    let mut viz = a.rerun.open("pointact-train")?;
    let mut last_eval = String::new();
    let summary = run::run(
        &mut trainer,
        &train,
        &eval,
        &scorer,
        &opts,
        &mut state,
        &stop,
        &mut |e| match e {
            RunEvent::Step(m) => {
                if let Some(v) = viz.as_mut() {
                    v.log_training(m.step + 1, &step_scalars(m));
                }
                bar.set_position(m.step + 1);
                let skipped = m
                    .skipped
                    .as_deref()
                    .map(|s| format!(" (skipped: {s})"))
                    .unwrap_or_default();
                bar.set_message(format!(
                    "reward {:.3} kl {:.4} len {:.0}{last_eval}{skipped}",
                    m.reward, m.kl, m.response_length
                ));
            }
            RunEvent::Eval(e) => {
                if let Some(v) = viz.as_mut() {
                    v.log_training(e.step, &eval_scalars(e));
                }
                last_eval = format!(" held-out {:.3}", e.reward);
                bar.println(format!("step {}: held-out reward {:.3}", e.step, e.reward));
            }
            RunEvent::Saved(p) => bar.println(format!("saved {}", p.display())),
            RunEvent::Skipped(id, why) => bar.println(format!("skipped record {id}: {why}")),
        },
    )?;
    bar.finish_and_clear();
    super::finish_viz(viz)?;
    if let (Some(first), Some(last)) = (&summary.first_eval, &summary.last_eval) {
        println!(
            "held-out reward {:.3} (step {}) -> {:.3} (step {})",
            first.reward, first.step, last.reward, last.step
        );
    }
    if let Some(dir) = &summary.last_checkpoint {
        println!(
            "checkpoint {} (load it with `pointact point --model {}`)",
            dir.display(),
            dir.display()
        );
    }
    println!("metrics {}", a.out.join("metrics.jsonl").display());
    Ok(match summary.end {
        RunEnd::Finished => ExitCode::SUCCESS,
        RunEnd::Interrupted => {
            eprintln!(
                "interrupted at step {}: resume with the same flags and --resume",
                summary.steps
            );
            ExitCode::from(super::INTERRUPTED)
        }
    })
}

/// The trainer and state of the checkpoint `dir`: a full fine-tune continues from the
/// checkpoint's weights, LoRA from the base model plus the checkpoint's adapters; the KL
/// reference is always the run's base model.
fn resume(
    a: &GrpoCli,
    dir: &Path,
    tune: &Tune,
    options: GrpoOptions,
) -> Result<(GrpoTrainer, TrainerState)> {
    let (state, optim) = checkpoint::load_state(dir)?;
    let base = state.base_model.display().to_string();
    let mut trainer = match tune {
        Tune::Full { .. } => {
            let parts = a.load(&dir.display().to_string())?;
            let reference = match options.kl {
                Some(_) => Some(a.load(&base)?.model.text),
                None => None,
            };
            GrpoTrainer::new(parts, tune, options, reference)?
        }
        Tune::Lora { .. } => {
            let parts = a.load(&base)?;
            let device = parts.model.device().clone();
            let mut t = GrpoTrainer::new(parts, tune, options, None)?;
            let adapters =
                candle_core::safetensors::load(dir.join("adapter_model.safetensors"), &device)
                    .with_context(|| format!("{}: no LoRA adapters to resume", dir.display()))?;
            t.restore(&adapters)?;
            t
        }
    };
    trainer
        .optimizer_mut()
        .load_state(&optim, state.step)
        .with_context(|| format!("{}: the optimizer state does not fit", dir.display()))?;
    trainer.step = state.step;
    eprintln!("resuming {} at step {}", dir.display(), state.step);
    Ok((trainer, state))
}

/// A step's metrics as rerun scalars: the totals, then per task its reward and components.
fn step_scalars(m: &StepMetrics) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> = [
        ("reward", m.reward),
        ("reward_std", m.reward_std),
        ("loss", m.loss),
        ("kl", m.kl),
        ("clip_fraction", m.clip_fraction),
        ("entropy", m.entropy),
        ("response_length", m.response_length),
        ("truncated", m.truncated),
        ("grad_norm", m.grad_norm),
        ("lr", m.lr),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    out.extend(task_scalars("", &m.tasks));
    out
}

/// A held-out evaluation's metrics as rerun scalars, under `eval/`.
fn eval_scalars(e: &EvalMetrics) -> Vec<(String, f64)> {
    let mut out = vec![("eval/reward".to_string(), e.reward)];
    out.extend(task_scalars("eval/", &e.tasks));
    out
}

fn task_scalars(
    prefix: &str,
    tasks: &std::collections::BTreeMap<String, TaskMetrics>,
) -> Vec<(String, f64)> {
    tasks
        .iter()
        .flat_map(|(task, t)| {
            t.components
                .iter()
                .map(move |(k, v)| (format!("{prefix}{task}/{k}"), *v))
        })
        .collect()
}

/// The flags, for the checkpoint's record.
fn settings(a: &GrpoCli) -> serde_json::Value {
    serde_json::json!({
        "model": a.model, "data": a.data, "steps": a.steps, "batch": a.batch,
        "group": a.group, "max_new_tokens": a.max_new_tokens, "temperature": a.temperature,
        "top_p": a.top_p, "lr": a.lr, "weight_decay": a.weight_decay, "kl_coef": a.kl_coef,
        "clip_low": a.clip_low, "clip_high": a.clip_high, "dual_clip": a.dual_clip,
        "max_grad_norm": a.max_grad_norm, "lora_rank": a.lora_rank, "lora_alpha": a.lora_alpha,
        "modules": a.modules, "max_pixels": a.max_pixels, "seed": a.seed,
        "consistency_weight": a.consistency_weight,
    })
}
