//! Adaptive comparison selection (`--design adaptive`): comparisons chosen in rounds,
//! each round where the current fit is least sure of the order.
//!
//! 1. The first round is a seeded random cycle over the candidates (N pairs, so every
//!    candidate is compared twice and the comparison graph is connected).
//! 2. After each round the scores are fitted from the debiased pair differences with
//!    their Gaussian uncertainty ([`crate::rank::uncertainty`], the Product-of-Experts
//!    Gaussian of Liusie et al., 2024, "Efficient LLM Comparative Assessment: a Product
//!    of Experts Framework for Pairwise Comparisons").
//! 3. The next round takes, one at a time, the pair not yet compared whose fitted order
//!    is most likely wrong, `Phi(-|s_i - s_j| / sd(s_i - s_j))`: pairs of close scores
//!    and few comparisons between them, like PairS's focus on neighbours in the ranking
//!    (Liu et al., 2024) but scored by the PoE variance. After each pick the variances
//!    are updated as if the pair had been compared (a rank-one update), so one round does
//!    not spend itself on one uncertain neighbourhood. Ties go to a seeded order.
//! 4. Every pair is asked in both orders in the same round, so a constant positional
//!    bias cancels, and a pair is never asked twice (the model's answer would not change).
//!
//! With absolute scores as experts (`--prior-scores`), every fit is the joint fit of
//! comparisons and absolute scores ([`crate::rank::hybrid`], its uncertainty from
//! [`fit_pair_differences_with_prior`]) and there is no random first round: the
//! absolute scores already place every candidate, so the first round too takes the pairs
//! whose order the combined fit is least sure of (at first, those of closest absolute
//! scores, the slope onto the logit scale being unknown).
//!
//! The run stops at the budget R, when every pair has been compared, or by a stop rule:
//! `stable:T` (Kendall's tau-b between the fits of two consecutive rounds >= T) or
//! `ci:W` (every score's 95% interval, `±1.96 sd`, narrower than W in logit units).
//! Every choice depends only on the seed, the context id and the results so far, so a
//! resumed run (results from the cache) makes the same choices.

use std::collections::HashSet;
use std::fmt;
use std::str::FromStr;

use anyhow::{bail, Context as _, Result};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};

use crate::rank::uncertainty::{fit_pair_differences_with_prior, pair_differences};
use crate::rank::Outcome;
use crate::stats::kendall_tau_b;

/// When to stop before the budget is spent.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum StopRule {
    /// Kendall's tau-b between consecutive rounds' scores at least this.
    Stable(f64),
    /// Every score's 95% interval narrower than this (logit units).
    Interval(f64),
}

impl FromStr for StopRule {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> Result<Self> {
        let (kind, value) = text.split_once(':').with_context(|| {
            format!("stop rule `{text}`: expected `stable:T` (0 < T <= 1) or `ci:W` (W > 0)")
        })?;
        let number: f64 = value
            .parse()
            .with_context(|| format!("stop rule `{text}`: `{value}` is not a number"))?;
        match kind {
            "stable" if number > 0.0 && number <= 1.0 => Ok(StopRule::Stable(number)),
            "stable" => bail!("stop rule `{text}`: T must be in (0, 1]"),
            "ci" if number > 0.0 && number.is_finite() => Ok(StopRule::Interval(number)),
            "ci" => bail!("stop rule `{text}`: W must be positive"),
            _ => bail!("stop rule `{text}`: unknown kind `{kind}` (expected `stable` or `ci`)"),
        }
    }
}

impl fmt::Display for StopRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StopRule::Stable(t) => write!(f, "stable:{t}"),
            StopRule::Interval(w) => write!(f, "ci:{w}"),
        }
    }
}

/// The round settings of the adaptive design.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct AdaptiveSettings {
    /// Split what the budget leaves after the first round into this many rounds.
    pub rounds: Option<usize>,
    /// Comparisons per round after the first (even).
    pub round_size: Option<usize>,
    pub stop: Option<StopRule>,
}

impl AdaptiveSettings {
    /// Check the settings with the requested budget `r` before any context is seen.
    pub fn check(&self, r: Option<usize>) -> Result<()> {
        if r.is_none() && self.stop.is_none() {
            bail!(
                "the adaptive design needs a budget (--comparisons R) or a stop rule \
                 (--stop-when stable:T or ci:W), or both"
            );
        }
        if let Some(r) = r {
            if r < 2 || r % 2 == 1 {
                bail!(
                    "the adaptive design asks every pair in both orders, so R must be even \
                     and at least 2 (got {r})"
                );
            }
        }
        if self.rounds.is_some() && self.round_size.is_some() {
            bail!("give --rounds or --round-size, not both");
        }
        if self.rounds.is_some() && r.is_none() {
            bail!("--rounds divides the budget, so it needs --comparisons R");
        }
        if self.rounds == Some(0) {
            bail!("--rounds must be at least 1");
        }
        if let Some(size) = self.round_size {
            if size < 2 || size % 2 == 1 {
                bail!("--round-size must be even and at least 2 (got {size})");
            }
        }
        Ok(())
    }
}

