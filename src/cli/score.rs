//! `nlg-judge score`: absolute scoring of every candidate on its own (prompt scoring,
//! G-Eval, GPTScore, rubric grading), cached and resumable like `compare`.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context as _, Result};
use clap::Args;

use super::cache_args::CacheArgs;
use super::compare::{diagnostics_path, file_name, write_diagnostics, write_file, write_report};
use super::compare_table::format_score_tables;
use super::jury::{
    format_jury, human_agreement, judge_args, jurors, jury_facts, same_model_warning,
    weights as jury_weights, write_jury_run, Juror, WeightsArg,
};
use super::model_args::ModelArgs;
use super::outputs::PlannedPaths;
use super::shard_args::{check_output, take_shard, write_sidecar, ShardArgs};
use crate::data::{empty_candidates_warning, human_key_for, human_keys, read_single_contexts};
use crate::judge::attribute::builtin_attribute_list;
use crate::judge::attribute::score_keys;
use crate::judge::diagnostics::Diagnostics;
use crate::judge::geval::steps::DEFAULT_MAX_TOKENS;
use crate::judge::geval::Criteria;
use crate::judge::geval::StepsOrigin;
use crate::judge::jury::combine_scores;
use crate::judge::rubric::run::DEFAULT_FEEDBACK_TOKENS;
use crate::judge::rubric::{rubric_facts, Rubric, RubricProtocol};
use crate::judge::scoring::{check_references, show_first_prompt};
use crate::judge::{
    resolve_method, run_scoring, write_run, ResolvedMethod, RubricChoice, RubricRequest,
    ScoreMethod, ScoreOptions, ScoreRequest, ScoreRun, ScoreScale, Task,
};
use crate::report::{score_run, Report};
use crate::shard::fingerprint::file_sha256;
use crate::shard::Fingerprint;
use crate::stats::report::{run_summary, RUN_RESAMPLES};
use sha2::{Digest, Sha256};

/// Arguments of `nlg-judge score`.
#[derive(Debug, Args)]
pub struct ScoreArgs {
    #[command(flatten)]
    pub model: ModelArgs,

    /// Scoring method: prompt (ask for a 1-10 score, expectation over the score tokens),
    /// geval (G-Eval: criteria, evaluation steps, form filling), gptscore (mean
    /// log-likelihood of the candidate) or rubric (grading with --rubric in the judge
    /// model's own format: the model writes a feedback, then the score is read after its
    /// result marker; the feedback costs one generation per candidate, all of a run's in
    /// one batch through the prefix trie; see --no-feedback).
    #[arg(long, value_enum, default_value_t = ScoreMethod::Geval)]
    pub method: ScoreMethod,

    /// Candidates in the generic JSONL format (one candidate per line, see `convert`).
    #[arg(long)]
    pub input: PathBuf,

    // Not required by clap: `--method rubric` without `--rubric` is asked for its rubric
    // first (the attribute defaults to the rubric's name), and the library says what a
    // run without an attribute needs (`ScoreRequest::options`).
    #[arg(long, help = attribute_help())]
    pub attribute: Option<String>,

    /// GPTScore: the adjective of an attribute that is not built in ("empathetic"; "more
    /// empathetic" also reads), for its instruction "... that is empathetic". Prompt
    /// scoring needs none (its prompt names the attribute: "... measures the summary's
    /// empathy"); G-Eval takes --criteria-text.
    #[arg(long, value_name = "PHRASE")]
    pub adjective: Option<String>,

    /// Key of the human scores (in `scores`) for --correlate (default: the attribute's
    /// name, matched case-insensitively).
    #[arg(long, value_name = "KEY")]
    pub human_key: Option<String>,

    /// At the end, correlate the scores with the human scores (summary level, 95%
    /// bootstrap intervals over 1000 resamples of the contexts, seed 0), as `correlate`
    /// does on the output file.
    #[arg(long)]
    pub correlate: bool,

