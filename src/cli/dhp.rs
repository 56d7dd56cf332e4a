//! `nlg-judge dhp perturb|score|analyze|report`: the DHP discernment benchmark
//! (see [`crate::dhp`]). Argument parsing, progress bars and printing live here; the
//! work is done by the library.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use clap::{Args, Subcommand};

use super::cache_args::CacheArgs;
use super::compare::write_file;
use super::model_args::ModelArgs;
use super::outputs::PlannedPaths;
use crate::data;
use crate::dhp::items::{load_items, ItemSource};
use crate::dhp::llm::LlmEditor;
use crate::dhp::perturb::{
    read_existing, run_perturb, select_perturbations, Editor, PerturbPlan, Status,
};
use crate::dhp::report::{self, ReportRun};
use crate::dhp::score::{
    score_perturbations, write_score_rows, DhpMethod, DhpScoreOptions, ScoreEvent,
};
use crate::dhp::{analyze, parse_score_rows, Analysis, DhpTask, Method, Weights};
use crate::judge::geval::StepsSource;

#[derive(Debug, Args)]
pub struct DhpArgs {
    #[command(subcommand)]
    pub command: DhpCommand,
}

#[derive(Debug, Subcommand)]
pub enum DhpCommand {
    /// Perturb a task's reference texts (rule-based and LLM-based), one JSONL row per
    /// item and perturbation; resumable (a rerun makes only the missing rows).
    Perturb(PerturbArgs),
    /// Score originals and perturbed copies with a judge model (cached, resumable).
    Score(ScoreArgs),
    /// Wilcoxon tests, combined p-values and discernment scores from score rows.
    Analyze(AnalyzeArgs),
    /// Markdown tables and a Figure-4-like bar chart from the JSON outputs of `analyze`.
    Report(ReportArgs),
}

#[derive(Debug, Args)]
pub struct PerturbArgs {
    #[arg(long, value_enum)]
    pub task: DhpTask,

    /// Directory holding the shared data sets (summeval/, storycloze/, wmt22/).
    #[arg(long, env = "NLG_JUDGE_DATA", default_value = data::DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,

    /// Question answering: your JSONL with `question`, `context`, `answer` (optional `id`).
    #[arg(long)]
    pub input: Option<PathBuf>,

    /// Translation: WMT22 language pair (de-en or zh-en).
    #[arg(long, default_value = "de-en")]
    pub pair: String,

    /// Seed of the item selection and of every perturbation.
    #[arg(long, default_value_t = 2024)]
    pub seed: u64,

    /// Number of items (the paper's N = 100).
    #[arg(long, default_value_t = 100)]
    pub limit: usize,

    /// Only these perturbations (comma-separated names; default: all of the task's).
    #[arg(long, value_delimiter = ',')]
    pub perturbations: Vec<String>,

    /// Only the rule-based perturbations (no model needed).
    #[arg(long)]
    pub rule_only: bool,

    /// Output JSONL (appended to when it exists: the run resumes).
    #[arg(long)]
    pub output: PathBuf,

    /// Generations tried per LLM edit, each with the next seed, before it is recorded as
    /// failed.
    #[arg(long, default_value_t = 3)]
    pub attempts: usize,

    /// Sampling temperature of LLM edits.
    #[arg(long, default_value_t = 0.7)]
    pub temperature: f64,

    /// Nucleus (top-p) mass of LLM edits.
    #[arg(long, default_value_t = 0.9)]
    pub top_p: f64,

    #[command(flatten)]
    pub model: ModelArgs,

    #[command(flatten)]
    pub cache: CacheArgs,
}

#[derive(Debug, Args)]
pub struct ScoreArgs {
    /// The rows of `dhp perturb`.
    #[arg(long)]
    pub input: PathBuf,

    /// geval (the paper's), prompt, gptscore (summarization only) or pairwise.
    #[arg(long, value_enum, default_value_t = DhpMethod::Geval)]
    pub method: DhpMethod,

    /// Only these metrics (comma-separated; default: all of the task's).
    #[arg(long, value_delimiter = ',')]
    pub metrics: Vec<String>,

    /// Score the texts without their context (article, story, source).
    #[arg(long)]
    pub no_context: bool,

    /// Score rows for `dhp analyze`.
    #[arg(long)]
    pub output: PathBuf,

    #[command(flatten)]
    pub model: ModelArgs,

    #[command(flatten)]
    pub cache: CacheArgs,
}

#[derive(Debug, Args)]
pub struct AnalyzeArgs {
    /// Score rows: {"item", "perturbation" (or "original"), "level", "metric", "score"}.
    #[arg(long)]
    pub scores: PathBuf,

    /// Expert weights (TOML); default: the task's shipped weights when --task is given.
    #[arg(long)]
    pub weights: Option<PathBuf>,

