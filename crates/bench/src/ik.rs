//! `pointact bench ik`: our IK against `k::JacobianIkSolver` and, when installed, TRAC-IK through the
//! `pytracik` wheel (`benches/ik_peer.py`), on the same random reachable poses, in one run.
//!
//! Protocol of TRAC-IK's published table: targets are FK of joint vectors drawn uniformly within the
//! limits; every solve starts from the nominal (mid-range) pose; a solve counts as a success only if
//! FK of the answer is within 0.1 mm and 0.05° of the target (checked here, not trusted from the
//! solver); times include failures.

use std::fmt;
use std::io::Write;
use std::process::Command;
use std::time::Instant;

use k::nalgebra::Isometry3;
use k::InverseKinematicsSolver;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::kinematics::{pose_error, IkOptions, IkSolver, KinematicsError, RobotModel};

/// Success bar of the bench (and of the test suite): 0.1 mm and 0.05°.
pub const MAX_POSITION_ERROR_M: f64 = 1e-4;
pub const MAX_ROTATION_ERROR_RAD: f64 = 0.05 * std::f64::consts::PI / 180.0;

/// Options of `pointact bench ik`.
pub(crate) struct IkBenchArgs {
    pub robot: String,
    pub n: usize,
    pub seed: u64,
    pub python_peer: bool,
}

/// One solver's figures.
#[derive(Debug, Clone)]
pub(crate) struct SolverStats {
    pub name: String,
    pub n: usize,
    pub success: usize,
    pub median_ms: f64,
    pub p99_ms: f64,
    pub mean_ms: f64,
}

impl SolverStats {
    pub(crate) fn success_rate(&self) -> f64 {
        self.success as f64 / self.n.max(1) as f64
    }
    fn from_times(name: String, success: usize, mut times_ms: Vec<f64>) -> Self {
        times_ms.sort_by(f64::total_cmp);
        let n = times_ms.len();
        let pick = |q: f64| times_ms[((n as f64 - 1.0) * q).round() as usize];
        SolverStats {
            name,
            n,
            success,
            median_ms: if n > 0 { pick(0.5) } else { f64::NAN },
            p99_ms: if n > 0 { pick(0.99) } else { f64::NAN },
            mean_ms: times_ms.iter().sum::<f64>() / n.max(1) as f64,
        }
    }
}

pub(crate) struct IkBenchReport {
    pub cpu: String,
    pub robot: String,
    pub n: usize,
    pub seed: u64,
    pub ours: SolverStats,
    pub k_default: SolverStats,
    /// TRAC-IK figures, or why they are missing.
    pub tracik: Result<SolverStats, String>,
}

impl IkBenchReport {
    /// The first bar set for this solver: TRAC-IK's published success at a lower median.
    fn meets_median_goal(&self) -> bool {
        self.ours.success_rate() >= 0.999 && self.ours.median_ms <= 0.2
    }

    /// The tail bar: success at least 99.97 % as the table prints it (2 999 of 3 000 shows as
    /// 99.97 %) and a p99 no worse than TRAC-IK's measured on the same poses and CPU, since
    /// TRAC-IK's times differ several-fold between CPUs. `None` without TRAC-IK.
    fn meets_tracik_goal(&self) -> Option<bool> {
        let peer = self.tracik.as_ref().ok()?;
        let percent = (10_000.0 * self.ours.success_rate()).round() / 100.0;
        Some(percent >= 99.97 && self.ours.p99_ms <= peer.p99_ms)
    }
}

/// A joint vector and the tip pose it produces.
pub(crate) type JointsAndPose = (Vec<f64>, Isometry3<f64>);

/// Random reachable targets: FK of joint vectors uniform within the limits (fixed seed).
pub fn random_targets(
    model: &RobotModel,
    n: usize,
    seed: u64,
) -> Result<Vec<JointsAndPose>, KinematicsError> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let q: Vec<f64> = model
                .joint_limits()
                .iter()
                .map(|l| rng.gen_range(l.lower..=l.upper))
                .collect();
            let pose = model.fk(&q)?;
            Ok((q, pose))
        })
        .collect()
}

fn verified(model: &RobotModel, q: &[f64], target: &Isometry3<f64>) -> bool {
    model.check_limits(q).is_ok()
        && model.fk(q).is_ok_and(|p| {
            let (dp, dr) = pose_error(&p, target);
            dp <= MAX_POSITION_ERROR_M && dr <= MAX_ROTATION_ERROR_RAD
        })
}

