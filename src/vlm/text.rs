//! The Qwen2 text decoder of Qwen2.5-VL on candle (`model.*` weights, transformers 4.51.3
//! `Qwen2_5_VLModel` + `lm_head`).
//!
//! Pre-RMSNorm blocks: grouped-query attention (q/k/v with bias, o without) with M-RoPE
//! ([`super::rope`]), then a SwiGLU MLP without biases; a final RMSNorm; `lm_head` tied to the
//! embedding table unless the checkpoint has its own. Attention and softmax run in f32. The KV
//! cache is allocated once for exactly `prompt + max_new_tokens` positions (candle's default
//! would size it from `max_position_embeddings`, 128 000 → ~9 GB for 3B).
//!
//! Quantization ([`Quant`]) applies to the seven linears of every layer and to `lm_head`; the
//! embedding lookup stays f32 (rows are gathered, not multiplied).

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::kv_cache::KvCache;
use candle_nn::{rms_norm, RmsNorm, VarBuilder};

use super::config::TextConfig;
use super::linear::{tensor_bytes, FusedProj, Proj, Quant, SwiGlu};
use super::rope::MRope;

#[derive(Debug, Clone)]
struct Attention {
    /// q | k | v in one product (see [`FusedProj`]).
    qkv: FusedProj,
    o_proj: Proj,
    num_heads: usize,
    num_kv_heads: usize,
    head_dim: usize,
}

impl Attention {
    fn new(cfg: &TextConfig, quant: Quant, vb: VarBuilder) -> candle_core::Result<Self> {
        let (h, hd) = (cfg.hidden_size, cfg.head_dim);
        let (nh, nkv) = (cfg.num_attention_heads, cfg.num_key_value_heads);
        Ok(Self {
            qkv: FusedProj::load(
                h,
                &[
                    ("q_proj", nh * hd),
                    ("k_proj", nkv * hd),
                    ("v_proj", nkv * hd),
                ],
                true,
                quant,
                vb.clone(),
            )?,
            o_proj: Proj::load(nh * hd, h, false, quant, vb.pp("o_proj"))?,
            num_heads: nh,
            num_kv_heads: nkv,
            head_dim: hd,
        })
    }

    /// `xs` `[1, S, hidden]`; `cos`/`sin` `[S, head_dim/2]`; `mask` `[S, T]` additive (T = cached
    /// + S) or `None` for a single new token.
    fn forward(
        &self,
        xs: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        mask: Option<&Tensor>,
        cache: &mut KvCache,
    ) -> candle_core::Result<Tensor> {
        let (b, s, _) = xs.dims3()?;
        let hd = self.head_dim;
        let heads = |t: Tensor, n: usize| -> candle_core::Result<Tensor> {
            t.reshape((b, s, n, hd))?.transpose(1, 2)?.contiguous()
        };
        let [q, k, v]: [Tensor; 3] = self
            .qkv
            .forward(xs)?
            .try_into()
            .expect("qkv has three parts");
        let q = heads(q, self.num_heads)?;
        let k = heads(k, self.num_kv_heads)?;
        let v = heads(v, self.num_kv_heads)?;
        let q = candle_nn::rotary_emb::rope(&q.to_dtype(DType::F32)?, cos, sin)?;
        let k = candle_nn::rotary_emb::rope(&k.to_dtype(DType::F32)?, cos, sin)?;
        let v = v.to_dtype(DType::F32)?;
        let (k, v) = cache.append(&k, &v)?;
        let t = k.dim(2)?;
        // Grouped-query attention without copying K/V: the `rep` query heads that share a KV head
        // become extra rows of one matmul against that head.
        let rep = self.num_heads / self.num_kv_heads;
        let q = q.reshape((b, self.num_kv_heads, rep * s, hd))?;
        let scale = 1.0 / (hd as f64).sqrt();
        let att = (q.matmul(&k.t()?)? * scale)?;
        let att = match mask {
            Some(m) => att
                .reshape((b, self.num_kv_heads, rep, s, t))?
                .broadcast_add(m)?
                .reshape((b, self.num_kv_heads, rep * s, t))?,
            None => att,
        };
        let att = candle_nn::ops::softmax_last_dim(&att)?;
        let out = att
            .matmul(&v.contiguous()?)?
            .reshape((b, self.num_heads, s, hd))?
            .transpose(1, 2)?
            .reshape((b, s, self.num_heads * hd))?
            .to_dtype(xs.dtype())?;
        self.o_proj.forward(&out)
    }
}

