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
//! embedding table is not quantized (rows are gathered, not multiplied) and, in a quantized
//! decoder, stays bf16 where the checkpoint stores it so (`weights::AS_STORED`). Dense weights
//! (an f32 decoder's linears, its table and tied `lm_head`) stay bf16 too where our kernels
//! take them so (`linear::keeps_bf16`): the products are the f32 ones, bit for bit.
//!
//! Training: [`TextModel::make_trainable`] turns chosen weights into `Var`s (full fine-tuning);
//! [`TextModel::add_lora`] puts PEFT LoRA adapters on chosen linears instead, the base frozen.

use candle_core::{DType, Device, Module, Tensor, Var, D};
use candle_nn::kv_cache::KvCache;
use candle_nn::{rms_norm, RmsNorm, VarBuilder};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::config::TextConfig;
pub use super::linear::TrainableWeight;
use super::linear::{tensor_bytes, CheckpointTensor, FusedProj, Lora, Proj, Quant, SwiGlu};
use super::rope::MRope;

/// Which implementation of the three ops candle fuses: RMSNorm, softmax and the rotary embedding.
///
/// Why two: candle's fused kernels are the fast path but have no backward pass, so a loss built
/// on them gives the weights below them no gradient (silently: the backward pass stops there).
/// Training runs the same maths from differentiable primitives; the two agree to float rounding
/// (`tests/vlm_train.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Kernels {
    /// candle's fused kernels (inference).
    #[default]
    Fused,
    /// `x / sqrt(mean(x²) + eps) · w`, `exp(x − max) / Σ`, `x·cos + rotate_half(x)·sin` (training).
    Differentiable,
}

impl Kernels {
    fn rms_norm(self, norm: &RmsNorm, eps: f64, xs: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Kernels::Fused => norm.forward(xs),
            Kernels::Differentiable => candle_nn::ops::rms_norm_slow(xs, norm.weight(), eps as f32),
        }
    }

    fn softmax(self, xs: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Kernels::Fused => candle_nn::ops::softmax_last_dim(xs),
            Kernels::Differentiable => candle_nn::ops::softmax(xs, D::Minus1),
        }
    }

    /// `xs` `[B, heads, S, head_dim]`, `cos`/`sin` `[S, head_dim/2]`.
    fn rope(self, xs: &Tensor, cos: &Tensor, sin: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Kernels::Fused => candle_nn::rotary_emb::rope(xs, cos, sin),
            Kernels::Differentiable => candle_nn::rotary_emb::rope_slow(xs, cos, sin),
        }
    }
}

