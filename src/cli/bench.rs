//! `nlg-judge bench`: measure the engine on real workloads.

use std::path::PathBuf;

use anyhow::{Context as _, Result};
use clap::{Args, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};

use super::model_args::ModelArgs;
use crate::data::find_shared_data_dir;
use crate::engine::Strategy;
use crate::judge::pairwise::bench::{bench_pairwise, summeval_contexts, PairwiseBench};
use crate::runtime::{load_decoder, resolve_model};

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub workload: Workload,
}

#[derive(Debug, Subcommand)]
pub enum Workload {
    /// All N(N-1) comparisons of SummEval documents (template c1), evaluated prompt by
    /// prompt (naive) and as one prefix trie (tree), in one process.
    Pairwise(PairwiseArgs),
}

/// Which strategies to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    Naive,
    Tree,
    Both,
}

#[derive(Debug, Args)]
pub struct PairwiseArgs {
    #[command(flatten)]
    pub model: ModelArgs,

    /// Number of SummEval documents (16 summaries, 240 comparisons each).
    #[arg(long, default_value_t = 1)]
    pub docs: usize,

    /// Strategies to run.
    #[arg(long, value_enum, default_value_t = Mode::Both)]
    pub mode: Mode,

    /// Directory holding the shared human-judgement data (summeval/summeval.jsonl).
    #[arg(long, env = "NLG_JUDGE_DATA")]
    pub data_dir: Option<PathBuf>,

    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: BenchArgs) -> Result<()> {
    match args.workload {
        Workload::Pairwise(args) => pairwise(args),
    }
}

fn pairwise(args: PairwiseArgs) -> Result<()> {
    let data_dir = match args.data_dir.clone().or_else(find_shared_data_dir) {
        Some(dir) => dir,
        None => anyhow::bail!("no data directory: pass --data-dir (the shared data's path)"),
    };
    let contexts = summeval_contexts(&data_dir, args.docs)?;
    let options = args.model.load_options()?;
    let resolved = resolve_model(&args.model.model, &options.resolve)?;
    let mut scorer = load_decoder(&resolved, &options).with_context(|| {
        format!(
            "cannot load '{}' (the benchmark needs a decoder-only model)",
            resolved.name
        )
    })?;
    let strategies: Vec<Strategy> = match args.mode {
        Mode::Naive => vec![Strategy::Naive],
        Mode::Tree => vec![Strategy::Tree],
        Mode::Both => vec![Strategy::Naive, Strategy::Tree],
    };
    let bar = ProgressBar::new((strategies.len() * contexts.len()) as u64);
    if let Ok(style) =
        ProgressStyle::with_template("{elapsed_precise} [{wide_bar}] {pos}/{len} {msg}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    let result = bench_pairwise(&mut scorer, &contexts, &strategies, &mut |strategy, _| {
        bar.set_message(format!("documents ({strategy:?})"));
        bar.inc(1);
    })?;
    bar.finish_and_clear();
    if args.json {
        println!("{}", serde_json::to_string(&json_summary(&result))?);
    } else {
        print!("{}", table(&result, &resolved.name));
    }
    Ok(())
}

/// The flat JSON the issue asks for.
fn json_summary(result: &PairwiseBench) -> serde_json::Value {
    let naive = result.run(Strategy::Naive);
    let tree = result.run(Strategy::Tree);
    serde_json::json!({
        "docs": result.docs,
        "comparisons": result.comparisons,
        "tokens_naive": naive.map(|r| r.tokens),
        "tokens_tree": tree.map(|r| r.tokens),
        "seconds_naive": naive.map(|r| r.seconds),
        "seconds_tree": tree.map(|r| r.seconds),
        "max_abs_diff": result.max_abs_diff,
        "tokens_per_second_tree": tree.map(|r| r.tokens_per_second),
        "effective_gflops_tree": tree.map(|r| r.effective_gflops),
        "calibration_gflops": result.calibration_gflops,
        "peak_rss_bytes": result.runs.iter().filter_map(|r| r.peak_rss_bytes).max(),
        "peak_rss_bytes_naive": naive.and_then(|r| r.peak_rss_bytes),
        "peak_rss_bytes_tree": tree.and_then(|r| r.peak_rss_bytes),
    })
}

fn table(result: &PairwiseBench, model: &str) -> String {
    let mut out = format!(
        "{model}: {} SummEval document(s), {} comparisons; CPU {}\ncalibration GEMM (1024^3 f32): {:.1} GFLOP/s\n{:<8} {:>10} {:>9} {:>10} {:>13} {:>9} {:>8} {:>7} {:>12}\n",
        result.docs,
        result.comparisons,
        crate::runtime::cpu_features(),
        result.calibration_gflops,
        "strategy", "tokens", "forwards", "seconds", "comparisons/s", "tokens/s", "GFLOP/s", "% peak", "peak RSS MiB"
    );
    for run in &result.runs {
        out.push_str(&format!(
            "{:<8} {:>10} {:>9} {:>10.2} {:>13.2} {:>9.0} {:>8.1} {:>7.1} {:>12}\n",
            run.strategy,
            run.tokens,
            run.forward_calls,
            run.seconds,
            run.comparisons_per_second,
            run.tokens_per_second,
            run.effective_gflops,
            100.0 * run.effective_gflops / result.calibration_gflops,
            run.peak_rss_bytes
                .map(|b| (b >> 20).to_string())
                .unwrap_or_else(|| "-".into())
        ));
    }
    if let (Some(naive), Some(tree)) = (result.run(Strategy::Naive), result.run(Strategy::Tree)) {
        out.push_str(&format!(
            "tree/naive: tokens 1/{:.2}, wall time 1/{:.2}; largest |p_tree - p_naive| = {:.2e}\n",
            naive.tokens as f64 / tree.tokens as f64,
            naive.seconds / tree.seconds,
            result.max_abs_diff.unwrap_or(f64::NAN)
        ));
    }
    out
}
