//! `kvxfer cluster` patterns and ranks' arguments, as real processes on loopback: the `alone` pattern runs every
//! ordered pair in a step of its own, and `--help` says what each pattern runs at once.

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
