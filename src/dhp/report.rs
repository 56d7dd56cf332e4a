//! DHP reports: Markdown tables of an analysis (per perturbation: n, p per metric,
//! combined p, D, D_ew) and a summary across runs, and a bar chart like the paper's
//! Figure 4 (D_avg, D_min, D_ew_avg, D_ew_min per model, with the line D = 1), drawn
//! with the primitives of [`crate::figure`].

use std::path::Path;

use anyhow::{Context as _, Result};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::analyze::Analysis;
use super::perturb::{PerturbRow, Status};
use crate::figure::text::{self, Look};
use crate::figure::{
    fill, label, nice_ticks, pen, plot_error, tick_text, Anchor, Area, Drawing, Target,
};

/// One analysed run (a model on a task) with its label.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportRun {
    pub label: String,
    pub analysis: Analysis,
}

/// Read the output of `dhp analyze --json`.
pub fn parse_analysis(text: &str) -> Result<Analysis> {
    serde_json::from_str(text).context("not the JSON of `dhp analyze --json`")
}

fn p_text(p: f64) -> String {
    if p < 1e-3 {
        format!("{p:.1e}")
    } else {
        format!("{p:.3}")
    }
}

fn d_text(d: Option<f64>) -> String {
    d.map_or("-".to_string(), |d| format!("{d:.2}"))
}

/// The per-perturbation table of one analysis, and its overall scores.
pub fn perturbation_table(analysis: &Analysis) -> String {
    let metrics: Vec<&String> = analysis
        .perturbations
        .first()
        .map(|p| p.p.keys().collect())
        .unwrap_or_default();
    let mut out = String::from("| perturbation | level | degree | n |");
    for m in &metrics {
        out.push_str(&format!(" p {m} |"));
    }
    out.push_str(" p | D | D_ew |\n|---|---|---|---:|");
    for _ in &metrics {
        out.push_str("---:|");
    }
    out.push_str("---:|---:|---:|\n");
    for p in &analysis.perturbations {
        out.push_str(&format!(
            "| {} | {} | {} | {} |",
            p.name,
            p.level,
            p.degree.name(),
            p.n
        ));
        for m in &metrics {
            out.push_str(&format!(
                " {} |",
                p.p.get(*m).map_or("-".to_string(), |v| p_text(*v))
            ));
        }
        out.push_str(&format!(
            " {} | {} | {} |\n",
            p_text(p.p_combined),
            d_text(Some(p.d)),
            d_text(p.d_ew)
        ));
    }
    out.push_str(&format!(
        "\nD_avg {}, D_min {}, D_ew_avg {}, D_ew_min {}\n",
        d_text(Some(analysis.d_avg)),
        d_text(Some(analysis.d_min)),
        d_text(analysis.d_ew_avg),
        d_text(analysis.d_ew_min)
    ));
    out
}

/// The summary table of several runs, then each run's perturbation table.
pub fn markdown(title: &str, runs: &[ReportRun]) -> String {
    let mut out = format!(
        "## {title}\n\n| run | D_avg | D_min | D_ew_avg | D_ew_min |\n|---|---:|---:|---:|---:|\n"
    );
    for run in runs {
        let a = &run.analysis;
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            run.label,
            d_text(Some(a.d_avg)),
            d_text(Some(a.d_min)),
            d_text(a.d_ew_avg),
            d_text(a.d_ew_min)
        ));
    }
    for run in runs {
        out.push_str(&format!(
            "\n### {}\n\n{}",
            run.label,
            perturbation_table(&run.analysis)
        ));
    }
    out
}

