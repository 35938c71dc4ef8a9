//! The figures of a latency run (`kvxfer latency`, `config.mode = "latency"`), whose cases are message sizes and
//! whose reps are half round trips:
//! - `latency-vs-size`: p50 and p99 vs size, log-log, with the min–max band, a series per run;
//! - `latency-cdf`: the distribution of each size's half round trips, a curve per size (and run), on a log µs axis,
//!   so a tail or a second mode shows as the curve's shape rather than as one more percentile.

use super::axes::{self, SizeAxis};
use super::style::{self, text, Dash, LegendEntry, Marker, AXIS_PX, GRID, TICK_PX};
use super::{chart, Drawn, Figure, Labels, Run};
use crate::export::json::Results;
use crate::plan::sizes::format_size;
use crate::stats::CaseResult;
use plotters::coord::Shift;
use plotters::prelude::*;
use serde::Deserialize;

/// Whether `r` is a latency run, whose figures are these rather than the bandwidth ones.
pub fn is_latency(r: &Results) -> bool {
    r.config.mode.as_deref() == Some("latency")
}

/// The quantiles a latency case keeps (`latency_us`), or, in a file without them, the same read from its
/// half-round-trip summary.
#[derive(Debug, Clone, Copy, Deserialize)]
struct Quantiles {
    min: f64,
    p50: f64,
    p99: f64,
    max: f64,
}

fn quantiles(c: &CaseResult) -> Quantiles {
    let kept = c.extras.get("latency_us").and_then(|j| j.read::<Quantiles>().ok());
    let t = &c.stats.transfer_ms;
    kept.unwrap_or(Quantiles { min: t.min * 1e3, p50: t.p50 * 1e3, p99: t.p99 * 1e3, max: t.max * 1e3 })
}

/// A latency axis in µs: log, with 1-2-5 ticks.
fn us_label(v: &f64) -> String {
    axes::number_label(*v)
}

pub struct LatencySizeFigure<'a> {
    runs: &'a [Run<'a>],
    sizes: SizeAxis,
}

impl<'a> LatencySizeFigure<'a> {
    pub fn new(runs: &'a [Run<'a>]) -> LatencySizeFigure<'a> {
        let mut sizes = chart::size_axis(runs);
        sizes.desc = "message size (binary units: KiB = 2^10 B, MiB = 2^20 B)";
        LatencySizeFigure { runs, sizes }
    }

    fn legend(&self) -> Vec<LegendEntry> {
        let mut e = super::run_entries(self.runs);
        for r in &mut e {
            r.dash = Some(Dash::Solid);
        }
        let ink =
            |text: &str, dash, marker| LegendEntry { text: text.into(), colour: style::INK, dash, marker, width: 2 };
        e.push(ink("p50 (filled)", Some(Dash::Solid), Some((Marker::Circle, true))));
        e.push(ink("p99 (hollow)", Some(Dash::Dashed), Some((Marker::Circle, false))));
        e.push(ink("shaded band = min to max", None, None));
        e
    }
}

impl Figure for LatencySizeFigure<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>, labels: &mut Labels) -> Drawn<DB> {
        let title = "Latency vs message size: half round trip, p50 and p99";
        let area = super::frame(root, title, self.legend(), labels)?;
        let all = self.runs.iter().flat_map(|r| r.results.cases.iter()).map(quantiles);
        let lo = all.clone().map(|q| q.min).fold(f64::INFINITY, f64::min);
        let hi = all.map(|q| q.max).fold(0.0, f64::max);
        let (y_range, y_ticks) = axes::log_range(lo, hi);
        let y = y_range.log_scale().with_key_points(y_ticks);
        let desc = "half round trip, µs (log scale)";
        chart::size_chart(&area, &self.sizes, self.runs, y, desc, &us_label, |plot| {
            for r in self.runs {
                let cases = sorted(r);
                let mut band: Vec<(f64, f64)> = cases.iter().map(|(s, q)| (*s, q.max)).collect();
                band.extend(cases.iter().rev().map(|(s, q)| (*s, q.min)));
                plot.draw(&Polygon::new(band, r.style.colour.mix(0.15).filled()))?;
            }
            for r in self.runs {
                let cases = sorted(r);
                let p99: Vec<(f64, f64)> = cases.iter().map(|(s, q)| (*s, q.p99)).collect();
                style::path(plot, p99.clone(), Dash::Dashed, r.style.colour.stroke_width(2))?;
                for p in p99 {
                    plot.draw(&style::marker(p, r.style.marker, 4, r.style.colour, false))?;
                }
                let p50: Vec<(f64, f64)> = cases.iter().map(|(s, q)| (*s, q.p50)).collect();
                style::path(plot, p50.clone(), Dash::Solid, r.style.colour.stroke_width(3))?;
                for p in p50 {
                    plot.draw(&style::marker(p, r.style.marker, 5, r.style.colour, true))?;
                }
            }
            Ok(())
        })
    }
}

