//! Autoregressive generation: vision tower, prefill, then one token at a time from the KV cache.
//!
//! Logit processing follows transformers' order so that greedy runs reproduce it token for token:
//! repetition penalty over every id so far (prompt, image pads included, and generated), then
//! temperature, then top-p; greedy is the arg-max of the penalised logits (first index on ties,
//! like `torch.argmax`). Embodied-R1's own example decodes greedily with
//! `repetition_penalty = 1.05`, which is the default here.

use std::collections::HashSet;
use std::time::Instant;

use candle_core::Tensor;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::model::{ImageInput, ModelError, Qwen25Vl};
use super::text::LogitsAt;

/// How the next token is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampling {
    /// Arg-max (deterministic; what Embodied-R1's evaluation uses).
    Greedy,
    /// Softmax at `temperature`, restricted to the smallest set of tokens whose probability mass
    /// reaches `top_p`, sampled with a seeded generator.
    TopP {
        /// Divides the logits before the softmax; at or below 0 the choice is greedy.
        temperature: f64,
        /// Probability mass the candidate set must reach (1.0 keeps every token; the most likely
        /// token is always kept).
        top_p: f64,
    },
}

/// Generation settings.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationConfig {
    /// Most tokens to generate; also sizes the KV cache reserved at prefill.
    pub max_new_tokens: usize,
    /// Greedy or top-p sampling.
    pub sampling: Sampling,
    /// transformers' `repetition_penalty` (1.0 = off).
    pub repetition_penalty: f32,
    /// Seed of the sampler (unused when greedy).
    pub seed: u64,
    /// Tokens that end generation (kept as the last generated token). Usually `<|im_end|>` and
    /// `<|endoftext|>`; empty = run to `max_new_tokens`.
    pub stop_ids: Vec<u32>,
    /// Keep each step's raw logits (before the penalty) in [`Generation::step_logits`] — for
    /// parity tests; costs one vocabulary-sized vector per token.
    pub keep_logits: bool,
}

impl Default for GenerationConfig {
    fn default() -> Self {
        Self {
            max_new_tokens: 1024,
            sampling: Sampling::Greedy,
            repetition_penalty: 1.05,
            seed: 0,
            stop_ids: Vec::new(),
            keep_logits: false,
        }
    }
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// A stop token was produced (it is the last of `tokens`).
    Stop(u32),
    /// `max_new_tokens` tokens were generated without a stop token.
    MaxNewTokens,
    /// The token callback asked to stop.
    Cancelled,
}

/// Wall-clock times of the three phases, seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Timings {
    /// Time of the vision tower (0 when its output was reused).
    pub vision_s: f64,
    /// Time of the prefill over the prompt (the positions not reused), up to the first token's
    /// logits.
    pub prefill_s: f64,
    /// Time of the decode steps after the first token.
    pub decode_s: f64,
    /// Length of the prompt in tokens, image pads included.
    pub prompt_tokens: usize,
    /// Tokens produced by decode steps (the first token comes from prefill).
    pub decode_steps: usize,
    /// The vision tower's output came from the previous question ([`PromptCache`]).
    pub vision_reused: bool,
    /// Prompt positions whose keys and values came from the previous question (not prefilled).
    pub reused_tokens: usize,
}

impl Timings {
    /// Decode throughput, tokens per second (0 when nothing was decoded).
    pub fn decode_tokens_per_s(&self) -> f64 {
        if self.decode_steps == 0 || self.decode_s <= 0.0 {
            0.0
        } else {
            self.decode_steps as f64 / self.decode_s
        }
    }
}

/// The result of [`generate`].
#[derive(Debug, Clone)]
pub struct Generation {
    /// The generated ids, in order; a stop token, when one ended generation, is the last.
    pub tokens: Vec<u32>,
    /// Why generation ended.
    pub stop: StopReason,
    /// How long each phase took.
    pub timings: Timings,
    /// Raw logits of each step `[vocab]`, when [`GenerationConfig::keep_logits`].
    pub step_logits: Vec<Vec<f32>>,
}

