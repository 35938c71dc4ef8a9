//! How the ranks of `kvxfer cluster` find rank 0 when nothing names it, and what their stderr looks like when a
//! launcher merges it: `mpirun -np 4` and `srun --mpi=pmix -n 4` with no `--coordinator` (rank 0 publishes its
//! address through the launcher's PMIx server); `mpirun` with PMIx switched off (every rank on this host: loopback, at
//! a port derived from the job); two runs that derive the same port; and the token rule a cluster shares with
//! `serve`. The mpirun and srun tests are `#[ignore]`d and run as tests/launchers.rs says.

mod common;

use common::launch::{clean, mpirun_ready, slurm_ready};
use common::{read_json, Out, Proc, TempDir};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

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
#[ignore = "needs mpirun: scripts/test runs it as root (KVXFER_REQUIRE_SLURM=1, --run-ignored)"]
fn mpirun_needs_no_coordinator_flag_ranks_meet_through_pmix_and_every_line_names_its_rank() {
    if !mpirun_ready() {
        return;
    }
    let dir = TempDir::new("launch-mpirun-pmix");
    let json = dir.arg("pairs.json");
    let out = launch(mpirun(&json, &[], &[]), "mpirun -np 4 kvxfer cluster --pattern pairs (no --coordinator)");
    check_results(Path::new(&json), "openmpi");
    check_stderr(&out.stderr, "(from PMIx");
}

#[test]
#[ignore = "needs mpirun: scripts/test runs it as root (KVXFER_REQUIRE_SLURM=1, --run-ignored)"]
fn mpirun_without_pmix_meets_on_loopback_when_every_rank_is_local() {
    if !mpirun_ready() {
        return;
    }
    let dir = TempDir::new("launch-mpirun-local");
    let json = dir.arg("pairs.json");
    let out = launch(mpirun(&json, &["-x", "KVXFER_PMIX=off"], &[]), "mpirun -np 4 -x KVXFER_PMIX=off kvxfer cluster");
    check_results(Path::new(&json), "openmpi");
    check_stderr(&out.stderr, "every rank on this host");
    assert!(out.stderr.contains("ranks meet at 127.0.0.1:"), "{}", out.stderr);
    assert!(out.stderr.contains("KVXFER_PMIX=off"), "the first line says why not PMIx: {}", out.stderr);
}

#[test]
#[ignore = "needs Slurm: scripts/test runs it as root (KVXFER_REQUIRE_SLURM=1, --run-ignored)"]
fn srun_with_pmix_needs_no_coordinator_flag_either() {
    let Some(conf) = slurm_ready() else { return };
    let dir = TempDir::new("launch-srun-pmix");
    let json = dir.arg("pairs.json");
    let mut cmd = clean(Command::new("srun"));
    cmd.env("SLURM_CONF", &conf).args(["--mpi=pmix", "-n", "4", "--time", "2"]);
    cmd.arg(common::bin()).args(PAIRS).args(["--json", &json]);
    let out = launch(cmd, "srun --mpi=pmix -n 4 kvxfer cluster --pattern pairs");
    check_results(Path::new(&json), "slurm");
    check_stderr(&out.stderr, "(from PMIx");
}

/// One rank 0 of a 2-rank OpenMPI job whose environment has no PMIx server, as mpirun would start it (the job id is
/// what every rank shares).
fn local_rank_0(job: &str, what: &str) -> Proc {
    let mut cmd = clean(Command::new(common::bin()));
    cmd.args(["cluster", "--sizes", "1MiB", "--rendezvous-timeout", "30s"]);
    cmd.env("OMPI_COMM_WORLD_RANK", "0").env("OMPI_COMM_WORLD_SIZE", "2").env("OMPI_COMM_WORLD_LOCAL_RANK", "0");
    cmd.env("OMPI_COMM_WORLD_LOCAL_SIZE", "2").env("OMPI_MCA_ess_base_jobid", job);
    Proc::start(&mut cmd, what.to_string())
}

#[test]
fn two_local_runs_that_derive_the_same_port_fail_the_second_naming_the_port_and_the_flag() {
    let job = format!("{}", 4_000_000 + std::process::id());
    let mut first = local_rank_0(&job, "rank 0 of the first run");
    let meet = "ranks meet at 127.0.0.1:";
    assert!(first.stderr.wait_for(meet, Duration::from_secs(30)), "{}", first.stderr.text());
    let text = first.stderr.text();
    let port: u16 = text.split(meet).nth(1).and_then(|t| t.split(' ').next()).and_then(|p| p.parse().ok()).unwrap();
    // Rank 0 of the first run listens once it has checked its flags: wait until it accepts.
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline && first.is_running(), "rank 0 never listened: {}", first.stderr.text());
        std::thread::yield_now();
    }
    let second = local_rank_0(&job, "rank 0 of a second run with the same job id").finish();
    second.expect_code(1);
    let error = second.stderr.lines().find(|l| l.contains("error:")).unwrap_or_default();
    assert!(error.starts_with("[rank 0] error: "), "{}", second.stderr);
    assert!(error.contains(&format!("port {port}")) && error.contains("--coordinator"), "{error}");
    assert!(first.is_running(), "the first run is unharmed: {}", first.stderr.text());
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

/// A rank of a 2-rank OpenMPI job `job` on this host, meeting at `port` on loopback without a token.
fn job_rank(job: &str, rank: usize, port: u16, json: &str, what: &str) -> Proc {
    let mut cmd = clean(Command::new(common::bin()));
    cmd.args(["cluster", "--sizes", "1MiB", "--reps", "2", "--verify", "--rendezvous-timeout", "30s"]);
    cmd.args(["--coordinator", &format!("127.0.0.1:{port}"), "--json", json]);
    cmd.env("OMPI_COMM_WORLD_RANK", rank.to_string()).env("OMPI_COMM_WORLD_SIZE", "2");
    cmd.env("OMPI_COMM_WORLD_LOCAL_RANK", rank.to_string()).env("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
    cmd.env("OMPI_MCA_ess_base_jobid", job).env("KVXFER_PMIX", "off");
    Proc::start(&mut cmd, what.to_string())
}

#[test]
fn a_rank_of_another_job_meeting_at_the_same_port_is_turned_away_not_joined() {
    let dir = TempDir::new("cluster-two-jobs");
    let (json, other_json) = (dir.arg("r.json"), dir.arg("other.json"));
    let port = common::free_port();
    let mut zero = job_rank("1111", 0, port, &json, "rank 0 of job 1111");
    // Rank 1 of another job comes first; without a token of its own it would take rank 1's place in this run.
    let mut stranger = job_rank("2222", 1, port, &other_json, "rank 1 of job 2222");
    let turned_away = zero.stderr.wait_for("turned away", Duration::from_secs(30));
    assert!(turned_away, "rank 0 let job 2222's rank 1 in:\n{}", zero.stderr.text());
    let stranger_status = stranger.wait_timeout(Duration::from_secs(30)).expect("job 2222's rank 1 gave up");
    assert_ne!(stranger_status.code(), Some(0), "{}", stranger.stderr.text());
    let one = job_rank("1111", 1, port, &dir.arg("r1.json"), "rank 1 of job 1111").finish();
    one.expect_code(0);
    let status = zero.wait_timeout(Duration::from_secs(60)).expect("rank 0 finished");
    assert_eq!(status.code(), Some(0), "{}", zero.stderr.text());
    let r = read_json(Path::new(&json));
    assert_eq!(r["cases"].as_array().unwrap().len(), 2, "both flows of job 1111: {}", r["cases"]);
}
