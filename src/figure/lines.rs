//! Line plots: panels side by side under a title, one legend for all panels, solid or
//! dashed lines (the subset-of-comparisons curves, the Para-Ref figure).
//!
//! Every label is measured before it is placed: the title shrinks to the width, the
//! legend takes as many rows as its entries need, so nothing is cut.

use anyhow::Result;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::text::{self, Anchor, Look, Target};
use super::{label, nice_ticks, pen, plot_error, tick_text, Area, Drawing};

/// One line of a panel.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub label: String,
    pub color: (u8, u8, u8),
    pub dashed: bool,
    /// `(x, y)`, in increasing x.
    pub points: Vec<(f64, f64)>,
}

/// One plot.
#[derive(Debug, Clone, PartialEq)]
pub struct Panel {
    pub title: String,
    pub series: Vec<Series>,
}

/// A figure: panels side by side (two per row, three when there are three) under a
/// title, with one legend for all panels.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub panels: Vec<Panel>,
}

const PANEL_WIDTH: i32 = 460;
const PANEL_HEIGHT: i32 = 330;
const HEADER: i32 = 44;
const MARGIN_LEFT: i32 = 64;
const MARGIN_RIGHT: i32 = 18;
const MARGIN_TOP: i32 = 34;
const MARGIN_BOTTOM: i32 = 52;
/// Legend: sample line, gap to the text, space between columns, row height.
const SAMPLE: i32 = 28;
const SAMPLE_GAP: i32 = 6;
const COLUMN_GAP: i32 = 24;
const LEGEND_ROW: i32 = 22;
const LEGEND_PAD: i32 = 14;

const TITLE: Look = Look::bold(15.0);
const PANEL_TITLE: Look = Look::bold(13.0);
const AXIS_TITLE: Look = Look::regular(12.0);
const TICK: Look = Look::regular(11.0).color((80, 80, 80));
const LEGEND: Look = Look::regular(11.5);

/// The legend's grid: entries fill columns top to bottom.
struct LegendLayout {
    rows: usize,
    column_widths: Vec<i32>,
}

impl LegendLayout {
    fn height(&self) -> i32 {
        if self.column_widths.is_empty() {
            0
        } else {
            self.rows as i32 * LEGEND_ROW + 2 * LEGEND_PAD
        }
    }
}

impl Figure {
    fn columns(&self) -> i32 {
        match self.panels.len() {
            0 | 1 => 1,
            3 => 3,
            _ => 2,
        }
    }

    fn width(&self) -> i32 {
        self.columns() * PANEL_WIDTH
    }

    /// The legend: one entry per distinct (label, dashed) in panel order.
    fn legend(&self) -> Vec<&Series> {
        let mut entries: Vec<&Series> = Vec::new();
        for series in self.panels.iter().flat_map(|p| &p.series) {
            if !entries
                .iter()
                .any(|e| e.label == series.label && e.dashed == series.dashed)
            {
                entries.push(series);
            }
        }
        entries
    }

    /// The fewest rows (two at least when entries pair up, as plain and dashed lines
    /// do) whose columns fit the figure's width.
    fn legend_layout(&self) -> LegendLayout {
        let entries = self.legend();
        let widths: Vec<i32> = entries
            .iter()
            .map(|s| SAMPLE + SAMPLE_GAP + text::width(&s.label, LEGEND).ceil() as i32)
            .collect();
        let room = self.width() - 2 * LEGEND_PAD;
        let first = if entries.len() > 2 && entries.iter().any(|s| s.dashed) {
            2
        } else {
            1
        };
        for rows in (first..=entries.len().max(first)).step_by(first) {
            let column_widths: Vec<i32> = widths
                .chunks(rows)
                .map(|c| c.iter().copied().max().unwrap_or(0))
                .collect();
            let total: i32 = column_widths.iter().sum::<i32>()
                + COLUMN_GAP * (column_widths.len() as i32 - 1).max(0);
            if total <= room || rows + first > entries.len() {
                return LegendLayout {
                    rows,
                    column_widths,
                };
            }
        }
        LegendLayout {
            rows: 1,
            column_widths: Vec::new(),
        }
    }
}

