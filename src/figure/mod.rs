//! Figures, drawn with plotters to PNG or SVG files (or to an SVG string for the HTML
//! report), shared by `reproduce`, `dhp report`, `pararef` and the report.
//!
//! - [`text`]: labels in a real font (Noto Sans, bundled), measured before drawing;
//! - [`lines`]: line plots in panels with one legend (subset curves, Para-Ref);
//! - this module: the drawing primitives and the file writers every figure uses.
//!
//! A figure draws itself through a function of a plotters drawing area and a
//! [`Target`]; [`write`] picks the backend from the file's extension.

pub mod lines;
pub mod text;

use std::path::Path;

use anyhow::{anyhow, Context as _, Result};
use plotters::coord::Shift;
use plotters::prelude::*;

pub use lines::{Figure, Panel, Series};
pub use text::{label, Anchor, Look, Target, Weight};

/// A drawing area of any plotters backend.
pub type Area<'a, DB> = DrawingArea<DB, Shift>;

/// A plotters failure as an error.
pub fn plot_error(error: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("drawing failed: {error}")
}

/// A solid pen of `width` pixels.
pub fn pen(color: (u8, u8, u8), width: u32) -> ShapeStyle {
    ShapeStyle {
        color: RGBColor(color.0, color.1, color.2).to_rgba(),
        filled: false,
        stroke_width: width,
    }
}

/// A filled shape's style.
pub fn fill(color: (u8, u8, u8)) -> ShapeStyle {
    RGBColor(color.0, color.1, color.2).filled()
}

/// The categorical palette of every figure (colour-blind safe, Okabe-Ito order).
pub const PALETTE: [(u8, u8, u8); 7] = [
    (0, 114, 178),
    (230, 159, 0),
    (0, 158, 115),
    (213, 94, 0),
    (204, 121, 167),
    (86, 180, 233),
    (120, 120, 120),
];

/// Round tick values covering `[low, high]` with about `target` steps of 1, 2 or 5
/// times a power of ten; returns the ticks and the step.
pub fn nice_ticks(low: f64, high: f64, target: usize) -> (Vec<f64>, f64) {
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

/// A tick's text with as many decimals as the step needs, never `-0`.
pub fn tick_text(value: f64, step: f64) -> String {
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

/// Draw with `draw` into an RGB pixel buffer of `size`.
pub fn render_pixels(
    size: (u32, u32),
    draw: impl FnOnce(&Area<BitMapBackend>, Target) -> Result<()>,
) -> Result<Vec<u8>> {
    let mut pixels = vec![0u8; size.0 as usize * size.1 as usize * 3];
    {
        let area = BitMapBackend::with_buffer(&mut pixels, size).into_drawing_area();
        area.fill(&WHITE).map_err(plot_error)?;
        draw(&area, Target::Bitmap)?;
        area.present().map_err(plot_error)?;
    }
    Ok(pixels)
}

/// Draw with `draw` into an SVG document of `size`.
pub fn render_svg(
    size: (u32, u32),
    draw: impl FnOnce(&Area<SVGBackend>, Target) -> Result<()>,
) -> Result<String> {
    let mut text = String::new();
    {
        let area = SVGBackend::with_string(&mut text, size).into_drawing_area();
        area.fill(&WHITE).map_err(plot_error)?;
        draw(&area, Target::Svg)?;
        area.present().map_err(plot_error)?;
    }
    Ok(text)
}

/// Encode an RGB pixel buffer as PNG.
pub fn encode_png(pixels: &[u8], size: (u32, u32), out: impl std::io::Write) -> Result<()> {
    let mut encoder = png::Encoder::new(out, size.0, size.1);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.set_compression(png::Compression::Best);
    let mut writer = encoder.write_header()?;
    writer.write_image_data(pixels)?;
    writer.finish()?;
    Ok(())
}

/// Something that draws itself on any backend at a fixed size.
pub trait Drawing {
    /// Width and height in pixels.
    fn size(&self) -> (u32, u32);
    /// Draw onto a white area of [`Drawing::size`].
    fn draw<DB: DrawingBackend>(&self, area: &Area<DB>, target: Target) -> Result<()>;
}

/// The drawing as an SVG document.
pub fn svg_string(drawing: &impl Drawing) -> Result<String> {
    render_svg(drawing.size(), |area, target| drawing.draw(area, target))
}

/// The drawing as RGB pixels (for tests and PNG files).
pub fn pixels(drawing: &impl Drawing) -> Result<Vec<u8>> {
    render_pixels(drawing.size(), |area, target| drawing.draw(area, target))
}

/// Write the drawing to `path`: SVG for a `.svg` name, PNG otherwise.
pub fn write(drawing: &impl Drawing, path: &Path) -> Result<()> {
    if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("svg"))
    {
        let text = svg_string(drawing)?;
        return std::fs::write(path, text)
            .with_context(|| format!("cannot write {}", path.display()));
    }
    let size = drawing.size();
    let pixels = pixels(drawing)?;
    let file =
        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    encode_png(&pixels, size, std::io::BufWriter::new(file))
        .with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        let (ticks, step) = nice_ticks(23.4, 51.7, 6);
        assert_eq!(step, 5.0);
        assert_eq!(ticks, [25.0, 30.0, 35.0, 40.0, 45.0, 50.0]);
        let (ticks, step) = nice_ticks(0.0, 240.0, 6);
        assert_eq!(step, 50.0);
        assert_eq!(ticks.last(), Some(&200.0));
        assert_eq!(tick_text(0.30000000000000004, 0.1), "0.3");
        assert_eq!(tick_text(-0.0, 5.0), "0");
        assert_eq!(tick_text(-2e-17, 0.1), "0");
    }
}
