//! `kvxfer serve` and `kvxfer send` as two real processes over loopback TCP, and `sweep` + `report`.

mod common;

use common::*;
use serde_json::Value;
use std::collections::HashSet;
use std::time::Duration;

const MIB: u64 = 1 << 20;

/// Run `serve --once` and `send --peer <it> <args>`; both must exit 0. Returns send's output.
fn serve_and_send(args: &[&str]) -> Out {
    let serve = Serve::start(&["--once"]);
    let mut all = vec!["send", "--peer", &serve.addr];
    all.extend_from_slice(args);
    let out = run(&all);
    out.expect_code(0);
    let s = serve.proc.finish();
    s.expect_code(0);
    assert!(s.stderr.contains("run complete"), "{}", s.stderr);
    assert!(s.error_lines().is_empty(), "{}", s.stderr);
    out
}

#[test]
fn send_verified_with_every_output_file() {
    let dir = TempDir::new("send");
    let (json, csv, md, events) = (dir.arg("r.json"), dir.arg("r.csv"), dir.arg("r.md"), dir.arg("e.jsonl"));
    let out = serve_and_send(&[
        "--sizes",
        "1MiB,3MiB",
        "--reps",
        "3",
        "--warmup",
        "1",
        "--verify",
        "--label",
        "it-send",
        "--json",
        &json,
        "--csv",
        &csv,
        "--md",
        &md,
        "--events",
        &events,
    ]);

    // Results JSON: schema, top-level keys, config, and every case key of the contract.
    let r = read_json(&dir.join("r.json"));
    assert_eq!(r["schema"], "kvxfer/results/v1");
    assert_eq!(r["label"], "it-send");
    assert_eq!(r["kvxfer_version"], env!("CARGO_PKG_VERSION"));
    let started = r["started_at"].as_str().unwrap();
    assert!(started.len() >= 20 && started.contains('T') && started.ends_with('Z'), "{started}");
    for k in ["hostname", "kernel", "cpu"] {
        assert!(r["env"][k].as_str().is_some_and(|s| !s.is_empty()), "env.{k}: {}", r["env"]);
    }
    let cfg = &r["config"];
    assert_eq!(cfg["transport"], "tcp");
    assert_eq!(cfg["block_size"].as_u64(), Some(64 * MIB), "tcp default block size");
    assert_eq!(cfg["streams"].as_u64(), Some(1));
    assert_eq!(cfg["reps"].as_u64(), Some(3));
    assert_eq!(cfg["warmup"].as_u64(), Some(1));
    assert_eq!(cfg["verify"], true);
    assert!(r.get("error").is_none(), "a complete run records no error: {}", r["error"]);
    let cases = r["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 2);
    check_case(&cases[0], MIB, 3, true);
    check_case(&cases[1], 3 * MIB, 3, true);
    assert!(cases[0]["tokens"].is_null() && cases[0]["bytes_per_token"].is_null());
    let total: u64 = cases.iter().map(|c| c["size_bytes"].as_u64().unwrap()).sum();
    assert_eq!(total, 4 * MIB);
    assert_eq!(cases[0]["warmup_reps"].as_array().unwrap().len(), 1);

    // CSV: a header and one row per case, with the sizes and counts of the JSON.
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut rows = csv_rows(&text);
    let header = rows.remove(0);
    assert_eq!(rows.len(), 2, "{text}");
    let col = |name: &str| header.iter().position(|h| h == name).unwrap_or_else(|| panic!("no {name}"));
    for (row, c) in rows.iter().zip(cases) {
        assert_eq!(row[col("size_bytes")], c["size_bytes"].to_string());
        assert_eq!(row[col("n")], "3");
        assert_eq!(row[col("verified")], "true");
        assert_eq!(row[col("mismatched_bytes")], "0");
        assert_eq!(row[col("label")], "it-send");
        let p50: f64 = row[col("gbps_p50")].parse().unwrap();
        assert!((p50 - num(&c["gbps"], "p50")).abs() < 1e-3, "{p50} vs {}", c["gbps"]);
    }

    // Markdown: a table with one row per size.
    let mdt = std::fs::read_to_string(&md).unwrap();
    assert!(mdt.contains("| size |"), "{mdt}");
    assert!(mdt.contains("| 1 MiB |") && mdt.contains("| 3 MiB |"), "{mdt}");
    assert!(mdt.contains("GB/s = 10^9"), "{mdt}");

    // Events: a sender and a receiver line for every rep (warm-ups included) of every case.
    let lines: Vec<Value> = std::fs::read_to_string(&events)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("events line is JSON"))
        .collect();
    assert_eq!(lines.len(), 2 * (3 + 1) * 2, "2 cases × 4 reps × 2 sides");
    let mut seen = HashSet::new();
    for e in &lines {
        let side = e["side"].as_str().unwrap().to_string();
        assert!(side == "sender" || side == "receiver", "{e}");
        if side == "sender" {
            assert!(num(e, "t_last_complete_ms") >= num(e, "t_first_post_ms"), "{e}");
            assert!(num(e, "t_done_ms") >= num(e, "t_setup_start_ms"), "{e}");
        } else {
            assert!(num(e, "t_landed_ms") >= num(e, "t_rep_start_ms"), "{e}");
            assert_eq!(e["mismatched_bytes"].as_u64(), Some(0), "{e}");
        }
        let key = (e["case"].as_u64().unwrap(), e["rep"].as_u64().unwrap(), e["warmup"].as_bool().unwrap(), side);
        assert!(seen.insert(key), "duplicate events line {e}");
    }
    for case in 0..2u64 {
        for side in ["sender", "receiver"] {
            assert!(seen.contains(&(case, 0, true, side.to_string())));
            for rep in 0..3 {
                assert!(seen.contains(&(case, rep, false, side.to_string())), "case {case} rep {rep} {side}");
            }
        }
    }

    // Live rows on stdout, one per size.
    assert!(out.stdout.lines().any(|l| l.contains("1 MiB") && l.contains("ok")), "{}", out.stdout);
    assert!(out.stdout.lines().any(|l| l.contains("3 MiB") && l.contains("ok")), "{}", out.stdout);
}

