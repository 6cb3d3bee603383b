//! `train spatial-data` (`train::spatial`): the answers agree with what is recomputed from the
//! world without the generator's code (the frames rendered again with the brute-force renderer
//! from the poses written in `truth.json`, distances and directions from the laid-out scene's
//! poses, sizes from the shapes); every choice question has exactly one right option; generation
//! is deterministic; VSI-Bench's scoring on cases worked by hand; the oracle describer names what
//! is in view.

use std::collections::BTreeMap;
use std::path::Path;

use k::nalgebra::{Isometry3, Matrix3, Point3, Rotation3, Translation3, UnitQuaternion, Vector3};

use super::common::TempDir;
use pointact::geometry::{Intrinsics, Shape};
use pointact::runner::episode::prepare_episode;
use pointact::sim::devices::SimRobot;
use pointact::sim::render::{render_brute_force, PinholeCamera, RenderOptions};
use pointact::sim::tasks::{self, Suite};
use pointact::train::spatial::describe::describe;
use pointact::train::spatial::score::{mean_relative_accuracy, read_number};
use pointact::train::spatial::truth::SequenceTruth;
use pointact::train::spatial::{
    generate, load_questions, score, AnswerKind, QuestionType, SpatialOptions, SpatialQuestion,
    SpatialTally,
};

fn options(out: &Path, tasks: &[&str], frames: usize) -> SpatialOptions {
    SpatialOptions {
        suite: Suite::Tabletop,
        tasks: tasks.iter().map(|t| t.to_string()).collect(),
        seeds: 1,
        seed: 0,
        frames,
        fps: 2.0,
        width: 160,
        height: 120,
        moved: true,
        out: out.to_path_buf(),
    }
}

fn truth_of(out: &Path, q: &SpatialQuestion) -> SequenceTruth {
    let text = std::fs::read_to_string(out.join(&q.sequence).join("truth.json"))
        .expect("truth.json beside the frames");
    serde_json::from_str(&text).expect("truth.json reads back")
}

/// The text of the correct option (without its `X. `).
fn correct_text(q: &SpatialQuestion) -> &str {
    let line = q
        .options
        .iter()
        .find(|o| o.starts_with(&format!("{}. ", q.answer)))
        .expect("the answer letter names an option");
    &line[3..]
}

/// The camera a frame's truth writes, read back.
fn camera_of(f: &pointact::train::spatial::truth::FrameTruth) -> PinholeCamera {
    let m = &f.world_from_camera;
    let r = Matrix3::from_fn(|i, j| m[i][j]);
    let rotation = UnitQuaternion::from_rotation_matrix(&Rotation3::from_matrix(&r));
    let i = &f.intrinsics;
    PinholeCamera {
        intrinsics: Intrinsics::pinhole(i.width, i.height, i.fx, i.fy, i.cx, i.cy),
        world_from_camera: Isometry3::from_parts(
            Translation3::new(m[0][3], m[1][3], m[2][3]),
            rotation,
        ),
    }
}

/// The laid-out scene's object centres (the pose the task's layout gives, before physics
/// settles it; the object's bounds centred over its base for these symmetric shapes).
fn layout_centres(task: &str, seed: u64) -> BTreeMap<String, [f64; 3]> {
    let ep = tasks::task(task).unwrap().instantiate(seed).unwrap();
    ep.scene
        .objects
        .iter()
        .map(|o| {
            let c = o.world_from_object * Point3::new(0.0, 0.0, o.height() / 2.0);
            (o.name.clone(), [c.x, c.y, c.z])
        })
        .collect()
}

fn phrase_to_name(seq: &SequenceTruth, phrase: &str) -> String {
    seq.objects
        .iter()
        .find(|o| o.phrase == phrase)
        .unwrap_or_else(|| panic!("no object called `{phrase}`"))
        .name
        .clone()
}

fn d3(a: [f64; 3], b: [f64; 3]) -> f64 {
    ((a[0] - b[0]).powi(2) + (a[1] - b[1]).powi(2) + (a[2] - b[2]).powi(2)).sqrt()
}

