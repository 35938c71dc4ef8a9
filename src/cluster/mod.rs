//! Cluster runs: one kvxfer per rank, placed by the launcher the cluster already has (Slurm's srun,
//! OpenMPI's mpirun, torchrun, or N shells with `KVXFER_RANK` set). No MPI library is linked: [`launcher`] reads
//! rank and world size from the launcher's environment, and [`rendezvous`] lets the ranks meet at rank 0 over plain
//! TCP, learn each other's addresses and wait on barriers, as NCCL's bootstrap does.

mod admission;
mod coordinator;
mod group;
pub mod launcher;
pub mod rendezvous;
pub mod schedule;
mod wire;

pub use group::{Group, Member, RendezvousConfig};
pub use launcher::{discover, resolve_coordinator, Coordinator, CoordinatorSource, EnvMap, Launcher, RankInfo};
pub use rendezvous::rendezvous;
pub use schedule::{schedule, Endpoint, Flow, Pattern, Step};
pub use wire::{decode_join, Join, JoinDecode, NotAJoin, MAX_JOIN_FRAME};
