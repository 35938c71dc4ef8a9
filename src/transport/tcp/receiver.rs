//! The receiver's half: a data port, one reader thread per connection writing frames into the region and acking
//! them, and the armed rep's progress shared with the run.

use super::admit::DataPort;
use super::bounce::Bounce;
use super::frame::recv_scatter;
use super::{
    data_error, need_host_memory, word, Offer, ACK_LEN, ENTRY_LEN, FRAME_BOUNCE, FRAME_PIECES, HEADER_LEN,
};
use crate::mem::Buffer;
use crate::plan::RunConfig;
use crate::transport::{Context, Target};
use anyhow::{bail, Result};
use std::io::{ErrorKind, Read, Write as _};
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

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
    port: DataPort,
    buf: Arc<Buffer>,
    io_timeout: Duration,
    shared: Arc<Shared>,
    conns: Vec<TcpStream>,
}

impl TcpTarget {
    /// Take an authenticated data connection into service: a thread reads its frames into the region.
    fn start_stream(&mut self, s: TcpStream) -> Result<()> {
        s.set_nonblocking(false)?;
        s.set_nodelay(true)?;
        // Between reps a data connection is legitimately idle for a long time.
        s.set_read_timeout(None)?;
        s.set_write_timeout(Some(self.io_timeout))?;
        self.conns.push(s.try_clone()?);
        let (buf, shared) = (self.buf.clone(), self.shared.clone());
        std::thread::Builder::new().name("kvxfer-tcp-rx".into()).spawn(move || receive_loop(s, &buf, &shared))?;
        Ok(())
    }

    pub fn open(cfg: &RunConfig, buf: Arc<Buffer>, ctx: &Context) -> Result<TcpTarget> {
        need_host_memory(&buf, "the receiver")?;
        let key =
            ctx.session_key.ok_or_else(|| anyhow::anyhow!("no session key: the control handshake did not run"))?;
        Ok(TcpTarget {
            port: DataPort::open(ctx.local_ip, key, cfg.knobs.streams)?,
            buf,
            io_timeout: ctx.timeouts.io,
            shared: Arc::new(Shared { state: Mutex::new(LandState::default()), cv: Condvar::new() }),
            conns: Vec::new(),
        })
    }
}

impl Target for TcpTarget {
    fn offer(&self) -> serde_json::Value {
        serde_json::to_value(Offer { data_port: self.port.port(), region_len: self.buf.len() as u64 }).expect("offer serializes")
    }

    fn accept(&mut self, _answer: serde_json::Value) -> Result<()> {
        // The sender connected its streams before answering; the port's door has been taking them (and turning
        // strangers away) since it opened.
        let deadline = Instant::now() + self.io_timeout;
        for s in self.port.take(deadline, "the sender")? {
            self.start_stream(s)?;
        }
        Ok(())
    }

    fn arm(&mut self, _case: usize, size_bytes: u64) -> Result<()> {
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
    let mut bounce: Option<Bounce> = None;
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
        let head = match frame_header(&hdr) {
            Ok(h) => h,
            Err(why) => {
                shared.fail(why);
                return;
            }
        };
        table.resize(head.count as usize * ENTRY_LEN, 0);
        if let Err(e) = s.read_exact(&mut table) {
            shared.fail(data_error("the sender", e).to_string());
            return;
        }
        let entries = match frame_entries(&head, &table, region_len) {
            Ok(e) => e,
            Err(why) => {
                shared.fail(why);
                return;
            }
        };
        let (first, count, total, through_bounce) = (head.first, head.count, head.total, head.through_bounce);
        let landed = if through_bounce {
            let region = buf.host_region().expect("checked when the target opened");
            bounce.get_or_insert_with(Bounce::new).recv(&mut s, region, &entries)
        } else {
            recv_scatter(&s, buf, &entries)
        };
        if let Err(e) = landed {
            shared.fail(data_error("the sender", e).to_string());
            return;
        }
        // Count the bytes before acking them: once the sender holds every ack it may start the next rep (after
        // its calibration frames, say), whose arming must not be overtaken by this count.
        {
            let mut st = shared.state.lock().unwrap();
            st.received += total;
            if st.expected > 0 && st.received >= st.expected && st.landed_at.is_none() {
                st.landed_at = Some(Instant::now());
                shared.cv.notify_all();
            }
        }
        let mut ack = [0u8; ACK_LEN];
        ack[..8].copy_from_slice(&first.to_le_bytes());
        ack[8..].copy_from_slice(&count.to_le_bytes());
        if let Err(e) = s.write_all(&ack) {
            shared.fail(data_error("the sender", e).to_string());
            return;
        }
    }
}

