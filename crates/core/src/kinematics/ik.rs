//! Inverse kinematics: Levenberg–Marquardt (damped least squares with an adaptive damping factor) on
//! the flattened chain's FK and Jacobian (`chain`), joint limits by clamping, and random restarts.
//!
//! Why this shape: short damped attempts from many starting points beat long attempts from one
//! (TRAC-IK's finding, Beeson & Ames, Humanoids 2015; reproduced on these arms in
//! docs/references.md §4). The first attempt starts at the caller's seed (in practice the current
//! joint state), so the answer is the solution the arm can reach with the least motion whenever
//! that attempt converges.
//! Restarts draw from a generator seeded per call, so a solve is a pure function of
//! (target, seed, options): reproducible in tests, in the safety gate and across runs.
//!
//! A restart that stalls is abandoned early (`STALL_STEPS`, `STALL_RATIO`): descents into a local
//! minimum or against a limit keep lowering the cost a little at every step, so left alone they run
//! their whole iteration budget and make up most of a hard pose's time (the p99 of
//! `pointact bench ik`), while converging descents cut the cost by orders of magnitude per step.
//! TRAC-IK's KDL-RR restarts KDL when successive joint vectors stop changing (Beeson & Ames,
//! Humanoids 2015); this rule watches the error instead, which also catches slow crawls. The first
//! attempt, from the caller's seed, is never cut short, so the least-motion answer is kept whenever
//! it converges at all.

use k::nalgebra::{Isometry3, Vector3};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::chain::{jacobian_column, FlatChain, JointFrame};
use super::error::IkError;
use super::model::{JointLimit, RobotModel};

/// A restart is abandoned when its last `STALL_STEPS` accepted steps together lowered the squared
/// error by less than `1 - STALL_RATIO`. Chosen among windows of 2–5 steps and ratios of 0.5–0.9
/// on three sets of 3 000 random poses per arm (`bench ik`'s generator): with these success stayed
/// as high while the p99 fell about threefold on both arms (docs/performance.md).
const STALL_STEPS: usize = 3;
const STALL_RATIO: f64 = 0.7;

/// Tolerances and effort of the IK solver's damped restarts.
#[derive(Debug, Clone, PartialEq)]
pub struct IkOptions {
    /// Converged when the tip is this close to the target (m).
    pub position_tolerance: f64,
    /// ... and the rotation error is below this (rad).
    pub rotation_tolerance: f64,
    /// Iterations per attempt before a restart.
    pub max_iterations: usize,
    /// Attempts in all (the first from the seed, the rest from random joint vectors). Restarts that
    /// stall end early, so a restart costs about a dozen iterations on average.
    pub max_attempts: usize,
    /// Seed of the restart generator.
    pub rng_seed: u64,
}

impl Default for IkOptions {
    /// Tolerances ten times tighter than the acceptance bar (0.1 mm, 0.05°), so a converged answer
    /// is well inside it.
    fn default() -> Self {
        IkOptions {
            position_tolerance: 1e-5,
            rotation_tolerance: 1e-4,
            max_iterations: 40,
            max_attempts: 200,
            rng_seed: 0x5eed,
        }
    }
}

/// A converged IK answer and what it cost.
#[derive(Debug, Clone, PartialEq)]
pub struct IkSolution {
    /// Joint values, inside the limits; joints with more than one turn of range are moved by whole
    /// turns to the value nearest the seed.
    pub q: Vec<f64>,
    /// Distance between the tip at `q` and the target, m.
    pub position_error: f64,
    /// Angle of the rotation left between the tip at `q` and the target, rad.
    pub rotation_error: f64,
    /// Attempts used (1 = converged from the seed).
    pub attempts: usize,
    /// Iterations over all attempts.
    pub iterations: usize,
}

/// Buffers reused by every iteration, so a solve allocates only its answer.
#[derive(Default)]
struct Scratch {
    frames: Vec<JointFrame>,
    cand_frames: Vec<JointFrame>,
    /// Jacobian columns.
    jac: Vec<[f64; 6]>,
    /// JᵀJ, row-major.
    jtj: Vec<f64>,
    /// The damped JᵀJ, factorised in place.
    a: Vec<f64>,
    /// Jᵀe.
    g: Vec<f64>,
    dq: Vec<f64>,
}

/// An IK solver for one robot. Owns its own copy of the chain, so each thread makes its own solver.
pub struct IkSolver {
    chain: FlatChain,
    limits: Vec<JointLimit>,
    scratch: Scratch,
    /// Tolerances and limits of the search; may be changed between solves.
    pub options: IkOptions,
}

impl IkSolver {
    /// A solver for `model`'s arm chain and joint limits.
    pub fn new(model: &RobotModel, options: IkOptions) -> Self {
        IkSolver {
            chain: FlatChain::new(&model.arm_chain()),
            limits: model.joint_limits().to_vec(),
            scratch: Scratch::default(),
            options,
        }
    }

