//! Where the GPUs and RDMA NICs sit on the PCIe tree, read from sysfs through [`SysRoot`]: each device's path of
//! bridges up to its root port with their current and maximum link speed and width, NUMA node, and what its
//! config space says — relaxed ordering enabled, MaxPayload / MaxReadReq, and ACS redirection on the bridges. Two
//! devices' relationship is named as nvidia-smi names it (PIX, PXB, PHB, NODE, SYS). Reading config space past
//! the first 64 bytes needs root; without it those fields are unknown, never guessed.

use crate::env::sysroot::SysRoot;
use serde::Serialize;
use std::path::Path;

/// One PCI function on a device's path (the device itself last).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PciHop {
    /// Bus address, `0000:17:00.0`.
    pub bdf: String,
    /// PCI class, `0x060400` (a bridge), `0x030200` (a 3D controller)...
    pub class: Option<String>,
    pub link: Link,
    /// Device Control's Enable Relaxed Ordering (None: config space unreadable or no PCIe capability).
    pub relaxed_ordering: Option<bool>,
    pub max_payload: Option<u32>,
    pub max_read_request: Option<u32>,
    /// ACS P2P Request or Completion Redirect enabled: peer-to-peer traffic below this bridge goes up to the root.
    pub acs_redirect: Option<bool>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Link {
    /// As sysfs spells them: `32.0 GT/s PCIe`, `16`.
    pub speed: Option<String>,
    pub max_speed: Option<String>,
    pub width: Option<u32>,
    pub max_width: Option<u32>,
}

/// `16.0 GT/s PCIe` → 16.0.
fn link_gts(s: Option<&str>) -> Option<f64> {
    s?.split_whitespace().next()?.parse().ok()
}

/// One physical PCIe link: the port above it (a root port or a switch's downstream port) and the function below it
/// (an endpoint or a switch's upstream port). Both ends' Link Status registers describe this one link, so both
/// report the same current speed and width; what it can reach is the lower of the two ends' maximums.
#[derive(Debug, Clone, Copy)]
pub struct PciLink<'a> {
    /// None where the port above is not on the path sysfs shows (a device on the root bus: a VM's, or one
    /// integrated in the root complex); then only the device's own maximum is known.
    pub upper: Option<&'a PciHop>,
    pub lower: &'a PciHop,
}

/// A speed and a width as sysfs spells them; unknown parts are None.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkRate {
    pub speed: Option<String>,
    pub width: Option<u32>,
}

impl std::fmt::Display for LinkRate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let width = self.width.map(|w| w.to_string()).unwrap_or_else(|| "?".into());
        write!(f, "{} x{width}", self.speed.as_deref().unwrap_or("?"))
    }
}

impl PciLink<'_> {
    fn ends(&self) -> impl Iterator<Item = &Link> {
        self.upper.into_iter().chain([self.lower]).map(|h| &h.link)
    }

    /// The lowest of the values the ends report (both ends agree on real hardware; the lower is the safe reading
    /// where they do not).
    fn lowest(&self, width: fn(&Link) -> Option<u32>, speed: fn(&Link) -> Option<&str>) -> LinkRate {
        let width = self.ends().filter_map(width).filter(|&w| w > 0).min();
        let speed = self
            .ends()
            .filter_map(speed)
            .filter_map(|s| Some((link_gts(Some(s))?, s)))
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, s)| s.to_string());
        LinkRate { speed, width }
    }

    /// What the link trained at.
    pub fn current(&self) -> LinkRate {
        self.lowest(|l| l.width, |l| l.speed.as_deref())
    }

    /// The most both ends can do: the lower of their maximum widths, and of their maximum speeds.
    pub fn capable(&self) -> LinkRate {
        self.lowest(|l| l.max_width, |l| l.max_speed.as_deref())
    }

    /// Trained below what both ends can do: fewer lanes, or a slower generation (a Gen4 device under a Gen5 port
    /// running Gen4 is not).
    pub fn degraded(&self) -> bool {
        let (now, can) = (self.current(), self.capable());
        let narrower = matches!((now.width, can.width), (Some(w), Some(m)) if w < m);
        let slower =
            matches!((link_gts(now.speed.as_deref()), link_gts(can.speed.as_deref())), (Some(s), Some(m)) if s < m);
        narrower || slower
    }
}

