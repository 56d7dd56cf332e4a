//! Subset-of-comparisons curves (the paper's Figures 4 and 5): how the correlation
//! grows with the number of comparisons per context R, for the random, no-repeat and
//! symmetric designs, with and without debiasing, averaged over seeded draws; extended
//! with the adaptive design and with the agreement of each subset ranking with the
//! full-design ranking (the win ratio over all N(N-1) comparisons, at 0.5 or at the
//! full run's balanced threshold).
//!
//! The adaptive design is replayed: its rounds are chosen by the same
//! [`AdaptiveSelector`] `compare --design adaptive` uses, with each round's answers looked
//! up in the full matrices, and ranked as that command ranks by default (PoE; debiased:
//! PoE on the probabilities reweighted to the subset's balanced threshold).
//!
//! No model is asked anything: a subset's probabilities are looked up in the full
//! comparison matrices. The pairs are drawn exactly as `compare --design D
//! --comparisons R --seed S` draws them ([`Design::pairs`] with [`context_rng`]), so a
//! point equals what the runner would report for that design and seed. Per point and
//! seed: win ratio (the paper's ranking) at 0.5, or at the balanced threshold of the
//! subset's own comparisons (pooled over contexts; all a practitioner running only the
//! subset would have); summary-level Spearman x100 under the authors' skip rule; then
//! the mean over the prompts, and the mean and standard deviation over seeds.
//!
//! The hybrid curve (ours, where the reproduction has absolute-scoring rows): the random
//! design's subsets, the same draws as its curve, with the prompt-scoring row's scores
//! (else the first absolute row's) as experts beside the comparisons in one Product of
//! Experts ([`crate::rank::hybrid`], weight 1, one slope for every context, as `compare
//! --design random --prior-scores` ranks), compared with the full design's PoE ranking.
//!
//! R is per context. A context with fewer candidates than the largest takes
//! `min(R, most its design allows)`; the no-repeat curve stops at N(N-1)/2 of the
//! largest context.

use anyhow::{bail, ensure, Context as _, Result};
use rayon::prelude::*;
use serde::Serialize;

use super::comparative::AttributeRuns;
use super::rows::human_scores;
use crate::data::Context;
use crate::judge::pairwise::adaptive::select_adaptively;
use crate::judge::pairwise::design::context_rng;
use crate::judge::pairwise::{AdaptiveSelector, AdaptiveSettings, Design};
use crate::progress::Progress;
use crate::rank::hybrid::DEFAULT_PRIOR_WEIGHT;
use crate::rank::{
    balanced_threshold, hybrid_pooled_at_threshold, score_at_threshold, Outcome, RankMethod,
};
use crate::stats::input::is_constant;
use crate::stats::spearman;

/// The hybrid curve's scores of one draw: every context's subset `outcomes` with the
/// absolute scores `prior` as experts of weight 1, one slope for every context, at
/// threshold `tau` (as `compare --prior-scores` ranks).
fn hybrid_scores(
    matrices: &[super::comparative::PairMatrix],
    outcomes: &[Vec<Outcome>],
    prior: &[Vec<f64>],
    tau: f64,
) -> Result<Vec<Vec<f64>>> {
    let contexts: Vec<(usize, &[Outcome], &[f64])> = matrices
        .iter()
        .zip(outcomes)
        .zip(prior)
        .map(|((matrix, outcomes), prior)| (matrix.len(), outcomes.as_slice(), prior.as_slice()))
        .collect();
    Ok(hybrid_pooled_at_threshold(&contexts, DEFAULT_PRIOR_WEIGHT, tau)?.scores)
}

/// The designs of the curves, in the paper's order, then ours.
pub const DESIGNS: [Design; 4] = [
    Design::Random,
    Design::NoRepeat,
    Design::Symmetric,
    Design::Adaptive,
];

/// The hybrid curve's name (see the module header).
pub const HYBRID: &str = "hybrid";