/// Applies transformers' repetition penalty in place: each distinct id in `history` has its logit
/// divided by `penalty` if positive, multiplied if negative.
pub fn apply_repetition_penalty(logits: &mut [f32], history: &[u32], penalty: f32) {
    if penalty == 1.0 {
        return;
    }
    let mut seen = HashSet::with_capacity(history.len());
    for &id in history {
        if seen.insert(id) {
            if let Some(l) = logits.get_mut(id as usize) {
                *l = if *l < 0.0 { *l * penalty } else { *l / penalty };
            }
        }
    }
}

/// Index of the largest value, the first on ties (`torch.argmax`).
pub fn argmax(values: &[f32]) -> u32 {
    let mut best = 0usize;
    for (i, &x) in values.iter().enumerate() {
        if x > values[best] {
            best = i;
        }
    }
    best as u32
}

/// Chooses the next token from (penalised) `logits`: generation's sampler, also GRPO's
/// rollouts'.
pub fn sample_token(logits: &[f32], sampling: Sampling, rng: &mut ChaCha8Rng) -> u32 {
    match sampling {
        Sampling::Greedy => argmax(logits),
        Sampling::TopP { temperature, top_p } => {
            if temperature <= 0.0 {
                return argmax(logits);
            }
            let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
            let mut probs: Vec<(u32, f64)> = logits
                .iter()
                .enumerate()
                .map(|(i, &l)| (i as u32, ((l as f64 - max) / temperature).exp()))
                .collect();
            let total: f64 = probs.iter().map(|p| p.1).sum();
            probs.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            // Smallest prefix whose mass reaches top_p (at least one token).
            let mut mass = 0.0;
            let mut keep = 0;
            for p in &probs {
                mass += p.1 / total;
                keep += 1;
                if mass >= top_p {
                    break;
                }
            }
            let kept = &probs[..keep];
            let kept_total: f64 = kept.iter().map(|p| p.1).sum();
            let mut u = rng.gen::<f64>() * kept_total;
            for p in kept {
                if u < p.1 {
                    return p.0;
                }
                u -= p.1;
            }
            kept[keep - 1].0
        }
    }
}

/// What one question leaves for the next about the same frame: the vision tower's output for
/// its images and the keys and values of its prompt. A robot task asks two to four questions
/// about one frame (REG, RRG, OFG, VTG); the image and the chat template before the question
/// are the same in each, and on a CPU they are most of a question's time (the vision tower, and
/// the prefill over the image's tokens).
///
/// Held by a pointer next to its model; [`generate_reusing`] keeps it. Valid only for the model
/// it was filled by, with the same weights: [`Self::clear`] it when either changes.
#[derive(Debug, Default)]
pub struct PromptCache {
    last: Option<CachedPrompt>,
}

#[derive(Debug)]
struct CachedPrompt {
    /// Digest of every image's pixel values and grid ([`image_key`]).
    image_key: u64,
    vision_rows: Vec<Tensor>,
    /// The prompt whose keys and values `kv` holds.
    ids: Vec<u32>,
    kv: Vec<(Tensor, Tensor)>,
}

impl PromptCache {
    /// An empty cache: the first question is answered cold.
    pub fn new() -> Self {
        Self::default()
    }

    /// Forgets the last frame (the next question starts cold).
    pub fn clear(&mut self) {
        self.last = None;
    }
}

/// A digest of the images a prompt shows: the same pixels and grids give the same key. The
/// prompt's token ids cannot tell two frames apart (every image of one size has the same run
/// of `<|image_pad|>` tokens), so reuse is keyed by the pixels.
fn image_key(images: &[ImageInput]) -> Result<u64, ModelError> {
    use std::hash::Hasher;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    h.write_usize(images.len());
    for img in images {
        for g in img.grid_thw {
            h.write_usize(g);
        }
        for v in img.pixel_values.flatten_all()?.to_vec1::<f32>()? {
            h.write_u32(v.to_bits());
        }
    }
    Ok(h.finish())
}

/// Generates a reply to `input_ids` (a prompt whose `<|image_pad|>` runs match `images`).
/// `on_token` sees every new token as soon as it exists (for streaming) and returns `false` to
/// stop early.
pub fn generate(
    model: &mut Qwen25Vl,
    input_ids: &[u32],
    images: &[ImageInput],
    cfg: &GenerationConfig,
    on_token: &mut dyn FnMut(u32) -> bool,
) -> Result<Generation, ModelError> {
    generate_inner(model, input_ids, images, cfg, on_token, None)
}

