//! Rank 0's side of the rendezvous: listen on the coordinator's port, collect one `Join` per other rank, send the
//! table; then release barriers. One thread polls the listener and every connection, so a rank whose connection
//! closes is noticed while rank 0 still waits for others, and every remaining rank is told why at once.

use super::admission::{self, missing_ranks, Pending, Progress, Refusal, TurnedAway, MAX_PENDING};
use super::group::{Group, Link, Links, Member, RendezvousConfig};
use super::wire::{self, JoinDecode, Wire};
use crate::console::printable;
use crate::control::auth::{self, Nonces};
use crate::measure::Json;
use anyhow::{anyhow, bail, Context, Result};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

/// How long one message may take to arrive once its first byte has, from a rank that has joined (a rank that
/// stalls mid-message must not hold up the others for the whole rendezvous timeout).
const MESSAGE_TIMEOUT: Duration = Duration::from_secs(5);
/// Up to this world size rank 0 says each rank's arrival; above, every tenth of them.
const PER_RANK_LINES_UP_TO: usize = 16;
/// Longest single wait in poll: bounds how late the deadline is noticed.
const POLL_SLICE_MS: u16 = 1000;

/// Rank 0: wait until every other rank joined, then send everyone the table. On failure every rank already
/// connected is told the reason before this returns it.
pub(super) fn gather(cfg: &RendezvousConfig) -> Result<Group> {
    let listener = listen(cfg)?;
    let mut state = Gathering { cfg, joined: BTreeMap::new(), turned_away: TurnedAway::default() };
    let outcome = state.run(&listener).and_then(|()| state.send_table());
    // In rank order: the map's order.
    let links: Vec<Link> = state.joined.into_values().map(|j| j.link).collect();
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

/// A rank that joined: its connection, its row of the table, and rank 0's proof for its nonces (sent with the
/// table).
struct Joined {
    link: Link,
    member: Member,
    proof: String,
}

struct Gathering<'a> {
    cfg: &'a RendezvousConfig,
    /// The ranks in so far, by rank: one entry per rank that joined, never one per rank that might.
    joined: BTreeMap<usize, Joined>,
    turned_away: TurnedAway,
}

