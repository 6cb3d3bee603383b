//! One GRPO step, end to end: G rollouts per question (batched on the KV cache), the rewards,
//! group advantages, the clipped surrogate with the KL to a frozen reference, one backward pass
//! per group (gradients summed), the norm clipped, one AdamW update. Plus greedy evaluation on
//! held-out questions, and the step's metrics.
//!
//! With one update per batch of rollouts (`num_iterations = 1`, EasyR1's and TRL's default) the
//! "old" policy is the current one: `logπ_old` is the training pass's own log-probabilities,
//! detached, so the ratio is exactly 1 and only its gradient matters (as TRL's
//! `GRPOTrainer._compute_loss` does with `num_iterations == 1`). The loss of the whole batch is
//! aggregated as one (token-mean over all the batch's response tokens, or the mean over all its
//! sequences): each group's part is scaled by its share before its backward pass, so the summed
//! gradients equal those of the batch's single loss.
//!
//! A step whose loss or gradient is not finite changes nothing and is reported; after
//! `max_nan_steps` such steps in a row the run stops with [`TrainError::NonFinite`].

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use candle_core::backprop::GradStore;
use candle_core::{Tensor, Var};
use image::RgbImage;
use serde::Serialize;

use super::objective::{
    advantages, aggregate, kl, policy_loss, AdvantageMode, Aggregation, Clip, KlKind,
};
use super::optim::{clip_grad_norm, AdamW, AdamWOptions, Schedule};
use super::policy::{response_logprobs, TokenLogprobs};
use super::rollout::{rollouts, Rollout, RolloutConfig};
use crate::pointing::qwen::QwenParts;
use crate::vlm::{ImageInput, ModelError, TextModel, TrainableWeight};

/// Errors that end a run.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// The model could not be loaded or run.
    #[error("model: {0}")]
    Model(#[from] ModelError),
    /// A tensor operation failed.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    /// A sample could not be prepared or scored (its image, prompt or response).
    #[error("question {id}: {reason}")]
    Question {
        /// The sample's id.
        id: String,
        /// What failed.
        reason: String,
    },
    /// That many steps in a row had a non-finite loss or gradient norm
    /// ([`GrpoOptions::max_nan_steps`]).
    #[error(
        "{0} steps in a row had a non-finite loss or gradient: stopping (the last checkpoint \
         is intact; lower the learning rate or check the data)"
    )]
    NonFinite(usize),
    /// The trainer could not be set up (e.g. no weight matches the modules to train).
    #[error("{0}")]
    Setup(String),
}

/// Which weights train.
#[derive(Debug, Clone, PartialEq)]
pub enum Tune {
    /// Every decoder weight whose checkpoint name contains one of `modules` (all when empty).
    Full {
        /// Substrings of the checkpoint names to train (empty: every decoder weight).
        modules: Vec<String>,
    },
    /// LoRA adapters (PEFT's) on the decoder linears whose module name contains one of
    /// `modules` (all seven per layer when empty); the base weights stay frozen.
    Lora {
        /// LoRA rank r.
        rank: usize,
        /// LoRA alpha; the adapter's output is scaled by `alpha / rank`.
        alpha: f64,
        /// Substrings of the module names to adapt (empty: all seven linears per layer).
        modules: Vec<String>,
        /// Seed of the adapters' initialisation.
        seed: u64,
    },
}

impl Tune {
    fn picks(modules: &[String], name: &str) -> bool {
        modules.is_empty() || modules.iter().any(|m| name.contains(m.as_str()))
    }
}

