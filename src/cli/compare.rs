//! `nlg-judge compare`: pairwise comparative assessment of the candidates of each context.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};
use clap::Args;

use super::cache_args::CacheArgs;
use super::compare_table::format_tables;
use super::jury::{
    format_jury, human_agreement, judge_args, jurors, jury_facts, same_model_warning,
    weights as jury_weights, write_jury_run, Juror, WeightsArg,
};
use super::model_args::ModelArgs;
use super::outputs::PlannedPaths;
use super::shard_args::{check_output, take_shard, write_sidecar, ShardArgs};
use crate::data::{empty_candidates_warning, human_key_for, human_keys, read_contexts};
use crate::judge::attribute::builtin_attribute_list;
use crate::judge::attribute::score_keys;
use crate::judge::diagnostics::Diagnostics;
use crate::judge::jury::{combine_comparisons, require_every_candidate};
use crate::judge::pairwise::fit::{compare_what_fits, set_aside_over_long, FittedRun};
use crate::judge::pairwise::run::method_name;
use crate::judge::pairwise::PriorScores;
use crate::judge::pairwise::StopRule;
use crate::judge::pairwise::{
    run_compare, show_first_prompt, write_comparisons, write_scores, CompareOptions,
    CompareRequest, CompareResult, Debias, Design,
};
use crate::judge::rubric::relative::RelativeGrading;
use crate::judge::rubric::run::DEFAULT_FEEDBACK_TOKENS;
use crate::judge::rubric::{rubric_facts, Rubric, RubricProtocol};
use crate::judge::scoring::check_references;
use crate::judge::Task;
use crate::rank::hybrid::DEFAULT_PRIOR_WEIGHT;
use crate::rank::RankMethod;
use crate::report::{compare_run, Report};
use crate::shard::fingerprint::file_sha256;
use crate::shard::Fingerprint;
use crate::stats::report::{run_summary, RUN_RESAMPLES};

