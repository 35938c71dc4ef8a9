//! Cluster runs: one kvxfer per rank, placed by the launcher the cluster already has (Slurm's srun,
//! OpenMPI's mpirun, torchrun, or N shells with `KVXFER_RANK` set). No MPI library is linked: [`launcher`] reads
//! rank and world size from the launcher's environment, and [`rendezvous`] lets the ranks meet at rank 0 over plain
//! TCP, learn each other's addresses and wait on barriers, as NCCL's bootstrap does. Where the launcher runs a PMIx
//! server (mpirun, srun --mpi=pmix), rank 0 tells the others where it listens through it (`pmix.rs`, libpmix loaded
//! at run time), so no flag has to.

mod admission;
mod coordinator;
mod group;
pub mod launcher;
mod pmix;
pub mod rendezvous;
pub mod route;
pub mod schedule;
mod wire;

pub use group::{Group, Member, RendezvousConfig};
pub use launcher::{discover, resolve_coordinator, Coordinator, CoordinatorSource, EnvMap, Launcher, RankInfo};
pub use rendezvous::rendezvous;
pub use schedule::{schedule, Endpoint, Flow, Pattern, Step};
pub use wire::{decode_join, Join, JoinDecode, NotAJoin, MAX_JOIN_FRAME};

/// Where this rank meets the others, as [`resolve_coordinator`] finds it with the real lookups: Slurm's nodelist
/// through `scontrol`, and the launcher's PMIx server (its fence waits at most `timeout` for every rank).
pub fn find_coordinator(
    flag: Option<&str>,
    env: &EnvMap,
    info: &RankInfo,
    timeout: std::time::Duration,
) -> anyhow::Result<Coordinator> {
    resolve_coordinator(flag, env, launcher::scontrol_hostnames, || pmix::exchange(env, info, timeout))
}