/// GRPO settings (defaults: Embodied-R1's EasyR1 configuration, pickxiguapi/Embodied-R1
/// `scripts/config_stage1.yaml` as overridden by `scripts/stage_1_embodied_r1.sh`).
#[derive(Debug, Clone, PartialEq)]
pub struct GrpoOptions {
    /// How groups are sampled (default: 5 responses of at most 1024 tokens, temperature 1).
    pub rollout: RolloutConfig,
    /// How rewards become advantages (default: GRPO's group normalisation, eps 1e-6, N−1 std).
    pub advantage: AdvantageMode,
    /// DAPO's dynamic sampling: groups whose rewards are all equal carry no signal and are
    /// left out of the loss (their advantages are 0 either way; leaving them out changes the
    /// token-mean's denominator).
    pub drop_flat_groups: bool,
    /// The surrogate's clipping (default 0.2 / 0.3, dual clip 3).
    pub clip: Clip,
    /// KL to the frozen starting model as a loss term: estimator and coefficient (`None`: off,
    /// and no reference is kept).
    pub kl: Option<(KlKind, f64)>,
    /// How per-token losses become the step's loss (default token mean).
    pub aggregation: Aggregation,
    /// The optimiser's settings (default lr 1e-6, weight decay 1e-2).
    pub adamw: AdamWOptions,
    /// The learning-rate schedule (default constant, no warm-up).
    pub schedule: Schedule,
    /// Global gradient-norm limit (`None`: no clipping).
    pub max_grad_norm: Option<f64>,
    /// Non-finite steps in a row that stop the run.
    pub max_nan_steps: usize,
}

impl Default for GrpoOptions {
    fn default() -> Self {
        Self {
            rollout: RolloutConfig {
                group: 5,
                max_new_tokens: 1024,
                temperature: 1.0,
                top_p: 1.0,
                stop_ids: Vec::new(),
            },
            advantage: AdvantageMode::default(),
            drop_flat_groups: false,
            clip: Clip::default(),
            kl: Some((KlKind::K3, 1e-2)),
            aggregation: Aggregation::TokenMean,
            adamw: AdamWOptions::default(),
            schedule: Schedule::Constant { warmup: 0 },
            max_grad_norm: Some(1.0),
            max_nan_steps: 3,
        }
    }
}

/// One question to train or evaluate on.
#[derive(Debug, Clone)]
pub struct Sample {
    /// The record's id, for messages and skipped-record reports.
    pub id: String,
    /// The metrics key (the ground truth's task type).
    pub task: String,
    /// The text after the image in the user turn (the whole user turn without an image).
    pub question: String,
    /// The image shown before the question; `None`: a text-only prompt (no vision rows), as
    /// Embodied-R trains its reasoning model.
    pub image: Option<RgbImage>,
    /// The system message; `None`: the model's ([`QwenParts::system`]).
    pub system: Option<String>,
    /// The ground truth the scorer compares responses against (`<type>…</type>` envelope included).
    pub ground_truth: String,
}

/// Scores a response (first argument) against a ground truth (second) for a question (third:
/// the sample's user text, which Embodied-R's consistency reward reads): the components,
/// `overall` first.
pub type Scorer<'a> = dyn Fn(&str, &str, &str) -> Result<Vec<(String, f64)>, String> + 'a;

/// Means over one task's responses.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct TaskMetrics {
    /// Responses of this task scored.
    pub responses: usize,
    /// Their mean reward.
    pub reward: f64,
    /// Each reward component's mean (`overall` included).
    pub components: BTreeMap<String, f64>,
}

/// What one step did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StepMetrics {
    /// The step's number (updates taken before it).
    pub step: u64,
    /// The learning rate of this update, after the schedule.
    pub lr: f64,
    /// The step's aggregated surrogate loss (plus the KL term when on).
    pub loss: f64,
    /// Mean reward over the step's responses.
    pub reward: f64,
    /// Standard deviation of those rewards (population std).
    pub reward_std: f64,
    /// Per-task means, keyed by the task type.
    pub tasks: BTreeMap<String, TaskMetrics>,
    /// Mean k3 KL to the reference over response tokens (0 without a reference).
    pub kl: f64,
    /// Fraction of response tokens where the clipped term was taken.
    pub clip_fraction: f64,
    /// Fraction of response tokens where the dual clip bound.
    pub dual_clip_fraction: f64,
    /// Mean token entropy of the policy on its responses.
    pub entropy: f64,
    /// Mean response length, tokens.
    pub response_length: f64,
    /// Fraction of responses that hit `max_new_tokens` without a stop token.
    pub truncated: f64,
    /// Global gradient L2 norm before clipping.
    pub grad_norm: f64,
    /// Groups whose rewards were all equal.
    pub flat_groups: usize,
    /// Responses the scorer refused (scored 0).
    pub score_errors: usize,
    /// Why the update was skipped, when it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// Wall-clock seconds of the whole step.
    pub seconds: f64,
    /// Of which: rollouts (vision, prefill, decoding) and scoring.
    pub rollout_seconds: f64,
    /// Generated tokens per second of rollout.
    pub rollout_tokens_per_s: f64,
}

