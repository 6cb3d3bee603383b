//! Qwen2.5-VL for conditional generation: vision tower + text decoder, joined the way
//! transformers 4.51.3 joins them — the vision tower's rows replace, in order, the embeddings of
//! the `<|image_pad|>` tokens, and the prompt gets 3-D M-RoPE position ids.

use candle_core::{Device, Tensor};
use candle_nn::VarBuilder;

use super::config::Qwen25VlConfig;
use super::linear::Quant;
use super::rope::{rope_index, RopeError, RopeIndex};
use super::text::{LogitsAt, TextModel, TextOutput};
use super::vision::{Qwen25VisionModel, VisionError};
use super::ProcessedImage;

/// Errors from running the whole model.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The vision tower failed (bad image grid or shapes).
    #[error(transparent)]
    Vision(#[from] VisionError),
    /// The image placeholders of the prompt do not match the images (M-RoPE position ids).
    #[error(transparent)]
    Rope(#[from] RopeError),
    /// There is nothing to run: the prompt has no tokens, a reuse covers the whole prompt, or a
    /// decode step came with no prompt in the cache.
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error("token id {id} at position {pos} is not below the vocabulary size {vocab}")]
    /// A token id is outside the vocabulary (an embedding lookup would fail).
    TokenId {
        /// The offending id.
        id: u32,
        /// Its position in the sequence.
        pos: usize,
        /// The vocabulary size (`vocab_size`).
        vocab: usize,
    },
    #[error(
        "the image has {patch_dim}-wide patches but the model needs {want} \
         (in_channels · temporal_patch_size · patch_size²): processor and model configs disagree"
    )]
    /// An image's patch width differs from the vision config's.
    PatchDim {
        /// Width of the image's flattened patches.
        patch_dim: usize,
        /// What the vision config gives ([`crate::VisionConfig::patch_dim`]).
        want: usize,
    },
    #[error("decoding past the cache: {needed} positions needed, {capacity} allocated")]
    /// A decode step would go past the positions reserved at prefill (prompt + `max_new_tokens`).
    CacheFull {
        /// Positions the step needs.
        needed: usize,
        /// Positions the cache was allocated for.
        capacity: usize,
    },
    /// Images were given to a text-only checkpoint (a Qwen2 text model has no vision tower).
    #[error("this model is a text-only checkpoint (no vision tower): it cannot take images")]
    NoVisionTower,
    /// A tensor operation failed.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

/// One image as the model takes it: flattened patches and the patch grid.
#[derive(Debug, Clone)]
pub struct ImageInput {
    /// `[t·h·w, patch_dim]` f32.
    pub pixel_values: Tensor,
    /// Patch grid `[t, h, w]` of `pixel_values` (in patches, before merging).
    pub grid_thw: [usize; 3],
}

impl ImageInput {
    /// Moves a processor output onto `device`.
    pub fn from_processed(img: &ProcessedImage, device: &Device) -> candle_core::Result<Self> {
        let n = img.num_patches();
        Ok(Self {
            pixel_values: Tensor::from_slice(&img.pixel_values, (n, img.patch_dim), device)?,
            grid_thw: img.grid_thw.map(|g| g as usize),
        })
    }
}

/// A prompt laid out for the decoder: embeddings with image rows spliced in, and positions.
#[derive(Debug, Clone)]
pub struct PreparedPrompt {
    /// `[S, hidden]`.
    pub embeds: Tensor,
    /// 3-D M-RoPE position ids of the prompt, and their decode offset.
    pub positions: RopeIndex,
}

/// The full Qwen2.5-VL model (`Qwen2_5_VLForConditionalGeneration`), or a Qwen2 text model
/// (`Qwen2ForCausalLM`) without the vision tower (see [`crate::Qwen25VlConfig`]).
#[derive(Debug, Clone)]
pub struct Qwen25Vl {
    /// The vision tower (`visual.*`); `None` for a text-only checkpoint.
    pub vision: Option<Qwen25VisionModel>,
    /// The text decoder with its KV cache (`model.*`, `lm_head`).
    pub text: TextModel,
    cfg: Qwen25VlConfig,
    /// Positions of the prompt currently in the cache (for decode positions).
    positions: Option<RopeIndex>,
    capacity: usize,
}

impl Qwen25Vl {
    /// The model with its decoder [`TextModel::detached`] (the vision tower is never trained):
    /// what a trainer samples with.
    pub fn detached(&self) -> Qwen25Vl {
        Qwen25Vl {
            text: self.text.detached(),
            ..self.clone()
        }
    }

    /// Builds both towers from a checkpoint-root `vb` (`visual.*`, `model.*`, maybe `lm_head.*`).
    /// `quant` applies to the text decoder's linears and `lm_head`; the vision tower stays dense.
    pub fn new(cfg: &Qwen25VlConfig, quant: Quant, vb: VarBuilder) -> candle_core::Result<Self> {
        Self::new_quantized(cfg, quant, Quant::F32, vb)
    }

