//! The pairwise workload as a benchmark of the engine's strategies: the same SummEval
//! documents' N(N-1) comparisons evaluated prompt by prompt (naive) and as one prefix
//! trie (tree), in one process, with the work done, the time taken, the memory peak and
//! the largest difference between the two strategies' probabilities.

use std::time::Instant;

use anyhow::{bail, Context as _, Result};
use serde::Serialize;

use crate::data::Context;
use crate::engine::{DecoderScorer, Scorer, Strategy};
use crate::judge::pairwise::run::{pairwise_labels, plan_context};
use crate::judge::pairwise::{first_wins, CompareOptions, PairwiseTemplate};
use crate::judge::{Attribute, Task};

/// What one strategy did on the workload.
#[derive(Debug, Clone, Serialize)]
pub struct StrategyRun {
    pub strategy: String,
    /// Tokens run through the model (padding excluded).
    pub tokens: usize,
    pub forward_calls: usize,
    pub seconds: f64,
    pub comparisons_per_second: f64,
    /// Peak resident memory of the process during this run (bytes), when known.
    pub peak_rss_bytes: Option<u64>,
    /// `p(A)` of every comparison, in plan order.
    #[serde(skip)]
    pub p_a: Vec<f64>,
}

/// The benchmark's result.
#[derive(Debug, Clone, Serialize)]
pub struct PairwiseBench {
    pub docs: usize,
    pub comparisons: usize,
    pub runs: Vec<StrategyRun>,
    /// Largest `|p_tree - p_naive|`, when both ran.
    pub max_abs_diff: Option<f64>,
}

impl PairwiseBench {
    pub fn run(&self, strategy: Strategy) -> Option<&StrategyRun> {
        let name = strategy_name(strategy);
        self.runs.iter().find(|r| r.strategy == name)
    }
}

fn strategy_name(strategy: Strategy) -> &'static str {
    match strategy {
        Strategy::Tree => "tree",
        Strategy::Naive => "naive",
    }
}

/// Run every context's full comparison set (template c1, coherence) once per strategy.
/// `on_progress(strategy, done_docs)` is called after each document.
pub fn bench_pairwise(
    scorer: &mut DecoderScorer,
    contexts: &[Context],
    strategies: &[Strategy],
    on_progress: &mut dyn FnMut(Strategy, usize),
) -> Result<PairwiseBench> {
    if contexts.is_empty() {
        bail!("the benchmark needs at least one document");
    }
    let options = CompareOptions::new(
        Task::Summary,
        Attribute::named("coherence")?,
        PairwiseTemplate::builtin("c1", Task::Summary)?,
    );
    let labels = pairwise_labels(scorer)?;
    let plans = contexts
        .iter()
        .map(|context| plan_context(scorer, context, &options, &labels))
        .collect::<Result<Vec<_>>>()?;
    let comparisons = plans.iter().map(|p| p.labels.len()).sum();
    let original = scorer.settings();
    let mut runs = Vec::with_capacity(strategies.len());
    for &strategy in strategies {
        let mut settings = original;
        settings.strategy = strategy;
        scorer.set_settings(settings);
        scorer.reset_stats();
        reset_peak_rss();
        let start = Instant::now();
        let mut p_a = Vec::with_capacity(comparisons);
        for (done, plan) in plans.iter().enumerate() {
            let results = scorer.label_logprobs(plan.labels.requests())?;
            for result in &results {
                p_a.push(first_wins(result)?.0);
            }
            on_progress(strategy, done + 1);
        }
        let seconds = start.elapsed().as_secs_f64();
        let stats = scorer.stats();
        runs.push(StrategyRun {
            strategy: strategy_name(strategy).to_string(),
            tokens: stats.tokens,
            forward_calls: stats.forward_calls,
            seconds,
            comparisons_per_second: comparisons as f64 / seconds,
            peak_rss_bytes: peak_rss_bytes(),
            p_a,
        });
    }
    scorer.set_settings(original);
    let max_abs_diff = match (
        runs.iter().find(|r| r.strategy == "naive"),
        runs.iter().find(|r| r.strategy == "tree"),
    ) {
        (Some(naive), Some(tree)) => Some(
            naive
                .p_a
                .iter()
                .zip(&tree.p_a)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f64::max),
        ),
        _ => None,
    };
    Ok(PairwiseBench {
        docs: contexts.len(),
        comparisons,
        runs,
        max_abs_diff,
    })
}

/// Start a new peak-memory measurement (Linux: `/proc/self/clear_refs`); elsewhere a
/// no-op, and the peaks are then whole-process peaks.
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Peak resident set size since the last reset (Linux `VmHWM`), in bytes.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line
        .trim_start_matches("VmHWM:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// The first `docs` SummEval documents as contexts.
pub fn summeval_contexts(data_dir: &std::path::Path, docs: usize) -> Result<Vec<Context>> {
    let records = crate::data::summeval::read(data_dir)?;
    let records = crate::data::limit_contexts(records, Some(docs));
    crate::data::group_contexts(records).context("cannot group the SummEval documents")
}
