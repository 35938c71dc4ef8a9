//! `kvxfer devices` on this host: which transports can run here and, for each that cannot, why in a few words
//! (asked of the transport itself: the library, driver, devices or Python it needs), and the network interfaces
//! with their speed and MTU.

mod common;
use common::*;
use std::path::Path;

/// `kvxfer devices` (text) and `kvxfer devices --json` with `env` added.
fn devices(env: &[(&str, &str)]) -> (String, serde_json::Value) {
    let run = |args: &[&str]| {
        let mut cmd = kvxfer();
        cmd.args(args).envs(env.iter().copied());
        let out = Proc::start(&mut cmd, format!("kvxfer {}", args.join(" "))).finish();
        out.expect_code(0);
        out.stdout
    };
    let json = run(&["devices", "--json"]);
    (run(&["devices"]), serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}")))
}

/// The `transports` entry named `name`.
fn transport<'a>(v: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    let all = v["transports"].as_array().unwrap_or_else(|| panic!("no transports in {v}"));
    all.iter().find(|t| t["name"] == name).unwrap_or_else(|| panic!("{name} not in {all:?}"))
}

/// The text line of transport `name`, below `transports`.
fn transport_line<'a>(text: &'a str, name: &str) -> &'a str {
    text.lines().find(|l| l.split_whitespace().next() == Some(name) && l.starts_with("  ")).unwrap_or_else(|| {
        panic!("no line for {name}:\n{text}");
    })
}

/// Asserts `name` is listed as unusable, with a reason that contains `because`.
fn unavailable(text: &str, v: &serde_json::Value, name: &str, because: &str) {
    let t = transport(v, name);
    assert_eq!(t["available"], false, "{t}");
    let reason = t["reason"].as_str().unwrap_or_else(|| panic!("no reason: {t}"));
    assert!(reason.contains(because), "{name}: {reason}");
    assert!(!t["detail"].as_str().unwrap_or_default().is_empty(), "{t}");
    assert_eq!(transport_line(text, name), format!("  {name:<9} no: {reason}"), "{text}");
}

#[test]
fn devices_lists_what_runs_here_and_why_the_rest_does_not() {
    let empty = TempDir::new("no-nixl");
    let (text, v) = devices(&[("KVXFER_PYTHON", "/nonexistent/python3"), ("KVXFER_NIXL_LIB", &empty.arg(""))]);
    let names: Vec<&str> = v["transports"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["tcp", "verbs", "cuda", "mooncake", "nixl"]);
    assert_eq!(transport(&v, "tcp")["available"], true);
    assert_eq!(transport_line(&text, "tcp").split_whitespace().collect::<Vec<_>>(), ["tcp", "yes"], "{text}");
    // This machine has no RDMA device and no CUDA driver; a machine with them must list them as usable.
    if std::fs::read_dir("/sys/class/infiniband").map_or(true, |mut d| d.next().is_none()) {
        unavailable(&text, &v, "verbs", "RDMA");
    } else {
        assert_eq!(transport(&v, "verbs")["available"], true, "{v}");
    }
    let has_driver = ["/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/lib64/libcuda.so.1", "/dev/nvidiactl"]
        .iter()
        .any(|p| Path::new(p).exists());
    if has_driver || promised("KVXFER_REQUIRE_GPU") > 0 {
        assert_eq!(transport(&v, "cuda")["available"], true, "{v}");
    } else {
        unavailable(&text, &v, "cuda", "no CUDA driver (libcuda.so.1)");
    }
    unavailable(&text, &v, "mooncake", "KVXFER_PYTHON");
    unavailable(&text, &v, "nixl", "KVXFER_NIXL_LIB");
    let usable = names.iter().filter(|n| transport(&v, n)["available"] == true).count();
    assert!(text.contains(&format!("transports {usable} of 5 usable here")), "{text}");
}

#[test]
fn devices_lists_the_network_interfaces_with_speed_and_mtu() {
    let (text, v) = devices(&[]);
    let lo_mtu: u64 = std::fs::read_to_string("/sys/class/net/lo/mtu").unwrap().trim().parse().unwrap();
    let nets = v["interfaces"].as_array().unwrap_or_else(|| panic!("no interfaces in {v}"));
    let lo = nets.iter().find(|n| n["name"] == "lo").unwrap_or_else(|| panic!("no lo in {nets:?}"));
    // Loopback has no link speed; sysfs refuses the read.
    assert_eq!((lo["mtu"].as_u64(), lo["speed_mbps"].is_null()), (Some(lo_mtu), true), "{lo}");
    assert_eq!(
        nets.len(),
        std::fs::read_dir("/sys/class/net").unwrap().filter(|e| e.as_ref().unwrap().path().is_dir()).count()
    );
    let line = text.lines().find(|l| l.split_whitespace().next() == Some("lo")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.ends_with(&format!("MTU {lo_mtu}")), "{line}");
    assert!(text.contains(&format!("network    {} interface(s)", nets.len())), "{text}");
}

#[test]
#[ignore = "needs the engine wheels: scripts/test runs it (KVXFER_REQUIRE_ENGINES=1, --run-ignored)"]
fn with_the_engines_python_mooncake_is_available() {
    let python = match std::env::var("KVXFER_ENGINES_PYTHON") {
        Ok(p) => p,
        Err(_) => {
            let why = "KVXFER_ENGINES_PYTHON is not set (scripts/test sets it to the venv scripts/setup --test makes)";
            return missing_hardware("KVXFER_REQUIRE_ENGINES", 0, why);
        }
    };
    let (text, v) = devices(&[("KVXFER_PYTHON", &python)]);
    assert_eq!(transport(&v, "mooncake")["available"], true, "{v}");
    assert!(transport(&v, "mooncake").get("reason").is_none(), "{v}");
    assert_eq!(transport_line(&text, "mooncake").split_whitespace().collect::<Vec<_>>(), ["mooncake", "yes"]);
}