/// Arguments of `nlg-judge compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    #[command(flatten)]
    pub model: ModelArgs,

    /// Candidates in the generic JSONL format (one candidate per line, see `convert`).
    #[arg(long)]
    pub input: PathBuf,

    #[arg(long, required_unless_present = "rubric", help = attribute_help())]
    pub attribute: Option<String>,

    /// The comparative the question uses for the attribute: "more empathetic" asks
    /// "Which Story is more empathetic, ...?". Needed for an attribute of your own.
    #[arg(long, value_name = "PHRASE")]
    pub adjective: Option<String>,

    /// The whole question instead, without "..., A or B?": "Which story shows more
    /// empathy".
    #[arg(long, value_name = "TEXT")]
    pub question: Option<String>,

    /// Prompt template: the paper's `c1` or `c2`, or a file with the placeholders
    /// {context}, {a}, {b}, {adjective}, {item}.
    #[arg(long, default_value = "c1")]
    pub template: String,

    /// Kind of task; sets the prompt nouns: summary "Summary A", "Passage:"; dialogue
    /// "Response A", "Dialogue:"; data-to-text "Text A", "Triples:"; custom takes them
    /// from --item and --context-label (both needed).
    #[arg(long, value_enum, default_value_t = Task::Summary)]
    pub task: Task,

    /// What a candidate is called in the prompt ("Story" gives "Story A", "Story B").
    #[arg(long, value_name = "NOUN")]
    pub item: Option<String>,

    /// What the context is called in the prompt ("Prompt" gives "Prompt:" in c2).
    #[arg(long, value_name = "NOUN")]
    pub context_label: Option<String>,

    /// Which ordered pairs of candidates to compare in each context.
    #[arg(long, value_enum, default_value_t = Design::Full)]
    pub design: Design,

    /// Comparisons per context (R) for the random, no-repeat and symmetric designs
    /// (even for symmetric); for the adaptive design, its budget (even; default N(N-1),
    /// for --stop-when to end earlier).
    #[arg(long)]
    pub comparisons: Option<usize>,

    /// Adaptive design: split the budget left after the first round (a random cycle,
    /// 2N comparisons) into this many rounds. Default: rounds of N comparisons.
    #[arg(long, value_name = "K")]
    pub rounds: Option<usize>,

    /// Adaptive design: comparisons per round after the first (even).
    #[arg(long, value_name = "M")]
    pub round_size: Option<usize>,

    /// Adaptive design: stop a context early. `stable:T` when Kendall's tau between two
    /// consecutive rounds' scores reaches T (e.g. stable:0.95); `ci:W` when every score's
    /// 95% interval is narrower than W logits (e.g. ci:1.0).
    #[arg(long, value_name = "RULE")]
    pub stop_when: Option<StopRule>,

    /// Seed of the random designs (mixed with each context id).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,

    /// How comparisons become scores [default: win-ratio, switched to poe (said in the
    /// diagnostics) where this judge's answers cannot be ranked by it: a strong
    /// positional bias, or mostly ties, over a design with both orders of each pair;
    /// poe for --design adaptive, whose candidates meet different opponents]. A method
    /// given here is always kept.
    #[arg(long, value_enum)]
    pub rank: Option<RankMethod>,

    /// Positional debiasing: `threshold` sets the decision threshold so that the first
    /// position wins half of the run's comparisons.
    #[arg(long, value_enum, default_value_t = Debias::None)]
    pub debias: Debias,

    /// Key of the human scores (in `scores`) for accuracy and --correlate (default: the
    /// attribute's name, matched case-insensitively). Topical-Chat: `understandability`
    /// for coherence, `coherence` for continuity.
    #[arg(long, visible_alias = "score-field", value_name = "KEY")]
    pub human_key: Option<String>,

    /// At the end, correlate the scores with the human scores (summary level, Spearman,
    /// Kendall and Pearson with 95% bootstrap intervals over 1000 resamples of the
    /// contexts, seed 0), as `correlate` does on the output file.
    #[arg(long)]
    pub correlate: bool,

    /// Write one line per candidate (context_id, candidate_id, score, rank) here;
    /// default: standard output, with the tables on standard error.
    #[arg(long)]
    pub output: Option<PathBuf>,

    /// Also write every comparison (context_id, a, b, p_a, label_mass) here.
    #[arg(long)]
    pub comparisons_out: Option<PathBuf>,

    /// Also write a report to open in a browser: one self-contained HTML file (nothing
    /// loaded from elsewhere) with the ranking of every context, each candidate's text,
    /// the P(A better than B) matrix in both orders, positional bias and consistency,
    /// and the agreement with the human scores where the input has them; for a jury, its
    /// ranking beside each judge's run and the judges' agreement. A FILE.md gets the same
    /// report as Markdown.
    #[arg(long, value_name = "FILE.html")]
    pub report: Option<PathBuf>,

    #[command(flatten)]
    pub cache: CacheArgs,

    #[command(flatten)]
    pub shard: ShardArgs,

    /// Print the first comparison's prompt as the model reads it, then continue.
    #[arg(long)]
    pub show_prompt: bool,

    /// A jury: a TOML file naming the judges (`[[judge]]` with `model`, optionally
    /// `backend` and `weight`). Each judge runs in turn (one model in memory at a time,
    /// its answers cached as its own); their comparisons are experts of one Product of
    /// Experts (docs: README "Juries"). `--model A --model B` is a jury of A and B too.
    #[arg(long, value_name = "FILE")]
    pub jury: Option<PathBuf>,

    /// How a jury's judges weigh where the jury file gives no weights: equal, or learned
    /// from their agreement (a judge's mean Spearman with the others).
    #[arg(long, value_enum, default_value_t = WeightsArg::Equal)]
    pub jury_weights: WeightsArg,

    /// Relative rubric grading: the two candidates of each comparison put to the judge in
    /// its own pairwise format with a rubric's criterion (built-in name or a rubric file,
    /// as `score --rubric`); the judge writes a feedback comparing them, then P(A) is read
    /// after its result marker (`[RESULT] ` for Prometheus 2). One generation per ordered
    /// pair: N(N-1) for a full design of N candidates (see --no-feedback). The attribute
    /// defaults to the rubric's name (README "Rubric grading").
    #[arg(long, value_name = "NAME|FILE")]
    pub rubric: Option<String>,

    #[arg(long, value_name = "NAME|FILE", requires = "rubric",
          value_parser = super::values::parse_protocol,
          help = super::values::protocol_help("Relative rubric grading (a protocol with a [relative] form; Flow-Judge has none)"))]
    pub protocol: Option<RubricProtocol>,

    /// Relative rubric grading: no feedback; read A or B right after the prompt and the
    /// result marker, through the prefix trie (no generation).
    #[arg(long, requires = "rubric")]
    pub no_feedback: bool,

    /// Relative rubric grading: most tokens of each feedback (a feedback cut here gets the
    /// marker appended, and counts in the `format` diagnostic).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_FEEDBACK_TOKENS, requires = "rubric")]
    pub max_feedback_tokens: usize,

    /// Relative rubric grading with a thinking judge (a protocol with reasoning markers):
    /// most tokens of its reasoning before the feedback (default 1024). A reasoning cut
    /// here is closed before the choice is read, and counts in the `format` diagnostic.
    #[arg(long, value_name = "N", requires = "rubric")]
    pub max_reasoning_tokens: Option<usize>,

    /// Relative rubric grading with a thinking judge: thinking off (its answer opens with
    /// an empty reasoning, where its protocol says how: Qwen3's enable_thinking=false).
    #[arg(long, requires = "rubric", conflicts_with = "max_reasoning_tokens")]
    pub no_thinking: bool,

    /// Relative rubric grading: show the candidates' `reference` as the reference answer
    /// (both candidates of a context must give the same one).
    #[arg(long, requires = "rubric")]
    pub reference: bool,

    /// Absolute scores as experts beside the comparisons: `nlg-judge score`'s output for
    /// the same input (matched by context_id and candidate_id). The scores are then one
    /// Product of Experts of the comparisons and these scores, mapped onto the
    /// comparisons' scale by a fitted line whose slope is one for the whole run (a
    /// negative slope less than two standard errors below 0 is held at 0, and the
    /// prior_slope diagnostic says so); --design adaptive uses them as its prior.
    #[arg(long, value_name = "FILE")]
    pub prior_scores: Option<PathBuf>,

    /// With --prior-scores: the weight of one candidate's absolute score against one
    /// comparison.
    #[arg(long, value_name = "LAMBDA", default_value_t = DEFAULT_PRIOR_WEIGHT)]
    pub prior_weight: f64,
}

