//! Qwen2.5-VL's tokenizer and chat template: a prompt and an image-token count in, the model's
//! `input_ids` out; generated ids back to text, in one go or token by token.
//!
//! What transformers 4.51.3 does for Embodied-R1 (`processor.apply_chat_template(messages,
//! add_generation_prompt=True)` then `processor(text=…, images=…)`), and what is mirrored here:
//! 1. The chat template (Jinja) is rendered for one user message whose content is
//!    `[{"type": "image"}, {"type": "text", "text": PROMPT}]`, optionally after a system message,
//!    with `add_generation_prompt=True`. transformers compiles templates with `trim_blocks` and
//!    `lstrip_blocks` on and gives them a `raise_exception(message)` function; so does
//!    [`Qwen25Tokenizer::render_prompt`] (with the `minijinja` crate). The tokenizer's special
//!    tokens (`eos_token`, `pad_token`, … from `tokenizer_config.json`) are template variables,
//!    as in transformers. Not provided: the `tojson` filter and `strftime_now` (the Qwen2-VL
//!    template uses neither; a template that does fails with a typed error, not silently).
//! 2. The single `<|image_pad|>` the template emits is repeated to the number of image tokens
//!    (`t·gh·gw / merge²`, [`crate::ProcessedImage::num_image_tokens`]) and the text is
//!    tokenised with the `tokenizers` crate from `tokenizer.json`. Special tokens are *added
//!    tokens* there, so each pad is one id; this is checked when loading.
//!
//! The template is read from, in order: `chat_template.jinja` (newer transformers save it as a
//! raw file), `chat_template.json` (key `chat_template`; what 4.51.3 saves for processors and
//! what `Qwen2_5_VLProcessor` prefers), `tokenizer_config.json` (key `chat_template`), else the
//! built-in [`QWEN2_VL_CHAT_TEMPLATE`].
//!
//! Special-token ids are never hard-coded: they are looked up by their strings in the tokenizer
//! and can be cross-checked against `config.json` ([`Qwen25Tokenizer::check_token_ids`]); the
//! test fixture remaps them, so a wrong assumption shows up as a typed error, not a wrong prompt.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use minijinja::{Environment, ErrorKind, Value};

use super::config::TokenIds;

/// The Qwen2-VL / Qwen2.5-VL-Instruct chat template, used when a model folder carries none.
///
/// An interface string copied verbatim from the public Qwen2-VL / Qwen2.5-VL releases (the same
/// text the test fixture's `tokenizer_config.json` carries; a test checks they are equal): a
/// default system message when the first message is not `system`, `<|vision_start|><|image_pad|>
/// <|vision_end|>` per image item, text items verbatim, `<|im_start|>assistant\n` as the
/// generation prompt.
pub const QWEN2_VL_CHAT_TEMPLATE: &str = "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}{% for message in messages %}{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|><|vision_end|>{% elif content['type'] == 'video' or 'video' in content %}{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/// Special-token strings of the Qwen2-VL family (interface strings, must match exactly).
pub(crate) mod special {
    pub(crate) const IM_START: &str = "<|im_start|>";
    pub(crate) const IM_END: &str = "<|im_end|>";
    pub(crate) const ENDOFTEXT: &str = "<|endoftext|>";
    pub(crate) const VISION_START: &str = "<|vision_start|>";
    pub(crate) const VISION_END: &str = "<|vision_end|>";
    pub(crate) const VISION_PAD: &str = "<|vision_pad|>";
    pub(crate) const IMAGE_PAD: &str = "<|image_pad|>";
    pub(crate) const VIDEO_PAD: &str = "<|video_pad|>";
}

