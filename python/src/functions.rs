//! The package's functions without a model: meta-evaluation (`correlate`), reference-based
//! metrics, DHP perturbation and analysis, and the `nlg-judge` command itself.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context as _, Result};
use clap::Parser;
use pyo3::prelude::*;
use serde_json::json;

use nlg_judge::cli::correlate::{LevelArg, SkipArg};
use nlg_judge::data::predictions::{
    join_records, parse_rows, predictions_from_rows, read_joined, read_predictions, Field,
    PredictionFields,
};
use nlg_judge::dhp::items::{load_items, ItemSource};
use nlg_judge::dhp::llm::LlmEditor;
use nlg_judge::dhp::perturb::{run_perturb, select_perturbations, Editor, PerturbPlan, Status};
use nlg_judge::dhp::{analyze, parse_score_rows, DhpTask, Method, Weights};
use nlg_judge::metrics::{corpus_bleu, corpus_chrf, Aggregation, ChrfConfig, LexicalOptions};
use nlg_judge::pararef::input::metric_rows_from;
use nlg_judge::pararef::metric_table::{expand_references, score_rows, MetricSelection};
use nlg_judge::pararef::{read_metric_rows, read_paraphrases};
use nlg_judge::stats::report::{report_json, report_table};
use nlg_judge::stats::{bootstrap_ci, meta_evaluate, BootstrapOptions, Item, Level, SkipRule};

use crate::convert::{choice, names, optional_choice, Source};
use crate::errors::{input, OrPy};
use crate::judge::NativeJudge;
use crate::worker::run_detached;

/// How to meta-evaluate (the options of `nlg-judge correlate`).
pub struct CorrelateSettings {
    level: Level,
    skip: SkipRule,
    bootstrap: Option<BootstrapOptions>,
}

impl CorrelateSettings {
    pub fn new(
        level: &str,
        skip: &str,
        bootstrap: Option<usize>,
        seed: u64,
        ci: f64,
    ) -> Result<Self> {
        Ok(Self {
            level: choice::<LevelArg>("level", level)?.into(),
            skip: choice::<SkipArg>("skip", skip)?.into(),
            bootstrap: bootstrap.map(|resamples| BootstrapOptions {
                resamples,
                confidence: ci,
                seed,
            }),
        })
    }
}

/// The report of `nlg-judge correlate` for `items`: its `--json` object and its table.
pub fn correlate_items(items: &[Item], settings: &CorrelateSettings) -> Result<(String, String)> {
    let result = meta_evaluate(items, settings.level, settings.skip).map_err(input)?;
    let ci = match &settings.bootstrap {
        Some(options) => Some(
            bootstrap_ci(items, settings.level, settings.skip, options, || {}).map_err(input)?,
        ),
        None => None,
    };
    Ok((
        report_json(&result, settings.skip, ci.as_ref()).to_string(),
        report_table(&result, settings.skip, ci.as_ref()),
    ))
}

/// Meta-evaluation, as `nlg-judge correlate`: of `items` (group, system, pred, human), or
/// of the fields `pred`, `human`, `group`, `system` of `input` (a path or rows), or of
/// `pred_file` joined with `human_file`. Returns the `--json` object and the table.
#[pyfunction]
#[pyo3(signature = (items, input, pred_file, human_file, pred, human, group, system, level, skip, bootstrap, seed, ci))]
#[allow(clippy::too_many_arguments)]
pub fn correlate(
    py: Python<'_>,
    items: Option<Vec<(String, String, f64, f64)>>,
    input: Option<&Bound<'_, PyAny>>,
    pred_file: Option<&Bound<'_, PyAny>>,
    human_file: Option<&Bound<'_, PyAny>>,
    pred: Option<String>,
    human: Option<String>,
    group: String,
    system: String,
    level: String,
    skip: String,
    bootstrap: Option<usize>,
    seed: u64,
    ci: f64,
) -> PyResult<(String, String)> {
    let settings = CorrelateSettings::new(&level, &skip, bootstrap, seed, ci).or_py()?;
    let input = input.map(Source::extract).transpose()?;
    let pred_file = pred_file.map(Source::extract).transpose()?;
    let human_file = human_file.map(Source::extract).transpose()?;
    py.detach(move || {
        let items = match items {
            Some(items) => items
                .into_iter()
                .map(|(group, system, pred, human)| Item {
                    group,
                    system,
                    pred,
                    human,
                })
                .collect(),
            None => {
                let (pred, human) = match (&pred, &human) {
                    (Some(p), Some(h)) => (p.as_str(), h.as_str()),
                    _ => return Err(input_error("give pred= and human= (field names)")),
                };
                let fields = PredictionFields {
                    pred: Field::new(pred, "pred"),
                    human: Field::new(human, "human"),
                    group: Field::new(&group, "group"),
                    system: (settings.level == Level::System)
                        .then(|| Field::new(&system, "system")),
                };
                read_items(input, pred_file, human_file, &fields).map_err(crate::errors::input)?
            }
        };
        correlate_items(&items, &settings)
    })
    .or_py()
}

