//! `kvxfer sweep --plan` through the real binary: it works on a machine without the sweep's hardware, estimates
//! from measured results, checks this host only with `--here`; and size ranges (`1MiB..1GiB:x4`) as the command
//! line and sweep files take them.

mod common;

use common::*;
use std::path::Path;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The plan table's data rows, each as its cells (case, configuration, tokens, size, moved, src, dst, est. time).
fn plan_rows(stdout: &str) -> Vec<Vec<String>> {
    stdout
        .lines()
        .filter(|l| l.starts_with('│'))
        .map(|l| l.trim_matches('│').split('┆').map(|c| c.trim().to_string()).collect::<Vec<_>>())
        .filter(|cells| cells[0] != "case")
        .collect()
}

fn sizes_of(rows: &[Vec<String>]) -> Vec<&str> {
    rows.iter().map(|r| r[3].as_str()).collect()
}

#[test]
fn every_shipped_sweep_file_plans_on_any_host() {
    let mut planned = 0;
    for entry in std::fs::read_dir(Path::new(ROOT).join("sweeps")).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let out = run(&["sweep", p.to_str().unwrap(), "--plan"]);
        out.expect_code(0);
        let name = p.file_stem().unwrap().to_string_lossy();
        assert!(out.stdout.starts_with(&format!("sweep {name}: ")), "{}", out.stdout);
        let cases: usize = out.stdout.split(" cases in ").next().unwrap().rsplit(' ').next().unwrap().parse().unwrap();
        let rows = plan_rows(&out.stdout);
        assert_eq!(rows.len(), cases, "one row per case:\n{}", out.stdout);
        for (i, r) in rows.iter().enumerate() {
            assert_eq!(r[0], i.to_string(), "{}", out.stdout);
            assert!(r[5].contains(" host") || r[5].contains(" gpu:"), "src buffer of {name}: {r:?}");
            assert_eq!(r[7], "-", "no estimate without --estimate-from: {r:?}");
        }
        assert!(out.stdout.contains("time: no estimate"), "{}", out.stdout);
        assert!(out.stdout.contains("add --here"), "{}", out.stdout);
        planned += 1;
    }
    assert_eq!(planned, 8, "the shipped sweep files");
}