/// Why a context's selection ended.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "reason")]
pub enum Ending {
    /// The budget R was spent.
    Budget,
    /// Every pair was compared.
    Exhausted,
    /// `stable:T` held with this tau.
    Stable { tau: f64 },
    /// `ci:W` held with this widest interval.
    Interval { widest: f64 },
}

impl Ending {
    /// Why the selection stopped, in words.
    pub fn describe(&self) -> String {
        match *self {
            Ending::Budget => "the budget was spent".to_string(),
            Ending::Exhausted => "every pair was compared".to_string(),
            Ending::Stable { tau } => format!("stable (Kendall tau {tau:.3})"),
            Ending::Interval { widest } => format!("intervals narrow (widest {widest:.2})"),
        }
    }
}

/// The selection state of one context.
#[derive(Debug, Clone)]
pub struct AdaptiveSelector {
    n: usize,
    budget: usize,
    round_size: usize,
    stop: Option<StopRule>,
    /// The seeded first round (unordered pairs).
    cycle: Vec<(usize, usize)>,
    /// Every unordered pair in a seeded order: the tie-break.
    order: Vec<(usize, usize)>,
    asked: HashSet<(usize, usize)>,
    rounds: usize,
    previous: Option<Vec<f64>>,
    ending: Option<Ending>,
    /// The absolute scores and their weight as experts, when given.
    prior: Option<(Vec<f64>, f64)>,
}

impl AdaptiveSelector {
    /// A selector for `n` candidates with budget `r` (ordered comparisons; `None`: all
    /// N(N-1), for a stop rule to end earlier). `rng` is the context's generator.
    pub fn new(
        n: usize,
        r: Option<usize>,
        settings: &AdaptiveSettings,
        rng: &mut StdRng,
    ) -> Result<Self> {
        Self::with_prior(n, r, settings, rng, None)
    }

    /// [`Self::new`] with absolute scores (one per candidate, any scale) as experts of
    /// weight `lambda` each in every fit (see the module header).
    pub fn with_prior(
        n: usize,
        r: Option<usize>,
        settings: &AdaptiveSettings,
        rng: &mut StdRng,
        prior: Option<(Vec<f64>, f64)>,
    ) -> Result<Self> {
        settings.check(r)?;
        if let Some((absolute, lambda)) = &prior {
            crate::rank::hybrid::check_prior_weight(*lambda)?;
            if absolute.len() != n {
                bail!("{} absolute scores for {n} candidates", absolute.len());
            }
            crate::rank::hybrid::standardise(absolute)?;
        }
        let full = n * n.saturating_sub(1);
        let budget = r.unwrap_or(full);
        if budget > full {
            bail!(
                "{budget} comparisons requested but the adaptive design allows at most {full} \
                 for {n} candidates"
            );
        }
        let mut permutation: Vec<usize> = (0..n).collect();
        permutation.shuffle(rng);
        let cycle: Vec<(usize, usize)> = match n {
            _ if prior.is_some() => Vec::new(),
            0 | 1 => Vec::new(),
            2 => vec![(0, 1)],
            _ => (0..n)
                .map(|k| {
                    let (a, b) = (permutation[k], permutation[(k + 1) % n]);
                    (a.min(b), a.max(b))
                })
                .collect(),
        };
        let mut order: Vec<(usize, usize)> = (0..n)
            .flat_map(|i| (i + 1..n).map(move |j| (i, j)))
            .collect();
        order.shuffle(rng);
        let initial = (2 * cycle.len()).min(budget);
        let round_size = match (settings.round_size, settings.rounds) {
            (Some(size), _) => size,
            (None, Some(rounds)) => {
                let per_round = (budget - initial).div_ceil(rounds);
                (per_round + per_round % 2).max(2)
            }
            (None, None) => (n + n % 2).max(2),
        };
        Ok(Self {
            n,
            budget,
            round_size,
            stop: settings.stop,
            cycle,
            order,
            asked: HashSet::new(),
            rounds: 0,
            previous: None,
            ending: None,
            prior,
        })
    }

