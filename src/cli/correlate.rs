//! `nlg-judge correlate`: meta-evaluate any metric's predictions (ours or another
//! tool's) against human scores from a JSONL file, at summary, system or pooled
//! level, optionally with bootstrap confidence intervals over groups.
//!
//! Input: one JSON object per line (blank lines skipped). Fields are named by dotted
//! paths into nested objects (`scores.coherence`; a numeric segment indexes an array:
//! `scores.0`). Scores must be JSON numbers: a string such as `"3.5"` is rejected, so
//! that a quoted or mis-exported column cannot pass silently. Group and system ids may
//! be strings or numbers.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use indicatif::ProgressBar;
use serde_json::{json, Value};

use crate::stats::{
    bootstrap_ci, meta_evaluate, BootstrapOptions, BootstrapResult, Coefficient, Item, Level,
    LevelResult, SkipRule,
};

/// Correlate predictions with human scores (meta-evaluation).
#[derive(Debug, Args)]
pub struct CorrelateArgs {
    /// JSONL file with one scored item per line.
    #[arg(long, value_name = "FILE", required_unless_present = "pred_file")]
    pub input: Option<PathBuf>,

    /// Instead of --input: the predictions (e.g. `compare`'s or `score`'s output),
    /// joined with --human-file on (`context_id`, `candidate_id`); --pred is read here.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with = "input",
        requires = "human_file"
    )]
    pub pred_file: Option<PathBuf>,

    /// The human scores (e.g. the input of `compare` or `score`); --human and --system
    /// are read here. Every row of either file must have its partner in the other.
    #[arg(long, value_name = "FILE", requires = "pred_file")]
    pub human_file: Option<PathBuf>,

    /// Field holding the metric's prediction (dotted path, e.g. `scores.coherence`);
    /// scores must be JSON numbers, quoted numbers are rejected.
    #[arg(long, value_name = "FIELD")]
    pub pred: String,

    /// Field holding the human score (dotted path).
    #[arg(long, value_name = "FIELD")]
    pub human: String,

    /// Field identifying the context (document, dialogue) an item belongs to: the unit
    /// of summary-level correlation and of bootstrap resampling.
    #[arg(long, value_name = "FIELD", default_value = "context_id")]
    pub group: String,

    /// Field identifying the system that produced the item (read at system level only).
    #[arg(long, value_name = "FIELD", default_value = "system_id")]
    pub system: String,

    /// summary: correlate within each group, then average; system: correlate
    /// per-system means; pooled: correlate all items at once (turn/sample level).
    #[arg(long, value_enum, default_value_t = LevelArg::Summary)]
    pub level: LevelArg,

    /// Summary level only. authors: skip groups with constant human scores, a constant
    /// prediction scores 0; geval: skip groups where either side is constant.
    #[arg(long, value_enum, default_value_t = SkipArg::Authors)]
    pub skip: SkipArg,

    /// Bootstrap confidence intervals with N resamples of the groups.
    #[arg(long, value_name = "N")]
    pub bootstrap: Option<usize>,

    /// Seed of the bootstrap resampling (same seed, same intervals).
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub seed: u64,

    /// Confidence level of the bootstrap intervals, in (0, 1).
    #[arg(long, value_name = "LEVEL", default_value_t = 0.95)]
    pub ci: f64,

    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LevelArg {
    Summary,
    System,
    Pooled,
}

