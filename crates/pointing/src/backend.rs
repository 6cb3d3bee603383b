//! Choosing a pointing backend: one [`PointerKind`] for every command that points, the model
//! settings they share ([`ModelOptions`], also the command line's flags), and one factory
//! ([`open`]) for the model backends. The oracle answers from simulator ground truth, so only the
//! runner can build it (it holds the episode's world); [`open`] says so when asked for it.

use std::time::Duration;

use image::RgbImage;

use super::openai::{OpenAiConfig, OpenAiPointer, DEFAULT_ENDPOINT, DEFAULT_MODEL};
use super::qwen::{QwenOptions, QwenPointer, QwenReply};
use super::{Ability, Pointer, PointerError, Pointing};
use pointact_core::camera::Frame;
use pointact_vlm::qcache::CacheOptions;
use pointact_vlm::{DeviceSpec, GenerationConfig, Quant, Sampling};

/// Who answers the pointing questions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PointerKind {
    /// Simulator ground truth written as model text (simulated tasks only).
    Oracle,
    /// Embodied-R1 / Qwen2.5-VL in process (`--model DIR`).
    Qwen,
    /// A vLLM / SGLang server speaking the OpenAI chat API (`--endpoint URL`).
    Openai,
}

impl PointerKind {
    /// The backend's name, as `--pointer` takes it (`oracle`, `qwen`, `openai`).
    pub fn as_str(self) -> &'static str {
        match self {
            PointerKind::Oracle => "oracle",
            PointerKind::Qwen => "qwen",
            PointerKind::Openai => "openai",
        }
    }
}

/// How to reach the pointing model (backends `qwen` and `openai`); the command line flattens it.
#[derive(Debug, Clone, clap::Args)]
pub struct ModelOptions {
    /// qwen: a local Hugging Face folder or a hub repo id (offline: pass a folder);
    /// openai: the model name the server serves.
    #[arg(long, default_value = DEFAULT_MODEL)]
    pub model: String,
    /// qwen: weight format of the text decoder: f32 (exact: f32 arithmetic; a bf16
    /// checkpoint's weights are held bf16 on a CPU with AVX2, the same numbers at half the
    /// memory), q8_0 or q4k (faster, smaller).
    #[arg(long, default_value = "f32")]
    pub quant: Quant,
    /// qwen: weight format of the vision tower's linears (f32 keeps the image features exact;
    /// layers whose width fits no block stay f32 anyway).
    #[arg(long, default_value = "f32")]
    pub vision_quant: Quant,
    /// qwen: where the model runs: cpu, cuda or cuda:N (a GPU needs a build with the `cuda`
    /// feature and takes f32 weights only).
    #[arg(long, default_value = "cpu")]
    pub device: DeviceSpec,
    /// qwen: quantize at every load instead of reading (and on the first load writing) the
    /// quantized weights cached in MODEL/.pointact/ (or ~/.cache/pointact/qcache/).
    #[arg(long)]
    pub no_quant_cache: bool,
    /// Smallest image the processor passes to the model, in pixels (default: the model's
    /// preprocessor_config.json); smaller images are resized up. For openai, --min-pixels and
    /// --max-pixels must equal the server's own limits, or points are scaled wrong.
    #[arg(long)]
    pub min_pixels: Option<u64>,
    /// Largest image the processor passes to the model, in pixels (default: the model's
    /// preprocessor_config.json); larger images are resized down, keeping their aspect ratio.
    #[arg(long)]
    pub max_pixels: Option<u64>,
    /// qwen: memory one image's activations may take, GiB; larger images are downscaled to fit
    /// (default: 8, or 3/4 of the memory free after loading when that is less).
    #[arg(long)]
    pub memory_budget_gb: Option<f64>,
    /// Longest reply, in tokens.
    #[arg(long, default_value_t = 1024)]
    pub max_new_tokens: usize,
    /// 0 = greedy (Embodied-R1's setting); above 0 samples with --top-p.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f64,
    /// Nucleus sampling (with --temperature > 0): sample among the likeliest tokens whose
    /// probabilities add up to this, in (0, 1]; 1 keeps them all.
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f64,
    /// Seed of the sampler (with --temperature > 0).
    #[arg(long, default_value_t = 0)]
    pub sample_seed: u64,
    /// Divides the scores of tokens already in the prompt or reply (transformers'
    /// repetition_penalty; 1.05 is Embodied-R1's generation_config); 1 turns it off.
    #[arg(long, default_value_t = 1.05)]
    pub repetition_penalty: f32,
    /// openai: base URL of the server (POST {endpoint}/chat/completions).
    #[arg(long, default_value = DEFAULT_ENDPOINT)]
    pub endpoint: String,
    /// openai: bearer token (default: $OPENAI_API_KEY).
    #[arg(long)]
    pub api_key: Option<String>,
    /// openai: seconds per attempt before giving up on the server.
    #[arg(long, default_value_t = 120.0)]
    pub timeout_s: f64,
    /// openai: seconds for one question, all attempts and retry waits together.
    #[arg(long, default_value_t = 180.0)]
    pub deadline_s: f64,
    /// openai: retries after a connection error, timeout, 429 or 5xx.
    #[arg(long, default_value_t = 3)]
    pub retries: u32,
}

