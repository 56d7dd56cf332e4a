//! Comparative assessment as a row source: the full comparison matrix of every context,
//! per attribute and prompt, from the cached pairwise runner, and everything the paper
//! derives from it.
//!
//! Each (attribute, prompt) is one [`run_compare`] over all contexts with the `full`
//! design, so its results land in (and on a rerun come from) the result cache. The
//! probabilities are kept as one [`PairMatrix`] per context; the table rows (win ratio,
//! soft win ratio, Bradley-Terry; plain and debiased), the positional-bias and accuracy
//! figures and the subset-of-comparisons curves are all computed from these matrices
//! without further model calls. The debiasing threshold of a prompt is the authors'
//! balanced threshold over all of that prompt's comparisons (every context), as in the
//! runner.

use anyhow::{ensure, Context as _, Result};
use serde::Serialize;

use super::experiment::Column;
use super::rows::{human_scores, AttributeTask, MethodRow, PromptScores, RowSource, SourceRows};
use crate::data::Context;
use crate::engine::Scorer;
use crate::judge::pairwise::{run_compare, CompareOptions, Comparison, PairwiseTemplate};
use crate::rank::{
    balanced_threshold, first_position_rate, order_consistency, pairwise_accuracy,
    score_at_threshold, Outcome, RankMethod, Rate,
};

/// The probabilities `p[i][j]` = P(candidate i, shown first, is better than j) of one
/// context's full comparison set.
#[derive(Debug, Clone, PartialEq)]
pub struct PairMatrix {
    n: usize,
    /// Row-major `n x n`; the diagonal is unused.
    p: Vec<f64>,
}

impl PairMatrix {
    /// A matrix from the comparisons of a full design (every ordered pair once).
    pub fn from_outcomes(n: usize, outcomes: &[Outcome]) -> Result<Self> {
        let mut p = vec![f64::NAN; n * n];
        for o in outcomes {
            ensure!(
                o.first < n && o.second < n && o.first != o.second,
                "comparison {} vs {} out of range for {n} candidates",
                o.first,
                o.second
            );
            p[o.first * n + o.second] = o.p;
        }
        let missing = (0..n)
            .flat_map(|i| (0..n).map(move |j| (i, j)))
            .find(|&(i, j)| i != j && p[i * n + j].is_nan());
        if let Some((i, j)) = missing {
            anyhow::bail!("the full comparison set lacks {i} vs {j}");
        }
        Ok(Self { n, p })
    }

    /// Number of candidates.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Whether the context has no candidates.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// `p[first][second]`.
    pub fn get(&self, first: usize, second: usize) -> f64 {
        self.p[first * self.n + second]
    }

    /// The outcomes of the given ordered pairs.
    pub fn outcomes(&self, pairs: &[(usize, usize)]) -> Vec<Outcome> {
        pairs
            .iter()
            .map(|&(i, j)| Outcome::new(i, j, self.get(i, j)))
            .collect()
    }

    /// Every ordered pair's outcome, sorted by first then second.
    pub fn all_outcomes(&self) -> Vec<Outcome> {
        let pairs: Vec<(usize, usize)> = (0..self.n)
            .flat_map(|i| (0..self.n).filter(move |&j| j != i).map(move |j| (i, j)))
            .collect();
        self.outcomes(&pairs)
    }
}

/// The full comparison set of one attribute under one prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptRun {
    pub prompt: String,
    /// One matrix per context, in input order.
    pub matrices: Vec<PairMatrix>,
    /// The balanced (debiasing) threshold over all comparisons.
    pub tau: f64,
    /// Comparisons computed in this run / found in the cache.
    pub computed: usize,
    pub cached: usize,
}

/// The positional bias, consistency and accuracy of one prompt at one threshold.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DecisionStats {
    pub tau: f64,
    /// P(A): comparisons won by the first position.
    pub first_position: Rate,
    /// Pairs whose two orders name the same winner.
    pub consistency: Rate,
    /// Comparisons of candidates with different human scores decided as the humans do.
    pub accuracy: Rate,
}

