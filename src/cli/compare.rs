//! `nlg-judge compare`: pairwise comparative assessment of the candidates of each context.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use clap::Args;

use super::cache_args::CacheArgs;
use super::compare_table::format_tables;
use super::model_args::ModelArgs;
use super::shard_args::{check_output, take_shard, write_sidecar, ShardArgs};
use crate::data::read_contexts;
use crate::judge::pairwise::{
    run_compare, show_first_prompt, write_comparisons, write_scores, CompareOptions, Debias,
    Design, PairwiseTemplate,
};
use crate::judge::{Attribute, Task};
use crate::rank::RankMethod;
use crate::shard::fingerprint::file_sha256;
use crate::shard::Fingerprint;

/// Arguments of `nlg-judge compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    #[command(flatten)]
    pub model: ModelArgs,

    /// Candidates in the generic JSONL format (one candidate per line, see `convert`).
    #[arg(long)]
    pub input: PathBuf,

    /// Attribute to judge: coherence, consistency, fluency, relevance, naturalness,
    /// continuity, engagingness, grammaticality (grammar), semantics.
    #[arg(long)]
    pub attribute: String,

    /// Prompt template: the paper's `c1` or `c2`, or a file with the placeholders
    /// {context}, {a}, {b}, {adjective}, {item}.
    #[arg(long, default_value = "c1")]
    pub template: String,

    /// Kind of task; sets the prompt nouns (Summary/Passage, Response/Dialogue,
    /// Text/Triples).
    #[arg(long, value_enum, default_value_t = Task::Summary)]
    pub task: Task,

    /// Which ordered pairs of candidates to compare in each context.
    #[arg(long, value_enum, default_value_t = Design::Full)]
    pub design: Design,

    /// Comparisons per context (R) for the random, no-repeat and symmetric designs
    /// (even for symmetric).
    #[arg(long)]
    pub comparisons: Option<usize>,

    /// Seed of the random designs (mixed with each context id).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,

    /// How comparisons become scores.
    #[arg(long, value_enum, default_value_t = RankMethod::WinRatio)]
    pub rank: RankMethod,

    /// Positional debiasing: `threshold` sets the decision threshold so that the first
    /// position wins half of the run's comparisons.
    #[arg(long, value_enum, default_value_t = Debias::None)]
    pub debias: Debias,

    /// Human score field for pairwise accuracy (default: the attribute's name, where
    /// present). Topical-Chat: `understandability` for coherence, `coherence` for
    /// continuity.
    #[arg(long)]
    pub score_field: Option<String>,

    /// Write one line per candidate (context_id, candidate_id, score, rank) here;
    /// default: standard output, with the tables on standard error.
    #[arg(long)]
    pub output: Option<PathBuf>,

    /// Also write every comparison (context_id, a, b, p_a, label_mass) here.
    #[arg(long)]
    pub comparisons_out: Option<PathBuf>,

    #[command(flatten)]
    pub cache: CacheArgs,

    #[command(flatten)]
    pub shard: ShardArgs,

    /// Print the first comparison's prompt as the model reads it, then continue.
    #[arg(long)]
    pub show_prompt: bool,
}

/// Write to `path` through a temporary file renamed into place (creating its folder).
pub(crate) fn write_file(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> Result<()>,
) -> Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create the folder {}", parent.display()))?;
    }
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".partial");
    let temporary = PathBuf::from(temporary);
    let file = File::create(&temporary)
        .with_context(|| format!("cannot create {}", temporary.display()))?;
    let mut out = BufWriter::new(file);
    write(&mut out).with_context(|| format!("cannot write {}", temporary.display()))?;
    out.flush()
        .with_context(|| format!("cannot write {}", temporary.display()))?;
    drop(out);
    std::fs::rename(&temporary, path)
        .with_context(|| format!("cannot move {} to {}", temporary.display(), path.display()))
}

