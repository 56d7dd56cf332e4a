//! The Para-Ref experiment's Markdown report and its figure (Kendall tau against the
//! number of references, like the paper's Figure 4).

use std::fmt::Write as _;

use super::evaluate::{DatasetResult, References};
use super::experiment::Paraphrased;
use crate::metrics::{Aggregation, LexicalMetric};
use crate::reproduce::figure::{Figure, Panel, Series};

const COLORS: [(u8, u8, u8); 7] = [
    (31, 119, 180),
    (230, 120, 20),
    (44, 150, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (120, 120, 120),
];

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
                let color = COLORS[m % COLORS.len()];
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
