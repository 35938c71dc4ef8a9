//! RDMA devices: is libibverbs there, which devices and ports exist, which GID to use — and what a failed work
//! completion means in words.

use super::super::DeviceChoice;
use anyhow::{anyhow, bail, Context as _, Result};
use serde::Serialize;
use sideway::ibverbs::address::{Gid, GidType};
use sideway::ibverbs::device::{DeviceInfo, DeviceList, GetDeviceListErrorKind};
use sideway::ibverbs::device_context::DeviceContext;
use std::net::Ipv6Addr;
use std::sync::Arc;

/// rdma-mummy-sys dlopens libibverbs.so.1 from an ELF constructor and leaves every function pointer NULL when that
/// fails; RTLD_NOLOAD asks whether that load succeeded without loading anything.
fn libibverbs_loaded() -> bool {
    // SAFETY: dlopen with RTLD_NOLOAD only looks up an already loaded library; the name is a valid C string.
    let h = unsafe { nix::libc::dlopen(c"libibverbs.so.1".as_ptr(), nix::libc::RTLD_LAZY | nix::libc::RTLD_NOLOAD) };
    !h.is_null()
}

/// The host's RDMA devices, or one sentence saying why there are none.
pub fn device_list() -> Result<DeviceList> {
    if !libibverbs_loaded() {
        bail!(
            "libibverbs.so.1 not found: install the RDMA user space (Debian/Ubuntu: libibverbs1 ibverbs-providers; RHEL: libibverbs)"
        );
    }
    let list = DeviceList::new().map_err(|e| match &e.0 {
        GetDeviceListErrorKind::Ibverbs(io) if io.raw_os_error() == Some(nix::libc::ENOSYS) => {
            anyhow!("no RDMA support in this kernel (ibv_get_device_list: {io}); load ib_uverbs and a NIC driver")
        }
        other => anyhow!("ibv_get_device_list failed: {other:?}"),
    })?;
    if list.is_empty() {
        bail!("libibverbs is installed but this host has no RDMA devices (no NIC driver loaded, or no provider for it: install ibverbs-providers)");
    }
    Ok(list)
}

/// What a connection needs to know about the chosen port.
#[derive(Debug, Clone, Serialize)]
pub struct PortInfo {
    pub device: String,
    pub port: u8,
    pub gid_index: u32,
    pub gid: String,
    #[serde(skip)]
    pub gid_raw: [u8; 16],
    pub gid_type: &'static str,
    pub lid: u16,
    pub link_layer: &'static str,
    /// ibv_mtu enum (1 = 256 B … 5 = 4096 B) and in bytes.
    #[serde(skip)]
    pub active_mtu_enum: u32,
    pub active_mtu: u32,
    pub max_msg_sz: u32,
    pub max_mr_size: u64,
    pub max_qp_wr: i32,
    /// Most scatter/gather entries a work request may carry (ibv_device_attr.max_sge).
    pub max_sge: i32,
    /// Outstanding RDMA READs a queue pair may answer (ibv_device_attr.max_qp_rd_atom: its max_dest_rd_atomic).
    pub max_qp_rd_atom: i32,
    /// Outstanding RDMA READs a queue pair may issue (ibv_device_attr.max_qp_init_rd_atom: its max_rd_atomic).
    pub max_qp_init_rd_atom: i32,
    /// On-demand paging: ibv_odp_caps.general_caps and rc_odp_caps (not recorded: `--odp` is, when it ran).
    #[serde(skip)]
    pub odp_caps: (u64, u32),
}

impl PortInfo {
    pub fn is_ethernet(&self) -> bool {
        self.link_layer == "Ethernet"
    }
}

pub fn mtu_bytes(m: u32) -> u32 {
    if (1..=5).contains(&m) {
        128 << m
    } else {
        0
    }
}

fn port_state_name(s: u32) -> &'static str {
    ["NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"].get(s as usize).copied().unwrap_or("unknown")
}

fn link_layer_name(l: u8) -> &'static str {
    match l {
        1 => "InfiniBand",
        2 => "Ethernet",
        _ => "Unspecified",
    }
}

fn gid_type_name(t: GidType) -> &'static str {
    match t {
        GidType::InfiniBand => "IB",
        GidType::RoceV1 => "RoCEv1",
        GidType::RoceV2 => "RoCEv2",
    }
}

