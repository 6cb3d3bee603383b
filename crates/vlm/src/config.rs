//! Qwen2.5-VL `config.json`: the text (decoder) part, the vision tower part, the M-RoPE sections
//! and the special-token ids, parsed with `serde` and validated into [`Qwen25VlConfig`].
//!
//! Two layouts are accepted:
//! * the flat one that transformers 4.51.3 writes (and that Qwen2.5-VL-3B-Instruct and the test
//!   fixture use): text keys at the top level beside `vision_config`;
//! * the nested one of newer transformers (4.53+): text keys inside `text_config`.
//!
//! A key found at the top level wins over the same key in `text_config` (the order transformers
//! itself reads them in when both are present). `rope_scaling.mrope_section` is read whatever
//! `rope_scaling.type` says: transformers rewrites `"mrope"` to `"default"` when it saves.
//!
//! Defaults for absent keys are transformers 4.51.3's class defaults where the key is optional in
//! practice (patch size, window size, ...); the sizes that define the network (hidden sizes, layer
//! and head counts, vocabulary) have no default and are a [`ConfigError::Missing`] error.
//!
//! A Qwen2 / Qwen2.5 *text* checkpoint (`model_type` `qwen2`, `Qwen2ForCausalLM`: e.g.
//! Qwen2.5-3B-Instruct, the reasoning model of Embodied-R, Zhao et al. 2025, arXiv 2504.12680
//! §3.2) is read into the same [`Qwen25VlConfig`] with no vision part. Why one type: Qwen2.5-VL's
//! language model is the Qwen2 architecture (transformers `Qwen2_5_VLModel` vs `Qwen2Model`: the
//! same RMSNorm, GQA attention with q/k/v biases, SwiGLU MLP, tied or untied head), and M-RoPE
//! with the three position ids equal — every token of a text-only prompt — is Qwen2's plain RoPE.
//! So a text checkpoint runs through the same files, loader, quantization, generation and trainer
//! as the VLM, with an even split of the rotary frequencies as its `mrope_section` (any split is
//! plain RoPE when the three ids agree).

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Errors from reading or validating a Qwen2.5-VL `config.json`.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read model config {path}: {source}")]
    Io {
        /// Path of the `config.json` that was read.
        path: PathBuf,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// The file is not JSON, or a key has the wrong type (e.g. a string where a number is
    /// expected).
    #[error("model config is not valid Qwen2.5-VL JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A key the network cannot be built without (a size, a layer or head count, a special-token
    /// id, `vision_config` or `rope_scaling.mrope_section`) is absent; holds its name.
    #[error("model config lacks `{0}` (neither at the top level nor in `text_config`)")]
    Missing(&'static str),
    /// A value is out of range (zero, not a divisor, not finite, an unsupported activation, a token
    /// id not below `vocab_size`).
    #[error("model config `{field}` is {value}: {reason}")]
    Invalid {
        /// The key, as it is spelled in the file (vision keys prefixed with `vision_config.`).
        field: &'static str,
        /// The offending value, formatted.
        value: String,
        /// Why the value is rejected.
        reason: &'static str,
    },
    /// `rope_scaling.mrope_section` does not split the `head_dim / 2` rotary frequencies exactly.
    #[error(
        "rope_scaling.mrope_section {sections:?} sums to {sum}, but must sum to head_dim/2 = {half_head_dim} \
         (head_dim = hidden_size / num_attention_heads)"
    )]
    MropeSection {
        /// The sections as read (temporal, height, width).
        sections: Vec<usize>,
        /// Their sum.
        sum: usize,
        /// What they must sum to: `hidden_size / num_attention_heads / 2`.
        half_head_dim: usize,
    },
    /// The vision per-head width is not a multiple of 4, which the 2-D rotary embedding needs.
    #[error(
        "vision head_dim {head_dim} (hidden_size {hidden_size} / num_heads {num_heads}) must be a multiple of 4: \
         the 2-D rotary splits half of it into equal row and column parts of even size"
    )]
    VisionHeadDim {
        /// `vision_config.hidden_size`.
        hidden_size: usize,
        /// `vision_config.num_heads`.
        num_heads: usize,
        /// `hidden_size / num_heads`.
        head_dim: usize,
    },
    /// `vision_config.fullatt_block_indexes` is not strictly increasing or names a block at or
    /// beyond `depth`.
    #[error("vision fullatt_block_indexes {indexes:?} must be increasing and below depth {depth}")]
    FullAttBlocks {
        /// The indexes as read.
        indexes: Vec<usize>,
        /// `vision_config.depth`.
        depth: usize,
    },
    /// The vision merger's output width differs from the text hidden size, so image embeddings
    /// could not replace image-token embeddings.
    #[error("vision out_hidden_size {vision} differs from the text hidden_size {text}: image tokens would not fit")]
    OutHidden {
        /// `vision_config.out_hidden_size`.
        vision: usize,
        /// The text `hidden_size`.
        text: usize,
    },
}

