//! Product-of-Experts Gaussian scores: the closed-form alternative to Bradley-Terry.
//!
//! Each comparison is a Gaussian expert on the score difference, centred on
//! `logit(p_ij)`; their product is maximised by least squares on
//! `logit(p_ij) = s_i - s_j`, i.e. the normal equations `L s = b` with `L` the graph
//! Laplacian of the comparisons and `b_i` the sum of i's signed logits. Probabilities are
//! clipped to [1e-6, 1 - 1e-6] so that certain outcomes stay finite. `L` is singular (the
//! offset is free, and each disconnected group of candidates has its own), so a tiny
//! ridge 1e-9 is added: it selects the solution whose every connected group sums to zero.

use super::linalg::solve_spd;
use super::Outcome;

/// Clipping of probabilities before the logit.
pub const CLIP: f64 = 1e-6;
const RIDGE: f64 = 1e-9;

/// Scores of `n` candidates, centred.
pub fn poe_gaussian(n: usize, outcomes: &[Outcome]) -> Vec<f64> {
    let mut laplacian = vec![0.0; n * n];
    let mut rhs = vec![0.0; n];
    for i in 0..n {
        laplacian[i * n + i] = RIDGE;
    }
    for o in outcomes {
        let p = o.p.clamp(CLIP, 1.0 - CLIP);
        let logit = (p / (1.0 - p)).ln();
        let (i, j) = (o.first, o.second);
        laplacian[i * n + i] += 1.0;
        laplacian[j * n + j] += 1.0;
        laplacian[i * n + j] -= 1.0;
        laplacian[j * n + i] -= 1.0;
        rhs[i] += logit;
        rhs[j] -= logit;
    }
    // Laplacian + positive ridge is positive definite.
    solve_spd(&laplacian, &rhs).unwrap_or_else(|_| vec![0.0; n])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logistic(x: f64) -> f64 {
        1.0 / (1.0 + (-x).exp())
    }

    #[test]
    fn exact_logits_give_the_true_differences() {
        let truth = [0.7, -1.1, 0.4];
        let mut outcomes = Vec::new();
        for i in 0..3 {
            for j in 0..3 {
                if i != j {
                    outcomes.push(Outcome::new(i, j, logistic(truth[i] - truth[j])));
                }
            }
        }
        let s = poe_gaussian(3, &outcomes);
        let mean = truth.iter().sum::<f64>() / 3.0;
        for (got, want) in s.iter().zip(truth) {
            assert!((got - (want - mean)).abs() < 1e-6, "{s:?}");
        }
    }

    #[test]
    fn least_squares_by_hand() {
        // Two comparisons of 0 and 1 with logits 2 and (from (1,0) p = .5) 0:
        // minimise (2 - d)^2 + (0 + d)^2 with d = s0 - s1 -> d = 1, s = [.5, -.5].
        let p = logistic(2.0);
        let s = poe_gaussian(2, &[Outcome::new(0, 1, p), Outcome::new(1, 0, 0.5)]);
        assert!(
            (s[0] - 0.5).abs() < 1e-6 && (s[1] + 0.5).abs() < 1e-6,
            "{s:?}"
        );
    }

    #[test]
    fn matches_numpy_least_squares() {
        // Reference: numpy.linalg.lstsq on the same design (rows e_i - e_j, targets
        // logit p), centred.
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
        let reference = [0.68928318, -0.23075598, -0.27793585, -0.18059135];
        let s = poe_gaussian(4, &outcomes);
        for (got, want) in s.iter().zip(reference) {
            assert!((got - want).abs() < 1e-6, "{s:?}");
        }
    }

    #[test]
    fn certain_outcomes_and_unplayed_candidates_stay_finite() {
        let s = poe_gaussian(3, &[Outcome::new(0, 1, 1.0)]);
        let bound = ((1.0 - CLIP) / CLIP).ln() / 2.0;
        assert!(
            (s[0] - bound).abs() < 1e-3 && (s[1] + bound).abs() < 1e-3,
            "{s:?}"
        );
        assert!(s[2].abs() < 1e-9);
    }
}
