//! Rank 0's side of the rendezvous: listen on the coordinator's port, collect one `Join` per other rank, send the
//! table; then release barriers. One thread polls the listener and every connection, so a rank whose connection
//! closes is noticed while rank 0 still waits for others, and every remaining rank is told why at once.

use super::group::{Group, Link, Links, Member, RendezvousConfig};
use super::wire::{self, Wire};
use crate::control::auth::{self, Nonces, NONCE_LEN};
use anyhow::{anyhow, bail, Context, Result};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

/// How long one message may take to arrive once its first byte has (a rank that connects and stalls mid-message
/// must not hold up the others for the whole rendezvous timeout).
const MESSAGE_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest single wait in poll: bounds how late the deadline is noticed.
const POLL_SLICE_MS: u16 = 1000;

/// Rank 0: wait until every other rank joined, then send everyone the table. On failure every rank already
/// connected is told the reason before this returns it.
pub(super) fn gather(cfg: &RendezvousConfig) -> Result<Group> {
    let listener = listen(cfg)?;
    let mut state = Gathering {
        cfg,
        joined: (0..cfg.info.world_size).map(|_| None).collect(),
        proofs: vec![String::new(); cfg.info.world_size],
        refused: Vec::new(),
    };
    let outcome = state.run(&listener).and_then(|()| state.send_table());
    let links: Vec<Link> = state.joined.into_iter().flatten().map(|(link, _)| link).collect();
    match outcome {
        Ok(members) => {
            Ok(Group { rank: 0, members, timeout: cfg.timeout, links: Links::Coordinator(links), barriers: 0 })
        }
        Err(e) => {
            tell_everyone(links, &format!("{e:#}"));
            Err(e)
        }
    }
}

fn listen(cfg: &RendezvousConfig) -> Result<TcpListener> {
    if let Some(listener) = cfg.coordinator.bound.take() {
        listener.set_nonblocking(true)?;
        return Ok(listener);
    }
    let port = cfg.coordinator.port;
    // All addresses (dual-stack where IPv6 exists): rank 0 does not know which of its names the others resolve.
    let listener = TcpListener::bind(("::", port)).or_else(|_| TcpListener::bind(("0.0.0.0", port))).map_err(|e| {
        anyhow!(
            "rank 0 cannot listen on port {port} for the rendezvous ({e}); choose another with --coordinator HOST:PORT"
        )
    })?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

struct Gathering<'a> {
    cfg: &'a RendezvousConfig,
    /// By rank; rank 0 (this one) stays None.
    joined: Vec<Option<(Link, Member)>>,
    /// By rank: rank 0's proof for that rank's nonces, sent with the table.
    proofs: Vec<String>,
    /// Connections turned away (wrong token, not kvxfer), for the timeout's message.
    refused: Vec<String>,
}

