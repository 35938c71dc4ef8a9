//! NUMA placement (`--numa`) over real runs: each end binds its thread to a node's CPUs before it
//! allocates, and the results record, per end, the node and the CPUs the kernel then reports for the thread. The
//! host's NUMA nodes are read through `KVXFER_SYSFS_ROOT`, so a two-node host is a small tree here, and the binding
//! itself is real (`sched_setaffinity` on this machine's CPUs).

mod common;
use common::*;
use std::path::Path;

/// A sysfs tree with two NUMA nodes: node 0 holds CPU 0, node 1 this machine's last CPU.
fn two_nodes(t: &TempDir) -> (String, usize) {
    let last = std::thread::available_parallelism().map_or(1, |n| n.get()) - 1;
    for (node, cpus) in [(0, "0".to_string()), (1, last.to_string())] {
        let dir = t.join(&format!("root/sys/devices/system/node/node{node}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("cpulist"), format!("{cpus}\n")).unwrap();
    }
    (t.arg("root"), last)
}

fn sweep_with_root(root: &str, extra: &[&str]) -> Out {
    let args = [&["sweep", "--sizes", "1MiB", "--reps", "3"][..], extra].concat();
    Proc::start(kvxfer().env("KVXFER_SYSFS_ROOT", root).args(&args), format!("kvxfer {}", args.join(" "))).finish()
}

#[test]
fn numa_n_binds_both_ends_to_that_nodes_cpus_and_records_them() {
    let t = TempDir::new("numa-node");
    let (root, last) = two_nodes(&t);
    let json = t.arg("r.json");
    sweep_with_root(&root, &["--numa", "1", "--json", &json, "--out-dir", &t.arg("")]).expect_code(0);
    let v = read_json(Path::new(&json));
    for side in ["sender", "receiver"] {
        let n = &v["config"]["numa"][side];
        assert_eq!(n["mode"], "1", "{n}");
        assert_eq!(n["node"], 1, "{n}");
        // What the kernel reports after the binding, not what was asked for.
        assert_eq!(n["cpus"], last.to_string(), "{n}");
        assert_eq!(n["reason"], "--numa 1", "{n}");
    }
    assert_eq!(v["cases"][0]["n"], 3);
}

#[test]
fn numa_auto_binds_nothing_without_a_nic_or_gpu_and_off_binds_nothing() {
    let t = TempDir::new("numa-auto");
    let (root, _) = two_nodes(&t);
    let all = match std::thread::available_parallelism().map_or(1, |n| n.get()) {
        1 => "0".to_string(),
        n => format!("0-{}", n - 1),
    };
    for (mode, reason) in [("auto", "no RDMA NIC or GPU to follow"), ("off", "--numa off")] {
        let json = t.arg(&format!("{mode}.json"));
        sweep_with_root(&root, &["--numa", mode, "--json", &json, "--out-dir", &t.arg("")]).expect_code(0);
        let v = read_json(Path::new(&json));
        for side in ["sender", "receiver"] {
            let n = &v["config"]["numa"][side];
            assert!(n["node"].is_null(), "{n}");
            assert_eq!(n["reason"], reason, "{n}");
            assert_eq!(n["cpus"], all, "{n}");
        }
    }
}

#[test]
fn numa_node_the_host_lacks_is_one_line_and_exit_2() {
    let t = TempDir::new("numa-bad");
    let (root, _) = two_nodes(&t);
    let out = sweep_with_root(&root, &["--numa", "7", "--out-dir", &t.arg("")]);
    out.expect_code(2).no_panic();
    let line = out.one_error();
    assert!(line.contains("--numa 7: no such NUMA node (this host has node 0, 1)"), "{line}");
    run(&["sweep", "--numa", "node1", "--sizes", "1MiB"]).expect_code(2);
}
