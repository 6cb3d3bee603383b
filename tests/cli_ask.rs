//! `pointact ask` and `pointact keyframes` as a user runs them: the real binary on a folder of
//! frames, the tiny Qwen2.5-VL fixture describing the key frames, a scripted OpenAI-compatible
//! server reasoning; every stage printed, the answer parsed, the rerun recording written; and the
//! clear refusals (no frames, one frame, an unreadable frame, a reply without the format).

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::openai_mock::{completion, Mock, Reply};
use common::TempDir;
use image::{Rgb, RgbImage};

fn pointact(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pointact"))
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .expect("run pointact")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Six frames of a camera panning over a wall of coloured blocks, as PNGs in `dir`.
fn write_frames(dir: &Path, n: u32) {
    let (w, h) = (160 + 45 * n, 120);
    let mural = RgbImage::from_fn(w, h, |x, y| {
        let (bx, by) = (x / 6, y / 6);
        let v = bx.wrapping_mul(2654435761) ^ by.wrapping_mul(40503);
        Rgb([
            (v % 251) as u8,
            (v / 251 % 241) as u8,
            (v / 60491 % 239) as u8,
        ])
    });
    for i in 0..n {
        image::imageops::crop_imm(&mural, i * 45, 0, 160, 120)
            .to_image()
            .save(dir.join(format!("{i:04}.png")))
            .unwrap();
    }
}

fn model() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/qwen25vl_tiny")
        .display()
        .to_string()
}

const QUESTION: &str = "Which way did the camera turn? A. left B. right";

/// `pointact ask QUESTION` on `frames`: the tiny Qwen2.5-VL fixture describes (`tokens` per key
/// frame), the OpenAI-compatible server at `base` reasons; `extra` flags after those.
fn ask(frames: &Path, base: &str, tokens: &str, extra: &[&str]) -> Output {
    let model = model();
    let mut args = vec![
        "ask",
        QUESTION,
        "--frames",
        frames.to_str().unwrap(),
        "--model",
        &model,
        "--description-tokens",
        tokens,
        "--lm",
        "openai",
        "--lm-endpoint",
        base,
    ];
    args.extend_from_slice(extra);
    pointact(&args)
}

#[test]
fn ask_prints_every_stage_and_the_parsed_answer_and_logs_to_rerun() {
    let dir = TempDir::new("cli-ask");
    let frames = dir.join("frames");
    std::fs::create_dir_all(&frames).unwrap();
    write_frames(&frames, 6);
    let mock = Mock::start(vec![Reply::Http(
        200,
        completion(
            "<think>The blocks slide left, the camera turned right.</think><answer>B</answer>",
        ),
    )]);
    let rrd = dir.join("ask.rrd");
    let o = ask(
        &frames,
        &mock.base,
        "8",
        &[
            "--lm-model",
            "qwen2.5-3b-instruct",
            "--rerun",
            &format!("save:{}", rrd.display()),
        ],
    );
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    assert!(out.contains("sampled   6 of 6 frames"), "{out}");
    assert!(out.contains("keyframes ["), "{out}");
    assert!(out.contains("frame 0 "), "{out}");
    assert!(out.contains("reply     <think>"), "{out}");
    assert!(out.contains("answer    B"), "{out}");
    assert!(
        std::fs::metadata(&rrd).unwrap().len() > 1000,
        "a recording with the key frames"
    );
    // The server got the descriptions of the key frames in the released template.
    let asked = mock.requests()[0].json();
    let user = asked["messages"][1]["content"].as_str().unwrap();
    assert!(user.contains("Frame 0: Observe: "), "{user}");
    assert!(
        user.ends_with("Question: Which way did the camera turn? A. left B. right"),
        "{user}"
    );
}

#[test]
fn keyframes_lists_the_comparisons_and_writes_the_key_frames() {
    let dir = TempDir::new("cli-keyframes");
    let frames = dir.join("frames");
    std::fs::create_dir_all(&frames).unwrap();
    write_frames(&frames, 8);
    let out_dir = dir.join("key");
    let o = pointact(&[
        "keyframes",
        "--frames",
        frames.to_str().unwrap(),
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    assert_eq!(
        out.matches("frame ").count(),
        7,
        "each frame after the first compared: {out}"
    );
    let written = std::fs::read_dir(&out_dir).unwrap().count();
    let listed = out.lines().find(|l| l.starts_with("keyframes")).unwrap();
    assert_eq!(listed.matches(',').count() + 1, written, "{listed}");
    assert!(written >= 4, "the released minimum of four: {out}");
}

#[test]
fn bad_videos_and_formatless_replies_are_refused_clearly() {
    let dir = TempDir::new("cli-ask-bad");
    let frames = dir.join("frames");
    std::fs::create_dir_all(&frames).unwrap();
    let run = |frames: &Path, base: &str| ask(frames, base, "4", &[]);
    let refused = |o: &Output, want: &str| {
        let (out, err) = text(o);
        assert_eq!(o.status.code(), Some(1), "{out}\n{err}");
        assert!(err.contains(want), "`{want}` not in: {err}");
        assert!(!err.contains("panicked"), "{err}");
    };
    refused(&run(&frames, "http://127.0.0.1:9"), "no frames in");
    write_frames(&frames, 1);
    refused(&run(&frames, "http://127.0.0.1:9"), "only one frame");
    std::fs::write(frames.join("0001.png"), b"not a png").unwrap();
    refused(&run(&frames, "http://127.0.0.1:9"), "0001.png");
    std::fs::remove_file(frames.join("0001.png")).unwrap();
    write_frames(&frames, 5);
    let mock = Mock::start(vec![Reply::Http(200, completion("B, because it moved."))]);
    refused(&run(&frames, &mock.base), "not in the <think>");
}

/// The spatial-QA loop a user runs: generate questions from the simulator, then evaluate an `ask`
/// configuration on them (oracle descriptions, a scripted reasoning server), table printed.
#[test]
fn spatial_data_then_eval_spatial_prints_the_table() {
    let dir = TempDir::new("cli-eval-spatial");
    let data = dir.join("data");
    let o = pointact(&[
        "train",
        "spatial-data",
        "--task",
        "pepper_in_pan",
        "--seeds",
        "1",
        "--frames",
        "8",
        "--size",
        "160x120",
        "--out",
        data.to_str().unwrap(),
    ]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    let questions = data.join("questions.jsonl");
    let first: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(&questions)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    let truth = first["answer"].as_str().unwrap().to_owned();
    let mock = Mock::start(vec![Reply::Http(
        200,
        completion(&format!(
            "<think>From the frames.</think><answer>{truth}</answer>"
        )),
    )]);
    let o = pointact(&[
        "eval",
        "spatial",
        "--questions",
        questions.to_str().unwrap(),
        "--lm",
        "openai",
        "--lm-endpoint",
        &mock.base,
        "--limit",
        "1",
    ]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    let qtype = first["question_type"].as_str().unwrap();
    let row = out
        .lines()
        .find(|l| l.starts_with(qtype))
        .unwrap_or_else(|| panic!("no {qtype} row in {out}"));
    assert!(
        row.contains(" 100.00 "),
        "the right answer scores 100 %: {row}"
    );
    assert!(out.contains("overall"), "{out}");
}