/// The rubric of `--rubric`, checked before any model loads; `None` without `--rubric`.
fn chosen_rubric(args: &CompareArgs) -> Result<Option<Rubric>> {
    let Some(spec) = &args.rubric else {
        return Ok(None);
    };
    if args.no_feedback && args.max_feedback_tokens != DEFAULT_FEEDBACK_TOKENS {
        bail!("--max-feedback-tokens does not apply with --no-feedback (no feedback is written)");
    }
    Ok(Some(Rubric::load(spec, args.task).context("--rubric")?))
}

/// The help of `--attribute`: the built-in list is the one the unknown-attribute error
/// gives.
fn attribute_help() -> String {
    format!(
        "Attribute to judge: built-in (tuned wording) {}; any other word with --adjective or \
         --question",
        builtin_attribute_list()
    )
}

/// The absolute scores of `--prior-scores`, checked against every context of the input
/// (a shard's too, so that every shard refuses the same file).
fn prior_scores(
    args: &CompareArgs,
    contexts: &[crate::data::Context],
) -> Result<Option<PriorScores>> {
    let Some(path) = &args.prior_scores else {
        if args.prior_weight != DEFAULT_PRIOR_WEIGHT {
            bail!("--prior-weight weighs the absolute scores of --prior-scores: give the file");
        }
        return Ok(None);
    };
    if let Some(rank) = args.rank.filter(|r| *r != RankMethod::Poe) {
        bail!(
            "--prior-scores ranks by one Product of Experts of the comparisons and the absolute \
             scores; --rank {} cannot take them (leave --rank out, or give --rank poe)",
            value_name(&rank)
        );
    }
    let prior = PriorScores::read(path, args.prior_weight)
        .with_context(|| format!("--prior-scores {}", path.display()))?;
    prior
        .check_contexts(contexts)
        .with_context(|| format!("--prior-scores against --input {}", args.input.display()))?;
    Ok(Some(prior))
}

