//! The chart frame shared by the figures against size: a log size axis labelled in binary units at the measured
//! sizes, tokens on the top axis when known, a light grid, and the y axis the figure chooses.

use super::axes::SizeAxis;
use super::style::{self, text, AXIS_PX, GRID, TICK_PX};
use super::{Drawn, Run};
use crate::plan::sizes::format_size;
use plotters::coord::combinators::WithKeyPoints;
use plotters::coord::ranged1d::{AsRangedCoord, Ranged, ValueFormatter};
use plotters::coord::{cartesian::Cartesian2d, combinators::LogCoord, Shift};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

pub type SizeCoord = WithKeyPoints<LogCoord<f64>>;

/// The size axis shared by the size-vs figures.
pub fn size_axis(runs: &[Run]) -> SizeAxis {
    let cases = runs.iter().flat_map(|r| r.results.cases.iter());
    SizeAxis::new(cases.map(|c| (c.size_bytes, c.tokens, c.bytes_per_token)))
}

/// "tokens of qwen3-30b-a3b (96 KiB per token, k = 1024)" when every run names the same model.
fn tokens_desc(runs: &[Run], bytes_per_token: Option<u64>) -> String {
    let per = bytes_per_token.map(|b| format!("{} per token, ", format_size(b))).unwrap_or_default();
    let first = runs.first().and_then(|r| r.results.config.model.clone());
    match first {
        Some(m) if runs.iter().all(|r| r.results.config.model.as_deref() == Some(m.as_str())) => {
            format!("tokens of {m} ({per}k = 1024)")
        }
        _ => format!("tokens ({per}k = 1024)"),
    }
}

/// The plotting area of a size chart, in data coordinates (size, y).
pub type SizePlot<DB, Y> = DrawingArea<DB, Cartesian2d<SizeCoord, Y>>;

/// Draw the axes and grid on `area`, then the figure's content (`draw`) in data coordinates.
pub fn size_chart<DB, Y>(
    area: &DrawingArea<DB, Shift>,
    sizes: &SizeAxis,
    runs: &[Run],
    y: Y,
    y_desc: &str,
    y_label: &dyn Fn(&f64) -> String,
    draw: impl FnOnce(&SizePlot<DB, Y::CoordDescType>) -> Drawn<DB>,
) -> Drawn<DB>
where
    DB: DrawingBackend,
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let ticks = sizes.ticks();
    let x = sizes.range().log_scale().with_key_points(ticks.clone());
    // The token axis is drawn by hand above the plot: plotters' secondary axis would repeat the size labels there.
    let top = if sizes.tokens.is_some() { 58 } else { 12 };
    let mut chart = ChartBuilder::on(area)
        .margin_right(30)
        .margin_left(10)
        .margin_top(top)
        .x_label_area_size(60)
        .y_label_area_size(80)
        .build_cartesian_2d(x, y)?;
    chart
        .configure_mesh()
        .bold_line_style(GRID)
        .light_line_style(TRANSPARENT)
        .axis_style(style::INK)
        .x_desc(sizes.desc)
        .y_desc(y_desc)
        .x_label_formatter(&|v| SizeAxis::size_label(*v))
        .y_label_formatter(y_label)
        .label_style(text(TICK_PX))
        .axis_desc_style(text(AXIS_PX))
        .draw()?;
    draw(chart.plotting_area())?;
    if sizes.tokens.is_some() {
        let y_top = chart.y_range().end;
        let base = area.get_base_pixel();
        let (xs, ys) = chart.plotting_area().get_pixel_range();
        let y = ys.start - base.1;
        area.draw(&PathElement::new(vec![(xs.start - base.0, y), (xs.end - base.0, y)], style::INK))?;
        let at = Pos::new(HPos::Center, VPos::Bottom);
        for v in &ticks {
            let x = chart.backend_coord(&(*v, y_top)).0 - base.0;
            area.draw(&PathElement::new(vec![(x, y), (x, y - 5)], style::INK))?;
            area.draw(&Text::new(sizes.token_label(*v), (x, y - 8), text(TICK_PX).pos(at)))?;
        }
        let mid = (xs.start + xs.end) / 2 - base.0;
        area.draw(&Text::new(
            tokens_desc(runs, sizes.bytes_per_token),
            (mid, y - 8 - TICK_PX as i32 - 8),
            text(AXIS_PX).pos(at),
        ))?;
    }
    Ok(())
}
