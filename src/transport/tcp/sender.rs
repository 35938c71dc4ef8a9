//! The sender's half: one writer and one ack-reader thread per connection, frames spread round-robin.

use super::choice::{self, combo_name, Combo, Rate};
use super::frame::{frames, send_frame, SPLICE_MIN_WRITE};
use super::splice::SplicePipe;
use super::{data_error, need_host_memory, word, Offer, RecvPath, SendPath, ACK_LEN};
use crate::mem::Buffer;
use crate::plan::{RunConfig, Write};
use crate::transport::{Context, Source, TransferHooks, TransferTimes, TransportDetail};
use anyhow::{anyhow, bail, Context as _, Result};
use std::io::{Read, Write as _};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub struct TcpSource {
    conns: Vec<TcpStream>,
    /// One zero-copy pipe per connection (None: none could be made, or `KVXFER_TCP_SPLICE=0` asked for none).
    pipes: Vec<Option<SplicePipe>>,
    /// Which paths large writes take on both ends, and why.
    paths: PathChoice,
    io_timeout: Duration,
    /// What [`Source::prepare`] needs to send calibration frames: the run's block size and the receiver's region.
    block_size: u64,
    region_len: u64,
    /// The receiver's data address, for errors that name it.
    peer: SocketAddr,
    /// This transfer's tag (see [`TAG_SHIFT`]): never 0, so an ack the receiver sent before any frame matches none.
    tag: u64,
}

/// A frame header's first word carries the transfer's tag above the first write index; the receiver echoes the word
/// in its ack, so an ack left over from an earlier transfer (a duplicate, or one sent before any frame) cannot be
/// taken for one of this transfer's. Write indexes stay below 2^40 (a plan holds at most 16 Mi writes).
const TAG_SHIFT: u32 = 40;
const INDEX_MASK: u64 = (1 << TAG_SHIFT) - 1;

/// The next transfer's tag: 1 to 2^24 - 1, round and round.
fn next_tag(tag: u64) -> u64 {
    (tag % ((1 << (64 - TAG_SHIFT)) - 1)) + 1
}

/// `transport_detail` of a tcp run: the send and receive paths and how they were chosen.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TcpDetail {
    pub sender: TcpSenderDetail,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct TcpSenderDetail {
    pub streams: usize,
    pub send: SendPath,
    pub send_choice: ChosenBy,
    /// Both send paths' calibration rates (over the receive path kept), when measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub send_gbps: Option<SendRates>,
    /// How the receiver lands large frames (absent in results written before kvxfer chose it: direct).
    pub recv: RecvPath,
    pub recv_choice: ChosenBy,
    /// Both receive paths' calibration rates (over the send path kept), when measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recv_gbps: Option<RecvRates>,
    /// Every combination the calibration measured, `"send+recv"` → GB/s (median of its trials).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub calibration_gbps: std::collections::BTreeMap<String, f64>,
    /// Why these paths, in one line (the calibration's verdict, or what forced them).
    pub path_reason: String,
}

/// Calibration rates of both send paths, GB/s.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct SendRates {
    pub splice: f64,
    pub write: f64,
}

/// Calibration rates of both receive paths, GB/s.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct RecvRates {
    pub direct: f64,
    pub bounce: f64,
}

/// The send and receive paths and how each was chosen. `KVXFER_TCP_SPLICE=0|1` forces the send path and
/// `KVXFER_TCP_RECV=direct|bounce` the receive path; otherwise a short calibration at connection time measures the
/// candidates over this very connection and keeps one other than plain writes landing directly only on clear
/// evidence (see `choice`): which is faster depends on the machine (splice 1.03× iperf3 on one 2-core VM, 0.58× on
/// another; the bounce receive path 1.35–1.5× direct on one, 0.8× on another), and plain writes landing directly
/// varied least from run to run where measured.
#[derive(Debug, Clone)]
struct PathChoice {
    send: SendPath,
    send_how: ChosenBy,
    recv: RecvPath,
    recv_how: ChosenBy,
    /// Calibration medians (GB/s) of each combination measured.
    rates: Vec<(SendPath, RecvPath, f64)>,
    /// Why these paths (see [`TcpSenderDetail::path_reason`]).
    reason: String,
}

