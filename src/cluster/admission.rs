//! Rank 0's door: connections that have not proven they hold the token yet. Each is read without blocking, a
//! little at a time, into a buffer no larger than a Join may be, and must deliver its whole Join within a few
//! seconds of being accepted; whatever fails that, or the proof, is turned away and counted, never fatal. So a
//! stranger (a port scanner, a trickler, a replayed Join, another kvxfer) costs the real ranks nothing and cannot
//! end the run.

use super::wire::{self, JoinDecode, NotAJoin};
use crate::console::printable;
use std::io::{ErrorKind, Read};
use std::net::{IpAddr, TcpStream};
use std::time::{Duration, Instant};

/// How long a new connection has, from accept, to deliver its whole Join. A rank sends it the moment it has the
/// Challenge; a stranger trickling bytes is cut here, whatever the rendezvous timeout.
pub(super) const JOIN_DEADLINE: Duration = Duration::from_secs(5);
/// Connections waiting to present their Join; past this many the oldest is cut, so strangers holding sockets open
/// cannot exhaust rank 0's descriptors.
pub(super) const MAX_PENDING: usize = 64;
/// Turned-away connections described one by one (on stderr and in the timeout's message); past this, counted.
const LISTED: usize = 8;
/// Runs of missing ranks listed in the timeout's message before the rest is counted.
const MISSING_RANGES_LISTED: usize = 24;

/// An accepted connection, challenged with `challenge`, whose Join has not arrived whole yet.
pub(super) struct Pending {
    pub stream: TcpStream,
    pub challenge: [u8; crate::control::auth::NONCE_LEN],
    /// The peer's IP, for the line that turns it away.
    pub from: String,
    pub deadline: Instant,
    received: Vec<u8>,
}

/// What a read left a pending connection at.
pub(super) enum Progress {
    /// More to come.
    Waiting,
    /// Its first message is complete (or refused as soon as its length arrived).
    Done(JoinDecode),
    /// The peer closed the connection (or it failed) before its Join was complete.
    Closed,
}

impl Pending {
    /// `stream` must be non-blocking.
    pub fn new(stream: TcpStream, challenge: [u8; crate::control::auth::NONCE_LEN], now: Instant) -> Pending {
        let from = stream.peer_addr().map(|a| unmap(a.ip()).to_string()).unwrap_or_else(|_| "?".into());
        Pending { stream, challenge, from, deadline: now + JOIN_DEADLINE, received: Vec::new() }
    }

    /// Read what has arrived, never more than the Join's own length says, and never waiting.
    pub fn read_some(&mut self) -> Progress {
        let mut chunk = [0u8; 1024];
        loop {
            let wanted = match wire::decode_join(&self.received) {
                JoinDecode::Incomplete { wanted } => wanted,
                decoded => return Progress::Done(decoded),
            };
            let n = (wanted - self.received.len()).min(chunk.len());
            match (&self.stream).read(&mut chunk[..n]) {
                Ok(0) => return Progress::Closed,
                Ok(got) => self.received.extend_from_slice(&chunk[..got]),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Progress::Waiting,
                Err(_) => return Progress::Closed,
            }
        }
    }

    /// Bytes received so far (for the line that cuts a slow one).
    pub fn received(&self) -> usize {
        self.received.len()
    }
}

/// An IPv4 peer on a dual-stack socket shows as ::ffff:a.b.c.d; the others should see a.b.c.d.
pub(super) fn unmap(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

/// Why a connection was turned away. Peer text is escaped and cut (`console::printable`) before it gets here.
pub(super) enum Refusal {
    /// Closed before its Join was complete.
    Closed,
    /// No complete Join within [`JOIN_DEADLINE`]; `got` bytes of it.
    Slow {
        got: usize,
    },
    /// Cut, oldest first, when more than [`MAX_PENDING`] connections were waiting to join.
    Crowded,
    NotAJoin(NotAJoin),
    /// Its Join's proof is not this run's token's for this connection: a stranger, a rank given another token,
    /// a Join captured elsewhere and replayed, or another kvxfer (which proves differently). What it claimed
    /// follows, as its word only.
    WrongToken {
        host: String,
        magic: Option<String>,
        protocol: Option<u32>,
    },
    /// Proven, but not a kvxfer rank (another program holding the token).
    WrongMagic {
        magic: String,
    },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Closed => f.write_str("it closed before sending a whole Join"),
            Refusal::Slow { got } => {
                write!(f, "no whole Join within {} s of connecting ({got} bytes of it)", JOIN_DEADLINE.as_secs())
            }
            Refusal::Crowded => write!(f, "cut as the oldest of more than {MAX_PENDING} connections waiting to join"),
            Refusal::NotAJoin(why) => write!(f, "it {why}"),
            Refusal::WrongToken { host, magic, protocol } => {
                write!(f, "its proof does not match this run's KVXFER_TOKEN (it calls itself \"{host}\"")?;
                if let Some(magic) = magic {
                    write!(f, ", is not kvxfer: magic \"{magic}\"")?;
                }
                if let Some(protocol) = protocol {
                    write!(f, ", speaks rendezvous protocol {protocol}, rank 0 speaks {}", wire::PROTOCOL)?;
                }
                f.write_str(")")
            }
            Refusal::WrongMagic { magic } => write!(f, "it is not a kvxfer rank (magic \"{magic}\")"),
        }
    }
}