/// What a compare shard's output depends on besides its contexts.
fn fingerprint(
    args: &CompareArgs,
    options: &CompareOptions,
    model: &crate::engine::ModelInfo,
) -> Result<Fingerprint> {
    let mut print = Fingerprint::new();
    let mut put = |key: &str, value: String| {
        print.insert(key.to_string(), value);
    };
    put("command", "compare".into());
    put("nlg_judge_version", env!("CARGO_PKG_VERSION").into());
    put("model", model.name.clone());
    put("model_sha256", model.fingerprint.clone());
    put("attribute", args.attribute.clone());
    put("task", format!("{:?}", options.task));
    put("template", options.template.id().to_string());
    put("design", format!("{:?}", options.design));
    put("comparisons", format!("{:?}", options.comparisons));
    put("seed", options.seed.to_string());
    put("rank", format!("{:?}", options.rank));
    put("debias", format!("{:?}", options.debias));
    put("score_field", format!("{:?}", options.score_field));
    put("input_sha256", file_sha256(&args.input)?);
    Ok(print)
}

pub fn run(args: CompareArgs) -> Result<()> {
    let attribute = Attribute::named(&args.attribute)?;
    let template = PairwiseTemplate::resolve(&args.template, args.task)?;
    args.design.check_request(args.comparisons)?;
    let shard = args.shard.resolve()?;
    check_output(shard, args.output.as_deref())?;
    if shard.is_some() && args.debias == Debias::Threshold {
        anyhow::bail!(
            "--debias threshold sets one threshold from all of a run's comparisons, so a shard \
             alone would decide differently from a single run: run it unsharded"
        );
    }
    let contexts = take_shard(read_contexts(&args.input)?, shard);
    let options = CompareOptions {
        task: args.task,
        attribute,
        template,
        design: args.design,
        comparisons: args.comparisons,
        seed: args.seed,
        rank: args.rank,
        debias: args.debias,
        score_field: args.score_field.clone(),
        progress: true,
    };
    let cache = args.cache.open()?;
    let cache_path = cache.as_ref().map(|c| c.location().to_string());
    let mut scorer = args.model.load()?;
    if args.show_prompt {
        eprint!(
            "{}",
            show_first_prompt(scorer.as_ref(), &contexts, &options)?
        );
    }
    let result = run_compare(scorer.as_mut(), &contexts, &options, cache.as_ref())?;
    if let Some(path) = &args.comparisons_out {
        write_file(path, |out| write_comparisons(&result, out))?;
    }
    if let Some(spec) = shard {
        let base = fingerprint(&args, &options, scorer.info())?;
        if let Some(path) = &args.output {
            let mut print = base.clone();
            print.insert("output".into(), "scores".into());
            write_sidecar(path, spec, print, &contexts)?;
        }
        if let Some(path) = &args.comparisons_out {
            let mut print = base;
            print.insert("output".into(), "comparisons".into());
            write_sidecar(path, spec, print, &contexts)?;
        }
    }
    let mut wrote = Vec::new();
    match &args.output {
        Some(path) => {
            write_file(path, |out| write_scores(&result, out))?;
            wrote.push(format!(
                "scores (context_id, candidate_id, score, rank): {}",
                path.display()
            ));
        }
        None => {
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            write_scores(&result, &mut out)?;
            out.flush()?;
            wrote.push(
                "scores (context_id, candidate_id, score, rank): standard output, as JSONL"
                    .to_string(),
            );
        }
    }
    if let Some(path) = &args.comparisons_out {
        wrote.push(format!(
            "every comparison (context_id, a, b, p_a, label_mass): {}",
            path.display()
        ));
    }
    match &cache_path {
        Some(path) => wrote.push(format!(
            "model answers cached (a rerun reuses them): {path}"
        )),
        None => wrote.push("nothing cached (--no-cache)".to_string()),
    }
    let mut report = format_tables(&result, &contexts);
    for line in wrote {
        report.push_str("results: ");
        report.push_str(&line);
        report.push('\n');
    }
    // With scores on standard output, the people's report goes to standard error.
    match &args.output {
        Some(_) => print!("{report}"),
        None => eprint!("{report}"),
    }
    Ok(())
}
