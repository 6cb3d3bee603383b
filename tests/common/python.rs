//! Tests that check us against a reference Python package from PyPI (the xArm SDK, openpi-client)
//! run a committed script with the Python named by `POINTACT_PYTHON` (`.ci/run` makes a cached
//! venv with every such package and sets it). Without it, or when that Python lacks the package,
//! the test says so and passes, unless `CI` or `POINTACT_REQUIRE_SDK` is set: there a missing
//! reference is a failure, since CI must run these checks.

use std::ffi::OsString;
use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The Python to run `what` with, if it can `import module`; `None` (after saying why) when the
/// check is to be skipped. Panics when it may not be skipped.
pub fn interpreter(module: &str, pip_spec: &str, what: &str) -> Option<OsString> {
    let required =
        std::env::var_os("CI").is_some() || std::env::var_os("POINTACT_REQUIRE_SDK").is_some();
    let missing = match std::env::var_os("POINTACT_PYTHON") {
        None => "POINTACT_PYTHON is not set".to_owned(),
        Some(python) => {
            let import = Command::new(&python)
                .args(["-c", &format!("import {module}")])
                .output();
            match import {
                Ok(out) if out.status.success() => return Some(python),
                Ok(out) => format!(
                    "POINTACT_PYTHON={python:?} cannot import {module} ({})",
                    String::from_utf8_lossy(&out.stderr)
                        .lines()
                        .last()
                        .unwrap_or("no message")
                        .trim()
                ),
                Err(e) => format!("cannot run POINTACT_PYTHON={python:?}: {e}"),
            }
        }
    };
    let msg = format!(
        "{missing}: skipping {what}. Set it to a python with `pip install {pip_spec}` \
         (bash .ci/run does this)"
    );
    assert!(
        !required,
        "{msg} (required here: CI or POINTACT_REQUIRE_SDK is set)"
    );
    eprintln!("{msg}");
    None
}

/// What a script run left: its exit status (`None` when it was killed at the time limit), its
/// stdout and its stderr.
pub struct ScriptRun {
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
}

impl ScriptRun {
    /// Both outputs, for a failure message.
    pub fn transcript(&self) -> String {
        format!(
            "--- script stdout\n{}--- script stderr\n{}",
            self.stdout, self.stderr
        )
    }
}

/// Runs `python script args…`, killed after `limit`. Both pipes are drained on threads so that a
/// chatty script cannot block on a full pipe.
pub fn run_script(python: &OsString, script: &str, args: &[&str], limit: Duration) -> ScriptRun {
    let mut child = Command::new(python)
        .arg(script)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {python:?} (POINTACT_PYTHON): {e}"));
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = pipe.read_to_string(&mut s);
            s
        })
    };
    let out_t = drain(Box::new(child.stdout.take().expect("piped stdout")));
    let err_t = drain(Box::new(child.stderr.take().expect("piped stderr")));
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for the script") {
            break Some(s);
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    ScriptRun {
        status,
        stdout: out_t.join().unwrap_or_default(),
        stderr: err_t.join().unwrap_or_default(),
    }
}

/// `tests/dataset_video.py` (at `script`) decoding `video` against the raw RGB frames in `raw`
/// (`width`×`height` each): its JSON report (frames, timestamps, key frames, PSNR per frame, …).
/// Panics when the script fails.
pub fn video_report(
    python: &OsString,
    script: &str,
    video: &std::path::Path,
    raw: &std::path::Path,
    size: (u32, u32),
) -> serde_json::Value {
    video_report_with(python, script, video, raw, size, &[])
}

/// [`video_report`] with further arguments after the script's four (a PyAV folder, for one).
pub fn video_report_with(
    python: &OsString,
    script: &str,
    video: &std::path::Path,
    raw: &std::path::Path,
    (width, height): (u32, u32),
    more: &[&str],
) -> serde_json::Value {
    let (width, height) = (width.to_string(), height.to_string());
    let mut args = vec![
        video.to_str().expect("a UTF-8 path"),
        raw.to_str().expect("a UTF-8 path"),
        &width,
        &height,
    ];
    args.extend_from_slice(more);
    let run = run_script(python, script, &args, Duration::from_secs(120));
    assert!(
        run.status.is_some_and(|s| s.success()),
        "{script} failed\n{}",
        run.transcript()
    );
    serde_json::from_str(run.stdout.trim()).expect("the video script prints one JSON object")
}
