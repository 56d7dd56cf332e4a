//! `nlg-judge pararef`: the Para-Ref paper's experiment on WMT22 (zh-en, de-en) and
//! SummEval: paraphrase the first reference of every chosen item, then correlate the
//! metrics with the human scores against one reference, one plus k paraphrases, and all
//! human references; a Markdown report and a figure like the paper's Figure 4.

use std::path::PathBuf;

use anyhow::{Context as _, Result};
use clap::Args;

use super::outputs::PlannedPaths;

use super::cache_args::CacheArgs;
use super::model_args::ModelArgs;
use crate::pararef::experiment::{load_datasets, paraphrase_dataset, Paraphrased, Selection};
use crate::pararef::{ParaphraseOptions, PromptSet};

/// Arguments of `nlg-judge pararef`.
#[derive(Debug, Args)]
pub struct PararefArgs {
    #[command(flatten)]
    pub model: ModelArgs,

    /// The shared data directory (wmt22/, summeval/).
    #[arg(
        long,
        visible_alias = "data-dir",
        env = "NLG_JUDGE_DATA",
        default_value = crate::data::DEFAULT_DATA_DIR
    )]
    pub data: PathBuf,

    /// WMT22 language pairs.
    #[arg(long, value_delimiter = ',', default_value = "zh-en,de-en")]
    pub pairs: Vec<String>,

    /// WMT22 segments per pair (a seeded random subset).
    #[arg(long, default_value_t = 30)]
    pub segments: usize,

    /// Paraphrases per WMT22 reference (the figure's largest k): one number for every
    /// pair, or one per pair in the order of --pairs.
    #[arg(long, value_delimiter = ',', default_value = "20")]
    pub n: Vec<usize>,

    /// SummEval documents (a seeded random subset; 0 leaves SummEval out).
    #[arg(long, default_value_t = 10)]
    pub summeval_docs: usize,

    /// Paraphrases per SummEval reference.
    #[arg(long, default_value_t = 10)]
    pub summeval_n: usize,

    /// SummEval attribute correlated with.
    #[arg(long, default_value = "relevance")]
    pub attribute: String,

    #[arg(long, value_enum, default_value_t = PromptSet::Diverse)]
    pub prompts: PromptSet,

    /// Seed of the subsets and of the sampling.
    #[arg(long, default_value_t = 18)]
    pub seed: u64,

    /// Requests generated side by side.
    #[arg(long, default_value_t = 16)]
    pub batch: usize,

    /// Only make the paraphrases (cached), no correlations.
    #[arg(long)]
    pub paraphrase_only: bool,

    /// Directory for the paraphrase files, the report and the figure.
    #[arg(long)]
    pub out_dir: PathBuf,

    /// Only draw the figure again from the `pararef.md` an earlier run wrote into
    /// --out-dir (no model, no data): after an update of the figures.
    #[arg(long)]
    pub redraw: bool,

    #[command(flatten)]
    pub cache: CacheArgs,
}

pub fn run(args: PararefArgs) -> Result<()> {
    if args.redraw {
        return crate::cli::pararef_report::redraw(&args.out_dir);
    }
    PlannedPaths::new()
        .folder("--out-dir", &args.out_dir)
        .check()?;
    std::fs::create_dir_all(&args.out_dir)
        .with_context(|| format!("cannot create {}", args.out_dir.display()))?;
    let selection = Selection {
        wmt_pairs: args.pairs.clone(),
        wmt_segments: args.segments,
        wmt_paraphrases: args.n.clone(),
        summeval_documents: args.summeval_docs,
        summeval_paraphrases: args.summeval_n,
        summeval_attribute: args.attribute.clone(),
        seed: args.seed,
    };
    let datasets = load_datasets(&args.data, &selection)
        .map_err(|e| super::data_error(e, &args.data, "--data-dir"))?;
    let mut scorer = args.model.load()?;
    let cache = args.cache.open()?;
    let options = ParaphraseOptions {
        prompts: args.prompts,
        seed: args.seed,
        batch_size: args.batch,
        chat: scorer.info().conventions.chat,
        ..ParaphraseOptions::default()
    };
    let mut paraphrased: Vec<Paraphrased> = Vec::new();
    for dataset in &datasets {
        let progress = super::progress::bars(&format!("pararef {}", dataset.name));
        let task = progress.task((dataset.items.len() * dataset.n) as u64, "paraphrases");
        let mut shown = 0;
        let done = paraphrase_dataset(
            scorer.as_mut(),
            cache.as_ref(),
            dataset,
            &options,
            &args.out_dir,
            &mut |done, _| {
                task.advance((done as u64).saturating_sub(shown));
                shown = shown.max(done as u64);
            },
        )?;
        drop(task);
        eprintln!(
            "{}: {} references x {}: {} failed, {} generated ({} tokens, {:.1} tokens/s), {} cached, {:.0} s",
            dataset.name,
            done.report.references,
            dataset.n,
            done.report.failed,
            done.report.generated,
            done.report.new_tokens,
            done.report.tokens_per_second(),
            done.report.cached,
            done.wall_seconds
        );
        paraphrased.push(done);
    }
    if args.paraphrase_only {
        return Ok(());
    }
    let model_name = scorer.info().name.clone();
    crate::cli::pararef_report::write(&args.out_dir, &model_name, &datasets, &paraphrased)
}