/// What attention sees before this pass's own keys and values.
enum Past<'a> {
    /// Nothing (a training pass over whole sequences).
    None,
    /// The inference KV cache: appended to, then attended over.
    Cache(&'a mut KvCache),
    /// Nothing, and this pass's K/V are pushed to the vector (the prefix pass of
    /// [`TextModel::forward_train_shared`]).
    Record(&'a mut Vec<(Tensor, Tensor)>),
    /// A shared prefix's differentiable K/V `[1, kv_heads, S, head_dim]`, prepended for every row.
    Prefix(&'a (Tensor, Tensor)),
}

#[derive(Debug, Clone)]
struct Attention {
    /// q | k | v in one product (see [`FusedProj`]).
    qkv: FusedProj,
    /// A one-part [`FusedProj`], handled like the other linears.
    o_proj: FusedProj,
    num_heads: usize,
    num_kv_heads: usize,
    head_dim: usize,
}

impl Attention {
    fn detached(&self) -> Self {
        Self {
            qkv: self.qkv.detached(),
            o_proj: self.o_proj.detached(),
            ..*self
        }
    }

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
            o_proj: FusedProj::load(nh * hd, &[("o_proj", h)], false, quant, vb)?,
            num_heads: nh,
            num_kv_heads: nkv,
            head_dim: hd,
        })
    }

    /// `xs` `[B, S, hidden]`; `cos`/`sin` `[S, head_dim/2]`; `mask` the causal mask of S > 1 new
    /// positions, `None` for a single new token. Without a cache (training) K/V are this pass's
    /// only.
    fn forward(
        &self,
        xs: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        mask: Option<&Causal>,
        past: Past<'_>,
        kernels: Kernels,
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
        let (nkv, rep) = (self.num_kv_heads, self.num_heads / self.num_kv_heads);
        // An inference pass over several positions attends in causal blocks
        // (`attend::causal_prefill`), which wants each KV head's query rows position-major:
        // `[b, kv_heads, s·rep, d]`, rotated as `[b·kv_heads, s, rep, d]` (rope's "thd" layout).
        let blocked = matches!(mask, Some(Causal::Blocks));
        let q = if blocked {
            let q = q
                .reshape((b, s, nkv, rep, hd))?
                .transpose(1, 2)?
                .contiguous()?
                .reshape((b * nkv, s, rep, hd))?;
            candle_nn::rotary_emb::rope_thd(&q, cos, sin)?.reshape((b, nkv, s * rep, hd))?
        } else {
            kernels.rope(&heads(q, self.num_heads)?.to_dtype(DType::F32)?, cos, sin)?
        };
        let k = heads(k, self.num_kv_heads)?;
        let v = heads(v, self.num_kv_heads)?;
        let k = kernels.rope(&k.to_dtype(DType::F32)?, cos, sin)?;
        let v = v.to_dtype(DType::F32)?;
        // Decode: one new row attending over the cache takes the in-place, pooled path.
        let decoding =
            kernels == Kernels::Fused && mask.is_none() && matches!(past, Past::Cache(_));
        let (k, v) = match past {
            Past::Cache(cache) => cache.append(&k, &v)?,
            Past::None => (k, v),
            Past::Record(kept) => {
                kept.push((k.clone(), v.clone()));
                (k, v)
            }
            Past::Prefix((pk, pv)) => {
                // The prefix's K/V (one sequence, with their graph) shared by every row.
                let grow = |p: &Tensor| -> candle_core::Result<Tensor> {
                    let (_, h, t, d) = p.dims4()?;
                    p.broadcast_as((b, h, t, d))
                };
                (
                    Tensor::cat(&[&grow(pk)?, &k], 2)?.contiguous()?,
                    Tensor::cat(&[&grow(pv)?, &v], 2)?.contiguous()?,
                )
            }
        };
        let scale = 1.0 / (hd as f64).sqrt();
        if blocked {
            let out = super::attend::causal_prefill(&q, &k, &v, scale, s, rep)?
                .reshape((b, nkv, s, rep, hd))?
                .transpose(1, 2)?
                .reshape((b, s, self.num_heads * hd))?
                .to_dtype(xs.dtype())?;
            return self.o_proj.forward_one(&out);
        }
        if decoding {
            if let Some(out) = super::attend::single_query(&q, &k, &v, scale)? {
                return self.o_proj.forward_one(&out.to_dtype(xs.dtype())?);
            }
        }
        let t = k.dim(2)?;
        // Grouped-query attention without copying K/V: the `rep` query heads that share a KV head
        // become extra rows of one matmul against that head.
        let q = q.reshape((b, nkv, rep * s, hd))?;
        let att = (q.matmul(&k.t()?)? * scale)?;
        let att = match mask {
            Some(Causal::Additive(m)) => att
                .reshape((b, nkv, rep, s, t))?
                .broadcast_add(m)?
                .reshape((b, nkv, rep * s, t))?,
            _ => att,
        };
        let att = kernels.softmax(&att)?;
        let out = att
            .matmul(&v.contiguous()?)?
            .reshape((b, self.num_heads, s, hd))?
            .transpose(1, 2)?
            .reshape((b, s, self.num_heads * hd))?
            .to_dtype(xs.dtype())?;
        self.o_proj.forward_one(&out)
    }
}

#[derive(Debug, Clone)]
struct DecoderLayer {
    input_layernorm: RmsNorm,
    post_attention_layernorm: RmsNorm,
    self_attn: Attention,
    mlp: SwiGlu,
    eps: f64,
}

