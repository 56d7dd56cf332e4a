//! The Para-Ref experiment's Markdown report and its figure (Kendall tau against the
//! number of references, like the paper's Figure 4).

use std::fmt::Write as _;

use super::evaluate::{ConditionRow, DatasetResult, References};
use super::experiment::Paraphrased;
use crate::figure::{Figure, Panel, Series, PALETTE};
use crate::metrics::{Aggregation, LexicalMetric};

fn condition_label(references: &References, aggregation: Aggregation) -> String {
    let agg = match aggregation {
        Aggregation::Max => "max",
        Aggregation::Mean => "mean",
        Aggregation::Native => "native",
    };
    match references {
        References::First => "reference A".to_string(),
        References::Paraphrased { k } => format!("A + {k} paraphrases ({agg})"),
        References::AllHuman => format!("all human references ({agg})"),
    }
}

fn tau_cell(tau: Option<f64>) -> String {
    tau.map_or("n/a".to_string(), |t| format!("{t:.3}"))
}

/// The Markdown tables: one per data set, rows the reference conditions, columns the
/// metrics; the best value of each column in bold.
pub fn markdown(model: &str, results: &[DatasetResult], paraphrased: &[Paraphrased]) -> String {
    let mut out = String::new();
    for (result, para) in results.iter().zip(paraphrased) {
        let _ = writeln!(
            out,
            "#### {} ({} items, {} scored outputs; Kendall tau-b with {})\n",
            result.name, result.items, result.outputs, result.human
        );
        let _ = writeln!(
            out,
            "Paraphrases by {model}: {} requested, {} failed ({} answers rejected by cleaning and retried), {} generated now and {} from the cache, {:.0} s wall, {:.1} tokens/s.\n",
            para.report.requested,
            para.report.failed,
            para.report.rejected,
            para.report.generated,
            para.report.cached,
            para.wall_seconds,
            para.report.tokens_per_second()
        );
        let metrics: Vec<LexicalMetric> = result
            .rows
            .first()
            .map(|r| r.taus.iter().map(|(m, _)| *m).collect())
            .unwrap_or_default();
        let _ = write!(out, "| references | refs/item |");
        for metric in &metrics {
            let _ = write!(out, " {metric} |");
        }
        let _ = write!(out, "\n|---|---:|");
        for _ in &metrics {
            let _ = write!(out, "---:|");
        }
        out.push('\n');
        let best: Vec<f64> = (0..metrics.len())
            .map(|m| {
                result
                    .rows
                    .iter()
                    .filter_map(|r| r.taus[m].1)
                    .fold(f64::NEG_INFINITY, f64::max)
            })
            .collect();
        for row in &result.rows {
            let _ = write!(
                out,
                "| {} | {:.1} |",
                condition_label(&row.references, row.aggregation),
                row.mean_references
            );
            for (m, (_, tau)) in row.taus.iter().enumerate() {
                let cell = tau_cell(*tau);
                if tau.is_some_and(|t| t == best[m]) {
                    let _ = write!(out, " **{cell}** |");
                } else {
                    let _ = write!(out, " {cell} |");
                }
            }
            out.push('\n');
        }
        out.push('\n');
    }
    out
}

/// Kendall tau (max aggregation) against the number of references (1 + k), one panel
/// per data set, one line per metric; the all-human-references value as a dashed line
/// from the single reference.
pub fn figure(model: &str, results: &[DatasetResult]) -> Figure {
    let panels = results
        .iter()
        .map(|result| {
            let metrics: Vec<LexicalMetric> = result
                .rows
                .first()
                .map(|r| r.taus.iter().map(|(m, _)| *m).collect())
                .unwrap_or_default();
            let mut series = Vec::new();
            for (m, metric) in metrics.iter().enumerate() {
                let color = PALETTE[m % PALETTE.len()];
                let mut points = Vec::new();
                let mut human = Vec::new();
                for row in &result.rows {
                    let Some(tau) = row.taus[m].1 else { continue };
                    match (&row.references, row.aggregation) {
                        (References::First, _) => {
                            points.push((1.0, tau));
                            human.push((1.0, tau));
                        }
                        (References::Paraphrased { .. }, Aggregation::Max) => {
                            points.push((row.mean_references, tau))
                        }
                        (References::AllHuman, Aggregation::Max) => {
                            human.push((row.mean_references, tau))
                        }
                        _ => {}
                    }
                }
                points.sort_by(|a, b| a.0.total_cmp(&b.0));
                series.push(Series {
                    label: metric.name().to_string(),
                    color,
                    dashed: false,
                    points,
                });
                if human.len() == 2 {
                    series.push(Series {
                        label: format!("{} (human refs)", metric.name()),
                        color,
                        dashed: true,
                        points: human,
                    });
                }
            }
            Panel {
                title: result.name.clone(),
                series,
            }
        })
        .collect();
    Figure {
        title: format!(
            "Para-Ref: correlation vs number of references (paraphrases by {model}, max)"
        ),
        x_label: "references per item (1 + paraphrases)".to_string(),
        y_label: "Kendall tau".to_string(),
        panels,
    }
}

