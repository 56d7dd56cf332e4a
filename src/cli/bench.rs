//! `nlg-judge bench`: measure the engine on real workloads.

use std::path::PathBuf;

use super::outputs::PlannedPaths;
use anyhow::{Context as _, Result};
use clap::{Args, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};

use super::model_args::ModelArgs;
use crate::bench::generate::{bench_generate, feedback_agreement, SavedFeedbacks};
use crate::bench::pairwise::{
    agreement, bench_pairwise, summeval_contexts, Agreement, PairwiseBench, SavedProbabilities,
};
use crate::data::find_shared_data_dir;
use crate::engine::decoder::tree_eval::Plan;
use crate::engine::Scorer as _;
use crate::engine::{load_decoder, Strategy};
use crate::judge::rubric::run::RubricMethod;
use crate::judge::rubric::{Rubric, RubricProtocol};
use crate::judge::Task;
use crate::runtime::resolve_model;

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
    /// Rubric grading with feedback on SummEval documents, as `score` runs its rubric
    /// method, nothing cached: every feedback written through the generation route (one
    /// batch, prompts in the prefix trie, all rows stepping together), every score read
    /// from its feedback's own state. Reports prompt tokens asked and computed, rows per
    /// decoding step, prefill / decode / scoring seconds, decode tokens per second and
    /// peak memory; a row budget of 1 runs one candidate at a time instead.
    Generate(GenerateArgs),
}

#[derive(Debug, Args)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub model: ModelArgs,

    /// Number of SummEval documents.
    #[arg(long, default_value_t = 1)]
    pub docs: usize,

    /// Candidates of each document (SummEval has 16), from the first.
    #[arg(long, default_value_t = 16)]
    pub candidates: usize,

    /// The rubric (a built-in name or a rubric file).
    #[arg(long, default_value = "coherence")]
    pub rubric: String,

    #[arg(long, value_name = "NAME|FILE", value_parser = super::values::parse_protocol,
          help = super::values::protocol_help("Rubric grading"))]
    pub protocol: Option<RubricProtocol>,

    /// Most tokens of each feedback.
    #[arg(long, default_value_t = 128)]
    pub max_feedback_tokens: usize,

    /// Rows one decoding step may carry (the rest wait and join as rows finish); 1 grades
    /// one candidate at a time. Default: the engine's row budget.
    #[arg(long)]
    pub rows: Option<usize>,

    /// Directory holding the shared human-judgement data (summeval/summeval.jsonl).
    #[arg(long, env = "NLG_JUDGE_DATA")]
    pub data_dir: Option<PathBuf>,

    /// Print JSON instead of lines.
    #[arg(long)]
    pub json: bool,

    /// Save the feedbacks and scores (JSON), to compare a later run with.
    #[arg(long)]
    pub save_feedbacks: Option<PathBuf>,

    /// Compare the feedbacks and scores with a file saved by --save-feedbacks: how many
    /// feedbacks are the same text, the largest score difference.
    #[arg(long)]
    pub compare_with: Option<PathBuf>,

    /// Write the feedback prompts as the model reads them (chat template applied; a JSON
    /// list of strings), for the peers harness (`../shared/bench/peers/genpeer.py`).
    #[arg(long)]
    pub save_prompts: Option<PathBuf>,
}

/// Which strategies to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    Naive,
    Tree,
    Both,
}

/// The trie plan, as `--plan` spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PlanArg {
    DepthFirst,
    Levels,
}

impl From<PlanArg> for Plan {
    fn from(plan: PlanArg) -> Self {
        match plan {
            PlanArg::DepthFirst => Plan::DepthFirst,
            PlanArg::Levels => Plan::Levels,
        }
    }
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

    /// How the tree strategy cuts the trie into forward passes: depth-first (sibling
    /// groups; the CPU's fast path) or levels (every node of one depth in one packed
    /// pass, ancestors read from a key/value arena; issue 38). Default: the model's own,
    /// depth-first but for bf16 on a GPU, which runs by levels only.
    #[arg(long, value_enum)]
    pub plan: Option<PlanArg>,

    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,

    /// Save the probabilities of the last strategy run (JSON), to compare a later run
    /// (another --precision) with.
    #[arg(long)]
    pub save_probabilities: Option<PathBuf>,

    /// Compare the last strategy's probabilities with a file saved by
    /// --save-probabilities (same --docs): largest |p - p_ref|, same decisions, Spearman
    /// of the soft win ratios per document.
    #[arg(long)]
    pub compare_with: Option<PathBuf>,
}

