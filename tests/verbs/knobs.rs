//! The NIC knobs on real soft-RoCE devices: relaxed ordering, the class of service, on-demand paging, and the
//! device limits and setup costs a run records.

use super::*;
use std::collections::BTreeMap;

/// `ibv_devinfo -v -d DEV`'s `key: value` lines, the first of each key (the device's attributes come before the
/// port's and any capability block), hexadecimal values read as numbers.
pub(super) fn devinfo(dev: &str) -> BTreeMap<String, u64> {
    let out = std::process::Command::new("ibv_devinfo").args(["-v", "-d", dev]).output().expect("ibv_devinfo runs");
    assert!(out.status.success(), "ibv_devinfo -v -d {dev}: {}", String::from_utf8_lossy(&out.stderr));
    let mut map = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some((key, value)) = line.trim().split_once(':') else { continue };
        let value = value.trim();
        let n = match value.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).ok(),
            None => value.parse().ok(),
        };
        if let Some(n) = n {
            map.entry(key.trim().to_string()).or_insert(n);
        }
    }
    map
}

#[test]
#[ignore = "needs soft-RoCE devices: scripts/test-rxe runs it in a VM (KVXFER_REQUIRE_RXE=1, --include-ignored)"]
fn the_limits_and_knobs_a_run_used_are_recorded_as_the_device_has_them() {
    let Some(r) = rxe() else { return };
    let t = TempDir::new("verbs-knobs");
    let args = ["--sizes", "1MiB", "--reps", "2", "--verify", "--tclass", "106", "--sl", "3", "--no-relaxed-ordering"];
    let (out, v) = send_to_serve_once(&r, &t, &args);
    check_case(&v["cases"][0], 1 << 20, 2, true);
    let connect = v["config"]["transport_detail"]["sender"]["connect_ms"].as_f64().expect("connect_ms");
    let line = format!("connection set up in {connect:.3} ms");
    assert!(out.stdout.contains(&line), "the console says the setup time once, above the rows: {}", out.stdout);
    let s = &v["config"]["transport_detail"]["sender"];
    assert_eq!((s["tclass"].as_u64(), s["sl"].as_u64()), (Some(106), Some(3)), "{s}");
    assert_eq!((s["relaxed_ordering"].as_bool(), s["odp"].as_bool()), (Some(false), Some(false)), "{s}");
    assert_eq!(v["config"]["verbs"]["relaxed_ordering"], false);
    assert_eq!(v["config"]["verbs"]["tclass"], 106);
    let info = devinfo(&r.b_dev);
    for key in ["max_msg_sz", "max_mr_size", "max_qp_wr", "max_sge", "max_qp_rd_atom", "max_qp_init_rd_atom"] {
        assert_eq!(s["port"][key].as_u64(), info.get(key).copied(), "{key}: recorded vs ibv_devinfo -v: {s}");
    }
    assert!(s["max_inline_data"].as_u64().is_some(), "{s}");
    assert_eq!((s["max_rd_atomic"].as_u64(), s["max_dest_rd_atomic"].as_u64()), (Some(1), Some(1)));
    // Setup costs: both registrations and the connection took time, and registration has a rate.
    let rcv = &v["config"]["transport_detail"]["receiver"];
    for (what, x) in
        [("sender reg_gbps", &s["reg_gbps"]), ("receiver reg_gbps", &rcv["reg_gbps"]), ("connect_ms", &s["connect_ms"])]
    {
        assert!(x.as_f64().is_some_and(|x| x > 0.0), "{what}: {s} {rcv}");
    }
}

#[test]
#[ignore = "needs soft-RoCE devices: scripts/test-rxe runs it in a VM (KVXFER_REQUIRE_RXE=1, --include-ignored)"]
fn relaxed_ordering_is_the_default_and_reg_per_rep_is_summarized_per_case() {
    let Some(r) = rxe() else { return };
    let t = TempDir::new("verbs-relaxed");
    let (out, v) = send_to_serve_once(&r, &t, &["--sizes", "2MiB", "--reps", "3", "--reg-per-rep", "--verify"]);
    let s = &v["config"]["transport_detail"]["sender"];
    assert_eq!(
        (s["relaxed_ordering"].as_bool(), s["tclass"].as_u64(), s["sl"].as_u64()),
        (Some(true), Some(0), Some(0))
    );
    assert!(v["config"]["verbs"].get("relaxed_ordering").is_none(), "the default is not written into the knobs");
    let c = &v["cases"][0];
    check_case(c, 2 << 20, 3, true);
    assert!(
        c["reg_ms_p50"].as_f64().is_some_and(|x| x > 0.0) && c["reg_gbps_p50"].as_f64().is_some_and(|x| x > 0.0),
        "{c}"
    );
    assert!(c["reps"][0]["reg_gbps"].as_f64().is_some(), "{c}");
    assert!(out.stdout.contains("registration inside each rep"), "{}", out.stdout);
}

#[test]
#[ignore = "needs soft-RoCE devices: scripts/test-rxe runs it in a VM (KVXFER_REQUIRE_RXE=1, --include-ignored)"]
fn odp_is_refused_on_rxe_naming_what_it_lacks() {
    let Some(r) = rxe() else { return };
    let (mut serve, addr) = serve_on_a(&r, &["--once"]);
    let out = run(&send_args(&r, &addr, &["--sizes", "1MiB", "--odp"]));
    out.expect_code(2);
    let e = out.one_error();
    assert!(e.contains("--odp") && e.contains("on-demand paging") && e.contains("drop --odp"), "{e}");
    let _ = serve.wait_timeout(Duration::from_secs(10));
}
