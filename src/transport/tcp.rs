//! TCP baseline: the region is the receiver's buffer. Writes travel in scatter frames: a header
//! `(first write index, count, payload bytes)`, `count` entries `(remote offset, length)`, then the payloads back to
//! back, each read by the receiver straight into its buffer at its offset. A frame carries one large write, or up to
//! [`FRAME_PIECES`] small ones (a paged layout's 16 KiB pieces) so per-frame costs (syscalls, acks) are not paid per
//! piece. Completion is the receiver's 16-byte ack `(first index, count)` of a whole frame. `--streams N` spreads
//! frames round-robin over N connections.
//!
//! Data connections are separate from the control connection, authenticated by a random session key that the
//! receiver hands out in its offer, so a stranger cannot inject bytes into the region.

use super::{Context, Source, Target, TransferHooks, TransferTimes};
use crate::mem::Buffer;
use crate::plan::{RunConfig, Write};
use anyhow::{anyhow, bail, Context as _, Result};
use serde::{Deserialize, Serialize};
use std::io::{ErrorKind, IoSlice, Read, Write as _};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

pub const DEFAULT_BLOCK_SIZE: u64 = 64 << 20;
const HEADER_LEN: usize = 24;
const ENTRY_LEN: usize = 16;
const ACK_LEN: usize = 16;
/// Most writes in one frame (bounded by the iovec limit of one writev, 1024, with room for the header).
pub const FRAME_PIECES: usize = 512;
/// Small writes are gathered into one frame until it holds this many payload bytes.
const FRAME_BYTES: u64 = 1 << 20;
const KEY_LEN: usize = 16;

#[derive(Serialize, Deserialize)]
struct Offer {
    data_port: u16,
    session_key: String,
    region_len: u64,
}

/// TCP moves bytes through the kernel's sockets, which need host memory.
fn need_host_memory(buf: &Buffer, side: &str) -> Result<()> {
    if buf.host_ptr().is_none() {
        return Err(crate::error::usage(format!(
            "--transport tcp cannot read or write GPU memory ({side} has {}); use --mem host|pinned, or --transport cuda",
            buf.kind()
        )));
    }
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn random_key() -> Result<[u8; KEY_LEN]> {
    let mut key = [0u8; KEY_LEN];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut key)?;
    Ok(key)
}

fn data_error(role: &str, e: std::io::Error) -> anyhow::Error {
    match e.kind() {
        ErrorKind::UnexpectedEof
        | ErrorKind::ConnectionReset
        | ErrorKind::BrokenPipe
        | ErrorKind::ConnectionAborted => {
            anyhow!("{role} closed the data connection mid-transfer ({e}); did it exit or crash?")
        }
        ErrorKind::WouldBlock | ErrorKind::TimedOut => {
            anyhow!("the data connection to {role} stalled past --io-timeout")
        }
        _ => anyhow!("data connection to {role}: {e}"),
    }
}

// ---------------------------------------------------------------------------------------------- receiver

/// Progress of the armed rep, shared by the per-connection reader threads.
#[derive(Default)]
struct LandState {
    expected: u64,
    received: u64,
    landed_at: Option<Instant>,
    error: Option<String>,
}

struct Shared {
    state: Mutex<LandState>,
    cv: Condvar,
}

impl Shared {
    fn fail(&self, msg: String) {
        let mut s = self.state.lock().unwrap();
        s.error.get_or_insert(msg);
        self.cv.notify_all();
    }
}

pub struct TcpTarget {
    listener: TcpListener,
    key: [u8; KEY_LEN],
    buf: Arc<Buffer>,
    streams: u32,
    io_timeout: Duration,
    shared: Arc<Shared>,
    conns: Vec<TcpStream>,
}

impl TcpTarget {
    pub fn open(cfg: &RunConfig, buf: Arc<Buffer>, ctx: &Context) -> Result<TcpTarget> {
        need_host_memory(&buf, "the receiver")?;
        let listener = TcpListener::bind(SocketAddr::new(ctx.local_ip, 0))
            .with_context(|| format!("cannot open a TCP data port on {}", ctx.local_ip))?;
        Ok(TcpTarget {
            listener,
            key: random_key()?,
            buf,
            streams: cfg.streams,
            io_timeout: ctx.timeouts.io,
            shared: Arc::new(Shared { state: Mutex::new(LandState::default()), cv: Condvar::new() }),
            conns: Vec::new(),
        })
    }
}