impl PathChoice {
    fn rate(&self, send: SendPath, recv: RecvPath) -> Option<f64> {
        self.rates.iter().find(|r| r.0 == send && r.1 == recv).map(|r| r.2)
    }
}

/// Why a path was taken; serialized as `transport_detail.sender.send_choice` / `recv_choice`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum ChosenBy {
    /// Measured at connection time (still pending until `prepare` has run).
    #[serde(rename = "calibration")]
    Calibration,
    #[serde(rename = "KVXFER_TCP_SPLICE")]
    Environment,
    #[serde(rename = "KVXFER_TCP_RECV")]
    RecvEnvironment,
    /// The kernel gave no pipe to splice through.
    #[serde(rename = "no pipe")]
    NoPipe,
    /// The receiver's region or the buffer is smaller than a spliced write, so nothing would splice.
    #[serde(rename = "small writes")]
    SmallWrites,
    /// The receiver's region or the buffer is too small for trials that tell the paths apart (see
    /// [`CALIBRATION_MIN_BYTES`]): the default stays.
    #[serde(rename = "short trials")]
    ShortTrials,
}

/// Calibration: each trial sends this much (or the region, if smaller) and each combination of paths gets this
/// many trials, interleaved, after one untimed trial that faults in both buffers. Six, not the five a switch needs
/// at least, so the median's [min, max] interval covers 96.9% (five: 93.75%).
const CALIBRATION_BYTES: u64 = 64 << 20;
const CALIBRATION_ROUNDS: usize = 6;
/// Shortest trial that may decide the paths. Trials of a few MiB last about a millisecond, less than one scheduling
/// hiccup of a busy host, so their medians differ by noise: on a loaded 2-core machine 1 MiB trials picked
/// write+bounce at "1.61×" in one session and write+direct in the next of the same run. The paths differ in per-byte
/// costs (copies, page references), which only trials this long measure.
const CALIBRATION_MIN_BYTES: u64 = 16 << 20;
/// Stop calibrating after the first round when a round takes longer than this (a slow link).
const CALIBRATION_BUDGET: Duration = Duration::from_secs(1);

/// Whether a calibration that kept `kept` should say so: the first of this process, and one that kept other paths
/// than the last one said. A sweep's sessions and a cluster rank's flows each calibrate, mostly to the same verdict,
/// and every case's results record its own paths and rates.
fn say_paths(kept: Combo) -> bool {
    static SAID: std::sync::Mutex<Option<Combo>> = std::sync::Mutex::new(None);
    let mut said = SAID.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    said.replace(kept) != Some(kept)
}

/// `KVXFER_TCP_SPLICE` and `KVXFER_TCP_RECV`, when set.
fn forced_paths() -> Result<(Option<SendPath>, Option<RecvPath>)> {
    let send = forced(
        "KVXFER_TCP_SPLICE",
        &[("0", SendPath::Write), ("1", SendPath::Splice)],
        "give 0 (plain writes) or 1 (zero-copy splice)",
    )?;
    let recv = forced(
        "KVXFER_TCP_RECV",
        &[("direct", RecvPath::Direct), ("bounce", RecvPath::Bounce)],
        "give direct (the kernel copies into the region) or bounce (through a cached buffer and streaming stores)",
    )?;
    Ok((send, recv))
}

/// The value environment variable `var` forces, among `choices`; a usage error naming `hint` for anything else.
fn forced<T: Copy>(var: &str, choices: &[(&str, T)], hint: &str) -> Result<Option<T>> {
    let Ok(given) = std::env::var(var) else { return Ok(None) };
    match choices.iter().find(|(name, _)| *name == given) {
        Some((_, v)) => Ok(Some(*v)),
        None => Err(crate::error::usage(format!(
            "{var}={given:?}: {hint}, or unset it to let kvxfer measure which is faster"
        ))),
    }
}

