//! Robot-R1 questions from oracle demonstrations in the simulator (`train::robot_r1`): every
//! question has four options and exactly one correct, equal to the recorded truth; position
//! options are at least δ apart; the same seed gives the same files; the recording arm records
//! what `SimRobot` does; the reward grades format and letter.

use std::collections::BTreeMap;
use std::path::Path;

use super::common::{block_on, TempDir};
use pointact::executor::Event;
use pointact::runner::{run_episode, EpisodeOptions};
use pointact::train::robot_r1::{
    direction_label, format_xyz, generate, record_demonstration, reward, QuestionKind,
    QuestionOptions, QuestionRecord, RobotR1Error, DEFAULT_DELTA_M, LETTERS,
};

const TASK: &str = "tabletop/pepper_in_pan";

fn records(path: &Path) -> Vec<QuestionRecord> {
    std::fs::read_to_string(path)
        .expect("jsonl written")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a record"))
        .collect()
}

fn dist(a: [f64; 3], b: [f64; 3]) -> f64 {
    (0..3).map(|i| (a[i] - b[i]).powi(2)).sum::<f64>().sqrt()
}

#[test]
fn every_question_has_exactly_one_correct_option_and_distractors_delta_apart() {
    let dir = TempDir::new("robot-r1-questions");
    let options = QuestionOptions::default();
    let summary = generate(TASK, [0, 1], &options, dir.path()).unwrap();
    assert_eq!(summary.episodes, 2);
    assert_eq!(summary.demonstrations, 2, "{:?}", summary.failed);
    let recs = records(&summary.jsonl);
    assert_eq!(recs.len(), summary.questions);
    assert!(summary.waypoint >= 10 && summary.state >= 10 && summary.movement >= 10);
    assert_eq!(
        summary.waypoint + summary.state + summary.movement,
        recs.len()
    );
    let delta = DEFAULT_DELTA_M;
    let mut letters = BTreeMap::<String, usize>::new();
    let mut ids = std::collections::BTreeSet::new();
    for r in &recs {
        assert!(ids.insert(r.id.clone()), "duplicate id {}", r.id);
        assert_eq!(r.task_type, "robot_r1");
        assert_eq!(r.task_kind, TASK);
        assert_eq!(r.ground_truth, format!("<type>robot_r1</type>{}", r.answer));
        *letters.entry(r.answer.clone()).or_default() += 1;
        let correct = LETTERS
            .iter()
            .position(|l| l.to_string() == r.answer)
            .expect("answer is A-D");
        assert_eq!(r.options.len(), 4);
        // The prompt lists the options in letter order and carries the metadata.
        for (l, o) in LETTERS.iter().zip(&r.options) {
            assert!(
                r.question.contains(&format!("\n{l}. {o}\n")),
                "{}",
                r.question
            );
        }
        assert!(r.question.contains("+x points forward"));
        assert!(r.question.contains("centre of the table top is at ("));
        assert!(r.question.contains("fingers open to 8.6 cm"));
        assert!(r.question.contains(&r.instruction));
        let image = dir.join(&r.image);
        let img = image::open(&image).expect("image written").to_rgb8();
        assert_eq!(img.dimensions(), (640, 480));
        match r.question_type {
            QuestionKind::Waypoint | QuestionKind::State => {
                let truth = if r.question_type == QuestionKind::Waypoint {
                    assert!(r.question.contains(&format_xyz(r.state_xyz)));
                    r.next_xyz.expect("a waypoint question has a next waypoint")
                } else {
                    // The state question does not tell the state.
                    assert!(!r.question.contains("The end effector is at"));
                    r.state_xyz
                };
                let xyz = r.option_xyz.as_ref().expect("positions");
                for (p, text) in xyz.iter().zip(&r.options) {
                    assert_eq!(&format_xyz(*p), text);
                }
                // Exactly one option is the truth (as printed, to the millimetre) ...
                let matching: Vec<usize> = (0..4)
                    .filter(|&i| r.options[i] == format_xyz(truth))
                    .collect();
                assert_eq!(matching, vec![correct], "{r:?}");
                assert!(dist(xyz[correct], truth) < 1e-3);
                // ... and all four are at least δ apart.
                for i in 0..4 {
                    for j in i + 1..4 {
                        assert!(dist(xyz[i], xyz[j]) >= delta - 1e-9, "{r:?}");
                    }
                }
            }
            QuestionKind::Movement => {
                let next = r.next_xyz.expect("next waypoint");
                let d = [0, 1, 2].map(|i| next[i] - r.state_xyz[i]);
                let label = direction_label(d, options.slight_m);
                let matching: Vec<usize> = (0..4).filter(|&i| r.options[i] == label).collect();
                assert_eq!(matching, vec![correct], "{r:?}");
                let word = label.rsplit(' ').next().unwrap();
                for (i, o) in r.options.iter().enumerate() {
                    if i != correct {
                        assert!(!o.ends_with(word), "{r:?}");
                    }
                }
                assert!(dist(next, r.state_xyz) >= options.min_move_m);
            }
        }
        // The reward of this question: right letter with format 2, wrong letter 1, no tags 0.
        let right = format!(
            "<think>Looking at the gripper.</think>\n<answer>{}</answer>",
            r.answer
        );
        assert_eq!(reward(&right, &r.ground_truth).unwrap().overall, 2.0);
        let wrong = LETTERS[(correct + 1) % 4];
        let wrong = format!("<think>Hmm.</think><answer>{wrong}</answer>");
        assert_eq!(reward(&wrong, &r.ground_truth).unwrap().overall, 1.0);
        assert_eq!(
            reward("I cannot tell.", &r.ground_truth).unwrap().overall,
            0.0
        );
    }
    // The shuffle uses all four letters.
    assert_eq!(letters.len(), 4, "{letters:?}");
}

