//! From pairwise outcomes to scores and ranks: win ratios, Bradley-Terry, Product of
//! Experts (alone, or with absolute scores as experts beside the comparisons: [`hybrid`]),
//! debiasing, and positional-bias statistics. Pure functions.
//!
//! Every method reads a list of [`Outcome`]s over candidates `0..n`: `p` is the
//! probability that the candidate shown first (`first`) is better than the one shown
//! second (`second`), and `tie` the probability of a tie where the judge may answer one
//! (0 otherwise). With a tie, `p` is P(A) renormalised over A and B, P(A) / (P(A) +
//! P(B)), and the three answers' probabilities are P(A) = p (1 - tie), P(B) =
//! (1 - p) (1 - tie) and P(tie) = tie. How each method counts a tie
//! ([`RankMethod::ties_note`]): the win ratio takes a comparison whose most likely
//! answer is the tie as half a win for each side (the others decided at the threshold
//! as without ties); the soft win ratio and Bradley-Terry read the expected outcome
//! with a tie as half a win each, P(A) + P(tie) / 2; Product of Experts reads `p` (the
//! tie's probability left out). Without a tie every method reads `p` as it always did.

pub mod bias;
pub mod bradley_terry;
pub mod debias;
pub mod hybrid;
mod linalg;
pub mod poe;
pub mod ranks;
pub mod uncertainty;
pub mod win_ratio;

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

pub use bias::{first_position_rate, order_consistency, pairwise_accuracy, Rate};
pub use bradley_terry::BradleyTerry;
pub use debias::{balanced_threshold, reweight, reweight_factor};
pub use hybrid::{
    hybrid_fit, hybrid_fit_pooled, hybrid_pooled_at_threshold, hybrid_scores,
    hybrid_scores_at_threshold, HybridContext, HybridFit, PooledFit, SlopeFit,
};
pub use poe::poe_gaussian;
pub use ranks::ranks_from_scores;
pub use win_ratio::{soft_win_ratio, win_ratio};

/// One comparison: `p` = P(`first` is better than `second`), `first` in position A.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    pub first: usize,
    pub second: usize,
    /// P(A better): over A and B (renormalised over them when the judge may tie).
    pub p: f64,
    /// P(tie) over the three answers A, B and tie; 0 where the judge cannot tie.
    #[serde(default, skip_serializing_if = "no_tie")]
    pub tie: f64,
}

fn no_tie(tie: &f64) -> bool {
    *tie == 0.0
}

impl Outcome {
    pub fn new(first: usize, second: usize, p: f64) -> Self {
        Self {
            first,
            second,
            p,
            tie: 0.0,
        }
    }

    /// An outcome of a judge that may call a tie: `p` = P(A) / (P(A) + P(B)), `tie` =
    /// P(tie) over the three answers.
    pub fn with_tie(first: usize, second: usize, p: f64, tie: f64) -> Self {
        Self {
            first,
            second,
            p,
            tie,
        }
    }

    /// The first candidate's expected share of the win, a tie as half a win for each:
    /// P(A) + P(tie) / 2 = p (1 - tie) + tie / 2; exactly `p` without a tie.
    pub fn expected_first(&self) -> f64 {
        if self.tie == 0.0 {
            self.p
        } else {
            self.p * (1.0 - self.tie) + 0.5 * self.tie
        }
    }

    /// Whether the tie is the judge's most likely answer: P(tie) above both P(A) and
    /// P(B) (never without a tie).
    pub fn tie_decided(&self) -> bool {
        self.tie > 0.0 && self.tie > (1.0 - self.tie) * self.p.max(1.0 - self.p)
    }

    /// The same outcome with `p` replaced (the tie kept).
    pub fn with_p(self, p: f64) -> Self {
        Self { p, ..self }
    }
}

/// How comparisons become scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RankMethod {
    /// Fraction of comparisons won, decisions `p > tau` (the papers' default).
    WinRatio,
    /// Mean probability of winning (probabilities instead of decisions).
    Soft,
    /// Bradley-Terry maximum likelihood on the probabilities.
    BradleyTerry,
    /// Product-of-Experts Gaussian: least squares on logit(p) = s_i - s_j.
    Poe,
}

impl RankMethod {
    /// How this method counts a judge's ties (see the module documentation), in words.
    pub fn ties_note(self) -> &'static str {
        match self {
            RankMethod::WinRatio => {
                "the win ratio counts a comparison whose most likely answer is the tie as half \
                 a win for each candidate (the others are decided between A and B as without \
                 ties)"
            }
            RankMethod::Soft => {
                "the soft win ratio counts a tie as half a win for each candidate: the first \
                 candidate's expected wins are P(A) + P(tie)/2"
            }
            RankMethod::BradleyTerry => {
                "Bradley-Terry is fitted to the expected outcomes with a tie as half a win for \
                 each candidate: P(A) + P(tie)/2"
            }
            RankMethod::Poe => {
                "Product of Experts reads P(A) renormalised over A and B, P(A)/(P(A)+P(B)): \
                 the tie's probability is left out"
            }
        }
    }
}

