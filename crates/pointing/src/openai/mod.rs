//! Remote backend: Embodied-R1 behind any OpenAI-compatible chat-completions server (vLLM, SGLang).
//!
//! Why a remote backend at all: the 3B model wants a GPU, and the robot's computer rarely has one.
//! A `vllm serve IffYuan/Embodied-R1-3B-v1` on another machine answers in well under a second.
//!
//! The request mirrors Embodied-R1's own inference example: one user message, the image first and
//! the ability's prompt second, greedy decoding with `repetition_penalty` 1.05. The frame goes as a
//! lossless PNG data URL so the server resizes exactly the pixels the camera saw.
//!
//! Coordinates: the server's processor resizes the image with `smart_resize` before the model sees
//! it, and the model answers in pixels of *that* image. We cannot ask the server which size it used,
//! so [`OpenAiConfig::min_pixels`]/[`OpenAiConfig::max_pixels`] must equal the server's processor
//! limits: vLLM and SGLang apply the checkpoint's `preprocessor_config.json` (the defaults here)
//! unless started with overrides such as `--mm-processor-kwargs '{"max_pixels": …}'`; if you pass
//! those, pass the same numbers here, or every point is silently scaled wrong.
//!
//! Retries: connection failures, timeouts, HTTP 429 and 5xx are transient on a shared inference
//! server (model still loading, queue full, worker restarted), so they are retried with exponential
//! backoff. Other 4xx mean the request itself is wrong (bad model name, prompt too long, bad key) and
//! retrying would only repeat the failure, so they are reported at once with the server's message.
//!
//! Deadline: attempts and backoff waits together never run past [`OpenAiConfig::deadline`] (180 s by
//! default; four attempts of 120 s plus backoff used to take 487 s before the error). Each attempt
//! gets the smaller of its own timeout and the time left, which also cuts off a server that trickles
//! bytes forever (ureq's per-request timeout covers the whole exchange, not only silences), and no
//! retry starts when too little time is left for it to finish.

use std::io;
use std::time::{Duration, Instant};

use base64::Engine as _;
use image::codecs::png::{CompressionType, FilterType, PngEncoder};
use image::{ExtendedColorType, ImageEncoder, RgbImage};
use serde_json::{json, Value};

mod error;
use error::excerpt;
pub(crate) use error::DEFAULT_MODEL;
pub(crate) use error::MAX_REPLY_BYTES;
pub use error::{OpenAiError, DEFAULT_ENDPOINT};

use super::pointer::{Pointer, PointerError, Pointing};
use super::{Ability, ImageSize, ModelImageMap};
use pointact_core::camera::Frame;
use pointact_vlm::hub::{is_timeout, transport_io, transport_reason};
use pointact_vlm::{DEFAULT_MIN_PIXELS, PRETRAINED_MAX_PIXELS};

/// The environment variable an API key is taken from when none is given (the OpenAI convention;
/// vLLM's `--api-key` checks the same bearer token).
pub(crate) const API_KEY_ENV: &str = "OPENAI_API_KEY";
/// How to reach the server and how to decode. Build with [`OpenAiConfig::new`] and override fields.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenAiConfig {
    /// Base URL of the OpenAI API, e.g. `http://gpu-box:8000/v1`; requests go to
    /// `{endpoint}/chat/completions`.
    pub endpoint: String,
    /// The served model name (vLLM: the `serve` argument or `--served-model-name`).
    pub model: String,
    /// Sent as `Authorization: Bearer …` when set.
    pub api_key: Option<String>,
    /// Limit for one whole attempt (connect, upload, generation, download). Generation with the
    /// think block can take a while on a busy server, hence the generous default of 120 s.
    pub timeout: Duration,
    /// Limit for establishing the TCP connection; short (5 s) so a dead host fails fast.
    pub connect_timeout: Duration,
    /// Limit for one question: every attempt and every backoff wait together (default 180 s, so a
    /// server that never finishes costs 3 minutes, not the 4 × 120 s of the attempts).
    pub deadline: Duration,
    /// Extra attempts after the first for transient failures (default 3, i.e. up to 4 attempts).
    pub retries: u32,
    /// Wait before the first retry; doubles on each further retry (0.5 s, 1 s, 2 s, …).
    pub backoff_base: Duration,
    /// Token budget for the reply (reasoning and answer); 1024 leaves room for a long think block.
    pub max_tokens: u32,
    /// 0 = greedy, as Embodied-R1's example decodes.
    pub temperature: f64,
    /// vLLM/SGLang extra sampling field; Embodied-R1's example uses 1.05.
    pub repetition_penalty: f64,
    /// The server processor's `min_pixels` (see the module docs: must match the server).
    pub min_pixels: u64,
    /// The server processor's `max_pixels` (see the module docs: must match the server).
    pub max_pixels: u64,
}