fn input_error(message: &str) -> anyhow::Error {
    input(anyhow!("{message}"))
}

fn read_items(
    input: Option<Source>,
    pred_file: Option<Source>,
    human_file: Option<Source>,
    fields: &PredictionFields,
) -> Result<Vec<Item>> {
    match (input, pred_file, human_file) {
        (Some(Source::Path(path)), None, None) => read_predictions(&path, fields),
        (Some(Source::Rows(rows)), None, None) => predictions_from_rows(&rows, fields),
        (None, Some(pred), Some(human)) => match (pred, human) {
            (Source::Path(p), Source::Path(h)) => read_joined(&p, &h, fields),
            (pred, human) => {
                let (pred_records, pred_name) = records(pred)?;
                let (human_records, human_name) = records(human)?;
                join_records(pred_records, &pred_name, human_records, &human_name, fields)
            }
        },
        _ => bail!("give input=, or pred_file= with human_file="),
    }
}

/// Records of a source, with its name for messages.
fn records(source: Source) -> Result<(Vec<(String, serde_json::Value)>, String)> {
    match source {
        Source::Path(path) => {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("cannot open input file {}", path.display()))?;
            let rows: Vec<(String, String)> = text
                .lines()
                .enumerate()
                .filter(|(_, l)| !l.trim().is_empty())
                .map(|(i, l)| (format!("{}:{}", path.display(), i + 1), l.to_string()))
                .collect();
            Ok((parse_rows(&rows)?, path.display().to_string()))
        }
        Source::Rows(rows) => Ok((parse_rows(&rows)?, "the rows".to_string())),
    }
}

/// What `nlg-judge metric` writes for `source` (a path or rows): one JSON line per row.
#[pyfunction]
#[pyo3(signature = (source, metrics, paraphrases, agg, stemmer, idf, sink=None))]
#[allow(clippy::too_many_arguments)]
pub fn metric_rows(
    py: Python<'_>,
    source: &Bound<'_, PyAny>,
    metrics: Vec<String>,
    paraphrases: Option<PathBuf>,
    agg: String,
    stemmer: bool,
    idf: bool,
    sink: Option<&Bound<'_, PyAny>>,
) -> PyResult<String> {
    let source = Source::extract(source)?;
    run_detached(py, sink, move |_| {
        let (selection, options, rows, paraphrases) = (|| -> Result<_> {
            let selection = MetricSelection::parse(&metrics)?;
            let options = LexicalOptions {
                aggregation: agg.parse::<Aggregation>()?,
                stemmer,
            };
            let rows = match &source {
                Source::Path(path) => read_metric_rows(path)?,
                Source::Rows(rows) => metric_rows_from(rows)?,
            };
            let paraphrases = match &paraphrases {
                Some(path) => Some(read_paraphrases(path)?),
                None => None,
            };
            Ok((selection, options, rows, paraphrases))
        })()
        .map_err(input)?;
        let references = expand_references(&rows, paraphrases.as_ref());
        let lines = score_rows(&rows, &references, &selection, options, idf)?;
        let mut bytes = Vec::new();
        nlg_judge::pararef::metric_table::write_lines(&lines, &mut bytes)?;
        String::from_utf8(bytes).context("metric output is not UTF-8")
    })
}

