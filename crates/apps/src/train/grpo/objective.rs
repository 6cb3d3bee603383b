//! The GRPO objective as the trainers of the literature compute it (EasyR1 as released with
//! Embodied-R1, pickxiguapi/Embodied-R1 at `e599e95`, `verl/trainer/core_algos.py`; volcengine/verl
//! `verl/trainer/ppo/core_algos.py` at `012be9d`; huggingface/trl `trl/trainer/grpo_trainer.py` at
//! `f2cd577`): group-relative advantages, the token-level clipped surrogate with dual clip,
//! the KL to a frozen reference, and the loss aggregation modes. Everything on the loss path is
//! built from candle's differentiable primitives (`exp`, `minimum`, `maximum`, `where_cond`,
//! sums), never a fused op without a backward pass, so gradients reach the policy's log-probs.
//!
//! Advantages are plain numbers (they are constants of the loss); the loss functions take
//! `[B, T]` tensors of per-token log-probs and a `[B, T]` response mask (1 on response tokens).

use candle_core::{DType, Result, Tensor, D};

/// How rewards become advantages within a group of responses to one prompt.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AdvantageMode {
    /// `(r − mean_g) / (std_g + eps)`: GRPO. `unbiased` uses the N−1 std (EasyR1, verl, TRL);
    /// `eps` is 1e-6 in EasyR1/verl and 1e-4 in TRL.
    Group {
        /// Added to the std before dividing.
        eps: f64,
        /// Use the N−1 (sample) std rather than the N one.
        unbiased: bool,
    },
    /// `(r − mean_g) / (std_batch + eps)`: the group's mean, the whole batch's std (TRL
    /// `scale_rewards="batch"`, Embodied-R1.5's `mbpo`).
    BatchStd {
        /// Added to the std before dividing.
        eps: f64,
        /// Use the N−1 (sample) std rather than the N one.
        unbiased: bool,
    },
    /// `r − mean_g`: Dr.GRPO (no division by the std).
    NoStd,
    /// Leave-one-out baseline: `r_i − mean of the others` (RLOO).
    Rloo,
}

impl Default for AdvantageMode {
    /// EasyR1's (Embodied-R1's trainer).
    fn default() -> Self {
        AdvantageMode::Group {
            eps: 1e-6,
            unbiased: true,
        }
    }
}

/// Advantages for `rewards` laid out as consecutive groups of `group` responses; and, per group,
/// whether all its rewards were equal (its advantages are 0: DAPO's dynamic sampling drops it).
pub(crate) fn advantages(
    rewards: &[f64],
    group: usize,
    mode: AdvantageMode,
) -> (Vec<f64>, Vec<bool>) {
    assert!(
        group >= 1 && rewards.len().is_multiple_of(group),
        "whole groups"
    );
    let std_of = |xs: &[f64], unbiased: bool| {
        let n = xs.len() as f64;
        let m = xs.iter().sum::<f64>() / n;
        let dof = if unbiased { n - 1.0 } else { n };
        if dof <= 0.0 {
            return 0.0;
        }
        (xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / dof).sqrt()
    };
    let batch_std = |unbiased| std_of(rewards, unbiased);
    let mut out = Vec::with_capacity(rewards.len());
    let mut flat = Vec::new();
    for g in rewards.chunks(group) {
        let n = g.len() as f64;
        let mean = g.iter().sum::<f64>() / n;
        let no_signal = g.iter().all(|r| *r == g[0]);
        flat.push(no_signal);
        // Exactly 0, not the ulp a mean of equal numbers can leave (its sign would decide the
        // clip statistics).
        if no_signal {
            out.extend(std::iter::repeat_n(0.0, g.len()));
            continue;
        }
        match mode {
            AdvantageMode::Group { eps, unbiased } => {
                let s = std_of(g, unbiased);
                out.extend(g.iter().map(|r| (r - mean) / (s + eps)));
            }
            AdvantageMode::BatchStd { eps, unbiased } => {
                let s = batch_std(unbiased);
                out.extend(g.iter().map(|r| (r - mean) / (s + eps)));
            }
            AdvantageMode::NoStd => out.extend(g.iter().map(|r| r - mean)),
            AdvantageMode::Rloo => {
                let sum: f64 = g.iter().sum();
                out.extend(g.iter().map(|r| {
                    if g.len() > 1 {
                        r - (sum - r) / (n - 1.0)
                    } else {
                        0.0
                    }
                }));
            }
        }
    }
    (out, flat)
}

