//! The pairwise workload as a benchmark of the engine's strategies: the same SummEval
//! documents' N(N-1) comparisons evaluated prompt by prompt (naive) and as one prefix
//! trie (tree), in one process, with the work done, the time taken, the memory peak and
//! the largest difference between the two strategies' probabilities.

use std::time::Instant;

use anyhow::{bail, Context as _, Result};
use serde::{Deserialize, Serialize};

use crate::bench::calibration::{calibrate_model_shapes, ShapeCalibration};
use crate::data::Context;
use crate::engine::{DecoderScorer, LabelRequest, Scorer, Strategy};
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
    /// Real tokens per second.
    pub tokens_per_second: f64,
    /// Effective GFLOP/s of the layers' matrix products (2 x weights x tokens / time;
    /// attention, the output head and padding not counted).
    pub effective_gflops: f64,
    /// Query-key pairs of attention per layer (see `EvalStats::attended_keys`).
    pub attended_keys: u64,
    /// GFLOP/s of the products and attention's two products together (scores and
    /// values: 4 x query width x attended keys x layers), the arithmetic a run cannot
    /// avoid; the output head, norms and softmax not counted.
    pub achieved_gflops: f64,
    /// Peak resident memory of the process during this run (bytes), when known.
    pub peak_rss_bytes: Option<u64>,
    /// The trie plan (`levels` or `depth-first`).
    pub plan: String,
    /// Tensor operations of the busiest layer in the busiest pass, and host-to-device
    /// uploads and device-to-host downloads: counted by the level plan's pass only
    /// (`None` for the depth-first plan, which does not count them).
    pub ops_per_layer_pass_max: Option<usize>,
    pub uploads: Option<usize>,
    pub downloads: Option<usize>,
    /// How the run's seconds divide between the layers' products, the attention kernel
    /// and the rest; `None` where the passes did not run on the buffer path (a GPU, the
    /// level plan, tensor-path models), which is the only one timed.
    pub time_split: Option<TimeSplit>,
    /// `p(A)` of every comparison, in plan order.
    #[serde(skip)]
    pub p_a: Vec<f64>,
}

/// Where a run's wall time went (see `arch::llama::time_split`): seconds in the layers'
/// matrix products, in the segment-attention kernel (`Q K^T`, the online softmax, `P V`),
/// and the rest of the run (norms, rotary embedding, gating, the output head, the trie's
/// and the scorer's bookkeeping).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TimeSplit {
    pub products: f64,
    pub attention: f64,
    pub rest: f64,
    /// GFLOP/s of each part alone: the layers' products' flops (as in
    /// `effective_gflops`) over their seconds, and attention's two products' flops (as
    /// in `achieved_gflops`) over the kernel's seconds; `None` for a part never timed.
    pub products_gflops: Option<f64>,
    pub attention_gflops: Option<f64>,
    /// The tile kernels' own split (issue 61: tile instructions against the work around
    /// them, `nlg_judge_kernels::timing`), where a tile path ran (on AMX, or on the
    /// portable model with `NLG_JUDGE_TILES=model`); reported as flat fields by
    /// `cli::bench`.
    #[serde(skip)]
    pub tiles: Option<nlg_judge_kernels::timing::TileSplit>,
}

impl TimeSplit {
    /// The split of a run of `seconds` whose recording summed `recorded`, with the
    /// products' and attention's floating-point operations of the run; `None` when
    /// nothing was recorded (no product ran on the buffer path).
    pub fn of(
        seconds: f64,
        recorded: crate::arch::llama::time_split::Split,
        product_flops: f64,
        attention_flops: f64,
    ) -> Option<Self> {
        let products = recorded.products.as_secs_f64();
        let attention = recorded.attention.as_secs_f64();
        let rate = |flops: f64, seconds: f64| (seconds > 0.0).then(|| flops / seconds / 1e9);
        (products > 0.0).then(|| TimeSplit {
            products,
            attention,
            rest: (seconds - products - attention).max(0.0),
            products_gflops: rate(product_flops, products),
            attention_gflops: rate(attention_flops, attention),
            tiles: (recorded.tiles.attention_calls + recorded.tiles.product_calls > 0)
                .then_some(recorded.tiles),
        })
    }