impl Gathering<'_> {
    fn run(&mut self, listener: &TcpListener) -> Result<()> {
        let deadline = Instant::now() + self.cfg.timeout;
        // Accepted connections, each with the nonce it was challenged with, until their Join arrives.
        let mut pending: Vec<(TcpStream, [u8; NONCE_LEN])> = Vec::new();
        loop {
            let missing: Vec<usize> = (1..self.joined.len()).filter(|r| self.joined[*r].is_none()).collect();
            if missing.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!("{}", self.missing_message(&missing));
            }
            let joined_ranks: Vec<usize> = (1..self.joined.len()).filter(|r| self.joined[*r].is_some()).collect();
            let ready = {
                let mut fds = vec![PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
                fds.extend(pending.iter().map(|(s, _)| PollFd::new(s.as_fd(), PollFlags::POLLIN)));
                fds.extend(self.joined.iter().flatten().map(|(l, _)| PollFd::new(l.stream.as_fd(), PollFlags::POLLIN)));
                wait_ready(&mut fds, deadline)?
            };
            let (listener_ready, rest) = ready.split_first().expect("the listener is polled");
            let (pending_ready, joined_ready) = rest.split_at(pending.len());
            if let Some(pos) = joined_ready.iter().position(|r| *r) {
                let rank = joined_ranks[pos];
                let link = self.link(rank);
                bail!("{}", early_message(&mut link.stream, rank, &link.host));
            }
            for i in (0..pending.len()).rev().filter(|i| pending_ready[*i]) {
                let (stream, challenge) = pending.swap_remove(i);
                self.admit(stream, challenge)?;
            }
            if *listener_ready {
                accept_all(listener, &mut pending)?;
            }
        }
    }

    fn link(&mut self, rank: usize) -> &mut Link {
        &mut self.joined[rank].as_mut().expect("a joined rank").0
    }

    /// Read a new connection's `Join` and check it. A stranger (closed, not kvxfer, wrong token) is turned away
    /// and noted; an inconsistent rank (wrong world size, duplicate rank) fails the rendezvous.
    fn admit(&mut self, mut stream: TcpStream, challenge: [u8; NONCE_LEN]) -> Result<()> {
        let from = stream.peer_addr().map(|a| a.ip().to_string()).unwrap_or_else(|_| "?".into());
        let Ok(Wire::Join(join)) = wire::recv(&mut stream) else {
            self.refused.push(format!("a connection from {from} that did not join"));
            return Ok(());
        };
        let wire::Join { magic, protocol, nonce, proof, rank, world_size, local_rank, host, addr, numa } = join;
        let refuse = |stream: &mut TcpStream, message: String| {
            let _ = wire::send(stream, &Wire::Error { message: message.clone() });
            message
        };
        if magic != wire::MAGIC || protocol != wire::PROTOCOL {
            let why = format!("rank {rank} on {host} speaks rendezvous protocol {protocol}, rank 0 speaks {}; run the same kvxfer on every rank", wire::PROTOCOL);
            bail!(refuse(&mut stream, why));
        }
        let nonces = auth::parse_nonce(&nonce).map(|sender| Nonces { sender, receiver: challenge });
        let proven =
            nonces.as_ref().is_some_and(|n| auth::proof_matches(&auth::sender_proof(&self.cfg.token, n), &proof));
        let (true, Some(nonces)) = (proven, nonces) else {
            let why = "wrong token; every rank needs rank 0's KVXFER_TOKEN".to_string();
            self.refused.push(format!("rank {rank} on {host}: {}", refuse(&mut stream, why)));
            return Ok(());
        };
        let size = self.joined.len();
        if world_size != size {
            bail!(refuse(
                &mut stream,
                format!(
                    "rank {rank} on {host} was launched with a world size of {world_size}, rank 0 on {} with {size}",
                    self.cfg.host
                )
            ));
        }
        if rank == 0 || rank >= size {
            bail!(refuse(&mut stream, format!("two processes claim rank 0: {} and {host}", self.cfg.host)));
        }
        if let Some((first, _)) = &self.joined[rank] {
            let why = format!(
                "rank {rank} joined twice: from {} and from {host}; check the launcher's environment",
                first.host
            );
            bail!(refuse(&mut stream, why));
        }
        let member = Member { rank, local_rank, host: host.clone(), addr, numa };
        // Rank 0, the ranks in before this one, and this one.
        let ranks_in = 2 + self.joined.iter().filter(|j| j.is_some()).count();
        // A progress line per rank: a launch that hangs here shows who is missing (and tests wait on it).
        crate::errln!("rendezvous: rank {rank} joined from {host} ({ranks_in} of {size} ranks in)");
        self.joined[rank] = Some((Link { rank, host, stream }, member));
        self.proofs[rank] = hex::encode(auth::receiver_proof(&self.cfg.token, &nonces));
        Ok(())
    }

    fn missing_message(&self, missing: &[usize]) -> String {
        let list: Vec<String> = missing.iter().map(usize::to_string).collect();
        let mut text = format!(
            "rendezvous at {}: rank{} {} of {} did not join within {:.0} s",
            self.cfg.coordinator,
            if missing.len() == 1 { "" } else { "s" },
            list.join(", "),
            self.joined.len(),
            self.cfg.timeout.as_secs_f64()
        );
        if !self.refused.is_empty() {
            text += &format!(" (turned away: {})", self.refused.join("; "));
        }
        text
    }

    /// Everyone joined: the table (rank 0 first), sent to every rank.
    fn send_table(&mut self) -> Result<Vec<Member>> {
        let first_link = self.joined.iter().flatten().next();
        // Rank 0 advertises the address the others reached it on; alone, the coordinator's host.
        let ip = first_link.and_then(|(link, _)| link.stream.local_addr().ok()).map(|a| a.ip());
        let addr = match ip {
            Some(ip) => SocketAddr::new(unmap(ip), self.cfg.listen_port).to_string(),
            None => format!("{}:{}", self.cfg.coordinator.host, self.cfg.listen_port),
        };
        let me = Member {
            rank: 0,
            local_rank: self.cfg.info.local_rank,
            host: self.cfg.host.clone(),
            addr,
            numa: self.cfg.numa,
        };
        let members: Vec<Member> =
            std::iter::once(me).chain(self.joined.iter().flatten().map(|(_, m)| m.clone())).collect();
        for (link, _) in self.joined.iter_mut().flatten() {
            let proof = self.proofs[link.rank].clone();
            wire::send(&mut link.stream, &Wire::Table { members: members.clone(), proof })
                .map_err(|e| anyhow!("rank {} on {} left before it got the table ({e})", link.rank, link.host))?;
        }
        Ok(members)
    }
}

