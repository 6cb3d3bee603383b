//! The environment reward (`train::env_reward`): a policy's points executed in the
//! simulator, the judge's verdict the reward. Questions are made from tasks (the oracle records
//! the other answers); scoring runs oracle-free. A right answer earns the full reward, a wrong one
//! (another object, a place off the target, a malformed trace) only its format terms.

use pointact::pointing::Ability;
use pointact::train::env_reward::{env_question, env_reward, EnvQuestion, EnvRewardError};

/// A response in Embodied-R1's format with `points` (frame pixels) in the policy's image pixels.
fn response(q: &EnvQuestion, points: &[[f64; 2]]) -> String {
    let [w, h] = q.truth.image;
    let [mw, mh] = q.truth.model_image;
    let p: Vec<[i64; 2]> = points
        .iter()
        .map(|p| {
            [
                (p[0] * mw as f64 / w as f64).round() as i64,
                (p[1] * mh as f64 / h as f64).round() as i64,
            ]
        })
        .collect();
    format!(
        "<think>I look at the image.</think><answer><point>{}</point></answer>",
        serde_json::to_string(&p).unwrap()
    )
}

#[test]
fn a_right_place_earns_the_reward_and_a_place_on_the_wrong_side_does_not() {
    let q = super::common::block_on(env_question(
        "tabletop/carrot_left_of_plate",
        1,
        Ability::Rrg,
    ))
    .unwrap();
    assert!(q.ground_truth.starts_with("<type>env</type>{"));
    assert!(q.prompt.contains(&q.truth.query));
    assert!(
        q.truth.answers.iter().any(|a| a.ability == "reg"),
        "the object's answer is recorded: {:?}",
        q.truth.answers
    );
    let right = env_reward(&response(&q, &q.reference), &q.ground_truth).unwrap();
    assert_eq!(
        right.components[3],
        ("env_success", 1.0),
        "{}",
        right.detail
    );
    assert!((right.overall() - 1.0).abs() < 1e-12);
    // The same answer 250 px to the image right: right of the plate, not left of it.
    let [w, _] = q.truth.image;
    let off: Vec<[f64; 2]> = q
        .reference
        .iter()
        .map(|p| [(p[0] + 250.0).min(w as f64 - 5.0), p[1]])
        .collect();
    let wrong = env_reward(&response(&q, &off), &q.ground_truth).unwrap();
    assert_eq!(
        wrong.components[3],
        ("env_success", 0.0),
        "{}",
        wrong.detail
    );
    assert!((wrong.overall() - 0.2).abs() < 1e-12, "format terms only");
}

#[test]
fn pointing_at_another_object_fails_and_a_malformed_trace_scores_its_format_only() {
    let q =
        super::common::block_on(env_question("tabletop/can_in_basket", 0, Ability::Reg)).unwrap();
    let right = env_reward(&response(&q, &q.reference), &q.ground_truth).unwrap();
    assert_eq!(right.components[3].1, 1.0, "{}", right.detail);
    // The answer for the basket given for the can: the basket is grasped (or nothing is).
    let basket = q
        .truth
        .answers
        .iter()
        .find(|a| a.query.contains("basket"))
        .expect("the basket was asked for")
        .points
        .clone();
    let wrong = env_reward(&response(&q, &basket), &q.ground_truth).unwrap();
    assert_eq!(wrong.components[3].1, 0.0, "{}", wrong.detail);

    let t =
        super::common::block_on(env_question("tabletop/can_in_basket", 0, Ability::Vtg)).unwrap();
    assert_eq!(t.truth.branch, "v");
    let seven = &t.reference[..7];
    let s = env_reward(&response(&t, seven), &t.ground_truth).unwrap();
    assert_eq!(s.components[3].1, 0.0, "{}", s.detail);
    assert!((s.overall() - 0.2).abs() < 1e-12);
    let eight = env_reward(&response(&t, &t.reference), &t.ground_truth).unwrap();
    assert_eq!(eight.components[3].1, 1.0, "{}", eight.detail);
}

#[test]
fn a_bad_ground_truth_is_a_typed_error() {
    let r = "<think>x</think><answer><point>[[1, 2]]</point></answer>";
    for gt in [
        "no type",
        "<type>env</type>{not json",
        "<type>env</type>{\"task\": \"tabletop/none\"}",
    ] {
        let e = env_reward(r, gt).unwrap_err();
        assert!(matches!(e, EnvRewardError::GroundTruth(_)), "{gt}: {e}");
    }
    let mut q =
        super::common::block_on(env_question("tabletop/fruit_in_bowl", 1, Ability::Rrg)).unwrap();
    q.truth.task = "tabletop/no_such_task".into();
    let gt = format!(
        "<type>env</type>{}",
        serde_json::to_string(&q.truth).unwrap()
    );
    let e = env_reward(r, &gt).unwrap_err();
    assert!(matches!(e, EnvRewardError::Task(_)), "{e}");
}
