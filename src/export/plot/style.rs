//! How the figures look: the bundled font, one colour + marker + dash per run (distinct in greyscale too, not by
//! hue alone), and the legend drawn above the plot so it never covers data.

use plotters::coord::{CoordTranslate, Shift};
use plotters::element::{DynElement, IntoDynElement};
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};
use std::sync::Once;

/// Figure size in pixels: readable when a README shows it at its full width.
pub const SIZE: (u32, u32) = (1000, 600);
pub const FONT: &str = "sans-serif";
pub const TITLE_PX: u32 = 24;
pub const AXIS_PX: u32 = 18;
pub const TICK_PX: u32 = 15;
pub const NOTE_PX: u32 = 14;
pub const GRID: RGBColor = RGBColor(225, 225, 225);
pub const INK: RGBColor = RGBColor(40, 40, 40);

/// Noto Sans (Latin subset plus arrows, SIL OFL 1.1; see assets/fonts/README.md). Compiled in so PNG rendering
/// needs no system font libraries; SVG text names `sans-serif` and the viewer's font draws it.
pub static FONT_BYTES: &[u8] = include_bytes!("../../../assets/fonts/NotoSans-kvxfer-subset.ttf");

/// Register the bundled font with plotters once per process.
pub fn register() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The font is compiled in and checked by a test, so failure here is a build defect, not a user mistake.
        if register_font(FONT, FontStyle::Normal, FONT_BYTES).is_err() {
            crate::errln!("warning: the bundled font did not load; figures will have no text");
        }
    });
}

pub fn text(px: u32) -> TextStyle<'static> {
    (FONT, px).into_font().color(&INK)
}

/// The runs' colours: Okabe–Ito without its black and yellow, and two darker hues, ordered so neighbours differ in
/// lightness as well as hue. None is grey: grey is for reference lines, so no run can be taken for one.
const COLOURS: [RGBColor; 8] = [
    RGBColor(0, 114, 178),   // blue (dark)
    RGBColor(230, 159, 0),   // orange (light)
    RGBColor(0, 158, 115),   // bluish green (mid)
    RGBColor(204, 121, 167), // reddish purple (light)
    RGBColor(213, 94, 0),    // vermillion (mid)
    RGBColor(86, 180, 233),  // sky blue (light)
    RGBColor(120, 50, 150),  // purple (dark)
    RGBColor(140, 90, 30),   // brown (dark)
];

/// Reference lines (`--line`): grey and dashed, a colour no run has.
pub const REFERENCE: RGBColor = RGBColor(128, 128, 128);

#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Marker {
    Circle,
    Square,
    Triangle,
    Diamond,
    Cross,
}

#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Dash {
    Solid,
    Dashed,
    Dotted,
    /// Long dashes, thin: a run's ceiling, never a run's own line.
    Long,
}

/// Everything that tells one run apart from another.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RunStyle {
    pub colour: RGBColor,
    pub marker: Marker,
    pub dash: Dash,
}

/// Run `i`'s style: 8 colours, 5 markers and 3 dashes turn at different rates, so the first 120 runs all differ,
/// and the first 8 differ in colour too.
pub fn run_style(i: usize) -> RunStyle {
    const MARKERS: [Marker; 5] = [Marker::Circle, Marker::Square, Marker::Triangle, Marker::Diamond, Marker::Cross];
    const DASHES: [Dash; 3] = [Dash::Solid, Dash::Dashed, Dash::Dotted];
    RunStyle { colour: COLOURS[i % COLOURS.len()], marker: MARKERS[i % MARKERS.len()], dash: DASHES[i % DASHES.len()] }
}

/// A marker centred on `at` (backend pixels are relative to it); hollow markers draw the outline only.
pub fn marker<'a, DB: DrawingBackend + 'a, C: Clone + 'a>(
    at: C,
    m: Marker,
    size: i32,
    colour: RGBColor,
    filled: bool,
) -> DynElement<'a, DB, C> {
    let style = if filled { colour.filled() } else { colour.stroke_width(2) };
    let s = size;
    let base = EmptyElement::at(at);
    match m {
        Marker::Circle => (base + Circle::new((0, 0), s, style)).into_dyn(),
        Marker::Square => {
            if filled {
                (base + Rectangle::new([(-s, -s), (s, s)], style)).into_dyn()
            } else {
                let outline = vec![(-s, -s), (s, -s), (s, s), (-s, s), (-s, -s)];
                (base + PathElement::new(outline, style)).into_dyn()
            }
        }
        Marker::Triangle => (base + TriangleMarker::new((0, 0), s + 1, style)).into_dyn(),
        Marker::Diamond => {
            let d = s + 1;
            if filled {
                (base + Polygon::new(vec![(0, -d), (d, 0), (0, d), (-d, 0)], style)).into_dyn()
            } else {
                (base + PathElement::new(vec![(0, -d), (d, 0), (0, d), (-d, 0), (0, -d)], style)).into_dyn()
            }
        }
        Marker::Cross => (base + Cross::new((0, 0), s, colour.stroke_width(2))).into_dyn(),
    }
}