impl OpenAiConfig {
    /// Defaults for everything but the endpoint and model; the API key comes from
    /// `OPENAI_API_KEY` when that is set and not empty.
    pub fn new(endpoint: impl Into<String>, model: impl Into<String>) -> Self {
        OpenAiConfig {
            endpoint: endpoint.into(),
            model: model.into(),
            api_key: std::env::var(API_KEY_ENV).ok().filter(|k| !k.is_empty()),
            timeout: Duration::from_secs(120),
            connect_timeout: Duration::from_secs(5),
            deadline: Duration::from_secs(180),
            retries: 3,
            backoff_base: Duration::from_millis(500),
            max_tokens: 1024,
            temperature: 0.0,
            repetition_penalty: 1.05,
            min_pixels: DEFAULT_MIN_PIXELS,
            max_pixels: PRETRAINED_MAX_PIXELS,
        }
    }

    /// The URL requests are POSTed to. A trailing `/` on the endpoint is tolerated.
    pub(crate) fn chat_url(&self) -> String {
        format!("{}/chat/completions", self.endpoint.trim_end_matches('/'))
    }

    /// The wait before retry number `retry` (1-based): `backoff_base · 2^(retry-1)`.
    pub(crate) fn backoff(&self, retry: u32) -> Duration {
        let doublings = retry.saturating_sub(1).min(16);
        self.backoff_base.saturating_mul(1 << doublings)
    }
}

impl Default for OpenAiConfig {
    fn default() -> Self {
        OpenAiConfig::new(DEFAULT_ENDPOINT, DEFAULT_MODEL)
    }
}

/// Embodied-R1 through an OpenAI-compatible server. Holds one HTTP agent so the connection is
/// reused across calls.
pub struct OpenAiPointer {
    config: OpenAiConfig,
    url: String,
    agent: ureq::Agent,
}

impl std::fmt::Debug for OpenAiPointer {
    /// Leaves the API key out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiPointer")
            .field("url", &self.url)
            .field("model", &self.config.model)
            .field("api_key", &self.config.api_key.as_ref().map(|_| "…"))
            .finish()
    }
}

impl OpenAiPointer {
    /// Checks the endpoint's form (no request is made: the server may legitimately start later).
    pub fn new(config: OpenAiConfig) -> Result<Self, OpenAiError> {
        let lower = config.endpoint.to_ascii_lowercase();
        if !(lower.starts_with("http://") || lower.starts_with("https://")) {
            return Err(OpenAiError::InvalidEndpoint {
                endpoint: config.endpoint.clone(),
            });
        }
        // The overall limit is set per attempt (`post_once`), from what the deadline leaves.
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(config.connect_timeout)
            .build();
        Ok(OpenAiPointer {
            url: config.chat_url(),
            config,
            agent,
        })
    }