pub(crate) fn run(args: &IkBenchArgs) -> Result<IkBenchReport, KinematicsError> {
    let model = RobotModel::resolve(&args.robot)?;
    let targets = random_targets(&model, args.n, args.seed)?;
    let nominal = model.mid_range();
    let bar = progress(args.n as u64 * 2);

    let mut solver = IkSolver::new(&model, IkOptions::default());
    let mut times = Vec::with_capacity(args.n);
    let mut ok = 0;
    for (_, target) in &targets {
        let t0 = Instant::now();
        let res = solver.solve(target, &nominal);
        times.push(t0.elapsed().as_secs_f64() * 1e3);
        if res.is_ok_and(|s| verified(&model, &s.q, target)) {
            ok += 1;
        }
        bar.inc(1);
    }
    let ours = SolverStats::from_times("pointact LM + restarts".into(), ok, times);

    // k as a user gets it: default solver, one attempt from the nominal pose.
    let arm = model.arm_chain();
    let k_solver = k::JacobianIkSolver::default();
    let mut times = Vec::with_capacity(args.n);
    let mut ok = 0;
    for (_, target) in &targets {
        arm.set_joint_positions_unchecked(&nominal);
        let t0 = Instant::now();
        let res = k_solver.solve(&arm, target);
        times.push(t0.elapsed().as_secs_f64() * 1e3);
        if res.is_ok() && verified(&model, &arm.joint_positions(), target) {
            ok += 1;
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    let k_default = SolverStats::from_times("k::JacobianIkSolver::default()".into(), ok, times);

    let tracik = if args.python_peer {
        run_tracik_peer(&model, &targets, &nominal)
    } else {
        Err("skipped (--no-python)".into())
    };
    Ok(IkBenchReport {
        cpu: crate::cpu_model(),
        robot: model.source.clone(),
        n: args.n,
        seed: args.seed,
        ours,
        k_default,
        tracik,
    })
}

fn progress(len: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(len);
    bar.set_style(
        indicatif::ProgressStyle::with_template("solving {bar:40} {pos}/{len} ({eta})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar
}

/// Runs `benches/ik_peer.py` (TRAC-IK via pytracik) on the same targets and seed.
fn run_tracik_peer(
    model: &RobotModel,
    targets: &[JointsAndPose],
    nominal: &[f64],
) -> Result<SolverStats, String> {
    let script = crate::workspace_root().join("benches/ik_peer.py");
    if !script.exists() {
        return Err(format!("{} not found", script.display()));
    }
    let dir = std::env::temp_dir().join(format!("pointact-ik-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let urdf_path = dir.join("robot.urdf");
    let urdf_text = urdf_rs::write_to_string(&model.urdf).map_err(|e| e.to_string())?;
    std::fs::write(&urdf_path, urdf_text).map_err(|e| e.to_string())?;
    let request = serde_json::json!({
        "urdf": urdf_path,
        "base_link": model.config.base_link,
        "tip_link": model.config.tip_link,
        "arm_joints": model.config.arm_joints,
        "seed": nominal,
        "targets": targets.iter().map(|(_, p)| {
            let m = p.to_homogeneous();
            (0..16).map(|i| m[(i / 4, i % 4)]).collect::<Vec<f64>>()
        }).collect::<Vec<_>>(),
        "timeout_s": 0.005,
        "eps": 1e-5,
    });
    let req_path = dir.join("request.json");
    std::fs::File::create(&req_path)
        .and_then(|mut f| f.write_all(request.to_string().as_bytes()))
        .map_err(|e| e.to_string())?;
    let out = Command::new("python3")
        .arg(&script)
        .arg(&req_path)
        .output()
        .map_err(|e| format!("cannot start python3: {e}"))?;
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'));
    let v: serde_json::Value =
        line.and_then(|l| serde_json::from_str(l).ok())
            .ok_or_else(|| {
                format!(
                    "peer printed no JSON (exit {:?}): {}",
                    out.status.code(),
                    String::from_utf8_lossy(&out.stderr).trim()
                )
            })?;
    if let Some(e) = v.get("error") {
        return Err(format!("peer unavailable: {e}"));
    }
    let num = |k: &str| {
        v.get(k)
            .and_then(|x| x.as_f64())
            .ok_or(format!("peer JSON lacks `{k}`"))
    };
    Ok(SolverStats {
        name: v
            .get("solver")
            .and_then(|s| s.as_str())
            .unwrap_or("pytracik")
            .to_string(),
        n: num("n")? as usize,
        success: num("success")? as usize,
        median_ms: num("median_ms")?,
        p99_ms: num("p99_ms")?,
        mean_ms: num("mean_ms")?,
    })
}

impl fmt::Display for IkBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "IK bench: {} | {} random reachable poses (seed {}) | start: mid-range pose | success: FK within 0.1 mm and 0.05 deg",
            self.robot, self.n, self.seed
        )?;
        writeln!(f, "cpu: {}", self.cpu)?;
        writeln!(
            f,
            "{:<34} {:>9} {:>11} {:>9} {:>9}",
            "solver", "success", "median ms", "p99 ms", "mean ms"
        )?;
        let row = |f: &mut fmt::Formatter<'_>, s: &SolverStats| {
            writeln!(
                f,
                "{:<34} {:>8.2}% {:>11.3} {:>9.3} {:>9.3}",
                s.name,
                100.0 * s.success_rate(),
                s.median_ms,
                s.p99_ms,
                s.mean_ms
            )
        };
        row(f, &self.ours)?;
        row(f, &self.k_default)?;
        match &self.tracik {
            Ok(s) => row(f, s)?,
            Err(e) => writeln!(f, "{:<34} {e}", "TRAC-IK (pytracik)")?,
        }
        let ratio = |f: &mut fmt::Formatter<'_>, s: &SolverStats| {
            writeln!(
                f,
                "vs {:<31} success {:+.2} points, median time x{:.2} (peer/ours), p99 x{:.2}",
                s.name,
                100.0 * (self.ours.success_rate() - s.success_rate()),
                s.median_ms / self.ours.median_ms,
                s.p99_ms / self.ours.p99_ms
            )
        };
        ratio(f, &self.k_default)?;
        if let Ok(s) = &self.tracik {
            ratio(f, s)?;
        }
        let verdict = |holds: Option<bool>| match holds {
            Some(true) => "holds",
            Some(false) => "does not hold",
            None => "not measured (no TRAC-IK in this run)",
        };
        writeln!(
            f,
            "goal: >= 99.9% at median <= 0.2 ms: {}",
            verdict(Some(self.meets_median_goal()))
        )?;
        write!(
            f,
            "goal: >= 99.97% and p99 <= TRAC-IK's in this run: {}",
            verdict(self.meets_tracik_goal())
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(success: usize, median_ms: f64, p99_ms: f64) -> SolverStats {
        SolverStats {
            name: "s".into(),
            n: 3000,
            success,
            median_ms,
            p99_ms,
            mean_ms: median_ms,
        }
    }

    fn report(ours: SolverStats, tracik: Result<SolverStats, String>) -> IkBenchReport {
        IkBenchReport {
            cpu: "test cpu".into(),
            robot: "xarm6".into(),
            n: 3000,
            seed: 7,
            ours,
            k_default: stats(0, 0.02, 0.03),
            tracik,
        }
    }

    #[test]
    fn the_tail_goal_compares_with_tracik_in_the_same_run() {
        let peer = || Ok(stats(2990, 0.5, 4.6));
        // 2 999 of 3 000 prints as 99.97 % and meets the bar; 2 998 (99.93 %) does not.
        assert_eq!(
            report(stats(2999, 0.03, 0.25), peer()).meets_tracik_goal(),
            Some(true)
        );
        assert_eq!(
            report(stats(2998, 0.03, 0.25), peer()).meets_tracik_goal(),
            Some(false)
        );
        // A tail longer than TRAC-IK's fails it whatever the success.
        assert_eq!(
            report(stats(3000, 0.03, 4.7), peer()).meets_tracik_goal(),
            Some(false)
        );
        assert_eq!(
            report(stats(3000, 0.03, 0.25), Err("none".into())).meets_tracik_goal(),
            None
        );
        let text = report(stats(3000, 0.03, 4.7), peer()).to_string();
        assert!(text.contains("cpu: test cpu"), "{text}");
        assert!(
            text.ends_with("p99 <= TRAC-IK's in this run: does not hold"),
            "{text}"
        );
        assert!(text.contains("median <= 0.2 ms: holds"), "{text}");
    }
}
