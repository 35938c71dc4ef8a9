//! A session's TCP data port: its own thread accepts from the moment the port is bound, so strangers never sit in
//! the listen backlog ahead of the sender's streams (a full backlog drops the sender's SYNs, and the sender connects
//! before it tells the receiver to look). Each accepted connection must present its stream index and that stream's
//! proof under the session key (`auth::data_proof`) within the handshake deadline; until then it is only watched, so
//! a silent or trickling stranger costs the real streams nothing. Strangers are dropped, the oldest waiting one first
//! when too many wait at once; each index is taken once.

use super::HELLO_LEN;
use crate::control::auth::{data_proof_matches, SessionKey};
use crate::control::peer::HANDSHAKE_DEADLINE;
use anyhow::{bail, Context as _, Result};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::io::{ErrorKind, Read};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::Instant;

/// Connections that have not proved themselves yet, at most: past it the oldest is cut (the sender's own streams
/// present their proof as they connect, so they never wait long enough to be the oldest of this many).
const MAX_WAITING: usize = 256;

/// How long the door thread sleeps in `poll` before looking whether the port was closed.
const POLL_MS: u16 = 50;

/// A session's data port, with its door thread; closing it (dropping) ends the thread and the listener.
pub struct DataPort {
    port: u16,
    want: usize,
    taken: Vec<TcpStream>,
    from_door: Receiver<std::io::Result<TcpStream>>,
    closed: Arc<AtomicBool>,
}

impl DataPort {
    /// Bind a port on `ip` for `streams` data connections of the session keyed `key`, and start accepting.
    pub fn open(ip: IpAddr, key: SessionKey, streams: u32) -> Result<DataPort> {
        let listener = TcpListener::bind(SocketAddr::new(ip, 0))
            .with_context(|| format!("cannot open a TCP data port on {ip}"))?;
        let port = listener.local_addr()?.port();
        listener.set_nonblocking(true)?;
        let (to_taker, from_door) = mpsc::channel();
        let closed = Arc::new(AtomicBool::new(false));
        let door = Door { listener, key, taken: vec![false; streams as usize], waiting: Vec::new(), to_taker };
        let flag = closed.clone();
        std::thread::Builder::new().name("kvxfer-tcp-door".into()).spawn(move || door.run(&flag))?;
        Ok(DataPort { port, want: streams as usize, taken: Vec::new(), from_door, closed })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The session's data connections (blocking, in the order they proved themselves), once all have; `who` (the
    /// peer, as errors name it) is told it was late at `deadline`.
    pub fn take(&mut self, deadline: Instant, who: &str) -> Result<Vec<TcpStream>> {
        while self.taken.len() < self.want {
            match self.from_door.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(Ok(s)) => self.taken.push(s),
                Ok(Err(e)) => return Err(e).context("accepting a TCP data connection"),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => bail!(
                    "{who} opened {} of {} TCP data connections within --io-timeout",
                    self.taken.len(),
                    self.want
                ),
            }
        }
        let s = std::mem::take(&mut self.taken);
        s.iter().try_for_each(|c| c.set_nonblocking(false))?;
        Ok(s)
    }
}

impl Drop for DataPort {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::Relaxed);
    }
}

/// The door thread's state: the listener, and the connections accepted but not yet proved.
struct Door {
    listener: TcpListener,
    key: SessionKey,
    taken: Vec<bool>,
    waiting: Vec<Waiting>,
    to_taker: Sender<std::io::Result<TcpStream>>,
}

struct Waiting {
    conn: TcpStream,
    got: Vec<u8>,
    since: Instant,
}

impl Door {
    /// Accept and sort connections until every stream is taken, the port is closed or its owner is gone.
    fn run(mut self, closed: &AtomicBool) {
        while self.taken.contains(&false) && !closed.load(Ordering::Relaxed) {
            if let Err(e) = self.accept_all() {
                let _ = self.to_taker.send(Err(e));
                return;
            }
            if !self.sort_waiting() {
                return;
            }
            if self.taken.contains(&false) {
                self.wait_readable();
            }
        }
    }

    /// Take every connection the backlog holds now; each is read at once, as the sender's own bring their proof.
    fn accept_all(&mut self) -> std::io::Result<()> {
        loop {
            match self.listener.accept() {
                Ok((conn, _)) => {
                    conn.set_nonblocking(true)?;
                    if self.waiting.len() >= MAX_WAITING {
                        self.waiting.remove(0);
                    }
                    self.waiting.push(Waiting { conn, got: Vec::with_capacity(HELLO_LEN), since: Instant::now() });
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                // A connection reset while in the backlog, or out of fds for a moment: not the port's end.
                Err(e) if matches!(e.kind(), ErrorKind::ConnectionAborted | ErrorKind::Interrupted) => {}
                Err(e) if e.raw_os_error().is_some_and(|n| n == nix::libc::EMFILE || n == nix::libc::ENFILE) => {
                    // Out of descriptors: the strangers held are what uses them; let the oldest go.
                    if self.waiting.is_empty() {
                        return Err(e);
                    }
                    self.waiting.remove(0);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Read what each waiting connection sent; hand a proved stream over, drop a stranger. False once the taker
    /// is gone.
    fn sort_waiting(&mut self) -> bool {
        let mut i = 0;
        while i < self.waiting.len() {
            let w = &mut self.waiting[i];
            let mut chunk = [0u8; HELLO_LEN];
            let want = HELLO_LEN - w.got.len();
            let done = match w.conn.read(&mut chunk[..want]) {
                Ok(0) => true, // closed before proving anything
                Ok(n) => {
                    w.got.extend_from_slice(&chunk[..n]);
                    w.got.len() == HELLO_LEN
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => w.since.elapsed() > HANDSHAKE_DEADLINE,
                Err(e) if e.kind() == ErrorKind::Interrupted => false,
                Err(_) => true,
            };
            if !done {
                i += 1;
                continue;
            }
            let w = self.waiting.swap_remove(i);
            if w.got.len() < HELLO_LEN {
                continue;
            }
            let index = u32::from_le_bytes(w.got[..4].try_into().expect("4 bytes"));
            let fresh = self.taken.get(index as usize) == Some(&false);
            if fresh && data_proof_matches(&self.key, index, &w.got[4..]) {
                self.taken[index as usize] = true;
                if self.to_taker.send(Ok(w.conn)).is_err() {
                    return false;
                }
            }
            // Anything else is not our sender's: dropped, and the port keeps waiting.
        }
        true
    }

    /// Sleep until the listener or a waiting connection has something, or a short while passed.
    fn wait_readable(&self) {
        let mut fds: Vec<PollFd> = std::iter::once(self.listener.as_fd())
            .chain(self.waiting.iter().map(|w| w.conn.as_fd()))
            .map(|fd| PollFd::new(fd, PollFlags::POLLIN))
            .collect();
        let _ = poll(&mut fds, PollTimeout::from(POLL_MS));
    }
}