/// A scatter frame's header, read and checked: the writes it announces, and how its payloads are to be received.
pub struct FrameHeader {
    pub first: u64,
    pub count: u64,
    pub total: u64,
    pub through_bounce: bool,
}

/// Read a frame header; a frame of no writes or of more than [`FRAME_PIECES`] is refused (the error names why).
pub fn frame_header(hdr: &[u8; HEADER_LEN]) -> Result<FrameHeader, String> {
    let (first, count_word, total) = (word(hdr, 0), word(hdr, 1), word(hdr, 2));
    let (count, through_bounce) = (count_word & !FRAME_BOUNCE, count_word & FRAME_BOUNCE != 0);
    if count == 0 || count > FRAME_PIECES as u64 {
        return Err(format!("the sender announced a frame of {count} writes (1..={FRAME_PIECES}); refused"));
    }
    Ok(FrameHeader { first, count, total, through_bounce })
}

/// The `(offset, len)` writes of a frame's entry table, checked before the region is touched: each inside
/// `region_len` and not empty, adding up to the header's payload bytes, none overlapping another.
pub fn frame_entries(head: &FrameHeader, table: &[u8], region_len: u64) -> Result<Vec<(u64, u64)>, String> {
    if table.len() as u64 != head.count * ENTRY_LEN as u64 {
        return Err(format!(
            "a frame of {} writes needs {} table bytes, not {}",
            head.count,
            head.count * ENTRY_LEN as u64,
            table.len()
        ));
    }
    let entries: Vec<(u64, u64)> =
        (0..head.count as usize).map(|k| (word(table, 2 * k), word(table, 2 * k + 1))).collect();
    let mut sum = 0u64;
    for &(offset, len) in &entries {
        if len == 0 || offset.checked_add(len).is_none_or(|end| end > region_len) {
            return Err(format!(
                "the sender tried to write {len} bytes at offset {offset}, outside the {region_len}-byte region; refused"
            ));
        }
        sum = sum.saturating_add(len);
    }
    if sum != head.total {
        return Err(format!(
            "the sender's frame claims {} payload bytes but its writes add up to {sum}; refused",
            head.total
        ));
    }
    // Two entries of one frame writing the same bytes: never from a kvxfer sender (its writes are disjoint);
    // refused so the readv never has two kernel writes racing into one place.
    if let Some((a, b)) = first_overlap(&entries) {
        return Err(format!(
            "the sender's frame writes {} bytes at offset {} and {} bytes at offset {}, which overlap; refused",
            a.1, a.0, b.1, b.0
        ));
    }
    Ok(entries)
}

/// Two `(offset, len)` entries that share a byte, if any (entries already checked to lie inside the region).
fn first_overlap(entries: &[(u64, u64)]) -> Option<((u64, u64), (u64, u64))> {
    let mut sorted = entries.to_vec();
    sorted.sort_unstable();
    sorted.windows(2).find(|w| w[0].0 + w[0].1 > w[1].0).map(|w| (w[0], w[1]))
}

#[cfg(test)]
mod tests {
    use super::first_overlap;

    #[test]
    fn overlapping_entries_are_found_in_any_order() {
        assert_eq!(first_overlap(&[(4096, 4096), (0, 4096)]), None, "back to back is fine");
        assert_eq!(first_overlap(&[(8192, 10), (0, 4097), (4096, 10)]), Some(((0, 4097), (4096, 10))));
        assert_eq!(first_overlap(&[(5, 1), (5, 1)]), Some(((5, 1), (5, 1))));
        assert_eq!(first_overlap(&[]), None);
    }
}