impl DecoderLayer {
    fn detached(&self) -> Self {
        Self {
            input_layernorm: RmsNorm::new(self.input_layernorm.weight().detach(), self.eps),
            post_attention_layernorm: RmsNorm::new(
                self.post_attention_layernorm.weight().detach(),
                self.eps,
            ),
            self_attn: self.self_attn.detached(),
            mlp: self.mlp.detached(),
            eps: self.eps,
        }
    }

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
            eps: cfg.rms_norm_eps,
        })
    }

    /// The seven linears as `(module prefix under the layer, projection)`, in checkpoint order:
    /// the one walk that training, checkpoints and LoRA share.
    fn linears(&self) -> [(&'static str, &FusedProj); 4] {
        [
            ("self_attn", &self.self_attn.qkv),
            ("self_attn", &self.self_attn.o_proj),
            ("mlp", &self.mlp.gate_up),
            ("mlp", &self.mlp.down_proj),
        ]
    }

    /// [`Self::linears`], mutable.
    fn linears_mut(&mut self) -> [(&'static str, &mut FusedProj); 4] {
        [
            ("self_attn", &mut self.self_attn.qkv),
            ("self_attn", &mut self.self_attn.o_proj),
            ("mlp", &mut self.mlp.gate_up),
            ("mlp", &mut self.mlp.down_proj),
        ]
    }

    fn forward(
        &self,
        xs: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        mask: Option<&Causal>,
        past: Past<'_>,
        kernels: Kernels,
    ) -> candle_core::Result<Tensor> {
        let normed = kernels.rms_norm(&self.input_layernorm, self.eps, xs)?;
        let h = self
            .self_attn
            .forward(&normed, cos, sin, mask, past, kernels)?;
        let xs = (xs + h)?;
        let normed = kernels.rms_norm(&self.post_attention_layernorm, self.eps, &xs)?;
        &xs + self.mlp.forward_act(&normed, kernels == Kernels::Fused)?
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
        let table = m.pp("embed_tokens");
        let as_stored = format!("weight{}", super::weights::AS_STORED);
        let shape = (cfg.vocab_size, cfg.hidden_size);
        // A quantized decoder only gathers rows of the table (`lm_head` gets blocks of its own,
        // unless a tied one's width does not fit the blocks and it shares the table), so the
        // table stays bf16 where the checkpoint stores it so: 0.62 GB less for 3B. So does
        // every dense weight where our kernels take bf16 (`linear::keeps_bf16`), a tied
        // `lm_head` included: the same products, half the bytes.
        let gathered_only = quant != Quant::F32
            && (!cfg.tie_word_embeddings || quant.row_bytes(cfg.hidden_size).is_some());
        let keep_table = gathered_only || super::linear::keeps_bf16(vb.device());
        let embed_tokens = if keep_table && table.contains_tensor(&as_stored) {
            table.get(shape, &as_stored)?
        } else {
            table.get(shape, "weight")?
        };
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| DecoderLayer::new(cfg, quant, m.pp("layers").pp(i)))
            .collect::<candle_core::Result<Vec<_>>>()?;
        let norm = rms_norm(cfg.hidden_size, cfg.rms_norm_eps, m.pp("norm"))?;
        let lm_head = if cfg.tie_word_embeddings {
            Proj::tied(embed_tokens.clone(), quant, &table)?
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

    pub(crate) fn device(&self) -> &Device {
        &self.device
    }

    /// The longest sequence the checkpoint was trained for (`max_position_embeddings`): a
    /// trainer refuses prompts that would not fit with their answers rather than train on
    /// positions the model never saw.
    pub fn max_positions(&self) -> usize {
        self.cfg.max_position_embeddings
    }

    /// The rotary frequencies rounded to bf16, as a transformers module that was cast to bf16 has
    /// them (the fixture's golden run). See [`MRope::round_to_bf16`].
    pub(crate) fn with_bf16_rotary_freqs(mut self) -> candle_core::Result<Self> {
        self.rope.round_to_bf16()?;
        Ok(self)
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
        let head = if self.tied_head() {
            0
        } else {
            self.lm_head.weight_bytes()
        };
        tensor_bytes(&self.embed_tokens) + layers + tensor_bytes(self.norm.weight()) + head
    }

    /// Token embeddings `[S, hidden]` for `ids`, in the model's dtype (a bf16 table's rows widen
    /// exactly).
    pub fn embed(&self, ids: &[u32]) -> candle_core::Result<Tensor> {
        let ids = Tensor::from_slice(ids, ids.len(), &self.device)?;
        self.embed_tokens
            .index_select(&ids, 0)?
            .to_dtype(self.dtype)
    }

    /// Drops the cache and allocates a fresh one for `capacity` positions per layer.
    pub(crate) fn reset_cache(&mut self, capacity: usize) {
        self.caches = (0..self.cfg.num_hidden_layers)
            .map(|_| KvCache::new(2, capacity.max(1)))
            .collect();
    }

    /// Positions already in the cache.
    pub(crate) fn cached_len(&self) -> usize {
        self.caches.first().map_or(0, KvCache::current_seq_len)
    }

    /// Runs `embeds` `[S, hidden]` (one sequence) or `[B, S, hidden]` (a batch sharing positions)
    /// at positions `pos[axis][start..start+S]` on top of the cache. Call [`Self::reset_cache`]
    /// before a new sequence. Logits are `[positions, vocab]` for one sequence and
    /// `[B, positions, vocab]` for a batch.
    pub(crate) fn forward_embeds(
        &mut self,
        embeds: &Tensor,
        pos: &[Vec<u32>; 3],
        start: usize,
        logits_at: LogitsAt,
        keep_hidden: bool,
    ) -> candle_core::Result<TextOutput> {
        let batched = embeds.rank() == 3;
        let xs = if batched {
            embeds.clone()
        } else {
            embeds.unsqueeze(0)?
        };
        let s = xs.dim(1)?;
        if self.caches.len() != self.layers.len() {
            self.reset_cache(s);
        }
        let past = self.cached_len();
        let mut hidden_states = Vec::new();
        let keep = keep_hidden.then_some(&mut hidden_states);
        let xs = run_layers(
            &self.layers,
            &self.norm,
            &self.rope,
            &self.device,
            self.dtype,
            (&xs, pos, start, past),
            Pasts::Caches(&mut self.caches),
            Kernels::Fused,
            keep,
        )?;
        let xs = match logits_at {
            LogitsAt::Last => xs.narrow(1, s - 1, 1)?,
            LogitsAt::All => xs,
        };
        let logits = self.lm_head.forward(&xs)?.to_dtype(DType::F32)?;
        let logits = if batched { logits } else { logits.squeeze(0)? };
        Ok(TextOutput {
            logits,
            hidden_states,
        })
    }

    /// The training forward: `embeds` `[B, S, hidden]` (sequences sharing the positions
    /// `pos[axis][..S]`, padded on the right) through every layer without a cache, with
    /// [`Kernels::Differentiable`], so a loss on the result back-propagates to every weight that
    /// is a [`Var`]. Returns f32 logits `[B, S − from, vocab]` for positions `from..S` only (the
    /// response: a 3B vocabulary is 151 936 wide, logits for a whole prompt would be gigabytes).
    pub fn forward_train(
        &self,
        embeds: &Tensor,
        pos: &[Vec<u32>; 3],
        from: usize,
    ) -> candle_core::Result<Tensor> {
        let s = embeds.dim(1)?;
        if from >= s {
            candle_core::bail!("forward_train: logits from position {from} of a {s}-long sequence");
        }
        let xs = self.train_layers(embeds, pos, 0, Pasts::None)?;
        let xs = xs.narrow(1, from, s - from)?;
        self.lm_head.forward(&xs)?.to_dtype(DType::F32)
    }

    /// [`Self::forward_train`] for `G` continuations of one prefix, without repeating the prefix:
    /// `prefix` `[1, S, hidden]` runs once (its keys and values keep their graph), `suffix`
    /// `[G, T, hidden]` attends to them and to itself; `pos` holds the ids of all `S + T`
    /// positions. Returns logits `[G, T, vocab]` at positions `S − 1 … S + T − 2`: row `j`
    /// predicts suffix token `j`. The same numbers as the full pass over `[G, S + T]` (equal up
    /// to float rounding), at `S + G·T` positions instead of `G·(S + T)`: for GRPO, whose G
    /// responses share a long prompt, most of the work.
    pub fn forward_train_shared(
        &self,
        prefix: &Tensor,
        suffix: &Tensor,
        pos: &[Vec<u32>; 3],
    ) -> candle_core::Result<Tensor> {
        let (one, s, h) = prefix.dims3()?;
        let (g, t, _) = suffix.dims3()?;
        if one != 1 || s == 0 || t == 0 {
            candle_core::bail!("forward_train_shared: prefix [1, S>0, H], suffix [G, T>0, H]");
        }
        let mut kv = Vec::with_capacity(self.layers.len());
        let xp = self.train_layers(prefix, pos, 0, Pasts::Record(&mut kv))?;
        let xs = self.train_layers(suffix, pos, s, Pasts::Prefix(&kv))?;
        let last = xp.narrow(1, s - 1, 1)?.broadcast_as((g, 1, h))?;
        let rows = if t > 1 {
            Tensor::cat(&[&last, &xs.narrow(1, 0, t - 1)?], 1)?
        } else {
            last.contiguous()?
        };
        self.lm_head.forward(&rows)?.to_dtype(DType::F32)
    }

    /// The differentiable pass of `xs` at positions `start..` after `start` earlier positions
    /// (seen through `pasts`), final norm included.
    fn train_layers(
        &self,
        xs: &Tensor,
        pos: &[Vec<u32>; 3],
        start: usize,
        pasts: Pasts<'_>,
    ) -> candle_core::Result<Tensor> {
        run_layers(
            &self.layers,
            &self.norm,
            &self.rope,
            &self.device,
            self.dtype,
            (xs, pos, start, start),
            pasts,
            Kernels::Differentiable,
            None,
        )
    }

    /// Each layer's cached K and V over the first `len` positions, as views (no copy): a
    /// prompt's keys and values, kept to start the next question about the same frame from
    /// ([`Self::restore_cache`]). Safe to hold while the sequence goes on: decoding writes only
    /// past the prompt, and a new sequence allocates new buffers ([`Self::reset_cache`]).
    pub(crate) fn cache_prefix(&self, len: usize) -> candle_core::Result<Vec<(Tensor, Tensor)>> {
        if self.caches.len() != self.layers.len() || self.cached_len() < len {
            candle_core::bail!(
                "cache_prefix: {len} positions asked, {} cached",
                self.cached_len()
            );
        }
        self.caches
            .iter()
            .map(|c| match (c.k()?, c.v()?) {
                (Some(k), Some(v)) => Ok((k.narrow(2, 0, len)?, v.narrow(2, 0, len)?)),
                _ => candle_core::bail!("cache_prefix: nothing cached"),
            })
            .collect()
    }

    /// A fresh cache of `capacity` positions per layer holding the first `len` positions of
    /// `kv` (from [`Self::cache_prefix`]); the next forward continues after them.
    pub(crate) fn restore_cache(
        &mut self,
        kv: &[(Tensor, Tensor)],
        len: usize,
        capacity: usize,
    ) -> candle_core::Result<()> {
        if kv.len() != self.layers.len() {
            candle_core::bail!(
                "restore_cache: {} layers given, the model has {}",
                kv.len(),
                self.layers.len()
            );
        }
        let mut caches = Vec::with_capacity(kv.len());
        for (k, v) in kv {
            let mut cache = KvCache::new(2, capacity.max(len).max(1));
            cache.append(
                &k.narrow(2, 0, len)?.contiguous()?,
                &v.narrow(2, 0, len)?.contiguous()?,
            )?;
            caches.push(cache);
        }
        self.caches = caches;
        Ok(())
    }

    /// Repeats the cached sequence `copies` times along the batch axis, so that `copies`
    /// continuations of one prompt decode as one batch after a single prefill (GRPO's group of
    /// rollouts). The capacity stays what [`Self::reset_cache`] gave.
    pub(crate) fn fork_cache(&mut self, copies: usize) -> candle_core::Result<()> {
        for cache in &mut self.caches {
            let (Some(k), Some(v)) = (cache.k()?, cache.v()?) else {
                candle_core::bail!("fork_cache: nothing cached yet");
            };
            if k.dim(0)? != 1 {
                candle_core::bail!("fork_cache: the cache already holds a batch");
            }
            let capacity = cache.k_cache().max_seq_len();
            let mut forked = KvCache::new(2, capacity);
            forked.append(
                &k.repeat((copies, 1, 1, 1))?.contiguous()?,
                &v.repeat((copies, 1, 1, 1))?.contiguous()?,
            )?;
            *cache = forked;
        }
        Ok(())
    }

    /// Turns the weights `select` picks (by their checkpoint names, e.g.
    /// `model.layers.0.self_attn.q_proj.weight`) into [`Var`]s in place and returns them with
    /// the names of the tensors each holds. Fused weights (`q|k|v`, `gate|up`) are one `Var`
    /// that holds several checkpoint tensors: it is picked when any of them is. Dense (f32)
    /// models only: a quantized weight is refused.
    pub fn make_trainable(
        &mut self,
        select: &dyn Fn(&str) -> bool,
    ) -> candle_core::Result<Vec<TrainableWeight>> {
        let mut out = Vec::new();
        if select("model.embed_tokens.weight") {
            // Trained in f32: a bf16-kept table is widened (exactly) first.
            let var = Var::from_tensor(&self.embed_tokens.to_dtype(DType::F32)?)?;
            self.set_table(var.as_tensor().clone())?;
            out.push(TrainableWeight::whole("model.embed_tokens.weight", var));
        }
        for (i, layer) in self.layers.iter_mut().enumerate() {
            let p = format!("model.layers.{i}");
            for (norm, name) in [
                (&mut layer.input_layernorm, "input_layernorm"),
                (
                    &mut layer.post_attention_layernorm,
                    "post_attention_layernorm",
                ),
            ] {
                let full = format!("{p}.{name}.weight");
                if select(&full) {
                    let var = Var::from_tensor(norm.weight())?;
                    *norm = RmsNorm::new(var.as_tensor().clone(), layer.eps);
                    out.push(TrainableWeight::whole(&full, var));
                }
            }
            for (sub, proj) in layer.linears_mut() {
                out.extend(proj.make_trainable(&format!("{p}.{sub}"), select)?);
            }
        }
        if select("model.norm.weight") {
            let var = Var::from_tensor(self.norm.weight())?;
            self.norm = RmsNorm::new(var.as_tensor().clone(), self.cfg.rms_norm_eps);
            out.push(TrainableWeight::whole("model.norm.weight", var));
        }
        if !self.tied_head() {
            out.extend(self.lm_head.make_trainable("lm_head", select)?);
        }
        Ok(out)
    }

    /// Every weight of the decoder under its checkpoint name (fused weights split back), as
    /// they are now: what a training checkpoint writes. A linear with a LoRA adapter gives its
    /// merged weight `W + (alpha/rank)·B·A`, so the checkpoint loads without LoRA support.
    /// Quantized weights are refused.
    /// The decoder with every weight `detach`ed: shared storage (no copy; the optimiser's
    /// in-place updates show through), outside autograd, a cache of its own. What sampling
    /// runs on while training: with trainable weights every operation would record its graph,
    /// which the KV cache keeps alive for the whole rollout, and decode rows would miss our
    /// kernels (see [`Proj::detached`]).
    pub(crate) fn detached(&self) -> TextModel {
        let embed_tokens = self.embed_tokens.detach();
        let lm_head = if self.tied_head() {
            Proj::Dense(candle_nn::Linear::new(embed_tokens.clone(), None))
        } else {
            self.lm_head.detached()
        };
        TextModel {
            embed_tokens,
            layers: self.layers.iter().map(DecoderLayer::detached).collect(),
            norm: RmsNorm::new(self.norm.weight().detach(), self.cfg.rms_norm_eps),
            lm_head,
            ..self.clone()
        }
    }

    /// Every decoder weight under its checkpoint name, LoRA adapters merged, as f32 tensors outside
    /// any autograd graph.
    pub fn named_weights(&self) -> candle_core::Result<Vec<(String, Tensor)>> {
        self.checkpoint_tensors()?
            .into_iter()
            .map(|(n, t)| Ok((n, t.get()?)))
            .collect()
    }

    /// [`Self::named_weights`] with LoRA-adapted weights left unmerged until each is asked for
    /// ([`CheckpointTensor`]): what a checkpoint writes, one tensor at a time.
    pub fn checkpoint_tensors(&self) -> candle_core::Result<Vec<(String, CheckpointTensor<'_>)>> {
        let ready = |n: String, t: Tensor| (n, CheckpointTensor::Ready(t));
        let mut out = vec![ready(
            "model.embed_tokens.weight".to_string(),
            self.embed_tokens.clone(),
        )];
        for (i, layer) in self.layers.iter().enumerate() {
            let p = format!("model.layers.{i}");
            out.push(ready(
                format!("{p}.input_layernorm.weight"),
                layer.input_layernorm.weight().clone(),
            ));
            out.push(ready(
                format!("{p}.post_attention_layernorm.weight"),
                layer.post_attention_layernorm.weight().clone(),
            ));
            for (sub, proj) in layer.linears() {
                out.extend(proj.named_weights(&format!("{p}.{sub}"))?);
            }
        }
        out.push(ready(
            "model.norm.weight".to_string(),
            self.norm.weight().clone(),
        ));
        if !self.tied_head() {
            for (n, t) in self.lm_head.named_weights("lm_head")? {
                out.push(ready(n, t));
            }
        }
        Ok(out)
    }

    /// Whether `lm_head` is the embedding table itself (tied, dense).
    fn tied_head(&self) -> bool {
        matches!(&self.lm_head, Proj::Dense(l) if l.weight().id() == self.embed_tokens.id())
    }

    /// Makes `table` the embedding table, and the head too where the head was the table.
    fn set_table(&mut self, table: Tensor) -> candle_core::Result<()> {
        let tied = self.tied_head();
        self.embed_tokens = table;
        if tied {
            self.lm_head = Proj::from_weight(self.embed_tokens.clone(), None, Quant::F32)?;
        }
        Ok(())
    }

    /// Widens every dense weight held bf16 as the checkpoint stores it (the table, its tied
    /// head, the layers' linears: [`super::linear::keeps_bf16`]) to f32 for good. Training calls
    /// it before it clones a reference or picks weights: a product with a tracked input (every
    /// linear in a training pass, LoRA's frozen bases included) would otherwise widen its bf16
    /// weight twice per step, and the step of a LoRA pass on the 3B cut to 2 layers took 3.5–7.2
    /// s instead of 1.5–1.8 s (`lm_head`'s 1.2 GB widened twice). The numbers are the same
    /// either way.
    pub fn widen_dense(&mut self) -> candle_core::Result<()> {
        if self.embed_tokens.dtype() == DType::BF16 {
            self.set_table(self.embed_tokens.to_dtype(DType::F32)?)?;
        }
        self.lm_head.widen()?;
        for layer in &mut self.layers {
            for (_, proj) in layer.linears_mut() {
                proj.widen()?;
            }
        }
        Ok(())
    }

    /// Adds a LoRA adapter ([`Lora`]: PEFT's semantics and initialisation, every A drawn from
    /// one generator seeded with `seed`, every B zero) to each linear of the layers that
    /// `select` picks by module name (`model.layers.{i}.self_attn.{q,k,v,o}_proj`,
    /// `model.layers.{i}.mlp.{gate,up,down}_proj`), and returns each A and B as a
    /// [`TrainableWeight`] under its PEFT name
    /// (`base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight`).
    ///
    /// The adapter is part of its linear's forward, so inference (with its KV cache) and
    /// [`Self::forward_train`] both run it, and with B = 0 the outputs are the base model's bit
    /// for bit. The base weights stay plain tensors: frozen, unless [`Self::make_trainable`]
    /// picks them. A reference policy that must not move with the adapters is a clone taken
    /// before this call (clones share the adapters' `Var`s).
    ///
    /// All or nothing: refused, with the model unchanged, for a quantized linear (the merged
    /// checkpoint of [`Self::named_weights`] needs the dense weight), for a linear that already
    /// has an adapter, and for a rank or alpha other than the existing adapters' (PEFT's
    /// `adapter_config.json` holds one of each).
    pub fn add_lora(
        &mut self,
        select: &dyn Fn(&str) -> bool,
        rank: usize,
        alpha: f64,
        seed: u64,
    ) -> candle_core::Result<Vec<TrainableWeight>> {
        if let Some((r, a, _)) = self.lora_config() {
            if (r, a) != (rank, alpha) {
                candle_core::bail!(
                    "the model's LoRA adapters have rank {r} and alpha {a}: \
                     cannot add adapters of rank {rank} and alpha {alpha}"
                );
            }
        }
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut layers = self.layers.clone();
        let mut out = Vec::new();
        for (i, layer) in layers.iter_mut().enumerate() {
            for (sub, proj) in layer.linears_mut() {
                let prefix = format!("model.layers.{i}.{sub}");
                out.extend(proj.add_lora(&prefix, select, rank, alpha, &mut rng)?);
            }
        }
        self.layers = layers;
        Ok(out)
    }

    /// The LoRA adapters' A and B under their PEFT names, as they are now: with
    /// [`Self::lora_config`], what a PEFT `adapter_model.safetensors` holds.
    pub fn lora_weights(&self) -> Vec<(String, Tensor)> {
        self.adapters()
            .flat_map(|(module, lora)| lora.peft_weights(&module))
            .collect()
    }

    /// `(rank, alpha, target module short names)` of the LoRA adapters, `None` without any:
    /// PEFT's `r`, `lora_alpha` and `target_modules` (e.g. `["q_proj", "v_proj"]`, in the
    /// layers' order). The names say which linears, not which layers.
    pub fn lora_config(&self) -> Option<(usize, f64, Vec<String>)> {
        let mut rank_alpha = None;
        let mut targets: Vec<String> = Vec::new();
        for (module, lora) in self.adapters() {
            rank_alpha.get_or_insert((lora.rank(), lora.alpha()));
            let short = module.rsplit('.').next().unwrap_or(&module);
            if !targets.iter().any(|t| t == short) {
                targets.push(short.to_string());
            }
        }
        rank_alpha.map(|(rank, alpha)| (rank, alpha, targets))
    }

    /// Every adapter with its module name, layer by layer in checkpoint order.
    fn adapters(&self) -> impl Iterator<Item = (String, &Lora)> {
        self.layers.iter().enumerate().flat_map(|(i, layer)| {
            layer.linears().into_iter().flat_map(move |(sub, proj)| {
                proj.adapters()
                    .map(move |(name, lora)| (format!("model.layers.{i}.{sub}.{name}"), lora))
            })
        })
    }
}

/// The decoder stack: `layers` over `xs` `[B, S, hidden]` at `pos[..][start..start+S]` with
/// `past` cached positions, then the final norm. `hidden`, when given, receives the input and
/// each layer's output (the last one after the norm, transformers' `output_hidden_states`).
#[allow(clippy::too_many_arguments)]
fn run_layers(
    layers: &[DecoderLayer],
    norm: &RmsNorm,
    rope: &MRope,
    device: &Device,
    dtype: DType,
    (xs, pos, start, past): (&Tensor, &[Vec<u32>; 3], usize, usize),
    mut pasts: Pasts<'_>,
    kernels: Kernels,
    mut hidden: Option<&mut Vec<Tensor>>,
) -> candle_core::Result<Tensor> {
    let s = xs.dim(1)?;
    let (cos, sin) = rope.cos_sin(pos, start, s, device)?;
    let mut xs = xs.to_dtype(dtype)?;
    let mask = if s <= 1 {
        None
    } else if kernels == Kernels::Fused && super::attend::causal_fits(&xs) {
        Some(Causal::Blocks)
    } else {
        Some(Causal::Additive(super::attend::causal_mask(
            s, past, device,
        )?))
    };
    if let Some(h) = hidden.as_deref_mut() {
        h.push(xs.clone());
    }
    let n = layers.len();
    for (i, layer) in layers.iter().enumerate() {
        let layer_past = match &mut pasts {
            Pasts::None => Past::None,
            Pasts::Caches(c) => Past::Cache(&mut c[i]),
            Pasts::Record(kept) => Past::Record(kept),
            Pasts::Prefix(kv) => Past::Prefix(&kv[i]),
        };
        xs = layer.forward(&xs, &cos, &sin, mask.as_ref(), layer_past, kernels)?;
        if let Some(h) = hidden.as_deref_mut() {
            if i + 1 < n {
                h.push(xs.clone());
            }
        }
    }
    let eps = layers.first().map_or(1e-6, |l| l.eps);
    let xs = kernels.rms_norm(norm, eps, &xs)?;
    if let Some(h) = hidden {
        h.push(xs.clone());
    }
    Ok(xs)
}

/// What each layer of [`run_layers`] sees before its pass (see [`Past`]); `Record` collects
/// one `(K, V)` per layer in order, `Prefix` hands them back.
enum Pasts<'a> {
    None,
    Caches(&'a mut Vec<KvCache>),
    Record(&'a mut Vec<(Tensor, Tensor)>),
    Prefix(&'a [(Tensor, Tensor)]),
}

/// The causal mask of a pass over S > 1 new positions after `past` cached ones: query `i` sees
/// keys `0..=past + i`. Decided once per pass ([`run_layers`]), so the layers agree and the
/// additive tensor is built only where it is added.
enum Causal {
    /// Applied by the positions alone, in causal blocks ([`super::attend::causal_prefill`]):
    /// inference passes where that fits.
    Blocks,
    /// `[S, past + S]` (f32) added to the scores: 0 where query `i` may see key `j`, −∞ after
    /// it. Training passes, and inference off the CPU.
    Additive(Tensor),
}
