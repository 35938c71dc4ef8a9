//! `kvxfer doctor` and `devices --topo` on sysfs trees: two captured from real machines
//! (`scripts/capture-sysfs`: the 2×H200 host through the device machine, and this VM), and small trees written
//! here from the PCI Express config-space layout for what cannot be captured (a GPU and a NIC on different
//! sockets, ACS redirection on the switch between them, relaxed ordering off, a link at x8 of x16, RoCE at MTU
//! 1500). Doctor must find exactly what each tree holds, and nothing on a clean one.

mod common;
use common::*;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs").join(name)
}

/// `kvxfer doctor --json ARGS` against the tree at `root`: its exit code and the kinds it found, in order.
fn doctor(root: &Path, args: &[&str]) -> (Option<i32>, Vec<String>) {
    let out =
        Proc::start(kvxfer().env("KVXFER_SYSFS_ROOT", root).args(["doctor", "--json"]).args(args), "doctor".into())
            .finish();
    out.no_panic();
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.stdout));
    let kinds = v["findings"].as_array().unwrap().iter().map(|f| f["kind"].as_str().unwrap().to_string()).collect();
    (out.code, kinds)
}

/// A sysfs tree written file by file.
struct Tree(TempDir);

/// A PCIe function's config space: the PCI Express capability at 0x40 with Device Control `devctl`, and ACS at
/// 0x100 with ACS Control `acs` when given (PCI Express Base Specification 7.5.3, 7.7.8). Its Link Capabilities
/// and Link Status are written with the sysfs files they back ([`set_link`]).
fn config(devctl: u16, acs: Option<u16>) -> Vec<u8> {
    let mut c = vec![0u8; 4096];
    c[0x06] = 0x10; // Status: capability list
    c[0x34] = 0x40;
    c[0x40] = 0x10; // PCI Express
    c[0x42] = 0x02; // capability version 2; the port type goes in bits 7:4
    c[0x48..0x4a].copy_from_slice(&devctl.to_le_bytes());
    if let Some(ctl) = acs {
        c[0x100..0x104].copy_from_slice(&(0x000d_u32 | (1 << 16)).to_le_bytes());
        c[0x106..0x108].copy_from_slice(&ctl.to_le_bytes());
    }
    c
}

/// Relaxed ordering on, MaxPayload 256, MaxReadReq 512.
const RO_ON: u16 = 0x10 | (1 << 5) | (2 << 12);
const GEN5: &str = "32.0 GT/s PCIe";
const GEN4: &str = "16.0 GT/s PCIe";

/// PCI Express Capabilities' Device/Port Type (bits 7:4): what each end of a link is.
#[derive(Clone, Copy)]
enum Port {
    Endpoint = 0,
    Root = 4,
    Upstream = 5,
    Downstream = 6,
}

/// Link Capabilities' Max Link Speed and Link Status' Current Link Speed encoding (2.5 GT/s = 1 ... 32 GT/s = 5).
fn speed_code(speed: &str) -> u16 {
    match speed.split_whitespace().next() {
        Some("2.5") => 1,
        Some("5.0") => 2,
        Some("8.0") => 3,
        Some("16.0") => 4,
        _ => 5,
    }
}

