//! Labels in a real font: Noto Sans (SIL Open Font License 1.1, from the `notosans`
//! crate) drawn through plotters' `ab_glyph` text support in bitmaps, and as `<text>`
//! elements naming the same family (with sans-serif fallbacks) in SVG.
//!
//! Plotters places text by a rough layout box (its baseline sits half the font's
//! height below the anchor), so positions are worked out here from the font's own
//! metrics: an anchor names where the capitals' top, middle or the descenders' bottom
//! sit, and widths are measured with the same advances and kerning the rasteriser uses.
//! Layout code measures with [`width`] before drawing, so labels are sized to fit
//! instead of being cut.

use std::sync::OnceLock;

use ab_glyph::{Font as _, FontRef, PxScale, ScaleFont as _};
use anyhow::{anyhow, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::FontStyle;

/// The family name figures use: the registered font in bitmaps; in SVG the viewer's
/// Noto Sans when installed, else a common sans-serif (widths within a few percent).
pub const FAMILY: &str = "Noto Sans, Helvetica, Arial, sans-serif";

/// Where a figure is drawn: text is rasterised for bitmaps and left as text for SVG.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Bitmap,
    Svg,
}

/// Regular or bold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Weight {
    Regular,
    Bold,
}

/// Where a label sits relative to its anchor point.
#[derive(Clone, Copy)]
pub struct Anchor {
    pub h: HPos,
    /// `Top`: the capitals' top at the anchor; `Center`: the capitals' middle;
    /// `Bottom`: the descenders' bottom.
    pub v: VPos,
    /// Read bottom to top (y-axis titles): `h` and `v` then refer to the rotated text.
    pub vertical: bool,
}

impl Anchor {
    pub const fn new(h: HPos, v: VPos) -> Self {
        Self {
            h,
            v,
            vertical: false,
        }
    }

    pub const fn vertical(h: HPos, v: VPos) -> Self {
        Self {
            h,
            v,
            vertical: true,
        }
    }
}

/// A label's look: size (pixels per em), weight and colour.
#[derive(Debug, Clone, Copy)]
pub struct Look {
    pub size: f32,
    pub weight: Weight,
    pub color: (u8, u8, u8),
}

impl Look {
    /// Regular, dark grey.
    pub const fn regular(size: f32) -> Self {
        Self {
            size,
            weight: Weight::Regular,
            color: (34, 34, 34),
        }
    }

    /// Bold, near black.
    pub const fn bold(size: f32) -> Self {
        Self {
            size,
            weight: Weight::Bold,
            color: (17, 17, 17),
        }
    }

    pub const fn color(mut self, color: (u8, u8, u8)) -> Self {
        self.color = color;
        self
    }
}

/// One face's metrics, per em.
struct Face {
    font: FontRef<'static>,
    /// (ascent - descent) per em: plotters' bitmap text size is this height in pixels.
    height: f32,
    /// Capital height per em.
    cap: f32,
    /// Descent below the baseline per em (positive).
    descent: f32,
}

impl Face {
    fn load(bytes: &'static [u8]) -> Face {
        // The bytes are a font crate's constant, parsed the same way at every start.
        let font = FontRef::try_from_slice(bytes).expect("the bundled Noto Sans parses");
        let per_em = font.units_per_em().unwrap_or(1000.0);
        let height = font.height_unscaled() / per_em;
        // The capital H's height, from its outline at one pixel per font unit.
        let unit = PxScale::from(font.height_unscaled());
        let cap = font
            .outline_glyph(font.glyph_id('H').with_scale(unit))
            .map(|g| -g.px_bounds().min.y)
            .unwrap_or(0.714 * per_em)
            / per_em;
        let descent = -font.descent_unscaled() / per_em;
        Face {
            font,
            height,
            cap,
            descent,
        }
    }

    fn width(&self, text: &str, size: f32) -> f32 {
        // The rasteriser's own advance: kerning and advances at plotters' scale.
        let scaled = self.font.as_scaled(PxScale::from(size * self.height));
        let mut width = 0.0;
        let mut previous = None;
        for c in text.chars() {
            let id = scaled.glyph_id(c);
            if let Some(p) = previous {
                width += scaled.kern(p, id);
            }
            width += scaled.h_advance(id);
            previous = Some(id);
        }
        width
    }
}

