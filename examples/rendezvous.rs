//! Test driver for `kvxfer::cluster` (tests/launchers.rs starts it under torchrun-style env, mpirun and srun): find
//! the launcher, meet the other ranks at rank 0, pass one barrier, print one JSON line:
//! `{"launcher":"slurm","rank":1,"world_size":4,"local_rank":1,"coordinator":"vm:18601","table":[...]}`.
//!
//! Usage: rendezvous [--coordinator HOST:PORT] [--timeout SECS] [--hold]
//! `--hold` prints the JSON line after the rendezvous and then sleeps instead of entering the barrier, so a test
//! can kill this rank while the others wait in the barrier. Exit codes as kvxfer's: 2 usage, 1 runtime.

use anyhow::Result;
use kvxfer::cluster::{self, launcher, RendezvousConfig};
use std::net::TcpListener;
use std::time::Duration;

struct Args {
    coordinator: Option<String>,
    timeout: Duration,
    hold: bool,
}

fn parse_args() -> Result<Args> {
    let mut args = Args { coordinator: None, timeout: Duration::from_secs(30), hold: false };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--coordinator" => args.coordinator = it.next(),
            "--timeout" => {
                let secs: f64 = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(|| kvxfer::error::usage("--timeout: expected seconds"))?;
                args.timeout = Duration::from_secs_f64(secs);
            }
            "--hold" => args.hold = true,
            other => kvxfer::bail_usage!(
                "unknown argument {other:?}; usage: rendezvous [--coordinator HOST:PORT] [--timeout SECS] [--hold]"
            ),
        }
    }
    Ok(args)
}

fn run() -> Result<()> {
    let args = parse_args()?;
    let env = launcher::process_env();
    let info = cluster::discover(&env)?;
    let coordinator = cluster::find_coordinator(args.coordinator.as_deref(), &env, &info, args.timeout)?;
    // The address this rank would take transfers on; the table carries it to every other rank.
    let own = TcpListener::bind("0.0.0.0:0")?;
    let cfg = RendezvousConfig {
        info: info.clone(),
        coordinator: coordinator.clone(),
        token: env.get("KVXFER_TOKEN").cloned().unwrap_or_default(),
        timeout: args.timeout,
        listen_port: own.local_addr()?.port(),
        host: kvxfer::env::hostname(),
        numa: kvxfer::env::hardware::numa_of_this_cpu(),
    };
    let mut group = cluster::rendezvous(&cfg)?;
    let line = serde_json::json!({
        "launcher": info.launcher,
        "rank": info.rank,
        "world_size": info.world_size,
        "local_rank": info.local_rank,
        "coordinator": coordinator.address(),
        "table": group.members(),
    });
    if args.hold {
        println!("{line}");
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
    group.barrier()?;
    println!("{line}");
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e:#}");
        std::process::exit(kvxfer::error::exit_code(&e));
    }
}