/// Greedy decoding on held-out questions.
#[derive(Debug, Clone, Default, Serialize)]
pub struct EvalMetrics {
    /// The trainer's step when evaluated (updates taken).
    pub step: u64,
    /// Mean reward over the held-out questions.
    pub reward: f64,
    /// Per-task means, keyed by the task type.
    pub tasks: BTreeMap<String, TaskMetrics>,
    /// Responses the scorer refused (scored 0).
    pub score_errors: usize,
}

/// A question ready for the model.
struct Prepared {
    ids: Vec<u32>,
    images: Vec<ImageInput>,
    vision_rows: Vec<Tensor>,
}

/// The GRPO trainer: the policy (its chosen weights as `Var`s), the frozen reference, AdamW.
pub struct GrpoTrainer {
    /// The policy model: weights, tokenizer and image processor.
    pub parts: QwenParts,
    reference: Option<TextModel>,
    params: Vec<TrainableWeight>,
    optim: AdamW,
    /// The settings it trains with.
    pub options: GrpoOptions,
    /// Updates taken so far (also the number of the next step's metrics).
    pub step: u64,
    nan_streak: usize,
}

impl GrpoTrainer {
    /// Makes the weights `tune` picks trainable. The reference for the KL term is the model as
    /// given, or `reference` when resuming (the run's starting model, not the checkpoint's).
    pub fn new(
        mut parts: QwenParts,
        tune: &Tune,
        options: GrpoOptions,
        reference: Option<TextModel>,
    ) -> Result<Self, TrainError> {
        // In f32 before the reference shares the weights (see `TextModel::widen_dense`).
        parts.model.text.widen_dense()?;
        let reference = options
            .kl
            .map(|_| reference.unwrap_or_else(|| parts.model.text.clone()));
        let params = match tune {
            Tune::Full { modules } => parts
                .model
                .text
                .make_trainable(&|name: &str| Tune::picks(modules, name))?,
            Tune::Lora {
                rank,
                alpha,
                modules,
                seed,
            } => parts.model.text.add_lora(
                &|name: &str| Tune::picks(modules, name),
                *rank,
                *alpha,
                *seed,
            )?,
        };
        if params.is_empty() {
            return Err(TrainError::Setup(format!(
                "no weight matches the modules to train ({tune:?})"
            )));
        }
        let vars: Vec<(String, Var)> = params.iter().map(|p| (p.name(), p.var.clone())).collect();
        let optim = AdamW::new(vars, options.adamw)?;
        let mut options = options;
        if options.rollout.stop_ids.is_empty() {
            options.rollout.stop_ids = parts.stop_ids.clone();
        }
        Ok(Self {
            parts,
            reference,
            params,
            optim,
            options,
            step: 0,
            nan_streak: 0,
        })
    }

    /// The trainable weights (for checkpoints and tests).
    pub fn params(&self) -> &[TrainableWeight] {
        &self.params
    }

    pub(crate) fn optimizer(&self) -> &AdamW {
        &self.optim
    }

    /// The optimiser, mutable (to restore its state from a checkpoint).
    pub fn optimizer_mut(&mut self) -> &mut AdamW {
        &mut self.optim
    }

    /// Sets the trainable weights from `tensors` by name (a resumed LoRA run's adapters); every
    /// trainable weight must be there with its shape.
    pub fn restore(&mut self, tensors: &HashMap<String, Tensor>) -> Result<(), candle_core::Error> {
        for p in &self.params {
            let name = p.name();
            let t = tensors
                .get(&name)
                .ok_or_else(|| candle_core::Error::Msg(format!("no tensor `{name}` to restore")))?;
            if t.dims() != p.var.dims() {
                candle_core::bail!("`{name}` is {:?}, the weight {:?}", t.dims(), p.var.dims());
            }
            p.var.set(&t.to_dtype(p.var.dtype())?)?;
        }
        Ok(())
    }

    /// Number of trainable scalars.
    pub fn trainable_count(&self) -> usize {
        self.params.iter().map(|p| p.var.elem_count()).sum()
    }

