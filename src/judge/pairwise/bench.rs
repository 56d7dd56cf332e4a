//! The pairwise workload as a benchmark of the engine's strategies: the same SummEval
//! documents' N(N-1) comparisons evaluated prompt by prompt (naive) and as one prefix
//! trie (tree), in one process, with the work done, the time taken, the memory peak and
//! the largest difference between the two strategies' probabilities.

use std::time::Instant;

use anyhow::{bail, Context as _, Result};
use serde::Serialize;

use super::run::{pairwise_labels, plan_context};
use super::{first_wins, CompareOptions, PairwiseTemplate};
use crate::data::Context;
use crate::engine::{DecoderScorer, Scorer, Strategy};
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
    /// Real tokens per second.
    pub tokens_per_second: f64,
    /// Effective GFLOP/s of the layers' matrix products (2 x weights x tokens / time;
    /// attention, the output head and padding not counted).
    pub effective_gflops: f64,
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
    /// GFLOP/s of a 1024^3 f32 matrix product on the model's device at the start (the
    /// best of a few): what this machine's matrix products reach at all.
    pub calibration_gflops: f64,
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
    let calibration_gflops = calibration_gflops(scorer.model().device())?;
    let flops_per_token = matmul_flops_per_token(scorer.model().config());
    let plans = contexts
        .iter()
        .map(|context| plan_context(scorer, context, &options, &labels))
        .collect::<Result<Vec<_>>>()?;
    let comparisons = plans.iter().map(|p| p.requests.len()).sum();
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
            let results = scorer.label_logprobs(&plan.requests)?;
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
            tokens_per_second: stats.tokens as f64 / seconds,
            effective_gflops: flops_per_token * stats.tokens as f64 / seconds / 1e9,
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
        calibration_gflops,
    })
}

/// Floating-point operations of one token through the layers' matrix products.
pub fn matmul_flops_per_token(c: &crate::arch::llama::LlamaConfig) -> f64 {
    let q = c.num_heads * c.head_dim;
    let kv = c.num_kv_heads * c.head_dim;
    let per_layer =
        c.hidden_size * (q + 2 * kv) + q * c.hidden_size + 3 * c.hidden_size * c.intermediate_size;
    2.0 * (c.num_layers * per_layer) as f64
}

/// GFLOP/s of a 1024 x 1024 x 1024 f32 matrix product on `device`: the best of five
/// after one warm-up.
pub fn calibration_gflops(device: &candle_core::Device) -> Result<f64> {
    let n = 1024;
    let a = candle_core::Tensor::randn(0f32, 1.0, (n, n), device)?;
    let b = candle_core::Tensor::randn(0f32, 1.0, (n, n), device)?;
    a.matmul(&b)?;
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let start = Instant::now();
        let c = a.matmul(&b)?;
        c.device().synchronize()?;
        best = best.min(start.elapsed().as_secs_f64());
    }
    Ok(2.0 * (n * n * n) as f64 / best / 1e9)
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
