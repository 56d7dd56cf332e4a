//! Juries: several judges of one run combined into one ranking. A panel of smaller
//! judges of different families agrees with people better than one large judge and is
//! less biased toward its own family (the "juries" finding); users who cannot send data
//! to a large hosted judge can still run several local ones.
//!
//! - Comparisons: every judge's comparisons are experts of one Product of Experts (the
//!   Gaussian closed form, weighted least squares on `logit p = s_i - s_j`, each judge's
//!   comparisons weighing its weight). Where a design lacks both orders of its pairs,
//!   each judge's positional bias is corrected first (its comparisons reweighted to its
//!   own balanced threshold); with both orders a constant bias cancels already, and
//!   nothing is touched, so that a jury of one judge gives exactly that judge's Product
//!   of Experts scores.
//! - Scores (`score`): each judge's scores standardised over the run (mean 0, standard
//!   deviation 1: judges use their scales differently), then their weighted mean.
//! - Weights: equal, given, or learned from agreement (a judge's mean Spearman with the
//!   others, negative agreement counting as none; three judges or more, and equal weights,
//!   said so in the result, where no judge agrees with another).
//! - Agreement: Spearman between every two judges' scores within each context (the mean
//!   over contexts), and for comparisons Cohen's kappa of their decisions (each judge at
//!   its own threshold) on the comparisons both made.
//!
//! Pure functions over the judges' results: the runs themselves are the single-judge
//! routes, one judge at a time.

use anyhow::{bail, Result};
use serde::Serialize;

use super::pairwise::fit::SetAside;
use super::pairwise::CompareResult;
use super::scoring::ScoreRun;
use crate::data::Context;
use crate::rank::debias::{balanced_threshold, reweight, reweight_factor};
use crate::rank::poe::poe_gaussian_weighted;
use crate::rank::{ranks_from_scores, Outcome};
use crate::stats::{spearman, Item};

/// How the judges weigh.
#[derive(Debug, Clone, PartialEq)]
pub enum JuryWeights {
    /// Every judge weighs 1.
    Equal,
    /// One weight per judge, in the jury's order (non-negative, not all zero).
    Given(Vec<f64>),
    /// From agreement: a judge's mean Spearman with the others (0 where negative); equal,
    /// and said so ([`JuryResult::weights_note`]), where no judge agrees with any other.
    /// Needs three judges or more ([`JuryWeights::check`]).
    FromAgreement,
}

/// Agreement weights need this many judges: with two, each judge's agreement with "the
/// others" is the same number, so the weights would be equal whatever the judges do.
pub const AGREEMENT_MIN_JUDGES: usize = 3;

impl JuryWeights {
    /// Whether these weights can weigh `judges` judges, decided before any judge runs:
    /// given weights one per judge, non-negative and not all 0; agreement weights for
    /// three judges or more. `how`
    /// names agreement weights in the caller's words (`--jury-weights agreement`,
    /// `weights="agreement"`).
    pub fn check(&self, judges: usize, how: &str) -> Result<()> {
        match self {
            JuryWeights::Equal => Ok(()),
            JuryWeights::Given(given) if given.len() != judges => {
                bail!("{} weights for {judges} judges", given.len())
            }
            JuryWeights::Given(given) => {
                if let Some((k, w)) = given
                    .iter()
                    .enumerate()
                    .find(|(_, w)| !w.is_finite() || **w < 0.0)
                {
                    bail!(
                        "judge {}: weight {w} (weights are non-negative numbers)",
                        k + 1
                    );
                }
                if given.iter().all(|&w| w == 0.0) {
                    bail!("every judge weighs 0: nothing would be combined");
                }
                Ok(())
            }
            JuryWeights::FromAgreement if judges < AGREEMENT_MIN_JUDGES => bail!(
                "{how} needs {AGREEMENT_MIN_JUDGES} judges or more (this jury has {judges}): a \
                 judge's weight is its agreement with the others, and with {judges} judge{} \
                 every judge's agreement with the others is the same number, so the weights \
                 would be equal whatever the judges say; leave it out for equal weights, or \
                 give each judge its weight",
                if judges == 1 { "" } else { "s" }
            ),
            JuryWeights::FromAgreement => Ok(()),
        }
    }
}

/// One judge of the jury, as the output names it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JudgeEntry {
    pub name: String,
    pub weight: f64,
}

/// One context of a jury's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JuryContext {
    pub context_id: String,
    pub candidate_ids: Vec<String>,
    /// The jury's scores, one per candidate (input order); higher is better.
    pub scores: Vec<f64>,
    /// 1 = best; ties share the average rank.
    pub ranks: Vec<f64>,
    /// Each judge's own scores, `[judge][candidate]`.
    pub judge_scores: Vec<Vec<f64>>,
}

