//! The reproduction as files: a Markdown report (the paper-style tables, the figure, how
//! it was run), the same tables for the terminal, CSV files with every number, and the
//! subset-of-comparisons figure as PNG and SVG.
//!
//! Tables show Spearman and accuracy x100 with one decimal and P(A) with two, as the
//! paper does; the CSV files keep full precision (coefficients unscaled).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};

use super::figure::{subset_figure, CurveValue};
use super::{CurvePoint, DecisionCell, Reproduction, RowResult};
use crate::figure;
use crate::rank::Rate;
use crate::stats::Coefficient;

/// File names inside the output directory.
pub const REPORT: &str = "report.md";
pub const CORRELATIONS_CSV: &str = "correlations.csv";
pub const DECISIONS_CSV: &str = "decisions.csv";
pub const SUBSET_CSV: &str = "subset.csv";
pub const SUBSET_PNG: &str = "subset.png";
pub const SUBSET_SVG: &str = "subset.svg";
pub const SUBSET_FULL_PNG: &str = "subset-vs-full.png";
pub const SUBSET_FULL_SVG: &str = "subset-vs-full.svg";
pub const BUDGET_CSV: &str = "budget.csv";

/// Header of `correlations.csv`.
pub const CORRELATIONS_COLUMNS: [&str; 14] = [
    "experiment",
    "family",
    "method",
    "debiased",
    "in_paper",
    "attribute",
    "prompt",
    "spearman",
    "pearson",
    "kendall",
    "contexts_kept",
    "contexts_skipped",
    "spearman_ci_lower",
    "spearman_ci_upper",
];

/// Header of `decisions.csv`.
pub const DECISIONS_COLUMNS: [&str; 13] = [
    "experiment",
    "attribute",
    "prompt",
    "debiased",
    "tau",
    "p_a",
    "first_wins",
    "comparisons",
    "consistency",
    "consistent_pairs",
    "pairs",
    "accuracy",
    "judged",
];

/// Header of `subset.csv`.
pub const SUBSET_COLUMNS: [&str; 11] = [
    "experiment",
    "attribute",
    "design",
    "debiased",
    "r",
    "prompt",
    "spearman_x100_mean",
    "spearman_x100_sd",
    "seeds",
    "vs_full_x100_mean",
    "vs_full_x100_sd",
];

/// Header of `budget.csv`.
pub const BUDGET_COLUMNS: [&str; 11] = [
    "experiment",
    "attribute",
    "design",
    "rank",
    "r",
    "vs_full_x100",
    "vs_full_low",
    "vs_full_high",
    "vs_human_x100",
    "vs_human_low",
    "vs_human_high",
];

fn x100(value: Option<f64>) -> String {
    match value {
        Some(v) => {
            let text = format!("{:.1}", 100.0 * v);
            if text == "-0.0" {
                "0.0".to_string()
            } else {
                text
            }
        }
        None => "-".to_string(),
    }
}

fn rate(rate: Rate, decimals: usize, scale: f64) -> String {
    match rate.value() {
        Some(v) => format!("{:.decimals$}", scale * v),
        None => "-".to_string(),
    }
}

fn mark(debiased: bool) -> &'static str {
    if debiased {
        "✓"
    } else {
        "✗"
    }
}

fn row_name(row: &RowResult) -> String {
    let paper = if row.in_paper { "" } else { " (ext.)" };
    format!("{}, {}{paper}", row.family, row.method)
}

/// A Markdown table from a header and rows; the first `left` columns left-aligned.
fn table(header: &[String], rows: &[Vec<String>], left: usize) -> String {
    let mut text = format!("| {} |\n|", header.join(" | "));
    for k in 0..header.len() {
        text.push_str(if k < left { "---|" } else { "---:|" });
    }
    text.push('\n');
    for row in rows {
        let _ = writeln!(text, "| {} |", row.join(" | "));
    }
    text
}

