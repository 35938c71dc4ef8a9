//! What a sweep file's run writes, through the real binary over loopback TCP: every output tells the file's cases
//! apart (the CSV and Markdown carry each case's name and a column per parameter that varies; the JSON lists those
//! parameters), every results file matches docs/results-v1.schema.json, the output flags (`--fig`, `--line`) work
//! with a sweep file, and a parameter flag is refused by the name the user typed. Also: `predict` names where the
//! bytes/token it used came from.

mod common;

use common::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;

const SCHEMA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/results-v1.schema.json");
const RESULTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/results");
const SMOKE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/sweeps/smoke.toml");

// ------------------------------------------------------------------------------------------- schema checking

/// The keywords of JSON Schema 2020-12 that [`check`] understands; a schema using any other is refused, so no
/// keyword of docs/results-v1.schema.json can be silently ignored.
const KEYWORDS: &[&str] = &[
    "$schema",
    "$id",
    "$ref",
    "$defs",
    "title",
    "description",
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "minimum",
    "minItems",
    "maxItems",
];

fn type_matches(name: &str, v: &Value) -> bool {
    match name {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        "number" => v.is_number(),
        "integer" => v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|f| f.fract() == 0.0),
        other => panic!("schema: unknown type {other:?}"),
    }
}

/// Check `v` against `schema` (a part of `root`), appending "path: what is wrong" to `errors`.
fn check(root: &Value, schema: &Value, v: &Value, path: &str, errors: &mut Vec<String>) {
    let Some(s) = schema.as_object() else { panic!("schema at {path}: not an object") };
    if let Some(k) = s.keys().find(|k| !KEYWORDS.contains(&k.as_str())) {
        panic!("schema at {path}: keyword {k:?} is not one this checker knows");
    }
    if let Some(r) = s.get("$ref").and_then(Value::as_str) {
        let name = r.strip_prefix("#/$defs/").unwrap_or_else(|| panic!("schema: $ref {r} is not #/$defs/NAME"));
        let target = root["$defs"].get(name).unwrap_or_else(|| panic!("schema: $ref {r} names nothing"));
        check(root, target, v, path, errors);
    }
    if let Some(t) = s.get("type") {
        let names: Vec<&str> = match t {
            Value::String(one) => vec![one.as_str()],
            Value::Array(list) => list.iter().map(|x| x.as_str().expect("type names")).collect(),
            _ => panic!("schema at {path}: type is a name or a list of names"),
        };
        if !names.iter().any(|n| type_matches(n, v)) {
            errors.push(format!("{path}: {v} is not of type {t}"));
            return;
        }
    }
    if let Some(c) = s.get("const") {
        if c != v {
            errors.push(format!("{path}: {v} is not {c}"));
        }
    }
    if let Some(list) = s.get("enum").and_then(Value::as_array) {
        if !list.contains(v) {
            errors.push(format!("{path}: {v} is not one of {}", Value::Array(list.clone())));
        }
    }
    if let (Some(min), Some(x)) = (s.get("minimum").and_then(Value::as_f64), v.as_f64()) {
        if x < min {
            errors.push(format!("{path}: {x} < {min}"));
        }
    }
    if let Some(items) = v.as_array() {
        let len = items.len() as u64;
        if s.get("minItems").and_then(Value::as_u64).is_some_and(|m| len < m) {
            errors.push(format!("{path}: {len} items, fewer than minItems"));
        }
        if s.get("maxItems").and_then(Value::as_u64).is_some_and(|m| len > m) {
            errors.push(format!("{path}: {len} items, more than maxItems"));
        }
        if let Some(item) = s.get("items") {
            for (i, x) in items.iter().enumerate() {
                check(root, item, x, &format!("{path}[{i}]"), errors);
            }
        }
    }
    if let Some(obj) = v.as_object() {
        for key in s.get("required").and_then(Value::as_array).into_iter().flatten() {
            let key = key.as_str().expect("required names");
            if !obj.contains_key(key) {
                errors.push(format!("{path}: lacks {key:?}"));
            }
        }
        let props = s.get("properties").and_then(Value::as_object);
        for (key, x) in obj {
            let at = format!("{path}.{key}");
            match (props.and_then(|p| p.get(key)), s.get("additionalProperties")) {
                (Some(p), _) => check(root, p, x, &at, errors),
                (None, Some(Value::Bool(false))) => errors.push(format!("{at}: not allowed")),
                (None, Some(extra @ Value::Object(_))) => check(root, extra, x, &at, errors),
                (None, _) => {}
            }
        }
    }
}