    /// [`Self::new`] with the vision tower's linears in `vision_quant` where they fit (for 3B:
    /// all but the 3420-wide MLP `down_proj` and the patch embedding). Why the tower is dense by
    /// default: it runs once per query, and its errors move every point the model answers with.
    pub fn new_quantized(
        cfg: &Qwen25VlConfig,
        quant: Quant,
        vision_quant: Quant,
        vb: VarBuilder,
    ) -> candle_core::Result<Self> {
        cfg.validate().map_err(candle_core::Error::wrap)?;
        let vision = match &cfg.vision {
            Some(v) => Some(Qwen25VisionModel::new_quantized(
                v,
                vision_quant,
                vb.pp("visual"),
            )?),
            None => None,
        };
        Ok(Self {
            vision,
            text: TextModel::new(&cfg.text, quant, vb.clone())?,
            cfg: cfg.clone(),
            positions: None,
            capacity: 0,
        })
    }

    /// The device the model runs on (the text decoder's).
    pub fn device(&self) -> &Device {
        self.text.device()
    }

    /// Bytes held by both towers' weights, as stored (dense f32 or quantized blocks).
    pub fn weight_bytes(&self) -> usize {
        self.vision.as_ref().map_or(0, |v| v.weight_bytes()) + self.text.weight_bytes()
    }

    /// Both rotary tables rounded to bf16 (reproduces a transformers model cast to bf16, as in
    /// the fixture's golden run).
    pub fn with_bf16_rotary_freqs(mut self) -> candle_core::Result<Self> {
        self.vision = match self.vision {
            Some(v) => Some(v.with_bf16_rotary_freqs()?),
            None => None,
        };
        self.text = self.text.with_bf16_rotary_freqs()?;
        Ok(self)
    }

    /// Runs the vision tower on `images` and builds the decoder input for `input_ids`.
    pub fn prepare(
        &self,
        input_ids: &[u32],
        images: &[ImageInput],
    ) -> Result<PreparedPrompt, ModelError> {
        let vision_rows = self.vision_rows(images)?;
        self.prepare_with_vision(input_ids, images, &vision_rows)
    }

    /// The vision tower's output for each image (one tensor of merged rows per image).
    pub(crate) fn vision_rows(&self, images: &[ImageInput]) -> Result<Vec<Tensor>, ModelError> {
        let _ = super::heap::keep_freed_pages();
        images
            .iter()
            .map(|img| {
                let (Some(tower), Some(cfg)) = (&self.vision, &self.cfg.vision) else {
                    return Err(ModelError::NoVisionTower);
                };
                let want = cfg.patch_dim();
                let got = img.pixel_values.dim(1)?;
                if got != want {
                    return Err(ModelError::PatchDim {
                        patch_dim: got,
                        want,
                    });
                }
                Ok(tower.forward(&img.pixel_values, &[img.grid_thw])?)
            })
            .collect()
    }

    /// [`Self::prepare`] with the vision tower's output already computed (one tensor per image).
    pub fn prepare_with_vision(
        &self,
        input_ids: &[u32],
        images: &[ImageInput],
        vision_rows: &[Tensor],
    ) -> Result<PreparedPrompt, ModelError> {
        self.prepare_with_text(&self.text, input_ids, images, vision_rows)
    }

    /// [`Self::prepare_with_vision`] with the token embeddings of `text` (a training policy's or
    /// a frozen reference's copy of this model's decoder).
    pub fn prepare_with_text(
        &self,
        text: &TextModel,
        input_ids: &[u32],
        images: &[ImageInput],
        vision_rows: &[Tensor],
    ) -> Result<PreparedPrompt, ModelError> {
        if input_ids.is_empty() {
            return Err(ModelError::EmptyPrompt);
        }
        let vocab = self.cfg.text.vocab_size;
        if let Some((pos, &id)) = input_ids
            .iter()
            .enumerate()
            .find(|(_, &id)| id as usize >= vocab)
        {
            return Err(ModelError::TokenId { id, pos, vocab });
        }
        let merge = match (&self.cfg.vision, images.is_empty()) {
            (Some(v), _) => v.spatial_merge_size,
            // No image: the merge size is never used.
            (None, true) => 1,
            (None, false) => return Err(ModelError::NoVisionTower),
        };
        let grids: Vec<[usize; 3]> = images.iter().map(|i| i.grid_thw).collect();
        // Also checks that each image has exactly its number of pad tokens.
        let positions = rope_index(input_ids, &grids, merge, &self.cfg.tokens)?;
        let text = text.embed(input_ids)?;
        let embeds = if vision_rows.is_empty() {
            text
        } else {
            // Gather from [text rows; image rows]: pad position p takes the next image row.
            let s = input_ids.len();
            let image = Tensor::cat(vision_rows, 0)?.to_dtype(text.dtype())?;
            let mut next = s as u32;
            let idx: Vec<u32> = input_ids
                .iter()
                .enumerate()
                .map(|(p, &id)| {
                    if id == self.cfg.tokens.image_token_id {
                        next += 1;
                        next - 1
                    } else {
                        p as u32
                    }
                })
                .collect();
            let idx = Tensor::from_vec(idx, s, text.device())?;
            Tensor::cat(&[&text, &image], 0)?.index_select(&idx, 0)?
        };
        Ok(PreparedPrompt { embeds, positions })
    }