/// The vision tower's configuration (`vision_config`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct VisionConfig {
    /// Number of transformer blocks (32 in the 3B/7B models).
    pub depth: usize,
    /// Width of the vision transformer's residual stream (1280 in the 3B/7B models).
    pub hidden_size: usize,
    /// SwiGLU width of each block's MLP (with biases).
    pub intermediate_size: usize,
    /// Attention heads per vision block; must divide `hidden_size` into a head width that is a
    /// multiple of 4.
    pub num_heads: usize,
    /// Width of the merger's output = the text model's hidden size.
    pub out_hidden_size: usize,
    /// Side of a square patch in pixels (default 14).
    #[serde(default = "default_patch_size")]
    pub patch_size: usize,
    /// Frames stacked into one patch (default 2); a still image is repeated to fill them.
    #[serde(default = "default_two")]
    pub temporal_patch_size: usize,
    /// Side of the square of patches the merger folds into one image token (default 2, i.e. 2×2
    /// patches).
    #[serde(default = "default_two")]
    pub spatial_merge_size: usize,
    /// Attention window side in pixels (112 → 4×4 merged tokens = 8×8 patches).
    #[serde(default = "default_window_size")]
    pub window_size: usize,
    /// Blocks that attend over the whole image; all others attend within windows.
    #[serde(default = "default_fullatt")]
    pub fullatt_block_indexes: Vec<usize>,
    /// The file of Qwen2.5-VL-3B spells it `in_chans`; transformers' class calls it `in_channels`.
    #[serde(default = "default_in_channels", alias = "in_chans")]
    pub in_channels: usize,
    /// Activation of the block MLPs; only `"silu"` is accepted.
    #[serde(default = "default_act")]
    pub hidden_act: String,
    /// Video only (temporal position scale). transformers' class default is 4; files carry 2.
    #[serde(default = "default_tokens_per_second")]
    pub tokens_per_second: usize,
}

fn default_patch_size() -> usize {
    14
}
fn default_two() -> usize {
    2
}
fn default_window_size() -> usize {
    112
}
fn default_fullatt() -> Vec<usize> {
    vec![7, 15, 23, 31]
}
fn default_in_channels() -> usize {
    3
}
fn default_act() -> String {
    "silu".to_owned()
}
fn default_tokens_per_second() -> usize {
    4
}

/// RMSNorm epsilon of every vision norm (hard-coded to 1e-6 in transformers, not in the file).
pub(crate) const VISION_RMS_NORM_EPS: f64 = 1e-6;
/// θ of the vision tower's 2-D rotary embedding (hard-coded in transformers).
pub(crate) const VISION_ROPE_THETA: f32 = 10_000.0;

