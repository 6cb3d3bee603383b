//! `ask`, Embodied-R's pipeline: the released prompt texts and their splitting, the reply parser,
//! the errors for bad videos, and the whole run on the tiny fixture models (the Qwen2.5-VL fixture
//! describes real key frames; the reasoning model is a scripted server, whose formatted reply is
//! parsed, and the tiny Qwen2 text fixture, whose random reply is refused for its format).

use image::{Rgb, RgbImage};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::common::openai_mock::{completion, Mock, Reply};
use super::common::TempDir;
use pointact::ask::frames::{frames_dir, FramesError, Video};
use pointact::ask::prompts::{
    extract_qa, perception_prompt, reasoning_prompt, split_description, video_content, Description,
    REASONING_SYSTEM,
};
use pointact::ask::{ask, parse_reply, AskError, AskOptions, Describer, Stage};
use pointact::pointing::openai::{OpenAiConfig, OpenAiPointer};
use pointact::pointing::qwen::{QwenOptions, QwenPointer};
use pointact::train::consistency::{OpenAiReference, QwenReference};

/// A camera panning over a textured wall: frame i is a 160×120 window of a random-block mural,
/// moved `step` pixels right per frame. Blocks of 6 px give ORB corners everywhere.
fn panning(frames: usize, step: u32) -> Video {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let (w, h) = (160 + step * frames as u32, 120);
    let blocks: Vec<[u8; 3]> = (0..(w / 6 + 1) * (h / 6 + 1))
        .map(|_| [rng.gen(), rng.gen(), rng.gen()])
        .collect();
    let mural = RgbImage::from_fn(w, h, |x, y| {
        Rgb(blocks[((y / 6) * (w / 6 + 1) + x / 6) as usize])
    });
    let frames: Vec<RgbImage> = (0..frames as u32)
        .map(|i| image::imageops::crop_imm(&mural, i * step, 0, 160, 120).to_image())
        .collect();
    Video {
        stamps_s: (0..frames.len()).map(|i| i as f64).collect(),
        names: (0..frames.len()).map(|i| format!("frame {i}")).collect(),
        frames,
        fps: 1.0,
    }
}

/// Records what it was asked and answers from a script.
struct Scripted {
    asked: Vec<(usize, String)>,
}

impl Describer for Scripted {
    fn describe(
        &mut self,
        images: &[&RgbImage],
        prompt: &str,
        _max_tokens: usize,
    ) -> Result<String, String> {
        self.asked.push((images.len(), prompt.to_owned()));
        Ok(if images.len() == 1 {
            "A red block to the left.".into()
        } else {
            "1. Move right\n2. A blue block appeared ahead-right.\n3. No mug.".into()
        })
    }
}

fn local(dir: &str) -> QwenPointer {
    QwenPointer::load(
        super::vlm_fixture::fixture_in(dir, "").to_str().unwrap(),
        QwenOptions {
            progress: false,
            ..QwenOptions::default()
        },
    )
    .expect("fixture model loads")
}

fn server(base: &str) -> OpenAiReference {
    OpenAiReference::new(
        OpenAiPointer::new(OpenAiConfig {
            retries: 0,
            ..OpenAiConfig::new(base, "qwen2.5-3b-instruct")
        })
        .expect("valid endpoint"),
    )
}

const QUESTION: &str = "Which way did the camera turn?\nA. left\nB. right";
const REPLY: &str =
    "<think>The blocks move left in view, so the camera turned right.</think>\n<answer>B</answer>";

#[test]
fn the_released_texts_are_rebuilt_exactly() {
    // `extract_qa`: after the first "Question:", stripped.
    assert_eq!(extract_qa("Video.\nQuestion:  Where?  "), "Where?");
    assert_eq!(extract_qa("Where?"), "Where?");
    let first = perception_prompt(0, "Question: Where is the mug?");
    assert!(first.starts_with("I provide you with the first-person perspective of an intelligent agent.                         Please output"));
    assert!(first.contains("please make sure to describe them: 'Where is the mug?'."));
    let next = perception_prompt(3, "Where is the mug?");
    assert!(next.contains("Two images represent the field of view before and after the action."));
    // `split_points`: numbered answers are cut, others are all view; frame 0 is all view.
    let d = split_description(1, "1. Rotate left\n2. A door.\n3. The mug is ahead.");
    assert_eq!(d.action.as_deref(), Some("Rotate left"));
    assert_eq!(d.view, "A door. The mug is ahead.");
    let plain = split_description(1, "A door on the left.");
    assert_eq!(
        (plain.action, plain.view.as_str()),
        (None, "A door on the left.")
    );
    assert_eq!(split_description(0, "1. a\n2. b\n3. c").action, None);
    // `derive_video_content_str`, `After None` included, and the `qa_w_content` template.
    let ds = vec![
        Description {
            action: None,
            view: "a room".into(),
        },
        Description {
            action: None,
            view: "a door".into(),
        },
        Description {
            action: Some("Move forward".into()),
            view: "a mug".into(),
        },
    ];
    let video = video_content(&ds);
    assert!(video.ends_with(
        "\nFrame 0: Observe: a room\nFrame 1: After None, Observe: a door\nFrame 2: After Move forward, Observe: a mug"
    ));
    let prompt = reasoning_prompt(&ds, "Context. Question: Where? A. here B. there");
    assert!(prompt.starts_with("Please assume the role of an agent."));
    assert!(prompt.ends_with(&format!(
        "{video}\n>\n            Question:  Where? A. here B. there"
    )));
    assert!(REASONING_SYSTEM.contains("<think> </think> and <answer> </answer>"));
}

