//! Positional debiasing.
//!
//! A comparator biased towards one position decides `p > 0.5` for the first candidate
//! more (or less) often than half the time over a symmetric set. The comparative
//! assessment authors move the decision threshold instead: the smallest `tau` on a
//! 0.001 grid with `mean(p < tau) >= 0.5` (about the median of p), so that the first
//! position wins half the comparisons. Equivalently the probabilities are reweighted,
//! `p' = a p / (a p + 1 - p)`, with `a = (1 - tau) / tau` so that `p' > 0.5` exactly when
//! `p > tau`; the reweighted probabilities feed the probability-based rankings.

/// Grid step of the threshold search.
pub const GRID: f64 = 0.001;

/// The authors' balanced threshold over probabilities `ps` (0.5 for an empty set; 1.0
/// when more than half the probabilities are exactly 1).
pub fn balanced_threshold(ps: &[f64]) -> f64 {
    if ps.is_empty() {
        return 0.5;
    }
    let steps = (1.0 / GRID).round() as usize;
    for k in 0..=steps {
        let tau = k as f64 / steps as f64;
        let below = ps.iter().filter(|&&p| p < tau).count();
        if 2 * below >= ps.len() {
            return tau;
        }
    }
    1.0
}

/// The reweighting factor `a` that moves the 0.5 decision boundary to `tau` (clamped to
/// [0.001, 0.999] so that `a` stays positive and finite).
pub fn reweight_factor(tau: f64) -> f64 {
    let tau = tau.clamp(GRID, 1.0 - GRID);
    (1.0 - tau) / tau
}

/// `p' = a p / (a p + 1 - p)`.
pub fn reweight(p: f64, a: f64) -> f64 {
    let numerator = a * p;
    numerator / (numerator + 1.0 - p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rank::{first_position_rate, Outcome};
    use rand::{Rng, SeedableRng};

    /// A full comparison set over 12 candidates where the first position is strongly
    /// favoured: p = sigma(s_i - s_j + 1.2) plus noise, on values off the 0.001 grid.
    fn biased_set() -> Vec<Outcome> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let strengths: Vec<f64> = (0..12).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let mut outcomes = Vec::new();
        for i in 0..12 {
            for j in 0..12 {
                if i != j {
                    let x: f64 = strengths[i] - strengths[j] + 1.2 + rng.gen_range(-0.3..0.3);
                    let p = 1.0 / (1.0 + (-x).exp());
                    outcomes.push(Outcome::new(i, j, p));
                }
            }
        }
        outcomes
    }

    #[test]
    fn threshold_balances_the_first_position() {
        let outcomes = biased_set();
        let before = first_position_rate(&outcomes, 0.5).value().unwrap();
        assert!(before > 0.75, "set is not biased: {before}");
        let ps: Vec<f64> = outcomes.iter().map(|o| o.p).collect();
        let tau = balanced_threshold(&ps);
        let after = first_position_rate(&outcomes, tau).value().unwrap();
        assert_eq!(after, 0.5, "tau {tau}");
        // It is the smallest grid point with that property.
        let below = ps.iter().filter(|&&p| p < tau - GRID).count();
        assert!(2 * below < ps.len());
    }

    #[test]
    fn reweighting_gives_the_same_decisions() {
        let outcomes = biased_set();
        let ps: Vec<f64> = outcomes.iter().map(|o| o.p).collect();
        let tau = balanced_threshold(&ps);
        let a = reweight_factor(tau);
        for p in ps {
            assert_eq!(reweight(p, a) > 0.5, p > tau, "p {p} tau {tau}");
        }
        let reweighted: Vec<Outcome> = outcomes
            .iter()
            .map(|o| Outcome::new(o.first, o.second, reweight(o.p, a)))
            .collect();
        assert_eq!(first_position_rate(&reweighted, 0.5).value(), Some(0.5));
    }

    #[test]
    fn threshold_on_a_small_set_by_hand() {
        // Sorted: .1 .3 .62 .8; mean(p < tau) >= .5 first at tau = .301.
        assert_eq!(balanced_threshold(&[0.8, 0.1, 0.62, 0.3]), 0.301);
        assert_eq!(balanced_threshold(&[]), 0.5);
        assert_eq!(balanced_threshold(&[1.0, 1.0, 0.2]), 1.0);
        assert_eq!(reweight(0.3, 1.0), 0.3);
        assert!((reweight(0.5, 3.0) - 0.75).abs() < 1e-15);
    }
}
