//! `kvxfer cluster` past the size where a row per flow helps anyone: 32 ranks on loopback under `pairs` at 1 MiB
//! (992 links), each rank a process started as tests/cluster.rs starts them with `KVXFER_RANK`/…. Rank 0's console
//! and `kvxfer report` stay a page long while every CSV row names its link; the heatmap grows with the ranks, drops
//! its in-cell numbers, thins its ticks, draws a colour bar, and frames each host's ranks. The run is as light as
//! the check allows (one size, 2 reps, no warm-up): about 15 s alone on 2 cores.

mod common;

use common::launch::clean;
use common::{free_port, kvxfer, read_json, Out, Proc, TempDir};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const RANKS: usize = 32;
const LINKS: usize = RANKS * (RANKS - 1);
const ARGS: &[&str] = &["--pattern", "pairs", "--sizes", "1MiB", "--reps", "2", "--warmup", "0"];
/// The whole run's bound: generous, as CI runs other tests on the same 2 cores.
const RUN_TIMEOUT: Duration = Duration::from_secs(480);

/// Rank `r` of 32; `extra` follows the shared arguments (rank 0's output files).
fn rank(r: usize, port: u16, extra: &[String]) -> Proc {
    let mut cmd = clean(Command::new(common::bin()));
    cmd.arg("cluster").args(ARGS).args(["--step-timeout", "5m", "--rendezvous-timeout", "5m"]).args(extra);
    cmd.args(["--coordinator", &format!("127.0.0.1:{port}")]);
    cmd.env("KVXFER_RANK", r.to_string()).env("KVXFER_WORLD_SIZE", RANKS.to_string());
    cmd.env_remove("KVXFER_TOKEN");
    Proc::start(&mut cmd, format!("kvxfer cluster rank {r}"))
}

/// Wait for `p` within [`RUN_TIMEOUT`] (longer than the suite's usual bound) and return what it printed, failing
/// on anything but exit 0.
fn done(mut p: Proc) -> Out {
    let status = p.wait_timeout(RUN_TIMEOUT);
    let what = p.what.clone();
    let out = Out { code: status.and_then(|s| s.code()), stdout: p.stdout.text(), stderr: p.stderr.text(), what };
    assert!(status.is_some(), "{} did not exit within {RUN_TIMEOUT:?}:\n{}", out.what, out.stderr);
    out.expect_code(0);
    out
}

fn lines(out: &Out) -> usize {
    out.stdout.lines().count() + out.stderr.lines().count()
}

/// Every `<text>` of an SVG, its content trimmed.
fn svg_texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| Some(t.split_once('>')?.1.split_once("</text>")?.0.trim().to_string()))
        .collect()
}

/// The canvas of an SVG: (width, height).
fn svg_size(svg: &str) -> (u32, u32) {
    let attr = |name: &str| -> u32 {
        let from = svg.find(&format!("{name}=\"")).unwrap() + name.len() + 2;
        svg[from..].split('"').next().unwrap().parse().unwrap()
    };
    (attr("width"), attr("height"))
}

/// Texts that are a cell's number ("0.41", "0.12 !", "1.03 ~").
fn numbers(texts: &[String]) -> usize {
    texts.iter().filter(|t| t.trim_end_matches([' ', '!', '~']).parse::<f64>().is_ok_and(|_| t.contains('.'))).count()
}

/// `kvxfer report FILE --fig DIR`: its output; DIR/cluster-heatmap.svg.
fn report(file: &Path, fig: &Path) -> (Out, String) {
    let what = format!("kvxfer report {}", file.display());
    let out = done(Proc::start(kvxfer().arg("report").arg(file).arg("--fig").arg(fig), what));
    let svg = std::fs::read_to_string(fig.join("cluster-heatmap.svg")).expect("the heatmap's SVG");
    (out, svg)
}

/// A copy of rank 0's file as `kvxfer cluster` would have written it for other ranks or hosts: the flows between
/// ranks below `keep`, and each rank's host renamed by `host`.
fn derived(r: &Value, keep: usize, host: impl Fn(u64) -> String) -> Value {
    let mut r = r.clone();
    let rename = |e: &mut Value| {
        let name = host(e["rank"].as_u64().unwrap());
        e["host"] = Value::String(name);
    };
    let cases: Vec<Value> = r["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| {
            c["src"]["rank"].as_u64().unwrap() < keep as u64 && c["dst"]["rank"].as_u64().unwrap() < keep as u64
        })
        .cloned()
        .map(|mut c| {
            rename(&mut c["src"]);
            rename(&mut c["dst"]);
            c
        })
        .collect();
    r["cases"] = Value::Array(cases);
    let ranks: Vec<Value> = r["cluster"]["ranks"].as_array().unwrap()[..keep]
        .iter()
        .cloned()
        .map(|mut e| {
            rename(&mut e);
            e
        })
        .collect();
    r["cluster"]["ranks"] = Value::Array(ranks);
    r["cluster"]["world_size"] = keep.into();
    r
}