/// Every curve's name, in the figures' order: the designs, then the hybrid curve.
pub const CURVES: [&str; 5] = ["random", "no-repeat", "symmetric", "adaptive", HYBRID];

/// Per attribute, the absolute scores (per context, per candidate) the hybrid curve uses
/// as experts; `None`: no hybrid curve for that attribute.
pub type Priors = [Option<Vec<Vec<f64>>>];

/// A curve: a design ranked its own way, or the hybrid one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Curve {
    Design(Design),
    Hybrid,
}

impl Curve {
    fn name(self) -> &'static str {
        match self {
            Curve::Design(design) => design_name(design),
            Curve::Hybrid => HYBRID,
        }
    }

    /// The design whose subsets the curve ranks.
    fn design(self) -> Design {
        match self {
            Curve::Design(design) => design,
            Curve::Hybrid => Design::Random,
        }
    }

    /// The full-design ranking it is compared with (PoE for the hybrid curve).
    fn method(self) -> RankMethod {
        match self {
            Curve::Design(design) => design_method(design),
            Curve::Hybrid => RankMethod::Poe,
        }
    }
}

/// The design's name as the paper and our CLI write it.
pub fn design_name(design: Design) -> &'static str {
    match design {
        Design::Full => "full",
        Design::Random => "random",
        Design::NoRepeat => "no-repeat",
        Design::Symmetric => "symmetric",
        Design::Adaptive => "adaptive",
    }
}

/// Settings of [`subset_curves`].
#[derive(Debug, Clone)]
pub struct SubsetOptions {
    /// Comparisons per context; even values (the symmetric design shows pairs twice).
    pub grid: Vec<usize>,
    /// Seeded draws per point (seeds 0..seeds).
    pub seeds: u64,
    /// Where to report progress (curve points done).
    pub progress: Progress,
}

/// About 24 even values from the smallest step up to N(N-1) (for 16 candidates:
/// 10, 20, ..., 240, the paper's range).
pub fn default_grid(max_candidates: usize) -> Vec<usize> {
    let full = max_candidates * max_candidates.saturating_sub(1);
    if full < 2 {
        return Vec::new();
    }
    let raw = (full as f64 / 24.0).round() as usize;
    let step = (raw + raw % 2).max(2);
    let mut grid: Vec<usize> = (1..).map(|k| k * step).take_while(|&r| r < full).collect();
    grid.push(full);
    grid
}

/// Check a grid given on the command line.
pub fn check_grid(grid: &[usize], max_candidates: usize) -> Result<()> {
    ensure!(!grid.is_empty(), "the R grid is empty");
    let full = max_candidates * max_candidates.saturating_sub(1);
    for &r in grid {
        if r == 0 || r % 2 == 1 {
            bail!(
                "R = {r} in the grid: values must be even and positive (the symmetric design \
                 compares each pair in both orders)"
            );
        }
        if r > full {
            bail!("R = {r} in the grid exceeds N(N-1) = {full} for {max_candidates} candidates");
        }
    }
    Ok(())
}

/// One point of a curve.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CurvePoint {
    /// The attribute's paper label (`COH`).
    pub column: String,
    pub design: &'static str,
    pub debiased: bool,
    /// Comparisons per context.
    pub r: usize,
    /// `c1`, `c2`, or `mean` (over prompts, seed by seed).
    pub prompt: String,
    /// Spearman x100, mean over the seeds where it is defined.
    pub mean: f64,
    /// Sample standard deviation over those seeds (0 for one seed).
    pub sd: f64,
    pub seeds: usize,
    /// Spearman x100 with the full-design ranking, mean over contexts, then seeds.
    pub vs_full_mean: f64,
    pub vs_full_sd: f64,
}

