//! `pointact ask`: Embodied-R's spatial reasoning over a video (Zhao et al., 2025, arXiv
//! 2504.12680 §3; released code `EmbodiedCity/Embodied-R.code` at `174ae99`).
//!
//! The stages, each reported to the caller as it ends ([`Stage`]):
//! 1. **Sampling**: the video brought to one frame per second (`camera::keyframes::sample_indices`,
//!    the released `downsample_video`).
//! 2. **Key frames**: ORB matching and homography overlap against the last key frame
//!    (`camera::keyframes::select_keyframes`, the released `extract_keyframes` with 4 to 32
//!    frames kept).
//! 3. **Perception**: a vision-language model describes each key frame in order — the first
//!    alone, every later one beside the previous key frame ("what changed") — with the released
//!    prompts ([`prompts`]). The paper used Qwen2.5-VL-72B-Instruct behind a server; any
//!    [`Describer`] does: our in-process Qwen2.5-VL (`QwenPointer`) or an OpenAI-compatible server
//!    (`OpenAiPointer`).
//! 4. **Reasoning**: a language model gets the question and the descriptions in the released
//!    template, under the GRPO system prompt, and answers `<think>…</think><answer>…</answer>`.
//!    Any text model behind one reply call does ([`ReferenceModel`], the trait the consistency
//!    reward's reference model uses): our decoder (a Qwen2.5 text checkpoint such as
//!    Qwen2.5-3B-Instruct, or a Qwen2.5-VL checkpoint asked without an image, as the released
//!    training did) or a server.
//!
//! A reply without both tags is an error ([`AskError::NoFormat`]) that carries the reply, never a
//! guessed answer.

pub mod eval;
pub mod frames;
pub(crate) mod prompts;

use image::RgbImage;

use crate::camera::keyframes::{
    sample_indices, select_keyframes, KeyframeError, KeyframeOptions, Keyframes,
};
use crate::pointing::openai::OpenAiPointer;
use crate::pointing::qwen::QwenPointer;
use crate::train::consistency::{ReferenceModel, ANSWER_TAG, THINK_TAG};
pub use frames::Video;
pub use prompts::Description;

/// A vision-language model that describes images (the perception stage).
pub trait Describer {
    /// Free text about `images` (in order) asked with `prompt`, at most `max_tokens` tokens.
    fn describe(
        &mut self,
        images: &[&RgbImage],
        prompt: &str,
        max_tokens: usize,
    ) -> Result<String, String>;
}

impl Describer for QwenPointer {
    fn describe(
        &mut self,
        images: &[&RgbImage],
        prompt: &str,
        max_tokens: usize,
    ) -> Result<String, String> {
        QwenPointer::describe(self, images, prompt, max_tokens)
            .map(|r| r.text)
            .map_err(|e| e.to_string())
    }
}

impl Describer for OpenAiPointer {
    /// At temperature 0: the released perception requests leave the server's default, which
    /// for a description nobody samples from is the least surprising choice.
    fn describe(
        &mut self,
        images: &[&RgbImage],
        prompt: &str,
        max_tokens: usize,
    ) -> Result<String, String> {
        self.chat_images(images, prompt, max_tokens, 0.0)
            .map_err(|e| e.to_string())
    }
}

/// How `ask` runs.
#[derive(Debug, Clone)]
pub struct AskOptions {
    /// Key-frame selection (the released threshold 0.5, 4 to 32 frames, ORB defaults).
    pub keyframes: KeyframeOptions,
    /// Most tokens of one key frame's description.
    pub description_tokens: usize,
    /// Most tokens of the reasoning model's reply.
    pub reasoning_tokens: usize,
    /// The reasoning model's sampling temperature (≤ 0: greedy).
    pub temperature: f64,
}

impl Default for AskOptions {
    fn default() -> Self {
        AskOptions {
            keyframes: KeyframeOptions::default(),
            description_tokens: 512,
            reasoning_tokens: 1024,
            temperature: 0.0,
        }
    }
}

/// A stage's result, as it ends.
#[derive(Debug)]
pub enum Stage<'a> {
    /// The 1 fps sampling: `kept` of `total` frames (indices into the video).
    Sampled {
        /// Frames kept, indices into the video.
        kept: &'a [usize],
        /// Frames in the video.
        total: usize,
    },
    /// Key frames chosen (indices into the video) and how (indices into the sampled frames).
    Keyframes {
        /// Key frames, indices into the video.
        frames: &'a [usize],
        /// The extractor's report on the sampled frames.
        report: &'a Keyframes,
    },
    /// One key frame described.
    Described {
        /// Its position among the key frames.
        k: usize,
        /// Its index in the video.
        frame: usize,
        /// Its time in the video (s).
        stamp_s: f64,
        /// The image.
        image: &'a RgbImage,
        /// The description, split into action and view.
        description: &'a Description,
        /// The model's words as they came.
        raw: &'a str,
    },
    /// The reasoning model's reply, as it came.
    Reasoned {
        /// The user message it was asked.
        prompt: &'a str,
        /// Its reply.
        reply: &'a str,
    },
}

/// What `ask` found.
#[derive(Debug, Clone)]
pub struct AskReport {
    /// Key frames, indices into the video.
    pub keyframes: Vec<usize>,
    /// Each key frame's description, in order.
    pub descriptions: Vec<Description>,
    /// The reasoning model's user message.
    pub prompt: String,
    /// Its reply, whole.
    pub reply: String,
    /// The reply's think block, stripped.
    pub think: String,
    /// The reply's answer block, stripped.
    pub answer: String,
}