impl From<LevelArg> for Level {
    fn from(level: LevelArg) -> Self {
        match level {
            LevelArg::Summary => Level::Summary,
            LevelArg::System => Level::System,
            LevelArg::Pooled => Level::Pooled,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SkipArg {
    Authors,
    Geval,
}

impl From<SkipArg> for SkipRule {
    fn from(skip: SkipArg) -> Self {
        match skip {
            SkipArg::Authors => SkipRule::Authors,
            SkipArg::Geval => SkipRule::Geval,
        }
    }
}

pub fn run(args: CorrelateArgs) -> Result<()> {
    let level = Level::from(args.level);
    let skip = SkipRule::from(args.skip);
    let fields = Fields {
        pred: &args.pred,
        human: &args.human,
        group: &args.group,
        system: (level == Level::System).then_some(args.system.as_str()),
    };
    let (items, source) = match (&args.input, &args.pred_file, &args.human_file) {
        (Some(input), _, _) => (read_items(input, &fields)?, input.display().to_string()),
        (None, Some(pred), Some(human)) => (
            read_joined(pred, human, &fields)?,
            format!("{} joined with {}", pred.display(), human.display()),
        ),
        _ => bail!("give --input, or --pred-file with --human-file"),
    };
    let result =
        meta_evaluate(&items, level, skip).with_context(|| format!("meta-evaluating {source}"))?;

    let ci = match args.bootstrap {
        Some(resamples) => {
            let options = BootstrapOptions {
                resamples,
                confidence: args.ci,
                seed: args.seed,
            };
            let progress = ProgressBar::new(resamples as u64);
            let ci = bootstrap_ci(&items, level, skip, &options, || progress.inc(1))
                .with_context(|| format!("bootstrapping {source}"))?;
            progress.finish_and_clear();
            Some(ci)
        }
        None => None,
    };

    if args.json {
        println!("{}", report_json(&result, skip, ci.as_ref()));
    } else {
        print!("{}", report_table(&result, skip, ci.as_ref()));
    }
    Ok(())
}

/// Resamples of the `--correlate` summary of `compare` and `score` (the defaults of
/// `correlate --bootstrap 1000`: seed 0, 95%).
pub(crate) const RUN_RESAMPLES: usize = 1000;

/// The summary-level meta-evaluation of a run's `items` against their human scores, as
/// `correlate --level summary --bootstrap 1000` prints it.
pub(crate) fn run_summary(items: &[Item]) -> Result<String> {
    let skip = SkipRule::Authors;
    let result = meta_evaluate(items, Level::Summary, skip)?;
    let options = BootstrapOptions {
        resamples: RUN_RESAMPLES,
        confidence: 0.95,
        seed: 0,
    };
    let ci = bootstrap_ci(items, Level::Summary, skip, &options, || {})?;
    Ok(report_table(&result, skip, Some(&ci)))
}

/// The fields to read from each line; `system` only when the level needs it.
struct Fields<'a> {
    pred: &'a str,
    human: &'a str,
    group: &'a str,
    system: Option<&'a str>,
}

fn read_items(path: &Path, fields: &Fields) -> Result<Vec<Item>> {
    read_lines(path)?
        .into_iter()
        .map(|(at, record)| parse_item(&record, fields).with_context(|| at))
        .collect()
}

/// The items of `pred_path` (predictions, groups) joined with `human_path` (human scores,
/// systems) on (`context_id`, `candidate_id`); unmatched rows on either side are refused
/// with their count.
fn read_joined(pred_path: &Path, human_path: &Path, fields: &Fields) -> Result<Vec<Item>> {
    let key = |record: &Value| -> Result<(String, String)> {
        Ok((
            id_field(record, "context_id", "join")?,
            id_field(record, "candidate_id", "join")?,
        ))
    };
    let mut humans: HashMap<(String, String), (String, Value)> = HashMap::new();
    let mut human_order = Vec::new();
    for (at, record) in read_lines(human_path)? {
        let k = key(&record).with_context(|| at.clone())?;
        if humans.contains_key(&k) {
            bail!("{at}: (`{}`, `{}`) appears twice", k.0, k.1);
        }
        human_order.push(k.clone());
        humans.insert(k, (at, record));
    }
    let mut items = Vec::new();
    let mut unmatched = Vec::new();
    let mut used = HashSet::new();
    for (at, record) in read_lines(pred_path)? {
        let k = key(&record).with_context(|| at.clone())?;
        let Some((human_at, human)) = humans.get(&k) else {
            unmatched.push(at);
            continue;
        };
        if !used.insert(k.clone()) {
            bail!("{at}: (`{}`, `{}`) appears twice", k.0, k.1);
        }
        items.push(Item {
            pred: number_field(&record, fields.pred, "--pred").with_context(|| at.clone())?,
            human: number_field(human, fields.human, "--human")
                .with_context(|| human_at.clone())?,
            group: id_field(&record, fields.group, "--group").with_context(|| at.clone())?,
            system: match fields.system {
                Some(path) => id_field(human, path, "--system")
                    .or_else(|_| id_field(&record, path, "--system"))
                    .with_context(|| human_at.clone())?,
                None => String::new(),
            },
        });
    }
    let unused: Vec<&(String, String)> =
        human_order.iter().filter(|k| !used.contains(*k)).collect();
    if !unmatched.is_empty() || !unused.is_empty() {
        let mut why = Vec::new();
        if let Some(first) = unmatched.first() {
            why.push(format!(
                "{} rows of {} have no row with the same (context_id, candidate_id) in {} \
                 (the first: {first})",
                unmatched.len(),
                pred_path.display(),
                human_path.display()
            ));
        }
        if let Some(first) = unused.first() {
            why.push(format!(
                "{} rows of {} have none in {} (the first: `{}`/`{}`)",
                unused.len(),
                human_path.display(),
                pred_path.display(),
                first.0,
                first.1
            ));
        }
        bail!("cannot join: {}", why.join("; "));
    }
    Ok(items)
}

/// The JSON objects of a JSONL file with their `file:line` (blank lines skipped).
fn read_lines(path: &Path) -> Result<Vec<(String, Value)>> {
    let file =
        File::open(path).with_context(|| format!("cannot open input file {}", path.display()))?;
    let mut items = Vec::new();
    for (index, line) in BufReader::new(file).lines().enumerate() {
        let number = index + 1;
        let at = || format!("{}:{number}", path.display());
        let line = line.with_context(|| format!("{}: cannot read line", at()))?;
        if line.trim().is_empty() {
            continue;
        }
        let record: Value =
            serde_json::from_str(&line).with_context(|| format!("{}: not valid JSON", at()))?;
        if !record.is_object() {
            bail!("{}: expected a JSON object, found {}", at(), kind(&record));
        }
        items.push((at(), record));
    }
    if items.is_empty() {
        bail!("{}: no records", path.display());
    }
    Ok(items)
}

fn parse_item(record: &Value, fields: &Fields) -> Result<Item> {
    Ok(Item {
        pred: number_field(record, fields.pred, "--pred")?,
        human: number_field(record, fields.human, "--human")?,
        group: id_field(record, fields.group, "--group")?,
        system: match fields.system {
            Some(path) => id_field(record, path, "--system")?,
            None => String::new(),
        },
    })
}

/// Follows a dotted path through objects (by key) and arrays (by index).
fn lookup<'a>(record: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.')
        .try_fold(record, |value, segment| match value {
            Value::Object(map) => map.get(segment),
            Value::Array(list) => segment.parse::<usize>().ok().and_then(|i| list.get(i)),
            _ => None,
        })
}