/// An IPv4 peer on a dual-stack socket shows as ::ffff:a.b.c.d; the others should see a.b.c.d.
fn unmap(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

/// Accept every waiting connection and challenge it with a fresh nonce (a connection that cannot take the few
/// bytes is dropped: it is not a rank waiting to join).
fn accept_all(listener: &TcpListener, pending: &mut Vec<(TcpStream, [u8; NONCE_LEN])>) -> Result<()> {
    loop {
        match listener.accept() {
            Ok((mut stream, _)) => {
                stream.set_nonblocking(false)?;
                stream.set_nodelay(true)?;
                stream.set_read_timeout(Some(MESSAGE_TIMEOUT))?;
                stream.set_write_timeout(Some(MESSAGE_TIMEOUT))?;
                let challenge = auth::nonce()?;
                if wire::send(&mut stream, &Wire::Challenge { nonce: hex::encode(challenge) }).is_ok() {
                    pending.push((stream, challenge));
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == ErrorKind::Interrupted || e.kind() == ErrorKind::ConnectionAborted => {}
            Err(e) => return Err(e).context("accepting a rank's connection"),
        }
    }
}

/// Poll until something is readable or the deadline (at most [`POLL_SLICE_MS`]); which of `fds` are ready.
fn wait_ready(fds: &mut [PollFd], deadline: Instant) -> Result<Vec<bool>> {
    let left = deadline.saturating_duration_since(Instant::now()).as_millis().min(POLL_SLICE_MS as u128) as u16;
    match poll(fds, PollTimeout::from(left)) {
        Ok(_) | Err(nix::errno::Errno::EINTR) => {}
        Err(e) => return Err(e).context("poll on the rendezvous connections"),
    }
    Ok(fds.iter().map(|f| f.revents().is_some_and(|r| !r.is_empty())).collect())
}

/// A joined rank's connection became readable when it should be silent: it closed (died) or misbehaved.
fn early_message(stream: &mut TcpStream, rank: usize, host: &str) -> String {
    match wire::recv(stream) {
        Err(e) if e.is_closed() => {
            format!("rank {rank} on {host} left before the rendezvous completed: its connection closed (the process died or gave up)")
        }
        Err(e) => format!("rank {rank} on {host}: {e}"),
        Ok(msg) => format!("rank {rank} on {host} sent {} before the rank table", msg.name()),
    }
}

/// Best effort: tell every connected rank why the group failed, so each fails now with the same reason.
pub(super) fn tell_everyone(links: Vec<Link>, message: &str) {
    for mut link in links {
        let _ = wire::send(&mut link.stream, &Wire::Error { message: message.to_string() });
    }
}

/// Rank 0's side of a barrier: wait for `Barrier{seq}` from every rank, then release them all.
pub(super) fn barrier(links: &mut Vec<Link>, seq: u64, timeout: Duration) -> Result<()> {
    let outcome = arrive_all(links, seq, timeout, Collective::Barrier).and_then(|_| release(links, seq));
    if let Err(e) = &outcome {
        tell_everyone(std::mem::take(links), &format!("{e:#}"));
    }
    outcome
}

/// Rank 0's side of a gathering: one `Gather{seq}` payload from every other rank, in rank order. Nobody is
/// released: the ranks go on, and the next barrier carries rank 0's error if a rank left.
pub(super) fn gather_payloads(links: &mut Vec<Link>, seq: u64, timeout: Duration) -> Result<Vec<serde_json::Value>> {
    let outcome = arrive_all(links, seq, timeout, Collective::Gather);
    if let Err(e) = &outcome {
        tell_everyone(std::mem::take(links), &format!("{e:#}"));
    }
    outcome
}

/// What rank 0 waits for from every rank.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Collective {
    Barrier,
    Gather,
}

impl Collective {
    fn name(self, seq: u64) -> String {
        match self {
            Collective::Barrier => format!("barrier {seq}"),
            Collective::Gather => format!("gathering {seq} (results to rank 0)"),
        }
    }
}

/// Wait until every rank sent its message of `seq`: the payloads (null for a barrier), by link. Fails naming the
/// rank whose connection closed, or the ranks missing at the timeout.
fn arrive_all(links: &mut [Link], seq: u64, timeout: Duration, kind: Collective) -> Result<Vec<serde_json::Value>> {
    let what = kind.name(seq);
    let deadline = Instant::now() + timeout;
    let mut arrived: Vec<Option<serde_json::Value>> = vec![None; links.len()];
    while let Some(first_missing) = arrived.iter().position(Option::is_none) {
        if Instant::now() >= deadline {
            let missing: Vec<String> = links
                .iter()
                .zip(&arrived)
                .filter(|(_, a)| a.is_none())
                .map(|(l, _)| format!("{} on {}", l.rank, l.host))
                .collect();
            bail!(
                "{what}: rank{} {} did not arrive within {:.0} s",
                if missing.len() == 1 { "" } else { "s" },
                missing.join(", "),
                timeout.as_secs_f64()
            );
        }
        let waiting: Vec<usize> = (first_missing..links.len()).filter(|i| arrived[*i].is_none()).collect();
        let ready = {
            let mut fds: Vec<PollFd> =
                waiting.iter().map(|i| PollFd::new(links[*i].stream.as_fd(), PollFlags::POLLIN)).collect();
            wait_ready(&mut fds, deadline)?
        };
        for (i, _) in waiting.iter().zip(ready).filter(|(_, r)| *r) {
            let link = &mut links[*i];
            match wire::recv(&mut link.stream) {
                Ok(Wire::Barrier { seq: got }) if got == seq && kind == Collective::Barrier => {
                    arrived[*i] = Some(serde_json::Value::Null)
                }
                Ok(Wire::Gather { seq: got, payload }) if got == seq && kind == Collective::Gather => {
                    arrived[*i] = Some(payload)
                }
                Err(e) if e.is_closed() => bail!(
                    "rank {} on {} left during {what}: its connection closed (the process died or gave up)",
                    link.rank,
                    link.host
                ),
                Err(e) => bail!("rank {} on {}: {e} (in {what})", link.rank, link.host),
                Ok(msg) => bail!("rank {} on {} sent {} in {what}", link.rank, link.host, msg.name()),
            }
        }
    }
    Ok(arrived.into_iter().map(|a| a.expect("every rank arrived")).collect())
}

fn release(links: &mut [Link], seq: u64) -> Result<()> {
    for link in links.iter_mut() {
        wire::send(&mut link.stream, &Wire::Barrier { seq })
            .map_err(|e| anyhow!("rank {} on {} left during barrier {seq} ({e})", link.rank, link.host))?;
    }
    Ok(())
}