/// Summary-level Spearman with the authors' rule, as [`crate::stats::summary_level`]
/// computes it, for many draws without building items: contexts whose human scores are
/// constant are skipped, a constant prediction scores 0.
fn authors_spearman(preds: &[Vec<f64>], human: &[Vec<f64>], skip: &[bool]) -> Result<Option<f64>> {
    let mut sum = 0.0;
    let mut kept = 0usize;
    for ((pred, human), &skipped) in preds.iter().zip(human).zip(skip) {
        if skipped {
            continue;
        }
        sum += spearman(pred, human)?.unwrap_or(0.0);
        kept += 1;
    }
    Ok((kept > 0).then(|| sum / kept as f64))
}

/// Per context, a ranking method's scores over all comparisons.
type Rankings = Vec<Vec<f64>>;

/// The full-design rankings a subset is compared with: the same ranking method over
/// every comparison, at 0.5 and at the full run's balanced threshold; one pair for the
/// win ratio, one for PoE (indexed by [`method_index`]). Each subset is compared with
/// its own method's full ranking, so that the figure measures what choosing fewer
/// comparisons costs, not the difference between two ranking methods.
fn full_rankings(run: &super::comparative::PromptRun) -> Result<[[Rankings; 2]; 2]> {
    let rank = |method: RankMethod, tau: f64| -> Result<Rankings> {
        run.matrices
            .iter()
            .map(|m| score_at_threshold(method, m.len(), &m.all_outcomes(), tau))
            .collect()
    };
    Ok([
        [
            rank(RankMethod::WinRatio, 0.5)?,
            rank(RankMethod::WinRatio, run.tau)?,
        ],
        [rank(RankMethod::Poe, 0.5)?, rank(RankMethod::Poe, run.tau)?],
    ])
}

/// Where a ranking method's full rankings are in [`full_rankings`].
fn method_index(method: RankMethod) -> usize {
    usize::from(method == RankMethod::Poe)
}

/// The ranking method a design's curve uses (see [`subset_scores`]).
fn design_method(design: Design) -> RankMethod {
    match design {
        Design::Adaptive => RankMethod::Poe,
        _ => RankMethod::WinRatio,
    }
}

/// One context's outcomes under `design` with `r` comparisons and `seed`.
pub fn subset_outcomes(
    matrix: &super::comparative::PairMatrix,
    context: &Context,
    design: Design,
    r: usize,
    seed: u64,
) -> Result<Vec<Outcome>> {
    let n = matrix.len();
    let r_context = r.min(design.max_comparisons(n));
    let mut rng = context_rng(seed, &context.id);
    if design == Design::Adaptive {
        let mut selector = AdaptiveSelector::new(
            n,
            Some(r_context - r_context % 2),
            &AdaptiveSettings::default(),
            &mut rng,
        )?;
        let (outcomes, _) = select_adaptively(&mut selector, |pairs| {
            Ok(matrix.outcomes(pairs).iter().map(|o| o.p).collect())
        })?;
        return Ok(outcomes);
    }
    let pairs = design.pairs(n, Some(r_context), &mut rng)?;
    Ok(matrix.outcomes(&pairs))
}

/// The scores of one context's subset the way its design ranks by default: the win
/// ratio at `tau` (the paper), or PoE on the probabilities reweighted to `tau`
/// (adaptive).
fn subset_scores(design: Design, n: usize, outcomes: &[Outcome], tau: f64) -> Result<Vec<f64>> {
    score_at_threshold(design_method(design), n, outcomes, tau)
}

/// Mean Spearman over all contexts of `preds` with `reference` (an undefined
/// coefficient, from a constant ranking, counts 0).
fn mean_agreement(preds: &[Vec<f64>], reference: &[Vec<f64>]) -> Result<Option<f64>> {
    if preds.is_empty() {
        return Ok(None);
    }
    let mut sum = 0.0;
    for (pred, reference) in preds.iter().zip(reference) {
        sum += spearman(pred, reference)?.unwrap_or(0.0);
    }
    Ok(Some(sum / preds.len() as f64))
}

/// One draw's Spearman x100 with the humans and with the full design.
type Draw = (Option<f64>, Option<f64>);

