//! Figure 3: every rep's bandwidth per size (a strip plot), runs side by side within each size. A bar marks the
//! p50; a bimodal size gets a bar at each mode and a "2 modes" note, so two paths show at a glance. Where the
//! case's attribution named counters, its slow reps are drawn filled and the strongest counter is noted below the
//! strip ("slow: rcvd_seq_err +94/rep vs +1.8"). Notes stack away from their strip until they overprint nothing.

use super::axes::{self, SizeAxis, LOG_GBPS_RATIO};
use super::labels::{stacked, Note};
use super::style::{self, text, Dash, LegendEntry, AXIS_PX, GRID, NOTE_PX, TICK_PX};
use super::{Drawn, Figure, Labels, Run};
use crate::stats::CaseResult;
use plotters::coord::ranged1d::{AsRangedCoord, Ranged, ValueFormatter};
use plotters::coord::{CoordTranslate, Shift};
use plotters::prelude::*;

pub struct RepsFigure<'a> {
    runs: &'a [Run<'a>],
    sizes: SizeAxis,
}

/// Share of a size's slot the runs' strips fill together.
const STRIPS_WIDTH: f64 = 0.8;

impl<'a> RepsFigure<'a> {
    pub fn new(runs: &'a [Run<'a>]) -> RepsFigure<'a> {
        RepsFigure { runs, sizes: super::chart::size_axis(runs) }
    }

    fn legend(&self) -> Vec<LegendEntry> {
        let mut e: Vec<LegendEntry> = self
            .runs
            .iter()
            .map(|r| LegendEntry {
                text: r.name.clone(),
                colour: r.style.colour,
                dash: None,
                marker: Some((r.style.marker, false)),
                width: 1,
            })
            .collect();
        e.push(LegendEntry { text: "p50".into(), colour: style::INK, dash: Some(Dash::Solid), marker: None, width: 3 });
        let attributed = self.runs.iter().any(|r| r.results.cases.iter().any(|c| named_separator(c).is_some()));
        if attributed {
            e.push(LegendEntry {
                text: "filled = slow reps, with the counter that sets them apart".into(),
                colour: style::INK,
                dash: None,
                marker: Some((style::Marker::Circle, true)),
                width: 1,
            });
        }
        let any = self.runs.iter().any(|r| r.results.cases.iter().any(|c| c.derived.bimodal.is_bimodal));
        e.push(LegendEntry {
            text: if any { "2 modes = bimodal size, a bar at each mode" } else { "no size is bimodal" }.into(),
            colour: style::INK,
            dash: None,
            marker: None,
            width: 1,
        });
        e
    }

    /// Centre of run `run`'s strip at size index `i`.
    fn strip_x(&self, i: usize, run: usize) -> f64 {
        let w = STRIPS_WIDTH / self.runs.len() as f64;
        i as f64 - STRIPS_WIDTH / 2.0 + w * (run as f64 + 0.5)
    }

    /// Size `i`'s tick label: "96 MiB", or "96 MiB (1k)" with the token axis.
    fn x_label(&self, i: usize) -> String {
        let Some(&s) = self.sizes.sizes.get(i) else { return String::new() };
        match self.sizes.token_label(s as f64) {
            t if t.is_empty() => SizeAxis::size_label(s as f64),
            t => format!("{} ({t})", SizeAxis::size_label(s as f64)),
        }
    }

    /// Label every size when the widest label fits its slot, else every k-th: neighbouring labels never touch.
    fn label_step<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> usize {
        let n = self.sizes.sizes.len().max(1);
        let widest = (0..n).filter_map(|i| area.estimate_text_size(&self.x_label(i), &text(TICK_PX)).ok()).map(|s| s.0);
        // The plot is the area less the y labels (80 px) and the margins (40 px).
        let slot = (area.dim_in_pixel().0 as f64 - 120.0) / n as f64;
        ((widest.max().unwrap_or(0) as f64 + 12.0) / slot.max(1.0)).ceil().max(1.0) as usize
    }

    fn size_index(&self, size: u64) -> usize {
        self.sizes.sizes.iter().position(|s| *s == size).unwrap_or(0)
    }
}

impl Figure for RepsFigure<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>, labels: &mut Labels) -> Drawn<DB> {
        let title = "Bandwidth of every rep, per size (GB/s = 10^9 B/s)";
        let area = super::frame(root, title, self.legend(), labels)?;
        let reps = || self.runs.iter().flat_map(|r| r.results.cases.iter().flat_map(|c| c.reps.iter().map(|r| r.gbps)));
        let finite = || reps().filter(|v| v.is_finite() && *v > 0.0);
        let (lo, hi) = (finite().fold(f64::INFINITY, f64::min), finite().fold(0.0, f64::max));
        let (lo, hi) = if hi > 0.0 { (lo, hi) } else { (1.0, 1.0) };
        let n = self.sizes.sizes.len();
        // Plain linear x with one tick per size: plotters puts them on whole indexes when asked for n of them.
        let x = -0.5..n as f64 - 0.5;
        if hi > LOG_GBPS_RATIO * lo {
            // Headroom above the fastest rep for a "2 modes" note (log_range adds ×1.3 on its own).
            let (range, ticks) = axes::log_range(lo, hi * 1.6);
            self.draw_chart(&area, x, range.log_scale().with_key_points(ticks), "GB/s per rep (log scale)", labels)
        } else {
            self.draw_chart(&area, x, 0.0..hi * 1.18, "GB/s per rep", labels)
        }
    }
}

