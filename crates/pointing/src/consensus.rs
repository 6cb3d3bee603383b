//! Consensus pointing: ask a sampling pointer K times and keep the medoid answer. A model at
//! temperature > 0 (or the oracle, which redraws its noise each time) answers a little differently
//! each time; the answer nearest all the others is the one a stray sample cannot pull away.
//!
//! Answers are compared whole: two point answers by the distance between their points' means, two
//! traces point by point (the mean distance of corresponding points), so the kept answer is one
//! the backend really gave, with its reasoning.

use super::{Ability, Pointer, PointerError, Pointing};
use pointact_core::camera::Frame;

/// Wraps a pointer so each question is asked `samples` times (1: passed straight through).
pub struct Consensus<P> {
    /// The pointer asked; it should sample, or every answer is the same.
    pub inner: P,
    /// How many times each question is asked (0 is treated as 1).
    pub samples: usize,
}

impl<P: Pointer> Pointer for Consensus<P> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn point(
        &mut self,
        frame: &Frame,
        ability: Ability,
        instruction: &str,
    ) -> Result<Pointing, PointerError> {
        let mut answers = Vec::with_capacity(self.samples.max(1));
        let mut first_err = None;
        for _ in 0..self.samples.max(1) {
            match self.inner.point(frame, ability, instruction) {
                Ok(p) => answers.push(p),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        let pts: Vec<Vec<[f64; 2]>> = answers.iter().map(|a| a.points_px()).collect();
        let Some(best) = medoid_index(&pts, ability == Ability::Vtg) else {
            return Err(first_err.unwrap_or_else(|| {
                PointerError::Backend("consensus: no answer among the samples".into())
            }));
        };
        Ok(answers.swap_remove(best))
    }
}

/// Index of the answer with the least summed distance to the others.
pub(crate) fn medoid_index(answers: &[Vec<[f64; 2]>], trace: bool) -> Option<usize> {
    let mean = |a: &[[f64; 2]]| {
        let n = a.len().max(1) as f64;
        [
            a.iter().map(|p| p[0]).sum::<f64>() / n,
            a.iter().map(|p| p[1]).sum::<f64>() / n,
        ]
    };
    let d = |a: &[[f64; 2]], b: &[[f64; 2]]| -> f64 {
        let dist =
            |p: [f64; 2], q: [f64; 2]| ((p[0] - q[0]).powi(2) + (p[1] - q[1]).powi(2)).sqrt();
        if trace && a.len() == b.len() && !a.is_empty() {
            a.iter().zip(b).map(|(p, q)| dist(*p, *q)).sum::<f64>() / a.len() as f64
        } else {
            dist(mean(a), mean(b))
        }
    };
    (0..answers.len())
        .filter(|&i| !answers[i].is_empty())
        .min_by(|&i, &j| {
            let cost = |k: usize| -> f64 {
                answers
                    .iter()
                    .filter(|o| !o.is_empty())
                    .map(|o| d(&answers[k], o))
                    .sum()
            };
            cost(i).total_cmp(&cost(j))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_medoid_answer_ignores_a_stray_sample() {
        let answers = vec![
            vec![[100.0, 100.0]],
            vec![[104.0, 98.0], [102.0, 101.0]],
            vec![[300.0, 40.0]],
            vec![[99.0, 103.0]],
            vec![],
        ];
        let kept = medoid_index(&answers, false).expect("an answer");
        assert!(
            [0, 1, 3].contains(&kept),
            "kept the stray or the empty answer: {kept}"
        );
        // Traces, point by point: offsets 0, 50, 1, -1, 2 px; the medoid is the 1 px one.
        let line = |dy: f64| (0..8).map(|i| [10.0 * i as f64, dy]).collect::<Vec<_>>();
        let traces: Vec<_> = [0.0, 50.0, 1.0, -1.0, 2.0].into_iter().map(line).collect();
        assert_eq!(medoid_index(&traces, true), Some(2));
        assert_eq!(medoid_index(&[], false), None);
    }
}