/// Why a tokenizer cannot be loaded or a prompt cannot be built or decoded.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// `tokenizer.json` is not there.
    #[error("tokenizer file {path} does not exist")]
    MissingTokenizer {
        /// The path looked at.
        path: PathBuf,
    },
    /// A file exists but could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file that could not be read.
        path: PathBuf,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// `tokenizer.json` is not a tokenizer the `tokenizers` crate can load.
    #[error("cannot load tokenizer {path}: {message}")]
    Load {
        /// Path of `tokenizer.json`.
        path: PathBuf,
        /// The `tokenizers` crate's error, as text.
        message: String,
    },
    /// `chat_template.json` / `tokenizer_config.json` is not valid JSON.
    #[error("{path} is not valid JSON: {source}")]
    Json {
        /// The file that is not valid JSON.
        path: PathBuf,
        /// The parse error.
        source: serde_json::Error,
    },
    /// The `chat_template` key holds something that is not a template.
    #[error(
        "{path}: `chat_template` must be a string or a list of {{name, template}} with a \"default\" entry"
    )]
    TemplateShape {
        /// The file that holds the key.
        path: PathBuf,
    },
    /// A special token the prompt needs is not in the tokenizer's vocabulary.
    #[error("the tokenizer has no `{token}` token")]
    MissingSpecialToken {
        /// The token's text, e.g. `<|im_start|>`.
        token: &'static str,
    },
    /// A special token is in the vocabulary but is not an added token, so text containing it would
    /// be split into several ids.
    #[error("`{token}` is not a single added token of the tokenizer: it encodes to {ids:?}")]
    SpecialTokenSplit {
        /// The token's text.
        token: &'static str,
        /// The ids its text encodes to.
        ids: Vec<u32>,
    },
    /// `config.json` and the tokenizer disagree about a special token's id.
    #[error(
        "config.json `{field}` is {config_id}, but the tokenizer's `{token}` is {tokenizer_id}"
    )]
    TokenIdMismatch {
        /// The special token, e.g. `<|image_pad|>`.
        token: &'static str,
        /// The `config.json` key, e.g. `image_token_id`.
        field: &'static str,
        /// The id `config.json` gives.
        config_id: u32,
        /// The id the tokenizer gives the token.
        tokenizer_id: u32,
    },
    /// A config id (bos/eos) is not one of the tokenizer's special tokens.
    #[error("config.json `{field}` {id} is not a special token of the tokenizer")]
    NotSpecialId {
        /// The `config.json` key (`bos_token_id` or `eos_token_id`).
        field: &'static str,
        /// The id it gives.
        id: u32,
    },
    /// The chat template failed to compile or render, or called `raise_exception`.
    #[error("chat template: {0:#}")]
    Template(#[from] minijinja::Error),
    /// The rendered prompt does not hold exactly one image placeholder.
    #[error(
        "the rendered chat template holds {found} `{token}` placeholders, expected exactly one \
         (one image per prompt); is this a Qwen2-VL-style template?"
    )]
    ImagePlaceholders {
        /// The placeholder's text.
        token: &'static str,
        /// How many the rendered prompt holds.
        found: usize,
    },
    /// An image needs at least one token.
    #[error("an image must have at least one image token")]
    NoImageTokens,
    /// After tokenising, the number of image-pad ids differs from the number asked for.
    #[error("tokenised prompt holds {found} image-pad ids, expected {expected}")]
    ImageTokenCount {
        /// Image tokens asked for.
        expected: usize,
        /// Image-pad ids in the tokenised prompt.
        found: usize,
    },
    /// The `tokenizers` crate failed to encode.
    #[error("cannot tokenise the prompt: {0}")]
    Encode(String),
    /// The `tokenizers` crate failed to decode.
    #[error("cannot decode token ids: {0}")]
    Decode(String),
    /// Streaming decode found that text already emitted is not a prefix of the longer decode
    /// (cannot happen with byte-level BPE; reported rather than emitting wrong text).
    #[error("streaming decode: {emitted:?} is not a prefix of {decoded:?}")]
    StreamPrefix {
        /// Text already emitted.
        emitted: String,
        /// The decode of the longer sequence.
        decoded: String,
    },
}

/// Where the chat template came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplateSource {
    /// A raw `chat_template.jinja` file.
    Jinja(PathBuf),
    /// `chat_template.json`, key `chat_template`.
    ChatTemplateJson(PathBuf),
    /// `tokenizer_config.json`, key `chat_template`.
    TokenizerConfig(PathBuf),
    /// [`QWEN2_VL_CHAT_TEMPLATE`]: the folder has no template.
    BuiltIn,
    /// Set with [`Qwen25Tokenizer::with_chat_template`].
    Custom,
}