impl VisionConfig {
    /// Per-head width of the vision attention.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_heads
    }

    /// Width of one flattened patch: `in_channels · temporal_patch_size · patch_size²` (1176).
    pub fn patch_dim(&self) -> usize {
        self.in_channels * self.temporal_patch_size * self.patch_size * self.patch_size
    }

    /// Patches merged into one image token (`spatial_merge_size²`, 4).
    pub fn merge_unit(&self) -> usize {
        self.spatial_merge_size * self.spatial_merge_size
    }

    /// Side of an attention window in merged tokens (`window_size / merge / patch`, integer
    /// division as in transformers; 4 for 112 px).
    pub fn window_merged_side(&self) -> usize {
        self.window_size / self.spatial_merge_size / self.patch_size
    }

    /// Whether block `i` uses full attention (else window attention).
    pub fn is_full_attention(&self, block: usize) -> bool {
        self.fullatt_block_indexes.contains(&block)
    }

    /// Checks the invariants the vision tower relies on.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        for (field, v) in [
            ("vision_config.depth", self.depth),
            ("vision_config.hidden_size", self.hidden_size),
            ("vision_config.intermediate_size", self.intermediate_size),
            ("vision_config.num_heads", self.num_heads),
            ("vision_config.out_hidden_size", self.out_hidden_size),
            ("vision_config.patch_size", self.patch_size),
            (
                "vision_config.temporal_patch_size",
                self.temporal_patch_size,
            ),
            ("vision_config.spatial_merge_size", self.spatial_merge_size),
            ("vision_config.in_channels", self.in_channels),
        ] {
            if v == 0 {
                return Err(ConfigError::Invalid {
                    field,
                    value: "0".into(),
                    reason: "must be positive",
                });
            }
        }
        if !self.hidden_size.is_multiple_of(self.num_heads) {
            return Err(ConfigError::Invalid {
                field: "vision_config.num_heads",
                value: self.num_heads.to_string(),
                reason: "must divide vision_config.hidden_size",
            });
        }
        let head_dim = self.head_dim();
        if !head_dim.is_multiple_of(4) {
            return Err(ConfigError::VisionHeadDim {
                hidden_size: self.hidden_size,
                num_heads: self.num_heads,
                head_dim,
            });
        }
        if self.window_merged_side() == 0 {
            return Err(ConfigError::Invalid {
                field: "vision_config.window_size",
                value: self.window_size.to_string(),
                reason: "must be at least spatial_merge_size · patch_size pixels",
            });
        }
        let increasing = self.fullatt_block_indexes.windows(2).all(|w| w[0] < w[1]);
        if !increasing || self.fullatt_block_indexes.iter().any(|&i| i >= self.depth) {
            return Err(ConfigError::FullAttBlocks {
                indexes: self.fullatt_block_indexes.clone(),
                depth: self.depth,
            });
        }
        if self.hidden_act != "silu" {
            return Err(ConfigError::Invalid {
                field: "vision_config.hidden_act",
                value: self.hidden_act.clone(),
                reason: "only \"silu\" (SwiGLU) is implemented",
            });
        }
        Ok(())
    }
}

/// The text decoder's configuration (flat keys or `text_config`), with M-RoPE sections.
#[derive(Debug, Clone, PartialEq)]
pub struct TextConfig {
    /// Number of token embeddings (`vocab_size`); every special-token id must be below it.
    pub vocab_size: usize,
    /// Width of the decoder's residual stream (`hidden_size`); must equal the vision
    /// `out_hidden_size`.
    pub hidden_size: usize,
    /// SwiGLU width of each decoder MLP (`intermediate_size`).
    pub intermediate_size: usize,
    /// Number of decoder layers (`num_hidden_layers`).
    pub num_hidden_layers: usize,
    /// Query heads per attention layer (`num_attention_heads`).
    pub num_attention_heads: usize,
    /// Key/value heads per attention layer (`num_key_value_heads`, defaults to the query head
    /// count); fewer than the query heads means grouped-query attention.
    pub num_key_value_heads: usize,
    /// `hidden_size / num_attention_heads` (Qwen2.5-VL files have no `head_dim` key).
    pub head_dim: usize,
    /// Epsilon of every decoder RMSNorm (`rms_norm_eps`, default 1e-6).
    pub rms_norm_eps: f64,
    /// Base θ of the rotary frequencies (`rope_theta`, default 1e6).
    pub rope_theta: f64,
    /// Longest position the model was trained for (`max_position_embeddings`, default 128000);
    /// informational.
    pub max_position_embeddings: usize,
    /// `lm_head` = `embed_tokens` (true for 3B; the file then has no `lm_head.weight`).
    pub tie_word_embeddings: bool,
    /// `rope_scaling.mrope_section`: how many of the `head_dim/2` rotary frequencies take the
    /// temporal, height and width position id (`[16, 24, 24]` for 3B).
    pub mrope_section: Vec<usize>,
    /// Activation of the decoder MLPs (`hidden_act`); only `"silu"` is accepted.
    pub hidden_act: String,
}

