//! Every rank of a cluster run must measure the same thing. Each rank computes the schedule and its flows from its
//! own command line, so a rank started with other sizes, reps or pattern would silently measure something else, or
//! wait at a barrier the others never reach. Right after the rendezvous, before any step, every rank sends rank 0 its
//! arguments; rank 0 compares them with its own and fails the whole group on a mismatch, naming each flag and which
//! ranks have which value.
//!
//! A rank's arguments are its typed options serialized (`ClusterArgs`, every flag of `kvxfer cluster` but the
//! output files and the token) minus [`PER_RANK`], so a flag added later is compared unless someone decides here
//! that ranks may differ on it.

use crate::bail_usage;
use crate::cli::ClusterArgs;
use crate::cluster::Group;
use anyhow::{anyhow, Result};
use serde_json::{Map, Value};
use std::collections::BTreeSet;

/// The fields of `ClusterArgs` a rank may choose for itself: which GPU and RDMA device it uses (`-d` lists and
/// `--gpu-per-local-rank` are indexed by local rank, and hosts differ), the name rank 0 gives the run, and how the
/// ranks meet (done by the time the arguments are compared).
const PER_RANK: &[&str] =
    &["gpu_per_local_rank", "device", "ib_port", "gid_index", "label", "coordinator", "rendezvous_timeout"];

/// This rank's description of what it measures: field name → canonical value (sizes as they read back exactly,
/// enums by name), everything but [`PER_RANK`].
pub fn measured_args(a: &ClusterArgs) -> Result<Map<String, Value>> {
    let Value::Object(mut fields) = serde_json::to_value(a)? else {
        return Err(anyhow!("the cluster arguments did not serialize to a map"));
    };
    fields.retain(|name, _| !PER_RANK.contains(&name.as_str()));
    Ok(fields)
}

/// Every rank takes part whatever its arguments (so a mismatch cannot leave one waiting): it sends rank 0 its
/// [`measured_args`], and rank 0 either releases them all at a barrier or fails the group with the mismatch (a
/// usage error on rank 0; the others fail at the barrier with rank 0's message).
pub fn check_same_args(group: &mut Group, a: &ClusterArgs) -> Result<()> {
    let mine = crate::measure::Json::of(&measured_args(a)?)?;
    if let Some(all) = group.gather(mine)? {
        let all: Vec<Value> = all.iter().map(|v| v.read().unwrap_or(Value::Null)).collect();
        if let Some(message) = disagreement(&all) {
            group.abort(&message);
            bail_usage!("{message}");
        }
    }
    group.barrier()
}

/// The one line that says which flags the ranks disagree on (every rank's arguments, in rank order; rank 0 first),
/// or None when all agree.
fn disagreement(all: &[Value]) -> Option<String> {
    let mut maps: Vec<&Map<String, Value>> = Vec::with_capacity(all.len());
    for (rank, v) in all.iter().enumerate() {
        match v.as_object() {
            Some(m) => maps.push(m),
            None => {
                return Some(format!(
                "rank {rank} described its arguments in a form rank 0 cannot read; run the same kvxfer on every rank"
            ))
            }
        }
    }
    let names: BTreeSet<&String> = maps.iter().flat_map(|m| m.keys()).collect();
    let clauses: Vec<String> = names
        .into_iter()
        .filter_map(|name| {
            let values: Vec<Option<&Value>> = maps.iter().map(|m| m.get(name)).collect();
            differing(name, &values)
        })
        .collect();
    if clauses.is_empty() {
        return None;
    }
    Some(format!("ranks disagree on {}; run every rank with the same arguments", clauses.join("; and on ")))
}

/// "--sizes: rank 0 and 1, 3 have 1MiB; rank 2 has 2MiB" when the ranks' values of `name` differ.
fn differing(name: &str, values: &[Option<&Value>]) -> Option<String> {
    // Distinct values in order of the first rank that has each: rank 0's first.
    let mut groups: Vec<(Option<&Value>, Vec<usize>)> = Vec::new();
    for (rank, v) in values.iter().enumerate() {
        match groups.iter_mut().find(|(seen, _)| seen == v) {
            Some((_, ranks)) => ranks.push(rank),
            None => groups.push((*v, vec![rank])),
        }
    }
    if groups.len() < 2 {
        return None;
    }
    let parts: Vec<String> = groups
        .iter()
        .map(|(v, ranks)| {
            let value = crate::console::printable(&value_text(*v));
            let verb = if ranks.len() == 1 { "has" } else { "have" };
            match ranks.split_first() {
                Some((0, rest)) if !rest.is_empty() => format!("rank 0 and {} {verb} {value}", rank_list(rest)),
                _ if ranks.len() == 1 => format!("rank {} {verb} {value}", ranks[0]),
                _ => format!("ranks {} {verb} {value}", rank_list(ranks)),
            }
        })
        .collect();
    Some(format!("--{}: {}", name.replace('_', "-"), parts.join("; ")))
}