impl Drawing for Figure {
    /// Width and height in pixels.
    fn size(&self) -> (u32, u32) {
        let columns = self.columns();
        let rows = (self.panels.len() as i32 + columns - 1) / columns;
        (
            self.width() as u32,
            (HEADER + rows.max(1) * PANEL_HEIGHT + self.legend_layout().height()) as u32,
        )
    }

    fn draw<DB: DrawingBackend>(&self, area: &Area<DB>, target: Target) -> Result<()> {
        let (width, height) = self.size();
        let (width, height) = (width as i32, height as i32);
        let title = text::fit(&self.title, TITLE, (width - 24) as f32, 9.0);
        label(
            area,
            target,
            &self.title,
            (width / 2, 16),
            title,
            Anchor::new(HPos::Center, VPos::Top),
        )?;
        let columns = self.columns();
        for (index, panel) in self.panels.iter().enumerate() {
            let index = index as i32;
            let origin = (
                (index % columns) * PANEL_WIDTH,
                HEADER + (index / columns) * PANEL_HEIGHT,
            );
            draw_panel(area, target, panel, &self.x_label, &self.y_label, origin)?;
        }
        let layout = self.legend_layout();
        let entries = self.legend();
        let total: i32 = layout.column_widths.iter().sum::<i32>()
            + COLUMN_GAP * (layout.column_widths.len() as i32 - 1).max(0);
        let mut x = ((width - total) / 2).max(LEGEND_PAD);
        let top = height - layout.height() + LEGEND_PAD + LEGEND_ROW / 2;
        for (column, chunk) in entries.chunks(layout.rows.max(1)).enumerate() {
            for (row, series) in chunk.iter().enumerate() {
                let y = top + row as i32 * LEGEND_ROW;
                let line = vec![
                    (f64::from(x), f64::from(y)),
                    (f64::from(x + SAMPLE), f64::from(y)),
                ];
                stroke(area, &line, series.color, series.dashed)?;
                label(
                    area,
                    target,
                    &series.label,
                    (x + SAMPLE + SAMPLE_GAP, y),
                    LEGEND,
                    Anchor::new(HPos::Left, VPos::Center),
                )?;
            }
            x += layout.column_widths[column] + COLUMN_GAP;
        }
        Ok(())
    }
}

/// A polyline in pixels, solid or dashed, 2 pixels wide.
fn stroke<DB: DrawingBackend>(
    area: &Area<DB>,
    points: &[(f64, f64)],
    color: (u8, u8, u8),
    dashed: bool,
) -> Result<()> {
    let pieces = if dashed {
        dashes(points, 7.0, 5.0)
    } else {
        vec![points.to_vec()]
    };
    for piece in pieces {
        let piece: Vec<(i32, i32)> = piece
            .iter()
            .map(|&(x, y)| (x.round() as i32, y.round() as i32))
            .collect();
        area.draw(&PathElement::new(piece, pen(color, 2)))
            .map_err(plot_error)?;
    }
    Ok(())
}

/// Pieces of a polyline: dashes of `dash` pixels separated by `gap` pixels.
fn dashes(points: &[(f64, f64)], dash: f64, gap: f64) -> Vec<Vec<(f64, f64)>> {
    let mut pieces = Vec::new();
    let mut current: Vec<(f64, f64)> = Vec::new();
    let mut drawing = true;
    let mut left = dash;
    for pair in points.windows(2) {
        let (mut x, mut y) = pair[0];
        let (x1, y1) = pair[1];
        if drawing && current.is_empty() {
            current.push((x, y));
        }
        let mut length = ((x1 - x).powi(2) + (y1 - y).powi(2)).sqrt();
        while length > 0.0 {
            let step = left.min(length);
            let t = step / length;
            x += (x1 - x) * t;
            y += (y1 - y) * t;
            length -= step;
            left -= step;
            if drawing {
                current.push((x, y));
            }
            if left <= 1e-9 {
                if drawing {
                    pieces.push(std::mem::take(&mut current));
                    left = gap;
                } else {
                    current.push((x, y));
                    left = dash;
                }
                drawing = !drawing;
            }
        }
    }
    if current.len() >= 2 {
        pieces.push(current);
    }
    pieces
}

