//! `kvxfer doctor`'s findings: what on this host (or the captured tree `KVXFER_SYSFS_ROOT` names) is likely to
//! cost bandwidth between a GPU and an RDMA NIC, ranked by that cost, each with its fix. Everything is read from
//! sysfs and procfs; what they do not say is not reported (a finding is never a guess).

use super::topology::{self, Placement, Relation};
use crate::env::sysroot::SysRoot;
use serde::Serialize;

/// How much a finding is likely to cost, highest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Cost {
    High,
    Medium,
    Low,
}

/// What was found: a closed set, so that tests and scripts can match on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    GpuNicOtherSocket,
    AcsRedirect,
    RelaxedOrderingOff,
    DegradedLink,
    NoGpudirectModule,
    #[serde(rename = "roce_mtu_below_4096")]
    RoceMtuBelow4096,
    RoceV1Only,
    NoCongestionSignals,
    IommuTranslated,
    CpuGovernor,
    NoHugePages,
}

#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub kind: FindingKind,
    pub cost: Cost,
    pub what: String,
    pub fix: String,
}

/// What to look at: one GPU and one NIC, or every one the host has.
#[derive(Debug, Clone, Default)]
pub struct Scope {
    pub gpu: Option<u32>,
    pub nic: Option<String>,
}

/// Every finding for `scope`, highest cost first.
pub fn examine(root: &SysRoot, scope: &Scope) -> Vec<Finding> {
    let (gpus, nics) = topology::devices(root);
    let gpus: Vec<&Placement> =
        gpus.iter().filter(|g| scope.gpu.is_none_or(|n| g.name == format!("gpu:{n}"))).collect();
    let chosen: Vec<&Placement> = nics.iter().filter(|n| scope.nic.as_ref().is_none_or(|d| &n.name == d)).collect();
    let mut out = Vec::new();
    placement_findings(&gpus, &chosen, &nics, &mut out);
    let examined: Vec<&Placement> = gpus.iter().chain(&chosen).copied().collect();
    link_findings(&examined, &mut out);
    for n in &chosen {
        if let Some(false) = n.path.last().and_then(|h| h.relaxed_ordering) {
            out.push(Finding {
                kind: FindingKind::RelaxedOrderingOff,
                cost: Cost::High,
                what: format!("{} ({}): relaxed ordering is off in its PCIe Device Control", n.name, n.bdf),
                fix: "enable it (mlx5: mlxconfig -d DEV set PCI_WR_ORDERING=1 and reboot; or setpci CAP_EXP+8.w, bit 4); GPUDirect writes can run at half speed without it".into(),
            });
        }
        roce_findings(root, &n.name, &mut out);
    }
    // Software devices (rxe, siw) have RoCE ports too, and nothing on the PCI bus to place.
    for name in topology::software_rdma(root).iter().filter(|n| scope.nic.as_ref().is_none_or(|d| d == *n)) {
        roce_findings(root, name, &mut out);
    }
    if !gpus.is_empty() && !chosen.is_empty() && !root.path("/sys/module/nvidia_peermem").exists() {
        out.push(Finding {
            kind: FindingKind::NoGpudirectModule,
            cost: Cost::Medium,
            what: "GPUs and RDMA NICs, but the nvidia_peermem module is not loaded".into(),
            fix: "modprobe nvidia_peermem, or use dma-buf (Linux 5.12+ with NVIDIA's open kernel module); without either, --mem gpu:N over verbs cannot register GPU memory".into(),
        });
    }
    host_findings(root, &gpus, &chosen, &mut out);
    out.sort_by_key(|f| (f.cost, f.kind));
    out
}

/// GPU and NIC on different sockets, and ACS redirection on the bridges between them.
fn placement_findings(gpus: &[&Placement], chosen: &[&Placement], all: &[Placement], out: &mut Vec<Finding>) {
    for g in gpus {
        let Some(best) = all.iter().min_by_key(|n| topology::relation(g, n)) else { continue };
        for n in chosen {
            let r = topology::relation(g, n);
            if r == Relation::Sys {
                let closer = if topology::relation(g, best) < Relation::Sys && best.name != n.name {
                    format!("; {} is closer ({})", best.name, topology::relation(g, best))
                } else {
                    String::new()
                };
                out.push(Finding {
                    kind: FindingKind::GpuNicOtherSocket,
                    cost: Cost::High,
                    what: format!(
                        "{} (NUMA {}) and {} (NUMA {}) are on different sockets (SYS){closer}",
                        g.name,
                        node(g.numa_node),
                        n.name,
                        node(n.numa_node)
                    ),
                    fix: format!(
                        "pair {} with a NIC on its own socket (-d){}",
                        g.name,
                        if closer.is_empty() { "; this host has none" } else { "" }
                    ),
                });
            }
            let redirecting: Vec<&str> = topology::bridges_between(g, n)
                .into_iter()
                .filter(|b| b.acs_redirect == Some(true))
                .map(|b| b.bdf.as_str())
                .collect();
            if !redirecting.is_empty() {
                out.push(Finding {
                    kind: FindingKind::AcsRedirect,
                    cost: Cost::High,
                    what: format!(
                        "ACS redirects peer-to-peer traffic between {} and {} up to the root complex (bridge {})",
                        g.name,
                        n.name,
                        redirecting.join(", ")
                    ),
                    fix: "disable ACS P2P redirect on those bridges (BIOS, or setpci -s BDF ECAP_ACS+6.w=0) where isolation is not needed".into(),
                });
            }
        }
    }
}

