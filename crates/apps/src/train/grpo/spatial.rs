//! Embodied-R's reasoning-model training on text records: the `spatial` record kind, its reward,
//! and records made from generated spatial questions.
//!
//! Released reference (read, not copied): `EmbodiedCity/Embodied-R.code` at `174ae99`,
//! `train/train_8GPUs.sh`: ms-swift GRPO on text-only records (`messages` = one user turn holding
//! the reasoning prompt, `solution` = the letter) with `--system SYSTEM_PROMPT` (our
//! `ask::prompts::REASONING_SYSTEM`), `--reward_funcs choice_accuracy format consistency
//! --reward_weights 0.7 0.1 0.2`.
//!
//! # Ground truth ([`SpatialTruth`])
//! `<type>spatial</type>{"kind": "choice", "answer": "B"}` or `{"kind": "number", "answer":
//! "2.5"}`: the kind and answer of a `train::spatial::SpatialQuestion` (its `answer` is text in
//! both cases, as in `questions.jsonl`). A choice is one letter A–H; a number is positive and
//! finite (Mean Relative Accuracy divides by it).
//!
//! # Reward ([`spatial_reward`])
//! `overall = 0.7·accuracy + 0.1·format + w·consistency`, `w` = 0.2 as released, or 0 to train
//! without the consistency term (its value is still reported):
//! * accuracy: a choice is `choice_accuracy` (the released `ChoiceAccuracy`); a number, which
//!   the released reward has no rule for, is VSI-Bench's Mean Relative Accuracy of the answer
//!   block's number (`train::spatial::score`'s rule);
//! * format: ms-swift's `format` (`consistency::format_reward`);
//! * consistency: the released logic-consistency reward (`consistency::consistency`) with the
//!   given reference model and the user message as the question. [`NoReference`] fails every
//!   call, so the released fallback (`extract_answer_from_think` on the think text) decides:
//!   deterministic, no model needed. For a number there is no letter to agree on: 0.

use serde::{Deserialize, Serialize};

use crate::train::consistency::{
    choice_accuracy, consistency, format_reward, ReferenceError, ReferenceModel, ACCURACY_WEIGHT,
    CONSISTENCY_WEIGHT, FORMAT_WEIGHT, VALID_OPTIONS,
};
use crate::train::spatial::score::{mean_relative_accuracy, read_number};
use crate::train::spatial::{AnswerKind, SpatialQuestion};

/// The `<type>` of a spatial record.
pub(crate) const TASK_TYPE: &str = "spatial";

/// The payload of a spatial record's ground truth (see the module docs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpatialTruth {
    /// How the answer is scored.
    pub kind: AnswerKind,
    /// The letter, or the number as text.
    pub answer: String,
}

impl SpatialTruth {
    /// The ground truth of `q`.
    pub fn of(q: &SpatialQuestion) -> Self {
        SpatialTruth {
            kind: q.kind,
            answer: q.answer.trim().to_owned(),
        }
    }

    /// `<type>spatial</type>` then the payload.
    pub fn ground_truth(&self) -> String {
        let payload = serde_json::to_string(self).unwrap_or_default();
        format!("<type>{TASK_TYPE}</type>{payload}")
    }

    /// Reads a whole ground truth (the tag first, then the payload), checking the answer.
    pub fn parse(ground_truth: &str) -> Result<Self, String> {
        let payload = ground_truth
            .trim()
            .strip_prefix(&format!("<type>{TASK_TYPE}</type>"))
            .ok_or("not a <type>spatial</type> ground truth")?;
        let t: SpatialTruth = serde_json::from_str(payload).map_err(|e| e.to_string())?;
        let ok = match t.kind {
            AnswerKind::Choice => t.answer.len() == 1 && VALID_OPTIONS.contains(&t.answer),
            AnswerKind::Number => t
                .answer
                .parse::<f64>()
                .is_ok_and(|x| x.is_finite() && x > 0.0),
        };
        if ok {
            Ok(t)
        } else {
            Err(format!("bad {:?} answer {:?}", t.kind, t.answer))
        }
    }
}

/// A reference model whose every call fails: the released consistency reward then reads the
/// answer from the think text (`extract_answer_from_think`).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoReference;

impl ReferenceModel for NoReference {
    fn reply(&mut self, _: &str, _: &str, _: usize, _: f64) -> Result<String, ReferenceError> {
        Err(ReferenceError::Other("no reference model".into()))
    }
}

