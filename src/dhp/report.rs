//! DHP reports: Markdown tables of an analysis (per perturbation: n, p per metric,
//! combined p, D, D_ew) and a summary across runs, and a bar chart like the paper's
//! Figure 4 (D_avg, D_min, D_ew_avg, D_ew_min per model, with the line D = 1), drawn
//! with the primitives of [`crate::reproduce::figure`].

use std::path::Path;

use anyhow::{Context as _, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::analyze::Analysis;
use super::perturb::{PerturbRow, Status};
use crate::reproduce::figure::{label, nice_ticks, plot_error, style, tick_text, Anchor, TextMode};

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
    ("D_avg", (31, 119, 180)),
    ("D_min", (158, 202, 225)),
    ("D_ew_avg", (230, 120, 20)),
    ("D_ew_min", (253, 190, 133)),
];

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
const BOTTOM: i32 = 80;
const PLOT_HEIGHT: i32 = 300;

fn draw<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    runs: &[ReportRun],
    mode: TextMode,
) -> Result<()> {
    area.fill(&WHITE).map_err(plot_error)?;
    let values: Vec<f64> = runs
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
    let plot_width = WIDTH_PER_RUN * runs.len().max(1) as i32;
    let y_of =
        |v: f64| TOP + PLOT_HEIGHT - ((v - low) / (high - low) * PLOT_HEIGHT as f64).round() as i32;
    label(
        area,
        mode,
        title,
        (12, 16),
        13.0,
        Anchor::new(HPos::Left, VPos::Top),
    )?;
    // axes and ticks
    let axis = style((0, 0, 0), 1);
    area.draw(&PathElement::new(
        vec![
            (LEFT, TOP),
            (LEFT, TOP + PLOT_HEIGHT),
            (LEFT + plot_width, TOP + PLOT_HEIGHT),
        ],
        axis,
    ))
    .map_err(plot_error)?;
    for &t in &ticks {
        let y = y_of(t);
        area.draw(&PathElement::new(vec![(LEFT - 4, y), (LEFT, y)], axis))
            .map_err(plot_error)?;
        label(
            area,
            mode,
            &tick_text(t, step),
            (LEFT - 7, y),
            9.0,
            Anchor::new(HPos::Right, VPos::Center),
        )?;
    }
    let mut y_title = Anchor::new(HPos::Center, VPos::Center);
    y_title.vertical = true;
    label(
        area,
        mode,
        "discernment D",
        (16, TOP + PLOT_HEIGHT / 2),
        11.0,
        y_title,
    )?;
    let zero = y_of(0.0);
    for (index, run) in runs.iter().enumerate() {
        let x0 = LEFT + index as i32 * WIDTH_PER_RUN + 20;
        let bar_width = (WIDTH_PER_RUN - 40) / BARS.len() as i32;
        for (k, value) in bar_values(&run.analysis).iter().enumerate() {
            let Some(value) = value.filter(|v| v.is_finite()) else {
                continue;
            };
            let x = x0 + k as i32 * bar_width;
            let y = y_of(value);
            let color = BARS[k].1;
            area.draw(&Rectangle::new(
                [(x, y.min(zero)), (x + bar_width - 2, y.max(zero))],
                RGBColor(color.0, color.1, color.2).filled(),
            ))
            .map_err(plot_error)?;
        }
        // shrink the run's label to its slot
        let room = (WIDTH_PER_RUN - 12) as f32;
        let width = crate::reproduce::stroke_font::text_width(&run.label, 10.0);
        let height = if width > room {
            10.0 * room / width
        } else {
            10.0
        };
        label(
            area,
            mode,
            &run.label,
            (x0 + (WIDTH_PER_RUN - 40) / 2, TOP + PLOT_HEIGHT + 8),
            height,
            Anchor::new(HPos::Center, VPos::Top),
        )?;
    }
    // the significance line D = 1
    let one = y_of(1.0);
    area.draw(&PathElement::new(
        vec![(LEFT, one), (LEFT + plot_width, one)],
        style((214, 39, 40), 2),
    ))
    .map_err(plot_error)?;
    // legend
    let mut x = LEFT;
    let y = TOP + PLOT_HEIGHT + 44;
    for (name, color) in BARS {
        area.draw(&Rectangle::new(
            [(x, y - 5), (x + 14, y + 5)],
            RGBColor(color.0, color.1, color.2).filled(),
        ))
        .map_err(plot_error)?;
        label(
            area,
            mode,
            name,
            (x + 18, y),
            9.0,
            Anchor::new(HPos::Left, VPos::Center),
        )?;
        x += 100;
    }
    area.draw(&PathElement::new(
        vec![(x, y), (x + 16, y)],
        style((214, 39, 40), 2),
    ))
    .map_err(plot_error)?;
    label(
        area,
        mode,
        "D = 1 (p = 0.05)",
        (x + 20, y),
        9.0,
        Anchor::new(HPos::Left, VPos::Center),
    )?;
    Ok(())
}

fn size(runs: &[ReportRun]) -> (u32, u32) {
    let width = (LEFT + RIGHT + WIDTH_PER_RUN * runs.len().max(1) as i32).max(620);
    (width as u32, (TOP + PLOT_HEIGHT + BOTTOM) as u32)
}

/// Draw the bar chart to `path` (`.svg`: SVG, otherwise PNG).
pub fn write_figure(title: &str, runs: &[ReportRun], path: &Path) -> Result<()> {
    let (width, height) = size(runs);
    if path.extension().is_some_and(|e| e == "svg") {
        let mut text = String::new();
        {
            let area = SVGBackend::with_string(&mut text, (width, height)).into_drawing_area();
            draw(&area, title, runs, TextMode::Native)?;
            area.present().map_err(plot_error)?;
        }
        return std::fs::write(path, text)
            .with_context(|| format!("cannot write {}", path.display()));
    }
    let mut pixels = vec![0u8; width as usize * height as usize * 3];
    {
        let area = BitMapBackend::with_buffer(&mut pixels, (width, height)).into_drawing_area();
        draw(&area, title, runs, TextMode::Strokes)?;
        area.present().map_err(plot_error)?;
    }
    let file =
        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut encoder = png::Encoder::new(std::io::BufWriter::new(file), width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder
        .write_header()
        .with_context(|| format!("cannot write {}", path.display()))?;
    writer
        .write_image_data(&pixels)
        .with_context(|| format!("cannot write {}", path.display()))?;
    writer
        .finish()
        .with_context(|| format!("cannot write {}", path.display()))
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