fn labels(report: &Reproduction) -> Vec<String> {
    report.columns.iter().map(|c| c.label.clone()).collect()
}

/// Spearman x100, averaged over prompts (Tables 1, 3, 4, 6).
pub fn correlation_table(report: &Reproduction) -> String {
    let mut header = vec!["Method".to_string(), "Debias".to_string()];
    header.extend(labels(report));
    header.push("Avg.".to_string());
    let rows: Vec<Vec<String>> = report
        .rows
        .iter()
        .map(|row| {
            let mut cells = vec![row_name(row), mark(row.debiased).to_string()];
            cells.extend(
                row.cells
                    .iter()
                    .map(|c| x100(c.as_ref().and_then(|c| c.mean.spearman))),
            );
            cells.push(x100(row.average_spearman()));
            cells
        })
        .collect();
    table(&header, &rows, 2)
}

/// Spearman x100 of each prompt on its own.
pub fn per_prompt_table(report: &Reproduction) -> String {
    let mut header = vec![
        "Method".to_string(),
        "Debias".to_string(),
        "Prompt".to_string(),
    ];
    header.extend(labels(report));
    let mut rows = Vec::new();
    for row in &report.rows {
        // Each source names its own prompts (pairwise c1/c2, scoring prompts, ...).
        let mut prompts: Vec<&str> = Vec::new();
        for cell in row.cells.iter().flatten() {
            for prompt in &cell.per_prompt {
                if !prompts.contains(&prompt.prompt.as_str()) {
                    prompts.push(&prompt.prompt);
                }
            }
        }
        for prompt in prompts {
            let mut cells = vec![
                row_name(row),
                mark(row.debiased).to_string(),
                prompt.to_string(),
            ];
            cells.extend(row.cells.iter().map(|c| {
                x100(
                    c.as_ref()
                        .and_then(|c| c.per_prompt.iter().find(|p| p.prompt == prompt))
                        .and_then(|p| p.correlations.spearman),
                )
            }));
            rows.push(cells);
        }
    }
    table(&header, &rows, 3)
}

/// The bootstrap intervals of the prompt-averaged Spearman x100.
pub fn interval_table(report: &Reproduction) -> String {
    let mut header = vec!["Method".to_string(), "Debias".to_string()];
    header.extend(labels(report));
    let rows: Vec<Vec<String>> = report
        .rows
        .iter()
        .map(|row| {
            let mut cells = vec![row_name(row), mark(row.debiased).to_string()];
            cells.extend(row.cells.iter().map(
                |c| match c.as_ref().and_then(|c| c.spearman_interval) {
                    Some(i) => format!("[{}, {}]", x100(Some(i.lower)), x100(Some(i.upper))),
                    None => "-".to_string(),
                },
            ));
            cells
        })
        .collect();
    table(&header, &rows, 2)
}

fn decision<'a>(report: &'a Reproduction, column: &str, prompt: &str) -> Option<&'a DecisionCell> {
    report
        .decisions
        .iter()
        .find(|d| d.column == column && d.prompt == prompt)
}

/// P(A) at 0.5 per prompt (Tables 5, 8), with the debiasing threshold and the order
/// consistency.
pub fn bias_table(report: &Reproduction) -> String {
    let mut header = vec!["Statistic".to_string(), "Prompt".to_string()];
    header.extend(labels(report));
    let mut rows = Vec::new();
    type Pick = fn(&DecisionCell) -> String;
    let statistics: [(&str, Pick); 4] = [
        ("P(A)", |d| rate(d.plain.first_position, 2, 1.0)),
        ("threshold τ", |d| format!("{:.3}", d.debiased.tau)),
        ("consistency", |d| rate(d.plain.consistency, 2, 1.0)),
        ("consistency, debiased", |d| {
            rate(d.debiased.consistency, 2, 1.0)
        }),
    ];
    for (name, pick) in statistics {
        for (k, prompt) in report.prompts.iter().enumerate() {
            let mut cells = vec![name.to_string(), format!("{} ({prompt})", k + 1)];
            cells.extend(report.columns.iter().map(|column| {
                decision(report, &column.label, prompt)
                    .map(pick)
                    .unwrap_or_else(|| "-".to_string())
            }));
            rows.push(cells);
        }
    }
    table(&header, &rows, 2)
}

