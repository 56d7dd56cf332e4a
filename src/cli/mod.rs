//! Command-line front end: clap argument structs, and one module per subcommand.

pub mod compare;
pub mod compare_table;
pub mod convert;
pub mod correlate;
pub mod dhp;

use anyhow::Result;
use clap::{Parser, Subcommand};

pub mod bench;
pub mod cache;
pub mod cache_args;
pub mod jury;
pub mod labels;
pub mod merge;
pub mod metric;
pub mod model_args;
pub mod models;
pub mod outputs;
pub mod paraphrase;
pub mod pararef;
pub mod pararef_report;
pub mod progress;
pub mod reproduce;
pub mod score;
pub mod serve;
pub mod shard_args;
pub mod values;

/// Evaluate generated text with local open language models.
#[derive(Debug, Parser)]
#[command(name = "nlg-judge", version, about, long_about = None)]
pub struct Cli {
    /// More log output (-v: debug, -vv: trace). RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Model cards and model files: list, fetch into the cache, show paths, verify.
    Models(models::ModelsArgs),
    /// Correlate a metric's predictions with human scores (meta-evaluation).
    Correlate(correlate::CorrelateArgs),
    /// Measure the engine on real workloads (naive versus prefix-tree evaluation).
    Bench(bench::BenchArgs),
    /// Log-probabilities of label words after a prompt (a debugging view).
    Labels(labels::LabelsArgs),
    /// Rank the candidates of each context by pairwise comparisons with a model.
    Compare(compare::CompareArgs),
    /// Score each candidate on its own: prompt scoring, G-Eval or GPTScore.
    Score(score::ScoreArgs),
    /// Serve G-Eval, prompt scoring and pairwise comparison over HTTP (a metrics
    /// service; one worker thread owns the model), and the OpenAI API on the same port
    /// (completions and chat with log-probs).
    Serve(serve::ServeArgs),
    /// Convert a shared human-judgement set (SummEval, Topical-Chat, WebNLG) into the
    /// generic JSONL input format.
    Convert(convert::ConvertArgs),
    /// Reproduce the comparative-assessment paper's tables and figures on one data set
    /// (Spearman, positional bias, accuracy, subset-of-comparisons curves).
    Reproduce(reproduce::ReproduceArgs),
    /// Put the outputs of a sharded `compare` or `score` run back together, byte for byte
    /// what a single run writes, after checking the shards' fingerprints and coverage.
    Merge(merge::MergeArgs),
    /// DHP discernment benchmark: perturb references, score originals and perturbed
    /// copies with a judge, test the differences, report discernment scores.
    Dhp(dhp::DhpArgs),
    /// The result cache: check its integrity, repair a damaged one.
    Cache(cache::CacheCommandArgs),
    /// Para-Ref: paraphrase every distinct reference n times with a local model.
    Paraphrase(paraphrase::ParaphraseArgs),
    /// The Para-Ref experiment: metrics against one reference, its paraphrases and all
    /// human references, correlated with human scores (WMT22, SummEval).
    Pararef(pararef::PararefArgs),
    /// Reference-based metrics (BLEU, chrF, chrF++, ROUGE-1/2/L, BERTScore) of every
    /// candidate, optionally against its references' paraphrases too.
    Metric(metric::MetricArgs),
}

/// Log to stderr; the level comes from `-v` unless RUST_LOG is set. Colour only where
/// stderr is a terminal and `NO_COLOR` is unset (or empty), so logs kept in a file or
/// read through a pipe carry no escape codes.
pub fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "nlg_judge=debug",
        _ => "nlg_judge=trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour_on_stderr())
        .try_init();
}

/// Whether what goes to stderr may be coloured: a terminal, and no `NO_COLOR` with a
/// value (<https://no-color.org>).
pub fn colour_on_stderr() -> bool {
    use std::io::IsTerminal as _;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// An error in what the user gave (options, input files): the command exits with 2, as
/// for a command-line usage error, instead of 1. Transparent: it prints as the error it
/// wraps.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct InputError(#[from] anyhow::Error);

/// Mark `error` as the user's input's fault.
pub fn input_error(error: anyhow::Error) -> anyhow::Error {
    InputError(error).into()
}

/// What to say over an error reading the shared human-judgement data in `dir`: where
/// it was looked for and how to point elsewhere (`flag`, or `NLG_JUDGE_DATA`). An input
/// error: the data are the user's to give.
pub fn data_error(error: anyhow::Error, dir: &std::path::Path, flag: &str) -> anyhow::Error {
    let missing = if dir.is_dir() {
        ""
    } else {
        ", which does not exist"
    };
    input_error(error.context(format!(
        "cannot read the shared data in {}{missing}: give the data directory with {flag} DIR or \
         the environment variable NLG_JUDGE_DATA",
        dir.display()
    )))
}

/// The exit code for `error`: 2 for input and usage errors (including a request the
/// model cannot take), 1 for failures.
pub fn exit_code(error: &anyhow::Error) -> u8 {
    let input = error.chain().any(|cause| {
        cause.is::<InputError>() || cause.is::<crate::runtime::resolve::UnknownModel>()
    }) || crate::engine::error_kind(error) == crate::engine::ErrorKind::BadRequest;
    if input {
        2
    } else {
        1
    }
}

pub fn run(cli: Cli) -> Result<()> {
    // NLG_JUDGE_CPU may only hide features the CPU has: refuse a request it cannot honour
    // rather than measure a path other than the one asked for.
    nlg_judge_kernels::cpu::requested_level().map_err(|e| input_error(e.into()))?;
    // NLG_JUDGE_TILES takes `model` or nothing (a measurement switch, issue 61).
    nlg_judge_kernels::gemm::amx::tiles_switch().map_err(|e| input_error(anyhow::anyhow!(e)))?;
    match cli.command {
        Command::Models(args) => models::run(args),
        Command::Correlate(args) => correlate::run(args),
        Command::Labels(args) => labels::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Compare(args) => compare::run(args),
        Command::Convert(args) => convert::run(args),
        Command::Reproduce(args) => reproduce::run(args),
        Command::Score(args) => score::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Merge(args) => merge::run(args),
        Command::Dhp(args) => dhp::run(args),
        Command::Cache(args) => cache::run(args),
        Command::Paraphrase(args) => paraphrase::run(args),
        Command::Pararef(args) => pararef::run(args),
        Command::Metric(args) => metric::run(args),
    }
}