/// "4X EDR (100 Gb/s)" from the raw port attributes (sideway's typed accessors panic on values they don't know).
fn rate_string(width: u8, speed: u8, speed_ex: u32) -> String {
    let lanes = match width {
        1 => 1,
        2 => 4,
        4 => 8,
        8 => 12,
        16 => 2,
        _ => 0,
    };
    let sp = if speed_ex != 0 { speed_ex } else { speed as u32 };
    let (name, gbps) = match sp {
        1 => ("SDR", 2.5),
        2 => ("DDR", 5.0),
        4 => ("QDR", 10.0),
        8 => ("FDR10", 10.0),
        16 => ("FDR", 14.0),
        32 => ("EDR", 25.0),
        64 => ("HDR", 50.0),
        128 => ("NDR", 100.0),
        256 => ("XDR", 200.0),
        _ => ("unknown", 0.0),
    };
    format!("{lanes}X {name} ({} Gb/s)", lanes as f64 * gbps)
}

fn gid_text(raw: [u8; 16]) -> String {
    let ip6 = Ipv6Addr::from(raw);
    match ip6.to_ipv4_mapped() {
        Some(v4) => format!("{ip6} ({v4})"),
        None => ip6.to_string(),
    }
}

/// Open device `name` (None: the first with an active port) at the chosen port and pick the GID: the user's
/// index, else (like perftest) a RoCE v2 IPv4-mapped GID, else any RoCE v2 GID, else the first.
pub fn open(choice: &DeviceChoice, name: Option<&str>) -> Result<(Arc<DeviceContext>, PortInfo)> {
    let list = device_list()?;
    let names: Vec<String> = list.iter().map(|d| d.name()).collect();
    let port = choice.ib_port;
    let dev = match name {
        Some(n) => list.iter().find(|d| d.name() == n).ok_or_else(|| {
            crate::error::usage(format!("RDMA device {n:?} not found; this host has: {}", names.join(", ")))
        })?,
        None => list
            .iter()
            .find(|d| d.open().ok().and_then(|c| c.query_port(port).ok()).is_some_and(|p| p.attr.state == 4))
            .ok_or_else(|| anyhow!("no RDMA device has an ACTIVE port {port} (devices: {})", names.join(", ")))?,
    };
    let name = dev.name();
    let ctx = dev.open().with_context(|| format!("ibv_open_device({name})"))?;
    let attr = ctx.query_device().with_context(|| format!("ibv_query_device({name})"))?;
    if port == 0 || port > attr.phys_port_cnt() {
        return Err(crate::error::usage(format!("--ib-port {port}: {name} has {} port(s)", attr.phys_port_cnt())));
    }
    let pa = ctx.query_port(port).with_context(|| format!("ibv_query_port({name}, {port})"))?;
    if pa.attr.state != 4 {
        bail!("{name} port {port} is {}, not ACTIVE; is the link up?", port_state_name(pa.attr.state));
    }
    let gids: Vec<_> = ctx.query_gid_table()?.into_iter().filter(|g| g.port_num() == port as u32).collect();
    let entry = match choice.gid_index {
        Some(i) => gids.iter().find(|g| g.gid_index() == i).ok_or_else(|| {
            crate::error::usage(format!(
                "--gid-index {i}: {name} port {port} has GID indexes {:?}",
                gids.iter().map(|g| g.gid_index()).collect::<Vec<_>>()
            ))
        })?,
        None => gids
            .iter()
            .find(|g| g.gid_type() == GidType::RoceV2 && Ipv6Addr::from(g.gid().raw).to_ipv4_mapped().is_some())
            .or_else(|| gids.iter().find(|g| g.gid_type() == GidType::RoceV2))
            .or_else(|| gids.first())
            .ok_or_else(|| anyhow!("{name} port {port} has an empty GID table"))?,
    };
    let raw = entry.gid().raw;
    Ok((
        ctx.clone(),
        PortInfo {
            device: name,
            port,
            gid_index: entry.gid_index(),
            gid: gid_text(raw),
            gid_raw: raw,
            gid_type: gid_type_name(entry.gid_type()),
            lid: pa.attr.lid,
            link_layer: link_layer_name(pa.attr.link_layer),
            active_mtu_enum: pa.attr.active_mtu,
            active_mtu: mtu_bytes(pa.attr.active_mtu),
            max_msg_sz: pa.attr.max_msg_sz,
            max_mr_size: attr.max_mr_size(),
            max_qp_wr: attr.max_qp_wr(),
            max_sge: attr.max_sge(),
            max_qp_rd_atom: attr.max_qp_rd_atom(),
            max_qp_init_rd_atom: attr.max_qp_init_rd_atom(),
            odp_caps: (attr.attr.odp_caps.general_caps, attr.attr.odp_caps.per_transport_caps.rc_odp_caps),
        },
    ))
}

