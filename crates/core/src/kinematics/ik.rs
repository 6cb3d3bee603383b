//! Inverse kinematics: Levenberg–Marquardt (damped least squares with an adaptive damping factor) on
//! `k`'s FK and Jacobian, joint limits by clamping, and random restarts.
//!
//! Why this shape: short damped attempts from many starting points beat long attempts from one
//! (TRAC-IK's finding, Beeson & Ames, Humanoids 2015; reproduced on these arms in
//! docs/references.md §4). The first attempt starts at the caller's seed (in practice the current
//! joint state), so the answer is the solution the arm can reach with the least motion whenever
//! that attempt converges.
//! Restarts draw from a generator seeded per call, so a solve is a pure function of
//! (target, seed, options): reproducible in tests, in the safety gate and across runs.

use k::nalgebra::{DVector, Isometry3, Vector3};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::error::IkError;
use super::model::{JointLimit, RobotModel};

/// Tolerances and effort of the IK solver's damped restarts.
#[derive(Debug, Clone, PartialEq)]
pub struct IkOptions {
    /// Converged when the tip is this close to the target (m).
    pub position_tolerance: f64,
    /// ... and the rotation error is below this (rad).
    pub rotation_tolerance: f64,
    /// Iterations per attempt before a restart.
    pub max_iterations: usize,
    /// Attempts in all (the first from the seed, the rest from random joint vectors).
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
            max_attempts: 100,
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

/// An IK solver for one robot. Owns its own copy of the chain, so each thread makes its own solver.
pub struct IkSolver {
    arm: k::SerialChain<f64>,
    limits: Vec<JointLimit>,
    /// Tolerances and limits of the search; may be changed between solves.
    pub options: IkOptions,
}

impl IkSolver {
    /// A solver for `model`'s arm chain and joint limits.
    pub fn new(model: &RobotModel, options: IkOptions) -> Self {
        IkSolver {
            arm: model.arm_chain(),
            limits: model.joint_limits().to_vec(),
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
            let (q, pe, re, its) = self.attempt(target, start);
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
    fn attempt(&self, target: &Isometry3<f64>, mut q: Vec<f64>) -> (Vec<f64>, f64, f64, usize) {
        let n = q.len();
        let mut e = self.residual(target, &q);
        let mut cost = e.norm_squared();
        let mut lambda = 1e-3;
        let mut its = 0;
        while its < self.options.max_iterations {
            let (pe, re) = split_norms(&e);
            if pe <= self.options.position_tolerance && re <= self.options.rotation_tolerance {
                break;
            }
            its += 1;
            // The Jacobian at q (residual() left the chain's joints at q).
            let j = k::jacobian(&self.arm);
            let jt = j.transpose();
            let jtj = &jt * &j;
            let g = &jt * &e;
            let mut improved = false;
            // Raise damping until a step lowers the cost; a few tries, then give up on this attempt.
            for _ in 0..8 {
                let mut a = jtj.clone();
                for i in 0..n {
                    a[(i, i)] += lambda * (1.0 + jtj[(i, i)]);
                }
                let Some(dq) = a.cholesky().map(|c| c.solve(&g)) else {
                    lambda *= 10.0;
                    continue;
                };
                let cand: Vec<f64> = q
                    .iter()
                    .zip(dq.iter())
                    .zip(&self.limits)
                    .map(|((qi, d), l)| (qi + d).clamp(l.lower, l.upper))
                    .collect();
                let e_new = self.residual(target, &cand);
                let c_new = e_new.norm_squared();
                if c_new < cost {
                    q = cand;
                    e = e_new;
                    cost = c_new;
                    lambda = (lambda * 0.1).max(1e-9);
                    improved = true;
                    break;
                }
                lambda *= 10.0;
            }
            if !improved {
                // Stuck (a limit or a local minimum): the chain holds a rejected candidate now.
                self.arm.set_joint_positions_unchecked(&q);
                break;
            }
        }
        let (pe, re) = split_norms(&e);
        (q, pe, re, its)
    }

    /// Pose error as a 6-vector in the base frame: position difference, then the rotation vector of
    /// target·current⁻¹, the quantity the geometric Jacobian maps joint velocities to.
    fn residual(&self, target: &Isometry3<f64>, q: &[f64]) -> DVector<f64> {
        self.arm.set_joint_positions_unchecked(q);
        let cur = self.arm.end_transform();
        let dp: Vector3<f64> = target.translation.vector - cur.translation.vector;
        let dr = (target.rotation * cur.rotation.inverse()).scaled_axis();
        DVector::from_column_slice(&[dp.x, dp.y, dp.z, dr.x, dr.y, dr.z])
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

fn split_norms(e: &DVector<f64>) -> (f64, f64) {
    let p = (e[0] * e[0] + e[1] * e[1] + e[2] * e[2]).sqrt();
    let r = (e[3] * e[3] + e[4] * e[4] + e[5] * e[5]).sqrt();
    (p, r)
}
