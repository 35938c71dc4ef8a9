//! The figures of a replay (`kvxfer replay`, `config.mode = "replay"`), drawn from its `replay` section:
//! - `replay-latency-cdf`: each load's request latency (as the section reports it: from the scheduled arrival, or
//!   layer-wise from the prefill's end, to the last byte landed), its repetitions
//!   pooled, as a CDF on a log ms axis, a curve per load; a saturated load says so in the legend;
//! - `replay-latency-vs-load`: p50 and p99 latency against the load (log-log), the knee as a vertical line, and
//!   beside it achieved and offered GB/s against the load with the path's ceiling;
//! - `replay-timeline-<load>`: one load's first repetition over time, each request's latency at its scheduled
//!   arrival, and the queue (requests arrived but not yet started) below it (see `replay_timeline`).

use super::axes;
use super::cdf::{CdfCurve, CdfFigure};
use super::labels::Spot;
use super::style::{self, text, Dash, LegendEntry, Marker, AXIS_PX, GRID, NOTE_PX, TICK_PX};
use super::{Drawn, Figure, Labels};
use crate::stats::replay::load_words;
use crate::stats::replay::{LatencyFrom, LoadSummary, ReplayJson};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};
use std::path::PathBuf;

/// Draw every replay figure of `replay` into `sink`, each file's name after `prefix`; returns the files written
/// (none when no load moved a request).
pub fn write(replay: &ReplayJson, sink: &mut super::Sink, prefix: &str) -> anyhow::Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    if let Some(fig) = latency_cdf(replay) {
        written.extend(super::save(&fig, sink, &format!("{prefix}replay-latency-cdf"))?);
    }
    if let Some(fig) = LoadFigure::new(replay) {
        written.extend(super::save(&fig, sink, &format!("{prefix}replay-latency-vs-load"))?);
    }
    for load in loads(replay) {
        if let Some(fig) = super::replay_timeline::TimelineFigure::new(replay, load) {
            written.extend(super::save(&fig, sink, &format!("{prefix}replay-timeline-{load}"))?);
        }
    }
    Ok(written)
}

/// The loads in the order they first ran.
fn loads(replay: &ReplayJson) -> Vec<f64> {
    let mut out: Vec<f64> = Vec::new();
    for l in &replay.loads {
        if !out.contains(&l.load) {
            out.push(l.load);
        }
    }
    out
}

/// Whether the load was cut off as saturated in any repetition.
fn saturated(replay: &ReplayJson, load: f64) -> bool {
    let pooled = replay.pooled.iter().any(|p| p.load == load && p.summary.saturated);
    pooled || replay.loads.iter().any(|l| l.load == load && l.summary.saturated)
}

/// The curve's legend text: `speed 4`, `speed 8 (saturated)`.
fn curve_name(replay: &ReplayJson, load: f64) -> String {
    let words = load_words(load, &replay.load_unit);
    if saturated(replay, load) {
        format!("{words} (saturated)")
    } else {
        words
    }
}

/// The smallest latency a log axis shows: a request cannot land in under a microsecond.
const MIN_MS: f64 = 1e-3;

/// A curve per load, its repetitions pooled; `None` when no load moved a request.
fn latency_cdf(replay: &ReplayJson) -> Option<CdfFigure> {
    let mut curves = Vec::new();
    for load in loads(replay) {
        let ms = replay.loads.iter().filter(|l| l.load == load).flat_map(|l| l.requests.iter());
        let ms = ms.map(|r| r.reported_latency_ms().max(MIN_MS)).collect();
        curves.extend(CdfCurve::of(ms, curve_name(replay, load), style::run_style(curves.len())));
    }
    let by = if replay.load_unit == "rate" { "arrival rate" } else { "replay speed" };
    (!curves.is_empty()).then(|| CdfFigure {
        title: format!("Replay latency distribution per {by} (CDF)"),
        x_desc: format!("request {}: {}, ms (log scale)", replay.latency.label(), replay.latency.words()),
        y_desc: "share of requests at or below",
        note: "markers: each curve's p50 and p99; repetitions pooled".into(),
        x_label: |v| axes::number_label(*v),
        unit: "ms",
        curves,
    })
}

/// One load's point on the load figure.
struct LoadPoint {
    load: f64,
    p50: Option<f64>,
    p99: Option<f64>,
    offered: Option<f64>,
    achieved: Option<f64>,
    saturated: bool,
}

