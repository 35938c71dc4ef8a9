//! Figures, the side-by-side table, bimodality and the ceiling, through the real binary: a real loopback sweep and
//! the committed H200 results are drawn, and every PNG is decoded and every SVG searched for its series' labels.

use std::path::{Path, PathBuf};
mod common;
use std::process::Output;

const FIGURES: [&str; 3] = ["time-vs-size", "bandwidth-vs-size", "reps-bandwidth"];
const H200_LABEL: &str = "H200 NVLink gpu:0→gpu:1 (cuda transport, copy engine)";

fn kvxfer(args: &[&str]) -> Output {
    common::output_logged(args)
}

/// A fresh scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    // Under target/tmp, not the system temp dir: the last run's figures stay there for looking at.
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("figures-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn h200() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("results/h200-nvlink.json").display().to_string()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The PNG decodes, is 1000×600, is not blank, and is small enough for a README.
fn assert_png(path: &Path) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(bytes.len() < 300 << 10, "{}: {} bytes", path.display(), bytes.len());
    let mut reader = png::Decoder::new(std::io::Cursor::new(&bytes)).read_info().expect("a valid PNG header");
    let mut buf = vec![0; reader.output_buffer_size()];
    let frame = reader.next_frame(&mut buf).expect("the image data decodes");
    assert_eq!((frame.width, frame.height), (1000, 600), "{}", path.display());
    let px = &buf[..frame.buffer_size()];
    let inked = px.chunks(3).filter(|p| p.iter().any(|c| *c < 200)).count();
    assert!(inked > 1000, "{}: only {inked} dark pixels; is it blank?", path.display());
}

/// The SVG is a whole SVG document naming every series.
fn assert_svg(path: &Path, labels: &[&str]) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(text.contains("<svg") && text.trim_end().ends_with("</svg>"), "{}", path.display());
    for l in labels {
        assert!(text.contains(l), "{} lacks {l:?}", path.display());
    }
}

fn assert_figures(dir: &Path, labels: &[&str]) {
    for f in FIGURES {
        assert_png(&dir.join(format!("{f}.png")));
        assert_svg(&dir.join(format!("{f}.svg")), labels);
    }
}

#[test]
fn a_real_sweep_and_the_h200_results_draw_every_figure() {
    let d = scratch("sweep");
    let (json, figs) = (d.join("run.json"), d.join("sweep-figs"));
    let out = kvxfer(&[
        "sweep",
        "--sizes",
        "1MiB,2MiB,4MiB",
        "--reps",
        "5",
        "--label",
        "loopback test",
        "--json",
        s(&json),
        "--md",
        s(&d.join("run.md")),
        "--fig",
        s(&figs),
    ]);
    assert!(out.status.success());
    assert_figures(&figs, &["loopback test"]);

    // Every case carries the bimodality verdict, and the run its ceiling key.
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(r.as_object().unwrap().contains_key("ceiling_gbps"));
    for c in r["cases"].as_array().unwrap() {
        let b = &c["bimodal"];
        assert!(b["is_bimodal"].is_boolean() && b["modes_gbps"].is_array() && b["counts"].is_array(), "{b}");
        assert!(b["method"].as_str().unwrap().contains("Ashman"), "{b}");
    }

    let figs = d.join("report-figs");
    let out = kvxfer(&["report", s(&json), &h200(), "--fig", s(&figs), "--line", "NIC 25 GB/s=25"]);
    assert!(out.status.success());
    assert_figures(&figs, &["loopback test", H200_LABEL]);
    let bw = std::fs::read_to_string(figs.join("bandwidth-vs-size.svg")).unwrap();
    assert!(bw.contains("NIC 25 GB/s") && bw.contains("ceiling 394.1 GB/s"), "reference line and ceiling drawn");
    assert!(String::from_utf8_lossy(&out.stdout).contains("Side by side"));
}