    /// Kind of data; sets the wording of the prompts and G-Eval's built-in criteria.
    /// summary: "Summary:" (prompt scoring, GPTScore), "Source Text:" and "Summary:"
    /// (G-Eval); dialogue: "Response:", "Conversation History:" and "Response:";
    /// data-to-text: "Text:", "Triples:" and "Text:"; custom: the generic "Text:",
    /// "Input:" and "Output:", no built-in criteria. Default: summary for a built-in
    /// attribute or criterion, custom for your own (an attribute with --adjective, or
    /// --criteria-text). A --criteria file's headings are its own.
    #[arg(long, value_enum)]
    pub task: Option<Task>,

    /// G-Eval criteria file (TOML: name, scale, introduction, criterion; see
    /// criteria/README.md) instead of the built-in criteria for the attribute.
    #[arg(long, value_name = "FILE", conflicts_with = "criteria_text")]
    pub criteria: Option<PathBuf>,

    /// G-Eval criteria as one free-text string, e.g. "Coherence (1-5): evaluate the
    /// logical flow and connection between sentences." The scale comes from a (1-5)-style
    /// range in the text, else from --scale, else 1-5; the form line's name is the text
    /// before the range or the first colon.
    #[arg(long, value_name = "TEXT")]
    pub criteria_text: Option<String>,

    /// G-Eval task introduction (the task prompt) to use with --criteria-text or
    /// instead of the criteria's own introduction.
    #[arg(long, value_name = "TEXT")]
    pub task_prompt: Option<String>,

    /// G-Eval evaluation steps from this file instead of steps the model writes (those
    /// are written once per model and criteria, and kept in the result cache unless
    /// --no-cache).
    #[arg(long, value_name = "FILE")]
    pub steps: Option<PathBuf>,

    /// Most tokens the model may write for G-Eval's evaluation steps.
    #[arg(long, default_value_t = DEFAULT_MAX_TOKENS)]
    pub max_step_tokens: usize,

    /// Score scale as LOW-HIGH (prompt scoring: default 1-10; G-Eval: replaces the
    /// criteria's scale).
    #[arg(long, value_parser = parse_scale)]
    pub scale: Option<ScoreScale>,

    /// G-Eval: show each candidate's `reference` as the expected output
    /// (reference-based rating); rubric grading: as the reference answer (Prometheus'
    /// "Reference Answer (Score 5)").
    #[arg(long)]
    pub reference: bool,

    #[arg(long, value_name = "NAME|FILE", help = rubric_help())]
    pub rubric: Option<String>,