    /// The three parts as fractions of their sum.
    pub fn fractions(&self) -> [f64; 3] {
        let total = self.products + self.attention + self.rest;
        [self.products, self.attention, self.rest].map(|part| part / total)
    }
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
    /// The CPU's measured multiply-add ceiling on every thread at once (`None` on a GPU):
    /// no kernel can do more arithmetic per second than this.
    pub fma_peak: Option<FmaPeakReport>,
    /// One decoder block's own products (the model's layers, precision and instruction
    /// path), timed alone after the runs at the tree run's mean tokens per forward pass
    /// (the last run's without a tree run): what the products reach at the shapes this
    /// workload gives them. The mean, not a fixed row count, because the products'
    /// speed depends on their row count (small for naive prompts, up to the batch budget
    /// for the trie's batched nodes) and the effective GFLOP/s it is compared with
    /// average over exactly those passes.
    pub model_shapes: ShapeCalibration,
    /// Weights of the layers' matrix products (all blocks; embedding and head excluded):
    /// the parameters a token's cost grows with.
    pub matmul_parameters: u64,
    /// Each document's number of candidates and compared `(first, second)` pairs, in the
    /// order of the runs' probabilities.
    #[serde(skip)]
    pub documents: Vec<DocumentPairs>,
}

/// [`nlg_judge_kernels::peak::FmaPeak`] as reported.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FmaPeakReport {
    /// The widest multiply-add of the CPU's own features (`NLG_JUDGE_CPU` does not lower
    /// it: candle's f32 products ignore it too).
    pub path: String,
    pub threads: usize,
    pub gflops: f64,
    pub gflops_per_thread: f64,
    /// The AMX tiles' bf16 ceiling (`tdpbf16ps` on resident tiles) on the same threads,
    /// where the CPU has them and the OS grants them; `None` elsewhere.
    pub amx_gflops: Option<f64>,
    /// The AVX512-BF16 vector ceiling (`vdpbf16ps` chains) on the same threads, where
    /// the CPU has it: what bf16 products reach without tiles (Zen 4 and 5).
    pub bf16_dot_gflops: Option<f64>,
}

impl FmaPeakReport {
    /// Measure on the current rayon pool (what the runs use).
    pub fn measure() -> FmaPeakReport {
        let peak =
            nlg_judge_kernels::peak::measure(nlg_judge_kernels::cpu::CpuFeatures::detected());
        FmaPeakReport {
            path: peak.path.name().to_string(),
            threads: peak.threads,
            gflops: peak.gflops,
            gflops_per_thread: peak.gflops_per_thread,
            amx_gflops: nlg_judge_kernels::peak::measure_amx().map(|amx| amx.gflops),
            bf16_dot_gflops: nlg_judge_kernels::peak::measure_bf16_dot().map(|p| p.gflops),
        }
    }
}

/// The comparisons of one document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DocumentPairs {
    pub candidates: usize,
    pub pairs: Vec<(usize, usize)>,
}

/// A run's probabilities as saved to compare another run (another precision) with.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SavedProbabilities {
    /// The model's cache identity (fingerprint and precision).
    pub fingerprint: String,
    pub documents: Vec<DocumentPairs>,
    /// `p(first wins)` of every comparison, documents in order.
    pub p_first: Vec<f64>,
}

/// How closely a run agrees with a reference run on the same comparisons.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Agreement {
    pub comparisons: usize,
    /// Largest `|p - p_reference|`.
    pub max_abs_diff: f64,
    /// Fraction of comparisons with the same hard decision (`p > 0.5`).
    pub same_decision: f64,
    /// Spearman's rho between the two runs' soft win ratios, per document (`None` for a
    /// document whose ratios are constant).
    pub spearman_per_document: Vec<Option<f64>>,
}

impl Agreement {
    /// The smallest per-document Spearman's rho (`None` if no document had one).
    pub fn min_spearman(&self) -> Option<f64> {
        self.spearman_per_document
            .iter()
            .flatten()
            .copied()
            .reduce(f64::min)
    }
}

/// Each candidate's soft win ratio: the mean probability that it wins, over every
/// comparison it takes part in (as first: `p`; as second: `1 - p`).
pub fn soft_win_ratios(document: &DocumentPairs, p_first: &[f64]) -> Vec<f64> {
    let mut wins = vec![0f64; document.candidates];
    let mut counts = vec![0usize; document.candidates];
    for (&(first, second), &p) in document.pairs.iter().zip(p_first) {
        wins[first] += p;
        wins[second] += 1.0 - p;
        counts[first] += 1;
        counts[second] += 1;
    }
    wins.iter()
        .zip(&counts)
        .map(|(&w, &c)| if c == 0 { 0.5 } else { w / c as f64 })
        .collect()
}

