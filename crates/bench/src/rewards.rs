//! `pointact bench rewards`: our port of Embodied-R1's released rewards (`train::rewards`) against
//! the released Python function itself (`benches/rewards_peer/score.py`, which imports the file the
//! user names), on the same batch, one thread each, in one run.
//!
//! The batch is what a GRPO step scores: responses in the `<think>…</think><answer>…</answer>`
//! form for every task type the released function dispatches, in the proportions of Embodied-R1's
//! stage-2 mix (pointing tasks most), a few malformed ones among them (no think, bad JSON, a
//! trace of 7 points). Both sides must agree on the sum of `overall` over the batch, or the
//! timing would compare different work.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};

use crate::train::rewards::score;

pub struct RewardsBenchArgs {
    /// Items in the batch.
    pub items: usize,
    pub seed: u64,
    /// The released `embodiedr1.py` (None: ours only).
    pub reference: Option<PathBuf>,
    /// The Python that imports it (with mathruler, sympy, … installed).
    pub python: String,
    /// Each side runs whole rounds over the batch for at least this long (s).
    pub min_seconds: f64,
    /// Where the batch is written for the peer.
    pub out_dir: PathBuf,
}

/// One side's figures.
#[derive(Debug, Clone)]
pub struct Side {
    pub name: String,
    pub rewards_per_s: f64,
    /// Sum of `overall` over one round (errors and NaN count 0).
    pub overall_sum: f64,
    pub errors: usize,
}

pub struct RewardsBenchReport {
    pub cpu: String,
    pub items: usize,
    pub ours: Side,
    pub peer: Option<Side>,
}

impl std::fmt::Display for RewardsBenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "cpu       {}", self.cpu)?;
        writeln!(
            f,
            "batch     {} items (Embodied-R1 stage-2 mix), one thread each",
            self.items
        )?;
        writeln!(
            f,
            "{:<34} {:>14} {:>14} {:>8}",
            "scorer", "rewards/s", "sum overall", "errors"
        )?;
        for s in std::iter::once(&self.ours).chain(&self.peer) {
            writeln!(
                f,
                "{:<34} {:>14.0} {:>14.6} {:>8}",
                s.name, s.rewards_per_s, s.overall_sum, s.errors
            )?;
        }
        match &self.peer {
            Some(p) => write!(
                f,
                "ratio     ours / released Python: {:.1}x (goal >= 20x)",
                self.ours.rewards_per_s / p.rewards_per_s
            ),
            None => write!(
                f,
                "ratio     (no --reference: the released Python was not run)"
            ),
        }
    }
}

pub fn run(args: &RewardsBenchArgs) -> anyhow::Result<RewardsBenchReport> {
    let batch = batch(args.items, args.seed);
    let ours = time_ours(&batch, args.min_seconds);
    let peer = match &args.reference {
        Some(reference) => {
            let p = run_peer(args, reference, &batch)?;
            let tol = 1e-6 * batch.len() as f64;
            anyhow::ensure!(
                (p.overall_sum - ours.overall_sum).abs() <= tol && p.errors == ours.errors,
                "the released Python scored the batch differently (sum {} vs ours {}, errors {} vs {}): \
                 is {} the released embodiedr1.py at e599e95?",
                p.overall_sum,
                ours.overall_sum,
                p.errors,
                ours.errors,
                reference.display()
            );
            Some(p)
        }
        None => None,
    };
    Ok(RewardsBenchReport {
        cpu: crate::cpu_model(),
        items: batch.len(),
        ours,
        peer,
    })
}

fn one_round(batch: &[(String, String)]) -> (f64, usize) {
    let mut sum = 0.0;
    let mut errors = 0;
    for (r, g) in batch {
        match score(r, g) {
            Ok(s) if !s.overall().is_nan() => sum += s.overall(),
            Ok(_) => {}
            Err(_) => errors += 1,
        }
    }
    (sum, errors)
}

