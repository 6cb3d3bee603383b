//! `train::grpo::run` around the trainer (checkpoints, resume, bad input), on the tiny
//! random Qwen2.5-VL with short responses:
//! * a run interrupted after 2 updates and resumed from its checkpoint ends with the same
//!   weights and the same metrics lines as an uninterrupted 4-update run;
//! * an image that disappears mid-run is skipped, counted and replaced, never a crash;
//! * a weight turned NaN makes every step non-finite: each is skipped (weights untouched) and
//!   reported, and the third in a row stops the run with a typed error.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use candle_core::Tensor;
use pointact::pointing::qwen::{QwenOptions, QwenPointer};
use pointact::train::grpo::checkpoint::{self, TrainerState};
use pointact::train::grpo::data::{load_records, write_records, Record, RecordLine};
use pointact::train::grpo::objective::KlKind;
use pointact::train::grpo::optim::AdamWOptions;
use pointact::train::grpo::rollout::RolloutConfig;
use pointact::train::grpo::run::{self, RunEnd, RunError, RunEvent, RunOptions};
use pointact::train::grpo::trainer::{GrpoOptions, GrpoTrainer, TrainError, Tune};

use super::vlm_fixture::max_abs;

const MODEL: &str = concat!(
    concat!(env!("CARGO_MANIFEST_DIR"), "/../.."),
    "/tests/fixtures/qwen25vl_tiny"
);

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pointact-grpo-run-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Six records about the fixture image (copied into `dir`), point_rec ground truths.
fn records(dir: &Path) -> Vec<Record> {
    std::fs::copy(format!("{MODEL}/image.png"), dir.join("a.png")).unwrap();
    std::fs::copy(format!("{MODEL}/image.png"), dir.join("b.png")).unwrap();
    let lines: Vec<RecordLine> = (0..6)
        .map(|i| RecordLine {
            id: format!("r{i}"),
            problem: format!("<image>Point to block {i}."),
            answer: format!(
                "<type>point_rec</type>{{\"segmentation\": [[{x},10],[{x2},10],[{x2},90],[{x},90]]}}",
                x = 20 + 40 * i,
                x2 = 50 + 40 * i
            ),
            images: vec![if i % 2 == 0 { "a.png" } else { "b.png" }.into()],
            ability: None,
            task: None,
            seed: None,
            reference: None,
        })
        .collect();
    write_records(&dir.join("r.jsonl"), &lines).unwrap();
    let (r, skipped) = load_records(&dir.join("r.jsonl")).unwrap();
    assert!(skipped.is_empty());
    r
}

fn options() -> GrpoOptions {
    GrpoOptions {
        rollout: RolloutConfig {
            group: 3,
            max_new_tokens: 6,
            temperature: 1.0,
            top_p: 1.0,
            stop_ids: Vec::new(),
        },
        kl: Some((KlKind::K3, 0.1)),
        adamw: AdamWOptions {
            lr: 1e-2,
            ..AdamWOptions::default()
        },
        ..GrpoOptions::default()
    }
}

const LORA: Tune = Tune::Lora {
    rank: 4,
    alpha: 8.0,
    modules: Vec::new(),
    seed: 3,
};

fn trainer(model: &str, reference: Option<pointact::vlm::TextModel>) -> GrpoTrainer {
    trainer_with(model, reference, &Tune::Full { modules: vec![] })
}

fn trainer_with(
    model: &str,
    reference: Option<pointact::vlm::TextModel>,
    tune: &Tune,
) -> GrpoTrainer {
    let parts = QwenPointer::load(
        model,
        QwenOptions {
            progress: false,
            max_pixels: Some(112 * 84),
            ..QwenOptions::default()
        },
    )
    .unwrap()
    .into_parts();
    GrpoTrainer::new(parts, tune, options(), reference).unwrap()
}

/// A length reward, so that groups differ and every step updates.
fn scorer(resp: &str, _gt: &str, _question: &str) -> Result<Vec<(String, f64)>, String> {
    Ok(vec![("overall".into(), resp.len() as f64 / 40.0)])
}

