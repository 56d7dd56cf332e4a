//! Win ratios: the comparative-assessment papers' way from comparisons to scores.
//!
//! Hard: `s_i = #wins / #comparisons involving i`, where a comparison (i, j) is a win for
//! i when `p > tau` and a win for j otherwise. Soft: the same with the probability of
//! winning in place of the decision. A candidate in no comparison gets the neutral 0.5.
//!
//! Ties (a judge that may answer "tie"): hard, a comparison whose most likely answer is
//! the tie is half a win for each side, the others decided at `tau` as above; soft, the
//! expected wins with a tie as half a win each, P(A) + P(tie)/2
//! ([`Outcome::expected_first`]). Without ties both are as above, bit for bit.

use super::Outcome;

/// Hard win ratio with decision threshold `tau` (0.5 unless debiased).
pub fn win_ratio(n: usize, outcomes: &[Outcome], tau: f64) -> Vec<f64> {
    ratio(n, outcomes, |o| {
        if o.tie_decided() {
            0.5
        } else if o.p > tau {
            1.0
        } else {
            0.0
        }
    })
}

/// Soft win ratio: mean probability of winning.
pub fn soft_win_ratio(n: usize, outcomes: &[Outcome]) -> Vec<f64> {
    ratio(n, outcomes, Outcome::expected_first)
}

fn ratio(n: usize, outcomes: &[Outcome], first_wins: impl Fn(&Outcome) -> f64) -> Vec<f64> {
    let mut wins = vec![0.0; n];
    let mut played = vec![0usize; n];
    for o in outcomes {
        let w = first_wins(o);
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

    /// Ties as half wins, by hand. Three answers (P(A), P(B), P(tie)) per comparison:
    ///   (0,1) .6 .1 .3   -> A most likely: 0 wins;      expected 0: .6 + .15 = .75
    ///   (1,0) .2 .2 .6   -> tie: half each;             expected 1: .2 + .3 = .5
    ///   (0,2) .3 .3 .4   -> tie: half each;             expected 0: .3 + .2 = .5
    ///   (2,0) .1 .5 .4   -> B most likely: 0 wins;      expected 2: .1 + .2 = .3
    /// hard wins: 0: 1 + .5 + .5 + 1 = 3 of 4, 1: .5 of 2, 2: .5 of 2;
    /// soft: 0: .75 + .5 + .5 + .7 = 2.45 of 4, 1: .25 + .5 = .75 of 2, 2: .5 + .3 = .8 of 2.
    #[test]
    fn ties_count_half_a_win_each() {
        let three = |first, second, a: f64, b: f64, tie: f64| {
            Outcome::with_tie(first, second, a / (a + b), tie)
        };
        let outcomes = [
            three(0, 1, 0.6, 0.1, 0.3),
            three(1, 0, 0.2, 0.2, 0.6),
            three(0, 2, 0.3, 0.3, 0.4),
            three(2, 0, 0.1, 0.5, 0.4),
        ];
        assert_eq!(win_ratio(3, &outcomes, 0.5), [0.75, 0.25, 0.25]);
        let soft = soft_win_ratio(3, &outcomes);
        for (got, want) in soft.iter().zip([2.45 / 4.0, 0.75 / 2.0, 0.8 / 2.0]) {
            assert!((got - want).abs() < 1e-12, "{soft:?}");
        }
        // A tie that is not the most likely answer is decided between A and B.
        assert!(!three(0, 1, 0.45, 0.15, 0.4).tie_decided());
        assert!(three(0, 1, 0.35, 0.25, 0.4).tie_decided());
    }

    #[test]
    fn without_ties_the_outcomes_read_as_before() {
        for p in [0.0, 0.3, 0.5, 0.7, 1.0] {
            let o = Outcome::new(0, 1, p);
            assert_eq!(o.expected_first().to_bits(), p.to_bits());
            assert!(!o.tie_decided());
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