    #[arg(long, value_name = "NAME|FILE", value_parser = super::values::parse_protocol,
          help = super::values::protocol_help("Rubric grading"))]
    pub protocol: Option<RubricProtocol>,

    /// Rubric grading: no feedback; read the score right after the rubric prompt and the
    /// result marker. Goes through the prefix trie like prompt scoring (no generation),
    /// where the default writes a feedback first: one generation per candidate.
    #[arg(long)]
    pub no_feedback: bool,

    /// Rubric grading: most tokens of each feedback (a feedback cut here gets the result
    /// marker appended, and counts in the `format` diagnostic).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_FEEDBACK_TOKENS)]
    pub max_feedback_tokens: usize,

    /// Rubric grading with a thinking judge (a protocol with reasoning markers): most
    /// tokens of its reasoning before the feedback (default 1024). A reasoning cut here is
    /// closed before the verdict is read, and counts in the `format` diagnostic.
    #[arg(long, value_name = "N")]
    pub max_reasoning_tokens: Option<usize>,

    /// Rubric grading with a thinking judge: thinking off (its answer opens with an empty
    /// reasoning, where its protocol says how: Qwen3's enable_thinking=false).
    #[arg(long, conflicts_with = "max_reasoning_tokens")]
    pub no_thinking: bool,

    /// Write one line per candidate (context_id, candidate_id, system_id, score, the
    /// probabilities, the human scores) here; default: standard output.
    #[arg(long)]
    pub output: Option<PathBuf>,

    /// Also write a report to open in a browser: one self-contained HTML file (nothing
    /// loaded from elsewhere) with every context's ranking, each candidate's text and
    /// answer distribution, rubric grading's feedback, and the agreement with the human
    /// scores where they exist; for a jury, its ranking beside each judge's run and the
    /// judges' agreement. A FILE.md gets the same report as Markdown.
    #[arg(long, value_name = "FILE.html")]
    pub report: Option<PathBuf>,

    /// Also write the G-Eval evaluation steps in use to this file.
    #[arg(long, value_name = "FILE")]
    pub steps_out: Option<PathBuf>,

    #[command(flatten)]
    pub cache: CacheArgs,

    #[command(flatten)]
    pub shard: ShardArgs,

    /// Print the first candidate's prompt as the model reads it, then continue.
    #[arg(long)]
    pub show_prompt: bool,

    /// A jury: a TOML file naming the judges (`[[judge]]` with `model`, optionally
    /// `backend` and `weight`). Each judge scores every candidate in turn (one model in
    /// memory at a time); the jury's score is the weighted mean of the judges' scores,
    /// each standardised over the run. `--model A --model B` is a jury of A and B too.
    #[arg(long, value_name = "FILE")]
    pub jury: Option<PathBuf>,

    /// How a jury's judges weigh where the jury file gives no weights: equal, or learned
    /// from their agreement (a judge's mean Spearman with the others).
    #[arg(long, value_enum, default_value_t = WeightsArg::Equal)]
    pub jury_weights: WeightsArg,
}

/// The help of `--attribute`: the built-in lists are the ones the errors give.
fn attribute_help() -> String {
    let geval: Vec<String> = [Task::Summary, Task::Dialogue, Task::DataToText]
        .into_iter()
        .map(|task| {
            let list = Criteria::builtin_list(task).unwrap_or_else(|e| format!("({e})"));
            format!("{list} (--task {})", task.name())
        })
        .collect();
    format!(
        "Attribute to judge (needed unless --criteria-text or --rubric names it). G-Eval's \
         built-in criteria: {}; any other with --criteria or --criteria-text (with \
         --criteria-text it defaults to the criterion's name). GPTScore: built-in {}; any \
         other with --adjective. Prompt scoring: any name (its prompt names the attribute). \
         Rubric grading: defaults to the rubric's name",
        geval.join("; "),
        builtin_attribute_list()
    )
}

/// The help of `--rubric`: the built-in list is the one errors give.
fn rubric_help() -> String {
    format!(
        "Rubric grading (--method rubric): a built-in rubric by name, or a rubric file \
         (.toml or .json: name, criterion, one description per score; see \
         rubrics/README.md). Built-in: {}. A name alone is taken from --task's group when \
         several have it (summary by default); the attribute defaults to the rubric's name",
        Rubric::builtin_list().unwrap_or_else(|e| format!("({e})"))
    )
}

/// The task the run uses: `--task`, else the library's default for what is judged.
fn task(args: &ScoreArgs) -> Task {
    args.task.unwrap_or_else(|| {
        ScoreRequest::default_task(
            args.method,
            args.attribute.as_deref(),
            args.criteria_text.as_deref(),
        )
    })
}

fn parse_scale(text: &str) -> Result<ScoreScale, String> {
    ScoreScale::parse(text).map_err(|e| format!("{e:#}"))
}

