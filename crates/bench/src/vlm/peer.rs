//! The PyTorch transformers peer: `benches/vlm_peer.py`, embedded so the binary runs from any
//! folder, written next to the request and run with the same thread count.

use std::path::Path;
use std::process::{Command, Stdio};

use super::error::VlmBenchError;
use super::worker::Measured;

/// The peer script (it installs its own venv when torch or transformers are missing).
const PEER: &str = include_str!("../../../../benches/vlm_peer.py");

/// `--peer-mkl-intel`: a shared object with one function, preloaded into the peer, that answers
/// MKL's CPU-vendor check with "Intel".
///
/// Why: torch's wheels carry MKL, which picks its sgemm by CPU *vendor*: on an AMD CPU it runs
/// its AVX2 code whatever vector units the CPU has. Measured on the 2-core AVX-512 EPYC (Zen 5),
/// torch 2.15.0, 2 threads, `a @ b` of 545 × 2048 × 11008 and 545 × 11008 × 2048: 175 / 191
/// GFLOP/s by default, 395 / 411 with this shim, 369 / 358 through oneDNN (which picks by
/// feature). An Intel CPU with the same units runs MKL's AVX-512 code, so a transformers column
/// measured on AMD is a slower peer than the same CPU generation from Intel would give. With the
/// shim the peer is that Intel-like one (torch exports the symbol, so the preload wins).
const MKL_INTEL_SHIM: &str = "int mkl_serv_intel_cpu_true(void) { return 1; }\n";

/// Compiles [`MKL_INTEL_SHIM`] into `work_dir` with the C compiler (`$CC`, else `cc`: the one
/// the Rust toolchain links with); `Err` says why not.
fn mkl_intel_shim(work_dir: &Path) -> Result<std::path::PathBuf, String> {
    let src = work_dir.join("mkl_intel_cpu.c");
    let lib = work_dir.join("libmkl_intel_cpu.so");
    std::fs::write(&src, MKL_INTEL_SHIM)
        .map_err(|e| format!("cannot write {}: {e}", src.display()))?;
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let out = Command::new(&cc)
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&lib)
        .arg(&src)
        .output()
        .map_err(|e| format!("--peer-mkl-intel needs a C compiler; cannot run `{cc}` ({e})"))?;
    if !out.status.success() {
        return Err(format!(
            "--peer-mkl-intel: `{cc}` could not build the shim ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(lib)
}

/// Runs the peer on `request` with `python` (with MKL's Intel code path forced where
/// `mkl_intel`, [`MKL_INTEL_SHIM`]); `Err` says why it could not measure (printed in the
/// report, not fatal: our side's numbers still stand).
pub(crate) fn run(
    python: &str,
    work_dir: &Path,
    request: &Path,
    threads: usize,
    mkl_intel: bool,
) -> Result<Result<Measured, String>, VlmBenchError> {
    let script = work_dir.join("vlm_peer.py");
    std::fs::write(&script, PEER).map_err(|source| VlmBenchError::Io {
        path: script.clone(),
        source,
    })?;
    let n = threads.to_string();
    let mut command = Command::new(python);
    if mkl_intel {
        match mkl_intel_shim(work_dir) {
            Ok(lib) => {
                let mut preload = lib.into_os_string();
                if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
                    preload.push(":");
                    preload.push(old);
                }
                command.env("LD_PRELOAD", preload);
                command.env(
                    "POINTACT_PEER_MKL",
                    "intel code path forced (--peer-mkl-intel)",
                );
            }
            Err(reason) => return Ok(Err(reason)),
        }
    }
    let output = match command
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
