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
use std::net::TcpListener;
use std::process::Command;
use std::sync::{Arc, Mutex};

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

/// Port of the rendezvous when every rank is on this host and no PMIx server answered: 17600 plus the FNV-1a hash of
/// the job's id (the first of [`JOB_ID_VARS`] set) modulo 1000, a port every rank computes alike without talking to
/// the others. Two runs on one host derive the same port 1 time in 1000: the second one's rank 0 cannot listen and
/// says so, naming the port and `--coordinator`. Below Linux's ephemeral ports (32768..), beside Slurm's.
pub const LOCAL_BASE_PORT: u16 = 17600;

/// What every rank of a job started by mpirun shares: PMIx's namespace (OpenMPI 4 and 5), else ORTE's job id.
pub const JOB_ID_VARS: &[&str] = &["PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_hnp_uri"];

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
#[derive(Debug, Clone)]
pub struct Coordinator {
    pub host: String,
    pub port: u16,
    pub source: CoordinatorSource,
    /// Rank 0's rendezvous listener when finding the address bound it (PMIx: rank 0 publishes the port it got);
    /// empty otherwise, and then the rendezvous binds the port.
    pub bound: BoundListener,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CoordinatorSource {
    /// `--coordinator HOST:PORT`.
    Flag,
    /// `MASTER_ADDR` and `MASTER_PORT` (torchrun sets them; sbatch scripts often export them).
    MasterAddr,
    /// Rank 0 published its address through the launcher's PMIx server (`mpirun`, `srun --mpi=pmix`).
    Pmix,
    /// The first host of `SLURM_JOB_NODELIST`, port [`SLURM_BASE_PORT`] + job id modulo 1000.
    SlurmNodelist,
    /// Every rank on this host and no PMIx server answered (why not: `no_pmix`): 127.0.0.1 at
    /// [`LOCAL_BASE_PORT`] + the job id's hash.
    LocalLoopback { no_pmix: String },
}

/// A listener bound before the rendezvous, taken by it once (and closed when the ranks have met, as one the
/// rendezvous binds itself would be). Clones share it.
#[derive(Debug, Clone, Default)]
pub struct BoundListener(Arc<Mutex<Option<TcpListener>>>);

impl BoundListener {
    pub fn put(&self, listener: TcpListener) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(listener);
    }

