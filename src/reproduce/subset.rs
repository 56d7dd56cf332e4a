//! Subset-of-comparisons curves (the paper's Figures 4 and 5): how the correlation
//! grows with the number of comparisons per context R, for the random, no-repeat and
//! symmetric designs, with and without debiasing, averaged over seeded draws.
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
//! R is per context. A context with fewer candidates than the largest takes
//! `min(R, most its design allows)`; the no-repeat curve stops at N(N-1)/2 of the
//! largest context.

use anyhow::{bail, ensure, Result};
use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;
use serde::Serialize;

use super::comparative::AttributeRuns;
use super::rows::human_scores;
use crate::data::Context;
use crate::judge::pairwise::design::context_rng;
use crate::judge::pairwise::Design;
use crate::rank::{balanced_threshold, win_ratio};
use crate::stats::input::is_constant;
use crate::stats::spearman;

/// The designs of the curves, in the paper's order.
pub const DESIGNS: [Design; 3] = [Design::Random, Design::NoRepeat, Design::Symmetric];

/// The design's name as the paper and our CLI write it.
pub fn design_name(design: Design) -> &'static str {
    match design {
        Design::Full => "full",
        Design::Random => "random",
        Design::NoRepeat => "no-repeat",
        Design::Symmetric => "symmetric",
    }
}

/// Settings of [`subset_curves`].
#[derive(Debug, Clone)]
pub struct SubsetOptions {
    /// Comparisons per context; even values (the symmetric design shows pairs twice).
    pub grid: Vec<usize>,
    /// Seeded draws per point (seeds 0..seeds).
    pub seeds: u64,
    pub progress: bool,
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

/// Spearman x100 of one draw (one prompt, design, R and seed), plain and debiased.
fn draw_point(
    run: &super::comparative::PromptRun,
    contexts: &[Context],
    human: &[Vec<f64>],
    skip: &[bool],
    design: Design,
    r: usize,
    seed: u64,
) -> Result<[Option<f64>; 2]> {
    let mut outcomes = Vec::with_capacity(contexts.len());
    for (matrix, context) in run.matrices.iter().zip(contexts) {
        let n = matrix.len();
        let r_context = r.min(design.max_comparisons(n));
        let pairs = design.pairs(n, Some(r_context), &mut context_rng(seed, &context.id))?;
        outcomes.push(matrix.outcomes(&pairs));
    }
    let all_p: Vec<f64> = outcomes.iter().flatten().map(|o| o.p).collect();
    let mut values = [None, None];
    for (slot, tau) in values.iter_mut().zip([0.5, balanced_threshold(&all_p)]) {
        let preds: Vec<Vec<f64>> = outcomes
            .iter()
            .zip(&run.matrices)
            .map(|(o, matrix)| win_ratio(matrix.len(), o, tau))
            .collect();
        *slot = authors_spearman(&preds, human, skip)?.map(|s| 100.0 * s);
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

/// Every curve point of every attribute: per prompt and averaged over prompts.
pub fn subset_curves(
    runs: &[AttributeRuns],
    contexts: &[Context],
    options: &SubsetOptions,
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
    for a in 0..runs.len() {
        for design in DESIGNS {
            for &r in &options.grid {
                if r <= design.max_comparisons(max_candidates) {
                    tasks.push((a, design, r));
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
    let bar = progress_bar(tasks.len(), options.progress);
    let results = tasks
        .par_iter()
        .map(|&(a, design, r)| {
            // values[prompt][debiased][seed]
            let mut values = Vec::with_capacity(runs[a].prompts.len());
            for run in &runs[a].prompts {
                let mut per_debias = [Vec::new(), Vec::new()];
                for seed in 0..options.seeds {
                    let point = draw_point(run, contexts, &humans[a], &skips[a], design, r, seed)?;
                    per_debias[0].push(point[0]);
                    per_debias[1].push(point[1]);
                }
                values.push(per_debias);
            }
            bar.inc(1);
            Ok(values)
        })
        .collect::<Result<Vec<_>>>();
    bar.finish_and_clear();
    let results = results?;

    let mut points = Vec::new();
    for (&(a, design, r), values) in tasks.iter().zip(results) {
        let runs = &runs[a];
        for (d, debiased) in [false, true].into_iter().enumerate() {
            let mut push = |prompt: String, seeds: &[Option<f64>]| {
                if let Some((mean, sd, seeds)) = mean_sd(seeds) {
                    points.push(CurvePoint {
                        column: runs.column.label.clone(),
                        design: design_name(design),
                        debiased,
                        r,
                        prompt,
                        mean,
                        sd,
                        seeds,
                    });
                }
            };
            for (run, per_debias) in runs.prompts.iter().zip(&values) {
                push(run.prompt.clone(), &per_debias[d]);
            }
            let prompt_mean: Vec<Option<f64>> = (0..options.seeds as usize)
                .map(|seed| {
                    let defined: Vec<f64> = values.iter().filter_map(|v| v[d][seed]).collect();
                    (!defined.is_empty())
                        .then(|| defined.iter().sum::<f64>() / defined.len() as f64)
                })
                .collect();
            push("mean".to_string(), &prompt_mean);
        }
    }
    Ok(points)
}

fn progress_bar(total: usize, visible: bool) -> ProgressBar {
    if !visible {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total as u64);
    if let Ok(style) = ProgressStyle::with_template(
        "subset curves {elapsed_precise} [{wide_bar}] {pos}/{len} points, ETA {eta}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
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
}