/// Per perturbation, how many rows are ok, skipped and failed (failed LLM edits are
/// reported, not hidden: they are missing from the tests' `n`).
pub fn status_table(rows: &[PerturbRow]) -> String {
    let mut order: Vec<&str> = Vec::new();
    let mut counts: std::collections::BTreeMap<&str, [usize; 3]> = Default::default();
    for row in rows {
        if !order.contains(&row.perturbation.as_str()) {
            order.push(&row.perturbation);
        }
        let slot = match row.status {
            Status::Ok => 0,
            Status::Skipped => 1,
            Status::Failed => 2,
        };
        counts.entry(&row.perturbation).or_default()[slot] += 1;
    }
    let mut out = String::from(
        "| perturbation | method | ok | skipped | failed |\n|---|---|---:|---:|---:|\n",
    );
    for name in order {
        let [ok, skipped, failed] = counts[name];
        let method = rows
            .iter()
            .find(|r| r.perturbation == name)
            .map_or("", |r| match r.method {
                super::task::Method::Rule => "rule",
                super::task::Method::Llm => "llm",
            });
        out.push_str(&format!(
            "| {name} | {method} | {ok} | {skipped} | {failed} |\n"
        ));
    }
    out
}

const BARS: [(&str, (u8, u8, u8)); 4] = [
    ("D_avg", (0, 114, 178)),
    ("D_min", (128, 185, 222)),
    ("D_ew_avg", (213, 94, 0)),
    ("D_ew_min", (240, 175, 128)),
];
const THRESHOLD_COLOR: (u8, u8, u8) = (200, 30, 30);

fn bar_values(analysis: &Analysis) -> [Option<f64>; 4] {
    [
        Some(analysis.d_avg),
        Some(analysis.d_min),
        analysis.d_ew_avg,
        analysis.d_ew_min,
    ]
}

const WIDTH_PER_RUN: i32 = 230;
const LEFT: i32 = 64;
const RIGHT: i32 = 20;
const TOP: i32 = 50;
const BOTTOM: i32 = 96;
const PLOT_HEIGHT: i32 = 300;
const TITLE: Look = Look::bold(14.0);
const TICK: Look = Look::regular(11.0).color((80, 80, 80));
const RUN: Look = Look::regular(11.5);
const LEGEND: Look = Look::regular(11.0);

/// The bar chart like the paper's Figure 4: D_avg, D_min, D_ew_avg, D_ew_min per run,
/// with the line D = 1.
pub struct DiscernmentChart<'a> {
    pub title: &'a str,
    pub runs: &'a [ReportRun],
}

