//! `kvxfer devices`: what this host offers. Transports add their own devices (RDMA NICs, GPUs) here.

use crate::cli::DevicesArgs;
use crate::env::Env;
use crate::plan::sizes::format_size;
use anyhow::Result;

pub fn run(a: DevicesArgs) -> Result<()> {
    let env = Env::capture();
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "host": env }))?
        );
        return Ok(());
    }
    let size = |v: Option<u64>| v.map(format_size).unwrap_or_else(|| "unknown".into());
    println!("host      {}", env.hostname);
    println!("os        {} (kernel {})", env.os, env.kernel);
    println!("cpu       {} × {}", env.cpus, env.cpu);
    println!(
        "memory    {} total, {} available",
        size(env.mem_total_bytes),
        size(env.mem_available_bytes)
    );
    match (
        env.hugepages_total,
        env.hugepages_free,
        env.hugepage_size_bytes,
    ) {
        (Some(t), Some(f), Some(s)) if t > 0 => {
            println!("hugepages {t} × {} reserved, {f} free", format_size(s))
        }
        _ => println!("hugepages none reserved (--hugepages falls back to normal pages)"),
    }
    println!("transports {}", crate::transport::TRANSPORTS.join(", "));
    Ok(())
}