/// Compare `run` with `reference` (same documents and pairs, in the same order).
pub fn agreement(reference: &SavedProbabilities, run: &SavedProbabilities) -> Result<Agreement> {
    if reference.documents != run.documents || reference.p_first.len() != run.p_first.len() {
        bail!("the two runs did not make the same comparisons (different --docs?)");
    }
    let comparisons = run.p_first.len();
    let pairs = || reference.p_first.iter().zip(&run.p_first);
    let max_abs_diff = pairs().map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    let same = pairs().filter(|(a, b)| (**a > 0.5) == (**b > 0.5)).count();
    let mut spearman_per_document = Vec::with_capacity(run.documents.len());
    let mut offset = 0;
    for document in &run.documents {
        let range = offset..offset + document.pairs.len();
        offset = range.end;
        let reference_ratios = soft_win_ratios(document, &reference.p_first[range.clone()]);
        let ratios = soft_win_ratios(document, &run.p_first[range]);
        spearman_per_document.push(if document.candidates < 2 {
            None
        } else {
            crate::stats::spearman(&reference_ratios, &ratios)?
        });
    }
    Ok(Agreement {
        comparisons,
        max_abs_diff,
        same_decision: if comparisons == 0 {
            1.0
        } else {
            same as f64 / comparisons as f64
        },
        spearman_per_document,
    })
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

/// Run every context's full comparison set (template c1, coherence) once per strategy,
/// in the scorer calls `compare` makes (all contexts in one where the scorer batches
/// across contexts, see [`Scorer::batches_across_contexts`]).
/// `on_progress(strategy, done, comparisons)` is called after each comparison.
pub fn bench_pairwise(
    scorer: &mut DecoderScorer,
    contexts: &[Context],
    strategies: &[Strategy],
    on_progress: &mut dyn FnMut(Strategy, usize, usize),
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
    let fma_peak = scorer
        .model()
        .device()
        .is_cpu()
        .then(FmaPeakReport::measure);
    let flops_per_token = matmul_flops_per_token(scorer.model().config());
    let flops_per_key = attention_flops_per_key(scorer.model().config());
    let plans = contexts
        .iter()
        .map(|context| plan_context(scorer, context, &options, &labels))
        .collect::<Result<Vec<_>>>()?;
    let requests: Vec<LabelRequest> = plans
        .iter()
        .flat_map(|plan| plan.labels.requests().iter().cloned())
        .collect();
    let comparisons = requests.len();
    let documents = contexts
        .iter()
        .zip(&plans)
        .map(|(context, plan)| DocumentPairs {
            candidates: context.candidates.len(),
            pairs: plan.pairs.clone(),
        })
        .collect();
    let original = scorer.settings();
    let mut runs = Vec::with_capacity(strategies.len());
    for &strategy in strategies {
        let mut settings = original;
        settings.strategy = strategy;
        scorer.set_settings(settings);
        scorer.reset_stats();
        reset_peak_rss();
        crate::arch::llama::time_split::start();
        let start = Instant::now();
        // The calls `compare` makes: one for all documents where the scorer batches
        // across contexts (the level plan: one trie for the run), else one per document.
        let calls: Vec<usize> = if scorer.batches_across_contexts() {
            vec![comparisons]
        } else {
            plans.iter().map(|plan| plan.labels.len()).collect()
        };
        let mut p_a = vec![f64::NAN; comparisons];
        let (mut done, mut offset) = (0, 0);
        for length in calls {
            let call = &requests[offset..offset + length];
            scorer.label_logprobs_each(call, &mut |index, result| {
                p_a[offset + index] = first_wins(&result)?.0;
                done += 1;
                on_progress(strategy, done, comparisons);
                Ok(())
            })?;
            offset += length;
        }
        let seconds = start.elapsed().as_secs_f64();
        let recorded = crate::arch::llama::time_split::finish();
        if let Some(missing) = p_a.iter().position(|p| p.is_nan()) {
            bail!("the {strategy:?} run gave no result for comparison {missing}");
        }
        let stats = scorer.stats();
        let counted = scorer.plan() == crate::engine::decoder::tree_eval::Plan::Levels;
        runs.push(StrategyRun {
            strategy: strategy_name(strategy).to_string(),
            tokens: stats.tokens,
            forward_calls: stats.forward_calls,
            seconds,
            comparisons_per_second: comparisons as f64 / seconds,
            tokens_per_second: stats.tokens as f64 / seconds,
            effective_gflops: flops_per_token * stats.tokens as f64 / seconds / 1e9,
            attended_keys: stats.attended_keys,
            achieved_gflops: (flops_per_token * stats.tokens as f64
                + flops_per_key * stats.attended_keys as f64)
                / seconds
                / 1e9,
            peak_rss_bytes: peak_rss_bytes(),
            plan: scorer.plan().name().to_string(),
            ops_per_layer_pass_max: counted.then_some(stats.ops_per_layer_pass_max),
            uploads: counted.then_some(stats.uploads),
            downloads: counted.then_some(stats.downloads),
            time_split: TimeSplit::of(
                seconds,
                recorded,
                flops_per_token * stats.tokens as f64,
                flops_per_key * stats.attended_keys as f64,
            ),
            p_a,
        });
    }
    scorer.set_settings(original);
    let reference = runs
        .iter()
        .find(|r| r.strategy == "tree")
        .or(runs.last())
        .context("the benchmark ran no strategy")?;
    let rows = (reference.tokens as f64 / reference.forward_calls.max(1) as f64).round() as usize;
    let model_shapes = calibrate_model_shapes(scorer.model(), rows, CALIBRATION_REPEATS)?;
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
        fma_peak,
        model_shapes,
        matmul_parameters: (flops_per_token / 2.0).round() as u64,
        documents,
    })
}