#[test]
fn two_runs_side_by_side_with_the_ratio_to_the_first() {
    let d = scratch("compare");
    // A copy of the H200 run at half the bandwidth: every ratio must read 0.500×.
    let mut half: serde_json::Value = serde_json::from_slice(&std::fs::read(h200()).unwrap()).unwrap();
    half["label"] = "half speed".into();
    for c in half["cases"].as_array_mut().unwrap() {
        let (g, t) = (c["gbps"]["p50"].as_f64().unwrap(), c["transfer_ms"]["p50"].as_f64().unwrap());
        c["gbps"]["p50"] = (g / 2.0).into();
        c["transfer_ms"]["p50"] = (t * 2.0).into();
    }
    let half_path = d.join("half.json");
    std::fs::write(&half_path, serde_json::to_vec(&half).unwrap()).unwrap();

    let (md, csv) = (d.join("cmp.md"), d.join("cmp.csv"));
    let out = kvxfer(&["report", &h200(), s(&half_path), "--md", s(&md), "--csv", s(&csv)]);
    assert!(out.status.success());
    let md = std::fs::read_to_string(&md).unwrap();
    assert!(md.contains("- A = H200 NVLink") && md.contains("- B = half speed (cuda)"), "{md}");
    assert!(md.contains("| size | tokens | A p50 ms | A GB/s | B p50 ms | B GB/s | B/A GB/s |"), "{md}");
    assert!(md.contains("| 12 GiB | 128k | 32.692 | 394.1 | 65.384 | 197.1 | 0.500× |"), "{md}");
    let side = std::fs::read_to_string(d.join("cmp.compare.csv")).unwrap();
    assert_eq!(side.lines().count(), 10, "a header and one row per size:\n{side}");
    assert!(side.lines().last().unwrap().ends_with(",0.5000"), "{side}");
    // The per-run CSV is unchanged: one row per case of each run.
    assert_eq!(std::fs::read_to_string(&csv).unwrap().lines().count(), 19);
}

#[test]
fn a_sweep_of_several_configurations_is_split_side_by_side_and_in_figures() {
    // A real 4-configuration sweep (contiguous, paged sm, paged batch, paged gather staging on 2×H200).
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("results/h200-paged-nvlink.json");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let p50 = |label: &str, tokens: u64| {
        r["cases"].as_array().unwrap().iter().find(|c| c["case_label"] == label && c["tokens"] == tokens).unwrap()
            ["gbps"]["p50"]
            .as_f64()
            .unwrap()
    };
    let d = scratch("split");
    let (md, figs) = (d.join("split.md"), d.join("figs"));
    let out = kvxfer(&["report", s(&file), "--md", s(&md), "--fig", s(&figs)]);
    assert!(out.status.success());
    let md = std::fs::read_to_string(&md).unwrap();
    assert!(md.contains("- A = paged-nvlink on vm layout=contiguous (cuda)"), "{md}");
    assert!(md.contains("- D = paged-nvlink on vm copy=ce layout=paged staging=gather (cuda)"), "{md}");
    let side = &md[md.find("### Side by side").expect("a side-by-side section")..];
    let row = side.lines().find(|l| l.starts_with("| 12 GiB | 128k |")).expect("a 128k row");
    let ratio = p50("copy=ce layout=paged staging=gather", 131072) / p50("layout=contiguous", 131072);
    assert!(row.ends_with(&format!("| {ratio:.3}× |")), "D/A = {ratio:.3} in {row}");
    assert!(figs.join("bandwidth-vs-size.png").exists());
    // One file: the legend names each configuration by its case name, without the run's label in front of all.
    let svg = std::fs::read_to_string(figs.join("bandwidth-vs-size.svg")).unwrap();
    assert!(svg.contains("copy=sm layout=paged") && !svg.contains("paged-nvlink on vm copy=sm"), "legend");
    // The staged case's split stands under the tables, from the file's own medians.
    let staged = r["cases"].as_array().unwrap().iter().find(|c| c["staged_p50"].is_object()).unwrap();
    let g = staged["staged_p50"]["gather_ms"].as_f64().unwrap();
    assert!(md.contains("staged at ") && md.contains(&format!("gather {g:.3} + copy")), "{md}");
}

#[test]
fn results_written_before_bimodality_gain_it_and_the_ceiling_on_report() {
    // The committed H200 file predates both keys.
    let raw = std::fs::read_to_string(h200()).unwrap();
    assert!(!raw.contains("\"bimodal\"") && !raw.contains("ceiling_gbps"));
    let out = kvxfer(&["report", &h200(), "--md", "-"]);
    assert!(out.status.success());
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(md.contains("ceiling 394.1 GB/s (p50 flat within ±5% from 96 MiB to 12 GiB)"), "{md}");
    assert!(!md.contains("bimodal at"), "steady NVLink reps are not bimodal");
}