fn state() -> TrainerState {
    TrainerState {
        step: 0,
        seed: 5,
        base_model: MODEL.into(),
        samples_seen: 0,
        settings: serde_json::Value::Null,
    }
}

fn run_opts(out: &Path, steps: u64) -> RunOptions {
    RunOptions {
        out: out.to_path_buf(),
        steps,
        batch: 2,
        save_every: 2,
        keep: 3,
        eval_every: 0,
        shuffle: true,
    }
}

fn weights(t: &GrpoTrainer) -> Vec<(String, Tensor)> {
    t.parts.model.text.named_weights().unwrap()
}

fn train_lines(out: &Path) -> Vec<String> {
    std::fs::read_to_string(out.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            // Timings differ between runs; everything else must not.
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            for k in ["seconds", "rollout_seconds", "rollout_tokens_per_s"] {
                v.as_object_mut().unwrap().remove(k);
            }
            v.to_string()
        })
        .collect()
}

/// Runs `steps` updates from a fresh `tune` trainer into `out`; `stop_after` interrupts the run
/// between steps as Ctrl-C does. Returns the trainer and the run's end.
fn fresh_run(
    recs: &[Record],
    tune: &Tune,
    out: &Path,
    steps: u64,
    stop_after: Option<u64>,
) -> (GrpoTrainer, run::RunSummary) {
    let mut t = trainer_with(MODEL, None, tune);
    let mut st = state();
    let stop = AtomicBool::new(false);
    let s = run::run(
        &mut t,
        recs,
        &[],
        &scorer,
        &run_opts(out, steps),
        &mut st,
        &stop,
        &mut |e| {
            if let RunEvent::Step(m) = e {
                if Some(m.step + 1) == stop_after {
                    stop.store(true, Ordering::Relaxed);
                }
            }
        },
    )
    .unwrap();
    (t, s)
}