/// The clipping of the surrogate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Clip {
    /// ρ is clipped to `[1 − low, 1 + high]` (DAPO's clip-higher: high > low).
    pub low: f64,
    /// Upper clip width (default 0.3).
    pub high: f64,
    /// Dual clip for negative advantages: the loss is at most `−A · c` (EasyR1: 3), `None`: off.
    pub dual: Option<f64>,
}

impl Default for Clip {
    /// Embodied-R1's EasyR1: 0.2 / 0.3 / 3.
    fn default() -> Self {
        Clip {
            low: 0.2,
            high: 0.3,
            dual: Some(3.0),
        }
    }
}

/// The per-token surrogate loss `[B, T]` and its clip statistics (over response tokens).
pub struct PolicyLoss {
    /// `max(−Aρ, −Aρ_c)` (with the dual clip when set), `[B, T]`, unmasked: the mask applies at
    /// aggregation.
    pub per_token: Tensor,
    /// Fraction of tokens where the clipped term was taken (`L2 > L1`).
    pub clip_fraction: f64,
    /// Fraction of tokens where the dual clip bound (negative advantages).
    pub dual_clip_fraction: f64,
    /// `mean(−(logπ − logπ_old))` over response tokens (EasyR1's `ppo_kl`).
    pub approx_kl: f64,
}

/// EasyR1's token-level clipped surrogate, per token:
/// `ρ = exp(logπ − logπ_old)`, `ρ_c = exp(clamp(logπ − logπ_old, ln(1 − low), ln(1 + high)))`,
/// `L = max(−Aρ, −Aρ_c)`, and for `A < 0` with dual clip `min(L, −A·c)`.
/// `logp`, `old_logp`: `[B, T]`; `adv`: `[B]`; `mask`: `[B, T]` (statistics only).
pub(crate) fn policy_loss(
    logp: &Tensor,
    old_logp: &Tensor,
    adv: &Tensor,
    mask: &Tensor,
    clip: Clip,
) -> Result<PolicyLoss> {
    let delta = (logp - old_logp)?;
    let ratio = delta.exp()?;
    let clipped = delta
        .clamp((1.0 - clip.low).ln(), (1.0 + clip.high).ln())?
        .exp()?;
    let a = adv.unsqueeze(1)?.broadcast_as(logp.shape())?;
    let l1 = (a.neg()? * &ratio)?;
    let l2 = (a.neg()? * &clipped)?;
    let l = l1.maximum(&l2)?;
    let (per_token, dual_active) = match clip.dual {
        Some(c) => {
            let l3 = (a.neg()? * c)?;
            let negative = a.lt(0.0)?;
            let dual = l.minimum(&l3)?;
            let active = negative
                .to_dtype(DType::F64)?
                .mul(&l3.lt(&l)?.to_dtype(DType::F64)?)?;
            (negative.where_cond(&dual, &l)?, active)
        }
        None => (l.clone(), l.zeros_like()?.to_dtype(DType::F64)?),
    };
    let m = mask.to_dtype(DType::F64)?;
    let tokens = m.sum_all()?.to_scalar::<f64>()?.max(1.0);
    let frac = |t: &Tensor| -> Result<f64> {
        Ok((t.to_dtype(DType::F64)? * &m)?
            .sum_all()?
            .to_scalar::<f64>()?
            / tokens)
    };
    Ok(PolicyLoss {
        clip_fraction: frac(&l2.gt(&l1)?)?,
        dual_clip_fraction: frac(&dual_active)?,
        approx_kl: -frac(&delta.detach())?,
        per_token,
    })
}

/// KL estimators between the policy and the frozen reference, per token (`Δ = logπ − logπ_ref`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KlKind {
    /// `Δ`.
    K1,
    /// `|Δ|`.
    Abs,
    /// `½Δ²`.
    K2,
    /// `low_var_kl`: `x = clamp(logπ_ref − logπ, ±20)`, `exp(x) − x − 1`, clamped to `[−10, 10]`.
    K3,
}

pub(crate) fn kl(logp: &Tensor, ref_logp: &Tensor, kind: KlKind) -> Result<Tensor> {
    let delta = (logp - ref_logp)?;
    match kind {
        KlKind::K1 => Ok(delta),
        KlKind::Abs => delta.abs(),
        KlKind::K2 => delta.sqr()? * 0.5,
        KlKind::K3 => {
            let x = delta.neg()?.clamp(-20.0, 20.0)?;
            ((x.exp()? - &x)? - 1.0)?.clamp(-10.0, 10.0)
        }
    }
}