fn field<'a>(record: &'a Value, path: &str, flag: &str) -> Result<&'a Value> {
    match lookup(record, path) {
        Some(Value::Null) => bail!("field `{path}` ({flag}) is null"),
        Some(value) => Ok(value),
        None => bail!("field `{path}` ({flag}) is missing"),
    }
}

fn number_field(record: &Value, path: &str, flag: &str) -> Result<f64> {
    let value = field(record, path, flag)?;
    match value.as_f64() {
        Some(number) => Ok(number),
        None if value.is_string() => bail!(
            "field `{path}` ({flag}) is the string {value}; expected a JSON number (unquoted)"
        ),
        None => bail!(
            "field `{path}` ({flag}) is {}; expected a number",
            kind(value)
        ),
    }
}

fn id_field(record: &Value, path: &str, flag: &str) -> Result<String> {
    match field(record, path, flag)? {
        Value::String(text) => Ok(text.clone()),
        Value::Number(number) => Ok(number.to_string()),
        other => bail!(
            "field `{path}` ({flag}) is {}; expected a string or number id",
            kind(other)
        ),
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `{"level", "pearson", "spearman", "kendall", "n_groups", "n_items", ...}`; undefined
/// coefficients are `null`. Extra keys: `skip` and `n_groups_skipped` at summary level,
/// `n_systems` at system level, `ci` when bootstrapped.
fn report_json(result: &LevelResult, skip: SkipRule, ci: Option<&BootstrapResult>) -> Value {
    let mut report = json!({
        "level": result.level.name(),
        "pearson": result.correlations.pearson,
        "spearman": result.correlations.spearman,
        "kendall": result.correlations.kendall,
        "n_groups": result.n_groups,
        "n_items": result.n_items,
    });
    if result.level == Level::Summary {
        report["skip"] = json!(skip.name());
        report["n_groups_skipped"] = json!(result.n_groups_skipped);
    }
    if let Some(n_systems) = result.n_systems {
        report["n_systems"] = json!(n_systems);
    }
    if let Some(ci) = ci {
        let mut intervals = json!({
            "confidence": ci.confidence,
            "resamples": ci.resamples,
            "seed": ci.seed,
            "n_defined": {},
        });
        for coefficient in Coefficient::ALL {
            let interval = ci.get(coefficient);
            intervals[coefficient.name()] = match interval.interval {
                Some(bounds) => json!([bounds.lower, bounds.upper]),
                None => Value::Null,
            };
            intervals["n_defined"][coefficient.name()] = json!(interval.n_defined);
        }
        report["ci"] = intervals;
    }
    report
}

fn report_table(result: &LevelResult, skip: SkipRule, ci: Option<&BootstrapResult>) -> String {
    let mut out = String::new();
    let level = match result.level {
        Level::Summary => format!("summary (skip rule: {})", skip.name()),
        other => other.name().to_string(),
    };
    out.push_str(&format!("level     {level}\n"));
    match result.level {
        Level::Summary => out.push_str(&format!(
            "groups    {} used, {} skipped\n",
            result.n_groups, result.n_groups_skipped
        )),
        _ => out.push_str(&format!("groups    {}\n", result.n_groups)),
    }
    if let Some(n_systems) = result.n_systems {
        out.push_str(&format!("systems   {n_systems}\n"));
    }
    out.push_str(&format!("items     {}\n\n", result.n_items));

    let format_value = |value: Option<f64>| match value {
        Some(value) => format!("{value:.4}"),
        None => "undefined".to_string(),
    };
    match ci {
        Some(ci) => out.push_str(&format!(
            "{:<10}{:>10}   {}% CI ({} resamples, seed {})\n",
            "",
            "value",
            // 0.9 * 100 is 90.00000000000001: round away the binary noise.
            (ci.confidence * 1e6).round() / 1e4,
            ci.resamples,
            ci.seed
        )),
        None => out.push_str(&format!("{:<10}{:>10}\n", "", "value")),
    }
    for coefficient in Coefficient::ALL {
        let value = format_value(result.correlations.get(coefficient));
        out.push_str(&format!("{:<10}{value:>10}", coefficient.name()));
        if let Some(ci) = ci {
            let interval = ci.get(coefficient);
            match interval.interval {
                Some(bounds) => {
                    out.push_str(&format!("   [{:.4}, {:.4}]", bounds.lower, bounds.upper))
                }
                None => out.push_str("   undefined"),
            }
            if interval.n_defined < ci.resamples {
                out.push_str(&format!(" ({} resamples defined)", interval.n_defined));
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dotted_paths_reach_nested_objects_and_arrays() {
        let record = json!({"scores": {"coherence": 3.5, "all": [1, 2.5]}, "id": 7});
        assert_eq!(lookup(&record, "scores.coherence"), Some(&json!(3.5)));
        assert_eq!(lookup(&record, "scores.all.1"), Some(&json!(2.5)));
        assert_eq!(lookup(&record, "scores.all.2"), None);
        assert_eq!(lookup(&record, "id.x"), None);
        assert_eq!(lookup(&record, "scores.fluency"), None);
    }

    #[test]
    fn quoted_numbers_are_rejected_with_a_reason() {
        let record = json!({"score": "3.5"});
        let error = number_field(&record, "score", "--pred").unwrap_err();
        assert_eq!(
            error.to_string(),
            "field `score` (--pred) is the string \"3.5\"; expected a JSON number (unquoted)"
        );
    }

    #[test]
    fn ids_may_be_numbers_but_not_booleans() {
        let record = json!({"doc": 12, "flag": true});
        assert_eq!(id_field(&record, "doc", "--group").unwrap(), "12");
        let error = id_field(&record, "flag", "--group").unwrap_err();
        assert!(error.to_string().contains("is a boolean"), "{error}");
    }
}
