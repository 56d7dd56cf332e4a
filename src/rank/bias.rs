//! Positional-bias and accuracy statistics of a comparison set.
//!
//! Rates are returned as counts ([`Rate`]) so that they add up exactly over contexts.
//! - `P(A)`: the fraction of comparisons the first position wins (`p > tau`);
//! - order consistency: over unordered pairs compared in both orders, the fraction
//!   whose two decisions name the same winner;
//! - pairwise accuracy: over comparisons of candidates whose human scores differ, the
//!   fraction whose decision agrees with the humans.

use std::collections::HashMap;
use std::ops::{Add, AddAssign};

use serde::Serialize;

use super::Outcome;

/// `hits` out of `total`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Rate {
    pub hits: usize,
    pub total: usize,
}

impl Rate {
    /// `hits / total`, `None` when nothing was counted.
    pub fn value(&self) -> Option<f64> {
        (self.total > 0).then(|| self.hits as f64 / self.total as f64)
    }
}

impl Add for Rate {
    type Output = Rate;
    fn add(self, other: Rate) -> Rate {
        Rate {
            hits: self.hits + other.hits,
            total: self.total + other.total,
        }
    }
}

impl AddAssign for Rate {
    fn add_assign(&mut self, other: Rate) {
        *self = *self + other;
    }
}

/// `P(A)`: comparisons won by the first position.
pub fn first_position_rate(outcomes: &[Outcome], tau: f64) -> Rate {
    Rate {
        hits: outcomes.iter().filter(|o| o.p > tau).count(),
        total: outcomes.len(),
    }
}

/// Unordered pairs seen in both orders whose decisions agree on the winner
/// (`y_ij = 1 - y_ji`). A pair compared more than once in one order counts its first
/// comparison.
pub fn order_consistency(outcomes: &[Outcome], tau: f64) -> Rate {
    let mut first_seen: HashMap<(usize, usize), bool> = HashMap::new();
    for o in outcomes {
        first_seen.entry((o.first, o.second)).or_insert(o.p > tau);
    }
    let mut rate = Rate::default();
    for (&(i, j), &first_wins) in &first_seen {
        if i < j {
            if let Some(&reverse_first_wins) = first_seen.get(&(j, i)) {
                rate.total += 1;
                if first_wins != reverse_first_wins {
                    rate.hits += 1;
                }
            }
        }
    }
    rate
}

/// Comparisons of candidates with different human scores (`human[i]`) decided as the
/// humans rank them.
pub fn pairwise_accuracy(outcomes: &[Outcome], human: &[f64], tau: f64) -> Rate {
    let mut rate = Rate::default();
    for o in outcomes {
        let (a, b) = (human[o.first], human[o.second]);
        if a != b {
            rate.total += 1;
            if (o.p > tau) == (a > b) {
                rate.hits += 1;
            }
        }
    }
    rate
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set() -> Vec<Outcome> {
        vec![
            Outcome::new(0, 1, 0.9), // A wins
            Outcome::new(1, 0, 0.6), // A wins: 0/1 inconsistent
            Outcome::new(0, 2, 0.7), // A wins
            Outcome::new(2, 0, 0.2), // B wins: 0/2 consistent (0 both times)
            Outcome::new(1, 2, 0.4), // B wins, (2, 1) missing
        ]
    }

    #[test]
    fn first_position_rate_counts_wins_of_a() {
        assert_eq!(first_position_rate(&set(), 0.5), Rate { hits: 3, total: 5 });
        assert_eq!(
            first_position_rate(&set(), 0.65),
            Rate { hits: 2, total: 5 }
        );
        assert_eq!(first_position_rate(&[], 0.5).value(), None);
    }

    #[test]
    fn consistency_counts_pairs_seen_both_ways() {
        assert_eq!(order_consistency(&set(), 0.5), Rate { hits: 1, total: 2 });
        // With tau .65, (1,0) becomes a win for 0 too: both pairs consistent.
        assert_eq!(order_consistency(&set(), 0.65), Rate { hits: 2, total: 2 });
    }

    #[test]
    fn accuracy_skips_equal_human_scores() {
        // Humans: 0 best, 1 and 2 tied. Only comparisons involving 0 count:
        // (0,1) right, (1,0) wrong, (0,2) right, (2,0) right.
        let rate = pairwise_accuracy(&set(), &[5.0, 3.0, 3.0], 0.5);
        assert_eq!(rate, Rate { hits: 3, total: 4 });
        assert_eq!((rate + rate).value(), Some(0.75));
    }
}