/// Special-token ids the model needs (read from the config, never hard-coded: the tiny fixture
/// remaps them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenIds {
    /// Beginning-of-sequence id (`bos_token_id`), if the file has one.
    pub bos_token_id: Option<u32>,
    /// One or more end-of-sequence ids (`eos_token_id` may be an int or a list).
    pub eos_token_ids: Vec<u32>,
    /// Id of the `<|image_pad|>` placeholder, one per image token (`image_token_id`).
    pub image_token_id: u32,
    /// Id of the `<|video_pad|>` placeholder (`video_token_id`).
    pub video_token_id: u32,
    /// Id of `<|vision_start|>`, which precedes each image's placeholders
    /// (`vision_start_token_id`).
    pub vision_start_token_id: u32,
    /// Id of `<|vision_end|>`, which follows each image's placeholders (`vision_end_token_id`).
    pub vision_end_token_id: u32,
    /// Id of `<|vision_pad|>` (`vision_token_id`), if the file has one; checked against the
    /// tokenizer, not used to locate images.
    pub vision_token_id: Option<u32>,
}

/// The vision-token ids of a text-only config: no token has this id (every input id is checked
/// to be below `vocab_size`), so no image placeholder is ever found.
const NO_TOKEN: u32 = u32::MAX;

/// A parsed and validated Qwen2.5-VL `config.json`, or a Qwen2 text model's (see the module
/// docs).
#[derive(Debug, Clone, PartialEq)]
pub struct Qwen25VlConfig {
    /// The text decoder's configuration.
    pub text: TextConfig,
    /// The vision tower's configuration; `None` for a text-only checkpoint (`model_type`
    /// `qwen2`), whose vision-token ids in [`Self::tokens`] are no id at all.
    pub vision: Option<VisionConfig>,
    /// The special-token ids.
    pub tokens: TokenIds,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(u32),
    Many(Vec<u32>),
}

impl OneOrMany {
    /// The ids, in the file's order (none when the key is absent).
    fn ids(v: Option<OneOrMany>) -> Vec<u32> {
        match v {
            None => Vec::new(),
            Some(OneOrMany::One(id)) => vec![id],
            Some(OneOrMany::Many(ids)) => ids,
        }
    }
}

/// The text of a `config.json`, its path in the error.
fn read_config(path: &Path) -> Result<String, ConfigError> {
    pointact_input::read_text(path, pointact_input::MAX_CONFIG_BYTES).map_err(|source| {
        ConfigError::Io {
            path: path.to_path_buf(),
            source,
        }
    })
}

#[derive(Debug, Clone, Default, Deserialize)]
struct RawRopeScaling {
    #[serde(default)]
    mrope_section: Option<Vec<usize>>,
}

/// Keys that may sit at the top level (4.51.3) or in `text_config` (4.53+).
#[derive(Debug, Clone, Default, Deserialize)]
struct RawText {
    vocab_size: Option<usize>,
    hidden_size: Option<usize>,
    intermediate_size: Option<usize>,
    num_hidden_layers: Option<usize>,
    num_attention_heads: Option<usize>,
    num_key_value_heads: Option<usize>,
    rms_norm_eps: Option<f64>,
    rope_theta: Option<f64>,
    max_position_embeddings: Option<usize>,
    tie_word_embeddings: Option<bool>,
    rope_scaling: Option<RawRopeScaling>,
    hidden_act: Option<String>,
    bos_token_id: Option<u32>,
    eos_token_id: Option<OneOrMany>,
    image_token_id: Option<u32>,
    video_token_id: Option<u32>,
    vision_start_token_id: Option<u32>,
    vision_end_token_id: Option<u32>,
    vision_token_id: Option<u32>,
}

#[derive(Debug, Clone, Deserialize)]
struct RawConfig {
    #[serde(flatten)]
    flat: RawText,
    #[serde(default)]
    text_config: Option<RawText>,
    vision_config: Option<VisionConfig>,
    model_type: Option<String>,
    use_sliding_window: Option<bool>,
}

/// A key of the model config from the top level, else from `text_config` (transformers 4.51 writes
/// the decoder's keys at the top level, 4.53 and later in `text_config`).
macro_rules! pick {
    ($flat:ident, $nested:ident, $f:ident) => {
        $flat.$f.clone().or_else(|| $nested.$f.clone())
    };
}

/// [`pick!`], or the error naming the missing key.
macro_rules! need {
    ($flat:ident, $nested:ident, $f:ident) => {
        pick!($flat, $nested, $f).ok_or(ConfigError::Missing(stringify!($f)))?
    };
}

