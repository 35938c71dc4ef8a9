//! The figures of a latency run (`kvxfer latency`, `config.mode = "latency"`), whose cases are message sizes and
//! whose reps are half round trips:
//! - `latency-vs-size`: p50 and p99 vs size, log-log, with the min–max band, a series per run;
//! - `latency-cdf`: the distribution of each size's half round trips, a curve per size (and run), on a log µs axis,
//!   so a tail or a second mode shows as the curve's shape rather than as one more percentile.

use super::axes::{self, SizeAxis};
use super::cdf::{CdfCurve, CdfFigure};
use super::style::{self, Dash, LegendEntry, Marker};
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
                let us = |v: f64| super::hover::ms(v / 1e3);
                for (s, q) in &cases {
                    let text = format!(
                        "{} · {}: p50 {}, p99 {} (min {}, max {})",
                        r.name,
                        format_size(*s as u64),
                        us(q.p50),
                        us(q.p99),
                        us(q.min),
                        us(q.max)
                    );
                    labels.hover(plot, &(*s, q.p50), text.clone());
                    labels.hover(plot, &(*s, q.p99), text);
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

/// A curve per size of every run (named by size alone when there is one run), its reps' half round trips in µs;
/// `None` when no case kept reps.
pub fn latency_cdf(runs: &[Run]) -> Option<CdfFigure> {
    let many = runs.len() > 1;
    let mut curves = Vec::new();
    for r in runs {
        let mut cases: Vec<&CaseResult> = r.results.cases.iter().collect();
        cases.sort_by_key(|c| c.size_bytes);
        for c in cases {
            let size = format_size(c.size_bytes);
            let name = if many { format!("{} {size}", r.name) } else { size };
            let us = c.reps.iter().map(|r| r.transfer_ms * 1e3).collect();
            curves.extend(CdfCurve::of(us, name, style::run_style(curves.len())));
        }
    }
    (!curves.is_empty()).then(|| CdfFigure {
        title: "Latency distribution per message size: half round trip (CDF)".into(),
        x_desc: "half round trip, µs (log scale)".into(),
        y_desc: "share of exchanges at or below",
        note: "markers: each curve's p50 and p99".into(),
        x_label: us_label,
        unit: "µs",
        curves,
    })
}