impl PromptRun {
    /// Decision statistics at 0.5 (`debiased` false) or at the balanced threshold.
    pub fn decisions(&self, human: &[Vec<f64>], debiased: bool) -> DecisionStats {
        let tau = if debiased { self.tau } else { 0.5 };
        let mut stats = DecisionStats {
            tau,
            first_position: Rate::default(),
            consistency: Rate::default(),
            accuracy: Rate::default(),
        };
        for (matrix, human) in self.matrices.iter().zip(human) {
            let outcomes = matrix.all_outcomes();
            stats.first_position += first_position_rate(&outcomes, tau);
            stats.consistency += order_consistency(&outcomes, tau);
            stats.accuracy += pairwise_accuracy(&outcomes, human, tau);
        }
        stats
    }
}

/// Every prompt's full comparison set for one attribute.
#[derive(Debug, Clone, PartialEq)]
pub struct AttributeRuns {
    pub column: Column,
    pub prompts: Vec<PromptRun>,
}

/// The ranking methods turned into rows: `(method, row name, reported by the paper)`.
/// The paper's tables use the win ratio; soft win ratio and Bradley-Terry are our
/// extensions (its appendix B compares the win ratio with a maximum-likelihood ranking).
pub const ROW_METHODS: [(RankMethod, &str, bool); 3] = [
    (RankMethod::WinRatio, "win ratio", true),
    (RankMethod::Soft, "soft win ratio", false),
    (RankMethod::BradleyTerry, "Bradley-Terry", false),
];

/// The comparative-assessment row source; keeps every attribute's comparison sets for
/// the bias, accuracy and subset analyses.
#[derive(Debug, Default)]
pub struct ComparativeSource {
    pub runs: Vec<AttributeRuns>,
}

impl ComparativeSource {
    pub fn new() -> Self {
        Self::default()
    }

    /// Run (or read from the cache) the full comparison set of one attribute and prompt.
    fn run_prompt(
        scorer: &mut dyn Scorer,
        task: &AttributeTask,
        prompt: &str,
    ) -> Result<PromptRun> {
        let template = PairwiseTemplate::builtin(prompt, task.experiment.task())?;
        let mut options = CompareOptions::new(
            task.experiment.task(),
            task.column.attribute.clone(),
            template,
        );
        options.score_field = Some(task.column.field.clone());
        options.progress = task.progress.clone();
        let result = run_compare(scorer, task.contexts, &options, task.cache)?;
        let mut matrices = Vec::with_capacity(result.contexts.len());
        let mut all_p = Vec::new();
        for (context, got) in task.contexts.iter().zip(&result.contexts) {
            let outcomes: Vec<Outcome> = got.comparisons.iter().map(Comparison::outcome).collect();
            all_p.extend(outcomes.iter().map(|o| o.p));
            matrices.push(
                PairMatrix::from_outcomes(context.candidates.len(), &outcomes)
                    .with_context(|| format!("context `{}`", context.id))?,
            );
        }
        Ok(PromptRun {
            prompt: prompt.to_string(),
            matrices,
            tau: balanced_threshold(&all_p),
            computed: result.computed,
            cached: result.cached,
        })
    }
}

/// The rows of every ranking method, plain and debiased, from one attribute's runs.
pub fn rows_from_runs(runs: &AttributeRuns, contexts: &[Context]) -> Result<Vec<MethodRow>> {
    let mut rows = Vec::new();
    for (method, name, in_paper) in ROW_METHODS {
        for debiased in [false, true] {
            let mut per_prompt = Vec::with_capacity(runs.prompts.len());
            for run in &runs.prompts {
                let tau = if debiased { run.tau } else { 0.5 };
                let scores = run
                    .matrices
                    .iter()
                    .zip(contexts)
                    .map(|(matrix, context)| {
                        score_at_threshold(method, matrix.len(), &matrix.all_outcomes(), tau)
                            .with_context(|| {
                                format!("context `{}`: {name}, prompt {}", context.id, run.prompt)
                            })
                    })
                    .collect::<Result<Vec<_>>>()?;
                per_prompt.push(PromptScores {
                    prompt: run.prompt.clone(),
                    scores,
                });
            }
            rows.push(MethodRow {
                family: "comparative".to_string(),
                method: name.to_string(),
                debiased,
                in_paper,
                per_prompt,
            });
        }
    }
    Ok(rows)
}