impl Refusal {
    /// A Join whose proof failed: what it claimed, escaped, with what differs from this kvxfer's rendezvous.
    pub fn wrong_token(join: &wire::Join) -> Refusal {
        Refusal::WrongToken {
            host: printable(&join.host),
            magic: (join.magic != wire::MAGIC).then(|| printable(&join.magic)),
            protocol: (join.protocol != wire::PROTOCOL).then_some(join.protocol),
        }
    }
}

/// The connections turned away: counted, the first few described.
#[derive(Default)]
pub(super) struct TurnedAway {
    count: usize,
    listed: Vec<String>,
}

impl TurnedAway {
    /// Count one, and say so on stderr while few have been (a flood of strangers is counted, not listed).
    pub fn add(&mut self, from: &str, why: Refusal) {
        self.count += 1;
        if self.listed.len() < LISTED {
            let text = format!("{from}: {why}");
            crate::errln!("rendezvous: turned away a connection from {text}");
            self.listed.push(text);
        } else if self.count == LISTED + 1 {
            crate::errln!("rendezvous: turning away more connections; counting them from here, not listing them");
        }
    }

    pub fn count(&self) -> usize {
        self.count
    }

    /// For the timeout's message: " (turned away N connections: …)", or nothing when none was.
    pub fn suffix(&self) -> String {
        if self.count == 0 {
            return String::new();
        }
        let more = self.count - self.listed.len();
        let more = if more > 0 { format!("; … ({more} more)") } else { String::new() };
        let plural = if self.count == 1 { "" } else { "s" };
        format!(" (turned away {} connection{plural}: {}{more})", self.count, self.listed.join("; "))
    }
}

/// The ranks in `1..size` that are not in `joined` (ascending), as runs ("1-3, 7, 9-19999"): how many are
/// missing, and the text, its first runs listed and the ranks of the rest counted. Costs one entry per run of
/// missing ranks, never one per possible rank.
pub(super) fn missing_ranks(joined: impl Iterator<Item = usize>, size: usize) -> (usize, String) {
    let mut runs = Vec::new();
    let mut next = 1;
    for r in joined.chain(std::iter::once(size)) {
        if r > next {
            runs.push((next, r - 1));
        }
        next = next.max(r + 1);
    }
    let len = |(a, b): &(usize, usize)| b - a + 1;
    let count = runs.iter().map(len).sum();
    let mut text: Vec<String> = runs
        .iter()
        .take(MISSING_RANGES_LISTED)
        .map(|&(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") })
        .collect();
    let rest: usize = runs.iter().skip(MISSING_RANGES_LISTED).map(len).sum();
    if rest > 0 {
        text.push(format!("… ({rest} more)"));
    }
    (count, text.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_ranks_are_runs_cut_after_a_few_dozen() {
        assert_eq!(missing_ranks([].into_iter(), 20000), (19999, "1-19999".to_string()));
        assert_eq!(missing_ranks([1, 2, 4].into_iter(), 6), (2, "3, 5".to_string()));
        assert_eq!(missing_ranks([1, 2].into_iter(), 3), (0, String::new()));
        let every_other = (2..1000).step_by(2);
        let (count, text) = missing_ranks(every_other, 1000);
        assert_eq!(count, 500);
        assert!(text.starts_with("1, 3, 5,") && text.ends_with(", … (476 more)"), "{text}");
    }

    #[test]
    fn a_join_is_read_from_its_length_alone_until_whole() {
        let frame = |body: &[u8]| [&(body.len() as u32).to_be_bytes()[..], body].concat();
        assert!(matches!(wire::decode_join(&[0, 0]), JoinDecode::Incomplete { wanted: 4 }));
        assert!(matches!(
            wire::decode_join(&(1u32 << 20).to_be_bytes()),
            JoinDecode::Refused(NotAJoin::TooLarge(1_048_576))
        ));
        let f = frame(b"{\"type\":\"Barrier\",\"seq\":1}");
        assert!(matches!(wire::decode_join(&f[..10]), JoinDecode::Incomplete { wanted } if wanted == f.len()));
        assert!(matches!(wire::decode_join(&f), JoinDecode::Refused(NotAJoin::OtherMessage("Barrier"))));
        let other = frame(br#"{"type":"Join","magic":"kvxfer-cluster","protocol":3,"rank":[]}"#);
        assert!(matches!(wire::decode_join(&other), JoinDecode::Refused(NotAJoin::OtherProtocol(3))));
        let JoinDecode::Refused(NotAJoin::Garbled(why)) = wire::decode_join(&frame(b"\x1b[31m\nforged")) else {
            panic!("garbage is garbled")
        };
        assert!(!why.chars().any(char::is_control), "{why:?}");
    }
}
