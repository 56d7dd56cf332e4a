//! Table rows: the hook every method plugs into, and how a row becomes a table cell.
//!
//! A [`RowSource`] scores the candidates of every context for one attribute, once per
//! prompt, and returns one [`MethodRow`] per variant it offers (comparative assessment
//! gives win ratio, soft win ratio and Bradley-Terry, each plain and debiased; an
//! absolute-scoring source would give prompt scoring or G-Eval). The reproduction then
//! meta-evaluates every row the same way ([`evaluate_row`]): summary level (a
//! correlation per context, averaged, under the authors' skip rule), computed per prompt
//! and averaged over the prompts, as the authors average their per-prompt results; a
//! percentile bootstrap over contexts gives an interval for the prompt-averaged Spearman.

use anyhow::{bail, ensure, Result};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::experiment::{Column, Experiment};
use crate::data::Context;
use crate::engine::{ResultCache, Scorer};
use crate::progress::Progress;
use crate::stats::{
    percentile_interval, summary_level, Coefficient, Correlations, Interval, Item, SkipRule,
};

/// One method's predicted scores under one prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptScores {
    /// The prompt's name (`c1`, `c2`).
    pub prompt: String,
    /// `scores[c][k]`: candidate `k` of context `c`, in input order; higher is better.
    pub scores: Vec<Vec<f64>>,
}

/// One row of a correlation table, before meta-evaluation.
#[derive(Debug, Clone, PartialEq)]
pub struct MethodRow {
    /// The method family (`comparative`; later `absolute`, `G-Eval`).
    pub family: String,
    /// The variant (`win ratio`, `soft win ratio`, `Bradley-Terry`).
    pub method: String,
    pub debiased: bool,
    /// Whether the paper reports this row (the others are extensions).
    pub in_paper: bool,
    pub per_prompt: Vec<PromptScores>,
}

/// What a row source is asked to score: one attribute of an experiment.
pub struct AttributeTask<'a> {
    pub experiment: Experiment,
    pub column: &'a Column,
    pub contexts: &'a [Context],
    /// The pairwise prompts of the run (`c1`, `c2`). Other sources run their own prompt
    /// variants and name them in their [`PromptScores`].
    pub prompts: &'a [String],
    pub cache: Option<&'a ResultCache>,
    pub progress: Progress,
}

/// A source's rows for one attribute, with its model-call accounting.
#[derive(Debug, Clone, Default)]
pub struct SourceRows {
    pub rows: Vec<MethodRow>,
    /// Model results computed in this run / found in the result cache.
    pub computed: usize,
    pub cached: usize,
}

/// A method that contributes rows to the correlation tables.
///
/// Implementations score through the [`Scorer`] (and cache their results in the
/// [`ResultCache`] under their own template ids, so that a rerun computes nothing).
pub trait RowSource {
    /// A short name for progress messages.
    fn name(&self) -> &str;

    /// The rows for one attribute.
    fn rows(&mut self, scorer: &mut dyn Scorer, task: &AttributeTask) -> Result<SourceRows>;
}

/// The meta-evaluation of one prompt's scores.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PromptCell {
    pub prompt: String,
    /// Summary level, authors' skip rule.
    pub correlations: Correlations,
    pub contexts_kept: usize,
    pub contexts_skipped: usize,
}

/// One cell of a correlation table: a row's correlation for one attribute.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CorrelationCell {
    pub per_prompt: Vec<PromptCell>,
    /// The mean over prompts of each coefficient (over the prompts where it is defined).
    pub mean: Correlations,
    /// Percentile bootstrap interval of the prompt-averaged Spearman (contexts
    /// resampled), when asked for and defined.
    pub spearman_interval: Option<Interval>,
}

/// Bootstrap settings of [`evaluate_row`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BootstrapSettings {
    pub resamples: usize,
    pub confidence: f64,
    pub seed: u64,
}

/// Human scores of `column.field` for every context, in input order.
pub fn human_scores(contexts: &[Context], column: &Column) -> Result<Vec<Vec<f64>>> {
    contexts
        .iter()
        .map(|context| match context.human_scores(&column.field) {
            Some(scores) => Ok(scores),
            None => bail!(
                "context `{}`: not every candidate has the human score `{}` ({})",
                context.id,
                column.field,
                column.label
            ),
        })
        .collect()
}

/// The summary-level items of one context: its candidates' predictions and human scores.
fn context_items(context: &Context, pred: &[f64], human: &[f64]) -> Vec<Item> {
    context
        .candidates
        .iter()
        .zip(pred.iter().zip(human))
        .map(|(candidate, (&pred, &human))| Item {
            group: context.id.clone(),
            system: candidate
                .system_id
                .clone()
                .unwrap_or_else(|| candidate.id.clone()),
            pred,
            human,
        })
        .collect()
}