impl TcpSource {
    pub fn connect(cfg: &RunConfig, buf: &Buffer, offer: serde_json::Value, ctx: &Context) -> Result<TcpSource> {
        need_host_memory(buf, "the sender")?;
        let offer: Offer = serde_json::from_value(offer).context("the receiver's TCP offer is malformed")?;
        let key = ctx.session_key.ok_or_else(|| anyhow!("no session key: the control handshake did not run"))?;
        let addr = SocketAddr::new(ctx.peer_ip, offer.data_port);
        let (forced_send, forced_recv) = forced_paths()?;
        let mut conns = Vec::new();
        for stream in 0..cfg.knobs.streams {
            let mut s = TcpStream::connect_timeout(&addr, ctx.timeouts.connect)
                .with_context(|| format!("cannot open a TCP data connection to {addr}; is that port reachable?"))?;
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(ctx.timeouts.io))?;
            s.set_write_timeout(Some(ctx.timeouts.io))?;
            s.write_all(&stream.to_le_bytes())?;
            s.write_all(&crate::control::auth::data_proof(&key, stream))?;
            conns.push(s);
        }
        let pipes: Vec<Option<SplicePipe>> =
            conns.iter().map(|_| if forced_send == Some(SendPath::Write) { None } else { SplicePipe::new() }).collect();
        let (send, send_how) = match forced_send {
            Some(SendPath::Splice) if pipes.iter().any(Option::is_none) => {
                crate::errln!("note: KVXFER_TCP_SPLICE=1 but this kernel gives no pipe to splice through; sending with plain writes");
                (SendPath::Write, ChosenBy::NoPipe)
            }
            Some(path) => (path, ChosenBy::Environment),
            None if pipes.iter().any(Option::is_none) => (SendPath::Write, ChosenBy::NoPipe),
            // Decided by `prepare`, once the receiver reads the data connections.
            None => (SendPath::Write, ChosenBy::Calibration),
        };
        let (recv, recv_how) = match forced_recv {
            Some(path) => (path, ChosenBy::RecvEnvironment),
            None => (RecvPath::Direct, ChosenBy::Calibration),
        };
        let mut paths = PathChoice { send, send_how, recv, recv_how, rates: Vec::new(), reason: String::new() };
        paths.reason = forced_reason(&paths);
        Ok(TcpSource {
            conns,
            pipes,
            paths,
            io_timeout: ctx.timeouts.io,
            block_size: cfg.knobs.block_size,
            region_len: offer.region_len,
            peer: addr,
            tag: 0,
        })
    }

    /// Send `bytes` of `mem` into the start of the receiver's region along `send` / `recv` and return the rate
    /// (GB/s).
    fn calibration_trial(
        &mut self,
        mem: &Buffer,
        bytes: u64,
        block: u64,
        (send, recv): (SendPath, RecvPath),
    ) -> Result<f64> {
        let writes = crate::plan::TransferPlan::contiguous(bytes, block).writes;
        (self.paths.send, self.paths.recv) = (send, recv);
        let mut hooks = TransferHooks { done: &mut |_, _, _| {}, peer_failed: &mut || false };
        let t = self.transfer(mem, &writes, &mut hooks)?;
        let secs = t.last_complete.saturating_duration_since(t.first_post).as_secs_f64().max(1e-9);
        Ok(bytes as f64 / secs / 1e9)
    }

    /// The combinations of paths still open to calibration: each side's own path when it was fixed by the
    /// environment or the kernel, both otherwise. The default comes first: plain writes landing directly, or as
    /// close to it as what is fixed allows.
    fn candidates(&self) -> Vec<Combo> {
        let open = |how: ChosenBy| how == ChosenBy::Calibration;
        let sends: &[SendPath] =
            if open(self.paths.send_how) { &[SendPath::Write, SendPath::Splice] } else { &[self.paths.send] };
        let recvs: &[RecvPath] =
            if open(self.paths.recv_how) { &[RecvPath::Direct, RecvPath::Bounce] } else { &[self.paths.recv] };
        recvs.iter().flat_map(|&r| sends.iter().map(move |&s| (s, r))).collect()
    }
}

enum Event {
    /// A frame `(first write, count)` started leaving.
    Posted(usize, usize, Instant),
    /// The receiver acknowledged the frame `(first write, count)`.
    Acked(u64, u64, Instant),
    Failed(anyhow::Error),
}

