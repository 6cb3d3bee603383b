//! The GRPO data layer (`train::grpo::data`): records generated from the simulator load back
//! whole; their ground truths score a correct answer high and a far one zero with the released
//! reward (and so does the oracle pointer's own answer, an independent path to the same scene);
//! the frames are the size the model sees; generation is deterministic; bad lines are skipped and
//! counted per reason, never a panic.

use std::collections::BTreeMap;
use std::path::Path;

use super::common::TempDir;
use pointact::pointing::Ability;
use pointact::sim::tasks::Suite;
use pointact::train::grpo::data::{
    generate, load_records, DataError, DataOptions, RecordKind, RecordLine, SkipReason, JSONL_NAME,
    MAX_RECORD_BYTES, MIN_PIXELS,
};
use pointact::train::rewards::{score, Score, TaskType};
use pointact::vlm::{smart_resize, FACTOR};

const MAX_PIXELS: u64 = 12544;

fn options(out: &Path) -> DataOptions {
    DataOptions {
        suite: Suite::Tabletop,
        // A task with a place and a handle (every ability), and a pick-up by a named part.
        tasks: vec!["cup_on_plate".into(), "knife_by_handle".into()],
        episodes: 2,
        seed: 0,
        abilities: Ability::ALL.to_vec(),
        max_pixels: MAX_PIXELS,
        out: out.to_path_buf(),
    }
}

/// A response in the released format pointing at `pts`.
fn response(pts: &[[f64; 2]]) -> String {
    let list: Vec<String> = pts
        .iter()
        .map(|p| format!("[{}, {}]", p[0], p[1]))
        .collect();
    format!(
        "<think>I look at the image.</think><answer><point>[{}]</point></answer>",
        list.join(", ")
    )
}

/// The payload after the `<type>` tag, as JSON.
fn payload(gt: &str) -> serde_json::Value {
    let (_, rest) = gt.split_once("</type>").expect("a type tag");
    serde_json::from_str(rest).expect("a JSON payload")
}

fn points(v: &serde_json::Value) -> Vec<[f64; 2]> {
    serde_json::from_value(v.clone()).expect("a list of [x, y]")
}

/// The area centroid of a polygon (inside it when it is convex, as the generator's hulls are).
fn centroid(poly: &[[f64; 2]]) -> [f64; 2] {
    let (mut a, mut cx, mut cy) = (0.0, 0.0, 0.0);
    for (i, p) in poly.iter().enumerate() {
        let q = poly[(i + 1) % poly.len()];
        let c = p[0] * q[1] - q[0] * p[1];
        a += c;
        cx += (p[0] + q[0]) * c;
        cy += (p[1] + q[1]) * c;
    }
    [cx / (3.0 * a), cy / (3.0 * a)]
}

/// A correct answer read from the ground truth itself: the polygon's centroid, the 8 free points,
/// the trace.
fn correct_answer(task: TaskType, gt: &str) -> Vec<[f64; 2]> {
    let p = payload(gt);
    match task {
        TaskType::PointRec | TaskType::GroundingRec => vec![centroid(&points(&p["segmentation"]))],
        TaskType::FsdFreePoint => points(&p["free_points"]),
        TaskType::FsdVisualTrace => points(&p["trajectory"]),
        other => panic!("the generator made a {other} record"),
    }
}

/// The task terms of a released score (format terms left out).
fn task_terms(s: &Score) -> Vec<(&'static str, f64)> {
    s.components()
        .iter()
        .filter(|(k, _)| {
            !matches!(
                *k,
                "overall" | "thinking_format" | "point_format" | "fsd_point_num"
            )
        })
        .copied()
        .collect()
}

/// Loads `dir`'s records and checks each (see the module docs); the frames must be `w × h`.
/// Returns how many loaded.
fn check_records(dir: &Path, (w, h): (u32, u32)) -> usize {
    let (records, tally) = load_records(&dir.join(JSONL_NAME)).unwrap();
    assert!(tally.is_empty(), "{tally}");
    let lines: Vec<RecordLine> = std::fs::read_to_string(dir.join(JSONL_NAME))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), records.len());
    for (record, line) in records.iter().zip(&lines) {
        assert_eq!(record.id, line.id);
        assert_eq!(record.images.len(), 1);
        assert_eq!(image::image_dimensions(&record.images[0]).unwrap(), (w, h));
        let ability: Ability = line.ability.as_deref().unwrap().parse().unwrap();
        let expected = match ability {
            Ability::Reg => TaskType::PointRec,
            Ability::Ofg => TaskType::GroundingRec,
            Ability::Rrg => TaskType::FsdFreePoint,
            Ability::Vtg => TaskType::FsdVisualTrace,
        };
        assert_eq!(record.kind, RecordKind::Released(expected), "{}", record.id);
        assert!(!record.question.contains("<image>") && line.problem.starts_with("<image>"));
        // The question is the ability's template, filled.
        let (head, tail) = ability.template().split_once("{instruction}").unwrap();
        assert!(
            record.question.starts_with(head) && record.question.ends_with(tail),
            "{}: {}",
            record.id,
            record.question
        );

        let gt = &record.ground_truth;
        // A correct answer from the ground truth scores (nearly) full marks...
        let good = score(&response(&correct_answer(expected, gt)), gt).unwrap();
        assert!(good.overall() >= 0.9, "{}: {good:?}", record.id);
        // ...and so does the oracle pointer's own answer about the scene.
        let reference = line.reference.as_ref().expect("the oracle answered");
        let oracle = score(&response(reference), gt).unwrap();
        assert!(oracle.overall() >= 0.9, "{}: oracle {oracle:?}", record.id);
        // A far-away answer gets no task reward.
        let far = vec![
            [-1000.0, -1000.0];
            if expected == TaskType::FsdVisualTrace {
                8
            } else {
                1
            }
        ];
        let bad = score(&response(&far), gt).unwrap();
        assert!(
            task_terms(&bad).iter().all(|(_, v)| *v == 0.0),
            "{}: far {bad:?}",
            record.id
        );
    }

    records.len()
}