#[test]
fn same_seed_same_files_another_seed_other_questions() {
    let a = TempDir::new("robot-r1-a");
    let b = TempDir::new("robot-r1-b");
    let c = TempDir::new("robot-r1-c");
    let options = QuestionOptions {
        sample_every_s: 1.0,
        ..QuestionOptions::default()
    };
    let sa = generate(TASK, [3], &options, a.path()).unwrap();
    let sb = generate(TASK, [3], &options, b.path()).unwrap();
    let sc = generate(TASK, [4], &options, c.path()).unwrap();
    let read = |p: &Path| std::fs::read(p).unwrap();
    assert_eq!(read(&sa.jsonl), read(&sb.jsonl));
    assert_ne!(read(&sa.jsonl), read(&sc.jsonl));
    let mut names: Vec<_> = std::fs::read_dir(a.join("images"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names.len(), sa.images);
    for n in names {
        assert_eq!(
            read(&a.join("images").join(&n)),
            read(&b.join("images").join(&n))
        );
    }
}

#[test]
fn the_recording_arm_moves_like_sim_robot() {
    let options = QuestionOptions::default();
    let demo = record_demonstration(TASK, 2, &options).unwrap();
    assert!(demo.success, "{}", demo.detail);
    // The same episode through `run_episode` (SimRobot): the Moved events' states.
    let episode = pointact::sim::tasks::task(TASK)
        .unwrap()
        .instantiate(2)
        .unwrap();
    let mut moved = Vec::new();
    let result = block_on(run_episode(
        &episode,
        &EpisodeOptions::default(),
        &mut |e: Event<'_>| {
            if let Event::Moved { states, .. } = e {
                moved.extend(states.iter().cloned());
            }
        },
    ))
    .unwrap();
    assert!(result.success);
    // Every step the plan's Moved events report is in the recording, equal; the recording also
    // keeps the steps `run_task` holds the arm still for before looking again (not reported).
    let mut extra = 0;
    let mut next = moved.iter().peekable();
    for (i, d) in demo.states.iter().enumerate().skip(1) {
        match next.peek() {
            Some(m) if m.stamp_s == Some(d.stamp_s) => {
                assert_eq!(d.q, m.q);
                assert_eq!(d.gripper_width, m.gripper_width);
                next.next();
            }
            _ => {
                assert_eq!(
                    d.q,
                    demo.states[i - 1].q,
                    "an unreported step moved the arm"
                );
                extra += 1;
            }
        }
    }
    assert!(
        next.next().is_none(),
        "a reported step is not in the recording"
    );
    assert!(extra < demo.states.len() / 10, "{extra}");
    // Keyframes: the grasp closes and the release opens the gripper once each.
    let changes = demo
        .keyframes
        .windows(2)
        .filter(|w| demo.states[w[0]].gripper_closed != demo.states[w[1]].gripper_closed)
        .count();
    assert_eq!(changes, 2, "{:?}", demo.keyframes);
    assert_eq!(demo.keyframes.last(), Some(&(demo.states.len() - 1)));
}

#[test]
fn bad_options_and_tasks_are_errors() {
    let dir = TempDir::new("robot-r1-bad");
    let bad = QuestionOptions {
        delta_m: 0.0,
        ..QuestionOptions::default()
    };
    assert!(matches!(
        generate(TASK, [0], &bad, dir.path()),
        Err(RobotR1Error::Options(_))
    ));
    let huge = QuestionOptions {
        delta_m: 5.0,
        sample_every_s: 4.0,
        ..QuestionOptions::default()
    };
    assert!(matches!(
        generate(TASK, [0], &huge, dir.path()),
        Err(RobotR1Error::Distractors { .. })
    ));
    assert!(matches!(
        generate(
            "tabletop/no_such_task",
            [0],
            &QuestionOptions::default(),
            dir.path()
        ),
        Err(RobotR1Error::Task { .. })
    ));
}

#[test]
fn malformed_ground_truths_and_responses() {
    let gt = "<type>robot_r1</type>C";
    assert_eq!(
        reward("<think>x</think><answer>c</answer>", gt)
            .unwrap()
            .overall,
        2.0
    );
    // Letters in the reasoning do not count; the answer block does.
    let r = reward(
        "<think>Not C, so the answer B.</think><answer>C.</answer>",
        gt,
    )
    .unwrap();
    assert_eq!((r.format, r.answer), (1.0, 1.0));
    let r = reward("<think>C</think><answer>B</answer>", gt).unwrap();
    assert_eq!((r.format, r.answer), (1.0, 0.0));
    let r = reward("<think></think><answer></answer>", gt).unwrap();
    assert_eq!((r.format, r.answer), (1.0, 0.0));
    assert!(reward("C", "C").is_err());
    assert!(reward("C", "<type>robot_r1</type>").is_err());
}