/// The library's request from the arguments; with the rubric of `--rubric` its name is
/// the attribute when none is given and its criterion the question
/// ([`CompareRequest::with_rubric`]).
fn request(args: &CompareArgs, rubric: Option<&Rubric>) -> Result<CompareRequest> {
    let request = CompareRequest {
        attribute: args.attribute.clone().unwrap_or_default(),
        adjective: args.adjective.clone(),
        question: args.question.clone(),
        template: args.template.clone(),
        task: args.task,
        item: args.item.clone(),
        context_label: args.context_label.clone(),
        design: args.design,
        comparisons: args.comparisons,
        rounds: args.rounds,
        round_size: args.round_size,
        stop_when: args.stop_when,
        seed: args.seed,
        rank: args.rank,
        debias: args.debias,
        human_key: args.human_key.clone(),
    };
    match rubric {
        Some(rubric) => request.with_rubric(rubric, |option| format!("--{option}")),
        None => Ok(request),
    }
}

/// The attribute's name as the human key defaults to it.
fn result_attribute(options: &CompareOptions) -> String {
    options.attribute.name.trim().to_ascii_lowercase()
}

/// What the report says about how the run was made.
fn report_facts(
    args: &CompareArgs,
    options: &CompareOptions,
    result: &CompareResult,
    model: &crate::engine::ModelInfo,
) -> Vec<(String, String)> {
    let mut facts = vec![
        ("input".to_string(), args.input.display().to_string()),
        ("model".to_string(), model.name.clone()),
        ("attribute".to_string(), options.attribute.name.clone()),
        (
            "question".to_string(),
            options.attribute.question(&options.nouns.item),
        ),
        ("template".to_string(), options.template_id()),
        (
            "design".to_string(),
            match options.comparisons {
                Some(r) => {
                    format!("{:?}, {r} comparisons per context", options.design).to_lowercase()
                }
                None => format!("{:?}", options.design).to_lowercase(),
            },
        ),
        ("scores".to_string(), scores_name(args, result)),
    ];
    // A judge that may call a tie: how the ranking counted the ties.
    facts.extend(
        result
            .ties
            .iter()
            .map(|ties| ("ties".to_string(), ties.clone())),
    );
    facts.extend([
        (
            "debiasing".to_string(),
            match options.debias {
                Debias::None => "none (decide at 0.5)".to_string(),
                Debias::Threshold => format!("balanced threshold tau = {:.4}", result.tau),
            },
        ),
        ("seed".to_string(), options.seed.to_string()),
        (
            "model answers".to_string(),
            format!(
                "{} computed, {} from the cache",
                result.computed, result.cached
            ),
        ),
    ]);
    if let Some(relative) = &options.relative {
        facts.extend(rubric_facts(
            &relative.rubric,
            &relative.protocol,
            relative.protocol_source,
            relative.feedback_tokens,
            relative.marker(),
            "ordered pair",
            &relative.choices_named(),
        ));
    }
    if let Some(fit) = &result.prior {
        facts.push((
            "absolute scores' slope".to_string(),
            format!(
                "one for all {} context(s): fitted {:.3} logits per standard deviation \
                 (standard error {:.3}, from {} compared pair(s)){}",
                fit.contexts,
                fit.fitted,
                fit.standard_error,
                fit.pairs,
                if fit.held {
                    "; negative without support, held at 0"
                } else {
                    ""
                }
            ),
        ));
    }
    if let Some(key) = &result.human_key {
        facts.push(("human scores".to_string(), key.clone()));
    }
    facts
}