/// Why `ask` gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum AskError {
    /// The video has no frame.
    #[error("no frames: a video of at least two frames is needed")]
    NoFrames,
    /// One frame is a picture, not a video.
    #[error(
        "only one frame: Embodied-R reasons over a moving camera's video (two frames or more); \
         for one image use `pointact point`"
    )]
    OneFrame,
    /// The key-frame extractor refused the frames.
    #[error("key frames: {0}")]
    Keyframes(#[from] KeyframeError),
    /// The vision model failed on a key frame.
    #[error("describing key frame {k} (video frame {frame}): {reason}")]
    Describe {
        /// Its position among the key frames.
        k: usize,
        /// Its index in the video.
        frame: usize,
        /// What the model said.
        reason: String,
    },
    /// The reasoning model failed.
    #[error("reasoning: {0}")]
    Reason(String),
    /// The reply lacks `<think>…</think>` or `<answer>…</answer>`.
    #[error(
        "the reasoning model's reply is not in the <think>…</think><answer>…</answer> format: {}",
        excerpt(.reply)
    )]
    NoFormat {
        /// The reply, whole.
        reply: String,
    },
}

/// The first 300 characters of a reply, for messages.
fn excerpt(text: &str) -> String {
    let mut out: String = text.chars().take(300).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    format!("{out:?}")
}

/// The think and the answer of a reply: the first `<think>…</think>`, and the first
/// `<answer>…</answer>` after it, both stripped. `None` when either is missing.
pub(crate) fn parse_reply(reply: &str) -> Option<(String, String)> {
    let think = THINK_TAG.captures(reply)?;
    let end = think.get(0)?.end();
    let answer = ANSWER_TAG.captures(&reply[end..])?;
    Some((
        think.get(1)?.as_str().trim().to_owned(),
        answer.get(1)?.as_str().trim().to_owned(),
    ))
}

/// A video's key frames and how they were chosen.
#[derive(Debug, Clone)]
pub struct VideoKeyframes {
    /// The frames the 1 fps sampling kept, indices into the video.
    pub sampled: Vec<usize>,
    /// The extractor's report on the sampled frames (its indices are into `sampled`).
    pub report: Keyframes,
    /// The key frames, indices into the video.
    pub frames: Vec<usize>,
}

/// Stages 1 and 2: the video brought to 1 fps, then the key frames among those frames.
pub fn video_keyframes(
    video: &Video,
    options: &KeyframeOptions,
) -> Result<VideoKeyframes, KeyframeError> {
    let sampled = sample_indices(video.frames.len(), video.fps);
    let frames: Vec<RgbImage> = sampled.iter().map(|&i| video.frames[i].clone()).collect();
    let report = select_keyframes(&frames, options)?;
    let frames = report.selected.iter().map(|&i| sampled[i]).collect();
    Ok(VideoKeyframes {
        sampled,
        report,
        frames,
    })
}

/// Runs the four stages on `video` for `question`; `on_stage` sees each as it ends.
pub fn ask(
    video: &Video,
    question: &str,
    describer: &mut dyn Describer,
    reasoner: &mut dyn ReferenceModel,
    options: &AskOptions,
    on_stage: &mut dyn FnMut(Stage<'_>),
) -> Result<AskReport, AskError> {
    match video.frames.len() {
        0 => return Err(AskError::NoFrames),
        1 => return Err(AskError::OneFrame),
        _ => {}
    }
    let VideoKeyframes {
        sampled,
        report,
        frames: keyframes,
    } = video_keyframes(video, &options.keyframes)?;
    on_stage(Stage::Sampled {
        kept: &sampled,
        total: video.frames.len(),
    });
    on_stage(Stage::Keyframes {
        frames: &keyframes,
        report: &report,
    });

    let mut descriptions = Vec::with_capacity(keyframes.len());
    for (k, &frame) in keyframes.iter().enumerate() {
        let image = &video.frames[frame];
        let images: Vec<&RgbImage> = match k {
            0 => vec![image],
            _ => vec![&video.frames[keyframes[k - 1]], image],
        };
        let prompt = prompts::perception_prompt(k, question);
        let raw = describer
            .describe(&images, &prompt, options.description_tokens)
            .map_err(|reason| AskError::Describe { k, frame, reason })?;
        let description = prompts::split_description(k, &raw);
        on_stage(Stage::Described {
            k,
            frame,
            stamp_s: video.stamps_s.get(frame).copied().unwrap_or(frame as f64),
            image,
            description: &description,
            raw: &raw,
        });
        descriptions.push(description);
    }

    let prompt = prompts::reasoning_prompt(&descriptions, question);
    let reply = reasoner
        .reply(
            prompts::REASONING_SYSTEM,
            &prompt,
            options.reasoning_tokens,
            options.temperature,
        )
        .map_err(|e| AskError::Reason(e.to_string()))?;
    on_stage(Stage::Reasoned {
        prompt: &prompt,
        reply: &reply,
    });
    let Some((think, answer)) = parse_reply(&reply) else {
        return Err(AskError::NoFormat { reply });
    };
    Ok(AskReport {
        keyframes,
        descriptions,
        prompt,
        reply,
        think,
        answer,
    })
}
