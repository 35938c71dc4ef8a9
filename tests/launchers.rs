//! kvxfer::cluster under real launchers, with real processes on loopback: a torchrun-style environment set by this
//! test, OpenMPI's `mpirun`, and Slurm's `srun` on the one-node Slurm of `scripts/slurm up`. Each launch runs
//! examples/rendezvous (discovery, rendezvous at rank 0, one barrier, one JSON line per rank) on 4 ranks.
//!
//! The example is built by the test itself (see [`example`]), next to the kvxfer binary. The mpirun and srun tests
//! are `#[ignore]`d, with the reason: scripts/test runs them as root (`--run-ignored only`), after `scripts/slurm up`,
//! with `KVXFER_REQUIRE_SLURM=1`, under which a missing launcher fails them; run by hand, they skip saying why.

mod common;

use common::launch::{clean, mpirun_ready, slurm_ready};
use common::{free_port, Out, Proc};
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const RANKS: usize = 4;

/// target/<profile>/examples/rendezvous, beside the kvxfer binary cargo built for these tests. Built here, once
/// per test process, with the same cargo and profile: `cargo nextest run --test launchers` selects this test
/// target alone and would not build (or rebuild) examples; when it is up to date this costs a fraction of a second.
fn example() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let kvxfer = PathBuf::from(env!("CARGO_BIN_EXE_kvxfer"));
            let profile_dir = kvxfer.parent().unwrap();
            let mut cargo = Command::new(option_env!("CARGO").unwrap_or("cargo"));
            cargo.current_dir(env!("CARGO_MANIFEST_DIR")).args([
                "build",
                "--quiet",
                "--locked",
                "--example",
                "rendezvous",
            ]);
            if profile_dir.file_name().is_some_and(|n| n == "release") {
                cargo.arg("--release");
            }
            let status = cargo.status().expect("run cargo build --example rendezvous");
            assert!(status.success(), "cargo build --example rendezvous failed");
            let path = profile_dir.join("examples").join("rendezvous");
            assert!(path.exists(), "{} is missing after cargo build --example rendezvous", path.display());
            path
        })
        .clone()
}

/// One rank started the way N shells would: `KVXFER_*` variables, or torchrun's when `torchrun` is true.
fn rank(rank: usize, size: usize, port: u16, torchrun: bool, extra: &[&str]) -> Proc {
    let mut cmd = clean(Command::new(example()));
    let (r, s, l) = if torchrun {
        cmd.env("MASTER_ADDR", "127.0.0.1").env("MASTER_PORT", port.to_string());
        ("RANK", "WORLD_SIZE", "LOCAL_RANK")
    } else {
        cmd.arg("--coordinator").arg(format!("127.0.0.1:{port}"));
        ("KVXFER_RANK", "KVXFER_WORLD_SIZE", "KVXFER_LOCAL_RANK")
    };
    cmd.env(r, rank.to_string()).env(s, size.to_string()).env(l, rank.to_string()).args(extra);
    Proc::start(&mut cmd, format!("rendezvous rank {rank} of {size}"))
}

/// The JSON lines of all ranks: 4 ranks 0..3, each with the expected launcher and world size, one identical table
/// listing ranks 0..3 in order, each rank's local rank as the table has it.
fn check_launch(stdout: &str, launcher: &str) {
    let lines: Vec<Value> = stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert_eq!(lines.len(), RANKS, "one line per rank expected:\n{stdout}");
    let mut ranks: Vec<u64> = lines.iter().map(|l| l["rank"].as_u64().unwrap()).collect();
    ranks.sort();
    assert_eq!(ranks, [0, 1, 2, 3], "{stdout}");
    let table = &lines[0]["table"];
    for line in &lines {
        assert_eq!(line["launcher"], launcher, "{line}");
        assert_eq!(line["world_size"], RANKS, "{line}");
        assert_eq!(&line["table"], table, "ranks saw different tables:\n{stdout}");
        let me = &table[line["rank"].as_u64().unwrap() as usize];
        assert_eq!(me["local_rank"], line["local_rank"], "{line}");
    }
    let table = table.as_array().unwrap();
    for (i, member) in table.iter().enumerate() {
        assert_eq!(member["rank"], i, "{member}");
        let addr: std::net::SocketAddr = member["addr"].as_str().unwrap().parse().unwrap();
        assert_ne!(addr.port(), 0, "{member}");
        assert!(!member["host"].as_str().unwrap().is_empty(), "{member}");
    }
}

