//! What sysfs and procfs say about the hardware a run used: NUMA nodes, the IOMMU, RDMA NICs and GPUs. Every
//! reader returns what it finds and nothing when a file is missing (containers, other kernels): a fingerprint is
//! never a reason to fail a run.

use super::sysroot::SysRoot;
use serde::{Deserialize, Serialize};
use std::path::Path;

fn read(p: impl AsRef<Path>) -> Option<String> {
    SysRoot::get().read(p)
}

fn entries(dir: impl AsRef<Path>) -> Vec<String> {
    SysRoot::get().entries(dir)
}

fn numa_of(device_dir: &Path) -> Option<i32> {
    read(device_dir.join("numa_node")).and_then(|s| s.parse().ok())
}

/// The NUMA node of a PCI device by its bus id (`0000:1b:00.0`, any case); None when unknown (-1 on one-node hosts).
pub fn numa_of_pci(bus_id: &str) -> Option<u32> {
    let n = numa_of(&Path::new("/sys/bus/pci/devices").join(bus_id.to_ascii_lowercase()))?;
    u32::try_from(n).ok()
}

/// The NUMA node of an RDMA device (`mlx5_0`, `rxe0`): its PCI function's, None for software devices.
pub fn numa_of_rdma_device(name: &str) -> Option<u32> {
    let n = numa_of(&Path::new("/sys/class/infiniband").join(name).join("device"))?;
    u32::try_from(n).ok()
}

/// The NUMA node of the CPU this thread runs on now (the node a host buffer it first touches lands on).
pub fn numa_of_this_cpu() -> Option<u32> {
    // Field 39 of /proc/thread-self/stat, counted after the command name (which may hold spaces).
    let stat = read("/proc/thread-self/stat")?;
    let cpu: u32 = stat.rsplit_once(')')?.1.split_whitespace().nth(36)?.parse().ok()?;
    numa_nodes().into_iter().find(|n| cpu_list_contains(&n.cpus, cpu)).map(|n| n.node)
}

/// Whether a sysfs CPU list (`0-3,8,10-11`) names `cpu`.
fn cpu_list_contains(list: &str, cpu: u32) -> bool {
    list.split(',')
        .filter_map(|r| {
            let (a, b) = r.trim().split_once('-').unwrap_or((r.trim(), r.trim()));
            Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?))
        })
        .any(|(a, b)| (a..=b).contains(&cpu))
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct NumaNode {
    pub node: u32,
    pub cpus: String,
}

