//! Line figures drawn to PNG and SVG through plotters' bitmap and SVG backends.
//!
//! Plotters can only raster text with system fonts (`ttf`, which needs fontconfig) or a
//! font file we would have to ship (`ab_glyph`), so the layout is our own and plotters
//! draws primitives only. Text goes to SVG as real `<text>` elements (the viewer's
//! sans-serif font) and to PNG through our stroke font ([`super::stroke_font`]).

use std::path::Path;

use anyhow::{anyhow, Context as _, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::stroke_font;
use super::subset::{CurvePoint, DESIGNS};

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
const LEGEND: i32 = 56;
const MARGIN_LEFT: i32 = 64;
const MARGIN_RIGHT: i32 = 18;
const MARGIN_TOP: i32 = 34;
const MARGIN_BOTTOM: i32 = 52;

const DESIGN_COLORS: [(u8, u8, u8); 4] =
    [(31, 119, 180), (230, 120, 20), (44, 150, 44), (214, 39, 40)];

impl Figure {
    fn columns(&self) -> i32 {
        match self.panels.len() {
            0 | 1 => 1,
            3 => 3,
            _ => 2,
        }
    }

    /// Width and height in pixels.
    pub fn size(&self) -> (u32, u32) {
        let columns = self.columns();
        let rows = (self.panels.len() as i32 + columns - 1) / columns;
        (
            (columns * PANEL_WIDTH) as u32,
            (HEADER + rows.max(1) * PANEL_HEIGHT + LEGEND) as u32,
        )
    }

    /// The legend: one entry per distinct (label, color, dashed) in panel order.
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
}

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
            for (design, color) in DESIGNS.iter().zip(DESIGN_COLORS) {
                let name = super::subset::design_name(*design);
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

/// How labels are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TextMode {
    /// Plotters text elements (SVG `<text>`).
    Native,
    /// Our stroke font as paths (bitmaps).
    Strokes,
}

/// Where a label sits relative to its anchor point.
#[derive(Clone, Copy)]
pub(crate) struct Anchor {
    pub(crate) h: HPos,
    pub(crate) v: VPos,
    /// Read bottom to top (y-axis titles); centred on the anchor.
    pub(crate) vertical: bool,
}

impl Anchor {
    pub(crate) const fn new(h: HPos, v: VPos) -> Self {
        Self {
            h,
            v,
            vertical: false,
        }
    }
}

pub(crate) fn plot_error(error: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("drawing failed: {error}")
}

pub(crate) fn style(color: (u8, u8, u8), width: u32) -> ShapeStyle {
    ShapeStyle {
        color: RGBColor(color.0, color.1, color.2).to_rgba(),
        filled: false,
        stroke_width: width,
    }
}

pub(crate) fn label<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    mode: TextMode,
    text: &str,
    at: (i32, i32),
    height: f32,
    anchor: Anchor,
) -> Result<()> {
    match mode {
        TextMode::Native => {
            // Cap height is about 0.7 em; plotters divides the size by 1.24 for SVG.
            let size = f64::from(height) / 0.7 * 1.24;
            let mut text_style = ("sans-serif", size)
                .into_font()
                .color(&BLACK)
                .pos(Pos::new(anchor.h, anchor.v));
            if anchor.vertical {
                text_style = text_style
                    .transform(FontTransform::Rotate270)
                    .pos(Pos::new(HPos::Center, VPos::Center));
            }
            area.draw(&Text::new(text.to_string(), at, text_style))
                .map_err(plot_error)
        }
        TextMode::Strokes => {
            let width = stroke_font::text_width(text, height);
            let (dx, dy) = if anchor.vertical {
                (-width / 2.0, -height / 2.0)
            } else {
                let dx = match anchor.h {
                    HPos::Left => 0.0,
                    HPos::Center => -width / 2.0,
                    HPos::Right => -width,
                };
                let dy = match anchor.v {
                    VPos::Top => 0.0,
                    VPos::Center => -height / 2.0,
                    VPos::Bottom => -height,
                };
                (dx, dy)
            };
            let pen = style((0, 0, 0), if height >= 14.0 { 2 } else { 1 });
            for line in stroke_font::layout(text, height) {
                let points: Vec<(i32, i32)> = line
                    .iter()
                    .map(|&(x, y)| {
                        let (x, y) = (x + dx, y + dy);
                        let (x, y) = if anchor.vertical { (y, -x) } else { (x, y) };
                        (at.0 + x.round() as i32, at.1 + y.round() as i32)
                    })
                    .collect();
                area.draw(&PathElement::new(points, pen))
                    .map_err(plot_error)?;
            }
            Ok(())
        }
    }
}