/// Corpus-level BLEU, chrF and chrF++ (sacrebleu's corpus_score), as `metric --corpus`.
#[pyfunction]
pub fn corpus_metrics(
    candidates: Vec<String>,
    references: Vec<Vec<String>>,
) -> PyResult<(f64, f64, f64)> {
    if candidates.len() != references.len() {
        return Err(crate::errors::to_py(input_error(&format!(
            "{} candidates but {} reference lists",
            candidates.len(),
            references.len()
        ))));
    }
    Ok((
        corpus_bleu(&candidates, &references),
        corpus_chrf(&candidates, &references, ChrfConfig::CHRF),
        corpus_chrf(&candidates, &references, ChrfConfig::CHRF_PLUS_PLUS),
    ))
}

/// Write `bytes` to `path` through a temporary file renamed into place.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create the folder {}", parent.display()))?;
    }
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".partial");
    std::fs::write(&temporary, bytes)
        .with_context(|| format!("cannot write {}", Path::new(&temporary).display()))?;
    std::fs::rename(&temporary, path)
        .with_context(|| format!("cannot move the output to {}", path.display()))
}

/// `nlg-judge dhp perturb`: make the rows `output` does not have yet. LLM perturbations
/// need `judge` (its model edits the texts); returns a JSON summary.
#[pyfunction]
#[pyo3(signature = (task, output, data_dir, input, pair, seed, limit, perturbations, rule_only, attempts, temperature, top_p, judge=None, sink=None))]
#[allow(clippy::too_many_arguments)]
pub fn dhp_perturb(
    py: Python<'_>,
    task: String,
    output: PathBuf,
    data_dir: PathBuf,
    input: Option<PathBuf>,
    pair: String,
    seed: u64,
    limit: usize,
    perturbations: Vec<String>,
    rule_only: bool,
    attempts: usize,
    temperature: f64,
    top_p: f64,
    judge: Option<&Bound<'_, NativeJudge>>,
    sink: Option<&Bound<'_, PyAny>>,
) -> PyResult<String> {
    let task = choice::<DhpTask>("task", &task).or_py()?;
    let selected = select_perturbations(task, &perturbations, rule_only)
        .map_err(crate::errors::input)
        .or_py()?;
    let needs_model = selected.iter().any(|p| p.method() == Method::Llm);
    if needs_model && judge.is_none() {
        return Err(crate::errors::to_py(input_error(
            "LLM perturbations need a model: pass judge=Judge(...), or rule_only=True",
        )));
    }
    let work = move |engine: Option<&mut crate::worker::Engine>,
                     progress: nlg_judge::progress::Progress|
          -> Result<String> {
        let items = load_items(
            task,
            &ItemSource {
                data_dir: &data_dir,
                input: input.as_deref(),
                pair: &pair,
                seed,
                limit,
            },
        )
        .map_err(crate::errors::input)?;
        let plan = PerturbPlan {
            task,
            perturbations: selected,
            items: &items,
            seed,
        };
        let total = items.len() * plan.perturbations.len();
        let bar = progress.task(total as u64, "rows");
        let (mut ok, mut skipped, mut failed) = (0, 0, 0);
        let mut on_row = |row: &nlg_judge::dhp::perturb::PerturbRow| -> Result<()> {
            match row.status {
                Status::Ok => ok += 1,
                Status::Skipped => skipped += 1,
                Status::Failed => failed += 1,
            }
            bar.step(1)
        };
        let (written, found) = match engine {
            Some(engine) => {
                let mut editor = LlmEditor {
                    scorer: engine.scorer.as_mut(),
                    cache: engine.cache.as_ref(),
                    seed,
                    attempts,
                    temperature,
                    top_p,
                };
                run_perturb(
                    &plan,
                    &output,
                    Some(&mut editor as &mut dyn Editor),
                    &mut on_row,
                )?
            }
            None => run_perturb(&plan, &output, None, &mut on_row)?,
        };
        Ok(json!({
            "task": task.name(),
            "items": items.len(),
            "perturbations": plan.perturbations.len(),
            "written": written,
            "found": found,
            "ok": ok,
            "skipped": skipped,
            "failed": failed,
        })
        .to_string())
    };
    match judge {
        Some(judge) if needs_model => judge.get().run_perturb(py, sink, move |engine, progress| {
            work(Some(engine), progress)
        }),
        _ => run_detached(py, sink, move |progress| work(None, progress)),
    }
}

