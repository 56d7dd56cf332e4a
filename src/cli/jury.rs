//! `compare` and `score` with several judges: `--model A --model B` or `--jury FILE`. Each
//! judge runs on its own, one after the other (one model in memory at a time, each with
//! its answers cached under its own fingerprint and its own diagnostics), and
//! `judge::jury` combines their results. This file is the terminal's part: the jury
//! file, loading each judge, the tables and the files written.
//!
//! A jury file is TOML:
//!
//! ```toml
//! [[judge]]
//! model = "smollm2-135m-instruct"
//! weight = 1.0
//!
//! [[judge]]
//! model = "qwen2.5-7b-instruct"      # the name the engine serves it under
//! backend = "http://gpu-node:8000/v1"
//! weight = 2.0
//! ```

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};
use clap::ValueEnum;
use serde::Deserialize;
use serde_json::json;

use super::compare::write_file;
use super::compare_table::first_line;
use super::model_args::ModelArgs;
use crate::data::Context;
use crate::judge::diagnostics::Diagnostics;
use crate::judge::jury::{JuryResult, JuryWeights};
use crate::stats::report::RUN_RESAMPLES;
use crate::stats::{bootstrap_ci, meta_evaluate, BootstrapOptions, Item, Level, SkipRule};

/// How a jury's judges weigh when the jury file gives no weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WeightsArg {
    /// Every judge weighs 1 (or its weight in the jury file).
    Equal,
    /// A judge's mean Spearman agreement with the others (none where negative).
    Agreement,
}

/// One judge of a jury as the file or the flags name it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Juror {
    pub model: String,
    #[serde(default)]
    pub backend: Option<String>,
    #[serde(default)]
    pub weight: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JuryFile {
    judge: Vec<Juror>,
}

/// The jury of a run: from `--jury FILE`, else from `--model` given more than once;
/// `None` for a single judge.
pub fn jurors(model: &ModelArgs, file: Option<&Path>) -> Result<Option<Vec<Juror>>> {
    if let Some(path) = file {
        if model.model.len() > 1 {
            bail!("--jury names the judges: give --model at most once with it (or not at all)");
        }
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the jury file {}", path.display()))?;
        let parsed: JuryFile =
            toml::from_str(&text).with_context(|| format!("jury file {}", path.display()))?;
        if parsed.judge.is_empty() {
            bail!("jury file {}: no [[judge]]", path.display());
        }
        for (k, juror) in parsed.judge.iter().enumerate() {
            if juror.model.trim().is_empty() {
                bail!(
                    "jury file {}: judge {}: `model` is empty",
                    path.display(),
                    k + 1
                );
            }
            if let Some(w) = juror.weight.filter(|w| !w.is_finite() || *w < 0.0) {
                bail!(
                    "jury file {}: judge {} (`{}`): weight {w} is not a non-negative number",
                    path.display(),
                    k + 1,
                    juror.model
                );
            }
        }
        for (k, juror) in parsed.judge.iter().enumerate() {
            if let Some(first) = parsed.judge[..k]
                .iter()
                .position(|other| other.model == juror.model && other.backend == juror.backend)
            {
                bail!(
                    "jury file {}: judges {} and {} are the same model `{}`{}: a jury of one \
                     model twice is that model alone with its weight doubled; name it once \
                     (with the weight you mean)",
                    path.display(),
                    first + 1,
                    k + 1,
                    juror.model,
                    juror
                        .backend
                        .as_deref()
                        .map_or_else(String::new, |b| format!(" at {b}"))
                );
            }
        }
        return Ok(Some(parsed.judge));
    }
    if let Some((k, twice)) = model
        .model
        .iter()
        .enumerate()
        .find(|(k, m)| model.model[..*k].contains(m))
    {
        bail!(
            "--model {twice} is given twice (the {} --model): a jury of one model twice is that \
             model alone with its weight doubled; name each judge once (a jury file gives a \
             judge its weight)",
            ordinal(k + 1)
        );
    }
    if model.model.len() > 1 {
        return Ok(Some(
            model
                .model
                .iter()
                .map(|m| Juror {
                    model: m.clone(),
                    backend: None,
                    weight: None,
                })
                .collect(),
        ));
    }
    Ok(None)
}