pub fn numa_nodes() -> Vec<NumaNode> {
    entries("/sys/devices/system/node")
        .into_iter()
        .filter_map(|n| {
            let node = n.strip_prefix("node")?.parse().ok()?;
            Some(NumaNode { node, cpus: read(format!("/sys/devices/system/node/{n}/cpulist")).unwrap_or_default() })
        })
        .collect()
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Iommu {
    /// `off` (no IOMMU groups), `passthrough` (identity domains: DMA skips translation), `translated` (DMA
    /// domains: every DMA address is translated, which can cost RDMA and peer-to-peer bandwidth), or `unknown`.
    pub mode: String,
    /// The default domain type of the IOMMU groups (identity, DMA, DMA-FQ), when the kernel exposes it.
    pub domain_type: Option<String>,
    /// /sys/class/iommu entries (the IOMMU units).
    pub units: Vec<String>,
    /// IOMMU-related words of the kernel command line (intel_iommu=, amd_iommu=, iommu=, iommu.passthrough=).
    pub cmdline: Vec<String>,
}

pub fn iommu() -> Iommu {
    let cmdline: Vec<String> = read("/proc/cmdline")
        .unwrap_or_default()
        .split_whitespace()
        .filter(|w| w.contains("iommu"))
        .map(String::from)
        .collect();
    let groups = entries("/sys/kernel/iommu_groups");
    let domain_type = groups.first().and_then(|g| read(format!("/sys/kernel/iommu_groups/{g}/type")));
    let mode = iommu_mode(groups.len(), domain_type.as_deref(), &cmdline);
    Iommu { mode: mode.into(), domain_type, units: entries("/sys/class/iommu"), cmdline }
}

fn iommu_mode(groups: usize, domain_type: Option<&str>, cmdline: &[String]) -> &'static str {
    let says = |w: &str| cmdline.iter().any(|c| c == w);
    if groups == 0 || says("intel_iommu=off") || says("amd_iommu=off") || says("iommu=off") {
        return "off";
    }
    match domain_type {
        Some("identity") => "passthrough",
        Some(t) if t.starts_with("DMA") => "translated",
        _ if says("iommu=pt") || says("iommu.passthrough=1") => "passthrough",
        _ => "unknown",
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct NicPort {
    pub port: u32,
    pub state: Option<String>,
    /// "100 Gb/sec (4X EDR)".
    pub rate: Option<String>,
    pub link_layer: Option<String>,
    /// The Ethernet device behind a RoCE port, and its MTU.
    pub netdev: Option<String>,
    pub mtu: Option<u32>,
    /// The GID types the port offers (IB/RoCE v1, RoCE v2).
    pub gid_types: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Nic {
    pub name: String,
    pub board_id: Option<String>,
    pub fw_ver: Option<String>,
    pub hca_type: Option<String>,
    pub pci: Option<String>,
    pub numa_node: Option<i32>,
    pub ports: Vec<NicPort>,
}

pub fn nics() -> Vec<Nic> {
    let root = Path::new("/sys/class/infiniband");
    entries(root)
        .into_iter()
        .map(|name| {
            let d = root.join(&name);
            let dev = d.join("device");
            let pci = SysRoot::get().link_name(&dev);
            let ports = entries(d.join("ports"))
                .into_iter()
                .filter_map(|p| {
                    let pd = d.join("ports").join(&p);
                    let netdev = read(pd.join("gid_attrs/ndevs/0"));
                    let mut gid_types: Vec<String> =
                        (0..16).filter_map(|i| read(pd.join(format!("gid_attrs/types/{i}")))).collect();
                    gid_types.sort();
                    gid_types.dedup();
                    Some(NicPort {
                        port: p.parse().ok()?,
                        state: read(pd.join("state")),
                        rate: read(pd.join("rate")),
                        link_layer: read(pd.join("link_layer")),
                        mtu: netdev.as_ref().and_then(|n| read(format!("/sys/class/net/{n}/mtu"))?.parse().ok()),
                        netdev,
                        gid_types,
                    })
                })
                .collect();
            Nic {
                board_id: read(d.join("board_id")),
                fw_ver: read(d.join("fw_ver")),
                hca_type: read(d.join("hca_type")),
                numa_node: numa_of(&dev),
                pci,
                ports,
                name,
            }
        })
        .collect()
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct GpuDevice {
    pub pci: String,
    pub numa_node: Option<i32>,
}

/// NVIDIA display and 3D controllers on the PCI bus, with their NUMA nodes (no driver call needed).
pub fn gpus() -> Vec<GpuDevice> {
    let root = Path::new("/sys/bus/pci/devices");
    entries(root)
        .into_iter()
        .filter(|d| {
            let p = root.join(d);
            read(p.join("vendor")).as_deref() == Some("0x10de")
                && read(p.join("class")).is_some_and(|c| c.starts_with("0x0300") || c.starts_with("0x0302"))
        })
        .map(|d| GpuDevice { numa_node: numa_of(&root.join(&d)), pci: d })
        .collect()
}

/// The NVIDIA kernel driver's version ("550.54.15"), from /proc/driver/nvidia/version.
pub fn gpu_driver() -> Option<String> {
    let text = read("/proc/driver/nvidia/version")?;
    let line = text.lines().next()?;
    line.split_whitespace()
        .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()) && w.contains('.'))
        .map(String::from)
}

/// The CUDA version the driver supports ("13.0"), when libcuda is there.
pub fn cuda_driver_version() -> Option<String> {
    if gpus().is_empty() && read("/proc/driver/nvidia/version").is_none() {
        return None; // no NVIDIA hardware: skip loading libcuda at all
    }
    crate::mem::cuda::driver().ok().map(|v| format!("{}.{}", v / 1000, (v % 1000) / 10))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iommu_modes() {
        let cl = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(iommu_mode(0, None, &[]), "off");
        assert_eq!(iommu_mode(40, Some("identity"), &[]), "passthrough");
        assert_eq!(iommu_mode(40, Some("DMA-FQ"), &[]), "translated");
        assert_eq!(iommu_mode(40, None, &cl(&["iommu=pt"])), "passthrough");
        assert_eq!(iommu_mode(40, Some("DMA"), &cl(&["intel_iommu=off"])), "off");
        assert_eq!(iommu_mode(40, None, &[]), "unknown");
    }
}
