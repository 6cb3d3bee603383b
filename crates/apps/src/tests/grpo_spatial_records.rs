//! `spatial` records from generated spatial questions (`train spatial-data --records`): the
//! prompt of each is the one `ask` gives Embodied-R's reasoning model with the oracle describer,
//! and the records load as text-only questions whose right answers score as right.

use pointact::train::grpo::data::{load_records, RecordKind};
use pointact::train::grpo::run;

/// Records made from generated spatial questions carry the prompt `ask` gives the reasoning
/// model with the oracle describer (the same key frames and descriptions `eval spatial` uses),
/// load as text-only `spatial` records, and score a right answer as right.
#[test]
fn spatial_questions_become_text_records_with_the_ask_prompt() {
    use pointact::ask::eval::{eval_spatial, DescriberChoice};
    use pointact::ask::AskOptions;
    use pointact::train::consistency::{ReferenceError, ReferenceModel};
    use pointact::train::grpo::spatial_records::write_spatial_records;
    use pointact::train::spatial::{generate, load_questions, SpatialOptions};

    struct Records(Vec<String>);
    impl ReferenceModel for Records {
        fn reply(
            &mut self,
            _: &str,
            user: &str,
            _: usize,
            _: f64,
        ) -> Result<String, ReferenceError> {
            self.0.push(user.to_owned());
            Ok("<think></think><answer>A</answer>".into())
        }
    }

    let dir = super::common::TempDir::new("grpo-spatial-records");
    let opts = SpatialOptions {
        tasks: vec!["pepper_in_pan".into()],
        seeds: 1,
        frames: 10,
        width: 160,
        height: 120,
        out: dir.path().to_path_buf(),
        ..SpatialOptions::default()
    };
    generate(&opts, &mut |_| {}).unwrap();
    let questions_path = dir.join("questions.jsonl");
    let questions = load_questions(&questions_path).unwrap();
    assert!(questions.len() >= 5, "{} questions", questions.len());
    let (path, n) = write_spatial_records(&questions_path, &AskOptions::default()).unwrap();
    assert_eq!(n, questions.len());

    let mut asked = Records(Vec::new());
    eval_spatial(
        &questions_path,
        DescriberChoice::Oracle,
        &mut asked,
        &AskOptions::default(),
        None,
        &mut |_, _, _, _| {},
    )
    .unwrap();
    let (records, skipped) = load_records(&path).unwrap();
    assert!(skipped.is_empty(), "{skipped}");
    assert_eq!(records.len(), questions.len());
    for ((r, q), prompt) in records.iter().zip(&questions).zip(&asked.0) {
        assert_eq!((r.kind, r.images.len()), (RecordKind::Spatial, 0));
        assert_eq!(&r.id, &q.id);
        assert_eq!(&r.question, prompt, "{}", q.id);
        let right = format!("<think>so</think><answer>{}</answer>", q.answer);
        let s = run::score(r.kind, &right, &r.ground_truth).unwrap();
        assert_eq!(s[1], ("accuracy".to_string(), 1.0), "{}", q.id);
    }
}