impl RepsFigure<'_> {
    fn draw_chart<DB, X, Y>(
        &self,
        area: &DrawingArea<DB, Shift>,
        x: X,
        y: Y,
        y_desc: &str,
        labels: &mut Labels,
    ) -> Drawn<DB>
    where
        DB: DrawingBackend,
        X: AsRangedCoord<Value = f64>,
        X::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
        Y: AsRangedCoord<Value = f64>,
        Y::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
    {
        let mut chart = ChartBuilder::on(area)
            .margin_right(30)
            .margin_left(10)
            .x_label_area_size(60)
            .y_label_area_size(80)
            .margin_top(12)
            .build_cartesian_2d(x, y)?;
        let sizes = &self.sizes;
        let step = self.label_step(area);
        let label = |v: &f64| match v.round() {
            i if (v - i).abs() < 1e-6 && i >= 0.0 && i as usize % step == 0 => self.x_label(i as usize),
            _ => String::new(),
        };
        let x_desc = if sizes.tokens.is_some() { "transfer size (tokens)" } else { "transfer size" };
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(sizes.sizes.len())
            .bold_line_style(GRID)
            .light_line_style(TRANSPARENT)
            .axis_style(style::INK)
            .x_desc(x_desc)
            .y_desc(y_desc)
            .x_label_formatter(&label)
            .y_label_formatter(&|v| axes::number_label(*v))
            .label_style(text(TICK_PX))
            .axis_desc_style(text(AXIS_PX))
            .draw()?;
        self.draw_strips(chart.plotting_area(), labels)
    }

    fn draw_strips<DB: DrawingBackend, CT: CoordTranslate<From = (f64, f64)>>(
        &self,
        plot: &DrawingArea<DB, CT>,
        labels: &mut Labels,
    ) -> Drawn<DB> {
        let w = STRIPS_WIDTH / self.runs.len() as f64;
        for (ri, r) in self.runs.iter().enumerate() {
            for c in &r.results.cases {
                let centre = self.strip_x(self.size_index(c.size_bytes), ri);
                let slow: &[u32] = match (named_separator(c), &c.host.attribution) {
                    (Some(_), Some(a)) => &a.slow_reps,
                    _ => &[],
                };
                for (k, rep) in c.reps.iter().enumerate().filter(|(_, rep)| rep.gbps.is_finite()) {
                    // Golden-ratio jitter: reps spread evenly across the strip, the same way on every render.
                    let jitter = ((k as f64 * 0.618_034).fract() - 0.5) * w * 0.6;
                    let filled = slow.contains(&rep.i);
                    let at = (centre + jitter, rep.gbps);
                    plot.draw(&style::marker(at, r.style.marker, 4, r.style.colour, filled))?;
                    let why = named_separator(c).filter(|_| filled);
                    labels.hover(plot, &at, super::hover::rep(&r.name, c, rep, why.as_deref()));
                }
                self.draw_bars(plot, c, centre, w, r)?;
            }
        }
        // Notes go on after every strip is drawn, in run order, each clear of the notes placed before it.
        for (ri, r) in self.runs.iter().enumerate() {
            for c in &r.results.cases {
                let centre = self.strip_x(self.size_index(c.size_bytes), ri);
                let size = SizeAxis::size_label(c.size_bytes as f64);
                let style = text(NOTE_PX).color(&r.style.colour);
                let marker = Some(r.style.marker);
                if c.derived.bimodal.is_bimodal {
                    let note = Note {
                        what: format!("{}: 2 modes at", r.name),
                        at: size.clone(),
                        colour: r.style.colour,
                        dash: None,
                        marker,
                    };
                    labels.place(
                        plot,
                        (centre, c.stats.gbps.max),
                        "2 modes",
                        &style,
                        |_, h, _| stacked(true, 10, h, 4),
                        note,
                    )?;
                }
                if let Some(text) = named_separator(c) {
                    let note = Note {
                        what: format!("{}, {size}:", r.name),
                        at: text.clone(),
                        colour: r.style.colour,
                        dash: None,
                        marker,
                    };
                    labels.place(
                        plot,
                        (centre, c.stats.gbps.min),
                        &text,
                        &style,
                        |_, h, _| stacked(false, 10, h, 4),
                        note,
                    )?;
                }
            }
        }
        Ok(())
    }

    /// The p50 bar, or one bar per mode on a bimodal size.
    fn draw_bars<DB: DrawingBackend, CT: CoordTranslate<From = (f64, f64)>>(
        &self,
        plot: &DrawingArea<DB, CT>,
        c: &CaseResult,
        centre: f64,
        w: f64,
        r: &Run,
    ) -> Drawn<DB> {
        let half = w * 0.42;
        let bars =
            if c.derived.bimodal.is_bimodal { c.derived.bimodal.modes_gbps.clone() } else { vec![c.stats.gbps.p50] };
        for y in bars {
            plot.draw(&PathElement::new(vec![(centre - half, y), (centre + half, y)], r.style.colour.stroke_width(3)))?;
        }
        Ok(())
    }
}

/// The note under an attributed case's strip: its strongest counter, slow vs fast per rep.
fn named_separator(c: &CaseResult) -> Option<String> {
    let top = c.host.attribution.as_ref()?.counters.first()?;
    Some(format!("slow: {} +{} vs +{}/rep", top.name, per_rep(top.slow_per_rep), per_rep(top.fast_per_rep)))
}

fn per_rep(v: f64) -> String {
    if v >= 100.0 || v == v.round() {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}
