//! The local pointing backend `qwen`: Embodied-R1 (or any Qwen2.5-VL checkpoint) running in
//! process on candle, behind the [`Pointer`] seam.
//!
//! One query = the ability's prompt template filled with the instruction, rendered through the
//! model's own chat template (one user turn: image, then text), the frame through the model's
//! image processor, greedy decoding with repetition penalty 1.05 (Embodied-R1's setting) until
//! `<|im_end|>`, and the reply through the one answer parser. Points come back in the frame's
//! pixels via the processor's resize map.

use std::time::Instant;

use image::RgbImage;
use indicatif::{ProgressBar, ProgressStyle};

use super::{Ability, ImageSize, Pointer, PointerError, Pointing};
use pointact_core::camera::Frame;
use pointact_vlm::qcache::CacheOptions;
use pointact_vlm::qcache::CacheReport;
use pointact_vlm::{
    budget, generate, generate_reusing, qcache, DeviceSpec, Generation, GenerationConfig,
    ImageInput, ImageProcessor, ImageProcessorConfig, ModelError, ModelFiles, PromptCache, Quant,
    Qwen25Tokenizer, Qwen25Vl, Qwen25VlConfig, SafetensorsReader, Sampling, Timings,
};

/// Settings of the local backend.
#[derive(Debug, Clone)]
pub struct QwenOptions {
    /// Weight format of the text decoder.
    pub quant: Quant,
    /// Weight format of the vision tower's linears that fit the block size (default f32).
    pub vision_quant: Quant,
    /// Where the model runs (default the CPU). A GPU takes dense f32 weights only.
    pub device: DeviceSpec,
    /// The quantized-weights cache (`vlm::qcache`): a quantized load reads the blocks an earlier
    /// one wrote beside the checkpoint instead of quantizing again. On by default.
    pub quant_cache: CacheOptions,
    /// Override the preprocessor's pixel budget (fewer pixels = fewer image tokens = faster).
    pub min_pixels: Option<u64>,
    /// Override the preprocessor's `max_pixels` (images above it are resized down); `None` keeps
    /// the model's.
    pub max_pixels: Option<u64>,
    /// Decoding settings; `stop_ids` is filled from the model when empty.
    pub generation: GenerationConfig,
    /// A system message; `None` lets the chat template add its default one (as Embodied-R1's
    /// own inference does).
    pub system: Option<String>,
    /// Draw a progress bar while loading weights.
    pub progress: bool,
    /// Bytes one image's activations may take (see [`pointact_vlm::budget`]); `None`: the smaller of
    /// [`DEFAULT_ACTIVATION_BUDGET`] and 3/4 of the memory available once the weights are loaded.
    pub memory_budget: Option<u64>,
}

/// The activation budget when none is given and the machine has more memory free: enough for
/// Embodied-R1's evaluation resolution many times over (~5 MP on the 3B model).
pub const DEFAULT_ACTIVATION_BUDGET: u64 = 8 << 30;

/// The processor's `max_pixels` was lowered so that one image fits the activation budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PixelCap {
    /// `max_pixels` of the preprocessor config.
    pub configured: u64,
    /// `max_pixels` in use.
    pub capped: u64,
    /// The activation budget, bytes.
    pub budget: u64,
    /// Where the budget came from, for the message.
    pub source: String,
}

impl std::fmt::Display for PixelCap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "images are downscaled to at most {} pixels (the model's preprocessor allows {}): \
             one image's activations must fit the {} budget ({}); attention memory grows with \
             the square of the pixel count. Pass --memory-budget-gb or --max-pixels to change it",
            self.capped,
            self.configured,
            gib(self.budget),
            self.source
        )
    }
}

/// A byte count for messages: GiB from 1 GiB up, MiB below (a 50 MiB budget is not "0.0 GiB").
fn gib(bytes: u64) -> String {
    if bytes >= 1 << 30 {
        format!("{:.1} GiB", bytes as f64 / f64::from(1u32 << 30))
    } else {
        format!("{:.0} MiB", bytes as f64 / f64::from(1u32 << 20))
    }
}

impl Default for QwenOptions {
    fn default() -> Self {
        Self {
            quant: Quant::F32,
            vision_quant: Quant::F32,
            device: DeviceSpec::Cpu,
            quant_cache: CacheOptions::default(),
            min_pixels: None,
            max_pixels: None,
            generation: GenerationConfig::default(),
            system: None,
            progress: true,
            memory_budget: None,
        }
    }
}

