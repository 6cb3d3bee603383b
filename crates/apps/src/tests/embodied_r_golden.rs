//! Embodied-R's rewards (`train::consistency`) against the released Python on every case of
//! `tests/fixtures/embodied_r_golden.jsonl` (written by `tests/fixtures/gen_embodied_r_golden.py`
//! from the released files): both letter normalisers, ms-swift's `format`, `extract_question`,
//! `extract_answer_from_think`, and whole rewards (accuracy, format, consistency, the 0.7/0.1/0.2
//! sum) with the reference model replaced by the generator's deterministic stub, implemented
//! here identically. The stub's calls (system, user prompt, max tokens, temperature) must be the
//! released ones, call for call.

use pointact::train::consistency::{
    choice_accuracy, consistency, embodied_r_score, extract_answer_from_think, extract_question,
    format_reward, normalize_choice, normalize_consistency, ReferenceError, ReferenceModel,
};
use serde_json::Value;

const THINK_MARK: &str = "\n\nThinking process: ";
const THINK_END: &str = "\n\nPlease respond with only one letter (A-H):";

#[derive(Debug, Clone, PartialEq)]
struct Call {
    system: String,
    user: String,
    max_tokens: usize,
    temperature: f64,
}

/// The generator's stub (see its docstring).
#[derive(Default)]
struct Stub {
    calls: Vec<Call>,
}

impl ReferenceModel for Stub {
    fn reply(
        &mut self,
        system: &str,
        user: &str,
        max_tokens: usize,
        temperature: f64,
    ) -> Result<String, ReferenceError> {
        self.calls.push(Call {
            system: system.into(),
            user: user.into(),
            max_tokens,
            temperature,
        });
        let start = user.find(THINK_MARK).expect("prompt has a think part") + THINK_MARK.len();
        let end = user.rfind(THINK_END).expect("prompt has its ending");
        let think = &user[start..end];
        if think.contains("[ref-raise]") {
            return Err(ReferenceError::Other("stub: reference model down".into()));
        }
        if think.contains("[ref-empty]") {
            return Ok(String::new());
        }
        if let Some(i) = think.find("[ref=") {
            let rest = &think[i + 5..];
            if let Some(j) = rest.find(']') {
                return Ok(rest[..j].to_owned());
            }
        }
        Ok(think
            .chars()
            .rev()
            .find(|c| ('A'..='H').contains(c))
            .map_or_else(|| "none".to_owned(), String::from))
    }
}

fn cases() -> Vec<Value> {
    let path = concat!(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../.."),
        "/tests/fixtures/embodied_r_golden.jsonl"
    );
    std::fs::read_to_string(path)
        .expect("golden file")
        .lines()
        .map(|l| serde_json::from_str(l).expect("golden line is JSON"))
        .collect()
}

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v[k].as_str()
        .unwrap_or_else(|| panic!("{k} is not a string in {v}"))
}

fn close(a: f64, b: &Value) -> bool {
    (a - b.as_f64().expect("number")).abs() <= 1e-6
}

#[test]
fn every_golden_case_matches_the_released_python() {
    let cases = cases();
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    let mut failures = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        let kind = s(c, "kind");
        *counts.entry(kind.to_owned()).or_default() += 1;
        let mut fail = |what: String| failures.push(format!("case {i} ({kind}): {what}"));
        match kind {
            "normalize" => {
                let text = s(c, "text");
                if normalize_choice(text) != s(c, "choice") {
                    fail(format!("choice({text:?}) = {:?}", normalize_choice(text)));
                }
                if normalize_consistency(text) != s(c, "consistency") {
                    fail(format!(
                        "consistency({text:?}) = {:?}",
                        normalize_consistency(text)
                    ));
                }
                if !close(format_reward(text), &c["format"]) {
                    fail(format!("format({text:?})"));
                }
            }
            "extract_question" => {
                let got = extract_question(s(c, "text"));
                if got != s(c, "out") {
                    fail(format!("{:?} -> {got:?}", s(c, "text")));
                }
            }
            "extract_answer_from_think" => {
                let got = extract_answer_from_think(s(c, "text"));
                if got != s(c, "out") {
                    fail(format!("{:?} -> {got:?}", s(c, "text")));
                }
            }
            "reward" => {
                let completion = s(c, "completion");
                let solution = c["solution"].as_str();
                let question = c["question"].as_str();
                let mut stub = Stub::default();
                let got = consistency(completion, solution, question, &mut stub);
                if !close(got, &c["consistency"]) {
                    fail(format!(
                        "consistency {got} for {completion:?} / {solution:?} / {question:?}"
                    ));
                }
                let want_calls: Vec<Call> = c["calls"]
                    .as_array()
                    .expect("calls")
                    .iter()
                    .map(|k| Call {
                        system: s(k, "system").into(),
                        user: s(k, "user").into(),
                        max_tokens: k["max_tokens"].as_u64().expect("max_tokens") as usize,
                        temperature: k["temperature"].as_f64().expect("temperature"),
                    })
                    .collect();
                if stub.calls != want_calls {
                    fail(format!(
                        "reference calls differ for {completion:?}: {:?} vs {want_calls:?}",
                        stub.calls
                    ));
                }
                if !close(format_reward(completion), &c["format"]) {
                    fail(format!("format {completion:?}"));
                }
                if let Some(solution) = solution {
                    if !close(choice_accuracy(completion, solution), &c["accuracy"]) {
                        fail(format!("accuracy {completion:?} vs {solution:?}"));
                    }
                    let mut stub = Stub::default();
                    let score = embodied_r_score(completion, solution, question, &mut stub);
                    if !close(score.overall, &c["overall"])
                        || !close(score.accuracy, &c["accuracy"])
                        || !close(score.format, &c["format"])
                        || !close(score.consistency, &c["consistency"])
                    {
                        fail(format!("score {score:?} for {completion:?}"));
                    }
                }
            }
            other => panic!("unknown golden kind {other}"),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    assert!(counts["reward"] >= 200, "{counts:?}");
    assert!(counts["normalize"] >= 50, "{counts:?}");
}