/// What is wrong with `v` as a results file (empty when it matches the schema).
fn schema_errors(v: &Value) -> Vec<String> {
    let schema = read_json(Path::new(SCHEMA));
    assert_eq!(schema["$schema"], "https://json-schema.org/draft/2020-12/schema");
    let mut errors = Vec::new();
    check(&schema, &schema, v, "$", &mut errors);
    errors
}

fn assert_matches_schema(what: &str, v: &Value) {
    let errors = schema_errors(v);
    assert!(errors.is_empty(), "{what} does not match {SCHEMA}:\n{}", errors.join("\n"));
}

#[test]
fn every_results_file_in_the_repository_matches_the_schema() {
    let mut checked = 0;
    // The files the repository holds (git's list), not what local runs left in the folder beside them.
    let listed = std::process::Command::new("git")
        .args(["ls-files", "-z", "--", "*.json"])
        .current_dir(RESULTS)
        .output()
        .expect("git ls-files");
    assert!(listed.status.success(), "git ls-files failed: {}", String::from_utf8_lossy(&listed.stderr));
    for name in listed.stdout.split(|b| *b == 0).filter(|n| !n.is_empty()) {
        let p = Path::new(RESULTS).join(String::from_utf8_lossy(name).as_ref());
        let v = read_json(&p);
        // results/ also keeps a PyTorch baseline's numbers (h200-torch-bidir-*.json): no kvxfer results file.
        if v.get("schema").is_none() && v.get("cases").is_none() {
            continue;
        }
        assert_matches_schema(&p.display().to_string(), &v);
        checked += 1;
    }
    assert!(checked >= 15, "only {checked} results files found in {RESULTS}");
}