pub fn run(args: BenchArgs) -> Result<()> {
    match args.workload {
        Workload::Pairwise(args) => pairwise(args),
        Workload::Generate(args) => generate(args),
    }
}

fn generate(args: GenerateArgs) -> Result<()> {
    let (mut contexts, rubric) = (|| -> Result<_> {
        let data_dir = match args.data_dir.clone().or_else(find_shared_data_dir) {
            Some(dir) => dir,
            None => anyhow::bail!("no data directory: pass --data-dir (the shared data's path)"),
        };
        PlannedPaths::new()
            .maybe_input("--compare-with", args.compare_with.as_deref())
            .output("--save-feedbacks", args.save_feedbacks.as_deref())
            .output("--save-prompts", args.save_prompts.as_deref())
            .check()?;
        anyhow::ensure!(args.candidates > 0, "--candidates must be at least 1");
        anyhow::ensure!(
            args.max_feedback_tokens > 0,
            "--max-feedback-tokens must be at least 1"
        );
        let rubric = Rubric::load(&args.rubric, Task::Summary)?;
        Ok((summeval_contexts(&data_dir, args.docs)?, rubric))
    })()
    .map_err(super::input_error)?;
    for context in &mut contexts {
        context.candidates.truncate(args.candidates);
    }
    let options = args.model.load_options()?;
    let resolved = resolve_model(args.model.spec()?, &options.resolve)?;
    let mut scorer = load_decoder(&resolved, &options).with_context(|| {
        format!(
            "cannot load '{}' (the benchmark needs a decoder-only model)",
            resolved.name
        )
    })?;
    let method = RubricMethod::new(
        &scorer,
        rubric,
        args.protocol,
        Some(args.max_feedback_tokens),
        false,
    )
    .map_err(super::input_error)?;
    if let Some(path) = &args.save_prompts {
        let mut prompts = Vec::new();
        for context in &contexts {
            for candidate in &context.candidates {
                let request = method.feedback_request(
                    &scorer,
                    context,
                    candidate,
                    crate::judge::rubric::protocol::Start::Feedback(""),
                    args.max_feedback_tokens,
                )?;
                prompts.push(scorer.render(&request.prompt)?.input);
            }
        }
        std::fs::write(path, serde_json::to_string(&prompts)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let rows = args.rows.unwrap_or(scorer.settings().budget.max_batch_rows);
    let result = bench_generate(&mut scorer, &contexts, &method, rows)?;
    let compared = match &args.compare_with {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            let reference: SavedFeedbacks = serde_json::from_str(&text)
                .with_context(|| format!("{} is not a saved feedbacks file", path.display()))?;
            Some(
                feedback_agreement(&reference, &result.feedbacks)
                    .with_context(|| format!("cannot compare with {}", path.display()))?,
            )
        }
        None => None,
    };
    if let Some(path) = &args.save_feedbacks {
        std::fs::write(path, serde_json::to_string(&result.feedbacks)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let s = &result.stats;
    if args.json {
        let mut summary = serde_json::json!({
            "model": resolved.name,
            "protocol": method.protocol.to_string(),
            "candidates": result.candidates,
            "rows_at_once": result.rows_at_once,
            "max_feedback_tokens": args.max_feedback_tokens,
            "seconds": result.seconds,
            "seconds_prefill": s.seconds_prefill,
            "seconds_decode": s.seconds_decode,
            "seconds_step": s.seconds_step,
            "seconds_score": result.seconds_score,
            "seconds_products": result.seconds_products,
            "seconds_attention": result.seconds_attention,
            "prompt_tokens": s.prompt_tokens,
            "prompt_tokens_computed": s.prompt_tokens_computed,
            "generated_tokens": s.generated_tokens,
            "decode_steps": s.decode_steps,
            "rows_per_step": s.rows_per_step,
            "tiled_keys": s.tiled_keys,
            "follow_ups": s.follow_ups,
            "follow_up_tokens": s.follow_up_tokens,
            "decode_tokens_per_second": s.decode_tokens_per_second,
            "peak_rss_bytes": result.peak_rss_bytes,
            "cpu": nlg_judge_kernels::cpu::paths(),
        });
        if let Some(agreement) = compared {
            summary["compared"] = serde_json::to_value(agreement)?;
        }
        println!("{}", serde_json::to_string_pretty(&summary)?);
        return Ok(());
    }
    println!(
        "{} candidates, {} protocol, at most {} feedback tokens, {} rows at once: {:.2} s",
        result.candidates,
        method.protocol,
        args.max_feedback_tokens,
        result.rows_at_once,
        result.seconds
    );
    println!(
        "prompts: {} tokens asked, {} computed ({:.1}x shared); {:.2} s",
        s.prompt_tokens,
        s.prompt_tokens_computed,
        s.prompt_tokens as f64 / s.prompt_tokens_computed.max(1) as f64,
        s.seconds_prefill
    );
    println!(
        "decoding: {} tokens in {} steps ({:.1} rows a step), {:.2} s in passes + {:.2} s \
         between them, {:.1} tokens/s{}",
        s.generated_tokens,
        s.decode_steps,
        s.rows_per_step,
        s.seconds_decode,
        s.seconds_step,
        s.decode_tokens_per_second,
        if s.tiled_keys {
            "; keys kept tiled for attention"
        } else {
            ""
        }
    );
    println!(
        "scores: {} read from their feedback's state ({} tokens run); {:.2} s outside the \
         generation route",
        s.follow_ups, s.follow_up_tokens, result.seconds_score
    );
    if result.seconds_products + result.seconds_attention > 0.0 {
        println!(
            "of the whole run: {:.2} s in the layers' matrix products, {:.2} s in attention, \
             {:.2} s elsewhere (the output head, sampling, bookkeeping)",
            result.seconds_products,
            result.seconds_attention,
            (result.seconds - result.seconds_products - result.seconds_attention).max(0.0)
        );
    }
    if let Some(bytes) = result.peak_rss_bytes {
        println!("peak memory: {:.0} MiB", bytes as f64 / (1 << 20) as f64);
    }
    if let Some(agreement) = compared {
        println!(
            "against the saved run: {}/{} feedbacks the same text, largest score difference {:.2e}",
            agreement.same_text, agreement.feedbacks, agreement.max_score_difference
        );
    }
    Ok(())
}

fn pairwise(args: PairwiseArgs) -> Result<()> {
    let contexts = (|| -> Result<_> {
        let data_dir = match args.data_dir.clone().or_else(find_shared_data_dir) {
            Some(dir) => dir,
            None => anyhow::bail!("no data directory: pass --data-dir (the shared data's path)"),
        };
        PlannedPaths::new()
            .maybe_input("--compare-with", args.compare_with.as_deref())
            .output("--save-probabilities", args.save_probabilities.as_deref())
            .check()?;
        summeval_contexts(&data_dir, args.docs)
    })()
    .map_err(super::input_error)?;
    let options = args.model.load_options()?;
    let resolved = resolve_model(args.model.spec()?, &options.resolve)?;
    let mut scorer = load_decoder(&resolved, &options).with_context(|| {
        format!(
            "cannot load '{}' (the benchmark needs a decoder-only model)",
            resolved.name
        )
    })?;
    if let Some(plan) = args.plan {
        scorer.set_plan(plan.into());
    }
    let strategies: Vec<Strategy> = match args.mode {
        Mode::Naive => vec![Strategy::Naive],
        Mode::Tree => vec![Strategy::Tree],
        Mode::Both => vec![Strategy::Naive, Strategy::Tree],
    };
    let bar = ProgressBar::new(0);
    if let Ok(style) =
        ProgressStyle::with_template("{elapsed_precise} [{wide_bar}] {pos}/{len} {msg}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    let runs = strategies.len() as u64;
    let result = bench_pairwise(
        &mut scorer,
        &contexts,
        &strategies,
        &mut |strategy, _, comparisons| {
            bar.set_length(runs * comparisons as u64);
            bar.set_message(format!("comparisons ({strategy:?})"));
            bar.inc(1);
        },
    )?;
    bar.finish_and_clear();
    let last = result
        .runs
        .last()
        .context("the benchmark ran no strategy")?;
    let saved = SavedProbabilities {
        fingerprint: scorer.info().fingerprint.clone(),
        documents: result.documents.clone(),
        p_first: last.p_a.clone(),
    };
    let compared = match &args.compare_with {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            let reference: SavedProbabilities = serde_json::from_str(&text)
                .with_context(|| format!("{} is not a saved probabilities file", path.display()))?;
            Some(
                agreement(&reference, &saved)
                    .with_context(|| format!("cannot compare with {}", path.display()))?,
            )
        }
        None => None,
    };
    if let Some(path) = &args.save_probabilities {
        std::fs::write(path, serde_json::to_string(&saved)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let precision_path = super::model_args::precision_path_here(options.precision);
    let kernel_paths = nlg_judge_kernels::cpu::paths();
    // On a GPU the CPU's instruction paths do not apply: candle's kernels and cuBLAS do
    // the work.
    let device = scorer.model().device();
    let accelerator = match device.location() {
        candle_core::DeviceLocation::Cpu => None,
        candle_core::DeviceLocation::Cuda { gpu_id } => Some(format!("cuda:{gpu_id}")),
        candle_core::DeviceLocation::Metal { gpu_id } => Some(format!("metal:{gpu_id}")),
    };
    if args.json {
        let mut summary = json_summary(&result);
        summary["precision"] = serde_json::json!(options.precision.as_str());
        summary["instruction_path"] = match &accelerator {
            Some(location) => serde_json::json!(location),
            None => serde_json::json!(precision_path.path),
        };
        summary["kernel_paths"] = serde_json::json!(kernel_paths
            .iter()
            .map(|(kernel, path)| (kernel.to_string(), serde_json::json!(path)))
            .collect::<serde_json::Map<_, _>>());
        summary["cpu_features"] =
            serde_json::json!(nlg_judge_kernels::cpu::CpuFeatures::detected().names());
        summary["cpu_level"] = serde_json::json!(std::env::var(nlg_judge_kernels::cpu::ENV).ok());
        summary["amx_unavailable"] =
            serde_json::json!(nlg_judge_kernels::gemm::amx::status().reason);
        // Whether the segment attention's products ran on AMX tiles (bf16 where the
        // tiles run), else the f32 vector kernel.
        summary["attention_on_tiles"] =
            serde_json::json!(scorer.model().attention_tiles().is_some());
        summary["agreement"] = serde_json::to_value(&compared)?;
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        print!("{}", table(&result, &resolved.name));
        if let Some(location) = &accelerator {
            println!(
                "precision {} on {location}: candle's GPU kernels and its BLAS (the CPU's \
                 instruction paths do not apply)",
                options.precision.as_str()
            );
        } else {
            println!(
                "precision {}: instruction path {} ({}); kernels: {}{}",
                options.precision.as_str(),
                precision_path.path,
                precision_path.description,
                nlg_judge_kernels::cpu::paths_used(),
                match std::env::var(nlg_judge_kernels::cpu::ENV) {
                    Ok(level) if !level.trim().is_empty() => {
                        format!(" ({}={level})", nlg_judge_kernels::cpu::ENV)
                    }
                    _ => String::new(),
                }
            );
        }
        if let Some(agreement) = &compared {
            println!("{}", agreement_line(agreement));
        }
    }
    Ok(())
}

fn agreement_line(agreement: &Agreement) -> String {
    let rhos: Vec<f64> = agreement
        .spearman_per_document
        .iter()
        .flatten()
        .copied()
        .collect();
    format!(
        "against the reference: largest |p - p_ref| = {:.4}, same decision {}/{} ({:.2}%), \
         Spearman of soft win ratios per document min {:.4} mean {:.4}",
        agreement.max_abs_diff,
        (agreement.same_decision * agreement.comparisons as f64).round(),
        agreement.comparisons,
        100.0 * agreement.same_decision,
        agreement.min_spearman().unwrap_or(f64::NAN),
        rhos.iter().sum::<f64>() / rhos.len().max(1) as f64,
    )
}

/// The flat JSON the issue asks for.
fn json_summary(result: &PairwiseBench) -> serde_json::Value {
    let naive = result.run(Strategy::Naive);
    let tree = result.run(Strategy::Tree);
    let split = tree.and_then(|r| r.time_split);
    let fractions = split.map(|s| s.fractions());
    let peak = result.fma_peak.as_ref();
    let attention_gflops = split.and_then(|s| s.attention_gflops);
    // Why the attention's share of the AMX peak is null, when it is.
    let amx_missing = match (attention_gflops, peak.and_then(|p| p.amx_gflops)) {
        (Some(_), Some(_)) => None,
        (None, _) => Some("no time split: the tree run's passes were not timed".to_string()),
        (Some(_), None) => Some(format!(
            "no AMX peak measured: {}",
            nlg_judge_kernels::gemm::amx::status()
                .reason
                .clone()
                .unwrap_or_else(|| "the tiles' peak could not be measured".into())
        )),
    };
    let mut summary = serde_json::json!({
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
        "fraction_of_calibration_tree": tree.map(|r| r.effective_gflops / result.calibration_gflops),
        "calibration_model_shapes_gflops": result.model_shapes.gflops,
        "calibration_model_shapes_rows": result.model_shapes.rows,
        "calibration_model_shapes_on_buffers": result.model_shapes.on_buffers,
        "calibration_model_shapes": result.model_shapes.products,
        "weights_used": weights_used(result),
        "matmul_parameters": result.matmul_parameters,
        "fraction_of_model_shapes_tree": tree.map(|r| r.effective_gflops / result.model_shapes.gflops),
        "attended_keys_tree": tree.map(|r| r.attended_keys),
        "achieved_gflops_tree": tree.map(|r| r.achieved_gflops),
        "peak_fma_gflops": result.fma_peak.as_ref().map(|p| p.gflops),
        "peak_fma_path": result.fma_peak.as_ref().map(|p| p.path.clone()),
        "peak_fma_threads": result.fma_peak.as_ref().map(|p| p.threads),
        "peak_amx_gflops": result.fma_peak.as_ref().and_then(|p| p.amx_gflops),
        "peak_bf16_dot_gflops": result.fma_peak.as_ref().and_then(|p| p.bf16_dot_gflops),
        "fraction_of_bf16_dot_peak_tree": tree
            .zip(result.fma_peak.as_ref().and_then(|p| p.bf16_dot_gflops))
            .map(|(r, peak)| r.achieved_gflops / peak),
        "fraction_of_peak_tree": tree.zip(result.fma_peak.as_ref()).map(|(r, p)| r.achieved_gflops / p.gflops),
        "peak_rss_bytes": result.runs.iter().filter_map(|r| r.peak_rss_bytes).max(),
        "peak_rss_bytes_naive": naive.and_then(|r| r.peak_rss_bytes),
        "peak_rss_bytes_tree": tree.and_then(|r| r.peak_rss_bytes),
        "plan": tree.or(naive).map(|r| r.plan.clone()),
        "passes_tree": tree.map(|r| r.forward_calls),
        "ops_per_layer_pass_max": tree.and_then(|r| r.ops_per_layer_pass_max),
        "uploads_tree": tree.and_then(|r| r.uploads),
        "downloads_tree": tree.and_then(|r| r.downloads),
    });
    // The time split (a second object: one literal this long exceeds the macro's
    // recursion limit).
    let split_fields = serde_json::json!({
        "seconds_products_tree": split.map(|s| s.products),
        "seconds_attention_tree": split.map(|s| s.attention),
        "seconds_rest_tree": split.map(|s| s.rest),
        "fraction_products_tree": fractions.map(|f| f[0]),
        "fraction_attention_tree": fractions.map(|f| f[1]),
        "fraction_rest_tree": fractions.map(|f| f[2]),
        "products_gflops_tree": split.and_then(|s| s.products_gflops),
        "attention_gflops_tree": attention_gflops,
        "fraction_of_peak_attention_tree": attention_gflops
            .zip(peak.map(|p| p.gflops))
            .map(|(a, p)| a / p),
        "fraction_of_bf16_dot_peak_attention_tree": attention_gflops
            .zip(peak.and_then(|p| p.bf16_dot_gflops))
            .map(|(a, p)| a / p),
        "fraction_of_amx_peak_attention_tree": attention_gflops
            .zip(peak.and_then(|p| p.amx_gflops))
            .map(|(a, p)| a / p),
        "fraction_of_amx_peak_attention_tree_missing": amx_missing,
    });
    for fields in [
        split_fields,
        tile_fields(split.and_then(|s| s.tiles).as_ref()),
    ] {
        if let (Some(all), serde_json::Value::Object(more)) = (summary.as_object_mut(), fields) {
            all.extend(more);
        }
    }
    summary
}

/// The tile kernels' split of the tree run (issue 61), flat: per part
/// (`nlg_judge_kernels::timing::Part`) its seconds (`seconds_attention_tiles_tree`, ...:
/// the kernel's wall seconds in proportion to the part's ticks, summed over threads) and
/// its ticks (`ticks_attention_tiles_tree`, ...); the kernels' calls and wall seconds;
/// which tiles ran (`tile_unit_tree`: `hardware`, or `model` where `NLG_JUDGE_TILES=model`
/// put the portable model in their place). All null where no tile path ran.
fn tile_fields(tiles: Option<&nlg_judge_kernels::timing::TileSplit>) -> serde_json::Value {
    use nlg_judge_kernels::timing::Part;
    let unit = tiles.map(|_| {
        if nlg_judge_kernels::gemm::amx::model_forced() {
            "model"
        } else {
            "hardware"
        }
    });
    let mut fields = serde_json::json!({
        "tile_unit_tree": unit,
        "tile_attention_calls_tree": tiles.map(|t| t.attention_calls),
        "tile_product_calls_tree": tiles.map(|t| t.product_calls),
        "seconds_tile_attention_calls_tree": tiles.map(|t| t.attention_seconds),
        "seconds_tile_product_calls_tree": tiles.map(|t| t.product_seconds),
    });
    if let Some(all) = fields.as_object_mut() {
        for part in Part::ALL {
            all.insert(
                format!("seconds_{}_tree", part.name()),
                serde_json::json!(tiles.map(|t| t.seconds(part))),
            );
            all.insert(
                format!("ticks_{}_tree", part.name()),
                serde_json::json!(tiles.map(|t| t.ticks(part))),
            );
        }
    }
    fields
}

/// The tile kernels' split in words: each kernel's seconds and its parts' shares.
fn tile_line(strategy: &str, tiles: &nlg_judge_kernels::timing::TileSplit) -> String {
    use nlg_judge_kernels::timing::Part;
    let unit = if nlg_judge_kernels::gemm::amx::model_forced() {
        "the portable model standing in"
    } else {
        "AMX"
    };
    let parts = |parts: &[(Part, &str)]| {
        parts
            .iter()
            .map(|&(part, name)| format!("{name} {:.1}%", 100.0 * tiles.share(part)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "{strategy} tiles ({unit}): tile attention {:.2} s ({}), tile products {:.2} s ({})\n",
        tiles.attention_seconds,
        parts(&[
            (Part::AttentionTiles, "tile instructions"),
            (Part::AttentionSoftmax, "softmax"),
            (Part::AttentionPacking, "packing"),
            (Part::AttentionOther, "other"),
        ]),
        tiles.product_seconds,
        parts(&[
            (Part::ProductTiles, "tile instructions"),
            (Part::ProductConversion, "conversion"),
            (Part::ProductOther, "other"),
        ]),
    )
}

/// The distinct ways block 0's weights are held, e.g. `f32` or `q4k+q6k`.
fn weights_used(result: &PairwiseBench) -> String {
    let mut kinds: Vec<&str> = Vec::new();
    for product in &result.model_shapes.products {
        if !kinds.contains(&product.weights.as_str()) {
            kinds.push(&product.weights);
        }
    }
    kinds.join("+")
}

fn table(result: &PairwiseBench, model: &str) -> String {
    let mut out = format!(
        "{model}: {} SummEval document(s), {} comparisons; CPU {}\ncalibration GEMM (1024^3 f32): {:.1} GFLOP/s; one block's products at {} rows ({}): {:.1} GFLOP/s\n{}{:<8} {:>10} {:>9} {:>10} {:>13} {:>9} {:>8} {:>7} {:>8} {:>9} {:>7} {:>12}\n",
        result.docs,
        result.comparisons,
        crate::runtime::cpu_features(),
        result.calibration_gflops,
        result.model_shapes.rows,
        result
            .model_shapes
            .products
            .iter()
            .map(|p| format!("{} {}x{} {}", p.name, p.out_features, p.in_features, p.weights))
            .collect::<Vec<_>>()
            .join(", "),
        result.model_shapes.gflops,
        match &result.fma_peak {
            Some(peak) => format!(
                "multiply-add peak ({}, {} threads): {:.1} GFLOP/s{}; '+attn' counts attention's products too, '% FMA' is that of the peak\n",
                peak.path,
                peak.threads,
                peak.gflops,
                peak.amx_gflops
                    .map(|amx| format!(" (AMX bf16 tiles: {amx:.1} GFLOP/s)"))
                    .unwrap_or_default()
                    + &peak
                        .bf16_dot_gflops
                        .map(|dot| format!(" (AVX512-BF16 vdpbf16ps: {dot:.1} GFLOP/s)"))
                        .unwrap_or_default()
            ),
            None => String::new(),
        },
        "strategy", "tokens", "forwards", "seconds", "comparisons/s", "tokens/s", "GFLOP/s", "% GEMM", "% shapes", "+attn", "% FMA", "peak RSS MiB"
    );
    for run in &result.runs {
        out.push_str(&format!(
            "{:<8} {:>10} {:>9} {:>10.2} {:>13.2} {:>9.0} {:>8.1} {:>7.1} {:>8.1} {:>9.1} {:>7} {:>12}\n",
            run.strategy,
            run.tokens,
            run.forward_calls,
            run.seconds,
            run.comparisons_per_second,
            run.tokens_per_second,
            run.effective_gflops,
            100.0 * run.effective_gflops / result.calibration_gflops,
            100.0 * run.effective_gflops / result.model_shapes.gflops,
            run.achieved_gflops,
            result
                .fma_peak
                .as_ref()
                .map(|p| format!("{:.1}", 100.0 * run.achieved_gflops / p.gflops))
                .unwrap_or_else(|| "-".into()),
            run.peak_rss_bytes
                .map(|b| (b >> 20).to_string())
                .unwrap_or_else(|| "-".into())
        ));
    }
    for run in &result.runs {
        if let Some(split) = &run.time_split {
            let [products, attention, rest] = split.fractions();
            let rate = |gflops: Option<f64>| {
                gflops
                    .map(|g| format!(", {g:.1} GFLOP/s"))
                    .unwrap_or_default()
            };
            out.push_str(&format!(
                "{} time: layers' products {:.2} s ({:.1}%{}), attention kernel {:.2} s \
                 ({:.1}%{}), rest {:.2} s ({:.1}%: norms, rotary, gating, head, bookkeeping)\n",
                run.strategy,
                split.products,
                100.0 * products,
                rate(split.products_gflops),
                split.attention,
                100.0 * attention,
                rate(split.attention_gflops),
                split.rest,
                100.0 * rest,
            ));
            if let Some(tiles) = &split.tiles {
                out.push_str(&tile_line(&run.strategy, tiles));
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::calibration::{ProductTiming, ShapeCalibration};

    fn run(strategy: &str, gflops: f64) -> crate::bench::pairwise::StrategyRun {
        crate::bench::pairwise::StrategyRun {
            strategy: strategy.into(),
            tokens: 100,
            forward_calls: 4,
            seconds: 2.0,
            comparisons_per_second: 1.0,
            tokens_per_second: 50.0,
            effective_gflops: gflops,
            attended_keys: 500,
            achieved_gflops: gflops + 2.0,
            peak_rss_bytes: Some(1 << 20),
            plan: "levels".into(),
            ops_per_layer_pass_max: Some(30),
            uploads: Some(17),
            downloads: Some(4),
            time_split: (strategy == "tree").then_some(crate::bench::pairwise::TimeSplit {
                products: 1.0,
                attention: 0.5,
                rest: 0.5,
                products_gflops: Some(6.0),
                attention_gflops: Some(3.2),
                tiles: None,
            }),
            p_a: Vec::new(),
        }
    }

    #[test]
    fn json_reports_both_calibrations_and_the_fractions() {
        let product = |name: &str, weights: &str| ProductTiming {
            name: name.into(),
            out_features: 8,
            in_features: 4,
            weights: weights.into(),
            flops: 1.0,
            seconds: 1.0,
            gflops: 1e-9,
        };
        let result = PairwiseBench {
            docs: 1,
            comparisons: 2,
            runs: vec![run("naive", 3.0), run("tree", 6.0)],
            max_abs_diff: Some(0.0),
            calibration_gflops: 24.0,
            fma_peak: Some(crate::bench::pairwise::FmaPeakReport {
                path: "avx2 fma (256-bit)".into(),
                threads: 2,
                gflops: 32.0,
                gflops_per_thread: 16.0,
                amx_gflops: Some(6400.0),
                bf16_dot_gflops: Some(128.0),
            }),
            model_shapes: ShapeCalibration {
                rows: 25,
                on_buffers: false,
                products: vec![product("qkv", "q4k"), product("down", "q6k")],
                gflops: 12.0,
            },
            matmul_parameters: 1234,
            documents: Vec::new(),
        };
        let json = json_summary(&result);
        assert_eq!(json["calibration_gflops"], 24.0);
        assert_eq!(json["calibration_model_shapes_gflops"], 12.0);
        assert_eq!(json["calibration_model_shapes_rows"], 25);
        assert_eq!(json["fraction_of_model_shapes_tree"], 0.5);
        assert_eq!(json["fraction_of_calibration_tree"], 0.25);
        assert_eq!(json["weights_used"], "q4k+q6k");
        assert_eq!(json["matmul_parameters"], 1234);
        assert_eq!(json["calibration_model_shapes"][1]["name"], "down");
        assert_eq!(json["attended_keys_tree"], 500);
        assert_eq!(json["plan"], "levels");
        assert_eq!(json["passes_tree"], 4);
        assert_eq!(json["ops_per_layer_pass_max"], 30);
        assert_eq!(
            (json["uploads_tree"].clone(), json["downloads_tree"].clone()),
            (17.into(), 4.into())
        );
        assert_eq!(json["achieved_gflops_tree"], 8.0);
        assert_eq!(json["peak_fma_gflops"], 32.0);
        assert_eq!(json["peak_fma_path"], "avx2 fma (256-bit)");
        assert_eq!(json["fraction_of_peak_tree"], 0.25);
        assert_eq!(json["peak_amx_gflops"], 6400.0);
        assert_eq!(json["peak_bf16_dot_gflops"], 128.0);
        assert_eq!(json["fraction_of_bf16_dot_peak_tree"], 0.0625);
        assert_eq!(json["seconds_products_tree"], 1.0);
        assert_eq!(json["seconds_attention_tree"], 0.5);
        assert_eq!(json["seconds_rest_tree"], 0.5);
        assert_eq!(json["fraction_products_tree"], 0.5);
        assert_eq!(json["fraction_attention_tree"], 0.25);
        assert_eq!(json["fraction_rest_tree"], 0.25);
        assert_eq!(json["products_gflops_tree"], 6.0);
        assert_eq!(json["attention_gflops_tree"], 3.2);
        assert_eq!(json["fraction_of_peak_attention_tree"], 0.1);
        assert_eq!(json["fraction_of_bf16_dot_peak_attention_tree"], 0.025);
        let amx = json["fraction_of_amx_peak_attention_tree"].as_f64();
        assert!(
            (amx.expect("an AMX peak") - 0.0005).abs() < 1e-15,
            "{amx:?}"
        );
        assert!(json["fraction_of_amx_peak_attention_tree_missing"].is_null());
        let text = table(&result, "m");
        assert!(text.contains("at 25 rows (qkv 8x4 q4k, down 8x4 q6k): 12.0 GFLOP/s"));
        assert!(text.contains(
            "multiply-add peak (avx2 fma (256-bit), 2 threads): 32.0 GFLOP/s (AMX bf16 tiles: \
             6400.0 GFLOP/s) (AVX512-BF16 vdpbf16ps: 128.0 GFLOP/s)"
        ));
        let tree_row = text
            .lines()
            .find(|l| l.starts_with("tree "))
            .expect("a tree row");
        assert!(tree_row.contains("     8.0    25.0 "), "{tree_row}");
        assert!(text.contains(
            "tree time: layers' products 1.00 s (50.0%, 6.0 GFLOP/s), attention kernel 0.50 s \
             (25.0%, 3.2 GFLOP/s), rest 0.50 s (25.0%"
        ));
        assert!(!text.contains("naive time:"), "no split recorded for naive");

        // No AMX peak: the attention's share of it is null, and the JSON says why.
        let mut no_amx = result.clone();
        if let Some(peak) = no_amx.fma_peak.as_mut() {
            peak.amx_gflops = None;
        }
        let json = json_summary(&no_amx);
        assert!(json["fraction_of_amx_peak_attention_tree"].is_null());
        let why = json["fraction_of_amx_peak_attention_tree_missing"].as_str();
        assert!(
            why.is_some_and(|w| w.starts_with("no AMX peak measured: ")),
            "{why:?}"
        );
        // No tile path ran: the tile fields are there, null.
        for key in [
            "tile_unit_tree",
            "seconds_attention_tiles_tree",
            "ticks_products_tiles_tree",
        ] {
            assert!(json.get(key).is_some_and(|v| v.is_null()), "{key}");
        }
        assert!(!text.contains("tree tiles"));
        // A tile split: each part's seconds in proportion to its ticks.
        let mut tiled = result.clone();
        let mut tiles = nlg_judge_kernels::timing::TileSplit {
            attention_seconds: 2.0,
            product_seconds: 4.0,
            attention_calls: 3,
            product_calls: 5,
            ..Default::default()
        };
        use nlg_judge_kernels::timing::Part;
        for (part, ticks) in [
            (Part::AttentionTiles, 100),
            (Part::AttentionSoftmax, 300),
            (Part::ProductTiles, 90),
            (Part::ProductConversion, 10),
        ] {
            tiles.ticks[part as usize] = ticks;
        }
        for run in &mut tiled.runs {
            if let Some(split) = run.time_split.as_mut() {
                split.tiles = Some(tiles);
            }
        }
        let json = json_summary(&tiled);
        assert_eq!(json["seconds_attention_tiles_tree"], 0.5);
        assert_eq!(json["seconds_attention_softmax_tree"], 1.5);
        assert_eq!(json["seconds_attention_packing_tree"], 0.0);
        assert_eq!(json["seconds_products_tiles_tree"], 3.6);
        assert_eq!(json["ticks_products_conversion_tree"], 10);
        assert_eq!(json["tile_attention_calls_tree"], 3);
        assert_eq!(json["seconds_tile_product_calls_tree"], 4.0);
        assert!(json["tile_unit_tree"].is_string());
        let text = table(&tiled, "m");
        assert!(
            text.contains("tile attention 2.00 s (tile instructions 25.0%, softmax 75.0%"),
            "{text}"
        );
        // No split (the passes were not timed): null too, for that reason.
        let mut untimed = result;
        untimed.runs.iter_mut().for_each(|r| r.time_split = None);
        let json = json_summary(&untimed);
        assert!(json["seconds_attention_tree"].is_null());
        assert_eq!(
            json["fraction_of_amx_peak_attention_tree_missing"],
            "no time split: the tree run's passes were not timed"
        );
    }
}