fn time_ours(batch: &[(String, String)], min_seconds: f64) -> Side {
    let (sum, errors) = one_round(batch);
    let t0 = Instant::now();
    let mut rounds = 0usize;
    while rounds == 0 || t0.elapsed() < Duration::from_secs_f64(min_seconds) {
        std::hint::black_box(one_round(std::hint::black_box(batch)));
        rounds += 1;
    }
    Side {
        name: "pointact train::rewards (Rust)".into(),
        rewards_per_s: (rounds * batch.len()) as f64 / t0.elapsed().as_secs_f64(),
        overall_sum: sum,
        errors,
    }
}

fn run_peer(
    args: &RewardsBenchArgs,
    reference: &Path,
    batch: &[(String, String)],
) -> anyhow::Result<Side> {
    std::fs::create_dir_all(&args.out_dir)?;
    let items = args.out_dir.join("rewards_batch.jsonl");
    let mut text = String::new();
    for (r, g) in batch {
        let _ = writeln!(text, "{}", json!({"response": r, "ground_truth": g}));
    }
    std::fs::write(&items, text)?;
    let script = crate::workspace_root().join("benches/rewards_peer/score.py");
    let out = Command::new(&args.python)
        .arg(&script)
        .arg("--reference")
        .arg(reference)
        .arg("--items")
        .arg(&items)
        .arg("--min-seconds")
        .arg(args.min_seconds.to_string())
        .output()
        .map_err(|e| anyhow::anyhow!("cannot run {}: {e}", args.python))?;
    anyhow::ensure!(
        out.status.success(),
        "the released Python failed (it needs mathruler, sympy, pylatexenc, tqdm, numpy and scipy: \
         see tests/fixtures/gen_rewards_golden.py for the pins):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).map_err(|e| {
        anyhow::anyhow!(
            "the peer printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })?;
    let n = v["n"].as_f64().unwrap_or(0.0);
    let rounds = v["rounds"].as_f64().unwrap_or(0.0);
    let seconds = v["seconds"].as_f64().unwrap_or(f64::NAN);
    Ok(Side {
        name: "released embodiedr1.py (Python)".into(),
        rewards_per_s: n * rounds / seconds,
        overall_sum: v["overall_sum"].as_f64().unwrap_or(f64::NAN),
        errors: v["errors"].as_u64().unwrap_or(0) as usize,
    })
}

/// A deterministic batch: (response, ground truth) pairs over every task type.
pub(crate) fn batch(n: usize, seed: u64) -> Vec<(String, String)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| item(&mut rng)).collect()
}

fn pts(rng: &mut ChaCha8Rng, k: usize, near: Option<&[[f64; 2]]>) -> Vec<[i64; 2]> {
    (0..k)
        .map(|i| match near {
            Some(c) => {
                let c = c[i % c.len()];
                [
                    (c[0] + rng.gen_range(-40.0..40.0)).round() as i64,
                    (c[1] + rng.gen_range(-40.0..40.0)).round() as i64,
                ]
            }
            None => [rng.gen_range(0..640), rng.gen_range(0..480)],
        })
        .collect()
}

fn answer(rng: &mut ChaCha8Rng, inner: &str) -> String {
    let think = [
        "I look at the image and find the object the instruction names.",
        "The free space to the right of the bowl is large enough for the cup.",
        "The handle is the part to grasp; the blade must not be touched.",
    ][rng.gen_range(0..3)];
    match rng.gen_range(0..20) {
        // Malformed now and then, as a policy early in training answers.
        0 => format!("<answer>{inner}</answer>"),
        1 => format!("<think>{think}</think> {inner}"),
        _ => format!("<think>{think}</think><answer>{inner}</answer>"),
    }
}

