//! Which launcher started this process, and this process's rank, world size and local rank, read from the
//! environment the launcher set. Everything here is a pure function of an [`EnvMap`] so it can be tested without
//! touching the process environment; [`process_env`] is the one place that reads it.
//!
//! Order of detection: the innermost launcher wins, because launchers nest and the outer one's variables leak into
//! the inner one's processes. `mpirun` inside an `sbatch` script sees `SLURM_PROCID=0` from the batch step;
//! `torchrun` started by `srun` sees the `srun` task's `SLURM_PROCID` in all of its workers. So: kvxfer's own
//! `KVXFER_RANK` (set on purpose by the user) first, then torchrun, then OpenMPI, then Slurm, then bare PMIx. Where
//! only one launcher is present this is kvbench's order (Slurm, OpenMPI, torchrun); PMIx comes after Slurm and
//! OpenMPI because both of them set `PMIX_RANK` too, and the name of the real launcher says more.

use anyhow::Result;
use std::collections::BTreeMap;
use std::fmt;
use std::process::Command;

/// Environment variables by name: a snapshot of the process environment, or a test's own map.
pub type EnvMap = BTreeMap<String, String>;

/// A snapshot of this process's environment (variables whose name or value is not UTF-8 are left out).
pub fn process_env() -> EnvMap {
    std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))).collect()
}

/// The launcher whose variables gave the rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Launcher {
    /// `srun` (a job step; the batch script itself is not a launch).
    Slurm,
    /// A PMIx launcher that is neither Slurm nor OpenMPI (`PMIX_RANK` alone).
    Pmix,
    /// OpenMPI's `mpirun`/`mpiexec`.
    OpenMpi,
    /// `torchrun` or anything that sets its variables.
    Torchrun,
    /// kvxfer's own `KVXFER_RANK`/`KVXFER_WORLD_SIZE`, e.g. N shells started by hand.
    Kvxfer,
}

impl fmt::Display for Launcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Launcher::Slurm => "slurm",
            Launcher::Pmix => "pmix",
            Launcher::OpenMpi => "openmpi",
            Launcher::Torchrun => "torchrun",
            Launcher::Kvxfer => "kvxfer",
        })
    }
}

/// This process's place in the job, as its launcher described it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankInfo {
    pub launcher: Launcher,
    pub rank: usize,
    pub world_size: usize,
    /// Index among the ranks on this host: picks the GPU and NIC.
    pub local_rank: usize,
}

/// The most ranks a cluster run takes: far past any cluster kvxfer meets, and a bound on what a world size read
/// from the environment can make rank 0 wait for.
pub const MAX_WORLD_SIZE: usize = 1 << 16;

/// Port of the rendezvous when the coordinator comes from the Slurm nodelist (no port there): 18600 plus the job id
/// modulo 1000, so two jobs whose first node is the same host meet on different ports unless their ids are equal
/// modulo 1000. Without `SLURM_JOB_ID`, 18600.
pub const SLURM_BASE_PORT: u16 = 18600;

/// Find the launcher and read rank, world size and local rank from its variables. Inconsistent values (rank not
/// below the size, a non-number) are usage errors naming the variable; no launcher at all is a usage error listing
/// what was looked for.
pub fn discover(env: &EnvMap) -> Result<RankInfo> {
    if env.contains_key("KVXFER_RANK") {
        return read_rank(env, Launcher::Kvxfer, "KVXFER_RANK", &["KVXFER_WORLD_SIZE"], &["KVXFER_LOCAL_RANK"]);
    }
    if env.contains_key("RANK") && env.contains_key("WORLD_SIZE") {
        return read_rank(env, Launcher::Torchrun, "RANK", &["WORLD_SIZE"], &["LOCAL_RANK"]);
    }
    if env.contains_key("OMPI_COMM_WORLD_RANK") {
        let (size, local) = (&["OMPI_COMM_WORLD_SIZE"], &["OMPI_COMM_WORLD_LOCAL_RANK"]);
        return read_rank(env, Launcher::OpenMpi, "OMPI_COMM_WORLD_RANK", size, local);
    }
    if env.contains_key("SLURM_PROCID") {
        // The batch script of `sbatch` has SLURM_PROCID=0 too, but it is one process, not a launch of N: only a
        // job step started by srun has a step id.
        if env.contains_key("SLURM_STEP_ID") || env.contains_key("SLURM_STEPID") {
            return read_rank(env, Launcher::Slurm, "SLURM_PROCID", &["SLURM_NTASKS"], &["SLURM_LOCALID"]);
        }
        if !env.contains_key("PMIX_RANK") {
            crate::bail_usage!(
                "SLURM_PROCID is set but SLURM_STEP_ID is not: this is a Slurm batch script, not a job step; start one kvxfer per rank with srun"
            );
        }
    }
    if env.contains_key("PMIX_RANK") {
        let size = &["PMIX_SIZE", "OMPI_COMM_WORLD_SIZE", "OMPI_UNIVERSE_SIZE"];
        return read_rank(env, Launcher::Pmix, "PMIX_RANK", size, &["PMIX_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"]);
    }
    crate::bail_usage!(
        "no launcher found: start one kvxfer per rank with srun, mpirun or torchrun, or set KVXFER_RANK and KVXFER_WORLD_SIZE (looked for KVXFER_RANK, RANK+WORLD_SIZE, OMPI_COMM_WORLD_RANK, SLURM_PROCID, PMIX_RANK)"
    )
}