/// Scores for `n` candidates (higher is better). `tau` is the decision threshold of the
/// win ratio; the probability-based methods should be given reweighted probabilities
/// instead (see [`debias`]).
pub fn score(method: RankMethod, n: usize, outcomes: &[Outcome], tau: f64) -> Result<Vec<f64>> {
    check_outcomes(n, outcomes)?;
    match method {
        RankMethod::WinRatio => Ok(win_ratio(n, outcomes, tau)),
        RankMethod::Soft => Ok(soft_win_ratio(n, outcomes)),
        RankMethod::BradleyTerry => BradleyTerry::default().fit(n, outcomes),
        RankMethod::Poe => Ok(poe_gaussian(n, outcomes)),
    }
}

/// Scores under decision threshold `tau`, the way debiasing applies to each method: the
/// win ratio decides at `tau`; the probability-based methods read the probabilities
/// reweighted so that `tau` maps to 0.5 (unchanged when `tau` is 0.5).
pub fn score_at_threshold(
    method: RankMethod,
    n: usize,
    outcomes: &[Outcome],
    tau: f64,
) -> Result<Vec<f64>> {
    if method == RankMethod::WinRatio || tau == 0.5 {
        return score(method, n, outcomes, tau);
    }
    let factor = reweight_factor(tau);
    let reweighted: Vec<Outcome> = outcomes
        .iter()
        .map(|o| o.with_p(reweight(o.p, factor)))
        .collect();
    score(method, n, &reweighted, 0.5)
}

/// Indices in range, distinct, and probabilities in [0, 1].
pub fn check_outcomes(n: usize, outcomes: &[Outcome]) -> Result<()> {
    for (index, o) in outcomes.iter().enumerate() {
        if o.first >= n || o.second >= n {
            bail!(
                "comparison {index}: candidate index out of range ({} vs {}, {n} candidates)",
                o.first,
                o.second
            );
        }
        if o.first == o.second {
            bail!(
                "comparison {index}: candidate {} compared with itself",
                o.first
            );
        }
        if !(0.0..=1.0).contains(&o.p) {
            bail!("comparison {index}: probability {} is not in [0, 1]", o.p);
        }
        if !(0.0..=1.0).contains(&o.tie) {
            bail!(
                "comparison {index}: tie probability {} is not in [0, 1]",
                o.tie
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_outcomes_are_rejected() {
        assert!(score(RankMethod::Soft, 2, &[Outcome::new(0, 2, 0.5)], 0.5).is_err());
        assert!(score(RankMethod::Soft, 2, &[Outcome::new(1, 1, 0.5)], 0.5).is_err());
        assert!(score(RankMethod::Soft, 2, &[Outcome::new(0, 1, f64::NAN)], 0.5).is_err());
        assert!(score(RankMethod::Soft, 2, &[Outcome::new(0, 1, 0.7)], 0.5).is_ok());
    }

    #[test]
    fn threshold_scoring_matches_reweighted_probabilities() {
        // A first-position bias: every first candidate gets +0.25.
        let outcomes = [
            Outcome::new(0, 1, 0.95),
            Outcome::new(1, 0, 0.55),
            Outcome::new(1, 2, 0.9),
            Outcome::new(2, 1, 0.6),
            Outcome::new(0, 2, 0.99),
            Outcome::new(2, 0, 0.3),
        ];
        // At 0.5 every method equals plain scoring.
        for method in [RankMethod::WinRatio, RankMethod::Soft] {
            assert_eq!(
                score_at_threshold(method, 3, &outcomes, 0.5).unwrap(),
                score(method, 3, &outcomes, 0.5).unwrap()
            );
        }
        // Win ratio at tau .7 by hand; winners: (0,1) 0, (1,0) 0, (1,2) 1, (2,1) 1,
        // (0,2) 0, (2,0) 0 -> 0: 4 of 4, 1: 2 of 4, 2: 0 of 4. At 0.5 the first
        // position also takes (1,0) and (2,1): 0: 3 of 4, 1: 2 of 4, 2: 1 of 4.
        assert_eq!(
            score_at_threshold(RankMethod::WinRatio, 3, &outcomes, 0.7).unwrap(),
            [1.0, 0.5, 0.0]
        );
        assert_eq!(
            score_at_threshold(RankMethod::WinRatio, 3, &outcomes, 0.5).unwrap(),
            [0.75, 0.5, 0.25]
        );
        // Soft at tau .7 reads a p / (a p + 1 - p) with a = 3/7.
        let soft = score_at_threshold(RankMethod::Soft, 3, &outcomes, 0.7).unwrap();
        let a = 0.3 / 0.7;
        let r = |p: f64| a * p / (a * p + 1.0 - p);
        let expected_0 = (r(0.95) + (1.0 - r(0.55)) + r(0.99) + (1.0 - r(0.3))) / 4.0;
        assert!((soft[0] - expected_0).abs() < 1e-12, "{soft:?}");
    }

    #[test]
    fn every_method_orders_a_clear_winner_first() {
        // 0 beats 1 beats 2, in both orders.
        let outcomes = [
            Outcome::new(0, 1, 0.8),
            Outcome::new(1, 0, 0.3),
            Outcome::new(1, 2, 0.7),
            Outcome::new(2, 1, 0.2),
            Outcome::new(0, 2, 0.9),
            Outcome::new(2, 0, 0.1),
        ];
        for method in [
            RankMethod::WinRatio,
            RankMethod::Soft,
            RankMethod::BradleyTerry,
            RankMethod::Poe,
        ] {
            let scores = score(method, 3, &outcomes, 0.5).unwrap();
            assert_eq!(ranks_from_scores(&scores), [1.0, 2.0, 3.0], "{method:?}");
        }
    }
}