impl LoadPoint {
    fn of(load: f64, s: &LoadSummary) -> LoadPoint {
        let fin = |v: Option<f64>| v.filter(|v| v.is_finite());
        LoadPoint {
            load,
            p50: fin(s.latency_ms.map(|q| q.p50.max(MIN_MS))),
            p99: fin(s.latency_ms.map(|q| q.p99.max(MIN_MS))),
            offered: fin(s.offered_gbps),
            achieved: fin(s.achieved_gbps),
            saturated: s.saturated,
        }
    }
}

pub struct LoadFigure {
    points: Vec<LoadPoint>,
    unit: String,
    knee: Option<(f64, String)>,
    ceiling: Option<(f64, String)>,
    latency: LatencyFrom,
}

/// Where the load figure's colours come from: latency, achieved and offered.
const LATENCY: usize = 0;
const OFFERED: usize = 1;
const ACHIEVED: usize = 2;
/// The ring around a saturated load's points.
const SATURATED: RGBColor = RGBColor(213, 94, 0);

impl LoadFigure {
    /// The pooled summary of every load, by load; `None` when there is none.
    pub fn new(replay: &ReplayJson) -> Option<LoadFigure> {
        let mut points: Vec<LoadPoint> = replay
            .pooled
            .iter()
            .filter(|p| p.load.is_finite() && p.load > 0.0)
            .map(|p| LoadPoint::of(p.load, &p.summary))
            .collect();
        points.sort_by(|a, b| a.load.total_cmp(&b.load));
        if points.is_empty() {
            return None;
        }
        let knee = replay.knee.as_ref().filter(|k| k.load.is_finite() && k.load > 0.0).map(|k| (k.load, k.why.clone()));
        let ceiling =
            replay.ceiling.as_ref().filter(|c| c.gbps.is_finite() && c.gbps > 0.0).map(|c| (c.gbps, c.source.clone()));
        Some(LoadFigure { points, unit: replay.load_unit.clone(), knee, ceiling, latency: replay.latency })
    }

    fn legend(&self) -> Vec<LegendEntry> {
        let c = |i: usize| style::run_style(i).colour;
        let entry = |text: String, colour, dash, marker| LegendEntry { text, colour, dash, marker, width: 2 };
        let mut e = vec![
            entry(
                format!("{} p50 (filled)", self.latency.label()),
                c(LATENCY),
                Some(Dash::Solid),
                Some((Marker::Circle, true)),
            ),
            entry(
                format!("{} p99 (hollow)", self.latency.label()),
                c(LATENCY),
                Some(Dash::Dashed),
                Some((Marker::Circle, false)),
            ),
            entry("achieved GB/s".into(), c(ACHIEVED), Some(Dash::Solid), Some((Marker::Square, true))),
            entry("offered GB/s".into(), c(OFFERED), Some(Dash::Dotted), Some((Marker::Triangle, false))),
        ];
        if let Some((gbps, source)) = &self.ceiling {
            e.push(entry(format!("path ceiling {gbps:.2} GB/s ({source})"), style::REFERENCE, Some(Dash::Long), None));
        }
        if self.points.iter().any(|p| p.saturated) {
            let text = "ring: saturated (backlog passed --max-backlog)".into();
            e.push(entry(text, SATURATED, None, Some((Marker::Circle, false))));
        }
        match &self.knee {
            Some((load, why)) => {
                let text = format!("knee at {}: {why}", load_words(*load, &self.unit));
                e.push(entry(text, style::INK, Some(Dash::Dashed), None));
            }
            None => e.push(entry("no knee within these loads".into(), style::INK, None, None)),
        }
        e
    }

    /// The load axis: log, a little wider than the loads, ticked at each load (thinned to about 10).
    fn load_axis(&self) -> (std::ops::Range<f64>, Vec<f64>) {
        let lo = self.points.first().map_or(1.0, |p| p.load);
        let hi = self.points.last().map_or(1.0, |p| p.load);
        let pad = ((hi / lo).log2() * 0.06).max(0.3).exp2();
        let range = lo / pad..hi * pad;
        let min_gap = (range.end / range.start).log2() / 10.0;
        let mut ticks: Vec<f64> = Vec::new();
        for p in &self.points {
            if ticks.last().is_none_or(|&l| (p.load / l).log2() >= min_gap * 0.999) {
                ticks.push(p.load);
            }
        }
        (range, ticks)
    }

    fn x_desc(&self) -> String {
        match self.unit.as_str() {
            "rate" => "arrival rate, requests/s (log)".into(),
            u => format!("{u}: trace s per wall s (log)"),
        }
    }
}

