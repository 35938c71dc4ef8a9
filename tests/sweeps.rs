//! Sweep files through the real binary: the smoke sweep CI runs, resuming an interrupted sweep, predict on a
//! synthetic curve, and report's fingerprint warnings.

mod common;

use common::*;
use serde_json::Value;
use std::path::Path;

const SMOKE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/sweeps/smoke.toml");

fn write(p: &Path, text: &str) {
    std::fs::write(p, text).unwrap();
}

#[test]
fn smoke_sweep_runs_every_case_interleaved_with_cis_and_warnings() {
    let t = TempDir::new("smoke");
    let started = std::time::Instant::now();
    let out = run(&["sweep", SMOKE, "--json", &t.arg("s.json"), "--md", &t.arg("s.md"), "--label", "smoke here"]);
    out.expect_code(0);
    assert!(started.elapsed().as_secs() < 30, "the smoke sweep takes seconds");
    assert!(out.stdout.contains("95% CI ms") && out.stdout.contains("streams=2"), "{}", out.stdout);
    assert!(out.stdout.contains("case(s)"), "the summary line counts cases with warnings:\n{}", out.stdout);
    // Two configurations: compared side by side at the end, and each Markdown row names its configuration.
    assert!(out.stdout.contains("Side by side") && out.stdout.contains("B/A GB/s"), "{}", out.stdout);
    let md = std::fs::read_to_string(t.join("s.md")).unwrap();
    assert!(md.contains("| verified | case |") && md.contains("| streams=2 |"), "{md}");
    assert!(md.contains("### Side by side") && md.contains("- B = "), "{md}");
    let r = read_json(&t.join("s.json"));
    assert_eq!(r["label"], "smoke here", "--label beats the file's default");
    let cases = r["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 6);
    for (i, c) in cases.iter().enumerate() {
        assert_eq!(c["case_id"].as_u64(), Some(i as u64), "cases in sweep order");
        check_case(c, c["size_bytes"].as_u64().unwrap(), 5, true);
        assert_eq!(c["warmup_reps"].as_array().unwrap().len(), 1, "warm-ups stored apart");
        assert!(c.get("complete").is_none(), "complete cases carry no flag");
        let ci = &c["p50_ci"];
        let (lo, hi, p50) = (
            ci["transfer_ms"][0].as_f64().unwrap(),
            ci["transfer_ms"][1].as_f64().unwrap(),
            num(&c["transfer_ms"], "p50"),
        );
        assert!(lo <= p50 && p50 <= hi, "{ci}");
        assert_eq!(ci["coverage"].as_f64(), Some(0.9375));
        assert!(ci["method"].as_str().unwrap().contains("order-statistic"));
        assert!(c["cv"].as_f64().is_some() && c["warnings"].is_array());
        assert_eq!(c["params"]["transport"], "tcp");
    }
    let s = &r["sweep"];
    assert_eq!((s["order"].as_str(), s["sessions"].as_array().unwrap().len()), (Some("interleaved"), 2));
    let rounds = s["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 5);
    for round in rounds {
        let mut ids: Vec<u64> = round.as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
        ids.sort();
        assert_eq!(ids, (0..6).collect::<Vec<_>>(), "each round runs every case once");
    }
    let env = &r["env"];
    for k in ["git_describe", "iommu", "numa_nodes", "nics", "gpus", "command_line", "kernel"] {
        assert!(env.get(k).is_some(), "env lacks {k}: {env}");
    }
}

fn small_sweep(t: &TempDir) -> String {
    let f = t.arg("small.toml");
    write(
        Path::new(&f),
        "reps = 3\nwarmup = 1\norder = \"sequential\"\ntransport = \"tcp\"\nsizes = [\"1MiB\", \"2MiB\", \"4MiB\"]\n",
    );
    f
}

fn rep_times(c: &Value) -> Vec<f64> {
    c["reps"].as_array().unwrap().iter().map(|r| num(r, "transfer_ms")).collect()
}

#[test]
fn resume_skips_exactly_the_completed_cases() {
    let t = TempDir::new("resume");
    let file = small_sweep(&t);
    let json = t.arg("r.json");
    run(&["sweep", &file, "--json", &json, "--md", &t.arg("r.md")]).expect_code(0);
    // Interrupted: the last case never ran, the middle one has one of its three reps.
    let mut r = read_json(Path::new(&json));
    let kept_first = rep_times(&r["cases"][0]);
    r["cases"].as_array_mut().unwrap().pop();
    r["cases"][1]["reps"].as_array_mut().unwrap().truncate(1);
    r["cases"][1]["complete"] = Value::Bool(false);
    let kept_partial = rep_times(&r["cases"][1]);
    std::fs::write(&json, serde_json::to_vec(&r).unwrap()).unwrap();

    let out = run(&["sweep", &file, "--resume", &json]);
    out.expect_code(0);
    assert!(out.stderr.contains("1 of 3 cases complete (skipped), 1 partly measured"), "{}", out.stderr);
    let r = read_json(Path::new(&json));
    let cases = r["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 3);
    assert_eq!(rep_times(&cases[0]), kept_first, "the completed case is untouched");
    assert_eq!(rep_times(&cases[1])[..1], kept_partial[..], "the partial case keeps its rep and continues");
    for c in cases {
        check_case(c, c["size_bytes"].as_u64().unwrap(), 3, false);
    }
    let s = &r["sweep"];
    assert_eq!(s["resumed_at"].as_array().unwrap().len(), 1);
    let rounds = s["rounds"].as_array().unwrap();
    // The first run's round, then the resumed run's: 2 reps of case 1 and 3 of case 2, nothing of case 0.
    assert_eq!(rounds.len(), 2);
    assert_eq!(rounds[1], serde_json::json!([1, 1, 2, 2, 2]));

    // Resuming with a different sweep is refused: the file's cases are not all in it.
    let other = t.arg("other.toml");
    write(Path::new(&other), "reps = 3\ntransport = \"tcp\"\nsizes = [\"8MiB\"]\n");
    let bad = run(&["sweep", &other, "--resume", &json]);
    bad.expect_code(2);
    assert!(bad.one_error().contains("is not in"), "{}", bad.stderr);
}

#[test]
fn sweep_file_mistakes_are_one_line_usage_errors() {
    let t = TempDir::new("sweep-bad");
    let file = small_sweep(&t);
    for (args, needle) in [
        (vec!["sweep", &file, "--set", "colour=red"], "unknown key \"colour\""),
        (vec!["sweep", &file, "--reps", "3"], "--set key=value"),
        // Refused whatever the value, also the default's: a sweep file sets the reps, and a flag ignored silently misleads.
        (vec!["sweep", &file, "--reps", "5"], "--reps: with a sweep file"),
        (vec!["sweep", &file, "--transport", "auto"], "--transport: with a sweep file"),
        (vec!["sweep", &file, "--src", "host"], "--src: with a sweep file"),
        (vec!["sweep", &file, "--set", "transport=carrier-pigeon"], "unknown transport"),
        (vec!["sweep", "no-such.toml"], "cannot read the sweep file"),
    ] {
        let out = run(&args);
        out.expect_code(2);
        assert!(out.one_error().contains(needle), "{args:?}: {}", out.stderr);
    }
}

#[test]
fn predict_interpolates_a_synthetic_curve_and_marks_extrapolation() {
    let t = TempDir::new("predict");
    let file = small_sweep(&t);
    let json = t.arg("p.json");
    run(&["sweep", &file, "--json", &json, "--md", &t.arg("p.md")]).expect_code(0);
    // Replace the measured p50s with a curve of exactly 10 GB/s: t = size / 1e7 ms.
    let mut r = read_json(Path::new(&json));
    for c in r["cases"].as_array_mut().unwrap() {
        let ms = c["size_bytes"].as_f64().unwrap() / 1e7;
        c["transfer_ms"]["p50"] = ms.into();
        c["p50_ci"] = Value::Null;
    }
    std::fs::write(&json, serde_json::to_vec(&r).unwrap()).unwrap();
    let out = run(&["predict", "--results", &json, "--sizes", "3MiB,8MiB", "--decode-ms", "0.1", "--json"]);
    out.expect_code(0);
    let p: Value = serde_json::from_str(&out.stdout).unwrap();
    let preds = p["predictions"].as_array().unwrap();
    let ms = num(&preds[0], "transfer_ms");
    assert!((ms - 3.0 * 1048576.0 / 1e7).abs() < 1e-9, "{ms}");
    assert_eq!(preds[0]["basis"], "interpolated");
    assert!((num(&preds[0], "gbps") - 10.0).abs() < 1e-9);
    assert!((num(&preds[0], "decode_steps") - ms / 0.1).abs() < 1e-9);
    assert_eq!(preds[1]["basis"], "extrapolated_above");
    let table = run(&["predict", "--results", &json, "--sizes", "3MiB,8MiB"]);
    table.expect_code(0);
    assert!(table.stdout.contains(" !") && table.stdout.contains("outside the measured range"), "{}", table.stdout);

    // No positive time to predict from: one usage error, not a panic.
    for c in r["cases"].as_array_mut().unwrap() {
        c["transfer_ms"]["p50"] = 0.0.into();
    }
    std::fs::write(&json, serde_json::to_vec(&r).unwrap()).unwrap();
    let zero = run(&["predict", "--results", &json, "--sizes", "3MiB"]);
    zero.expect_code(2);
    assert!(zero.one_error().contains("no selected case has a positive p50"), "{}", zero.stderr);
    zero.no_panic();
}

#[test]
fn report_warns_when_fingerprints_differ_in_what_matters() {
    let t = TempDir::new("fingerprint");
    let file = small_sweep(&t);
    let a = t.arg("a.json");
    run(&["sweep", &file, "--json", &a, "--md", &t.arg("a.md")]).expect_code(0);
    let mut r = read_json(Path::new(&a));
    let same = run(&["report", &a, &a]);
    same.expect_code(0);
    assert!(!same.stderr.contains("different environments"), "{}", same.stderr);
    r["env"]["iommu"]["mode"] = "translated-for-the-test".into();
    let b = t.arg("b.json");
    std::fs::write(&b, serde_json::to_vec(&r).unwrap()).unwrap();
    let out = run(&["report", &a, &b]);
    out.expect_code(0);
    assert!(out.stderr.contains("different environments: IOMMU mode"), "{}", out.stderr);
}

#[test]
fn a_run_with_numa_off_writes_numa_once_and_reads_back_for_report_and_resume() {
    let t = TempDir::new("numa-off");
    // Flags: the placement is recorded (it carries the mode); the key is written once.
    let json = t.arg("flags.json");
    run(&["sweep", "--sizes", "1MiB", "--reps", "2", "--numa", "off", "--json", &json]).expect_code(0);
    let text = std::fs::read_to_string(&json).unwrap();
    let config = text.split("\"cases\"").next().unwrap();
    assert_eq!(config.matches("\"numa\":").count(), 1, "config.numa written once:\n{config}");
    assert_eq!(read_json(Path::new(&json))["config"]["numa"]["sender"]["mode"], "off");
    run(&["report", &json, "--md", "-"]).expect_code(0);
    // A sweep file: the sessions hold the placements, config the mode alone.
    let file = t.arg("numa.toml");
    write(Path::new(&file), "transport = \"tcp\"\nsizes = [\"1MiB\", \"2MiB\"]\nreps = 2\nnuma = \"off\"\n");
    let json = t.arg("file.json");
    run(&["sweep", &file, "--json", &json]).expect_code(0);
    assert_eq!(read_json(Path::new(&json))["config"]["numa"], "off");
    run(&["report", &json, "--md", "-"]).expect_code(0);
    let mut r = read_json(Path::new(&json));
    r["cases"].as_array_mut().unwrap().pop();
    std::fs::write(&json, serde_json::to_vec(&r).unwrap()).unwrap();
    let out = run(&["sweep", &file, "--resume", &json]);
    out.expect_code(0);
    assert_eq!(read_json(Path::new(&json))["cases"].as_array().unwrap().len(), 2, "{}", out.stderr);
}