/// Summary-level Spearman of one prompt's scores, context by context (`None` for a
/// context the skip rule leaves out), and the whole prompt's cell.
fn evaluate_prompt(
    contexts: &[Context],
    human: &[Vec<f64>],
    scores: &PromptScores,
) -> Result<(PromptCell, Vec<Option<f64>>)> {
    ensure!(
        scores.scores.len() == contexts.len(),
        "prompt {}: scores for {} contexts, expected {}",
        scores.prompt,
        scores.scores.len(),
        contexts.len()
    );
    let mut all_items = Vec::new();
    let mut per_context = Vec::with_capacity(contexts.len());
    for ((context, pred), human) in contexts.iter().zip(&scores.scores).zip(human) {
        ensure!(
            pred.len() == context.candidates.len(),
            "prompt {}, context `{}`: {} scores for {} candidates",
            scores.prompt,
            context.id,
            pred.len(),
            context.candidates.len()
        );
        let items = context_items(context, pred, human);
        let single = summary_level(&items, SkipRule::Authors)?;
        per_context.push(single.correlations.spearman);
        all_items.extend(items);
    }
    let level = summary_level(&all_items, SkipRule::Authors)?;
    let cell = PromptCell {
        prompt: scores.prompt.clone(),
        correlations: level.correlations,
        contexts_kept: level.n_groups,
        contexts_skipped: level.n_groups_skipped,
    };
    Ok((cell, per_context))
}

/// Mean of the defined values, `None` when there are none.
fn mean_defined(values: impl IntoIterator<Item = Option<f64>>) -> Option<f64> {
    let (sum, count) = values
        .into_iter()
        .flatten()
        .fold((0.0, 0usize), |(s, k), v| (s + v, k + 1));
    (count > 0).then(|| sum / count as f64)
}

/// Meta-evaluate a row for one attribute: per prompt, then the mean over prompts.
pub fn evaluate_row(
    row: &MethodRow,
    contexts: &[Context],
    human: &[Vec<f64>],
    bootstrap: Option<BootstrapSettings>,
) -> Result<CorrelationCell> {
    ensure!(
        !row.per_prompt.is_empty(),
        "row `{} {}` has no prompts",
        row.family,
        row.method
    );
    let mut per_prompt = Vec::new();
    let mut per_context = Vec::new();
    for scores in &row.per_prompt {
        let (cell, values) = evaluate_prompt(contexts, human, scores)?;
        per_prompt.push(cell);
        per_context.push(values);
    }
    let mean = Correlations::from_fn(|coefficient: Coefficient| {
        mean_defined(per_prompt.iter().map(|p| p.correlations.get(coefficient)))
    });
    let spearman_interval = match bootstrap {
        Some(settings) => prompt_mean_interval(&per_context, settings)?,
        None => None,
    };
    Ok(CorrelationCell {
        per_prompt,
        mean,
        spearman_interval,
    })
}