/// Pairwise accuracy x100 averaged over prompts (Tables 7, 9).
pub fn accuracy_table(report: &Reproduction) -> String {
    let mut header = vec!["Debias".to_string()];
    header.extend(labels(report));
    let rows: Vec<Vec<String>> = [false, true]
        .into_iter()
        .map(|debiased| {
            let mut cells = vec![mark(debiased).to_string()];
            cells.extend(report.columns.iter().map(|column| {
                let values: Vec<f64> = report
                    .prompts
                    .iter()
                    .filter_map(|prompt| decision(report, &column.label, prompt))
                    .filter_map(|d| {
                        let stats = if debiased { &d.debiased } else { &d.plain };
                        stats.accuracy.value()
                    })
                    .collect();
                if values.is_empty() {
                    "-".to_string()
                } else {
                    x100(Some(values.iter().sum::<f64>() / values.len() as f64))
                }
            }));
            cells
        })
        .collect();
    table(&header, &rows, 1)
}

/// The tables printed in the terminal.
pub fn terminal_tables(report: &Reproduction) -> String {
    format!(
        "{title}: Spearman x100 (summary level, mean of prompts {prompts})\n{corr}\n\
         Positional bias P(A) at 0.5 and debiasing threshold\n{bias}\n\
         Pairwise accuracy x100 (mean of prompts)\n{acc}\n\
         {contexts} contexts; model results: {computed} computed, {cached} from the cache; \
         {wall:.1} s\n",
        title = report.experiment.title(),
        prompts = report.prompts.join(", "),
        corr = correlation_table(report),
        bias = bias_table(report),
        acc = accuracy_table(report),
        contexts = report.contexts,
        computed = report.computed,
        cached = report.cached,
        wall = report.wall_seconds,
    )
}

