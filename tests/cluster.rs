//! `kvxfer cluster` with real processes on loopback: 4 ranks started by this test with `KVXFER_RANK`/… or with
//! torchrun's variables, under OpenMPI's `mpirun`, and under `srun` on the one-node Slurm of `scripts/slurm up`.
//! Every launch checks rank 0's results file (every ordered pair verified for `pairs`, 3 flows and an aggregate
//! per size for `incast`) and the matrix on its console. The mpirun and srun tests are `#[ignore]`d and run as
//! tests/launchers.rs says.

mod common;

use common::launch::{clean, mpirun_ready, slurm_ready};
use common::{free_port, read_json, Out, Proc, TempDir};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const RANKS: usize = 4;
const PAIRS: &[&str] = &["--pattern", "pairs", "--sizes", "1MiB,4MiB", "--reps", "2", "--verify"];
const INCAST: &[&str] = &["--pattern", "incast", "--sizes", "1MiB,4MiB", "--reps", "2", "--verify"];

/// How the test starts a rank itself.
#[derive(Clone, Copy)]
enum Env {
    Kvxfer,
    Torchrun,
}

/// One rank, started as one of N shells would start it; `args` follow `kvxfer cluster`.
fn rank(r: usize, port: u16, env: Env, args: &[&str]) -> Proc {
    let mut cmd = clean(Command::new(common::bin()));
    cmd.arg("cluster").args(args);
    match env {
        Env::Kvxfer => {
            // A name, not an address: it may resolve to ::1 as well as 127.0.0.1.
            cmd.args(["--coordinator", &format!("localhost:{port}")]);
            cmd.env("KVXFER_RANK", r.to_string()).env("KVXFER_WORLD_SIZE", RANKS.to_string());
        }
        Env::Torchrun => {
            cmd.env("MASTER_ADDR", "127.0.0.1").env("MASTER_PORT", port.to_string());
            cmd.env("RANK", r.to_string()).env("WORLD_SIZE", RANKS.to_string()).env("LOCAL_RANK", r.to_string());
        }
    }
    Proc::start(&mut cmd, format!("kvxfer cluster rank {r}"))
}

/// Start 4 ranks; every one exits 0; rank 0's output.
fn launch_four(env: Env, args: &[&str]) -> Out {
    let port = free_port();
    let procs: Vec<Proc> = (0..RANKS).map(|r| rank(r, port, env, args)).collect();
    let outs: Vec<Out> = procs.into_iter().map(Proc::finish).collect();
    for o in &outs {
        o.expect_code(0);
    }
    outs.into_iter().next().unwrap()
}

fn with_json<'a>(args: &[&'a str], json: &'a str) -> Vec<&'a str> {
    args.iter().copied().chain(["--json", json]).collect()
}

/// (src rank, dst rank) of a case.
fn pair(c: &Value) -> (u64, u64) {
    (c["src"]["rank"].as_u64().unwrap(), c["dst"]["rank"].as_u64().unwrap())
}