fn node(n: Option<i32>) -> String {
    n.map(|n| n.to_string()).unwrap_or_else(|| "?".into())
}

/// Each degraded link on the examined devices' paths, once (devices under one switch share the links above it),
/// naming both its ends and the devices behind it.
fn link_findings(examined: &[&Placement], out: &mut Vec<Finding>) {
    let mut seen: Vec<(topology::PciLink, Vec<&str>)> = Vec::new();
    for p in examined {
        for l in p.links().into_iter().filter(topology::PciLink::degraded) {
            let key = |l: &topology::PciLink| (l.upper.map(|h| h.bdf.clone()), l.lower.bdf.clone());
            match seen.iter_mut().find(|(s, _)| key(s) == key(&l)) {
                Some((_, names)) => names.push(&p.name),
                None => seen.push((l, vec![&p.name])),
            }
        }
    }
    for (l, names) in seen {
        let ends = match l.upper {
            Some(up) => format!("PCIe link {} → {}", up.bdf, l.lower.bdf),
            None => format!("PCIe link of {} (the port above it is not visible here)", l.lower.bdf),
        };
        out.push(Finding {
            kind: FindingKind::DegradedLink,
            cost: Cost::High,
            what: format!(
                "{} ({}): runs at {} where {} {}",
                ends,
                names.join(", "),
                l.current(),
                if l.upper.is_some() { "both ends can do" } else { "it can do" },
                l.capable()
            ),
            fix: "reseat the card or move it to a full-width slot; check the BIOS's link settings and the riser".into(),
        });
    }
}

fn roce_findings(root: &SysRoot, dev: &str, out: &mut Vec<Finding>) {
    for port in root.entries(format!("/sys/class/infiniband/{dev}/ports")) {
        let p = format!("/sys/class/infiniband/{dev}/ports/{port}");
        if root.read(format!("{p}/link_layer")).as_deref() != Some("Ethernet") {
            continue;
        }
        if let Some(net) = root.read(format!("{p}/gid_attrs/ndevs/0")) {
            let mtu: Option<u32> = root.read(format!("/sys/class/net/{net}/mtu")).and_then(|m| m.parse().ok());
            // RoCE's MTU is the largest IB MTU that fits the interface's: 4096 needs at least 4096 + headers.
            if let Some(mtu) = mtu.filter(|&m| m < 4200) {
                out.push(Finding {
                    kind: FindingKind::RoceMtuBelow4096,
                    cost: Cost::Medium,
                    what: format!("{dev} port {port}: {net}'s MTU is {mtu}, so RoCE runs below 4096-byte packets"),
                    fix: format!("ip link set {net} mtu 9000 (and the switch ports) for a 4096-byte RoCE MTU"),
                });
            }
        }
        if let Some(f) = congestion_finding(root, dev, &port) {
            out.push(f);
        }
        let types: Vec<String> = (0..16).filter_map(|i| root.read(format!("{p}/gid_attrs/types/{i}"))).collect();
        if !types.is_empty() && !types.iter().any(|t| t.contains("v2")) {
            out.push(Finding {
                kind: FindingKind::RoceV1Only,
                cost: Cost::Medium,
                what: format!("{dev} port {port}: only RoCE v1 GIDs (not routable, no ECN)"),
                fix: "give the interface an IP address so a RoCE v2 GID appears, and pick it with --gid-index".into(),
            });
        }
    }
}

/// The congestion counters mlx5 keeps per RoCE port (ECN marks seen, CNPs sent and acted on).
const CONGESTION_COUNTERS: [&str; 3] = ["np_ecn_marked_roce_packets", "np_cnp_sent", "rp_cnp_handled"];
/// Traffic since boot past which a fabric that never marked, paused or slowed anything is worth a word.
const CONGESTION_TRAFFIC: u64 = 1 << 30;

