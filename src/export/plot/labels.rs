//! Labels on a plot that never overprint each other nor a run's p50 line. Every label goes through one [`Labels`],
//! which keeps the boxes placed so far (the lines' included) and tries the label's spots in order (stepping along its line, stacking above its strip…); a label
//! that fits at none of them inside the plot is not drawn, and its text goes to the legend as a note instead, so
//! nothing is lost.
//!
//! The legend is drawn before the plot, so the notes are found by drawing the figure on a backend that draws
//! nothing (with the same text measures) until the set of dropped labels stops growing; see `super::save`.

use super::style::{Dash, LegendEntry, Marker};
use super::Drawn;
use plotters::coord::CoordTranslate;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// A label's text as a legend note: entries with the same `what` and colour share one line, their `at`s listed.
#[derive(Clone, Debug, PartialEq)]
pub struct Note {
    pub what: String,
    pub at: String,
    pub colour: RGBColor,
    pub dash: Option<Dash>,
    pub marker: Option<Marker>,
}

/// One place to try: pixels from the label's point, and the text's anchor there.
#[derive(Clone, Copy)]
pub struct Spot {
    pub dx: i32,
    pub dy: i32,
    pub h: HPos,
    pub v: VPos,
}

impl Spot {
    pub fn new(dx: i32, dy: i32, h: HPos, v: VPos) -> Spot {
        Spot { dx, dy, h, v }
    }
}

/// A box in backend pixels: x0..x1 × y0..y1.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Rect {
    x0: i32,
    y0: i32,
    x1: i32,
    y1: i32,
}

impl Rect {
    fn overlaps(&self, o: &Rect) -> bool {
        self.x0 < o.x1 && o.x0 < self.x1 && self.y0 < o.y1 && o.y0 < self.y1
    }
    fn inside(&self, o: &Rect) -> bool {
        self.x0 >= o.x0 && self.x1 <= o.x1 && self.y0 >= o.y0 && self.y1 <= o.y1
    }
}

/// Space kept clear around every label, in pixels.
const GAP: i32 = 2;

/// A point a page's reader can point at: where it is in the figure's pixels, and what it is in words.
#[derive(Clone, Debug, PartialEq)]
pub struct HoverPoint {
    pub x: i32,
    pub y: i32,
    pub text: String,
}

/// The labels of one drawing of a figure: the notes its legend shows, the labels placed or dropped so far, and the
/// words of its points (which a page shows on hover; files have no use for them).
#[derive(Default)]
pub struct Labels {
    given: Vec<Note>,
    dropped: Vec<Note>,
    placed: Vec<Rect>,
    hover: Vec<HoverPoint>,
}

impl Labels {
    /// A drawing whose legend carries these notes.
    pub fn with_notes(given: Vec<Note>) -> Labels {
        Labels { given, ..Labels::default() }
    }

    /// The notes of labels dropped in this drawing that its legend did not already carry.
    pub fn new_notes(&self) -> Vec<Note> {
        self.dropped.iter().filter(|n| !self.given.contains(n)).cloned().collect()
    }

    /// Say what the point at `at` (in the plot's coordinates) is, for a reader pointing at it on a page.
    pub fn hover<DB: DrawingBackend, CT: CoordTranslate>(
        &mut self,
        plot: &DrawingArea<DB, CT>,
        at: &CT::From,
        text: String,
    ) {
        let (x, y) = plot.map_coordinate(at);
        self.hover.push(HoverPoint { x, y, text });
    }

    /// The points said so far, in drawing order.
    pub fn into_hover(self) -> Vec<HoverPoint> {
        self.hover
    }

    /// The legend's note lines: one per (what, colour), its `at`s joined.
    pub fn legend_entries(&self) -> Vec<LegendEntry> {
        let mut out: Vec<(Note, Vec<String>)> = Vec::new();
        for n in &self.given {
            match out.iter_mut().find(|(o, _)| o.what == n.what && o.colour == n.colour) {
                Some((_, ats)) if !ats.contains(&n.at) => ats.push(n.at.clone()),
                Some(_) => {}
                None => out.push((n.clone(), vec![n.at.clone()])),
            }
        }
        out.into_iter()
            .map(|(n, ats)| LegendEntry {
                text: format!("{} {}", n.what, ats.join(", ")),
                colour: n.colour,
                dash: n.dash,
                marker: n.marker.map(|m| (m, true)),
                width: 1,
            })
            .collect()
    }

