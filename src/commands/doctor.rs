//! `kvxfer doctor`: the findings of `observe::doctor` for this host (or a captured tree), highest cost first, each
//! with its fix. Exit 1 when a finding costs `--fail-on` or more (default medium: a lone low finding, such as no
//! huge pages, must not fail a CI preflight on every host), 0 otherwise, 2 when -d or --gpu names nothing here.

use crate::cli::{DoctorArgs, FailOn};
use crate::env::sysroot::SysRoot;
use crate::observe::doctor::{examine, Cost, Scope};
use crate::observe::topology;
use anyhow::Result;

pub fn run(a: DoctorArgs) -> Result<()> {
    let root = SysRoot::get();
    let (gpus, nics) = topology::devices(root);
    let software = topology::software_rdma(root);
    if let Some(d) = &a.device {
        if !nics.iter().any(|n| &n.name == d) && !software.contains(d) {
            let have: Vec<&str> =
                nics.iter().map(|n| n.name.as_str()).chain(software.iter().map(String::as_str)).collect();
            crate::bail_usage!("-d {d}: no such RDMA device here (this host has: {})", list(&have));
        }
    }
    if let Some(g) = a.gpu {
        if g as usize >= gpus.len() {
            crate::bail_usage!("--gpu {g}: this host has {} NVIDIA GPU(s) on its PCI bus", gpus.len());
        }
    }
    let findings = examine(root, &Scope { gpu: a.gpu, nic: a.device.clone() });
    if a.json {
        let v = serde_json::json!({
            "root": root.path("/").display().to_string(),
            "gpus": gpus.len(),
            "rdma_devices": nics.len(),
            "software_rdma_devices": software,
            "findings": findings,
        });
        crate::outln!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        let soft = match software.len() {
            0 => String::new(),
            n => format!(", {n} software RDMA device(s) ({})", software.join(", ")),
        };
        crate::outln!(
            "looked at {} GPU(s) and {} RDMA device(s) on the PCI bus{soft} under {}",
            gpus.len(),
            nics.len(),
            root.path("/").display()
        );
        if findings.is_empty() {
            crate::outln!("nothing found");
        }
        for (i, f) in findings.iter().enumerate() {
            crate::outln!("{}. [{:?}] {}", i + 1, f.cost, f.what);
            crate::outln!("   fix: {}", f.fix);
        }
    }
    let threshold = match a.fail_on {
        FailOn::Low => Cost::Low,
        FailOn::Medium => Cost::Medium,
        FailOn::High => Cost::High,
    };
    // Costs order highest first.
    match findings.iter().filter(|f| f.cost <= threshold).count() {
        0 => Ok(()),
        n => Err(crate::error::found(n)),
    }
}

fn list(v: &[&str]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}