/// Link Capabilities (at 0x4c: max speed and width) or Link Status (at 0x52: current ones) of a config space.
fn set_link(c: &mut [u8], at: usize, speed: &str, width: u32) {
    let v = speed_code(speed) | ((width as u16) << 4);
    c[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

impl Tree {
    fn new(name: &str) -> Tree {
        let t = Tree(TempDir::new(name));
        t.file("/proc/meminfo", b"MemTotal: 1000 kB\nHugePages_Total:    2048\n");
        t.file("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", b"performance\n");
        std::fs::create_dir_all(t.path("/sys/module/nvidia_peermem")).unwrap();
        t
    }

    fn path(&self, p: &str) -> PathBuf {
        self.0.path().join(p.trim_start_matches('/'))
    }

    fn file(&self, p: &str, data: &[u8]) {
        let p = self.path(p);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, data).unwrap();
    }

    fn link(&self, p: &str, target: &str) {
        let p = self.path(p);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, p).unwrap();
    }

    /// A PCI function at `chain` (root complex first, then every bridge, the function last), of `kind` (class,
    /// vendor, port type), able to do `max` (speed, width) and trained at it.
    fn pci(&self, chain: &[&str], kind: (&str, &str, Port), numa: i32, max: (&str, u32), cfg: Vec<u8>) {
        let (class, vendor, port) = kind;
        let dir = format!("/sys/devices/{}", chain.join("/"));
        for (f, v) in [
            ("class", class.to_string()),
            ("vendor", vendor.to_string()),
            ("numa_node", numa.to_string()),
            ("max_link_speed", max.0.into()),
            ("max_link_width", max.1.to_string()),
        ] {
            self.file(&format!("{dir}/{f}"), format!("{v}\n").as_bytes());
        }
        let mut cfg = cfg;
        cfg[0x42] |= (port as u8) << 4;
        set_link(&mut cfg, 0x4c, max.0, max.1);
        self.file(&format!("{dir}/config"), &cfg);
        self.trained(chain, max.0, max.1);
        let bdf = chain.last().unwrap();
        self.link(&format!("/sys/bus/pci/devices/{bdf}"), &format!("../../../devices/{}", chain.join("/")));
    }

    /// The function at `chain` reports its link trained at `speed` x`width` (sysfs and Link Status).
    fn trained(&self, chain: &[&str], speed: &str, width: u32) {
        let dir = format!("/sys/devices/{}", chain.join("/"));
        self.file(&format!("{dir}/current_link_speed"), format!("{speed}\n").as_bytes());
        self.file(&format!("{dir}/current_link_width"), format!("{width}\n").as_bytes());
        let mut cfg = std::fs::read(self.path(&format!("{dir}/config"))).unwrap();
        set_link(&mut cfg, 0x52, speed, width);
        self.file(&format!("{dir}/config"), &cfg);
    }

    /// The link between the port at `upper` and the function at `lower` trained at `speed` x`width`: as on real
    /// hardware, both ends report it.
    fn train(&self, upper: &[&str], lower: &[&str], speed: &str, width: u32) {
        self.trained(upper, speed, width);
        self.trained(lower, speed, width);
    }

    /// A RoCE NIC `name` at PCI `chain`, its netdev at `mtu`.
    fn nic(&self, name: &str, chain: &[&str], numa: i32, devctl: u16, mtu: u32) {
        self.pci(chain, ("0x020000", "0x15b3", Port::Endpoint), numa, (GEN5, 16), config(devctl, None));
        self.link(&format!("/sys/class/infiniband/{name}/device"), &format!("../../../devices/{}", chain.join("/")));
        let port = format!("/sys/class/infiniband/{name}/ports/1");
        self.file(&format!("{port}/link_layer"), b"Ethernet\n");
        self.file(&format!("{port}/state"), b"4: ACTIVE\n");
        self.file(&format!("{port}/gid_attrs/ndevs/0"), format!("{name}-eth\n").as_bytes());
        self.file(&format!("{port}/gid_attrs/types/0"), b"IB/RoCE v1\n");
        self.file(&format!("{port}/gid_attrs/types/1"), b"RoCE v2\n");
        self.file(&format!("/sys/class/net/{name}-eth/mtu"), format!("{mtu}\n").as_bytes());
    }

    /// A GPU able to do `max`.
    fn gpu(&self, chain: &[&str], numa: i32, max: (&str, u32)) {
        self.pci(chain, ("0x030200", "0x10de", Port::Endpoint), numa, max, config(RO_ON, None));
    }

    /// A Gen5 x16 root port at `chain`.
    fn root_port(&self, chain: &[&str], numa: i32) {
        self.pci(chain, ("0x060400", "0x8086", Port::Root), numa, (GEN5, 16), config(RO_ON, None));
    }

    /// A switch: its upstream port under the root port (`chain`: root complex, root port, upstream port), and
    /// downstream ports `downs` (ACS control `acs` on each).
    fn switch(&self, chain: &[&str], downs: &[&str], acs: Option<u16>) {
        self.root_port(&chain[..2], 0);
        self.pci(chain, ("0x060400", "0x1000", Port::Upstream), 0, (GEN5, 16), config(RO_ON, None));
        for d in downs {
            let mut c = chain.to_vec();
            c.push(d);
            self.pci(&c, ("0x060400", "0x1000", Port::Downstream), 0, (GEN5, 16), config(RO_ON, acs));
        }
    }
}