pub fn gid_from(raw: [u8; 16]) -> Gid {
    Gid { raw }
}

/// Why `--odp` cannot run on this device, if it cannot: on-demand paging at all (IBV_ODP_SUPPORT), and RDMA WRITEs
/// on RC queue pairs over on-demand memory (IBV_ODP_SUPPORT_WRITE in rc_odp_caps, which perftest asks of both ends
/// of a WRITE test).
pub fn odp_refusal(device: &str, (general, rc): (u64, u32)) -> Option<String> {
    const IBV_ODP_SUPPORT: u64 = 1;
    const IBV_ODP_SUPPORT_WRITE: u32 = 1 << 2;
    if general & IBV_ODP_SUPPORT == 0 {
        return Some(format!(
            "--odp: {device} has no on-demand paging (odp_caps.general_caps lacks IBV_ODP_SUPPORT); drop --odp"
        ));
    }
    (rc & IBV_ODP_SUPPORT_WRITE == 0).then(|| {
        format!("--odp: {device} has no on-demand paging for RDMA WRITEs on RC queue pairs (rc_odp_caps lacks IBV_ODP_SUPPORT_WRITE); drop --odp")
    })
}

/// One device as `kvxfer devices` shows it.
#[derive(Debug, Serialize)]
pub struct DeviceReport {
    pub name: String,
    pub firmware: String,
    pub max_mr_size: u64,
    pub ports: Vec<PortReport>,
}

#[derive(Debug, Serialize)]
pub struct PortReport {
    pub port: u8,
    pub state: &'static str,
    pub link_layer: &'static str,
    pub active_mtu: u32,
    pub rate: String,
    pub gids: Vec<GidReport>,
}

#[derive(Debug, Serialize)]
pub struct GidReport {
    pub index: u32,
    #[serde(rename = "type")]
    pub gid_type: &'static str,
    pub address: String,
    pub netdev: String,
}

/// Whether verbs can run here: libibverbs loads and lists at least one RDMA device.
pub fn usable() -> std::result::Result<(), crate::transport::Unusable> {
    let reason = if libibverbs_loaded() { "no RDMA device" } else { "libibverbs missing" };
    device_list().map(|_| ()).map_err(|e| crate::transport::Unusable::new(reason, e))
}

/// The RDMA devices, their ports and GIDs, or why there are none, for `kvxfer devices` (`rdma` in its JSON).
pub fn inventory() -> crate::transport::Inventory {
    let found = report();
    let json = match &found {
        Ok(d) => Ok(serde_json::to_value(d).expect("device reports serialize")),
        Err(e) => Err(format!("{e:#}")),
    };
    let mut lines = Vec::new();
    match found {
        Err(e) => lines.push(format!("rdma       none: {e:#}")),
        Ok(devs) => {
            lines.push(format!("rdma       {} device(s)", devs.len()));
            for d in devs {
                let mr = if d.max_mr_size >= 1 << 60 {
                    "unlimited".into()
                } else {
                    crate::plan::sizes::format_size(d.max_mr_size)
                };
                lines.push(format!("  {}  firmware {}  max_mr_size {mr}", d.name, d.firmware));
                for p in d.ports {
                    lines.push(format!(
                        "    port {}  {}  {}  active MTU {}  {}",
                        p.port, p.state, p.link_layer, p.active_mtu, p.rate
                    ));
                    for g in p.gids {
                        lines
                            .push(format!("      gid[{:>3}]  {:<6}  {}  {}", g.index, g.gid_type, g.address, g.netdev));
                    }
                }
            }
        }
    }
    crate::transport::Inventory { key: "rdma", json, lines }
}

pub fn report() -> Result<Vec<DeviceReport>> {
    let list = device_list()?;
    let mut out = Vec::new();
    for dev in &list {
        let name = dev.name();
        let ctx = dev.open().with_context(|| format!("ibv_open_device({name})"))?;
        let attr = ctx.query_device().with_context(|| format!("ibv_query_device({name})"))?;
        let gids = ctx.query_gid_table().unwrap_or_default();
        let mut ports = Vec::new();
        for p in 1..=attr.phys_port_cnt() {
            let a = ctx.query_port(p).with_context(|| format!("ibv_query_port({name}, {p})"))?.attr;
            ports.push(PortReport {
                port: p,
                state: port_state_name(a.state),
                link_layer: link_layer_name(a.link_layer),
                active_mtu: mtu_bytes(a.active_mtu),
                rate: rate_string(a.active_width, a.active_speed, a.active_speed_ex),
                gids: gids
                    .iter()
                    .filter(|g| g.port_num() == p as u32)
                    .map(|g| GidReport {
                        index: g.gid_index(),
                        gid_type: gid_type_name(g.gid_type()),
                        address: gid_text(g.gid().raw),
                        netdev: g.netdev_name().unwrap_or_default(),
                    })
                    .collect(),
            });
        }
        out.push(DeviceReport { name, firmware: attr.firmware_version(), max_mr_size: attr.max_mr_size(), ports });
    }
    Ok(out)
}