impl ModelOptions {
    /// Checks every number before a model is loaded or a server asked: finite, in range, the
    /// range and the flag in the message.
    pub(crate) fn validate(&self) -> Result<(), PointerError> {
        let bad = |flag: &str, value: String, range: &str| {
            Err(PointerError::Backend(format!(
                "--{flag} {value} is outside {range}"
            )))
        };
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return bad(
                "temperature",
                self.temperature.to_string(),
                "[0, inf) (0 = greedy)",
            );
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad("top-p", self.top_p.to_string(), "(0, 1]");
        }
        if !(self.repetition_penalty.is_finite() && self.repetition_penalty > 0.0) {
            return bad(
                "repetition-penalty",
                self.repetition_penalty.to_string(),
                "(0, inf) (1 = none)",
            );
        }
        for (flag, secs) in [
            ("timeout-s", self.timeout_s),
            ("deadline-s", self.deadline_s),
        ] {
            if !(secs.is_finite() && secs > 0.0 && secs <= 86_400.0) {
                return bad(flag, secs.to_string(), "(0, 86400] seconds");
            }
        }
        if self.max_new_tokens == 0 {
            return bad("max-new-tokens", "0".into(), "[1, inf)");
        }
        for (flag, v) in [
            ("min-pixels", self.min_pixels),
            ("max-pixels", self.max_pixels),
        ] {
            if v == Some(0) {
                return bad(flag, "0".into(), "[1, inf)");
            }
        }
        if let Some(gb) = self.memory_budget_gb {
            // Below 1 MiB not even the prompt fits; above 1 PiB is a typo.
            if !(gb.is_finite() && (1.0 / 1024.0..=1024.0 * 1024.0).contains(&gb)) {
                return bad("memory-budget-gb", gb.to_string(), "[0.001, 1048576] GiB");
            }
        }
        if let (Some(lo), Some(hi)) = (self.min_pixels, self.max_pixels) {
            if lo > hi {
                return bad(
                    "min-pixels",
                    lo.to_string(),
                    &format!("[1, --max-pixels {hi}]"),
                );
            }
        }
        Ok(())
    }

    /// The local backend's settings.
    pub(crate) fn qwen_options(&self) -> QwenOptions {
        QwenOptions {
            quant: self.quant,
            vision_quant: self.vision_quant,
            device: self.device,
            quant_cache: if self.no_quant_cache {
                CacheOptions::off()
            } else {
                CacheOptions::default()
            },
            min_pixels: self.min_pixels,
            max_pixels: self.max_pixels,
            generation: GenerationConfig {
                max_new_tokens: self.max_new_tokens,
                sampling: if self.temperature > 0.0 {
                    Sampling::TopP {
                        temperature: self.temperature,
                        top_p: self.top_p,
                    }
                } else {
                    Sampling::Greedy
                },
                repetition_penalty: self.repetition_penalty,
                seed: self.sample_seed,
                ..GenerationConfig::default()
            },
            memory_budget: self
                .memory_budget_gb
                .map(|gb| (gb * f64::from(1u32 << 30)) as u64),
            ..Default::default()
        }
    }

    /// The remote backend's settings.
    pub(crate) fn openai_config(&self) -> Result<OpenAiConfig, PointerError> {
        let base = OpenAiConfig::new(&self.endpoint, &self.model);
        let seconds = |flag: &str, secs: f64| {
            Duration::try_from_secs_f64(secs)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| {
                    PointerError::Backend(format!(
                        "--{flag} {secs} is not a positive number of seconds"
                    ))
                })
        };
        Ok(OpenAiConfig {
            api_key: self.api_key.clone().or(base.api_key.clone()),
            timeout: seconds("timeout-s", self.timeout_s)?,
            deadline: seconds("deadline-s", self.deadline_s)?,
            retries: self.retries,
            max_tokens: self.max_new_tokens as u32,
            temperature: self.temperature,
            repetition_penalty: f64::from(self.repetition_penalty),
            min_pixels: self.min_pixels.unwrap_or(base.min_pixels),
            max_pixels: self.max_pixels.unwrap_or(base.max_pixels),
            ..base
        })
    }
}

