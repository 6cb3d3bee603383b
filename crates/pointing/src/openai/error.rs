//! Why a remote pointing request failed, with what to check; the server's full answers kept.

use std::borrow::Cow;
use std::time::Duration;

use crate::MappingError;

/// Where `vllm serve` listens by default.
pub const DEFAULT_ENDPOINT: &str = "http://localhost:8000/v1";
/// The Hugging Face id vLLM/SGLang use as the served model name unless told otherwise.
pub const DEFAULT_MODEL: &str = "IffYuan/Embodied-R1-3B-v1";
/// How much of a server's body an error message shows; the error value keeps all of it.
const BODY_EXCERPT_CHARS: usize = 1000;

/// Largest reply body read (4 MiB). A chat completion of a pointing answer is a few kilobytes even
/// at `max_tokens` 1024; reading more only delays the error (ureq's own 10 MB cap reports itself as
/// an I/O error, which read as "is the server running?").
pub const MAX_REPLY_BYTES: u64 = 4 << 20;

/// Why a remote pointing request failed. Messages name the URL and say what to check; the fields
/// keep everything (full server bodies included) for logs and tests.
#[derive(Debug, thiserror::Error)]
pub enum OpenAiError {
    /// The endpoint is not an `http://` or `https://` URL; caught before any request.
    #[error("invalid endpoint {endpoint:?}: expected a base URL like {DEFAULT_ENDPOINT}")]
    InvalidEndpoint {
        /// What was configured.
        endpoint: String,
    },
    /// The frame cannot be resized the way Qwen2.5-VL's processor would (e.g. smaller than 28 px).
    #[error("the frame cannot be sent to Qwen2.5-VL: {0}")]
    Image(#[from] MappingError),
    /// PNG encoding of the frame failed.
    #[error("could not encode the frame as PNG: {0}")]
    Encode(String),
    /// The reply body was larger than [`MAX_REPLY_BYTES`]: no pointing answer is that long, so it is
    /// a wrong endpoint or a runaway server; not retried.
    #[error(
        "{url} sent a reply larger than {limit} bytes: not a chat completion of a pointing answer \
         (a wrong endpoint, or a server that does not stop); not retried"
    )]
    TooLarge {
        /// The chat-completions URL.
        url: String,
        /// The limit that was passed ([`MAX_REPLY_BYTES`]).
        limit: u64,
    },
    /// No HTTP answer: connection refused or timed out, reset, DNS failure, … on the last attempt.
    #[error(
        "could not reach {url} after {attempts} attempt(s): {reason} — is the server running? \
         (e.g. `vllm serve {DEFAULT_MODEL}`)"
    )]
    Unreachable {
        /// The chat-completions URL.
        url: String,
        /// How many attempts were made.
        attempts: u32,
        /// The last transport error.
        reason: String,
    },
    /// The last attempt was connected but ran past [`OpenAiConfig::timeout`](super::OpenAiConfig::timeout). (A connect timeout is
    /// [`OpenAiError::Unreachable`].)
    #[error(
        "{url} gave no answer within {timeout:?} on the last of {attempts} attempt(s): {reason} — the \
         server may be overloaded or still loading the model; raise the timeout if replies are just \
         slow"
    )]
    Timeout {
        /// The chat-completions URL.
        url: String,
        /// How many attempts were made.
        attempts: u32,
        /// The per-attempt limit.
        timeout: Duration,
        /// What timed out (reading the response, writing the request).
        reason: String,
    },
    /// The question's [`OpenAiConfig::deadline`](super::OpenAiConfig::deadline) ran out: an attempt was cut off by it, or too little
    /// time was left to start another.
    #[error(
        "{url} gave no usable answer within the deadline of {deadline:?} for one question, after \
         {attempts} attempt(s) (last: {last}) — raise the deadline (--deadline-s) if the server is \
         just slow, or check that it is not stuck"
    )]
    Deadline {
        /// The chat-completions URL.
        url: String,
        /// The total limit ([`OpenAiConfig::deadline`](super::OpenAiConfig::deadline)).
        deadline: Duration,
        /// How many attempts were made.
        attempts: u32,
        /// What the last attempt ran into.
        last: String,
    },
    /// The server answered with an error status (after retries, for 429 and 5xx).
    #[error(
        "{url} answered HTTP {status} after {attempts} attempt(s){}: {}",
        status_hint(*status),
        excerpt(body)
    )]
    Status {
        /// The chat-completions URL.
        url: String,
        /// The HTTP status code.
        status: u16,
        /// The server's body, in full (vLLM puts the reason in `error.message`).
        body: String,
        /// How many attempts were made.
        attempts: u32,
    },
    /// A 2xx answer that is not a chat completion with text content.
    #[error(
        "{url} answered with something that is not a chat completion ({reason}): {}",
        excerpt(body)
    )]
    BadResponse {
        /// The chat-completions URL.
        url: String,
        /// What was wrong with it.
        reason: String,
        /// The raw body, in full.
        body: String,
    },
}

/// What to check for the common non-retried statuses.
fn status_hint(status: u16) -> &'static str {
    match status {
        401 | 403 => " — check the API key (`OPENAI_API_KEY` or the server's --api-key)",
        404 => " — check that the endpoint ends in /v1 and the model name matches the server's",
        413 => " — the image is too large for the server; send a smaller frame",
        429 => " — the server is rate limiting; retry later",
        500..=599 => " — server error",
        _ => "",
    }
}

/// The first [`BODY_EXCERPT_CHARS`] characters of `body`, marked when cut.
pub(super) fn excerpt(body: &str) -> Cow<'_, str> {
    match body.char_indices().nth(BODY_EXCERPT_CHARS) {
        None => Cow::Borrowed(body),
        Some((cut, _)) => Cow::Owned(format!(
            "{}… ({} more bytes)",
            &body[..cut],
            body.len() - cut
        )),
    }
}