impl Placement {
    /// The physical links on the path, from the device up. A root or downstream port's link registers describe the
    /// link below it and an endpoint's or upstream port's the link above it, and the path alternates the two from
    /// the device up (device and the port above it; that switch's upstream port and the port above that; ...), so
    /// hops pair from the bottom. A top hop left over has no visible partner.
    pub fn links(&self) -> Vec<PciLink<'_>> {
        let mut out = Vec::new();
        let mut i = self.path.len();
        while i > 0 {
            let lower = &self.path[i - 1];
            let upper = (i >= 2).then(|| &self.path[i - 2]);
            out.push(PciLink { upper, lower });
            i = i.saturating_sub(2);
        }
        out
    }

    /// The bus addresses of the hops on a degraded link (both ends of each).
    pub fn degraded_hops(&self) -> Vec<&str> {
        self.links()
            .iter()
            .filter(|l| l.degraded())
            .flat_map(|l| l.upper.into_iter().chain([l.lower]).map(|h| h.bdf.as_str()))
            .collect()
    }
}

/// A device and the path to it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Placement {
    /// What kvxfer calls it: `gpu:0` (by PCI order), `mlx5_0`.
    pub name: String,
    pub bdf: String,
    pub numa_node: Option<i32>,
    /// The root complex (`pci0000:16`).
    pub root: String,
    /// From the root port down to the device itself.
    pub path: Vec<PciHop>,
}

/// How two devices reach each other, as `nvidia-smi topo -m` names it; ordered nearest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Relation {
    /// Through one PCIe switch port at most.
    #[serde(rename = "PIX")]
    Pix,
    /// Through several PCIe bridges, not the host bridge.
    #[serde(rename = "PXB")]
    Pxb,
    /// Through the host bridge (the CPU's root complex).
    #[serde(rename = "PHB")]
    Phb,
    /// Between root complexes of one NUMA node.
    #[serde(rename = "NODE")]
    Node,
    /// Across sockets (the inter-socket link).
    #[serde(rename = "SYS")]
    Sys,
}

impl std::fmt::Display for Relation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Relation::Pix => "PIX",
            Relation::Pxb => "PXB",
            Relation::Phb => "PHB",
            Relation::Node => "NODE",
            Relation::Sys => "SYS",
        })
    }
}

/// Whether a path component is a PCI bus address (`0000:17:00.0`).
fn is_bdf(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12 && b[4] == b':' && b[7] == b':' && b[10] == b'.'
}

/// Where PCI function `bdf` sits: its sysfs device directory resolved, the bridges on the way.
pub fn placement(root: &SysRoot, name: &str, bdf: &str) -> Option<Placement> {
    let dir = std::fs::canonicalize(root.path(format!("/sys/bus/pci/devices/{bdf}"))).ok()?;
    let sys_path = root.strip(&dir);
    let parts: Vec<String> = sys_path.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let root_complex = parts.iter().find(|p| p.starts_with("pci")).cloned().unwrap_or_default();
    let mut path = Vec::new();
    let mut at = std::path::PathBuf::from("/");
    for p in &parts {
        at.push(p);
        if is_bdf(p) {
            path.push(hop(root, &at, p));
        }
    }
    let numa_node = root.read(at.join("numa_node")).and_then(|s| s.parse().ok());
    Some(Placement { name: name.into(), bdf: bdf.into(), numa_node, root: root_complex, path })
}

fn hop(root: &SysRoot, dir: &Path, bdf: &str) -> PciHop {
    let num = |f: &str| root.read(dir.join(f)).and_then(|s| s.parse().ok());
    let link = Link {
        speed: root.read(dir.join("current_link_speed")),
        max_speed: root.read(dir.join("max_link_speed")),
        width: num("current_link_width"),
        max_width: num("max_link_width"),
    };
    let config = std::fs::read(root.path(dir.join("config"))).unwrap_or_default();
    let pcie = ConfigSpace(&config).pcie();
    PciHop {
        bdf: bdf.into(),
        class: root.read(dir.join("class")),
        link,
        relaxed_ordering: pcie.map(|p| p.relaxed_ordering),
        max_payload: pcie.map(|p| p.max_payload),
        max_read_request: pcie.map(|p| p.max_read_request),
        acs_redirect: ConfigSpace(&config).acs_redirect(),
    }
}