#[test]
fn answers_match_an_independent_recomputation() {
    let dir = TempDir::new("spatial-recompute");
    let tasks_asked = ["fruit_in_bowl", "stack_blocks"];
    let summary = generate(&options(dir.path(), &tasks_asked, 12), &mut |_| {}).unwrap();
    // Two tasks, one seed, a static and a moved sequence each.
    assert_eq!(summary.sequences, 4, "skipped: {:?}", summary.skipped);
    assert_eq!(summary.frames, 48);
    let questions = load_questions(&summary.jsonl).unwrap();
    assert_eq!(questions.len(), summary.total_questions());
    for t in [
        QuestionType::ObjectCounting,
        QuestionType::ObjectAbsDistance,
        QuestionType::ObjectSizeEstimation,
        QuestionType::ObjAppearanceOrder,
    ] {
        assert!(
            summary.questions.get(&t).copied().unwrap_or(0) > 0,
            "no {t} question: {:?}",
            summary.questions
        );
    }

    // The frames rendered again by the brute-force renderer, from the written camera poses, in a
    // world built again: the same objects in view with (nearly) the same pixel counts.
    let mut first_seen: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    let mut sequences: Vec<String> = questions.iter().map(|q| q.sequence.clone()).collect();
    sequences.dedup();
    for rel in &sequences {
        let seq: SequenceTruth = serde_json::from_str(
            &std::fs::read_to_string(dir.join(rel).join("truth.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(seq.frames.len(), 12);
        if seq.moved.is_some() {
            continue;
        }
        let ep = tasks::task(&seq.task)
            .unwrap()
            .instantiate(seq.seed)
            .unwrap();
        let prepared = prepare_episode(&ep).unwrap();
        let home = prepared.model.home().to_vec();
        SimRobot::new(prepared.world.clone(), prepared.model.clone(), home).unwrap();
        let world = prepared.world.lock();
        let scene = world.render_scene();
        let firsts = first_seen.entry(seq.id.clone()).or_default();
        for f in &seq.frames {
            let cam = camera_of(f);
            let out = render_brute_force(&scene, &cam, &RenderOptions::default());
            assert!(dir.join(rel).join(&f.image).is_file());
            for o in &seq.objects {
                let n = out.instance.iter().filter(|&&i| i == o.instance).count();
                let listed = f.visible.iter().find(|v| v.name == o.name);
                let tol = 3.max(n / 50);
                match listed {
                    Some(v) => assert!(
                        v.pixels.abs_diff(n) <= tol,
                        "{} frame {}: {} pixels written, {n} rendered again",
                        o.name,
                        f.index,
                        v.pixels
                    ),
                    None => assert!(
                        n < seq.min_pixels + tol,
                        "{} frame {}: {n} pixels rendered again but not listed",
                        o.name,
                        f.index
                    ),
                }
                if n >= seq.min_pixels {
                    firsts.entry(o.name.clone()).or_insert(f.index);
                }
                // The label bbox lies inside the projection of the object's world bounds.
                if let Some(v) = listed {
                    let (lo, hi) = world.object_aabb(&o.name).unwrap();
                    let mut px = [
                        f64::INFINITY,
                        f64::INFINITY,
                        f64::NEG_INFINITY,
                        f64::NEG_INFINITY,
                    ];
                    for c in 0..8 {
                        let p = Point3::new(
                            if c & 1 == 0 { lo.x } else { hi.x },
                            if c & 2 == 0 { lo.y } else { hi.y },
                            if c & 4 == 0 { lo.z } else { hi.z },
                        );
                        let (u, w, _) = cam.project_world(&p).expect("in front of the camera");
                        px = [px[0].min(u), px[1].min(w), px[2].max(u), px[3].max(w)];
                    }
                    let b = v.bbox.map(f64::from);
                    assert!(
                        b[0] >= px[0] - 1.0
                            && b[1] >= px[1] - 1.0
                            && b[2] <= px[2] + 1.0
                            && b[3] <= px[3] + 1.0,
                        "{} frame {}: bbox {:?} outside the projected bounds {px:?}",
                        o.name,
                        f.index,
                        v.bbox
                    );
                }
            }
        }
    }

    let mut checked: BTreeMap<QuestionType, usize> = BTreeMap::new();
    let mut sized = 0;
    for q in &questions {
        let seq = truth_of(dir.path(), q);
        let task = &seq.task;
        let centres = layout_centres(task, seq.seed);
        let centre = |phrase: &str| centres[&phrase_to_name(&seq, phrase)];
        // Every choice: distinct options, the answer one of them; a number: a positive number.
        match q.kind {
            AnswerKind::Choice => {
                let mut texts: Vec<&str> = q.options.iter().map(|o| &o[3..]).collect();
                texts.sort_unstable();
                texts.dedup();
                assert_eq!(texts.len(), q.options.len(), "{}: repeated options", q.id);
                assert!(q.options.len() >= 2, "{}", q.id);
                correct_text(q);
            }
            AnswerKind::Number => {
                assert!(q.options.is_empty());
                assert!(q.answer.parse::<f64>().unwrap() > 0.0, "{}", q.id);
            }
        }
        let between = |s: &str, a: &str, b: &str| -> String {
            let i = s.find(a).unwrap() + a.len();
            let j = s[i..].find(b).unwrap() + i;
            s[i..j].to_string()
        };
        match q.question_type {
            QuestionType::ObjectAbsDistance => {
                let a = between(&q.question, "distance between the ", " and the ");
                let b = between(&q.question, " and the ", " (in meters)");
                let want = d3(centre(&a), centre(&b));
                let got: f64 = q.answer.parse().unwrap();
                assert!((got - want).abs() < 0.015, "{}: {got} vs {want}", q.id);
            }
            QuestionType::ObjectSizeEstimation => {
                let name =
                    phrase_to_name(&seq, &between(&q.question, "height) of the ", ", measured"));
                let ep = tasks::task(task).unwrap().instantiate(0).unwrap();
                let obj = ep.scene.object(&name).unwrap();
                // Objects of one box or ball: the longest side or the diameter.
                let want = match obj.primitives.as_slice() {
                    [p] => match p.shape {
                        Shape::Cuboid { half_extents } => Some(half_extents.max() * 200.0),
                        Shape::Sphere { radius } => Some(radius * 200.0),
                        _ => None,
                    },
                    _ => None,
                };
                if let Some(want) = want {
                    let got: f64 = q.answer.parse().unwrap();
                    assert!((got - want).abs() < 0.051, "{}: {got} vs {want}", q.id);
                    sized += 1;
                }
            }
            QuestionType::ObjectCounting => {
                let got: usize = q.answer.parse().unwrap();
                if q.question.contains("block(s)") {
                    assert_eq!(got, 3, "{}", q.id);
                } else {
                    assert_eq!(got, first_seen[&seq.id].len(), "{}", q.id);
                }
            }
            QuestionType::ObjectRelDistance => {
                let x = between(&q.question, "is the closest to the ", "?");
                let mut d: Vec<(f64, &str)> = q
                    .options
                    .iter()
                    .map(|o| (d3(centre(&o[3..]), centre(&x)), &o[3..]))
                    .collect();
                d.sort_by(|a, b| a.0.total_cmp(&b.0));
                assert_eq!(d[0].1, correct_text(q), "{}", q.id);
                assert!(d[1].0 - d[0].0 > 0.03, "{}: no margin {d:?}", q.id);
            }
            QuestionType::ObjectRelDirectionEasy
            | QuestionType::ObjectRelDirectionMedium
            | QuestionType::ObjectRelDirectionHard => {
                let x = centre(&between(&q.question, "standing by the ", " and facing"));
                let y = centre(&between(&q.question, "facing the ", ", is the"));
                let z = centre(&between(&q.question, ", is the ", " to my"));
                let f = Vector3::new(y[0] - x[0], y[1] - x[1], 0.0);
                let v = Vector3::new(z[0] - x[0], z[1] - x[1], 0.0);
                let deg = f.cross(&v).z.atan2(f.dot(&v)).to_degrees();
                let want = match q.question_type {
                    QuestionType::ObjectRelDirectionEasy => {
                        if deg > 0.0 {
                            "left"
                        } else {
                            "right"
                        }
                    }
                    QuestionType::ObjectRelDirectionMedium => {
                        if deg.abs() >= 135.0 {
                            "back"
                        } else if deg > 0.0 {
                            "left"
                        } else {
                            "right"
                        }
                    }
                    _ => match (deg.abs() < 90.0, deg > 0.0) {
                        (true, true) => "front-left",
                        (true, false) => "front-right",
                        (false, true) => "back-left",
                        (false, false) => "back-right",
                    },
                };
                assert_eq!(correct_text(q), want, "{}: bearing {deg:.1}°", q.id);
            }
            QuestionType::ObjAppearanceOrder => {
                let firsts = &first_seen[&seq.id];
                let order: Vec<String> = correct_text(q)
                    .split(", ")
                    .map(|p| phrase_to_name(&seq, p))
                    .collect();
                let frames: Vec<usize> = order.iter().map(|n| firsts[n]).collect();
                assert!(
                    frames.windows(2).all(|w| w[0] < w[1]),
                    "{}: {order:?} first seen at {frames:?}",
                    q.id
                );
                // Exactly one option is that order.
                let right = q
                    .options
                    .iter()
                    .filter(|o| {
                        o[3..]
                            .split(", ")
                            .map(|p| phrase_to_name(&seq, p))
                            .eq(order.iter().cloned())
                    })
                    .count();
                assert_eq!(right, 1, "{}", q.id);
            }
            QuestionType::ObjectMovedDirection => {
                let m = seq.moved.as_ref().unwrap();
                let f0 = &seq.frames[0];
                let cam = camera_of(f0);
                let r = cam.world_from_camera.rotation * Vector3::x();
                let fw = cam.world_from_camera.rotation * Vector3::z();
                let (r, fw) = (
                    Vector3::new(r.x, r.y, 0.0).normalize(),
                    Vector3::new(fw.x, fw.y, 0.0).normalize(),
                );
                let d = Vector3::new(
                    m.end_centre[0] - m.start_centre[0],
                    m.end_centre[1] - m.start_centre[1],
                    0.0,
                );
                let (a, b) = (d.dot(&r), d.dot(&fw));
                let want = if a.abs() > b.abs() {
                    if a > 0.0 {
                        "right"
                    } else {
                        "left"
                    }
                } else if b > 0.0 {
                    "away from the camera"
                } else {
                    "toward the camera"
                };
                assert_eq!(correct_text(q), want, "{}", q.id);
                // The move the truth records is where the world puts the object.
                assert!(d3(m.start_centre, m.end_centre) >= 0.05, "{}", q.id);
            }
        }
        *checked.entry(q.question_type).or_default() += 1;
    }
    assert_eq!(checked.values().sum::<usize>(), questions.len());
    assert!(sized >= 3, "the three blocks' sizes are checked");
}

#[test]
fn the_same_options_give_the_same_bytes() {
    let (a, b) = (TempDir::new("spatial-det-a"), TempDir::new("spatial-det-b"));
    for d in [&a, &b] {
        generate(&options(d.path(), &["cup_on_plate"], 8), &mut |_| {}).unwrap();
    }
    let (fa, fb) = (
        super::common::read_tree(a.path()),
        super::common::read_tree(b.path()),
    );
    // Two sequences of 8 frames, their truths and descriptions, and the questions.
    assert_eq!(
        fa.len(),
        2 * (8 + 2) + 1,
        "{:?}",
        fa.keys().collect::<Vec<_>>()
    );
    assert!(fa == fb, "two runs with the same options differ");
}

#[test]
fn mean_relative_accuracy_is_vsi_bench_s() {
    // Exact: every threshold passes.
    assert_eq!(mean_relative_accuracy(2.0, 2.0), 1.0);
    // 10 % off: θ = 0.5 … 0.9 pass (|ŷ − y|/y ≤ 1 − θ, numpy's thresholds), 0.95 fails.
    assert_eq!(mean_relative_accuracy(1.1, 1.0), 0.9);
    assert_eq!(mean_relative_accuracy(0.9, 1.0), 0.9);
    assert_eq!(mean_relative_accuracy(11.0, 10.0), 0.9);
    // 5 % off passes all ten; 20 % off passes θ ≤ 0.8 (seven); 50 % off only θ = 0.5.
    assert_eq!(mean_relative_accuracy(1.05, 1.0), 1.0);
    assert_eq!(mean_relative_accuracy(1.2, 1.0), 0.7);
    assert_eq!(mean_relative_accuracy(1.5, 1.0), 0.1);
    assert_eq!(mean_relative_accuracy(0.5, 1.0), 0.1);
    assert_eq!(mean_relative_accuracy(3.0, 1.0), 0.0);
    assert_eq!(mean_relative_accuracy(f64::NAN, 1.0), 0.0);
    assert_eq!(mean_relative_accuracy(1.0, 0.0), 0.0);

    let number = |answer: &str| SpatialQuestion {
        id: "x".into(),
        sequence: "sequences/x".into(),
        fps: 2.0,
        question_type: QuestionType::ObjectAbsDistance,
        question: "?".into(),
        options: Vec::new(),
        answer: answer.into(),
        kind: AnswerKind::Number,
    };
    let q = number("0.42");
    assert_eq!(score(&q, "0.42"), 1.0);
    assert_eq!(
        score(&q, "<think>about half a metre</think><answer>0.42</answer>"),
        1.0
    );
    assert_eq!(score(&q, "0.42 m."), 1.0);
    assert_eq!(score(&q, "0.462"), 0.9);
    assert_eq!(score(&q, "about 0.42"), 0.0, "the first word is read");
    assert_eq!(score(&q, "<answer>far</answer>"), 0.0);
    assert_eq!(score(&q, ""), 0.0);
    assert_eq!(read_number(" 3. "), Some(3.0));
    assert_eq!(read_number("<answer>12 cm</answer>"), Some(12.0));
}

#[test]
fn letters_are_scored_by_exact_match() {
    let q = SpatialQuestion {
        id: "x".into(),
        sequence: "sequences/x".into(),
        fps: 2.0,
        question_type: QuestionType::ObjectRelDistance,
        question: "?".into(),
        options: vec!["A. can".into(), "B. bowl".into(), "C. orange".into()],
        answer: "B".into(),
        kind: AnswerKind::Choice,
    };
    for right in [
        "B",
        "b",
        "B.",
        "<think>A is farther than B.</think><answer>B</answer>",
        "The answer is B",
        "(B) bowl",
    ] {
        assert_eq!(score(&q, right), 1.0, "{right:?}");
    }
    for wrong in ["A", "<think>B?</think><answer>C</answer>", "bowl", ""] {
        assert_eq!(score(&q, wrong), 0.0, "{wrong:?}");
    }
}

#[test]
fn the_tally_averages_types_and_merges_directions() {
    let mut t = SpatialTally::default();
    assert_eq!(t.overall(), None);
    t.add(QuestionType::ObjectCounting, 1.0);
    t.add(QuestionType::ObjectCounting, 0.5);
    t.add(QuestionType::ObjectRelDirectionEasy, 1.0);
    t.add(QuestionType::ObjectRelDirectionHard, 0.0);
    t.add(QuestionType::ObjAppearanceOrder, 0.0);
    assert_eq!(t.mean(QuestionType::ObjectCounting), Some(0.75));
    // Rows: counting 0.75, relative direction (1 + 0) / 2, appearance 0: overall 1.25 / 3.
    assert!((t.overall().unwrap() - 1.25 / 3.0).abs() < 1e-12);
    let table = t.to_string();
    assert!(table.contains("object_counting"), "{table}");
    assert!(table.contains("object_rel_direction "), "{table}");
    assert!(!table.contains("object_rel_direction_easy"), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("object_counting") && l.contains("75.00") && l.ends_with("MRA")),
        "{table}"
    );
    assert!(
        table.lines().last().unwrap().starts_with("overall"),
        "{table}"
    );
    assert!(table.contains("41.67"), "{table}");
}

#[test]
fn the_describer_names_every_object_in_view() {
    let dir = TempDir::new("spatial-describe");
    let summary = generate(&options(dir.path(), &["fruit_in_bowl"], 12), &mut |_| {}).unwrap();
    assert_eq!(summary.sequences, 2, "{:?}", summary.skipped);
    let mut appeared = 0;
    for id in [
        "tabletop-fruit_in_bowl-s0",
        "tabletop-fruit_in_bowl-s0-moved",
    ] {
        let folder = dir.join("sequences").join(id);
        let seq: SequenceTruth =
            serde_json::from_str(&std::fs::read_to_string(folder.join("truth.json")).unwrap())
                .unwrap();
        let written: Vec<String> = serde_json::from_str(
            &std::fs::read_to_string(folder.join("descriptions.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(written.len(), seq.frames.len());
        for (i, f) in seq.frames.iter().enumerate() {
            let text = describe(&seq, i);
            assert_eq!(text, written[i], "frame {i}: written = described again");
            for v in &f.visible {
                assert!(
                    text.contains(&format!("the {} ", v.phrase)),
                    "frame {i}: {text}"
                );
            }
            // The "I see …" sentence names nothing out of view.
            let seen_part = text
                .split(" New in view")
                .next()
                .and_then(|s| s.split(" Out of view").next())
                .and_then(|s| s.split(" The ").next())
                .unwrap_or("");
            for o in seq.objects.iter().filter(|o| !f.sees(&o.name)) {
                let said = format!("the {} ", o.phrase);
                assert!(
                    !seen_part.contains(&said),
                    "frame {i} does not see the {}: {text}",
                    o.phrase
                );
            }
            if i > 0 {
                let new = f.visible.iter().any(|v| !seq.frames[i - 1].sees(&v.name));
                assert_eq!(text.contains("New in view"), new, "frame {i}: {text}");
                appeared += usize::from(new);
                assert!(text.contains("The camera turned"), "frame {i}: {text}");
            }
        }
        if let Some(m) = &seq.moved {
            let text = describe(&seq, m.first_frame_after);
            let f = &seq.frames[m.first_frame_after];
            let phrase = &seq.object(&m.object).unwrap().phrase;
            if f.sees(&m.object) && seq.frames[m.first_frame_after - 1].sees(&m.object) {
                assert!(text.contains(&format!("The {phrase} has moved")), "{text}");
            }
        }
    }
    assert!(appeared > 0, "the walk brings objects into view");
}