/// How the judges agree with each other.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Agreement {
    /// `[a][b]`: the mean over contexts of Spearman's correlation between judges `a` and
    /// `b`'s scores; `None` where it is undefined in every context.
    pub spearman: Vec<Vec<Option<f64>>>,
    /// `[a][b]`: Cohen's kappa of the two judges' decisions on the comparisons both
    /// made (comparisons only); `None` where undefined (one decision throughout).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kappa: Option<Vec<Vec<Option<f64>>>>,
}

/// A jury's result: its judges, its contexts, and how the judges agree.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JuryResult {
    pub judges: Vec<JudgeEntry>,
    pub contexts: Vec<JuryContext>,
    pub agreement: Agreement,
    /// Where the weights are not what was asked for, why: agreement weights that were
    /// all 0 (no judge agrees with another), replaced by equal weights.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weights_note: Option<String>,
}

impl JuryResult {
    /// One meta-evaluation item per candidate with the human score `key` in `contexts`
    /// (the run's input): the jury's score, or with `judge` that judge's own.
    pub fn correlation_items(
        &self,
        contexts: &[Context],
        key: &str,
        judge: Option<usize>,
    ) -> Vec<Item> {
        let mut items = Vec::new();
        for context in &self.contexts {
            let Some(input) = contexts.iter().find(|c| c.id == context.context_id) else {
                continue;
            };
            let scores = match judge {
                Some(j) => &context.judge_scores[j],
                None => &context.scores,
            };
            for (id, &pred) in context.candidate_ids.iter().zip(scores) {
                let Some(candidate) = input.candidates.iter().find(|x| &x.id == id) else {
                    continue;
                };
                if let Some(&human) = candidate.scores.get(key) {
                    items.push(Item {
                        group: context.context_id.clone(),
                        system: candidate.system_id.clone().unwrap_or_else(|| id.clone()),
                        pred,
                        human,
                    });
                }
            }
        }
        items
    }
}

/// A jury's judges must judge the same candidates: an error of the request (exit code
/// 2, `ValueError`) when judge `name` set some aside as too long for its model.
pub fn require_every_candidate(name: &str, set_aside: &[SetAside]) -> Result<()> {
    if set_aside.is_empty() {
        return Ok(());
    }
    Err(crate::engine::EngineError::BadRequest(format!(
        "judge `{name}` cannot compare every candidate, and a jury's judges must judge the \
         same ones: {}",
        set_aside
            .iter()
            .map(SetAside::describe)
            .collect::<Vec<_>>()
            .join("; ")
    ))
    .into())
}

/// The judges' results must be of the same contexts and candidates, in the same order.
fn check_alike<'a>(
    names: &[String],
    contexts: impl Fn(usize) -> Vec<(&'a str, &'a [String])>,
) -> Result<()> {
    let first = contexts(0);
    for (k, name) in names.iter().enumerate().skip(1) {
        let other = contexts(k);
        if other.len() != first.len() {
            bail!(
                "judge `{name}` judged {} contexts, judge `{}` {}: a jury's judges must judge \
                 the same input",
                other.len(),
                names[0],
                first.len()
            );
        }
        for ((id_a, ids_a), (id_b, ids_b)) in first.iter().zip(&other) {
            if id_a != id_b || ids_a != ids_b {
                bail!(
                    "judges `{}` and `{name}` differ in context `{id_a}` (`{id_b}`): a jury's \
                     judges must judge the same candidates",
                    names[0]
                );
            }
        }
    }
    Ok(())
}

/// The weights of `names` under `weights`, given the judges' agreement, and why they
/// are not what was asked for where they are not.
fn resolve_weights(
    names: &[String],
    weights: &JuryWeights,
    spearman: &[Vec<Option<f64>>],
) -> Result<(Vec<f64>, Option<String>)> {
    let n = names.len();
    if *weights == JuryWeights::FromAgreement {
        weights.check(n, "agreement weights")?;
    }
    Ok(match weights {
        JuryWeights::Equal => (vec![1.0; n], None),
        JuryWeights::Given(given) => {
            if given.len() != n {
                bail!("{} weights for {n} judges", given.len());
            }
            if let Some((k, w)) = given
                .iter()
                .enumerate()
                .find(|(_, w)| !w.is_finite() || **w < 0.0)
            {
                bail!(
                    "judge `{}`: weight {w} (weights are non-negative numbers)",
                    names[k]
                );
            }
            if given.iter().all(|&w| w == 0.0) {
                bail!("every judge weighs 0: nothing would be combined");
            }
            (given.clone(), None)
        }
        JuryWeights::FromAgreement => {
            let learned: Vec<f64> = (0..n)
                .map(|a| {
                    let others: Vec<f64> = (0..n)
                        .filter(|&b| b != a)
                        .filter_map(|b| spearman[a][b])
                        .collect();
                    if others.is_empty() {
                        0.0
                    } else {
                        (others.iter().sum::<f64>() / others.len() as f64).max(0.0)
                    }
                })
                .collect();
            if learned.iter().all(|&w| w == 0.0) {
                (
                    vec![1.0; n],
                    Some(
                        "agreement weights: no judge agrees with the others (each judge's mean \
                         Spearman with the others is 0 or below, or undefined), so every \
                         agreement weight would be 0; every judge weighs 1 instead"
                            .to_string(),
                    ),
                )
            } else {
                (learned, None)
            }
        }
    })
}