/// Timed repeats of each calibration product (after one warm-up).
const CALIBRATION_REPEATS: usize = 5;

/// Floating-point operations of one token through the layers' matrix products.
pub fn matmul_flops_per_token(c: &crate::arch::llama::LlamaConfig) -> f64 {
    let q = c.num_heads * c.head_dim;
    let kv = c.num_kv_heads * c.head_dim;
    let per_layer =
        c.hidden_size * (q + 2 * kv) + q * c.hidden_size + 3 * c.hidden_size * c.intermediate_size;
    2.0 * (c.num_layers * per_layer) as f64
}

/// Floating-point operations of attention's two products for one query-key pair through
/// all layers: the score (a dot product of the head width) and the weighted value (as
/// many multiply-adds), for every query head.
pub fn attention_flops_per_key(c: &crate::arch::llama::LlamaConfig) -> f64 {
    4.0 * (c.num_heads * c.head_dim * c.num_layers) as f64
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
pub(super) fn reset_peak_rss() {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn saved(p_first: Vec<f64>) -> SavedProbabilities {
        SavedProbabilities {
            fingerprint: "x".into(),
            documents: vec![DocumentPairs {
                candidates: 3,
                pairs: vec![(0, 1), (1, 0), (0, 2), (2, 0), (1, 2), (2, 1)],
            }],
            p_first,
        }
    }

    #[test]
    fn a_time_split_is_its_parts_and_the_rest() {
        use crate::arch::llama::time_split::Split;
        use std::time::Duration;
        let recorded = Split {
            products: Duration::from_secs(6),
            attention: Duration::from_secs(3),
            ..Split::default()
        };
        let split = TimeSplit::of(10.0, recorded, 12e9, 1.5e9).expect("products were recorded");
        assert_eq!(
            (split.products, split.attention, split.rest),
            (6.0, 3.0, 1.0)
        );
        assert_eq!(split.fractions(), [0.6, 0.3, 0.1]);
        assert_eq!(
            (split.products_gflops, split.attention_gflops),
            (Some(2.0), Some(0.5))
        );
        // No tile path ran: no tile split.
        assert_eq!(split.tiles, None);
        let tiles = nlg_judge_kernels::timing::TileSplit {
            attention_calls: 2,
            ..Default::default()
        };
        let with_tiles = TimeSplit::of(10.0, Split { tiles, ..recorded }, 12e9, 1.5e9);
        assert_eq!(with_tiles.and_then(|s| s.tiles), Some(tiles));
        // Nothing on the buffer path: no split rather than a run of pure "rest".
        assert_eq!(TimeSplit::of(10.0, Split::default(), 12e9, 1.5e9), None);
    }

    #[test]
    fn soft_win_ratios_average_each_candidates_wins() {
        let run = saved(vec![0.9, 0.2, 0.6, 0.5, 0.7, 0.1]);
        let ratios = soft_win_ratios(&run.documents[0], &run.p_first);
        // Candidate 0: 0.9, 1-0.2, 0.6, 1-0.5 over four comparisons.
        let expected = [(0.9 + 0.8 + 0.6 + 0.5) / 4.0, (0.1 + 0.2 + 0.7 + 0.9) / 4.0];
        assert!((ratios[0] - expected[0]).abs() < 1e-12);
        assert!((ratios[1] - expected[1]).abs() < 1e-12);
    }

    #[test]
    fn agreement_counts_flipped_decisions_and_rank_changes() {
        let reference = saved(vec![0.9, 0.2, 0.6, 0.4, 0.7, 0.1]);
        let same = agreement(&reference, &reference).unwrap();
        assert_eq!(same.max_abs_diff, 0.0);
        assert_eq!(same.same_decision, 1.0);
        // Spearman of a ranking with itself is 1 up to rounding.
        assert!((same.min_spearman().unwrap() - 1.0).abs() < 1e-12);
        // One decision flips (0.6 -> 0.45) and candidates 0 and 1 swap ranks.
        let other = saved(vec![0.1, 0.8, 0.45, 0.4, 0.7, 0.1]);
        let result = agreement(&reference, &other).unwrap();
        assert!((result.max_abs_diff - 0.8).abs() < 1e-12);
        assert!((result.same_decision - 3.0 / 6.0).abs() < 1e-12);
        assert!(result.min_spearman().unwrap() < 1.0);
        let mut fewer = saved(vec![0.5; 6]);
        fewer.documents[0].candidates = 4;
        assert!(agreement(&reference, &fewer).is_err());
    }
}