#[derive(Debug, Clone)]
struct DecoderLayer {
    input_layernorm: RmsNorm,
    post_attention_layernorm: RmsNorm,
    self_attn: Attention,
    mlp: SwiGlu,
}

impl DecoderLayer {
    fn new(cfg: &TextConfig, quant: Quant, vb: VarBuilder) -> candle_core::Result<Self> {
        Ok(Self {
            input_layernorm: rms_norm(cfg.hidden_size, cfg.rms_norm_eps, vb.pp("input_layernorm"))?,
            post_attention_layernorm: rms_norm(
                cfg.hidden_size,
                cfg.rms_norm_eps,
                vb.pp("post_attention_layernorm"),
            )?,
            self_attn: Attention::new(cfg, quant, vb.pp("self_attn"))?,
            mlp: SwiGlu::load(
                cfg.hidden_size,
                cfg.intermediate_size,
                false,
                quant,
                vb.pp("mlp"),
            )?,
        })
    }

    fn forward(
        &self,
        xs: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        mask: Option<&Tensor>,
        cache: &mut KvCache,
    ) -> candle_core::Result<Tensor> {
        let h =
            self.self_attn
                .forward(&self.input_layernorm.forward(xs)?, cos, sin, mask, cache)?;
        let xs = (xs + h)?;
        &xs + self
            .mlp
            .forward(&self.post_attention_layernorm.forward(&xs)?)?
    }
}

/// Which positions of a forward pass need logits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogitsAt {
    /// Only the last position (generation).
    Last,
    /// Every position (golden tests, scoring).
    All,
}

/// Output of [`TextModel::forward_embeds`].
#[derive(Debug, Clone)]
pub struct TextOutput {
    /// `[positions, vocab]` f32 logits.
    pub logits: Tensor,
    /// `[1, S, hidden]` hidden states: the input embeddings, after each layer, and (last entry)
    /// after the final norm — transformers' `output_hidden_states` layout. Empty unless asked.
    pub hidden_states: Vec<Tensor>,
}

/// The Qwen2.5-VL text decoder with its KV cache.
#[derive(Debug, Clone)]
pub struct TextModel {
    embed_tokens: Tensor,
    layers: Vec<DecoderLayer>,
    norm: RmsNorm,
    lm_head: Proj,
    rope: MRope,
    caches: Vec<KvCache>,
    cfg: TextConfig,
    device: Device,
    dtype: DType,
}