    /// The task, for its default expert weights.
    #[arg(long, value_enum)]
    pub task: Option<DhpTask>,

    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// One run as LABEL=ANALYSIS.json (what `dhp analyze` writes as JSON); repeat.
    #[arg(long = "run", value_name = "LABEL=FILE", required = true)]
    pub runs: Vec<String>,

    /// Title of the table and figure.
    #[arg(long, default_value = "DHP discernment")]
    pub title: String,

    /// Write the Markdown here (default: standard output).
    #[arg(long)]
    pub output: Option<PathBuf>,

    /// Write the bar chart here (.png or .svg).
    #[arg(long)]
    pub figure: Option<PathBuf>,

    /// Also write the tables and the chart as one self-contained HTML page.
    #[arg(long, value_name = "FILE.html")]
    pub report: Option<PathBuf>,

    /// Perturbation rows (`dhp perturb` output) whose ok/skipped/failed counts to report.
    #[arg(long)]
    pub perturbed: Vec<PathBuf>,
}

pub fn run(args: DhpArgs) -> Result<()> {
    match args.command {
        DhpCommand::Perturb(args) => perturb(args),
        DhpCommand::Score(args) => score(args),
        DhpCommand::Analyze(args) => analyze_command(args),
        DhpCommand::Report(args) => report_command(args),
    }
}

fn perturb(args: PerturbArgs) -> Result<()> {
    // The output is appended to (a rerun resumes), so it may exist; it must not be the
    // input or the cache.
    PlannedPaths::new()
        .maybe_input("--input", args.input.as_deref())
        .cache(&args.cache)
        .output("--output", Some(&args.output))
        .check()?;
    let items = load_items(
        args.task,
        &ItemSource {
            data_dir: &args.data_dir,
            input: args.input.as_deref(),
            pair: &args.pair,
            seed: args.seed,
            limit: args.limit,
        },
    )
    .map_err(|e| match args.input {
        Some(_) => super::input_error(e),
        None => super::data_error(e, &args.data_dir, "--data-dir"),
    })?;
    let perturbations = select_perturbations(args.task, &args.perturbations, args.rule_only)
        .map_err(super::input_error)?;
    let plan = PerturbPlan {
        task: args.task,
        perturbations,
        items: &items,
        seed: args.seed,
    };
    let needs_model = plan.perturbations.iter().any(|p| p.method() == Method::Llm);
    let cache = args.cache.open()?;
    let mut scorer = if needs_model {
        Some(args.model.load()?)
    } else {
        None
    };
    let mut editor = scorer.as_mut().map(|scorer| LlmEditor {
        scorer: scorer.as_mut(),
        cache: cache.as_ref(),
        seed: args.seed,
        attempts: args.attempts,
        temperature: args.temperature,
        top_p: args.top_p,
    });
    let total = items.len() * plan.perturbations.len();
    let done_before = read_existing(&args.output)?.len();
    // Rows already in the output are kept, not made again: the task is what is left.
    let progress = super::progress::bars("dhp perturb");
    let task = progress.task(total.saturating_sub(done_before) as u64, "rows");
    let (mut ok, mut skipped, mut failed) = (0, 0, 0);
    let (written, found) = run_perturb(
        &plan,
        &args.output,
        editor.as_mut().map(|e| e as &mut dyn Editor),
        &mut |row| {
            match row.status {
                Status::Ok => ok += 1,
                Status::Skipped => skipped += 1,
                Status::Failed => failed += 1,
            }
            task.advance(1);
            Ok(())
        },
    )?;
    drop(task);
    println!(
        "{}: {} items, {} perturbations; {written} rows made now ({ok} ok, {skipped} skipped, {failed} failed), {found} found in {}",
        args.task.name(),
        items.len(),
        plan.perturbations.len(),
        args.output.display()
    );
    Ok(())
}