    /// Rounds chosen so far.
    pub fn rounds(&self) -> usize {
        self.rounds
    }

    /// Comparisons per round after the first.
    pub fn round_size(&self) -> usize {
        self.round_size
    }

    /// Why the selection ended, once it has.
    pub fn ending(&self) -> Option<Ending> {
        self.ending
    }

    /// The next round's ordered pairs (sorted), given every outcome of the rounds so far;
    /// empty once the selection has ended ([`Self::ending`] says why).
    pub fn next_round(&mut self, outcomes: &[Outcome]) -> Result<Vec<(usize, usize)>> {
        if self.ending.is_some() {
            return Ok(Vec::new());
        }
        let remaining = self.budget - 2 * self.asked.len();
        let mut chosen = Vec::new();
        if self.rounds == 0 && self.prior.is_none() {
            chosen.extend(self.cycle.iter().copied().take(remaining / 2));
        } else {
            let prior = self.prior.as_ref().map(|(a, l)| (a.as_slice(), *l));
            let mut fit =
                fit_pair_differences_with_prior(self.n, &pair_differences(outcomes), prior)?;
            if let Some(ending) = self.check_stop(&fit)? {
                self.ending = Some(ending);
                return Ok(Vec::new());
            }
            self.previous = Some(fit.scores.clone());
            let picks = self.round_size.min(remaining) / 2;
            for _ in 0..picks {
                let mut best: Option<((usize, usize), f64)> = None;
                for &(i, j) in &self.order {
                    if self.asked.contains(&(i, j)) || chosen.contains(&(i, j)) {
                        continue;
                    }
                    let p = fit.flip_probability(i, j);
                    if best.is_none_or(|(_, top)| p > top) {
                        best = Some(((i, j), p));
                    }
                }
                let Some(((i, j), _)) = best else { break };
                fit.add_pair(i, j);
                chosen.push((i, j));
            }
        }
        if chosen.is_empty() {
            let all = self.n * self.n.saturating_sub(1) / 2;
            self.ending = Some(if self.asked.len() == all {
                Ending::Exhausted
            } else {
                Ending::Budget
            });
            return Ok(Vec::new());
        }
        self.asked.extend(chosen.iter().copied());
        self.rounds += 1;
        let mut pairs: Vec<(usize, usize)> =
            chosen.iter().flat_map(|&(i, j)| [(i, j), (j, i)]).collect();
        pairs.sort_unstable();
        Ok(pairs)
    }

    fn check_stop(&self, fit: &crate::rank::uncertainty::PairFit) -> Result<Option<Ending>> {
        match self.stop {
            Some(StopRule::Stable(threshold)) => {
                if let Some(previous) = &self.previous {
                    if let Some(tau) = kendall_tau_b(previous, &fit.scores)? {
                        if tau >= threshold {
                            return Ok(Some(Ending::Stable { tau }));
                        }
                    }
                }
            }
            Some(StopRule::Interval(width)) => {
                let widest = (0..self.n)
                    .map(|i| 2.0 * 1.96 * fit.score_sd(i))
                    .fold(0.0, f64::max);
                if widest < width {
                    return Ok(Some(Ending::Interval { widest }));
                }
            }
            None => {}
        }
        Ok(None)
    }
}

