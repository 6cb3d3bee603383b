//! Rollouts: a group of G sampled responses to one prompt, decoded as one batch on the KV cache.
//!
//! The prompt (vision tower + prefill) runs once; its cache is then repeated G times
//! (`Qwen25Vl::fork`) and the G continuations advance together, one `[G, 1]` step at a time, so
//! a group costs one prefill and `max_new_tokens` batched decode steps. Sampling is the
//! generator's (`vlm::sample_token`: temperature, then top-p), each rollout with its own seeded
//! stream, so a rollout does not depend on how many others share its batch.
//!
//! Each sampled token's log-probability is recorded under `log_softmax(logits / temperature)`,
//! the full tempered distribution before top-p truncation: the quantity verl, EasyR1 and TRL
//! train on, and what the training pass must reproduce (`crates/apps/src/tests/grpo_train.rs`: within 1e-4).

use candle_core::D;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::vlm::{sample_token, LogitsAt, ModelError, PreparedPrompt, Qwen25Vl, Sampling};

/// How a group is sampled.
#[derive(Debug, Clone, PartialEq)]
pub struct RolloutConfig {
    /// Responses per prompt (G).
    pub group: usize,
    /// Most tokens a response may have (default 256).
    pub max_new_tokens: usize,
    /// Softmax temperature (> 0; EasyR1's default 1.0).
    pub temperature: f64,
    /// Nucleus mass (1.0 = off).
    pub top_p: f64,
    /// Tokens that end a response (kept as its last token).
    pub stop_ids: Vec<u32>,
}

impl Default for RolloutConfig {
    fn default() -> Self {
        Self {
            group: 8,
            max_new_tokens: 256,
            temperature: 1.0,
            top_p: 1.0,
            stop_ids: Vec::new(),
        }
    }
}

/// One sampled response.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Rollout {
    /// The generated ids, the stop token included when one ended it.
    pub tokens: Vec<u32>,
    /// `log_softmax(logits / temperature)` of each token when it was sampled.
    pub logprobs: Vec<f32>,
    /// Whether a stop token ended it (otherwise `max_new_tokens` did: truncated).
    pub stopped: bool,
}

/// Samples `cfg.group` responses to `prompt`. Rollout `i` draws from a generator seeded with
/// `seed + i`.
pub(crate) fn rollouts(
    model: &mut Qwen25Vl,
    prompt: &PreparedPrompt,
    cfg: &RolloutConfig,
    seed: u64,
) -> Result<Vec<Rollout>, ModelError> {
    let g = cfg.group.max(1);
    let sampling = if cfg.temperature > 0.0 {
        Sampling::TopP {
            temperature: cfg.temperature,
            top_p: cfg.top_p,
        }
    } else {
        Sampling::Greedy
    };
    let scale = if cfg.temperature > 0.0 {
        cfg.temperature
    } else {
        1.0
    };
    let mut rngs: Vec<ChaCha8Rng> = (0..g as u64)
        .map(|i| ChaCha8Rng::seed_from_u64(seed.wrapping_add(i)))
        .collect();
    let mut out: Vec<Rollout> = (0..g)
        .map(|_| Rollout {
            tokens: Vec::new(),
            logprobs: Vec::new(),
            stopped: false,
        })
        .collect();
    if cfg.max_new_tokens == 0 {
        return Ok(out);
    }
    // [1, vocab] after the prefill, [G, vocab] after each batched step.
    let mut logits = model
        .prefill(prompt, cfg.max_new_tokens, LogitsAt::Last, false)?
        .logits;
    model.fork(g)?;
    for k in 0..cfg.max_new_tokens {
        if k > 0 {
            let last: Vec<u32> = out
                .iter()
                .map(|r| *r.tokens.last().expect("a token per step"))
                .collect();
            logits = model.decode_batch(&last, k - 1)?;
        }
        let rows: Vec<Vec<f32>> = logits.to_vec2()?;
        let logp: Vec<Vec<f32>> =
            candle_nn::ops::log_softmax(&(&logits / scale)?, D::Minus1)?.to_vec2()?;
        for (i, r) in out.iter_mut().enumerate() {
            if r.stopped {
                continue;
            }
            // The prefill gave one row that all rollouts share.
            let row = rows.len().min(i + 1) - 1;
            let next = sample_token(&rows[row], sampling, &mut rngs[i]);
            r.tokens.push(next);
            r.logprobs.push(logp[row][next as usize]);
            r.stopped = cfg.stop_ids.contains(&next);
        }
        if out.iter().all(|r| r.stopped) {
            break;
        }
    }
    // Finished rollouts kept feeding their stop token (the batch advances together); what came
    // after was never recorded.
    Ok(out)
}