struct Faces {
    regular: Face,
    bold: Face,
}

fn faces() -> &'static Faces {
    static FACES: OnceLock<Faces> = OnceLock::new();
    FACES.get_or_init(|| {
        for (style, bytes) in [
            (FontStyle::Normal, notosans::REGULAR_TTF),
            (FontStyle::Bold, notosans::BOLD_TTF),
        ] {
            // Registering a parsed-above font cannot fail.
            let _ = plotters::style::register_font(FAMILY, style, bytes);
        }
        Faces {
            regular: Face::load(notosans::REGULAR_TTF),
            bold: Face::load(notosans::BOLD_TTF),
        }
    })
}

fn face(weight: Weight) -> &'static Face {
    match weight {
        Weight::Regular => &faces().regular,
        Weight::Bold => &faces().bold,
    }
}

/// Width in pixels of `text` at `look`'s size (pixels per em).
pub fn width(text: &str, look: Look) -> f32 {
    face(look.weight).width(text, look.size)
}

/// Capital height in pixels.
pub fn cap_height(look: Look) -> f32 {
    face(look.weight).cap * look.size
}

/// Descent below the baseline in pixels.
pub fn descent(look: Look) -> f32 {
    face(look.weight).descent * look.size
}

/// The size, at most `look.size` and at least `smallest`, at which `text` fits in
/// `room` pixels.
pub fn fit(text: &str, look: Look, room: f32, smallest: f32) -> Look {
    let w = width(text, look);
    if w <= room || w <= 0.0 {
        return look;
    }
    let mut fitted = Look {
        size: (look.size * room / w).max(smallest),
        ..look
    };
    // Rounding: step down until it fits.
    while fitted.size > smallest && width(text, fitted) > room {
        fitted.size = (fitted.size - 0.1).max(smallest);
    }
    fitted
}

/// `text` cut to `room` pixels with an ellipsis (for labels that must stay on one
/// line, like candidate names under bars); whole when it fits.
pub fn ellipsize(text: &str, look: Look, room: f32) -> String {
    if width(text, look) <= room {
        return text.to_string();
    }
    let mut cut: Vec<char> = text.chars().collect();
    while !cut.is_empty() {
        cut.pop();
        let candidate: String = cut.iter().collect::<String>() + "…";
        if width(&candidate, look) <= room {
            return candidate;
        }
    }
    "…".to_string()
}