/// An error the checker must report, and the change to a good results file that causes it.
type Break = (&'static str, fn(&mut Value));

/// The checker finds what the schema forbids: a results file with each of these changes does not match.
#[test]
fn a_latency_runs_results_file_matches_the_schema() {
    let dir = TempDir::new("latency-schema");
    run(&["latency", "--sizes", "8,1KiB", "--iters", "20", "--warmup-iters", "2", "--json", &dir.arg("lat.json")])
        .expect_code(0);
    let v = read_json(&dir.join("lat.json"));
    assert_matches_schema("kvxfer latency's results", &v);
    assert!(v["cases"][1]["latency_us"]["p999"].is_number(), "{}", v["cases"][1]);
}

#[test]
fn a_replays_results_files_match_the_schema() {
    let dir = TempDir::new("replay-schema");
    let args = ["replay", "--arrivals", "poisson:100", "--prompt-tokens", "fixed:8", "--requests", "20"];
    let more = ["--kv-bytes-per-token", "1024", "--rates", "50,100", "--json", &dir.arg("r.json")];
    run(&[&args[..], &more[..]].concat()).expect_code(0);
    let v = read_json(&dir.join("r.json"));
    assert_matches_schema("kvxfer replay's results", &v);
    assert_eq!(v["replay"]["loads"][1]["requests"].as_array().map(Vec::len), Some(20), "{}", v["replay"]);
    let layerwise = ["--model", "llama-3.1-8b", "--layerwise", "--prefill-tokens-per-s", "1e6", "--json"];
    run(&[&args[..], &layerwise[..], &[dir.arg("l.json").as_str()]].concat()).expect_code(0);
    let v = read_json(&dir.join("l.json"));
    assert_matches_schema("a layer-wise replay's results", &v);
    assert_eq!(v["replay"]["latency"], "prefill_end_to_landed", "{}", v["replay"]);
}

#[test]
fn a_cluster_replays_results_file_matches_the_schema() {
    let dir = TempDir::new("cluster-replay-schema");
    let json = dir.arg("r.json");
    let port = free_port();
    let ranks: Vec<Proc> = (0..2)
        .map(|rank| {
            let mut cmd = launch::clean(std::process::Command::new(bin()));
            cmd.args([
                "cluster",
                "--pattern",
                "replay",
                "--prefill",
                "0",
                "--decode",
                "1",
                "--arrivals",
                "poisson:100",
            ]);
            cmd.args(["--prompt-tokens", "fixed:8", "--requests", "20", "--kv-bytes-per-token", "1024"]);
            cmd.args(["--rates", "50,100", "--transport", "tcp", "--json", &json]);
            cmd.args(["--coordinator", &format!("127.0.0.1:{port}")]);
            cmd.env("KVXFER_RANK", rank.to_string()).env("KVXFER_WORLD_SIZE", "2");
            Proc::start(&mut cmd, format!("rank {rank} of a cluster replay"))
        })
        .collect();
    for r in ranks {
        r.finish().expect_code(0);
    }
    let v = read_json(Path::new(&json));
    assert_matches_schema("kvxfer cluster --pattern replay's results", &v);
    assert_eq!(v["replay"]["loads"][1]["cluster"]["links"][0]["requests"].as_u64(), Some(20), "{}", v["replay"]);
}

#[test]
fn a_results_file_that_breaks_the_contract_does_not_match_the_schema() {
    let good = read_json(&Path::new(RESULTS).join("rxe-paged.json"));
    assert_matches_schema("rxe-paged.json", &good);
    let breaks: [Break; 6] = [
        ("lacks \"config\"", |v| drop(v.as_object_mut().unwrap().remove("config"))),
        ("is not of type", |v| v["cases"][0]["size_bytes"] = "big".into()),
        ("is not \"kvxfer/results/v1\"", |v| v["schema"] = "kvxfer/results/v2".into()),
        ("is not one of", |v| v["sweep"]["order"] = "fast".into()),
        ("lacks \"p99\"", |v| drop(v["cases"][1]["transfer_ms"].as_object_mut().unwrap().remove("p99"))),
        ("is not of type", |v| v["cases"][0]["params"]["streams"] = 2.into()),
    ];
    for (needle, change) in breaks {
        let mut bad = good.clone();
        change(&mut bad);
        let errors = schema_errors(&bad);
        assert!(errors.iter().any(|e| e.contains(needle)), "expected an error with {needle:?}, got {errors:?}");
    }
}

// ----------------------------------------------------------------------------------------- a sweep's outputs

/// A tcp sweep file whose cases differ in layout, streams and (paged only) block_tokens, at two sizes each.
const VARYING: &str = r#"
name = "outputs"
reps = 2
warmup = 0
order = "sequential"
transport = "tcp"
model = "qwen3-30b-a3b"
tokens = [16, 32]
streams = [1, 2]

[[case]]
layout = "contiguous"

[[case]]
layout = "paged"
block_tokens = 16
"#;

fn csv_rows(path: &Path) -> (Vec<String>, Vec<Vec<String>>) {
    let mut r = csv::Reader::from_path(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let header: Vec<String> = r.headers().unwrap().iter().map(String::from).collect();
    let rows = r.records().map(|x| x.unwrap().iter().map(String::from).collect()).collect();
    (header, rows)
}

fn column(header: &[String], name: &str) -> usize {
    header.iter().position(|h| h == name).unwrap_or_else(|| panic!("no {name:?} column in {header:?}"))
}

#[test]
fn a_sweep_files_csv_markdown_and_json_tell_its_cases_apart() {
    let t = TempDir::new("sweep-outputs");
    let file = t.join("varying.toml");
    std::fs::write(&file, VARYING).unwrap();
    let (json, csv, md) = (t.arg("v.json"), t.arg("v.csv"), t.arg("v.md"));
    run(&["sweep", file.to_str().unwrap(), "--json", &json, "--csv", &csv, "--md", &md]).expect_code(0);

    let v = read_json(Path::new(&json));
    assert_matches_schema("a fresh sweep file's results", &v);
    let varying = ["block_tokens", "layout", "streams"];
    assert_eq!(v["sweep"]["varying"], serde_json::json!(varying), "{}", v["sweep"]);
    let cases = v["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 8);

    let (header, rows) = csv_rows(Path::new(&csv));
    let tail: Vec<&str> = header[header.len() - 5..].iter().map(String::as_str).collect();
    assert_eq!(tail, ["case_id", "case", "param_block_tokens", "param_layout", "param_streams"]);
    assert_eq!(rows.len(), 8, "a row per case");
    let col = |name: &str| column(&header, name);
    let mut ids = BTreeSet::new();
    let mut names = BTreeSet::new();
    for (row, c) in rows.iter().zip(cases) {
        let p = &c["params"];
        let layout = p["layout"].as_str().unwrap();
        // The file's own transport, not every transport of the file joined.
        assert_eq!(row[col("transport")], "tcp", "{row:?}");
        assert!(ids.insert(row[col("case_id")].clone()), "case ids repeat: {row:?}");
        assert_eq!(row[col("case_id")], c["case_id"].to_string());
        assert_eq!(row[col("case")], c["case_label"].as_str().unwrap());
        assert!(names.insert((row[col("case")].clone(), row[col("tokens")].clone())), "two rows alike: {row:?}");
        assert_eq!(row[col("param_layout")], layout);
        assert_eq!(row[col("layout")], layout, "what was measured is what the file asked for");
        assert_eq!(row[col("param_streams")], p["streams"].as_str().unwrap());
        let block_tokens = if layout == "paged" { "16" } else { "" };
        assert_eq!(row[col("param_block_tokens")], block_tokens, "{row:?}");
        let label = match layout {
            "paged" => format!("block_tokens=16 layout=paged streams={}", row[col("param_streams")]),
            _ => format!("layout=contiguous streams={}", row[col("param_streams")]),
        };
        assert_eq!(row[col("case")], label);
    }
    let seen: BTreeSet<(String, String)> =
        rows.iter().map(|r| (r[col("param_layout")].clone(), r[col("param_streams")].clone())).collect();
    assert_eq!(seen.len(), 4, "every layout with every stream count: {seen:?}");

    let md = std::fs::read_to_string(&md).unwrap();
    assert!(md.contains("| verified | case | block_tokens | layout | streams |"), "{md}");
    for c in cases {
        let p = &c["params"];
        let cells = format!(
            "| {} | {} | {} | {} |",
            c["case_label"].as_str().unwrap(),
            p.get("block_tokens").and_then(Value::as_str).unwrap_or(""),
            p["layout"].as_str().unwrap(),
            p["streams"].as_str().unwrap()
        );
        assert!(md.contains(&cells), "no row ends with {cells}:\n{md}");
    }
}

/// Files written before `sweep.varying` existed get the same columns, derived from their case list.
#[test]
fn report_csv_of_an_older_sweep_file_derives_its_varying_columns() {
    let t = TempDir::new("old-sweep-csv");
    let old = Path::new(RESULTS).join("rxe-paged.json");
    let v = read_json(&old);
    assert!(v["sweep"].get("varying").is_none(), "the file predates sweep.varying");
    let csv = t.arg("old.csv");
    run(&["report", old.to_str().unwrap(), "--csv", &csv]).expect_code(0);
    let (header, rows) = csv_rows(Path::new(&csv));
    for key in ["layout", "dst_placement", "max_sge"] {
        let i = column(&header, &format!("param_{key}"));
        for (row, c) in rows.iter().zip(v["cases"].as_array().unwrap()) {
            assert_eq!(row[i], c["params"].get(key).and_then(Value::as_str).unwrap_or(""), "{key}: {row:?}");
        }
    }
    assert!(rows.iter().all(|r| r[column(&header, "transport")] == "verbs"));
}

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
    let outputs = ["--json", "--csv", "--md", "--events", "--fig", "--line", "--html", "--out-dir", "--label"];
    let others = ["--help", "--set", "--resume", "--plan", "--here", "--estimate-from", "--max-input-size"];
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
    let out = run(&[
        "sweep",
        SMOKE,
        "--plan",
        "--fig",
        &figs,
        "--line",
        "X=1",
        "--csv",
        &t.arg("x.csv"),
        "--html",
        &t.arg("p.html"),
    ]);
    out.expect_code(0);
    assert!(out.stdout.contains("sweep smoke: 6 cases"), "{}", out.stdout);
}

// ------------------------------------------------------------------------------------------------ duration

/// `--duration 2s --interval 500ms`: the case records its intervals, whose reps add up to the case's, in order of
/// time and moving bytes, the file still matches the schema, and `--fig` draws them over time.
#[test]
fn a_paced_sweep_records_its_intervals() {
    let t = TempDir::new("paced-sweep");
    let (json, figs) = (t.arg("r.json"), t.arg("figs"));
    let out =
        run(&["sweep", "--sizes", "1MiB", "--duration", "2s", "--interval", "500ms", "--json", &json, "--fig", &figs]);
    out.expect_code(0);
    for ext in ["png", "svg"] {
        assert!(t.join(&format!("figs/bandwidth-over-time.{ext}")).is_file(), "{}", out.stderr);
    }
    assert!(out.stdout.lines().any(|l| l.starts_with("interval ")), "{}", out.stdout);
    let r = read_json(&t.join("r.json"));
    assert_matches_schema("a paced sweep's results", &r);
    let case = &r["cases"][0];
    let intervals = case["intervals"].as_array().unwrap_or_else(|| panic!("no intervals: {case}"));
    assert!(intervals.len() >= 3, "{intervals:?}");
    let reps: u64 = intervals.iter().map(|i| i["reps"].as_u64().unwrap()).sum();
    assert_eq!(reps, case["n"].as_u64().unwrap());
    let t_s: Vec<f64> = intervals.iter().map(|i| num(i, "t_s")).collect();
    assert!(t_s.windows(2).all(|w| w[0] < w[1]), "{t_s:?}");
    assert!(intervals.iter().all(|i| num(i, "gbps") > 0.0 && num(i, "p99_ms") >= num(i, "p50_ms")), "{intervals:?}");
    assert_eq!((num(&case["duration"], "s"), num(&case["duration"], "interval_s")), (2.0, 0.5));
    assert!(num(&case["duration"], "measured_s") >= 2.0, "{}", case["duration"]);
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