    /// The listener, the first time (None after, or when none was bound).
    pub fn take(&self) -> Option<TcpListener> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// What the launcher's PMIx server said about rank 0's address.
pub enum PmixReply {
    /// Rank 0 published it and this rank read it.
    Met(Coordinator),
    /// There is no PMIx server to ask, or it cannot be reached: why, for the message of whatever comes next.
    Unreachable(String),
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

/// The coordinator's address, from the first of these that gives one:
/// 1. `flag` (`--coordinator HOST:PORT`);
/// 2. `MASTER_ADDR:MASTER_PORT`;
/// 3. the launcher's PMIx server, through `pmix` (in production `pmix::exchange`): rank 0 publishes where
///    it listens, so this comes before the nodelist, whose first host may not be rank 0's and whose port two steps
///    of one job share;
/// 4. the first host of `SLURM_JOB_NODELIST` as `expand_nodelist` expands it (in production [`scontrol_hostnames`]);
/// 5. loopback at a port derived from the job id (see [`LOCAL_BASE_PORT`]), when the launcher says every rank is on
///    this host.
///
/// Else a usage error naming `--coordinator` and what was tried.
pub fn resolve_coordinator(
    flag: Option<&str>,
    env: &EnvMap,
    expand_nodelist: impl FnOnce(&str) -> Result<Vec<String>>,
    pmix: impl FnOnce() -> Result<PmixReply>,
) -> Result<Coordinator> {
    let at = |host: String, port: u16, source: CoordinatorSource| Coordinator {
        host,
        port,
        source,
        bound: BoundListener::default(),
    };
    if let Some(text) = flag {
        let (host, port) = split_host_port(text)
            .ok_or_else(|| crate::error::usage(format!("--coordinator {text:?}: expected HOST:PORT")))?;
        return Ok(at(host, port, CoordinatorSource::Flag));
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
        return Ok(at(host, port, CoordinatorSource::MasterAddr));
    }
    let no_pmix = match pmix()? {
        PmixReply::Met(coordinator) => return Ok(coordinator),
        PmixReply::Unreachable(why) => why,
    };
    if let Some(nodelist) = env.get("SLURM_JOB_NODELIST").or_else(|| env.get("SLURM_NODELIST")) {
        let hosts = expand_nodelist(nodelist)?;
        let Some(first) = hosts.into_iter().next() else {
            crate::bail_usage!("SLURM_JOB_NODELIST={nodelist:?} names no host; pass --coordinator HOST:PORT");
        };
        let job_id = if env.contains_key("SLURM_JOB_ID") { number(env, "SLURM_JOB_ID")? } else { 0 };
        let port = SLURM_BASE_PORT + (job_id % 1000) as u16;
        return Ok(at(first, port, CoordinatorSource::SlurmNodelist));
    }
    match local_port(env) {
        Ok(port) => Ok(at("127.0.0.1".into(), port, CoordinatorSource::LocalLoopback { no_pmix })),
        Err(no_local) => crate::bail_usage!(
            "no coordinator: pass --coordinator HOST:PORT (rank 0's host), or set MASTER_ADDR and MASTER_PORT, or launch with mpirun or srun --mpi=pmix (tried PMIx: {no_pmix}; SLURM_JOB_NODELIST: unset; loopback: {no_local})"
        ),
    }
}

/// Whether to ask a PMIx server: None (yes), or why not: `KVXFER_PMIX=off`, or no server in the environment (a
/// PMIx launcher gives each process `PMIX_NAMESPACE` and `PMIX_RANK`). `KVXFER_PMIX` other than `on`/`off` is a
/// usage error.
pub fn pmix_skipped(env: &EnvMap) -> Result<Option<String>> {
    match env.get("KVXFER_PMIX").map(|v| v.trim()) {
        None | Some("") | Some("on") => {}
        Some("off") => return Ok(Some("KVXFER_PMIX=off".into())),
        Some(other) => {
            crate::bail_usage!("KVXFER_PMIX={other:?}: expected off (skip the launcher's PMIx server) or on")
        }
    }
    let missing: Vec<&str> = ["PMIX_NAMESPACE", "PMIX_RANK"].into_iter().filter(|v| !env.contains_key(*v)).collect();
    Ok((!missing.is_empty()).then(|| format!("no PMIx server in the environment ({} unset)", missing.join(", "))))
}

/// Whether the launcher says every rank of the job is on this host: OpenMPI's local size is its world size, the
/// Slurm step spans one node, or torchrun's local world size is its world size.
pub fn all_ranks_local(env: &EnvMap) -> bool {
    let same = |local: &str, world: &str| {
        env.get(local).zip(env.get(world)).is_some_and(|(l, w)| !l.trim().is_empty() && l.trim() == w.trim())
    };
    same("OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_SIZE")
        || env.get("SLURM_STEP_NUM_NODES").is_some_and(|n| n.trim() == "1")
        || same("LOCAL_WORLD_SIZE", "WORLD_SIZE")
}

/// The loopback port of [`LOCAL_BASE_PORT`], or why there is none (ranks on other hosts, or no job id).
fn local_port(env: &EnvMap) -> std::result::Result<u16, String> {
    if !all_ranks_local(env) {
        return Err(
            "the launcher does not say that every rank is on this host (OMPI_COMM_WORLD_LOCAL_SIZE = OMPI_COMM_WORLD_SIZE)"
                .into(),
        );
    }
    let Some(id) = job_id(env) else {
        return Err(format!("no job id to derive a port from (none of {} is set)", JOB_ID_VARS.join(", ")));
    };
    Ok(LOCAL_BASE_PORT + (fnv1a(id.as_bytes()) % 1000) as u16)
}

/// The launcher's id of this job (the first of [`JOB_ID_VARS`] set), the same on every rank of it.
pub fn job_id(env: &EnvMap) -> Option<&str> {
    JOB_ID_VARS.iter().find_map(|v| env.get(*v).map(String::as_str).filter(|id| !id.is_empty()))
}

/// 64-bit FNV-1a: a fixed hash (std's is seeded per process, and every rank must get the same).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3))
}

/// Split `HOST:PORT` (or `[V6]:PORT`); None when the port is missing, zero or not a number, or the host is empty.
pub fn split_host_port(text: &str) -> Option<(String, u16)> {
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