/// Spearman x100 of one draw (one prompt, design, R and seed), plain and debiased:
/// `[(with humans, with the full design); 2]`.
#[allow(clippy::too_many_arguments)]
fn draw_point(
    run: &super::comparative::PromptRun,
    full: &[[Rankings; 2]; 2],
    contexts: &[Context],
    human: &[Vec<f64>],
    skip: &[bool],
    curve: Curve,
    prior: Option<&Vec<Vec<f64>>>,
    r: usize,
    seed: u64,
) -> Result<[Draw; 2]> {
    let design = curve.design();
    let mut outcomes = Vec::with_capacity(contexts.len());
    for (matrix, context) in run.matrices.iter().zip(contexts) {
        outcomes.push(subset_outcomes(matrix, context, design, r, seed)?);
    }
    let all_p: Vec<f64> = outcomes.iter().flatten().map(|o| o.p).collect();
    let mut values = [(None, None), (None, None)];
    for ((slot, tau), full) in values
        .iter_mut()
        .zip([0.5, balanced_threshold(&all_p)])
        .zip(&full[method_index(curve.method())])
    {
        let preds: Vec<Vec<f64>> = match (curve, prior) {
            (Curve::Hybrid, Some(prior)) => hybrid_scores(&run.matrices, &outcomes, prior, tau)?,
            (Curve::Hybrid, None) => bail!("the hybrid curve needs absolute scores"),
            (Curve::Design(design), _) => outcomes
                .iter()
                .zip(&run.matrices)
                .map(|(o, matrix)| subset_scores(design, matrix.len(), o, tau))
                .collect::<Result<_>>()?,
        };
        slot.0 = authors_spearman(&preds, human, skip)?.map(|s| 100.0 * s);
        slot.1 = mean_agreement(&preds, full)?.map(|s| 100.0 * s);
    }
    Ok(values)
}

/// Mean and sample standard deviation of the defined values.
fn mean_sd(values: &[Option<f64>]) -> Option<(f64, f64, usize)> {
    let defined: Vec<f64> = values.iter().flatten().copied().collect();
    if defined.is_empty() {
        return None;
    }
    let k = defined.len();
    let mean = defined.iter().sum::<f64>() / k as f64;
    let sd = if k > 1 {
        (defined.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (k - 1) as f64).sqrt()
    } else {
        0.0
    };
    Some((mean, sd, k))
}