impl Drawing for DiscernmentChart<'_> {
    fn size(&self) -> (u32, u32) {
        let width = (LEFT + RIGHT + WIDTH_PER_RUN * self.runs.len().max(1) as i32).max(640);
        (width as u32, (TOP + PLOT_HEIGHT + BOTTOM) as u32)
    }

    fn draw<DB: DrawingBackend>(&self, area: &Area<DB>, target: Target) -> Result<()> {
        let values: Vec<f64> = self
            .runs
            .iter()
            .flat_map(|r| bar_values(&r.analysis))
            .flatten()
            .filter(|v| v.is_finite())
            .collect();
        let low = values.iter().copied().fold(0.0, f64::min);
        let high = values.iter().copied().fold(1.2, f64::max) * 1.08;
        let (ticks, step) = nice_ticks(low, high, 6);
        let low = ticks.first().copied().unwrap_or(low).min(low);
        let high = ticks.last().copied().unwrap_or(high).max(high);
        let plot_width = WIDTH_PER_RUN * self.runs.len().max(1) as i32;
        let y_of = |v: f64| {
            TOP + PLOT_HEIGHT - ((v - low) / (high - low) * PLOT_HEIGHT as f64).round() as i32
        };
        let width = self.size().0 as i32;
        label(
            area,
            target,
            self.title,
            (14, 18),
            text::fit(self.title, TITLE, (width - 28) as f32, 9.0),
            Anchor::new(HPos::Left, VPos::Top),
        )?;
        let axis = pen((90, 90, 90), 1);
        for &t in &ticks {
            let y = y_of(t);
            area.draw(&PathElement::new(
                vec![(LEFT, y), (LEFT + plot_width, y)],
                pen((232, 232, 232), 1),
            ))
            .map_err(plot_error)?;
            area.draw(&PathElement::new(vec![(LEFT - 4, y), (LEFT, y)], axis))
                .map_err(plot_error)?;
            label(
                area,
                target,
                &tick_text(t, step),
                (LEFT - 7, y),
                TICK,
                Anchor::new(HPos::Right, VPos::Center),
            )?;
        }
        area.draw(&PathElement::new(
            vec![
                (LEFT, TOP),
                (LEFT, TOP + PLOT_HEIGHT),
                (LEFT + plot_width, TOP + PLOT_HEIGHT),
            ],
            axis,
        ))
        .map_err(plot_error)?;
        label(
            area,
            target,
            "discernment D",
            (16, TOP + PLOT_HEIGHT / 2),
            Look::regular(12.0),
            Anchor::vertical(HPos::Center, VPos::Center),
        )?;
        let zero = y_of(0.0);
        for (index, run) in self.runs.iter().enumerate() {
            let x0 = LEFT + index as i32 * WIDTH_PER_RUN + 20;
            let bar_width = (WIDTH_PER_RUN - 40) / BARS.len() as i32;
            for (k, value) in bar_values(&run.analysis).iter().enumerate() {
                let Some(value) = value.filter(|v| v.is_finite()) else {
                    continue;
                };
                let x = x0 + k as i32 * bar_width;
                let y = y_of(value);
                area.draw(&Rectangle::new(
                    [(x, y.min(zero)), (x + bar_width - 2, y.max(zero))],
                    fill(BARS[k].1),
                ))
                .map_err(plot_error)?;
            }
            // The run's label under its bars, on up to two lines.
            let room = (WIDTH_PER_RUN - 16) as f32;
            for (line, text_line) in text::wrap(&run.label, RUN, room, 2).iter().enumerate() {
                label(
                    area,
                    target,
                    text_line,
                    (
                        x0 + (WIDTH_PER_RUN - 40) / 2,
                        TOP + PLOT_HEIGHT + 10 + line as i32 * 16,
                    ),
                    RUN,
                    Anchor::new(HPos::Center, VPos::Top),
                )?;
            }
        }
        let one = y_of(1.0);
        area.draw(&PathElement::new(
            vec![(LEFT, one), (LEFT + plot_width, one)],
            pen(THRESHOLD_COLOR, 2),
        ))
        .map_err(plot_error)?;
        // Legend, each entry as wide as its text.
        let mut x = LEFT;
        let y = TOP + PLOT_HEIGHT + 68;
        for (name, color) in BARS {
            area.draw(&Rectangle::new([(x, y - 6), (x + 14, y + 6)], fill(color)))
                .map_err(plot_error)?;
            label(
                area,
                target,
                name,
                (x + 20, y),
                LEGEND,
                Anchor::new(HPos::Left, VPos::Center),
            )?;
            x += 20 + text::width(name, LEGEND).ceil() as i32 + 22;
        }
        area.draw(&PathElement::new(
            vec![(x, y), (x + 18, y)],
            pen(THRESHOLD_COLOR, 2),
        ))
        .map_err(plot_error)?;
        label(
            area,
            target,
            "D = 1 (p = 0.05)",
            (x + 24, y),
            LEGEND,
            Anchor::new(HPos::Left, VPos::Center),
        )?;
        Ok(())
    }
}

/// Draw the bar chart to `path` (`.svg`: SVG, otherwise PNG).
pub fn write_figure(title: &str, runs: &[ReportRun], path: &Path) -> Result<()> {
    crate::figure::write(&DiscernmentChart { title, runs }, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dhp::task::{Degree, DhpTask, Level, Method};

    fn row(name: &str, method: Method, status: Status) -> PerturbRow {
        PerturbRow {
            item_id: "1".into(),
            task: DhpTask::StoryCompletion,
            perturbation: name.into(),
            level: Level::W,
            degree: Degree::None,
            method,
            context: String::new(),
            original: "x".into(),
            perturbed: None,
            status,
            reason: None,
            seed: None,
            attempts: None,
        }
    }

    #[test]
    fn status_table_counts_failures() {
        let rows = vec![
            row("typos", Method::Rule, Status::Ok),
            row("grammar", Method::Llm, Status::Failed),
            row("grammar", Method::Llm, Status::Ok),
            row("grammar", Method::Llm, Status::Failed),
        ];
        let table = status_table(&rows);
        assert!(table.contains("| typos | rule | 1 | 0 | 0 |"), "{table}");
        assert!(table.contains("| grammar | llm | 1 | 0 | 2 |"), "{table}");
    }
}