impl TextModel {
    /// Builds the decoder from the checkpoint root `vb` (it reads `model.*` and, unless the
    /// embeddings are tied, `lm_head.weight`).
    pub fn new(cfg: &TextConfig, quant: Quant, vb: VarBuilder) -> candle_core::Result<Self> {
        cfg.validate().map_err(candle_core::Error::wrap)?;
        let m = vb.pp("model");
        let embed_tokens = m
            .pp("embed_tokens")
            .get((cfg.vocab_size, cfg.hidden_size), "weight")?;
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| DecoderLayer::new(cfg, quant, m.pp("layers").pp(i)))
            .collect::<candle_core::Result<Vec<_>>>()?;
        let norm = rms_norm(cfg.hidden_size, cfg.rms_norm_eps, m.pp("norm"))?;
        let lm_head = if cfg.tie_word_embeddings {
            Proj::from_weight(embed_tokens.clone(), None, quant)?
        } else {
            Proj::load(
                cfg.hidden_size,
                cfg.vocab_size,
                false,
                quant,
                vb.pp("lm_head"),
            )?
        };
        Ok(Self {
            embed_tokens,
            layers,
            norm,
            lm_head,
            rope: MRope::new(cfg.head_dim, cfg.rope_theta, &cfg.mrope_section),
            caches: Vec::new(),
            cfg: cfg.clone(),
            device: vb.device().clone(),
            dtype: vb.dtype(),
        })
    }

    pub fn config(&self) -> &TextConfig {
        &self.cfg
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The rotary frequencies rounded to bf16, as a transformers module that was cast to bf16 has
    /// them (the fixture's golden run). See [`MRope::round_to_bf16`].
    pub fn with_bf16_rotary_freqs(mut self) -> candle_core::Result<Self> {
        self.rope.round_to_bf16()?;
        Ok(self)
    }

    pub fn rope(&self) -> &MRope {
        &self.rope
    }

    /// Bytes held by the decoder's weights. A tied dense `lm_head` shares the embedding table's
    /// storage and is not counted twice; a quantized one is a second, smaller copy and is.
    pub fn weight_bytes(&self) -> usize {
        let layers: usize = self
            .layers
            .iter()
            .map(|l| {
                let (a, m) = (&l.self_attn, &l.mlp);
                tensor_bytes(l.input_layernorm.weight())
                    + tensor_bytes(l.post_attention_layernorm.weight())
                    + a.qkv.weight_bytes()
                    + a.o_proj.weight_bytes()
                    + m.weight_bytes()
            })
            .sum();
        let shares_embedding =
            matches!(&self.lm_head, Proj::Dense(l) if l.weight().id() == self.embed_tokens.id());
        let head = if shares_embedding {
            0
        } else {
            self.lm_head.weight_bytes()
        };
        tensor_bytes(&self.embed_tokens) + layers + tensor_bytes(self.norm.weight()) + head
    }

    /// Token embeddings `[S, hidden]` for `ids`.
    pub(crate) fn embed(&self, ids: &[u32]) -> candle_core::Result<Tensor> {
        let ids = Tensor::from_slice(ids, ids.len(), &self.device)?;
        self.embed_tokens.index_select(&ids, 0)
    }

    /// Drops the cache and allocates a fresh one for `capacity` positions per layer.
    pub(crate) fn reset_cache(&mut self, capacity: usize) {
        self.caches = (0..self.cfg.num_hidden_layers)
            .map(|_| KvCache::new(2, capacity.max(1)))
            .collect();
    }

    /// Positions already in the cache.
    pub fn cached_len(&self) -> usize {
        self.caches.first().map_or(0, KvCache::current_seq_len)
    }

    /// Runs `embeds` `[S, hidden]` at positions `pos[axis][start..start+S]` on top of the cache.
    /// Call [`Self::reset_cache`] before a new sequence.
    pub(crate) fn forward_embeds(
        &mut self,
        embeds: &Tensor,
        pos: &[Vec<u32>; 3],
        start: usize,
        logits_at: LogitsAt,
        keep_hidden: bool,
    ) -> candle_core::Result<TextOutput> {
        let s = embeds.dim(0)?;
        if self.caches.len() != self.layers.len() {
            self.reset_cache(s);
        }
        let past = self.cached_len();
        let (cos, sin) = self.rope.cos_sin(pos, start, s, &self.device)?;
        let mask = if s > 1 {
            Some(causal_mask(s, past, &self.device)?)
        } else {
            None
        };
        let mut xs = embeds.to_dtype(self.dtype)?.unsqueeze(0)?;
        let mut hidden_states = Vec::new();
        if keep_hidden {
            hidden_states.push(xs.clone());
        }
        let n = self.layers.len();
        for (i, (layer, cache)) in self.layers.iter().zip(&mut self.caches).enumerate() {
            xs = layer.forward(&xs, &cos, &sin, mask.as_ref(), cache)?;
            if keep_hidden && i + 1 < n {
                hidden_states.push(xs.clone());
            }
        }
        let xs = self.norm.forward(&xs)?;
        if keep_hidden {
            hidden_states.push(xs.clone());
        }
        let xs = xs.squeeze(0)?;
        let xs = match logits_at {
            LogitsAt::Last => xs.narrow(0, s - 1, 1)?,
            LogitsAt::All => xs,
        };
        let logits = self.lm_head.forward(&xs)?.to_dtype(DType::F32)?;
        Ok(TextOutput {
            logits,
            hidden_states,
        })
    }
}

/// Additive causal mask `[S, past + S]` (f32): 0 where query `i` may see key `j`, −∞ after it.
fn causal_mask(s: usize, past: usize, device: &Device) -> candle_core::Result<Tensor> {
    let t = past + s;
    let data: Vec<f32> = (0..s)
        .flat_map(|i| (0..t).map(move |j| if j > past + i { f32::NEG_INFINITY } else { 0.0 }))
        .collect();
    Tensor::from_vec(data, (s, t), device)
}
