//! Conformance of `pointact emulate xarm` with the official xArm Python SDK (xarm-python-sdk
//! 1.18.4): the committed script `tests/xarm_sdk_conformance.py` connects, enables, moves in joint
//! and Cartesian space (absolute and relative, waiting for completion), reads positions back, is
//! refused an unreachable target and recovers, drives the gripper through the RS-485 tunnel and
//! streams servo-mode targets — each step asserted in Python.
//!
//! The Python with the SDK is `POINTACT_PYTHON` (`.ci/run` makes a cached venv and sets it).
//! Without it the test says so and passes, unless `CI` or `POINTACT_REQUIRE_SDK` is set, where a
//! missing SDK is a failure: CI must run this check.
//!
//! This is the one test that binds the rich report port 30002 (the SDK chooses the report layout
//! by that port number, robots.md §0); everything else uses ephemeral ports.

mod common;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::emulator::EmulatorProcess;

/// Longest the script may run before it is killed (it takes a few seconds).
const SCRIPT_LIMIT: Duration = Duration::from_secs(180);

#[test]
fn official_sdk_drives_the_emulator() {
    let Some(python) = std::env::var_os("POINTACT_PYTHON") else {
        let required =
            std::env::var_os("CI").is_some() || std::env::var_os("POINTACT_REQUIRE_SDK").is_some();
        let msg =
            "POINTACT_PYTHON is not set: skipping the xArm SDK conformance test. Set it to a \
                   python with `pip install xarm-python-sdk==1.18.4` (bash .ci/run does this)";
        assert!(
            !required,
            "{msg} (required here: CI or POINTACT_REQUIRE_SDK is set)"
        );
        eprintln!("{msg}");
        return;
    };
    let emu = EmulatorProcess::spawn(&["--port", "0", "--report-port", "30002", "--rt-port", "0"]);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/xarm_sdk_conformance.py");
    let mut child = Command::new(&python)
        .arg(script)
        .arg(emu.command_port.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {python:?} (POINTACT_PYTHON): {e}"));
    // Drain both pipes on threads so a chatty script cannot block on a full pipe.
    let mut out = child.stdout.take().expect("piped stdout");
    let mut err = child.stderr.take().expect("piped stderr");
    let out_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for the script") {
            break Some(s);
        }
        if started.elapsed() > SCRIPT_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = out_t.join().unwrap_or_default();
    let stderr = err_t.join().unwrap_or_default();
    println!(
        "--- emulator\n{}--- script stdout\n{stdout}--- script stderr\n{stderr}",
        emu.banner
    );
    let Some(status) = status else {
        panic!("the SDK script did not finish within {SCRIPT_LIMIT:?}; output above");
    };
    assert!(
        status.success(),
        "the SDK script failed ({status}): {}",
        stdout
            .lines()
            .find(|l| l.starts_with("FAIL"))
            .unwrap_or("see its output above")
    );
    assert!(stdout.contains("PASS: official SDK against the emulator"));
}
