//! `reproduce`: the comparative-assessment paper's tables and figures for one data set,
//! from one model.
//!
//! For every attribute column the row sources score the candidates (comparative
//! assessment always; other methods plug in through [`RowSource`]); the rows are
//! meta-evaluated per prompt and averaged over the prompts ([`rows`]). From the full
//! comparison matrices come the positional bias, order consistency and pairwise
//! accuracy of each prompt ([`comparative`]) and the subset-of-comparisons curves
//! ([`subset`]), without more model calls; with absolute-scoring rows, the curves add
//! the hybrid one (a subset of comparisons with the absolute scores as experts). [`report`] turns the [`Reproduction`] into
//! Markdown, CSV and figures ([`figure`]).
//!
//! Everything model-dependent goes through the result cache, so a rerun computes
//! nothing; the entry point takes any [`Scorer`], so tests drive it with a mock.

pub mod absolute;
pub mod comparative;
pub mod experiment;
pub mod figure;
pub mod report;
pub mod rows;
pub mod subset;

use std::time::Instant;

use anyhow::{ensure, Context as _, Result};
use serde::Serialize;

pub use absolute::AbsoluteSource;
pub use comparative::{ComparativeSource, DecisionStats};
pub use experiment::{Column, DataOptions, Experiment, LoadedExperiment};
pub use report::write_outputs;
pub use rows::{
    AttributeTask, BootstrapSettings, CorrelationCell, MethodRow, PromptScores, RowSource,
    SourceRows,
};
pub use subset::{CurvePoint, SubsetOptions};

use crate::engine::{ResultCache, Scorer};
use crate::judge::pairwise::run::prefetch_comparisons;
use crate::judge::pairwise::{CompareOptions, PairwiseTemplate};
use crate::progress::Progress;

/// The paper's two prompts.
pub const PROMPTS: [&str; 2] = ["c1", "c2"];

/// Settings of a reproduction besides the model, the data and the cache.
#[derive(Debug, Clone)]
pub struct ReproduceOptions {
    /// Built-in pairwise prompts to run and average (`c1`, `c2`).
    pub prompts: Vec<String>,
    /// The subset-of-comparisons curves; `None` skips them.
    pub curves: Option<SubsetOptions>,
    /// Bootstrap intervals for the prompt-averaged Spearman; `None` skips them.
    pub bootstrap: Option<BootstrapSettings>,
    /// Where to report progress and notes.
    pub progress: Progress,
    /// The command line, for the report.
    pub command: String,
    /// Seconds spent loading the model before the run, for the report.
    pub model_load_seconds: Option<f64>,
}

impl ReproduceOptions {
    /// Both prompts, curves over `grid` with `seeds` seeds, 1000 bootstrap resamples.
    pub fn new(grid: Vec<usize>, seeds: u64) -> Self {
        Self {
            prompts: PROMPTS.iter().map(|p| p.to_string()).collect(),
            curves: Some(SubsetOptions {
                grid,
                seeds,
                progress: Progress::none(),
            }),
            bootstrap: Some(BootstrapSettings {
                resamples: 1000,
                confidence: 0.95,
                seed: 0,
            }),
            progress: Progress::none(),
            command: String::new(),
            model_load_seconds: None,
        }
    }
}

/// One row of the correlation tables, meta-evaluated for every attribute.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RowResult {
    pub family: String,
    pub method: String,
    pub debiased: bool,
    pub in_paper: bool,
    /// One per attribute column; `None` where the source gave no row for it.
    pub cells: Vec<Option<CorrelationCell>>,
}

impl RowResult {
    /// Mean over the attributes of the prompt-averaged Spearman (the paper's "Avg."),
    /// when every attribute has one.
    pub fn average_spearman(&self) -> Option<f64> {
        let values: Option<Vec<f64>> = self
            .cells
            .iter()
            .map(|cell| cell.as_ref().and_then(|c| c.mean.spearman))
            .collect();
        values
            .filter(|v| !v.is_empty())
            .map(|v| v.iter().sum::<f64>() / v.len() as f64)
    }
}

/// The decision statistics of one attribute and prompt, plain and debiased.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DecisionCell {
    pub column: String,
    pub prompt: String,
    pub plain: DecisionStats,
    pub debiased: DecisionStats,
}

/// Everything a reproduction found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Reproduction {
    pub experiment: Experiment,
    pub model_name: String,
    pub fingerprint: String,
    pub contexts: usize,
    pub candidates: usize,
    /// WebNLG: whether the human reference was a candidate.
    pub reference_included: bool,
    pub prompts: Vec<String>,
    pub columns: Vec<Column>,
    pub rows: Vec<RowResult>,
    pub decisions: Vec<DecisionCell>,
    pub curves: Vec<CurvePoint>,
    /// Every design at a quarter of the comparisons, with bootstrap intervals.
    pub budget: Vec<subset::BudgetRow>,
    pub curve_grid: Vec<usize>,
    pub curve_seeds: u64,
    pub bootstrap: Option<(usize, f64)>,
    /// Model results computed in this run / found in the cache.
    pub computed: usize,
    pub cached: usize,
    pub wall_seconds: f64,
    pub model_load_seconds: Option<f64>,
    pub command: String,
}