/// Ids of the special tokens the prompt and generation use, read from the tokenizer by string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpecialTokenIds {
    /// `<|im_start|>`, which opens each chat turn.
    pub im_start: u32,
    /// `<|im_end|>`, which closes each chat turn (and ends the assistant's reply).
    pub im_end: u32,
    /// `<|vision_start|>`, before an image's placeholders.
    pub vision_start: u32,
    /// `<|vision_end|>`, after an image's placeholders.
    pub vision_end: u32,
    /// `<|image_pad|>`, one per image token.
    pub image_pad: u32,
    /// `<|video_pad|>`, one per video token.
    pub video_pad: u32,
    /// `<|endoftext|>` (bos and pad of Qwen2.5-VL).
    pub endoftext: Option<u32>,
    /// `<|vision_pad|>` (`vision_token_id` in the config).
    pub vision_pad: Option<u32>,
}

/// Qwen2.5-VL tokenizer (`tokenizer.json`) plus chat template.
#[derive(Debug, Clone)]
pub struct Qwen25Tokenizer {
    tokenizer: tokenizers::Tokenizer,
    chat_template: String,
    template_source: TemplateSource,
    /// `bos_token`, `eos_token`, … as template variables (transformers passes them too).
    template_tokens: BTreeMap<String, String>,
    ids: SpecialTokenIds,
}

impl Qwen25Tokenizer {
    /// Loads `tokenizer.json` and the chat template from a model folder (see the module doc for
    /// the order the template files are tried in).
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self, TokenizerError> {
        let dir = dir.as_ref();
        let tokenizer_config = read_json_if_exists(&dir.join("tokenizer_config.json"))?;
        let (chat_template, template_source) = find_chat_template(dir, tokenizer_config.as_ref())?;
        let template_tokens = tokenizer_config
            .as_ref()
            .map(|(_, cfg)| template_tokens(cfg))
            .unwrap_or_default();
        let tokenizer = load_tokenizer(&dir.join("tokenizer.json"))?;
        let ids = special_token_ids(&tokenizer)?;
        Ok(Qwen25Tokenizer {
            tokenizer,
            chat_template,
            template_source,
            template_tokens,
            ids,
        })
    }

    /// Replaces the chat template (e.g. a hand-edited one); [`template_source`](Self::template_source)
    /// becomes [`TemplateSource::Custom`].
    pub fn with_chat_template(mut self, template: impl Into<String>) -> Self {
        self.chat_template = template.into();
        self.template_source = TemplateSource::Custom;
        self
    }

    /// Where [`chat_template`](Self::chat_template) came from.
    pub fn template_source(&self) -> &TemplateSource {
        &self.template_source
    }

    /// Special-token ids, looked up in the tokenizer.
    pub fn special_ids(&self) -> SpecialTokenIds {
        self.ids
    }

