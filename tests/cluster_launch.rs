//! What the stderr of `kvxfer cluster` ranks looks like when a launcher merges it (`mpirun -np 4`: every line whole
//! and naming its rank, the tcp calibration's verdict once per run), and the token rule a cluster shares with
//! `serve`. mpirun skips, saying why, when missing, and fails instead under `KVXFER_REQUIRE_SLURM=1`.

mod common;

use common::launch::{clean, mpirun_ready};
use common::{free_port, read_json, Out, Proc, TempDir};
use std::path::Path;
use std::process::Command;

const RANKS: usize = 4;
const MPIRUN: &[&str] = &[
    "--allow-run-as-root",
    "--oversubscribe",
    "--mca",
    "oob_tcp_if_include",
    "lo",
    "--mca",
    "btl_tcp_if_include",
    "lo",
    "-np",
    "4",
];
const PAIRS: &[&str] = &["cluster", "--pattern", "pairs", "--sizes", "1MiB", "--reps", "3"];

/// Run a launcher's command to completion; it must exit 0.
fn launch(mut cmd: Command, what: &str) -> Out {
    let out = Proc::start(&mut cmd, what.to_string()).finish();
    out.expect_code(0);
    out
}

/// Rank 0's results: all 6 steps of `pairs` over 4 ranks, under `launcher`.
fn check_results(json: &Path, launcher: &str) {
    let r = read_json(json);
    let cl = &r["cluster"];
    assert_eq!(cl["launcher"], launcher, "{cl}");
    assert_eq!((cl["world_size"].as_u64(), cl["steps_done"].as_u64()), (Some(4), Some(6)), "{cl}");
    assert_eq!(cl["ranks"].as_array().map(Vec::len), Some(RANKS), "{cl}");
    assert_eq!(r["cases"].as_array().map(Vec::len), Some(12), "12 ordered pairs at 1 MiB");
}

/// The merged stderr of 4 ranks: every line starts with its rank's prefix, no line holds two ranks' text, every
/// rank's first line says where the ranks meet and what said so (`source`), and the tcp calibration's verdict
/// appears at most once in the run.
fn check_stderr(err: &str, source: &str) {
    for line in err.lines() {
        let rank = line.strip_prefix("[rank ").and_then(|l| l.split_once("] ")).map(|(r, _)| r);
        assert!(
            rank.is_some_and(|r| r.parse::<usize>().is_ok_and(|r| r < RANKS)),
            "a line without its rank's prefix: {line:?}\n{err}"
        );
        assert!(line.matches("cluster: rank").count() <= 1, "two ranks' text on one line: {line:?}");
    }
    for r in 0..RANKS {
        let first = format!("[rank {r}] cluster: rank {r} of {RANKS} ");
        let line = err.lines().find(|l| l.starts_with(&first)).unwrap_or_else(|| panic!("no {first:?}:\n{err}"));
        assert!(line.contains(source), "rank {r} does not say {source:?}: {line}");
    }
    let calibrations = err.lines().filter(|l| l.contains("tcp paths: ")).count();
    assert!(calibrations <= 1, "the calibration line {calibrations} times:\n{err}");
}

/// `mpirun -np 4 [options] kvxfer cluster --pattern pairs … [args]`.
fn mpirun(json: &str, options: &[&str], args: &[&str]) -> Command {
    let mut cmd = clean(Command::new("mpirun"));
    cmd.args(MPIRUN).args(options).arg(common::bin()).args(PAIRS).args(["--json", json]).args(args);
    cmd
}

#[test]
fn mpirun_ranks_write_whole_lines_each_naming_its_rank() {
    if !mpirun_ready() {
        return;
    }
    let dir = TempDir::new("launch-mpirun-lines");
    let json = dir.arg("pairs.json");
    let coordinator = format!("127.0.0.1:{}", free_port());
    let out =
        launch(mpirun(&json, &[], &["--coordinator", &coordinator]), "mpirun -np 4 kvxfer cluster --pattern pairs");
    check_results(Path::new(&json), "openmpi");
    check_stderr(&out.stderr, "(from --coordinator)");
}

#[test]
fn a_short_token_is_refused_off_loopback_as_serve_refuses_it() {
    let mut serve = common::kvxfer();
    serve.args(["serve", "--listen", "0.0.0.0:0"]).env("KVXFER_TOKEN", "abcdef");
    let serve = Proc::start(&mut serve, "kvxfer serve with a 6-character token".into()).finish();
    serve.expect_code(2);
    let rule = serve.one_error().split_once("0.0.0.0:0: ").map(|(_, rule)| rule.to_string()).unwrap();
    assert!(rule.contains("6 characters"), "{rule}");

    let mut cluster = clean(Command::new(common::bin()));
    cluster.args(["cluster", "--sizes", "1MiB", "--coordinator", "10.255.255.1:18600", "--rendezvous-timeout", "2s"]);
    cluster.env("KVXFER_RANK", "0").env("KVXFER_WORLD_SIZE", "2").env("KVXFER_TOKEN", "abcdef");
    let out = Proc::start(&mut cluster, "kvxfer cluster with a 6-character token".into()).finish();
    out.expect_code(2);
    assert!(out.stderr.contains(&rule), "cluster does not give serve's rule {rule:?}:\n{}", out.stderr);
    assert!(out.stderr.contains("the coordinator 10.255.255.1:18600"), "{}", out.stderr);
}