#[test]
fn generated_records_load_back_and_score_with_the_released_reward() {
    let dir = TempDir::new("grpo-data-generate");
    let mut seen = Vec::new();
    let summary = generate(&options(dir.path()), &mut |p| seen.push(p.done)).unwrap();
    assert_eq!(summary.episodes, 4);
    assert_eq!(seen, [1, 2, 3, 4], "progress after every episode");
    // The cup: all four abilities; the knife (a pick-up): no place, so no RRG.
    let want: BTreeMap<Ability, usize> = [
        (Ability::Reg, 4),
        (Ability::Rrg, 2),
        (Ability::Ofg, 4),
        (Ability::Vtg, 4),
    ]
    .into();
    assert_eq!(summary.records, want, "skipped: {:?}", summary.skipped);
    assert_eq!(summary.images, 4);
    assert!(summary
        .skipped
        .iter()
        .all(|s| s.task == "tabletop/knife_by_handle" && s.ability == Some(Ability::Rrg)));

    // The frames are exactly what smart_resize makes of the 640x480 frame.
    let (h, w) = smart_resize(480, 640, FACTOR, MIN_PIXELS, MAX_PIXELS).unwrap();
    assert_eq!(summary.image_size, Some([w, h]));
    assert_eq!(check_records(dir.path(), (w, h)), summary.total_records());

    // The same options give the same bytes.
    let again = TempDir::new("grpo-data-generate-again");
    generate(&options(again.path()), &mut |_| {}).unwrap();
    assert_eq!(
        std::fs::read(dir.join(JSONL_NAME)).unwrap(),
        std::fs::read(again.join(JSONL_NAME)).unwrap()
    );
}

