//! Qwen2 / Qwen2.5 text checkpoints (`Qwen2ForCausalLM`, e.g. Qwen2.5-3B-Instruct): the reasoning
//! model of Embodied-R (Zhao et al., 2025, arXiv 2504.12680, §3.2), which answers from the
//! descriptions a vision model wrote.
//!
//! Why no second decoder: Qwen2.5-VL's language model is the Qwen2 architecture (transformers
//! `Qwen2_5_VLModel` vs `Qwen2Model`: the same RMSNorm, GQA attention with q/k/v biases, SwiGLU MLP,
//! tied or untied head), and its M-RoPE with the three position ids equal — every token of a
//! text-only prompt — is Qwen2's plain RoPE. So a text checkpoint runs on [`TextModel`] with
//! positions `[p, p, p]`, loaded through the same files, name detection, quantization and kernels
//! as the VLM; only the config differs ([`Qwen2TextConfig`]).

use candle_core::Tensor;
use candle_nn::VarBuilder;

use crate::config::Qwen2TextConfig;
use crate::generate::argmax;
use crate::linear::Quant;
use crate::text::{LogitsAt, TextModel};

/// A Qwen2 text language model with its KV cache.
#[derive(Debug, Clone)]
pub struct Qwen2TextLm {
    text: TextModel,
    cfg: Qwen2TextConfig,
}

impl Qwen2TextLm {
    /// Builds the model from the checkpoint root `vb` (`model.*` and, unless the embeddings are
    /// tied, `lm_head.weight`), with linear weights quantized as `quant` asks.
    pub fn new(cfg: &Qwen2TextConfig, quant: Quant, vb: VarBuilder) -> candle_core::Result<Self> {
        Ok(Qwen2TextLm {
            text: TextModel::new(&cfg.text, quant, vb)?,
            cfg: cfg.clone(),
        })
    }

    /// The configuration the model was built from.
    pub fn config(&self) -> &Qwen2TextConfig {
        &self.cfg
    }

    /// Positions `0..n` on all three rotary axes (see the module docs).
    fn positions(n: usize) -> [Vec<u32>; 3] {
        let p: Vec<u32> = (0..n as u32).collect();
        [p.clone(), p.clone(), p]
    }

    /// f32 logits `[ids.len(), vocab]` at every position of `ids`, run as a fresh sequence (the
    /// cache is reset): what scoring a text and the parity tests need.
    pub fn logits(&mut self, ids: &[u32]) -> candle_core::Result<Tensor> {
        if ids.is_empty() {
            candle_core::bail!("no token ids to run");
        }
        self.text.reset_cache(ids.len());
        let embeds = self.text.embed(ids)?;
        let out = self.text.forward_embeds(
            &embeds,
            &Self::positions(ids.len()),
            0,
            LogitsAt::All,
            false,
        )?;
        Ok(out.logits)
    }

    /// Greedy decoding: up to `max_new` tokens after `prompt`, the most likely each time (the
    /// first of equal ones, as `torch.argmax`), stopping after an end-of-sequence id, which is
    /// kept. Returns the new tokens only.
    pub fn greedy(&mut self, prompt: &[u32], max_new: usize) -> candle_core::Result<Vec<u32>> {
        if prompt.is_empty() {
            candle_core::bail!("an empty prompt has nothing to continue");
        }
        let total = prompt.len() + max_new;
        let pos = Self::positions(total);
        self.text.reset_cache(total);
        let mut out = Vec::with_capacity(max_new);
        let mut next = self.text.embed(prompt)?;
        let mut start = 0;
        while out.len() < max_new {
            let s = next.dim(0)?;
            let logits = self
                .text
                .forward_embeds(&next, &pos, start, LogitsAt::Last, false)?
                .logits;
            start += s;
            let last: Vec<f32> = logits.squeeze(0)?.to_vec1()?;
            let token = argmax(&last);
            out.push(token);
            if self.cfg.eos_token_ids.contains(&token) {
                break;
            }
            next = self.text.embed(&[token])?;
        }
        Ok(out)
    }
}