impl RowSource for ComparativeSource {
    fn name(&self) -> &str {
        "comparative"
    }

    fn rows(&mut self, scorer: &mut dyn Scorer, task: &AttributeTask) -> Result<SourceRows> {
        // Fail on missing human scores before any model call.
        human_scores(task.contexts, task.column)?;
        let mut prompts = Vec::with_capacity(task.prompts.len());
        for prompt in task.prompts {
            task.progress.note(&format!(
                "{} {} ({}), prompt {prompt}: {} contexts",
                task.experiment.title(),
                task.column.label,
                task.column.attribute.name,
                task.contexts.len()
            ));
            let run = Self::run_prompt(scorer, task, prompt).with_context(|| {
                format!(
                    "{} {} prompt {prompt}",
                    task.experiment.title(),
                    task.column.label
                )
            })?;
            prompts.push(run);
        }
        let runs = AttributeRuns {
            column: task.column.clone(),
            prompts,
        };
        let out = SourceRows {
            rows: rows_from_runs(&runs, task.contexts)?,
            computed: runs.prompts.iter().map(|r| r.computed).sum(),
            cached: runs.prompts.iter().map(|r| r.cached).sum(),
        };
        self.runs.push(runs);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_matrix_needs_every_ordered_pair() {
        let full = [
            Outcome::new(0, 1, 0.8),
            Outcome::new(1, 0, 0.3),
            Outcome::new(0, 2, 0.6),
            Outcome::new(2, 0, 0.1),
            Outcome::new(1, 2, 0.7),
            Outcome::new(2, 1, 0.4),
        ];
        let matrix = PairMatrix::from_outcomes(3, &full).unwrap();
        assert_eq!(matrix.get(2, 1), 0.4);
        assert_eq!(matrix.all_outcomes(), {
            let mut sorted = full.to_vec();
            sorted.sort_by_key(|o| (o.first, o.second));
            sorted
        });
        let error = PairMatrix::from_outcomes(3, &full[..5]).unwrap_err();
        assert!(error.to_string().contains("2 vs 1"), "{error}");
        assert!(PairMatrix::from_outcomes(2, &full).is_err());
    }

    #[test]
    fn decisions_count_bias_consistency_and_accuracy() {
        // Candidate 0 is best, 2 worst; the comparator favours the first position.
        let matrix = PairMatrix::from_outcomes(
            3,
            &[
                Outcome::new(0, 1, 0.9),
                Outcome::new(1, 0, 0.6), // wrong at 0.5, right at tau .61
                Outcome::new(0, 2, 0.95),
                Outcome::new(2, 0, 0.2),
                Outcome::new(1, 2, 0.8),
                Outcome::new(2, 1, 0.55), // wrong at 0.5, right at tau .61
            ],
        )
        .unwrap();
        let run = PromptRun {
            prompt: "c1".into(),
            matrices: vec![matrix],
            tau: balanced_threshold(&[0.9, 0.6, 0.95, 0.2, 0.8, 0.55]),
            computed: 6,
            cached: 0,
        };
        // Sorted p: .2 .55 .6 .8 .9 .95; half below tau first at .601.
        assert_eq!(run.tau, 0.601);
        let human = vec![vec![5.0, 3.0, 1.0]];
        let plain = run.decisions(&human, false);
        assert_eq!(plain.first_position, Rate { hits: 5, total: 6 });
        assert_eq!(plain.consistency, Rate { hits: 1, total: 3 });
        assert_eq!(plain.accuracy, Rate { hits: 4, total: 6 });
        let debiased = run.decisions(&human, true);
        assert_eq!(debiased.first_position, Rate { hits: 3, total: 6 });
        assert_eq!(debiased.consistency, Rate { hits: 3, total: 3 });
        assert_eq!(debiased.accuracy, Rate { hits: 6, total: 6 });
    }
}
