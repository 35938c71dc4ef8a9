//! `kvxfer cluster --pattern replay` with real processes on loopback: 2 prefill and 2 decode ranks replay a seeded
//! Poisson stream over tcp with `--verify`, started as 4 shells would (`KVXFER_RANK`), under OpenMPI's `mpirun`, and
//! under `srun` on the one-node Slurm of `scripts/slurm up`. Every request must be recorded exactly once, sent by
//! the prefill rank of its turn to the decode rank `--route` picks, with every byte verified, and the per-link and
//! per-rank summaries must add up to the load's totals. The mpirun and srun tests are `#[ignore]`d and run as
//! tests/launchers.rs says; the flag refusals need no launcher.

mod common;

use common::launch::{clean, mpirun_ready, slurm_ready};
use common::{free_port, read_json, Out, Proc, TempDir};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

const REQUESTS: usize = 60;

/// The replay every test runs: 60 Poisson requests of lognormal length (so that least-loaded routing differs from
/// round-robin), small enough for a debug build with --verify.
fn replay_args(route: &str, json: &str) -> Vec<String> {
    let args = [
        "cluster",
        "--pattern",
        "replay",
        "--prefill",
        "0,1",
        "--decode",
        "2,3",
        "--route",
        route,
        "--arrivals",
        "poisson:200",
        "--prompt-tokens",
        "lognormal:200,0.8",
        "--requests",
        "60",
        "--kv-bytes-per-token",
        "4096",
        "--warmup-requests",
        "2",
        "--transport",
        "tcp",
        "--verify",
        "--json",
        json,
    ];
    args.iter().map(|s| s.to_string()).collect()
}

fn launch(mut cmd: Command, what: &str) -> Out {
    let out = Proc::start(&mut cmd, what.to_string()).finish();
    out.expect_code(0);
    out
}