    /// The wrapped `tokenizers` tokenizer.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.tokenizer
    }

    /// Checks that `config.json`'s special-token ids are the tokenizer's: the vision ids must be
    /// the ids of their token strings (a text-only config, `vision: false`, has none), and
    /// bos/eos must be special tokens of the tokenizer. A mismatch would silently put image rows
    /// at the wrong positions or never stop generating.
    pub fn check_token_ids(&self, cfg: &TokenIds, vision: bool) -> Result<(), TokenizerError> {
        let t = &self.ids;
        let pairs = if !vision {
            Vec::new()
        } else {
            vec![
                (
                    special::IMAGE_PAD,
                    "image_token_id",
                    cfg.image_token_id,
                    t.image_pad,
                ),
                (
                    special::VIDEO_PAD,
                    "video_token_id",
                    cfg.video_token_id,
                    t.video_pad,
                ),
                (
                    special::VISION_START,
                    "vision_start_token_id",
                    cfg.vision_start_token_id,
                    t.vision_start,
                ),
                (
                    special::VISION_END,
                    "vision_end_token_id",
                    cfg.vision_end_token_id,
                    t.vision_end,
                ),
            ]
        };
        for (token, field, config_id, tokenizer_id) in pairs {
            if config_id != tokenizer_id {
                return Err(TokenizerError::TokenIdMismatch {
                    token,
                    field,
                    config_id,
                    tokenizer_id,
                });
            }
        }
        if let (true, Some(config_id)) = (vision, cfg.vision_token_id) {
            let tokenizer_id = t.vision_pad.ok_or(TokenizerError::MissingSpecialToken {
                token: special::VISION_PAD,
            })?;
            if config_id != tokenizer_id {
                return Err(TokenizerError::TokenIdMismatch {
                    token: special::VISION_PAD,
                    field: "vision_token_id",
                    config_id,
                    tokenizer_id,
                });
            }
        }
        let added = self.tokenizer.get_added_tokens_decoder();
        let is_special = |id: u32| added.get(&id).is_some_and(|tok| tok.special);
        for (field, id) in cfg
            .bos_token_id
            .map(|id| ("bos_token_id", id))
            .into_iter()
            .chain(cfg.eos_token_ids.iter().map(|&id| ("eos_token_id", id)))
        {
            if !is_special(id) {
                return Err(TokenizerError::NotSpecialId { field, id });
            }
        }
        Ok(())
    }

    /// Renders the chat template for Embodied-R1's single turn: an optional system message, then
    /// one user message `[image, text]`, then the generation prompt. The result holds one
    /// `<|image_pad|>`, not yet expanded.
    pub fn render_prompt(
        &self,
        prompt: &str,
        system: Option<&str>,
    ) -> Result<String, TokenizerError> {
        let content = vec![
            object([("type", Value::from("image"))]),
            object([("type", Value::from("text")), ("text", Value::from(prompt))]),
        ];
        self.render_turn(system, Value::from(content))
    }

    /// One turn: an optional system message, one user message with `content` (a list of parts or
    /// a plain string), then the generation prompt.
    fn render_turn(&self, system: Option<&str>, content: Value) -> Result<String, TokenizerError> {
        let mut messages = Vec::new();
        if let Some(system) = system {
            messages.push(object([
                ("role", Value::from("system")),
                ("content", Value::from(system)),
            ]));
        }
        messages.push(object([
            ("role", Value::from("user")),
            ("content", content),
        ]));
        self.render_messages(Value::from(messages), true)
    }

    /// Renders the chat template for `messages` (a list of `{role, content}` maps) with the
    /// variables transformers passes.
    fn render_messages(
        &self,
        messages: Value,
        add_generation_prompt: bool,
    ) -> Result<String, TokenizerError> {
        let mut env = Environment::new();
        // transformers: ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).
        env.set_syntax(
            minijinja::syntax::SyntaxConfig::builder()
                .trim_blocks(true)
                .lstrip_blocks(true)
                .build()?,
        );
        env.add_function(
            "raise_exception",
            |message: String| -> Result<Value, minijinja::Error> {
                Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
            },
        );
        let mut ctx: BTreeMap<String, Value> = self
            .template_tokens
            .iter()
            .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
            .collect();
        ctx.insert("messages".into(), messages);
        ctx.insert(
            "add_generation_prompt".into(),
            Value::from(add_generation_prompt),
        );
        // transformers passes these as None when unused.
        for key in ["tools", "documents"] {
            ctx.insert(key.into(), Value::from(()));
        }
        Ok(env.render_str(&self.chat_template, Value::from(ctx))?)
    }

    /// Expands the one `<|image_pad|>` of a rendered prompt to `n_image_tokens` copies and
    /// tokenises the result, as `Qwen2_5_VLProcessor` does.
    pub(crate) fn encode_prompt(
        &self,
        rendered: &str,
        n_image_tokens: usize,
    ) -> Result<Vec<u32>, TokenizerError> {
        self.encode_images(rendered, &[n_image_tokens])
    }

    /// Expands the k-th `<|image_pad|>` of a rendered prompt to `image_tokens[k]` copies (one
    /// placeholder per image, in order) and tokenises the result.
    fn encode_images(
        &self,
        rendered: &str,
        image_tokens: &[usize],
    ) -> Result<Vec<u32>, TokenizerError> {
        if image_tokens.contains(&0) {
            return Err(TokenizerError::NoImageTokens);
        }
        let pieces: Vec<&str> = rendered.split(special::IMAGE_PAD).collect();
        if pieces.len() != image_tokens.len() + 1 {
            return Err(TokenizerError::ImagePlaceholders {
                token: special::IMAGE_PAD,
                found: pieces.len() - 1,
            });
        }
        let expected: usize = image_tokens.iter().sum();
        let mut text = String::with_capacity(rendered.len() + expected * special::IMAGE_PAD.len());
        text.push_str(pieces[0]);
        for (&n, piece) in image_tokens.iter().zip(&pieces[1..]) {
            for _ in 0..n {
                text.push_str(special::IMAGE_PAD);
            }
            text.push_str(piece);
        }
        let ids = self.encode(&text)?;
        let found = ids.iter().filter(|&&id| id == self.ids.image_pad).count();
        if found != expected {
            return Err(TokenizerError::ImageTokenCount { expected, found });
        }
        Ok(ids)
    }

    /// One user message `[text, image, image, …]` (text first: the order of Embodied-R's
    /// perception requests, `train/conver_format/VLM_perception_local.py` at 174ae99), optionally
    /// after a system message, then the generation prompt; image k expanded to
    /// `image_tokens[k]` pads.
    pub fn text_then_images_prompt_ids(
        &self,
        prompt: &str,
        system: Option<&str>,
        image_tokens: &[usize],
    ) -> Result<Vec<u32>, TokenizerError> {
        let content: Vec<Value> = std::iter::once(object([
            ("type", Value::from("text")),
            ("text", Value::from(prompt)),
        ]))
        .chain(
            image_tokens
                .iter()
                .map(|_| object([("type", Value::from("image"))])),
        )
        .collect();
        let rendered = self.render_turn(system, Value::from(content))?;
        self.encode_images(&rendered, image_tokens)
    }

    /// Renders the chat template for a text-only turn: an optional system message, then one user
    /// message whose content is a plain string (the template's `content is string` branch, as
    /// transformers renders `{"role": "user", "content": "…"}`), then the generation prompt. No
    /// image placeholder is emitted.
    pub fn render_text_prompt(
        &self,
        user: &str,
        system: Option<&str>,
    ) -> Result<String, TokenizerError> {
        self.render_turn(system, Value::from(user))
    }

    /// [`render_text_prompt`](Self::render_text_prompt), tokenised. Text that spells a special
    /// token (`<|image_pad|>`, …) becomes that token, as with transformers' tokenizer.
    pub fn text_prompt_ids(
        &self,
        user: &str,
        system: Option<&str>,
    ) -> Result<Vec<u32>, TokenizerError> {
        let rendered = self.render_text_prompt(user, system)?;
        self.encode(&rendered)
    }

    /// [`render_prompt`](Self::render_prompt) then [`encode_prompt`](Self::encode_prompt).
    pub fn prompt_ids(
        &self,
        prompt: &str,
        system: Option<&str>,
        n_image_tokens: usize,
    ) -> Result<Vec<u32>, TokenizerError> {
        let rendered = self.render_prompt(prompt, system)?;
        self.encode_prompt(&rendered, n_image_tokens)
    }

    /// Tokenises text; special-token strings in it become their single ids. Like transformers'
    /// `tokenizer(text)`, the post-processor runs (Qwen's adds no tokens).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        let enc = self
            .tokenizer
            .encode(text, true)
            .map_err(|e| TokenizerError::Encode(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Decodes ids to text, special tokens included (nothing skipped).
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        self.decode_with(ids, false)
    }

    /// Decodes ids to text, optionally dropping special tokens.
    pub fn decode_with(&self, ids: &[u32], skip_special: bool) -> Result<String, TokenizerError> {
        self.tokenizer
            .decode(ids, skip_special)
            .map_err(|e| TokenizerError::Decode(e.to_string()))
    }

    /// A streaming decoder that keeps special tokens (like [`decode`](Self::decode)).
    pub fn stream(&self) -> TokenStream<'_> {
        TokenStream::new(self, false)
    }

    /// A streaming decoder, optionally dropping special tokens.
    pub fn stream_with(&self, skip_special: bool) -> TokenStream<'_> {
        TokenStream::new(self, skip_special)
    }
}

