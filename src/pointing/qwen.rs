//! The local pointing backend `qwen`: Embodied-R1 (or any Qwen2.5-VL checkpoint) running in
//! process on candle, behind the [`Pointer`] seam.
//!
//! One query = the ability's prompt template filled with the instruction, rendered through the
//! model's own chat template (one user turn: image, then text), the frame through the model's
//! image processor, greedy decoding with repetition penalty 1.05 (Embodied-R1's setting) until
//! `<|im_end|>`, and the reply through the one answer parser. Points come back in the frame's
//! pixels via the processor's resize map.

use std::path::Path;
use std::time::Instant;

use candle_core::{DType, Device};
use image::RgbImage;
use indicatif::{ProgressBar, ProgressStyle};

use super::{Ability, ImageSize, Pointer, PointerError, Pointing};
use crate::camera::Frame;
use crate::vlm::{
    generate, GenerationConfig, ImageInput, ImageProcessor, ImageProcessorConfig, ModelFiles,
    Quant, Qwen25Tokenizer, Qwen25Vl, Qwen25VlConfig, SafetensorsReader, Timings,
};

/// Settings of the local backend.
#[derive(Debug, Clone)]
pub struct QwenOptions {
    /// Weight format of the text decoder.
    pub quant: Quant,
    /// Weight format of the vision tower's linears that fit the block size (default f32).
    pub vision_quant: Quant,
    /// Override the preprocessor's pixel budget (fewer pixels = fewer image tokens = faster).
    pub min_pixels: Option<u64>,
    pub max_pixels: Option<u64>,
    /// Decoding settings; `stop_ids` is filled from the model when empty.
    pub generation: GenerationConfig,
    /// A system message; `None` lets the chat template add its default one (as Embodied-R1's
    /// own inference does).
    pub system: Option<String>,
    /// Draw a progress bar while loading weights.
    pub progress: bool,
}

impl Default for QwenOptions {
    fn default() -> Self {
        Self {
            quant: Quant::F32,
            vision_quant: Quant::F32,
            min_pixels: None,
            max_pixels: None,
            generation: GenerationConfig::default(),
            system: None,
            progress: true,
        }
    }
}

/// Why the backend could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Files(#[from] crate::vlm::FilesError),
    #[error(transparent)]
    Config(#[from] crate::vlm::ConfigError),
    #[error(transparent)]
    Tokenizer(#[from] crate::vlm::TokenizerError),
    #[error(transparent)]
    Processor(#[from] crate::vlm::ProcessorError),
    #[error(transparent)]
    Weights(#[from] crate::vlm::WeightsError),
    #[error("loading weights from {dir}: {source}")]
    Model {
        dir: String,
        source: candle_core::Error,
    },
}

/// Everything one query produced, for printing and logging.
#[derive(Debug, Clone)]
pub struct QwenReply {
    /// The decoded reply (special tokens removed).
    pub text: String,
    pub tokens: Vec<u32>,
    pub timings: Timings,
    /// Size of the image the model saw, and of the one given.
    pub model_size: ImageSize,
    pub original_size: ImageSize,
}

/// Receives decoded reply text as it is generated.
type TextSink = Box<dyn FnMut(&str) + Send>;

/// Embodied-R1 / Qwen2.5-VL in process.
pub struct QwenPointer {
    model: Qwen25Vl,
    tokenizer: Qwen25Tokenizer,
    processor: ImageProcessor,
    options: QwenOptions,
    files: ModelFiles,
    on_text: Option<TextSink>,
    last: Option<QwenReply>,
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
        let files = ModelFiles::resolve(spec)?;
        Self::from_files(files, options)
    }

    /// Loads from already resolved files.
    pub fn from_files(files: ModelFiles, mut options: QwenOptions) -> Result<Self, LoadError> {
        let cfg = Qwen25VlConfig::from_file(&files.config)?;
        let tokenizer = Qwen25Tokenizer::from_dir(&files.dir)?;
        tokenizer.check_token_ids(&cfg.tokens)?;
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
        let processor = ImageProcessor::new(pcfg)?;

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
        let vb = reader.into_var_builder(DType::F32, &Device::Cpu);
        let model = Qwen25Vl::new(&cfg, options.quant, vb).map_err(|source| LoadError::Model {
            dir: files.dir.display().to_string(),
            source,
        })?;
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
        })
    }

    /// Streams decoded text pieces to `f` as tokens are generated (e.g. to the terminal).
    pub fn with_text_stream(mut self, f: impl FnMut(&str) + Send + 'static) -> Self {
        self.on_text = Some(Box::new(f));
        self
    }

    pub fn model_dir(&self) -> &Path {
        &self.files.dir
    }

    pub fn options(&self) -> &QwenOptions {
        &self.options
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
        let mut stream = self.tokenizer.stream_with(true);
        let mut on_text = self.on_text.take();
        let t0 = Instant::now();
        let result = generate(
            &mut self.model,
            &ids,
            &[input],
            &self.options.generation,
            &mut |id| {
                if let (Some(f), Ok(Some(piece))) = (on_text.as_mut(), stream.step(id)) {
                    f(&piece);
                }
                true
            },
        );
        if let (Some(f), Ok(Some(rest))) = (on_text.as_mut(), stream.finish()) {
            f(&rest);
        }
        self.on_text = on_text;
        let gen = result.map_err(|e| backend(&e))?;
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
