//! Ranks meet at rank 0 over plain TCP: every other rank connects to the coordinator, says who it is and where it
//! listens, and rank 0 answers everyone with the full table once all N have arrived. The same connections then
//! carry barriers. A rank that dies (its connection closes) fails every other rank within a poll interval, with
//! its rank and host named; a rank that never comes fails the rendezvous at the timeout, the missing ranks named.

use super::coordinator;
use super::group::{Group, Links, Member, RendezvousConfig};
use super::wire::{self, RecvError, Wire};
use crate::control::auth::{self, Nonces};
use crate::measure::Json;
use anyhow::{anyhow, bail, Context, Result};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Longest single connection attempt; attempts repeat until the rendezvous timeout.
const CONNECT_ATTEMPT: Duration = Duration::from_secs(5);
/// How long rank 0 may take to send its challenge once it accepted: it polls its listener every second.
const CHALLENGE_TIMEOUT: Duration = Duration::from_secs(10);

/// Meet the other ranks. Rank 0 listens on the coordinator's port; every other rank connects to it. Returns when
/// every rank has the full table.
pub fn rendezvous(cfg: &RendezvousConfig) -> Result<Group> {
    if cfg.info.rank == 0 {
        return coordinator::gather(cfg);
    }
    let deadline = Instant::now() + cfg.timeout;
    let at = cfg.coordinator.address();
    let mut stream = connect_with_retry(&at, deadline)?;
    let addr = SocketAddr::new(stream.local_addr()?.ip(), cfg.listen_port).to_string();
    // Rank 0 challenges every connection at once; a rank 0 that does not is not this kvxfer's.
    stream.set_read_timeout(Some(
        CHALLENGE_TIMEOUT.min(deadline.saturating_duration_since(Instant::now())).max(Duration::from_millis(1)),
    ))?;
    let challenge = match wire::recv(&mut stream) {
        Ok(Wire::Challenge { nonce }) => auth::parse_nonce(&nonce)
            .ok_or_else(|| anyhow!("rank 0 at {at} sent a malformed challenge; run the same kvxfer on every rank"))?,
        Ok(Wire::Error { message }) => bail!("rank 0 at {at}: {}", crate::console::printable(&message)),
        Ok(other) => {
            bail!("rank 0 at {at} sent {} instead of its challenge; run the same kvxfer on every rank", other.name())
        }
        Err(e) => {
            return Err(member_recv_error(
                e,
                &at,
                CHALLENGE_TIMEOUT,
                "its challenge (an older kvxfer as rank 0 sends none)",
            ))
        }
    };
    let nonces = Nonces { sender: auth::nonce()?, receiver: challenge };
    let join = Wire::Join(wire::Join {
        magic: wire::MAGIC.into(),
        protocol: wire::PROTOCOL,
        nonce: hex::encode(nonces.sender),
        proof: hex::encode(auth::sender_proof(&cfg.token, &nonces)),
        rank: cfg.info.rank,
        world_size: cfg.info.world_size,
        local_rank: cfg.info.local_rank,
        host: cfg.host.clone(),
        addr,
        numa: cfg.numa,
    });
    wire::send(&mut stream, &join).with_context(|| format!("sending this rank's details to rank 0 at {at}"))?;
    stream.set_read_timeout(Some(deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1))))?;
    let members = match wire::recv(&mut stream) {
        Ok(Wire::Table { members, proof }) => {
            if !auth::proof_matches(&auth::receiver_proof(&cfg.token, &nonces), &proof) {
                bail!("rank 0 at {at} does not hold this rank's KVXFER_TOKEN (it could not prove it); is --coordinator the right host?");
            }
            members
        }
        Ok(Wire::Error { message }) => bail!("rank 0 at {at}: {}", crate::console::printable(&message)),
        Ok(other) => bail!("rank 0 at {at} answered {} instead of the rank table", other.name()),
        Err(e) => return Err(member_recv_error(e, &at, cfg.timeout, "the rank table")),
    };
    check_table(&members, cfg.info.world_size, &at)?;
    let links = Links::Member { stream, coordinator: at };
    Ok(Group { rank: cfg.info.rank, members, timeout: cfg.timeout, links, barriers: 0 })
}

