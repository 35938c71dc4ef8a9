//! `--fig DIR`: figures drawn from results, each as PNG and SVG, every run a series named by its label:
//! - `time-vs-size`: p50 transfer time vs size, log-log, with the min–max band;
//! - `bandwidth-vs-size`: p50 and max GB/s vs size, each run's ceiling, and the user's `--line`s;
//! - `reps-bandwidth`: every rep's GB/s per size (strip plot), bimodal sizes marked;
//! - `bandwidth-over-time`, when a run recorded intervals (`--duration … --interval …`): GB/s per interval, a
//!   series per run and size;
//! - a latency run (`kvxfer latency`): `latency-vs-size` (p50 and p99, log-log, min–max band) and `latency-cdf`
//!   (each size's distribution) in place of the three above (see `latency`);
//! - a cluster run: `cluster-heatmap` (p50 GB/s per link at the largest size), and the three above with one
//!   series per link (`src→dst`; above 64 links, the 10 slowest);
//! - a replay (`kvxfer replay`): `replay-latency-cdf`, `replay-latency-vs-load` and a `replay-timeline-<load>` per
//!   load, drawn from its `replay` section (see `replay`).
//!
//! Runs differ by colour, marker and dash, so the figures still read in greyscale; reference lines are grey, a colour
//! no run has. Legends sit above the plot, and say what every line and mark is. Labels on a plot never overprint each
//! other: one that finds no free place is named in the legend instead (see `labels`). The token axis is drawn only
//! when every run has the same bytes per token, so it is true for every series.

mod axes;
mod bandwidth;
mod cdf;
mod chart;
mod heatmap;
mod hover;
mod intervals;
mod labels;
mod latency;
mod raster;
mod replay;
mod replay_timeline;
mod reps;
mod style;

/// The bundled font the figures' text is measured and drawn with.
pub use style::FONT_BYTES;
mod time;

use crate::export::json::Results;
use crate::stats::{ceiling, Ceiling};
use anyhow::Result;
use image::ImageEncoder;
pub use labels::HoverPoint;
use labels::Labels;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};
use style::RunStyle;

/// What the figure functions return: plotters' error of whichever backend draws.
type Drawn<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// A horizontal reference line on the bandwidth figure (`--line "NIC 25 GB/s=25"`).
#[derive(Debug, Clone, PartialEq)]
pub struct RefLine {
    pub label: String,
    pub gbps: f64,
}

/// One run as the figures see it.
pub struct Run<'a> {
    pub name: String,
    pub results: &'a Results,
    pub style: RunStyle,
    pub ceiling: Option<Ceiling>,
}

/// Parse every `--line LABEL=GBPS`; the value is after the last `=`, so labels may contain `=`.
pub fn parse_lines(lines: &[String]) -> Result<Vec<RefLine>> {
    lines
        .iter()
        .map(|l| {
            let bad = |why: &str| {
                crate::error::usage(format!("--line {l:?}: {why}; expected LABEL=GBPS, e.g. --line \"NIC 25 GB/s=25\""))
            };
            let (label, value) = l.rsplit_once('=').ok_or_else(|| bad("no '='"))?;
            let label = label.trim();
            if label.is_empty() {
                return Err(bad("the label is empty"));
            }
            let gbps: f64 = value.trim().parse().map_err(|_| bad(&format!("{:?} is not a number", value.trim())))?;
            if !(gbps.is_finite() && gbps > 0.0) {
                return Err(bad("the bandwidth must be a positive number of GB/s"));
            }
            Ok(RefLine { label: label.to_string(), gbps })
        })
        .collect()
}

/// Make sure `--fig DIR` can be written: create DIR when its parent exists (a missing parent is a usage error).
pub fn prepare_dir(dir: &Path) -> Result<()> {
    if dir.is_dir() {
        return crate::export::check_writable("--fig", &dir.join("figure.png"));
    }
    if dir.exists() {
        crate::bail_usage!("--fig {}: is a file, not a directory; give a directory for the figures", dir.display());
    }
    let parent = dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !parent.is_dir() {
        crate::bail_usage!(
            "--fig {}: directory {} does not exist; create it first (kvxfer creates only the last level)",
            dir.display(),
            parent.display()
        );
    }
    std::fs::create_dir(dir)
        .map_err(|e| crate::error::usage(format!("--fig {}: cannot create the directory: {e}", dir.display())))
}