/// The mean over contexts of Spearman between every two judges' scores (`scores[judge]
/// [context][candidate]`).
fn spearman_matrix(scores: &[Vec<&[f64]>]) -> Result<Vec<Vec<Option<f64>>>> {
    let n = scores.len();
    let mut matrix = vec![vec![None; n]; n];
    for a in 0..n {
        for b in 0..n {
            let mut values = Vec::new();
            for (x, y) in scores[a].iter().zip(&scores[b]) {
                if x.len() >= 2 {
                    values.extend(spearman(x, y)?);
                }
            }
            if !values.is_empty() {
                matrix[a][b] = Some(values.iter().sum::<f64>() / values.len() as f64);
            }
        }
    }
    Ok(matrix)
}

/// Combine the comparisons of `results` (one per judge, named `names`) into one ranking.
/// `correct_bias`: reweight each judge's comparisons to its own balanced threshold first
/// (for designs without both orders of each pair).
pub fn combine_comparisons(
    names: &[String],
    results: &[&CompareResult],
    weights: &JuryWeights,
    correct_bias: bool,
) -> Result<JuryResult> {
    if results.is_empty() || results.len() != names.len() {
        bail!("a jury needs at least one judge, named");
    }
    check_alike(names, |k| {
        results[k]
            .contexts
            .iter()
            .map(|c| (c.context_id.as_str(), c.candidate_ids.as_slice()))
            .collect()
    })?;
    let scores: Vec<Vec<&[f64]>> = results
        .iter()
        .map(|r| r.contexts.iter().map(|c| c.scores.as_slice()).collect())
        .collect();
    let spearman = spearman_matrix(&scores)?;
    let (weights, weights_note) = resolve_weights(names, weights, &spearman)?;
    let factors: Vec<Option<f64>> = results
        .iter()
        .map(|result| {
            correct_bias.then(|| {
                let all: Vec<f64> = result
                    .contexts
                    .iter()
                    .flat_map(|c| c.comparisons.iter().map(|x| x.a_over_b()))
                    .collect();
                reweight_factor(balanced_threshold(&all))
            })
        })
        .collect();
    let mut contexts = Vec::with_capacity(results[0].contexts.len());
    for (index, context) in results[0].contexts.iter().enumerate() {
        let n = context.candidate_ids.len();
        let outcomes =
            results
                .iter()
                .zip(&weights)
                .zip(&factors)
                .flat_map(|((result, &weight), factor)| {
                    result.contexts[index].comparisons.iter().map(move |c| {
                        let p = match factor {
                            Some(a) => reweight(c.a_over_b(), *a),
                            None => c.a_over_b(),
                        };
                        (Outcome::new(c.first, c.second, p), weight)
                    })
                });
        let combined = poe_gaussian_weighted(n, outcomes);
        contexts.push(JuryContext {
            context_id: context.context_id.clone(),
            candidate_ids: context.candidate_ids.clone(),
            ranks: ranks_from_scores(&combined),
            scores: combined,
            judge_scores: results
                .iter()
                .map(|r| r.contexts[index].scores.clone())
                .collect(),
        });
    }
    let kappa = kappa_matrix(results);
    Ok(JuryResult {
        judges: judge_entries(names, &weights),
        contexts,
        agreement: Agreement {
            spearman,
            kappa: Some(kappa),
        },
        weights_note,
    })
}

/// Cohen's kappa of every two judges' decisions (each at its own threshold `tau`) on
/// the comparisons both made (matched by context, first and second candidate).
fn kappa_matrix(results: &[&CompareResult]) -> Vec<Vec<Option<f64>>> {
    let n = results.len();
    let decisions =
        |result: &CompareResult| -> std::collections::HashMap<(usize, usize, usize), bool> {
            result
                .contexts
                .iter()
                .enumerate()
                .flat_map(|(k, c)| {
                    c.comparisons
                        .iter()
                        .map(move |x| ((k, x.first, x.second), x.a_over_b() > result.tau))
                })
                .collect()
        };
    let all: Vec<_> = results.iter().map(|r| decisions(r)).collect();
    let mut matrix = vec![vec![None; n]; n];
    for a in 0..n {
        for b in 0..n {
            let pairs: Vec<(bool, bool)> = all[a]
                .iter()
                .filter_map(|(key, &x)| all[b].get(key).map(|&y| (x, y)))
                .collect();
            matrix[a][b] = cohen_kappa(&pairs);
        }
    }
    matrix
}

