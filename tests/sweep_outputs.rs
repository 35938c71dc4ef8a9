//! Sweep-file runs and results files through the real binary over loopback TCP: the output flags (`--fig`,
//! `--line`) work with a sweep file, and a parameter flag is refused by the name the user typed. Also: `predict`
//! names where the bytes/token it used came from.

mod common;

use common::*;
use std::path::Path;

const RESULTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/results");
const SMOKE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/sweeps/smoke.toml");

// --------------------------------------------------------------------------------------------- sweep flags

/// A tiny tcp sweep file of two configurations.
fn tiny_sweep(t: &TempDir) -> String {
    let f = t.join("tiny.toml");
    let text = "reps = 2\nwarmup = 0\ntransport = \"tcp\"\nsizes = [\"1MiB\", \"2MiB\"]\nstreams = [1, 2]\n";
    std::fs::write(&f, text).unwrap();
    f.display().to_string()
}

#[test]
fn a_sweep_file_draws_figures_with_fig_and_line() {
    let t = TempDir::new("sweep-fig");
    let (file, figs) = (tiny_sweep(&t), t.join("figs"));
    let json = t.arg("f.json");
    let out = run(&["sweep", &file, "--json", &json, "--fig", figs.to_str().unwrap(), "--line", "NIC reference=1.5"]);
    out.expect_code(0);
    for f in ["time-vs-size", "bandwidth-vs-size", "reps-bandwidth"] {
        for ext in ["png", "svg"] {
            let p = figs.join(format!("{f}.{ext}"));
            assert!(p.metadata().is_ok_and(|m| m.len() > 1000), "{} missing or empty:\n{}", p.display(), out.stderr);
        }
    }
    let svg = std::fs::read_to_string(figs.join("bandwidth-vs-size.svg")).unwrap();
    assert!(svg.contains("NIC reference"), "the --line is drawn");
    assert!(svg.contains("streams=1") && svg.contains("streams=2"), "each configuration is a series");
}

/// Every flag of `kvxfer sweep --help` and whether it takes a value, read from the help itself.
fn sweep_flags() -> Vec<(String, bool)> {
    let help = run(&["sweep", "--help"]);
    help.expect_code(0);
    let mut flags = Vec::new();
    // A flag's line is indented by at most 6 columns (`  -d, --device`, `      --reps`); deeper lines are wrapped
    // descriptions, which may start with a flag they mention.
    let indent = |l: &str| l.len() - l.trim_start().len();
    for line in help.stdout.lines().filter(|l| indent(l) <= 6 && l.trim_start().starts_with('-')) {
        let words: Vec<&str> = line.split_whitespace().collect();
        if let Some(i) = words.iter().position(|w| w.starts_with("--")) {
            let name = words[i].trim_end_matches(',').to_string();
            let takes_value = words.get(i + 1).is_some_and(|w| w.starts_with('<'));
            if !flags.iter().any(|(f, _)| *f == name) {
                flags.push((name, takes_value));
            }
        }
    }
    flags
}

/// With a sweep file every parameter flag is refused, by the flag's own name (`--reps`, never a field or a
/// struct of the program), and every output flag is not.
#[test]
fn every_parameter_flag_with_a_sweep_file_is_refused_by_its_own_name() {
    let outputs = ["--json", "--csv", "--md", "--events", "--fig", "--line", "--out-dir", "--label"];
    let others = ["--help", "--set", "--resume", "--plan"];
    let flags = sweep_flags();
    assert!(flags.len() > 40 && flags.iter().any(|(f, _)| f == "--reps"), "{flags:?}");
    let samples: Vec<&str> = "2 1MiB 7s host gpu:1 1k tcp mlx5_1 qwen3-30b-a3b paged auto off read libfabric \
                              per-write rdma gather sm full event sequential x.json"
        .split_whitespace()
        .collect();
    for (flag, takes_value) in flags.iter().filter(|(f, _)| !outputs.contains(&f.as_str())) {
        if others.contains(&flag.as_str()) {
            continue;
        }
        let values: Vec<Option<&str>> =
            if *takes_value { samples.iter().map(|s| Some(*s)).collect() } else { vec![None] };
        let refused = values.iter().find_map(|value| {
            let mut args = vec!["sweep", SMOKE, "--plan", flag.as_str()];
            args.extend(value);
            let out = run(&args);
            out.no_panic();
            // A value the flag's own parser refuses is clap's error, not ours: try the next sample.
            out.stderr.contains("with a sweep file").then_some(out)
        });
        let out = refused.unwrap_or_else(|| panic!("{flag}: no sample value reached the sweep file's check"));
        out.expect_code(2);
        let line = out.one_error();
        assert!(line.starts_with(&format!("error: {flag}: with a sweep file")), "{flag}: {line}");
    }
    // The output flags are taken (--plan: checked, nothing measured).
    let t = TempDir::new("sweep-output-flags");
    let figs = t.arg("figs");
    let out = run(&["sweep", SMOKE, "--plan", "--fig", &figs, "--line", "X=1", "--csv", &t.arg("x.csv")]);
    out.expect_code(0);
    assert!(out.stdout.contains("sweep smoke: 6 cases"), "{}", out.stdout);
}
// ------------------------------------------------------------------------------------------------- predict

/// `predict --tokens` without a model takes the bytes/token from the results file, and says so; given on the
/// command line, it names the flag.
#[test]
fn predict_names_where_its_bytes_per_token_came_from() {
    let file = Path::new(RESULTS).join("h200-nvlink.json");
    let results = file.to_str().unwrap();
    let out = run(&["predict", "--results", results, "--tokens", "1k,4k"]);
    out.expect_code(0);
    let line = out.stderr.lines().find(|l| l.starts_with("kv bytes/token:")).expect("says the bytes/token");
    assert_eq!(
        line,
        format!("kv bytes/token: 98304 B/token (from {results}: the bytes/token its cases were measured with, qwen3-30b-a3b)")
    );
    let out = run(&["predict", "--results", results, "--tokens", "1k", "--kv-bytes-per-token", "4096"]);
    out.expect_code(0);
    assert!(out.stderr.contains("kv bytes/token: 4096 B/token (from --kv-bytes-per-token)"), "{}", out.stderr);
}