/// Draw every figure of these runs (named, in order) into `sink`; returns the files written. Latency runs have
/// their own figures, drawn beside the others' when a report names both.
pub fn write_figures(runs: &[(String, &Results)], sink: &mut Sink, lines: &[RefLine]) -> Result<Vec<PathBuf>> {
    style::register();
    let drawn: Vec<&(String, &Results)> = runs.iter().filter(|(_, r)| !r.cases.is_empty()).collect();
    if drawn.is_empty() {
        // A page says so in its own words; a directory of no figures is a mistake worth a usage error.
        let Sink::Dir(dir) = sink else { return Ok(Vec::new()) };
        crate::bail_usage!("--fig {}: no run has a completed size to draw", dir.display());
    }
    let (latency_runs, transfer_runs): (Vec<_>, Vec<_>) = drawn.into_iter().partition(|(_, r)| latency::is_latency(r));
    let mut written = Vec::new();
    let transfer_runs = styled(&transfer_runs);
    if !transfer_runs.is_empty() {
        written.extend(save(&time::TimeFigure::new(&transfer_runs), sink, "time-vs-size")?);
        written.extend(save(&bandwidth::BandwidthFigure::new(&transfer_runs, lines), sink, "bandwidth-vs-size")?);
        written.extend(save(&reps::RepsFigure::new(&transfer_runs), sink, "reps-bandwidth")?);
        if let Some(fig) = intervals::IntervalsFigure::new(&transfer_runs) {
            written.extend(save(&fig, sink, "bandwidth-over-time")?);
        }
    }
    let latency_runs = styled(&latency_runs);
    if !latency_runs.is_empty() {
        written.extend(save(&latency::LatencySizeFigure::new(&latency_runs), sink, "latency-vs-size")?);
        if let Some(fig) = latency::latency_cdf(&latency_runs) {
            written.extend(save(&fig, sink, "latency-cdf")?);
        }
    }
    Ok(written)
}

