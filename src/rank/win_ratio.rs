//! Win ratios: the comparative-assessment papers' way from comparisons to scores.
//!
//! Hard: `s_i = #wins / #comparisons involving i`, where a comparison (i, j) is a win for
//! i when `p > tau` and a win for j otherwise. Soft: the same with the probability of
//! winning in place of the decision. A candidate in no comparison gets the neutral 0.5.

use super::Outcome;

/// Hard win ratio with decision threshold `tau` (0.5 unless debiased).
pub fn win_ratio(n: usize, outcomes: &[Outcome], tau: f64) -> Vec<f64> {
    ratio(n, outcomes, |p| if p > tau { 1.0 } else { 0.0 })
}

/// Soft win ratio: mean probability of winning.
pub fn soft_win_ratio(n: usize, outcomes: &[Outcome]) -> Vec<f64> {
    ratio(n, outcomes, |p| p)
}

fn ratio(n: usize, outcomes: &[Outcome], first_wins: impl Fn(f64) -> f64) -> Vec<f64> {
    let mut wins = vec![0.0; n];
    let mut played = vec![0usize; n];
    for o in outcomes {
        let w = first_wins(o.p);
        wins[o.first] += w;
        wins[o.second] += 1.0 - w;
        played[o.first] += 1;
        played[o.second] += 1;
    }
    wins.iter()
        .zip(&played)
        .map(|(&w, &k)| if k == 0 { 0.5 } else { w / k as f64 })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A full 3x3 comparison matrix, worked by hand:
    ///   (0,1) .9 -> 0 wins   (1,0) .6 -> 1 wins
    ///   (0,2) .7 -> 0 wins   (2,0) .2 -> 0 wins
    ///   (1,2) .4 -> 2 wins   (2,1) .45 -> 1 wins
    /// wins: 0: 3, 1: 2, 2: 1, each of 4 comparisons.
    fn three_by_three() -> Vec<Outcome> {
        vec![
            Outcome::new(0, 1, 0.9),
            Outcome::new(1, 0, 0.6),
            Outcome::new(0, 2, 0.7),
            Outcome::new(2, 0, 0.2),
            Outcome::new(1, 2, 0.4),
            Outcome::new(2, 1, 0.45),
        ]
    }

    #[test]
    fn hard_win_ratio_by_hand() {
        assert_eq!(win_ratio(3, &three_by_three(), 0.5), [0.75, 0.5, 0.25]);
        // tau = 0.65 flips only (1,0) (.6 is no longer above it) to a win for 0:
        // wins 0: 4, 1: 1, 2: 1.
        assert_eq!(win_ratio(3, &three_by_three(), 0.65), [1.0, 0.25, 0.25]);
    }

    #[test]
    fn soft_win_ratio_by_hand() {
        // 0: .9 + (1-.6) + .7 + (1-.2) = 2.8; 1: .1 + .6 + .4 + (1-.45) = 1.65;
        // 2: .3 + .2 + .6 + .45 = 1.55; each over 4.
        let s = soft_win_ratio(3, &three_by_three());
        for (got, want) in s.iter().zip([0.7, 0.4125, 0.3875]) {
            assert!((got - want).abs() < 1e-12, "{s:?}");
        }
    }

    #[test]
    fn unplayed_candidate_is_neutral() {
        assert_eq!(
            win_ratio(3, &[Outcome::new(0, 1, 0.9)], 0.5),
            [1.0, 0.0, 0.5]
        );
    }
}