impl Figure for LoadFigure {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>, labels: &mut Labels) -> Drawn<DB> {
        let title = "Replay: latency and throughput against load";
        let area = super::frame(root, title, self.legend(), labels)?;
        let (w, _) = area.dim_in_pixel();
        let (left, right) = area.split_horizontally(w / 2);
        self.draw_latency(&left, labels)?;
        self.draw_throughput(&right, labels)
    }
}

impl LoadFigure {
    fn draw_latency<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>, labels: &mut Labels) -> Drawn<DB> {
        let (x_range, x_ticks) = self.load_axis();
        let ms = self.points.iter().flat_map(|p| [p.p50, p.p99]).flatten();
        let lo = ms.clone().fold(f64::INFINITY, f64::min);
        let (y_range, y_ticks) =
            if lo.is_finite() { axes::log_range_wide(lo, ms.fold(0.0, f64::max)) } else { axes::log_range(1.0, 10.0) };
        let caption = match self.latency {
            LatencyFrom::Arrival => "Latency: arrival → landed, pooled",
            LatencyFrom::PrefillEnd => "Latency after prefill: prefill end → landed, pooled",
        };
        let mut chart = ChartBuilder::on(area)
            .caption(caption, text(AXIS_PX))
            .margin_right(20)
            .margin_left(10)
            .margin_top(8)
            .x_label_area_size(60)
            .y_label_area_size(70)
            .build_cartesian_2d(
                x_range.log_scale().with_key_points(x_ticks),
                y_range.log_scale().with_key_points(y_ticks),
            )?;
        chart
            .configure_mesh()
            .bold_line_style(GRID)
            .light_line_style(TRANSPARENT)
            .axis_style(style::INK)
            .x_desc(self.x_desc())
            .y_desc(format!("{}, ms (log scale)", self.latency.label()))
            .x_label_formatter(&|v| axes::number_label(*v))
            .y_label_formatter(&|v| axes::number_label(*v))
            .label_style(text(TICK_PX))
            .axis_desc_style(text(AXIS_PX))
            .draw()?;
        let plot = chart.plotting_area();
        let colour = style::run_style(LATENCY).colour;
        let p99: Vec<(f64, f64)> = self.points.iter().filter_map(|p| p.p99.map(|v| (p.load, v))).collect();
        let p50: Vec<(f64, f64)> = self.points.iter().filter_map(|p| p.p50.map(|v| (p.load, v))).collect();
        style::path(plot, p99.clone(), Dash::Dashed, colour.stroke_width(2))?;
        style::path(plot, p50.clone(), Dash::Solid, colour.stroke_width(3))?;
        for &p in &p99 {
            plot.draw(&style::marker(p, Marker::Circle, 4, colour, false))?;
        }
        for &p in &p50 {
            plot.draw(&style::marker(p, Marker::Circle, 5, colour, true))?;
        }
        self.rings(plot, self.points.iter().filter_map(|p| p.p99.map(|v| (p, v))))?;
        for p in &self.points {
            for (q, v) in [("p50", p.p50), ("p99", p.p99)] {
                let Some(v) = v else { continue };
                let words = format!("{}: {q} {}", self.load_words(p), super::hover::ms(v));
                labels.hover(plot, &(p.load, v), words);
            }
        }
        labels.block_line(plot, &p50);
        labels.block_line(plot, &p99);
        self.knee_line(plot, labels, y_range_of(&chart))
    }

    fn draw_throughput<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>, labels: &mut Labels) -> Drawn<DB> {
        let (x_range, x_ticks) = self.load_axis();
        let gbps = self.points.iter().flat_map(|p| [p.offered, p.achieved]).flatten();
        let top = gbps.chain(self.ceiling.as_ref().map(|c| c.0)).fold(0.0, f64::max).max(1e-3) * 1.12;
        let mut chart = ChartBuilder::on(area)
            .caption("Throughput: achieved vs offered", text(AXIS_PX))
            .margin_right(30)
            .margin_left(10)
            .margin_top(8)
            .x_label_area_size(60)
            .y_label_area_size(70)
            .build_cartesian_2d(x_range.log_scale().with_key_points(x_ticks), 0.0..top)?;
        chart
            .configure_mesh()
            .bold_line_style(GRID)
            .light_line_style(TRANSPARENT)
            .axis_style(style::INK)
            .x_desc(self.x_desc())
            .y_desc("GB/s (10^9 B/s)")
            .x_label_formatter(&|v| axes::number_label(*v))
            .y_label_formatter(&|v| axes::number_label(*v))
            .label_style(text(TICK_PX))
            .axis_desc_style(text(AXIS_PX))
            .draw()?;
        let plot = chart.plotting_area();
        if let Some((gbps, _)) = &self.ceiling {
            let x = chart.x_range();
            let line = vec![(x.start, *gbps), (x.end, *gbps)];
            style::path(plot, line.clone(), Dash::Long, style::REFERENCE.stroke_width(2))?;
            labels.block_line(plot, &line);
        }
        for (i, pick, dash, m, filled) in [
            (
                OFFERED,
                (|p: &LoadPoint| p.offered) as fn(&LoadPoint) -> Option<f64>,
                Dash::Dotted,
                Marker::Triangle,
                false,
            ),
            (ACHIEVED, |p: &LoadPoint| p.achieved, Dash::Solid, Marker::Square, true),
        ] {
            let colour = style::run_style(i).colour;
            let pts: Vec<(f64, f64)> = self.points.iter().filter_map(|p| pick(p).map(|v| (p.load, v))).collect();
            style::path(plot, pts.clone(), dash, colour.stroke_width(if filled { 3 } else { 2 }))?;
            for &p in &pts {
                plot.draw(&style::marker(p, m, 5, colour, filled))?;
            }
            let what = if i == OFFERED { "offered" } else { "achieved" };
            for p in &self.points {
                let Some(v) = pick(p) else { continue };
                let words = format!("{}: {what} {} GB/s", self.load_words(p), super::hover::sig(v));
                labels.hover(plot, &(p.load, v), words);
            }
            labels.block_line(plot, &pts);
        }
        self.rings(plot, self.points.iter().filter_map(|p| p.achieved.map(|v| (p, v))))?;
        self.knee_line(plot, labels, y_range_of(&chart))
    }

    /// "speed 8 (saturated)": a load as its points' words name it, as its CDF curve's legend does.
    fn load_words(&self, p: &LoadPoint) -> String {
        let words = load_words(p.load, &self.unit);
        if p.saturated {
            format!("{words} (saturated)")
        } else {
            words
        }
    }

    /// A ring around each saturated load's point.
    fn rings<'p, DB: DrawingBackend, CT: plotters::coord::CoordTranslate<From = (f64, f64)>>(
        &self,
        plot: &DrawingArea<DB, CT>,
        points: impl Iterator<Item = (&'p LoadPoint, f64)>,
    ) -> Drawn<DB> {
        for (p, v) in points.filter(|(p, _)| p.saturated) {
            plot.draw(&(EmptyElement::at((p.load, v)) + Circle::new((0, 0), 10, SATURATED.stroke_width(2))))?;
        }
        Ok(())
    }

    /// The knee: a dashed vertical line at its load, labelled at the top of the panel where there is room.
    fn knee_line<DB: DrawingBackend, CT: plotters::coord::CoordTranslate<From = (f64, f64)>>(
        &self,
        plot: &DrawingArea<DB, CT>,
        labels: &mut Labels,
        (y_lo, y_hi): (f64, f64),
    ) -> Drawn<DB> {
        let Some((load, _)) = &self.knee else { return Ok(()) };
        style::path(plot, vec![(*load, y_lo), (*load, y_hi)], Dash::Dashed, style::INK.stroke_width(1))?;
        let label = format!("knee: {}", load_words(*load, &self.unit));
        let spots = |_w: i32, h: i32, _pw: i32| {
            (0..6)
                .flat_map(|k| {
                    let dy = 4 + k * (h + 6);
                    [Spot::new(5, dy, HPos::Left, VPos::Top), Spot::new(-5, dy, HPos::Right, VPos::Top)]
                })
                .collect::<Vec<Spot>>()
        };
        // The legend names the knee and why; the label on the line is a convenience, left out when it has no room.
        labels.place_if_room(plot, (*load, y_hi), &label, &text(NOTE_PX), spots)?;
        Ok(())
    }
}

/// A chart's y range as (bottom, top) in data units.
fn y_range_of<
    DB: DrawingBackend,
    X: plotters::coord::ranged1d::Ranged,
    Y: plotters::coord::ranged1d::Ranged<ValueType = f64>,
>(
    chart: &ChartContext<DB, plotters::coord::cartesian::Cartesian2d<X, Y>>,
) -> (f64, f64) {
    let r = chart.y_range();
    (r.start, r.end)
}