/// Incremental decoder: feed generated ids one at a time, get the text they complete.
///
/// Decoding each id alone is wrong for byte-level BPE: one character's UTF-8 bytes can be split
/// over several tokens (each decodes to U+FFFD alone), and some decoders treat the first token of
/// a sequence specially. So the stream keeps a short window of ids: text is emitted only once
/// the window decodes without a trailing U+FFFD, as the part beyond what the window's older ids
/// already produced. The concatenation of all [`step`](Self::step) outputs and
/// [`finish`](Self::finish) equals the one-shot decode of all ids.
#[derive(Debug, Clone)]
pub struct TokenStream<'a> {
    tokenizer: &'a Qwen25Tokenizer,
    skip_special: bool,
    /// `ids[..read]`: the ids of the last emitted chunk, kept as left context only;
    /// `ids[read..]`: ids whose text is not emitted yet.
    ids: Vec<u32>,
    read: usize,
}

impl<'a> TokenStream<'a> {
    fn new(tokenizer: &'a Qwen25Tokenizer, skip_special: bool) -> Self {
        TokenStream {
            tokenizer,
            skip_special,
            ids: Vec::new(),
            read: 0,
        }
    }

    /// Adds one id; returns the newly completed text, or `None` while a character is incomplete
    /// (or the id decodes to nothing).
    pub fn step(&mut self, id: u32) -> Result<Option<String>, TokenizerError> {
        self.ids.push(id);
        let new = self.pending_text()?;
        match new {
            Some(text) if !text.is_empty() && !text.ends_with(char::REPLACEMENT_CHARACTER) => {
                // The ids of this chunk become the left context of the next; older ids go.
                self.ids.drain(..self.read);
                self.read = self.ids.len();
                Ok(Some(text))
            }
            _ => Ok(None),
        }
    }

