//! AdamW, global gradient-norm clipping and the learning-rate schedule of the trainer.
//!
//! Why our own AdamW rather than `candle_nn::AdamW`: resuming a run must restore the moment
//! estimates, and candle's optimiser keeps them private. The update is PyTorch's `AdamW`
//! (decoupled weight decay, bias-corrected moments, `eps` outside the square root), which
//! EasyR1, verl and TRL all use; the unit tests below check a step computed by hand and the
//! bias correction.

use std::collections::HashMap;

use candle_core::{DType, Result, Tensor, Var};

/// AdamW settings (PyTorch's names; defaults are EasyR1's: lr 1e-6, weight decay 1e-2).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamWOptions {
    /// Learning rate (default 1e-6).
    pub lr: f64,
    /// First-moment decay (default 0.9).
    pub beta1: f64,
    /// Second-moment decay (default 0.999).
    pub beta2: f64,
    /// Added to the denominator's square root for stability (default 1e-8).
    pub eps: f64,
    /// Decoupled weight decay (default 1e-2).
    pub weight_decay: f64,
}

impl Default for AdamWOptions {
    fn default() -> Self {
        Self {
            lr: 1e-6,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 1e-2,
        }
    }
}

/// The moments of one parameter.
#[derive(Debug, Clone)]
struct Moments {
    m: Tensor,
    v: Tensor,
}

/// AdamW over named [`Var`]s, with its state readable for checkpoints.
#[derive(Debug)]
pub struct AdamW {
    vars: Vec<(String, Var)>,
    moments: Vec<Moments>,
    /// Updates taken (PyTorch's `step`, for the bias correction).
    pub steps: u64,
    /// The settings it steps with.
    pub options: AdamWOptions,
}

