//! Conformance of `pointact emulate xarm` with the official xArm Python SDK (xarm-python-sdk
//! 1.18.4): the committed script `tests/xarm_sdk_conformance.py` connects, enables, moves in joint
//! and Cartesian space (absolute and relative, waiting for completion), reads positions back, is
//! refused an unreachable target and recovers (also by the flow scripts for the real arm use:
//! `clean_error`, `motion_enable`, `set_mode(0)`, `set_state(0)` and a waited move at once),
//! clears a warning, stops and resumes, resets, is refused a motion after an emergency stop until
//! re-enabled, queues a relative move behind an absolute one, drives the gripper through the
//! RS-485 tunnel and streams servo-mode targets — each step asserted in Python, against the
//! kinematic model and against the simulator's arm (`--sim`).
//!
//! The Python with the SDK is `POINTACT_PYTHON` (`.ci/run` makes a cached venv and sets it).
//! Without it the test says so and passes, unless `CI` or `POINTACT_REQUIRE_SDK` is set, where a
//! missing SDK is a failure: CI must run this check (`common::python`).
//!
//! This is the one test that binds the rich report port 30002 (the SDK chooses the report layout
//! by that port number, docs/references.md §3); everything else uses ephemeral ports.

mod common;

use std::time::Duration;

use common::emulator::EmulatorProcess;
use common::python;

/// Longest the script may run before it is killed (it takes a few seconds).
const SCRIPT_LIMIT: Duration = Duration::from_secs(180);

#[test]
fn official_sdk_drives_the_emulator() {
    let Some(python) = python::interpreter(
        "xarm",
        "xarm-python-sdk==1.18.4",
        "the xArm SDK conformance test",
    ) else {
        return;
    };
    // The kinematic model, then the simulator's arm behind the same controller.
    for extra in [&[][..], &["--sim"][..]] {
        let mut args = vec!["--port", "0", "--report-port", "30002", "--rt-port", "0"];
        args.extend_from_slice(extra);
        let emu = EmulatorProcess::spawn(&args);
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/xarm_sdk_conformance.py");
        let run = python::run_script(
            &python,
            script,
            &[&emu.command_port.to_string()],
            SCRIPT_LIMIT,
        );
        println!("--- emulator {extra:?}\n{}{}", emu.banner, run.transcript());
        let Some(status) = run.status else {
            panic!(
                "the SDK script did not finish within {SCRIPT_LIMIT:?} ({extra:?}); output above"
            );
        };
        assert!(
            status.success(),
            "the SDK script failed against the emulator {extra:?} ({status}): {}",
            run.stdout
                .lines()
                .find(|l| l.starts_with("FAIL"))
                .unwrap_or("see its output above")
        );
        assert!(run
            .stdout
            .contains("PASS: official SDK against the emulator"));
        drop(emu);
    }
}