/// What the PCI Express capability's Device Control register says.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeviceControl {
    pub relaxed_ordering: bool,
    pub max_payload: u32,
    pub max_read_request: u32,
}

/// A function's configuration space as sysfs gives it (64 bytes to non-root readers, 256 or 4096 to root).
pub struct ConfigSpace<'a>(pub &'a [u8]);

/// The PCI Express capability's ID in the capability list, and ACS's in the extended list (PCI Express Base
/// Specification, 7.5.3 and 7.7.8).
const CAP_PCIE: u8 = 0x10;
const ECAP_ACS: u16 = 0x000d;

impl ConfigSpace<'_> {
    fn u8(&self, at: usize) -> Option<u8> {
        self.0.get(at).copied()
    }

    fn u16(&self, at: usize) -> Option<u16> {
        Some(u16::from_le_bytes([self.u8(at)?, self.u8(at + 1)?]))
    }

    fn u32(&self, at: usize) -> Option<u32> {
        Some(u32::from_le_bytes([self.u8(at)?, self.u8(at + 1)?, self.u8(at + 2)?, self.u8(at + 3)?]))
    }

    /// The offset of capability `id` in the (legacy) capability list.
    fn capability(&self, id: u8) -> Option<usize> {
        // Status bit 4: the function has a capability list.
        if self.u16(0x06)? & 0x10 == 0 {
            return None;
        }
        let mut at = (self.u8(0x34)? & 0xfc) as usize;
        for _ in 0..48 {
            if at < 0x40 {
                return None;
            }
            if self.u8(at)? == id {
                return Some(at);
            }
            at = (self.u8(at + 1)? & 0xfc) as usize;
        }
        None
    }

    /// The offset of extended capability `id` (from 0x100; needs the 4096-byte space).
    fn extended_capability(&self, id: u16) -> Option<usize> {
        let mut at = 0x100usize;
        for _ in 0..512 {
            let header = self.u32(at)?;
            if header == 0 || header == 0xffff_ffff {
                return None;
            }
            if (header & 0xffff) as u16 == id {
                return Some(at);
            }
            at = (header >> 20) as usize & 0xffc;
            if at < 0x100 {
                return None;
            }
        }
        None
    }

    /// Device Control of the PCI Express capability.
    pub fn pcie(&self) -> Option<DeviceControl> {
        let cap = self.capability(CAP_PCIE)?;
        let ctl = self.u16(cap + 0x08)?;
        Some(DeviceControl {
            relaxed_ordering: ctl & (1 << 4) != 0,
            max_payload: 128 << ((ctl >> 5) & 0x7),
            max_read_request: 128 << ((ctl >> 12) & 0x7),
        })
    }

    /// Whether ACS Control enables P2P Request Redirect or P2P Completion Redirect; None without the capability.
    pub fn acs_redirect(&self) -> Option<bool> {
        let cap = self.extended_capability(ECAP_ACS)?;
        let ctl = self.u16(cap + 0x06)?;
        Some(ctl & 0b1100 != 0)
    }
}

/// How `a` and `b` reach each other.
pub fn relation(a: &Placement, b: &Placement) -> Relation {
    if a.root != b.root {
        return match (a.numa_node, b.numa_node) {
            (Some(x), Some(y)) if x >= 0 && y >= 0 && x != y => Relation::Sys,
            _ => Relation::Node,
        };
    }
    // Bridges shared below the root port: the longest common prefix of the two paths.
    let common = a.path.iter().zip(&b.path).take_while(|(x, y)| x.bdf == y.bdf).count();
    if common == 0 {
        return Relation::Phb;
    }
    // Hops from the common bridge down to each device (the devices themselves excluded).
    let below = (a.path.len() - common - 1).max(b.path.len() - common - 1);
    if below <= 1 {
        Relation::Pix
    } else {
        Relation::Pxb
    }
}

