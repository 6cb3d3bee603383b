//! GRPO on text-only `spatial` records (Embodied-R's reasoning-model training): the tiny random
//! Qwen2 text model of `tests/fixtures/qwen2_text_tiny/` (64 wide, 2 layers) raises its held-out
//! accuracy under the released reward (0.7 accuracy + 0.1 format + 0.2 consistency).
//!
//! The task: one key frame's description, "Frame 0: {place}, a cup." (or a box), and the
//! question "Which object is in view? A. cup B. box": the answer is readable from the
//! description. The 16 places are split 8 for training and 8 held out, so a held-out prompt is
//! one the policy never saw, with a place phrase it never saw.
//!
//! The prompt is short (~100 tokens with the chat template) and the user turn carries no
//! `REASONING_SYSTEM`: with Embodied-R's full reasoning prompt (~600 tokens) this model's
//! near-uniform attention never found the one word that decides the answer, in any of five
//! settings tried.
//!
//! A random model never writes `<think>…</think><answer>…</answer>`, so a supervised warm-up
//! first teaches the format. Each warm-up batch is one training prompt answered with every
//! letter once, the think letters ("so X") shuffled: no prompt, object or think is tied to a
//! letter, so the warm-up answers the held-out prompts at chance (greedy 0.5). With letters drawn
//! at random instead, the warm-up memorised chance correlations and sometimes already answered
//! 7 of 8 held-out questions right before any GRPO.
//!
//! GRPO then starts from the warm-up's checkpoint, which is also the KL reference (k3, 0.2),
//! with a 10-step learning-rate warm-up to 1e-3, groups of 8, and two places (four prompts) per
//! step; the consistency term is scored without a reference model, so the released fallback
//! (`extract_answer_from_think`) reads the think text.
//!
//! Measured with 12 pairs of warm-up and sampling seeds at 400 steps (the test runs one pair):
//! the released accuracy on held-out prompts went from 0.5 to 0.875–1.0 greedy (0.86–1.0
//! sampled) in all 12. With one place (two prompts) per step for 200 steps, 6 of 24 runs stayed
//! below 0.875 (some learned, then collapsed onto one letter).
//!
//! What is asserted is the released reward's accuracy, which takes the last lone letter anywhere
//! in a reply. Read strictly (the reply in the format, its answer block the right letter, as
//! `ask` requires), 12 runs ended at ≥ 0.8125 in 6, at 0.5 in 1 and at 0 in 5: there the policy
//! dropped `</think><answer>` and answered inside the think (`<think>so B</answer>…`), which
//! the released reward still scores 0.9 of 1.0 (format is 0.1). A KL of 0.6 or a 250-step
//! warm-up did not prevent it. The test prints both readings; it asserts the released one,
//! as the trainer optimises it.
//!
//! Asserted: the released accuracy on held-out prompts, greedy ≤ 0.625 after the warm-up and
//! ≥ 0.8125 after GRPO, and its expectation over sampled answers (16 per prompt, temperature
//! 1) from ≤ 0.6 to ≥ 0.75.
//!
//! A second test is the consistency term's ablation: from a warm-up that already answers right,
//! GRPO with the term ties the think's conclusion to the answer, and GRPO without it does not
//! (see `turning_the_consistency_term_off_leaves_the_think_untied_to_the_answer`).

use std::cell::RefCell;

use super::grpo_learn::{grpo_from_warm_up, restart_from_warm_up, save_warm_up, warm_up_trainer};

