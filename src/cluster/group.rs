//! What the rendezvous leaves behind: the table of ranks, the connections that carry barriers, and what a rank
//! needs to join (shared by rank 0's side, `coordinator`, and everyone's, `rendezvous`).

use super::launcher::{Coordinator, RankInfo};
use serde::{Deserialize, Serialize};
use std::net::TcpStream;
use std::time::Duration;

/// One rank as the others see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub rank: usize,
    pub local_rank: usize,
    pub host: String,
    /// `IP:PORT` where this rank listens for its peers.
    pub addr: String,
    /// The NUMA node of this rank's buffer (its GPU's, its NIC's, or its CPU's), as the rank itself found it.
    #[serde(default)]
    pub numa: Option<u32>,
}

/// What a rank needs to join.
#[derive(Debug, Clone)]
pub struct RendezvousConfig {
    pub info: RankInfo,
    pub coordinator: Coordinator,
    /// `KVXFER_TOKEN`, empty when unset: every rank must present rank 0's.
    pub token: String,
    /// How long to wait for the coordinator to listen and for all ranks to arrive; also the limit of a barrier.
    pub timeout: Duration,
    /// The port this rank listens on for its peers; advertised with the IP it reached rank 0 from.
    pub listen_port: u16,
    /// This host's name, for the table and for error messages.
    pub host: String,
    /// The NUMA node this rank reports (see [`Member::numa`]).
    pub numa: Option<u32>,
}

/// The ranks after the rendezvous: the table, and the connections that carry barriers.
pub struct Group {
    pub(super) rank: usize,
    pub(super) members: Vec<Member>,
    pub(super) timeout: Duration,
    pub(super) links: Links,
    pub(super) barriers: u64,
}

pub(super) enum Links {
    /// Rank 0: one connection per other rank, in rank order.
    Coordinator(Vec<Link>),
    /// Any other rank: the connection to rank 0, and rank 0's address for messages.
    Member { stream: TcpStream, coordinator: String },
}

/// A connection from one rank to rank 0.
pub(super) struct Link {
    pub rank: usize,
    pub host: String,
    pub stream: TcpStream,
}
