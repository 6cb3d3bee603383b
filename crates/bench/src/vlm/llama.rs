//! llama.cpp as the quantized anchor of `pointact bench vlm`: node-llama-cpp 3.21.1 (its
//! prebuilt CPU binaries, `benches/llama_peer/`) on the GGUF of the same weights ([`super::gguf`]),
//! fed the same prompt token ids, the same number of new tokens and the same thread count as
//! our run. Only the text decoder is compared: node-llama-cpp has no multimodal binding, and the
//! ids of the image's pad tokens are simply embedded as tokens — the same amount of work per
//! token for the decoder.
//!
//! Why through node: node-llama-cpp ships llama.cpp prebuilt for every x86-64 tier (picked at run
//! time, AVX-512 included) from the npm registry, so nothing is compiled here (no cmake, no
//! compiler flags of ours that could make the anchor slower than it is).
//!
//! Everything that can go wrong here (no node, no network for the first install, a load error)
//! becomes the column's reason, never a failed benchmark.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

/// The peer's files, embedded so the binary works from any folder.
const SETUP: &str = include_str!("../../../../benches/llama_peer/setup.sh");
const PACKAGE: &str = include_str!("../../../../benches/llama_peer/package.json");
const BENCH: &str = include_str!("../../../../benches/llama_peer/bench.mjs");
/// The install folder's environment override (also read by `setup.sh` and the tests).
pub const PEER_ENV: &str = "POINTACT_LLAMA_PEER";
/// New tokens of the untimed warm-up, as ours.
const WARMUP_TOKENS: usize = super::inputs::WARMUP_NEW_TOKENS;

/// What the peer measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LlamaMeasured {
    /// Model load and context creation, seconds.
    pub load_s: f64,
    pub prompt_tokens: usize,
    /// Prompt length / time to the first new token.
    pub prompt_tok_s: f64,
    /// Tokens generated after the first.
    pub decode_steps: usize,
    pub decode_tok_s: f64,
    /// Generated ids (greedy).
    pub tokens: Vec<u32>,
    /// node-llama-cpp and llama.cpp versions, threads, attention and KV settings.
    pub version: String,
}

/// The request `bench.mjs` reads.
#[derive(Debug, Clone, Serialize)]
struct Request<'a> {
    model: &'a Path,
    threads: usize,
    prompt: &'a [u32],
    decode_tokens: usize,
    warmup_tokens: usize,
    /// f32 KV cache and no flash attention (its CPU kernel rounds K and V to f16): the parity
    /// test. Off for timing: llama.cpp's defaults (flash attention "auto", f16 KV cache).
    exact: bool,
    /// > 0: print the top-k next-token probabilities after the prompt instead of timing.
    probs_top_k: usize,
}

/// `$POINTACT_LLAMA_PEER`, else `~/.cache/pointact/llama-peer` (where `setup.sh` installs).
pub(crate) fn default_peer_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os(PEER_ENV) {
        return PathBuf::from(dir);
    }
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
        .join(".cache/pointact/llama-peer")
}

/// Why there is no peer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum SetupError {
    /// node or npm is missing or too old (the column is skipped).
    Missing(String),
    /// The install failed (the column failed).
    Failed(String),
}

/// Installs the peer when needed (`setup.sh`: the pinned packages into [`default_peer_dir`], a
/// no-op when present) and returns its folder. `work` receives the script and `package.json`.
pub(crate) fn setup(work: &Path) -> Result<PathBuf, SetupError> {
    let failed = |e: String| SetupError::Failed(e);
    let dir = work.join("llama_peer");
    std::fs::create_dir_all(&dir)
        .map_err(|e| failed(format!("creating {}: {e}", dir.display())))?;
    for (name, text) in [("setup.sh", SETUP), ("package.json", PACKAGE)] {
        std::fs::write(dir.join(name), text).map_err(|e| failed(format!("writing {name}: {e}")))?;
    }
    let out = Command::new("bash")
        .arg(dir.join("setup.sh"))
        .env(PEER_ENV, default_peer_dir())
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| {
            failed(format!(
                "cannot run bash for benches/llama_peer/setup.sh: {e}"
            ))
        })?;
    let err = String::from_utf8_lossy(&out.stderr);
    eprint!("{err}");
    if !out.status.success() {
        let last = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        // setup.sh exits 3 when node or npm is missing or older than 20.
        return Err(if out.status.code() == Some(3) {
            SetupError::Missing(last.to_owned())
        } else {
            failed(format!("benches/llama_peer/setup.sh failed: {last}"))
        });
    }
    Ok(default_peer_dir())
}

