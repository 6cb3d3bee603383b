//! `sim/simplerenv/maniskill3.py`, the adapter behind `run.py --env maniskill3` (ManiSkill3's
//! Bridge digital twins of SimplerEnv's WidowX tasks), checked without ManiSkill3 on a recorded
//! observation, and with it on a real episode against the `pointact` binary.
//!
//! | test | checks |
//! | --- | --- |
//! | `recorded_maniskill3_observation_gives_the_recorded_message` | `sim/simplerenv/maniskill3_selftest.py` on `tests/fixtures/maniskill3_obs.npz` (one reset of the carrot task, recorded by `sim/simplerenv/record_maniskill3_obs.py`): the adapter's numpy conversion, `run.py`'s `scene_objects` and `obs_to_infer` turn the recorded ManiSkill3 pieces into the recorded protocol message, field by field (ints, strings and images exactly, floats within 1e-6 relative); the source and target roles carry the recorded actor ids and are in the segmentation; the depth is positive on every source pixel; source and target pixels back-project with the message's intrinsics and extrinsic to within 1 cm of their actors' collision boxes; and the script's checks catch a changed pose, segmentation pixel and depth scale |
//! | `a_real_maniskill3_episode_end_to_end` | only with `POINTACT_SIMPLERENV=1`: `pointact serve bridge` (the built binary, oracle pointer) on a free port, and `run.py --env maniskill3` with the ManiSkill3 venv run the carrot task's episode 0 for its official 60 steps, and the final step succeeds |
//!
//! The self-test needs numpy only and runs with `POINTACT_PYTHON` (see `common::python`); it is
//! skipped with a message where that is missing, unless CI or `POINTACT_REQUIRE_SDK` is set. The
//! episode needs the venv and assets `sim/simplerenv/setup.sh` makes: the Python in
//! `POINTACT_MANISKILL3_PYTHON` (default `~/.cache/pointact/maniskill3/venv/bin/python`), the
//! assets in `MS_ASSET_DIR` (default `~/.cache/pointact/maniskill3/assets`).

mod common;

use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::python;
use serde_json::Value as Json;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// Longest the self-test may run (it takes about a second).
const SELFTEST_LIMIT: Duration = Duration::from_secs(120);
/// Longest the real episode may run (ManiSkill3's env creation, 60 simulated and rendered steps
/// on a CPU and the server's plans: well under a minute on 2 cores).
const EPISODE_LIMIT: Duration = Duration::from_secs(900);

#[test]
fn recorded_maniskill3_observation_gives_the_recorded_message() {
    let Some(py) = python::interpreter("numpy", "numpy", "the ManiSkill3 adapter self-test") else {
        return;
    };
    let run = python::run_script(
        &py,
        &format!("{ROOT}/sim/simplerenv/maniskill3_selftest.py"),
        &[],
        SELFTEST_LIMIT,
    );
    println!("{}", run.transcript());
    let Some(status) = run.status else {
        panic!("maniskill3_selftest.py did not finish within {SELFTEST_LIMIT:?}; output above");
    };
    assert!(
        status.success(),
        "maniskill3_selftest.py failed ({status}):\n{}",
        run.stdout
            .lines()
            .filter(|l| l.starts_with("FAIL"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        run.stdout.contains("PASS: "),
        "maniskill3_selftest.py printed no PASS line\n{}",
        run.transcript()
    );
}

/// `pointact serve bridge` (the binary) on a free loopback port; killed when dropped.
struct BridgeProcess {
    child: Child,
    /// host:port it listens on.
    addr: String,
}

impl BridgeProcess {
    /// Starts `pointact serve bridge --addr 127.0.0.1:0` and reads the address it bound from its
    /// `listening ws://ADDR/ …` line.
    fn spawn() -> BridgeProcess {
        let mut child = Command::new(env!("CARGO_BIN_EXE_pointact"))
            .args(["serve", "bridge", "--addr", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start pointact serve bridge");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut banner = String::new();
        let addr = loop {
            let mut line = String::new();
            let n = stdout
                .read_line(&mut line)
                .expect("read the server's banner");
            if n == 0 {
                let status = child.wait();
                panic!("the server exited before it listened ({status:?}); it printed:\n{banner}");
            }
            banner.push_str(&line);
            if let Some(rest) = line.strip_prefix("listening ws://") {
                break rest.split('/').next().unwrap_or_default().to_owned();
            }
        };
        println!("--- server\n{banner}");
        // Whatever it prints later is read and dropped, so that it never blocks on a full pipe.
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut stdout, &mut std::io::sink());
        });
        BridgeProcess { child, addr }
    }
}

impl Drop for BridgeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_real_maniskill3_episode_end_to_end() {
    if !matches!(std::env::var("POINTACT_SIMPLERENV").as_deref(), Ok("1")) {
        eprintln!(
            "skipped: set POINTACT_SIMPLERENV=1 with ManiSkill3 installed by sim/simplerenv/setup.sh \
             (and POINTACT_MANISKILL3_PYTHON if its venv is not ~/.cache/pointact/maniskill3/venv)"
        );
        return;
    }
    let python: OsString = std::env::var_os("POINTACT_MANISKILL3_PYTHON").unwrap_or_else(|| {
        let home = std::env::var_os("HOME").expect("HOME, for the default ManiSkill3 venv");
        PathBuf::from(home)
            .join(".cache/pointact/maniskill3/venv/bin/python")
            .into_os_string()
    });
    assert!(
        Path::new(&python).exists(),
        "POINTACT_SIMPLERENV=1, but there is no ManiSkill3 Python at {python:?}: make it with \
         sim/simplerenv/setup.sh or set POINTACT_MANISKILL3_PYTHON"
    );
    let server = BridgeProcess::spawn();
    let dir = common::TempDir::new("maniskill3-episode");
    let json = dir.join("run.json");
    let json = json.to_str().expect("a UTF-8 temp path");
    let run = python::run_script(
        &python,
        &format!("{ROOT}/sim/simplerenv/run.py"),
        &[
            "--server",
            server.addr.as_str(),
            "--env",
            "maniskill3",
            "--tasks",
            "widowx_carrot_on_plate",
            "--episodes",
            "0",
            "--json",
            json,
        ],
        EPISODE_LIMIT,
    );
    println!("{}", run.transcript());
    let Some(status) = run.status else {
        panic!("run.py --env maniskill3 did not finish within {EPISODE_LIMIT:?}; output above");
    };
    assert_eq!(
        status.code(),
        Some(0),
        "run.py --env maniskill3 did not run the episode ({status}); output above"
    );
    let text = std::fs::read_to_string(json).expect("run.py wrote its JSON");
    let report: Json = serde_json::from_str(&text).expect("run.py's JSON");
    assert_eq!(report["env"], "maniskill3", "{text}");
    assert_eq!(report["budget"], "official", "{text}");
    let episodes = report["episodes"].as_array().expect("episodes");
    assert_eq!(episodes.len(), 1, "{text}");
    let e = &episodes[0];
    assert_eq!(e["task"], "widowx_carrot_on_plate", "{text}");
    assert_eq!(e["episode_id"].as_u64(), Some(0), "{text}");
    assert_eq!(e["steps"].as_u64(), Some(60), "the official budget\n{text}");
    assert_eq!(e["success"], true, "final-step success\n{text}");
    drop(server);
}
