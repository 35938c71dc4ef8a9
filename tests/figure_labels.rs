//! Figures of several results files, read back from the SVG the real binary wrote: no two texts overprint each
//! other (every text's box from its position, anchor and size, its width measured with the bundled font), the
//! token axis is drawn only when it is true for every series, and no series looks like a reference line.

mod common;
use ab_glyph::{Font, FontRef, ScaleFont};
use std::path::{Path, PathBuf};

const FIGURES: [&str; 3] = ["time-vs-size", "bandwidth-vs-size", "reps-bandwidth"];

fn result(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("results").join(name).display().to_string()
}

fn scratch(name: &str) -> PathBuf {
    // Under target/tmp, not the system temp dir: the last run's figures stay there for looking at.
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("figure-labels-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `kvxfer report FILES… --fig DIR EXTRA…`; the figures' directory.
fn report(name: &str, files: &[String], extra: &[&str]) -> PathBuf {
    let dir = scratch(name).join("figs");
    let mut args: Vec<&str> = vec!["report"];
    args.extend(files.iter().map(|s| s.as_str()));
    args.extend(["--fig", dir.to_str().unwrap()]);
    args.extend(extra);
    let out = common::output_logged(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    dir
}

fn svg(dir: &Path, figure: &str) -> String {
    std::fs::read_to_string(dir.join(format!("{figure}.svg"))).unwrap()
}

/// One SVG element as plotters writes it: its tag, attributes, and text content (for `<text>`).
#[derive(Debug)]
struct Element {
    tag: String,
    attrs: Vec<(String, String)>,
    text: String,
}

impl Element {
    fn attr(&self, name: &str) -> Option<&str> {
        self.attrs.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
    fn num(&self, name: &str) -> f64 {
        self.attr(name).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{name} of {self:?}"))
    }
}

/// The elements of a plotters SVG, in document order (one element per tag; `<text>` holds its content).
fn elements(svg: &str) -> Vec<Element> {
    let mut out = Vec::new();
    let mut rest = svg;
    while let Some(start) = rest.find('<') {
        rest = &rest[start + 1..];
        let end = rest.find('>').expect("a closed tag");
        let tag_text = &rest[..end];
        rest = &rest[end + 1..];
        if tag_text.starts_with('/') || tag_text.starts_with('?') || tag_text.starts_with('!') {
            continue;
        }
        let (tag, mut attrs_text) = tag_text.split_once(' ').unwrap_or((tag_text, ""));
        let mut attrs = Vec::new();
        while let Some(eq) = attrs_text.find("=\"") {
            let name = attrs_text[..eq].trim().to_string();
            let after = &attrs_text[eq + 2..];
            let close = after.find('"').expect("a closed attribute");
            attrs.push((name, after[..close].to_string()));
            attrs_text = &after[close + 1..];
        }
        let mut text = String::new();
        if tag == "text" {
            let close = rest.find("</text>").expect("a closed text");
            text = unescape(rest[..close].trim());
            rest = &rest[close..];
        }
        out.push(Element { tag: tag.to_string(), attrs, text });
    }
    out
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&apos;", "'").replace("&amp;", "&")
}

/// A text's box in pixels: (x0, y0, x1, y1).
type Box = (f64, f64, f64, f64);

/// Advance width of `text` in the bundled font at an em of `em` pixels.
fn width(font: &FontRef, em: f64, text: &str) -> f64 {
    let height = (font.ascent_unscaled() - font.descent_unscaled()) / font.units_per_em().unwrap();
    let sf = font.as_scaled(ab_glyph::PxScale::from(em as f32 * height));
    let (mut pen, mut prev) = (0f32, None);
    for c in text.chars() {
        let id = sf.glyph_id(c);
        if let Some(p) = prev {
            pen += sf.kern(p, id);
        }
        pen += sf.h_advance(id);
        prev = Some(id);
    }
    pen as f64
}

/// Where a `<text>` is drawn: one em tall, placed by its anchor (`dy` 0.76em = top, 0.5ex = middle, -0.5ex =
/// bottom at y), turned by a `rotate(270, x, y)` when it has one.
fn text_box(font: &FontRef, t: &Element) -> Box {
    let (x, y, em) = (t.num("x"), t.num("y"), t.num("font-size"));
    let w = width(font, em, &t.text);
    let (left, right) = match t.attr("text-anchor") {
        Some("middle") => (-w / 2.0, w / 2.0),
        Some("end") => (-w, 0.0),
        _ => (0.0, w),
    };
    let (top, bottom) = match t.attr("dy") {
        Some("0.76em") => (0.0, em),
        Some("0.5ex") => (-em / 2.0, em / 2.0),
        Some("-0.5ex") => (-em, 0.0),
        other => panic!("unexpected dy {other:?} on {t:?}"),
    };
    match t.attr("transform") {
        None => (x + left, y + top, x + right, y + bottom),
        // Turned a quarter anticlockwise: the text runs up from (x, y) and its top faces left.
        Some(r) if r.starts_with("rotate(270") => (x + top, y - right, x + bottom, y - left),
        Some(r) => panic!("unexpected transform {r}"),
    }
}

/// Every pair of texts whose boxes overlap (touching edges do not count).
fn overlaps(svg: &str) -> Vec<String> {
    let font = FontRef::try_from_slice(include_bytes!("../assets/fonts/NotoSans-kvxfer-subset.ttf")).unwrap();
    let texts: Vec<(Element, Box)> = elements(svg)
        .into_iter()
        .filter(|e| e.tag == "text" && !e.text.is_empty())
        .map(|t| {
            let b = text_box(&font, &t);
            (t, b)
        })
        .collect();
    let mut out = Vec::new();
    for (i, (a, ab)) in texts.iter().enumerate() {
        for (b, bb) in &texts[i + 1..] {
            let apart = ab.2 <= bb.0 || bb.2 <= ab.0 || ab.3 <= bb.1 || bb.3 <= ab.1;
            if !apart {
                out.push(format!("{:?} at {ab:.0?} overlaps {:?} at {bb:.0?}", a.text, b.text));
            }
        }
    }
    out
}

/// A second run of the TCP loopback file, as a re-run on the same host would be: the same bimodal sizes.
fn rerun(dir: &Path) -> String {
    let mut r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(result("tcp-loopback.json")).unwrap()).unwrap();
    r["label"] = "TCP loopback, run 2".into();
    let path = dir.join("tcp-rerun.json");
    std::fs::write(&path, serde_json::to_vec(&r).unwrap()).unwrap();
    path.display().to_string()
}

/// The plot's labels (texts in a run's or the reference colour, below the legend) that a run's p50 line (a
/// 3-pixel-wide polyline of the plot) passes through.
fn labels_on_lines(svg: &str) -> Vec<String> {
    let font = FontRef::try_from_slice(include_bytes!("../assets/fonts/NotoSans-kvxfer-subset.ttf")).unwrap();
    let els = elements(svg);
    let plot_start = els.iter().position(|e| e.attr("transform").is_some()).expect("an axis title");
    let points = |e: &Element| -> Vec<(f64, f64)> {
        let pts = e.attr("points").unwrap_or("");
        pts.split_whitespace()
            .filter_map(|p| p.split_once(',').map(|(x, y)| (x.parse().unwrap(), y.parse().unwrap())))
            .collect()
    };
    let lines: Vec<Vec<(f64, f64)>> = els[plot_start..]
        .iter()
        .filter(|e| e.tag == "polyline" && e.attr("stroke-width") == Some("3"))
        .map(points)
        .collect();
    let mut out = Vec::new();
    for t in els[plot_start..].iter().filter(|e| e.tag == "text" && e.attr("fill") != Some("#282828")) {
        let (x0, y0, x1, y1) = text_box(&font, t);
        let inside = |(x, y): (f64, f64)| x > x0 + 1.0 && x < x1 - 1.0 && y > y0 + 1.0 && y < y1 - 1.0;
        let crossed = lines.iter().any(|l| {
            l.windows(2).any(|w| {
                (0..=100).any(|k| {
                    let f = k as f64 / 100.0;
                    inside((w[0].0 + (w[1].0 - w[0].0) * f, w[0].1 + (w[1].1 - w[0].1) * f))
                })
            })
        });
        if crossed {
            out.push(t.text.clone());
        }
    }
    out
}

/// Six files on one host, five with a ceiling within 7% of 394 GB/s and a reference line just above them; then
/// four files, two bimodal at the same sizes and a sweep with neighbouring bimodal configurations: no text of any
/// figure overprints another, and every ceiling is still named (on the plot or in the legend).
#[test]
fn no_two_labels_overlap_in_a_report_of_several_files() {
    let files = [
        "h200-contig.json",
        "h200-mb2.json",
        "h200-wheel-nvlink.json",
        "h200-nvlink.json",
        "h200-paged-sm.json",
        "tcp-loopback.json",
    ]
    .map(result);
    let dir = report("overlap", &files, &["--line", "H200 NVLink peak 450 GB/s=450", "--line", "NIC 25 GB/s=25"]);
    let mut bad = Vec::new();
    for f in FIGURES {
        bad.extend(overlaps(&svg(&dir, f)).into_iter().map(|o| format!("{f}: {o}")));
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    let bw = svg(&dir, "bandwidth-vs-size");
    for c in ["394.1", "394.8", "395.0", "367.8", "3.49"] {
        assert!(bw.contains(&format!("ceiling {c} GB/s")), "ceiling {c} is named");
    }
    assert!(bw.contains("H200 NVLink peak 450 GB/s"), "the reference line is named");
    let crossed = labels_on_lines(&bw);
    assert!(crossed.is_empty(), "labels drawn across a run's p50 line: {crossed:?}");

    let files =
        [result("rxe-paged.json"), result("rxe-verbs.json"), result("tcp-loopback.json"), rerun(&scratch("rerun"))];
    let dir = report("modes", &files, &[]);
    let mut bad = Vec::new();
    for f in FIGURES {
        bad.extend(overlaps(&svg(&dir, f)).into_iter().map(|o| format!("{f}: {o}")));
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    assert!(svg(&dir, "reps-bandwidth").contains("2 modes"), "bimodal sizes are still marked");
}

/// A copy of the H200 run as if it had measured a model of 128 KiB per token: the same token counts at other sizes.
fn other_model(dir: &Path) -> String {
    let mut r: serde_json::Value = serde_json::from_slice(&std::fs::read(result("h200-nvlink.json")).unwrap()).unwrap();
    r["label"] = "llama-3.1-8b copy".into();
    r["config"]["model"] = "llama-3.1-8b".into();
    for c in r["cases"].as_array_mut().unwrap() {
        let tokens = c["tokens"].as_u64().unwrap();
        c["size_bytes"] = (tokens * 131072).into();
        c["bytes_per_token"] = 131072.into();
    }
    let path = dir.join("llama.json");
    std::fs::write(&path, serde_json::to_vec(&r).unwrap()).unwrap();
    path.display().to_string()
}

#[test]
fn the_token_axis_is_drawn_only_when_every_series_has_the_same_bytes_per_token() {
    // Both measured qwen3-30b-a3b at 96 KiB per token.
    let dir =
        report("tokens-agree", &["h200-contig.json".into(), "h200-mb2.json".into()].map(|f: String| result(&f)), &[]);
    for f in FIGURES {
        assert!(svg(&dir, f).contains("tokens"), "{f}: the token axis is true for both runs");
    }
    let bw = svg(&dir, "bandwidth-vs-size");
    assert!(bw.contains("tokens of qwen3-30b-a3b"), "the axis names the model");

    let llama = other_model(&scratch("llama"));
    let dir = report("tokens-disagree", &[result("h200-nvlink.json"), llama], &[]);
    for f in FIGURES {
        let svg = svg(&dir, f);
        let tokens: Vec<String> = elements(&svg)
            .into_iter()
            .filter(|e| e.text.contains("tokens") || e.text.ends_with('k'))
            .map(|e| e.text)
            .collect();
        assert!(tokens.is_empty(), "{f}: 96 and 128 KiB per token share no token axis, yet it reads {tokens:?}");
    }
}

/// A stroke or fill colour as "#RRGGBB" → (r, g, b).
fn rgb(hex: &str) -> (u8, u8, u8) {
    let h = hex.trim_start_matches('#');
    let c = |i: usize| u8::from_str_radix(&h[i..i + 2], 16).unwrap();
    (c(0), c(2), c(4))
}

fn grey((r, g, b): (u8, u8, u8)) -> bool {
    r.max(g).max(b) - r.min(g).min(b) < 40
}

/// One legend entry: its text, and the sample drawn before it (stroke colour, number of dashes, marker tag).
#[derive(Debug, PartialEq)]
struct Sample {
    text: String,
    stroke: Option<(u8, u8, u8)>,
    dashes: usize,
    marker: Option<String>,
}

/// The legend's entries: the texts between the title and the plot (whose first text is a turned axis title), each
/// with the elements drawn since the previous text.
fn legend(svg: &str) -> Vec<Sample> {
    let els = elements(svg);
    let mut out = Vec::new();
    let mut since: Vec<&Element> = Vec::new();
    let mut texts = 0;
    for e in &els {
        if e.tag == "text" {
            texts += 1;
            if e.attr("transform").is_some() {
                break;
            }
            if texts > 1 {
                let strokes: Vec<&&Element> = since.iter().filter(|s| s.tag == "polyline").collect();
                out.push(Sample {
                    text: e.text.clone(),
                    stroke: strokes.first().and_then(|s| s.attr("stroke")).map(rgb),
                    dashes: strokes.len(),
                    marker: since.iter().find(|s| s.tag != "polyline").map(|s| s.tag.clone()),
                });
            }
            since.clear();
        } else {
            since.push(e);
        }
    }
    out
}

/// Eight runs and a reference line: every run has its own colour, marker and dash, none grey, and the reference
/// line is grey, named in the legend as such, and drawn in that grey.
#[test]
fn no_series_is_drawn_like_a_reference_line() {
    let files = [
        "h200-contig.json",
        "h200-mb2.json",
        "h200-nvlink.json",
        "h200-paged-batch.json",
        "h200-paged-ce.json",
        "h200-paged-ce4.json",
        "h200-paged-sm.json",
        "h200-wheel-nvlink.json",
    ]
    .map(result);
    let dir = report("styles", &files, &["--line", "NIC 25 GB/s=25"]);
    let bw = svg(&dir, "bandwidth-vs-size");
    let legend = legend(&bw);
    let labels: Vec<String> = files
        .iter()
        .map(|f| {
            let r: serde_json::Value = serde_json::from_slice(&std::fs::read(f).unwrap()).unwrap();
            r["label"].as_str().unwrap().to_string()
        })
        .collect();
    let runs: Vec<&Sample> = labels
        .iter()
        .map(|l| legend.iter().find(|s| &s.text == l).unwrap_or_else(|| panic!("{l} in {legend:?}")))
        .collect();
    let reference = legend
        .iter()
        .find(|s| s.text.contains("reference"))
        .unwrap_or_else(|| panic!("the legend names the reference line: {legend:?}"));
    let ref_colour = reference.stroke.expect("the reference sample is a line");
    assert!(grey(ref_colour) && reference.dashes > 1 && reference.marker.is_none(), "{reference:?}");
    for (i, a) in runs.iter().enumerate() {
        let colour = a.stroke.expect("a run's sample is a line");
        assert!(!grey(colour), "{a:?} is grey, like a reference line");
        for b in &runs[i + 1..] {
            assert!(a.stroke != b.stroke || a.marker != b.marker || a.dashes != b.dashes, "{a:?} looks like {b:?}");
        }
    }
    let hex = format!("#{:02X}{:02X}{:02X}", ref_colour.0, ref_colour.1, ref_colour.2);
    let drawn = elements(&bw).iter().filter(|e| e.attr("stroke") == Some(hex.as_str())).count();
    assert!(drawn > reference.dashes, "the reference line is drawn in the legend's grey");
}