impl TextConfig {
    /// The decoder's keys, from the top level first, then `text_config` (`nested`, where
    /// transformers 4.53 and later write them). `mrope_section` as the file gives it, or `None` for a text model:
    /// an even split of the rotary frequencies (one position per token: any split is plain RoPE).
    /// `max_positions` is the model family's default for the informational
    /// `max_position_embeddings`. Not validated here.
    fn from_raw(
        flat: &RawText,
        nested: &RawText,
        mrope_section: Option<Vec<usize>>,
        max_positions: usize,
    ) -> Result<Self, ConfigError> {
        let hidden_size: usize = need!(flat, nested, hidden_size);
        let num_attention_heads: usize = need!(flat, nested, num_attention_heads);
        // 0 heads is rejected by `validate`.
        let head_dim = hidden_size.checked_div(num_attention_heads).unwrap_or(0);
        let half = head_dim / 2;
        Ok(TextConfig {
            vocab_size: need!(flat, nested, vocab_size),
            hidden_size,
            intermediate_size: need!(flat, nested, intermediate_size),
            num_hidden_layers: need!(flat, nested, num_hidden_layers),
            num_attention_heads,
            num_key_value_heads: pick!(flat, nested, num_key_value_heads)
                .unwrap_or(num_attention_heads),
            head_dim,
            rms_norm_eps: pick!(flat, nested, rms_norm_eps).unwrap_or(1e-6),
            rope_theta: pick!(flat, nested, rope_theta).unwrap_or(1_000_000.0),
            max_position_embeddings: pick!(flat, nested, max_position_embeddings)
                .unwrap_or(max_positions),
            tie_word_embeddings: pick!(flat, nested, tie_word_embeddings).unwrap_or(false),
            mrope_section: mrope_section
                .unwrap_or_else(|| vec![half - 2 * (half / 3), half / 3, half / 3]),
            hidden_act: pick!(flat, nested, hidden_act).unwrap_or_else(default_act),
        })
    }
}

impl Qwen25VlConfig {
    /// Parses and validates the text of a `config.json`.
    pub fn from_json_str(json: &str) -> Result<Self, ConfigError> {
        let raw: RawConfig = serde_json::from_str(json)?;
        Self::from_raw(raw)
    }