    /// Whether `ids`, `s`'s prompt, leaves room for an answer of `--max-new-tokens` within the
    /// model's positions; an error naming both numbers if not.
    fn fits(&self, s: &Sample, ids: &[u32]) -> Result<(), TrainError> {
        let max = self.parts.model.text.max_positions();
        let answer = self.options.rollout.max_new_tokens;
        if ids.len() + answer <= max {
            return Ok(());
        }
        Err(TrainError::Question {
            id: s.id.clone(),
            reason: format!(
                "the prompt is {} tokens; with --max-new-tokens {answer} it needs {} positions, over the model's {max} (max_position_embeddings): shorten the question or lower --max-new-tokens",
                ids.len(),
                ids.len() + answer
            ),
        })
    }

    /// For a text-only sample, [`Self::fits`] before any step (tokenizing is cheap; an image's
    /// prompt is checked when it is prepared). A run refuses such a record at its start rather
    /// than at the step that first draws it.
    pub fn check_text_prompt(&self, s: &Sample) -> Result<(), TrainError> {
        if s.image.is_some() {
            return Ok(());
        }
        let system = s.system.as_deref().or(self.parts.system.as_deref());
        let ids = self
            .parts
            .tokenizer
            .text_prompt_ids(&s.question, system)
            .map_err(|e| TrainError::Question {
                id: s.id.clone(),
                reason: e.to_string(),
            })?;
        self.fits(s, &ids)
    }

    fn prepare(&self, s: &Sample) -> Result<Prepared, TrainError> {
        let bad = |reason: String| TrainError::Question {
            id: s.id.clone(),
            reason,
        };
        let p = &self.parts;
        let system = s.system.as_deref().or(p.system.as_deref());
        let Some(rgb) = &s.image else {
            let ids = p
                .tokenizer
                .text_prompt_ids(&s.question, system)
                .map_err(|e| bad(e.to_string()))?;
            self.fits(s, &ids)?;
            return Ok(Prepared {
                ids,
                images: Vec::new(),
                vision_rows: Vec::new(),
            });
        };
        let processed = p
            .processor
            .preprocess_rgb(rgb)
            .map_err(|e| bad(e.to_string()))?;
        let image = ImageInput::from_processed(&processed, p.model.device())?;
        let ids = p
            .tokenizer
            .prompt_ids(&s.question, system, processed.num_image_tokens())
            .map_err(|e| bad(e.to_string()))?;
        self.fits(s, &ids)?;
        let rows = p
            .model
            .vision
            .as_ref()
            .ok_or(ModelError::NoVisionTower)?
            .forward(&image.pixel_values, &[image.grid_thw])
            .map_err(ModelError::from)?;
        Ok(Prepared {
            ids,
            images: vec![image],
            vision_rows: vec![rows.detach()],
        })
    }

    /// `responses`' log-probabilities under `text` (the policy's decoder or the reference).
    fn logprobs(
        &self,
        text: &TextModel,
        p: &Prepared,
        responses: &[Vec<u32>],
        temperature: f64,
    ) -> Result<TokenLogprobs, ModelError> {
        response_logprobs(
            &self.parts.model,
            text,
            &p.ids,
            &p.images,
            &p.vision_rows,
            responses,
            temperature,
        )
    }

    /// The text of a response (special tokens dropped, as EasyR1 decodes).
    fn response_text(&self, r: &Rollout) -> String {
        self.parts
            .tokenizer
            .decode_with(&r.tokens, true)
            .unwrap_or_default()
    }

