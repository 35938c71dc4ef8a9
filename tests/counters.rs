//! Counters read around every rep, over real sockets and processes: what moved on the loopback
//! interface and how much CPU each end used are kept per rep and summarized per case; `--counters off` reads none.

mod common;
use common::*;
use std::path::Path;
use std::time::Duration;

fn counter(rep: &serde_json::Value, source: &str, name: &str) -> u64 {
    rep["counters"][source][name].as_u64().unwrap_or_else(|| panic!("no {source} / {name} in {}", rep["counters"]))
}

#[test]
fn a_sweep_keeps_the_loopback_bytes_and_the_processes_cpu_time_of_every_rep() {
    let t = TempDir::new("counters-sweep");
    let (json, dir) = (t.arg("c.json"), t.arg(""));
    run(&["sweep", "--sizes", "8MiB", "--reps", "5", "--json", &json, "--out-dir", &dir]).expect_code(0);
    let v = read_json(Path::new(&json));
    assert_eq!(v["complete"], true, "a finished run says so");
    let c = &v["cases"][0];
    for rep in c["reps"].as_array().unwrap() {
        // Both ends' view of the interface: at least the payload crossed it each way it counts.
        for side in ["sender", "receiver"] {
            let tx = counter(rep, &format!("{side} net lo"), "tx_bytes");
            assert!(tx >= 8 << 20, "{side}: loopback carried {tx} bytes for an 8 MiB rep");
        }
        // One process holds both ends: its CPU time is read once, for both.
        assert!(counter(rep, "process (both ends)", "cpu_us") > 0);
        assert!(rep["counters"].get("receiver process").is_none(), "{}", rep["counters"]);
    }
    assert!(c["counters"]["sender net lo"]["tx_bytes"].as_u64().unwrap() >= 8 << 20, "{}", c["counters"]);
    let cpu = c["cpu_s_per_gib"]["process (both ends)"].as_f64().unwrap();
    assert!(cpu > 0.0 && cpu < 100.0, "CPU seconds per GiB: {cpu}");

    run(&["sweep", "--sizes", "8MiB", "--reps", "3", "--counters", "off", "--json", &json, "--out-dir", &dir])
        .expect_code(0);
    let v = read_json(Path::new(&json));
    let c = &v["cases"][0];
    assert!(c["reps"].as_array().unwrap().iter().all(|r| r.get("counters").is_none()), "{c}");
    assert!(c.get("cpu_s_per_gib").is_none() && c.get("counters").is_none(), "{c}");
    run(&["sweep", "--sizes", "8MiB", "--counters", "sometimes"]).expect_code(2);
}

#[test]
fn serve_and_send_each_report_their_own_process() {
    let t = TempDir::new("counters-serve");
    let json = t.arg("s.json");
    let addr = format!("127.0.0.1:{}", free_port());
    let mut serve = Proc::start(kvxfer().args(["serve", "--listen", &addr, "--once"]), "serve".into());
    assert!(serve.stderr.wait_for("listening on", Duration::from_secs(30)), "{}", serve.stderr.text());
    run(&["send", "--peer", &addr, "--sizes", "16MiB", "--reps", "3", "--json", &json]).expect_code(0);
    assert_eq!(serve.wait_timeout(Duration::from_secs(20)).and_then(|s| s.code()), Some(0), "{}", serve.stderr.text());
    let v = read_json(Path::new(&json));
    let c = &v["cases"][0];
    for rep in c["reps"].as_array().unwrap() {
        assert!(counter(rep, "sender process", "cpu_us") > 0);
        assert!(counter(rep, "receiver process", "cpu_us") > 0);
        assert!(counter(rep, "receiver net lo", "rx_bytes") >= 16 << 20);
        // Each end's host, the receiver's shipped back with its other counters.
        for side in ["sender", "receiver"] {
            assert!(counter(rep, &format!("{side} host"), "cpus_now") >= 1, "{}", rep["counters"]);
        }
    }
    let per_gib = &c["cpu_s_per_gib"];
    assert!(per_gib["sender process"].as_f64().unwrap() > 0.0 && per_gib["receiver process"].as_f64().unwrap() > 0.0);
}

/// The state letter of process `pid` (`R` running or runnable) from `/proc/PID/stat`.
fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

#[test]
fn a_sweep_on_a_busy_host_records_run_queue_wait_per_rep_and_warns() {
    // One spinning shell more than there are CPUs: every CPU is taken, so kvxfer's threads wait for one.
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut burners: Vec<Proc> = (0..cpus + 1)
        .map(|i| {
            let mut sh = std::process::Command::new("sh");
            sh.args(["-c", "echo spinning; while :; do :; done"]).stdin(std::process::Stdio::null());
            Proc::start(&mut sh, format!("burner {i}"))
        })
        .collect();
    for b in &burners {
        assert!(b.stdout.wait_for("spinning", Duration::from_secs(30)), "{} did not start", b.what);
        let pid = b.child.id();
        let t = std::time::Instant::now();
        while proc_state(pid) != Some('R') {
            assert!(t.elapsed() < Duration::from_secs(30), "{} is not running: {:?}", b.what, proc_state(pid));
            std::thread::yield_now();
        }
    }
    let t = TempDir::new("counters-busy");
    let (json, dir) = (t.arg("busy.json"), t.arg(""));
    let out =
        run(&["sweep", "--transport", "tcp", "--sizes", "4MiB", "--reps", "20", "--json", &json, "--out-dir", &dir]);
    burners.iter_mut().for_each(Proc::kill);
    out.expect_code(0);
    let v = read_json(Path::new(&json));
    let c = &v["cases"][0];
    for rep in c["reps"].as_array().unwrap() {
        assert!(counter(rep, "process (both ends)", "run_queue_wait_us") > 0, "{}", rep["counters"]);
        assert!(counter(rep, "host (both ends)", "cpus_now") >= cpus as u64, "{}", rep["counters"]);
    }
    let busy = c["warnings"].as_array().unwrap().iter().find(|w| w["kind"] == "busy_host");
    let busy = busy.unwrap_or_else(|| panic!("a busy_host warning: {}", c["warnings"]));
    assert!(busy["message"].as_str().unwrap().starts_with("host busy in "), "{busy}");
    assert!(out.stdout.contains("host busy in "), "the warning is printed under the table:\n{}", out.stdout);
    // The fingerprint has the load average when the run started and when it ended.
    for key in ["load_avg_start", "load_avg_end"] {
        assert_eq!(v["env"][key].as_array().map(Vec::len), Some(3), "{key}: {}", v["env"]);
    }
}