/// Every curve point of every attribute: per prompt and averaged over prompts; the
/// hybrid curve for the attributes with absolute scores in `priors` (one entry per
/// attribute, or empty for none).
pub fn subset_curves(
    runs: &[AttributeRuns],
    contexts: &[Context],
    options: &SubsetOptions,
    priors: &Priors,
) -> Result<Vec<CurvePoint>> {
    ensure!(options.seeds >= 1, "the curves need at least one seed");
    let max_candidates = contexts
        .iter()
        .map(|c| c.candidates.len())
        .max()
        .unwrap_or(0);
    check_grid(&options.grid, max_candidates)?;
    // One task per (attribute, design, R): all prompts and seeds.
    let mut tasks = Vec::new();
    let fulls: Vec<Vec<[[Rankings; 2]; 2]>> = runs
        .iter()
        .map(|runs| runs.prompts.iter().map(full_rankings).collect())
        .collect::<Result<_>>()?;
    let prior_of = |a: usize| priors.get(a).and_then(Option::as_ref);
    for a in 0..runs.len() {
        let mut curves: Vec<Curve> = DESIGNS.into_iter().map(Curve::Design).collect();
        if prior_of(a).is_some() {
            curves.push(Curve::Hybrid);
        }
        for curve in curves {
            for &r in &options.grid {
                if r <= curve.design().max_comparisons(max_candidates) {
                    tasks.push((a, curve, r));
                }
            }
        }
    }
    let humans = runs
        .iter()
        .map(|runs| human_scores(contexts, &runs.column))
        .collect::<Result<Vec<_>>>()?;
    let skips: Vec<Vec<bool>> = humans
        .iter()
        .map(|human| human.iter().map(|h| is_constant(h)).collect())
        .collect();
    let bar = options.progress.task(tasks.len() as u64, "curve points");
    let results = tasks
        .par_iter()
        .map(|&(a, curve, r)| {
            // values[prompt][debiased][seed]
            let mut values = Vec::with_capacity(runs[a].prompts.len());
            for (run, full) in runs[a].prompts.iter().zip(&fulls[a]) {
                let mut per_debias = [Vec::new(), Vec::new()];
                for seed in 0..options.seeds {
                    let point = draw_point(
                        run,
                        full,
                        contexts,
                        &humans[a],
                        &skips[a],
                        curve,
                        prior_of(a),
                        r,
                        seed,
                    )?;
                    per_debias[0].push(point[0]);
                    per_debias[1].push(point[1]);
                }
                values.push(per_debias);
            }
            bar.advance(1);
            Ok(values)
        })
        .collect::<Result<Vec<_>>>();
    drop(bar);
    let results = results?;

    let mut points = Vec::new();
    for (&(a, curve, r), values) in tasks.iter().zip(results) {
        let runs = &runs[a];
        for (d, debiased) in [false, true].into_iter().enumerate() {
            let mut push = |prompt: String, seeds: &[Draw]| {
                let human: Vec<Option<f64>> = seeds.iter().map(|v| v.0).collect();
                let full: Vec<Option<f64>> = seeds.iter().map(|v| v.1).collect();
                if let Some((mean, sd, seeds)) = mean_sd(&human) {
                    let (vs_full_mean, vs_full_sd) =
                        mean_sd(&full).map_or((f64::NAN, f64::NAN), |(m, s, _)| (m, s));
                    points.push(CurvePoint {
                        column: runs.column.label.clone(),
                        design: curve.name(),
                        debiased,
                        r,
                        prompt,
                        mean,
                        sd,
                        seeds,
                        vs_full_mean,
                        vs_full_sd,
                    });
                }
            };
            for (run, per_debias) in runs.prompts.iter().zip(&values) {
                push(run.prompt.clone(), &per_debias[d]);
            }
            let average = |pick: fn(&Draw) -> Option<f64>, seed: usize| {
                let defined: Vec<f64> = values.iter().filter_map(|v| pick(&v[d][seed])).collect();
                (!defined.is_empty()).then(|| defined.iter().sum::<f64>() / defined.len() as f64)
            };
            let prompt_mean: Vec<Draw> = (0..options.seeds as usize)
                .map(|seed| (average(|v| v.0, seed), average(|v| v.1, seed)))
                .collect();
            push("mean".to_string(), &prompt_mean);
        }
    }
    Ok(points)
}

/// One row of the budget table: a design and ranking method at a fixed budget, with
/// bootstrap intervals over contexts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BudgetRow {
    pub column: String,
    pub design: &'static str,
    pub rank: &'static str,
    /// Comparisons per context.
    pub r: usize,
    /// Spearman with the full-design ranking, mean over contexts (each context: mean over
    /// prompts and seeds), with its 95% bootstrap interval over contexts.
    pub vs_full: (f64, f64, f64),
    /// The same with the human scores (contexts with constant human scores left out).
    pub vs_human: Option<(f64, f64, f64)>,
}

/// The designs and ranking methods of the budget table: the paper's designs with the
/// win ratio and with PoE (so that selection and ranking are told apart), adaptive with
/// PoE (its default).
pub const BUDGET_METHODS: [(Design, RankMethod); 7] = [
    (Design::Random, RankMethod::WinRatio),
    (Design::Random, RankMethod::Poe),
    (Design::NoRepeat, RankMethod::WinRatio),
    (Design::NoRepeat, RankMethod::Poe),
    (Design::Symmetric, RankMethod::WinRatio),
    (Design::Symmetric, RankMethod::Poe),
    (Design::Adaptive, RankMethod::Poe),
];