    /// The JSON body for one request: image first, then the prompt (Embodied-R1's order).
    pub(crate) fn request_body(
        &self,
        image: &RgbImage,
        ability: Ability,
        instruction: &str,
    ) -> Result<Value, OpenAiError> {
        let data_url = data_url(image)?;
        Ok(json!({
            "model": self.config.model,
            "messages": [{
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": data_url}},
                    {"type": "text", "text": ability.prompt(instruction)},
                ],
            }],
            "max_tokens": self.config.max_tokens,
            "temperature": self.config.temperature,
            "repetition_penalty": self.config.repetition_penalty,
        }))
    }

    /// POSTs `body`, retrying transient failures within the deadline; returns the 2xx body.
    fn post_with_retries(&self, body: &str) -> Result<String, OpenAiError> {
        let attempts = self.config.retries.saturating_add(1);
        let started = Instant::now();
        let deadline = self.config.deadline;
        let left = || deadline.saturating_sub(started.elapsed());
        let out_of_time = |attempt: u32, failure: &Failure| OpenAiError::Deadline {
            url: self.url.clone(),
            deadline,
            attempts: attempt,
            last: failure.summary(),
        };
        // Less than this left, a retry could not finish (an Embodied-R1 answer takes about a
        // second), so none is started.
        let least = self.config.timeout.min(MIN_ATTEMPT);
        let mut attempt = 1;
        loop {
            let limit = self.config.timeout.min(left());
            let failure = match self.post_once(body, limit) {
                Ok(text) => {
                    tracing::debug!(url = %self.url, attempt, elapsed = ?started.elapsed(), "chat completion received");
                    return Ok(text);
                }
                Err(failure) => failure,
            };
            if !failure.retryable() {
                return Err(failure.into_error(&self.url, attempt, limit));
            }
            // The deadline, not the attempt's own timeout, cut this attempt off.
            if matches!(failure, Failure::Timeout(_)) && limit < self.config.timeout {
                return Err(out_of_time(attempt, &failure));
            }
            if attempt >= attempts {
                return Err(failure.into_error(&self.url, attempt, limit));
            }
            let wait = self.config.backoff(attempt);
            if left().saturating_sub(wait) < least {
                return Err(out_of_time(attempt, &failure));
            }
            tracing::warn!(url = %self.url, attempt, of = attempts, ?wait, "pointing request failed, retrying: {}", failure.summary());
            std::thread::sleep(wait);
            attempt += 1;
        }
    }

    /// One attempt, limited to `limit` in all (connect, upload, generation, download).
    fn post_once(&self, body: &str, limit: Duration) -> Result<String, Failure> {
        // The agent's connect timeout would outlast a shorter limit (ureq applies it instead of the
        // request's); an agent without one connects within the request's limit.
        let short;
        let agent = if limit < self.config.connect_timeout {
            short = ureq::AgentBuilder::new().build();
            &short
        } else {
            &self.agent
        };
        let mut request = agent
            .post(&self.url)
            .timeout(limit)
            .set("Content-Type", "application/json");
        if let Some(key) = &self.config.api_key {
            request = request.set("Authorization", &format!("Bearer {key}"));
        }
        match request.send_string(body) {
            Ok(response) => read_capped(response.into_reader()),
            Err(ureq::Error::Status(status, response)) => Err(Failure::Status {
                status,
                // A body that cannot be read still leaves the status to report.
                body: response
                    .into_string()
                    .unwrap_or_else(|e| format!("<body unreadable: {e}>")),
            }),
            Err(ureq::Error::Transport(t)) => Err(Failure::from_transport(&t)),
        }
    }
}

impl Pointer for OpenAiPointer {
    fn name(&self) -> &str {
        "openai"
    }

    fn point(
        &mut self,
        frame: &Frame,
        ability: Ability,
        instruction: &str,
    ) -> Result<Pointing, PointerError> {
        self.ask(&frame.rgb, ability, instruction)
    }
}

impl OpenAiPointer {
    /// Asks about a bare image (no depth needed): what `pointact point` uses.
    pub(crate) fn ask(
        &mut self,
        image: &RgbImage,
        ability: Ability,
        instruction: &str,
    ) -> Result<Pointing, PointerError> {
        let size = ImageSize::new(image.width(), image.height());
        // Before the request: a frame the processor would reject should not cost a round trip.
        let map = ModelImageMap::for_qwen25vl(size, self.config.min_pixels, self.config.max_pixels)
            .map_err(OpenAiError::from)?;
        let body = self.request_body(image, ability, instruction)?;
        let text = self.post_with_retries(&body.to_string())?;
        parse_reply(&self.url, text, ability, map)
    }
}

impl OpenAiPointer {
    /// The JSON body of a text-only chat request: a system and a user message, no image, and only
    /// the sampling fields given (no repetition penalty: the server's default applies).
    pub(crate) fn text_request_body(
        &self,
        system: &str,
        user: &str,
        max_tokens: usize,
        temperature: f64,
    ) -> Value {
        json!({
            "model": self.config.model,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user},
            ],
            "temperature": temperature,
            "max_tokens": max_tokens,
        })
    }

    /// Asks a text-only question (e.g. the consistency reward's reference model) through the same
    /// transport as [`OpenAiPointer::ask`]: retries, deadline, size cap. Returns
    /// `choices[0].message.content` as the server sent it (no reasoning block added, no parsing).
    pub fn chat_text(
        &self,
        system: &str,
        user: &str,
        max_tokens: usize,
        temperature: f64,
    ) -> Result<String, OpenAiError> {
        let body = self.text_request_body(system, user, max_tokens, temperature);
        let text = self.post_with_retries(&body.to_string())?;
        message_content(&text).map_err(|reason| OpenAiError::BadResponse {
            url: self.url.clone(),
            reason,
            body: text,
        })
    }
}