fn draw_panel<DB: DrawingBackend>(
    area: &Area<DB>,
    target: Target,
    panel: &Panel,
    x_label: &str,
    y_label: &str,
    origin: (i32, i32),
) -> Result<()> {
    let left = origin.0 + MARGIN_LEFT;
    let right = origin.0 + PANEL_WIDTH - MARGIN_RIGHT;
    let top = origin.1 + MARGIN_TOP;
    let bottom = origin.1 + PANEL_HEIGHT - MARGIN_BOTTOM;
    label(
        area,
        target,
        &panel.title,
        ((left + right) / 2, origin.1 + 12),
        text::fit(&panel.title, PANEL_TITLE, (right - left) as f32, 8.0),
        Anchor::new(HPos::Center, VPos::Top),
    )?;

    let all: Vec<(f64, f64)> = panel.series.iter().flat_map(|s| s.points.clone()).collect();
    let (x_max, y_low, y_high) = if all.is_empty() {
        (1.0, 0.0, 1.0)
    } else {
        let x_max = all.iter().map(|p| p.0).fold(f64::MIN, f64::max);
        let y_min = all.iter().map(|p| p.1).fold(f64::MAX, f64::min);
        let y_max = all.iter().map(|p| p.1).fold(f64::MIN, f64::max);
        let span = y_max - y_min;
        let pad = if span > 1e-12 {
            span * 0.08
        } else {
            (y_max.abs() * 0.1).max(1.0)
        };
        (x_max.max(1.0), y_min - pad, y_max + pad)
    };
    let to_pixel = |(x, y): (f64, f64)| -> (f64, f64) {
        (
            f64::from(left) + x / x_max * f64::from(right - left),
            f64::from(bottom) - (y - y_low) / (y_high - y_low) * f64::from(bottom - top),
        )
    };
    let grid = pen((232, 232, 232), 1);
    let ink = pen((90, 90, 90), 1);
    let (y_ticks, y_step) = nice_ticks(y_low, y_high, 6);
    for y in y_ticks {
        let (_, py) = to_pixel((0.0, y));
        let py = py.round() as i32;
        area.draw(&PathElement::new(vec![(left, py), (right, py)], grid))
            .map_err(plot_error)?;
        area.draw(&PathElement::new(vec![(left - 4, py), (left, py)], ink))
            .map_err(plot_error)?;
        label(
            area,
            target,
            &tick_text(y, y_step),
            (left - 7, py),
            TICK,
            Anchor::new(HPos::Right, VPos::Center),
        )?;
    }
    let (x_ticks, x_step) = nice_ticks(0.0, x_max, 6);
    for x in x_ticks {
        let (px, _) = to_pixel((x, y_low));
        let px = px.round() as i32;
        area.draw(&PathElement::new(vec![(px, top), (px, bottom)], grid))
            .map_err(plot_error)?;
        area.draw(&PathElement::new(vec![(px, bottom), (px, bottom + 4)], ink))
            .map_err(plot_error)?;
        label(
            area,
            target,
            &tick_text(x, x_step),
            (px, bottom + 8),
            TICK,
            Anchor::new(HPos::Center, VPos::Top),
        )?;
    }
    area.draw(&Rectangle::new([(left, top), (right, bottom)], ink))
        .map_err(plot_error)?;
    label(
        area,
        target,
        x_label,
        ((left + right) / 2, bottom + 28),
        text::fit(x_label, AXIS_TITLE, (right - left) as f32, 8.0),
        Anchor::new(HPos::Center, VPos::Top),
    )?;
    label(
        area,
        target,
        y_label,
        (origin.0 + 14, (top + bottom) / 2),
        text::fit(y_label, AXIS_TITLE, (bottom - top) as f32, 8.0),
        Anchor::vertical(HPos::Center, VPos::Center),
    )?;

    for series in &panel.series {
        let pixels: Vec<(f64, f64)> = series.points.iter().map(|&p| to_pixel(p)).collect();
        stroke(area, &pixels, series.color, series.dashed)?;
        if !series.dashed {
            let color = RGBColor(series.color.0, series.color.1, series.color.2);
            for &(x, y) in &pixels {
                area.draw(&Circle::new(
                    (x.round() as i32, y.round() as i32),
                    3,
                    color.filled(),
                ))
                .map_err(plot_error)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dashes_alternate_along_the_line() {
        let same = |got: &[(f64, f64)], want: &[(f64, f64)]| {
            got.len() == want.len()
                && got
                    .iter()
                    .zip(want)
                    .all(|(a, b)| (a.0 - b.0).abs() < 1e-9 && (a.1 - b.1).abs() < 1e-9)
        };
        let pieces = dashes(&[(0.0, 0.0), (30.0, 0.0)], 7.0, 5.0);
        // 0-7 drawn, 7-12 gap, 12-19 drawn, 19-24 gap, 24-30 drawn.
        assert_eq!(pieces.len(), 3, "{pieces:?}");
        assert!(same(&pieces[0], &[(0.0, 0.0), (7.0, 0.0)]), "{pieces:?}");
        assert!(same(&pieces[1], &[(12.0, 0.0), (19.0, 0.0)]), "{pieces:?}");
        assert!(same(&pieces[2], &[(24.0, 0.0), (30.0, 0.0)]), "{pieces:?}");
        // Around a corner the dash keeps its length.
        let corner = dashes(&[(0.0, 0.0), (4.0, 0.0), (4.0, 10.0)], 7.0, 5.0);
        assert!(
            same(&corner[0], &[(0.0, 0.0), (4.0, 0.0), (4.0, 3.0)]),
            "{corner:?}"
        );
    }

    fn series(label: &str, dashed: bool) -> Series {
        Series {
            label: label.to_string(),
            color: (0, 0, 0),
            dashed,
            points: vec![(1.0, 1.0), (2.0, 2.0)],
        }
    }

    #[test]
    fn the_legend_takes_the_rows_its_entries_need() {
        let mut figure = Figure {
            title: "t".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            panels: vec![Panel {
                title: "p".into(),
                series: vec![
                    series("random", false),
                    series("random, debiased", true),
                    series("adaptive", false),
                    series("adaptive, debiased", true),
                ],
            }],
        };
        assert_eq!(figure.legend_layout().rows, 2);
        // Many long entries in a one-panel figure: more rows, every column inside.
        figure.panels[0].series = (0..8)
            .flat_map(|k| {
                [
                    series(&format!("a long design name {k}"), false),
                    series(&format!("a long design name {k}, debiased"), true),
                ]
            })
            .collect();
        let layout = figure.legend_layout();
        let total: i32 = layout.column_widths.iter().sum::<i32>()
            + COLUMN_GAP * (layout.column_widths.len() as i32 - 1);
        assert!(layout.rows > 2, "{}", layout.rows);
        assert!(total <= figure.width() - 2 * LEGEND_PAD, "{total}");
        assert!(figure.size().1 as i32 > HEADER + PANEL_HEIGHT + 2 * LEGEND_ROW);
    }

    #[test]
    fn labels_are_inked_inside_the_figure() {
        let panel = |title: &str| Panel {
            title: title.to_string(),
            series: ["random", "no-repeat", "symmetric", "adaptive"]
                .iter()
                .flat_map(|d| [series(d, false), series(&format!("{d}, debiased"), true)])
                .collect(),
        };
        let figure = Figure {
            title: "SummEval: Spearman with the full design (a model, 20 seeds)".into(),
            x_label: "R (comparisons per context)".into(),
            y_label: "x100 vs full design".into(),
            panels: vec![panel("COH"), panel("CON")],
        };
        let (width, height) = figure.size();
        let pixels = crate::figure::pixels(&figure).unwrap();
        let dark = |x0: u32, x1: u32, y0: u32, y1: u32| -> usize {
            (y0..y1)
                .flat_map(|y| (x0..x1).map(move |x| (x, y)))
                .filter(|&(x, y)| pixels[((y * width + x) * 3) as usize] < 140)
                .count()
        };
        // The title's glyphs sit in the header band, centred.
        assert!(dark(width / 4, 3 * width / 4, 10, HEADER as u32) > 300);
        assert_eq!(dark(0, 30, 0, HEADER as u32), 0);
        // The legend's text is inked and ends inside the figure.
        let band = height - figure.legend_layout().height() as u32;
        assert!(dark(0, width, band, height) > 500);
        let margin = (LEGEND_PAD / 2) as u32;
        assert_eq!(dark(width - margin, width, band, height), 0, "legend cut");
        assert_eq!(dark(0, margin, band, height), 0);
    }
}