const SWITCH: [&str; 3] = ["pci0000:00", "0000:00:01.0", "0000:01:00.0"];

/// A GPU and a NIC under one PCIe switch on socket 0, all Gen5 x16: the good case, with the GPU's link to the
/// switch trained at x`gpu_width` (on both ends).
fn one_switch(name: &str, acs: Option<u16>, nic_devctl: u16, gpu_width: u32, mtu: u32) -> Tree {
    let t = Tree::new(name);
    t.switch(&SWITCH, &["0000:02:00.0", "0000:02:01.0"], acs);
    let port = [&SWITCH[..], &["0000:02:00.0"]].concat();
    let gpu = [&port[..], &["0000:03:00.0"]].concat();
    t.gpu(&gpu, 0, (GEN5, 16));
    t.train(&port, &gpu, GEN5, gpu_width);
    t.nic("mlx5_0", &[&SWITCH[..], &["0000:02:01.0", "0000:04:00.0"]].concat(), 0, nic_devctl, mtu);
    t
}

#[test]
fn a_clean_host_has_nothing_to_report_and_devices_topo_names_the_switch() {
    let t = one_switch("doctor-clean", Some(0b0011), RO_ON, 16, 9000);
    let (code, kinds) = doctor(t.0.path(), &[]);
    assert_eq!((code, kinds), (Some(0), vec![]));
    let out = Proc::start(
        kvxfer().env("KVXFER_SYSFS_ROOT", t.0.path()).args(["devices", "--topo", "--json"]),
        "devices".into(),
    )
    .finish();
    out.expect_code(0);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["topology"]["relations"], serde_json::json!([["gpu:0", "mlx5_0", "PIX"]]), "{}", v["topology"]);
    let nic_path = &v["topology"]["rdma"][0]["path"];
    assert_eq!(nic_path.as_array().unwrap().len(), 4, "root port, switch up, switch down, the NIC: {nic_path}");
    assert_eq!(
        (nic_path[3]["relaxed_ordering"].as_bool(), nic_path[3]["max_payload"].as_u64()),
        (Some(true), Some(256))
    );
}

#[test]
fn each_problem_written_into_a_tree_is_found_and_only_it() {
    let cases: [(&str, Tree, &[&str]); 5] = [
        ("acs", one_switch("doctor-acs", Some(0b1100), RO_ON, 16, 9000), &["acs_redirect"]),
        ("relaxed ordering", one_switch("doctor-ro", None, 1 << 5, 16, 9000), &["relaxed_ordering_off"]),
        ("degraded", one_switch("doctor-x8", None, RO_ON, 8, 9000), &["degraded_link"]),
        ("mtu", one_switch("doctor-mtu", None, RO_ON, 16, 1500), &["roce_mtu_below_4096"]),
        ("no congestion signals", congestion("doctor-ecn-none", 0), &["no_congestion_signals"]),
    ];
    for (what, tree, expect) in cases {
        let (code, kinds) = doctor(tree.0.path(), &[]);
        // A low finding alone (no congestion signals) does not fail the default --fail-on medium.
        let fails = if what == "no congestion signals" { 0 } else { 1 };
        assert_eq!((code, kinds), (Some(fails), expect.iter().map(|k| k.to_string()).collect::<Vec<_>>()), "{what}");
    }
}

