//! The subset-of-comparisons figure (the paper's Figures 4-5): the curves of every
//! design (and the hybrid curve, where there is one) as a line figure of
//! [`crate::figure`].

use super::subset::{CurvePoint, CURVES};
use crate::figure::{Figure, Panel, Series, PALETTE};

/// Which Spearman of a curve point a figure plots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CurveValue {
    /// With the human scores (the paper's figures).
    Human,
    /// With the full-design ranking.
    FullDesign,
}

/// The subset-of-comparisons figure: one panel per attribute, the prompt-averaged
/// curves of every design, solid plain and dashed debiased.
pub fn subset_figure(
    title: &str,
    columns: &[String],
    points: &[CurvePoint],
    value: CurveValue,
) -> Figure {
    let panels = columns
        .iter()
        .map(|column| {
            let mut series = Vec::new();
            for (name, color) in CURVES.into_iter().zip(PALETTE) {
                for debiased in [false, true] {
                    let mut line: Vec<(f64, f64)> = points
                        .iter()
                        .filter(|p| {
                            &p.column == column
                                && p.design == name
                                && p.debiased == debiased
                                && p.prompt == "mean"
                        })
                        .map(|p| match value {
                            CurveValue::Human => (p.r as f64, p.mean),
                            CurveValue::FullDesign => (p.r as f64, p.vs_full_mean),
                        })
                        .filter(|(_, y)| y.is_finite())
                        .collect();
                    line.sort_by(|a, b| a.0.total_cmp(&b.0));
                    if !line.is_empty() {
                        series.push(Series {
                            label: if debiased {
                                format!("{name}, debiased")
                            } else {
                                name.to_string()
                            },
                            color,
                            dashed: debiased,
                            points: line,
                        });
                    }
                }
            }
            Panel {
                title: column.clone(),
                series,
            }
        })
        .collect();
    Figure {
        title: title.to_string(),
        x_label: "R (comparisons per context)".to_string(),
        y_label: match value {
            CurveValue::Human => "Spearman x100",
            CurveValue::FullDesign => "x100 vs full design",
        }
        .to_string(),
        panels,
    }
}