/// The whole Markdown report.
pub fn markdown(report: &Reproduction) -> String {
    let mut text = String::new();
    let title = report.experiment.title();
    let _ = writeln!(text, "# Comparative assessment reproduction: {title}\n");
    let _ = writeln!(text, "- Command: `{}`", report.command);
    let _ = writeln!(
        text,
        "- Model: `{}`, fingerprint `{}`",
        report.model_name, report.fingerprint
    );
    let _ = writeln!(
        text,
        "- Data: {} contexts, {} candidates",
        report.contexts, report.candidates
    );
    if report.experiment == super::Experiment::Webnlg {
        let _ = writeln!(
            text,
            "- WebNLG: the nine system teams, empty outputs left out; human reference {}",
            if report.reference_included {
                "**included** as a candidate"
            } else {
                "not included"
            }
        );
    }
    let _ = writeln!(
        text,
        "- Model results (distinct prompts: the comparisons, plus the absolute scores when \
         those rows run): {} computed, {} from the result cache",
        report.computed, report.cached
    );
    let load = report
        .model_load_seconds
        .map(|s| format!(" (+ {s:.1} s loading the model)"))
        .unwrap_or_default();
    let _ = writeln!(text, "- Wall time: {:.1} s{load}\n", report.wall_seconds);

    let _ = writeln!(
        text,
        "## Spearman x100 (Tables 1, 3, 4, 6)\n\n\
         Summary level: Spearman between predicted and human scores within each context, \
         averaged over contexts; contexts whose human scores are all equal are skipped and a \
         constant prediction scores 0 (the authors' rule). Computed per prompt, then averaged \
         over prompts {}. Full comparison set (all ordered pairs). Rows marked (ext.) are not \
         in the paper.\n",
        report.prompts.join(" and ")
    );
    text.push_str(&correlation_table(report));
    let _ = writeln!(text, "\nPer prompt:\n");
    text.push_str(&per_prompt_table(report));
    if let Some((resamples, confidence)) = report.bootstrap {
        let _ = writeln!(
            text,
            "\n{:.0}% percentile bootstrap intervals of the prompt-averaged Spearman x100 \
             ({resamples} resamples of the contexts):\n",
            100.0 * confidence
        );
        text.push_str(&interval_table(report));
    }
    let _ = writeln!(
        text,
        "\n## Positional bias (Tables 5, 8)\n\n\
         P(A): fraction of the full (symmetric) comparison set won by the first position at \
         threshold 0.5. τ: the debiasing threshold (smallest on a 0.001 grid with half the \
         probabilities below it, over all of the prompt's comparisons). Consistency: pairs \
         whose two orders name the same winner.\n"
    );
    text.push_str(&bias_table(report));
    let _ = writeln!(
        text,
        "\n## Pairwise accuracy x100 (Tables 7, 9)\n\n\
         Over all comparisons of candidates whose human scores differ, pooled over contexts, \
         per prompt, then averaged over prompts.\n"
    );
    text.push_str(&accuracy_table(report));
    if !report.curves.is_empty() {
        let _ = writeln!(
            text,
            "\n## Subset of comparisons (Figures 4, 5)\n\n\
             Win ratio over R comparisons per context drawn by each design (seeds 0..{}), \
             looked up in the full comparison matrices; summary-level Spearman x100, averaged \
             over prompts, then over seeds. Adaptive (ours): `compare --design adaptive` \
             replayed on the matrices, ranked by PoE.{} Debiased (dashed): threshold \
             balanced over the subset's own comparisons. R grid: {}.\n\n\
             ![subset curves]({SUBSET_PNG})\n\n\
             [SVG]({SUBSET_SVG}) · [CSV]({SUBSET_CSV})\n\n\
             The same subsets' agreement with the full-design ranking of the same method \
             (win ratio, or PoE for adaptive; Spearman x100 per context, a constant ranking \
             counting 0, averaged over contexts):\n\n\
             ![agreement with the full design]({SUBSET_FULL_PNG})\n\n\
             [SVG]({SUBSET_FULL_SVG})\n",
            report.curve_seeds,
            if report
                .curves
                .iter()
                .any(|p| p.design == super::subset::HYBRID)
            {
                " Hybrid (ours): the random design's subsets (the same draws) with the \
                 prompt-scoring row's scores as experts in one PoE (`compare --design random \
                 --prior-scores`), compared with the full design's PoE."
            } else {
                ""
            },
            report
                .curve_grid
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        );
        text.push_str(&budget_table(report));
        if !report.budget.is_empty() {
            let _ = writeln!(text, "\n[{BUDGET_CSV}]({BUDGET_CSV})");
        }
    }
    let _ = writeln!(
        text,
        "\nAll numbers: [{CORRELATIONS_CSV}]({CORRELATIONS_CSV}), \
         [{DECISIONS_CSV}]({DECISIONS_CSV})."
    );
    text
}

fn float(value: Option<f64>) -> String {
    value.map(|v| format!("{v:.6}")).unwrap_or_default()
}