/// The budget of the table: a quarter of the comparisons (issue 19's target point).
pub const BUDGET_FRACTION: f64 = 0.25;
/// Bootstrap resamples of the budget table's intervals.
pub const BUDGET_RESAMPLES: usize = 1000;

/// Even budget nearest to `fraction` of N(N-1) for the largest context.
pub fn budget_at(fraction: f64, max_candidates: usize) -> usize {
    let full = max_candidates * max_candidates.saturating_sub(1);
    let r = (fraction * full as f64).round() as usize;
    (r + r % 2).clamp(2.min(full), full)
}

/// Mean of `values` and its percentile bootstrap interval (`resamples` resamples of the
/// values, seed 0, 95%).
fn bootstrap_mean(values: &[f64], resamples: usize) -> Option<(f64, f64, f64)> {
    use rand::{Rng, SeedableRng};
    if values.is_empty() {
        return None;
    }
    let mean = |v: &mut dyn Iterator<Item = f64>| {
        let (sum, count) = v.fold((0.0, 0usize), |(s, c), x| (s + x, c + 1));
        sum / count as f64
    };
    let centre = mean(&mut values.iter().copied());
    let mut rng = rand::rngs::StdRng::seed_from_u64(0);
    let mut means: Vec<f64> = (0..resamples)
        .map(|_| mean(&mut (0..values.len()).map(|_| values[rng.gen_range(0..values.len())])))
        .collect();
    means.sort_by(f64::total_cmp);
    let at = |q: f64| means[((q * (resamples - 1) as f64).round() as usize).min(resamples - 1)];
    Some((centre, at(0.025), at(0.975)))
}

