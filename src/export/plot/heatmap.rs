//! A cluster run's heatmap: the matrix of links (rows = source rank, columns = destination rank) at the largest
//! size, each cell shaded by its p50 GB/s (white = 0, dark blue = the fastest link, as the colour bar shows). Slow
//! links are outlined in red, bimodal ones in orange, as the legend says. Up to [`FULL_UP_TO_LINKS`] links each
//! cell also carries its number; above, numbers would pile up, so the canvas grows with the ranks instead, tick
//! labels are thinned (the first rank of each host always named) and thick lines frame each host's block.

use super::{style, Drawn, Figure, Labels};
use crate::export::cluster::{slow_rule, Cell, FULL_UP_TO_LINKS};
use crate::plan::sizes::format_size;
use crate::stats::cluster::SizeMedian;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

pub struct HeatmapFigure {
    pub size_bytes: u64,
    pub cells: Vec<Vec<Option<Cell>>>,
    /// `rank@host` per row.
    pub names: Vec<String>,
    /// The host of each rank.
    pub hosts: Vec<String>,
    /// The links compared at this size (what `slow` is judged against).
    pub median: Option<SizeMedian>,
}

const DARK: RGBColor = RGBColor(0, 70, 140);
const RED: RGBColor = RGBColor(200, 30, 30);
const ORANGE: RGBColor = RGBColor(240, 150, 0);
/// Room for the row labels (`rank@host`).
const LEFT: i32 = 170;
/// Room for the colour bar and its labels.
const BAR: i32 = 120;
/// Title and legend above the grid.
const TOP: i32 = 110;
/// A cell that carries its number: wide enough for "12.34 ! ~".
const NUMBER_CELL: i32 = 60;
/// Closest spacing of two column (two row) tick labels.
const COLUMN_GAP: i32 = 40;
const ROW_GAP: i32 = 24;

/// White for 0, `DARK` for the top of the scale.
fn shade(fraction: f64) -> RGBColor {
    let f = fraction.clamp(0.0, 1.0);
    let mix = |dark: u8| (255.0 - (255.0 - dark as f64) * f).round() as u8;
    RGBColor(mix(DARK.0), mix(DARK.1), mix(DARK.2))
}

impl HeatmapFigure {
    fn ranks(&self) -> usize {
        self.cells.len().max(1)
    }

    /// Whether cells carry their numbers: only while there are few enough to read.
    fn numbers(&self) -> bool {
        self.cells.iter().flatten().flatten().count() <= FULL_UP_TO_LINKS
    }

    /// The cell side the canvas is sized for: a number's width, or small enough that 32 ranks fit a screen.
    fn planned_side(&self) -> i32 {
        if self.numbers() {
            NUMBER_CELL
        } else {
            (1100 / self.ranks() as i32).clamp(12, 40)
        }
    }

    /// Where each host's block of ranks starts (ranks in order; a host's ranks are usually contiguous).
    fn block_starts(&self) -> Vec<usize> {
        (0..self.hosts.len()).filter(|i| *i == 0 || self.hosts[*i] != self.hosts[i - 1]).collect()
    }

    /// Whether rank `i`'s tick is labelled when every `k`-th is: the first of each host block always, then every
    /// k-th after it that does not crowd the next block's first.
    fn labelled(&self, i: usize, k: usize, starts: &[usize]) -> bool {
        let start = starts.iter().rev().find(|s| **s <= i).copied().unwrap_or(0);
        let next = starts.iter().find(|s| **s > i).copied().unwrap_or(usize::MAX);
        i == start || ((i - start) % k == 0 && next - i >= k)
    }