/// Rank 0's file of a `pairs` run: all 6 steps, the 12 ordered pairs at both sizes, every one verified; and the
/// matrix on rank 0's console: a row per rank, every link measured.
fn check_pairs(json: &Path, stdout: &str, launcher: &str) {
    let r = read_json(json);
    let cl = &r["cluster"];
    assert_eq!((cl["pattern"].as_str(), cl["launcher"].as_str()), (Some("pairs"), Some(launcher)), "{cl}");
    assert_eq!(
        (cl["world_size"].as_u64(), cl["steps_done"].as_u64(), cl["steps_total"].as_u64()),
        (Some(4), Some(6), Some(6))
    );
    let cases = r["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 24, "12 ordered pairs × 2 sizes");
    let pairs: BTreeSet<(u64, u64)> = cases.iter().map(pair).collect();
    let all: BTreeSet<(u64, u64)> = (0..4).flat_map(|s| (0..4).filter(move |d| *d != s).map(move |d| (s, d))).collect();
    assert_eq!(pairs, all);
    for c in cases {
        assert_eq!(c["verified"], true, "{}", c["src"]);
        assert_eq!((c["pattern"].as_str(), c["flows"].as_u64()), (Some("pairs"), Some(2)));
        assert!(
            !c["src"]["host"].as_str().unwrap().is_empty() && c["dst"]["gpu"].is_null() && c["src"]["nic"].is_null()
        );
        assert!(c["gbps"]["p50"].as_f64().unwrap() > 0.0);
        // Host buffers: each end reports the NUMA node of the CPU it ran on, when this host has NUMA nodes.
        if Path::new("/sys/devices/system/node/node0").exists() {
            assert!(c["src"]["numa"].is_u64() && c["dst"]["numa"].is_u64(), "{} {}", c["src"], c["dst"]);
        }
    }
    assert!(stdout.contains("p50 GB/s at 4 MiB"), "{stdout}");
    for r in 0..RANKS {
        let row = stdout
            .lines()
            .find(|l| l.starts_with(&format!("| {r}@")))
            .unwrap_or_else(|| panic!("no row {r}:\n{stdout}"));
        assert_eq!(row.matches('—').count(), 1, "{row}");
        assert!(!row.contains('·'), "a link not measured: {row}");
    }
}

/// Rank 0's file of an `incast` run: per size one step of 3 flows into rank 0, verified, and its aggregate.
fn check_incast(json: &Path, launcher: &str) {
    let r = read_json(json);
    assert_eq!(r["cluster"]["launcher"], launcher);
    let cases = r["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 6, "3 flows × 2 sizes");
    for c in cases {
        assert_eq!((pair(c).1, c["flows"].as_u64(), &c["verified"]), (0, Some(3), &Value::Bool(true)));
    }
    let aggregates = r["cluster"]["aggregates"].as_array().unwrap();
    let sizes: Vec<u64> = aggregates.iter().map(|a| a["size_bytes"].as_u64().unwrap()).collect();
    assert_eq!(sizes, [1 << 20, 4 << 20]);
    for a in aggregates {
        assert_eq!((a["flows"].as_u64(), a["bytes"].as_u64()), (Some(3), Some(3 * a["size_bytes"].as_u64().unwrap())));
        assert!(a["gbps"]["p50"].as_f64().unwrap() > 0.0, "{a}");
    }
}

#[test]
fn pairs_of_four_with_kvxfer_variables() {
    let dir = TempDir::new("cluster-pairs");
    let json = dir.arg("r.json");
    let csv = dir.arg("r.csv");
    let mut args = with_json(PAIRS, &json);
    args.extend(["--csv", &csv]);
    let out = launch_four(Env::Kvxfer, &args);
    check_pairs(Path::new(&json), &out.stdout, "kvxfer");
    let csv = std::fs::read_to_string(&csv).unwrap();
    let header = csv.lines().next().unwrap();
    assert!(
        header.ends_with("src_rank,src_host,src_gpu,dst_rank,dst_host,dst_gpu,pattern,step,flows,outlier"),
        "{header}"
    );
    assert_eq!(csv.lines().count(), 1 + 24);
    assert!(out.stderr.contains("step 3/6: "), "{}", out.stderr);
    assert!(out.stderr.contains("rank 0 of 4 on ") && out.stderr.contains("(launcher: kvxfer"), "{}", out.stderr);
    // The file loads again (`report`), and its Markdown is the same matrix.
    let figs = dir.arg("figs");
    let report = common::run(&["report", &json, "--md", "-", "--fig", &figs]);
    check_pairs(Path::new(&json), &report.expect_code(0).stdout, "kvxfer");
    assert!(dir.join("figs/cluster-heatmap.svg").exists(), "report --fig draws the heatmap: {}", report.stderr);
}

#[test]
fn pairs_of_four_under_a_torchrun_style_environment() {
    let dir = TempDir::new("cluster-pairs-torchrun");
    let json = dir.arg("r.json");
    let figs = dir.arg("figs");
    let mut args = with_json(PAIRS, &json);
    args.extend(["--fig", &figs]);
    let out = launch_four(Env::Torchrun, &args);
    check_pairs(Path::new(&json), &out.stdout, "torchrun");
    // The heatmap of the links, and the per-link figures.
    for name in ["cluster-heatmap.png", "cluster-heatmap.svg", "bandwidth-vs-size.png", "bandwidth-vs-size.svg"] {
        let len = std::fs::metadata(dir.join("figs").join(name)).map(|m| m.len()).unwrap_or(0);
        assert!(len > 1000, "{name}: {len} bytes\n{}", out.stderr);
    }
    let svg = std::fs::read_to_string(dir.join("figs/cluster-heatmap.svg")).unwrap();
    assert!(svg.contains("0@") && svg.contains("→ 3"), "the heatmap names ranks");
}

#[test]
fn incast_of_four_with_kvxfer_variables_and_torchrun_style() {
    let dir = TempDir::new("cluster-incast");
    for (env, name) in [(Env::Kvxfer, "kvxfer"), (Env::Torchrun, "torchrun")] {
        let json = dir.arg(&format!("{name}.json"));
        let out = launch_four(env, &with_json(INCAST, &json));
        check_incast(Path::new(&json), name);
        assert!(out.stdout.contains("aggregate GB/s"), "{}", out.stdout);
    }
}

/// The flows of each concurrent pattern over 4 ranks, one size.
#[test]
fn concurrent_patterns_run_their_flows() {
    let dir = TempDir::new("cluster-patterns");
    // (pattern, flows per step, cases, aggregates: per step, and for bidir per pair too: 3 steps × (1 + 2 pairs))
    let expected = [("fanout", 3, 3, 1), ("ring", 4, 4, 1), ("all", 12, 12, 1), ("bidir", 4, 12, 9)];
    for (pattern, flows, cases, aggregates) in expected {
        let json = dir.arg(&format!("{pattern}.json"));
        let args =
            ["--pattern", pattern, "--sizes", "1MiB", "--reps", "1", "--warmup", "0", "--verify", "--json", &json];
        launch_four(Env::Kvxfer, &args);
        let r = read_json(Path::new(&json));
        let list = r["cases"].as_array().unwrap();
        assert_eq!(list.len(), cases, "{pattern}");
        assert!(list.iter().all(|c| c["flows"] == flows && c["verified"] == true), "{pattern}");
        assert_eq!(r["cluster"]["aggregates"].as_array().unwrap().len(), aggregates, "{pattern}");
        let pairs: BTreeSet<(u64, u64)> = list.iter().map(pair).collect();
        assert_eq!(pairs.len(), cases, "{pattern}: a flow twice");
        match pattern {
            "bidir" => {
                let per_pair: Vec<&Value> =
                    r["cluster"]["aggregates"].as_array().unwrap().iter().filter(|a| a["pair"].is_array()).collect();
                assert_eq!(per_pair.len(), 6, "one per unordered pair");
                assert!(per_pair.iter().all(|a| a["flows"] == 2));
            }
            "fanout" => assert!(pairs.iter().all(|(s, _)| *s == 0)),
            "ring" => assert!(pairs.iter().all(|(s, d)| *d == (s + 1) % 4)),
            _ => {}
        }
    }
}

/// Rank 0's lines among all ranks' output: the matrix rows come from rank 0 alone.
fn launch(mut cmd: Command, what: &str) -> Out {
    let out = Proc::start(&mut cmd, what.to_string()).finish();
    out.expect_code(0);
    out
}

#[test]
#[ignore = "needs mpirun: scripts/test runs it as root (KVXFER_REQUIRE_SLURM=1, --run-ignored)"]
fn under_mpirun() {
    if !mpirun_ready() {
        return;
    }
    let dir = TempDir::new("cluster-mpirun");
    for (args, name) in [(PAIRS, "pairs"), (INCAST, "incast")] {
        let json = dir.arg(&format!("{name}.json"));
        let mut cmd = clean(Command::new("mpirun"));
        cmd.args(["--allow-run-as-root", "--oversubscribe", "--mca", "oob_tcp_if_include", "lo"]);
        cmd.args(["--mca", "btl_tcp_if_include", "lo", "-np", "4"]);
        cmd.arg(common::bin()).arg("cluster").args(with_json(args, &json));
        cmd.args(["--coordinator", &format!("127.0.0.1:{}", free_port())]);
        let out = launch(cmd, &format!("mpirun -np 4 kvxfer cluster --pattern {name}"));
        match name {
            "pairs" => check_pairs(Path::new(&json), &out.stdout, "openmpi"),
            _ => check_incast(Path::new(&json), "openmpi"),
        }
    }
}

#[test]
#[ignore = "needs Slurm: scripts/test runs it as root (KVXFER_REQUIRE_SLURM=1, --run-ignored)"]
fn under_srun() {
    let Some(conf) = slurm_ready() else { return };
    let dir = TempDir::new("cluster-srun");
    for (args, name) in [(PAIRS, "pairs"), (INCAST, "incast")] {
        let json = dir.arg(&format!("{name}.json"));
        // No --coordinator: the ranks find rank 0 through SLURM_JOB_NODELIST and scontrol. The node's name may
        // not resolve to loopback, and then the ranks need a token.
        let mut cmd = clean(Command::new("srun"));
        cmd.env("SLURM_CONF", &conf).env("KVXFER_TOKEN", "cluster-test");
        cmd.args(["-n", "4", "--time", "2"]).arg(common::bin()).arg("cluster").args(with_json(args, &json));
        let out = launch(cmd, &format!("srun -n 4 kvxfer cluster --pattern {name}"));
        match name {
            "pairs" => check_pairs(Path::new(&json), &out.stdout, "slurm"),
            _ => check_incast(Path::new(&json), "slurm"),
        }
    }
}

#[test]
fn a_rank_killed_mid_run_fails_the_others_naming_it_and_rank_0_keeps_the_completed_steps() {
    let dir = TempDir::new("cluster-kill");
    let json = dir.arg("r.json");
    // Long enough steps that the kill lands mid-run: 6 steps of 64 MiB × 10 reps.
    let args = ["--pattern", "pairs", "--sizes", "64MiB", "--reps", "10", "--json", &json];
    let port = free_port();
    let mut procs: Vec<Proc> = (0..RANKS).map(|r| rank(r, port, Env::Kvxfer, &args)).collect();
    assert!(
        procs[0].stderr.wait_for("step 3/6: ", Duration::from_secs(60)),
        "rank 0 never reached step 3: {}",
        procs[0].stderr.text()
    );
    let mut doomed = procs.pop().unwrap();
    assert!(doomed.is_running(), "rank 3 exited early: {}", doomed.stderr.text());
    doomed.kill();
    let start = Instant::now();
    let limit = Duration::from_secs(10);
    for mut p in procs {
        let status = p.wait_timeout(limit.saturating_sub(start.elapsed()));
        let err = p.stderr.text();
        let status = status.unwrap_or_else(|| panic!("{} still running {limit:?} after the kill\n{err}", p.what));
        assert_eq!(status.code(), Some(1), "{}: {err}", p.what);
        let line =
            err.lines().find(|l| l.contains("] error:")).unwrap_or_else(|| panic!("{}: no error:\n{err}", p.what));
        assert!(line.contains("rank 3 on "), "{}: the error does not name rank 3: {line}", p.what);
    }
    let r = read_json(Path::new(&json));
    let done = r["cluster"]["steps_done"].as_u64().unwrap();
    assert!((2..6).contains(&done), "steps done: {done}");
    assert!(r["cases"].as_array().unwrap().len() as u64 >= 2 * done, "{}", r["cases"]);
    assert!(r["error"].as_str().unwrap().contains("rank 3 on "), "{}", r["error"]);
}

#[test]
fn mistakes_are_usage_errors_before_anything_listens() {
    // A size of which two buffers fit in this host's memory (with room for other tests) and six do not: `all`
    // over 4 ranks holds six at once.
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .unwrap()
        .trim()
        .trim_end_matches(" kB")
        .parse()
        .unwrap();
    let fifth = format!("{}MiB", kib / 1024 / 5);
    // (world size, arguments, what the error names); every rank is rank 0.
    let cases: [(&str, &[&str], &str); 5] = [
        ("2", &["--coordinator", "10.255.255.1:18600"], "KVXFER_TOKEN"),
        ("1", &["--coordinator", "127.0.0.1:1"], "at least 2 ranks"),
        ("2", &["--coordinator", "127.0.0.1:1", "--gpu-per-local-rank"], "--mem gpu:0"),
        ("2", &["--pattern", "star"], "star"),
        ("4", &["--coordinator", "127.0.0.1:1", "--pattern", "all", "--sizes", &fifth], "6 buffer(s)"),
    ];
    for (size, args, needle) in cases {
        let mut cmd = clean(Command::new(common::bin()));
        let sizes: &[&str] = if args.contains(&"--sizes") { &[] } else { &["--sizes", "1MiB"] };
        cmd.arg("cluster").args(sizes).args(args).env("KVXFER_RANK", "0").env("KVXFER_WORLD_SIZE", size);
        let out = Proc::start(&mut cmd, format!("kvxfer cluster {args:?}")).finish();
        out.expect_code(2);
        assert!(out.stderr.contains(needle), "{args:?}: {}", out.stderr);
    }
}