/// How per-token losses become one number.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Aggregation {
    /// Sum over all response tokens / their count (DAPO, verl's default).
    TokenMean,
    /// Each sequence's token mean, then the mean over sequences (the GRPO paper).
    SeqMeanTokenMean,
    /// Each sequence's token sum, then the mean over sequences.
    SeqMeanTokenSum,
    /// Each sequence's token sum / `max_len`, then the mean (Dr.GRPO).
    SeqMeanTokenSumNorm {
        /// The constant each sequence's sum is divided by (the response length limit).
        max_len: usize,
    },
}

/// `loss`, `mask`: `[B, T]`; a scalar.
pub(crate) fn aggregate(loss: &Tensor, mask: &Tensor, mode: Aggregation) -> Result<Tensor> {
    let m = mask.to_dtype(loss.dtype())?;
    let masked = (loss * &m)?;
    let per_seq_sum = masked.sum(D::Minus1)?;
    match mode {
        Aggregation::TokenMean => {
            let n = m
                .sum_all()?
                .to_dtype(DType::F64)?
                .to_scalar::<f64>()?
                .max(1.0);
            masked.sum_all()? / n
        }
        Aggregation::SeqMeanTokenMean => {
            let lens = m.sum(D::Minus1)?.clamp(1.0, f64::INFINITY)?;
            (per_seq_sum / lens)?.mean_all()
        }
        Aggregation::SeqMeanTokenSum => per_seq_sum.mean_all(),
        Aggregation::SeqMeanTokenSumNorm { max_len } => {
            (per_seq_sum / max_len.max(1) as f64)?.mean_all()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    fn t(rows: &[&[f64]]) -> Tensor {
        let w = rows[0].len();
        let flat: Vec<f64> = rows.iter().flat_map(|r| r.iter().copied()).collect();
        Tensor::from_vec(flat, (rows.len(), w), &Device::Cpu).unwrap()
    }

    #[test]
    fn group_advantages_match_the_formulas() {
        // One group [1, 0, 0, 1]: mean 0.5, unbiased std sqrt(1/3).
        let (a, flat) = advantages(
            &[1.0, 0.0, 0.0, 1.0, 0.3, 0.3, 0.3, 0.3],
            4,
            AdvantageMode::default(),
        );
        let s = (1.0f64 / 3.0).sqrt();
        assert!((a[0] - 0.5 / (s + 1e-6)).abs() < 1e-12);
        assert!((a[1] + 0.5 / (s + 1e-6)).abs() < 1e-12);
        assert_eq!(&a[4..], &[0.0; 4], "an all-equal group has no signal");
        assert_eq!(flat, vec![false, true]);
        let (d, _) = advantages(&[1.0, 0.0, 0.0, 0.0], 4, AdvantageMode::NoStd);
        assert_eq!(d, vec![0.75, -0.25, -0.25, -0.25]);
        // RLOO: 1 − 0 = 1; 0 − 1/3.
        let (r, _) = advantages(&[1.0, 0.0, 0.0, 0.0], 4, AdvantageMode::Rloo);
        assert!((r[0] - 1.0).abs() < 1e-12 && (r[1] + 1.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn the_surrogate_clips_and_dual_clips_as_written() {
        let old = t(&[&[0.0, 0.0, 0.0]]);
        // ρ = e^{0.5}, e^{-0.5}, 1.
        let logp = t(&[&[0.5, -0.5, 0.0]]);
        let mask = t(&[&[1.0, 1.0, 1.0]]);
        let pos = Tensor::new(&[2.0f64], &Device::Cpu).unwrap();
        let l = policy_loss(&logp, &old, &pos, &mask, Clip::default()).unwrap();
        let v: Vec<f64> = l.per_token.flatten_all().unwrap().to_vec1().unwrap();
        // A > 0: max(−Aρ, −Aρ_c): ρ = 1.65 clipped to 1.3 → −2.6; ρ = 0.61 (under 0.8) → −1.21.
        assert!((v[0] + 2.0 * 1.3).abs() < 1e-9, "{v:?}");
        assert!((v[1] + 2.0 * (-0.5f64).exp()).abs() < 1e-9, "{v:?}");
        assert!((v[2] + 2.0).abs() < 1e-12);
        assert!((l.clip_fraction - 1.0 / 3.0).abs() < 1e-12);
        // A < 0 and ρ = e^2 = 7.39: −Aρ = 14.8 is capped by the dual clip at −A·3 = 6.
        let neg = Tensor::new(&[-2.0f64], &Device::Cpu).unwrap();
        let big = t(&[&[2.0, 0.0, 0.0]]);
        let l = policy_loss(&big, &old, &neg, &mask, Clip::default()).unwrap();
        let v: Vec<f64> = l.per_token.flatten_all().unwrap().to_vec1().unwrap();
        assert!((v[0] - 6.0).abs() < 1e-9, "{v:?}");
        assert!((l.dual_clip_fraction - 1.0 / 3.0).abs() < 1e-12);
        let off = Clip {
            dual: None,
            ..Clip::default()
        };
        let v: Vec<f64> = policy_loss(&big, &old, &neg, &mask, off)
            .unwrap()
            .per_token
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        assert!((v[0] - 2.0 * 2.0f64.exp()).abs() < 1e-9);
    }

    #[test]
    fn kl_estimators_and_aggregations_match_hand_values() {
        let p = t(&[&[-1.0, -2.0]]);
        let r = t(&[&[-1.5, -1.0]]);
        let k3: Vec<f64> = kl(&p, &r, KlKind::K3)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        for (i, (a, b)) in [(-1.0f64, -1.5f64), (-2.0, -1.0)].iter().enumerate() {
            let x = b - a;
            assert!((k3[i] - (x.exp() - x - 1.0)).abs() < 1e-12);
        }
        let loss = t(&[&[1.0, 2.0, 3.0], &[4.0, 0.0, 0.0]]);
        let mask = t(&[&[1.0, 1.0, 1.0], &[1.0, 0.0, 0.0]]);
        let v = |m| {
            aggregate(&loss, &mask, m)
                .unwrap()
                .to_scalar::<f64>()
                .unwrap()
        };
        assert!((v(Aggregation::TokenMean) - 10.0 / 4.0).abs() < 1e-12);
        assert!((v(Aggregation::SeqMeanTokenMean) - (2.0 + 4.0) / 2.0).abs() < 1e-12);
        assert!((v(Aggregation::SeqMeanTokenSum) - (6.0 + 4.0) / 2.0).abs() < 1e-12);
        assert!(
            (v(Aggregation::SeqMeanTokenSumNorm { max_len: 5 }) - (6.0 / 5.0 + 4.0 / 5.0) / 2.0)
                .abs()
                < 1e-12
        );
    }

    #[test]
    fn gradients_reach_the_log_probs_and_match_finite_differences() {
        let old = t(&[&[-1.0, -0.7, -2.0], &[-0.3, -1.1, -0.9]]);
        let start = t(&[&[-0.8, -0.75, -2.3], &[-0.2, -1.6, -0.9]]);
        let reference = t(&[&[-1.1, -0.6, -2.0], &[-0.4, -1.0, -1.0]]);
        let mask = t(&[&[1.0, 1.0, 1.0], &[1.0, 1.0, 0.0]]);
        let adv = Tensor::new(&[1.5f64, -0.7], &Device::Cpu).unwrap();
        let objective = |logp: &Tensor| -> Tensor {
            let pl = policy_loss(logp, &old, &adv, &mask, Clip::default()).unwrap();
            let k = kl(logp, &reference, KlKind::K3).unwrap();
            let total = (pl.per_token + (k * 0.01).unwrap()).unwrap();
            aggregate(&total, &mask, Aggregation::TokenMean).unwrap()
        };
        let var = Var::from_tensor(&start).unwrap();
        let grads = objective(var.as_tensor()).backward().unwrap();
        let g: Vec<f64> = grads
            .get(var.as_tensor())
            .expect("a gradient")
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let x0: Vec<f64> = start.flatten_all().unwrap().to_vec1().unwrap();
        let h = 1e-6;
        for i in 0..x0.len() {
            let at = |d: f64| {
                let mut x = x0.clone();
                x[i] += d;
                let x = Tensor::from_vec(x, (2, 3), &Device::Cpu).unwrap();
                objective(&x).to_scalar::<f64>().unwrap()
            };
            let fd = (at(h) - at(-h)) / (2.0 * h);
            assert!(
                (fd - g[i]).abs() < 1e-6,
                "token {i}: autograd {} vs finite difference {fd}",
                g[i]
            );
        }
        // A masked token gets no gradient; the others do.
        assert_eq!(g[5], 0.0);
        assert!(g[..5].iter().all(|x| *x != 0.0), "{g:?}");
    }
}