use pointact::pointing::qwen::{QwenOptions, QwenParts, QwenPointer};
use pointact::train::consistency::{
    extract_answer_from_think, extract_think_content, format_reward, ANSWER_TAG,
};
use pointact::train::grpo::data::{load_records, write_records, RecordKind, RecordLine};
use pointact::train::grpo::rollout::RolloutConfig;
use pointact::train::grpo::run;
use pointact::train::grpo::spatial::{
    NoReference, SpatialScoring, SpatialTruth, RELEASED_CONSISTENCY_WEIGHT,
};
use pointact::train::grpo::trainer::{GrpoTrainer, Sample};
use pointact::train::spatial::AnswerKind;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const MODEL: &str = concat!(
    concat!(env!("CARGO_MANIFEST_DIR"), "/../.."),
    "/tests/fixtures/qwen2_text_tiny"
);
const OBJECTS: [&str; 2] = ["cup", "box"];
const LETTERS: [&str; 2] = ["A", "B"];
/// The first `TRAIN_PLACES` train, the rest are held out.
const PLACES: [&str; 16] = [
    "ahead",
    "to the left",
    "on the table",
    "below",
    "to the right",
    "ahead-left",
    "behind",
    "above",
    "near the door",
    "by the window",
    "on the floor",
    "on a shelf",
    "in the corner",
    "far away",
    "close by",
    "next to a chair",
];
const TRAIN_PLACES: usize = 8;
const WARMUP_STEPS: usize = 100;
const GRPO_STEPS: u64 = 400;
const PLACES_PER_STEP: usize = 2;
const SAMPLES: usize = 16;

fn record(id: String, object: usize, place: &str) -> RecordLine {
    let options: Vec<String> = OBJECTS
        .iter()
        .zip(LETTERS)
        .map(|(o, l)| format!("{l}. {o}"))
        .collect();
    RecordLine {
        id,
        problem: format!(
            "Frame 0: {place}, a {}.\nQuestion: Which object is in view? {}",
            OBJECTS[object],
            options.join(" ")
        ),
        answer: SpatialTruth {
            kind: AnswerKind::Choice,
            answer: LETTERS[object].into(),
        }
        .ground_truth(),
        images: Vec::new(),
        ability: None,
        task: None,
        seed: None,
        reference: None,
    }
}

fn load(model: &str) -> QwenParts {
    QwenPointer::load(
        model,
        QwenOptions {
            progress: false,
            ..QwenOptions::default()
        },
    )
    .unwrap()
    .into_parts()
}

/// The released reward, consistency judged from the think text.
fn score(response: &str, truth: &str, question: &str) -> Result<Vec<(String, f64)>, String> {
    score_weighted(response, truth, question, RELEASED_CONSISTENCY_WEIGHT)
}

/// The released reward with the consistency term weighted `weight` (0: switched off).
fn score_weighted(
    response: &str,
    truth: &str,
    question: &str,
    weight: f64,
) -> Result<Vec<(String, f64)>, String> {
    run::score_with(
        RecordKind::Spatial,
        response,
        truth,
        Some(question),
        &mut SpatialScoring {
            reference: &mut NoReference,
            consistency_weight: weight,
        },
    )
}

/// Held-out accuracy: the released reward's (`choice_accuracy`, the last lone letter anywhere
/// in the reply) and, strictly read, the share of replies in the format
/// (`<think>…</think><answer>X</answer>`, as `ask` requires) whose answer block is the right
/// letter. Each over the greedy answers and over `SAMPLES` sampled answers per prompt at
/// temperature 1.
#[derive(Debug, Clone, Copy)]
struct Accuracy {
    greedy: f64,
    sampled: f64,
    greedy_strict: f64,
    sampled_strict: f64,
}

fn accuracy(trainer: &mut GrpoTrainer, eval: &[Sample]) -> Accuracy {
    let mut out = [(0.0, 0.0); 2];
    for (k, sampled) in [false, true].into_iter().enumerate() {
        let strict = RefCell::new(Vec::new());
        let scorer = |r: &str, t: &str, q: &str| {
            let truth = SpatialTruth::parse(t)?;
            let answer = answer_block(r);
            strict
                .borrow_mut()
                .push(format_reward(r) == 1.0 && answer == truth.answer);
            score(r, t, q)
        };
        let m = if sampled {
            let cfg = RolloutConfig {
                group: SAMPLES,
                temperature: 1.0,
                ..trainer.options.rollout.clone()
            };
            trainer.evaluate_with(eval, &scorer, &cfg, 99).unwrap()
        } else {
            trainer.evaluate(eval, &scorer).unwrap()
        };
        assert_eq!(m.score_errors, 0);
        let strict = strict.into_inner();
        assert_eq!(strict.len(), eval.len() * if sampled { SAMPLES } else { 1 });
        out[k] = (
            m.tasks["spatial"].components["accuracy"],
            strict.iter().filter(|&&r| r).count() as f64 / strict.len() as f64,
        );
    }
    Accuracy {
        greedy: out[0].0,
        sampled: out[1].0,
        greedy_strict: out[0].1,
        sampled_strict: out[1].1,
    }
}