/// Rank 0's results of a 2P2D replay routed by `route`, launched by `launcher`.
fn check_replay(json: &Path, route: &str, launcher: &str) {
    let r = read_json(json);
    assert_eq!(r["complete"], true, "{}", r["error"]);
    assert_eq!((r["cluster"]["pattern"].as_str(), r["cluster"]["launcher"].as_str()), (Some("replay"), Some(launcher)));
    assert_eq!(r["config"]["mode"], "replay");
    let rp = &r["replay"];
    assert_eq!(rp["cluster"]["route"], route);
    let load = &rp["loads"][0];
    let reqs = load["requests"].as_array().unwrap();
    // Each request once, in schedule order.
    let mut ids: Vec<u64> = reqs.iter().map(|q| q["id"].as_u64().unwrap()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!((ids.len(), reqs.len()), (REQUESTS, REQUESTS), "every request exactly once");
    for q in reqs {
        assert_eq!(q["mismatched_bytes"].as_u64(), Some(0), "every byte verified: {q}");
    }
    check_routes(reqs, route);
    check_sums(&load["summary"], &load["cluster"], reqs);
}

/// Request i in schedule order went from prefill rank i mod 2; its decode rank is as `route` says.
fn check_routes(reqs: &[Value], route: &str) {
    let mut routed = [0u64; 2];
    for (i, q) in reqs.iter().enumerate() {
        assert_eq!(q["src"].as_u64(), Some(i as u64 % 2), "request {i}: {q}");
        let d = match route {
            "round-robin" => i % 2,
            _ => usize::from(routed[1] < routed[0]),
        };
        routed[d] += q["bytes"].as_u64().unwrap();
        assert_eq!(q["dst"].as_u64(), Some(2 + d as u64), "request {i} under {route}: {q}");
    }
}

/// The links' and the ranks' requests, bytes and GB/s add up to the load's.
fn check_sums(summary: &Value, cl: &Value, reqs: &[Value]) {
    let total_bytes: u64 = reqs.iter().map(|q| q["bytes"].as_u64().unwrap()).sum();
    assert_eq!(summary["requests"].as_u64(), Some(REQUESTS as u64));
    assert_eq!(summary["bytes_moved"].as_u64(), Some(total_bytes));
    let achieved = summary["achieved_gbps"].as_f64().unwrap();
    let links = cl["links"].as_array().unwrap();
    let ranks = cl["ranks"].as_array().unwrap();
    let decode: Vec<&Value> = ranks.iter().filter(|r| r["role"] == "decode").collect();
    let prefill: Vec<&Value> = ranks.iter().filter(|r| r["role"] == "prefill").collect();
    for (what, groups) in
        [("links", links.iter().collect::<Vec<_>>()), ("decode ranks", decode), ("prefill ranks", prefill)]
    {
        let n: u64 = groups.iter().map(|g| g["requests"].as_u64().unwrap()).sum();
        let b: u64 = groups.iter().map(|g| g["bytes_moved"].as_u64().unwrap()).sum();
        let gbps: f64 = groups.iter().filter_map(|g| g["gbps"].as_f64()).sum();
        assert_eq!((n, b), (REQUESTS as u64, total_bytes), "{what}: {cl}");
        assert!((gbps - achieved).abs() <= 1e-9 * achieved.max(1.0), "{what}: {gbps} GB/s ≠ {achieved}");
    }
    for l in links {
        let on_link = reqs.iter().filter(|q| q["src"] == l["src"] && q["dst"] == l["dst"]).count() as u64;
        assert_eq!(l["requests"].as_u64(), Some(on_link), "{l}");
    }
}

/// Four ranks as four shells start them, meeting at `port` on loopback.
fn shell_ranks(route: &str, json: &str) -> Vec<Out> {
    let port = free_port();
    let ranks: Vec<Proc> = (0..4)
        .map(|rank| {
            let mut cmd = clean(Command::new(common::bin()));
            cmd.args(replay_args(route, json)).args(["--coordinator", &format!("127.0.0.1:{port}")]);
            cmd.env("KVXFER_RANK", rank.to_string()).env("KVXFER_WORLD_SIZE", "4");
            Proc::start(&mut cmd, format!("rank {rank} of a cluster replay"))
        })
        .collect();
    ranks.into_iter().map(|p| p.finish()).collect()
}

#[test]
fn a_2p2d_replay_records_every_request_once_routed_in_turn_with_every_byte_verified() {
    let dir = TempDir::new("creplay-rr");
    let json = dir.arg("rr.json");
    let outs = shell_ranks("round-robin", &json);
    for o in &outs {
        o.expect_code(0);
    }
    check_replay(Path::new(&json), "round-robin", "kvxfer");
    assert!(outs[0].stdout.contains("0→2") && outs[0].stdout.contains("1→3"), "{}", outs[0].stdout);
}

#[test]
fn least_loaded_routing_sends_each_request_to_the_decode_rank_with_fewest_bytes_so_far() {
    let dir = TempDir::new("creplay-ll");
    let json = dir.arg("ll.json");
    for o in shell_ranks("least-loaded", &json) {
        o.expect_code(0);
    }
    check_replay(Path::new(&json), "least-loaded", "kvxfer");
    let r = read_json(Path::new(&json));
    let links = r["replay"]["cluster"]["links"].as_array().unwrap().len();
    assert!(links > 2, "lognormal lengths mix the links: {}", r["replay"]["cluster"]);
}

#[test]
#[ignore = "needs mpirun: scripts/test runs it as root (KVXFER_REQUIRE_SLURM=1, --run-ignored)"]
fn a_2p2d_replay_under_mpirun() {
    if !mpirun_ready() {
        return;
    }
    let dir = TempDir::new("creplay-mpirun");
    let json = dir.arg("mpirun.json");
    let mut cmd = clean(Command::new("mpirun"));
    cmd.args(["--allow-run-as-root", "--oversubscribe", "--mca", "oob_tcp_if_include", "lo"]);
    cmd.args(["--mca", "btl_tcp_if_include", "lo", "-np", "4"]);
    cmd.arg(common::bin()).args(replay_args("least-loaded", &json));
    launch(cmd, "mpirun -np 4 kvxfer cluster --pattern replay");
    check_replay(Path::new(&json), "least-loaded", "openmpi");
}

#[test]
#[ignore = "needs Slurm: scripts/test runs it as root (KVXFER_REQUIRE_SLURM=1, --run-ignored)"]
fn a_2p2d_replay_under_srun() {
    let Some(conf) = slurm_ready() else { return };
    let dir = TempDir::new("creplay-srun");
    let json = dir.arg("srun.json");
    // No --coordinator: the ranks find rank 0 as under_srun in tests/cluster.rs does, with a token in case the
    // node's name does not resolve to loopback.
    let mut cmd = clean(Command::new("srun"));
    cmd.env("SLURM_CONF", &conf).env("KVXFER_TOKEN", "cluster-replay-test");
    cmd.args(["-n", "4", "--time", "2"]).arg(common::bin()).args(replay_args("round-robin", &json));
    launch(cmd, "srun -n 4 kvxfer cluster --pattern replay");
    check_replay(Path::new(&json), "round-robin", "slurm");
}

/// Rank 0 of 4 with `args`: a refusal must come before the rendezvous, in one line, exit 2.
fn refused(args: &[&str]) -> String {
    let mut cmd = clean(Command::new(common::bin()));
    cmd.arg("cluster").args(args).args(["--coordinator", "127.0.0.1:9", "--rendezvous-timeout", "2s"]);
    cmd.env("KVXFER_RANK", "0").env("KVXFER_WORLD_SIZE", "4");
    let out = Proc::start(&mut cmd, format!("kvxfer cluster {}", args.join(" "))).finish();
    out.expect_code(2);
    out.one_error().to_string()
}

#[test]
fn bad_replay_flags_are_refused_in_one_line_before_the_ranks_meet() {
    let replay = ["--pattern", "replay"];
    let cases: &[(&[&str], &str)] = &[
        (&["--decode", "2,3"], "--pattern replay needs --prefill"),
        (&["--prefill", "0,1"], "--pattern replay needs --decode"),
        (&["--prefill", "0,1", "--decode", "1,2"], "both name rank 1"),
        (&["--prefill", "0", "--decode", "4"], "--decode 4: rank 4 is out of range: this run has 4 ranks (0-3)"),
        (&["--prefill", "0,x", "--decode", "2"], "--prefill 0,x: 'x' is not a rank"),
        (&["--prefill", "0", "--decode", "1", "--sizes", "1MiB"], "--sizes: a replay moves its requests' bytes"),
        (&["--prefill", "0", "--decode", "1", "--reps", "3"], "--reps: a cluster replay runs each load once"),
        (&["--prefill", "0", "--decode", "1", "--warmup", "2"], "use --warmup-requests N"),
        (&["--prefill", "0", "--decode", "1", "--html", "/nonexistent-dir/p.html"], "--html /nonexistent-dir/p.html"),
    ];
    for (args, want) in cases {
        let all: Vec<&str> = replay.iter().chain(args.iter()).copied().collect();
        let e = refused(&all);
        assert!(e.contains(want), "{all:?}: {e}");
    }
    let e = refused(&["--route", "least-loaded"]);
    assert!(e.contains("--route belongs to --pattern replay") && e.contains("--pattern pairs"), "{e}");
    let e = refused(&["--pattern", "incast", "--arrivals", "poisson:1"]);
    assert!(e.contains("--arrivals belongs to --pattern replay"), "{e}");
}

#[test]
fn a_decode_rank_killed_mid_load_fails_every_other_rank_naming_it_and_rank_0_says_the_run_is_incomplete() {
    let dir = TempDir::new("creplay-kill");
    let json = dir.arg("kill.json");
    // Two loads of 200 requests of 4 MiB at 20 per second: each lasts ~10 s, so the kill lands inside the first.
    let args = [
        "cluster",
        "--pattern",
        "replay",
        "--prefill",
        "0,1",
        "--decode",
        "2,3",
        "--arrivals",
        "poisson:20",
        "--prompt-tokens",
        "fixed:64",
        "--requests",
        "200",
        "--rates",
        "20,40",
        "--kv-bytes-per-token",
        "65536",
        "--warmup-requests",
        "2",
        "--transport",
        "tcp",
        "--json",
        &json,
    ];
    let port = free_port();
    let mut ranks: Vec<Proc> = (0..4)
        .map(|rank| {
            let mut cmd = clean(Command::new(common::bin()));
            cmd.args(args).args(["--coordinator", &format!("127.0.0.1:{port}")]);
            cmd.env("KVXFER_RANK", rank.to_string()).env("KVXFER_WORLD_SIZE", "4");
            Proc::start(&mut cmd, format!("rank {rank} of a cluster replay"))
        })
        .collect();
    assert!(
        ranks[0].stderr.wait_for("load 1/2:", std::time::Duration::from_secs(120)),
        "rank 0 never started the first load: {}",
        ranks[0].stderr.text()
    );
    let mut doomed = ranks.pop().unwrap();
    assert!(doomed.is_running(), "rank 3 exited early: {}", doomed.stderr.text());
    doomed.kill();
    // A stall detector, far above the seconds a failed link takes to reach every rank.
    let limit = std::time::Duration::from_secs(60);
    let start = std::time::Instant::now();
    for mut p in ranks {
        let status = p.wait_timeout(limit.saturating_sub(start.elapsed()));
        let err = p.stderr.text();
        let status = status.unwrap_or_else(|| panic!("{} still running {limit:?} after the kill\n{err}", p.what));
        assert_eq!(status.code(), Some(1), "{}: {err}", p.what);
        let line =
            err.lines().find(|l| l.contains("] error:")).unwrap_or_else(|| panic!("{}: no error:\n{err}", p.what));
        assert!(
            line.contains("→3") || line.contains("rank 3 on "),
            "{}: the error does not name rank 3: {line}",
            p.what
        );
        // Rank 0 names the load it was in; another rank may have gone on to the next load's barrier.
        if p.what.starts_with("rank 0 ") {
            assert!(line.contains("load 1/2"), "{}: the error does not name the load: {line}", p.what);
        }
    }
    let r = read_json(Path::new(&json));
    assert_eq!(r["complete"], false, "{r}");
    let error = r["error"].as_str().unwrap_or("");
    assert!(error.contains("→3") || error.contains("rank 3 on "), "{error}");
    assert!(r["replay"]["loads"].as_array().unwrap().len() <= 1, "the second load never ran");
}