/// Ids that exist in a vocabulary of `n_vocab` (ours are within the GGUF's, which is the
/// checkpoint's; wrapped otherwise — speed does not depend on which ids).
pub fn clamp_ids(ids: &[u32], n_vocab: usize) -> Vec<u32> {
    let n = n_vocab.max(1) as u32;
    ids.iter().map(|&i| if i < n { i } else { i % n }).collect()
}

/// Runs `bench.mjs` (copied into `peer`, whose `node_modules` it imports from) on `req`.
/// Calls may overlap (tests run in parallel): each gets its own request file, and the script is
/// replaced by a rename, so a starting node never reads it half written.
fn call(peer: &Path, req: &Request<'_>) -> Result<serde_json::Value, String> {
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let unique = format!("{}-{n}", std::process::id());
    let write = |path: &Path, text: &str| {
        std::fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))
    };
    let script = peer.join("bench.mjs");
    let fresh = peer.join(format!("bench.mjs.{unique}"));
    write(&fresh, BENCH)?;
    std::fs::rename(&fresh, &script).map_err(|e| format!("writing {}: {e}", script.display()))?;
    let request = peer.join(format!("request-{unique}.json"));
    write(
        &request,
        &serde_json::to_string(req).map_err(|e| e.to_string())?,
    )?;
    let out = Command::new("node")
        .arg(&script)
        .arg(&request)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output();
    let _ = std::fs::remove_file(&request); // best effort
    let out = out.map_err(|e| format!("cannot run node ({e}); install Node.js >= 20"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().unwrap_or("");
    let value: serde_json::Value = serde_json::from_str(line).map_err(|_| {
        format!(
            "llama.cpp peer failed ({}); its messages are above{}",
            out.status,
            if line.is_empty() {
                String::new()
            } else {
                format!(": {line}")
            }
        )
    })?;
    if let Some(err) = value.get("error").and_then(|e| e.as_str()) {
        return Err(format!("llama.cpp peer: {err}"));
    }
    Ok(value)
}

/// Measures llama.cpp on `gguf`: `prompt` evaluated in one batch, then greedy decoding until
/// `new_tokens` tokens exist (the first from the prompt's logits), `threads` threads, after an
/// untimed warm-up like ours.
pub fn run(
    peer: &Path,
    gguf: &Path,
    prompt: &[u32],
    new_tokens: usize,
    threads: usize,
) -> Result<LlamaMeasured, String> {
    let v = call(
        peer,
        &Request {
            model: gguf,
            threads,
            prompt,
            decode_tokens: new_tokens,
            warmup_tokens: WARMUP_TOKENS,
            exact: false,
            probs_top_k: 0,
        },
    )?;
    serde_json::from_value(v).map_err(|e| format!("unexpected llama.cpp peer output: {e}"))
}

/// llama.cpp's `top_k` most likely next tokens after `prompt` (softmax of all logits; f32 KV
/// cache, no flash attention), most likely first: `(id, probability)`.
#[cfg(test)]
pub(crate) fn next_token_probs(
    peer: &Path,
    gguf: &Path,
    prompt: &[u32],
    threads: usize,
    top_k: usize,
) -> Result<Vec<(u32, f64)>, String> {
    let v = call(
        peer,
        &Request {
            model: gguf,
            threads,
            prompt,
            decode_tokens: 1,
            warmup_tokens: 0,
            exact: true,
            probs_top_k: top_k.max(1),
        },
    )?;
    serde_json::from_value(v["probs"].clone()).map_err(|e| format!("unexpected probs: {e}"))
}