impl Source for TcpSource {
    fn answer(&self) -> serde_json::Value {
        serde_json::json!({ "streams": self.conns.len() })
    }

    fn describe(&self) -> TransportDetail {
        // A pipe the kernel refused mid-run is dropped: those connections write.
        let p = &self.paths;
        let send = if self.pipes.iter().all(Option::is_some) { p.send } else { SendPath::Write };
        let send_gbps = p
            .rate(SendPath::Splice, p.recv)
            .zip(p.rate(SendPath::Write, p.recv))
            .map(|(splice, write)| SendRates { splice, write });
        let recv_gbps = p
            .rate(p.send, RecvPath::Direct)
            .zip(p.rate(p.send, RecvPath::Bounce))
            .map(|(direct, bounce)| RecvRates { direct, bounce });
        TransportDetail::of(&TcpDetail {
            sender: TcpSenderDetail {
                streams: self.conns.len(),
                send,
                send_choice: p.send_how,
                send_gbps,
                recv: p.recv,
                recv_choice: p.recv_how,
                recv_gbps,
                calibration_gbps: p.rates.iter().map(|&(s, r, g)| (combo_name((s, r)), g)).collect(),
                path_reason: p.reason.clone(),
            },
        })
    }

    /// Calibrate the paths (see [`PathChoice`]): interleaved trials of each open combination over the real
    /// connections into the receiver's region, before any rep (the receiver counts bytes only for an armed rep, and
    /// every rep rewrites the region).
    fn prepare(&mut self, mem: &Buffer) -> Result<()> {
        let candidates = self.candidates();
        if candidates.len() < 2 {
            return Ok(());
        }
        let bytes = CALIBRATION_BYTES.min(self.region_len).min(mem.len() as u64);
        if bytes < CALIBRATION_MIN_BYTES {
            // Writes under SPLICE_MIN_WRITE never splice nor bounce; trials this short cannot tell the paths apart.
            let by = if bytes < SPLICE_MIN_WRITE { ChosenBy::SmallWrites } else { ChosenBy::ShortTrials };
            for how in [&mut self.paths.send_how, &mut self.paths.recv_how] {
                if *how == ChosenBy::Calibration {
                    *how = by;
                }
            }
            self.paths.reason = forced_reason(&self.paths);
            return Ok(());
        }
        let streams = self.conns.len() as u64;
        let block = self.block_size.min(bytes / streams).max(SPLICE_MIN_WRITE);
        let started = Instant::now();
        self.calibration_trial(mem, bytes, block, candidates[0])?;
        let mut trials: Vec<Vec<f64>> = vec![Vec::new(); candidates.len()];
        for _ in 0..CALIBRATION_ROUNDS {
            let round = Instant::now();
            for (k, &c) in candidates.iter().enumerate() {
                trials[k].push(self.calibration_trial(mem, bytes, block, c)?);
            }
            if round.elapsed() > CALIBRATION_BUDGET {
                break;
            }
        }
        let rates: Vec<(Combo, Rate)> =
            candidates.iter().zip(&trials).filter_map(|(&c, t)| Some((c, Rate::from_trials(t)?))).collect();
        // The trials left the last combination in place; without a rate for the default it stays.
        (self.paths.send, self.paths.recv) = candidates[0];
        let Some((&default, others)) = rates.split_first().filter(|(d, _)| d.0 == candidates[0]) else {
            return Ok(());
        };
        let (kept, why) = choice::choose(default, others);
        (self.paths.send, self.paths.recv) = kept;
        let forced = forced_reason(&self.paths);
        let reason = if forced.is_empty() { why } else { format!("{why}; {forced}") };
        if say_paths(kept) {
            crate::noteln!(
                "tcp paths: send {}, receive {}: {reason} (trials of {} each, {:.0} ms; KVXFER_TCP_SPLICE=0|1 and KVXFER_TCP_RECV=direct|bounce force them)",
                kept.0.name(),
                kept.1.name(),
                crate::plan::sizes::format_size(bytes),
                started.elapsed().as_secs_f64() * 1e3
            );
        }
        self.paths.rates = rates.iter().map(|&((s, r), rate)| (s, r, rate.median)).collect();
        self.paths.reason = reason;
        Ok(())
    }