    /// Joint values that put the tip at `target` (base frame), starting from `seed`.
    pub fn solve(&mut self, target: &Isometry3<f64>, seed: &[f64]) -> Result<IkSolution, IkError> {
        let n = self.limits.len();
        if seed.len() != n {
            return Err(IkError::SeedLength {
                expected: n,
                got: seed.len(),
            });
        }
        let t = target.translation.vector;
        let r = target.rotation.coords;
        if !(t.iter().all(|v| v.is_finite()) && r.iter().all(|v| v.is_finite())) {
            return Err(IkError::NonFiniteTarget);
        }
        let mut rng = ChaCha8Rng::seed_from_u64(self.options.rng_seed);
        let mut best = (f64::INFINITY, f64::INFINITY);
        let mut iterations = 0;
        let mut start: Vec<f64> = seed
            .iter()
            .zip(&self.limits)
            .map(|(q, l)| {
                if q.is_finite() {
                    q.clamp(l.lower, l.upper)
                } else {
                    l.mid()
                }
            })
            .collect();
        for attempt in 1..=self.options.max_attempts {
            let (q, pe, re, its) = self.attempt(target, start, attempt > 1);
            iterations += its;
            if pe <= self.options.position_tolerance && re <= self.options.rotation_tolerance {
                return Ok(IkSolution {
                    q: self.nearest_turn(q, seed),
                    position_error: pe,
                    rotation_error: re,
                    attempts: attempt,
                    iterations,
                });
            }
            if pe + re < best.0 + best.1 {
                best = (pe, re);
            }
            start = self
                .limits
                .iter()
                .map(|l| {
                    // One turn of a multi-turn joint covers every orientation it can reach.
                    let (lo, hi) = if l.upper - l.lower > 2.0 * std::f64::consts::PI {
                        (
                            l.mid() - std::f64::consts::PI,
                            l.mid() + std::f64::consts::PI,
                        )
                    } else {
                        (l.lower, l.upper)
                    };
                    rng.gen_range(lo..=hi)
                })
                .collect();
        }
        Err(IkError::Unreachable {
            attempts: self.options.max_attempts,
            best_position_error_m: best.0,
            best_rotation_error_rad: best.1,
        })
    }

    /// One Levenberg–Marquardt descent; returns (q, position error, rotation error, iterations).
    /// A `restart` gives up when it stalls (see `STALL_STEPS`).
    fn attempt(
        &mut self,
        target: &Isometry3<f64>,
        mut q: Vec<f64>,
        restart: bool,
    ) -> (Vec<f64>, f64, f64, usize) {
        let n = q.len();
        let Scratch {
            frames,
            cand_frames,
            jac,
            jtj,
            a,
            g,
            dq,
        } = &mut self.scratch;
        jac.resize(n, [0.0; 6]);
        jtj.resize(n * n, 0.0);
        a.resize(n * n, 0.0);
        g.resize(n, 0.0);
        dq.resize(n, 0.0);
        let mut tip = self.chain.fk(&q, frames);
        let mut e = residual(target, &tip);
        let mut cost = norm_squared(&e);
        let mut lambda = 1e-3;
        let mut its = 0;
        let mut cand = vec![0.0; n];
        // The cost after accepted step k sits at k % STALL_STEPS (the start's cost is step 0), so
        // the slot a new step overwrites holds the cost STALL_STEPS steps back.
        let mut recent = [f64::INFINITY; STALL_STEPS];
        recent[0] = cost;
        let mut accepted = 0;
        while its < self.options.max_iterations {
            let (pe, re) = split_norms(&e);
            if pe <= self.options.position_tolerance && re <= self.options.rotation_tolerance {
                break;
            }
            its += 1;
            // The Jacobian at q, its normal matrix JᵀJ and gradient Jᵀe.
            for (col, f) in jac.iter_mut().zip(frames.iter()) {
                *col = jacobian_column(f, &tip.translation.vector);
            }
            for i in 0..n {
                for k in 0..=i {
                    let v = dot6(&jac[i], &jac[k]);
                    jtj[i * n + k] = v;
                    jtj[k * n + i] = v;
                }
                g[i] = dot6(&jac[i], &e);
            }
            let mut improved = false;
            let mut stalled = false;
            // Raise damping until a step lowers the cost; a few tries, then give up on this attempt.
            for _ in 0..8 {
                a.copy_from_slice(jtj);
                for i in 0..n {
                    a[i * n + i] += lambda * (1.0 + jtj[i * n + i]);
                }
                if !cholesky_solve(a, n, g, dq) {
                    lambda *= 10.0;
                    continue;
                }
                for (((c, qi), d), l) in cand.iter_mut().zip(&q).zip(dq.iter()).zip(&self.limits) {
                    *c = (qi + d).clamp(l.lower, l.upper);
                }
                let cand_tip = self.chain.fk(&cand, cand_frames);
                let e_new = residual(target, &cand_tip);
                let c_new = norm_squared(&e_new);
                if c_new < cost {
                    std::mem::swap(&mut q, &mut cand);
                    std::mem::swap(frames, cand_frames);
                    tip = cand_tip;
                    e = e_new;
                    accepted += 1;
                    let slot = accepted % STALL_STEPS;
                    let before = recent[slot];
                    recent[slot] = c_new;
                    cost = c_new;
                    lambda = (lambda * 0.1).max(1e-9);
                    improved = true;
                    stalled = restart && cost > STALL_RATIO * before;
                    break;
                }
                lambda *= 10.0;
            }
            if !improved || stalled {
                // Stuck or stalled (a limit or a local minimum): restart elsewhere.
                break;
            }
        }
        let (pe, re) = split_norms(&e);
        (q, pe, re, its)
    }