fn score(args: ScoreArgs) -> Result<()> {
    let (rows, task) = (|| -> Result<_> {
        PlannedPaths::new()
            .input("--input", &args.input)
            .cache(&args.cache)
            .output("--output", Some(&args.output))
            .check()?;
        let rows = read_existing(&args.input)?;
        let task = rows
            .first()
            .map(|r| r.task)
            .with_context(|| format!("{} has no rows", args.input.display()))?;
        Ok((rows, task))
    })()
    .map_err(super::input_error)?;
    let metrics = if args.metrics.is_empty() {
        task.metrics().iter().map(|m| m.to_string()).collect()
    } else {
        args.metrics.clone()
    };
    let options = DhpScoreOptions {
        task,
        method: args.method,
        metrics,
        with_context: !args.no_context,
        steps: StepsSource::default(),
        progress: super::progress::bars("dhp score"),
    };
    let cache = args.cache.open()?;
    let mut scorer = args.model.load()?;
    let started = std::time::Instant::now();
    let scores = score_perturbations(
        scorer.as_mut(),
        &rows,
        &options,
        cache.as_ref(),
        &mut |event| match event {
            ScoreEvent::MetricStarted(metric) => {
                eprintln!("{} / {metric}", args.method.name());
                Ok(())
            }
            // Each finished metric is saved at once: a run stopped later keeps it (and a
            // rerun takes everything scored from the cache).
            ScoreEvent::MetricDone { metric, rows } => {
                write_file(&args.output, |out| write_score_rows(rows, out))
                    .with_context(|| format!("saving the rows of `{metric}`"))
            }
        },
    )?;
    write_file(&args.output, |out| write_score_rows(&scores, out))?;
    println!(
        "{} score rows ({} texts x {} metrics) written to {} in {:.1} s",
        scores.len(),
        scores.len() / options.metrics.len().max(1),
        options.metrics.len(),
        args.output.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn load_weights(args: &AnalyzeArgs) -> Result<Option<Weights>> {
    match (&args.weights, args.task) {
        (Some(path), _) => Ok(Some(Weights::from_file(path)?)),
        (None, Some(task)) => Ok(Some(Weights::default_for(task)?)),
        (None, None) => Ok(None),
    }
}

fn analyze_command(args: AnalyzeArgs) -> Result<()> {
    let (analysis, weights) = (|| -> Result<_> {
        let text = std::fs::read_to_string(&args.scores)
            .with_context(|| format!("cannot read {}", args.scores.display()))?;
        let rows = parse_score_rows(&text, &args.scores.display().to_string())?;
        let weights = load_weights(&args)?;
        Ok((analyze(&rows, weights.as_ref())?, weights))
    })()
    .map_err(super::input_error)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&analysis)?)?;
    } else {
        write!(out, "{}", report::perturbation_table(&analysis))?;
        if weights.is_none() {
            writeln!(
                out,
                "\n(no expert weights: pass --task for the shipped defaults or --weights FILE)"
            )?;
        }
    }
    Ok(())
}

fn read_analysis(path: &Path) -> Result<Analysis> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    report::parse_analysis(&text).with_context(|| format!("{}", path.display()))
}

fn report_command(args: ReportArgs) -> Result<()> {
    let (runs, markdown) = (|| -> Result<_> {
        let mut runs = Vec::new();
        let mut files = Vec::new();
        for spec in &args.runs {
            let (label, path) = spec
                .split_once('=')
                .with_context(|| format!("--run {spec}: expected LABEL=FILE"))?;
            files.push(Path::new(path));
            runs.push(ReportRun {
                label: label.to_string(),
                analysis: read_analysis(Path::new(path))?,
            });
        }
        PlannedPaths::new()
            .inputs("--run", files)
            .inputs("--perturbed", args.perturbed.iter().map(PathBuf::as_path))
            .output("--output", args.output.as_deref())
            .output("--figure", args.figure.as_deref())
            .output("--report", args.report.as_deref())
            .check()?;
        let mut markdown = report::markdown(&args.title, &runs);
        for path in &args.perturbed {
            let rows = read_existing(path)?;
            markdown.push_str(&format!(
                "\nPerturbed texts in {}:\n\n{}",
                path.file_name().map_or_else(
                    || path.display().to_string(),
                    |n| n.to_string_lossy().to_string()
                ),
                report::status_table(&rows)
            ));
        }
        Ok((runs, markdown))
    })()
    .map_err(super::input_error)?;
    match &args.output {
        Some(path) => write_file(path, |out| Ok(out.write_all(markdown.as_bytes())?))?,
        None => print!("{markdown}"),
    }
    if let Some(path) = &args.figure {
        report::write_figure(&args.title, &runs, path)?;
    }
    if let Some(path) = &args.report {
        let chart = crate::figure::svg_string(&report::DiscernmentChart {
            title: &args.title,
            runs: &runs,
        })?;
        let facts = args
            .runs
            .iter()
            .filter_map(|spec| spec.split_once('='))
            .map(|(label, file)| (label.to_string(), file.to_string()))
            .collect();
        let mut page = crate::report::Report::with_markdown(
            &args.title,
            facts,
            &markdown,
            &Default::default(),
        );
        page.sections.insert(
            0,
            crate::report::Section {
                title: "Discernment by run".to_string(),
                html: format!(
                    "<figure class=\"svg\">{chart}<figcaption>D = log_0.05(p) of the combined \
                     p-value; above the red line (D = 1) the judge tells the perturbed texts \
                     from the originals at the 5% level.</figcaption></figure>"
                ),
            },
        );
        page.write(path)?;
    }
    Ok(())
}