/// The clean host, whose NIC moved 8 GiB (in 4-byte words, as port counters count) with `cnps` CNPs sent and
/// no ECN marks or CNPs handled.
fn congestion(name: &str, cnps: u64) -> Tree {
    let t = one_switch(name, None, RO_ON, 16, 9000);
    let port = "/sys/class/infiniband/mlx5_0/ports/1";
    t.file(&format!("{port}/counters/port_xmit_data"), format!("{}\n", 1u64 << 30).as_bytes());
    t.file(&format!("{port}/counters/port_rcv_data"), format!("{}\n", 1u64 << 30).as_bytes());
    t.file(&format!("{port}/hw_counters/np_cnp_sent"), format!("{cnps}\n").as_bytes());
    t.file(&format!("{port}/hw_counters/rp_cnp_handled"), b"0\n");
    t.file(&format!("{port}/hw_counters/np_ecn_marked_roce_packets"), b"0\n");
    t
}

#[test]
fn a_fabric_that_signalled_congestion_is_not_reported() {
    let (code, kinds) = doctor(congestion("doctor-ecn-some", 12).0.path(), &[]);
    assert_eq!((code, kinds), (Some(0), Vec::<String>::new()));
}

#[test]
fn a_gpu_and_nic_on_different_sockets_are_found_and_the_closer_nic_named() {
    let t = Tree::new("doctor-numa");
    t.gpu(&["pci0000:00", "0000:00:02.0", "0000:05:00.0"], 0, (GEN5, 16));
    t.nic("mlx5_0", &["pci0000:80", "0000:80:02.0", "0000:81:00.0"], 1, RO_ON, 9000);
    t.nic("mlx5_1", &["pci0000:00", "0000:00:03.0", "0000:06:00.0"], 0, RO_ON, 9000);
    let (code, kinds) = doctor(t.0.path(), &["-d", "mlx5_0", "--gpu", "0"]);
    assert_eq!((code, kinds), (Some(1), vec!["gpu_nic_other_socket".to_string()]));
    let out =
        Proc::start(kvxfer().env("KVXFER_SYSFS_ROOT", t.0.path()).args(["doctor", "-d", "mlx5_0"]), "doctor".into())
            .finish();
    out.expect_code(1);
    assert!(out.stdout.contains("mlx5_1 is closer (PHB)"), "{}", out.stdout);
    // The NIC on the GPU's socket: nothing to say.
    assert_eq!(doctor(t.0.path(), &["-d", "mlx5_1"]), (Some(0), vec![]));
    // Names that are not here are usage errors.
    let out =
        Proc::start(kvxfer().env("KVXFER_SYSFS_ROOT", t.0.path()).args(["doctor", "-d", "mlx5_9"]), "doctor".into())
            .finish();
    out.expect_code(2);
    assert!(out.one_error().contains("mlx5_0, mlx5_1"), "{}", out.stderr);
}

