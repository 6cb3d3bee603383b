//! Parity of `pointact::train::rewards` with Embodied-R1's released reward functions.
//!
//! `tests/fixtures/rewards_golden.jsonl` holds cases scored by the released Python
//! (`embodiedr1_compute_score`, see `tests/fixtures/gen_rewards_golden.py` for the commit, the pip
//! pins and how to regenerate). Every case must give the same keys in the same order and every
//! component within 1e-6 (NaN equal to NaN), or the same Python exception class. A proptest then
//! checks that no input panics.

use std::collections::BTreeSet;

use pointact::train::rewards::{score, RewardError, TaskType};
use proptest::prelude::*;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;

const FIXTURE: &str = concat!(
    concat!(env!("CARGO_MANIFEST_DIR"), "/../.."),
    "/tests/fixtures/rewards_golden.jsonl"
);

/// A JSON object with its keys in file order (serde_json's `Map` sorts them).
struct Ordered(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for Ordered {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Ordered;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Ordered, A::Error> {
                let mut out = Vec::new();
                while let Some(kv) = m.next_entry::<String, Value>()? {
                    out.push(kv);
                }
                Ok(Ordered(out))
            }
        }
        d.deserialize_map(V)
    }
}

#[derive(Deserialize)]
struct Case {
    id: u64,
    task: String,
    response: String,
    ground_truth: String,
    result: Option<Ordered>,
    error: Option<String>,
}

fn golden_value(v: &Value) -> f64 {
    match v {
        Value::Number(n) => n.as_f64().unwrap_or(f64::NAN),
        Value::String(s) if s == "nan" => f64::NAN,
        Value::String(s) if s == "inf" => f64::INFINITY,
        Value::String(s) if s == "-inf" => f64::NEG_INFINITY,
        other => panic!("unexpected golden value {other}"),
    }
}

fn close(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= 1e-6
}

#[test]
fn golden_cases_match_the_released_python() {
    let text = std::fs::read_to_string(FIXTURE).expect("fixture readable");
    let mut failures = Vec::new();
    let mut n = 0usize;
    let mut types = BTreeSet::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let case: Case = serde_json::from_str(line).expect("fixture line is a case");
        let id = case.id;
        n += 1;
        let got = score(&case.response, &case.ground_truth);
        match (&got, &case.result, &case.error) {
            (Ok(s), Some(Ordered(want)), None) => {
                types.insert(s.task());
                let got_keys: Vec<&str> = s.components().iter().map(|(k, _)| *k).collect();
                let want_keys: Vec<&str> = want.iter().map(|(k, _)| k.as_str()).collect();
                if got_keys != want_keys {
                    failures.push(format!("#{id}: keys {got_keys:?} != {want_keys:?}"));
                    continue;
                }
                for ((k, v), (_, w)) in s.components().iter().zip(want) {
                    let w = golden_value(w);
                    if !close(*v, w) {
                        failures.push(format!("#{id} [{}] {k}: got {v}, released {w}", case.task));
                    }
                }
            }
            (Err(e), None, Some(class)) => {
                if e.python_exception() != class {
                    failures.push(format!(
                        "#{id}: raised {} ({e}), released {class}",
                        e.python_exception()
                    ));
                }
            }
            _ => failures.push(format!(
                "#{id} [{}]: got {:?}, released {}",
                case.task,
                got.as_ref()
                    .map(|s| s.components().to_vec())
                    .map_err(RewardError::python_exception),
                case.error.as_deref().unwrap_or("a score")
            )),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {n} golden cases differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(n >= 500, "only {n} golden cases");
    assert_eq!(
        types.len(),
        TaskType::ALL.len(),
        "task types covered: {types:?}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Arbitrary text around the tags and payloads never panics, whatever the type.
    #[test]
    fn never_panics(
        ty in prop::sample::select(vec![
            "general_qa", "spatial_qa", "point_ref", "fsd_free_point", "fsd_visual_trace",
            "point_rec", "grounding_rec", "3d_position", "other",
        ]),
        pre in ".{0,20}",
        body in prop_oneof![
            ".{0,80}",
            "[\\[\\]0-9eE.,+\\- NaInfity\"truefalsn{}:]{0,80}",
            "[0-9a-z+\\-*/^(). \\\\{}%$,]{0,40}",
        ],
        depth in ".{0,40}",
        payload in prop_oneof![
            ".{0,60}",
            "[\\[\\]0-9eE.,+\\- NaInfity\"{}:bboxfree_pointstrajectorysegmentationobjectdirectionleft]{0,120}",
        ],
    ) {
        let response = format!("{pre}<think>t</think><answer><point>{body}</point><depth>{depth}</depth>{body}</answer>");
        let gt = format!("<type>{ty}</type>{payload}");
        let _ = score(&response, &gt);
        let _ = score(&body, &format!("<type>{ty}</type>{body}"));
    }
}

#[test]
fn huge_and_hostile_inputs_do_not_panic() {
    let big_think = format!(
        "<think>{}</think><answer><point>[[1, 2]]</point></answer>",
        "x".repeat(1 << 20)
    );
    for ty in TaskType::ALL {
        let gt = format!("<type>{}</type>[[1, 2]]", ty.name());
        assert!(score(&big_think, &gt).is_ok());
    }
    let many_points = format!(
        "<point>[{}[1, 2]]</point>",
        "[1e308, -1e308], ".repeat(50_000)
    );
    let _ = score(&many_points, "<type>point_ref</type>[[0, 0]]");
    let _ = score(
        &many_points,
        "<type>point_rec</type>{\"segmentation\": [[0,0],[1,0],[0,1]]}",
    );
    let deep = format!("<point>{}</point>", "[".repeat(1 << 20));
    let _ = score(&deep, "<type>point_ref</type>[[0, 0]]");
    let huge_int = format!("<point>[[{}, 1]]</point>", "9".repeat(4300));
    let _ = score(
        &huge_int,
        "<type>fsd_visual_trace</type>{\"trajectory\": [[0, 0]]}",
    );
    let expr = format!("<answer>{}</answer>", "(x+1)^9*".repeat(120));
    let _ = score(&expr, "<type>general_qa</type>(1+x)^9");
    let long_sum = format!("<answer>{}1</answer>", "1/2+".repeat(200_000));
    let _ = score(&long_sum, "<type>general_qa</type>5");
    let latex = format!("<answer>{}</answer>", "\\frac{".repeat(100_000));
    let _ = score(&latex, "<type>general_qa</type>1");
}