fn csv_rows(text: &str) -> Vec<Vec<String>> {
    // The fields written here hold no quotes or commas except the label, which the tests choose.
    text.lines().map(|l| l.split(',').map(str::to_string).collect()).collect()
}

fn single_case(json: &std::path::Path) -> Value {
    let r = read_json(json);
    let cases = r["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 1, "{r}");
    cases[0].clone()
}

/// Blocks spread over several connections, the last block short or some connections idle, still verify: 3 MiB in
/// blocks of 1,000,000 B (three full blocks and a 145,728 B tail) over 3 streams; 5 blocks of 1 MiB over 8 streams.
#[test]
fn several_streams_uneven_blocks_and_idle_streams_verify() {
    // (--sizes, its bytes, --streams, --block-size, its bytes, --reps, writes)
    for (size, bytes, streams, block, block_bytes, reps, writes) in
        [("3MiB", 3 * MIB, 3, "1000000B", 1_000_000, 3, 4), ("5MiB", 5 * MIB, 8, "1MiB", MIB, 2, 5)]
    {
        let dir = TempDir::new("streams");
        let json = dir.arg("r.json");
        let (s, n) = (streams.to_string(), reps.to_string());
        let shape = ["--sizes", size, "--streams", &s, "--block-size", block];
        serve_and_send(&[&shape[..], &["--reps", &n, "--verify", "--json", &json]].concat());
        let r = read_json(&dir.join("r.json"));
        assert_eq!(r["config"]["streams"].as_u64(), Some(streams));
        let c = single_case(&dir.join("r.json"));
        check_case(&c, bytes, reps, true);
        let got = (c["block_size"].as_u64(), c["block_clamped"].as_bool(), c["writes"].as_u64());
        assert_eq!(got, (Some(block_bytes), Some(false), Some(writes)), "{size} over {streams} streams: {c}");
    }
}

#[test]
fn block_size_larger_than_transfer_is_clamped_and_marked() {
    let dir = TempDir::new("clamp");
    let (json, md) = (dir.arg("r.json"), dir.arg("r.md"));
    let out = serve_and_send(&[
        "--sizes",
        "1MiB,2MiB",
        "--reps",
        "2",
        "--block-size",
        "2MiB",
        "--verify",
        "--json",
        &json,
        "--md",
        &md,
    ]);
    let r = read_json(&dir.join("r.json"));
    let (small, big) = (&r["cases"][0], &r["cases"][1]);
    check_case(small, MIB, 2, true);
    check_case(big, 2 * MIB, 2, true);
    assert_eq!(small["block_size"].as_u64(), Some(MIB), "clamped to the transfer");
    assert_eq!(small["block_clamped"], true);
    assert_eq!(small["writes"].as_u64(), Some(1));
    assert_eq!(big["block_size"].as_u64(), Some(2 * MIB));
    assert_eq!(big["block_clamped"], false, "exactly the transfer size is not clamped");
    // The live table and the Markdown table mark the clamped block with '*' and explain it.
    let row1 = out.stdout.lines().find(|l| l.trim_start().starts_with("1 MiB")).unwrap();
    assert!(row1.contains("1 MiB*"), "{}", out.stdout);
    let row2 = out.stdout.lines().find(|l| l.trim_start().starts_with("2 MiB")).unwrap();
    assert!(!row2.contains('*'), "{}", out.stdout);
    assert!(out.stdout.contains("clamped"), "{}", out.stdout);
    let mdt = std::fs::read_to_string(&md).unwrap();
    assert!(mdt.contains("1 MiB*") && mdt.contains("clamped"), "{mdt}");
}

/// `--tokens` with each source of bytes per token: a preset model, a model's config.json (4 layers × 2 (K, V) × 2 KV
/// heads × head dim 64 × 2 B = 2048 B/token), or `--kv-bytes-per-token`. stderr says which and how much; every case
/// records its tokens and bytes per token.
#[test]
fn tokens_with_a_preset_model_a_model_config_file_or_kv_bytes_per_token() {
    let dir = TempDir::new("tokens");
    let model_dir = dir.join("tiny-model");
    std::fs::create_dir(&model_dir).unwrap();
    std::fs::write(
        model_dir.join("config.json"),
        r#"{"num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
            "hidden_size": 512, "torch_dtype": "bfloat16"}"#,
    )
    .unwrap();
    let cfg = model_dir.join("config.json").to_string_lossy().into_owned();
    let json = dir.arg("r.json");
    /// Arguments, what stderr says, tokens of each case, bytes per token.
    type Run<'a> = (&'a [&'a str], &'a [&'a str], &'a [u64], u64);
    let runs: [Run; 3] = [
        (&["--tokens", "8,32", "--model", "qwen3-30b-a3b", "--verify"], &["98304 B/token"], &[8, 32], 98_304),
        (
            &["--tokens", "512,1k", "--model-config", &cfg, "--verify"],
            &["2048 B/token", "tiny-model"],
            &[512, 1024],
            2048,
        ),
        (
            &["--tokens", "256", "--kv-bytes-per-token", "12288"],
            &["12288 B/token", "--kv-bytes-per-token"],
            &[256],
            12_288,
        ),
    ];
    for (args, said, tokens, per_token) in runs {
        let out = serve_and_send(&[args, &["--reps", "2", "--json", &json]].concat());
        for s in said {
            assert!(out.stderr.contains(s), "{args:?}: stderr lacks {s:?}: {}", out.stderr);
        }
        let r = read_json(&dir.join("r.json"));
        if args.contains(&"--model") {
            assert_eq!(r["config"]["model"], "qwen3-30b-a3b");
        }
        let cases = r["cases"].as_array().unwrap();
        assert_eq!(cases.len(), tokens.len(), "{args:?}");
        for (c, &t) in cases.iter().zip(tokens) {
            check_case(c, t * per_token, 2, args.contains(&"--verify"));
            assert_eq!((c["tokens"].as_u64(), c["bytes_per_token"].as_u64()), (Some(t), Some(per_token)), "{args:?}");
        }
    }
}

#[test]
fn sweep_writes_results_and_report_re_renders_them() {
    let dir = TempDir::new("sweep");
    let out_dir = dir.arg("results");
    let md = dir.join("r.md");
    let md_arg = md.to_string_lossy().into_owned();
    let out =
        run(&["sweep", "--sizes", "1MiB,2MiB", "--reps", "2", "--verify", "--out-dir", &out_dir, "--md", &md_arg]);
    out.expect_code(0);
    let files: Vec<_> = std::fs::read_dir(&out_dir).unwrap().map(|e| e.unwrap().path()).collect();
    let json = files.iter().find(|p| p.extension().is_some_and(|e| e == "json")).expect("a .json");
    assert_eq!(files.len(), 1, "only the .json (no temp files left, Markdown only where --md says): {files:?}");
    let stem = json.file_stem().unwrap().to_string_lossy();
    assert!(stem.len() >= 15 && stem.starts_with("20") && stem.contains('T'), "timestamp name: {stem}");

    let r = read_json(json);
    assert_eq!(r["schema"], "kvxfer/results/v1");
    assert_eq!(r["config"]["role"], "sweep");
    let cases = r["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 2);
    check_case(&cases[0], MIB, 2, true);
    check_case(&cases[1], 2 * MIB, 2, true);
    let mdt = std::fs::read_to_string(&md).unwrap();
    assert!(mdt.contains("| 1 MiB |") && mdt.contains("| 2 MiB |"), "{mdt}");

    let j = json.to_string_lossy().into_owned();
    // Boxed tables by default.
    let rep = run(&["report", &j]);
    rep.expect_code(0);
    assert!(rep.stdout.contains("1 MiB") && rep.stdout.contains("2 MiB"), "{}", rep.stdout);
    assert!(rep.stdout.contains("p50 GB/s"), "{}", rep.stdout);
    let p50 = format!("{:.2}", num(&cases[1]["gbps"], "p50"));
    assert!(rep.stdout.contains(&p50), "report shows the saved p50 {p50}: {}", rep.stdout);

    // Markdown on stdout: same table as the .md sweep wrote.
    let rep_md = run(&["report", &j, "--md", "-"]);
    rep_md.expect_code(0);
    assert_eq!(rep_md.stdout, mdt, "report --md - re-renders the sweep's Markdown");

    // CSV on stdout: a header and a row per case.
    let rep_csv = run(&["report", &j, "--csv", "-"]);
    rep_csv.expect_code(0);
    let rows = csv_rows(&rep_csv.stdout);
    assert_eq!(rows.len(), 3, "{}", rep_csv.stdout);
    assert_eq!(rows[0][2], "size_bytes");
    assert_eq!(rows[1][2], MIB.to_string());
    assert_eq!(rows[2][2], (2 * MIB).to_string());

    // Two files: two runs' rows.
    let rep2 = run(&["report", &j, &j, "--csv", "-"]);
    rep2.expect_code(0);
    assert_eq!(csv_rows(&rep2.stdout).len(), 5, "{}", rep2.stdout);

    // Into a file.
    let md_out = dir.arg("again.md");
    run(&["report", &j, "--md", &md_out]).expect_code(0);
    assert_eq!(std::fs::read_to_string(&md_out).unwrap(), mdt);
}

#[test]
fn every_send_and_receive_path_verifies() {
    // 5 MiB in 1,500,000 B blocks: three large writes (≥ 1 MiB: spliced and/or landed through the bounce buffer, at
    // offsets that are not 16-byte aligned) and a 742,880 B tail sent with writev and landed directly, over two
    // connections; with each path forced, and with both left to the calibration (whose trials need a region of
    // 16 MiB: the second size).
    let cases = [
        (Some("1"), Some("bounce")),
        (Some("0"), Some("direct")),
        (Some("0"), Some("bounce")),
        (Some("1"), None),
        (None, None),
    ];
    for (splice, recv) in cases {
        let dir = TempDir::new("paths");
        let json = dir.arg("r.json");
        let mut cmd = common::kvxfer();
        cmd.env_remove("KVXFER_TCP_SPLICE").env_remove("KVXFER_TCP_RECV");
        if let Some(v) = splice {
            cmd.env("KVXFER_TCP_SPLICE", v);
        }
        if let Some(v) = recv {
            cmd.env("KVXFER_TCP_RECV", v);
        }
        let args = ["sweep", "--sizes", "5MiB,16MiB", "--block-size", "1500000B", "--streams", "2", "--reps", "3"];
        let out = cmd.args(args).args(["--verify", "--json", &json, "--out-dir", &dir.arg("")]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        // The recorded mode is the one used throughout: no fallback to plain writes happened mid-run.
        assert!(!stderr.contains("refused to splice"), "{stderr}");
        let r = read_json(&dir.join("r.json"));
        let sender = &r["config"]["transport_detail"]["sender"];
        let rates = sender["calibration_gbps"].as_object().cloned().unwrap_or_default();
        match splice {
            Some(v) => {
                assert_eq!(sender["send"], if v == "1" { "splice" } else { "write" }, "{sender}");
                assert_eq!(sender["send_choice"], "KVXFER_TCP_SPLICE", "{sender}");
            }
            None => assert_eq!(sender["send_choice"], "calibration", "{sender}"),
        }
        match recv {
            Some(v) => {
                assert_eq!(sender["recv"], v, "{sender}");
                assert_eq!(sender["recv_choice"], "KVXFER_TCP_RECV", "{sender}");
            }
            None => assert_eq!(sender["recv_choice"], "calibration", "{sender}"),
        }
        if splice.is_some() && recv.is_some() {
            assert!(!stderr.contains("tcp paths"), "no calibration when both are forced: {stderr}");
            assert!(rates.is_empty(), "{sender}");
        } else {
            // Calibrated: every open combination measured, and one other than the default (listed first: write,
            // else the forced send path, landing directly) kept only when its median is at least 10% faster (and
            // its 95% interval clear of the default's, which path_reason names).
            let open: Vec<&str> = match splice {
                Some(_) => vec!["splice+direct", "splice+bounce"],
                None => vec!["write+direct", "splice+direct", "write+bounce", "splice+bounce"],
            };
            let mut keys: Vec<&str> = rates.keys().map(String::as_str).collect();
            keys.sort();
            let mut want = open.clone();
            want.sort();
            assert_eq!(keys, want, "{sender}");
            let rate = |k: &str| rates[k].as_f64().unwrap();
            assert!(open.iter().all(|k| rate(k) > 0.0), "{sender}");
            let chosen = format!("{}+{}", sender["send"].as_str().unwrap(), sender["recv"].as_str().unwrap());
            assert!(open.contains(&chosen.as_str()), "{sender}");
            let reason = sender["path_reason"].as_str().unwrap();
            if chosen == open[0] {
                assert!(reason.starts_with(&format!("{chosen}, the default")), "{sender}");
            } else {
                assert!(rate(&chosen) >= 1.1 * rate(open[0]), "{sender}");
                assert!(reason.contains(&format!("the default {}", open[0])), "{sender}");
            }
            let (send, recv) = chosen.split_once('+').unwrap();
            assert!(stderr.contains(&format!("tcp paths: send {send}, receive {recv}: {reason}")), "{stderr}");
        }
        check_case(&r["cases"][0], 5 * MIB, 3, true);
        check_case(&r["cases"][1], 16 * MIB, 3, true);
    }
}

#[test]
fn a_region_too_small_for_telling_paths_apart_keeps_the_default_without_trials() {
    let dir = TempDir::new("paths-short");
    let json = dir.arg("r.json");
    let mut cmd = common::kvxfer();
    cmd.env_remove("KVXFER_TCP_SPLICE").env_remove("KVXFER_TCP_RECV");
    let args = ["sweep", "--sizes", "4MiB,15MiB", "--block-size", "1MiB", "--reps", "2", "--verify", "--json", &json];
    let out = cmd.args(args).args(["--out-dir", &dir.arg("")]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("tcp paths"), "trials of 15 MiB decide nothing: {stderr}");
    let sender = read_json(&dir.join("r.json"))["config"]["transport_detail"]["sender"].clone();
    assert_eq!((sender["send"].as_str(), sender["recv"].as_str()), (Some("write"), Some("direct")), "{sender}");
    assert_eq!(
        (sender["send_choice"].as_str(), sender["recv_choice"].as_str()),
        (Some("short trials"), Some("short trials"))
    );
    assert!(sender["path_reason"].as_str().unwrap().contains("too short to tell the paths apart"), "{sender}");
}

/// Two runs whose tcp paths differ (here forced, as a calibration could pick them) differ by that alone: report
/// over both warns, naming each run's path; over two runs of one path it does not.
#[test]
fn report_warns_when_the_runs_compared_took_different_tcp_paths() {
    let dir = TempDir::new("paths-report");
    let sweep = |name: &str, splice: &str, recv: &str| {
        let json = dir.arg(name);
        let out = common::kvxfer()
            .env("KVXFER_TCP_SPLICE", splice)
            .env("KVXFER_TCP_RECV", recv)
            .args(["sweep", "--sizes", "2MiB", "--reps", "2", "--json", &json, "--out-dir", &dir.arg("")])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let r = read_json(&dir.join(name));
        let reason = r["config"]["transport_detail"]["sender"]["path_reason"].as_str().unwrap().to_string();
        assert_eq!(
            reason,
            format!(
                "send path {} set by KVXFER_TCP_SPLICE; receive path {recv} set by KVXFER_TCP_RECV",
                if splice == "1" { "splice" } else { "write" }
            )
        );
        json
    };
    let (a, b, c) = (sweep("a.json", "0", "direct"), sweep("b.json", "1", "bounce"), sweep("c.json", "0", "direct"));
    let out = run(&["report", &a, &b]);
    out.expect_code(0);
    let warning = format!(
        "warning: {a} and {b} ran with different transport choices: tcp path (send+receive) write+direct vs splice+bounce"
    );
    assert!(out.stderr.contains(&warning), "{}", out.stderr);
    let out = run(&["report", &a, &c]);
    out.expect_code(0);
    assert!(!out.stderr.contains("transport choices"), "{}", out.stderr);
}

/// No rep may stall: a loopback rep of 1–16 MiB takes a few ms (the bounce path at 16 MiB ~50 ms on a loaded 2-core
/// machine), so one 150 ms or more above its case's median is the tool holding bytes back (as splice with
/// SPLICE_F_MORE on a frame's last bytes did: TCP corked the tail for ~200 ms, in 5–9 of 40 reps at 4 MiB, but in
/// none of 20 in some runs, hence 60 reps). Relative to the median, not a fixed 100 ms: under parallel tests a
/// 16 MiB bounce rep once took 153 ms with nothing held back. Two real processes, each send path.
#[test]
fn no_rep_stalls_on_any_send_or_receive_path() {
    for (env, recv) in [("1", "direct"), ("0", "direct"), ("1", "bounce"), ("0", "bounce")] {
        let dir = TempDir::new("stall");
        let json = dir.arg("r.json");
        let serve = Serve::start(&["--once"]);
        let out = common::kvxfer()
            .env("KVXFER_TCP_SPLICE", env)
            .env("KVXFER_TCP_RECV", recv)
            .args(["send", "--peer", &serve.addr, "--sizes", "1MiB,4MiB,16MiB", "--reps", "60", "--json", &json])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serve.proc.finish().expect_code(0);
        let r = read_json(&dir.join("r.json"));
        let cases = r["cases"].as_array().unwrap();
        assert_eq!(cases.len(), 3);
        for c in cases {
            let reps = c["reps"].as_array().unwrap();
            assert_eq!(reps.len(), 60);
            let ms: Vec<f64> = reps.iter().map(|x| num(x, "transfer_ms")).collect();
            let mut sorted = ms.clone();
            sorted.sort_by(f64::total_cmp);
            let limit = sorted[sorted.len() / 2] + 150.0;
            let slow: Vec<String> = ms
                .iter()
                .enumerate()
                .filter(|(_, &t)| t >= limit)
                .map(|(i, t)| format!("rep {i}: {t:.1} ms"))
                .collect();
            assert!(
                slow.is_empty(),
                "KVXFER_TCP_SPLICE={env} KVXFER_TCP_RECV={recv}: {} B reps took 150 ms or more above the median (a stall, not loopback speed): {}; all: {ms:.1?}",
                c["size_bytes"],
                slow.join(", ")
            );
        }
    }
}

/// A byte corrupted in flight fails `--verify`, counted exactly (the test-only fault `KVXFER_TEST_FAULT=flip-byte`
/// inverts one byte of the first measured rep at the sender): between `serve` and `send`, where serve hears the
/// verdict and exits 1 too, and within one `sweep`.
#[test]
fn a_byte_corrupted_in_flight_fails_verify_counting_one_byte() {
    let dir = TempDir::new("flip-byte");
    let (sent, swept, out_dir) = (dir.arg("send.json"), dir.arg("sweep.json"), dir.arg(""));
    let reps = ["--sizes", "1MiB,2MiB", "--reps", "2", "--verify"];
    let serve = Serve::start(&["--once"]);
    let send = run_flipping_a_byte(&[&["send", "--peer", &serve.addr][..], &reps, &["--json", &sent]].concat());
    expect_one_corrupted_byte(&send, std::path::Path::new(&sent), MIB);
    let s = serve.proc.finish();
    s.expect_code(1);
    assert!(s.one_error().contains("verification failed"), "{}", s.stderr);
    let args = [&["sweep", "--transport", "tcp"][..], &reps, &["--json", &swept, "--out-dir", &out_dir]].concat();
    expect_one_corrupted_byte(&run_flipping_a_byte(&args), std::path::Path::new(&swept), MIB);
}

/// A launcher may start the sender before the receiver: send waits (saying so once) and runs when serve comes up.
#[test]
fn send_started_before_serve_waits_for_it() {
    let dir = TempDir::new("wait");
    let json = dir.arg("r.json");
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let send = Proc::spawn(&["send", "--peer", &addr, "--sizes", "1MiB", "--reps", "2", "--verify", "--json", &json]);
    assert!(
        send.stderr.wait_for(&format!("waiting for the receiver at {addr}"), CMD_TIMEOUT),
        "{}",
        send.stderr.text()
    );
    let serve = Proc::spawn(&["serve", "--listen", &addr, "--once"]);
    let out = send.finish();
    out.expect_code(0);
    assert_eq!(out.stderr.matches("waiting for the receiver").count(), 1, "{}", out.stderr);
    serve.finish().expect_code(0);
    check_case(&read_json(&dir.join("r.json"))["cases"][0], MIB, 2, true);
}

/// Without --transport, sweep picks it from its ends (tcp unless an end is a GPU), says so and stores it.
#[test]
fn sweep_picks_the_transport_from_its_ends() {
    let dir = TempDir::new("auto");
    let json = dir.arg("r.json");
    let out = run(&["sweep", "--sizes", "1MiB", "--reps", "1", "--json", &json, "--out-dir", &dir.arg("")]);
    out.expect_code(0);
    assert!(out.stderr.contains("transport: tcp (no end is a GPU"), "{}", out.stderr);
    assert_eq!(read_json(&dir.join("r.json"))["config"]["transport"], "tcp");
    // An explicit value wins and is not announced.
    let out = run(&["sweep", "--transport", "tcp", "--sizes", "1MiB", "--reps", "1", "--out-dir", &dir.arg("")]);
    out.expect_code(0);
    assert!(!out.stderr.contains("transport: "), "{}", out.stderr);
}

/// `--prepare CMD` runs before every rep (warm-ups too) with the rep in its environment, outside the timed
/// interval; it is recorded in the results; a failing command stops the run naming the rep, and one that hangs is
/// killed at --io-timeout.
#[test]
fn prepare_runs_before_every_rep_outside_the_timed_interval() {
    let t = TempDir::new("prepare");
    let (log, json, dir) = (t.join("prepare.log"), t.arg("p.json"), t.arg(""));
    let cmd = format!(
        "echo \"$KVXFER_CASE $KVXFER_REP $KVXFER_WARMUP $KVXFER_SIZE_BYTES\" >> '{}'; sleep 0.5",
        log.display()
    );
    let args = ["sweep", "--sizes", "1MiB,2MiB", "--reps", "2", "--warmup", "1", "--counters", "off"];
    let out = run(&[&args[..], &["--prepare", &cmd, "--json", &json, "--out-dir", &dir]].concat());
    out.expect_code(0);
    let lines = std::fs::read_to_string(&log).unwrap();
    let expected = "0 0 1 1048576\n0 0 0 1048576\n0 1 0 1048576\n1 0 1 2097152\n1 0 0 2097152\n1 1 0 2097152\n";
    assert_eq!(lines, expected, "once before each rep, warm-ups first");
    let v = read_json(std::path::Path::new(&json));
    assert_eq!(v["config"]["prepare"], cmd.as_str());
    for c in v["cases"].as_array().unwrap() {
        for r in c["reps"].as_array().unwrap() {
            // The command sleeps 500 ms; a 1-2 MiB loopback rep takes a few ms, so a rep that took the sleep in
            // would be 100x longer.
            assert!(r["total_ms"].as_f64().unwrap() < 400.0, "the command was timed: {r}");
        }
    }
    let failing = run(&[&args[..], &["--prepare", "test $KVXFER_REP != 1 || exit 3", "--out-dir", &dir]].concat());
    failing.expect_code(1);
    let line = failing.one_error();
    assert!(line.contains("before measured rep 1 of case 0") && line.contains("status 3"), "{line}");
    // A command that hangs is killed at --io-timeout with what it started (the shell runs this sleep as its
    // child): nothing of it may keep kvxfer's stderr open, or `kvxfer … 2>&1 | tee` would wait for the sleep.
    let hung =
        Proc::spawn(&[&args[..], &["--prepare", "sleep 300; true", "--io-timeout", "1s", "--out-dir", &dir]].concat());
    let stderr = hung.stderr.clone();
    let hung = hung.finish();
    hung.expect_code(1);
    assert!(hung.one_error().contains("still running after 1s"), "{}", hung.stderr);
    assert!(stderr.wait_closed(Duration::from_secs(30)), "the command's sleep outlived kvxfer, holding its stderr");
}

/// A verbs run's connection setup (`transport_detail.sender.connect_ms`) is a column of report's tables, Markdown
/// and boxed, the same in every row; a file without it (tcp, or a verbs file written before) has no such column.
#[test]
fn report_gives_a_runs_connection_setup_its_own_column_where_recorded() {
    let dir = TempDir::new("connect-column");
    let stored = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("results/rxe-verbs.json");
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&stored).unwrap()).unwrap();
    let rows = v["cases"].as_array().unwrap().len();
    let before = run(&["report", &stored.to_string_lossy(), "--md", "-"]);
    before.expect_code(0);
    assert!(!before.stdout.contains("connect ms"), "{}", before.stdout);
    v["config"]["transport_detail"]["sender"]["connect_ms"] = serde_json::json!(12.3456);
    let j = dir.arg("verbs.json");
    std::fs::write(&j, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    for args in [&["report", &j, "--md", "-"][..], &["report", &j][..]] {
        let out = run(args);
        out.expect_code(0);
        assert!(out.stdout.contains("connect ms"), "{args:?}: {}", out.stdout);
        assert_eq!(out.stdout.matches("12.346").count(), rows, "{args:?}: in every row: {}", out.stdout);
    }
}