    fn transfer(&mut self, mem: &Buffer, writes: &[Write], hooks: &mut TransferHooks) -> Result<TransferTimes> {
        let streams = self.conns.len();
        let (tx, rx) = mpsc::channel::<Event>();
        // The source's bytes as a raw region: the kernel reads them (writev, vmsplice), Rust code never does.
        let data = mem.host_region().expect("checked when the source connected");
        let frames = frames(writes);
        self.tag = next_tag(self.tag);
        let tag = self.tag << TAG_SHIFT;
        // Each writer thread owns its connection's pipe for the transfer (none on the plain-write path).
        let mut pipes = std::mem::take(&mut self.pipes);
        let mut no_pipes: Vec<Option<SplicePipe>> = pipes.iter().map(|_| None).collect();
        let recv = self.paths.recv;
        let in_use = if self.paths.send == SendPath::Splice { &mut pipes } else { &mut no_pipes };
        let result = std::thread::scope(|scope| -> Result<TransferTimes> {
            for (k, (conn, pipe)) in self.conns.iter().zip(in_use.iter_mut()).enumerate() {
                let mine: Vec<(usize, usize)> = frames.iter().copied().skip(k).step_by(streams).collect();
                if mine.is_empty() {
                    continue;
                }
                let (tx_w, tx_a) = (tx.clone(), tx.clone());
                let mut w = conn.try_clone()?;
                let mut r = conn.try_clone()?;
                let expected_acks = mine.len();
                scope.spawn(move || {
                    for (first, count) in mine {
                        let _ = tx_w.send(Event::Posted(first, count, Instant::now()));
                        let word = tag | first as u64;
                        if let Err(e) = send_frame(&mut w, pipe, recv, data, &writes[first..first + count], word) {
                            let _ = tx_w.send(Event::Failed(data_error("the receiver", e)));
                            return;
                        }
                    }
                });
                scope.spawn(move || {
                    for _ in 0..expected_acks {
                        let mut ack = [0u8; ACK_LEN];
                        match r.read_exact(&mut ack) {
                            Ok(()) => {
                                let _ = tx_a.send(Event::Acked(word(&ack, 0), word(&ack, 1), Instant::now()));
                            }
                            Err(e) => {
                                let _ = tx_a.send(Event::Failed(data_error("the receiver", e)));
                                return;
                            }
                        }
                    }
                });
            }
            drop(tx);
            let mut first_post: Option<Instant> = None;
            let mut last = None;
            let mut acked = 0usize;
            let mut posted: Vec<Option<Instant>> = vec![None; writes.len()];
            let mut seen = vec![false; writes.len()];
            while acked < writes.len() {
                let ev = rx.recv_timeout(self.io_timeout).unwrap_or_else(|_| {
                    Event::Failed(anyhow!("no acknowledgement from the receiver within --io-timeout"))
                });
                match ev {
                    Event::Posted(first, count, t) => {
                        posted[first..first + count].fill(Some(t));
                        first_post = Some(first_post.map_or(t, |f| f.min(t)));
                    }
                    Event::Acked(word, count, t) => {
                        if let Err(why) = outstanding(word, count, tag, &posted, &seen) {
                            self.abort();
                            bail!(
                                "the receiver at {} (data port {}) acknowledged {why}; is it a kvxfer receiver?",
                                self.peer.ip(),
                                self.peer.port()
                            );
                        }
                        let (i, n) = ((word & INDEX_MASK) as usize, count as usize);
                        for j in i..i + n {
                            seen[j] = true;
                            (hooks.done)(j, posted[j].unwrap_or(t), t);
                        }
                        acked += n;
                        last = Some(t);
                    }
                    Event::Failed(e) => {
                        // Unblock the other threads of this transfer before the scope joins them.
                        self.abort();
                        return Err(e);
                    }
                }
            }
            // Every ack matched a posted write, so a transfer of any write posted one; a transfer of none took no time.
            let first_post = first_post.unwrap_or_else(Instant::now);
            Ok(TransferTimes::new(first_post, last.unwrap_or(first_post)))
        });
        self.pipes = pipes;
        result
    }
}

