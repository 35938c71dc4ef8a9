//! `kvxfer serve`: the receiver's accept loop. Each connection gets its own thread for the handshake (a complete,
//! small Hello within five seconds; at most 64 handshakes at once, the oldest cut first), so strangers that connect
//! and stay silent, or trickle bytes, cannot hold a real sender out. `--max-sessions` runs at a time (one by
//! default): a further authenticated sender is told at once that serve is busy and with whom, and reps that
//! overlapped another run are marked in the results. A failed session is reported and serving goes on; with
//! `--once`, the first kvxfer sender's session (or failed handshake) ends serve with its exit code. An
//! authenticated sender holds its slot only while it starts a run: one that sends no Config within 10 s of its
//! handshake is told so and the slot is given back (others are told meanwhile whom it is reserved by, and how long
//! it has been idle).

use super::common::{bind, device_choice};
use crate::cli::ServeArgs;
use crate::control::peer::is_stranger;
use crate::control::Msg;
use crate::run::receiver::{authenticate, run_session, ReceiverLimits, RunGauge};
use crate::transport;
use anyhow::{anyhow, Context, Result};
use std::collections::VecDeque;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

pub fn run(a: ServeArgs) -> Result<()> {
    let addr: SocketAddr = a
        .listen
        .parse()
        .map_err(|_| crate::error::usage(format!("--listen {:?}: expected ADDR:PORT like 0.0.0.0:18515", a.listen)))?;
    let token = a.token.clone().unwrap_or_default();
    let place = format!("--listen {addr}");
    crate::control::auth::check_token(&place, addr.ip().is_loopback(), &token, "--token T or KVXFER_TOKEN")?;
    let gauge = Arc::new(RunGauge::default());
    let limits = ReceiverLimits {
        max_size: a.max_size,
        max_streams: a.max_streams.max(1),
        timeouts: crate::control::Timeouts { connect: a.connect_timeout, io: a.io_timeout },
        mem: a.mem,
        device: device_choice(&a.device)?,
        shares_process: false,
        gauge: Some(gauge.clone()),
    };
    if limits.mem != crate::mem::MemKind::Host {
        crate::mem::cuda::driver().map_err(|e| e.context(format!("--mem {}", limits.mem)))?;
    }
    for t in transport::registry::all() {
        t.check_devices(&limits.device)?;
    }
    let listener = bind(addr)?;
    // The port bound, when --listen asked for any (:0).
    let addr = listener.local_addr().unwrap_or(addr);
    crate::errln!(
        "kvxfer serve: listening on {addr} (transports: {}{})",
        <crate::plan::TransportKind as crate::named::Named>::NAMES.join(", "),
        if a.max_sessions > 1 { format!("; up to {} runs at once", a.max_sessions) } else { String::new() }
    );
    let shared = Arc::new(Shared {
        token,
        limits,
        pending: Mutex::new(VecDeque::new()),
        running: Mutex::new(Vec::new()),
        gauge,
        max_sessions: a.max_sessions,
        // A sender silent mid-session is given up on after --io-timeout: one that never started, no later.
        config_idle: a.config_idle.min(a.io_timeout),
    });
    let (done_tx, done_rx) = mpsc::channel::<Result<()>>();
    let once = a.once;
    let accepting = std::thread::Builder::new().name("kvxfer-accept".into()).spawn(move || -> Result<()> {
        let mut next_id = 0u64;
        loop {
            let (stream, peer) = listener.accept().map_err(|e| anyhow!("accepting a sender on {addr}: {e}"))?;
            next_id += 1;
            shared.admit(next_id, &stream);
            let (shared, done) = (shared.clone(), done_tx.clone());
            let id = next_id;
            let spawned = std::thread::Builder::new()
                .name("kvxfer-session".into())
                .spawn(move || shared.handle(id, stream, peer, once, &done));
            if let Err(e) = spawned {
                crate::errln!("error: sender {peer}: cannot start a thread for it: {e}");
            }
        }
    })?;
    // Without --once, serve until the accept loop fails; with it, until the first sender's session ends.
    match done_rx.recv() {
        Ok(outcome) => outcome,
        Err(_) => accepting.join().unwrap_or_else(|_| Err(anyhow!("the accept loop panicked"))),
    }
}

/// Connections still in their handshake are cut, oldest first, past this many: strangers holding sockets open
/// cannot keep a real sender out.
const MAX_PENDING: usize = 64;

struct Shared {
    token: String,
    limits: ReceiverLimits,
    /// Connections in their handshake, oldest first (a clone of each socket, to cut it).
    pending: Mutex<VecDeque<(u64, TcpStream)>>,
    /// The senders holding a run slot, at most `max_sessions`.
    running: Mutex<Vec<Slot>>,
    /// The same runs, counted for the reps' `shared_runs` (also in `limits`).
    gauge: Arc<RunGauge>,
    max_sessions: u32,
    /// How long an authenticated sender may hold a slot before its Config starts to arrive.
    config_idle: Duration,
}

/// A run slot and who holds it: reserved from the handshake until the sender's Config starts to arrive, running
/// after.
struct Slot {
    id: u64,
    peer: SocketAddr,
    reserved_at: Instant,
    running: bool,
}