#[test]
fn bad_lines_are_skipped_and_counted_per_reason() {
    let dir = TempDir::new("grpo-data-malformed");
    image::RgbImage::new(28, 28)
        .save(dir.join("frame.png"))
        .unwrap();
    let seg = r#"{\"segmentation\": [[1, 1], [20, 1], [20, 20]]}"#;
    let lines = [
        format!(r#"{{"id": "good", "problem": "<image>Where?", "answer": "<type>point_rec</type>{seg}", "images": ["frame.png"]}}"#),
        r#"{"id": "broken", "problem": "<image>Where?""#.to_string(),
        format!(r#"{{"id": "no-image", "problem": "<image>Where?", "answer": "<type>point_rec</type>{seg}", "images": ["missing.png"]}}"#),
        r#"{"id": "unknown", "problem": "<image>Where?", "answer": "<type>pointing</type>[[1, 2]]", "images": ["frame.png"]}"#.to_string(),
        r#"{"id": "unparsable", "problem": "<image>Where?", "answer": "<type>point_rec</type>{\"segmentation\": [[1, 1]]}", "images": ["frame.png"]}"#.to_string(),
        r#"{"id": "no-answer", "problem": "<image>Where?", "images": ["frame.png"]}"#.to_string(),
        String::new(),
        r#"[1, 2, 3]"#.to_string(),
        r#"{"id": "untyped", "problem": "<image>Where?", "answer": "[[1, 2]]", "images": ["frame.png"]}"#.to_string(),
        format!(r#"{{"id": "no-problem", "answer": "<type>point_rec</type>{seg}", "images": ["frame.png"]}}"#),
        format!(r#"{{"id": "no-images", "problem": "<image>Where?", "answer": "<type>point_rec</type>{seg}", "images": []}}"#),
    ];
    let path = dir.join("mixed.jsonl");
    std::fs::write(&path, lines.join("\n")).unwrap();
    let (records, tally) = load_records(&path).unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].id, "good");
    assert_eq!(records[0].question, "Where?");
    assert_eq!(records[0].images, [dir.join("frame.png")]);
    let expect = [
        (SkipReason::InvalidJson, 2, 2),
        (SkipReason::MissingImage, 2, 3),
        (SkipReason::UnknownType, 1, 4),
        (SkipReason::UnparsableGroundTruth, 1, 5),
        (SkipReason::MissingAnswer, 1, 6),
        (SkipReason::MissingType, 1, 9),
        (SkipReason::MissingProblem, 1, 10),
    ];
    for (reason, n, first) in expect {
        assert_eq!(tally.count(reason), n, "{reason:?}: {tally}");
        assert_eq!(tally.first_line(reason), Some(first), "{reason:?}");
    }
    assert_eq!(tally.total(), 9);
    let text = tally.to_string();
    assert_eq!(text.lines().count(), 7, "{text}");
    assert!(
        text.contains("skipped 2 records with a missing image (first: line 3)"),
        "{text}"
    );

    // A file that is not there is an error, not an empty data set.
    assert!(matches!(
        load_records(&dir.join("absent.jsonl")),
        Err(DataError::Io { .. })
    ));
}

#[test]
fn alias_keys_and_robot_r1_lines_load() {
    let dir = TempDir::new("grpo-data-aliases");
    std::fs::create_dir_all(dir.join("images")).unwrap();
    let frame = dir.join("images/a.png");
    image::RgbImage::new(28, 28).save(&frame).unwrap();
    let trace = r#"{\"trajectory\": [[1, 1], [2, 2]]}"#;
    let lines = [
        // prompt / ground_truth / image (a string), relative to the JSONL's folder.
        format!(r#"{{"id": "p", "prompt": "Trace it. <image>", "ground_truth": "<type>fsd_visual_trace</type>{trace}", "image": "images/a.png"}}"#),
        // question / solution / an absolute image path.
        format!(
            r#"{{"question": "<image>What?", "solution": "<type>general_qa</type>B", "images": [{}]}}"#,
            serde_json::to_string(&frame).unwrap()
        ),
        // A Robot-R1 line: `answer` is the bare letter, `ground_truth` the tagged one.
        r#"{"id": "r", "question": "Which?", "answer": "B", "ground_truth": "<type>robot_r1</type>B", "image": "images/a.png"}"#.to_string(),
    ];
    let path = dir.join("aliases.jsonl");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let (records, tally) = load_records(&path).unwrap();
    assert!(tally.is_empty(), "{tally}");
    assert_eq!(records.len(), 3);
    assert_eq!(records[0].question, "Trace it.");
    assert_eq!(
        records[0].kind,
        RecordKind::Released(TaskType::FsdVisualTrace)
    );
    assert_eq!(records[0].images, std::slice::from_ref(&frame));
    assert_eq!(
        records[1].id, "aliases:2",
        "a line without an id is named by its line"
    );
    assert_eq!(records[1].kind, RecordKind::Released(TaskType::GeneralQa));
    assert_eq!(records[1].images, std::slice::from_ref(&frame));
    assert_eq!(records[2].kind, RecordKind::RobotR1);
    assert_eq!(records[2].ground_truth, "<type>robot_r1</type>B");
    assert_eq!(records[2].question, "Which?");
}

#[test]
fn every_suite_gives_records_the_oracle_agrees_with() {
    let dir = TempDir::new("grpo-data-suites");
    for suite in [Suite::Tabletop, Suite::Bridge, Suite::Clutter] {
        let out = dir.join(suite.name());
        let opts = DataOptions {
            suite,
            tasks: Vec::new(),
            ..options(&out)
        };
        let summary = generate(&opts, &mut |_| {}).unwrap();
        assert!(
            summary.skipped.iter().all(|s| s.ability.is_some()),
            "no episode fails whole: {:?}",
            summary.skipped
        );
        let [w, h] = summary.image_size.expect("frames written");
        assert_eq!(check_records(&out, (w, h)), summary.total_records());
        for ability in [Ability::Reg, Ability::Vtg] {
            assert_eq!(
                summary.records.get(&ability).copied(),
                Some(summary.episodes),
                "{suite:?} {ability}: {:?}",
                summary.skipped
            );
        }
    }
}

#[test]
fn an_overlong_line_is_skipped_unread_and_a_device_refused() {
    let dir = TempDir::new("grpo-data-long");
    let truth = r#"<type>spatial</type>{\"kind\": \"choice\", \"answer\": \"A\"}"#;
    let long = format!(
        r#"{{"id": "long", "problem": "{}", "answer": "{truth}"}}"#,
        "x".repeat(MAX_RECORD_BYTES as usize)
    );
    let good = format!(r#"{{"id": "after", "problem": "Which?", "answer": "{truth}"}}"#);
    let path = dir.join("long.jsonl");
    std::fs::write(&path, format!("{long}\n{good}\n")).unwrap();
    let (records, tally) = load_records(&path).unwrap();
    assert_eq!(records.len(), 1, "{tally}");
    assert_eq!(records[0].id, "after");
    assert_eq!(tally.count(SkipReason::TooLong), 1);
    assert_eq!(tally.first_line(SkipReason::TooLong), Some(1));
    assert!(tally.to_string().contains("longer than 1 MiB"), "{tally}");
    // `/dev/zero` has no newline and no end: refused before reading.
    let e = load_records(std::path::Path::new("/dev/zero")).unwrap_err();
    assert!(e.to_string().contains("not a regular file"), "{e}");
}