/// The ranking method's name in words.
fn rank_name(rank: RankMethod) -> &'static str {
    method_name(rank)
}

/// How the scores were made, in words: the ranking method, or the joint fit with the
/// absolute scores.
fn scores_name(args: &CompareArgs, result: &CompareResult) -> String {
    match &args.prior_scores {
        Some(path) => format!(
            "Product of Experts of the comparisons and the absolute scores in {} (weight {} \
             each)",
            path.display(),
            args.prior_weight
        ),
        None => rank_name(result.rank).to_string(),
    }
}

/// Write `page` to `path` (`--report`: the HTML page, or Markdown for a `.md` path);
/// returns the `results:` line saying where it went.
pub(crate) fn write_report(path: &Path, page: &Report) -> Result<String> {
    let text = page.render_for(path)?;
    write_file(path, |out| Ok(out.write_all(text.as_bytes())?))?;
    Ok(if text.starts_with("<!DOCTYPE") {
        format!("report to open in a browser: {}", path.display())
    } else {
        format!("report (Markdown): {}", path.display())
    })
}

/// `OUT.diagnostics.json` beside `output`.
pub(crate) fn diagnostics_path(output: &Path) -> PathBuf {
    let mut name = output.as_os_str().to_owned();
    name.push(".diagnostics.json");
    PathBuf::from(name)
}

/// Write the judge diagnostics beside `output` (pretty JSON, final newline); returns
/// the file's path.
pub(crate) fn write_diagnostics(output: &Path, diagnostics: &Diagnostics) -> Result<PathBuf> {
    let path = diagnostics_path(output);
    let mut text = serde_json::to_string_pretty(diagnostics)?;
    text.push('\n');
    write_file(&path, |out| Ok(out.write_all(text.as_bytes())?))?;
    Ok(path)
}

/// Write to `path` through a temporary file renamed into place (creating its folder):
/// the file appears whole or not at all. The temporary file (`<path>.partial`) is
/// flushed to disk before the rename and removed when writing or the rename fails (a full
/// disk, a folder in the way), so a failed write leaves any earlier file at `path` as it
/// was and no debris beside it.
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
    let written = write(&mut out)
        .and_then(|()| Ok(out.flush()?))
        .and_then(|()| Ok(out.get_ref().sync_all()?))
        .with_context(|| format!("cannot write {}", temporary.display()));
    drop(out);
    if let Err(error) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(error);
    }
    std::fs::rename(&temporary, path).map_err(|error| {
        let _ = std::fs::remove_file(&temporary);
        anyhow::Error::new(error).context(format!(
            "cannot move {} to {}",
            temporary.display(),
            path.display()
        ))
    })
}