/// `text` broken at spaces into at most `lines` lines of `room` pixels; the last line
/// is cut with an ellipsis when the words do not fit.
pub fn wrap(text: &str, look: Look, room: f32, lines: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut current = String::new();
    for word in text.split_whitespace() {
        let joined = if current.is_empty() {
            word.to_string()
        } else {
            format!("{current} {word}")
        };
        if width(&joined, look) <= room || current.is_empty() {
            current = joined;
        } else {
            out.push(std::mem::replace(&mut current, word.to_string()));
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    if out.len() > lines.max(1) {
        let rest = out.split_off(lines.max(1) - 1).join(" ");
        out.push(rest);
    }
    out.into_iter()
        .map(|line| ellipsize(&line, look, room))
        .collect()
}

fn plot_error(error: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("drawing failed: {error}")
}

/// Draw `text` at `at` (pixels) on `area`.
pub fn label<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    target: Target,
    text: &str,
    at: (i32, i32),
    look: Look,
    anchor: Anchor,
) -> Result<()> {
    if text.is_empty() {
        return Ok(());
    }
    let face = face(look.weight);
    let width = face.width(text, look.size);
    let cap = face.cap * look.size;
    // The baseline relative to the anchor, along the text's vertical axis (down).
    let baseline = match anchor.v {
        VPos::Top => cap,
        VPos::Center => cap / 2.0,
        VPos::Bottom => -face.descent * look.size,
    };
    // Where the text starts along its own horizontal axis.
    let start = match anchor.h {
        HPos::Left => 0.0,
        HPos::Center => -width / 2.0,
        HPos::Right => -width,
    };
    let color = RGBColor(look.color.0, look.color.1, look.color.2);
    let style = match look.weight {
        Weight::Regular => FontStyle::Normal,
        Weight::Bold => FontStyle::Bold,
    };
    let (x, y) = (at.0 as f32, at.1 as f32);
    match target {
        Target::Bitmap => {
            // Glyph by glyph: plotters rounds each glyph's pen position down, drops its
            // left side bearing and truncates its vertical offset toward zero, which
            // spaces small text unevenly and lets glyphs jump off the baseline; placing
            // each glyph at its own rounded position undoes all three. Plotters puts a
            // glyph's top row at trunc(size / 2 + top) below a top-left anchor, where
            // `top` is the glyph's top relative to the baseline.
            let size = look.size * face.height;
            let scale = PxScale::from(size);
            let scaled = face.font.as_scaled(scale);
            let mut font = (FAMILY, f64::from(size), style)
                .into_font()
                .color(&color)
                .pos(Pos::new(HPos::Left, VPos::Top));
            if anchor.vertical {
                font = font.transform(FontTransform::Rotate270);
            }
            let across = if anchor.vertical { x } else { y } + baseline;
            let mut pen = start;
            let mut previous = None;
            for c in text.chars() {
                let id = scaled.glyph_id(c);
                if let Some(p) = previous {
                    pen += scaled.kern(p, id);
                }
                previous = Some(id);
                if let Some(glyph) = scaled.outline_glyph(id.with_scale(scale)) {
                    let bounds = glyph.px_bounds();
                    let along = pen.round() + bounds.min.x;
                    let plotters_top = (size / 2.0 + bounds.min.y).trunc();
                    let offset = across.round() + bounds.min.y - plotters_top;
                    let at = if anchor.vertical {
                        // Rotated: the text's x runs up the screen, its y runs right.
                        (offset, y - along)
                    } else {
                        (x + along, offset)
                    };
                    area.draw(&Text::new(
                        c.to_string(),
                        (at.0.round() as i32, at.1.round() as i32),
                        font.clone(),
                    ))
                    .map_err(plot_error)?;
                }
                pen += scaled.h_advance(id);
            }
            Ok(())
        }
        Target::Svg => {
            // SVG: plotters sets font-size = size / 1.24 and, anchored at the top,
            // dy = 0.76 em to the baseline; the horizontal anchor is the text-anchor.
            let size = look.size * 1.24;
            let h = anchor.h;
            let mut font = (FAMILY, f64::from(size), style)
                .into_font()
                .color(&color)
                .pos(Pos::new(h, VPos::Top));
            let shift = baseline - 0.76 * look.size;
            let (px, py) = if anchor.vertical {
                font = font.transform(FontTransform::Rotate270);
                (x + shift, y)
            } else {
                (x, y + shift)
            };
            area.draw(&Text::new(
                text.to_string(),
                (px.round() as i32, py.round() as i32),
                font,
            ))
            .map_err(plot_error)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::figure::{render_pixels, Drawing};

    /// Draws one label on a white canvas.
    struct One {
        text: &'static str,
        at: (i32, i32),
        look: Look,
        anchor: Anchor,
    }

    impl Drawing for One {
        fn size(&self) -> (u32, u32) {
            (120, 60)
        }
        fn draw<DB: DrawingBackend>(
            &self,
            area: &crate::figure::Area<DB>,
            target: Target,
        ) -> Result<()> {
            label(area, target, self.text, self.at, self.look, self.anchor)
        }
    }

    #[test]
    fn bitmap_text_is_the_fonts_glyph_where_the_anchor_says() {
        let look = Look::regular(24.0).color((0, 0, 0));
        let one = One {
            text: "H",
            at: (30, 10),
            look,
            anchor: Anchor::new(HPos::Left, VPos::Top),
        };
        let size = one.size();
        let pixels = render_pixels(size, |area, target| one.draw(area, target)).unwrap();
        let grey = |x: i32, y: i32| pixels[(y as usize * size.0 as usize + x as usize) * 3];
        // The glyph as ab_glyph rasterises it, at the drawn size, cap top at y = 10.
        let face = face(Weight::Regular);
        let pixel_size = PxScale::from(look.size * face.height);
        let scaled = face.font.as_scaled(pixel_size);
        let glyph = scaled
            .outline_glyph(scaled.glyph_id('H').with_scale(pixel_size))
            .unwrap();
        let bounds = glyph.px_bounds();
        let cap = (face.cap * look.size + 10.0).round() as i32 - 10;
        let (left, top) = (30 + bounds.min.x as i32, 10 + cap + bounds.min.y as i32);
        let mut expected = vec![255u8; (size.0 * size.1) as usize];
        glyph.draw(|x, y, coverage| {
            let (x, y) = (left + x as i32, top + y as i32);
            expected[(y as u32 * size.0 + x as u32) as usize] = (255.0 * (1.0 - coverage)) as u8;
        });
        let mut inked = 0;
        let mut partial = 0;
        for y in 0..size.1 as i32 {
            for x in 0..size.0 as i32 {
                let (got, want) = (
                    grey(x, y),
                    expected[(y as u32 * size.0 + x as u32) as usize],
                );
                assert!(
                    (i32::from(got) - i32::from(want)).abs() <= 2,
                    "pixel ({x}, {y}): drawn {got}, the font's glyph {want}"
                );
                inked += usize::from(got < 128);
                partial += usize::from(got > 20 && got < 235);
            }
        }
        // An anti-aliased capital: solid stems and grey edges.
        assert!(inked > 60, "{inked} dark pixels");
        assert!(partial > 4, "{partial} grey pixels");
        // The capital's top is the anchor's row (within the rasteriser's rounding).
        let first_row = (0..size.1 as i32)
            .find(|&y| (0..size.0 as i32).any(|x| grey(x, y) < 128))
            .unwrap();
        assert!(
            (first_row - 10).abs() <= 1,
            "capitals start at row {first_row}"
        );
    }

    #[test]
    fn svg_text_names_the_font_and_escapes() {
        let one = One {
            text: "a < b & \"c\"",
            at: (10, 30),
            look: Look::bold(12.0),
            anchor: Anchor::new(HPos::Center, VPos::Center),
        };
        let svg = crate::figure::svg_string(&one).unwrap();
        assert!(
            svg.contains("font-family=\"Noto Sans, Helvetica, Arial, sans-serif\""),
            "{svg}"
        );
        assert!(svg.contains("font-weight=\"bold\""), "{svg}");
        assert!(svg.contains("a &lt; b &amp;"), "{svg}");
        assert!(svg.contains("text-anchor=\"middle\""), "{svg}");
    }

    #[test]
    fn widths_grow_with_text_and_size() {
        let small = Look::regular(10.0);
        let big = Look::regular(20.0);
        let w = width("Spearman x100", small);
        assert!(w > 40.0 && w < 90.0, "{w}");
        assert!((width("Spearman x100", big) - 2.0 * w).abs() < 0.01);
        assert!(width("Spearman", Look::bold(10.0)) > width("Spearman", small));
        // Capitals are about 0.71 em in Noto Sans.
        assert!(
            (cap_height(small) - 7.14).abs() < 0.2,
            "{}",
            cap_height(small)
        );
    }

    #[test]
    fn fitting_and_cutting_respect_the_room() {
        let look = Look::regular(12.0);
        let text = "a rather long legend entry, debiased";
        let fitted = fit(text, look, 100.0, 4.0);
        assert!(width(text, fitted) <= 100.0 && width(text, fitted) > 98.0);
        assert_eq!(fit("short", look, 500.0, 4.0).size, 12.0);
        let cut = ellipsize(text, look, 80.0);
        assert!(cut.ends_with('…') && width(&cut, look) <= 80.0, "{cut}");
        assert_eq!(ellipsize("short", look, 500.0), "short");
        let lines = wrap(text, look, 100.0, 2);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines.iter().all(|l| width(l, look) <= 100.0), "{lines:?}");
        assert!(lines[0].starts_with("a rather"), "{lines:?}");
        assert_eq!(wrap("one line", look, 500.0, 2), ["one line"]);
    }
}