/// Whether an ack `(word, count)` names writes of this transfer (`tag`) that were posted and not yet acknowledged;
/// otherwise what it named, for the error. A frame is posted (its Posted event sent) before its bytes leave, so its
/// ack is always seen after its Posted event: an ack of a write not posted was sent before the frame it names.
fn outstanding(word: u64, count: u64, tag: u64, posted: &[Option<Instant>], seen: &[bool]) -> Result<(), String> {
    let (i, n) = (word & INDEX_MASK, count);
    if word & !INDEX_MASK != tag {
        return Err(format!(
            "writes {i}..{i}+{n} of transfer {} during transfer {}: a stale, duplicate or early ack",
            word >> TAG_SHIFT,
            tag >> TAG_SHIFT
        ));
    }
    let range = usize::try_from(i).ok().zip(usize::try_from(n).ok()).and_then(|(i, n)| Some(i..i.checked_add(n)?));
    match range {
        Some(r) if n > 0 && r.end <= seen.len() => {
            if seen[r.clone()].iter().any(|&s| s) {
                Err(format!("writes {i}..{i}+{n} twice"))
            } else if posted[r].iter().any(Option::is_none) {
                Err(format!("writes {i}..{i}+{n} before they were sent"))
            } else {
                Ok(())
            }
        }
        _ => Err(format!("writes {i}..{i}+{n}, which this transfer of {} writes does not have", seen.len())),
    }
}

impl TcpSource {
    fn abort(&self) {
        for c in &self.conns {
            let _ = c.shutdown(Shutdown::Both);
        }
    }
}

/// What fixed each side's path without calibration, as clauses of [`TcpSenderDetail::path_reason`] ("" when
/// both sides are left to calibration).
fn forced_reason(p: &PathChoice) -> String {
    let clause = |how: ChosenBy, side: &str, name: &str| match how {
        ChosenBy::Calibration => None,
        ChosenBy::Environment => Some(format!("send path {name} set by KVXFER_TCP_SPLICE")),
        ChosenBy::RecvEnvironment => Some(format!("receive path {name} set by KVXFER_TCP_RECV")),
        ChosenBy::NoPipe => Some(format!("send path {name}: the kernel gave no pipe to splice through")),
        ChosenBy::SmallWrites => Some(format!("{side} path {name}: writes under 1 MiB neither splice nor bounce")),
        ChosenBy::ShortTrials => Some(format!(
            "{side} path {name}, the default: the region is under {} (too short to tell the paths apart)",
            crate::plan::sizes::format_size(CALIBRATION_MIN_BYTES)
        )),
    };
    let clauses = [clause(p.send_how, "send", p.send.name()), clause(p.recv_how, "receive", p.recv.name())];
    clauses.into_iter().flatten().collect::<Vec<_>>().join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_acks_of_this_transfers_posted_unacked_writes_are_outstanding() {
        let tag = next_tag(0) << TAG_SHIFT;
        let t = Some(Instant::now());
        let (posted, seen) = (vec![t, t, None], vec![true, false, false]);
        assert_eq!(outstanding(tag | 1, 1, tag, &posted, &seen), Ok(()));
        let refused = |word: u64, count: u64| outstanding(word, count, tag, &posted, &seen).unwrap_err();
        assert!(refused(1, 1).contains("of transfer 0 during transfer 1"), "an ack sent before any frame");
        assert!(refused(next_tag(1) << TAG_SHIFT | 1, 1).contains("stale, duplicate or early"));
        assert!(refused(tag, 1).contains("twice"));
        assert!(refused(tag | 2, 1).contains("before they were sent"));
        assert!(refused(tag | 2, 2).contains("does not have"));
        assert!(refused(tag | 1, 0).contains("does not have"), "an ack of no writes");
        assert!(refused(tag | INDEX_MASK, u64::MAX).contains("does not have"));
        // Tags run 1..2^24 round and round, never 0.
        assert_eq!(next_tag((1 << 24) - 1), 1);
    }
}