/// Every process exits 0; their stdout, concatenated.
fn finish_all(procs: Vec<Proc>) -> String {
    let outs: Vec<Out> = procs.into_iter().map(Proc::finish).collect();
    outs.iter().map(|o| o.expect_code(0).stdout.clone()).collect::<Vec<_>>().join("")
}

#[test]
fn torchrun_style_environment_launch_of_four() {
    let port = free_port();
    let procs = (0..RANKS).map(|r| rank(r, RANKS, port, true, &[])).collect();
    check_launch(&finish_all(procs), "torchrun");
}

#[test]
fn kvxfer_variables_launch_of_four_with_a_token() {
    let port = free_port();
    let procs = (0..RANKS)
        .map(|r| {
            let mut p = clean(Command::new(example()));
            p.env("KVXFER_TOKEN", "s3cret").env("KVXFER_RANK", r.to_string()).env("KVXFER_WORLD_SIZE", "4");
            p.args(["--coordinator", &format!("localhost:{port}")]);
            Proc::start(&mut p, format!("rendezvous rank {r}"))
        })
        .collect();
    check_launch(&finish_all(procs), "kvxfer");
}

/// Run a launcher command to completion within a minute; its output.
fn launch(mut cmd: Command, what: &str) -> Out {
    Proc::start(&mut cmd, what.to_string()).finish()
}

#[test]
#[ignore = "needs mpirun: scripts/test runs it as root (KVXFER_REQUIRE_SLURM=1, --run-ignored)"]
fn under_mpirun() {
    if !mpirun_ready() {
        return;
    }
    let mut cmd = clean(Command::new("mpirun"));
    cmd.args(["--allow-run-as-root", "--oversubscribe", "--mca", "oob_tcp_if_include", "lo"]);
    cmd.args(["--mca", "btl_tcp_if_include", "lo", "-np", "4"]);
    cmd.arg(example()).args(["--coordinator", &format!("127.0.0.1:{}", free_port())]);
    let out = launch(cmd, "mpirun -np 4 rendezvous");
    check_launch(&out.expect_code(0).stdout, "openmpi");
}

#[test]
#[ignore = "needs Slurm: scripts/test runs it as root (KVXFER_REQUIRE_SLURM=1, --run-ignored)"]
fn under_srun() {
    let Some(conf) = slurm_ready() else { return };
    // No --coordinator: the ranks find rank 0 through SLURM_JOB_NODELIST and scontrol.
    let mut cmd = clean(Command::new("srun"));
    cmd.env("SLURM_CONF", &conf).args(["-n", "4", "--time", "2"]).arg(example());
    let out = launch(cmd, "srun -n 4 rendezvous");
    check_launch(&out.expect_code(0).stdout, "slurm");
}

/// Wait for each process to exit within `limit` of now; each must fail (exit 1) with an error naming `needle`.
fn all_fail_naming(procs: Vec<Proc>, limit: Duration, needle: &str) {
    let start = Instant::now();
    for mut p in procs {
        let left = limit.saturating_sub(start.elapsed());
        let status = p.wait_timeout(left);
        let (out, err) = (p.stdout.text(), p.stderr.text());
        let status = status.unwrap_or_else(|| panic!("{} still running {limit:?} after the failure\n{err}", p.what));
        assert_eq!(status.code(), Some(1), "{}: {out}\n{err}", p.what);
        let line = err
            .lines()
            .find(|l| l.starts_with("error:"))
            .unwrap_or_else(|| panic!("{}: no error line:\n{err}", p.what));
        assert!(line.contains(needle), "{}: error does not name {needle:?}: {line}", p.what);
    }
}