impl Shared {
    fn admit(&self, id: u64, stream: &TcpStream) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if pending.len() >= MAX_PENDING {
            if let Some((_, oldest)) = pending.pop_front() {
                let _ = oldest.shutdown(Shutdown::Both);
            }
        }
        if let Ok(clone) = stream.try_clone() {
            pending.push_back((id, clone));
        }
    }

    fn handshake_over(&self, id: u64) {
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).retain(|(i, _)| *i != id);
    }

    /// One connection: its handshake, then its run if no other is in progress. With `once`, the first connection
    /// that presented a kvxfer Hello reports its outcome on `done`.
    fn handle(&self, id: u64, stream: TcpStream, peer: SocketAddr, once: bool, done: &mpsc::Sender<Result<()>>) {
        // A second handle on the socket, to see the sender's Config start to arrive without reading it.
        let watch = stream.try_clone();
        let auth = authenticate(stream, &self.token, &self.limits);
        self.handshake_over(id);
        let mut ch = match auth {
            Ok(ch) => ch,
            Err(e) if is_stranger(&e) => {
                crate::errln!("error: sender {peer}: {e:#}");
                return;
            }
            // With --once, main reports the error (once) as this process's own.
            Err(e) if once => {
                let _ = done.send(Err(e).with_context(|| format!("sender {peer}")));
                return;
            }
            Err(e) => {
                crate::errln!("error: sender {peer}: {e:#}");
                return;
            }
        };
        let entry = {
            let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
            match self.gauge.enter(self.max_sessions) {
                Some(entry) => {
                    running.push(Slot { id, peer, reserved_at: Instant::now(), running: false });
                    entry
                }
                None => {
                    let _ = ch.send(&Msg::Error { message: busy_message(&running, self.config_idle) });
                    crate::errln!("error: sender {peer}: refused, busy with {}", addresses(&running));
                    return;
                }
            }
        };
        crate::errln!("sender connected from {peer}");
        let outcome = match watch.map_err(anyhow::Error::from).and_then(|w| self.await_config(id, &w)) {
            Ok(()) => run_session(ch, &self.limits),
            Err(e) => {
                ch.send_error(&e);
                Err(e)
            }
        };
        drop(entry);
        self.running.lock().unwrap_or_else(|e| e.into_inner()).retain(|s| s.id != id);
        match &outcome {
            Ok(()) => crate::errln!("sender {peer}: run complete"),
            // With --once, main reports the error (once) as this process's own.
            Err(e) if !once => crate::errln!("error: sender {peer}: {e:#}"),
            Err(_) => {}
        }
        if once {
            let _ = done.send(outcome.with_context(|| format!("sender {peer}")));
        }
    }
}

impl Shared {
    /// Wait until the sender in slot `id` starts to send (its Config, or a close), at most `config_idle`; then mark
    /// its slot running. A sender still silent is refused, and its slot given back.
    fn await_config(&self, id: u64, watch: &TcpStream) -> Result<()> {
        if !readable_within(watch, self.config_idle)? {
            anyhow::bail!(
                "sent no Config within {} of its handshake; the run slot it held is given back (connect when ready to run)",
                humantime::format_duration(self.config_idle)
            );
        }
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = running.iter_mut().find(|s| s.id == id) {
            slot.running = true;
        }
        Ok(())
    }
}

/// Whether `stream` has something to read (data, or the peer's close) within `limit`.
fn readable_within(stream: &TcpStream, limit: Duration) -> Result<bool> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ms = PollTimeout::try_from(left.min(Duration::from_secs(30))).unwrap_or(PollTimeout::MAX);
        let mut fds = [PollFd::new(stream.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, ms) {
            Ok(0) if left.is_zero() => return Ok(false),
            Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
            Ok(_) => return Ok(true),
            Err(e) => return Err(anyhow!("waiting for the sender's Config: {e}")),
        }
    }
}

/// What a sender refused for want of a free run slot is told: "busy:" first (senders retry on it), and whose runs;
/// a slot whose sender has not started its run yet is named as reserved, with how long it has been idle and when
/// it is given back.
fn busy_message(running: &[Slot], config_idle: Duration) -> String {
    let idle = |s: &Slot| s.reserved_at.elapsed().as_secs();
    let limit = config_idle.as_secs_f64();
    match running {
        [one] if one.running => format!("busy: one run in progress from {}; try again when it ends", one.peer.ip()),
        [one] => format!(
            "busy: reserved by {}, idle {} s (given back after {limit} s without a run); try again",
            one.peer.ip(),
            idle(one)
        ),
        _ => {
            let hosts: Vec<String> = running
                .iter()
                .map(|s| match s.running {
                    true => s.peer.ip().to_string(),
                    false => format!("{} reserved, idle {} s", s.peer.ip(), idle(s)),
                })
                .collect();
            format!("busy: {} runs in progress (from {}); try again when one ends", hosts.len(), hosts.join(", "))
        }
    }
}

fn addresses(running: &[Slot]) -> String {
    running.iter().map(|s| s.peer.to_string()).collect::<Vec<_>>().join(", ")
}