/// Run the experiment's tables and figures with `scorer`. `extra` are further row
/// sources (absolute scoring, G-Eval) whose rows join the correlation tables.
pub fn reproduce(
    scorer: &mut dyn Scorer,
    loaded: &LoadedExperiment,
    options: &ReproduceOptions,
    cache: Option<&ResultCache>,
    extra: &mut [Box<dyn RowSource>],
) -> Result<Reproduction> {
    let started = Instant::now();
    ensure!(!loaded.contexts.is_empty(), "no contexts to evaluate");
    ensure!(!options.prompts.is_empty(), "no prompts to run");
    let experiment = loaded.experiment;
    let contexts = &loaded.contexts;
    let columns = experiment.columns();
    // Every attribute's human scores must be there before the first model call.
    for column in &columns {
        rows::human_scores(contexts, column)?;
    }
    // All attributes and prompts of a context in one scorer call, so that the prefixes
    // the attributes share are computed once; the per-attribute runs below then read
    // the cache. Without a result cache, an in-memory one carries the results over.
    let memory_cache;
    let cache = match cache {
        Some(cache) => cache,
        None => {
            memory_cache = ResultCache::in_memory()?;
            &memory_cache
        }
    };
    let option_sets = columns
        .iter()
        .flat_map(|column| {
            options.prompts.iter().map(move |prompt| {
                let template = PairwiseTemplate::builtin(prompt, experiment.task())?;
                Ok(CompareOptions::new(
                    experiment.task(),
                    column.attribute.clone(),
                    template,
                ))
            })
        })
        .collect::<Result<Vec<_>>>()?;
    options.progress.note(&format!(
        "computing the comparisons of {} attribute(s) x {} prompt(s) over {} contexts",
        columns.len(),
        options.prompts.len(),
        contexts.len()
    ));
    let (prefetched, found) =
        prefetch_comparisons(scorer, contexts, &option_sets, cache, &options.progress)?;
    let cache = Some(cache);
    let mut comparative = ComparativeSource::new();
    let mut rows: Vec<RowResult> = Vec::new();
    // The comparative runs read from the cache what the prefetch computed: count the
    // prefetch's work for them.
    let (mut computed, mut cached) = (prefetched, found);
    // Per attribute, the absolute scores of the hybrid curve: prompt scoring's, else the
    // first absolute row's.
    let mut priors: Vec<Option<Vec<Vec<f64>>>> = vec![None; columns.len()];
    for (index, column) in columns.iter().enumerate() {
        let human = rows::human_scores(contexts, column)?;
        let task = AttributeTask {
            experiment,
            column,
            contexts,
            prompts: &options.prompts,
            cache,
            progress: options.progress.clone(),
        };
        let mut produced = vec![comparative.rows(scorer, &task)?];
        for source in extra.iter_mut() {
            let name = source.name().to_string();
            produced.push(
                source
                    .rows(scorer, &task)
                    .with_context(|| format!("row source `{name}`, {}", column.label))?,
            );
        }
        for (source_index, source_rows) in produced.into_iter().enumerate() {
            if source_index > 0 {
                computed += source_rows.computed;
                cached += source_rows.cached;
            }
            for row in source_rows.rows {
                if row.family == "absolute" {
                    if let Some(first) = row.per_prompt.first() {
                        if priors[index].is_none() || row.method == "prompt scoring" {
                            priors[index] = Some(first.scores.clone());
                        }
                    }
                }
                let cell = rows::evaluate_row(&row, contexts, &human, options.bootstrap)
                    .with_context(|| format!("{} {}, {}", row.family, row.method, column.label))?;
                let slot = match rows.iter().position(|r| {
                    r.family == row.family && r.method == row.method && r.debiased == row.debiased
                }) {
                    Some(slot) => slot,
                    None => {
                        rows.push(RowResult {
                            family: row.family.clone(),
                            method: row.method.clone(),
                            debiased: row.debiased,
                            in_paper: row.in_paper,
                            cells: vec![None; columns.len()],
                        });
                        rows.len() - 1
                    }
                };
                rows[slot].cells[index] = Some(cell);
            }
        }
    }

    let mut decisions = Vec::new();
    for runs in &comparative.runs {
        let human = rows::human_scores(contexts, &runs.column)?;
        for run in &runs.prompts {
            decisions.push(DecisionCell {
                column: runs.column.label.clone(),
                prompt: run.prompt.clone(),
                plain: run.decisions(&human, false),
                debiased: run.decisions(&human, true),
            });
        }
    }

    let (curves, budget, curve_grid, curve_seeds) = match &options.curves {
        Some(curve_options) => {
            let mut curve_options = curve_options.clone();
            curve_options.progress = options.progress.clone();
            let points =
                subset::subset_curves(&comparative.runs, contexts, &curve_options, &priors)?;
            let budget = subset::budget_table(
                &comparative.runs,
                contexts,
                subset::BUDGET_FRACTION,
                curve_options.seeds,
                subset::BUDGET_RESAMPLES,
                &priors,
            )?;
            (points, budget, curve_options.grid, curve_options.seeds)
        }
        None => (Vec::new(), Vec::new(), Vec::new(), 0),
    };

    Ok(Reproduction {
        experiment,
        model_name: scorer.info().name.clone(),
        fingerprint: scorer.info().fingerprint.clone(),
        contexts: contexts.len(),
        candidates: contexts.iter().map(|c| c.candidates.len()).sum(),
        reference_included: loaded.reference_included,
        prompts: options.prompts.clone(),
        columns,
        rows,
        decisions,
        curves,
        budget,
        curve_grid,
        curve_seeds,
        bootstrap: options.bootstrap.map(|b| (b.resamples, b.confidence)),
        computed,
        cached,
        wall_seconds: started.elapsed().as_secs_f64(),
        model_load_seconds: options.model_load_seconds,
        command: options.command.clone(),
    })
}
