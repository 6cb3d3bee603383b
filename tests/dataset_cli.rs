//! `--dataset` from the command line: Ctrl-C during `eval sim` leaves a dataset holding every
//! finished episode (and nothing else), a later run appends to it, a suite of another robot is
//! refused before anything runs, and `dataset info` reports what the folder holds.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::TempDir;

fn info(root: &std::path::Path) -> Option<serde_json::Value> {
    let text = std::fs::read_to_string(root.join("meta/info.json")).ok()?;
    serde_json::from_str(&text).ok()
}

fn pointact(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_pointact"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn ctrl_c_keeps_every_finished_episode_and_a_later_run_appends() {
    let tmp = TempDir::new("dataset-cli");
    let ds = tmp.join("ds");
    let json = tmp.join("eval.json");
    let child = Command::new(env!("CARGO_BIN_EXE_pointact"))
        .args(["eval", "sim", "--suite", "tabletop", "--episodes", "24"])
        .args([
            "--json",
            json.to_str().unwrap(),
            "--dataset",
            ds.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = common::interrupt_when(child, Duration::from_secs(180), || {
        info(&ds).map_or(0, |i| i["total_episodes"].as_u64().unwrap()) >= 1
    });
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(130), "{stdout}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let moved = report["episodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["steps_run"].as_u64().unwrap() > 0)
        .count() as u64;
    let kept = info(&ds).unwrap();
    assert_eq!(kept["total_episodes"].as_u64().unwrap(), moved, "{stdout}");
    assert!(moved < 8 * 24);
    assert!(
        std::fs::read_dir(ds.join("data/chunk-000"))
            .unwrap()
            .all(|e| !e.unwrap().file_name().to_string_lossy().ends_with(".tmp")),
        "a temporary file was left"
    );

    // `dataset info` reads it back.
    let out = pointact(&["dataset", "info", ds.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains(&format!("episodes  {moved}")), "{text}");
    assert!(text.contains("robot     xarm6"), "{text}");
    assert!(text.contains("observation.images.front"), "{text}");

    // A later run appends; a WidowX suite is refused before it runs, the folder untouched.
    let before = kept["total_frames"].as_u64().unwrap();
    let out = pointact(&["run", "--seed", "7", "--dataset", ds.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let after = info(&ds).unwrap();
    assert_eq!(after["total_episodes"].as_u64().unwrap(), moved + 1);
    assert!(after["total_frames"].as_u64().unwrap() > before);
    let out = pointact(&[
        "eval",
        "sim",
        "--suite",
        "bridge",
        "--episodes",
        "1",
        "--json",
        tmp.join("b.json").to_str().unwrap(),
        "--dataset",
        ds.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("robot type"), "{err}");
    assert!(!tmp.join("b.json").exists(), "the refused suite started");
    assert_eq!(info(&ds).unwrap(), after);

    // Frames at another size are another feature set: refused, the folder untouched.
    let out = pointact(&[
        "run",
        "--seed",
        "7",
        "--dataset",
        ds.to_str().unwrap(),
        "--dataset-size",
        "320x240",
    ]);
    assert!(!out.status.success());
    assert_eq!(info(&ds).unwrap(), after);
    // A new dataset at that size holds frames of that size.
    let small = tmp.join("small");
    let out = pointact(&[
        "run",
        "--seed",
        "7",
        "--dataset",
        small.to_str().unwrap(),
        "--dataset-size",
        "320x240",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let video = &info(&small).unwrap()["features"]["observation.images.front"];
    assert_eq!(video["shape"], serde_json::json!([240, 320, 3]));
    assert_eq!(video["info"]["video.width"], 320);
    assert_eq!(info(&small).unwrap()["total_episodes"], 1);
}

/// `eval bridge --dataset`: each remote episode of the in-process server goes into the dataset
/// (the judge's verdict with it), and a rate that falls between the 5 Hz control steps is refused
/// before anything is written.
#[test]
fn eval_bridge_keeps_its_episodes_and_refuses_a_rate_between_control_steps() {
    let tmp = TempDir::new("dataset-bridge");
    let ds = tmp.join("ds");
    let json = tmp.join("eval.json");
    let args = |fps: &str| -> Vec<String> {
        [
            "eval",
            "bridge",
            "--suite",
            "bridge",
            "--episodes",
            "1",
            "--json",
            json.to_str().unwrap(),
            "--dataset",
            ds.to_str().unwrap(),
            "--dataset-fps",
            fps,
        ]
        .map(String::from)
        .to_vec()
    };
    let run = |fps: &str| {
        let a = args(fps);
        pointact(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let out = run("7");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("whole multiple of 5"), "{err}");
    assert!(
        !json.exists() && !ds.exists(),
        "the refused run wrote something"
    );

    let out = run("10");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let episodes = report["episodes"].as_array().unwrap();
    let successes = episodes.iter().filter(|e| e["success"] == true).count();
    let kept = info(&ds).unwrap();
    assert_eq!(kept["total_episodes"].as_u64().unwrap(), 4, "{stdout}");
    assert_eq!(kept["fps"], 10);
    assert_eq!(kept["robot_type"], "widowx250");
    let out = pointact(&["dataset", "info", ds.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("success   {successes}/4")),
        "the judge's verdicts: {text}"
    );
}