    /// Slow cells outlined in red, bimodal ones in orange (inside the red when both), drawn after every fill so a
    /// neighbour's fill never hides one.
    fn outlines<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>, header: i32, side: i32) -> Drawn<DB> {
        for (s, row) in self.cells.iter().enumerate() {
            for (d, c) in row.iter().enumerate().filter_map(|(d, c)| Some((d, (*c)?))) {
                let (x0, y0) = (LEFT + side * d as i32, header + side * s as i32);
                let width = if side >= 16 { 3 } else { 2 };
                if c.marks.slow {
                    area.draw(&Rectangle::new([(x0, y0), (x0 + side, y0 + side)], RED.stroke_width(width)))?;
                }
                if c.marks.bimodal {
                    let inset = if c.marks.slow { width as i32 } else { 0 };
                    let corners = [(x0 + inset, y0 + inset), (x0 + side - inset, y0 + side - inset)];
                    area.draw(&Rectangle::new(corners, ORANGE.stroke_width(width)))?;
                }
            }
        }
        Ok(())
    }

    /// A thick line where one host's block of ranks ends and the next begins, across the whole grid both ways.
    fn host_lines<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        blocks: &[(usize, usize)],
        header: i32,
        side: i32,
    ) -> Drawn<DB> {
        let n = self.ranks() as i32;
        let (g0, g1) = (header, header + side * n);
        for (s, _) in blocks.iter().skip(1) {
            let at = side * *s as i32;
            area.draw(&PathElement::new(vec![(LEFT + at, g0), (LEFT + at, g1)], style::INK.stroke_width(2)))?;
            let (x1, y) = (LEFT + side * n, header + at);
            area.draw(&PathElement::new(vec![(LEFT, y), (x1, y)], style::INK.stroke_width(2)))?;
        }
        Ok(())
    }

    fn colour_bar<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        x: i32,
        y: i32,
        h: i32,
        top: f64,
    ) -> Drawn<DB> {
        let w = 20;
        area.draw(&Text::new("p50 GB/s", (x, y - 34), style::text(style::TICK_PX)))?;
        for i in (0..h).step_by(2) {
            let fill = shade(1.0 - i as f64 / h as f64);
            area.draw(&Rectangle::new([(x, y + i), (x + w, y + (i + 2).min(h))], fill.filled()))?;
        }
        area.draw(&Rectangle::new([(x, y), (x + w, y + h)], style::INK.stroke_width(1)))?;
        let label = style::text(style::TICK_PX).pos(Pos::new(HPos::Left, VPos::Center));
        for f in [1.0, 0.5, 0.0] {
            let ty = y + ((1.0 - f) * h as f64).round() as i32;
            area.draw(&PathElement::new(vec![(x + w, ty), (x + w + 5, ty)], style::INK))?;
            area.draw(&Text::new(format!("{:.2}", top * f), (x + w + 8, ty), label.clone()))?;
        }
        Ok(())
    }
}

