//! Bad input is refused where it is read, before anything moves, with the allowed range in the
//! message (issue: "bad input never becomes a bad motion, a crash or a lost file"). Each case runs
//! the real binary, as a user would.

mod common;

use std::process::{Command, Output};

use common::TempDir;

fn pointact(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pointact"))
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run pointact")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Refused with `code`, no panic, and the message says `want`.
fn refused(args: &[&str], code: i32, want: &[&str]) -> Output {
    let o = pointact(args);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(code), "{args:?}: {e}");
    assert!(!e.contains("panicked"), "{args:?} panicked: {e}");
    for w in want {
        assert!(e.contains(w), "{args:?}: `{w}` not in: {e}");
    }
    o
}

/// Nothing was executed: no plan step reached the robot.
fn nothing_moved(o: &Output) {
    let out = stdout(o);
    assert!(
        !out.lines().any(|l| l.starts_with("execute")),
        "a step ran: {out}"
    );
}

#[test]
fn non_finite_or_out_of_range_numbers_are_refused_at_parse_time() {
    for v in ["NaN", "-1", "inf"] {
        let arg = format!("--noise-px={v}");
        let o = refused(&["run", &arg], 2, &["--noise-px", "[0, inf)"]);
        nothing_moved(&o);
    }
    refused(
        &["eval", "sim", "--drop-prob", "7"],
        2,
        &["--drop-prob", "[0, 1]"],
    );
    refused(&["eval", "sim", "--noise-px", "NaN"], 2, &["--noise-px"]);
    refused(
        &["calibrate", "hand-eye", "--sim", "--views", "100000"],
        2,
        &["--views", "[3, 1000]"],
    );
    refused(
        &["calibrate", "hand-eye", "--sim", "--tag-size", "NaN"],
        2,
        &["--tag-size"],
    );
}

#[test]
fn episode_counts_are_bounded_and_never_zero() {
    let tmp = TempDir::new("episodes");
    let json = tmp.join("eval.json");
    let json = json.to_str().unwrap();
    for n in ["0", "1000000000", "18446744073709551615"] {
        refused(
            &["eval", "sim", "--episodes", n, "--json", json],
            2,
            &["--episodes", "[1, 100000]"],
        );
    }
    assert!(
        !tmp.join("eval.json").exists(),
        "a refused eval wrote its JSON"
    );
}

#[test]
fn model_settings_are_checked_before_a_model_or_server_is_used() {
    let tmp = TempDir::new("model-settings");
    let img = tmp.join("img.png");
    image::RgbImage::new(64, 48).save(&img).unwrap();
    let img = img.to_str().unwrap();
    let base = [
        "point",
        "--image",
        img,
        "--ability",
        "reg",
        "--instruction",
        "the mug",
        "--pointer",
        "openai",
        // Nothing listens here: a request would fail with "could not reach", not a range error.
        "--endpoint",
        "http://127.0.0.1:9/v1",
        "--retries",
        "0",
    ];
    for (flag, value, range) in [
        ("--timeout-s", "NaN", "(0, 86400]"),
        ("--timeout-s", "-1", "(0, 86400]"),
        ("--timeout-s", "1e30", "(0, 86400]"),
        ("--deadline-s", "0", "(0, 86400]"),
        ("--deadline-s", "NaN", "(0, 86400]"),
        ("--top-p", "5", "(0, 1]"),
        ("--temperature", "NaN", "[0, inf)"),
        ("--repetition-penalty", "0", "(0, inf)"),
        ("--max-new-tokens", "0", "[1, inf)"),
    ] {
        let mut args = base.to_vec();
        let arg = format!("{flag}={value}");
        args.push(&arg);
        let o = refused(&args, 1, &[flag, range]);
        assert!(
            !stderr(&o).contains("could not reach"),
            "{flag}: asked the server"
        );
    }
    // The same checks guard `run` with a model pointer, before the episode starts.
    let o = refused(
        &["run", "--pointer", "openai", "--timeout-s", "NaN"],
        1,
        &["--timeout-s"],
    );
    nothing_moved(&o);
}