/// Connect to rank 0, trying again while nothing listens there yet (srun and mpirun start all ranks at once, so
/// rank 0 may not be listening yet). Says once on stderr that it is waiting.
fn connect_with_retry(at: &str, deadline: Instant) -> Result<TcpStream> {
    let mut said = false;
    let mut pause = Duration::from_millis(20);
    loop {
        // Resolve on every attempt: a name may not resolve until the coordinator's node is up.
        let addrs: Vec<SocketAddr> = at.to_socket_addrs().map(|a| a.collect()).unwrap_or_default();
        let mut last = anyhow!("{at} does not resolve to an address");
        for addr in &addrs {
            let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
            match TcpStream::connect_timeout(addr, left.min(CONNECT_ATTEMPT)) {
                Ok(stream) => {
                    stream.set_nodelay(true)?;
                    return Ok(stream);
                }
                Err(e) => last = e.into(),
            }
        }
        if Instant::now() >= deadline {
            bail!("rank 0 did not listen at {at} within the rendezvous timeout (last attempt: {last}); is rank 0 running, and is {at} its address (--coordinator)?");
        }
        if !said {
            crate::errln!("waiting for rank 0 at {at}");
            said = true;
        }
        std::thread::sleep(pause.min(deadline.saturating_duration_since(Instant::now())));
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}

fn member_recv_error(e: RecvError, at: &str, timeout: Duration, waiting_for: &str) -> anyhow::Error {
    if e.is_closed() {
        anyhow!("rank 0 (coordinator at {at}) closed the connection while this rank waited for {waiting_for}; it failed or was killed")
    } else if matches!(e, RecvError::Frame(crate::control::frame::FrameError::TimedOut)) {
        anyhow!("no answer from rank 0 at {at} within {:.0} s (waiting for {waiting_for})", timeout.as_secs_f64())
    } else {
        anyhow!("rank 0 at {at}: {e} (waiting for {waiting_for})")
    }
}

/// The table must list ranks 0..N, each once, in order.
fn check_table(members: &[Member], world_size: usize, at: &str) -> Result<()> {
    let ranks_in_order = members.iter().enumerate().all(|(i, m)| m.rank == i);
    if members.len() != world_size || !ranks_in_order {
        bail!(
            "rank 0 at {at} sent a table of {} ranks that does not list ranks 0..{world_size} in order",
            members.len()
        );
    }
    Ok(())
}

impl Group {
    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn world_size(&self) -> usize {
        self.members.len()
    }

    /// Every rank, in rank order (the same table on every rank).
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// How long barriers and gatherings wait for the slowest rank from now on (the rendezvous timeout until set):
    /// a cluster run's step may take far longer than the ranks took to meet.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// Send `payload` to rank 0. Rank 0 gets every rank's, in rank order (its own first); the others get None and
    /// do not wait. A rank that left fails rank 0 here, naming it; the others learn of it at their next barrier.
    pub fn gather(&mut self, payload: Json) -> Result<Option<Vec<Json>>> {
        self.barriers += 1;
        let seq = self.barriers;
        let timeout = self.timeout;
        match &mut self.links {
            Links::Coordinator(links) => {
                let rest = coordinator::gather_payloads(links, seq, timeout)?;
                Ok(Some(std::iter::once(payload).chain(rest).collect()))
            }
            Links::Member { stream, coordinator } => {
                wire::send(stream, &Wire::Gather { seq, payload })
                    .map_err(|e| anyhow!("rank 0 at {coordinator}: {e} (sending results to rank 0)"))?;
                Ok(None)
            }
        }
    }

    /// Rank 0: fail the group now, telling every other rank `message` (each fails at its next barrier with it).
    /// Other ranks: nothing (rank 0 decides).
    pub fn abort(&mut self, message: &str) {
        if let Links::Coordinator(links) = &mut self.links {
            coordinator::tell_everyone(std::mem::take(links), message);
        }
    }

    /// Return once every rank has called `barrier` as often as this one. Fails, on every rank, when a rank leaves
    /// (named with its host) or some rank does not arrive within the rendezvous timeout (the missing ranks named).
    pub fn barrier(&mut self) -> Result<()> {
        self.barriers += 1;
        let seq = self.barriers;
        let timeout = self.timeout;
        match &mut self.links {
            Links::Coordinator(links) => coordinator::barrier(links, seq, timeout),
            Links::Member { stream, coordinator } => {
                wire::send(stream, &Wire::Barrier { seq })
                    .map_err(|e| anyhow!("rank 0 at {coordinator}: {e} (entering barrier {seq})"))?;
                stream.set_read_timeout(Some(timeout))?;
                let what = format!("barrier {seq}");
                match wire::recv(stream) {
                    Ok(Wire::Barrier { seq: got }) if got == seq => Ok(()),
                    Ok(Wire::Error { message }) => {
                        bail!("rank 0 at {coordinator}: {}", crate::console::printable(&message))
                    }
                    Ok(other) => bail!("rank 0 at {coordinator} answered {} in {what}", other.name()),
                    Err(e) => Err(member_recv_error(e, coordinator, timeout, &what)),
                }
            }
        }
    }
}