/// Receives the model's reply text as it is generated (e.g. to the terminal).
pub type TextStream = Box<dyn FnMut(&str) + Send>;

/// A model backend: what [`open`] returns.
#[derive(Debug)]
pub enum ModelPointer {
    /// Qwen2.5-VL run in process.
    Qwen(Box<QwenPointer>),
    /// Boxed like `Qwen`: the client's configuration outweighs the other variant.
    Openai(Box<OpenAiPointer>),
}

impl ModelPointer {
    /// Asks about a bare image. The local model's reply (text, tokens, timings) comes too; a
    /// remote server's does not.
    pub fn ask(
        &mut self,
        image: &RgbImage,
        ability: Ability,
        instruction: &str,
    ) -> Result<(Option<QwenReply>, Result<Pointing, PointerError>), PointerError> {
        match self {
            ModelPointer::Qwen(p) => {
                let (reply, pointing) = p.ask(image, ability, instruction)?;
                Ok((Some(reply), pointing))
            }
            ModelPointer::Openai(p) => Ok((None, p.ask(image, ability, instruction))),
        }
    }
}

impl Pointer for ModelPointer {
    fn name(&self) -> &str {
        match self {
            ModelPointer::Qwen(p) => p.name(),
            ModelPointer::Openai(p) => p.name(),
        }
    }

    fn point(
        &mut self,
        frame: &Frame,
        ability: Ability,
        instruction: &str,
    ) -> Result<Pointing, PointerError> {
        match self {
            ModelPointer::Qwen(p) => p.point(frame, ability, instruction),
            ModelPointer::Openai(p) => p.point(frame, ability, instruction),
        }
    }
}

/// Opens a model backend: loads the local model (`qwen`; `on_text` receives its reply as it is
/// generated) or prepares the client of a server (`openai`). `oracle` is refused: it needs a
/// simulated episode (`runner`).
pub fn open(
    kind: PointerKind,
    options: &ModelOptions,
    on_text: Option<TextStream>,
) -> Result<ModelPointer, PointerError> {
    if kind != PointerKind::Oracle {
        options.validate()?;
    }
    match kind {
        PointerKind::Qwen => {
            let mut p = QwenPointer::load(&options.model, options.qwen_options())
                .map_err(|e| PointerError::Backend(format!("qwen: {e}")))?;
            if let Some(f) = on_text {
                p = p.with_text_stream(f);
            }
            Ok(ModelPointer::Qwen(Box::new(p)))
        }
        PointerKind::Openai => Ok(ModelPointer::Openai(Box::new(
            OpenAiPointer::new(options.openai_config()?).map_err(PointerError::Remote)?,
        ))),
        PointerKind::Oracle => Err(PointerError::Backend(
            "the oracle answers from simulator ground truth: use it with `run` or `eval sim`, \
             or choose --pointer qwen|openai"
                .into(),
        )),
    }
}