#[test]
fn bad_figure_arguments_are_usage_errors() {
    let d = scratch("bad");
    let missing = d.join("no-such-parent").join("figs");
    for args in [
        vec!["report", &h200(), "--fig", s(&missing)],
        vec![
            "sweep",
            "--sizes",
            "1MiB",
            "--json",
            s(&d.join("x.json")),
            "--md",
            s(&d.join("x.md")),
            "--fig",
            s(&missing),
        ],
    ] {
        let out = kvxfer(&args);
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(errors.len(), 1, "one error line: {err}");
        assert!(errors[0].contains("--fig") && errors[0].contains("does not exist"), "{err}");
    }
    assert!(!d.join("x.json").exists(), "the sweep must fail before running");

    let figs = d.join("figs");
    for bad in ["NIC 25", "NIC=fast", "=25", "NIC=0"] {
        let out = kvxfer(&["report", &h200(), "--fig", s(&figs), "--line", bad]);
        assert_eq!(out.status.code(), Some(2), "--line {bad:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--line") && err.contains("LABEL=GBPS"), "{err}");
    }
    // --line needs --fig; --fig pointing at a file is refused.
    assert_eq!(kvxfer(&["report", &h200(), "--line", "NIC=25"]).status.code(), Some(2));
    let file = d.join("a-file");
    std::fs::write(&file, "").unwrap();
    assert_eq!(kvxfer(&["report", &h200(), "--fig", s(&file)]).status.code(), Some(2));
}

/// A real soft-RoCE run whose odd reps lost their final packet (docs/why-slow.md): its reps figure fills
/// the slow reps and names the counter that sets them apart, and the tables print the attribution.
#[test]
fn the_reps_figure_marks_the_slow_reps_an_attribution_names() {
    let d = scratch("attributed");
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("results/rxe-loss-attribution.json");
    let figs = d.join("figs");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kvxfer"))
        .args(["report", file.to_str().unwrap(), "--fig", figs.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("why at 8 MiB: 4 slow of 8 reps"), "{stdout}");
    let svg = std::fs::read_to_string(figs.join("reps-bandwidth.svg")).unwrap();
    assert!(svg.contains("slow: completer_retry_err +1 vs +0/rep"), "the slow reps' counter is noted");
    assert!(svg.contains("filled = slow reps"), "and the legend says what filled means");
}

/// A real latency run over loopback TCP draws its own two figures (not the bandwidth ones, meaningless for 8 B
/// messages), and `report` draws the same two from its results file.
#[test]
fn a_latency_run_draws_latency_vs_size_and_each_sizes_cdf_and_report_redraws_them() {
    const LATENCY: [&str; 2] = ["latency-vs-size", "latency-cdf"];
    let d = scratch("latency");
    let (json, figs) = (d.join("lat.json"), d.join("lat-figs"));
    let out = kvxfer(&[
        "latency",
        "--sizes",
        "8,4KiB,64KiB",
        "--iters",
        "200",
        "--warmup-iters",
        "10",
        "--label",
        "tcp loopback",
        "--json",
        s(&json),
        "--fig",
        s(&figs),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let check = |dir: &Path| {
        for f in LATENCY {
            assert_png(&dir.join(format!("{f}.png")));
        }
        let by_size = std::fs::read_to_string(dir.join("latency-vs-size.svg")).unwrap();
        for text in ["tcp loopback", "p50", "p99", "µs", "message size", "8 B", "4 KiB", "64 KiB"] {
            assert!(by_size.contains(text), "latency-vs-size.svg lacks {text:?}");
        }
        assert_svg(&dir.join("latency-cdf.svg"), &["8 B", "4 KiB", "64 KiB", "µs", "p50 and p99"]);
        for f in FIGURES {
            assert!(!dir.join(format!("{f}.png")).exists(), "{f} is not drawn for a latency run");
        }
    };
    check(&figs);

    let again = d.join("report-figs");
    let out = kvxfer(&["report", s(&json), "--fig", s(&again)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    check(&again);
    let svg = |dir: &Path| std::fs::read_to_string(dir.join("latency-vs-size.svg")).unwrap();
    assert_eq!(svg(&figs), svg(&again), "report draws the run's figure from its file as the run drew it");
}
