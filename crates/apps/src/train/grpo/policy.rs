//! The policy's log-probabilities of its own responses, as a differentiable tensor: the `logπ`
//! of the GRPO objective.
//!
//! A group's responses share their prompt: the prompt runs once and the G responses (padded on
//! the right to the longest, `T`) attend to its keys and values (`TextModel::forward_train_shared`,
//! differentiable kernels, no cache, logits only for the response positions). Right padding never
//! changes what a real token attends to (attention is causal), and all rows share the prompt's
//! M-RoPE positions followed by the decode positions. The vision tower's rows come in precomputed:
//! it is frozen in this trainer (its fused kernels have no backward pass, and Embodied-R1 tuned
//! the language side).

use candle_core::{DType, Tensor, D};

use crate::vlm::{ImageInput, ModelError, Qwen25Vl, TextModel};

/// Per-token quantities of a group `[G, T]`.
#[derive(Debug, Clone)]
pub(crate) struct TokenLogprobs {
    /// `log_softmax(logits / temperature)` at each response token (f32, differentiable).
    pub logp: Tensor,
    /// 1 on response tokens, 0 on padding (f32).
    pub mask: Tensor,
    /// Entropy of the tempered next-token distribution at each position (detached; a metric).
    pub entropy: Tensor,
}

/// `responses` (each non-empty) to one prompt: their log-probabilities under `text` (the policy,
/// or a frozen reference with the same architecture). `vision_rows` are the vision tower's
/// output for `images`.
pub(crate) fn response_logprobs(
    model: &Qwen25Vl,
    text: &TextModel,
    input_ids: &[u32],
    images: &[ImageInput],
    vision_rows: &[Tensor],
    responses: &[Vec<u32>],
    temperature: f64,
) -> Result<TokenLogprobs, ModelError> {
    let g = responses.len();
    let t = responses.iter().map(Vec::len).max().unwrap_or(0);
    if g == 0 || t == 0 {
        return Err(ModelError::EmptyPrompt);
    }
    let prompt = model.prepare_with_text(text, input_ids, images, vision_rows)?;
    let h = prompt.embeds.dim(1)?;
    let dev = prompt.embeds.device().clone();
    let mut ids = Vec::with_capacity(g * t);
    let mut mask = Vec::with_capacity(g * t);
    for r in responses {
        // Padding repeats the last token: any valid id does, it is masked out.
        let pad = *r.last().unwrap_or(&0);
        ids.extend(
            r.iter()
                .copied()
                .chain(std::iter::repeat_n(pad, t - r.len())),
        );
        mask.extend((0..t).map(|j| if j < r.len() { 1f32 } else { 0.0 }));
    }
    let embeds = text.embed(&ids)?.reshape((g, t, h))?;
    let pos = prompt.positions.with_generated(t);
    // Row j predicts response token j; the prompt runs once for the whole group.
    let logits = text.forward_train_shared(&prompt.embeds.unsqueeze(0)?, &embeds, &pos)?;
    let scale = if temperature > 0.0 { temperature } else { 1.0 };
    let all = candle_nn::ops::log_softmax(&(logits / scale)?, D::Minus1)?;
    let idx = Tensor::from_vec(ids, (g, t, 1), &dev)?;
    let logp = all.gather(&idx, 2)?.squeeze(2)?;
    let all = all.detach();
    let entropy = (all.exp()? * &all)?.sum(D::Minus1)?.neg()?;
    Ok(TokenLogprobs {
        logp,
        mask: Tensor::from_vec(mask, (g, t), &dev)?.to_dtype(DType::F32)?,
        entropy,
    })
}
