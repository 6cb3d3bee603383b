//! Multimodal rotary positions (M-RoPE) of the Qwen2.5-VL text model.
//!
//! Every token carries three position ids (temporal, height, width). Text tokens have all three
//! equal to a running counter; the image tokens of one image share the temporal id and spread
//! over the merged patch grid in height and width, so the model sees the image's 2-D layout
//! (transformers 4.51.3 `get_rope_index`). The rotary angle of half-dimension `j` then uses the
//! temporal id for the first `mrope_section[0]` frequencies, the height id for the next
//! `mrope_section[1]`, the width id for the rest — an ordinary rotate-half RoPE with a per-token
//! cos/sin table, built here in f32 whatever the weight dtype (bf16 positions collapse above 256).

use candle_core::{Device, Tensor};

use super::config::TokenIds;

/// Errors from laying out position ids.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RopeError {
    #[error(
        "the prompt has {found} `<|vision_start|>` + image-pad blocks but {given} image grids were given"
    )]
    ImageCount { found: usize, given: usize },
    #[error(
        "image {image} has {found} image-pad tokens after `<|vision_start|>` but its grid {grid:?} needs {needed}"
    )]
    ImageTokens {
        image: usize,
        found: usize,
        needed: usize,
        grid: [usize; 3],
    },
    #[error("image-pad token at position {pos} is not inside a `<|vision_start|>` block")]
    StrayImageToken { pos: usize },
}

/// 3-D position ids for a prompt and the offset that continues them during decoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RopeIndex {
    /// `[temporal, height, width]` ids, each as long as the prompt.
    pub ids: [Vec<u32>; 3],
    /// `max(ids) + 1 − prompt_len` (transformers' `rope_deltas`): the `k`-th generated token
    /// (k = 0, 1, …) has position `prompt_len + k + delta` on all three axes.
    pub delta: i64,
}

impl RopeIndex {
    /// Number of prompt positions.
    pub(crate) fn len(&self) -> usize {
        self.ids[0].len()
    }

    /// The (equal) position id of generated token `k` (0-based).
    pub fn decode_position(&self, k: usize) -> u32 {
        (self.len() as i64 + k as i64 + self.delta) as u32
    }

    /// The ids of the prompt followed by `generated` tokens (what a training pass over prompt +
    /// response runs at: the positions decoding gave them).
    pub fn with_generated(&self, generated: usize) -> [Vec<u32>; 3] {
        let more: Vec<u32> = (0..generated).map(|k| self.decode_position(k)).collect();
        self.ids.clone().map(|mut axis| {
            axis.extend_from_slice(&more);
            axis
        })
    }
}

/// transformers' `get_rope_index` for still images: `grids` are the `[t, h, w]` patch grids of
/// the images in prompt order, `merge` the spatial merge size (2). Each image block is the run
/// of `image_token_id` right after a `vision_start_token_id`.
pub fn rope_index(
    input_ids: &[u32],
    grids: &[[usize; 3]],
    merge: usize,
    tokens: &TokenIds,
) -> Result<RopeIndex, RopeError> {
    let n = input_ids.len();
    let mut ids: [Vec<u32>; 3] = [
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    ];
    // Next text position: one past the largest id so far.
    let mut next: u32 = 0;
    let mut image = 0usize;
    let mut i = 0usize;
    while i < n {
        let tok = input_ids[i];
        let starts_image = i > 0
            && input_ids[i - 1] == tokens.vision_start_token_id
            && tok == tokens.image_token_id;
        if tok == tokens.image_token_id && !starts_image {
            return Err(RopeError::StrayImageToken { pos: i });
        }
        if !starts_image {
            for axis in &mut ids {
                axis.push(next);
            }
            next += 1;
            i += 1;
            continue;
        }
        let Some(&grid) = grids.get(image) else {
            return Err(RopeError::ImageCount {
                found: count_images(input_ids, tokens),
                given: grids.len(),
            });
        };
        let [t, h, w] = grid;
        let (lh, lw) = (h / merge, w / merge);
        let needed = t * lh * lw;
        let found = input_ids[i..]
            .iter()
            .take_while(|&&x| x == tokens.image_token_id)
            .count();
        if found != needed {
            return Err(RopeError::ImageTokens {
                image,
                found,
                needed,
                grid,
            });
        }
        // Still images: `second_per_grid_t` is 0, so every frame has temporal id `next`.
        for _frame in 0..t {
            for row in 0..lh {
                for col in 0..lw {
                    ids[0].push(next);
                    ids[1].push(next + row as u32);
                    ids[2].push(next + col as u32);
                }
            }
        }
        next += (lh.max(lw).max(1)) as u32;
        image += 1;
        i += needed;
    }
    if image != grids.len() {
        return Err(RopeError::ImageCount {
            found: image,
            given: grids.len(),
        });
    }
    let max = ids.iter().flatten().copied().max().map_or(-1, i64::from);
    Ok(RopeIndex {
        ids,
        delta: max + 1 - n as i64,
    })
}