impl Gathering<'_> {
    fn run(&mut self, listener: &TcpListener) -> Result<()> {
        let deadline = Instant::now() + self.cfg.timeout;
        // Accepted connections whose Join has not arrived whole, oldest first.
        let mut pending: Vec<Pending> = Vec::new();
        loop {
            if self.joined.len() + 1 >= self.cfg.info.world_size {
                if self.turned_away.count() > 0 {
                    let n = self.turned_away.count();
                    crate::errln!(
                        "rendezvous: every rank joined; {n} connection{} turned away (not ranks of this run)",
                        if n == 1 { " was" } else { "s were" }
                    );
                }
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                bail!("{}", self.missing_message());
            }
            pending = self.cut_slow(pending, now);
            // Wake for the first pending connection's deadline too, so a slow one is cut on time.
            let wake = pending.iter().map(|p| p.deadline).fold(deadline, Instant::min);
            let joined_ranks: Vec<usize> = self.joined.keys().copied().collect();
            let ready = {
                let mut fds = vec![PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
                fds.extend(pending.iter().map(|p| PollFd::new(p.stream.as_fd(), PollFlags::POLLIN)));
                fds.extend(self.joined.values().map(|j| PollFd::new(j.link.stream.as_fd(), PollFlags::POLLIN)));
                wait_ready(&mut fds, wake)?
            };
            let (listener_ready, rest) = ready.split_first().expect("the listener is polled");
            let (pending_ready, joined_ready) = rest.split_at(pending.len());
            if let Some(pos) = joined_ready.iter().position(|r| *r) {
                let link = &mut self.joined.get_mut(&joined_ranks[pos]).expect("a joined rank").link;
                bail!("{}", early_message(&mut link.stream, link.rank, &link.host));
            }
            pending = self.read_pending(pending, pending_ready)?;
            if *listener_ready {
                self.accept_all(listener, &mut pending)?;
            }
        }
    }

    /// Turn away the pending connections past their deadline.
    fn cut_slow(&mut self, pending: Vec<Pending>, now: Instant) -> Vec<Pending> {
        let (slow, kept): (Vec<Pending>, Vec<Pending>) = pending.into_iter().partition(|p| now >= p.deadline);
        for p in slow {
            self.turned_away.add(&p.from, Refusal::Slow { got: p.received() });
        }
        kept
    }

    /// Read the ready pending connections without waiting; admit or turn away those whose first message is whole.
    fn read_pending(&mut self, pending: Vec<Pending>, ready: &[bool]) -> Result<Vec<Pending>> {
        let mut kept = Vec::with_capacity(pending.len());
        for (mut p, ready) in pending.into_iter().zip(ready) {
            if !*ready {
                kept.push(p);
                continue;
            }
            match p.read_some() {
                Progress::Waiting | Progress::Done(JoinDecode::Incomplete { .. }) => kept.push(p),
                Progress::Closed => self.turned_away.add(&p.from, Refusal::Closed),
                Progress::Done(JoinDecode::Refused(why)) => self.turned_away.add(&p.from, Refusal::NotAJoin(why)),
                Progress::Done(JoinDecode::Join(join)) => self.admit(p, *join)?,
            }
        }
        Ok(kept)
    }

    /// Accept every waiting connection and challenge it with a fresh nonce (a connection that cannot take the few
    /// bytes is dropped: it is not a rank waiting to join). Past [`MAX_PENDING`] waiting, the oldest is cut.
    fn accept_all(&mut self, listener: &TcpListener, pending: &mut Vec<Pending>) -> Result<()> {
        loop {
            match listener.accept() {
                Ok((mut stream, _)) => {
                    stream.set_nonblocking(true)?;
                    stream.set_nodelay(true)?;
                    let challenge = auth::nonce()?;
                    // A few dozen bytes into a fresh socket's buffer: never blocks.
                    if wire::send(&mut stream, &Wire::Challenge { nonce: hex::encode(challenge) }).is_ok() {
                        if pending.len() >= MAX_PENDING {
                            let oldest = pending.remove(0);
                            self.turned_away.add(&oldest.from, Refusal::Crowded);
                        }
                        pending.push(Pending::new(stream, challenge, Instant::now()));
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted || e.kind() == ErrorKind::ConnectionAborted => {}
                Err(e) => return Err(e).context("accepting a rank's connection"),
            }
        }
    }

    /// Check a whole Join: its proof first. One that fails it is turned away and counted, whatever it claims. A
    /// proven one speaks for a rank of this run: another protocol, world size or rank numbering fails the
    /// rendezvous, naming what differs.
    fn admit(&mut self, pending: Pending, join: wire::Join) -> Result<()> {
        let Pending { mut stream, challenge, from, .. } = pending;
        let nonces = auth::parse_nonce(&join.nonce).map(|sender| Nonces { sender, receiver: challenge });
        let proven =
            nonces.as_ref().is_some_and(|n| auth::proof_matches(&auth::sender_proof(&self.cfg.token, n), &join.proof));
        let (true, Some(nonces)) = (proven, nonces) else {
            // A real rank given another token learns why; a stranger learns nothing it did not send.
            let why = "wrong token; every rank needs rank 0's KVXFER_TOKEN".to_string();
            let _ = wire::send(&mut stream, &Wire::Error { message: why });
            self.turned_away.add(&from, Refusal::wrong_token(&join));
            return Ok(());
        };
        if join.magic != wire::MAGIC {
            self.turned_away.add(&from, Refusal::WrongMagic { magic: printable(&join.magic) });
            return Ok(());
        }
        let host = printable(&join.host);
        let size = self.cfg.info.world_size;
        if let Some(why) = self.inconsistency(&join, &host) {
            let _ = wire::send(&mut stream, &Wire::Error { message: why.clone() });
            bail!(why);
        }
        let rank = join.rank;
        // Rank 0, the ranks in before this one, and this one.
        let ranks_in = 2 + self.joined.len();
        // A progress line per rank in a small run (a launch that hangs here shows who is missing; tests wait on
        // it); past a few dozen ranks a line per tenth of them, which is what a reader of a log follows.
        if size <= PER_RANK_LINES_UP_TO || ranks_in % size.div_ceil(10) == 0 || ranks_in == size {
            crate::errln!("rendezvous: rank {rank} joined from {host} ({ranks_in} of {size} ranks in)");
        }
        // Joined ranks are read only after poll says so, with a bound per message.
        stream.set_nonblocking(false)?;
        stream.set_read_timeout(Some(MESSAGE_TIMEOUT))?;
        stream.set_write_timeout(Some(MESSAGE_TIMEOUT))?;
        let wire::Join { local_rank, host: raw_host, addr, numa, .. } = join;
        let member = Member { rank, local_rank, host: raw_host, addr, numa };
        let proof = hex::encode(auth::receiver_proof(&self.cfg.token, &nonces));
        self.joined.insert(rank, Joined { link: Link { rank, host, stream }, member, proof });
        Ok(())
    }

    /// What is wrong with a proven Join, if anything: each mistake named for itself (`host` is its escaped host).
    fn inconsistency(&self, join: &wire::Join, host: &str) -> Option<String> {
        let (rank, size, me) = (join.rank, self.cfg.info.world_size, &self.cfg.host);
        let why = if join.protocol != wire::PROTOCOL {
            format!(
                "rank {rank} on {host} speaks rendezvous protocol {}, rank 0 on {me} speaks {}; run the same kvxfer on every rank",
                join.protocol,
                wire::PROTOCOL
            )
        } else if join.world_size != size {
            format!(
                "rank {rank} on {host} was launched with a world size of {}, rank 0 on {me} with {size}",
                join.world_size
            )
        } else if rank == 0 {
            format!("two processes claim rank 0: {me} and {host}; check the launcher's environment")
        } else if rank >= size {
            format!(
                "{host} claims rank {rank}, not below the world size {size} (ranks are 0-{}); check the launcher's environment",
                size - 1
            )
        } else if let Some(first) = self.joined.get(&rank) {
            format!(
                "rank {rank} joined twice: from {} and from {host}; check the launcher's environment",
                first.link.host
            )
        } else {
            return None;
        };
        Some(why)
    }

    fn missing_message(&self) -> String {
        let size = self.cfg.info.world_size;
        let (count, list) = missing_ranks(self.joined.keys().copied(), size);
        format!(
            "rendezvous at {}: rank{} {list} of {size} did not join within {:.0} s{}",
            self.cfg.coordinator,
            if count == 1 { "" } else { "s" },
            self.cfg.timeout.as_secs_f64(),
            self.turned_away.suffix()
        )
    }

    /// Everyone joined: the table (rank 0 first), sent to every rank.
    fn send_table(&mut self) -> Result<Vec<Member>> {
        let first_link = self.joined.values().next();
        // Rank 0 advertises the address the others reached it on; alone, the coordinator's host.
        let ip = first_link.and_then(|j| j.link.stream.local_addr().ok()).map(|a| a.ip());
        let addr = match ip {
            Some(ip) => SocketAddr::new(admission::unmap(ip), self.cfg.listen_port).to_string(),
            None => format!("{}:{}", self.cfg.coordinator.host, self.cfg.listen_port),
        };
        let me = Member {
            rank: 0,
            local_rank: self.cfg.info.local_rank,
            host: self.cfg.host.clone(),
            addr,
            numa: self.cfg.numa,
        };
        let members: Vec<Member> = std::iter::once(me).chain(self.joined.values().map(|j| j.member.clone())).collect();
        for j in self.joined.values_mut() {
            let (link, proof) = (&mut j.link, j.proof.clone());
            wire::send(&mut link.stream, &Wire::Table { members: members.clone(), proof })
                .map_err(|e| anyhow!("rank {} on {} left before it got the table ({e})", link.rank, link.host))?;
        }
        Ok(members)
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
pub(super) fn gather_payloads(links: &mut Vec<Link>, seq: u64, timeout: Duration) -> Result<Vec<Json>> {
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
fn arrive_all(links: &mut [Link], seq: u64, timeout: Duration, kind: Collective) -> Result<Vec<Json>> {
    let what = kind.name(seq);
    let deadline = Instant::now() + timeout;
    let mut arrived: Vec<Option<Json>> = vec![None; links.len()];
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
                    arrived[*i] = Some(Json::Null)
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
