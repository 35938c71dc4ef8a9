//! `replay-timeline-<load>`: one load's first repetition over time. Above, each request's latency at its
//! scheduled arrival (log ms); below, the queue: requests arrived but not yet started, from each request's
//! scheduled arrival and start. A queue that grows and never drains is a path that cannot keep up.

use super::axes;
use super::style::{self, text, Dash, LegendEntry, Marker, AXIS_PX, GRID, TICK_PX};
use super::{Drawn, Figure, Labels};
use crate::stats::replay::{load_words, LatencyFrom, LoadJson, ReplayJson};
use plotters::coord::Shift;
use plotters::prelude::*;

pub struct TimelineFigure {
    /// (scheduled s, latency ms) of every request.
    points: Vec<(f64, f64)>,
    /// The queue depth as steps: (s, requests waiting).
    depth: Vec<(f64, i32)>,
    t_max: f64,
    name: String,
    repeat: u32,
    saturated: bool,
    latency: LatencyFrom,
    /// Paged: a request also waits for blocks of the decode side's pool.
    pooled: bool,
}

/// The smallest latency the log axis shows.
const MIN_MS: f64 = 1e-3;
/// Points drawn hollow and small past this many, so a dense run reads as a cloud rather than a blot.
const DENSE: usize = 2_000;

impl TimelineFigure {
    /// `load`'s first repetition; `None` when it moved no request.
    pub fn new(replay: &ReplayJson, load: f64) -> Option<TimelineFigure> {
        let run: &LoadJson = replay.loads.iter().filter(|l| l.load == load).min_by_key(|l| l.repeat)?;
        let fin = |v: f64| v.is_finite();
        let reqs: Vec<_> = run.requests.iter().filter(|r| fin(r.scheduled_ms) && fin(r.start_ms)).collect();
        if reqs.is_empty() {
            return None;
        }
        let points: Vec<(f64, f64)> = reqs
            .iter()
            .filter(|r| fin(r.reported_latency_ms()))
            .map(|r| (r.scheduled_ms / 1e3, r.reported_latency_ms().max(MIN_MS)))
            .collect();
        let t_max = reqs.iter().map(|r| r.scheduled_ms.max(r.start_ms) / 1e3).fold(0.0, f64::max).max(0.1);
        // A request that found its session idle started as late as the driver's clock woke (`lag_ms`), not
        // because it queued: counting those would draw a sub-pixel spike per request.
        let spans = reqs
            .iter()
            .map(|r| (r.scheduled_ms / 1e3, if r.lag_ms.is_some() { r.scheduled_ms } else { r.start_ms } / 1e3));
        let depth = queue_depth(spans, t_max);
        Some(TimelineFigure {
            points,
            depth,
            t_max,
            name: load_words(load, &replay.load_unit),
            repeat: run.repeat,
            saturated: run.summary.saturated,
            latency: replay.latency,
            pooled: replay.pool.is_some(),
        })
    }

    fn legend(&self) -> Vec<LegendEntry> {
        let c = |i: usize| style::run_style(i).colour;
        let mut e = vec![
            LegendEntry {
                text: format!("request {} ({}), at its arrival", self.latency.label(), self.latency.words()),
                colour: c(0),
                dash: None,
                marker: Some((Marker::Circle, true)),
                width: 1,
            },
            LegendEntry {
                text: if self.pooled {
                    "queue: requests arrived, waiting for a free session or the pool's blocks".into()
                } else {
                    "queue: requests arrived, waiting for a free session".into()
                },
                colour: c(2),
                dash: Some(Dash::Solid),
                marker: None,
                width: 2,
            },
        ];
        if self.saturated {
            e.push(LegendEntry {
                text: "saturated: cut off when the backlog passed --max-backlog".into(),
                colour: style::INK,
                dash: None,
                marker: None,
                width: 1,
            });
        }
        e
    }
}