/// 4 updates straight through against 2, an interruption, and a resume as the CLI does it
/// (full: the checkpoint's weights, the reference from the base model; LoRA: the base model plus
/// the checkpoint's `adapter_model.safetensors`), the optimiser's moments restored: the same
/// weights and, timings aside, the same metrics lines.
fn resume_matches_straight(name: &str, tune: &Tune) {
    std::env::set_var("RAYON_NUM_THREADS", "1");
    let dir = tmp(name);
    let recs = records(&dir);
    let (t, s) = fresh_run(&recs, tune, &dir.join("straight"), 4, None);
    assert_eq!((s.end, s.steps), (RunEnd::Finished, 4));
    let want = weights(&t);
    drop(t);

    let split = dir.join("split");
    let (_, s) = fresh_run(&recs, tune, &split, 4, Some(2));
    assert_eq!((s.end, s.steps), (RunEnd::Interrupted, 2));
    let ckpt = checkpoint::latest(&split).unwrap().unwrap();
    assert!(ckpt.ends_with("checkpoint-000002"), "{}", ckpt.display());
    let (mut st, optim) = checkpoint::load_state(&ckpt).unwrap();
    assert_eq!((st.step, st.samples_seen), (2, 4));
    let mut t = match tune {
        Tune::Full { .. } => {
            let reference = trainer(MODEL, None).parts.model.text.clone();
            trainer_with(ckpt.to_str().unwrap(), Some(reference), tune)
        }
        Tune::Lora { .. } => {
            let mut t = trainer_with(MODEL, None, tune);
            let adapters = candle_core::safetensors::load(
                ckpt.join("adapter_model.safetensors"),
                &candle_core::Device::Cpu,
            )
            .unwrap();
            assert_eq!(
                adapters.len(),
                2 * 7 * 2,
                "A and B of 7 linears in 2 layers"
            );
            t.restore(&adapters).unwrap();
            // The checkpoint's model is the base with these adapters merged, tensor by tensor.
            let merged = candle_core::safetensors::load(
                ckpt.join("model.safetensors"),
                &candle_core::Device::Cpu,
            )
            .unwrap();
            for (n, w) in weights(&t) {
                let d = max_abs(&(&merged[&n] - &w).unwrap());
                assert!(
                    d <= 1e-6,
                    "{n}: the checkpoint's merged weight differs by {d}"
                );
            }
            t
        }
    };
    t.optimizer_mut().load_state(&optim, st.step).unwrap();
    t.step = st.step;
    let never = AtomicBool::new(false);
    let s = run::run(
        &mut t,
        &recs,
        &[],
        &scorer,
        &run_opts(&split, 4),
        &mut st,
        &never,
        &mut |_| {},
    )
    .unwrap();
    assert_eq!((s.end, s.steps), (RunEnd::Finished, 4));

    for ((n, a), (_, b)) in want.iter().zip(weights(&t)) {
        let d = max_abs(&(a - &b).unwrap());
        assert!(d <= 1e-6, "{n} differs by {d} after resuming");
    }
    assert_eq!(train_lines(&dir.join("straight")), train_lines(&split));
    // The weights moved at all (the comparison is not between two untouched models).
    let base = weights(&trainer(MODEL, None));
    assert!(base
        .iter()
        .zip(&want)
        .any(|((_, a), (_, b))| max_abs(&(a - b).unwrap()) > 0.0));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn an_interrupted_and_resumed_run_equals_an_uninterrupted_one() {
    resume_matches_straight("full", &Tune::Full { modules: vec![] });
}

#[test]
fn a_resumed_lora_run_equals_an_uninterrupted_one() {
    resume_matches_straight("lora", &LORA);
}

#[test]
fn a_missing_image_mid_run_is_skipped_and_counted() {
    std::env::set_var("RAYON_NUM_THREADS", "1");
    let dir = tmp("missing");
    let recs = records(&dir);
    std::fs::remove_file(dir.join("b.png")).unwrap(); // after the records were checked
    let mut t = trainer(MODEL, None);
    let mut st = state();
    let mut skipped = Vec::new();
    let s = run::run(
        &mut t,
        &recs,
        &[],
        &scorer,
        &run_opts(&dir.join("out"), 3),
        &mut st,
        &AtomicBool::new(false),
        &mut |e| {
            if let RunEvent::Skipped(id, why) = e {
                skipped.push(format!("{id}: {why}"));
            }
        },
    )
    .unwrap();
    assert_eq!(s.steps, 3);
    assert!(s.skipped_images >= 1);
    assert_eq!(s.skipped_images, skipped.len());
    assert!(skipped.iter().all(|w| w.contains("b.png")), "{skipped:?}");
    // Every batch was filled from the readable records: 3 steps × 2 + the skipped ones.
    assert_eq!(st.samples_seen as usize, 6 + s.skipped_images);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn non_finite_steps_are_skipped_then_stop_the_run() {
    std::env::set_var("RAYON_NUM_THREADS", "1");
    let dir = tmp("nan");
    let recs = records(&dir);
    let mut t = trainer(MODEL, None);
    // Poison one weight: every logit, log-prob and loss becomes NaN.
    let norm = t
        .params()
        .iter()
        .find(|p| p.name() == "model.norm.weight")
        .unwrap()
        .var
        .clone();
    norm.set(&(norm.as_tensor() * f64::NAN).unwrap()).unwrap();
    let before = weights(&t);
    let mut st = state();
    let mut reports = Vec::new();
    let r = run::run(
        &mut t,
        &recs,
        &[],
        &scorer,
        &run_opts(&dir.join("out"), 10),
        &mut st,
        &AtomicBool::new(false),
        &mut |e| {
            if let RunEvent::Step(m) = e {
                reports.push(m.skipped.clone());
            }
        },
    );
    assert!(
        matches!(r, Err(RunError::Train(TrainError::NonFinite(3)))),
        "{r:?}"
    );
    assert_eq!(
        reports.len(),
        2,
        "two reported skips, the third is the error"
    );
    assert!(reports
        .iter()
        .all(|s| s.as_deref().is_some_and(|s| s.contains("non-finite"))));
    // Nothing was updated (NaN compares unequal, so compare the finite weights only).
    for ((n, a), (_, b)) in before.iter().zip(weights(&t)) {
        if n == "model.norm.weight" {
            continue;
        }
        let d = max_abs(&(a - &b).unwrap());
        assert_eq!(d, 0.0, "{n} moved during a skipped step");
    }
    std::fs::remove_dir_all(&dir).ok();
}