/// Cohen's kappa of two raters' binary decisions; `None` without decisions or where the
/// agreement expected by chance is 1 (both always decide the same way).
pub fn cohen_kappa(pairs: &[(bool, bool)]) -> Option<f64> {
    if pairs.is_empty() {
        return None;
    }
    let n = pairs.len() as f64;
    let observed = pairs.iter().filter(|(x, y)| x == y).count() as f64 / n;
    let p_x = pairs.iter().filter(|(x, _)| *x).count() as f64 / n;
    let p_y = pairs.iter().filter(|(_, y)| *y).count() as f64 / n;
    let expected = p_x * p_y + (1.0 - p_x) * (1.0 - p_y);
    (expected < 1.0).then(|| (observed - expected) / (1.0 - expected))
}

/// Combine the absolute scores of `runs` (one per judge, named `names`): each judge's
/// scores standardised over the run, then their weighted mean per candidate.
pub fn combine_scores(
    names: &[String],
    runs: &[&ScoreRun],
    weights: &JuryWeights,
) -> Result<JuryResult> {
    if runs.is_empty() || runs.len() != names.len() {
        bail!("a jury needs at least one judge, named");
    }
    let grouped: Vec<Vec<ScoredGroup>> = runs.iter().map(|run| group_by_context(run)).collect();
    check_alike(names, |k| {
        grouped[k]
            .iter()
            .map(|(id, ids, _)| (id.as_str(), ids.as_slice()))
            .collect()
    })?;
    let scores: Vec<Vec<&[f64]>> = grouped
        .iter()
        .map(|g| g.iter().map(|(_, _, s)| s.as_slice()).collect())
        .collect();
    let spearman = spearman_matrix(&scores)?;
    let (weights, weights_note) = resolve_weights(names, weights, &spearman)?;
    let standardised: Vec<Vec<Vec<f64>>> = grouped
        .iter()
        .map(|judge| {
            let all: Vec<f64> = judge
                .iter()
                .flat_map(|(_, _, s)| s.iter().copied())
                .collect();
            let mean = all.iter().sum::<f64>() / all.len().max(1) as f64;
            let var = all.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / all.len().max(1) as f64;
            let sd = if var > 0.0 { var.sqrt() } else { 1.0 };
            judge
                .iter()
                .map(|(_, _, s)| s.iter().map(|v| (v - mean) / sd).collect())
                .collect()
        })
        .collect();
    let total: f64 = weights.iter().sum();
    let contexts = grouped[0]
        .iter()
        .enumerate()
        .map(|(index, (id, ids, _))| {
            let combined: Vec<f64> = (0..ids.len())
                .map(|c| {
                    standardised
                        .iter()
                        .zip(&weights)
                        .map(|(judge, w)| w * judge[index][c])
                        .sum::<f64>()
                        / total
                })
                .collect();
            JuryContext {
                context_id: id.clone(),
                candidate_ids: ids.clone(),
                ranks: ranks_from_scores(&combined),
                scores: combined,
                judge_scores: grouped.iter().map(|g| g[index].2.clone()).collect(),
            }
        })
        .collect();
    Ok(JuryResult {
        judges: judge_entries(names, &weights),
        contexts,
        agreement: Agreement {
            spearman,
            kappa: None,
        },
        weights_note,
    })
}

/// A scoring run's candidates by context: `(context id, candidate ids, scores)`.
/// One context's candidates as one judge scored them: the context id, the candidate ids
/// and their scores, in the run's order.
type ScoredGroup = (String, Vec<String>, Vec<f64>);

/// The judges as the result lists them: each name with its weight.
fn judge_entries(names: &[String], weights: &[f64]) -> Vec<JudgeEntry> {
    names
        .iter()
        .zip(weights)
        .map(|(name, &weight)| JudgeEntry {
            name: name.clone(),
            weight,
        })
        .collect()
}

fn group_by_context(run: &ScoreRun) -> Vec<ScoredGroup> {
    let mut groups: Vec<ScoredGroup> = Vec::new();
    for c in &run.candidates {
        match groups.last_mut() {
            Some((id, ids, scores)) if *id == c.context_id => {
                ids.push(c.candidate_id.clone());
                scores.push(c.score);
            }
            _ => groups.push((
                c.context_id.clone(),
                vec![c.candidate_id.clone()],
                vec![c.score],
            )),
        }
    }
    groups
}