#[test]
fn plan_here_names_every_case_without_a_cuda_driver() {
    let devices = run(&["devices", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&devices.stdout).expect("devices --json prints JSON");
    if !v["gpu_error"].as_str().is_some_and(|e| e.contains("no CUDA driver")) {
        eprintln!("skipped: this host has a CUDA driver");
        return;
    }
    let mb2 = format!("{ROOT}/sweeps/mb2.toml");
    let out = run(&["sweep", &mb2, "--plan", "--here"]);
    out.expect_code(1);
    // The plan itself is still printed; then each case that cannot run, by its id and size, with the reason.
    assert_eq!(plan_rows(&out.stdout).len(), 9, "{}", out.stdout);
    assert!(
        out.stderr.contains("here: case 8 (128k tokens, 12 GiB) cannot run: src gpu:0: no CUDA driver"),
        "{}",
        out.stderr
    );
    assert_eq!(out.stderr.matches("cannot run: src gpu:0: no CUDA driver").count(), 9, "{}", out.stderr);
    assert!(out.stderr.contains("here: 9 of 9 cases cannot run on this host"), "{}", out.stderr);
}

#[test]
fn estimate_from_results_interpolates_each_case_by_transport_and_size() {
    let results = format!("{ROOT}/results/tcp-loopback.json");
    // 96 MiB is measured there (p50 33.353845 ms), 1 GiB lies between 768 MiB and 1.5 GiB, 3 GiB beyond.
    let out = run(&[
        "sweep",
        "--sizes",
        "96MiB,1GiB,3GiB",
        "--reps",
        "2",
        "--warmup",
        "1",
        "--plan",
        "--estimate-from",
        &results,
    ]);
    out.expect_code(0);
    let rows = plan_rows(&out.stdout);
    assert_eq!(sizes_of(&rows), ["96 MiB", "1 GiB", "3 GiB"]);
    assert_eq!(rows[0][7], "100 ms", "3 × 33.35 ms: {}", out.stdout);
    let ms = |cell: &str| -> f64 {
        match cell.split_once(' ') {
            Some((n, "ms")) => n.parse().unwrap(),
            Some((n, "s")) => n.parse::<f64>().unwrap() * 1000.0,
            _ => panic!("a time in ms or s: {cell:?}"),
        }
    };
    // Between 768 MiB (234.6 ms) and 1.5 GiB (453.6 ms) per transfer, 3 transfers.
    let mid = ms(&rows[1][7]);
    assert!((700.0..1400.0).contains(&mid), "{:?}", rows[1]);
    assert!(rows[2][7].ends_with(" !"), "3 GiB is past the measured sizes: {:?}", rows[2]);
    assert!(out.stdout.contains("time: about ") && out.stdout.contains("for 3 of 3 cases"), "{}", out.stdout);
    assert!(out.stdout.contains("tcp in ") && out.stdout.contains("tcp-loopback.json"), "{}", out.stdout);

    // Results of another transport estimate nothing, and say so.
    let nvlink = format!("{ROOT}/results/h200-nvlink.json");
    let out = run(&["sweep", "--sizes", "96MiB", "--plan", "--estimate-from", &nvlink]);
    out.expect_code(0);
    assert_eq!(plan_rows(&out.stdout)[0][7], "-");
    assert!(out.stdout.contains("time: no estimate: ") && out.stdout.contains("no case of tcp"), "{}", out.stdout);
}

#[test]
fn a_memory_refusal_names_the_case_that_needs_the_memory() {
    let t = TempDir::new("plan-memory");
    let file = t.join("big.toml");
    // 4 TiB per buffer fits no test host; 1 MiB fits every one.
    std::fs::write(&file, "transport = \"tcp\"\nsrc = \"host\"\ndst = \"host\"\nsizes = [\"1MiB\", \"4TiB\"]\n")
        .unwrap();
    let file = file.to_str().unwrap();
    let out = run(&["sweep", file, "--json", &t.arg("r.json"), "--md", &t.arg("r.md")]);
    out.expect_code(2);
    assert!(
        out.stderr.contains("case dst=host sizes=4TiB src=host transport=tcp: size 4 TiB needs 8 TiB"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("sizes=1MiB"), "{}", out.stderr);
    assert!(!t.join("r.json").exists(), "refused before any results file");

    // The plan needs no memory; --here lists only the case that does not fit.
    run(&["sweep", file, "--plan"]).expect_code(0);
    let out = run(&["sweep", file, "--plan", "--here"]);
    out.expect_code(1);
    assert!(out.stderr.contains("here: case 1 (4 TiB) cannot run: size 4 TiB needs 8 TiB"), "{}", out.stderr);
    assert!(!out.stderr.contains("case 0"), "{}", out.stderr);
    assert!(out.stderr.contains("here: 1 of 2 cases cannot run"), "{}", out.stderr);
}

#[test]
fn here_passes_when_the_host_has_what_the_sweep_needs() {
    let smoke = format!("{ROOT}/sweeps/smoke.toml");
    let out = run(&["sweep", &smoke, "--plan", "--here"]);
    out.expect_code(0);
    assert!(out.stdout.contains("here: all 6 cases can run on this host"), "{}", out.stdout);
}

#[test]
fn size_ranges_on_the_command_line() {
    for (sizes, want) in [
        ("1MiB..4MiB", &["1 MiB", "2 MiB", "4 MiB"][..]),
        ("1MiB..3MiB", &["1 MiB", "2 MiB", "3 MiB"][..]),
        ("1MiB..64MiB:x4", &["1 MiB", "4 MiB", "16 MiB", "64 MiB"][..]),
        ("1MiB..4MiB,96MiB", &["1 MiB", "2 MiB", "4 MiB", "96 MiB"][..]),
        ("1MiB..3MiB:+1MiB", &["1 MiB", "2 MiB", "3 MiB"][..]),
    ] {
        let out = run(&["sweep", "--sizes", sizes, "--plan"]);
        out.expect_code(0);
        assert_eq!(sizes_of(&plan_rows(&out.stdout)), want, "--sizes {sizes}");
    }
    let out = run(&["sweep", "--tokens", "1k..4k", "--model", "qwen3-30b-a3b", "--plan"]);
    out.expect_code(0);
    let tokens: Vec<String> = plan_rows(&out.stdout).iter().map(|r| r[2].clone()).collect();
    assert_eq!(tokens, ["1k", "2k", "4k"]);
    let help = run(&["sweep", "--help"]);
    assert!(help.stdout.contains("1MiB..1GiB:x4") && help.stdout.contains("1k..128k"), "{}", help.stdout);
}

#[test]
fn bad_size_ranges_exit_2_with_one_line_each() {
    for (flag, value, needle) in [
        ("--sizes", "4MiB..1MiB", "the range runs backwards"),
        ("--sizes", "1MiB..4MiB:x0", "a factor of 0 never reaches the end"),
        ("--sizes", "1MiB..4MiB:x1", "a factor of 1 never reaches the end"),
        ("--sizes", "1MiB..4MiB:+0", "a step of 0 never reaches the end"),
        ("--sizes", "1B..1GiB:+1B", "more than the sweep limit of 100000"),
        ("--tokens", "128k..1k", "the range runs backwards"),
    ] {
        let mut args = vec!["sweep", flag, value, "--plan"];
        if flag == "--tokens" {
            args.extend(["--model", "qwen3-8b"]);
        }
        let out = run(&args);
        out.expect_code(2);
        let line = out.stderr.lines().find(|l| l.starts_with("error:")).unwrap_or_default();
        assert!(line.contains(needle) && line.contains(value), "{flag} {value}: {}", out.stderr);
        assert!(out.stdout.is_empty(), "{}", out.stdout);
    }
}

#[test]
fn size_ranges_in_a_sweep_file_are_one_case_per_size() {
    let t = TempDir::new("plan-ranges");
    let file = t.join("r.toml");
    std::fs::write(&file, "transport = \"tcp\"\nsizes = [\"1MiB..4MiB\", \"96MiB\"]\nstreams = [1, 2]\n").unwrap();
    let file = file.to_str().unwrap();
    let out = run(&["sweep", file, "--plan"]);
    out.expect_code(0);
    let rows = plan_rows(&out.stdout);
    assert_eq!(sizes_of(&rows), ["1 MiB", "2 MiB", "4 MiB", "96 MiB", "1 MiB", "2 MiB", "4 MiB", "96 MiB"]);
    let out = run(&["sweep", file, "--plan", "--set", "sizes=1MiB..2MiB"]);
    out.expect_code(0);
    assert_eq!(sizes_of(&plan_rows(&out.stdout)), ["1 MiB", "2 MiB", "1 MiB", "2 MiB"]);
    std::fs::write(t.join("r.toml"), "transport = \"tcp\"\nsizes = \"4MiB..1MiB\"\n").unwrap();
    let out = run(&["sweep", file, "--plan"]);
    out.expect_code(2);
    assert!(out.stderr.contains("sizes = \"4MiB..1MiB\": the range runs backwards"), "{}", out.stderr);
}
