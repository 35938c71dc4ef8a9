//! The sender's half: one writer and one ack-reader thread per connection, frames spread round-robin.

use super::frame::{frames, send_frame};
use super::splice::SplicePipe;
use super::{data_error, need_host_memory, word, Offer, ACK_LEN};
use crate::mem::Buffer;
use crate::plan::{RunConfig, Write};
use crate::transport::{Context, Source, TransferHooks, TransferTimes};
use anyhow::{anyhow, bail, Context as _, Result};
use std::io::{Read, Write as _};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub struct TcpSource {
    conns: Vec<TcpStream>,
    /// One zero-copy pipe per connection (None: plain writes; `KVXFER_TCP_SPLICE=0` asks for those).
    pipes: Vec<Option<SplicePipe>>,
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
        let splice = std::env::var("KVXFER_TCP_SPLICE").map_or(true, |v| v != "0");
        let pipes = conns.iter().map(|_| if splice { SplicePipe::new() } else { None }).collect();
        Ok(TcpSource { conns, pipes, io_timeout: ctx.timeouts.io })
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

    fn describe(&self) -> serde_json::Value {
        let send = if self.pipes.iter().all(Option::is_some) { "splice" } else { "write" };
        serde_json::json!({ "sender": { "streams": self.conns.len(), "send": send } })
    }

    fn transfer(&mut self, mem: &Buffer, writes: &[Write], hooks: &mut TransferHooks) -> Result<TransferTimes> {
        let streams = self.conns.len();
        let (tx, rx) = mpsc::channel::<Event>();
        let data = mem.host_slice().expect("checked when the source connected");
        let frames = frames(writes);
        // Each writer thread owns its connection's pipe for the transfer.
        let mut pipes = std::mem::take(&mut self.pipes);
        let result = std::thread::scope(|scope| -> Result<TransferTimes> {
            for (k, (conn, pipe)) in self.conns.iter().zip(pipes.iter_mut()).enumerate() {
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
                        if let Err(e) = send_frame(&mut w, pipe, data, &writes[first..first + count], first) {
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
        self.pipes = pipes;
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
