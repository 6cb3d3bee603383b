//! `eval spatial`: the `ask` pipeline on questions `train spatial-data` generated, with the oracle
//! describer (the simulator's own words) and scripted reasoning models whose answers are known,
//! so the table's every cell is predictable: a reasoner that answers every choice right and every
//! number wrong scores 1 on the choice rows and 0 on the number rows; a reasoner without the
//! format scores 0 everywhere and is counted as unanswered.

use std::path::Path;

use super::common::TempDir;
use pointact::ask::eval::{eval_spatial, question_text, DescriberChoice};
use pointact::ask::AskOptions;
use pointact::sim::tasks::Suite;
use pointact::train::consistency::{ReferenceError, ReferenceModel};
use pointact::train::spatial::{
    generate, load_questions, AnswerKind, QuestionType, SpatialOptions, SpatialQuestion,
};

fn data(out: &Path) -> Vec<SpatialQuestion> {
    let opts = SpatialOptions {
        suite: Suite::Tabletop,
        tasks: vec!["pepper_in_pan".into()],
        seeds: 1,
        seed: 0,
        frames: 10,
        fps: 2.0,
        width: 160,
        height: 120,
        moved: true,
        out: out.to_path_buf(),
    };
    generate(&opts, &mut |_| {}).expect("spatial data");
    load_questions(&out.join("questions.jsonl")).expect("questions")
}

/// Answers from the truth it was given: the right letter for a choice, a number far off for a
/// number (or no format at all when `formatless`). Records every user message.
struct Knows {
    questions: Vec<SpatialQuestion>,
    formatless: bool,
    asked: Vec<String>,
}

impl ReferenceModel for Knows {
    fn reply(
        &mut self,
        _system: &str,
        user: &str,
        _max_tokens: usize,
        _temperature: f64,
    ) -> Result<String, ReferenceError> {
        self.asked.push(user.to_owned());
        if self.formatless {
            return Ok("B".into());
        }
        let q = self
            .questions
            .iter()
            .find(|q| user.ends_with(&question_text(q)))
            .expect("the prompt ends with one of the questions");
        Ok(match q.kind {
            AnswerKind::Choice => format!("<think>I saw it.</think><answer>{}</answer>", q.answer),
            AnswerKind::Number => "<think>Far off.</think><answer>1000000</answer>".into(),
        })
    }
}

#[test]
fn the_table_scores_known_answers_per_type_and_counts_formatless_replies() {
    let dir = TempDir::new("eval-spatial");
    let questions = data(dir.path());
    assert!(questions.len() >= 5, "{} questions", questions.len());
    let path = dir.join("questions.jsonl");
    let mut reasoner = Knows {
        questions: questions.clone(),
        formatless: false,
        asked: Vec::new(),
    };
    let mut rows = Vec::new();
    let tally = eval_spatial(
        &path,
        DescriberChoice::Oracle,
        &mut reasoner,
        &AskOptions::default(),
        None,
        &mut |q, row, _, _| rows.push((q.kind, row.score, row.note.clone())),
    )
    .expect("an evaluation");
    assert_eq!(rows.len(), questions.len());
    assert_eq!(reasoner.asked.len(), questions.len());
    for (kind, score, note) in &rows {
        assert_eq!(note, &None);
        let want = if *kind == AnswerKind::Choice {
            1.0
        } else {
            0.0
        };
        assert_eq!(*score, want, "{kind:?}");
    }
    for t in QuestionType::ALL {
        let of_type: Vec<_> = questions.iter().filter(|q| q.question_type == t).collect();
        let Some(first) = of_type.first() else {
            continue;
        };
        let want = if first.kind == AnswerKind::Choice {
            1.0
        } else {
            0.0
        };
        assert_eq!(tally.mean(t), Some(want), "{t:?}");
    }
    // The reasoner read the simulator's words: the first frame's description is in every prompt.
    let said: Vec<String> = serde_json::from_str(
        &std::fs::read_to_string(
            dir.path()
                .join(&questions[0].sequence)
                .join("descriptions.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert!(reasoner.asked[0].contains(&format!("Frame 0: Observe: {}", said[0])));

    let mut formatless = Knows {
        questions: Vec::new(),
        formatless: true,
        asked: Vec::new(),
    };
    let mut unanswered = 0;
    let tally = eval_spatial(
        &path,
        DescriberChoice::Oracle,
        &mut formatless,
        &AskOptions::default(),
        Some(3),
        &mut |_, row, _, _| unanswered += usize::from(row.note.is_some()),
    )
    .unwrap();
    assert_eq!(unanswered, 3);
    assert_eq!(tally.overall(), Some(0.0));
}