fn count_images(input_ids: &[u32], tokens: &TokenIds) -> usize {
    input_ids
        .windows(2)
        .filter(|w| w[0] == tokens.vision_start_token_id && w[1] == tokens.image_token_id)
        .count()
}

/// `values` rounded to bf16 and widened back to f32 — what a transformers module cast to bf16 does
/// to its non-persistent rotary `inv_freq` buffers (both towers have one).
pub(crate) fn round_to_bf16(values: Vec<f32>) -> candle_core::Result<Vec<f32>> {
    let n = values.len();
    Tensor::from_vec(values, n, &Device::Cpu)?
        .to_dtype(candle_core::DType::BF16)?
        .to_dtype(candle_core::DType::F32)?
        .to_vec1()
}

/// The text model's rotary frequencies and M-RoPE sections.
#[derive(Debug, Clone)]
pub struct MRope {
    /// `head_dim/2` frequencies `1/θ^(2j/head_dim)`, f32.
    inv_freq: Vec<f32>,
    /// For each half-dimension `j`, which position axis (0 = t, 1 = h, 2 = w) drives it.
    axis_of: Vec<usize>,
}

impl MRope {
    pub(crate) fn new(head_dim: usize, theta: f64, sections: &[usize]) -> Self {
        let half = head_dim / 2;
        let inv_freq = (0..half)
            .map(|j| (1.0 / theta.powf(2.0 * j as f64 / head_dim as f64)) as f32)
            .collect();
        let mut axis_of = Vec::with_capacity(half);
        for (axis, &len) in sections.iter().enumerate() {
            axis_of.extend(std::iter::repeat_n(axis, len));
        }
        axis_of.truncate(half);
        Self { inv_freq, axis_of }
    }

    /// transformers computes `inv_freq` as `1/θ^(arange(0, d, 2).float()/d)` in f32; torch's
    /// f32 `pow` and ours agree to the last ulp on the fixture, but a module cast to bf16 rounds
    /// this buffer — see [`super::Qwen25VisionModel::with_bf16_rotary_freqs`].
    pub(crate) fn round_to_bf16(&mut self) -> candle_core::Result<()> {
        self.inv_freq = round_to_bf16(std::mem::take(&mut self.inv_freq))?;
        Ok(())
    }

    /// `(cos, sin)`, each `[len, head_dim/2]` f32, for positions `ids[axis][start..start+len]`.
    pub(crate) fn cos_sin(
        &self,
        ids: &[Vec<u32>; 3],
        start: usize,
        len: usize,
        device: &Device,
    ) -> candle_core::Result<(Tensor, Tensor)> {
        let half = self.inv_freq.len();
        let mut cos = Vec::with_capacity(len * half);
        let mut sin = Vec::with_capacity(len * half);
        let (t, h, w) = (
            &ids[0][start..start + len],
            &ids[1][start..start + len],
            &ids[2][start..start + len],
        );
        for ((&pt, &ph), &pw) in t.iter().zip(h).zip(w) {
            let by_axis = [pt as f32, ph as f32, pw as f32];
            for (&f, &axis) in self.inv_freq.iter().zip(&self.axis_of) {
                // Position and frequency multiply in f32, as in transformers (autocast off).
                let angle = by_axis[axis] * f;
                cos.push(angle.cos());
                sin.push(angle.sin());
            }
        }
        Ok((
            Tensor::from_vec(cos, (len, half), device)?,
            Tensor::from_vec(sin, (len, half), device)?,
        ))
    }
}
