//! `nlg-judge paraphrase`: n paraphrases of every distinct reference of a JSONL file
//! (Para-Ref), written one row per reference.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use super::cache_args::CacheArgs;
use super::compare::write_file;
use super::model_args::ModelArgs;
use super::outputs::PlannedPaths;
use crate::pararef::{paraphrase_references, read_metric_rows, ParaphraseOptions, PromptSet};

/// Arguments of `nlg-judge paraphrase`.
#[derive(Debug, Args)]
pub struct ParaphraseArgs {
    #[command(flatten)]
    pub model: ModelArgs,

    /// Candidates in the generic JSONL format with `reference` or `references`; every
    /// distinct reference is paraphrased once.
    #[arg(long)]
    pub input: PathBuf,

    /// Paraphrases per reference.
    #[arg(long, default_value_t = 10)]
    pub n: usize,

    /// basic: "Paraphrase the sentences: {reference}"; diverse: the paper's ten
    /// instructions in turn (order, structure, voice, tense, tone, style, meaning,
    /// synonyms, more formal, less formal).
    #[arg(long, value_enum, default_value_t = PromptSet::Diverse)]
    pub prompts: PromptSet,

    /// Seed of the nucleus sampling (paraphrase k, attempt a use seed + k + a * 1000003).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,

    /// Sampling temperature: the next-token distribution's logits are divided by it
    /// (above 1 flatter, more varied paraphrases; below 1 sharper).
    #[arg(long, default_value_t = 1.0)]
    pub temperature: f64,

    /// Nucleus sampling: draw each token from the most likely tokens whose probabilities
    /// add up to this share (1 keeps every token).
    #[arg(long, default_value_t = 0.9)]
    pub top_p: f64,

    /// Further attempts (next seeds) for an answer that is empty or only a preamble.
    #[arg(long, default_value_t = 3)]
    pub max_retries: usize,

    /// Requests generated side by side in one batch.
    #[arg(long, default_value_t = 16)]
    pub batch: usize,

    /// Longest paraphrase in tokens (also at most 1.5 times the reference's length plus 24).
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,

    /// Only the first N distinct references.
    #[arg(long)]
    pub limit: Option<usize>,

    /// One row per reference: reference_id, reference, paraphrases, failed.
    #[arg(long)]
    pub output: PathBuf,

    #[command(flatten)]
    pub cache: CacheArgs,
}

pub fn run(args: ParaphraseArgs) -> Result<()> {
    PlannedPaths::new()
        .input("--input", &args.input)
        .cache(&args.cache)
        .output("--output", Some(&args.output))
        .check()?;
    let rows = read_metric_rows(&args.input).map_err(super::input_error)?;
    let mut references: Vec<String> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for row in &rows {
        for reference in &row.references {
            if seen.insert(reference.clone()) {
                references.push(reference.clone());
            }
        }
    }
    if let Some(limit) = args.limit {
        references.truncate(limit);
    }
    let mut scorer = args.model.load()?;
    let cache = args.cache.open()?;
    let options = ParaphraseOptions {
        n: args.n,
        prompts: args.prompts,
        seed: args.seed,
        temperature: args.temperature,
        top_p: args.top_p,
        max_retries: args.max_retries,
        batch_size: args.batch,
        max_tokens: args.max_tokens,
        chat: scorer.info().conventions.chat,
    };
    let progress = super::progress::bars("paraphrase");
    let task = progress.task((references.len() * args.n) as u64, "paraphrases");
    let mut shown = 0;
    let (out, report) = paraphrase_references(
        scorer.as_mut(),
        cache.as_ref(),
        &references,
        &options,
        &mut |done, _| {
            task.advance((done as u64).saturating_sub(shown));
            shown = shown.max(done as u64);
        },
    )?;
    drop(task);
    write_file(&args.output, |w| {
        for row in &out {
            serde_json::to_writer(&mut *w, row)?;
            writeln!(w)?;
        }
        Ok(())
    })?;
    eprintln!(
        "{} references x {} paraphrases: {} failed ({} answers rejected and retried); {} generated ({} tokens, {:.1} tokens/s), {} from the cache",
        report.references,
        args.n,
        report.failed,
        report.rejected,
        report.generated,
        report.new_tokens,
        report.tokens_per_second(),
        report.cached
    );
    Ok(())
}
