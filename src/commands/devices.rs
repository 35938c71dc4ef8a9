//! `kvxfer devices`: what this host offers — CPUs, memory, huge pages, which transports can run here (and why not
//! the others), network interfaces, RDMA devices and GPUs.

use crate::cli::DevicesArgs;
use crate::env::netdev::{self, NetInterface};
use crate::env::sysroot::SysRoot;
use crate::env::Env;
use crate::mem::cuda;
use crate::observe::topology;
use crate::plan::sizes::format_size;
use crate::transport::{availability, registry, Availability};
use anyhow::Result;

pub fn run(a: DevicesArgs) -> Result<()> {
    let env = Env::capture();
    let gpus = cuda::gpus();
    let cuda_version = cuda::driver().ok();
    if a.json {
        return print_json(&env, gpus, cuda_version, a.topo);
    }
    let size = |v: Option<u64>| v.map(format_size).unwrap_or_else(|| "unknown".into());
    crate::outln!("host       {}", env.hostname);
    crate::outln!("os         {} (kernel {})", env.os, env.kernel);
    crate::outln!("cpu        {} × {}", env.cpus, env.cpu);
    crate::outln!("memory     {} total, {} available", size(env.mem_total_bytes), size(env.mem_available_bytes));
    match (env.hugepages_total, env.hugepages_free, env.hugepage_size_bytes) {
        (Some(t), Some(f), Some(s)) if t > 0 => crate::outln!("hugepages  {t} × {} reserved, {f} free", format_size(s)),
        _ => crate::outln!("hugepages  none reserved (--hugepages falls back to normal pages)"),
    }
    let states: Vec<Availability> = availability();
    let usable = states.iter().filter(|t| t.available).count();
    crate::outln!("transports {usable} of {} usable here", states.len());
    for t in &states {
        match &t.unusable {
            None => crate::outln!("  {:<9} yes", t.name),
            Some(u) => crate::outln!("  {:<9} no: {}", t.name, u.reason),
        }
    }
    let nets = netdev::interfaces(SysRoot::get());
    crate::outln!("network    {} interface(s)", nets.len());
    for n in &nets {
        crate::outln!("{}", interface_line(n));
    }
    // What the transports find here themselves (the RDMA devices), between the network and the GPUs.
    for inventory in registry::all().iter().filter_map(|t| t.inventory()) {
        for line in inventory.lines {
            crate::outln!("{line}");
        }
    }
    print_gpus(gpus, cuda_version);
    if a.topo {
        print_topology();
    }
    Ok(())
}

/// `--json`: the same facts as the text, as one object.
fn print_json(env: &Env, gpus: Result<Vec<cuda::GpuInfo>>, cuda_version: Option<i32>, topo: bool) -> Result<()> {
    let mut v = serde_json::json!({
        "host": env,
        "cuda_driver_version": cuda_version,
        "transports": availability(),
        "interfaces": netdev::interfaces(SysRoot::get()),
    });
    match &gpus {
        Ok(g) => v["gpus"] = serde_json::to_value(g)?,
        Err(e) => v["gpu_error"] = format!("{e:#}").into(),
    }
    for inventory in registry::all().iter().filter_map(|t| t.inventory()) {
        match inventory.json {
            Ok(found) => v[inventory.key] = found,
            Err(e) => v[format!("{}_error", inventory.key)] = e.into(),
        }
    }
    if topo {
        let (gpus, nics) = topology::devices(SysRoot::get());
        let relations: Vec<_> = gpus
            .iter()
            .flat_map(|g| nics.iter().map(move |n| serde_json::json!([g.name, n.name, topology::relation(g, n)])))
            .collect();
        let nvlink = topology::nvlinks(cuda::gpus().as_deref().unwrap_or_default());
        v["topology"] = serde_json::json!({ "gpus": gpus, "rdma": nics, "relations": relations, "nvlink": nvlink });
    }
    crate::outln!("{}", serde_json::to_string_pretty(&v)?);
    Ok(())
}

