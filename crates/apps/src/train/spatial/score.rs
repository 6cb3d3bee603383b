//! VSI-Bench's scoring (Yang et al. 2024, arXiv 2412.14171, the metric design of its evaluation
//! setup; the code: `lmms_eval/tasks/vsibench/utils.py` in github.com/vision-x-nyu/thinking-in-space
//! at commit 51e089c, which this follows where the two differ).
//!
//! * **Multiple choice**: exact match of the option letter. Their code compares the first
//!   space-separated word of the reply (trailing `.` dropped) with the letter; a reasoning model's
//!   reply (`<think>…</think><answer>B</answer>`) would fail that, so the letter is read as
//!   Robot-R1's reward reads it (`robot_r1::response_letter`: the first `<answer>` block, else
//!   the whole reply, through Embodied-R's letter normaliser `consistency::normalize_choice`).
//! * **Numbers**: Mean Relative Accuracy, `MRA = mean over θ ∈ C of 1[|ŷ − y| / y ≤ 1 − θ]`
//!   with `C = numpy.linspace(0.5, 0.95, 10)`. The paper writes `<`; the code, which produced
//!   their tables, has `≤` and thresholds computed as numpy does (`0.5 + i · (0.45 / 9)`, the
//!   last exactly 0.95), reproduced here to the bit: 10 % off scores 0.9 (θ = 0.5 … 0.9 pass;
//!   `1 − 0.8999999999999999` is just above 0.1), 5 % off 1.0, 50 % off 0.1, 100 % off 0.
//!   The number read is their `fuzzy_matching`: the first space-separated word, trailing dots
//!   dropped, of the `<answer>` block (or of the whole reply without one); one that is not a
//!   number scores 0 (their `to_float` gives `None`, the `TypeError` scores the worst case, 0).
//! * **The table** ([`SpatialTally`]): the mean per question type; VSI-Bench averages its three
//!   relative-direction levels into one `object_rel_direction` row, and the overall score is the
//!   mean over rows (not over questions), as their `vsibench_aggregate_results` does.

use std::collections::BTreeMap;
use std::fmt;

use super::questions::{AnswerKind, QuestionType, SpatialQuestion};
use crate::train::consistency::ANSWER_TAG;
use crate::train::robot_r1::response_letter;

/// VSI-Bench's confidence thresholds, as `numpy.linspace(0.5, 0.95, 10)` computes them.
fn thresholds() -> [f64; 10] {
    let (start, stop) = (0.5_f64, 0.95_f64);
    let step = (stop - start) / 9.0;
    let mut c = std::array::from_fn(|i| i as f64 * step + start);
    c[9] = stop;
    c
}

/// Mean Relative Accuracy of `pred` against `target` (see the module docs); 0 for a target that
/// is not a positive finite number or a prediction that is not finite.
pub(crate) fn mean_relative_accuracy(pred: f64, target: f64) -> f64 {
    if !(target.is_finite() && target > 0.0 && pred.is_finite()) {
        return 0.0;
    }
    let rel = (pred - target).abs() / target;
    let pass = thresholds().iter().filter(|&&t| rel <= 1.0 - t).count();
    pass as f64 / 10.0
}

/// The text an answer is read from: the first `<answer>` block's, else the whole reply.
fn answer_text(reply: &str) -> &str {
    ANSWER_TAG
        .captures(reply)
        .and_then(|c| c.get(1))
        .map_or(reply, |m| m.as_str())
}

/// VSI-Bench's `fuzzy_matching` then `to_float`: the first space-separated word, trailing dots
/// dropped, as a number.
pub(crate) fn read_number(reply: &str) -> Option<f64> {
    let text = answer_text(reply).trim();
    let word = text.split(' ').next().unwrap_or("");
    let word = word.trim_end_matches('.').trim();
    word.parse::<f64>().ok()
}

/// The score of `reply` to `question`: 0 or 1 for a choice, MRA in [0, 1] for a number.
pub fn score(question: &SpatialQuestion, reply: &str) -> f64 {
    match question.kind {
        AnswerKind::Choice => {
            if response_letter(reply).eq_ignore_ascii_case(question.answer.trim()) {
                1.0
            } else {
                0.0
            }
        }
        AnswerKind::Number => match (read_number(reply), question.answer.trim().parse::<f64>()) {
            (Some(p), Ok(t)) => mean_relative_accuracy(p, t),
            _ => 0.0,
        },
    }
}

/// A row of the table: VSI-Bench's merged relative direction, or one type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Row {
    Type(QuestionType),
    RelDirection,
}

impl Row {
    fn of(t: QuestionType) -> Row {
        match t {
            QuestionType::ObjectRelDirectionEasy
            | QuestionType::ObjectRelDirectionMedium
            | QuestionType::ObjectRelDirectionHard => Row::RelDirection,
            t => Row::Type(t),
        }
    }
}

/// Scores per question type, printed as VSI-Bench's table (see the module docs).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpatialTally {
    /// type → (sum of scores, questions)
    sums: BTreeMap<QuestionType, (f64, usize)>,
}

impl SpatialTally {
    /// Counts one scored question.
    pub fn add(&mut self, question_type: QuestionType, score: f64) {
        let e = self.sums.entry(question_type).or_insert((0.0, 0));
        e.0 += score;
        e.1 += 1;
    }

    /// Mean score of one type, if any was counted.
    pub fn mean(&self, question_type: QuestionType) -> Option<f64> {
        self.sums.get(&question_type).map(|(s, n)| s / *n as f64)
    }

    /// The table's rows: `(name, questions, mean)`; the relative-direction levels counted are
    /// averaged into one row (a level with no question is left out of that mean).
    fn rows(&self) -> Vec<(String, usize, f64)> {
        let mut merged: BTreeMap<Row, Vec<(f64, usize)>> = BTreeMap::new();
        for (t, (s, n)) in &self.sums {
            merged
                .entry(Row::of(*t))
                .or_default()
                .push((s / *n as f64, *n));
        }
        merged
            .into_iter()
            .map(|(row, parts)| {
                let n = parts.iter().map(|p| p.1).sum();
                let mean = parts.iter().map(|p| p.0).sum::<f64>() / parts.len() as f64;
                let name = match row {
                    Row::Type(t) => t.name().to_string(),
                    Row::RelDirection => "object_rel_direction".to_string(),
                };
                (name, n, mean)
            })
            .collect()
    }

    /// The mean over rows (VSI-Bench's "overall"), if anything was counted.
    pub fn overall(&self) -> Option<f64> {
        let rows = self.rows();
        (!rows.is_empty()).then(|| rows.iter().map(|r| r.2).sum::<f64>() / rows.len() as f64)
    }
}

impl fmt::Display for SpatialTally {
    /// One row per type (`name  questions  score %`, the metric named), then `overall`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<28} {:>9} {:>8}  metric",
            "question type", "questions", "score"
        )?;
        let rows = self.rows();
        for (name, n, mean) in &rows {
            let metric = if QuestionType::ALL
                .iter()
                .any(|t| t.name() == name && t.is_number())
            {
                "MRA"
            } else {
                "accuracy"
            };
            writeln!(f, "{name:<28} {n:>9} {:>8.2}  {metric}", mean * 100.0)?;
        }
        let total: usize = rows.iter().map(|r| r.1).sum();
        match self.overall() {
            Some(o) => write!(
                f,
                "{:<28} {total:>9} {:>8.2}  mean over types",
                "overall",
                o * 100.0
            ),
            None => write!(
                f,
                "{:<28} {total:>9} {:>8}  mean over types",
                "overall", "-"
            ),
        }
    }
}