/// A jury's run: each judge in turn over the same contexts, then the combined ranking.
fn run_jury(
    args: &CompareArgs,
    options: &CompareOptions,
    contexts: &[crate::data::Context],
    jurors: &[Juror],
) -> Result<()> {
    let weights = jury_weights(jurors, args.jury_weights).map_err(super::input_error)?;
    let cache = args.cache.open()?;
    let cache_path = cache.as_ref().map(|c| c.location().to_string());
    let mut names = Vec::with_capacity(jurors.len());
    let mut results = Vec::with_capacity(jurors.len());
    let mut models = Vec::with_capacity(jurors.len());
    for (name, model) in judge_args(&args.model, jurors) {
        eprintln!("judge {} of {}: {name}", names.len() + 1, jurors.len());
        let mut scorer = model.load().with_context(|| format!("judge `{name}`"))?;
        let earlier: Vec<(String, String)> = names
            .iter()
            .cloned()
            .zip(
                models
                    .iter()
                    .map(|m: &crate::engine::ModelInfo| m.fingerprint.clone()),
            )
            .collect();
        if let Some(warning) = same_model_warning(&earlier, &name, &scorer.info().fingerprint) {
            eprintln!("{warning}");
        }
        let (kept, set_aside) = set_aside_over_long(scorer.as_ref(), contexts.to_vec(), options)?;
        require_every_candidate(&name, &set_aside).map_err(super::input_error)?;
        let result = run_compare(scorer.as_mut(), &kept, options, cache.as_ref())
            .with_context(|| format!("judge `{name}`"))?;
        models.push(scorer.info().clone());
        names.push(name);
        results.push(result);
    }
    let refs: Vec<&CompareResult> = results.iter().collect();
    let correct_bias = !crate::judge::diagnostics::both_orders(options.design);
    let jury = combine_comparisons(&names, &refs, &weights, correct_bias)?;
    let diagnostics: Vec<Diagnostics> = results.iter().map(|r| r.diagnostics.clone()).collect();
    let mut report = format_jury(&jury, contexts, &diagnostics);
    let human_key = results.iter().find_map(|r| r.human_key.clone());
    match &human_key {
        Some(key) if args.correlate => report.push_str(&human_agreement(&jury, contexts, key)),
        _ => {}
    }
    let mut wrote = Vec::new();
    if let Some(path) = &args.report {
        let model_names: Vec<String> = models.iter().map(|m| m.name.clone()).collect();
        let mut facts = jury_facts(&args.input, &jury, &model_names);
        facts.extend(
            report_facts(args, options, &results[0], &models[0])
                .into_iter()
                .filter(|(what, _)| {
                    ["attribute", "question", "template", "design", "seed"].contains(&what.as_str())
                }),
        );
        facts.push((
            "jury scores".to_string(),
            format!(
                "Product of Experts of every judge's comparisons{}",
                if correct_bias {
                    ", each judge's positional bias corrected first"
                } else {
                    ""
                }
            ),
        ));
        let judges = results
            .iter()
            .map(|r| {
                let run = compare_run(r, contexts, rank_name(r.rank))?;
                Ok((run, r.diagnostics.clone()))
            })
            .collect::<Result<Vec<_>>>()?;
        let page = Report::from_jury(
            &format!(
                "{}: {} of {} context(s), a jury of {}",
                file_name(&args.input),
                options.attribute.name,
                contexts.len(),
                names.len()
            ),
            facts,
            &jury,
            contexts,
            "jury score (Product of Experts)",
            human_key.as_deref(),
            judges,
        )?;
        wrote.push(write_report(path, &page)?);
    }
    let scores_line = "scores (context_id, candidate_id, score, rank, judges)";
    write_jury_run(
        report,
        &jury,
        contexts,
        &diagnostics,
        args.output.as_deref(),
        cache_path.as_deref(),
        scores_line,
        wrote,
    )
}

/// A file's name (else its whole path), for report titles.
pub(crate) fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().to_string(),
    )
}

/// The command-line name of an option's value ("no-repeat").
fn value_name<T: clap::ValueEnum>(value: &T) -> String {
    value
        .to_possible_value()
        .map_or_else(String::new, |v| v.get_name().to_string())
}