/// The options of a run from the arguments (files read, method-specific flags checked).
fn options(args: &ScoreArgs) -> Result<ScoreOptions> {
    if args.method != ScoreMethod::Geval && args.steps_out.is_some() {
        anyhow::bail!("--steps-out applies to --method geval only");
    }
    if args.method != ScoreMethod::Rubric {
        let rubric_only = [
            ("--rubric", args.rubric.is_some()),
            ("--protocol", args.protocol.is_some()),
            ("--no-feedback", args.no_feedback),
            (
                "--max-reasoning-tokens",
                args.max_reasoning_tokens.is_some(),
            ),
            ("--no-thinking", args.no_thinking),
            (
                "--max-feedback-tokens",
                args.max_feedback_tokens != DEFAULT_FEEDBACK_TOKENS,
            ),
        ];
        if let Some((flag, _)) = rubric_only.iter().find(|(_, set)| *set) {
            anyhow::bail!("{flag} applies to --method rubric only");
        }
    }
    if args.no_feedback && args.max_feedback_tokens != DEFAULT_FEEDBACK_TOKENS {
        anyhow::bail!(
            "--max-feedback-tokens does not apply with --no-feedback (no feedback is written)"
        );
    }
    let request = ScoreRequest {
        method: args.method,
        attribute: args.attribute.clone(),
        adjective: args.adjective.clone(),
        task: task(args),
        criteria: args.criteria.clone(),
        criteria_text: args.criteria_text.clone(),
        task_prompt: args.task_prompt.clone(),
        steps: args.steps.clone(),
        max_step_tokens: args.max_step_tokens,
        scale: args.scale,
        reference: args.reference,
        rubric: args.rubric.as_ref().map(|rubric| RubricRequest {
            rubric: RubricChoice::Named(rubric.clone()),
            protocol: args.protocol.clone(),
            feedback: !args.no_feedback,
            max_feedback_tokens: args.max_feedback_tokens,
            max_reasoning_tokens: args.max_reasoning_tokens,
            thinking_off: args.no_thinking,
        }),
        audience: Default::default(),
    };
    let progress = super::progress::bars("score");
    if args.task.is_none() && request.task == Task::Custom {
        progress.note(
            "note: no --task given for an attribute or criteria of your own: the prompts use \
             the generic nouns of --task custom (\"Text:\", \"Input:\", \"Output:\"); give --task \
             summary, dialogue or data-to-text for those tasks' wording",
        );
    }
    request.options(progress)
}

