//! Product-of-Experts Gaussian scores: the closed-form alternative to Bradley-Terry.
//!
//! Each comparison is a Gaussian expert on the score difference, centred on
//! `logit(p_ij)`; their product is maximised by least squares on
//! `logit(p_ij) = s_i - s_j`, i.e. the normal equations `L s = b` with `L` the graph
//! Laplacian of the comparisons and `b_i` the sum of i's signed logits. Probabilities are
//! clipped to [1e-6, 1 - 1e-6] so that certain outcomes stay finite. `L` is singular (the
//! offset is free, and each disconnected group of candidates has its own), so a tiny
//! ridge 1e-9 is added: it selects the solution whose every connected group sums to zero.
//! The ridged system is badly conditioned along those offsets (its smallest eigenvalue
//! is the ridge), so rounding leaves each group off zero by about 1e-6; each group's mean
//! is therefore subtracted after the solve, which makes the scores the exact least
//! squares solution centred per group (numpy's `lstsq` agrees to 1e-12).

use super::linalg::solve_spd;
use super::Outcome;

/// Clipping of probabilities before the logit.
pub const CLIP: f64 = 1e-6;
const RIDGE: f64 = 1e-9;

/// Scores of `n` candidates, centred.
pub fn poe_gaussian(n: usize, outcomes: &[Outcome]) -> Vec<f64> {
    poe_gaussian_weighted(n, outcomes.iter().map(|o| (*o, 1.0)))
}

/// [`poe_gaussian`] with a weight per expert (a jury's judges: each comparison of judge
/// `k` weighs `w_k`): weighted least squares on `logit(p_ij) = s_i - s_j`. Weight 1
/// everywhere gives [`poe_gaussian`] bit for bit.
pub fn poe_gaussian_weighted(
    n: usize,
    outcomes: impl IntoIterator<Item = (Outcome, f64)>,
) -> Vec<f64> {
    let mut laplacian = vec![0.0; n * n];
    let mut rhs = vec![0.0; n];
    for i in 0..n {
        laplacian[i * n + i] = RIDGE;
    }
    let mut group: Vec<usize> = (0..n).collect();
    fn root(group: &mut [usize], mut i: usize) -> usize {
        while group[i] != i {
            group[i] = group[group[i]];
            i = group[i];
        }
        i
    }
    for (o, weight) in outcomes {
        if weight > 0.0 {
            let (a, b) = (root(&mut group, o.first), root(&mut group, o.second));
            group[a] = b;
        }
        let p = o.p.clamp(CLIP, 1.0 - CLIP);
        let logit = (p / (1.0 - p)).ln();
        let (i, j) = (o.first, o.second);
        laplacian[i * n + i] += weight;
        laplacian[j * n + j] += weight;
        laplacian[i * n + j] -= weight;
        laplacian[j * n + i] -= weight;
        rhs[i] += weight * logit;
        rhs[j] -= weight * logit;
    }
    // Laplacian (non-negative weights) + positive ridge is positive definite.
    let mut scores = solve_spd(&laplacian, &rhs).unwrap_or_else(|_| vec![0.0; n]);
    // Each connected group centred (see the module documentation).
    let roots: Vec<usize> = (0..n).map(|i| root(&mut group, i)).collect();
    let mut sums = vec![(0.0, 0usize); n];
    for (i, &r) in roots.iter().enumerate() {
        sums[r].0 += scores[i];
        sums[r].1 += 1;
    }
    for (i, &r) in roots.iter().enumerate() {
        scores[i] -= sums[r].0 / sums[r].1 as f64;
    }
    scores
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

    /// Two groups never compared with each other: each sums to zero, to rounding.
    #[test]
    fn each_connected_group_is_centred() {
        let outcomes = [
            Outcome::new(0, 1, 0.8),
            Outcome::new(1, 0, 0.3),
            Outcome::new(2, 3, 0.65),
            Outcome::new(3, 4, 0.1),
            Outcome::new(4, 2, 0.55),
        ];
        let s = poe_gaussian(5, &outcomes);
        assert!((s[0] + s[1]).abs() < 1e-12, "{s:?}");
        assert!((s[2] + s[3] + s[4]).abs() < 1e-12, "{s:?}");
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