/// A number, or "default" where none was given.
fn or_default(value: Option<usize>) -> String {
    value.map_or_else(|| "default".to_string(), |v| v.to_string())
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
    // Values as people read them: a merge that finds two shards differing shows them.
    put("attribute", serde_json::to_string(&options.attribute)?);
    put("task", options.task.name().to_string());
    put("nouns", serde_json::to_string(&options.nouns)?);
    put("template", options.template_id());
    put("design", value_name(&options.design));
    put("comparisons", or_default(options.comparisons));
    if options.design == Design::Adaptive {
        let adaptive = &options.adaptive;
        put(
            "adaptive",
            format!(
                "rounds {}, round size {}, stop when {}",
                or_default(adaptive.rounds),
                or_default(adaptive.round_size),
                adaptive
                    .stop
                    .map_or_else(|| "never".to_string(), |s| s.to_string())
            ),
        );
    }
    put("seed", options.seed.to_string());
    put("rank", value_name(&options.rank));
    put("debias", value_name(&options.debias));
    if let Some(path) = &args.prior_scores {
        put("prior_scores_sha256", file_sha256(path)?);
        put("prior_weight", args.prior_weight.to_string());
    }
    put(
        "score_field",
        options
            .score_field
            .clone()
            .unwrap_or_else(|| "the attribute".to_string()),
    );
    put("input_sha256", file_sha256(&args.input)?);
    Ok(print)
}

