//! Bradley-Terry maximum likelihood on soft outcomes.
//!
//! Model: `P(i beats j) = sigma(s_i - s_j)`. Each comparison (i, j) with probability p
//! contributes `p log sigma(s_i - s_j) + (1 - p) log sigma(s_j - s_i)` (hard decisions are
//! p in {0, 1}). A judge's ties count as half a win for each side: p is then the
//! expected outcome P(A) + P(tie)/2 ([`Outcome::expected_first`]; `p` itself without
//! ties). A candidate that wins (or loses) everything has no finite maximum, so the
//! log-likelihood gets a small Gaussian prior `-ridge/2 * |s|^2` (default 1e-4, i.e.
//! s ~ N(0, 10^4)): finite, and negligible for ordinary data. With the prior the
//! objective is strictly concave and its maximiser sums to zero (the gradient's sum is
//! `-ridge * sum(s)`), which also fixes the model's free offset; the result is re-centred
//! against rounding. Solved by Newton's method with step halving, until the largest
//! update is below `tolerance`.

use anyhow::{bail, Result};

use super::linalg::solve_spd;
use super::Outcome;

/// Fit settings.
#[derive(Debug, Clone, Copy)]
pub struct BradleyTerry {
    pub ridge: f64,
    pub tolerance: f64,
    pub max_iterations: usize,
}

impl Default for BradleyTerry {
    fn default() -> Self {
        Self {
            ridge: 1e-4,
            tolerance: 1e-10,
            max_iterations: 200,
        }
    }
}

/// `log sigma(x)`, stable for large |x|.
fn log_sigmoid(x: f64) -> f64 {
    -((-x.abs()).exp().ln_1p() + (-x).max(0.0))
}

fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

impl BradleyTerry {
    /// The penalised log-likelihood of strengths `s`.
    pub fn objective(&self, s: &[f64], outcomes: &[Outcome]) -> f64 {
        let fit: f64 = outcomes
            .iter()
            .map(|o| {
                let (d, p) = (s[o.first] - s[o.second], o.expected_first());
                p * log_sigmoid(d) + (1.0 - p) * log_sigmoid(-d)
            })
            .sum();
        fit - 0.5 * self.ridge * s.iter().map(|x| x * x).sum::<f64>()
    }

