//! How much memory one image costs the model, and the largest image that fits a memory budget.
//!
//! Why this exists: the processor's `max_pixels` comes from the checkpoint's
//! `preprocessor_config.json` (12 845 056 pixels for Qwen2.5-VL-Instruct), so a 12 MP phone photo
//! becomes ~65 000 patches. The vision tower's full-attention blocks build a `heads × N × N` score
//! matrix over all N patches of a frame, and the decoder's prefill a `heads × S × S` one over the
//! S = N/4 image tokens: memory grows with the *square* of the pixel count and such a photo asks
//! for tens of GB (an allocation abort, not an error). [`pixels_within`] turns a byte budget into a
//! pixel budget before anything is allocated, so a too-large image is downscaled (or refused, when
//! the user insisted on its size) with a message that names the budget.
//!
//! The vision tower computes its attention a bounded chunk of query rows at a time
//! ([`super::vision::ATTENTION_CHUNK_BYTES`]), so it grows about linearly; the decoder's prefill
//! scores are whole and dominate for large images.
//!
//! The estimate counts the tensors alive at the peak of each stage in f32 (the compute dtype on
//! CPU): it is deliberately on the high side (every transient counted as alive at once), because
//! the cost of underestimating is a crash and the cost of overestimating is a slightly smaller
//! image. Weights are not counted: they are loaded before the budget is computed.

use super::config::Qwen25VlConfig;
use super::vision::attention_chunk_rows;

/// Bytes per element of the compute dtype (f32).
const F32: u64 = 4;

/// Prompt tokens besides the image (chat template, instruction) allowed for in an estimate:
/// Embodied-R1's prompts are under 200 tokens.
pub const PROMPT_ALLOWANCE: u64 = 512;

/// Peak activation memory of one image through the model, by stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActivationEstimate {
    /// Patches of the image (after `smart_resize`; one patch is `patch_size²` pixels).
    pub patches: u64,
    /// Sequence length of the decoder's prefill (image tokens + prompt + reply).
    pub sequence: u64,
    /// Vision tower peak: patch rows, residual stream, q/k/v and their rotated copies, the MLP,
    /// and one chunk of a full-attention block's scores (matmul, scaled copy, softmax).
    pub vision_bytes: u64,
    /// Decoder prefill peak: residual stream, q/k/v, MLP, scores with the causal mask, KV cache.
    pub text_bytes: u64,
}

impl ActivationEstimate {
    /// Both stages counted as alive at once (the image features do outlive the vision tower).
    pub fn total_bytes(&self) -> u64 {
        self.vision_bytes.saturating_add(self.text_bytes)
    }
}

/// The estimate for an image of `pixels` pixels (after resizing) with `extra_tokens` more tokens
/// in the sequence (prompt and reply). Saturates instead of overflowing.
pub fn activation_bytes(
    cfg: &Qwen25VlConfig,
    pixels: u64,
    extra_tokens: u64,
) -> ActivationEstimate {
    let t = &cfg.text;
    let mul = |a: u64, b: u64| a.saturating_mul(b);
    let sum = |xs: &[u64]| xs.iter().fold(0u64, |acc, &x| acc.saturating_add(x));
    // A text-only checkpoint takes no image: only the decoder's tokens count.
    let (n, vision_bytes, merged) = match &cfg.vision {
        None => (0, 0, 1),
        Some(v) => {
            let n = pixels / (v.patch_size as u64).pow(2).max(1);
            let patch_len =
                (v.in_channels * v.temporal_patch_size * v.patch_size * v.patch_size) as u64;
            let hidden_v = v.hidden_size as u64;
            // Full attention spans a whole frame, one segment of all N patches, computed a chunk
            // of query rows at a time (`vision::attention_chunk_rows`).
            let rows =
                attention_chunk_rows(v.num_heads, usize::try_from(n).unwrap_or(usize::MAX)) as u64;
            let scores_v = mul(mul(v.num_heads as u64, mul(rows, n)), 3 * F32);
            let vision_bytes = sum(&[
                mul(mul(n, patch_len), 2 * F32),
                mul(mul(n, hidden_v), 9 * F32),
                mul(mul(n, v.intermediate_size as u64), 3 * F32),
                scores_v,
            ]);
            (n, vision_bytes, (v.spatial_merge_size as u64).pow(2).max(1))
        }
    };
    let s = (n / merged).saturating_add(extra_tokens);
    let hd = t.head_dim as u64;
    let heads = t.num_attention_heads as u64;
    let kv = t.num_key_value_heads as u64;
    let text_bytes = sum(&[
        mul(mul(s, t.hidden_size as u64), 6 * F32),
        mul(mul(s, mul(heads + 2 * kv, hd)), 2 * F32),
        mul(mul(s, t.intermediate_size as u64), 3 * F32),
        // Scores, scaled + masked copy, softmax; plus the mask itself.
        mul(mul(heads, mul(s, s)), 3 * F32),
        mul(mul(s, s), F32),
        mul(
            mul(t.num_hidden_layers as u64, mul(2 * kv, hd)),
            mul(s, F32),
        ),
    ]);
    ActivationEstimate {
        patches: n,
        sequence: s,
        vision_bytes,
        text_bytes,
    }
}

/// The largest pixel count (a whole number of merged tokens, `(patch·merge)²` pixels each) whose
/// [`activation_bytes`] fit in `budget_bytes`; 0 when not even one token fits.
pub fn pixels_within(cfg: &Qwen25VlConfig, budget_bytes: u64, extra_tokens: u64) -> u64 {
    let Some(v) = &cfg.vision else {
        // A text-only checkpoint sees no pixels.
        return 0;
    };
    let token_pixels = ((v.patch_size * v.spatial_merge_size) as u64).pow(2).max(1);
    let fits = |tokens: u64| {
        activation_bytes(cfg, tokens.saturating_mul(token_pixels), extra_tokens).total_bytes()
            <= budget_bytes
    };
    // The estimate grows monotonically with the token count: bisect on [0, hi].
    let (mut lo, mut hi) = (0u64, 1u64 << 32);
    if fits(hi) {
        return hi * token_pixels;
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo * token_pixels
}

/// `MemAvailable` from `/proc/meminfo`, bytes (`None` off Linux or when unreadable): what a new
/// allocation can get without pushing other processes into swap.
pub fn mem_available_bytes() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}
