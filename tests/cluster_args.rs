//! `kvxfer cluster` ranks started with different arguments, as real processes on loopback: a rank whose
//! measurement differs (sizes, reps) fails the whole group within seconds with rank 0's one line naming the flag and
//! the ranks, while ranks that differ only in what each may choose itself (its device, its output files) run.
//! Also the `alone` pattern: every ordered pair in a step of its own.

mod common;

use common::launch::clean;
use common::{free_port, read_json, Out, Proc, TempDir};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// One rank of `world` started as one of N shells would start it; `args` follow `kvxfer cluster`.
fn rank(r: usize, world: usize, port: u16, args: &[String]) -> Proc {
    let mut cmd = clean(Command::new(common::bin()));
    cmd.arg("cluster").args(args).args(["--coordinator", &format!("127.0.0.1:{port}")]);
    cmd.env("KVXFER_RANK", r.to_string()).env("KVXFER_WORLD_SIZE", world.to_string());
    Proc::start(&mut cmd, format!("kvxfer cluster rank {r}"))
}

/// Start one rank per entry of `args` (rank r gets `args[r]`) and wait for all; also how long the slowest took.
fn launch(args: &[Vec<String>]) -> (Vec<Out>, Duration) {
    let port = free_port();
    let start = Instant::now();
    let procs: Vec<Proc> = args.iter().enumerate().map(|(r, a)| rank(r, args.len(), port, a)).collect();
    let outs: Vec<Out> = procs.into_iter().map(Proc::finish).collect();
    (outs, start.elapsed())
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

const BASE: &[&str] = &["--pattern", "pairs", "--sizes", "1MiB", "--reps", "2", "--transport", "tcp"];

/// Four ranks, rank `odd` with `flag value` where the others have BASE's: every rank fails within seconds, rank 0
/// with a usage error (exit 2) that names the flag, the odd rank and both values; the others with rank 0's line.
fn refused(odd: usize, flag: &str, value: &str, expect: &str) {
    let dir = TempDir::new("cluster-args");
    let json = dir.arg("r.json");
    let args: Vec<Vec<String>> = (0..4)
        .map(|r| {
            let mut a = strings(BASE);
            if r == odd {
                let at = a.iter().position(|x| x == flag).expect("a flag of BASE");
                a[at + 1] = value.to_string();
            }
            a.extend(strings(&["--json", &json]));
            a
        })
        .collect();
    let (outs, took) = launch(&args);
    let line = outs[0].expect_code(2).one_error().to_string();
    assert!(line.contains(expect), "rank 0: {line}");
    assert!(line.contains("run every rank with the same arguments"), "{line}");
    for o in &outs[1..] {
        assert!(o.code.is_some_and(|c| c != 0), "{}: exit {:?}\n{}", o.what, o.code, o.stderr);
        o.no_panic();
        assert!(o.one_error().contains(expect), "{}: {}", o.what, o.stderr);
    }
    assert!(took < Duration::from_secs(20), "the ranks took {took:?} to fail");
    // Nothing was measured: rank 0 refused before the first step.
    assert!(!Path::new(&json).exists() || read_json(Path::new(&json))["cases"].as_array().is_none_or(Vec::is_empty));
}

#[test]
fn a_rank_with_other_sizes_fails_every_rank_naming_the_flag_and_the_ranks() {
    refused(2, "--sizes", "2MiB", "ranks disagree on --sizes: rank 0 and 1, 3 have 1MiB; rank 2 has 2MiB");
}

#[test]
fn a_rank_with_other_reps_fails_every_rank_naming_the_flag_and_the_ranks() {
    refused(1, "--reps", "3", "ranks disagree on --reps: rank 0 and 2, 3 have 2; rank 1 has 3");
}

#[test]
fn ranks_differing_only_in_their_device_and_output_files_run() {
    let dir = TempDir::new("cluster-args-ok");
    let args: Vec<Vec<String>> = (0..4)
        .map(|r| {
            let mut a = strings(BASE);
            let json = dir.arg(&format!("rank{r}.json"));
            let device = if r % 2 == 0 { "mlx5_0,mlx5_1" } else { "rxe0" };
            a.extend(strings(&["--json", &json, "-d", device, "--label", &format!("rank {r}")]));
            a
        })
        .collect();
    let (outs, _) = launch(&args);
    for o in &outs {
        o.expect_code(0);
    }
    // Rank 0 writes the results, under its own --json; the others' paths are theirs to ignore.
    let r = read_json(&dir.join("rank0.json"));
    assert_eq!((r["cluster"]["steps_done"].as_u64(), r["cases"].as_array().map(Vec::len)), (Some(6), Some(12)));
    assert!(!dir.join("rank1.json").exists());
}

#[test]
fn alone_measures_every_ordered_pair_in_a_step_of_its_own() {
    let dir = TempDir::new("cluster-alone");
    let json = dir.arg("r.json");
    let args = strings(&["--pattern", "alone", "--sizes", "1MiB", "--reps", "2", "--verify", "--json", &json]);
    let (outs, _) = launch(&[args.clone(), args.clone(), args]);
    for o in &outs {
        o.expect_code(0);
    }
    let r = read_json(Path::new(&json));
    let cl = &r["cluster"];
    assert_eq!(
        (cl["pattern"].as_str(), cl["steps_total"].as_u64(), cl["steps_done"].as_u64()),
        (Some("alone"), Some(6), Some(6)),
        "{cl}"
    );
    assert_eq!(cl["aggregates"].as_array().map(Vec::len), Some(0), "a one-flow step has no aggregate");
    let cases = r["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 6, "6 ordered pairs × 1 size");
    let steps: BTreeSet<u64> = cases.iter().map(|c| c["step"].as_u64().unwrap()).collect();
    assert_eq!(steps, (1..=6).collect(), "a step per pair");
    let pairs: BTreeSet<(u64, u64)> =
        cases.iter().map(|c| (c["src"]["rank"].as_u64().unwrap(), c["dst"]["rank"].as_u64().unwrap())).collect();
    let all: BTreeSet<(u64, u64)> = (0..3).flat_map(|s| (0..3).filter(move |d| *d != s).map(move |d| (s, d))).collect();
    assert_eq!(pairs, all);
    for c in cases {
        assert_eq!(
            (c["pattern"].as_str(), c["flows"].as_u64(), &c["verified"]),
            (Some("alone"), Some(1), &Value::Bool(true))
        );
    }
    assert!(outs[0].stderr.contains("step 6/6: 2→1 at 1 MiB"), "{}", outs[0].stderr);
}

/// `kvxfer cluster --help` says what each pattern runs at once: `pairs` runs disjoint pairs together, and `alone`
/// is the one that runs a pair by itself.
#[test]
fn cluster_help_says_what_each_pattern_runs_at_once() {
    let out = common::run(&["cluster", "--help"]);
    out.expect_code(0);
    let help = out.stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    let help = help.split("Patterns (what runs at once):").nth(1).expect("the patterns paragraph");
    let pairs = help.split("pairs (").nth(1).and_then(|s| s.split(')').next()).expect("the pairs entry");
    assert!(!pairs.contains("alone") && pairs.contains("disjoint pairs at once"), "pairs: {pairs}");
    let alone = help.split("alone (").nth(1).and_then(|s| s.split(')').next()).expect("an alone entry");
    assert!(alone.contains("one flow at a time"), "alone: {alone}");
    for line in out.stdout.lines().filter(|l| l.trim_start().starts_with("- pairs:")) {
        assert!(!line.contains("alone"), "{line}");
    }
}