impl AdamW {
    pub(crate) fn new(vars: Vec<(String, Var)>, options: AdamWOptions) -> Result<Self> {
        let moments = vars
            .iter()
            .map(|(_, v)| {
                Ok(Moments {
                    m: v.zeros_like()?,
                    v: v.zeros_like()?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            vars,
            moments,
            steps: 0,
            options,
        })
    }

    /// One update at learning rate `lr` with `grads` (by parameter name; a parameter without a
    /// gradient is left alone, as PyTorch leaves a `None` grad).
    pub(crate) fn step(&mut self, grads: &HashMap<String, Tensor>, lr: f64) -> Result<()> {
        self.steps += 1;
        let o = self.options;
        let t = self.steps as i32;
        let c1 = 1.0 - o.beta1.powi(t);
        let c2 = 1.0 - o.beta2.powi(t);
        for ((name, var), mom) in self.vars.iter().zip(&mut self.moments) {
            let Some(g) = grads.get(name) else { continue };
            let g = g.to_dtype(var.dtype())?;
            mom.m = ((&mom.m * o.beta1)? + (&g * (1.0 - o.beta1))?)?;
            mom.v = ((&mom.v * o.beta2)? + (g.sqr()? * (1.0 - o.beta2))?)?;
            let m_hat = (&mom.m / c1)?;
            let v_hat = (&mom.v / c2)?;
            let decayed = (var.as_tensor() * (1.0 - lr * o.weight_decay))?;
            let update = (m_hat / (v_hat.sqrt()? + o.eps)?)?;
            var.set(&(decayed - (update * lr)?)?)?;
        }
        Ok(())
    }

    /// The state to checkpoint: `{name}.exp_avg` and `{name}.exp_avg_sq` per parameter.
    pub(crate) fn state(&self) -> Vec<(String, Tensor)> {
        self.vars
            .iter()
            .zip(&self.moments)
            .flat_map(|((n, _), m)| {
                [
                    (format!("{n}.exp_avg"), m.m.clone()),
                    (format!("{n}.exp_avg_sq"), m.v.clone()),
                ]
            })
            .collect()
    }

    /// Restores [`Self::state`] (and the step count); every parameter must be present with its
    /// shape, so a checkpoint of another model or another LoRA selection is refused.
    pub fn load_state(&mut self, state: &HashMap<String, Tensor>, steps: u64) -> Result<()> {
        for ((n, var), mom) in self.vars.iter().zip(&mut self.moments) {
            let get = |suffix: &str| -> Result<Tensor> {
                let key = format!("{n}.{suffix}");
                let t = state.get(&key).ok_or_else(|| {
                    candle_core::Error::Msg(format!("optimizer state has no `{key}`"))
                })?;
                if t.dims() != var.dims() {
                    candle_core::bail!(
                        "optimizer state `{key}` is {:?}, the parameter {:?}",
                        t.dims(),
                        var.dims()
                    );
                }
                // Saved moments load on the CPU; the parameter may live on a GPU.
                t.to_dtype(var.dtype())?.to_device(var.device())
            };
            mom.m = get("exp_avg")?;
            mom.v = get("exp_avg_sq")?;
        }
        self.steps = steps;
        Ok(())
    }
}

/// The global L2 norm of `grads`; when it exceeds `max_norm`, every gradient is scaled by
/// `max_norm / norm` (PyTorch's `clip_grad_norm_`, which EasyR1 and TRL call). Returns the norm
/// before clipping (non-finite when a gradient is).
pub(crate) fn clip_grad_norm(
    grads: &mut HashMap<String, Tensor>,
    max_norm: Option<f64>,
) -> Result<f64> {
    // Summed in name order: a HashMap's order differs between runs, and a resumed run must
    // report the same norm to the last bit.
    let mut names: Vec<&String> = grads.keys().collect();
    names.sort();
    let mut sq = 0f64;
    for g in names.into_iter().map(|n| &grads[n]) {
        sq += g
            .to_dtype(DType::F64)?
            .sqr()?
            .sum_all()?
            .to_scalar::<f64>()?;
    }
    let norm = sq.sqrt();
    if let Some(max) = max_norm {
        if norm.is_finite() && norm > max {
            let scale = max / (norm + 1e-6);
            for g in grads.values_mut() {
                *g = (&*g * scale)?;
            }
        }
    }
    Ok(norm)
}

/// How the learning rate moves over a run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Schedule {
    /// Linear warm-up over `warmup` steps, then constant (EasyR1's default).
    Constant {
        /// Warm-up steps, the rate rising linearly to the peak (0: none).
        warmup: u64,
    },
    /// Linear warm-up, then a cosine from the peak down to `min_ratio · peak` at `total` steps.
    Cosine {
        /// Warm-up steps, the rate rising linearly to the peak (0: none).
        warmup: u64,
        /// The step at which the cosine reaches its floor.
        total: u64,
        /// The floor as a fraction of the peak learning rate.
        min_ratio: f64,
    },
}

impl Schedule {
    /// The learning rate of update number `step` (0-based) for a peak `lr`.
    pub(crate) fn lr(self, lr: f64, step: u64) -> f64 {
        let warm = |w: u64| {
            if w > 0 && step < w {
                (step + 1) as f64 / w as f64
            } else {
                1.0
            }
        };
        match self {
            Schedule::Constant { warmup } => lr * warm(warmup),
            Schedule::Cosine {
                warmup,
                total,
                min_ratio,
            } => {
                if step < warmup {
                    return lr * warm(warmup);
                }
                let span = total.saturating_sub(warmup).max(1) as f64;
                let progress = ((step - warmup) as f64 / span).min(1.0);
                let cos = 0.5 * (1.0 + (std::f64::consts::PI * progress).cos());
                lr * (min_ratio + (1.0 - min_ratio) * cos)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn one_adamw_step_by_hand() {
        // PyTorch AdamW, step 1: m̂ = g, v̂ = g², p ← p(1 − lr·wd) − lr·g/(|g| + eps).
        let var = Var::new(&[1.0f64, -2.0], &Device::Cpu).unwrap();
        let opts = AdamWOptions {
            lr: 0.1,
            weight_decay: 0.5,
            ..AdamWOptions::default()
        };
        let mut opt = AdamW::new(vec![("p".into(), var.clone())], opts).unwrap();
        let g = Tensor::new(&[0.5f64, -4.0], &Device::Cpu).unwrap();
        let grads = HashMap::from([("p".to_string(), g)]);
        opt.step(&grads, 0.1).unwrap();
        let p: Vec<f64> = var.as_tensor().to_vec1().unwrap();
        let want = |p0: f64, g: f64| p0 * (1.0 - 0.05) - 0.1 * g / (g.abs() + 1e-8);
        assert!((p[0] - want(1.0, 0.5)).abs() < 1e-12, "{p:?}");
        assert!((p[1] - want(-2.0, -4.0)).abs() < 1e-12, "{p:?}");
        // Step 2 with the same gradient: m̂ = g and v̂ = g² again (bias correction), so the
        // same-size move once more.
        let before: Vec<f64> = var.as_tensor().to_vec1().unwrap();
        opt.step(&grads, 0.1).unwrap();
        let p: Vec<f64> = var.as_tensor().to_vec1().unwrap();
        assert!((p[0] - want(before[0], 0.5)).abs() < 1e-9, "{p:?}");
        // State round-trip.
        let state: HashMap<String, Tensor> = opt.state().into_iter().collect();
        let mut other = AdamW::new(vec![("p".into(), var.clone())], opts).unwrap();
        other.load_state(&state, opt.steps).unwrap();
        assert_eq!(other.steps, 2);
        let bad = HashMap::new();
        assert!(other.load_state(&bad, 2).is_err());
    }

    #[test]
    fn clipping_scales_to_the_max_norm() {
        let dev = Device::Cpu;
        let mut g = HashMap::from([
            ("a".to_string(), Tensor::new(&[3.0f32], &dev).unwrap()),
            ("b".to_string(), Tensor::new(&[4.0f32], &dev).unwrap()),
        ]);
        let n = clip_grad_norm(&mut g, Some(1.0)).unwrap();
        assert!((n - 5.0).abs() < 1e-9);
        let a: Vec<f32> = g["a"].to_vec1().unwrap();
        assert!((a[0] - 0.6).abs() < 1e-5);
        // Under the limit: untouched.
        let n = clip_grad_norm(&mut g, Some(10.0)).unwrap();
        assert!((n - 1.0).abs() < 1e-5);
    }

    #[test]
    fn schedules() {
        let c = Schedule::Constant { warmup: 4 };
        assert_eq!(c.lr(1.0, 0), 0.25);
        assert_eq!(c.lr(1.0, 3), 1.0);
        assert_eq!(c.lr(1.0, 100), 1.0);
        let cos = Schedule::Cosine {
            warmup: 0,
            total: 10,
            min_ratio: 0.1,
        };
        assert!((cos.lr(1.0, 0) - 1.0).abs() < 1e-12);
        assert!((cos.lr(1.0, 5) - 0.55).abs() < 1e-12);
        assert!((cos.lr(1.0, 10) - 0.1).abs() < 1e-12);
        assert!((cos.lr(1.0, 50) - 0.1).abs() < 1e-12);
    }
}