/// A flag's value as a user would type it: `1MiB,4MiB`, `5`, `none` for an option not given, `60s`.
fn value_text(v: Option<&Value>) -> String {
    let Some(v) = v else {
        // A rank whose kvxfer does not know the flag.
        return "no such flag (another kvxfer version)".to_string();
    };
    match v {
        Value::Null => "none".to_string(),
        Value::String(s) => s.clone(),
        Value::Array(items) => items.iter().map(|i| value_text(Some(i))).collect::<Vec<_>>().join(","),
        Value::Object(o) => match (o.get("secs").and_then(Value::as_u64), o.get("nanos").and_then(Value::as_u64)) {
            // A Duration, as serde writes it.
            (Some(secs), Some(nanos)) if o.len() == 2 => {
                let d = std::time::Duration::new(secs, nanos as u32);
                humantime::format_duration(d).to_string()
            }
            _ => v.to_string(),
        },
        other => other.to_string(),
    }
}

/// Ranks as a short list: `1, 3, 5-9`.
fn rank_list(ranks: &[usize]) -> String {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for &r in ranks {
        match runs.last_mut() {
            Some((_, end)) if *end + 1 == r => *end = r,
            _ => runs.push((r, r)),
        }
    }
    let text: Vec<String> = runs
        .iter()
        .map(|&(a, b)| match b - a {
            0 => a.to_string(),
            1 => format!("{a}, {b}"),
            _ => format!("{a}-{b}"),
        })
        .collect();
    text.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::OutputArgs;

    fn args(extra: &[&str]) -> ClusterArgs {
        crate::cli::Cli::cluster_args(extra)
    }

    fn described(extra: &[&str]) -> Value {
        Value::Object(measured_args(&args(extra)).unwrap())
    }

    /// Every flag of `kvxfer cluster` is either compared or named as one a rank chooses itself: a new flag cannot
    /// slip past the comparison unnoticed.
    #[test]
    fn every_cluster_flag_is_compared_or_named_as_per_rank() {
        let all = crate::cli::long_flags::<ClusterArgs>();
        let output = crate::cli::long_flags::<OutputArgs>();
        let compared = measured_args(&args(&[])).unwrap();
        for id in all.keys().filter(|id| !output.contains_key(*id)) {
            let per_rank = PER_RANK.contains(&id.as_str()) || id == "token";
            assert!(compared.contains_key(id) != per_rank, "--{id}: compared {}", compared.contains_key(id));
        }
        for name in compared.keys() {
            assert_eq!(all.get(name), Some(&name.replace('_', "-")), "{name} is not a flag of that name");
        }
        for name in PER_RANK {
            assert!(all.contains_key(*name), "{name} in PER_RANK is no flag of kvxfer cluster");
        }
    }

    #[test]
    fn the_token_and_output_paths_are_never_sent() {
        let d = described(&["--token", "s3cret-token", "--json", "/tmp/x.json", "--fig", "/tmp/f"]);
        let text = d.to_string();
        assert!(!text.contains("s3cret") && !text.contains("/tmp/"), "{text}");
    }

    #[test]
    fn a_differing_size_is_named_with_the_ranks_on_each_side() {
        let one = described(&["--sizes", "1MiB"]);
        let two = described(&["--sizes", "2MiB"]);
        let all = [one.clone(), one.clone(), two, one.clone()];
        assert_eq!(
            disagreement(&all).unwrap(),
            "ranks disagree on --sizes: rank 0 and 1, 3 have 1MiB; rank 2 has 2MiB; run every rank with the same arguments"
        );
        assert_eq!(disagreement(&[one.clone(), one.clone()]), None);
    }

    #[test]
    fn the_same_measurement_spelled_differently_or_on_other_devices_agrees() {
        let a = described(&["--sizes", "1024KiB,4MiB", "-d", "mlx5_0", "--gpu-per-local-rank", "--label", "x"]);
        let b = described(&["--sizes", "1MiB,4096KiB", "-d", "mlx5_1,mlx5_2", "--gid-index", "3", "--ib-port", "2"]);
        assert_eq!(disagreement(&[a, b]), None);
    }

    #[test]
    fn several_flags_and_values_are_each_named() {
        let base = described(&["--reps", "5"]);
        let reps = described(&["--reps", "3", "--io-timeout", "2s"]);
        let mem = described(&["--reps", "5", "--mem", "pinned"]);
        let msg = disagreement(&[base.clone(), reps, mem, base.clone(), base]).unwrap();
        assert_eq!(
            msg,
            "ranks disagree on --io-timeout: rank 0 and 2-4 have 1m; rank 1 has 2s; and on --mem: rank 0 and 1, \
             3, 4 have host; rank 2 has pinned; and on --reps: rank 0 and 2-4 have 5; rank 1 has 3; run every rank \
             with the same arguments"
        );
    }

    #[test]
    fn a_rank_without_a_flag_or_with_unreadable_arguments_is_named() {
        let base = described(&[]);
        let mut older = base.clone();
        older.as_object_mut().unwrap().remove("pattern");
        let msg = disagreement(&[base.clone(), older]).unwrap();
        assert!(msg.contains("--pattern: rank 0 has pairs; rank 1 has no such flag"), "{msg}");
        let msg = disagreement(&[base, Value::Null]).unwrap();
        assert!(msg.starts_with("rank 1 described its arguments in a form rank 0 cannot read"), "{msg}");
    }

    #[test]
    fn rank_lists_are_short() {
        assert_eq!(rank_list(&[1, 3]), "1, 3");
        assert_eq!(rank_list(&[1, 2, 4, 5, 6, 7, 9]), "1, 2, 4-7, 9");
    }
}