#[test]
fn captured_hosts_read_as_they_were() {
    // The 2×H200 device machine: two GPUs at Gen5 x16 on one root complex, relaxed ordering on, no NIC, no huge
    // pages.
    let (code, kinds) = doctor(&fixture("h200"), &[]);
    assert_eq!((code, kinds), (Some(0), vec!["no_huge_pages".to_string()]));
    let out = Proc::start(
        kvxfer().env("KVXFER_SYSFS_ROOT", fixture("h200")).args(["devices", "--topo", "--json"]),
        "devices".into(),
    )
    .finish();
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let gpus = v["topology"]["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 2, "{}", v["topology"]);
    for g in gpus {
        let hop = &g["path"][0];
        assert_eq!(hop["link"]["speed"], "32.0 GT/s PCIe", "{g}");
        assert_eq!((hop["link"]["width"].as_u64(), hop["relaxed_ordering"].as_bool()), (Some(16), Some(true)), "{g}");
    }
    // This VM kind: no GPU, no NIC, no huge pages.
    assert_eq!(doctor(&fixture("vm"), &[]), (Some(0), vec!["no_huge_pages".to_string()]));
    // The soft-RoCE guest of scripts/rxe-vm: two rxe devices (not on the PCI bus) on veths of MTU 9000, RoCE v2
    // GIDs, no congestion counters; then the same guest booted with RXE_VM_MTU=1500, both ports found.
    let huge = "no_huge_pages".to_string();
    assert_eq!(doctor(&fixture("rxe-guest"), &["-d", "rxeA"]), (Some(0), vec![huge.clone()]));
    let mtu = "roce_mtu_below_4096".to_string();
    assert_eq!(doctor(&fixture("rxe-guest-mtu1500"), &[]), (Some(1), vec![mtu.clone(), mtu.clone(), huge.clone()]));
    assert_eq!(doctor(&fixture("rxe-guest-mtu1500"), &["-d", "rxeB"]), (Some(1), vec![mtu, huge]));
    let out = Proc::start(
        kvxfer().env("KVXFER_SYSFS_ROOT", fixture("rxe-guest")).args(["doctor", "-d", "rxeC"]),
        "doctor".into(),
    )
    .finish();
    assert!(out.expect_code(2).one_error().contains("rxeA, rxeB"), "{}", out.stderr);
}

#[test]
fn only_findings_at_or_above_fail_on_fail_the_preflight() {
    // This VM kind's capture: one low finding (no huge pages), printed whatever --fail-on says.
    let vm = fixture("vm");
    let huge = vec!["no_huge_pages".to_string()];
    assert_eq!(doctor(&vm, &[]), (Some(0), huge.clone()));
    assert_eq!(doctor(&vm, &["--fail-on", "low"]), (Some(1), huge.clone()));
    assert_eq!(doctor(&vm, &["--fail-on", "medium"]), (Some(0), huge.clone()));
    let out = Proc::start(kvxfer().env("KVXFER_SYSFS_ROOT", &vm).args(["doctor"]), "doctor".into()).finish();
    assert!(out.expect_code(0).stdout.contains("[Low] no huge pages reserved"), "{}", out.stdout);
    // A medium finding (RoCE MTU 1500 on both rxe ports) fails medium and low, not high.
    let mtu = fixture("rxe-guest-mtu1500");
    assert_eq!(doctor(&mtu, &[]).0, Some(1));
    assert_eq!(doctor(&mtu, &["--fail-on", "low"]).0, Some(1));
    assert_eq!(doctor(&mtu, &["--fail-on", "high"]).0, Some(0));
    let out =
        Proc::start(kvxfer().env("KVXFER_SYSFS_ROOT", &vm).args(["doctor", "--fail-on", "some"]), "doctor".into())
            .finish();
    assert!(out.expect_code(2).stderr.contains("low, medium, high"), "{}", out.stderr);
}

const SOCKET0_SWITCH: [&str; 3] = ["pci0000:00", "0000:00:01.0", "0000:01:00.0"];
const SOCKET1_PORT: [&str; 2] = ["pci0000:80", "0000:80:01.0"];

/// A two-socket host, every port Gen5 x16: socket 0 has gpu:0 and mlx5_0 under one switch (the NIC's link to
/// its switch port trained at x`nic_width`, on both ends); socket 1 has a Gen4 x16 GPU (an A100) on a root port
/// of its own, trained at Gen4 x16 as such a pair does, and mlx5_1 on another root port.
fn two_socket(name: &str, nic_width: u32) -> Tree {
    let t = Tree::new(name);
    t.switch(&SOCKET0_SWITCH, &["0000:02:00.0", "0000:02:01.0"], Some(0));
    t.gpu(&[&SOCKET0_SWITCH[..], &["0000:02:00.0", "0000:03:00.0"]].concat(), 0, (GEN5, 16));
    let nic_port = [&SOCKET0_SWITCH[..], &["0000:02:01.0"]].concat();
    let nic = [&nic_port[..], &["0000:04:00.0"]].concat();
    t.nic("mlx5_0", &nic, 0, RO_ON, 9000);
    t.train(&nic_port, &nic, GEN5, nic_width);
    t.root_port(&SOCKET1_PORT, 1);
    let a100 = [&SOCKET1_PORT[..], &["0000:81:00.0"]].concat();
    t.gpu(&a100, 1, (GEN4, 16));
    t.train(&SOCKET1_PORT, &a100, GEN4, 16);
    t.root_port(&["pci0000:80", "0000:80:02.0"], 1);
    t.nic("mlx5_1", &["pci0000:80", "0000:80:02.0", "0000:82:00.0"], 1, RO_ON, 9000);
    t
}

/// `kvxfer doctor --json ARGS` on `root`: each finding's kind and text.
fn findings(root: &Path, args: &[&str]) -> Vec<(String, String)> {
    let out =
        Proc::start(kvxfer().env("KVXFER_SYSFS_ROOT", root).args(["doctor", "--json"]).args(args), "doctor".into())
            .finish();
    let v: serde_json::Value = serde_json::from_str(&out.no_panic().stdout).unwrap();
    let f = v["findings"].as_array().unwrap();
    f.iter().map(|f| (f["kind"].as_str().unwrap().to_string(), f["what"].as_str().unwrap().to_string())).collect()
}

#[test]
fn a_gen4_device_under_a_gen5_port_is_not_degraded() {
    let t = two_socket("doctor-gen4", 16);
    // The A100 and the NIC of its socket: nothing to say.
    assert_eq!(doctor(t.0.path(), &["--gpu", "1", "-d", "mlx5_1"]), (Some(0), vec![]));
    let out = Proc::start(kvxfer().env("KVXFER_SYSFS_ROOT", t.0.path()).args(["devices", "--topo"]), "devices".into())
        .finish();
    assert!(!out.expect_code(0).stdout.contains("DEGRADED"), "{}", out.stdout);
    assert!(out.stdout.contains("16.0 GT/s PCIe x16 (max 32.0 GT/s PCIe x16)"), "the Gen5 root port: {}", out.stdout);
}

#[test]
fn a_link_trained_at_x8_of_x16_is_one_finding_naming_both_ends() {
    let t = two_socket("doctor-x8-of-x16", 8);
    let found = findings(t.0.path(), &["--gpu", "0", "-d", "mlx5_0"]);
    assert_eq!(found.len(), 1, "{found:#?}");
    let (kind, what) = &found[0];
    assert_eq!(kind, "degraded_link");
    assert!(what.contains("0000:02:01.0 → 0000:04:00.0") && what.contains("mlx5_0"), "{what}");
    assert!(what.contains("runs at 32.0 GT/s PCIe x8 where both ends can do 32.0 GT/s PCIe x16"), "{what}");
    // Every device examined: still that one link once (besides the sockets' pairings), and no Gen4 finding.
    let all = findings(t.0.path(), &[]);
    assert_eq!(all.iter().filter(|(k, _)| k == "degraded_link").count(), 1, "{all:#?}");
    let out = Proc::start(kvxfer().env("KVXFER_SYSFS_ROOT", t.0.path()).args(["devices", "--topo"]), "devices".into())
        .finish();
    // Both ends of that link are marked, nothing else.
    let marked: Vec<&str> = out.expect_code(0).stdout.lines().filter(|l| l.contains("DEGRADED")).collect();
    assert_eq!(marked.len(), 2, "{}", out.stdout);
    assert!(marked[0].contains("0000:02:01.0") && marked[1].contains("0000:04:00.0"), "{marked:?}");
}

#[test]
fn a_degraded_link_above_a_switch_is_reported_once_for_every_device_below() {
    let t = one_switch("doctor-uplink", None, RO_ON, 16, 9000);
    // The root port's link to the switch trained at Gen4: both the GPU and the NIC sit behind it.
    t.train(&SWITCH[..2], &SWITCH, GEN4, 16);
    let found = findings(t.0.path(), &[]);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].1.contains("0000:00:01.0 → 0000:01:00.0 (gpu:0, mlx5_0)"), "{}", found[0].1);
}