/// One context's whole selection with `evaluate` answering each round's ordered pairs
/// with `p(first wins)`: the outcomes in the order asked and why it ended.
pub fn select_adaptively(
    selector: &mut AdaptiveSelector,
    mut evaluate: impl FnMut(&[(usize, usize)]) -> Result<Vec<f64>>,
) -> Result<(Vec<Outcome>, Ending)> {
    let mut outcomes = Vec::new();
    loop {
        let pairs = selector.next_round(&outcomes)?;
        if pairs.is_empty() {
            break;
        }
        let answers = evaluate(&pairs)?;
        if answers.len() != pairs.len() {
            bail!(
                "{} answers for {} comparisons of a round",
                answers.len(),
                pairs.len()
            );
        }
        outcomes.extend(
            pairs
                .iter()
                .zip(answers)
                .map(|(&(first, second), p)| Outcome::new(first, second, p)),
        );
    }
    let ending = selector
        .ending()
        .context("the adaptive selection stopped without a reason")?;
    Ok((outcomes, ending))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::pairwise::design::context_rng;
    use crate::rank::{poe_gaussian, ranks_from_scores};

    fn logistic(x: f64) -> f64 {
        1.0 / (1.0 + (-x).exp())
    }

    /// A judge with true scores `truth` and a first-position bias of +0.8 logits.
    fn judge(truth: &[f64]) -> impl Fn(&[(usize, usize)]) -> Result<Vec<f64>> + '_ {
        move |pairs| {
            Ok(pairs
                .iter()
                .map(|&(i, j)| logistic(truth[i] - truth[j] + 0.8))
                .collect())
        }
    }

    fn selector(n: usize, r: Option<usize>, settings: AdaptiveSettings) -> AdaptiveSelector {
        AdaptiveSelector::new(n, r, &settings, &mut context_rng(3, "doc")).unwrap()
    }

    #[test]
    fn stop_rules_parse_and_bad_ones_are_explained() {
        assert_eq!(
            "stable:0.95".parse::<StopRule>().unwrap(),
            StopRule::Stable(0.95)
        );
        assert_eq!(
            "ci:0.5".parse::<StopRule>().unwrap(),
            StopRule::Interval(0.5)
        );
        for bad in [
            "stable",
            "stable:x",
            "stable:1.5",
            "ci:0",
            "ci:-1",
            "tau:0.9",
        ] {
            assert!(bad.parse::<StopRule>().is_err(), "{bad}");
        }
        assert_eq!(StopRule::Stable(0.9).to_string(), "stable:0.9");
    }

    #[test]
    fn settings_are_checked() {
        let none = AdaptiveSettings::default();
        assert!(none
            .check(None)
            .unwrap_err()
            .to_string()
            .contains("--stop-when"));
        assert!(none.check(Some(7)).is_err());
        assert!(none.check(Some(60)).is_ok());
        let both = AdaptiveSettings {
            rounds: Some(3),
            round_size: Some(8),
            stop: None,
        };
        assert!(both.check(Some(60)).is_err());
        let rounds = AdaptiveSettings {
            rounds: Some(3),
            ..Default::default()
        };
        assert!(rounds
            .check(None)
            .is_err_and(|e| e.to_string().contains("stop rule")));
    }

    #[test]
    fn every_pair_in_both_orders_once_and_the_budget_kept() {
        let truth: Vec<f64> = (0..16).map(|k| (k as f64 * 0.37).sin() * 2.0).collect();
        let mut s = selector(16, Some(60), AdaptiveSettings::default());
        let (outcomes, ending) = select_adaptively(&mut s, judge(&truth)).unwrap();
        assert_eq!(outcomes.len(), 60);
        assert_eq!(ending, Ending::Budget);
        let ordered: HashSet<(usize, usize)> =
            outcomes.iter().map(|o| (o.first, o.second)).collect();
        assert_eq!(ordered.len(), 60, "a pair asked twice");
        assert!(ordered.iter().all(|&(i, j)| ordered.contains(&(j, i))));
        // The first round is a cycle: every candidate twice, 32 comparisons; then rounds
        // of 16 (N) up to the budget.
        assert_eq!(s.rounds(), 1 + 2);
    }

    #[test]
    fn the_full_budget_compares_every_pair() {
        let truth = [0.3, -0.2, 1.0, 0.0, -1.4];
        let mut s = selector(5, Some(20), AdaptiveSettings::default());
        let (outcomes, _) = select_adaptively(&mut s, judge(&truth)).unwrap();
        assert_eq!(outcomes.len(), 20);
        let mut s = selector(
            5,
            None,
            AdaptiveSettings {
                stop: Some(StopRule::Stable(1.0)),
                ..Default::default()
            },
        );
        let (_, ending) = select_adaptively(&mut s, judge(&truth)).unwrap();
        assert!(matches!(ending, Ending::Stable { .. } | Ending::Exhausted));
    }

    #[test]
    fn adaptive_finds_the_order_with_a_quarter_of_the_comparisons() {
        // Noisy judge: truth plus a fixed pseudo-random error per ordered pair.
        let n = 16;
        let truth: Vec<f64> = (0..n).map(|k| (k as f64 * 1.7).cos() * 1.5).collect();
        let noise = |i: usize, j: usize| (((i * 31 + j * 17) % 13) as f64 / 13.0 - 0.5) * 0.6;
        let evaluate = |pairs: &[(usize, usize)]| -> Result<Vec<f64>> {
            Ok(pairs
                .iter()
                .map(|&(i, j)| logistic(truth[i] - truth[j] + 0.5 + noise(i, j)))
                .collect())
        };
        let mut s = selector(n, Some(60), AdaptiveSettings::default());
        let (outcomes, _) = select_adaptively(&mut s, evaluate).unwrap();
        let scores = poe_gaussian(n, &outcomes);
        let rho = crate::stats::spearman(&scores, &truth).unwrap().unwrap();
        assert!(rho > 0.95, "adaptive Spearman {rho}");
        assert_eq!(ranks_from_scores(&scores).len(), n);
    }

    #[test]
    fn choices_depend_only_on_seed_context_and_results() {
        let truth = [0.3, -0.2, 1.0, 0.0, -1.4, 0.8, 0.1];
        let run = |seed, id| {
            let mut s = AdaptiveSelector::new(
                7,
                Some(24),
                &AdaptiveSettings::default(),
                &mut context_rng(seed, id),
            )
            .unwrap();
            select_adaptively(&mut s, judge(&truth)).unwrap().0
        };
        assert_eq!(run(1, "a"), run(1, "a"));
        assert_ne!(run(1, "a"), run(2, "a"));
    }

    #[test]
    fn rounds_divide_the_budget_and_stop_rules_end_early() {
        let truth: Vec<f64> = (0..10).map(|k| k as f64 * 0.5).collect();
        let mut s = selector(
            10,
            Some(60),
            AdaptiveSettings {
                rounds: Some(2),
                ..Default::default()
            },
        );
        // 60 - 20 (cycle) = 40 in 2 rounds of 20.
        assert_eq!(s.round_size(), 20);
        let (outcomes, _) = select_adaptively(&mut s, judge(&truth)).unwrap();
        assert_eq!((outcomes.len(), s.rounds()), (60, 3));
        // Exact, well separated scores: the intervals narrow quickly.
        let mut s = selector(
            10,
            None,
            AdaptiveSettings {
                stop: Some(StopRule::Interval(2.0)),
                ..Default::default()
            },
        );
        let (outcomes, ending) = select_adaptively(&mut s, judge(&truth)).unwrap();
        assert!(
            matches!(ending, Ending::Interval { widest } if widest < 2.0),
            "{ending:?}"
        );
        assert!(outcomes.len() < 90, "{}", outcomes.len());
    }

    #[test]
    fn with_absolute_scores_every_round_follows_the_joint_fit() {
        let n = 16;
        let truth: Vec<f64> = (0..n).map(|k| (k as f64 * 1.7).cos() * 1.5).collect();
        // Absolute scores: the truth on a 1-10 scale, with an error.
        let absolute: Vec<f64> = truth
            .iter()
            .enumerate()
            .map(|(k, t)| 5.0 + 2.0 * t + ((k * 7 % 5) as f64 - 2.0) * 0.3)
            .collect();
        let mut s = AdaptiveSelector::with_prior(
            n,
            Some(24),
            &AdaptiveSettings::default(),
            &mut context_rng(3, "doc"),
            Some((absolute.clone(), 1.0)),
        )
        .unwrap();
        let first = s.next_round(&[]).unwrap();
        // No random cycle: the first round is N = 16 comparisons, 8 pairs, the first of
        // them the pair of closest absolute scores.
        assert_eq!(first.len(), 16);
        let closest = (0..n)
            .flat_map(|i| (i + 1..n).map(move |j| (i, j)))
            .min_by(|&(a, b), &(c, d)| {
                (absolute[a] - absolute[b])
                    .abs()
                    .total_cmp(&(absolute[c] - absolute[d]).abs())
            })
            .unwrap();
        assert!(first.contains(&closest), "{first:?} lacks {closest:?}");
        let mut s = AdaptiveSelector::with_prior(
            n,
            Some(24),
            &AdaptiveSettings::default(),
            &mut context_rng(3, "doc"),
            Some((absolute.clone(), 1.0)),
        )
        .unwrap();
        let (outcomes, ending) = select_adaptively(&mut s, judge(&truth)).unwrap();
        assert_eq!((outcomes.len(), ending), (24, Ending::Budget));
        let scores = crate::rank::hybrid_scores(n, &outcomes, &absolute, 1.0).unwrap();
        let rho = crate::stats::spearman(&scores, &truth).unwrap().unwrap();
        assert!(rho > 0.95, "hybrid adaptive Spearman {rho}");
        // A prior of the wrong length is refused.
        assert!(AdaptiveSelector::with_prior(
            n,
            Some(24),
            &AdaptiveSettings::default(),
            &mut context_rng(3, "doc"),
            Some((vec![1.0; 3], 1.0)),
        )
        .is_err());
    }

    #[test]
    fn too_large_a_budget_is_refused() {
        let error = AdaptiveSelector::new(
            4,
            Some(14),
            &AdaptiveSettings::default(),
            &mut context_rng(0, "x"),
        )
        .unwrap_err();
        assert!(error.to_string().contains("at most 12"), "{error}");
    }
}
