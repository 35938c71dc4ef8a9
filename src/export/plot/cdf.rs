//! A CDF figure: one empirical distribution per curve on a log x axis, each curve's p50 and p99 marked. Latency
//! runs draw one curve per message size, replays one per load.

use super::axes;
use super::style::{self, text, LegendEntry, AXIS_PX, GRID, TICK_PX};
use super::{Drawn, Figure, Labels};
use plotters::coord::Shift;
use plotters::prelude::*;

/// At most this many points per curve: past it, every k-th sample (the last one always kept).
const CDF_POINTS: usize = 2_000;

/// One curve: its (value, share at or below) points and where its p50 and p99 fall.
pub struct CdfCurve {
    pub name: String,
    pub style: style::RunStyle,
    points: Vec<(f64, f64)>,
    marks: [(f64, f64); 2],
}

impl CdfCurve {
    /// The empirical CDF of `values` (finite ones only); `None` when none is.
    pub fn of(mut values: Vec<f64>, name: String, style: style::RunStyle) -> Option<CdfCurve> {
        values.retain(|v| v.is_finite());
        if values.is_empty() {
            return None;
        }
        values.sort_by(f64::total_cmp);
        let n = values.len();
        let at = |q: f64| values[((q * n as f64).ceil() as usize).clamp(1, n) - 1];
        let step = n.div_ceil(CDF_POINTS);
        let mut points: Vec<(f64, f64)> =
            (0..n).step_by(step).map(|i| (values[i], (i + 1) as f64 / n as f64)).collect();
        if points.last().map(|p| p.1) != Some(1.0) {
            points.push((values[n - 1], 1.0));
        }
        Some(CdfCurve { name, style, points, marks: [(at(0.5), 0.5), (at(0.99), 0.99)] })
    }
}

/// The figure: its words, how its x ticks read, and its curves.
pub struct CdfFigure {
    pub title: String,
    pub x_desc: String,
    pub y_desc: &'static str,
    /// The legend's last line, saying what the markers are.
    pub note: String,
    pub x_label: fn(&f64) -> String,
    /// The x values' unit, as a point's words on a page name it.
    pub unit: &'static str,
    pub curves: Vec<CdfCurve>,
}

impl CdfFigure {
    fn legend(&self) -> Vec<LegendEntry> {
        let mut e: Vec<LegendEntry> = self
            .curves
            .iter()
            .map(|c| LegendEntry {
                text: c.name.clone(),
                colour: c.style.colour,
                dash: Some(c.style.dash),
                marker: Some((c.style.marker, true)),
                width: 2,
            })
            .collect();
        e.push(LegendEntry { text: self.note.clone(), colour: style::INK, dash: None, marker: None, width: 1 });
        e
    }
}

impl Figure for CdfFigure {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>, labels: &mut Labels) -> Drawn<DB> {
        let area = super::frame(root, &self.title, self.legend(), labels)?;
        let all = self.curves.iter().flat_map(|c| c.points.iter().map(|p| p.0));
        let lo = all.clone().fold(f64::INFINITY, f64::min);
        let hi = all.fold(0.0, f64::max);
        let (x_range, x_ticks) = axes::log_range_wide(lo, hi);
        let mut chart = ChartBuilder::on(&area)
            .margin_right(30)
            .margin_left(10)
            .margin_top(12)
            .x_label_area_size(60)
            .y_label_area_size(80)
            .build_cartesian_2d(x_range.log_scale().with_key_points(x_ticks), 0.0..1.02)?;
        chart
            .configure_mesh()
            .bold_line_style(GRID)
            .light_line_style(TRANSPARENT)
            .axis_style(style::INK)
            .x_desc(self.x_desc.as_str())
            .y_desc(self.y_desc)
            .x_label_formatter(&self.x_label)
            .y_label_formatter(&|v| format!("{:.0}%", v * 100.0))
            .y_labels(11)
            .label_style(text(TICK_PX))
            .axis_desc_style(text(AXIS_PX))
            .draw()?;
        let plot = chart.plotting_area();
        for c in &self.curves {
            // A step per sample: the share jumps at each measured value.
            let mut steps = Vec::with_capacity(2 * c.points.len());
            let mut below = 0.0;
            for &(x, y) in &c.points {
                steps.push((x, below));
                steps.push((x, y));
                below = y;
            }
            style::path(plot, steps, c.style.dash, c.style.colour.stroke_width(2))?;
            for (&m, q) in c.marks.iter().zip(["p50", "p99"]) {
                plot.draw(&style::marker(m, c.style.marker, 5, c.style.colour, true))?;
                labels.hover(plot, &m, format!("{}: {q} {} {}", c.name, super::hover::sig(m.0), self.unit));
            }
        }
        Ok(())
    }
}