#[test]
fn thirty_two_ranks_keep_the_console_the_report_and_the_heatmap_readable_and_every_csv_row_names_its_link() {
    let dir = TempDir::new("cluster-scale");
    let (json, csv, fig) = (dir.join("pairs.json"), dir.join("pairs.csv"), dir.join("fig"));
    let port = free_port();
    let outputs: Vec<String> =
        ["--json", &dir.arg("pairs.json"), "--csv", &dir.arg("pairs.csv"), "--fig", &dir.arg("fig")]
            .iter()
            .map(|s| s.to_string())
            .collect();
    let procs: Vec<Proc> = (0..RANKS).map(|r| rank(r, port, if r == 0 { &outputs } else { &[] })).collect();
    let outs: Vec<Out> = procs.into_iter().map(done).collect();
    let zero = &outs[0];

    // Rank 0's console: a page, with one progress line every tenth of the steps instead of a line per step.
    assert!(lines(zero) <= 200, "rank 0 printed {} lines:\n{}\n{}", lines(zero), zero.stdout, zero.stderr);
    let said = |what: &str| zero.stderr.lines().filter(|l| l.trim_start_matches("[rank 0] ").starts_with(what)).count();
    let progress = said("step ");
    assert!((5..=30).contains(&progress), "{progress} progress lines:\n{}", zero.stderr);
    // The rendezvous too: a line per tenth of the ranks, not one per rank.
    let arrivals = said("rendezvous: rank ");
    assert!((1..=11).contains(&arrivals), "{arrivals} rendezvous lines:\n{}", zero.stderr);
    assert!(zero.stdout.contains("| src host | dst host |"), "{}", zero.stdout);

    let r = read_json(&json);
    assert_eq!(r["cluster"]["steps_done"], r["cluster"]["steps_total"]);
    assert_eq!(r["cases"].as_array().unwrap().len(), LINKS);

    // Every CSV row names its link: source and destination rank and host, and all 992 links are there.
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut rows = text.lines().filter(|l| !l.starts_with('#'));
    let header: Vec<&str> = rows.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("no {name}: {header:?}"));
    let (sr, sh, dr, dh) = (col("src_rank"), col("src_host"), col("dst_rank"), col("dst_host"));
    let mut links = BTreeSet::new();
    for row in rows {
        let cells: Vec<&str> = row.split(',').collect();
        let (s, d): (usize, usize) = (cells[sr].parse().unwrap(), cells[dr].parse().unwrap());
        assert!(s != d && s < RANKS && d < RANKS && !cells[sh].is_empty() && !cells[dh].is_empty(), "{row}");
        links.insert((s, d));
    }
    assert_eq!(links.len(), LINKS);

    // The heatmap: a larger canvas than the default, no number in any cell (three on the colour bar), thinned ticks.
    let svg = std::fs::read_to_string(fig.join("cluster-heatmap.svg")).unwrap();
    let (w, h) = svg_size(&svg);
    assert!(w > 1000 && h > 600, "{w}×{h}");
    let texts = svg_texts(&svg);
    assert!(numbers(&texts) <= 3, "numbers in cells: {texts:?}");
    assert!(texts.iter().any(|t| t == "p50 GB/s"), "no colour bar: {texts:?}");
    let ticks = texts.iter().filter(|t| t.parse::<usize>().is_ok() || t.contains('@')).count();
    assert!(ticks < 2 * RANKS, "{ticks} tick labels (every rank on both axes would be {}): {texts:?}", 2 * RANKS);

    // The report: a page too, its rows naming their links.
    let (out, _) = report(&json, &dir.join("fig-report"));
    assert!(lines(&out) <= 300, "report printed {} lines:\n{}", lines(&out), out.stdout);
    assert!(out.stdout.lines().filter(|l| l.contains("@") && l.contains('→')).count() >= 10, "{}", out.stdout);

    // The same flows as if ranks 16..31 were a second host: four host pairs, each host's block named in the heatmap.
    let two = dir.join("two-hosts.json");
    let host = |rank: u64| if rank < 16 { "node-a".to_string() } else { "node-b".to_string() };
    std::fs::write(&two, derived(&r, RANKS, host).to_string()).unwrap();
    let (out, svg) = report(&two, &dir.join("fig-two"));
    for (s, d) in [("node-a", "node-a"), ("node-a", "node-b"), ("node-b", "node-a"), ("node-b", "node-b")] {
        assert!(out.stdout.contains(&format!("| {s} | {d} | 1 MiB |")), "{s}→{d}:\n{}", out.stdout);
    }
    let texts = svg_texts(&svg);
    assert!(texts.iter().any(|t| t == "node-a") && texts.iter().any(|t| t == "node-b"), "{texts:?}");

    // Four ranks of the same run (12 links): today's full text and a heatmap of the default size, numbers in cells.
    let small = dir.join("four.json");
    std::fs::write(&small, derived(&r, 4, |_| "vm".to_string()).to_string()).unwrap();
    let (out, svg) = report(&small, &dir.join("fig-small"));
    assert!(out.stdout.contains("| src \\ dst |"), "{}", out.stdout);
    assert_eq!(out.stdout.lines().filter(|l| l.starts_with("| ") && l.contains('→')).count(), 12, "{}", out.stdout);
    assert!(svg_size(&svg).0 < w && svg_size(&svg).1 < h, "{:?} vs {w}×{h}", svg_size(&svg));
    assert!(numbers(&svg_texts(&svg)) >= 12, "{:?}", svg_texts(&svg));
}
