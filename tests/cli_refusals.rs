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
    for n in ["0", "100001"] {
        refused(
            &["eval", "bridge", "--max-steps", n, "--json", json],
            2,
            &["--max-steps", "[1, 100000]"],
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

/// `--device`: a GPU in a build without the `cuda` feature names the build command; quantized
/// weights on a GPU name the flag to change. Both before the model is read (`--model` points
/// nowhere, so reading it would fail with another message).
#[test]
fn a_device_the_build_or_the_weights_cannot_use_is_refused_before_loading() {
    let tmp = TempDir::new("device");
    let img = tmp.join("img.png");
    image::RgbImage::new(64, 48).save(&img).unwrap();
    let img = img.to_str().unwrap();
    let missing = tmp.join("no-model");
    let base = [
        "point",
        "--image",
        img,
        "--ability",
        "reg",
        "--instruction",
        "the mug",
        "--model",
        missing.to_str().unwrap(),
    ];
    let run = |extra: &[&str], want: &[&str]| {
        let mut args = base.to_vec();
        args.extend(extra);
        refused(&args, 1, want);
    };
    if cfg!(feature = "cuda") {
        run(
            &["--device", "cuda", "--quant", "q4k"],
            &["--quant q4k runs on the CPU only", "use --quant f32"],
        );
        run(
            &["--device", "cuda:1", "--vision-quant", "q8_0"],
            &["use --vision-quant f32"],
        );
    } else {
        run(
            &["--device", "cuda"],
            &[
                "built without the cuda feature",
                "cargo build --release --features cuda",
            ],
        );
    }
    refused(
        &[&base[..], &["--device", "tpu"]].concat(),
        2,
        &["cpu, cuda or cuda:N"],
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

/// A 4032×3024 photo and a 20000² grayscale PNG once aborted `point` on a 31–33 GB allocation (the
/// model's pretrained `max_pixels` taken as is). Now the image is downscaled to what the activation
/// budget allows, with a message naming the budget; an explicit `--max-pixels` beyond it is refused.
#[test]
fn point_downscales_a_huge_image_to_the_memory_budget_instead_of_aborting() {
    let tmp = TempDir::new("huge-image");
    let model = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/qwen25vl_tiny");
    let photo = tmp.join("photo.png");
    image::RgbImage::from_fn(4032, 3024, |x, y| {
        image::Rgb([(x % 251) as u8, (y % 241) as u8, 7])
    })
    .save(&photo)
    .unwrap();
    let huge = tmp.join("huge.png");
    {
        use image::ImageEncoder;
        let gray = vec![128u8; 20_000 * 20_000];
        let file = std::io::BufWriter::new(std::fs::File::create(&huge).unwrap());
        image::codecs::png::PngEncoder::new_with_quality(
            file,
            image::codecs::png::CompressionType::Fast,
            image::codecs::png::FilterType::NoFilter,
        )
        .write_image(&gray, 20_000, 20_000, image::ExtendedColorType::L8)
        .unwrap();
    }
    for (path, size) in [(&photo, "4032x3024"), (&huge, "20000x20000")] {
        let args = [
            "point",
            "--image",
            path.to_str().unwrap(),
            "--ability",
            "reg",
            "--instruction",
            "the mug",
            "--model",
            model,
            "--max-new-tokens",
            "4",
            "--memory-budget-gb",
            "0.05",
        ];
        let o = pointact(&args);
        let e = stderr(&o);
        assert!(!e.contains("panicked") && o.status.code().is_some(), "{e}");
        let cap: u64 = e
            .split_once("downscaled to at most ")
            .and_then(|(_, rest)| rest.split_once(' '))
            .and_then(|(n, _)| n.parse().ok())
            .unwrap_or_else(|| panic!("no downscale notice: {e}"));
        assert!((3136..12_845_056).contains(&cap), "{e}");
        assert!(e.contains("51 MiB budget (--memory-budget-gb)"), "{e}");
        // The model answered (random weights: not with points) about the downscaled image.
        let seen = e
            .lines()
            .find_map(|l| l.strip_prefix(&format!("image     {size} seen by the model as ")))
            .unwrap_or_else(|| panic!("no resize line: {e}"));
        let (w, h) = seen.split_once('x').unwrap();
        let (w, h): (u64, u64) = (w.parse().unwrap(), h.trim().parse().unwrap());
        assert!(w * h <= cap, "{w}x{h} > {cap}");

        let mut args = args.to_vec();
        args.extend(["--max-pixels", "12845056"]);
        refused(
            &args,
            1,
            &["--max-pixels 12845056 needs more memory than the 51 MiB activation budget"],
        );
    }
}

/// The pepper-and-pan scene with one line changed.
fn pepper_scene(tmp: &TempDir, from: &str, to: &str) -> std::path::PathBuf {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/sim/scenes/tabletop_pepper_in_pan.toml"
    ))
    .unwrap();
    assert!(text.contains(from), "{from}");
    let path = tmp.join("scene.toml");
    std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
    path
}

/// Two objects at the same spot, an object off the table or out of the camera's view, and a
/// 30000² camera (which aborted the renderer) are refused when the scene is read, naming the
/// object and what to change; nothing moves.
#[test]
fn a_scene_with_objects_overlapping_off_the_table_or_unseen_is_refused() {
    let tmp = TempDir::new("layout");
    let cases = [
        // The pepper moved onto the pan.
        (
            "pose = [0.35, -0.15, 0.3]",
            "pose = [0.45, 0.12, 0.3]",
            vec![
                "`pepper` and `pan` overlap",
                "move them apart",
                "objects.pose",
            ],
        ),
        // The table spans x [-0.15, 0.95]: the pepper hangs over its far edge.
        (
            "pose = [0.35, -0.15, 0.3]",
            "pose = [0.94, -0.15, 0.3]",
            vec!["`pepper` is not (wholly) on the table", "x [-0.150, 0.950]"],
        ),
        // A narrow camera that sees the middle of the table only.
        (
            "fx = 605.0\nfy = 605.0",
            "fx = 6050.0\nfy = 6050.0",
            vec!["is outside the camera's view", "640x480 image"],
        ),
        (
            "width = 640\nheight = 480",
            "width = 30000\nheight = 30000",
            vec!["width 30000 is outside [1, 8192] pixels"],
        ),
    ];
    for (from, to, want) in cases {
        let scene = pepper_scene(&tmp, from, to);
        let o = refused(&["run", "--scene", scene.to_str().unwrap()], 1, &want);
        nothing_moved(&o);
    }
}

#[test]
fn eval_bridge_at_an_address_where_nothing_listens_is_an_error() {
    let tmp = TempDir::new("bridge-unreachable");
    // A port that was free a moment ago: nothing listens there now.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server = format!("127.0.0.1:{port}");
    let json = tmp.join("eval.json");
    refused(
        &[
            "eval",
            "bridge",
            "--server",
            &server,
            "--episodes",
            "1",
            "--json",
            json.to_str().unwrap(),
        ],
        1,
        &["cannot reach the bridge server", &server],
    );
}

#[test]
fn a_dry_run_whose_pointing_fails_says_why() {
    let o = pointact(&[
        "run",
        "--dry-run",
        "--instruction",
        "put the elephant in the pan",
    ]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}{}", stderr(&o));
    assert!(out.contains("no object in view matches"), "{out}");
    assert!(!out.contains("every motion planned"), "{out}");
    nothing_moved(&o);
}

#[test]
fn input_files_that_never_end_are_refused_before_reading() {
    // `/dev/zero` grows without end and a FIFO without a writer never answers: each is refused
    // as not a regular file, before anything is read or planned.
    let tmp = TempDir::new("refusals-devices");
    let fifo = tmp.join("scene.toml");
    let made = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success());
    let mut inputs = vec!["/dev/zero".to_string()];
    if made {
        inputs.push(fifo.to_string_lossy().into_owned());
    }
    for input in &inputs {
        let o = refused(
            &["run", "--scene", input, "--dry-run"],
            1,
            &["not a regular file"],
        );
        nothing_moved(&o);
        refused(
            &["eval", "sim", "--episodes", "1", "--resume", input],
            1,
            &["not a regular file"],
        );
        refused(
            &["calibrate", "hand-eye", "--samples", input],
            1,
            &["not a regular file"],
        );
    }
}

/// A table below the robot's base (an arm on a plate or a pedestal) or above it (an arm in a
/// cut-out): the gate's floor follows the table the camera measures, so both branches put the
/// pepper in the pan; a box floor at the base's height stopped every grasp over a lower table.
#[test]
fn a_table_below_or_above_the_base_is_reached_by_both_branches() {
    for z in ["-0.05", "0.03"] {
        for branch in ["p", "v"] {
            let tmp = TempDir::new("table-height");
            let scene = pepper_scene(&tmp, "height = 0.0\n", &format!("height = {z}\n"));
            let o = pointact(&[
                "run",
                "--scene",
                scene.to_str().unwrap(),
                "--branch",
                branch,
            ]);
            let out = stdout(&o);
            let what = format!("table at {z}, branch {branch}");
            assert_eq!(o.status.code(), Some(0), "{what}: {out}\n{}", stderr(&o));
            assert!(out.contains("outcome   SUCCESS"), "{what}: {out}");
        }
    }
}

/// A stated table the camera does not see (a table 5 cm below the base, `--table-z 0`): the run
/// stops before any motion, naming both heights; within 3 cm it runs.
#[test]
fn a_stated_table_the_camera_disagrees_with_stops_the_run_before_motion() {
    let tmp = TempDir::new("table-stated");
    let scene = pepper_scene(&tmp, "height = 0.0\n", "height = -0.05\n");
    let scene = scene.to_str().unwrap();
    let o = pointact(&["run", "--scene", scene, "--table-z", "0"]);
    let out = stdout(&o);
    assert_ne!(o.status.code(), Some(0), "{out}");
    // The depth puts the table a few millimetres off its true -0.05 m.
    assert!(
        out.contains("outcome   FAILURE")
            && out.contains("the camera sees the table top at z = -0.0")
            && out.contains("cm from the stated 0.000 m (at most 3 cm apart)")
            && out.contains("nothing moved"),
        "{out}"
    );
    assert!(!out.contains("execute "), "nothing moved: {out}");
    let o = pointact(&["run", "--scene", scene, "--table-z", "-0.04"]);
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
}