    /// Multi-turn joints (xArm J1/J4/J6: ±2π) reach the same pose at q and q ± 2π; pick the one
    /// nearest the seed so the arm does not spin a full turn for nothing.
    fn nearest_turn(&self, mut q: Vec<f64>, seed: &[f64]) -> Vec<f64> {
        let tau = 2.0 * std::f64::consts::PI;
        for ((qi, l), s) in q.iter_mut().zip(&self.limits).zip(seed) {
            if !s.is_finite() {
                continue;
            }
            for cand in [*qi - 2.0 * tau, *qi - tau, *qi + tau, *qi + 2.0 * tau] {
                if l.contains(cand) && (cand - s).abs() < (*qi - s).abs() {
                    *qi = cand;
                }
            }
        }
        q
    }
}

/// Pose error as a 6-vector in the base frame: position difference, then the rotation vector of
/// target·current⁻¹, the quantity the geometric Jacobian maps joint velocities to.
fn residual(target: &Isometry3<f64>, cur: &Isometry3<f64>) -> [f64; 6] {
    let dp: Vector3<f64> = target.translation.vector - cur.translation.vector;
    let dr = (target.rotation * cur.rotation.inverse()).scaled_axis();
    [dp.x, dp.y, dp.z, dr.x, dr.y, dr.z]
}

fn dot6(a: &[f64; 6], b: &[f64; 6]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn norm_squared(e: &[f64; 6]) -> f64 {
    dot6(e, e)
}

/// Solves `a x = b` for a symmetric `n`×`n` row-major `a` by Cholesky factorisation in place;
/// false when `a` is not positive definite. Arms have a handful of joints, so the plain loops
/// beat a general routine's setup and allocation.
fn cholesky_solve(a: &mut [f64], n: usize, b: &[f64], x: &mut [f64]) -> bool {
    for j in 0..n {
        let mut d = a[j * n + j];
        for k in 0..j {
            d -= a[j * n + k] * a[j * n + k];
        }
        if d.is_nan() || d <= 0.0 {
            return false;
        }
        let d = d.sqrt();
        a[j * n + j] = d;
        for i in j + 1..n {
            let mut s = a[i * n + j];
            for k in 0..j {
                s -= a[i * n + k] * a[j * n + k];
            }
            a[i * n + j] = s / d;
        }
    }
    // L y = b, then Lᵀ x = y.
    for i in 0..n {
        let mut s = b[i];
        for k in 0..i {
            s -= a[i * n + k] * x[k];
        }
        x[i] = s / a[i * n + i];
    }
    for i in (0..n).rev() {
        let mut s = x[i];
        for k in i + 1..n {
            s -= a[k * n + i] * x[k];
        }
        x[i] = s / a[i * n + i];
    }
    true
}

fn split_norms(e: &[f64; 6]) -> (f64, f64) {
    let p = (e[0] * e[0] + e[1] * e[1] + e[2] * e[2]).sqrt();
    let r = (e[3] * e[3] + e[4] * e[4] + e[5] * e[5]).sqrt();
    (p, r)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a target out of reach every descent ends in a local minimum: a restart gives up once it
    /// stalls, the attempt from the caller's seed runs on until it is stuck or out of iterations.
    #[test]
    fn a_stalled_restart_ends_early_but_the_seeded_attempt_runs_on() {
        let model = RobotModel::builtin("xarm6").unwrap();
        let mut solver = IkSolver::new(&model, IkOptions::default());
        let far = Isometry3::translation(2.0, 0.0, 0.3);
        let start = model.home().to_vec();
        let (_, pe_seed, _, its_seed) = solver.attempt(&far, start.clone(), false);
        let (q_restart, pe_restart, _, its_restart) = solver.attempt(&far, start, true);
        assert!(pe_seed > 0.5 && pe_restart > 0.5, "{pe_seed} {pe_restart}");
        assert!(
            its_restart >= STALL_STEPS && its_restart < its_seed,
            "restart {its_restart} iterations, seeded attempt {its_seed}"
        );
        // From the same start the two descents are the same step for step until the restart stops.
        let (q_seed, ..) = {
            let mut short = IkSolver::new(
                &model,
                IkOptions {
                    max_iterations: its_restart,
                    ..IkOptions::default()
                },
            );
            short.attempt(&far, model.home().to_vec(), false)
        };
        assert_eq!(q_seed, q_restart);
    }
}