/// The model and the tables of a report [`markdown`] wrote, read back (values to the
/// table's 3 decimals): to draw the figure again without the run.
pub fn read_markdown(text: &str) -> anyhow::Result<(String, Vec<DatasetResult>)> {
    use anyhow::{bail, Context as _};
    let mut model = None;
    let mut results: Vec<DatasetResult> = Vec::new();
    let mut metrics: Vec<LexicalMetric> = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let at = || format!("line {}", index + 1);
        if let Some(heading) = line.strip_prefix("#### ") {
            let (name, rest) = heading.split_once(" (").with_context(at)?;
            let number = |word: &str| -> Option<usize> {
                rest.split_whitespace()
                    .collect::<Vec<_>>()
                    .windows(2)
                    .find(|w| w[1].trim_end_matches([',', ';']) == word)
                    .and_then(|w| w[0].parse().ok())
            };
            results.push(DatasetResult {
                name: name.to_string(),
                human: rest
                    .split_once("Kendall tau-b with ")
                    .map_or("", |(_, h)| h.trim_end_matches(')'))
                    .to_string(),
                items: number("items").unwrap_or(0),
                outputs: number("scored").unwrap_or(0),
                rows: Vec::new(),
            });
            metrics.clear();
        } else if let Some(rest) = line.strip_prefix("Paraphrases by ") {
            model.get_or_insert(rest.split(':').next().unwrap_or(rest).to_string());
        } else if line.starts_with("| references |") {
            metrics = line
                .split('|')
                .map(str::trim)
                .skip(3)
                .filter(|c| !c.is_empty())
                .map(|name| name.parse::<LexicalMetric>())
                .collect::<anyhow::Result<_>>()
                .with_context(at)?;
        } else if line.starts_with("| ") && !metrics.is_empty() {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let condition = cells[1];
            let (references, aggregation) = if condition == "reference A" {
                (References::First, Aggregation::Max)
            } else {
                let aggregation = if condition.ends_with("(mean)") {
                    Aggregation::Mean
                } else if condition.ends_with("(max)") {
                    Aggregation::Max
                } else {
                    Aggregation::Native
                };
                if condition.starts_with("all human references") {
                    (References::AllHuman, aggregation)
                } else if let Some(rest) = condition.strip_prefix("A + ") {
                    let k = rest
                        .split_whitespace()
                        .next()
                        .and_then(|k| k.parse().ok())
                        .with_context(at)?;
                    (References::Paraphrased { k }, aggregation)
                } else {
                    bail!("{}: unknown condition `{condition}`", at());
                }
            };
            let mean_references: f64 = cells[2].parse().with_context(at)?;
            let taus = metrics
                .iter()
                .zip(&cells[3..])
                .map(|(metric, cell)| {
                    let value = cell.trim_matches('*');
                    (*metric, value.parse::<f64>().ok())
                })
                .collect();
            let result = results.last_mut().with_context(at)?;
            result.rows.push(ConditionRow {
                references,
                aggregation,
                mean_references,
                taus,
            });
        }
    }
    let model = model.context("no `Paraphrases by` line")?;
    if results.is_empty() {
        bail!("no data set tables");
    }
    Ok((model, results))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pararef::generate::ParaphraseReport;

    #[test]
    fn the_markdown_reads_back_to_the_figures_numbers() {
        let row = |references, aggregation, mean_references, tau: f64| ConditionRow {
            references,
            aggregation,
            mean_references,
            taus: vec![
                (LexicalMetric::Bleu, Some(tau)),
                (LexicalMetric::RougeL, None),
            ],
        };
        let results = vec![DatasetResult {
            name: "wmt22-zh-en".into(),
            human: "DA z-score".into(),
            items: 16,
            outputs: 158,
            rows: vec![
                row(References::First, Aggregation::Max, 1.0, -0.1204),
                row(
                    References::Paraphrased { k: 2 },
                    Aggregation::Max,
                    3.0,
                    0.25,
                ),
                row(
                    References::Paraphrased { k: 2 },
                    Aggregation::Mean,
                    3.0,
                    0.3,
                ),
                row(References::AllHuman, Aggregation::Max, 2.0, -0.05),
            ],
        }];
        let paraphrased = vec![Paraphrased {
            rows: Vec::new(),
            report: ParaphraseReport::default(),
            wall_seconds: 0.0,
        }];
        let text = markdown("smollm2", &results, &paraphrased);
        let (model, read) = read_markdown(&text).unwrap();
        assert_eq!(model, "smollm2");
        assert_eq!(read[0].name, "wmt22-zh-en");
        assert_eq!((read[0].items, read[0].outputs), (16, 158));
        assert_eq!(read[0].human, "DA z-score");
        let mut want = results[0].rows.clone();
        want[0].taus[0].1 = Some(-0.120);
        assert_eq!(read[0].rows, want);
        assert_eq!(
            figure("smollm2", &read),
            figure("smollm2", &{
                let mut r = results.clone();
                r[0].rows = want;
                r
            })
        );
    }
}