    /// Reads, parses and validates a `config.json` file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        Self::from_json_str(&read_config(path.as_ref())?)
    }

    fn from_raw(raw: RawConfig) -> Result<Self, ConfigError> {
        if raw.model_type.as_deref() == Some("qwen2") {
            return Self::text_only(raw);
        }
        let flat = raw.flat;
        let nested = raw.text_config.unwrap_or_default();
        let mrope_section = flat
            .rope_scaling
            .as_ref()
            .and_then(|r| r.mrope_section.clone())
            .or_else(|| {
                nested
                    .rope_scaling
                    .as_ref()
                    .and_then(|r| r.mrope_section.clone())
            })
            .ok_or(ConfigError::Missing("rope_scaling.mrope_section"))?;
        let text = TextConfig::from_raw(&flat, &nested, Some(mrope_section), 128_000)?;
        let eos_token_ids = OneOrMany::ids(pick!(flat, nested, eos_token_id));
        let tokens = TokenIds {
            bos_token_id: pick!(flat, nested, bos_token_id),
            eos_token_ids,
            image_token_id: need!(flat, nested, image_token_id),
            video_token_id: need!(flat, nested, video_token_id),
            vision_start_token_id: need!(flat, nested, vision_start_token_id),
            vision_end_token_id: need!(flat, nested, vision_end_token_id),
            vision_token_id: pick!(flat, nested, vision_token_id),
        };
        let vision = raw
            .vision_config
            .ok_or(ConfigError::Missing("vision_config"))?;
        let cfg = Qwen25VlConfig {
            text,
            vision: Some(vision),
            tokens,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// A Qwen2 text model's config (`model_type` `qwen2`): the decoder's keys at the top level,
    /// bos/eos ids, no vision part.
    fn text_only(raw: RawConfig) -> Result<Self, ConfigError> {
        if raw.use_sliding_window == Some(true) {
            // Qwen2.5 checkpoints ship it off; with it on, layers above `max_window_layers`
            // would attend to a window only, which this decoder does not do.
            return Err(ConfigError::Invalid {
                field: "use_sliding_window",
                value: "true".into(),
                reason: "sliding-window attention is not supported",
            });
        }
        let f = raw.flat;
        let cfg = Qwen25VlConfig {
            text: TextConfig::from_raw(&f, &RawText::default(), None, 32_768)?,
            vision: None,
            tokens: TokenIds {
                bos_token_id: f.bos_token_id,
                eos_token_ids: OneOrMany::ids(f.eos_token_id),
                image_token_id: NO_TOKEN,
                video_token_id: NO_TOKEN,
                vision_start_token_id: NO_TOKEN,
                vision_end_token_id: NO_TOKEN,
                vision_token_id: None,
            },
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks the invariants of both parts and that they fit together.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        self.text.validate()?;
        let t = &self.tokens;
        let mut vision_ids = Vec::new();
        if let Some(vision) = &self.vision {
            vision.validate()?;
            if vision.out_hidden_size != self.text.hidden_size {
                return Err(ConfigError::OutHidden {
                    vision: vision.out_hidden_size,
                    text: self.text.hidden_size,
                });
            }
            vision_ids = vec![
                ("image_token_id", Some(t.image_token_id)),
                ("video_token_id", Some(t.video_token_id)),
                ("vision_start_token_id", Some(t.vision_start_token_id)),
                ("vision_end_token_id", Some(t.vision_end_token_id)),
                ("vision_token_id", t.vision_token_id),
            ];
        }
        let vocab = self.text.vocab_size;
        for (field, id) in vision_ids
            .into_iter()
            .chain([("bos_token_id", t.bos_token_id)])
            .chain(t.eos_token_ids.iter().map(|&id| ("eos_token_id", Some(id))))
        {
            if let Some(id) = id {
                if id as usize >= vocab {
                    return Err(ConfigError::Invalid {
                        field,
                        value: id.to_string(),
                        reason: "token id is not below vocab_size",
                    });
                }
            }
        }
        Ok(())
    }
}

impl TextConfig {
    /// Checks head counts, the M-RoPE sections and the activation.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        for (field, v) in [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.num_key_value_heads),
        ] {
            if v == 0 {
                return Err(ConfigError::Invalid {
                    field,
                    value: "0".into(),
                    reason: "must be positive",
                });
            }
        }
        if !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Err(ConfigError::Invalid {
                field: "num_attention_heads",
                value: self.num_attention_heads.to_string(),
                reason: "must divide hidden_size",
            });
        }
        if !self
            .num_attention_heads
            .is_multiple_of(self.num_key_value_heads)
        {
            return Err(ConfigError::Invalid {
                field: "num_key_value_heads",
                value: self.num_key_value_heads.to_string(),
                reason: "must divide num_attention_heads (grouped-query attention)",
            });
        }
        if !self.head_dim.is_multiple_of(2) {
            return Err(ConfigError::Invalid {
                field: "num_attention_heads",
                value: self.num_attention_heads.to_string(),
                reason: "head_dim = hidden_size / num_attention_heads must be even for rotary",
            });
        }
        if self.mrope_section.len() != 3 {
            return Err(ConfigError::Invalid {
                field: "rope_scaling.mrope_section",
                value: format!("{:?}", self.mrope_section),
                reason: "must have 3 entries (temporal, height, width)",
            });
        }
        let sum: usize = self.mrope_section.iter().sum();
        if sum != self.head_dim / 2 {
            return Err(ConfigError::MropeSection {
                sections: self.mrope_section.clone(),
                sum,
                half_head_dim: self.head_dim / 2,
            });
        }
        if !(self.rms_norm_eps > 0.0 && self.rms_norm_eps.is_finite()) {
            return Err(ConfigError::Invalid {
                field: "rms_norm_eps",
                value: self.rms_norm_eps.to_string(),
                reason: "must be positive and finite",
            });
        }
        if !(self.rope_theta > 0.0 && self.rope_theta.is_finite()) {
            return Err(ConfigError::Invalid {
                field: "rope_theta",
                value: self.rope_theta.to_string(),
                reason: "must be positive and finite",
            });
        }
        if self.hidden_act != "silu" {
            return Err(ConfigError::Invalid {
                field: "hidden_act",
                value: self.hidden_act.clone(),
                reason: "only \"silu\" (SwiGLU) is implemented",
            });
        }
        Ok(())
    }
}