    /// Strengths of `n` candidates (centred: they sum to zero).
    pub fn fit(&self, n: usize, outcomes: &[Outcome]) -> Result<Vec<f64>> {
        if self.ridge <= 0.0 {
            bail!("Bradley-Terry ridge must be positive, got {}", self.ridge);
        }
        let mut s = vec![0.0; n];
        let mut current = self.objective(&s, outcomes);
        for _ in 0..self.max_iterations {
            let mut gradient: Vec<f64> = s.iter().map(|x| -self.ridge * x).collect();
            // Negative Hessian: weighted graph Laplacian + ridge.
            let mut curvature = vec![0.0; n * n];
            for i in 0..n {
                curvature[i * n + i] = self.ridge;
            }
            for o in outcomes {
                let (i, j) = (o.first, o.second);
                let q = sigmoid(s[i] - s[j]);
                let p = o.expected_first();
                gradient[i] += p - q;
                gradient[j] -= p - q;
                let w = q * (1.0 - q);
                curvature[i * n + i] += w;
                curvature[j * n + j] += w;
                curvature[i * n + j] -= w;
                curvature[j * n + i] -= w;
            }
            let step = solve_spd(&curvature, &gradient)?;
            let mut scale = 1.0;
            let (next, value) = loop {
                let candidate: Vec<f64> = s.iter().zip(&step).map(|(x, d)| x + scale * d).collect();
                let value = self.objective(&candidate, outcomes);
                if value >= current || scale < 1e-12 {
                    break (candidate, value);
                }
                scale *= 0.5;
            };
            let largest = step.iter().map(|d| (scale * d).abs()).fold(0.0, f64::max);
            s = next;
            current = value;
            if largest < self.tolerance {
                let mean = s.iter().sum::<f64>() / n.max(1) as f64;
                return Ok(s.iter().map(|x| x - mean).collect());
            }
        }
        bail!(
            "Bradley-Terry did not converge in {} iterations (tolerance {})",
            self.max_iterations,
            self.tolerance
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rank::ranks_from_scores;
    use rand::{Rng, SeedableRng};

    fn all_pairs(strengths: &[f64], mut p: impl FnMut(f64, f64) -> f64) -> Vec<Outcome> {
        let n = strengths.len();
        let mut outcomes = Vec::new();
        for i in 0..n {
            for j in 0..n {
                if i != j {
                    outcomes.push(Outcome::new(i, j, p(strengths[i], strengths[j])));
                }
            }
        }
        outcomes
    }

    #[test]
    fn recovers_strengths_from_noiseless_outcomes() {
        let truth = [1.2, -0.4, 0.3, -1.5, 0.9, -0.5, 0.0];
        let mean = truth.iter().sum::<f64>() / truth.len() as f64;
        let outcomes = all_pairs(&truth, |a, b| sigmoid(a - b));
        let s = BradleyTerry::default().fit(truth.len(), &outcomes).unwrap();
        assert_eq!(ranks_from_scores(&s), ranks_from_scores(&truth));
        // The ridge shrinks by about ridge / curvature (~1e-4 / 1.4): well below 1e-3.
        for (got, want) in s.iter().zip(truth) {
            assert!((got - (want - mean)).abs() < 1e-3, "{s:?}");
        }
        assert!(s.iter().sum::<f64>().abs() < 1e-9);
    }

    #[test]
    fn approximately_recovers_strengths_from_noisy_outcomes() {
        let truth: Vec<f64> = (0..10).map(|k| k as f64 * 0.5 - 2.25).collect();
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let outcomes = all_pairs(&truth, |a, b| {
            (sigmoid(a - b) + rng.gen_range(-0.15..0.15)).clamp(0.0, 1.0)
        });
        let s = BradleyTerry::default().fit(truth.len(), &outcomes).unwrap();
        let error = s
            .iter()
            .zip(&truth)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        assert!(error < 0.5, "{s:?}");
        // Neighbours are 0.5 apart: the order may swap at most for adjacent candidates.
        let ranks = ranks_from_scores(&s);
        let true_ranks = ranks_from_scores(&truth);
        assert!(ranks
            .iter()
            .zip(&true_ranks)
            .all(|(a, b)| (a - b).abs() <= 1.0));
    }

    #[test]
    fn a_candidate_that_wins_everything_stays_finite() {
        let outcomes = vec![
            Outcome::new(0, 1, 1.0),
            Outcome::new(1, 0, 0.0),
            Outcome::new(0, 2, 1.0),
            Outcome::new(2, 0, 0.0),
            Outcome::new(1, 2, 0.6),
            Outcome::new(2, 1, 0.4),
        ];
        let s = BradleyTerry::default().fit(3, &outcomes).unwrap();
        assert!(s.iter().all(|x| x.is_finite()));
        assert!(s[0] > s[1] && s[1] > s[2], "{s:?}");
        assert!(s[0] - s[1] > 3.0, "{s:?}");
    }

    #[test]
    fn the_fit_is_a_maximum() {
        let outcomes = all_pairs(&[0.3, -0.2, 0.8, 0.1], |a, b| sigmoid(2.0 * (a - b)));
        let bt = BradleyTerry::default();
        let s = bt.fit(4, &outcomes).unwrap();
        let best = bt.objective(&s, &outcomes);
        for k in 0..4 {
            for delta in [-1e-3, 1e-3] {
                let mut moved = s.clone();
                moved[k] += delta;
                assert!(bt.objective(&moved, &outcomes) < best);
            }
        }
    }

    #[test]
    fn matches_a_scipy_fit() {
        // Reference: scipy.optimize.minimize (BFGS, gtol 1e-12) of the same penalised
        // negative log-likelihood (ridge 1e-4, scipy.special.log_expit) from zeros.
        let outcomes = [
            Outcome::new(0, 1, 0.9),
            Outcome::new(1, 0, 0.6),
            Outcome::new(0, 2, 0.7),
            Outcome::new(2, 0, 0.2),
            Outcome::new(1, 2, 0.4),
            Outcome::new(2, 1, 0.45),
            Outcome::new(3, 0, 0.35),
            Outcome::new(1, 3, 0.55),
        ];
        let reference = [0.59977935, -0.15296115, -0.25049206, -0.19632624];
        let s = BradleyTerry::default().fit(4, &outcomes).unwrap();
        for (got, want) in s.iter().zip(reference) {
            assert!((got - want).abs() < 1e-6, "{s:?}");
        }
    }

    /// Ties as half wins: two candidates that tie every comparison are equal, and one
    /// whose comparisons with the other are (A .5, B 0, tie .5) in both orders wins 3/4
    /// of them in expectation, so its strength lead is logit(3/4) = ln 3.
    #[test]
    fn ties_count_half_a_win_each() {
        let all_ties = [
            Outcome::with_tie(0, 1, 0.5, 1.0),
            Outcome::with_tie(1, 0, 0.5, 1.0),
        ];
        let s = BradleyTerry::default().fit(2, &all_ties).unwrap();
        assert!(s.iter().all(|x| x.abs() < 1e-12), "{s:?}");
        let lean = [
            Outcome::with_tie(0, 1, 1.0, 0.5),
            Outcome::with_tie(1, 0, 0.0, 0.5),
        ];
        let s = BradleyTerry::default().fit(2, &lean).unwrap();
        // The ridge shrinks the lead by about ridge / curvature (1e-4 / 0.375).
        assert!((s[0] - s[1] - 3f64.ln()).abs() < 1e-3, "{s:?}");
        let plain = [Outcome::new(0, 1, 0.75), Outcome::new(1, 0, 0.25)];
        assert_eq!(s, BradleyTerry::default().fit(2, &plain).unwrap());
    }

    #[test]
    fn log_sigmoid_is_stable() {
        assert!((log_sigmoid(0.0) - (0.5f64).ln()).abs() < 1e-15);
        assert!((log_sigmoid(-800.0) + 800.0).abs() < 1e-9);
        assert!(log_sigmoid(800.0).abs() < 1e-300);
    }
}