fn write_csv(path: &Path, header: &[&str], rows: &[Vec<String>]) -> Result<()> {
    let mut writer = csv::Writer::from_path(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    writer
        .write_record(header)
        .with_context(|| format!("cannot write {}", path.display()))?;
    for row in rows {
        writer
            .write_record(row)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    writer
        .flush()
        .with_context(|| format!("cannot write {}", path.display()))
}

fn correlation_rows(report: &Reproduction) -> Vec<Vec<String>> {
    let experiment = report.experiment.name().to_string();
    let mut out = Vec::new();
    for row in &report.rows {
        for (column, cell) in report.columns.iter().zip(&row.cells) {
            let Some(cell) = cell else { continue };
            let base = vec![
                experiment.clone(),
                row.family.clone(),
                row.method.clone(),
                row.debiased.to_string(),
                row.in_paper.to_string(),
                column.label.clone(),
            ];
            for prompt in &cell.per_prompt {
                let mut line = base.clone();
                line.push(prompt.prompt.clone());
                line.extend(
                    Coefficient::ALL
                        .iter()
                        .map(|&c| float(prompt.correlations.get(c))),
                );
                line.push(prompt.contexts_kept.to_string());
                line.push(prompt.contexts_skipped.to_string());
                line.extend([String::new(), String::new()]);
                out.push(line);
            }
            let mut line = base;
            line.push("mean".to_string());
            line.extend(Coefficient::ALL.iter().map(|&c| float(cell.mean.get(c))));
            line.extend([String::new(), String::new()]);
            line.push(float(cell.spearman_interval.map(|i| i.lower)));
            line.push(float(cell.spearman_interval.map(|i| i.upper)));
            out.push(line);
        }
    }
    out
}

fn decision_rows(report: &Reproduction) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for cell in &report.decisions {
        for (debiased, stats) in [(false, &cell.plain), (true, &cell.debiased)] {
            out.push(vec![
                report.experiment.name().to_string(),
                cell.column.clone(),
                cell.prompt.clone(),
                debiased.to_string(),
                format!("{:.3}", stats.tau),
                float(stats.first_position.value()),
                stats.first_position.hits.to_string(),
                stats.first_position.total.to_string(),
                float(stats.consistency.value()),
                stats.consistency.hits.to_string(),
                stats.consistency.total.to_string(),
                float(stats.accuracy.value()),
                stats.accuracy.total.to_string(),
            ]);
        }
    }
    out
}

fn subset_rows(report: &Reproduction) -> Vec<Vec<String>> {
    report
        .curves
        .iter()
        .map(|p| {
            vec![
                report.experiment.name().to_string(),
                p.column.clone(),
                p.design.to_string(),
                p.debiased.to_string(),
                p.r.to_string(),
                p.prompt.clone(),
                format!("{:.4}", p.mean),
                format!("{:.4}", p.sd),
                p.seeds.to_string(),
                format!("{:.4}", p.vs_full_mean),
                format!("{:.4}", p.vs_full_sd),
            ]
        })
        .collect()
}

fn budget_rows(report: &Reproduction) -> Vec<Vec<String>> {
    let triple = |t: Option<(f64, f64, f64)>| match t {
        Some((m, lo, hi)) => [m, lo, hi].map(|v| format!("{:.4}", 100.0 * v)),
        None => [String::new(), String::new(), String::new()],
    };
    report
        .budget
        .iter()
        .map(|row| {
            let mut line = vec![
                report.experiment.name().to_string(),
                row.column.clone(),
                row.design.to_string(),
                row.rank.to_string(),
                row.r.to_string(),
            ];
            line.extend(triple(Some(row.vs_full)));
            line.extend(triple(row.vs_human));
            line
        })
        .collect()
}

/// The budget table in Markdown.
fn budget_table(report: &Reproduction) -> String {
    let Some(first) = report.budget.first() else {
        return String::new();
    };
    let cell = |t: Option<(f64, f64, f64)>| match t {
        Some((m, lo, hi)) => format!("{:.1} [{:.1}, {:.1}]", 100.0 * m, 100.0 * lo, 100.0 * hi),
        None => "-".to_string(),
    };
    let mut text = format!(
        "\n## A quarter of the comparisons (R = {} per context)\n\n\
         Spearman x100 of each design's ranking with the full-design ranking of the same \
         method (over all N(N-1) comparisons) and with the human scores, per context averaged \
         over prompts and seeds, then over contexts (a constant ranking counts 0), with 95% \
         bootstrap intervals over contexts (1000 resamples). Debiased: each subset's \
         threshold balanced over its own comparisons, the full design's over all of them. \
         Adaptive: `compare --design adaptive` replayed on the full matrices.{}\n\n\
         | attribute | design | ranking | with full design | with humans |\n\
         |---|---|---|---:|---:|\n",
        first.r,
        if report
            .budget
            .iter()
            .any(|r| r.design == super::subset::HYBRID)
        {
            " Hybrid: the random design's subsets with the prompt-scoring row's scores as \
             experts (`compare --prior-scores`), against the full design's PoE."
        } else {
            ""
        }
    );
    for row in &report.budget {
        let _ = writeln!(
            text,
            "| {} | {} | {} | {} | {} |",
            row.column,
            row.design,
            row.rank,
            cell(Some(row.vs_full)),
            cell(row.vs_human)
        );
    }
    text
}

/// Write the report, the CSV files and the figures into `dir` (created if needed);
/// returns the paths written.
pub fn write_outputs(report: &Reproduction, dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create output directory {}", dir.display()))?;
    let mut written = Vec::new();
    let path = dir.join(CORRELATIONS_CSV);
    write_csv(&path, &CORRELATIONS_COLUMNS, &correlation_rows(report))?;
    written.push(path);
    let path = dir.join(DECISIONS_CSV);
    write_csv(&path, &DECISIONS_COLUMNS, &decision_rows(report))?;
    written.push(path);
    if !report.curves.is_empty() {
        let path = dir.join(SUBSET_CSV);
        write_csv(&path, &SUBSET_COLUMNS, &subset_rows(report))?;
        written.push(path);
        written.extend(write_curve_figures(
            dir,
            report.experiment.title(),
            &report.model_name,
            report.curve_seeds,
            &labels(report),
            &report.curves,
        )?);
    }
    if !report.budget.is_empty() {
        let path = dir.join(BUDGET_CSV);
        write_csv(&path, &BUDGET_COLUMNS, &budget_rows(report))?;
        written.push(path);
    }
    let path = dir.join(REPORT);
    std::fs::write(&path, markdown(report))
        .with_context(|| format!("cannot write {}", path.display()))?;
    written.push(path);
    Ok(written)
}

/// The two subset-of-comparisons figures (with the humans, with the full design) as PNG
/// and SVG in `dir`.
pub fn write_curve_figures(
    dir: &Path,
    title: &str,
    model: &str,
    seeds: u64,
    columns: &[String],
    curves: &[CurvePoint],
) -> Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    let human = subset_figure(
        &format!(
            "{title}: Spearman x100 vs R comparisons per context ({model}, mean of prompts, {seeds} seeds)"
        ),
        columns,
        curves,
        CurveValue::Human,
    );
    let full = subset_figure(
        &format!("{title}: Spearman with the full design ({model}, {seeds} seeds)"),
        columns,
        curves,
        CurveValue::FullDesign,
    );
    for (drawing, name) in [
        (&human, SUBSET_PNG),
        (&human, SUBSET_SVG),
        (&full, SUBSET_FULL_PNG),
        (&full, SUBSET_FULL_SVG),
    ] {
        let path = dir.join(name);
        figure::write(drawing, &path)?;
        written.push(path);
    }
    Ok(written)
}