/// "1st", "2nd", "3rd", "4th", ...
fn ordinal(k: usize) -> String {
    let suffix = match (k % 10, k % 100) {
        (1, 11) | (2, 12) | (3, 13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{k}{suffix}")
}

/// The weights of `jurors` under `--jury-weights`: the file's where it gives any.
pub fn weights(jurors: &[Juror], arg: WeightsArg) -> Result<JuryWeights> {
    let given: Vec<Option<f64>> = jurors.iter().map(|j| j.weight).collect();
    if given.iter().any(Option::is_some) {
        if arg == WeightsArg::Agreement {
            bail!("the jury file gives weights: --jury-weights agreement would replace them");
        }
        return Ok(JuryWeights::Given(
            given.into_iter().map(|w| w.unwrap_or(1.0)).collect(),
        ));
    }
    let weights = match arg {
        WeightsArg::Equal => JuryWeights::Equal,
        WeightsArg::Agreement => JuryWeights::FromAgreement,
    };
    weights.check(jurors.len(), "--jury-weights agreement")?;
    Ok(weights)
}

/// The warning for judge `name` whose model `fingerprint` is that of a judge loaded
/// before it (`earlier`: each earlier judge's name and fingerprint): two spellings of
/// one model (a card name and its file) that the names alone could not tell apart.
pub fn same_model_warning(
    earlier: &[(String, String)],
    name: &str,
    fingerprint: &str,
) -> Option<String> {
    let (first, _) = earlier.iter().find(|(_, f)| f == fingerprint)?;
    Some(format!(
        "warning: judges `{first}` and `{name}` are the same model (the same files): the jury \
         counts it twice, as one judge with its weight doubled"
    ))
}

/// Each juror's model arguments and a distinct name (`model`, and `model#2` for the same
/// model at a second backend of a jury file: a repeat of model and backend is refused).
pub fn judge_args(model: &ModelArgs, jurors: &[Juror]) -> Vec<(String, ModelArgs)> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    jurors
        .iter()
        .map(|juror| {
            let count = seen.entry(juror.model.clone()).or_insert(0);
            *count += 1;
            let name = match *count {
                1 => juror.model.clone(),
                k => format!("{}#{k}", juror.model),
            };
            (
                name,
                model.for_judge(&juror.model, juror.backend.as_deref()),
            )
        })
        .collect()
}

/// The terminal's account of a jury: a table per context (the jury's rank and score,
/// then each judge's score), the judges and their weights, their agreement, and each
/// judge's diagnostics in one line.
pub fn format_jury(
    result: &JuryResult,
    contexts: &[Context],
    diagnostics: &[Diagnostics],
) -> String {
    let mut text = String::new();
    let names: Vec<&str> = result.judges.iter().map(|j| j.name.as_str()).collect();
    let width = |name: &str| name.chars().count().clamp(8, 40);
    for context in &result.contexts {
        let _ = writeln!(text, "context {}:", context.context_id);
        let id_width = context
            .candidate_ids
            .iter()
            .map(|id| id.chars().count())
            .max()
            .unwrap_or(0)
            .max("candidate".len());
        let mut header = format!("  {:>5}  {:>8}  {:<id_width$}", "rank", "jury", "candidate");
        for name in &names {
            let w = width(name);
            let shown: String = name.chars().take(w).collect();
            let _ = write!(header, "  {shown:>w$}");
        }
        let _ = writeln!(text, "{header}  text");
        let mut order: Vec<usize> = (0..context.candidate_ids.len()).collect();
        order.sort_by(|&a, &b| {
            context.ranks[a]
                .total_cmp(&context.ranks[b])
                .then(a.cmp(&b))
        });
        let source = contexts.iter().find(|c| c.id == context.context_id);
        for k in order {
            let id = &context.candidate_ids[k];
            let mut row = format!(
                "  {:>5}  {:>8.4}  {id:<id_width$}",
                context.ranks[k], context.scores[k]
            );
            for (judge, name) in context.judge_scores.iter().zip(&names) {
                let w = width(name);
                let _ = write!(row, "  {:>w$.4}", judge[k]);
            }
            let snippet = source
                .and_then(|c| c.candidates.iter().find(|x| &x.id == id))
                .map(|x| first_line(&x.text, 40))
                .unwrap_or_default();
            let _ = writeln!(text, "{row}  {snippet}");
        }
    }
    let _ = writeln!(
        text,
        "jury of {}: {}",
        names.len(),
        result
            .judges
            .iter()
            .map(|j| format!("{} (weight {})", j.name, trim(j.weight)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if let Some(note) = &result.weights_note {
        let _ = writeln!(text, "note: {note}");
    }
    let _ = writeln!(
        text,
        "agreement between the judges (Spearman within contexts, mean):"
    );
    write_matrix(&mut text, &names, &result.agreement.spearman);
    if let Some(kappa) = &result.agreement.kappa {
        let _ = writeln!(text, "agreement of their decisions (Cohen's kappa):");
        write_matrix(&mut text, &names, kappa);
        if kappa.iter().flatten().any(Option::is_none) {
            let _ = writeln!(
                text,
                "  (-: undefined; a judge made the same decision on every comparison, or the \
                 two judges shared none)"
            );
        }
    }
    for (name, d) in names.iter().zip(diagnostics) {
        let warnings: Vec<&str> = d
            .checks
            .iter()
            .filter(|c| c.is_warning())
            .map(|c| c.name)
            .collect();
        let _ = writeln!(
            text,
            "judge {name}: {} diagnostics warning{}{}",
            warnings.len(),
            if warnings.len() == 1 { "" } else { "s" },
            if warnings.is_empty() {
                String::new()
            } else {
                format!(" ({})", warnings.join(", "))
            }
        );
    }
    text
}

fn trim(x: f64) -> String {
    let text = format!("{x:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn write_matrix(text: &mut String, names: &[&str], matrix: &[Vec<Option<f64>>]) {
    let width = names
        .iter()
        .map(|n| n.chars().count())
        .max()
        .unwrap_or(0)
        .clamp(6, 40);
    let mut header = format!("  {:width$}", "");
    for name in names {
        let shown: String = name.chars().take(width).collect();
        let _ = write!(header, "  {shown:>width$}");
    }
    let _ = writeln!(text, "{header}");
    for (name, row) in names.iter().zip(matrix) {
        let shown: String = name.chars().take(width).collect();
        let mut line = format!("  {shown:<width$}");
        for value in row {
            match value {
                Some(v) => {
                    let _ = write!(line, "  {v:>width$.3}");
                }
                None => {
                    let _ = write!(line, "  {:>width$}", "-");
                }
            }
        }
        let _ = writeln!(text, "{line}");
    }
}

/// One line per candidate: context_id, candidate_id, the jury's score and rank, each
/// judge's score under `judges`, and (from the input) `system_id` and the human
/// `scores`, so that `correlate` reads the file as it is.
pub fn write_jury_scores(
    result: &JuryResult,
    contexts: &[Context],
    out: &mut dyn std::io::Write,
) -> Result<()> {
    for context in &result.contexts {
        let input = contexts.iter().find(|c| c.id == context.context_id);
        for (k, id) in context.candidate_ids.iter().enumerate() {
            let judges: serde_json::Map<String, serde_json::Value> = result
                .judges
                .iter()
                .zip(&context.judge_scores)
                .map(|(judge, scores)| (judge.name.clone(), json!(scores[k])))
                .collect();
            let mut line = json!({
                "context_id": context.context_id,
                "candidate_id": id,
                "score": context.scores[k],
                "rank": context.ranks[k],
                "judges": judges,
            });
            if let Some(candidate) = input.and_then(|c| c.candidates.iter().find(|x| &x.id == id)) {
                if let Some(system) = &candidate.system_id {
                    line["system_id"] = json!(system);
                }
                if !candidate.scores.is_empty() {
                    line["scores"] = json!(candidate.scores);
                }
            }
            writeln!(out, "{line}")?;
        }
    }
    Ok(())
}

/// What `OUT.diagnostics.json` of a jury holds: each judge's diagnostics by name, the
/// weights, and the agreement.
pub fn jury_diagnostics(
    result: &JuryResult,
    diagnostics: &[Diagnostics],
) -> Result<serde_json::Value> {
    let judges: serde_json::Map<String, serde_json::Value> = result
        .judges
        .iter()
        .zip(diagnostics)
        .map(|(judge, d)| Ok((judge.name.clone(), serde_json::to_value(d)?)))
        .collect::<Result<_>>()?;
    let mut value = json!({
        "judges": judges,
        "weights": result.judges,
        "agreement": result.agreement,
    });
    if let Some(note) = &result.weights_note {
        value["weights_note"] = json!(note);
    }
    Ok(value)
}

/// `OUT.diagnostics.json` of a jury: each judge's diagnostics, and the agreement.
pub fn write_jury_diagnostics(
    output: &Path,
    result: &JuryResult,
    diagnostics: &[Diagnostics],
) -> Result<PathBuf> {
    let path = super::compare::diagnostics_path(output);
    let value = jury_diagnostics(result, diagnostics)?;
    let mut text = serde_json::to_string_pretty(&value)?;
    text.push('\n');
    write_file(&path, |out| Ok(out.write_all(text.as_bytes())?))?;
    Ok(path)
}

/// The summary-level agreement with the human scores `key` of the jury and of each judge
/// (Spearman, averaged over contexts), one line each.
pub fn human_agreement(result: &JuryResult, contexts: &[Context], key: &str) -> String {
    let options = BootstrapOptions {
        resamples: RUN_RESAMPLES,
        confidence: 0.95,
        seed: 0,
    };
    let mut rows: Vec<(String, Vec<Item>)> = vec![(
        "jury".to_string(),
        result.correlation_items(contexts, key, None),
    )];
    for (j, judge) in result.judges.iter().enumerate() {
        rows.push((
            judge.name.clone(),
            result.correlation_items(contexts, key, Some(j)),
        ));
    }
    let width = rows
        .iter()
        .map(|(name, _)| name.chars().count())
        .max()
        .unwrap_or(4);
    let mut text = format!(
        "agreement with the human scores `{key}` (summary-level Spearman; 95% bootstrap \
         interval over contexts, {RUN_RESAMPLES} resamples, seed 0):\n"
    );
    let mut withheld = None;
    for (name, items) in &rows {
        let value = meta_evaluate(items, Level::Summary, SkipRule::Authors)
            .ok()
            .and_then(|r| r.correlations.spearman);
        let interval = bootstrap_ci(items, Level::Summary, SkipRule::Authors, &options, || {});
        let shown_interval = match &interval {
            Ok(ci) if ci.withheld.is_some() => {
                withheld = ci.withheld.clone();
                String::new()
            }
            Ok(ci) => match ci.spearman.interval {
                Some(i) => format!("  [{:.4}, {:.4}]", i.lower, i.upper),
                None => "  [undefined]".to_string(),
            },
            Err(_) => String::new(),
        };
        let _ = writeln!(
            text,
            "  {name:<width$}  {}{shown_interval}",
            value.map_or_else(|| "undefined".to_string(), |v| format!("{v:>7.4}"))
        );
    }
    if let Some(reason) = withheld {
        let _ = writeln!(text, "  ({reason})");
    }
    text
}

/// The report's first facts about a jury: the input, and each judge with its model and
/// weight (`models[k]`: the model judge `k` loaded).
pub fn jury_facts(input: &Path, jury: &JuryResult, models: &[String]) -> Vec<(String, String)> {
    let judges: Vec<String> = jury
        .judges
        .iter()
        .zip(models)
        .map(|(judge, model)| {
            if *model == judge.name {
                format!("{} (weight {})", judge.name, trim(judge.weight))
            } else {
                format!("{} = {model} (weight {})", judge.name, trim(judge.weight))
            }
        })
        .collect();
    vec![
        ("input".to_string(), input.display().to_string()),
        ("judges".to_string(), judges.join(", ")),
    ]
}

/// Write a jury's scores (to `output`, else standard output as JSONL) and, with an
/// output file, its diagnostics sidecar; then print `report` with the `results:` lines
/// (to standard error when the scores went to standard output), `more` among them.
/// `scores_line` says what the scores file holds.
#[allow(clippy::too_many_arguments)]
pub fn write_jury_run(
    mut report: String,
    jury: &JuryResult,
    contexts: &[Context],
    diagnostics: &[Diagnostics],
    output: Option<&Path>,
    cache_path: Option<&str>,
    scores_line: &str,
    more: Vec<String>,
) -> Result<()> {
    use std::io::Write as _;
    match output {
        Some(path) => {
            write_file(path, |out| write_jury_scores(jury, contexts, out))?;
            let sidecar = write_jury_diagnostics(path, jury, diagnostics)?;
            report.push_str(&format!("results: {scores_line}: {}\n", path.display()));
            report.push_str(&format!(
                "results: each judge's diagnostics and the agreement: {}\n",
                sidecar.display()
            ));
        }
        None => {
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            write_jury_scores(jury, contexts, &mut out)?;
            out.flush()?;
            report.push_str(&format!(
                "results: {scores_line}: standard output, as JSONL\n"
            ));
        }
    }
    for line in more {
        report.push_str(&format!("results: {line}\n"));
    }
    report.push_str(&match cache_path {
        Some(path) => format!("results: model answers cached (a rerun reuses them): {path}\n"),
        None => "results: nothing cached (--no-cache)\n".to_string(),
    });
    match output {
        Some(_) => print!("{report}"),
        None => eprint!("{report}"),
    }
    Ok(())
}