    /// One GRPO update on `batch` (G rollouts each). `seed` makes the rollouts reproducible.
    pub fn step(
        &mut self,
        batch: &[Sample],
        scorer: &Scorer<'_>,
        seed: u64,
    ) -> Result<StepMetrics, TrainError> {
        let t0 = Instant::now();
        let g = self.options.rollout.group.max(1);
        let mut metrics = StepMetrics {
            step: self.step,
            lr: self.options.schedule.lr(self.options.adamw.lr, self.step),
            ..StepMetrics::default()
        };
        // 1. Rollouts and rewards.
        let mut prepared = Vec::with_capacity(batch.len());
        let mut groups: Vec<Vec<Rollout>> = Vec::with_capacity(batch.len());
        let mut rewards = Vec::with_capacity(batch.len() * g);
        let mut tally = TaskTally::default();
        let t_roll = Instant::now();
        let mut generated = 0usize;
        // Sampling needs no gradients: the policy's weights outside autograd (shared storage).
        let mut policy = self.parts.model.detached();
        for (qi, s) in batch.iter().enumerate() {
            let p = self.prepare(s)?;
            let prompt = policy.prepare_with_vision(&p.ids, &p.images, &p.vision_rows)?;
            let group_seed = seed.wrapping_mul(1_000_003).wrapping_add((qi * g) as u64);
            let group = rollouts(&mut policy, &prompt, &self.options.rollout, group_seed)?;
            for r in &group {
                generated += r.tokens.len();
                let text = self.response_text(r);
                let (reward, comps) = match scorer(&text, &s.ground_truth, &s.question) {
                    Ok(c) => (c.first().map_or(0.0, |x| x.1), c),
                    Err(e) => {
                        tracing::warn!("question {}: the reward refused a response: {e}", s.id);
                        metrics.score_errors += 1;
                        (0.0, vec![("overall".to_string(), 0.0)])
                    }
                };
                let reward = if reward.is_finite() { reward } else { 0.0 };
                tally.add(&s.task, reward, &comps);
                rewards.push(reward);
                metrics.response_length += r.tokens.len() as f64;
                if !r.stopped {
                    metrics.truncated += 1.0;
                }
            }
            prepared.push(p);
            groups.push(group);
        }
        let n = rewards.len().max(1) as f64;
        metrics.response_length /= n;
        metrics.truncated /= n;
        metrics.reward = rewards.iter().sum::<f64>() / n;
        metrics.reward_std = (rewards
            .iter()
            .map(|r| (r - metrics.reward).powi(2))
            .sum::<f64>()
            / n)
            .sqrt();
        metrics.tasks = tally.finish();
        // Its KV caches go before the training pass needs the memory.
        drop(policy);
        metrics.rollout_seconds = t_roll.elapsed().as_secs_f64();
        metrics.rollout_tokens_per_s = generated as f64 / metrics.rollout_seconds.max(1e-9);

        // 2. Advantages; which groups enter the loss.
        let (adv, flat) = advantages(&rewards, g, self.options.advantage);
        metrics.flat_groups = flat.iter().filter(|&&f| f).count();
        let used: Vec<usize> = (0..groups.len())
            .filter(|&i| !(self.options.drop_flat_groups && flat[i]))
            .filter(|&i| groups[i].iter().any(|r| !r.tokens.is_empty()))
            .collect();
        let tokens_total: usize = used
            .iter()
            .flat_map(|&i| groups[i].iter().map(|r| r.tokens.len()))
            .sum();
        let seqs_total = used.len() * g;
        if used.is_empty() || tokens_total == 0 {
            metrics.skipped = Some("no group with a learning signal".into());
            metrics.seconds = t0.elapsed().as_secs_f64();
            self.step += 1;
            return Ok(metrics);
        }

        // 3. Loss and gradients, one group at a time.
        let mut grads: HashMap<String, Tensor> = HashMap::new();
        let mut loss_sum = 0f64;
        let (mut kl_sum, mut clip_sum, mut dual_sum, mut ent_sum) = (0f64, 0f64, 0f64, 0f64);
        let temperature = self.options.rollout.temperature;
        for &i in &used {
            let p = &prepared[i];
            let responses: Vec<Vec<u32>> = groups[i]
                .iter()
                .map(|r| {
                    if r.tokens.is_empty() {
                        // An empty response has no tokens to train; a masked placeholder keeps
                        // the batch rectangular.
                        vec![self.options.rollout.stop_ids.first().copied().unwrap_or(0)]
                    } else {
                        r.tokens.clone()
                    }
                })
                .collect();
            let lp = self.logprobs(&self.parts.model.text, p, &responses, temperature)?;
            let mask = if groups[i].iter().any(|r| r.tokens.is_empty()) {
                let keep: Vec<f32> = groups[i]
                    .iter()
                    .map(|r| if r.tokens.is_empty() { 0.0 } else { 1.0 })
                    .collect();
                lp.mask
                    .broadcast_mul(&Tensor::new(keep.as_slice(), lp.mask.device())?.unsqueeze(1)?)?
            } else {
                lp.mask.clone()
            };
            let group_tokens: f64 = groups[i].iter().map(|r| r.tokens.len() as f64).sum();
            let a: Vec<f32> = adv[i * g..(i + 1) * g].iter().map(|&x| x as f32).collect();
            let a = Tensor::new(a.as_slice(), lp.logp.device())?;
            let old = lp.logp.detach();
            let pl = policy_loss(&lp.logp, &old, &a, &mask, self.options.clip)?;
            let mut per_token = pl.per_token;
            if let (Some((kind, coef)), Some(reference)) = (self.options.kl, &self.reference) {
                let r = self.logprobs(reference, p, &responses, temperature)?;
                let k = kl(&lp.logp, &r.logp.detach(), kind)?;
                kl_sum += masked_sum(&kl(&lp.logp.detach(), &r.logp, KlKind::K3)?, &mask)?;
                per_token = (per_token + (k * coef)?)?;
            }
            ent_sum += masked_sum(&lp.entropy, &mask)?;
            clip_sum += pl.clip_fraction * group_tokens;
            dual_sum += pl.dual_clip_fraction * group_tokens;
            let share = match self.options.aggregation {
                Aggregation::TokenMean => group_tokens / tokens_total as f64,
                _ => g as f64 / seqs_total as f64,
            };
            let loss = (aggregate(&per_token, &mask, self.options.aggregation)? * share)?;
            loss_sum += loss.to_dtype(candle_core::DType::F64)?.to_scalar::<f64>()?;
            accumulate(&mut grads, &self.params, &loss.backward()?)?;
        }
        let tokens = tokens_total as f64;
        metrics.loss = loss_sum;
        metrics.kl = kl_sum / tokens;
        metrics.clip_fraction = clip_sum / tokens;
        metrics.dual_clip_fraction = dual_sum / tokens;
        metrics.entropy = ent_sum / tokens;

        // 4. The update, unless something is not finite.
        let norm = clip_grad_norm(&mut grads, self.options.max_grad_norm)?;
        metrics.grad_norm = norm;
        if !loss_sum.is_finite() || !norm.is_finite() {
            self.nan_streak += 1;
            metrics.skipped = Some(format!(
                "non-finite {} ({} in a row)",
                if loss_sum.is_finite() {
                    "gradient"
                } else {
                    "loss"
                },
                self.nan_streak
            ));
            metrics.seconds = t0.elapsed().as_secs_f64();
            self.step += 1;
            if self.nan_streak >= self.options.max_nan_steps {
                return Err(TrainError::NonFinite(self.nan_streak));
            }
            return Ok(metrics);
        }
        self.nan_streak = 0;
        self.optim.step(&grads, metrics.lr)?;
        self.step += 1;
        metrics.seconds = t0.elapsed().as_secs_f64();
        Ok(metrics)
    }