impl OpenAiPointer {
    /// Asks about several images at once, free text: one user message holding `prompt` then the
    /// images in order (Embodied-R's perception request for a large VLM behind a server), through
    /// the same transport as [`OpenAiPointer::ask`]. Returns `choices[0].message.content` as sent.
    pub fn chat_images(
        &self,
        images: &[&RgbImage],
        prompt: &str,
        max_tokens: usize,
        temperature: f64,
    ) -> Result<String, OpenAiError> {
        let mut content = vec![json!({"type": "text", "text": prompt})];
        for image in images {
            content.push(json!({"type": "image_url", "image_url": {"url": data_url(image)?}}));
        }
        let body = json!({
            "model": self.config.model,
            "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens,
            "temperature": temperature,
        });
        let text = self.post_with_retries(&body.to_string())?;
        message_content(&text).map_err(|reason| OpenAiError::BadResponse {
            url: self.url.clone(),
            reason,
            body: text,
        })
    }
}

/// `choices[0].message.content` of a chat-completion body, as text.
fn message_content(body: &str) -> Result<String, String> {
    let value: Value =
        serde_json::from_str(body).map_err(|e| format!("the body is not JSON: {e}"))?;
    value
        .get("choices")
        .and_then(|c| c.get(0))
        .and_then(|c| c.get("message"))
        .and_then(|m| m.get("content"))
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| "no text in choices[0].message.content".to_owned())
}

/// What [`OpenAiPointer::ask`] makes of a 2xx reply `body` from `url`: the chat completion's text,
/// parsed as the answer for `ability` on an image the model saw through `map`.
///
/// Public (and hidden from the docs) only so the reader fuzz test (`tests/fuzz_readers.rs`) can
/// feed it replies without a server; callers use [`OpenAiPointer::ask`].
#[doc(hidden)]
pub fn parse_reply(
    url: &str,
    body: String,
    ability: Ability,
    map: ModelImageMap,
) -> Result<Pointing, PointerError> {
    let raw = completion_text(&body).map_err(|reason| OpenAiError::BadResponse {
        url: url.to_owned(),
        reason,
        body,
    })?;
    tracing::debug!(%ability, raw = %raw, "model reply");
    Pointing::parse(&raw, ability, map)
}

/// Lossless so the server sees the camera's exact pixels; fast compression because the image is
/// sent once and encode time is on the critical path.
/// The image as a `data:image/png;base64,…` URL, what chat-completion servers take inline.
fn data_url(image: &RgbImage) -> Result<String, OpenAiError> {
    let png = encode_png(image)?;
    Ok(format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(png)
    ))
}

fn encode_png(rgb: &RgbImage) -> Result<Vec<u8>, OpenAiError> {
    let mut png = Vec::new();
    PngEncoder::new_with_quality(&mut png, CompressionType::Fast, FilterType::Adaptive)
        .write_image(
            rgb.as_raw(),
            rgb.width(),
            rgb.height(),
            ExtendedColorType::Rgb8,
        )
        .map_err(|e| OpenAiError::Encode(e.to_string()))?;
    Ok(png)
}