impl Target for TcpTarget {
    fn offer(&self) -> serde_json::Value {
        let port = self.listener.local_addr().map(|a| a.port()).unwrap_or(0);
        serde_json::to_value(Offer { data_port: port, session_key: hex(&self.key), region_len: self.buf.len() as u64 })
            .expect("offer serializes")
    }

    fn accept(&mut self, _answer: serde_json::Value) -> Result<()> {
        // The sender connected its streams before answering; they wait in the backlog.
        let deadline = Instant::now() + self.io_timeout;
        self.listener.set_nonblocking(true)?;
        while self.conns.len() < self.streams as usize {
            match self.listener.accept() {
                Ok((mut s, _)) => {
                    s.set_nonblocking(false)?;
                    s.set_read_timeout(Some(self.io_timeout))?;
                    let mut key = [0u8; KEY_LEN];
                    if s.read_exact(&mut key).is_err()
                        || !crate::control::peer::tokens_match(&hex(&key), &hex(&self.key))
                    {
                        continue; // not our sender: drop it and keep waiting
                    }
                    s.set_nodelay(true)?;
                    // Between reps a data connection is legitimately idle for a long time.
                    s.set_read_timeout(None)?;
                    s.set_write_timeout(Some(self.io_timeout))?;
                    self.conns.push(s.try_clone()?);
                    let (buf, shared) = (self.buf.clone(), self.shared.clone());
                    std::thread::Builder::new()
                        .name("kvxfer-tcp-rx".into())
                        .spawn(move || receive_loop(s, &buf, &shared))?;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if Instant::now() > deadline {
                        bail!(
                            "the sender opened {} of {} TCP data connections in time",
                            self.conns.len(),
                            self.streams
                        );
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(e).context("accepting a TCP data connection"),
            }
        }
        Ok(())
    }

    fn arm(&mut self, size_bytes: u64) -> Result<()> {
        let mut s = self.shared.state.lock().unwrap();
        if let Some(e) = &s.error {
            bail!("{e}");
        }
        *s = LandState { expected: size_bytes, ..LandState::default() };
        Ok(())
    }

    fn wait_landed(&mut self, timeout: Duration, control_ready: &mut dyn FnMut() -> bool) -> Result<Option<Instant>> {
        let deadline = Instant::now() + timeout;
        let mut s = self.shared.state.lock().unwrap();
        loop {
            if let Some(e) = &s.error {
                bail!("{e}");
            }
            if let Some(at) = s.landed_at {
                return Ok(Some(at));
            }
            if control_ready() {
                return Ok(None);
            }
            let now = Instant::now();
            if now >= deadline {
                bail!(
                    "only {} of {} bytes arrived within --io-timeout ({:.0} s)",
                    s.received,
                    s.expected,
                    timeout.as_secs_f64()
                );
            }
            // Wake up now and then to look at the control connection.
            s = self.shared.cv.wait_timeout(s, (deadline - now).min(Duration::from_millis(50))).unwrap().0;
        }
    }
}

impl Drop for TcpTarget {
    fn drop(&mut self) {
        for c in &self.conns {
            let _ = c.shutdown(Shutdown::Both);
        }
    }
}

/// One data connection: read frames into the region, ack each, count bytes towards the armed rep.
fn receive_loop(mut s: TcpStream, buf: &Buffer, shared: &Shared) {
    let region_len = buf.len() as u64;
    let mut table = Vec::with_capacity(FRAME_PIECES * ENTRY_LEN);
    loop {
        let mut hdr = [0u8; HEADER_LEN];
        match s.read_exact(&mut hdr) {
            Ok(()) => {}
            Err(e) => {
                let st = shared.state.lock().unwrap();
                let mid_rep = st.expected > 0 && st.landed_at.is_none();
                drop(st);
                if mid_rep || e.kind() != ErrorKind::UnexpectedEof {
                    shared.fail(data_error("the sender", e).to_string());
                } else {
                    shared.fail("the sender closed a data connection".into());
                }
                return;
            }
        }
        let (first, count, total) = (word(&hdr, 0), word(&hdr, 1), word(&hdr, 2));
        if count == 0 || count > FRAME_PIECES as u64 {
            shared.fail(format!("the sender announced a frame of {count} writes (1..={FRAME_PIECES}); refused"));
            return;
        }
        table.resize(count as usize * ENTRY_LEN, 0);
        if let Err(e) = s.read_exact(&mut table) {
            shared.fail(data_error("the sender", e).to_string());
            return;
        }
        let entries: Vec<(u64, u64)> =
            (0..count as usize).map(|k| (word(&table, 2 * k), word(&table, 2 * k + 1))).collect();
        // Check the whole frame before touching the region.
        let mut sum = 0u64;
        for &(offset, len) in &entries {
            if len == 0 || offset.checked_add(len).is_none_or(|end| end > region_len) {
                shared.fail(format!(
                    "the sender tried to write {len} bytes at offset {offset}, outside the {region_len}-byte region; refused"
                ));
                return;
            }
            sum = sum.saturating_add(len);
        }
        if sum != total {
            shared.fail(format!(
                "the sender's frame claims {total} payload bytes but its writes add up to {sum}; refused"
            ));
            return;
        }
        if let Err(e) = recv_scatter(&s, buf, &entries) {
            shared.fail(data_error("the sender", e).to_string());
            return;
        }
        let mut ack = [0u8; ACK_LEN];
        ack[..8].copy_from_slice(&first.to_le_bytes());
        ack[8..].copy_from_slice(&count.to_le_bytes());
        if let Err(e) = s.write_all(&ack) {
            shared.fail(data_error("the sender", e).to_string());
            return;
        }
        let mut st = shared.state.lock().unwrap();
        st.received += total;
        if st.expected > 0 && st.received >= st.expected && st.landed_at.is_none() {
            st.landed_at = Some(Instant::now());
            shared.cv.notify_all();
        }
    }
}

/// The `i`-th little-endian u64 of `bytes`.
fn word(bytes: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes"))
}

/// Cut writes into frames of consecutive writes: `(first index, count)`. A write of [`FRAME_BYTES`] or more
/// travels alone; smaller ones share a frame up to [`FRAME_PIECES`] writes or [`FRAME_BYTES`] of payload.
pub fn frames(writes: &[Write]) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    let mut bytes = 0u64;
    for (i, w) in writes.iter().enumerate() {
        match out.last_mut() {
            Some((_, n)) if *n < FRAME_PIECES && bytes + w.len <= FRAME_BYTES => {
                *n += 1;
                bytes += w.len;
            }
            _ => {
                out.push((i, 1));
                bytes = w.len;
            }
        }
    }
    out
}

/// Send one frame: header, entries and every payload with as few writev calls as the kernel allows.
fn send_frame(w: &mut TcpStream, data: &[u8], writes: &[Write], first: usize) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(HEADER_LEN + writes.len() * ENTRY_LEN);
    let total: u64 = writes.iter().map(|w| w.len).sum();
    for x in [first as u64, writes.len() as u64, total] {
        head.extend_from_slice(&x.to_le_bytes());
    }
    for wr in writes {
        head.extend_from_slice(&wr.remote_offset.to_le_bytes());
        head.extend_from_slice(&wr.len.to_le_bytes());
    }
    let mut slices: Vec<IoSlice> = Vec::with_capacity(writes.len() + 1);
    slices.push(IoSlice::new(&head));
    slices.extend(
        writes.iter().map(|wr| IoSlice::new(&data[wr.local_offset as usize..(wr.local_offset + wr.len) as usize])),
    );
    let mut rest = &mut slices[..];
    while !rest.is_empty() {
        match w.write_vectored(rest) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut rest, n),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Receive a frame's payloads from the socket straight into `buf` at each entry's `(offset, len)`, with one
/// readv per batch of entries rather than one recv per entry.
fn recv_scatter(s: &TcpStream, buf: &Buffer, entries: &[(u64, u64)]) -> std::io::Result<()> {
    let base = buf.host_ptr().expect("checked when the target opened");
    debug_assert!(entries.iter().all(|&(o, l)| o + l <= buf.len() as u64));
    let mut iov: Vec<nix::libc::iovec> = entries
        .iter()
        // SAFETY (of the pointer arithmetic): every entry was checked against the region by the caller.
        .map(|&(o, l)| nix::libc::iovec { iov_base: unsafe { base.add(o as usize) }.cast(), iov_len: l as usize })
        .collect();
    let mut at = 0;
    while at < iov.len() {
        if iov[at].iov_len == 0 {
            at += 1;
            continue;
        }
        let n_iov = (iov.len() - at).min(1024) as i32;
        // SAFETY: each iovec points inside the live mapping that `buf` owns (checked against the region by the
        // caller) and the entries of one frame are disjoint; the kernel writes through the raw pointers and no Rust
        // reference to these bytes exists while a rep is in flight (verify reads only after the rep has landed).
        let n = unsafe { nix::libc::readv(s.as_raw_fd(), iov[at..].as_ptr(), n_iov) };
        match n {
            0 => return Err(ErrorKind::UnexpectedEof.into()),
            n if n < 0 => {
                let e = std::io::Error::last_os_error();
                if e.kind() != ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            n => {
                // Skip the entries filled; advance into a partly filled one.
                let mut left = n as usize;
                while left > 0 {
                    let v = &mut iov[at];
                    let k = left.min(v.iov_len);
                    // SAFETY: `k <= iov_len`, so the advanced pointer stays inside the same entry.
                    v.iov_base = unsafe { v.iov_base.cast::<u8>().add(k) }.cast();
                    v.iov_len -= k;
                    left -= k;
                    if v.iov_len == 0 {
                        at += 1;
                    }
                }
            }
        }
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------------ sender

pub struct TcpSource {
    conns: Vec<TcpStream>,
    io_timeout: Duration,
}

impl TcpSource {
    pub fn connect(cfg: &RunConfig, buf: &Buffer, offer: serde_json::Value, ctx: &Context) -> Result<TcpSource> {
        need_host_memory(buf, "the sender")?;
        let offer: Offer = serde_json::from_value(offer).context("the receiver's TCP offer is malformed")?;
        let key: Vec<u8> = (0..offer.session_key.len() / 2)
            .map(|i| u8::from_str_radix(&offer.session_key[2 * i..2 * i + 2], 16))
            .collect::<Result<_, _>>()
            .context("the receiver's session key is malformed")?;
        let addr = SocketAddr::new(ctx.peer_ip, offer.data_port);
        let mut conns = Vec::new();
        for _ in 0..cfg.streams {
            let mut s = TcpStream::connect_timeout(&addr, ctx.timeouts.connect)
                .with_context(|| format!("cannot open a TCP data connection to {addr}; is that port reachable?"))?;
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(ctx.timeouts.io))?;
            s.set_write_timeout(Some(ctx.timeouts.io))?;
            s.write_all(&key)?;
            conns.push(s);
        }
        Ok(TcpSource { conns, io_timeout: ctx.timeouts.io })
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

    fn transfer(&mut self, mem: &Buffer, writes: &[Write], hooks: &mut TransferHooks) -> Result<TransferTimes> {
        let streams = self.conns.len();
        let (tx, rx) = mpsc::channel::<Event>();
        let data = mem.host_slice().expect("checked when the source connected");
        let frames = frames(writes);
        let result = std::thread::scope(|scope| -> Result<TransferTimes> {
            for (k, conn) in self.conns.iter().enumerate() {
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
                        if let Err(e) = send_frame(&mut w, data, &writes[first..first + count], first) {
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
                    Event::Acked(first, count, t) => {
                        let (i, n) = (first as usize, count as usize);
                        if i.checked_add(n).is_none_or(|end| end > writes.len()) || seen[i..i + n].iter().any(|&s| s) {
                            self.abort();
                            bail!("the receiver acknowledged writes {i}..{i}+{n}, which were not outstanding");
                        }
                        for j in i..i + n {
                            seen[j] = true;
                            // A frame is posted (Posted sent) before its bytes leave, so its ack comes after.
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
            let first_post = first_post.expect("every stream with writes posts first");
            Ok(TransferTimes::new(first_post, last.unwrap_or(first_post)))
        });
        result
    }
}

impl TcpSource {
    fn abort(&self) {
        for c in &self.conns {
            let _ = c.shutdown(Shutdown::Both);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(len: u64) -> Write {
        Write { local_offset: 0, remote_offset: 0, len }
    }

    #[test]
    fn frames_gather_small_writes_and_leave_large_ones_alone() {
        // 16 KiB pieces: 64 fill 1 MiB.
        let pieces = vec![w(16 << 10); 200];
        assert_eq!(frames(&pieces), vec![(0, 64), (64, 64), (128, 64), (192, 8)]);
        // Tiny pieces stop at the iovec-bounded count.
        let tiny = vec![w(3); FRAME_PIECES + 1];
        assert_eq!(frames(&tiny), vec![(0, FRAME_PIECES), (FRAME_PIECES, 1)]);
        // Contiguous 64 MiB blocks: one per frame; a small tail after a large write starts its own frame.
        assert_eq!(frames(&[w(64 << 20), w(64 << 20), w(5)]), vec![(0, 1), (1, 1), (2, 1)]);
        assert!(frames(&[]).is_empty());
    }
}