/// Read the rank from `rank_var`, the size from the first of `size_vars` that is set (missing: a usage error
/// naming the first), the local rank from the first of `local_vars` that is set (missing: 0, one rank per host).
fn read_rank(
    env: &EnvMap,
    launcher: Launcher,
    rank_var: &str,
    size_vars: &[&str],
    local_vars: &[&str],
) -> Result<RankInfo> {
    let rank = number(env, rank_var)?;
    let Some(size_var) = size_vars.iter().find(|v| env.contains_key(**v)) else {
        crate::bail_usage!("{rank_var} is set but {} is not; the launcher must give the world size", size_vars[0]);
    };
    let world_size = number(env, size_var)?;
    if world_size == 0 {
        crate::bail_usage!("{size_var}=0: the world size must be at least 1");
    }
    if world_size > MAX_WORLD_SIZE {
        crate::bail_usage!(
            "{size_var}={world_size}: kvxfer cluster runs at most {MAX_WORLD_SIZE} ranks; check the launcher's environment"
        );
    }
    if rank >= world_size {
        crate::bail_usage!("{rank_var}={rank} is not below {size_var}={world_size}; ranks count from 0");
    }
    let local_rank = match local_vars.iter().find(|v| env.contains_key(**v)) {
        Some(var) => {
            let local = number(env, var)?;
            if local >= world_size {
                crate::bail_usage!("{var}={local} is not below {size_var}={world_size}");
            }
            local
        }
        None => 0,
    };
    Ok(RankInfo { launcher, rank, world_size, local_rank })
}

fn number(env: &EnvMap, var: &str) -> Result<usize> {
    let text = env.get(var).map(|v| v.trim()).unwrap_or_default();
    text.parse().map_err(|_| crate::error::usage(format!("{var}={text:?} is not a non-negative whole number")))
}

/// Where the ranks meet, and what said so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Coordinator {
    pub host: String,
    pub port: u16,
    pub source: CoordinatorSource,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoordinatorSource {
    /// `--coordinator HOST:PORT`.
    Flag,
    /// `MASTER_ADDR` and `MASTER_PORT` (torchrun sets them; sbatch scripts often export them).
    MasterAddr,
    /// The first host of `SLURM_JOB_NODELIST`, port [`SLURM_BASE_PORT`] + job id modulo 1000.
    SlurmNodelist,
}

impl Coordinator {
    /// `HOST:PORT`, with brackets around an IPv6 address, ready for `ToSocketAddrs`.
    pub fn address(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl fmt::Display for Coordinator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.address())
    }
}

/// The coordinator's address: `flag` (`--coordinator HOST:PORT`) if given, else `MASTER_ADDR:MASTER_PORT`, else the
/// first host of `SLURM_JOB_NODELIST` as `expand_nodelist` expands it (in production [`scontrol_hostnames`]), else
/// a usage error naming `--coordinator`.
pub fn resolve_coordinator(
    flag: Option<&str>,
    env: &EnvMap,
    expand_nodelist: impl FnOnce(&str) -> Result<Vec<String>>,
) -> Result<Coordinator> {
    if let Some(text) = flag {
        let (host, port) = split_host_port(text)
            .ok_or_else(|| crate::error::usage(format!("--coordinator {text:?}: expected HOST:PORT")))?;
        return Ok(Coordinator { host, port, source: CoordinatorSource::Flag });
    }
    if let Some(host) = env.get("MASTER_ADDR").filter(|h| !h.is_empty()) {
        let Some(port_text) = env.get("MASTER_PORT") else {
            crate::bail_usage!("MASTER_ADDR is set but MASTER_PORT is not; set both or pass --coordinator HOST:PORT");
        };
        let port =
            port_text.trim().parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| {
                crate::error::usage(format!("MASTER_PORT={port_text:?} is not a port number (1-65535)"))
            })?;
        let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
        return Ok(Coordinator { host, port, source: CoordinatorSource::MasterAddr });
    }
    if let Some(nodelist) = env.get("SLURM_JOB_NODELIST").or_else(|| env.get("SLURM_NODELIST")) {
        let hosts = expand_nodelist(nodelist)?;
        let Some(first) = hosts.into_iter().next() else {
            crate::bail_usage!("SLURM_JOB_NODELIST={nodelist:?} names no host; pass --coordinator HOST:PORT");
        };
        let job_id = if env.contains_key("SLURM_JOB_ID") { number(env, "SLURM_JOB_ID")? } else { 0 };
        let port = SLURM_BASE_PORT + (job_id % 1000) as u16;
        return Ok(Coordinator { host: first, port, source: CoordinatorSource::SlurmNodelist });
    }
    crate::bail_usage!(
        "no coordinator: pass --coordinator HOST:PORT (rank 0's host), or set MASTER_ADDR and MASTER_PORT, or run under srun"
    )
}

/// Split `HOST:PORT` (or `[V6]:PORT`); None when the port is missing, zero or not a number, or the host is empty.
fn split_host_port(text: &str) -> Option<(String, u16)> {
    let (host, port) = text.rsplit_once(':')?;
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    let port = port.parse::<u16>().ok().filter(|p| *p != 0)?;
    (!host.is_empty()).then(|| (host.to_string(), port))
}

/// Expand a Slurm nodelist (`node[01-04],gpu7`) into host names with `scontrol show hostnames`, the one expansion
/// that knows every syntax Slurm accepts.
pub fn scontrol_hostnames(nodelist: &str) -> Result<Vec<String>> {
    let out = Command::new("scontrol").args(["show", "hostnames", nodelist]).output().map_err(|e| {
        anyhow::anyhow!(
            "cannot run `scontrol show hostnames {nodelist}` to find the first host of SLURM_JOB_NODELIST: {e}; pass --coordinator HOST:PORT"
        )
    })?;
    if !out.status.success() {
        anyhow::bail!(
            "`scontrol show hostnames {nodelist}` failed ({}): {}; pass --coordinator HOST:PORT",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).split_whitespace().map(str::to_string).collect())
}

#[cfg(test)]
#[path = "launcher_tests.rs"]
mod tests;