/// A RoCE port that moved real traffic with its congestion counters all at zero (and, on a live host, no PFC
/// pause frames in its driver's statistics): ECN/DCQCN or PFC may be off, or the fabric never congested — the
/// counters cannot tell which, so it costs little in the ranking. Silent where the driver has no such counters.
fn congestion_finding(root: &SysRoot, dev: &str, port: &str) -> Option<Finding> {
    let p = format!("/sys/class/infiniband/{dev}/ports/{port}");
    let marks: Vec<u64> =
        CONGESTION_COUNTERS.iter().filter_map(|c| root.read_u64(format!("{p}/hw_counters/{c}"))).collect();
    // port_xmit_data and port_rcv_data count 4-byte words (InfiniBand's PortCounters).
    let words: u64 = ["port_xmit_data", "port_rcv_data"]
        .iter()
        .filter_map(|c| root.read_u64(format!("{p}/counters/{c}")))
        .fold(0u64, |a, w| a.saturating_add(w));
    let moved = words.saturating_mul(4);
    if marks.is_empty() || marks.iter().any(|m| *m > 0) || moved < CONGESTION_TRAFFIC {
        return None;
    }
    let net = root.read(format!("{p}/gid_attrs/ndevs/0"));
    let pauses: Option<u64> = net
        .as_deref()
        .filter(|_| root.is_live())
        .and_then(super::ethtool::stats)
        .map(|s| s.iter().filter(|(k, _)| k.contains("pause") && !k.contains("duration")).map(|(_, v)| *v).sum());
    if pauses.is_some_and(|n| n > 0) {
        return None;
    }
    let net = net.unwrap_or_else(|| "NETDEV".into());
    Some(Finding {
        kind: FindingKind::NoCongestionSignals,
        cost: Cost::Low,
        what: format!(
            "{dev} port {port} moved {:.1} GiB with no ECN marks and no CNPs{}: congestion control may be off (or this fabric never congested)",
            moved as f64 / (1u64 << 30) as f64,
            if pauses.is_some() { " and no PFC pause frames" } else { "" }
        ),
        fix: format!(
            "enable ECN marking for the RoCE queue on the switches and DCQCN on the NICs (mlx5: echo 1 > /sys/class/net/{net}/ecn/roce_np/enable/3 and roce_rp/enable/3), and PFC on the RoCE priority; without them, loss under incast shows as out_of_sequence and local_ack_timeout_err"
        ),
    })
}

fn host_findings(root: &SysRoot, gpus: &[&Placement], nics: &[&Placement], out: &mut Vec<Finding>) {
    let translated = gpus.iter().chain(nics).find_map(|p| {
        let group = root.link_name(format!("/sys/bus/pci/devices/{}/iommu_group", p.bdf))?;
        let kind = root.read(format!("/sys/kernel/iommu_groups/{group}/type"))?;
        kind.starts_with("DMA").then(|| (p.name.clone(), kind))
    });
    if let Some((name, kind)) = translated {
        out.push(Finding {
            kind: FindingKind::IommuTranslated,
            cost: Cost::Medium,
            what: format!("the IOMMU translates {name}'s DMA (domain {kind}): registering large buffers maps every page"),
            fix: "boot with iommu=pt (passthrough) unless isolation is needed; expect slow MR registration above 4 GiB otherwise".into(),
        });
    }
    let governors: Vec<String> = root
        .entries("/sys/devices/system/cpu")
        .into_iter()
        .filter(|c| c.starts_with("cpu") && c[3..].chars().all(|d| d.is_ascii_digit()) && c.len() > 3)
        .filter_map(|c| root.read(format!("/sys/devices/system/cpu/{c}/cpufreq/scaling_governor")))
        .collect();
    if let Some(g) = governors.iter().find(|g| g.as_str() != "performance") {
        let n = governors.iter().filter(|x| x.as_str() != "performance").count();
        out.push(Finding {
            kind: FindingKind::CpuGovernor,
            cost: Cost::Low,
            what: format!("{n} of {} CPUs use the {g} frequency governor", governors.len()),
            fix: "cpupower frequency-set -g performance (polling senders and receivers lose time to clock ramp-up)"
                .into(),
        });
    }
    let meminfo = std::fs::read_to_string(root.path("/proc/meminfo")).unwrap_or_default();
    let huge =
        meminfo.lines().find_map(|l| l.strip_prefix("HugePages_Total:")).and_then(|v| v.trim().parse::<u64>().ok());
    if huge == Some(0) {
        out.push(Finding {
            kind: FindingKind::NoHugePages,
            cost: Cost::Low,
            what: "no huge pages reserved".into(),
            fix: "echo 2048 > /proc/sys/vm/nr_hugepages (4 GiB of 2 MiB pages) for --hugepages host buffers; MR registration of large host buffers is faster with them".into(),
        });
    }
}