/// Why the backend could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The model folder or its files could not be found or fetched.
    #[error(transparent)]
    Files(#[from] pointact_vlm::FilesError),
    /// `config.json` is missing or invalid.
    #[error(transparent)]
    Config(#[from] pointact_vlm::ConfigError),
    /// The tokenizer or chat template could not be loaded, or its special-token ids disagree with
    /// `config.json`.
    #[error(transparent)]
    Tokenizer(#[from] pointact_vlm::TokenizerError),
    /// The image processor settings (from `preprocessor_config.json` or the pixel overrides) are
    /// invalid.
    #[error(transparent)]
    Processor(#[from] pointact_vlm::ProcessorError),
    /// The safetensors checkpoint could not be opened.
    #[error(transparent)]
    Weights(#[from] pointact_vlm::WeightsError),
    /// The device cannot be opened, or cannot run the weight format asked for.
    #[error(transparent)]
    Device(#[from] pointact_vlm::DeviceError),
    /// Building the model from the checkpoint failed (e.g. a missing tensor or a shape mismatch).
    #[error("loading weights from {dir}: {source}")]
    Model {
        /// The model folder.
        dir: String,
        /// candle's error.
        source: candle_core::Error,
    },
    /// The pixel settings the user asked for cannot fit the activation budget.
    #[error(
        "--{flag} {asked} needs more memory than the {budget} activation budget ({origin}) allows: \
         at most {fit} pixels fit (attention memory grows with the square of the pixel count); \
         lower --{flag} or raise --memory-budget-gb"
    )]
    PixelBudget {
        /// The flag that asked (`min-pixels` or `max-pixels`), without dashes.
        flag: &'static str,
        /// The pixel count asked for.
        asked: u64,
        /// The most pixels one image may have within the budget.
        fit: u64,
        /// The budget, formatted (GiB or MiB).
        budget: String,
        /// Where the budget came from (`--memory-budget-gb`, or the default and the memory
        /// available).
        origin: String,
    },
}

/// Everything one query produced, for printing and logging.
#[derive(Debug, Clone)]
pub struct QwenReply {
    /// The decoded reply (special tokens removed).
    pub text: String,
    /// The generated token ids, the stop token (if one ended the reply) last.
    pub tokens: Vec<u32>,
    /// Time of each phase and the token counts.
    pub timings: Timings,
    /// Size of the image the model saw, and of the one given.
    pub model_size: ImageSize,
    /// Size of the image given.
    pub original_size: ImageSize,
}

/// Receives decoded reply text as it is generated.
type TextSink = Box<dyn FnMut(&str) + Send>;

/// What [`QwenPointer::into_parts`] hands over.
pub struct QwenParts {
    /// The loaded model.
    pub model: Qwen25Vl,
    /// The tokenizer with the chat template prompts are rendered with.
    pub tokenizer: Qwen25Tokenizer,
    /// The image processor with the pixel limits in use (after any cap to the activation budget).
    pub processor: ImageProcessor,
    /// The model's files (config, weights, tokenizer, ...).
    pub files: ModelFiles,
    /// The system message prompts are rendered with (`None`: the template's default).
    pub system: Option<String>,
    /// Tokens that end a reply.
    pub stop_ids: Vec<u32>,
}

/// Embodied-R1 / Qwen2.5-VL in process.
pub struct QwenPointer {
    model: Qwen25Vl,
    tokenizer: Qwen25Tokenizer,
    processor: ImageProcessor,
    options: QwenOptions,
    files: ModelFiles,
    on_text: Option<TextSink>,
    last: Option<QwenReply>,
    /// The last frame's vision rows and prompt keys/values: the next question about the same
    /// frame (a task asks REG, RRG, OFG or VTG about one frame) starts from them.
    frame: PromptCache,
    quant_cache: CacheReport,
}

impl std::fmt::Debug for QwenPointer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QwenPointer")
            .field("model", &self.files.dir)
            .field("quant", &self.options.quant)
            .finish()
    }
}

impl QwenPointer {
    /// Loads a model folder or hub repo id (see [`ModelFiles::resolve`]).
    pub fn load(spec: &str, options: QwenOptions) -> Result<Self, LoadError> {
        // Before resolving: that may download the model.
        options.device.check(options.quant, options.vision_quant)?;
        let files = ModelFiles::resolve(spec)?;
        Self::from_files(files, options)
    }

    /// Loads from already resolved files.
    pub fn from_files(files: ModelFiles, mut options: QwenOptions) -> Result<Self, LoadError> {
        let cfg = Qwen25VlConfig::from_file(&files.config)?;
        let tokenizer = Qwen25Tokenizer::from_dir(&files.dir)?;
        tokenizer.check_token_ids(&cfg.tokens, cfg.vision.is_some())?;
        let mut pcfg = match &files.preprocessor_config {
            Some(p) => ImageProcessorConfig::from_file(p)?,
            None => ImageProcessorConfig::qwen25vl_instruct(),
        };
        if let Some(v) = options.min_pixels {
            pcfg.min_pixels = v;
        }
        if let Some(v) = options.max_pixels {
            pcfg.max_pixels = v;
        }
        // Checked before the weights load, so a bad setting fails fast.
        ImageProcessor::new(pcfg.clone())?;
        options.device.check(options.quant, options.vision_quant)?;
        let device = options.device.open()?;

        let mut reader = SafetensorsReader::open(&files.weights)?;
        if options.progress {
            let bar = ProgressBar::new(reader.total_bytes()).with_style(
                ProgressStyle::with_template(
                    "loading {msg} [{bar:30}] {binary_bytes}/{binary_total_bytes} ({eta})",
                )
                .expect("static template")
                .progress_chars("=> "),
            );
            bar.set_message(
                files
                    .dir
                    .file_name()
                    .map_or_else(|| "weights".into(), |n| n.to_string_lossy().into_owned()),
            );
            reader = reader.with_progress(bar);
        }
        let (vb, cache) = qcache::attach(
            reader,
            options.quant,
            options.vision_quant,
            &options.quant_cache,
            &device,
        );
        let model = Qwen25Vl::new_quantized(&cfg, options.quant, options.vision_quant, vb)
            .map_err(|source| LoadError::Model {
                dir: files.dir.display().to_string(),
                source,
            })?;
        let quant_cache = cache.finish();
        // After loading, so the memory the weights took is no longer counted as available. A
        // text-only checkpoint takes no image: nothing to cap.
        if cfg.vision.is_some() {
            if let Some(cap) = &cap_pixels(&cfg, &mut pcfg, &options)? {
                tracing::warn!("{cap}");
            }
        }
        let processor = ImageProcessor::new(pcfg)?;
        if options.generation.stop_ids.is_empty() {
            let special = tokenizer.special_ids();
            let mut stop = cfg.tokens.eos_token_ids.clone();
            stop.push(special.im_end);
            stop.extend(special.endoftext);
            stop.sort_unstable();
            stop.dedup();
            options.generation.stop_ids = stop;
        }
        Ok(Self {
            model,
            tokenizer,
            processor,
            options,
            files,
            on_text: None,
            last: None,
            frame: PromptCache::new(),
            quant_cache,
        })
    }

    /// The loaded parts, for a caller that drives the model itself (the GRPO trainer: its
    /// rollouts are batched, its forward differentiable), loaded exactly as the pointer loads
    /// them.
    pub fn into_parts(self) -> QwenParts {
        QwenParts {
            model: self.model,
            tokenizer: self.tokenizer,
            processor: self.processor,
            files: self.files,
            system: self.options.system,
            stop_ids: self.options.generation.stop_ids,
        }
    }

    /// What the load did with the quantized-weights cache.
    pub fn quant_cache(&self) -> &CacheReport {
        &self.quant_cache
    }

    /// Streams decoded text pieces to `f` as tokens are generated (e.g. to the terminal).
    pub fn with_text_stream(mut self, f: impl FnMut(&str) + Send + 'static) -> Self {
        self.on_text = Some(Box::new(f));
        self
    }

    /// Forgets the last frame: the next question runs the vision tower and the whole prompt
    /// (`bench vlm --task` measures questions asked cold this way).
    pub fn forget_frame(&mut self) {
        self.frame.clear();
    }

    /// The last query's reply (text, tokens, timings).
    pub fn last_reply(&self) -> Option<&QwenReply> {
        self.last.as_ref()
    }

    /// Asks the model about `image`; returns the reply and the parsed answer in `image` pixels.
    pub fn ask(
        &mut self,
        image: &RgbImage,
        ability: Ability,
        instruction: &str,
    ) -> Result<(QwenReply, Result<Pointing, PointerError>), PointerError> {
        let backend = |e: &dyn std::fmt::Display| PointerError::Backend(format!("qwen: {e}"));
        let processed = self
            .processor
            .preprocess_rgb(image)
            .map_err(|e| backend(&e))?;
        let map = processed.model_image_map().map_err(|e| backend(&e))?;
        let prompt = ability.prompt(instruction);
        let ids = self
            .tokenizer
            .prompt_ids(
                &prompt,
                self.options.system.as_deref(),
                processed.num_image_tokens(),
            )
            .map_err(|e| backend(&e))?;
        let input =
            ImageInput::from_processed(&processed, self.model.device()).map_err(|e| backend(&e))?;
        let t0 = Instant::now();
        let generation = self.options.generation.clone();
        let gen = self
            .generate_streamed(&ids, &[input], &generation, true)
            .map_err(|e| backend(&e))?;
        tracing::debug!("qwen query took {:.2} s", t0.elapsed().as_secs_f64());
        let text = self
            .tokenizer
            .decode_with(&gen.tokens, true)
            .map_err(|e| backend(&e))?;
        let reply = QwenReply {
            text: text.clone(),
            tokens: gen.tokens,
            timings: gen.timings,
            model_size: processed.model_size,
            original_size: processed.original_size,
        };
        self.last = Some(reply.clone());
        let pointing = Pointing::parse(&text, ability, map);
        Ok((reply, pointing))
    }
}

/// What one text-only query ([`QwenPointer::reply`]) produced.
#[derive(Debug, Clone)]
pub struct QwenTextReply {
    /// The decoded reply (special tokens removed).
    pub text: String,
    /// The generated token ids, the stop token (if one ended the reply) last.
    pub tokens: Vec<u32>,
    /// Time of each phase and the token counts.
    pub timings: Timings,
}

impl QwenPointer {
    /// Asks the model a text-only question: a `system` and a `user` message through the chat
    /// template's plain-string branch, no image, at most `max_tokens` new tokens. `temperature` ≤ 0 decodes greedily;
    /// above, it samples at that temperature (top-p 1, the configured seed, so a call is
    /// repeatable). The repetition penalty is the backend's (1.05 by default, Qwen2.5-VL's own
    /// generation config). Used by the consistency reward's reference model
    /// (`train::consistency::QwenReference`).
    pub fn reply(
        &mut self,
        system: &str,
        user: &str,
        max_tokens: usize,
        temperature: f64,
    ) -> Result<QwenTextReply, PointerError> {
        let backend = |e: &dyn std::fmt::Display| PointerError::Backend(format!("qwen: {e}"));
        let ids = self
            .tokenizer
            .text_prompt_ids(user, Some(system))
            .map_err(|e| backend(&e))?;
        let mut generation = self.options.generation.clone();
        generation.max_new_tokens = max_tokens;
        generation.sampling = if temperature > 0.0 {
            Sampling::TopP {
                temperature,
                top_p: 1.0,
            }
        } else {
            Sampling::Greedy
        };
        let gen = generate(&mut self.model, &ids, &[], &generation, &mut |_| true)
            .map_err(|e| backend(&e))?;
        self.text_reply(gen)
    }

    /// A generation's tokens decoded (special tokens removed), with its timings.
    fn text_reply(&self, gen: Generation) -> Result<QwenTextReply, PointerError> {
        let text = self
            .tokenizer
            .decode_with(&gen.tokens, true)
            .map_err(|e| PointerError::Backend(format!("qwen: {e}")))?;
        Ok(QwenTextReply {
            text,
            tokens: gen.tokens,
            timings: gen.timings,
        })
    }

    /// Generates a reply to `ids` with `images`, streaming its text to the sink as it comes;
    /// `reuse_frame` starts from (and keeps) the last question's prompt cache, for questions
    /// about one frame.
    fn generate_streamed(
        &mut self,
        ids: &[u32],
        images: &[ImageInput],
        generation: &GenerationConfig,
        reuse_frame: bool,
    ) -> Result<Generation, ModelError> {
        let mut stream = self.tokenizer.stream_with(true);
        let mut on_text = self.on_text.take();
        let mut on_token = |id| {
            if let (Some(f), Ok(Some(piece))) = (on_text.as_mut(), stream.step(id)) {
                f(&piece);
            }
            true
        };
        let result = if reuse_frame {
            generate_reusing(
                &mut self.model,
                ids,
                images,
                generation,
                &mut on_token,
                &mut self.frame,
            )
        } else {
            generate(&mut self.model, ids, images, generation, &mut on_token)
        };
        if let (Some(f), Ok(Some(rest))) = (on_text.as_mut(), stream.finish()) {
            f(&rest);
        }
        self.on_text = on_text;
        result
    }
}

impl QwenPointer {
    /// Asks the model about several images at once, free text: one user message holding
    /// `prompt` then the images in order (Embodied-R's perception request: the previous and the
    /// current key frame), at most `max_tokens` new tokens, decoded with the backend's generation
    /// settings. Streams to the text sink like [`QwenPointer::ask`].
    pub fn describe(
        &mut self,
        images: &[&RgbImage],
        prompt: &str,
        max_tokens: usize,
    ) -> Result<QwenTextReply, PointerError> {
        let backend = |e: &dyn std::fmt::Display| PointerError::Backend(format!("qwen: {e}"));
        let mut inputs = Vec::with_capacity(images.len());
        let mut counts = Vec::with_capacity(images.len());
        for image in images {
            let processed = self
                .processor
                .preprocess_rgb(image)
                .map_err(|e| backend(&e))?;
            counts.push(processed.num_image_tokens());
            inputs.push(
                ImageInput::from_processed(&processed, self.model.device())
                    .map_err(|e| backend(&e))?,
            );
        }
        let ids = self
            .tokenizer
            .text_then_images_prompt_ids(prompt, self.options.system.as_deref(), &counts)
            .map_err(|e| backend(&e))?;
        let mut generation = self.options.generation.clone();
        generation.max_new_tokens = max_tokens;
        let gen = self
            .generate_streamed(&ids, &inputs, &generation, false)
            .map_err(|e| backend(&e))?;
        self.text_reply(gen)
    }
}

impl Pointer for QwenPointer {
    fn name(&self) -> &str {
        "qwen"
    }

    fn point(
        &mut self,
        frame: &Frame,
        ability: Ability,
        instruction: &str,
    ) -> Result<Pointing, PointerError> {
        self.ask(&frame.rgb, ability, instruction)?.1
    }
}

/// Lowers `pcfg.max_pixels` to what the activation budget allows (returning why), or refuses a
/// pixel setting the user gave explicitly that cannot fit.
fn cap_pixels(
    cfg: &Qwen25VlConfig,
    pcfg: &mut ImageProcessorConfig,
    options: &QwenOptions,
) -> Result<Option<PixelCap>, LoadError> {
    let (budget, source) = match options.memory_budget {
        Some(b) => (b, "--memory-budget-gb".to_owned()),
        None => match budget::mem_available_bytes() {
            Some(avail) if avail / 4 * 3 < DEFAULT_ACTIVATION_BUDGET => (
                avail / 4 * 3,
                format!("3/4 of the {} available after loading", gib(avail)),
            ),
            _ => (DEFAULT_ACTIVATION_BUDGET, "the default".to_owned()),
        },
    };
    let reply = options.generation.max_new_tokens as u64;
    let fit = budget::pixels_within(cfg, budget, budget::PROMPT_ALLOWANCE + reply);
    let refuse = |flag: &'static str, asked: u64| LoadError::PixelBudget {
        flag,
        asked,
        fit,
        budget: gib(budget),
        origin: source.clone(),
    };
    if pcfg.min_pixels > fit {
        return Err(refuse("min-pixels", pcfg.min_pixels));
    }
    if pcfg.max_pixels <= fit {
        return Ok(None);
    }
    if let Some(asked) = options.max_pixels {
        return Err(refuse("max-pixels", asked));
    }
    let cap = PixelCap {
        configured: pcfg.max_pixels,
        capped: fit,
        budget,
        source,
    };
    pcfg.max_pixels = fit;
    Ok(Some(cap))
}