/// `nlg-judge dhp analyze` of score rows (`text`, read from `source`): the analysis as
/// JSON (`analyze --json`) and the table.
#[pyfunction]
#[pyo3(signature = (text, source, weights, task))]
pub fn dhp_analyze(
    text: String,
    source: String,
    weights: Option<PathBuf>,
    task: Option<String>,
) -> PyResult<(String, String, bool)> {
    (|| -> Result<(String, String, bool)> {
        let rows = parse_score_rows(&text, &source).map_err(input)?;
        let task = optional_choice::<DhpTask>("task", task.as_deref())?;
        let weights = match (&weights, task) {
            (Some(path), _) => Some(Weights::from_file(path).map_err(input)?),
            (None, Some(task)) => Some(Weights::default_for(task)?),
            (None, None) => None,
        };
        let analysis = analyze(&rows, weights.as_ref()).map_err(input)?;
        Ok((
            serde_json::to_string(&analysis)?,
            nlg_judge::dhp::report::perturbation_table(&analysis),
            weights.is_some(),
        ))
    })()
    .or_py()
}

/// Run the `nlg-judge` command with `argv` (program name first) in this process; returns
/// its exit code (2 for usage and input errors, 1 for failures).
#[pyfunction]
pub fn run_cli(py: Python<'_>, argv: Vec<String>) -> i32 {
    py.detach(move || {
        let cli = match nlg_judge::cli::Cli::try_parse_from(argv) {
            Ok(cli) => cli,
            Err(error) => {
                let _ = error.print();
                return error.exit_code();
            }
        };
        nlg_judge::cli::init_logging(cli.verbose);
        match nlg_judge::cli::run(cli) {
            Ok(()) => 0,
            Err(error) => {
                eprintln!("error: {error}");
                for cause in error.chain().skip(1) {
                    eprintln!("  caused by: {cause}");
                }
                i32::from(nlg_judge::cli::exit_code(&error))
            }
        }
    })
}

/// The command line's names of every option with a fixed set of values.
#[pyfunction]
pub fn choices() -> String {
    use nlg_judge::arch::WeightPolicy;
    use nlg_judge::cli::model_args::PrecisionArg;
    use nlg_judge::dhp::score::DhpMethod;
    use nlg_judge::engine::Strategy;
    use nlg_judge::judge::pairwise::{Debias, Design};
    use nlg_judge::judge::{ScoreMethod, Task};
    use nlg_judge::rank::RankMethod;
    json!({
        "task": names::<Task>(),
        "design": names::<Design>(),
        "rank": names::<RankMethod>(),
        "debias": names::<Debias>(),
        "method": names::<ScoreMethod>(),
        "precision": names::<PrecisionArg>(),
        "weights": names::<WeightPolicy>(),
        "strategy": names::<Strategy>(),
        "level": names::<LevelArg>(),
        "skip": names::<SkipArg>(),
        "dhp_task": names::<DhpTask>(),
        "dhp_method": names::<DhpMethod>(),
    })
    .to_string()
}

/// The defaults of numeric options, as the command line has them.
#[pyfunction]
pub fn defaults() -> String {
    let budget = nlg_judge::engine::BatchBudget::default();
    json!({
        "max_batch_tokens": budget.max_batch_tokens,
        "max_batch_rows": budget.max_batch_rows,
        "max_arena_mib": budget.max_arena_bytes >> 20,
        "max_step_tokens": nlg_judge::judge::geval::steps::DEFAULT_MAX_TOKENS,
        "max_feedback_tokens": nlg_judge::judge::rubric::run::DEFAULT_FEEDBACK_TOKENS,
        "data_dir": nlg_judge::data::DEFAULT_DATA_DIR,
    })
    .to_string()
}