/// The bridges between two devices on one root complex (where ACS redirection would send their traffic up).
pub fn bridges_between<'a>(a: &'a Placement, b: &'a Placement) -> Vec<&'a PciHop> {
    if a.root != b.root {
        return Vec::new();
    }
    let common = a.path.iter().zip(&b.path).take_while(|(x, y)| x.bdf == y.bdf).count();
    let mut v: Vec<&PciHop> = Vec::new();
    if common > 0 {
        v.push(&a.path[common - 1]);
    }
    for p in [a, b] {
        v.extend(p.path.iter().skip(common).take(p.path.len().saturating_sub(common + 1)));
    }
    v
}

/// The GPUs (NVIDIA display and 3D controllers, in PCI order as `gpu:N`) and RDMA devices of the host, placed.
pub fn devices(root: &SysRoot) -> (Vec<Placement>, Vec<Placement>) {
    let gpus = root
        .entries("/sys/bus/pci/devices")
        .into_iter()
        .filter(|d| {
            let p = format!("/sys/bus/pci/devices/{d}");
            root.read(format!("{p}/vendor")).as_deref() == Some("0x10de")
                && root.read(format!("{p}/class")).is_some_and(|c| c.starts_with("0x0300") || c.starts_with("0x0302"))
        })
        .enumerate()
        .filter_map(|(i, bdf)| placement(root, &format!("gpu:{i}"), &bdf))
        .collect();
    let nics = root
        .entries("/sys/class/infiniband")
        .into_iter()
        .filter_map(|name| {
            let bdf = root.link_name(format!("/sys/class/infiniband/{name}/device"))?;
            is_bdf(&bdf).then(|| placement(root, &name, &bdf)).flatten()
        })
        .collect();
    (gpus, nics)
}

/// A GPU's NVLinks: how many are active and where they lead (another GPU by name, or the PCI bus id of what is
/// there: an NVSwitch). A link whose far end NVML could not name counts in `active` only.
#[derive(Debug, Clone, Serialize)]
pub struct NvLinks {
    pub gpu: String,
    pub active: usize,
    pub to: std::collections::BTreeMap<String, usize>,
}

/// Each GPU's NVLinks, through NVML (live hosts only; empty without NVML or the CUDA driver).
pub fn nvlinks(gpus: &[crate::mem::cuda::GpuInfo]) -> Vec<NvLinks> {
    // NVML names a bus id with an 8-digit domain (00000000:07:00.0), CUDA with 4 (0000:07:00.0).
    let key = |id: &str| {
        id.rsplit_once(':').map(|(a, b)| {
            let (domain, bus) = a.split_once(':').unwrap_or(("0", a));
            format!("{:x}:{}:{}", u32::from_str_radix(domain, 16).unwrap_or(0), bus, b).to_lowercase()
        })
    };
    gpus.iter()
        .filter_map(|g| {
            let remotes = crate::mem::nvml::nvlink_remotes(&g.pci_bus_id)?;
            let mut to = std::collections::BTreeMap::new();
            for r in remotes.iter().flatten() {
                let peer = gpus.iter().find(|o| key(&o.pci_bus_id) == key(r)).map(|o| format!("gpu:{}", o.ordinal));
                *to.entry(peer.unwrap_or_else(|| r.to_lowercase())).or_insert(0) += 1;
            }
            Some(NvLinks { gpu: format!("gpu:{}", g.ordinal), active: remotes.len(), to })
        })
        .collect()
}

