//! The PyTorch transformers peer: `benches/vlm_peer.py`, embedded so the binary runs from any
//! folder, written next to the request and run with the same thread count.

use std::path::Path;
use std::process::{Command, Stdio};

use super::worker::Measured;
use super::VlmBenchError;

/// The peer script (it installs its own venv when torch or transformers are missing).
const PEER: &str = include_str!("../../../benches/vlm_peer.py");

/// Runs the peer on `request` with `python`; `Err` says why it could not measure (printed in the
/// report, not fatal: our side's numbers still stand).
pub fn run(
    python: &str,
    work_dir: &Path,
    request: &Path,
    threads: usize,
) -> Result<Result<Measured, String>, VlmBenchError> {
    let script = work_dir.join("vlm_peer.py");
    std::fs::write(&script, PEER).map_err(|source| VlmBenchError::Io {
        path: script.clone(),
        source,
    })?;
    let n = threads.to_string();
    let output = match Command::new(python)
        .arg(&script)
        .arg(request)
        // Read by OpenMP / MKL when torch loads; the script also calls torch.set_num_threads.
        .env("OMP_NUM_THREADS", &n)
        .env("MKL_NUM_THREADS", &n)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            return Ok(Err(format!(
                "cannot run `{python}` ({e}); install Python 3 or pass --python PATH"
            )))
        }
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().unwrap_or("");
    let value: Option<serde_json::Value> = serde_json::from_str(line).ok();
    if let Some(err) = value
        .as_ref()
        .and_then(|v| v.get("error"))
        .and_then(|e| e.as_str())
    {
        return Ok(Err(format!("transformers peer: {err}")));
    }
    if !output.status.success() {
        return Ok(Err(format!(
            "the transformers peer failed ({}); its messages are above",
            output.status
        )));
    }
    Ok(value
        .ok_or_else(|| format!("unreadable peer output: {line}"))
        .and_then(|v| {
            serde_json::from_value(v).map_err(|e| format!("unexpected peer output ({e}): {line}"))
        }))
}