/// A failed work completion in words: the status name and what it usually means.
pub fn wc_status_text(status: u32) -> String {
    const NAMES: [&str; 24] = [
        "SUCCESS",
        "LOC_LEN_ERR",
        "LOC_QP_OP_ERR",
        "LOC_EEC_OP_ERR",
        "LOC_PROT_ERR",
        "WR_FLUSH_ERR",
        "MW_BIND_ERR",
        "BAD_RESP_ERR",
        "LOC_ACCESS_ERR",
        "REM_INV_REQ_ERR",
        "REM_ACCESS_ERR",
        "REM_OP_ERR",
        "RETRY_EXC_ERR",
        "RNR_RETRY_EXC_ERR",
        "LOC_RDD_VIOL_ERR",
        "REM_INV_RD_REQ_ERR",
        "REM_ABORT_ERR",
        "INV_EECN_ERR",
        "INV_EEC_STATE_ERR",
        "FATAL_ERR",
        "RESP_TIMEOUT_ERR",
        "GENERAL_ERR",
        "TM_ERR",
        "TM_RNDV_INCOMPLETE",
    ];
    let name = NAMES.get(status as usize).map(|n| format!("IBV_WC_{n}")).unwrap_or_else(|| format!("status {status}"));
    let meaning = match status {
        1 => "local length error — a work request's length does not fit the local buffer",
        2 => "local QP operation error — the send queue is inconsistent",
        4 => "local protection error — a write's local address or lkey is outside its registered memory",
        5 => "flushed — the queue pair had already failed, so this request never ran",
        8 => "local access error",
        9 => "remote invalid request — the receiver refused the request (too long, or an opcode it does not allow)",
        10 => "remote access error — the receiver's region or rkey is wrong",
        11 => "remote operation error — the receiver could not complete the operation",
        12 => "transport retry counter exceeded — the receiver stopped answering (did it exit or crash?) or the path is broken",
        13 => "receiver not ready — no receive was posted for a WRITE_WITH_IMM",
        19 => "fatal error on the device",
        20 => "response timeout",
        _ => "see ibv_wc_status_str(3)",
    };
    format!("{name}: {meaning}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completion_statuses_have_sentences() {
        assert_eq!(
            wc_status_text(10),
            "IBV_WC_REM_ACCESS_ERR: remote access error — the receiver's region or rkey is wrong"
        );
        assert!(wc_status_text(12).starts_with("IBV_WC_RETRY_EXC_ERR"));
        assert!(wc_status_text(999).starts_with("status 999"));
    }

    #[test]
    fn odp_is_refused_naming_the_missing_capability() {
        let none = odp_refusal("rxe0", (0, 0)).unwrap();
        assert_eq!(none, "--odp: rxe0 has no on-demand paging (odp_caps.general_caps lacks IBV_ODP_SUPPORT); drop --odp");
        assert!(odp_refusal("mlx5_0", (1, 0b011)).unwrap().contains("lacks IBV_ODP_SUPPORT_WRITE"));
        assert_eq!(odp_refusal("mlx5_0", (1, 0b100)), None);
    }

    #[test]
    fn rates_and_mtus() {
        assert_eq!(rate_string(2, 32, 0), "4X EDR (100 Gb/s)");
        assert_eq!(rate_string(2, 0, 64), "4X HDR (200 Gb/s)");
        assert_eq!(mtu_bytes(5), 4096);
        assert_eq!(mtu_bytes(1), 256);
        assert_eq!(mtu_bytes(9), 0);
    }

    #[test]
    fn gids_print_their_ipv4() {
        let mut raw = [0u8; 16];
        raw[10] = 0xff;
        raw[11] = 0xff;
        raw[12..].copy_from_slice(&[10, 77, 0, 1]);
        assert_eq!(gid_text(raw), "::ffff:10.77.0.1 (10.77.0.1)");
    }
}