fn item(rng: &mut ChaCha8Rng) -> (String, String) {
    let centre = [[rng.gen_range(100.0..540.0), rng.gen_range(100.0..380.0)]];
    let point_block = |p: &[[i64; 2]]| format!("<point>{}</point>", json!(p));
    match rng.gen_range(0..100) {
        0..=9 => {
            let letters = ["A", "B", "C", "D"];
            let (gt, said) = (letters[rng.gen_range(0..4)], letters[rng.gen_range(0..4)]);
            let kind = if rng.gen_bool(0.5) {
                "general_qa"
            } else {
                "spatial_qa"
            };
            (answer(rng, said), format!("<type>{kind}</type>{gt}"))
        }
        10..=29 => {
            let k = rng.gen_range(1..6);
            let p = pts(rng, k, Some(&centre));
            let gt = pts(rng, 6, Some(&centre));
            (
                answer(rng, &point_block(&p)),
                format!("<type>point_ref</type>{}", json!(gt)),
            )
        }
        30..=44 => {
            let [x, y] = centre[0];
            let bbox = [x - 60.0, y - 40.0, x + 60.0, y + 40.0];
            let free = pts(rng, 8, Some(&centre));
            let k = rng.gen_range(1..9);
            let p = pts(rng, k, Some(&centre));
            (
                answer(rng, &point_block(&p)),
                format!(
                    "<type>fsd_free_point</type>{}",
                    json!({"bbox": bbox, "free_points": free})
                ),
            )
        }
        45..=64 => {
            let traj: Vec<[i64; 2]> = (0..8)
                .map(|i| {
                    let t = i as f64 / 7.0;
                    [
                        (centre[0][0] + 150.0 * t) as i64,
                        (centre[0][1] - 80.0 * t * (1.0 - t)) as i64,
                    ]
                })
                .collect();
            let k = if rng.gen_range(0..10) == 0 { 7 } else { 8 };
            let p: Vec<[i64; 2]> = traj
                .iter()
                .take(k)
                .map(|q| [q[0] + rng.gen_range(-25..25), q[1] + rng.gen_range(-25..25)])
                .collect();
            (
                answer(rng, &point_block(&p)),
                format!(
                    "<type>fsd_visual_trace</type>{}",
                    json!({"trajectory": traj})
                ),
            )
        }
        65..=94 => {
            let [x, y] = centre[0];
            let seg: Vec<[f64; 2]> = (0..12)
                .map(|i| {
                    let a = i as f64 * std::f64::consts::TAU / 12.0;
                    let r = 50.0 + 15.0 * (3.0 * a).sin();
                    [x + r * a.cos(), y + r * a.sin()]
                })
                .collect();
            let k = rng.gen_range(1..4);
            let p = pts(rng, k, Some(&centre));
            let kind = if rng.gen_bool(0.7) {
                "point_rec"
            } else {
                "grounding_rec"
            };
            (
                answer(rng, &point_block(&p)),
                format!("<type>{kind}</type>{}", json!({"segmentation": seg})),
            )
        }
        _ => {
            let dirs = ["left", "right", "front", "behind", "top", "center"];
            let dir = dirs[rng.gen_range(0..dirs.len())];
            let obj: Vec<[f64; 3]> = (0..2)
                .map(|_| {
                    [
                        rng.gen_range(-0.3..0.3),
                        rng.gen_range(-0.3..0.3),
                        rng.gen_range(0.0..0.2),
                    ]
                })
                .collect();
            let p = pts(rng, 1, Some(&centre));
            let inner = format!(
                "{}<depth>[{}]</depth>",
                point_block(&p),
                rng.gen_range(600..1400)
            );
            (
                answer(rng, &inner),
                format!(
                    "<type>3d_position</type>{}",
                    json!({"object": obj, "direction": dir})
                ),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_batch_is_deterministic_and_covers_every_task_type() {
        let a = batch(2000, 7);
        assert_eq!(a, batch(2000, 7));
        for t in [
            "general_qa",
            "spatial_qa",
            "point_ref",
            "fsd_free_point",
            "fsd_visual_trace",
            "point_rec",
            "grounding_rec",
            "3d_position",
        ] {
            let tag = format!("<type>{t}</type>");
            let n = a.iter().filter(|(_, g)| g.starts_with(&tag)).count();
            assert!(n >= 10, "{t}: {n}");
        }
        // Scored by ours without a panic, most of them to a number.
        let (sum, errors) = one_round(&a);
        assert!(sum > 100.0 && errors == 0, "{sum} {errors}");
    }
}
