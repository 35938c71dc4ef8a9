//! A cluster run's heatmap: the matrix of links (rows = source rank, columns = destination rank) at the largest
//! size, each cell shaded by its p50 GB/s (white = 0, dark blue = the fastest link) and labelled with the number;
//! outliers are outlined in red and marked `!`.

use super::{style, Drawn, Figure, Labels};
use crate::export::cluster::Cell;
use crate::plan::sizes::format_size;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

pub struct HeatmapFigure {
    pub size_bytes: u64,
    pub cells: Vec<Vec<Option<Cell>>>,
    /// `rank@host` per row.
    pub names: Vec<String>,
}

const DARK: RGBColor = RGBColor(0, 70, 140);
const RED: RGBColor = RGBColor(200, 30, 30);

/// White for 0, `DARK` for the top of the scale.
fn shade(fraction: f64) -> RGBColor {
    let f = fraction.clamp(0.0, 1.0);
    let mix = |dark: u8| (255.0 - (255.0 - dark as f64) * f).round() as u8;
    RGBColor(mix(DARK.0), mix(DARK.1), mix(DARK.2))
}

impl Figure for HeatmapFigure {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>, labels: &mut Labels) -> Drawn<DB> {
        let title =
            format!("p50 GB/s per link at {} (rows: source, columns: destination)", format_size(self.size_bytes));
        let area = super::frame(root, &title, Vec::new(), labels)?;
        let n = self.cells.len().max(1);
        let top = self.cells.iter().flatten().flatten().map(|c| c.gbps).fold(0.0, f64::max);
        let (w, h) = area.dim_in_pixel();
        let left = 170i32;
        let header = 40i32;
        let side = ((w as i32 - left - 30).min(h as i32 - header - 20) / n as i32).max(10);
        let centred = |px: u32| style::text(px).pos(Pos::new(HPos::Center, VPos::Center));
        for d in 0..n {
            let x = left + side * d as i32 + side / 2;
            area.draw(&Text::new(format!("→ {d}"), (x, header / 2), centred(style::AXIS_PX)))?;
        }
        for (s, row) in self.cells.iter().enumerate() {
            let y = header + side * s as i32;
            let name = self.names.get(s).cloned().unwrap_or_else(|| s.to_string());
            let label = style::text(style::AXIS_PX).pos(Pos::new(HPos::Right, VPos::Center));
            area.draw(&Text::new(name, (left - 10, y + side / 2), label))?;
            for (d, cell) in row.iter().enumerate() {
                let (x0, y0) = (left + side * d as i32, y);
                let corners = [(x0, y0), (x0 + side, y0 + side)];
                let (fill, text) = match cell {
                    _ if s == d => (RGBColor(235, 235, 235), "—".to_string()),
                    None => (WHITE, "·".to_string()),
                    Some(c) => (
                        shade(if top > 0.0 { c.gbps / top } else { 0.0 }),
                        format!("{:.2}{}", c.gbps, if c.outlier { " !" } else { "" }),
                    ),
                };
                area.draw(&Rectangle::new(corners, fill.filled()))?;
                let outlier = cell.is_some_and(|c| c.outlier);
                let edge = if outlier { RED.stroke_width(3) } else { style::GRID.stroke_width(1) };
                area.draw(&Rectangle::new(corners, edge))?;
                let dark_fill = cell.is_some_and(|c| top > 0.0 && c.gbps / top > 0.55);
                let ink = if dark_fill { WHITE } else { style::INK };
                let label = centred(style::TICK_PX).color(&ink);
                area.draw(&Text::new(text, (x0 + side / 2, y0 + side / 2), label))?;
            }
        }
        Ok(())
    }
}