/// The runs as the figures see them, each with its style by its place among them.
fn styled<'a>(runs: &[&'a (String, &'a Results)]) -> Vec<Run<'a>> {
    runs.iter()
        .enumerate()
        .map(|(i, (name, r))| Run {
            name: name.clone(),
            results: r,
            style: style::run_style(i),
            ceiling: ceiling(&r.cases),
        })
        .collect()
}

/// `--fig`: draw the series (named, in order) into `dir` and name every file written on stderr.
pub fn draw_series(series: &[(String, Results)], sink: &mut Sink, lines: &[RefLine]) -> Result<()> {
    let named: Vec<(String, &Results)> = series.iter().map(|(n, r)| (n.clone(), r)).collect();
    for f in write_figures(&named, sink, lines)? {
        crate::errln!("figure: {}", f.display());
    }
    Ok(())
}

/// `--fig` of replays (named, in order): each one's figures, named by their file's stem in front when there are
/// several, and every file written named on stderr.
pub fn draw_replays(replays: &[(String, &crate::stats::replay::ReplayJson)], sink: &mut Sink) -> Result<()> {
    style::register();
    let mut written = Vec::new();
    for (name, r) in replays {
        let prefix = if replays.len() > 1 { format!("{name}-") } else { String::new() };
        written.extend(replay::write(r, sink, &prefix)?);
    }
    if written.is_empty() && matches!(sink, Sink::Dir(_)) {
        crate::errln!("figures: none drawn, no load of the replay moved a request");
    }
    for f in written {
        crate::errln!("figure: {}", f.display());
    }
    Ok(())
}

/// `--fig` of a cluster run: the heatmap of its links, and the per-link figures (one series per `src→dst`).
pub fn draw_cluster(results: &Results, sink: &mut Sink, lines: &[RefLine]) -> Result<()> {
    let Some(cl) = &results.cluster else { return draw_series(&results.figure_series(), sink, lines) };
    style::register();
    let Some((size_bytes, cells)) = super::cluster::matrix_cells(results, cl.world_size) else {
        crate::errln!("figures: none drawn, no flow completed");
        return Ok(());
    };
    // A page draws its own heatmap from the same cells, one element per link so a reader can point at it.
    if let Sink::Dir(_) = sink {
        let names = cl.ranks.iter().map(super::cluster::rank_name).collect();
        let hosts = cl.ranks.iter().map(|e| e.host.clone()).collect();
        let median = crate::stats::cluster::SizeMedian::at_size(&results.cases, size_bytes);
        let heatmap = heatmap::HeatmapFigure { size_bytes, cells, names, hosts, median };
        for f in save(&heatmap, sink, "cluster-heatmap")? {
            crate::errln!("figure: {}", f.display());
        }
    }
    let mut seen = std::collections::HashSet::new();
    let mut links: Vec<(usize, usize)> = Vec::new();
    for f in results.cases.iter().filter_map(|c| c.cluster.as_ref()) {
        if seen.insert((f.src.rank, f.dst.rank)) {
            links.push((f.src.rank, f.dst.rank));
        }
    }
    // Hundreds of series would be one smear with a legend longer than the plot: past the full text's bound, the
    // slowest links at the largest size stand for the rest.
    if !super::cluster::full(links.len()) {
        let shown = super::cluster::summary::SLOWEST;
        crate::errln!(
            "figures: one series per link for the {shown} slowest of {} links at the largest size",
            links.len()
        );
        links = crate::stats::cluster::slowest(&results.cases, size_bytes, shown)
            .into_iter()
            .filter_map(|i| results.cases[i].cluster.as_ref().map(|f| (f.src.rank, f.dst.rank)))
            .collect();
    }
    let series: Vec<(String, Results)> = links
        .into_iter()
        .map(|(s, d)| {
            let of_link =
                results.cases.iter().filter(|c| c.cluster.as_ref().is_some_and(|f| (f.src.rank, f.dst.rank) == (s, d)));
            let mut r = results.with_cases(of_link.cloned().collect());
            r.cluster = None;
            (format!("{s}→{d}"), r)
        })
        .collect();
    draw_series(&series, sink, lines)
}

/// Where figures go: PNG and SVG files in a directory (`--fig`), or SVG text kept for a page (`--html`), so the
/// page and the files draw from one description of each figure.
pub enum Sink<'a> {
    Dir(&'a Path),
    Page(&'a mut Vec<PageFigure>),
}

/// One figure as a page inlines it: its file stem (`bandwidth-vs-size`), its SVG, and its points' words in the
/// SVG's pixels, for the page to show on hover.
pub struct PageFigure {
    pub stem: String,
    pub svg: String,
    pub hover: Vec<labels::HoverPoint>,
}

/// A figure that draws on any plotters backend, so one description gives both PNG and SVG. Its labels on the plot
/// go through `labels`, whose notes its legend shows.
trait Figure {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>, labels: &mut Labels) -> Drawn<DB>;

    /// The canvas in pixels; a figure whose content grows (a heatmap of many ranks) asks for more.
    fn size(&self) -> (u32, u32) {
        style::SIZE
    }
}

/// The legend notes of the labels `fig` cannot place: drawn on a backend that draws nothing, with each pass's new
/// notes in the next pass's legend (which takes room from the plot, so more may drop), until no new one comes. The
/// notes only grow and each names one of the figure's finitely many labels, so this ends.
fn settle(fig: &impl Figure) -> Vec<labels::Note> {
    let mut notes = Vec::new();
    loop {
        let mut labels = Labels::with_notes(notes.clone());
        let root = raster::TextFix::new(raster::Measure(fig.size()), style::FONT_BYTES, raster::TextMode::Svg)
            .into_drawing_area();
        // The measuring backend cannot fail; a figure that does fails again when drawn for real, and says so there.
        if fig.draw(&root, &mut labels).is_err() {
            return notes;
        }
        let new = labels.new_notes();
        if new.is_empty() {
            return notes;
        }
        notes.extend(new);
    }
}

/// Render `fig` into `sink`: as `dir/stem.png` and `dir/stem.svg`, each written whole or not at all (returned), or
/// as SVG text kept for a page (nothing returned).
fn save(fig: &impl Figure, sink: &mut Sink, stem: &str) -> Result<Vec<PathBuf>> {
    let notes = settle(fig);
    let dir = match sink {
        Sink::Dir(dir) => *dir,
        Sink::Page(figures) => {
            let (svg, hover) = svg_text(fig, notes).map_err(|e| anyhow::anyhow!("drawing the figure {stem}: {e}"))?;
            figures.push(PageFigure { stem: stem.to_string(), svg, hover });
            return Ok(Vec::new());
        }
    };
    let png = dir.join(format!("{stem}.png"));
    // Drawn in memory and encoded here, so writing it fails as any results file does: one line naming the file
    // and the system's reason (a full disk), never the image library's nested error values.
    let (w, h) = fig.size();
    let mut pixels = vec![0u8; w as usize * h as usize * 3];
    {
        let backend = raster::TextFix::new(
            BitMapBackend::with_buffer(&mut pixels, (w, h)),
            style::FONT_BYTES,
            raster::TextMode::Raster,
        );
        let root = backend.into_drawing_area();
        let mut labels = Labels::with_notes(notes.clone());
        fig.draw(&root, &mut labels).map_err(|e| anyhow::anyhow!("drawing {}: {e}", png.display()))?;
        root.present().map_err(|e| anyhow::anyhow!("drawing {}: {e}", png.display()))?;
    }
    let mut encoded = Vec::new();
    image::codecs::png::PngEncoder::new(&mut encoded)
        .write_image(&pixels, w, h, image::ColorType::Rgb8)
        .map_err(|e| anyhow::anyhow!("encoding {}: {e}", png.display()))?;
    crate::export::write_atomic(&png, &encoded)?;

    let svg = dir.join(format!("{stem}.svg"));
    let (text, _) = svg_text(fig, notes).map_err(|e| anyhow::anyhow!("drawing {}: {e}", svg.display()))?;
    crate::export::write_atomic(&svg, text.as_bytes())?;
    Ok(vec![png, svg])
}

/// `fig` as SVG text, with the labels that found no place on the plot in its legend (`notes`), and the words of
/// its points.
fn svg_text(fig: &impl Figure, notes: Vec<labels::Note>) -> Result<(String, Vec<labels::HoverPoint>), String> {
    let mut text = String::new();
    let mut labels = Labels::with_notes(notes);
    {
        let backend = raster::TextFix::new(
            SVGBackend::with_string(&mut text, fig.size()),
            style::FONT_BYTES,
            raster::TextMode::Svg,
        );
        let root = backend.into_drawing_area();
        fig.draw(&root, &mut labels).map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok((text, labels.into_hover()))
}

/// White background, the title, and the legend band (`legend`, then the notes of labels not placed on the plot);
/// returns the area left for the chart.
fn frame<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    mut legend: Vec<style::LegendEntry>,
    labels: &Labels,
) -> Result<DrawingArea<DB, Shift>, DrawingAreaErrorKind<DB::ErrorType>> {
    legend.extend(labels.legend_entries());
    root.fill(&WHITE)?;
    let (w, _) = root.dim_in_pixel();
    let title_style = style::text(style::TITLE_PX).pos(plotters::style::text_anchor::Pos::new(
        plotters::style::text_anchor::HPos::Center,
        plotters::style::text_anchor::VPos::Top,
    ));
    root.draw(&Text::new(title.to_string(), (w as i32 / 2, 10), title_style))?;
    let (_, rest) = root.split_vertically(16 + style::TITLE_PX);
    let (legend_area, chart) = rest.split_vertically(style::legend_height(&rest, &legend));
    style::draw_legend(&legend_area, &legend)?;
    Ok(chart)
}

/// The legend entries naming each run (colour, marker, dash).
fn run_entries(runs: &[Run]) -> Vec<style::LegendEntry> {
    runs.iter()
        .map(|r| style::LegendEntry {
            text: r.name.clone(),
            colour: r.style.colour,
            dash: Some(r.style.dash),
            marker: Some((r.style.marker, true)),
            width: 3,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_lines_parse_and_reject_clearly() {
        let ok = parse_lines(&["NIC 25 GB/s=25".into(), "a=b=1.5".into()]).unwrap();
        assert_eq!(ok[0], RefLine { label: "NIC 25 GB/s".into(), gbps: 25.0 });
        assert_eq!(ok[1], RefLine { label: "a=b".into(), gbps: 1.5 });
        for bad in ["25", "=25", "NIC=", "NIC=fast", "NIC=-3", "NIC=inf"] {
            let e = parse_lines(&[bad.into()]).unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2, "{bad}");
            assert!(e.to_string().contains("LABEL=GBPS"), "{e}");
        }
    }

    #[test]
    fn the_bundled_font_loads_and_covers_labels() {
        use ab_glyph::Font;
        let f = ab_glyph::FontRef::try_from_slice(style::FONT_BYTES).expect("the bundled font parses");
        for c in "GB/s µs → – × 0123456789 MiB GiB".chars() {
            assert_ne!(f.glyph_id(c).0, 0, "{c:?} is missing from the bundled font");
        }
        assert!(plotters::style::register_font("kvxfer-test", plotters::style::FontStyle::Normal, style::FONT_BYTES)
            .is_ok());
    }
}
