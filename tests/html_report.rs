//! `kvxfer report … --html PAGE` (and a run's own `--html`) opened in a real headless Chromium, network off: pages of a real loopback sweep
//! (labelled with a script tag), of a real 64-rank loopback cluster run, of an interrupted run, and of every
//! results file in results/. The test's own script, appended to a copy of each page, points at a heatmap cell,
//! clicks a table header, measures boxes, and writes what it found as JSON into `<pre id="test-out">`; Chromium
//! dumps the DOM after the scripts ran and the test reads that JSON back. Chromium missing fails the test (scripts/
//! setup --test installs it).

mod common;

use common::launch::clean;
use common::{free_port, kvxfer, read_json, Out, Proc, TempDir};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The limit the page of a 64-rank run must stay under.
const PAGE_LIMIT: usize = 2 << 20;
const HOSTILE: &str = "<script>alert(1)</script>";

/// What the probe reports (appended to a copy of the page, run after the page's own script).
const PROBE: &str = r##"
(function () {
  var all = function (sel) { return Array.prototype.slice.call(document.querySelectorAll(sel)); };
  var box = function (e) { var b = e.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; };
  var text = function (e) { return e.textContent; };
  var out = { scripts: all("script:not([type])").length, data_blocks: all('script[type="application/json"]').length };
  out.same = all("ul.same li").map(function (li) { return [li.getAttribute("data-col"), li.querySelector("span").textContent]; });
  out.labels = all('dd[data-key="label"]').map(text);
  out.warnings = all("#warnings li").map(text);
  out.figures = all("figure.fig").map(function (f) { return [f.getAttribute("data-stem"), f.querySelectorAll("svg").length]; });
  var cells = all("rect[data-src]");
  out.cells = cells.length;
  out.min_side = cells.reduce(function (m, c) { var b = c.getBoundingClientRect(); return Math.min(m, b.width, b.height); }, 1e9);
  out.col_ticks = all(".heatmap-svg .cols text").map(box);
  out.row_ticks = all(".heatmap-svg .rows text").map(box);
  out.hosts = all(".heatmap-svg .hosts text").map(text);
  out.host_ticks = all(".heatmap-svg .hosts text").map(box);
  if (cells.length) {
    var c = cells[Math.floor(cells.length / 2)];
    c.dispatchEvent(new MouseEvent("mouseover", { bubbles: true }));
    var tip = document.getElementById("tip");
    out.hover = { src: c.getAttribute("data-src"), dst: c.getAttribute("data-dst"), p50: c.getAttribute("data-p50"),
      tip: tip.textContent, shown: !tip.hidden };
  }
  var pairCells = all("rect[data-pair]");
  out.pairs = pairCells.length;
  if (pairCells.length) {
    out.pair_min_side = pairCells.reduce(function (m, c) { var b = c.getBoundingClientRect(); return Math.min(m, b.width, b.height); }, 1e9);
    out.slow_pairs = all("rect[data-pair].slow").map(function (c) { return c.getAttribute("data-pair"); });
    var p = all("rect[data-pair].slow")[0] || pairCells[0];
    p.dispatchEvent(new MouseEvent("mouseover", { bubbles: true }));
    out.pair_hover = { pair: p.getAttribute("data-pair"), tip: document.getElementById("tip").textContent,
      shown: !document.getElementById("tip").hidden };
  }
  out.listed = all("#cases p.listed").map(text);
  var table = document.getElementById("cases-table");
  if (table) {
    out.header = all("#cases-table th").map(text);
    var rows = function () { return all("#cases-table tbody tr").map(function (r) { return Array.prototype.map.call(r.cells, text); }); };
    out.rows = rows().length <= 200 ? rows() : [];
    var th = document.querySelector('#cases-table th[data-col="transfer_ms_p50"]');
    var col = out.header.indexOf("transfer_ms_p50");
    if (th) {
      th.click();
      out.sorted_up = rows().map(function (r) { return r[col]; });
      th.click();
      out.sorted_down = rows().map(function (r) { return r[col]; });
    }
  }
  // Each figure's hover targets: how many, how many sit on a circle plotters drew (within a pixel), their words,
  // and what the tooltip says when the first is pointed at.
  out.points = all("figure.fig").map(function (f) {
    var targets = Array.prototype.slice.call(f.querySelectorAll("g.hover circle"));
    var marks = Array.prototype.slice.call(f.querySelectorAll("svg circle")).filter(function (c) { return !c.closest("g.hover"); });
    var near = function (a, b, k) { return Math.abs(+a.getAttribute(k) - +b.getAttribute(k)) <= 1; };
    var on = targets.filter(function (t) { return marks.some(function (m) { return near(m, t, "cx") && near(m, t, "cy"); }); });
    var shown = null;
    if (targets.length) {
      targets[0].dispatchEvent(new MouseEvent("mouseover", { bubbles: true }));
      shown = document.getElementById("tip").hidden ? null : document.getElementById("tip").textContent;
    }
    return { stem: f.getAttribute("data-stem"), targets: targets.length, on_marker: on.length,
      words: targets.map(function (t) { return t.getAttribute("data-tip"); }), shown: shown };
  });
  // The figures' font: the page's own, inline, a font Chromium loads, drawing text at other widths than the
  // viewer's sans-serif would (the layout was measured with it).
  var rules = Array.prototype.slice.call(document.styleSheets).reduce(function (a, s) { return a.concat(Array.prototype.slice.call(s.cssRules)); }, []);
  var face = rules.filter(function (r) { return r.type === CSSRule.FONT_FACE_RULE; })[0];
  var label = document.querySelector("figure.fig svg text");
  if (face && label) {
    var b64 = face.style.getPropertyValue("src").split("base64,")[1].split(")")[0].replace(/["']/g, "");
    var bin = atob(b64), bytes = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    var probe = new FontFace("kvxfer-probe", bytes.buffer);
    document.fonts.add(probe);
    var computed = getComputedStyle(label).fontFamily;
    label.style.fontFamily = "kvxfer-probe";
    var own = label.getComputedTextLength();
    label.style.fontFamily = "sans-serif";
    var fallback = label.getComputedTextLength();
    label.style.fontFamily = "";
    out.font = { family: face.style.getPropertyValue("font-family"), bytes: bytes.length, status: probe.status,
      computed: computed, own_width: own, fallback_width: fallback };
  }
  var side = document.getElementById("side-table");
  if (side) {
    var sideRows = function () { return all("#side-table tbody tr").map(function (r) { return Array.prototype.map.call(r.cells, text); }); };
    out.side = { header: all("#side-table th").map(text), legend: all("#side-by-side li").map(text), rows: sideRows() };
    var last = side.tHead.rows[0].cells.length - 1;
    side.tHead.rows[0].cells[last].click();
    out.side.sorted = sideRows().map(function (r) { return r[last]; });
    side.tHead.rows[0].cells[0].click();
    out.side.by_size = sideRows().map(function (r) { return r[0]; });
  }
  // A drag across the first figure's middle half zooms into it; a double click zooms back out.
  var fig = document.querySelector("figure.fig svg");
  if (fig) {
    var r = fig.getBoundingClientRect();
    var mouse = function (type, fx, fy) {
      fig.dispatchEvent(new MouseEvent(type, { bubbles: true, button: 0, clientX: r.left + fx * r.width, clientY: r.top + fy * r.height }));
    };
    out.viewbox = fig.getAttribute("viewBox");
    mouse("mousedown", 0.25, 0.25);
    mouse("mousemove", 0.75, 0.75);
    mouse("mouseup", 0.75, 0.75);
    out.zoomed = fig.getAttribute("viewBox");
    mouse("dblclick", 0.5, 0.5);
    out.unzoomed = fig.getAttribute("viewBox");
  }
  var pre = document.createElement("pre");
  pre.id = "test-out";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
"##;

/// Chromium, or a failure saying how to get it.
fn chromium() -> PathBuf {
    let found = std::env::var_os("PATH")
        .and_then(|p| std::env::split_paths(&p).map(|d| d.join("chromium")).find(|c| c.is_file()));
    found.unwrap_or_else(|| panic!("chromium is not installed: run scripts/setup --test (it installs chromium)"))
}

/// What one load of a page showed: the probe's findings and the dumped DOM.
struct Loaded {
    found: Value,
    dom: String,
}

/// Open a copy of `page` with the probe appended in headless Chromium, with every host name unresolvable; fail on
/// any console message or uncaught exception (the page itself logs nothing).
fn load(page: &Path, scratch: &TempDir) -> Loaded {
    let html = std::fs::read_to_string(page).expect("the page");
    let copy = page.with_extension("probe.html");
    std::fs::write(&copy, format!("{html}<script>{PROBE}</script>\n")).unwrap();
    let profile = scratch.join(&format!("chromium-{}", page.file_stem().unwrap().to_string_lossy()));
    let mut cmd = Command::new(chromium());
    cmd.args(["--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0"])
        .args(["--host-resolver-rules=MAP * ~NOTFOUND", "--no-first-run", "--window-size=1400,1000"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", copy.display()));
    let out = Proc::start(&mut cmd, format!("chromium --dump-dom {}", copy.display())).finish();
    assert_eq!(out.code, Some(0), "chromium failed on {}:\n{}", page.display(), out.stderr);
    let console: Vec<&str> = out.stderr.lines().filter(|l| l.contains(":CONSOLE") || l.contains("Uncaught")).collect();
    assert!(console.is_empty(), "{}: console messages:\n{}", page.display(), console.join("\n"));
    let dom = out.stdout;
    let json = dom
        .split_once("<pre id=\"test-out\">")
        .and_then(|(_, rest)| rest.split_once("</pre>"))
        .map(|(j, _)| j.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"))
        .unwrap_or_else(|| panic!("{}: the probe wrote nothing (a script failed?):\n{}", page.display(), out.stderr));
    Loaded { found: serde_json::from_str(&json).expect("the probe's JSON"), dom }
}

/// `kvxfer report FILES --html PAGE`, which must succeed; returns the page's bytes.
fn report(files: &[&Path], page: &Path) -> Vec<u8> {
    let mut cmd = kvxfer();
    cmd.arg("report").args(files).arg("--html").arg(page);
    let out = Proc::start(&mut cmd, format!("kvxfer report {files:?} --html")).finish();
    out.expect_code(0);
    let bytes = std::fs::read(page).expect("the page was written");
    let text = String::from_utf8_lossy(&bytes);
    // Nothing to fetch at view time: no address at all in the page.
    for scheme in ["http://", "https://", "//cdn", " src=\"", " href=\""] {
        assert!(!text.contains(scheme), "{}: the page names {scheme}", page.display());
    }
    bytes
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect()
}

fn numbers(v: &Value) -> Vec<f64> {
    strings(v).iter().map(|s| s.parse().unwrap()).collect()
}

/// No two boxes overlap, along `axis` (0: left–right, 1: top–bottom), in order along it.
fn apart(boxes: &Value, axis: usize, what: &str) {
    let mut b: Vec<Vec<f64>> = boxes
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect())
        .collect();
    assert!(b.len() >= 2, "{what}: {} labels", b.len());
    b.sort_by(|x, y| x[axis].total_cmp(&y[axis]));
    for w in b.windows(2) {
        assert!(w[1][axis] >= w[0][axis + 2], "{what}: label boxes {:?} and {:?} overlap", w[0], w[1]);
    }
}

#[test]
fn a_sweep_page_shows_the_files_numbers_sorts_keeps_a_hostile_label_as_text_and_an_interrupted_run_says_so() {
    let d = TempDir::new("html-sweep");
    let (json, csv, page) = (d.join("run.json"), d.join("run.csv"), d.join("run.html"));
    let args = ["sweep", "--sizes", "64KiB,1MiB,4MiB", "--reps", "3", "--label", HOSTILE];
    let mut cmd = kvxfer();
    let live = d.join("live.html");
    cmd.args(args).arg("--json").arg(&json).arg("--csv").arg(&csv).arg("--html").arg(&live);
    Proc::start(&mut cmd, "kvxfer sweep".into()).finish().expect_code(0);
    // The page the run wrote at its end shows what the report's page shows.
    let at_end = load(&live, &d).found;
    let bytes = report(&[&json], &page);
    assert!(bytes.len() < PAGE_LIMIT);
    let got = load(&page, &d);
    let f = &got.found;

    // The label is text: shown as written, escaped in the markup, and no script came with it.
    assert_eq!(strings(&f["labels"]), [HOSTILE]);
    assert_eq!(f["scripts"], 2, "the page's script and the probe, nothing else");
    assert_eq!(f["data_blocks"], 1, "the table's rows");
    assert!(got.dom.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    // Warnings first: the run finished, so the only one there may be counts the cases that carry warnings (a busy
    // host, few reps), as the results file has them.
    let cases = read_json(&json)["cases"].as_array().cloned().unwrap_or_default();
    let warned = cases.iter().filter(|c| c["warnings"].as_array().is_some_and(|w| !w.is_empty())).count();
    let listed = strings(&f["warnings"]);
    match warned {
        0 => assert!(listed.is_empty(), "{listed:?}"),
        n => assert!(
            listed.len() == 1 && listed[0].contains(&format!("{n} of {} case(s) carry warnings", cases.len())),
            "{listed:?}"
        ),
    }

    // The figures --fig draws, each an SVG in the page.
    let stems: Vec<(String, u64)> = f["figures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p[0].as_str().unwrap().to_string(), p[1].as_u64().unwrap()))
        .collect();
    for want in ["time-vs-size", "bandwidth-vs-size", "reps-bandwidth"] {
        assert!(stems.contains(&(want.to_string(), 1)), "{want} missing: {stems:?}");
    }

    check_points(f, &read_json(&json));

    // The figures' text is drawn in the font their layout was measured with, carried by the page itself.
    let font = &f["font"];
    let bundled =
        std::fs::metadata(Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/fonts/NotoSans-kvxfer-subset.ttf"));
    assert_eq!(font["family"], "kvxfer-sans", "{font}");
    assert_eq!(font["bytes"].as_u64(), Some(bundled.unwrap().len()), "{font}");
    assert_eq!(font["status"], "loaded", "{font}");
    assert!(font["computed"].as_str().is_some_and(|c| c.starts_with("kvxfer-sans")), "{font}");
    assert_ne!(font["own_width"], font["fallback_width"], "the bundled font sets text as the viewer's would: {font}");

    // The table is the CSV file, cell for cell (a column with one value said once above it), and its p50 is the
    // results file's.
    let csv_text = std::fs::read_to_string(&csv).unwrap();
    let mut reader = csv::ReaderBuilder::new().comment(Some(b'#')).from_reader(csv_text.as_bytes());
    let header: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
    let rows: Vec<Vec<String>> = reader.records().map(|r| r.unwrap().iter().map(String::from).collect()).collect();
    let shown_header = strings(&f["header"]);
    let shown: Vec<Vec<String>> = f["rows"].as_array().unwrap().iter().map(strings).collect();
    assert_eq!(shown.len(), rows.len());
    let same: Vec<Vec<String>> = f["same"].as_array().unwrap().iter().map(strings).collect();
    for (k, name) in header.iter().enumerate() {
        match shown_header.iter().position(|h| h == name) {
            Some(col) => {
                let column: Vec<&String> = shown.iter().map(|r| &r[col]).collect();
                assert_eq!(column, rows.iter().map(|r| &r[k]).collect::<Vec<_>>(), "{name}");
            }
            None if rows[0][k].is_empty() => assert!(rows.iter().all(|r| r[k].is_empty()), "{name}"),
            None => {
                assert!(rows.iter().all(|r| r[k] == rows[0][k]), "{name} varies but is not shown");
                assert!(same.contains(&vec![name.clone(), rows[0][k].clone()]), "{name}: {same:?}");
            }
        }
    }
    assert!(same.contains(&vec!["label".to_string(), HOSTILE.to_string()]), "{same:?}");
    let r = read_json(&json);
    let size_col = shown_header.iter().position(|h| h == "size_bytes").unwrap();
    let p50_col = shown_header.iter().position(|h| h == "transfer_ms_p50").unwrap();
    for c in r["cases"].as_array().unwrap() {
        let row = shown
            .iter()
            .find(|row| row[size_col].parse::<u64>().ok() == c["size_bytes"].as_u64())
            .expect("a row per case");
        let dom: f64 = row[p50_col].parse().unwrap();
        assert!((dom - c["transfer_ms"]["p50"].as_f64().unwrap()).abs() < 1e-4, "{row:?} vs {c}");
    }

    for key in ["labels", "header", "rows", "same"] {
        assert_eq!(at_end[key], f[key], "{key}: the run's own page differs from the report's");
    }

    // A header click sorts by that column, numerically, and a second click reverses it.
    let up = numbers(&f["sorted_up"]);
    assert_eq!(up.len(), 3);
    assert!(up.windows(2).all(|w| w[0] <= w[1]), "{up:?}");
    let down = numbers(&f["sorted_down"]);
    assert!(down.windows(2).all(|w| w[0] >= w[1]), "{down:?}");

    // An interrupted run that completed nothing: its page says so, and loads.
    let mut empty = r.clone();
    empty["cases"] = Value::Array(Vec::new());
    empty["complete"] = Value::Bool(false);
    empty["error"] = Value::String("the receiver went away".into());
    let (ejson, epage) = (d.join("empty.json"), d.join("empty.html"));
    std::fs::write(&ejson, serde_json::to_vec_pretty(&empty).unwrap()).unwrap();
    report(&[&ejson], &epage);
    let warnings = strings(&load(&epage, &d).found["warnings"]);
    assert!(warnings.iter().any(|w| w.contains("INCOMPLETE") && w.contains("the receiver went away")), "{warnings:?}");
    assert!(warnings.iter().any(|w| w.contains("no completed measurement")), "{warnings:?}");

    // A page that cannot be written is a usage error naming the flag, before anything is read.
    let out: Out =
        Proc::start(kvxfer().arg("report").arg(&json).args(["--html", "/nonexistent-dir/p.html"]), "bad".into())
            .finish();
    out.expect_code(2);
    assert!(out.stderr.contains("--html"), "{}", out.stderr);
}

/// The figures' points as a reader points at them: one target on each p50 and max marker of the bandwidth
/// figure, on each p50 of the time figure and on each rep of the strip plot, every one on a marker plotters drew,
/// saying the results file's numbers; the tooltip shows a target's words; a drag zooms, a double click undoes it.
fn check_points(f: &Value, r: &Value) {
    let cases = r["cases"].as_array().unwrap();
    let reps: usize = cases.iter().map(|c| c["reps"].as_array().unwrap().len()).sum();
    let points = f["points"].as_array().unwrap();
    let of = |stem: &str| points.iter().find(|p| p["stem"] == stem).unwrap_or_else(|| panic!("{stem}: {points:?}"));
    for (stem, n) in [("bandwidth-vs-size", 2 * cases.len()), ("time-vs-size", cases.len()), ("reps-bandwidth", reps)] {
        let p = of(stem);
        assert_eq!(p["targets"], n, "{stem}: {p}");
        assert_eq!(p["on_marker"], n, "{stem}: a target off its marker: {p}");
        assert_eq!(p["shown"], p["words"][0], "{stem}: the tooltip");
    }
    // A p50 target names its size and says the file's p50, to the digits shown.
    let words = strings(&of("bandwidth-vs-size")["words"]);
    for c in cases {
        let gbps = c["gbps"]["p50"].as_f64().unwrap();
        let size = c["size_bytes"].as_u64().unwrap();
        let name = if size >= 1 << 20 { format!("{} MiB", size >> 20) } else { format!("{} KiB", size >> 10) };
        let said = words
            .iter()
            .filter(|w| w.contains(&format!("· {name}")) && w.contains(": p50 "))
            .map(|w| w.split(": p50 ").nth(1).unwrap().split(' ').next().unwrap().parse::<f64>().unwrap())
            .collect::<Vec<_>>();
        assert_eq!(said.len(), 1, "{name}: {words:?}");
        assert!((said[0] - gbps).abs() <= gbps * 0.006, "{name}: page says {} GB/s, file {gbps}", said[0]);
    }
    let view = |k: &str| -> Vec<f64> { f[k].as_str().unwrap().split(' ').map(|v| v.parse().unwrap()).collect() };
    let (full, zoomed) = (view("viewbox"), view("zoomed"));
    assert_eq!(view("unzoomed"), full);
    for (i, share) in [0.25, 0.25, 0.5, 0.5].into_iter().enumerate() {
        let want = share * full[2 + i % 2];
        assert!((zoomed[i] - want).abs() <= 2.0, "zoomed to {zoomed:?} from {full:?}");
    }
}

const RANKS: usize = 64;

/// Rank `r` of a 64-rank loopback cluster run under `pairs`, as light as the page's check allows.
fn rank(r: usize, port: u16, extra: &[String]) -> Proc {
    rank_of(RANKS, r, port, extra)
}

/// Rank `r` of `world` ranks.
fn rank_of(world: usize, r: usize, port: u16, extra: &[String]) -> Proc {
    let mut cmd = clean(Command::new(common::bin()));
    cmd.args(["cluster", "--pattern", "pairs", "--sizes", "256KiB", "--reps", "2", "--warmup", "0"]);
    cmd.args(["--step-timeout", "5m", "--rendezvous-timeout", "5m"]).args(extra);
    cmd.args(["--coordinator", &format!("127.0.0.1:{port}")]);
    cmd.env("KVXFER_RANK", r.to_string()).env("KVXFER_WORLD_SIZE", world.to_string());
    cmd.env_remove("KVXFER_TOKEN");
    Proc::start(&mut cmd, format!("kvxfer cluster rank {r}"))
}

/// The heatmap of `page` as loaded: every link a cell of at least 4 px, tick labels apart, and a hover naming
/// the cell's link with the results file's p50.
fn check_heatmap(page: &Path, d: &TempDir, r: &Value) -> Value {
    let found = load(page, d).found;
    assert_eq!(found["cells"], RANKS * (RANKS - 1));
    let side = found["min_side"].as_f64().unwrap();
    assert!(side >= 4.0, "cells of {side} px");
    apart(&found["col_ticks"], 0, "column ticks");
    apart(&found["row_ticks"], 1, "row ticks");
    let hover = &found["hover"];
    assert_eq!(hover["shown"], true);
    let (src, dst) = (hover["src"].as_str().unwrap(), hover["dst"].as_str().unwrap());
    let tip = hover["tip"].as_str().unwrap();
    let p50 = hover["p50"].as_str().unwrap();
    assert!(tip.starts_with(&format!("{src}@")) && tip.contains(&format!(" → {dst}@")), "{src}→{dst}: {tip}");
    assert!(tip.contains(&format!(": p50 {p50} GB/s")), "{tip}");
    let case = r["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["src"]["rank"].as_u64() == src.parse().ok() && c["dst"]["rank"].as_u64() == dst.parse().ok())
        .expect("the hovered link is in the file");
    let p50: f64 = hover["p50"].as_str().unwrap().parse().unwrap();
    assert!((p50 - case["gbps"]["p50"].as_f64().unwrap()).abs() < 1e-3, "{p50} vs {}", case["gbps"]);
    found
}

#[test]
fn a_64_rank_cluster_page_stays_readable_and_small_and_a_hover_names_the_link() {
    let d = TempDir::new("html-cluster");
    let json = d.join("pairs.json");
    let port = free_port();
    let outputs = vec!["--json".to_string(), d.arg("pairs.json"), "--html".to_string(), d.arg("live.html")];
    let procs: Vec<Proc> = (0..RANKS).map(|r| rank(r, port, if r == 0 { &outputs } else { &[] })).collect();
    for mut p in procs {
        let status = p.wait_timeout(Duration::from_secs(600));
        assert!(status.is_some_and(|s| s.success()), "{} failed:\n{}", p.what, p.stderr.text());
    }
    let r = read_json(&json);
    let page = d.join("pairs.html");
    let bytes = report(&[&json], &page);
    assert!(bytes.len() <= PAGE_LIMIT, "{} bytes", bytes.len());
    check_heatmap(&page, &d, &r);
    check_heatmap(&d.join("live.html"), &d, &r);

    // The same run as if on 8 hosts of 8 ranks: each host's block is named and the labels still keep apart.
    let mut hosts = r.clone();
    let name = |rank: &Value| format!("node-{}.cluster", rank.as_u64().unwrap() / 8);
    for e in hosts["cluster"]["ranks"].as_array_mut().unwrap() {
        e["host"] = Value::String(name(&e["rank"]));
    }
    for c in hosts["cases"].as_array_mut().unwrap() {
        for end in ["src", "dst"] {
            c[end]["host"] = Value::String(name(&c[end]["rank"]));
        }
    }
    let (hjson, hpage) = (d.join("hosts.json"), d.join("hosts.html"));
    std::fs::write(&hjson, serde_json::to_vec(&hosts).unwrap()).unwrap();
    report(&[&hjson], &hpage);
    let found = check_heatmap(&hpage, &d, &hosts);
    let hosts = strings(&found["hosts"]);
    assert_eq!(hosts.len(), 8, "{hosts:?}");
    assert!(hosts.iter().all(|h| h.starts_with("node-")), "{hosts:?}");
    apart(&found["host_ticks"], 0, "host names");
}

#[test]
fn every_results_file_in_results_renders_a_page_that_loads_without_console_errors() {
    let d = TempDir::new("html-results");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("results");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    let mut pages = 0;
    for f in files {
        // results/ also keeps other tools' JSON (torch's bidir runs), which is no kvxfer results file.
        if read_json(&f).get("schema").is_none() {
            continue;
        }
        let page = d.join(&format!("{}.html", f.file_stem().unwrap().to_string_lossy()));
        report(&[&f], &page);
        let found = load(&page, &d).found;
        assert_eq!(found["scripts"], 2, "{}", f.display());
        assert!(
            found["figures"].as_array().unwrap().iter().all(|f| f[1] == 1),
            "{}: {:?}",
            f.display(),
            found["figures"]
        );
        pages += 1;
    }
    assert!(pages >= 10, "only {pages} results files");
}

#[test]
fn a_latency_run_and_a_sweep_share_one_page_each_with_its_own_figures() {
    let d = TempDir::new("html-overlay");
    let (lat, sweep, page) = (d.join("lat.json"), d.join("sweep.json"), d.join("both.html"));
    let mut cmd = kvxfer();
    cmd.args(["latency", "--sizes", "8,4KiB", "--iters", "200", "--warmup-iters", "10", "--label", "tcp latency"]);
    Proc::start(cmd.arg("--json").arg(&lat), "kvxfer latency".into()).finish().expect_code(0);
    let mut cmd = kvxfer();
    cmd.args(["sweep", "--sizes", "256KiB,1MiB", "--reps", "3", "--label", "a sweep"]);
    Proc::start(cmd.arg("--json").arg(&sweep), "kvxfer sweep".into()).finish().expect_code(0);
    report(&[&lat, &sweep], &page);
    let f = load(&page, &d).found;
    assert_eq!(strings(&f["labels"]), ["tcp latency", "a sweep"]);
    let stems: Vec<String> =
        f["figures"].as_array().unwrap().iter().map(|p| p[0].as_str().unwrap().to_string()).collect();
    for want in ["latency-vs-size", "latency-cdf", "time-vs-size", "bandwidth-vs-size", "reps-bandwidth"] {
        assert!(stems.iter().any(|s| s == want), "{want} missing: {stems:?}");
    }
    let cases = |p: &Path| read_json(p)["cases"].as_array().unwrap().len();
    assert_eq!(f["rows"].as_array().unwrap().len(), cases(&lat) + cases(&sweep));
    assert!(f["side"].is_null(), "one transfer run: nothing to set side by side");
    // The latency figures' points: p50 and p99 of each size, each curve's p50 and p99 marks, in µs.
    let points = f["points"].as_array().unwrap();
    for (stem, n) in [("latency-vs-size", 2 * cases(&lat)), ("latency-cdf", 2 * cases(&lat))] {
        let p = points.iter().find(|p| p["stem"] == stem).unwrap();
        assert_eq!(p["targets"], n, "{stem}: {p}");
        assert!(
            strings(&p["words"]).iter().all(|w| w.contains(" µs") && (w.contains("p50") || w.contains("p99"))),
            "{stem}: {p}"
        );
    }
}

/// The figures on a page and how many hover targets each has.
fn figure_points(f: &Value) -> Vec<(String, u64)> {
    let points = f["points"].as_array().unwrap();
    points.iter().map(|p| (p["stem"].as_str().unwrap().to_string(), p["targets"].as_u64().unwrap())).collect()
}

#[test]
fn a_replay_a_latency_run_and_a_cluster_replay_each_write_their_own_page() {
    let d = TempDir::new("html-runs");
    let trace = Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/mooncake-synthetic.jsonl");
    let (rjson, rpage) = (d.join("replay.json"), d.join("replay.html"));
    let mut cmd = kvxfer();
    cmd.arg("replay").arg("--trace").arg(&trace).args(["--window", "0s..3s", "--kv-bytes-per-token", "256"]);
    cmd.args(["--speeds", "4,8", "--warmup-requests", "0", "--label", HOSTILE]);
    Proc::start(cmd.arg("--json").arg(&rjson).arg("--html").arg(&rpage), "kvxfer replay".into())
        .finish()
        .expect_code(0);
    let got = load(&rpage, &d);
    let f = &got.found;
    assert_eq!(strings(&f["labels"]), [HOSTILE]);
    assert_eq!(f["scripts"], 2, "the page's script and the probe, nothing else");
    let points = figure_points(f);
    for want in ["replay-latency-cdf", "replay-latency-vs-load"] {
        let n = points.iter().find(|(s, _)| s == want).map(|p| p.1);
        assert!(n.is_some_and(|n| n > 0), "{want}: {points:?}");
    }
    // Each load's p50 as the file has it, in the load figure's words.
    let r = read_json(&rjson);
    let words: Vec<String> = f["points"].as_array().unwrap().iter().flat_map(|p| strings(&p["words"])).collect();
    for p in r["replay"]["pooled"].as_array().unwrap() {
        let load = p["load"].as_f64().unwrap();
        let said = words.iter().any(|w| w.starts_with(&format!("speed {load}")) && w.contains(": p50 "));
        assert!(said, "speed {load}: {words:?}");
    }
    assert!(got.dom.contains("class=\"replay\""), "the loads' summary is on the page");

    let (ljson, lpage) = (d.join("lat.json"), d.join("lat.html"));
    let mut cmd = kvxfer();
    cmd.args(["latency", "--sizes", "8,4KiB", "--iters", "200", "--warmup-iters", "10"]);
    Proc::start(cmd.arg("--json").arg(&ljson).arg("--html").arg(&lpage), "kvxfer latency".into())
        .finish()
        .expect_code(0);
    let f = load(&lpage, &d).found;
    let points = figure_points(&f);
    assert!(points.contains(&("latency-vs-size".to_string(), 4)), "{points:?}");
    assert_eq!(f["rows"].as_array().unwrap().len(), 2, "a row per size");

    // A cluster replay's page, written by rank 0: its loads' figures, and no heatmap (its links moved requests).
    let (cjson, cpage) = (d.join("creplay.json"), d.join("creplay.html"));
    let port = free_port();
    let ranks: Vec<Proc> = (0..2)
        .map(|rank| {
            let mut cmd = clean(Command::new(common::bin()));
            cmd.args(["cluster", "--pattern", "replay", "--prefill", "0", "--decode", "1", "--transport", "tcp"]);
            cmd.args(["--arrivals", "poisson:200", "--prompt-tokens", "fixed:100", "--requests", "30"]);
            cmd.args(["--kv-bytes-per-token", "4096", "--warmup-requests", "0"]);
            cmd.arg("--coordinator").arg(format!("127.0.0.1:{port}"));
            cmd.arg("--json").arg(&cjson).arg("--html").arg(&cpage);
            cmd.env("KVXFER_RANK", rank.to_string()).env("KVXFER_WORLD_SIZE", "2");
            Proc::start(&mut cmd, format!("rank {rank} of a cluster replay"))
        })
        .collect();
    for p in ranks {
        p.finish().expect_code(0);
    }
    let got = load(&cpage, &d);
    let points = figure_points(&got.found);
    assert!(points.iter().any(|(s, n)| s == "replay-latency-cdf" && *n > 0), "{points:?}");
    assert_eq!(got.found["cells"], 0, "no heatmap");
    assert!(!got.dom.contains("No flow completed"), "a replay's page does not say its links moved nothing");
}

#[test]
fn two_runs_sit_side_by_side_with_their_ratio_and_the_table_sorts_sizes_as_sizes() {
    let d = TempDir::new("html-side");
    let sweep = |label: &str, streams: &str| {
        let json = d.join(&format!("{streams}.json"));
        let mut cmd = kvxfer();
        cmd.args(["sweep", "--sizes", "64KiB,1MiB,16MiB", "--reps", "3", "--transport", "tcp", "--streams", streams]);
        Proc::start(cmd.args(["--label", label]).arg("--json").arg(&json), format!("kvxfer sweep {label}"))
            .finish()
            .expect_code(0);
        json
    };
    let (a, b) = (sweep("one stream", "1"), sweep("four streams", "4"));
    let page = d.join("side.html");
    report(&[&a, &b], &page);
    let f = load(&page, &d).found;
    let side = &f["side"];
    assert_eq!(strings(&side["legend"]), ["A = one stream (tcp)", "B = four streams (tcp)"]);
    assert_eq!(strings(&side["header"]).last().map(String::as_str), Some("B/A GB/s"));
    // The ratio is the two files' p50 GB/s, to the digits shown.
    let p50 = |p: &Path| -> Vec<f64> {
        let r = read_json(p);
        let mut c: Vec<(u64, f64)> = r["cases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["size_bytes"].as_u64().unwrap(), c["gbps"]["p50"].as_f64().unwrap()))
            .collect();
        c.sort_by_key(|x| x.0);
        c.into_iter().map(|x| x.1).collect()
    };
    let rows: Vec<Vec<String>> = side["rows"].as_array().unwrap().iter().map(strings).collect();
    for ((row, a), b) in rows.iter().zip(p50(&a)).zip(p50(&b)) {
        let shown: f64 = row.last().unwrap().trim_end_matches('×').parse().unwrap();
        assert!((shown - b / a).abs() <= 0.01 * b / a, "{row:?}: {} vs {shown}", b / a);
    }
    let sorted: Vec<f64> = strings(&side["sorted"]).iter().map(|s| s.trim_end_matches('×').parse().unwrap()).collect();
    assert!(sorted.windows(2).all(|w| w[0] <= w[1]), "the ratio sorts as a number: {sorted:?}");
    assert_eq!(strings(&side["by_size"]), ["64 KiB", "1 MiB", "16 MiB"], "sizes sort as sizes");
}

/// 125 hosts of 8 ranks: 1,000 ranks.
const HOSTS: usize = 125;

/// A 1,000-rank results file for the page's size and readability only (never a figure): a real 4-rank loopback
/// run's first flow copied onto one link per ordered host pair (and one inside each host), 15,625 links, host pair
/// (7, 3)'s link made 10× slower than the rest.
fn thousand_ranks(small: &Value) -> Value {
    let flows = small["cases"].as_array().unwrap();
    let end = |rank: usize| {
        serde_json::json!({"rank": rank, "host": format!("node-{:03}.cluster", rank / 8), "gpu": null, "nic": null,
            "local_rank": rank % 8, "numa": null})
    };
    let mut r = small.clone();
    let mut cases = Vec::new();
    for a in 0..HOSTS {
        for b in 0..HOSTS {
            let mut c = flows[0].clone();
            let (src, dst) = (a * 8 + b % 8, b * 8 + (a + 1) % 8);
            c["src"] = end(src);
            c["dst"] = end(dst);
            c["step"] = Value::from(a * HOSTS + b);
            if (a, b) == (7, 3) {
                for k in ["p50", "min", "max", "mean"] {
                    c["gbps"][k] = Value::from(c["gbps"][k].as_f64().unwrap() / 10.0);
                }
            }
            cases.push(c);
        }
    }
    r["cases"] = Value::Array(cases);
    r["cluster"]["world_size"] = Value::from(HOSTS * 8);
    r["cluster"]["ranks"] = Value::Array((0..HOSTS * 8).map(end).collect());
    r
}

#[test]
fn a_thousand_rank_page_draws_a_cell_per_host_pair_names_the_slowest_link_and_lists_the_flows_that_matter() {
    let d = TempDir::new("html-thousand");
    let port = free_port();
    let outputs = vec!["--json".to_string(), d.arg("small.json")];
    let procs: Vec<Proc> = (0..4).map(|r| rank_of(4, r, port, if r == 0 { &outputs } else { &[] })).collect();
    for mut p in procs {
        let status = p.wait_timeout(Duration::from_secs(120));
        assert!(status.is_some_and(|s| s.success()), "{} failed:\n{}", p.what, p.stderr.text());
    }
    let big = thousand_ranks(&read_json(&d.join("small.json")));
    let json = d.join("thousand.json");
    std::fs::write(&json, serde_json::to_vec(&big).unwrap()).unwrap();
    let page = d.join("thousand.html");
    let bytes = report(&[&json], &page);
    eprintln!("a 1,000-rank page of {} links: {} bytes", HOSTS * HOSTS, bytes.len());
    assert!(bytes.len() <= 2 * PAGE_LIMIT, "{} bytes", bytes.len());
    let found = load(&page, &d).found;
    assert_eq!(found["cells"], 0, "no cell per link past 4,032 links");
    assert_eq!(found["pairs"], HOSTS * HOSTS);
    let side = found["pair_min_side"].as_f64().unwrap();
    assert!(side >= 4.0, "cells of {side} px");
    apart(&found["col_ticks"], 0, "column ticks");
    apart(&found["row_ticks"], 1, "row ticks");
    // The slow pair alone is outlined, and pointing at it names both hosts and its link with the file's p50.
    let slow = &big["cases"][7 * HOSTS + 3];
    assert_eq!(found["slow_pairs"].as_array().unwrap().len(), 1, "{:?}", found["slow_pairs"]);
    let hover = &found["pair_hover"];
    assert_eq!(hover["shown"], true);
    let tip = hover["tip"].as_str().unwrap();
    let link = format!("{}\u{2192}{}", slow["src"]["rank"], slow["dst"]["rank"]);
    assert!(tip.starts_with("node-007.cluster \u{2192} node-003.cluster: 1 link,"), "{tip}");
    let p50 = slow["gbps"]["p50"].as_f64().unwrap();
    assert!(tip.ends_with(&format!("slowest link {link} at {} GB/s", (p50 * 1000.0).round() / 1000.0)), "{tip}");
    // The table lists the flows the console summary names, the slow one among them, and says where the rest are.
    let listed = strings(&found["listed"]);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert!(listed[0].contains(&format!("of {} flow rows", HOSTS * HOSTS)), "{listed:?}");
    let rows = found["rows"].as_array().unwrap();
    assert!((10..=30).contains(&rows.len()), "{} rows", rows.len());
    let header = strings(&found["header"]);
    let (src, dst) =
        (header.iter().position(|h| h == "src_rank").unwrap(), header.iter().position(|h| h == "dst_rank").unwrap());
    let (from, to) = (slow["src"]["rank"].to_string(), slow["dst"]["rank"].to_string());
    assert!(rows.iter().any(|r| r[src] == from && r[dst] == to), "the slow link is a row: {rows:?}");
}
