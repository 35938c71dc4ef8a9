//! `bandwidth-over-time`: a paced run's GB/s per interval (`--duration … --interval …`), one series per run and
//! size, so periodic and phase-change slowdowns show as steps or saw-teeth a per-size summary would average away.

use super::hover::sig;
use super::style::{self, text, AXIS_PX, GRID, TICK_PX};
use super::{Drawn, Figure, Labels, Run};
use crate::plan::sizes::format_size;
use plotters::coord::Shift;
use plotters::prelude::*;

/// One line: a run's case and its intervals' (t_s, gbps).
struct Series {
    name: String,
    style: style::RunStyle,
    points: Vec<(f64, f64)>,
}

pub struct IntervalsFigure {
    series: Vec<Series>,
}

impl IntervalsFigure {
    /// The figure of `runs`' recorded intervals; `None` when no case has any.
    pub fn new(runs: &[Run]) -> Option<IntervalsFigure> {
        let many = runs.len() > 1;
        let mut series = Vec::new();
        for r in runs {
            for c in &r.results.cases {
                let Some(rows) = c.intervals.as_ref().filter(|v| !v.is_empty()) else { continue };
                let size = format_size(c.size_bytes);
                let name = if many { format!("{} {size}", r.name) } else { size };
                let points = rows.iter().map(|i| (i.t_s, i.gbps)).collect();
                series.push(Series { name, style: style::run_style(series.len()), points });
            }
        }
        (!series.is_empty()).then_some(IntervalsFigure { series })
    }
}

impl Figure for IntervalsFigure {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>, labels: &mut Labels) -> Drawn<DB> {
        let title = "Bandwidth over time: GB/s moved in each interval";
        let legend = self
            .series
            .iter()
            .map(|s| style::LegendEntry {
                text: s.name.clone(),
                colour: s.style.colour,
                dash: Some(s.style.dash),
                marker: Some((s.style.marker, true)),
                width: 3,
            })
            .collect();
        let area = super::frame(root, title, legend, labels)?;
        let all = self.series.iter().flat_map(|s| s.points.iter());
        let t_max = all.clone().map(|p| p.0).fold(0.0, f64::max).max(1e-3);
        let y_max = all.map(|p| p.1).fold(0.0, f64::max).max(1e-3) * 1.1;
        let mut chart = ChartBuilder::on(&area)
            .margin_right(30)
            .margin_left(10)
            .margin_top(12)
            .x_label_area_size(60)
            .y_label_area_size(80)
            .build_cartesian_2d(0.0..t_max * 1.02, 0.0..y_max)?;
        chart
            .configure_mesh()
            .bold_line_style(GRID)
            .light_line_style(TRANSPARENT)
            .axis_style(style::INK)
            .x_desc("time since the first measured rep, s (each point: the end of an interval)")
            .y_desc("GB/s moved in the interval (10^9 B/s)")
            .x_label_formatter(&|v| super::axes::number_label(*v))
            .y_label_formatter(&|v| super::axes::number_label(*v))
            .label_style(text(TICK_PX))
            .axis_desc_style(text(AXIS_PX))
            .draw()?;
        let plot = chart.plotting_area();
        for s in &self.series {
            style::path(plot, s.points.clone(), s.style.dash, s.style.colour.stroke_width(2))?;
            // Markers only while they stay apart; hundreds of intervals read better as a line.
            if s.points.len() <= 120 {
                for &p in &s.points {
                    plot.draw(&style::marker(p, s.style.marker, 4, s.style.colour, true))?;
                }
            }
            for &p in &s.points {
                let text = format!("{}: {} GB/s in the interval ending at {} s", s.name, sig(p.1), sig(p.0));
                labels.hover(plot, &p, text);
            }
        }
        Ok(())
    }
}