    /// Keep labels off a run's line: its markers and its segments, sampled every few pixels, count as placed.
    pub fn block_line<DB: DrawingBackend, CT: CoordTranslate>(
        &mut self,
        plot: &DrawingArea<DB, CT>,
        points: &[CT::From],
    ) {
        let px: Vec<(i64, i64)> =
            points.iter().map(|p| plot.map_coordinate(p)).map(|(x, y)| (x as i64, y as i64)).collect();
        let mut mark = |x: i64, y: i64, r: i64| {
            let c = |v: i64| v.clamp(i32::MIN as i64, i32::MAX as i64) as i32;
            self.placed.push(Rect { x0: c(x - r), y0: c(y - r), x1: c(x + r), y1: c(y + r) });
        };
        for &(x, y) in &px {
            mark(x, y, 6);
        }
        for w in px.windows(2) {
            let ((ax, ay), (bx, by)) = (w[0], w[1]);
            // A segment far off the plot (a value the axis cannot show) is not sampled pixel by pixel.
            let n = ((bx - ax).abs().max((by - ay).abs()) / 4).clamp(1, 4000);
            for k in 0..=n {
                mark(ax + (bx - ax) * k / n, ay + (by - ay) * k / n, 2);
            }
        }
    }

    /// Draw `text` (anchored at `at` in the plot's coordinates) at the first of `spots` where its box lies inside
    /// the plot and clear of every label placed so far; when none is, note it instead. `spots` gets the text's
    /// width and height and the plot's width, in pixels.
    pub fn place<DB: DrawingBackend, CT: CoordTranslate>(
        &mut self,
        plot: &DrawingArea<DB, CT>,
        at: CT::From,
        text: &str,
        style: &TextStyle,
        spots: impl Fn(i32, i32, i32) -> Vec<Spot>,
        note: Note,
    ) -> Drawn<DB>
    where
        CT::From: Clone + 'static,
    {
        if !self.place_if_room(plot, at, text, style, spots)? && !self.dropped.contains(&note) {
            self.dropped.push(note);
        }
        Ok(())
    }

    /// [`Labels::place`] for a label whose text the legend already carries: when no spot has room, it is left out
    /// (a note would say the same thing twice). Returns whether it was drawn.
    pub fn place_if_room<DB: DrawingBackend, CT: CoordTranslate>(
        &mut self,
        plot: &DrawingArea<DB, CT>,
        at: CT::From,
        text: &str,
        style: &TextStyle,
        spots: impl Fn(i32, i32, i32) -> Vec<Spot>,
    ) -> Result<bool, DrawingAreaErrorKind<DB::ErrorType>>
    where
        CT::From: Clone + 'static,
    {
        let (w, h) = plot.estimate_text_size(text, style)?;
        let (w, h) = (w as i32, h as i32);
        let (xs, ys) = plot.get_pixel_range();
        let bounds = Rect { x0: xs.start, y0: ys.start, x1: xs.end, y1: ys.end };
        let (px, py) = plot.map_coordinate(&at);
        for s in spots(w, h, xs.end - xs.start) {
            let (x, y) = (px + s.dx, py + s.dy);
            let x0 = match s.h {
                HPos::Left => x,
                HPos::Center => x - w / 2,
                HPos::Right => x - w,
            };
            let y0 = match s.v {
                VPos::Top => y,
                VPos::Center => y - h / 2,
                VPos::Bottom => y - h,
            };
            let b = Rect { x0: x0 - GAP, y0: y0 - GAP, x1: x0 + w + GAP, y1: y0 + h + GAP };
            if b.inside(&bounds) && !self.placed.iter().any(|p| p.overlaps(&b)) {
                self.placed.push(b);
                let style = style.pos(Pos::new(s.h, s.v));
                plot.draw(&super::style::label(at, (s.dx, s.dy), text.to_string(), style))?;
                return Ok(true);
            }
        }
        Ok(false)
    }
}

/// Spots along a horizontal line, from one end of the plot to the other, just above it and then just below it at
/// each step: `from_left` starts at the line's left end (anchored left), else at its right end (anchored right).
pub fn along_line(from_left: bool, w: i32, plot_w: i32) -> Vec<Spot> {
    let step = w + 16;
    let (h, sign) = if from_left { (HPos::Left, 1) } else { (HPos::Right, -1) };
    (0..)
        .map(|k| 8 + k * step)
        .take_while(|d| d + w <= plot_w)
        .flat_map(|d| [Spot::new(sign * d, -5, h, VPos::Bottom), Spot::new(sign * d, 5, h, VPos::Top)])
        .collect()
}

/// Spots stacked away from a point, centred on it: upwards when `up` (the first `gap` pixels above), else
/// downwards, at most `n` of them.
pub fn stacked(up: bool, gap: i32, h: i32, n: i32) -> Vec<Spot> {
    (0..n)
        .map(|k| {
            let d = gap + k * (h + 2 * GAP + 1);
            if up {
                Spot::new(0, -d, HPos::Center, VPos::Bottom)
            } else {
                Spot::new(0, d, HPos::Center, VPos::Top)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spots_along_a_line_stay_inside_it() {
        let s = along_line(true, 100, 500);
        assert_eq!(s.len(), 2 * 4, "8, 124, 240, 356 fit; 472 + 100 does not");
        assert!(s.iter().all(|p| p.dx >= 8 && p.dx + 100 <= 500));
        let r = along_line(false, 100, 500);
        assert!(r.iter().all(|p| p.dx <= -8 && matches!(p.h, HPos::Right)));
        assert!(along_line(true, 600, 500).is_empty());
    }
}