#[test]
fn point_refuses_an_empty_instruction_and_an_overlay_over_its_image() {
    let tmp = TempDir::new("overlay");
    let img = tmp.join("img.png");
    image::RgbImage::from_pixel(64, 48, image::Rgb([10, 200, 30]))
        .save(&img)
        .unwrap();
    let before = std::fs::read(&img).unwrap();
    let img_s = img.to_str().unwrap();
    let common_args = [
        "point",
        "--image",
        img_s,
        "--ability",
        "reg",
        "--pointer",
        "openai",
        "--endpoint",
        "http://127.0.0.1:9/v1",
        "--retries",
        "0",
    ];
    let mut args = common_args.to_vec();
    args.extend(["--instruction", "  "]);
    refused(&args, 1, &["--instruction is empty"]);
    let mut args = common_args.to_vec();
    args.extend(["--instruction", "the mug", "--overlay", img_s]);
    refused(&args, 1, &["is the input image"]);
    assert_eq!(
        std::fs::read(&img).unwrap(),
        before,
        "the input image changed"
    );
    // An overlay that cannot be written is found before the model is asked.
    let mut args = common_args.to_vec();
    args.extend([
        "--instruction",
        "the mug",
        "--overlay",
        "/nonexistent-dir/pointact/overlay.png",
    ]);
    let o = refused(&args, 1, &["cannot write the overlay"]);
    assert!(
        !stderr(&o).contains("could not reach"),
        "asked the server first"
    );
}

#[test]
fn a_recording_folder_that_is_not_empty_stops_the_run_before_any_motion() {
    let tmp = TempDir::new("record");
    std::fs::create_dir_all(tmp.join("0000")).unwrap();
    std::fs::write(tmp.join("0000").join("rgb.png"), b"an older run").unwrap();
    let dir = tmp.path().to_str().unwrap();
    let o = refused(&["run", "--record", dir], 1, &["not empty", "--force"]);
    nothing_moved(&o);
    assert_eq!(
        std::fs::read(tmp.join("0000").join("rgb.png")).unwrap(),
        b"an older run"
    );
    // A file where the folder should be: refused before motion as well.
    let file = tmp.join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let o = refused(
        &["run", "--record", file.to_str().unwrap()],
        1,
        &["not a folder"],
    );
    nothing_moved(&o);
}

#[test]
fn with_force_a_recording_replaces_the_old_frames() {
    let tmp = TempDir::new("record-force");
    std::fs::create_dir_all(tmp.join("0007")).unwrap();
    std::fs::write(tmp.join("0007").join("rgb.png"), b"stale").unwrap();
    let dir = tmp.path().to_str().unwrap();
    let o = pointact(&["run", "--dry-run", "--record", dir, "--force"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(tmp.join("0000").join("rgb.png").is_file());
    assert!(
        !tmp.join("0007").exists(),
        "a stale frame of the older run is left"
    );
}

#[test]
fn a_scene_whose_objects_do_not_match_the_task_is_refused_before_any_motion() {
    let tmp = TempDir::new("scene");
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/sim/scenes/tabletop_pepper_in_pan.toml"
    ))
    .unwrap();
    assert!(text.contains("name = \"pepper\""));
    let scene = tmp.join("scene.toml");
    std::fs::write(
        &scene,
        text.replace("name = \"pepper\"", "name = \"tomato\""),
    )
    .unwrap();
    let o = refused(
        &["run", "--scene", scene.to_str().unwrap()],
        1,
        &["no object `pepper`", "`tomato`"],
    );
    nothing_moved(&o);
}

/// A viewer that is not there is found when the run starts, not after the arm moved.
#[cfg(feature = "viz")]
#[test]
fn a_dead_rerun_viewer_stops_the_run_before_any_motion() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let url = format!("connect:rerun+http://127.0.0.1:{port}/proxy");
    let o = refused(&["run", "--rerun", &url], 1, &["no viewer answers"]);
    nothing_moved(&o);
}