/// [`generate`] that starts from what `cache` holds of the previous question when it showed the
/// same images: their vision rows, and the keys and values of the longest common prefix of the
/// two prompts (all but at least the last token). Then it keeps this question's for the next.
/// The reply is the cold one up to float rounding (`tests/vlm_reuse.rs`);
/// [`Timings::reused_tokens`] says what was reused.
pub fn generate_reusing(
    model: &mut Qwen25Vl,
    input_ids: &[u32],
    images: &[ImageInput],
    cfg: &GenerationConfig,
    on_token: &mut dyn FnMut(u32) -> bool,
    cache: &mut PromptCache,
) -> Result<Generation, ModelError> {
    generate_inner(model, input_ids, images, cfg, on_token, Some(cache))
}

/// Both entry points: without a cache nothing is hashed or kept (a cold question pays nothing
/// for the reuse it will not have).
fn generate_inner(
    model: &mut Qwen25Vl,
    input_ids: &[u32],
    images: &[ImageInput],
    cfg: &GenerationConfig,
    on_token: &mut dyn FnMut(u32) -> bool,
    mut cache: Option<&mut PromptCache>,
) -> Result<Generation, ModelError> {
    let mut timings = Timings {
        prompt_tokens: input_ids.len(),
        ..Timings::default()
    };
    let t0 = Instant::now();
    let key = match cache {
        Some(_) => Some(image_key(images)?),
        None => None,
    };
    // Taken out: a failure below leaves the cache empty rather than half-updated.
    let last = cache
        .as_mut()
        .and_then(|c| c.last.take())
        .filter(|c| Some(c.image_key) == key);
    let vision_rows = match &last {
        Some(c) => {
            timings.vision_reused = !images.is_empty();
            c.vision_rows.clone()
        }
        None => model.vision_rows(images)?,
    };
    // A GPU runs the ops queued above after they return: wait for them so each phase's time is
    // its own (a no-op on the CPU).
    model.device().synchronize()?;
    timings.vision_s = t0.elapsed().as_secs_f64();

    let t1 = Instant::now();
    let prompt = model.prepare_with_vision(input_ids, images, &vision_rows)?;
    let reuse = last.as_ref().map_or(0, |c| {
        let common = c
            .ids
            .iter()
            .zip(input_ids)
            .take_while(|(a, b)| a == b)
            .count();
        common.min(input_ids.len().saturating_sub(1))
    });
    let mut logits = match &last {
        Some(c) if reuse > 0 => model.prefill_after(&c.kv, reuse, &prompt, cfg.max_new_tokens)?,
        _ => model
            .prefill(&prompt, cfg.max_new_tokens, LogitsAt::Last, false)?
            .logits
            .squeeze(0)?,
    };
    timings.reused_tokens = reuse;
    model.device().synchronize()?;
    timings.prefill_s = t1.elapsed().as_secs_f64();
    drop(last);
    if let (Some(cache), Some(image_key)) = (cache, key) {
        cache.last = Some(CachedPrompt {
            image_key,
            vision_rows,
            ids: input_ids.to_vec(),
            kv: model.prompt_kv()?,
        });
    }

    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let mut history: Vec<u32> = input_ids.to_vec();
    let mut tokens = Vec::new();
    let mut step_logits = Vec::new();
    let mut stop = StopReason::MaxNewTokens;
    let t2 = Instant::now();
    for k in 0..cfg.max_new_tokens {
        if k > 0 {
            logits = model.decode(tokens[k - 1], k - 1)?;
            timings.decode_steps += 1;
        }
        let mut l: Vec<f32> = logits.to_vec1()?;
        if cfg.keep_logits {
            step_logits.push(l.clone());
        }
        apply_repetition_penalty(&mut l, &history, cfg.repetition_penalty);
        let next = sample_token(&l, cfg.sampling, &mut rng);
        tokens.push(next);
        history.push(next);
        let go_on = on_token(next);
        if cfg.stop_ids.contains(&next) {
            stop = StopReason::Stop(next);
            break;
        }
        if !go_on {
            stop = StopReason::Cancelled;
            break;
        }
    }
    timings.decode_s = t2.elapsed().as_secs_f64();
    Ok(Generation {
        tokens,
        stop,
        timings,
        step_logits,
    })
}
