//! Figure 2: bandwidth vs size — p50 (thick, filled markers) and max (thin, hollow markers) per run, each run's
//! detected ceiling as a thin long-dashed line in its colour labelled from the left, and the user's reference lines
//! grey and dashed, labelled from the right. Labels step along their line until they overprint nothing.

use super::axes::{self, SizeAxis, LOG_GBPS_RATIO};
use super::labels::{along_line, Note};
use super::style::{self, text, Dash, LegendEntry, NOTE_PX};
use super::{chart, Drawn, Figure, Labels, RefLine, Run};
use crate::stats::modes::format_gbps;
use plotters::coord::{CoordTranslate, Shift};
use plotters::prelude::*;

pub struct BandwidthFigure<'a> {
    runs: &'a [Run<'a>],
    lines: &'a [RefLine],
    sizes: SizeAxis,
}

impl<'a> BandwidthFigure<'a> {
    pub fn new(runs: &'a [Run<'a>], lines: &'a [RefLine]) -> BandwidthFigure<'a> {
        BandwidthFigure { runs, lines, sizes: chart::size_axis(runs) }
    }

    fn legend(&self) -> Vec<LegendEntry> {
        let grey = style::INK;
        let mut e = super::run_entries(self.runs);
        e.push(LegendEntry { text: "p50".into(), colour: grey, dash: Some(Dash::Solid), marker: None, width: 3 });
        e.push(LegendEntry {
            text: "max".into(),
            colour: grey,
            dash: Some(Dash::Solid),
            marker: Some((style::Marker::Circle, false)),
            width: 1,
        });
        if self.runs.iter().any(|r| r.ceiling.is_some()) {
            let text = "ceiling (colour of its run)".into();
            e.push(LegendEntry { text, colour: grey, dash: Some(Dash::Long), marker: None, width: 1 });
        }
        if !self.lines.is_empty() {
            let (text, colour) = ("reference line (--line)".into(), style::REFERENCE);
            e.push(LegendEntry { text, colour, dash: Some(REFERENCE_DASH), marker: None, width: 2 });
        }
        e
    }
}

/// Reference lines are dashed as no run's p50 is: grey, medium width, no markers.
const REFERENCE_DASH: Dash = Dash::Dashed;

impl Figure for BandwidthFigure<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>, labels: &mut Labels) -> Drawn<DB> {
        let title = "Bandwidth vs size (GB/s = 10^9 B/s), with the detected ceiling";
        let area = super::frame(root, title, self.legend(), labels)?;
        let cases = || self.runs.iter().flat_map(|r| r.results.cases.iter());
        let refs = self.lines.iter().map(|l| l.gbps);
        let hi = cases().map(|c| c.stats.gbps.max).chain(refs.clone()).filter(|v| v.is_finite()).fold(0.0, f64::max);
        let lo = cases().map(|c| c.stats.gbps.min).chain(refs).filter(|v| v.is_finite()).fold(f64::INFINITY, f64::min);
        let lowest_p50 = cases().map(|c| c.stats.gbps.p50).fold(f64::INFINITY, f64::min);
        let highest_p50 = cases().map(|c| c.stats.gbps.p50).filter(|v| v.is_finite()).fold(0.0, f64::max);
        // Runs 20× apart would flatten the slower one against zero on a linear axis.
        if highest_p50 > LOG_GBPS_RATIO * lowest_p50 {
            // Headroom above the top (×1.8, a quarter decade) for the ceiling's annotation.
            let (range, ticks) = axes::log_range(lo, hi * 1.8);
            let y = range.log_scale().with_key_points(ticks);
            let desc = "bandwidth, GB/s (log scale)";
            chart::size_chart(&area, &self.sizes, self.runs, y, desc, &|v| axes::number_label(*v), |p| {
                self.draw_content(p, labels)
            })
        } else {
            // Headroom above the highest point keeps the annotations off the data.
            let y = 0.0..(hi * 1.15).max(1e-6);
            let desc = "bandwidth, GB/s";
            chart::size_chart(&area, &self.sizes, self.runs, y, desc, &|v| axes::number_label(*v), |p| {
                self.draw_content(p, labels)
            })
        }
    }
}

impl BandwidthFigure<'_> {
    fn draw_content<DB: DrawingBackend, CT: CoordTranslate<From = (f64, f64)>>(
        &self,
        plot: &DrawingArea<DB, CT>,
        labels: &mut Labels,
    ) -> Drawn<DB> {
        let x_range = self.sizes.range();
        let (x_lo, x_hi) = (x_range.start, x_range.end);
        for l in self.lines {
            style::path(plot, vec![(x_lo, l.gbps), (x_hi, l.gbps)], REFERENCE_DASH, style::REFERENCE.stroke_width(2))?;
        }
        for r in self.runs {
            let mut cases: Vec<_> = r.results.cases.iter().collect();
            cases.sort_by_key(|c| c.size_bytes);
            let max: Vec<(f64, f64)> = cases.iter().map(|c| (c.size_bytes as f64, c.stats.gbps.max)).collect();
            let p50: Vec<(f64, f64)> = cases.iter().map(|c| (c.size_bytes as f64, c.stats.gbps.p50)).collect();
            style::path(plot, max.clone(), Dash::Solid, r.style.colour.stroke_width(1))?;
            for (p, c) in max.into_iter().zip(&cases) {
                plot.draw(&style::marker(p, r.style.marker, 4, r.style.colour, false))?;
                let text = format!("{}: max {} GB/s", super::hover::case_name(&r.name, c), super::hover::sig(p.1));
                labels.hover(plot, &p, text);
            }
            style::path(plot, p50.clone(), r.style.dash, r.style.colour.stroke_width(3))?;
            labels.block_line(plot, &p50);
            for (p, c) in p50.into_iter().zip(&cases) {
                plot.draw(&style::marker(p, r.style.marker, 5, r.style.colour, true))?;
                labels.hover(plot, &p, super::hover::case(&r.name, c));
            }
        }
        for r in self.runs {
            let Some(c) = r.ceiling else { continue };
            // Thin long dashes: unlike any run's p50 line, which is thick, even where they coincide on the plateau.
            style::path(plot, vec![(x_lo, c.gbps), (x_hi, c.gbps)], Dash::Long, r.style.colour.stroke_width(1))?;
        }
        // The user's lines are labelled first: they asked for them by name.
        for l in self.lines {
            let note = Note {
                what: "reference line:".into(),
                at: format!("{} ({} GB/s)", l.label, format_gbps(l.gbps)),
                colour: style::REFERENCE,
                dash: Some(REFERENCE_DASH),
                marker: None,
            };
            let style = text(NOTE_PX);
            labels.place(plot, (x_hi, l.gbps), &l.label, &style, |w, _, pw| along_line(false, w, pw), note)?;
        }
        for r in self.runs {
            let Some(c) = r.ceiling else { continue };
            let label = format!("ceiling {} GB/s", format_gbps(c.gbps));
            let note = Note {
                what: format!("{}:", r.name),
                at: label.clone(),
                colour: r.style.colour,
                dash: Some(Dash::Long),
                marker: None,
            };
            let style = text(NOTE_PX + 1).color(&r.style.colour);
            labels.place(plot, (x_lo, c.gbps), &label, &style, |w, _, pw| along_line(true, w, pw), note)?;
        }
        Ok(())
    }
}