    /// Returns whatever text is still pending (possibly ending in U+FFFD if the ids stop inside
    /// a character) and ends the stream.
    pub fn finish(mut self) -> Result<Option<String>, TokenizerError> {
        let text = self.pending_text()?;
        self.ids.clear();
        Ok(text.filter(|t| !t.is_empty()))
    }

    /// Text of all of `ids` beyond the text of the context `ids[..read]`.
    fn pending_text(&self) -> Result<Option<String>, TokenizerError> {
        if self.read == self.ids.len() {
            return Ok(None);
        }
        let tok = self.tokenizer;
        let before = tok.decode_with(&self.ids[..self.read], self.skip_special)?;
        let after = tok.decode_with(&self.ids, self.skip_special)?;
        if after.len() <= before.len() {
            return Ok(None);
        }
        match after.strip_prefix(before.as_str()) {
            Some(rest) => Ok(Some(rest.to_owned())),
            None => Err(TokenizerError::StreamPrefix {
                emitted: before,
                decoded: after,
            }),
        }
    }
}

fn object<const N: usize>(pairs: [(&str, Value); N]) -> Value {
    Value::from(
        pairs
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect::<BTreeMap<String, Value>>(),
    )
}

fn load_tokenizer(path: &Path) -> Result<tokenizers::Tokenizer, TokenizerError> {
    if !path.is_file() {
        return Err(TokenizerError::MissingTokenizer {
            path: path.to_path_buf(),
        });
    }
    tokenizers::Tokenizer::from_file(path).map_err(|e| TokenizerError::Load {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// Looks up each special token by string and checks it encodes to that single id.
fn special_token_ids(tok: &tokenizers::Tokenizer) -> Result<SpecialTokenIds, TokenizerError> {
    let lookup = |token: &'static str| -> Result<Option<u32>, TokenizerError> {
        let Some(id) = tok.token_to_id(token) else {
            return Ok(None);
        };
        let ids = tok
            .encode(token, false)
            .map_err(|e| TokenizerError::Encode(e.to_string()))?
            .get_ids()
            .to_vec();
        if ids != [id] {
            return Err(TokenizerError::SpecialTokenSplit { token, ids });
        }
        Ok(Some(id))
    };
    let need = |token: &'static str| -> Result<u32, TokenizerError> {
        lookup(token)?.ok_or(TokenizerError::MissingSpecialToken { token })
    };
    Ok(SpecialTokenIds {
        im_start: need(special::IM_START)?,
        im_end: need(special::IM_END)?,
        vision_start: need(special::VISION_START)?,
        vision_end: need(special::VISION_END)?,
        image_pad: need(special::IMAGE_PAD)?,
        video_pad: need(special::VIDEO_PAD)?,
        endoftext: lookup(special::ENDOFTEXT)?,
        vision_pad: lookup(special::VISION_PAD)?,
    })
}

fn read_json_if_exists(
    path: &Path,
) -> Result<Option<(PathBuf, serde_json::Value)>, TokenizerError> {
    if !path.is_file() {
        return Ok(None);
    }
    let text =
        pointact_input::read_text(path, pointact_input::MAX_DATA_BYTES).map_err(|source| {
            TokenizerError::Io {
                path: path.to_path_buf(),
                source,
            }
        })?;
    let json = serde_json::from_str(&text).map_err(|source| TokenizerError::Json {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(Some((path.to_path_buf(), json)))
}

/// The `chat_template` value of a JSON file: a string, or transformers' list of named templates
/// (then the one named "default", as `apply_chat_template` picks without a name).
fn template_from_json(
    path: &Path,
    json: &serde_json::Value,
) -> Result<Option<String>, TokenizerError> {
    let shape = || TokenizerError::TemplateShape {
        path: path.to_path_buf(),
    };
    match json.get("chat_template") {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
        Some(serde_json::Value::Array(list)) => list
            .iter()
            .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
            .and_then(|t| t.get("template").and_then(|s| s.as_str()))
            .map(|s| Some(s.to_owned()))
            .ok_or_else(shape),
        Some(_) => Err(shape()),
    }
}

fn find_chat_template(
    dir: &Path,
    tokenizer_config: Option<&(PathBuf, serde_json::Value)>,
) -> Result<(String, TemplateSource), TokenizerError> {
    let jinja = dir.join("chat_template.jinja");
    if jinja.is_file() {
        let text = pointact_input::read_text(&jinja, pointact_input::MAX_CONFIG_BYTES).map_err(
            |source| TokenizerError::Io {
                path: jinja.clone(),
                source,
            },
        )?;
        return Ok((text, TemplateSource::Jinja(jinja)));
    }
    if let Some((path, json)) = read_json_if_exists(&dir.join("chat_template.json"))? {
        if let Some(t) = template_from_json(&path, &json)? {
            return Ok((t, TemplateSource::ChatTemplateJson(path)));
        }
    }
    if let Some((path, json)) = tokenizer_config {
        if let Some(t) = template_from_json(path, json)? {
            return Ok((t, TemplateSource::TokenizerConfig(path.clone())));
        }
    }
    Ok((QWEN2_VL_CHAT_TEMPLATE.to_owned(), TemplateSource::BuiltIn))
}

/// `bos_token`, `eos_token`, `unk_token`, `pad_token` of `tokenizer_config.json` (a string or an
/// AddedToken object with `content`), as transformers passes them to the template.
fn template_tokens(cfg: &serde_json::Value) -> BTreeMap<String, String> {
    ["bos_token", "eos_token", "unk_token", "pad_token"]
        .into_iter()
        .filter_map(|key| {
            let v = cfg.get(key)?;
            let s = v
                .as_str()
                .or_else(|| v.get("content").and_then(|c| c.as_str()))?;
            Some((key.to_owned(), s.to_owned()))
        })
        .collect()
}