#[test]
fn grpo_on_spatial_text_records_raises_held_out_accuracy() {
    std::env::set_var("RAYON_NUM_THREADS", "1");
    let dir = std::env::temp_dir().join(format!("pointact-grpo-spatial-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();

    // Records on disk, read back as `train grpo` reads them.
    let lines = |places: &[&str], tag: &str| -> Vec<RecordLine> {
        places
            .iter()
            .enumerate()
            .flat_map(|(p, place)| {
                (0..OBJECTS.len()).map(move |o| record(format!("{tag}{p}/{o}"), o, place))
            })
            .collect()
    };
    let (train_places, held_places) = PLACES.split_at(TRAIN_PLACES);
    write_records(&dir.join("train.jsonl"), &lines(train_places, "t")).unwrap();
    write_records(&dir.join("held.jsonl"), &lines(held_places, "h")).unwrap();
    let (train, skipped) = load_records(&dir.join("train.jsonl")).unwrap();
    assert!(skipped.is_empty() && train.len() == TRAIN_PLACES * OBJECTS.len());
    assert!(train
        .iter()
        .all(|r| r.kind == RecordKind::Spatial && r.images.is_empty()));
    let (held, _) = load_records(&dir.join("held.jsonl")).unwrap();
    let short = |r| Sample {
        system: None,
        ..run::sample(r).unwrap()
    };
    let train: Vec<Sample> = train.iter().map(short).collect();
    let eval: Vec<Sample> = held.iter().map(short).collect();
    assert!(eval.iter().all(|s| s.image.is_none()));

    let mut trainer = warm_up_trainer(load(MODEL), 8, 32);

    // Warm-up: the format, every letter once per prompt, the think letters shuffled.
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    for _ in 0..WARMUP_STEPS {
        let s = &train[rng.gen_range(0..train.len())];
        let mut thinks = LETTERS.to_vec();
        thinks.shuffle(&mut rng);
        let batch: Vec<(Sample, String)> = LETTERS
            .iter()
            .zip(thinks)
            .map(|(answer, think)| {
                (
                    s.clone(),
                    format!("<think>so {think}</think><answer>{answer}</answer>"),
                )
            })
            .collect();
        trainer.sft_step(&batch).unwrap();
    }
    let mut trainer = restart_from_warm_up(trainer, &dir, MODEL, "grpo_spatial_learn", 1e-3, load);
    let before = accuracy(&mut trainer, &eval);
    for step in 0..GRPO_STEPS {
        // Both objects at each of the step's training places.
        let batch: Vec<Sample> = (0..PLACES_PER_STEP)
            .flat_map(|k| {
                let at = (step as usize * PLACES_PER_STEP + k) % TRAIN_PLACES;
                train[at * OBJECTS.len()..(at + 1) * OBJECTS.len()].to_vec()
            })
            .collect();
        let m = trainer.step(&batch, &score, step).unwrap();
        if step % 50 == 49 {
            let t = &m.tasks["spatial"].components;
            eprintln!(
                "step {step}: accuracy {:.2} format {:.2} consistency {:.2}",
                t["accuracy"], t["format"], t["consistency"]
            );
        }
    }
    let after = accuracy(&mut trainer, &eval);
    eprintln!(
        "held-out accuracy: warm-up {before:?}, after GRPO {after:?}; strictly read: {:?} -> {:?}",
        (before.greedy_strict, before.sampled_strict),
        (after.greedy_strict, after.sampled_strict)
    );
    assert!(
        before.greedy <= 0.625 && before.sampled <= 0.6,
        "the warm-up alone already answers: {before:?}"
    );
    assert!(
        after.greedy >= 0.8125 && after.sampled >= 0.75,
        "GRPO did not raise the held-out accuracy: {before:?} -> {after:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The text of a reply's `<answer>` block, trimmed (`""` without one).
fn answer_block(reply: &str) -> &str {
    ANSWER_TAG
        .captures(reply)
        .and_then(|c| c.get(1))
        .map_or("", |m| m.as_str().trim())
}

/// Think–answer agreement over `SAMPLES` sampled replies (temperature 1) per prompt: the share
/// whose think letter (read as the consistency term's fallback reads it,
/// `extract_answer_from_think`) and answer block are one and the same option letter.
fn agreement(trainer: &mut GrpoTrainer, prompts: &[Sample]) -> f64 {
    let agree = RefCell::new(Vec::new());
    let scorer = |r: &str, t: &str, q: &str| {
        let think = extract_answer_from_think(extract_think_content(r));
        let answer = answer_block(r);
        agree
            .borrow_mut()
            .push(LETTERS.contains(&answer) && think == answer);
        score(r, t, q)
    };
    let cfg = RolloutConfig {
        group: SAMPLES,
        temperature: 1.0,
        ..trainer.options.rollout.clone()
    };
    let m = trainer.evaluate_with(prompts, &scorer, &cfg, 7).unwrap();
    assert_eq!(m.score_errors, 0);
    let agree = agree.into_inner();
    assert_eq!(agree.len(), prompts.len() * SAMPLES);
    agree.iter().filter(|&&a| a).count() as f64 / agree.len() as f64
}

const ABLATION_WARMUP_STEPS: usize = 300;
const ABLATION_STEPS: u64 = 200;
/// Sampling seeds of the ablation's runs (offsets to the step number); each seed runs once
/// with the consistency term and once without.
const ABLATION_SEEDS: [u64; 2] = [0, 1000];

/// The ablation: GRPO runs from one warm-up that answers right and whose think names the object
/// but concludes either letter ("a cup, so A" and "a cup, so B" equally often), each sampling seed
/// once with the released consistency weight and once with it switched off. Accuracy and format
/// are then nearly flat within a group, so the consistency term is the only reward that tells one
/// think from another: with it, the think comes to conclude the answer; without it, agreement
/// stays where the warm-up left it (0.5).
///
/// Choices, each measured (warm-up seeds 3–8 × sampling seeds 0/1000/2000, 200 steps): with
/// these settings 16 of 18 runs with consistency ended at agreement ≥ 0.99 and 2 stayed at 0.5
/// (the think stuck on one letter whatever the object); all 18 without it ended at 0.49–0.51.
/// A think of the letter alone ("so A"), a learning rate of 1e-3, or steps whose groups are all
/// flat left in the loss (Adam then takes full-size steps on the KL's tiny gradient) failed
/// more often: the think stuck on one letter, or the policy dropped `</think><answer>` as in the
/// accuracy test above. The assertion allows one of the two seeds to stay stuck.
#[test]
fn turning_the_consistency_term_off_leaves_the_think_untied_to_the_answer() {
    std::env::set_var("RAYON_NUM_THREADS", "1");
    let dir =
        std::env::temp_dir().join(format!("pointact-grpo-consistency-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let lines: Vec<RecordLine> = PLACES[..TRAIN_PLACES]
        .iter()
        .enumerate()
        .flat_map(|(p, place)| {
            (0..OBJECTS.len()).map(move |o| record(format!("t{p}/{o}"), o, place))
        })
        .collect();
    write_records(&dir.join("train.jsonl"), &lines).unwrap();
    let train: Vec<Sample> = load_records(&dir.join("train.jsonl"))
        .unwrap()
        .0
        .iter()
        .map(|r| Sample {
            system: None,
            ..run::sample(r).unwrap()
        })
        .collect();
    assert_eq!(train.len(), TRAIN_PLACES * OBJECTS.len());

    let mut trainer = warm_up_trainer(load(MODEL), 8, 32);
    // Warm-up: the right answer; the think names the object and concludes each letter once.
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    for _ in 0..ABLATION_WARMUP_STEPS {
        let o = rng.gen_range(0..train.len());
        let (object, answer) = (OBJECTS[o % OBJECTS.len()], LETTERS[o % OBJECTS.len()]);
        let batch: Vec<(Sample, String)> = LETTERS
            .iter()
            .map(|think| {
                (
                    train[o].clone(),
                    format!("<think>a {object}, so {think}</think><answer>{answer}</answer>"),
                )
            })
            .collect();
        trainer.sft_step(&batch).unwrap();
    }
    let (warm, mut options) = save_warm_up(trainer, &dir, MODEL, "grpo_consistency_ablation", 3e-4);
    options.drop_flat_groups = true;
    // (consistency on, consistency off) agreement before and after, per sampling seed.
    let mut runs = Vec::new();
    for seed in ABLATION_SEEDS {
        let mut pair = [(0.0, 0.0); 2];
        for (arm, weight) in [RELEASED_CONSISTENCY_WEIGHT, 0.0].into_iter().enumerate() {
            let mut trainer = grpo_from_warm_up(&warm, options.clone(), load);
            let before = agreement(&mut trainer, &train);
            let score = |r: &str, t: &str, q: &str| score_weighted(r, t, q, weight);
            for step in 0..ABLATION_STEPS {
                let at = step as usize % TRAIN_PLACES;
                let batch = train[at * OBJECTS.len()..(at + 1) * OBJECTS.len()].to_vec();
                trainer.step(&batch, &score, seed + step).unwrap();
            }
            let after = agreement(&mut trainer, &train);
            eprintln!(
                "seed {seed}, consistency weight {weight}: think-answer agreement {before:.3} -> {after:.3}"
            );
            pair[arm] = (before, after);
        }
        runs.push(pair);
    }
    let _ = std::fs::remove_dir_all(&dir);
    for [(on_before, _), (off_before, off_after)] in &runs {
        assert_eq!(on_before, off_before, "both arms start from one checkpoint");
        assert!(
            *on_before < 0.7,
            "the warm-up already ties think and answer: {on_before}"
        );
        assert!(
            (off_after - off_before).abs() <= 0.1,
            "without consistency the agreement moved: {off_before} -> {off_after}"
        );
    }
    let mean = |arm: usize| runs.iter().map(|p| p[arm].1).sum::<f64>() / runs.len() as f64;
    let best_on = runs.iter().map(|p| p[0].1).fold(0.0, f64::max);
    assert!(
        best_on >= 0.9,
        "consistency on never tied think and answer: {runs:?}"
    );
    assert!(
        mean(0) - mean(1) >= 0.2,
        "consistency on vs off: {:.3} vs {:.3} ({runs:?})",
        mean(0),
        mean(1)
    );
}

#[test]
fn a_prompt_past_the_model_positions_is_refused_naming_the_limit() {
    // The tiny model has 512 positions; a question of 3000 words does not fit.
    let mut trainer = warm_up_trainer(load(MODEL), 8, 32);
    let long = Sample {
        id: "long".into(),
        question: "where is the apple? ".repeat(600),
        system: None,
        image: None,
        task: "spatial".into(),
        ground_truth: r#"<type>spatial</type>{"kind": "choice", "answer": "A"}"#.into(),
    };
    let scorer = |r: &str, t: &str, q: &str| score(r, t, q);
    let e = trainer.evaluate(&[long], &scorer).unwrap_err().to_string();
    assert!(
        e.contains("question long")
            && e.contains("max_position_embeddings")
            && e.contains("over the model's 512"),
        "{e}"
    );
}