pub fn run(args: CompareArgs) -> Result<()> {
    // Everything decided from the options and the input file, before any model is
    // loaded: a failure here is the user's to fix (exit code 2).
    let (mut options, shard, contexts, jury, rubric) = (|| -> Result<_> {
        let rubric = chosen_rubric(&args)?;
        let options = request(&args, rubric.as_ref())?.options(super::progress::bars("compare"))?;
        let shard = args.shard.resolve()?;
        let jury = jurors(&args.model, args.jury.as_deref())?;
        if jury.is_some() {
            let single_only = [
                ("--rubric", rubric.is_some()),
                ("--shard/--shards", shard.is_some()),
                ("--comparisons-out", args.comparisons_out.is_some()),
                ("--design adaptive", args.design == Design::Adaptive),
                ("--backend", args.model.backend.backend.is_some()),
                ("--prior-scores", args.prior_scores.is_some()),
            ];
            if let Some((flag, _)) = single_only.iter().find(|(_, given)| *given) {
                bail!(
                    "{flag} takes one judge; a jury (--jury, or --model more than once) runs \
                     without it (backends of a jury go in the jury file)"
                );
            }
        }
        check_output(shard, args.output.as_deref())?;
        let diagnostics = args.output.as_deref().map(diagnostics_path);
        PlannedPaths::new()
            .input("--input", &args.input)
            .maybe_input("--jury", args.jury.as_deref())
            .maybe_input("--prior-scores", args.prior_scores.as_deref())
            .cache(&args.cache)
            .output("--output", args.output.as_deref())
            .output("--output's diagnostics", diagnostics.as_deref())
            .output("--comparisons-out", args.comparisons_out.as_deref())
            .output("--report", args.report.as_deref())
            .check()?;
        if shard.is_some() && args.debias == Debias::Threshold {
            bail!(
                "--debias threshold sets one threshold from all of a run's comparisons, so a shard \
                 alone would decide differently from a single run: run it unsharded"
            );
        }
        if shard.is_some() && args.prior_scores.is_some() {
            bail!(
                "--prior-scores fits one slope from all of a run's contexts, so a shard alone \
                 would rank differently from a single run: run it unsharded"
            );
        }
        let all = read_contexts(&args.input)?;
        let options = options.with_prior(prior_scores(&args, &all)?);
        let contexts = take_shard(all, shard);
        // The human scores are checked now (the run reads them again when it ends): a
        // missing --human-key or a score that is not a number is refused before any model
        // call.
        human_key_for(
            &contexts,
            args.human_key.as_deref(),
            &score_keys(&options.attribute.name),
        )?;
        if rubric.is_some() && args.reference {
            check_references(&contexts, "--reference", true)?;
        }
        if rubric.is_some() && !args.no_feedback && args.design == Design::Adaptive {
            bail!(
                "relative rubric grading with feedback cannot use --design adaptive (the \
                 feedbacks are written before the comparisons are read): add --no-feedback, \
                 or use another design"
            );
        }
        Ok((options, shard, contexts, jury, rubric))
    })()
    .map_err(super::input_error)?;
    if let Some(warning) = empty_candidates_warning(&contexts) {
        eprintln!("{warning}");
    }
    if let Some(jurors) = jury {
        return run_jury(&args, &options, &contexts, &jurors);
    }
    let cache = args.cache.open()?;
    let cache_path = cache.as_ref().map(|c| c.location().to_string());
    let mut scorer = args.model.load()?;
    if let Some(rubric) = rubric {
        let relative = RelativeGrading::new(
            scorer.as_ref(),
            rubric,
            args.protocol.clone(),
            (!args.no_feedback).then_some(args.max_feedback_tokens),
            args.reference,
        )
        .and_then(|grading| grading.with_thinking(args.max_reasoning_tokens, args.no_thinking))
        .map_err(super::input_error)?;
        eprintln!(
            "relative rubric grading: rubric {} ({}), {} format ({}), {}",
            relative.rubric.name,
            relative.rubric.criterion,
            relative.protocol,
            relative.protocol_source.describe(),
            match relative.feedback_tokens {
                Some(tokens) => format!(
                    "a feedback of at most {tokens} tokens per ordered pair, then {} read \
                     after `{}`",
                    relative.choices_named(),
                    relative.marker()
                ),
                None => format!(
                    "{} read right after `{}`",
                    relative.choices_named(),
                    relative.marker()
                ),
            }
        );
        options.relative = Some(Box::new(relative));
    }
    if args.show_prompt {
        eprint!(
            "{}",
            show_first_prompt(scorer.as_ref(), &contexts, &options)?
        );
    }
    // Candidates too long for the model are named and left out; the others are ranked.
    let FittedRun {
        result, contexts, ..
    } = compare_what_fits(scorer.as_mut(), contexts, &options, cache.as_ref())?;
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
            write_file(path, |out| write_scores(&result, &contexts, out))?;
            wrote.push(format!(
                "scores (context_id, candidate_id, score, rank): {}",
                path.display()
            ));
            let sidecar = write_diagnostics(path, &result.diagnostics)?;
            wrote.push(format!("judge diagnostics: {}", sidecar.display()));
        }
        None => {
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            write_scores(&result, &contexts, &mut out)?;
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
    if let Some(path) = &args.report {
        let facts = report_facts(&args, &options, &result, scorer.info());
        let page = Report::from_compare(
            &format!(
                "{}: {} of {} context(s)",
                args.input.file_name().map_or_else(
                    || args.input.display().to_string(),
                    |n| n.to_string_lossy().to_string()
                ),
                options.attribute.name,
                contexts.len()
            ),
            facts,
            &result,
            &contexts,
            rank_name(result.rank),
        )?
        .with_diagnostics(&result.diagnostics);
        wrote.push(write_report(path, &page)?);
    }
    match &cache_path {
        Some(path) => wrote.push(format!(
            "model answers cached (a rerun reuses them): {path}"
        )),
        None => wrote.push("nothing cached (--no-cache)".to_string()),
    }
    let mut report = format_tables(&result, &contexts);
    match &result.human_key {
        Some(key) if args.correlate => {
            let items = result.correlation_items(&contexts, key);
            report.push_str(&format!(
                "\nagreement with the human scores `{key}` (as `nlg-judge correlate --pred \
                 score --human scores.{key} --bootstrap {RUN_RESAMPLES}` on the output):\n"
            ));
            report.push_str(&run_summary(&items).context("--correlate")?);
        }
        Some(_) => {}
        None => report.push_str(&format!(
            "warning: no human score matches `{}`{}; the human scores in {} are: {}\n",
            args.human_key
                .as_deref()
                .unwrap_or(&result_attribute(&options)),
            if args.human_key.is_some() {
                ""
            } else {
                " (the attribute; name another with --human-key)"
            },
            args.input.display(),
            match human_keys(&contexts) {
                keys if keys.is_empty() => "none".to_string(),
                keys => keys.join(", "),
            }
        )),
    }
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
