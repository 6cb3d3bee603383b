//! `eval sim` loses nothing it finished: the JSON is rewritten as episodes finish, Ctrl-C stops the
//! suite between episodes and still prints the table and saves the report, and `--resume` finishes
//! the run without repeating an episode, ending with the report an uninterrupted run writes.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::TempDir;

fn episodes(path: &std::path::Path) -> Option<serde_json::Value> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str(&text).ok()
}

#[test]
fn an_interrupted_eval_keeps_what_finished_and_resumes_to_the_full_report() {
    let tmp = TempDir::new("eval-resume");
    let json = tmp.join("eval.json");
    let args = [
        "eval",
        "sim",
        "--suite",
        "bridge",
        "--episodes",
        "24",
        "--json",
        json.to_str().unwrap(),
    ];
    let child = Command::new(env!("CARGO_BIN_EXE_pointact"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the first intermediate write with a finished episode, then press Ctrl-C.
    let out = common::interrupt_when(child, Duration::from_secs(120), || {
        episodes(&json).map_or(0, |r| r["episodes"].as_array().map_or(0, |e| e.len())) >= 1
    });
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stdout}\n{stderr}");
    assert!(stdout.contains("interrupted:"), "{stdout}");
    assert!(stderr.contains("--resume"), "{stderr}");
    let first = episodes(&json).expect("the report of what finished");
    assert_eq!(first["interrupted"], true);
    let done = first["episodes"].as_array().unwrap().clone();
    assert!(
        !done.is_empty() && done.len() < 96,
        "{} episodes",
        done.len()
    );

    // Resume into a second file: the finished episodes are taken over, the rest are run.
    let json2 = tmp.join("eval2.json");
    let resume = Command::new(env!("CARGO_BIN_EXE_pointact"))
        .args(&args[..6])
        .args([
            "--json",
            json2.to_str().unwrap(),
            "--resume",
            json.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&resume.stdout);
    assert_eq!(resume.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains(&format!("resumed   {} finished episodes", done.len())),
        "{stdout}"
    );
    let full = episodes(&json2).unwrap();
    assert!(
        full.get("interrupted").is_none(),
        "a complete run says it was interrupted"
    );
    let all = full["episodes"].as_array().unwrap();
    assert_eq!(all.len(), 96);
    assert_eq!(
        &all[..done.len()],
        &done[..],
        "the finished episodes were not kept as they were"
    );
    assert!(
        stdout.contains(" 96/96 ") || stdout.contains("/96 "),
        "{stdout}"
    );

    // A report made with other settings is refused, naming the difference.
    let other = Command::new(env!("CARGO_BIN_EXE_pointact"))
        .args(&args[..6])
        .args(["--branch", "v", "--json", json2.to_str().unwrap()])
        .args(["--resume", json.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(other.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&other.stderr).contains("branch"));
}

/// A viewer that accepts the connection and then drops everything (it died after the start-up
/// probe): the suite still prints its table and writes its JSON, then reports the viewer and exits 1.
#[cfg(feature = "viz")]
#[test]
fn a_viewer_that_dies_mid_eval_loses_no_result() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            drop(conn);
        }
    });
    let tmp = TempDir::new("eval-dead-viewer");
    let json = tmp.join("eval.json");
    let url = format!("connect:rerun+http://127.0.0.1:{port}/proxy");
    let o = Command::new(env!("CARGO_BIN_EXE_pointact"))
        .args(["eval", "sim", "--suite", "bridge", "--episodes", "1"])
        .args(["--json", json.to_str().unwrap(), "--rerun", &url])
        .output()
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert_eq!(o.status.code(), Some(1), "{out}\n{err}");
    assert!(err.contains("rerun logging failed"), "{err}");
    assert!(
        out.lines().any(|l| l.starts_with("all ")),
        "no table: {out}"
    );
    let report = episodes(&json).expect("the JSON was written");
    assert_eq!(report["episodes"].as_array().map(Vec::len), Some(4));
}