    /// Starts a sequence: a fresh cache for the prompt plus `max_new_tokens`, then the prompt.
    pub fn prefill(
        &mut self,
        prompt: &PreparedPrompt,
        max_new_tokens: usize,
        logits_at: LogitsAt,
        keep_hidden: bool,
    ) -> Result<TextOutput, ModelError> {
        let _ = super::heap::keep_freed_pages();
        self.capacity = prompt.positions.len() + max_new_tokens;
        self.text.reset_cache(self.capacity);
        let out = self.text.forward_embeds(
            &prompt.embeds,
            &prompt.positions.ids,
            0,
            logits_at,
            keep_hidden,
        )?;
        self.positions = Some(prompt.positions.clone());
        Ok(out)
    }

    /// [`Self::prefill`] on top of the keys and values of the prompt's first `reuse` positions,
    /// taken from an earlier prompt that began with the same tokens and images
    /// ([`Self::prompt_kv`]): only the rest of the prompt runs. Positions are causal (a token's
    /// M-RoPE index depends on the tokens before it only), so the reused part is what a full
    /// prefill would compute, up to float rounding. Returns the last position's logits `[vocab]`.
    pub(crate) fn prefill_after(
        &mut self,
        prefix: &[(Tensor, Tensor)],
        reuse: usize,
        prompt: &PreparedPrompt,
        max_new_tokens: usize,
    ) -> Result<Tensor, ModelError> {
        let s = prompt.positions.len();
        if reuse == 0 || reuse >= s {
            // At least one position must run to give the next token's logits.
            return Err(ModelError::EmptyPrompt);
        }
        self.capacity = s + max_new_tokens;
        self.text.restore_cache(prefix, reuse, self.capacity)?;
        let tail = prompt.embeds.narrow(0, reuse, s - reuse)?;
        let out =
            self.text
                .forward_embeds(&tail, &prompt.positions.ids, reuse, LogitsAt::Last, false)?;
        self.positions = Some(prompt.positions.clone());
        Ok(out.logits.squeeze(0)?)
    }

    /// The keys and values of the prompt now in the cache (views, see
    /// [`TextModel::cache_prefix`]), for [`Self::prefill_after`].
    pub(crate) fn prompt_kv(&self) -> Result<Vec<(Tensor, Tensor)>, ModelError> {
        let positions = self.positions.as_ref().ok_or(ModelError::EmptyPrompt)?;
        Ok(self.text.cache_prefix(positions.len())?)
    }

    /// Feeds generated token number `k` (0-based) and returns its next-token logits `[vocab]`.
    pub fn decode(&mut self, token: u32, k: usize) -> Result<Tensor, ModelError> {
        Ok(self.decode_batch(&[token], k)?.squeeze(0)?)
    }

    /// Continues the prompt in the cache as `copies` sequences that [`Self::decode_batch`] feeds
    /// together: one prefill for a group of rollouts (GRPO) instead of one per rollout.
    pub fn fork(&mut self, copies: usize) -> Result<(), ModelError> {
        if self.positions.is_none() {
            return Err(ModelError::EmptyPrompt);
        }
        Ok(self.text.fork_cache(copies)?)
    }

    /// Feeds generated token number `k` of each sequence in the cache (one after a plain
    /// prefill, `copies` after [`Self::fork`]) and returns the next-token logits `[B, vocab]`.
    /// All sequences are at the same step, so they share the position.
    pub fn decode_batch(&mut self, tokens: &[u32], k: usize) -> Result<Tensor, ModelError> {
        let positions = self.positions.as_ref().ok_or(ModelError::EmptyPrompt)?;
        let needed = positions.len() + k + 1;
        if needed > self.capacity {
            return Err(ModelError::CacheFull {
                needed,
                capacity: self.capacity,
            });
        }
        let vocab = self.cfg.text.vocab_size;
        if let Some(&token) = tokens.iter().find(|&&t| t as usize >= vocab) {
            return Err(ModelError::TokenId {
                id: token,
                pos: positions.len() + k,
                vocab,
            });
        }
        let p = positions.decode_position(k);
        let pos = [vec![p], vec![p], vec![p]];
        let embeds = self.text.embed(tokens)?.unsqueeze(1)?;
        let out = self
            .text
            .forward_embeds(&embeds, &pos, 0, LogitsAt::Last, false)?;
        Ok(out.logits.squeeze(1)?)
    }
}