/// How spatial records are scored: the consistency term's judge and weight.
pub struct SpatialScoring<'a> {
    /// Judges whether a think text leads to the answer.
    pub reference: &'a mut dyn ReferenceModel,
    /// The consistency term's weight: 0.2 as released, 0 to train without it.
    pub consistency_weight: f64,
}

/// Released: the consistency weight of `train_8GPUs.sh`.
pub const RELEASED_CONSISTENCY_WEIGHT: f64 = CONSISTENCY_WEIGHT;

/// Embodied-R's reward of `response` (see the module docs); `question` is the user message.
/// Components: `overall`, `accuracy`, `format`, `consistency`.
pub fn spatial_reward(
    response: &str,
    ground_truth: &str,
    question: Option<&str>,
    scoring: &mut SpatialScoring<'_>,
) -> Result<Vec<(String, f64)>, String> {
    let truth = SpatialTruth::parse(ground_truth)?;
    let format = format_reward(response);
    let (accuracy, agree) = match truth.kind {
        AnswerKind::Choice => (
            choice_accuracy(response, &truth.answer),
            consistency(
                response,
                Some(truth.answer.as_str()),
                question,
                &mut *scoring.reference,
            ),
        ),
        AnswerKind::Number => {
            let target = truth.answer.parse::<f64>().map_err(|e| e.to_string())?;
            let mra = read_number(response).map_or(0.0, |p| mean_relative_accuracy(p, target));
            (mra, 0.0)
        }
    };
    let overall =
        ACCURACY_WEIGHT * accuracy + FORMAT_WEIGHT * format + scoring.consistency_weight * agree;
    Ok(vec![
        ("overall".into(), overall),
        ("accuracy".into(), accuracy),
        ("format".into(), format),
        ("consistency".into(), agree),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Says(&'static str);

    impl ReferenceModel for Says {
        fn reply(&mut self, _: &str, _: &str, _: usize, _: f64) -> Result<String, ReferenceError> {
            Ok(self.0.into())
        }
    }

    fn reward(response: &str, gt: &str, weight: f64, reference: &mut dyn ReferenceModel) -> f64 {
        let mut s = SpatialScoring {
            reference,
            consistency_weight: weight,
        };
        spatial_reward(response, gt, Some("Question: which?"), &mut s).unwrap()[0].1
    }

    #[test]
    fn released_weights_and_the_consistency_switch() {
        let gt = SpatialTruth {
            kind: AnswerKind::Choice,
            answer: "B".into(),
        }
        .ground_truth();
        let agree = "<think>so B</think><answer>B</answer>";
        let disagree = "<think>so A</think><answer>B</answer>";
        let none = &mut NoReference;
        assert!((reward(agree, &gt, 0.2, none) - 1.0).abs() < 1e-12);
        assert!((reward(disagree, &gt, 0.2, none) - 0.8).abs() < 1e-12);
        assert!((reward(agree, &gt, 0.0, none) - 0.8).abs() < 1e-12);
        assert!(
            (reward("<think>so A</think><answer>A</answer>", &gt, 0.2, none) - 0.1).abs() < 1e-12
        );
        // A reference model that replies decides instead of the think text.
        assert!((reward(disagree, &gt, 0.2, &mut Says("B")) - 1.0).abs() < 1e-12);
        assert!((reward(agree, &gt, 0.2, &mut Says("A")) - 0.8).abs() < 1e-12);
    }

    #[test]
    fn numbers_score_by_mean_relative_accuracy() {
        let gt = SpatialTruth {
            kind: AnswerKind::Number,
            answer: "2.0".into(),
        }
        .ground_truth();
        let c = spatial_reward(
            "<think>so</think><answer>2.2</answer>",
            &gt,
            None,
            &mut SpatialScoring {
                reference: &mut NoReference,
                consistency_weight: 0.2,
            },
        )
        .unwrap();
        assert_eq!(c[1], ("accuracy".to_string(), 0.9));
        assert_eq!(c[3], ("consistency".to_string(), 0.0));
        assert!((c[0].1 - (0.7 * 0.9 + 0.1)).abs() < 1e-12);
        assert!(SpatialTruth::parse(&gt).is_ok());
        assert!(
            SpatialTruth::parse("<type>spatial</type>{\"kind\":\"number\",\"answer\":\"0\"}")
                .is_err()
        );
    }
}