/// The label height, at most `preferred`, at which `text` fits in `max_width` pixels.
fn fit_height(text: &str, preferred: f32, max_width: f32) -> f32 {
    let width = stroke_font::text_width(text, preferred);
    if width <= max_width || width <= 0.0 {
        preferred
    } else {
        preferred * max_width / width
    }
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

/// Round tick values covering `[low, high]` with about `target` steps of 1, 2 or 5
/// times a power of ten; returns the ticks and the step.
pub(crate) fn nice_ticks(low: f64, high: f64, target: usize) -> (Vec<f64>, f64) {
    let span = (high - low).max(1e-9);
    let raw = span / target.max(1) as f64;
    let power = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * power)
        .find(|&s| s >= raw)
        .unwrap_or(10.0 * power);
    let first = (low / step).ceil() as i64;
    let last = (high / step).floor() as i64;
    ((first..=last).map(|k| k as f64 * step).collect(), step)
}

pub(crate) fn tick_text(value: f64, step: f64) -> String {
    let decimals = if step >= 1.0 {
        0
    } else {
        (-step.log10().floor()) as usize
    };
    let text = format!("{value:.decimals$}");
    if text
        .trim_start_matches('-')
        .chars()
        .all(|c| c == '0' || c == '.')
    {
        "0".to_string()
    } else {
        text
    }
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    mode: TextMode,
    panel: &Panel,
    x_label: &str,
    y_label: &str,
    origin: (i32, i32),
) -> Result<()> {
    let left = origin.0 + MARGIN_LEFT;
    let right = origin.0 + PANEL_WIDTH - MARGIN_RIGHT;
    let top = origin.1 + MARGIN_TOP;
    let bottom = origin.1 + PANEL_HEIGHT - MARGIN_BOTTOM;
    let title_at = ((left + right) / 2, origin.1 + 10);
    label(
        area,
        mode,
        &panel.title,
        title_at,
        13.0,
        Anchor::new(HPos::Center, VPos::Top),
    )?;

    let all: Vec<(f64, f64)> = panel.series.iter().flat_map(|s| s.points.clone()).collect();
    let (x_max, y_low, y_high) = if all.is_empty() {
        (1.0, 0.0, 1.0)
    } else {
        let x_max = all.iter().map(|p| p.0).fold(f64::MIN, f64::max);
        let y_min = all.iter().map(|p| p.1).fold(f64::MAX, f64::min);
        let y_max = all.iter().map(|p| p.1).fold(f64::MIN, f64::max);
        let pad = ((y_max - y_min) * 0.08).max(1.0);
        (x_max.max(1.0), y_min - pad, y_max + pad)
    };
    let to_pixel = |(x, y): (f64, f64)| -> (f64, f64) {
        (
            f64::from(left) + x / x_max * f64::from(right - left),
            f64::from(bottom) - (y - y_low) / (y_high - y_low) * f64::from(bottom - top),
        )
    };
    let grid = style((225, 225, 225), 1);
    let ink = style((0, 0, 0), 1);
    let (y_ticks, y_step) = nice_ticks(y_low, y_high, 6);
    for y in y_ticks {
        let (_, py) = to_pixel((0.0, y));
        let py = py.round() as i32;
        area.draw(&PathElement::new(vec![(left, py), (right, py)], grid))
            .map_err(plot_error)?;
        area.draw(&PathElement::new(vec![(left - 5, py), (left, py)], ink))
            .map_err(plot_error)?;
        let text = tick_text(y, y_step);
        label(
            area,
            mode,
            &text,
            (left - 8, py),
            10.0,
            Anchor::new(HPos::Right, VPos::Center),
        )?;
    }
    let (x_ticks, x_step) = nice_ticks(0.0, x_max, 6);
    for x in x_ticks {
        let (px, _) = to_pixel((x, y_low));
        let px = px.round() as i32;
        area.draw(&PathElement::new(vec![(px, top), (px, bottom)], grid))
            .map_err(plot_error)?;
        area.draw(&PathElement::new(vec![(px, bottom), (px, bottom + 5)], ink))
            .map_err(plot_error)?;
        let text = tick_text(x, x_step);
        label(
            area,
            mode,
            &text,
            (px, bottom + 9),
            10.0,
            Anchor::new(HPos::Center, VPos::Top),
        )?;
    }
    area.draw(&Rectangle::new([(left, top), (right, bottom)], ink))
        .map_err(plot_error)?;
    label(
        area,
        mode,
        x_label,
        ((left + right) / 2, bottom + 30),
        11.0,
        Anchor::new(HPos::Center, VPos::Top),
    )?;
    label(
        area,
        mode,
        y_label,
        (origin.0 + 16, (top + bottom) / 2),
        11.0,
        Anchor {
            h: HPos::Center,
            v: VPos::Center,
            vertical: true,
        },
    )?;

    for series in &panel.series {
        let pixels: Vec<(f64, f64)> = series.points.iter().map(|&p| to_pixel(p)).collect();
        let pen = style(series.color, 2);
        let pieces = if series.dashed {
            dashes(&pixels, 7.0, 5.0)
        } else {
            vec![pixels.clone()]
        };
        for piece in pieces {
            let piece: Vec<(i32, i32)> = piece
                .iter()
                .map(|&(x, y)| (x.round() as i32, y.round() as i32))
                .collect();
            area.draw(&PathElement::new(piece, pen))
                .map_err(plot_error)?;
        }
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

fn draw_figure<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    figure: &Figure,
    mode: TextMode,
) -> Result<()> {
    area.fill(&WHITE).map_err(plot_error)?;
    let (width, height) = figure.size();
    let (width, height) = (width as i32, height as i32);
    label(
        area,
        mode,
        &figure.title,
        (width / 2, 14),
        fit_height(&figure.title, 15.0, (width - 24) as f32),
        Anchor::new(HPos::Center, VPos::Top),
    )?;
    let columns = figure.columns();
    for (index, panel) in figure.panels.iter().enumerate() {
        let index = index as i32;
        let origin = (
            (index % columns) * PANEL_WIDTH,
            HEADER + (index / columns) * PANEL_HEIGHT,
        );
        draw_panel(area, mode, panel, &figure.x_label, &figure.y_label, origin)?;
    }
    // Legend: two rows along the bottom, entries filling columns top to bottom (for the
    // subset figure: one column per design, plain above debiased).
    let entries = figure.legend();
    let slots = (entries.len() as i32 + 1) / 2;
    let slot = width / slots.max(1);
    for (k, series) in entries.iter().enumerate() {
        let k = k as i32;
        let x = (k / 2) * slot + 24;
        let y = height - LEGEND + 16 + (k % 2) * 22;
        let line = vec![
            (f64::from(x), f64::from(y)),
            (f64::from(x + 30), f64::from(y)),
        ];
        let pieces = if series.dashed {
            dashes(&line, 7.0, 5.0)
        } else {
            vec![line]
        };
        for piece in pieces {
            let piece: Vec<(i32, i32)> = piece.iter().map(|&(x, y)| (x as i32, y as i32)).collect();
            area.draw(&PathElement::new(piece, style(series.color, 2)))
                .map_err(plot_error)?;
        }
        label(
            area,
            mode,
            &series.label,
            (x + 36, y),
            10.0,
            Anchor::new(HPos::Left, VPos::Center),
        )?;
    }
    Ok(())
}

/// Draw `figure` to a PNG file.
pub fn write_png(figure: &Figure, path: &Path) -> Result<()> {
    let (width, height) = figure.size();
    let mut pixels = vec![0u8; width as usize * height as usize * 3];
    {
        let area = BitMapBackend::with_buffer(&mut pixels, (width, height)).into_drawing_area();
        draw_figure(&area, figure, TextMode::Strokes)?;
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

/// Draw `figure` to an SVG file.
pub fn write_svg(figure: &Figure, path: &Path) -> Result<()> {
    let mut text = String::new();
    {
        let area = SVGBackend::with_string(&mut text, figure.size()).into_drawing_area();
        draw_figure(&area, figure, TextMode::Native)?;
        area.present().map_err(plot_error)?;
    }
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
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

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        let (ticks, step) = nice_ticks(23.4, 51.7, 6);
        assert_eq!(step, 5.0);
        assert_eq!(ticks, [25.0, 30.0, 35.0, 40.0, 45.0, 50.0]);
        assert_eq!(fit_height("short", 15.0, 500.0), 15.0);
        let long = "x".repeat(100);
        let fitted = fit_height(&long, 15.0, 300.0);
        assert!((stroke_font::text_width(&long, fitted) - 300.0).abs() < 1e-3);
        let (ticks, step) = nice_ticks(0.0, 240.0, 6);
        assert_eq!(step, 50.0);
        assert_eq!(ticks.last(), Some(&200.0));
        assert_eq!(tick_text(0.30000000000000004, 0.1), "0.3");
        assert_eq!(tick_text(-0.0, 5.0), "0");
        assert_eq!(tick_text(-2e-17, 0.1), "0");
    }
}