/// Draw the figures of an earlier run again from its `subset.csv` (and the model's
/// name from its `report.md`), without a model: after a change to the figures.
pub fn redraw_figures(dir: &Path, experiment: super::Experiment) -> Result<Vec<PathBuf>> {
    let path = dir.join(SUBSET_CSV);
    let mut reader = csv::Reader::from_path(&path).with_context(|| {
        format!(
            "cannot read {} (a reproduce output directory?)",
            path.display()
        )
    })?;
    let header = reader
        .headers()
        .with_context(|| format!("{}: no header", path.display()))?
        .clone();
    // Files from before the agreement with the full design have its first 9 columns.
    let columns: Vec<&str> = header.iter().collect();
    let with_full = columns == SUBSET_COLUMNS;
    if !with_full && columns != SUBSET_COLUMNS[..9] {
        anyhow::bail!("{}: not the columns of subset.csv", path.display());
    }
    let mut curves = Vec::new();
    let mut seeds = 0u64;
    for (index, record) in reader.records().enumerate() {
        let line = index + 2;
        let record = record.with_context(|| format!("{}: line {line}", path.display()))?;
        let number = |k: usize| -> Result<f64> {
            record[k].parse::<f64>().with_context(|| {
                format!(
                    "{}: line {line}: `{}` is not a number",
                    path.display(),
                    SUBSET_COLUMNS[k]
                )
            })
        };
        let design = super::subset::CURVES
            .into_iter()
            .find(|name| *name == &record[2])
            .with_context(|| {
                format!(
                    "{}: line {line}: unknown design `{}`",
                    path.display(),
                    &record[2]
                )
            })?;
        let point = CurvePoint {
            column: record[1].to_string(),
            design,
            debiased: &record[3] == "true",
            r: number(4)? as usize,
            prompt: record[5].to_string(),
            mean: number(6)?,
            sd: number(7)?,
            seeds: number(8)? as usize,
            vs_full_mean: if with_full { number(9)? } else { f64::NAN },
            vs_full_sd: if with_full { number(10)? } else { f64::NAN },
        };
        seeds = seeds.max(point.seeds as u64);
        curves.push(point);
    }
    let report_path = dir.join(REPORT);
    let model = std::fs::read_to_string(&report_path)
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("- Model: `"))
                .and_then(|rest| rest.split('`').next())
                .map(str::to_string)
        })
        .with_context(|| format!("{}: no `- Model:` line", report_path.display()))?;
    let columns: Vec<String> = experiment.columns().into_iter().map(|c| c.label).collect();
    let mut written =
        write_curve_figures(dir, experiment.title(), &model, seeds, &columns, &curves)?;
    if !with_full {
        for path in written.split_off(2) {
            std::fs::remove_file(&path)
                .with_context(|| format!("cannot remove {}", path.display()))?;
        }
    }
    Ok(written)
}