/// A jury's run: each judge scores every candidate in turn (G-Eval's steps written by
/// each judge for itself), then their standardised scores are averaged.
fn run_jury(
    args: &ScoreArgs,
    options: &ScoreOptions,
    contexts: &[crate::data::Context],
    human_key: Option<&str>,
    jurors: &[Juror],
) -> Result<()> {
    let weights = jury_weights(jurors, args.jury_weights).map_err(super::input_error)?;
    let cache = args.cache.open()?;
    let cache_path = cache.as_ref().map(|c| c.location().to_string());
    let mut names = Vec::with_capacity(jurors.len());
    let mut runs = Vec::with_capacity(jurors.len());
    let mut models = Vec::with_capacity(jurors.len());
    let mut earlier: Vec<(String, String)> = Vec::with_capacity(jurors.len());
    for (name, model) in judge_args(&args.model, jurors) {
        eprintln!("judge {} of {}: {name}", names.len() + 1, jurors.len());
        let mut scorer = model.load().with_context(|| format!("judge `{name}`"))?;
        let fingerprint = scorer.info().fingerprint.clone();
        if let Some(warning) = same_model_warning(&earlier, &name, &fingerprint) {
            eprintln!("{warning}");
        }
        earlier.push((name.clone(), fingerprint));
        let method = resolve_method(scorer.as_mut(), options, cache.as_ref())
            .with_context(|| format!("judge `{name}`"))?;
        let run = run_scoring(
            scorer.as_mut(),
            contexts,
            &method,
            &options.progress,
            cache.as_ref(),
        )
        .with_context(|| format!("judge `{name}`"))?;
        models.push(scorer.info().name.clone());
        names.push(name);
        runs.push(run);
    }
    let refs: Vec<&ScoreRun> = runs.iter().collect();
    let jury = combine_scores(&names, &refs, &weights)?;
    let diagnostics: Vec<Diagnostics> = runs.iter().map(|r| r.diagnostics.clone()).collect();
    let mut report = format_jury(&jury, contexts, &diagnostics);
    if let (Some(key), true) = (human_key, args.correlate) {
        report.push_str(&human_agreement(&jury, contexts, key));
    }
    let mut wrote = Vec::new();
    if let Some(path) = &args.report {
        let mut facts = jury_facts(&args.input, &jury, &models);
        facts.push((
            "method".to_string(),
            format!("{:?}", args.method).to_lowercase(),
        ));
        // Each judge grades in its own protocol unless one was asked for: the rubric
        // and the feedback bound are the jury's, the protocols each judge's.
        if let Some(ResolvedMethod::Rubric(first)) = runs.first().map(|r| &r.method) {
            let mut shared = rubric_facts_of(first);
            shared[1].1 = runs
                .iter()
                .zip(&names)
                .map(|(run, name)| match &run.method {
                    ResolvedMethod::Rubric(r) => {
                        format!("{name}: {} ({})", r.protocol, r.protocol_source.describe())
                    }
                    _ => format!("{name}: -"),
                })
                .collect::<Vec<_>>()
                .join("; ");
            facts.extend(shared);
        }
        facts.push((
            "jury scores".to_string(),
            "the weighted mean of the judges' scores, each standardised over the run".to_string(),
        ));
        facts.push((
            "human scores".to_string(),
            human_key.unwrap_or("none").to_string(),
        ));
        let judges = runs
            .iter()
            .map(|run| {
                let (name, score) = report_names(&run.method, options);
                let view = score_run(&name, &score, &run.candidates, contexts, human_key)?;
                Ok((view, run.diagnostics.clone()))
            })
            .collect::<Result<Vec<_>>>()?;
        let attribute = report_names(&runs[0].method, options).0;
        let page = Report::from_jury(
            &format!(
                "{}: {attribute} of {} context(s), a jury of {}",
                file_name(&args.input),
                contexts.len(),
                names.len()
            ),
            facts,
            &jury,
            contexts,
            "jury score (standardised)",
            human_key,
            judges,
        )?;
        wrote.push(write_report(path, &page)?);
    }
    let scores_line = "scores (context_id, candidate_id, score, rank, judges; the jury's score \
                       is the weighted mean of the judges' standardised scores)";
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

/// A rubric run's facts for the report's run panel: the rubric, the protocol and the
/// feedback bound.
fn rubric_facts_of(rubric: &crate::judge::rubric::RubricMethod) -> Vec<(String, String)> {
    rubric_facts(
        &rubric.rubric,
        &rubric.protocol,
        rubric.protocol_source,
        rubric.feedback_tokens,
        rubric.marker(),
        "candidate",
        "the score",
    )
}

/// What a report calls a run's attribute and its scores.
fn report_names(method: &ResolvedMethod, options: &ScoreOptions) -> (String, String) {
    match method {
        ResolvedMethod::Prompt { attribute, .. } => {
            (attribute.name.clone(), "expected score".to_string())
        }
        ResolvedMethod::Geval { criteria, .. } => {
            (criteria.name.clone(), "G-Eval score".to_string())
        }
        ResolvedMethod::Gptscore { .. } => (
            options.attribute.clone(),
            "GPTScore (mean log-prob)".to_string(),
        ),
        ResolvedMethod::Rubric(rubric) => (
            rubric.rubric.name.clone(),
            format!("rubric score ({} format)", rubric.protocol),
        ),
    }
}

/// A summary of the run for people.
fn summary(run: &ScoreRun) -> String {
    let n = run.candidates.len().max(1) as f64;
    let mean = run.candidates.iter().map(|c| c.score).sum::<f64>() / n;
    let mut text = format!(
        "{} candidates scored by {} ({} computed, {} from the cache); mean score {mean:.4}",
        run.candidates.len(),
        run.method.method().name(),
        run.computed,
        run.cached
    );
    let masses: Vec<f64> = run
        .candidates
        .iter()
        .filter_map(|c| c.distribution.as_ref().map(|d| d.mass))
        .collect();
    if !masses.is_empty() {
        let mean_mass = masses.iter().sum::<f64>() / masses.len() as f64;
        text.push_str(&format!("; mean probability on the scale {mean_mass:.4}"));
    }
    text.push('\n');
    text.push_str(&run.diagnostics.text());
    text
}

pub fn run(args: ScoreArgs) -> Result<()> {
    // Decided from the options and the input before any model is loaded: a failure
    // here is the user's to fix (exit code 2).
    let (options, shard, contexts, human_key, jury) = (|| -> Result<_> {
        let options = options(&args)?;
        let shard = args.shard.resolve()?;
        let jury = jurors(&args.model, args.jury.as_deref())?;
        if jury.is_some() {
            let single_only = [
                ("--shard/--shards", shard.is_some()),
                ("--steps-out", args.steps_out.is_some()),
                ("--backend", args.model.backend.backend.is_some()),
            ];
            if let Some((flag, _)) = single_only.iter().find(|(_, given)| *given) {
                anyhow::bail!(
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
            .maybe_input("--criteria", args.criteria.as_deref())
            .maybe_input("--steps", args.steps.as_deref())
            .maybe_input(
                "--rubric",
                args.rubric
                    .as_deref()
                    .map(std::path::Path::new)
                    .filter(|path| path.is_file()),
            )
            .cache(&args.cache)
            .output("--output", args.output.as_deref())
            .output("--output's diagnostics", diagnostics.as_deref())
            .output("--report", args.report.as_deref())
            .output("--steps-out", args.steps_out.as_deref())
            .check()?;
        let contexts = take_shard(read_single_contexts(&args.input)?, shard);
        if options.reference {
            check_references(&contexts, "--reference", false)?;
        }
        // The human scores are read now: a bad one is refused before any model call.
        let human_key = human_key_for(
            &contexts,
            args.human_key.as_deref(),
            &score_keys(&options.attribute),
        )?;
        Ok((options, shard, contexts, human_key, jury))
    })()
    .map_err(super::input_error)?;
    if let Some(warning) = empty_candidates_warning(&contexts) {
        eprintln!("{warning}");
    }
    if let Some(jurors) = jury {
        return run_jury(&args, &options, &contexts, human_key.as_deref(), &jurors);
    }
    let cache = args.cache.open()?;
    let cache_path = cache.as_ref().map(|c| c.location().to_string());
    let mut scorer = args.model.load()?;
    let method = resolve_method(scorer.as_mut(), &options, cache.as_ref())?;
    if let ResolvedMethod::Rubric(rubric) = &method {
        eprintln!(
            "rubric {} ({}), {} format ({}), {}",
            rubric.rubric.name,
            rubric.rubric.scale,
            rubric.protocol,
            rubric.protocol_source.describe(),
            match rubric.feedback_tokens {
                Some(tokens) => format!(
                    "a feedback of at most {tokens} tokens per candidate, then the score read \
                     after `{}`",
                    rubric.marker()
                ),
                None => format!("the score read right after `{}`", rubric.marker()),
            }
        );
    }
    if let ResolvedMethod::Geval {
        criteria, steps, ..
    } = &method
    {
        let origin = match steps.origin {
            StepsOrigin::Given => "given",
            StepsOrigin::Cached => "from the cache",
            StepsOrigin::Generated => "written by the model",
        };
        eprintln!(
            "G-Eval {} ({}), evaluation steps {origin}:\n{}\n",
            criteria.name, criteria.scale, steps.text
        );
        if let Some(path) = &args.steps_out {
            write_file(path, |out| Ok(writeln!(out, "{}", steps.text)?))?;
        }
    }
    if args.show_prompt {
        eprint!(
            "{}",
            show_first_prompt(scorer.as_ref(), &contexts, &method)?
        );
    }
    let run = run_scoring(
        scorer.as_mut(),
        &contexts,
        &method,
        &options.progress,
        cache.as_ref(),
    )?;
    let mut report = format_score_tables(&run, &contexts);
    report.push_str(&summary(&run));
    let wanted = args.human_key.clone().unwrap_or(options.attribute.clone());
    if let Some(path) = &args.report {
        let (name, score) = report_names(&method, &options);
        let facts = vec![
            ("input".to_string(), args.input.display().to_string()),
            ("model".to_string(), scorer.info().name.clone()),
            (
                "method".to_string(),
                format!("{:?}", args.method).to_lowercase(),
            ),
            ("attribute".to_string(), name.clone()),
            (
                "model answers".to_string(),
                format!("{} computed, {} from the cache", run.computed, run.cached),
            ),
            (
                "human scores".to_string(),
                human_key.clone().unwrap_or_else(|| "none".to_string()),
            ),
        ];
        let mut facts = facts;
        if let ResolvedMethod::Rubric(rubric) = &method {
            facts.splice(3..3, rubric_facts_of(rubric));
        }
        let title = format!(
            "{}: {name} of {} context(s)",
            file_name(&args.input),
            contexts.len()
        );
        let page = Report::from_scores(
            &title,
            facts,
            &name,
            &score,
            &run.candidates,
            &contexts,
            human_key.as_deref(),
        )?
        .with_diagnostics(&run.diagnostics);
        report.push_str(&format!("results: {}\n", write_report(path, &page)?));
    }
    match human_key {
        Some(key) if args.correlate => {
            let items = run.correlation_items(&key);
            report.push_str(&format!(
                "\nagreement with the human scores `{key}` (as `nlg-judge correlate --pred \
                 score --human scores.{key} --bootstrap {RUN_RESAMPLES}` on the output):\n"
            ));
            report.push_str(&run_summary(&items).context("--correlate")?);
        }
        Some(_) => {}
        None => {
            let keys = human_keys(&contexts);
            report.push_str(&format!(
                "warning: no human score matches `{wanted}`; the human scores in {} are: {}\n",
                args.input.display(),
                if keys.is_empty() {
                    "none".to_string()
                } else {
                    keys.join(", ")
                }
            ))
        }
    }
    let cached_line = match &cache_path {
        Some(path) => format!("results: model answers cached (a rerun reuses them): {path}\n"),
        None => "results: nothing cached (--no-cache)\n".to_string(),
    };
    match &args.output {
        Some(path) => {
            write_file(path, |out| write_run(&run, out))?;
            let sidecar = write_diagnostics(path, &run.diagnostics)?;
            report.push_str(&format!(
                "results: scores (context_id, candidate_id, score, distribution{}): {}\n",
                match (args.method, args.no_feedback) {
                    (ScoreMethod::Rubric, false) => ", feedback, format, rubric",
                    (ScoreMethod::Rubric, true) => ", rubric",
                    _ => "",
                },
                path.display()
            ));
            report.push_str(&format!(
                "results: judge diagnostics: {}\n",
                sidecar.display()
            ));
            if let Some(spec) = shard {
                let mut print = Fingerprint::new();
                let model = scorer.info();
                print.insert("command".into(), "score".into());
                print.insert("nlg_judge_version".into(), env!("CARGO_PKG_VERSION").into());
                print.insert("model".into(), model.name.clone());
                print.insert("model_sha256".into(), model.fingerprint.clone());
                // The resolved method holds the criteria, scale and evaluation steps.
                let method = format!("{method:?}");
                print.insert(
                    "method".into(),
                    method.split(' ').next().unwrap_or("").into(),
                );
                print.insert(
                    "method_sha256".into(),
                    hex::encode(Sha256::digest(method.as_bytes())),
                );
                print.insert("input_sha256".into(), file_sha256(&args.input)?);
                write_sidecar(path, spec, print, &contexts)?;
            }
            report.push_str(&cached_line);
            print!("{report}");
        }
        None => {
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            write_run(&run, &mut out)?;
            out.flush()?;
            report.push_str(
                "results: scores (context_id, candidate_id, score, distribution): standard \
                 output, as JSONL\n",
            );
            report.push_str(&cached_line);
            eprint!("{report}");
        }
    }
    Ok(())
}