/// A run's (size, quantiles), by size.
fn sorted(r: &Run) -> Vec<(f64, Quantiles)> {
    let mut v: Vec<(f64, Quantiles)> = r.results.cases.iter().map(|c| (c.size_bytes as f64, quantiles(c))).collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v
}

/// Points a curve keeps at most: a CDF of 100,000 samples reads the same from 2,000 of its quantiles.
const CDF_POINTS: usize = 2_000;

/// One size's curve: its samples' (µs, fraction at or below), and where its p50 and p99 fall.
struct Curve {
    name: String,
    style: style::RunStyle,
    points: Vec<(f64, f64)>,
    marks: [(f64, f64); 2],
}

impl Curve {
    /// The empirical CDF of `c`'s reps (half round trips); `None` for a case without its reps.
    fn of(c: &CaseResult, name: String, style: style::RunStyle) -> Option<Curve> {
        let mut us: Vec<f64> = c.reps.iter().map(|r| r.transfer_ms * 1e3).filter(|v| v.is_finite()).collect();
        if us.is_empty() {
            return None;
        }
        us.sort_by(f64::total_cmp);
        let n = us.len();
        let at = |q: f64| us[((q * n as f64).ceil() as usize).clamp(1, n) - 1];
        let step = n.div_ceil(CDF_POINTS);
        let mut points: Vec<(f64, f64)> = (0..n).step_by(step).map(|i| (us[i], (i + 1) as f64 / n as f64)).collect();
        if points.last().map(|p| p.1) != Some(1.0) {
            points.push((us[n - 1], 1.0));
        }
        Some(Curve { name, style, points, marks: [(at(0.5), 0.5), (at(0.99), 0.99)] })
    }
}

pub struct LatencyCdfFigure {
    curves: Vec<Curve>,
}

impl LatencyCdfFigure {
    /// A curve per size of every run (named by size alone when there is one run); `None` when no case kept reps.
    pub fn new(runs: &[Run]) -> Option<LatencyCdfFigure> {
        let many = runs.len() > 1;
        let mut curves = Vec::new();
        for r in runs {
            let mut cases: Vec<&CaseResult> = r.results.cases.iter().collect();
            cases.sort_by_key(|c| c.size_bytes);
            for c in cases {
                let size = format_size(c.size_bytes);
                let name = if many { format!("{} {size}", r.name) } else { size };
                curves.extend(Curve::of(c, name, style::run_style(curves.len())));
            }
        }
        (!curves.is_empty()).then_some(LatencyCdfFigure { curves })
    }

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
        e.push(LegendEntry {
            text: "markers: each curve's p50 and p99".into(),
            colour: style::INK,
            dash: None,
            marker: None,
            width: 1,
        });
        e
    }
}

impl Figure for LatencyCdfFigure {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>, labels: &mut Labels) -> Drawn<DB> {
        let title = "Latency distribution per message size: half round trip (CDF)";
        let area = super::frame(root, title, self.legend(), labels)?;
        let all = self.curves.iter().flat_map(|c| c.points.iter().map(|p| p.0));
        let lo = all.clone().fold(f64::INFINITY, f64::min);
        let hi = all.fold(0.0, f64::max);
        let (x_range, x_ticks) = axes::log_range(lo, hi);
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
            .x_desc("half round trip, µs (log scale)")
            .y_desc("share of exchanges at or below")
            .x_label_formatter(&us_label)
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
            for &m in &c.marks {
                plot.draw(&style::marker(m, c.style.marker, 5, c.style.colour, true))?;
            }
        }
        Ok(())
    }
}