    /// One supervised update: AdamW on the mean `−log π(target | question)` over the targets'
    /// tokens (each target is followed by the first stop token, so the model also learns to
    /// stop). The warm-up that precedes RL when a model does not yet answer in the format the
    /// rewards parse (the learning test's random tiny model). Returns the loss.
    pub fn sft_step(&mut self, batch: &[(Sample, String)]) -> Result<f64, TrainError> {
        let stop = self.options.rollout.stop_ids.first().copied();
        let mut targets = Vec::with_capacity(batch.len());
        for (s, text) in batch {
            let mut ids = self
                .parts
                .tokenizer
                .encode(text)
                .map_err(|e| TrainError::Question {
                    id: s.id.clone(),
                    reason: e.to_string(),
                })?;
            ids.extend(stop);
            targets.push(ids);
        }
        let total: f64 = targets.iter().map(|t| t.len() as f64).sum::<f64>().max(1.0);
        let mut grads: HashMap<String, Tensor> = HashMap::new();
        let mut loss_sum = 0.0;
        for ((s, _), ids) in batch.iter().zip(&targets) {
            let p = self.prepare(s)?;
            let lp = self.logprobs(&self.parts.model.text, &p, std::slice::from_ref(ids), 1.0)?;
            let loss = ((lp.logp * &lp.mask)?.sum_all()? * (-1.0 / total))?;
            loss_sum += loss.to_dtype(candle_core::DType::F64)?.to_scalar::<f64>()?;
            accumulate(&mut grads, &self.params, &loss.backward()?)?;
        }
        let lr = self
            .options
            .schedule
            .lr(self.options.adamw.lr, self.optim.steps);
        let norm = clip_grad_norm(&mut grads, self.options.max_grad_norm)?;
        if !loss_sum.is_finite() || !norm.is_finite() {
            return Err(TrainError::NonFinite(1));
        }
        self.optim.step(&grads, lr)?;
        Ok(loss_sum)
    }