/// RDMA devices that are not on the PCI bus (soft-RoCE's rxe, siw): no placement, but RoCE ports all the same.
pub fn software_rdma(root: &SysRoot) -> Vec<String> {
    root.entries("/sys/class/infiniband")
        .into_iter()
        .filter(|name| root.link_name(format!("/sys/class/infiniband/{name}/device")).is_none_or(|b| !is_bdf(&b)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A type-1 config space with a PCIe capability at 0x40 and (optionally) ACS at 0x100.
    pub fn config(devctl: u16, acs_ctl: Option<u16>) -> Vec<u8> {
        let mut c = vec![0u8; 4096];
        c[0x06] = 0x10;
        c[0x34] = 0x40;
        c[0x40] = CAP_PCIE;
        c[0x48..0x4a].copy_from_slice(&devctl.to_le_bytes());
        if let Some(ctl) = acs_ctl {
            c[0x100..0x104].copy_from_slice(&(ECAP_ACS as u32 | (1 << 16)).to_le_bytes());
            c[0x106..0x108].copy_from_slice(&ctl.to_le_bytes());
        }
        c
    }

    #[test]
    fn device_control_and_acs_are_read_from_config_space() {
        // MPS 256 (1 << 5), MRRS 512 (2 << 12), relaxed ordering on.
        let c = config(0x10 | (1 << 5) | (2 << 12), Some(0b1100));
        let d = ConfigSpace(&c).pcie().unwrap();
        assert_eq!((d.relaxed_ordering, d.max_payload, d.max_read_request), (true, 256, 512));
        assert_eq!(ConfigSpace(&c).acs_redirect(), Some(true));
        let c = config(0, Some(0b0011));
        assert_eq!(
            (ConfigSpace(&c).pcie().unwrap().relaxed_ordering, ConfigSpace(&c).acs_redirect()),
            (false, Some(false))
        );
        assert_eq!(ConfigSpace(&config(0, None)).acs_redirect(), None);
        // A non-root reader sees 64 bytes: nothing past the header is known.
        assert!(ConfigSpace(&c[..64]).pcie().is_none() && ConfigSpace(&c[..64]).acs_redirect().is_none());
    }

    #[test]
    fn a_link_is_degraded_only_below_what_both_ends_can_do() {
        const GEN4: &str = "16.0 GT/s PCIe";
        const GEN5: &str = "32.0 GT/s PCIe";
        let hop = |s: &str, m: &str, w, mw| PciHop {
            bdf: "0000:00:00.0".into(),
            class: None,
            link: Link { speed: Some(s.into()), max_speed: Some(m.into()), width: Some(w), max_width: Some(mw) },
            relaxed_ordering: None,
            max_payload: None,
            max_read_request: None,
            acs_redirect: None,
        };
        let degraded = |up: &PciHop, down: &PciHop| PciLink { upper: Some(up), lower: down }.degraded();
        let gen5_port = hop(GEN5, GEN5, 16, 16);
        assert!(!degraded(&gen5_port, &hop(GEN5, GEN5, 16, 16)));
        // A Gen4 device under a Gen5 port trains at Gen4: both ends report Gen4, the best the pair can do.
        assert!(!degraded(&hop(GEN4, GEN5, 16, 16), &hop(GEN4, GEN4, 16, 16)));
        // An x16 card in an x8 slot: x8 is all the pair can do.
        assert!(!degraded(&hop(GEN5, GEN5, 8, 8), &hop(GEN5, GEN5, 8, 16)));
        // Both ends x16-capable, trained x8; both Gen5-capable, trained Gen4.
        assert!(degraded(&hop(GEN5, GEN5, 8, 16), &hop(GEN5, GEN5, 8, 16)));
        assert!(degraded(&hop(GEN4, GEN5, 16, 16), &hop(GEN4, GEN5, 16, 16)));
        // One end alone: its own maximum is all that is known.
        assert!(PciLink { upper: None, lower: &hop(GEN5, GEN5, 8, 16) }.degraded());
        assert!(!PciLink { upper: None, lower: &hop(GEN4, GEN4, 16, 16) }.degraded());
    }

    #[test]
    fn a_path_pairs_into_links_from_the_device_up() {
        let hop = |bdf: &str| PciHop {
            bdf: bdf.into(),
            class: None,
            link: Link::default(),
            relaxed_ordering: None,
            max_payload: None,
            max_read_request: None,
            acs_redirect: None,
        };
        let place = |bdfs: &[&str]| Placement {
            name: "x".into(),
            bdf: bdfs.last().unwrap().to_string(),
            numa_node: None,
            root: "pci0000:00".into(),
            path: bdfs.iter().map(|b| hop(b)).collect(),
        };
        let pairs = |p: &Placement| -> Vec<(Option<String>, String)> {
            p.links().iter().map(|l| (l.upper.map(|h| h.bdf.clone()), l.lower.bdf.clone())).collect()
        };
        // Root port, switch up, switch down, device: two links; the switch's inside is none.
        let p = place(&["00:01.0", "01:00.0", "02:01.0", "04:00.0"]);
        let s = |v: &str| v.to_string();
        assert_eq!(pairs(&p), [(Some(s("02:01.0")), s("04:00.0")), (Some(s("00:01.0")), s("01:00.0"))]);
        assert_eq!(pairs(&place(&["00:06.0"])), [(None, s("00:06.0"))]);
    }
}