#[test]
fn a_rank_killed_before_the_table_fails_the_others_naming_it() {
    let port = free_port();
    let mut waiting =
        vec![rank(0, RANKS, port, false, &["--timeout", "60"]), rank(1, RANKS, port, false, &["--timeout", "60"])];
    // Rank 2 never comes, so rank 3 joins and waits for the table until it is killed.
    let mut doomed = rank(3, RANKS, port, false, &["--timeout", "60"]);
    for r in [1, 3] {
        let line = format!("rank {r} joined");
        assert!(waiting[0].stderr.wait_for(&line, Duration::from_secs(30)), "rank 0: {}", waiting[0].stderr.text());
    }
    assert!(doomed.is_running() && waiting.iter_mut().all(Proc::is_running), "a rank exited before the kill");
    doomed.kill();
    all_fail_naming(waiting, Duration::from_secs(5), "rank 3 on ");
}

#[test]
fn rank_0_killed_before_the_table_fails_the_others_naming_it() {
    let port = free_port();
    let mut coordinator = rank(0, RANKS, port, false, &["--timeout", "60"]);
    // Rank 3 never comes: ranks 1 and 2 join and wait for the table until rank 0 is killed.
    let waiting: Vec<Proc> = (1..3).map(|r| rank(r, RANKS, port, false, &["--timeout", "60"])).collect();
    for r in [1, 2] {
        let line = format!("rank {r} joined");
        assert!(coordinator.stderr.wait_for(&line, Duration::from_secs(30)), "rank 0: {}", coordinator.stderr.text());
    }
    assert!(coordinator.is_running(), "rank 0 exited before the kill: {}", coordinator.stderr.text());
    coordinator.kill();
    all_fail_naming(waiting, Duration::from_secs(5), "rank 0 (coordinator at 127.0.0.1:");
}

#[test]
fn a_rank_killed_in_a_barrier_fails_the_others_naming_it() {
    let port = free_port();
    let others: Vec<Proc> = (0..3).map(|r| rank(r, RANKS, port, false, &[])).collect();
    let mut doomed = rank(3, RANKS, port, false, &["--hold"]);
    // --hold prints the rank's line after the rendezvous and stays out of the barrier the others wait in.
    assert!(doomed.stdout.wait_for("\"table\"", Duration::from_secs(30)), "rank 3: {}", doomed.stderr.text());
    doomed.kill();
    all_fail_naming(others, Duration::from_secs(5), "rank 3 on ");
}

#[test]
fn a_rank_that_never_comes_is_named_at_the_timeout() {
    let port = free_port();
    let procs = (0..2).map(|r| rank(r, 3, port, false, &["--timeout", "2"])).collect();
    all_fail_naming(procs, Duration::from_secs(10), "rank 2 of 3 did not join within 2 s");
}

#[test]
fn a_wrong_token_is_turned_away() {
    let port = free_port();
    let mut procs = Vec::new();
    for (r, token) in [(0, "right"), (1, "wrong")] {
        let mut cmd = clean(Command::new(example()));
        cmd.env("KVXFER_RANK", r.to_string()).env("KVXFER_WORLD_SIZE", "2").env("KVXFER_TOKEN", token);
        cmd.args(["--coordinator", &format!("127.0.0.1:{port}"), "--timeout", "3"]);
        procs.push(Proc::start(&mut cmd, format!("rank {r}")));
    }
    let coordinator = procs.remove(0);
    all_fail_naming(procs, Duration::from_secs(10), "wrong token");
    all_fail_naming(
        vec![coordinator],
        Duration::from_secs(10),
        "turned away 1 connection: 127.0.0.1: its proof does not match",
    );
}

