//! A replay's figures through the real binary: a short loopback replay of two speeds with `--fig` writes every
//! replay figure as a PNG that decodes and is not blank and an SVG naming its loads; `report --fig` of its results
//! file draws the same figures and prints its summary; odd data (one request, zero-width waits, a saturated load,
//! no load at all) draws without failing.

mod common;

use common::*;
use std::path::Path;

const TRACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/traces/mooncake-synthetic.jsonl");
const STEMS: [&str; 4] = ["replay-latency-cdf", "replay-latency-vs-load", "replay-timeline-4", "replay-timeline-8"];

/// The PNG decodes, is 1000×600 and has ink on it.
fn assert_png(path: &Path) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut reader = png::Decoder::new(std::io::Cursor::new(&bytes)).read_info().expect("a valid PNG header");
    let mut buf = vec![0; reader.output_buffer_size()];
    let frame = reader.next_frame(&mut buf).expect("the image data decodes");
    assert_eq!((frame.width, frame.height), (1000, 600), "{}", path.display());
    let inked = buf[..frame.buffer_size()].chunks(3).filter(|p| p.iter().any(|c| *c < 200)).count();
    assert!(inked > 1000, "{}: only {inked} dark pixels; is it blank?", path.display());
}

fn assert_svg(path: &Path, labels: &[&str]) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(text.contains("<svg") && text.trim_end().ends_with("</svg>"), "{}", path.display());
    for l in labels {
        assert!(text.contains(l), "{} lacks {l:?}", path.display());
    }
    text
}

/// Every replay figure is in `dir`, whole; returns the SVGs' text.
fn assert_figures(dir: &Path) -> Vec<String> {
    STEMS
        .iter()
        .map(|stem| {
            assert_png(&dir.join(format!("{stem}.png")));
            let labels: &[&str] = match *stem {
                "replay-latency-cdf" => &["speed 4", "speed 8"],
                "replay-latency-vs-load" => &["latency p99", "achieved GB/s", "offered GB/s", "path ceiling"],
                _ => &["requests waiting"],
            };
            assert_svg(&dir.join(format!("{stem}.svg")), labels)
        })
        .collect()
}

#[test]
fn a_replay_and_its_report_draw_the_same_figures() {
    let dir = TempDir::new("replay-figs");
    let out = run(&[
        "replay",
        "--trace",
        TRACE,
        "--window",
        "0s..10s",
        "--kv-bytes-per-token",
        "256",
        "--speeds",
        "4,8",
        "--warmup-requests",
        "2",
        "--json",
        &dir.arg("r.json"),
        "--fig",
        &dir.arg("figs"),
    ]);
    out.expect_code(0);
    let drawn = assert_figures(&dir.join("figs"));
    let named = out.stderr.lines().filter(|l| l.starts_with("figure: ")).count();
    assert_eq!(named, 2 * STEMS.len(), "each file named once:\n{}", out.stderr);

    let report = run(&["report", &dir.arg("r.json"), "--fig", &dir.arg("report-figs")]);
    report.expect_code(0);
    assert!(report.stdout.contains("| speed") && report.stdout.contains("Knee:"), "{}", report.stdout);
    let again = assert_figures(&dir.join("report-figs"));
    assert!(drawn == again, "report --fig draws what replay --fig drew");
}

#[test]
fn odd_replays_draw_without_failing() {
    let dir = TempDir::new("replay-figs-odd");
    let out = run(&[
        "replay",
        "--trace",
        TRACE,
        "--window",
        "0s..3s",
        "--kv-bytes-per-token",
        "64",
        "--speeds",
        "4,8",
        "--warmup-requests",
        "0",
        "--json",
        &dir.arg("r.json"),
    ]);
    out.expect_code(0);
    let mut r = read_json(&dir.join("r.json"));
    // One request that never waited, at time 0, in a load cut off as saturated; the knee at that load.
    let loads = r["replay"]["loads"].as_array_mut().unwrap();
    let reqs = loads[0]["requests"].as_array_mut().unwrap();
    reqs.truncate(1);
    let q = &mut reqs[0];
    for k in ["scheduled_ms", "start_ms", "queue_ms"] {
        q[k] = 0.0.into();
    }
    loads[0]["summary"]["saturated"] = true.into();
    r["replay"]["pooled"][0]["summary"]["saturated"] = true.into();
    r["replay"]["knee"] = serde_json::json!({"load": 4.0, "why": "the backlog passed --max-backlog"});
    std::fs::write(dir.join("odd.json"), serde_json::to_vec(&r).unwrap()).unwrap();
    let out = run(&["report", &dir.arg("odd.json"), "--fig", &dir.arg("odd")]);
    out.expect_code(0);
    assert_figures(&dir.join("odd"));
    assert!(assert_svg(&dir.join("odd/replay-latency-cdf.svg"), &["speed 4 (saturated)"]).contains("speed 8"));

    // No load ran at all: nothing to draw, said in one line, and no failure.
    r["replay"]["loads"] = serde_json::json!([]);
    r["replay"]["pooled"] = serde_json::json!([]);
    r["replay"]["knee"] = serde_json::Value::Null;
    std::fs::write(dir.join("none.json"), serde_json::to_vec(&r).unwrap()).unwrap();
    let out = run(&["report", &dir.arg("none.json"), "--fig", &dir.arg("none")]);
    out.expect_code(0);
    assert!(out.stderr.contains("figures: none drawn"), "{}", out.stderr);
}