/// The GPUs and which can reach which, or why there are none.
fn print_gpus(gpus: Result<Vec<cuda::GpuInfo>>, cuda_version: Option<i32>) {
    match gpus {
        Err(e) => crate::outln!("gpus       none: {e:#}"),
        Ok(g) if g.is_empty() => crate::outln!("gpus       none (CUDA driver present, no devices)"),
        Ok(g) => {
            let v = cuda_version.unwrap_or(0);
            crate::outln!("gpus       {} (CUDA driver {}.{})", g.len(), v / 1000, v % 1000 / 10);
            for d in &g {
                crate::outln!(
                    "  gpu:{}  {}  {}  sm_{}  pci {}  dma-buf {}  GPUDirect RDMA {}",
                    d.ordinal,
                    d.name,
                    format_size(d.memory_bytes),
                    d.compute_capability.replace('.', ""),
                    d.pci_bus_id,
                    yes_no(d.dma_buf),
                    yes_no(d.gpudirect_rdma)
                );
            }
            if g.len() > 1 {
                crate::outln!("  peer access (row → column):");
                crate::outln!("         {}", g.iter().map(|d| format!("gpu:{:<3}", d.ordinal)).collect::<String>());
                for d in &g {
                    let cells: String = g
                        .iter()
                        .map(|o| {
                            let c = if o.ordinal == d.ordinal { "-" } else { yes_no(d.peers.contains(&o.ordinal)) };
                            format!("{c:<7}")
                        })
                        .collect();
                    crate::outln!("  gpu:{:<3}{cells}", d.ordinal);
                }
            }
        }
    }
}

/// `--topo`: each GPU's and NIC's path from its root port, and each GPU's relation to each NIC.
fn print_topology() {
    for l in topology::nvlinks(cuda::gpus().as_deref().unwrap_or_default()) {
        let mut to: Vec<String> = l.to.iter().map(|(peer, n)| format!("{n} to {peer}")).collect();
        let unnamed = l.active.saturating_sub(l.to.values().sum());
        if unnamed > 0 {
            to.push(format!("{unnamed} to an end NVML did not name"));
        }
        let to = if to.is_empty() { String::new() } else { format!(": {}", to.join(", ")) };
        crate::outln!("nvlink     {}  {} active link(s){to}", l.gpu, l.active);
    }
    let (gpus, nics) = topology::devices(SysRoot::get());
    crate::outln!("topology   {} GPU(s), {} RDMA device(s) on the PCI bus", gpus.len(), nics.len());
    for p in gpus.iter().chain(&nics) {
        let degraded = p.degraded_hops();
        let numa = p.numa_node.map(|n| n.to_string()).unwrap_or_else(|| "?".into());
        crate::outln!("  {}  {}  NUMA {numa}  {}", p.name, p.bdf, p.root);
        for h in &p.path {
            let opt = |v: Option<u32>| v.map(|v| v.to_string()).unwrap_or_else(|| "?".into());
            let l = &h.link;
            let mut line = format!(
                "    {}  {} x{} (max {} x{})",
                h.bdf,
                l.speed.as_deref().unwrap_or("?"),
                opt(l.width),
                l.max_speed.as_deref().unwrap_or("?"),
                opt(l.max_width)
            );
            if degraded.contains(&h.bdf.as_str()) {
                line.push_str("  DEGRADED");
            }
            if let Some(ro) = h.relaxed_ordering {
                line.push_str(&format!("  relaxed ordering {}", if ro { "on" } else { "off" }));
            }
            if let (Some(mps), Some(mrrs)) = (h.max_payload, h.max_read_request) {
                line.push_str(&format!("  MPS {mps} MRRS {mrrs}"));
            }
            if h.acs_redirect == Some(true) {
                line.push_str("  ACS redirect");
            }
            crate::outln!("{line}");
        }
    }
    if !gpus.is_empty() && !nics.is_empty() {
        crate::outln!("  relation (nvidia-smi's PIX < PXB < PHB < NODE < SYS):");
        crate::outln!("         {}", nics.iter().map(|n| format!("{:<10}", n.name)).collect::<String>());
        for g in &gpus {
            let cells: String = nics.iter().map(|n| format!("{:<10}", topology::relation(g, n).to_string())).collect();
            crate::outln!("  {:<7}{cells}", g.name);
        }
    }
}

/// `  eth0       up       25 Gb/s    MTU 9000`.
fn interface_line(n: &NetInterface) -> String {
    let speed = n.speed_text().unwrap_or_else(|| "speed ?".into());
    let mtu = n.mtu.map(|m| m.to_string()).unwrap_or_else(|| "?".into());
    format!("  {:<10} {:<8} {:<10} MTU {mtu}", n.name, n.operstate.as_deref().unwrap_or("?"), speed)
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}