#[test]
fn inconsistent_environments_are_usage_errors() {
    let cases: [(&[(&str, &str)], &str); 3] = [
        (&[("RANK", "4"), ("WORLD_SIZE", "4"), ("MASTER_ADDR", "h"), ("MASTER_PORT", "1")], "RANK=4"),
        (&[("OMPI_COMM_WORLD_RANK", "x"), ("OMPI_COMM_WORLD_SIZE", "4")], "OMPI_COMM_WORLD_RANK=\"x\""),
        (&[("KVXFER_RANK", "1"), ("KVXFER_WORLD_SIZE", "2")], "--coordinator"),
    ];
    for (vars, needle) in cases {
        let mut cmd = clean(Command::new(example()));
        cmd.envs(vars.iter().copied());
        let out = launch(cmd, &format!("rendezvous with {vars:?}"));
        let line = out.expect_code(2).one_error().to_string();
        assert!(line.contains(needle), "{vars:?}: {line}");
    }
}

/// One rendezvous frame: a 4-byte big-endian length, then JSON.
fn frame_of(msg: &Value) -> Vec<u8> {
    let body = serde_json::to_vec(msg).unwrap();
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend(body);
    out
}

fn read_frame(s: &mut std::net::TcpStream) -> Vec<u8> {
    use std::io::Read;
    let mut len = [0u8; 4];
    s.read_exact(&mut len).unwrap();
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut body).unwrap();
    body
}

/// A rank meets a rank 0 played by this test: the token never crosses the network (the rank answers the challenge
/// with a proof bound to this connection's nonces), and a rank 0 that cannot prove it holds the token is refused.
#[test]
fn the_token_never_crosses_the_network_and_rank_0_must_prove_it_holds_it() {
    use std::io::Write;
    const TOKEN: &str = "rendezvous-secret-1234";
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut joins = Vec::new();
    for attempt in 0..2 {
        let mut cmd = clean(Command::new(example()));
        cmd.env("KVXFER_RANK", "1").env("KVXFER_WORLD_SIZE", "2").env("KVXFER_TOKEN", TOKEN);
        cmd.args(["--coordinator", &format!("127.0.0.1:{port}"), "--timeout", "20"]);
        let member = Proc::start(&mut cmd, format!("rank 1, attempt {attempt}"));
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        // The same challenge both times: the rank's own nonce still makes each Join's proof new.
        s.write_all(&frame_of(&serde_json::json!({"type": "Challenge", "nonce": "00112233445566778899aabbccddeeff"})))
            .unwrap();
        let raw = read_frame(&mut s);
        let text = String::from_utf8_lossy(&raw).to_string();
        assert!(!text.contains(TOKEN) && !text.contains(&TOKEN[..12]), "the token crossed the network: {text}");
        let join: Value = serde_json::from_slice(&raw).unwrap();
        assert_eq!(join["type"], "Join", "{join}");
        assert_eq!(join["proof"].as_str().map(str::len), Some(64), "{join}");
        assert_eq!(join["nonce"].as_str().map(str::len), Some(32), "{join}");
        joins.push(join);
        // A table with a proof made without the token: the rank refuses it.
        let table = serde_json::json!({"type": "Table", "proof": "00".repeat(32), "members": [
            {"rank": 0, "local_rank": 0, "host": "impostor", "addr": "127.0.0.1:1"},
            {"rank": 1, "local_rank": 0, "host": "me", "addr": "127.0.0.1:2"}]});
        s.write_all(&frame_of(&table)).unwrap();
        all_fail_naming(vec![member], Duration::from_secs(20), "does not hold this rank's KVXFER_TOKEN");
    }
    assert_ne!(joins[0]["proof"], joins[1]["proof"], "a captured Join cannot be replayed");
}
