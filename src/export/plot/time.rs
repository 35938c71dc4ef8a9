//! Figure 1: p50 transfer time vs size, log-log, with each run's min–max band.

use super::axes::{self, SizeAxis};
use super::{chart, style, Drawn, Figure, Labels, Run};
use plotters::coord::Shift;
use plotters::prelude::*;

pub struct TimeFigure<'a> {
    runs: &'a [Run<'a>],
    sizes: SizeAxis,
}

impl<'a> TimeFigure<'a> {
    pub fn new(runs: &'a [Run<'a>]) -> TimeFigure<'a> {
        TimeFigure { runs, sizes: chart::size_axis(runs) }
    }
}

impl Figure for TimeFigure<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>, labels: &mut Labels) -> Drawn<DB> {
        let title = "Transfer time vs size: p50, shaded band = min to max";
        let area = super::frame(root, title, super::run_entries(self.runs), labels)?;
        let cases = self.runs.iter().flat_map(|r| r.results.cases.iter());
        let lo = cases.clone().map(|c| c.stats.transfer_ms.min).fold(f64::INFINITY, f64::min);
        let hi = cases.map(|c| c.stats.transfer_ms.max).fold(0.0, f64::max);
        let (y_range, y_ticks) = axes::log_range(lo, hi);
        let y = y_range.log_scale().with_key_points(y_ticks);
        let desc = "transfer time, ms (log scale)";
        chart::size_chart(&area, &self.sizes, self.runs, y, desc, &|v| axes::number_label(*v), |plot| {
            draw_runs(plot, self.runs, labels)
        })
    }
}

fn draw_runs<DB: DrawingBackend, CT: plotters::coord::CoordTranslate<From = (f64, f64)>>(
    plot: &DrawingArea<DB, CT>,
    runs: &[Run],
    labels: &mut Labels,
) -> Drawn<DB> {
    // Bands first, so no band hides another run's line.
    for r in runs {
        let mut cases: Vec<_> = r.results.cases.iter().collect();
        cases.sort_by_key(|c| c.size_bytes);
        let mut band: Vec<(f64, f64)> = cases.iter().map(|c| (c.size_bytes as f64, c.stats.transfer_ms.max)).collect();
        band.extend(cases.iter().rev().map(|c| (c.size_bytes as f64, c.stats.transfer_ms.min)));
        plot.draw(&Polygon::new(band, r.style.colour.mix(0.18).filled()))?;
    }
    for r in runs {
        let mut cases: Vec<_> = r.results.cases.iter().collect();
        cases.sort_by_key(|c| c.size_bytes);
        let pts: Vec<(f64, f64)> = cases.iter().map(|c| (c.size_bytes as f64, c.stats.transfer_ms.p50)).collect();
        style::path(plot, pts.clone(), r.style.dash, r.style.colour.stroke_width(3))?;
        for (p, c) in pts.into_iter().zip(cases) {
            plot.draw(&style::marker(p, r.style.marker, 5, r.style.colour, true))?;
            labels.hover(plot, &p, super::hover::case(&r.name, c));
        }
    }
    Ok(())
}