#[test]
fn replies_are_parsed_only_with_both_tags_in_order() {
    assert_eq!(
        parse_reply(" <think> a </think>\n<answer> B </answer>\n"),
        Some(("a".into(), "B".into()))
    );
    assert_eq!(parse_reply("<answer>B</answer>"), None);
    assert_eq!(parse_reply("<think>a</think> B"), None);
    // The answer must follow the think.
    assert_eq!(parse_reply("<answer>B</answer><think>a</think>"), None);
}

#[test]
fn stages_run_in_order_and_each_later_key_frame_is_seen_beside_the_previous() {
    let video = panning(12, 40);
    let mock = Mock::start(vec![Reply::Http(200, completion(REPLY))]);
    let mut describer = Scripted { asked: Vec::new() };
    let mut stages = Vec::new();
    let report = ask(
        &video,
        QUESTION,
        &mut describer,
        &mut server(&mock.base),
        &AskOptions::default(),
        &mut |s| {
            stages.push(match s {
                Stage::Sampled { .. } => "sampled".to_owned(),
                Stage::Keyframes { .. } => "keyframes".to_owned(),
                Stage::Described { k, .. } => format!("described {k}"),
                Stage::Reasoned { .. } => "reasoned".to_owned(),
            })
        },
    )
    .expect("an answer");
    let n = report.keyframes.len();
    assert!(n >= 4, "at least the released minimum of 4 key frames: {n}");
    assert_eq!(report.keyframes[0], 0);
    assert_eq!(*report.keyframes.last().unwrap(), 11);
    let mut want = vec!["sampled".to_owned(), "keyframes".to_owned()];
    want.extend((0..n).map(|k| format!("described {k}")));
    want.push("reasoned".into());
    assert_eq!(stages, want);
    assert_eq!(describer.asked.len(), n);
    assert_eq!(describer.asked[0].0, 1);
    assert!(describer.asked[1..].iter().all(|(images, _)| *images == 2));
    assert_eq!(
        (report.think.as_str(), report.answer.as_str()),
        (
            "The blocks move left in view, so the camera turned right.",
            "B"
        )
    );
    assert_eq!(report.descriptions[1].action.as_deref(), Some("Move right"));
    // What the server was asked: the released system prompt and our rebuilt user message.
    let body = mock.requests()[0].json();
    assert_eq!(body["messages"][0]["content"], REASONING_SYSTEM);
    assert_eq!(body["messages"][1]["content"], report.prompt.as_str());
    assert!(report.prompt.contains(
        "Frame 1: After Move right, Observe: A blue block appeared ahead-right. No mug."
    ));
}

#[test]
fn the_tiny_models_run_end_to_end() {
    let video = panning(8, 50);
    let mut vlm = local("qwen25vl_tiny");
    let options = AskOptions {
        description_tokens: 12,
        reasoning_tokens: 12,
        ..AskOptions::default()
    };
    // A scripted reasoning server: the local describer's words reach it, the answer is parsed.
    let mock = Mock::start(vec![Reply::Http(200, completion(REPLY))]);
    let mut seen = 0;
    let report = ask(
        &video,
        QUESTION,
        &mut vlm,
        &mut server(&mock.base),
        &options,
        &mut |s| {
            if matches!(s, Stage::Described { .. }) {
                seen += 1;
            }
        },
    )
    .expect("an answer");
    assert_eq!(seen, report.keyframes.len());
    assert_eq!(report.answer, "B");
    let asked = mock.requests()[0].json()["messages"][1]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    for d in &report.descriptions {
        assert!(
            asked.contains(&d.view),
            "description {:?} not in the prompt",
            d.view
        );
    }
    // The tiny Qwen2 text model as the reasoner: its random reply has no format, and the error
    // carries the reply instead of a guessed answer.
    let mut lm = QwenReference::new(local("qwen2_text_tiny"));
    match ask(&video, QUESTION, &mut vlm, &mut lm, &options, &mut |_| {}) {
        Err(AskError::NoFormat { reply }) => assert!(!reply.is_empty()),
        other => panic!("expected a format error, got {other:?}"),
    }
}

#[test]
fn bad_videos_are_refused_by_name() {
    let mut describer = Scripted { asked: Vec::new() };
    let mock = Mock::start(vec![]);
    let mut reasoner = server(&mock.base);
    let mut run = |video: &Video| {
        ask(
            video,
            QUESTION,
            &mut describer,
            &mut reasoner,
            &AskOptions::default(),
            &mut |_| {},
        )
    };
    let mut video = panning(2, 10);
    video.frames.truncate(1);
    assert!(matches!(run(&video), Err(AskError::OneFrame)));
    video.frames.clear();
    assert!(matches!(run(&video), Err(AskError::NoFrames)));
    assert!(
        mock.requests().is_empty(),
        "nothing is asked about a bad video"
    );

    let dir = TempDir::new("ask-frames");
    assert!(matches!(
        frames_dir(dir.path(), 1.0),
        Err(FramesError::NoFrames { .. })
    ));
    panning(2, 10).frames[0].save(dir.join("0000.png")).unwrap();
    std::fs::write(dir.join("0001.png"), b"not a png").unwrap();
    match frames_dir(dir.path(), 1.0) {
        Err(FramesError::Unreadable { path, .. }) => assert!(path.ends_with("0001.png")),
        other => panic!("expected an unreadable frame, got {other:?}"),
    }
    std::fs::remove_file(dir.join("0001.png")).unwrap();
    let one = frames_dir(dir.path(), 0.0).unwrap();
    assert_eq!((one.frames.len(), one.fps), (1, 1.0));
}