/// The number of requests waiting over time, from each one's (arrival, start) in s: a step at every time the
/// count changes. Arrivals and starts at the same instant cancel, so a request that never waited adds no spike.
fn queue_depth(spans: impl Iterator<Item = (f64, f64)>, t_max: f64) -> Vec<(f64, i32)> {
    let mut events: Vec<(f64, i32)> = spans.flat_map(|(a, s)| [(a, 1), (s.max(a), -1)]).collect();
    events.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut steps = vec![(0.0, 0)];
    let mut depth = 0;
    let mut i = 0;
    while i < events.len() {
        let t = events[i].0;
        let before = depth;
        while i < events.len() && events[i].0 == t {
            depth += events[i].1;
            i += 1;
        }
        if depth != before {
            steps.push((t, before));
            steps.push((t, depth));
        }
    }
    steps.push((t_max, depth));
    steps
}

impl Figure for TimelineFigure {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>, labels: &mut Labels) -> Drawn<DB> {
        let title = format!("Replay timeline at {} (repetition {}): latency and queue", self.name, self.repeat);
        let area = super::frame(root, &title, self.legend(), labels)?;
        let (_, h) = area.dim_in_pixel();
        let (top, bottom) = area.split_vertically(h * 3 / 5);
        let x_end = self.t_max * 1.02;
        let lo = self.points.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
        let hi = self.points.iter().map(|p| p.1).fold(0.0, f64::max);
        let (y_range, y_ticks) = if lo.is_finite() { axes::log_range_wide(lo, hi) } else { axes::log_range(1.0, 10.0) };
        let mut chart = ChartBuilder::on(&top)
            .margin_right(30)
            .margin_left(10)
            .margin_top(8)
            .x_label_area_size(30)
            .y_label_area_size(80)
            .build_cartesian_2d(0.0..x_end, y_range.log_scale().with_key_points(y_ticks))?;
        chart
            .configure_mesh()
            .bold_line_style(GRID)
            .light_line_style(TRANSPARENT)
            .axis_style(style::INK)
            .y_desc(format!("{}, ms (log)", self.latency.label()))
            .x_label_formatter(&|v| axes::number_label(*v))
            .y_label_formatter(&|v| axes::number_label(*v))
            .label_style(text(TICK_PX))
            .axis_desc_style(text(AXIS_PX))
            .draw()?;
        let colour = style::run_style(0).colour;
        let (r, fill) =
            if self.points.len() > DENSE { (2, colour.mix(0.5).filled()) } else { (3, colour.mix(0.8).filled()) };
        chart.draw_series(self.points.iter().map(|&p| Circle::new(p, r, fill)))?;

        let max_depth = self.depth.iter().map(|d| d.1).max().unwrap_or(0).max(1);
        let mut chart = ChartBuilder::on(&bottom)
            .margin_right(30)
            .margin_left(10)
            .margin_top(8)
            .x_label_area_size(55)
            .y_label_area_size(80)
            .build_cartesian_2d(0.0..x_end, 0..max_depth + (max_depth + 9) / 10)?;
        chart
            .configure_mesh()
            .bold_line_style(GRID)
            .light_line_style(TRANSPARENT)
            .axis_style(style::INK)
            .x_desc("scheduled arrival, s from the load's start")
            .y_desc("requests waiting")
            .x_label_formatter(&|v| axes::number_label(*v))
            .y_labels(6)
            .label_style(text(TICK_PX))
            .axis_desc_style(text(AXIS_PX))
            .draw()?;
        style::path(chart.plotting_area(), self.depth.clone(), Dash::Solid, style::run_style(2).colour.stroke_width(2))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_counts_requests_arrived_and_not_started() {
        // Two at once at 1 s (one starts at once, one at 3 s), one at 2 s starting at 4 s, one that never waits.
        let spans = [(1.0, 1.0), (1.0, 3.0), (2.0, 4.0), (5.0, 5.0)];
        let d = queue_depth(spans.into_iter(), 6.0);
        assert_eq!(
            d,
            [(0.0, 0), (1.0, 0), (1.0, 1), (2.0, 1), (2.0, 2), (3.0, 2), (3.0, 1), (4.0, 1), (4.0, 0), (6.0, 0)]
        );
        assert_eq!(queue_depth(std::iter::empty(), 1.0), [(0.0, 0), (1.0, 0)]);
    }
}