    /// Greedy answers to `samples`, scored: the held-out reward.
    pub(crate) fn evaluate(
        &mut self,
        samples: &[Sample],
        scorer: &Scorer<'_>,
    ) -> Result<EvalMetrics, TrainError> {
        let cfg = RolloutConfig {
            group: 1,
            temperature: 0.0,
            ..self.options.rollout.clone()
        };
        self.evaluate_with(samples, scorer, &cfg, 0)
    }

    /// `cfg.group` answers to each of `samples`, drawn as `cfg` says (seeded by `seed`), scored:
    /// a held-out reward in expectation rather than of the single greedy answer.
    pub(crate) fn evaluate_with(
        &mut self,
        samples: &[Sample],
        scorer: &Scorer<'_>,
        cfg: &RolloutConfig,
        seed: u64,
    ) -> Result<EvalMetrics, TrainError> {
        let mut out = EvalMetrics {
            step: self.step,
            ..EvalMetrics::default()
        };
        let mut tally = TaskTally::default();
        let (mut sum, mut n) = (0.0, 0usize);
        let mut policy = self.parts.model.detached();
        for s in samples {
            let p = self.prepare(s)?;
            let prompt = policy.prepare_with_vision(&p.ids, &p.images, &p.vision_rows)?;
            for r in rollouts(&mut policy, &prompt, cfg, seed)? {
                let text = self.response_text(&r);
                let (reward, comps) = match scorer(&text, &s.ground_truth, &s.question) {
                    Ok(c) => (c.first().map_or(0.0, |x| x.1), c),
                    Err(_) => {
                        out.score_errors += 1;
                        (0.0, Vec::new())
                    }
                };
                let reward = if reward.is_finite() { reward } else { 0.0 };
                sum += reward;
                n += 1;
                tally.add(&s.task, reward, &comps);
            }
        }
        out.reward = sum / n.max(1) as f64;
        out.tasks = tally.finish();
        Ok(out)
    }
}

/// Adds the gradients of `params` in `store` to `grads` (by parameter name).
fn accumulate(
    grads: &mut HashMap<String, Tensor>,
    params: &[TrainableWeight],
    store: &GradStore,
) -> Result<(), candle_core::Error> {
    for p in params {
        if let Some(g) = store.get(p.var.as_tensor()) {
            let name = p.name();
            let sum = match grads.remove(&name) {
                Some(prev) => (prev + g)?,
                None => g.clone(),
            };
            grads.insert(name, sum);
        }
    }
    Ok(())
}

/// `Σ x·mask` as a number.
fn masked_sum(x: &Tensor, mask: &Tensor) -> Result<f64, candle_core::Error> {
    (x * mask)?
        .sum_all()?
        .to_dtype(candle_core::DType::F64)?
        .to_scalar::<f64>()
}

/// Running sums per task, turned into means.
#[derive(Default)]
struct TaskTally {
    tasks: BTreeMap<String, TaskMetrics>,
}

impl TaskTally {
    fn add(&mut self, task: &str, reward: f64, comps: &[(String, f64)]) {
        let t = self.tasks.entry(task.to_string()).or_default();
        t.responses += 1;
        t.reward += reward;
        for (k, v) in comps {
            if v.is_finite() {
                *t.components.entry(k.clone()).or_default() += v;
            }
        }
    }

    fn finish(self) -> BTreeMap<String, TaskMetrics> {
        self.tasks
            .into_iter()
            .map(|(k, mut t)| {
                let n = t.responses.max(1) as f64;
                t.reward /= n;
                t.components.values_mut().for_each(|v| *v /= n);
                (k, t)
            })
            .collect()
    }
}