/// Text placed `offset` pixels away from a point in the area's coordinates (anchored by the style's `pos`).
pub fn label<'a, DB: DrawingBackend + 'a, C: Clone + 'a>(
    at: C,
    offset: (i32, i32),
    s: String,
    style: TextStyle<'a>,
) -> DynElement<'a, DB, C> {
    (EmptyElement::at(at) + Text::new(s, offset, style)).into_dyn()
}

/// Draw a polyline in `dash` style, in the area's own coordinates (data or pixels).
pub fn path<DB: DrawingBackend, CT: CoordTranslate>(
    area: &DrawingArea<DB, CT>,
    points: Vec<CT::From>,
    dash: Dash,
    style: ShapeStyle,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    CT::From: Clone,
{
    match dash {
        Dash::Solid => area.draw(&PathElement::new(points, style)),
        _ => {
            let (on, off) = dash_pattern(dash, style.stroke_width);
            area.draw(&plotters::element::DashedPathElement::new(points, on, off, style))
        }
    }
}

/// (drawn, gap) pixel lengths of a dash style at a stroke width.
pub fn dash_pattern(dash: Dash, width: u32) -> (u32, u32) {
    match dash {
        Dash::Solid => (1, 0),
        Dash::Dashed => (10 + 2 * width, 6 + width),
        Dash::Dotted => (2 + width, 4 + width),
        Dash::Long => (16, 6),
    }
}

/// One legend entry: a line sample in the run's style with its marker, then the text.
pub struct LegendEntry {
    pub text: String,
    pub colour: RGBColor,
    pub dash: Option<Dash>,
    pub marker: Option<(Marker, bool)>,
    pub width: u32,
}

/// Lay the entries out left to right, wrapping, in the band `area` (already sized by [`legend_height`]).
pub fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[LegendEntry],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let font = text(NOTE_PX);
    let (w, _) = area.dim_in_pixel();
    for (e, (x, y)) in entries.iter().zip(legend_positions(area, entries, w)) {
        let mid = y + LEGEND_ROW / 2;
        if let Some(d) = e.dash {
            let style = e.colour.stroke_width(e.width);
            path(area, vec![(x, mid), (x + SAMPLE_PX, mid)], d, style)?;
        }
        if let Some((m, filled)) = e.marker {
            area.draw(&marker((x + SAMPLE_PX / 2, mid), m, 4, e.colour, filled))?;
        }
        area.draw(&Text::new(e.text.clone(), (x + SAMPLE_PX + 6, mid - NOTE_PX as i32 / 2), font.clone()))?;
    }
    Ok(())
}

const LEGEND_ROW: i32 = 22;
const SAMPLE_PX: i32 = 34;
const LEGEND_LEFT: i32 = 70;

/// Height the legend needs at this figure width.
pub fn legend_height<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, entries: &[LegendEntry]) -> u32 {
    let (w, _) = area.dim_in_pixel();
    let last = legend_positions(area, entries, w).last().map(|p| p.1).unwrap_or(-LEGEND_ROW);
    (last + LEGEND_ROW + 6) as u32
}

fn legend_positions<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[LegendEntry],
    width: u32,
) -> Vec<(i32, i32)> {
    let font = text(NOTE_PX);
    let (mut x, mut y) = (LEGEND_LEFT, 0);
    let mut out = Vec::new();
    for e in entries {
        let tw = area.estimate_text_size(&e.text, &font).map(|s| s.0 as i32).unwrap_or(8 * e.text.len() as i32);
        let w = SAMPLE_PX + 6 + tw + 24;
        if x > LEGEND_LEFT && x + w > width as i32 - 10 {
            x = LEGEND_LEFT;
            y += LEGEND_ROW;
        }
        out.push((x, y));
        x += w;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_differ_from_each_other_and_from_reference_lines() {
        let grey = |c: RGBColor| c.0.max(c.1).max(c.2) - c.0.min(c.1).min(c.2) < 40;
        let styles: Vec<RunStyle> = (0..120).map(run_style).collect();
        for (i, a) in styles.iter().enumerate() {
            assert!(!grey(a.colour) && a.colour != REFERENCE && a.colour != INK, "run {i}");
            assert!(a.dash != Dash::Long, "run {i} is drawn like a ceiling");
            assert!(styles[i + 1..].iter().all(|b| b != a), "run {i} repeats");
            if i < 8 {
                assert!(styles[i + 1..8].iter().all(|b| b.colour != a.colour), "run {i}'s colour repeats");
            }
        }
        assert!(grey(REFERENCE));
    }
}