/// The reproduction as an HTML report: the Markdown report's tables as sections, its
/// figures drawn inline as SVG.
pub fn page(report: &Reproduction) -> Result<crate::report::Report> {
    let mut figures = std::collections::BTreeMap::new();
    if !report.curves.is_empty() {
        let columns = labels(report);
        for (name, value) in [
            (SUBSET_PNG, CurveValue::Human),
            (SUBSET_FULL_PNG, CurveValue::FullDesign),
        ] {
            let curves = subset_figure(
                &format!(
                    "{}: {} ({}, {} seeds)",
                    report.experiment.title(),
                    match value {
                        CurveValue::Human => "Spearman x100 vs R comparisons per context",
                        CurveValue::FullDesign => "Spearman with the full design",
                    },
                    report.model_name,
                    report.curve_seeds
                ),
                &columns,
                &report.curves,
                value,
            );
            figures.insert(name.to_string(), figure::svg_string(&curves)?);
        }
    }
    let facts = vec![
        (
            "experiment".to_string(),
            report.experiment.title().to_string(),
        ),
        ("model".to_string(), report.model_name.clone()),
        (
            "data".to_string(),
            format!(
                "{} contexts, {} candidates",
                report.contexts, report.candidates
            ),
        ),
        ("command".to_string(), report.command.clone()),
    ];
    Ok(crate::report::Report::with_markdown(
        &format!(
            "Reproduction: {} with {}",
            report.experiment.title(),
            report.model_name
        ),
        facts,
        &markdown(report),
        &figures,
    ))
}