/// Percentile interval of the prompt-averaged summary-level Spearman when the contexts
/// are resampled with replacement (the same draw for every prompt; a context drawn twice
/// counts twice, as in [`crate::stats::bootstrap_ci`]).
fn prompt_mean_interval(
    per_context: &[Vec<Option<f64>>],
    settings: BootstrapSettings,
) -> Result<Option<Interval>> {
    ensure!(
        settings.resamples >= 1,
        "bootstrap needs at least 1 resample"
    );
    let n = per_context.first().map_or(0, Vec::len);
    if n == 0 {
        return Ok(None);
    }
    let mut rng = StdRng::seed_from_u64(settings.seed);
    let mut replicates = Vec::with_capacity(settings.resamples);
    let mut draws = vec![0usize; n];
    for _ in 0..settings.resamples {
        for draw in draws.iter_mut() {
            *draw = rng.gen_range(0..n);
        }
        let value = mean_defined(
            per_context
                .iter()
                .map(|values| mean_defined(draws.iter().map(|&d| values[d]))),
        );
        replicates.extend(value);
    }
    if replicates.is_empty() {
        return Ok(None);
    }
    Ok(Some(percentile_interval(&replicates, settings.confidence)?))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::data::Candidate;

    fn context(id: &str, n: usize) -> Context {
        Context {
            id: id.to_string(),
            text: String::new(),
            candidates: (0..n)
                .map(|k| Candidate {
                    id: format!("s{k}"),
                    text: String::new(),
                    reference: None,
                    scores: BTreeMap::new(),
                    system_id: None,
                    metadata: Default::default(),
                    source: None,
                })
                .collect(),
        }
    }

    fn row(per_prompt: Vec<(&str, Vec<Vec<f64>>)>) -> MethodRow {
        MethodRow {
            family: "test".into(),
            method: "m".into(),
            debiased: false,
            in_paper: false,
            per_prompt: per_prompt
                .into_iter()
                .map(|(prompt, scores)| PromptScores {
                    prompt: prompt.into(),
                    scores,
                })
                .collect(),
        }
    }

    #[test]
    fn prompts_are_evaluated_separately_then_averaged() {
        let contexts = [context("a", 4), context("b", 4), context("c", 4)];
        let human = vec![
            vec![1.0, 2.0, 3.0, 4.0],
            vec![4.0, 3.0, 2.0, 1.0],
            vec![2.0, 2.0, 2.0, 2.0], // constant: skipped by the authors' rule
        ];
        // Prompt 1: perfect, perfect, anything -> 1.0.
        // Prompt 2: reversed in a (-1), constant in b (scores 0) -> -0.5.
        let row = row(vec![
            (
                "c1",
                vec![
                    vec![0.1, 0.2, 0.3, 0.4],
                    vec![0.9, 0.5, 0.4, 0.1],
                    vec![0.0, 1.0, 0.0, 1.0],
                ],
            ),
            (
                "c2",
                vec![
                    vec![0.4, 0.3, 0.2, 0.1],
                    vec![0.5, 0.5, 0.5, 0.5],
                    vec![0.3, 0.2, 0.1, 0.0],
                ],
            ),
        ]);
        let cell = evaluate_row(&row, &contexts, &human, None).unwrap();
        let close = |got: Option<f64>, want: f64| (got.unwrap() - want).abs() < 1e-12;
        assert!(close(cell.per_prompt[0].correlations.spearman, 1.0));
        assert!(close(cell.per_prompt[1].correlations.spearman, -0.5));
        assert_eq!(
            (
                cell.per_prompt[1].contexts_kept,
                cell.per_prompt[1].contexts_skipped
            ),
            (2, 1)
        );
        assert!(close(cell.mean.spearman, 0.25));
        assert_eq!(cell.spearman_interval, None);
    }

    #[test]
    fn bootstrap_interval_brackets_the_estimate_and_is_reproducible() {
        let contexts: Vec<Context> = (0..12).map(|k| context(&format!("d{k}"), 5)).collect();
        let human: Vec<Vec<f64>> = (0..12).map(|_| vec![1.0, 2.0, 3.0, 4.0, 5.0]).collect();
        // Per-context Spearman varies: some perfect, some swapped pairs.
        let scores: Vec<Vec<f64>> = (0..12)
            .map(|k| match k % 3 {
                0 => vec![1.0, 2.0, 3.0, 4.0, 5.0],
                1 => vec![2.0, 1.0, 3.0, 4.0, 5.0],
                _ => vec![5.0, 4.0, 3.0, 1.0, 2.0],
            })
            .collect();
        let row = row(vec![("c1", scores)]);
        let settings = BootstrapSettings {
            resamples: 400,
            confidence: 0.9,
            seed: 3,
        };
        let cell = evaluate_row(&row, &contexts, &human, Some(settings)).unwrap();
        let interval = cell.spearman_interval.unwrap();
        let estimate = cell.mean.spearman.unwrap();
        assert!(
            interval.lower < estimate && estimate < interval.upper,
            "{interval:?}"
        );
        // Bounded by the smallest and largest per-context value (-0.9 and 1.0).
        assert!(
            interval.lower >= -0.9 && interval.upper <= 1.0,
            "{interval:?}"
        );
        let again = evaluate_row(&row, &contexts, &human, Some(settings)).unwrap();
        assert_eq!(again.spearman_interval, cell.spearman_interval);
    }

    #[test]
    fn mismatched_scores_are_errors_naming_the_context() {
        let contexts = [context("a", 3)];
        let human = vec![vec![1.0, 2.0, 3.0]];
        let bad = row(vec![("c1", vec![vec![0.1, 0.2]])]);
        let error = evaluate_row(&bad, &contexts, &human, None).unwrap_err();
        assert!(error.to_string().contains("context `a`"), "{error}");
        let missing = Column {
            label: "COH".into(),
            attribute: crate::judge::Attribute::named("coherence").unwrap(),
            field: "coherence".into(),
        };
        let error = human_scores(&contexts, &missing).unwrap_err();
        assert!(error.to_string().contains("`coherence`"), "{error}");
    }
}