/// The model's text from a chat-completion body: `choices[0].message.content`.
///
/// A server started with a reasoning parser (vLLM `--reasoning-parser`) moves the think block into
/// `reasoning_content` (or `reasoning`); it is put back as `<think>…</think>` so the parser still
/// finds the reasoning and only looks for the answer after it.
fn completion_text(body: &str) -> Result<String, String> {
    let value: Value =
        serde_json::from_str(body).map_err(|e| format!("the body is not JSON: {e}"))?;
    let choice = value
        .get("choices")
        .and_then(|c| c.get(0))
        .ok_or("no choices[0]")?;
    let message = choice.get("message").ok_or("no choices[0].message")?;
    let content = message
        .get("content")
        .and_then(Value::as_str)
        .ok_or("no text in choices[0].message.content")?;
    if choice.get("finish_reason").and_then(Value::as_str) == Some("length") {
        tracing::warn!("the reply hit max_tokens; the answer may be cut off (raise max_tokens)");
    }
    let reasoning = ["reasoning_content", "reasoning"]
        .iter()
        .find_map(|k| message.get(*k).and_then(Value::as_str))
        .filter(|r| !r.trim().is_empty());
    Ok(match reasoning {
        Some(r) if !content.to_ascii_lowercase().contains("think>") => {
            format!("<think>{r}</think>{content}")
        }
        _ => content.to_owned(),
    })
}

/// One attempt's failure, before deciding whether to retry.
#[derive(Debug)]
enum Failure {
    Status {
        status: u16,
        body: String,
    },
    /// The body passed [`MAX_REPLY_BYTES`].
    TooLarge,
    Timeout(String),
    /// No usable answer at the transport level; `retry` when it may be transient.
    Transport {
        reason: String,
        retry: bool,
    },
}

impl Failure {
    fn retryable(&self) -> bool {
        match self {
            Failure::Status { status, .. } => *status == 429 || (500..=599).contains(status),
            Failure::Timeout(_) => true,
            Failure::TooLarge => false,
            Failure::Transport { retry, .. } => *retry,
        }
    }

    /// One line for the retry log (a status body can be a whole HTML page).
    fn summary(&self) -> String {
        match self {
            Failure::Status { status, body } => format!("HTTP {status}: {}", excerpt(body)),
            Failure::Timeout(reason) => format!("timed out: {reason}"),
            Failure::TooLarge => format!("reply larger than {MAX_REPLY_BYTES} bytes"),
            Failure::Transport { reason, .. } => reason.clone(),
        }
    }

    fn from_io(e: io::Error) -> Failure {
        if is_timeout(&e) {
            Failure::Timeout(e.to_string())
        } else {
            Failure::Transport {
                reason: e.to_string(),
                retry: true,
            }
        }
    }

    fn from_transport(t: &ureq::Transport) -> Failure {
        use ureq::ErrorKind as K;
        let io = transport_io(t);
        // A connect timeout means the host is not answering at all: "unreachable" says more than
        // "slow", so only timeouts after connecting count as timeouts.
        if t.kind() != K::ConnectionFailed && io.is_some_and(is_timeout) {
            return Failure::Timeout(io.map_or_else(String::new, ToString::to_string));
        }
        // Configuration mistakes (bad URL, proxy settings, https-only) fail the same way every time.
        let retry = matches!(
            t.kind(),
            K::ConnectionFailed | K::Io | K::Dns | K::ProxyConnect | K::BadStatus | K::BadHeader
        );
        Failure::Transport {
            reason: transport_reason(t),
            retry,
        }
    }

    fn into_error(self, url: &str, attempts: u32, timeout: Duration) -> OpenAiError {
        let url = url.to_owned();
        match self {
            Failure::Status { status, body } => OpenAiError::Status {
                url,
                status,
                body,
                attempts,
            },
            Failure::Timeout(reason) => OpenAiError::Timeout {
                url,
                attempts,
                timeout,
                reason,
            },
            Failure::TooLarge => OpenAiError::TooLarge {
                url,
                limit: MAX_REPLY_BYTES,
            },
            Failure::Transport { reason, .. } => OpenAiError::Unreachable {
                url,
                attempts,
                reason,
            },
        }
    }
}

/// The shortest attempt worth starting (see `post_with_retries`).
const MIN_ATTEMPT: Duration = Duration::from_secs(1);

/// The body as text, at most [`MAX_REPLY_BYTES`].
fn read_capped(reader: impl io::Read) -> Result<String, Failure> {
    use io::Read;
    let mut bytes = Vec::new();
    reader
        .take(MAX_REPLY_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(Failure::from_io)?;
    if bytes.len() as u64 > MAX_REPLY_BYTES {
        return Err(Failure::TooLarge);
    }
    String::from_utf8(bytes).map_err(|e| Failure::Transport {
        reason: format!("the reply is not UTF-8 text: {e}"),
        retry: false,
    })
}