/// The budget table at `fraction` of the comparisons, debiased as `--debias threshold`
/// does (threshold balanced over the subset's own comparisons, pooled over contexts),
/// each ranking compared with the same method's debiased full-design ranking; for the
/// attributes with absolute scores in `priors`, also the hybrid row (the random design's
/// subsets with the absolute scores as experts, compared with the full design's PoE).
pub fn budget_table(
    runs: &[AttributeRuns],
    contexts: &[Context],
    fraction: f64,
    seeds: u64,
    resamples: usize,
    priors: &Priors,
) -> Result<Vec<BudgetRow>> {
    ensure!(
        seeds >= 1 && resamples >= 1,
        "the budget table needs seeds and resamples"
    );
    let max_candidates = contexts
        .iter()
        .map(|c| c.candidates.len())
        .max()
        .unwrap_or(0);
    let r = budget_at(fraction, max_candidates);
    let mut rows = Vec::new();
    for (a, runs) in runs.iter().enumerate() {
        let prior = priors.get(a).and_then(Option::as_ref);
        let mut rankers: Vec<(Curve, RankMethod)> = BUDGET_METHODS
            .iter()
            .map(|&(design, method)| (Curve::Design(design), method))
            .collect();
        if prior.is_some() {
            rankers.push((Curve::Hybrid, RankMethod::Poe));
        }
        let human = human_scores(contexts, &runs.column)?;
        let fulls: Vec<[[Rankings; 2]; 2]> = runs
            .prompts
            .iter()
            .map(full_rankings)
            .collect::<Result<_>>()?;
        let per_method = rankers
            .par_iter()
            .map(|&(curve, method)| -> Result<BudgetRow> {
                let design = curve.design();
                // Per context: sums over prompts and seeds.
                let mut full_sum = vec![0.0; contexts.len()];
                let mut human_sum = vec![0.0; contexts.len()];
                let draws = (runs.prompts.len() as u64 * seeds) as f64;
                for (run, full) in runs.prompts.iter().zip(&fulls) {
                    let reference = &full[method_index(method)][1];
                    for seed in 0..seeds {
                        let outcomes = run
                            .matrices
                            .iter()
                            .zip(contexts)
                            .map(|(matrix, context)| {
                                subset_outcomes(matrix, context, design, r, seed)
                            })
                            .collect::<Result<Vec<_>>>()?;
                        let all_p: Vec<f64> = outcomes.iter().flatten().map(|o| o.p).collect();
                        let tau = balanced_threshold(&all_p);
                        let all_scores: Vec<Vec<f64>> = match (curve, prior) {
                            (Curve::Hybrid, Some(prior)) => {
                                hybrid_scores(&run.matrices, &outcomes, prior, tau)?
                            }
                            _ => run
                                .matrices
                                .iter()
                                .zip(&outcomes)
                                .map(|(matrix, outcomes)| {
                                    score_at_threshold(method, matrix.len(), outcomes, tau)
                                })
                                .collect::<Result<_>>()?,
                        };
                        for (k, scores) in all_scores.iter().enumerate() {
                            full_sum[k] += spearman(scores, &reference[k])?.unwrap_or(0.0);
                            human_sum[k] += spearman(scores, &human[k])?.unwrap_or(0.0);
                        }
                    }
                }
                let vs_full: Vec<f64> = full_sum.iter().map(|s| s / draws).collect();
                let vs_human: Vec<f64> = human_sum
                    .iter()
                    .zip(&human)
                    .filter(|(_, h)| !is_constant(h))
                    .map(|(s, _)| s / draws)
                    .collect();
                Ok(BudgetRow {
                    column: runs.column.label.clone(),
                    design: curve.name(),
                    rank: match curve {
                        Curve::Hybrid => "PoE with absolute scores",
                        Curve::Design(_) => rank_name(method),
                    },
                    r,
                    vs_full: bootstrap_mean(&vs_full, resamples)
                        .context("no contexts for the budget table")?,
                    vs_human: bootstrap_mean(&vs_human, resamples),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        rows.extend(per_method);
    }
    Ok(rows)
}

fn rank_name(method: RankMethod) -> &'static str {
    match method {
        RankMethod::WinRatio => "win ratio",
        RankMethod::Soft => "soft win ratio",
        RankMethod::BradleyTerry => "Bradley-Terry",
        RankMethod::Poe => "PoE",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{summary_level, Item, SkipRule};

    #[test]
    fn default_grids_are_even_and_end_at_the_full_set() {
        let grid = default_grid(16);
        assert_eq!(grid.first(), Some(&10));
        assert_eq!(grid.last(), Some(&240));
        assert_eq!(grid.len(), 24);
        assert_eq!(default_grid(6), (1..=15).map(|k| 2 * k).collect::<Vec<_>>());
        let webnlg = default_grid(9);
        assert_eq!((webnlg[0], *webnlg.last().unwrap()), (4, 72));
        for n in 2..20 {
            let grid = default_grid(n);
            assert!(grid.iter().all(|r| r % 2 == 0), "{n}: {grid:?}");
            assert!(grid.windows(2).all(|w| w[0] < w[1]), "{n}: {grid:?}");
            check_grid(&grid, n).unwrap();
        }
        assert!(default_grid(1).is_empty());
    }

    #[test]
    fn bad_grids_are_explained() {
        let error = check_grid(&[10, 15], 16).unwrap_err().to_string();
        assert!(
            error.contains("R = 15") && error.contains("even"),
            "{error}"
        );
        let error = check_grid(&[250], 16).unwrap_err().to_string();
        assert!(error.contains("N(N-1) = 240"), "{error}");
        assert!(check_grid(&[], 16).is_err());
        assert!(check_grid(&[0], 16).is_err());
    }

    #[test]
    fn fast_summary_spearman_matches_the_stats_module() {
        let human = vec![
            vec![1.0, 3.0, 2.0, 5.0],
            vec![2.0, 2.0, 2.0, 2.0],
            vec![4.0, 1.0, 1.0, 3.0],
        ];
        let preds = vec![
            vec![0.5, 0.25, 0.75, 1.0],
            vec![0.1, 0.2, 0.3, 0.4],
            vec![0.5, 0.5, 0.5, 0.5],
        ];
        let skip: Vec<bool> = human.iter().map(|h| is_constant(h)).collect();
        let fast = authors_spearman(&preds, &human, &skip).unwrap().unwrap();
        let items: Vec<Item> = (0..3)
            .flat_map(|c| {
                let (preds, human) = (&preds, &human);
                (0..4).map(move |k| Item {
                    group: format!("g{c}"),
                    system: format!("s{k}"),
                    pred: preds[c][k],
                    human: human[c][k],
                })
            })
            .collect();
        let reference = summary_level(&items, SkipRule::Authors).unwrap();
        assert_eq!(Some(fast), reference.correlations.spearman);
        assert_eq!(reference.n_groups_skipped, 1);
    }

    #[test]
    fn mean_and_sample_sd_skip_undefined_seeds() {
        let (mean, sd, k) = mean_sd(&[Some(1.0), None, Some(3.0)]).unwrap();
        assert_eq!((mean, k), (2.0, 2));
        assert!((sd - 2f64.sqrt()).abs() < 1e-12);
        assert_eq!(mean_sd(&[None]), None);
        assert_eq!(mean_sd(&[Some(4.0)]), Some((4.0, 0.0, 1)));
    }

    fn logistic(x: f64) -> f64 {
        1.0 / (1.0 + (-x).exp())
    }

    /// A context of `n` candidates and its full matrix from true scores and a bias.
    fn judged(n: usize, id: &str) -> (Context, super::super::comparative::PairMatrix) {
        let truth: Vec<f64> = (0..n).map(|k| ((k * 7 % n) as f64) * 0.4).collect();
        let outcomes: Vec<Outcome> = (0..n)
            .flat_map(|i| (0..n).filter(move |&j| j != i).map(move |j| (i, j)))
            .map(|(i, j)| Outcome::new(i, j, logistic(truth[i] - truth[j] + 0.6)))
            .collect();
        let context = Context {
            id: id.to_string(),
            text: String::new(),
            candidates: Vec::new(),
        };
        let matrix = super::super::comparative::PairMatrix::from_outcomes(n, &outcomes).unwrap();
        (context, matrix)
    }

    #[test]
    fn replayed_adaptive_subsets_keep_the_budget_and_both_orders() {
        let (context, matrix) = judged(16, "doc");
        for r in [32, 60, 240] {
            let outcomes = subset_outcomes(&matrix, &context, Design::Adaptive, r, 0).unwrap();
            assert_eq!(outcomes.len(), r);
            let pairs: std::collections::HashSet<(usize, usize)> =
                outcomes.iter().map(|o| (o.first, o.second)).collect();
            assert!(pairs.iter().all(|&(i, j)| pairs.contains(&(j, i))));
            // Noise-free, biased judge: PoE on the subset orders the candidates as the
            // full design does.
            let scores = subset_scores(Design::Adaptive, 16, &outcomes, 0.5).unwrap();
            let full = crate::rank::win_ratio(16, &matrix.all_outcomes(), 0.5);
            let rho = spearman(&scores, &full).unwrap().unwrap();
            assert!(rho > 0.99, "R = {r}: {rho}");
        }
    }

    #[test]
    fn budgets_and_bootstrap_intervals() {
        assert_eq!(budget_at(0.25, 16), 60);
        assert_eq!(budget_at(0.25, 5), 6);
        assert_eq!(budget_at(1.0, 4), 12);
        let (mean, low, high) = bootstrap_mean(&[0.2, 0.4, 0.9, 0.5], 1000).unwrap();
        assert!((mean - 0.5).abs() < 1e-12);
        assert!(low < mean && mean < high && low >= 0.2 && high <= 0.9);
        assert_eq!(bootstrap_mean(&[0.3], 100), Some((0.3, 0.3, 0.3)));
        assert_eq!(bootstrap_mean(&[], 100), None);
    }
}