impl Figure for HeatmapFigure {
    fn size(&self) -> (u32, u32) {
        let grid = self.planned_side() * self.ranks() as i32;
        let (w, h) = style::SIZE;
        ((LEFT + grid + BAR + 30).max(w as i32) as u32, (TOP + 60 + grid + 20).max(h as i32) as u32)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>, labels: &mut Labels) -> Drawn<DB> {
        let title =
            format!("p50 GB/s per link at {} (rows: source, columns: destination)", format_size(self.size_bytes));
        let outline = |text: String, colour: RGBColor, width: u32| style::LegendEntry {
            text,
            colour,
            dash: Some(style::Dash::Solid),
            marker: None,
            width,
        };
        let legend = vec![
            outline(format!("red outline: {}", slow_rule(self.median)), RED, 3),
            outline("orange outline: bimodal reps".into(), ORANGE, 3),
        ];
        let area = super::frame(root, &title, legend, labels)?;
        let n = self.ranks();
        let numbers = self.numbers();
        let top = self.cells.iter().flatten().flatten().map(|c| c.gbps).fold(0.0, f64::max);
        let starts = self.block_starts();
        let several_hosts = starts.len() > 1;
        let header = if several_hosts { 62i32 } else { 40 };
        let (w, h) = area.dim_in_pixel();
        let side = ((w as i32 - LEFT - BAR).min(h as i32 - header - 20) / n as i32).max(4);
        let (kc, kr) = ((COLUMN_GAP + side - 1) / side, (ROW_GAP + side - 1) / side);
        let (kc, kr) = (kc.max(1) as usize, kr.max(1) as usize);
        let centred = |px: u32| style::text(px).pos(Pos::new(HPos::Center, VPos::Center));
        let tick_px = if kc == 1 && kr == 1 { style::AXIS_PX } else { style::TICK_PX };
        for d in (0..n).filter(|d| self.labelled(*d, kc, &starts)) {
            let x = LEFT + side * d as i32 + side / 2;
            let text = if numbers { format!("→ {d}") } else { d.to_string() };
            area.draw(&Text::new(text, (x, header - 20), centred(tick_px)))?;
        }
        let blocks: Vec<(usize, usize)> =
            starts.iter().enumerate().map(|(b, s)| (*s, starts.get(b + 1).copied().unwrap_or(n))).collect();
        if several_hosts {
            for (s, e) in &blocks {
                let width = side * (e - s) as i32;
                let host = &self.hosts[*s];
                // A host name wider than its block would run into the next one's.
                if host.chars().count() as i32 * 8 <= width {
                    let x = LEFT + side * *s as i32 + width / 2;
                    area.draw(&Text::new(host.clone(), (x, 12), centred(style::TICK_PX)))?;
                }
            }
        }
        for (s, row) in self.cells.iter().enumerate() {
            let y = header + side * s as i32;
            if self.labelled(s, kr, &starts) {
                let name = self.names.get(s).cloned().unwrap_or_else(|| s.to_string());
                // Every row named in full while cells carry numbers; else the first of each host's block, then ranks.
                let name = if numbers || starts.contains(&s) { name } else { s.to_string() };
                let label = style::text(tick_px).pos(Pos::new(HPos::Right, VPos::Center));
                area.draw(&Text::new(name, (LEFT - 10, y + side / 2), label))?;
            }
            for (d, cell) in row.iter().enumerate() {
                let (x0, y0) = (LEFT + side * d as i32, y);
                let corners = [(x0, y0), (x0 + side, y0 + side)];
                let (fill, text) = match cell {
                    _ if s == d => (RGBColor(235, 235, 235), "—".to_string()),
                    None => (WHITE, "·".to_string()),
                    Some(c) => (
                        shade(if top > 0.0 { c.gbps / top } else { 0.0 }),
                        format!("{:.2}{}", c.gbps, crate::export::cluster::mark_text(c.marks)),
                    ),
                };
                area.draw(&Rectangle::new(corners, fill.filled()))?;
                area.draw(&Rectangle::new(corners, style::GRID.stroke_width(1)))?;
                if numbers {
                    let dark_fill = cell.is_some_and(|c| top > 0.0 && c.gbps / top > 0.55);
                    let ink = if dark_fill { WHITE } else { style::INK };
                    let label = centred(style::TICK_PX).color(&ink);
                    area.draw(&Text::new(text, (x0 + side / 2, y0 + side / 2), label))?;
                }
            }
        }
        self.outlines(&area, header, side)?;
        if several_hosts {
            self.host_lines(&area, &blocks, header, side)?;
        }
        let bar_h = (side * n as i32).clamp(120, 400);
        self.colour_bar(&area, LEFT + side * n as i32 + 30, header + 22, bar_h - 22, top)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figure(hosts: &[&str]) -> HeatmapFigure {
        HeatmapFigure {
            size_bytes: 1 << 20,
            cells: vec![vec![None; hosts.len()]; hosts.len()],
            names: hosts.iter().enumerate().map(|(r, h)| format!("{r}@{h}")).collect(),
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            median: None,
        }
    }

    #[test]
    fn thinned_ticks_keep_each_hosts_first_rank_and_never_crowd_the_next_block() {
        let hosts: Vec<&str> = (0..12).map(|r| if r < 5 { "a" } else { "b" }).collect();
        let f = figure(&hosts);
        let starts = f.block_starts();
        assert_eq!(starts, [0, 5]);
        let shown: Vec<usize> = (0..12).filter(|i| f.labelled(*i, 3, &starts)).collect();
        // 3 would crowd 5 (the next block's first): left out.
        assert_eq!(shown, [0, 5, 8, 11]);
        assert_eq!((0..12).filter(|i| f.labelled(*i, 1, &starts)).count(), 12);
    }
}
