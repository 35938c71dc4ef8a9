//! TCP's ping-pong: one data connection with TCP_NODELAY (without it Nagle's algorithm holds a small answer until
//! the peer's delayed ACK, a fixed ~40 ms per exchange), each message written whole and read whole. `--busy-poll`
//! reads a non-blocking socket in a loop, as `sockperf` and `netperf`'s busy modes do, instead of sleeping in the
//! kernel until the bytes arrive; the results record which.

use super::admit::DataPort;
use super::{data_error, Offer, TcpConfig};
use crate::control::auth::data_proof;
use crate::plan::latency::LatencyPlan;
use crate::plan::TransportConfig;
use crate::transport::api::{Context, PingEnd, PingPong};
use anyhow::{anyhow, bail, Context as _, Result};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// TCP's ping-pong, as the registry hands it out.
pub struct TcpPingPong;

impl PingPong for TcpPingPong {
    fn check(&self, plan: &LatencyPlan) -> Result<()> {
        if plan.inline.is_some() {
            return Err(crate::error::usage(
                "--inline sets RDMA inline writes and has no meaning for --transport tcp; leave it out or use --transport verbs",
            ));
        }
        if plan.write_with_imm {
            return Err(crate::error::usage(
                "--write-with-imm sets how RDMA writes announce themselves and has no meaning for --transport tcp; leave it out or use --transport verbs",
            ));
        }
        Ok(())
    }

    fn open_responder(
        &self,
        cfg: &TransportConfig,
        plan: &LatencyPlan,
        max_size: u64,
        _mem: crate::mem::MemKind,
        ctx: &Context,
    ) -> Result<Box<dyn PingEnd>> {
        cfg.knobs::<TcpConfig>()?;
        let key = ctx.session_key.ok_or_else(|| anyhow!("no session key: the control handshake did not run"))?;
        Ok(Box::new(TcpPingEnd {
            role: "the latency client",
            conn: None,
            port: Some(DataPort::open(ctx.local_ip, key, 1)?),
            msg: message_buffer(max_size)?,
            busy_poll: plan.busy_poll,
            io_timeout: ctx.timeouts.io,
        }))
    }

    fn connect_initiator(
        &self,
        cfg: &TransportConfig,
        plan: &LatencyPlan,
        max_size: u64,
        offer: serde_json::Value,
        ctx: &Context,
    ) -> Result<Box<dyn PingEnd>> {
        cfg.knobs::<TcpConfig>()?;
        let offer: Offer = serde_json::from_value(offer).context("the receiver's TCP offer is malformed")?;
        let key = ctx.session_key.ok_or_else(|| anyhow!("no session key: the control handshake did not run"))?;
        let addr = SocketAddr::new(ctx.peer_ip, offer.data_port);
        let mut s = TcpStream::connect_timeout(&addr, ctx.timeouts.connect)
            .with_context(|| format!("cannot open a TCP data connection to {addr}; is that port reachable?"))?;
        s.set_write_timeout(Some(ctx.timeouts.io))?;
        s.write_all(&0u32.to_le_bytes())?;
        s.write_all(&data_proof(&key, 0))?;
        let mut end = TcpPingEnd {
            role: "the receiver",
            conn: None,
            port: None,
            msg: message_buffer(max_size)?,
            busy_poll: plan.busy_poll,
            io_timeout: ctx.timeouts.io,
        };
        end.take(s)?;
        Ok(Box::new(end))
    }
}

/// The largest message, refused past what a ping-pong is for (a latency run's sizes are small).
fn message_buffer(max_size: u64) -> Result<Vec<u8>> {
    if max_size == 0 || max_size > crate::plan::latency::MAX_MESSAGE {
        bail!("latency messages are 1 B to 1 GiB; {max_size} bytes asked");
    }
    Ok(vec![0u8; max_size as usize])
}

struct TcpPingEnd {
    /// The other end, as errors name it.
    role: &'static str,
    conn: Option<TcpStream>,
    /// The responder's data port, until the initiator has connected and proved itself.
    port: Option<DataPort>,
    msg: Vec<u8>,
    busy_poll: bool,
    io_timeout: Duration,
}

impl TcpPingEnd {
    /// Use `s` as the data connection: no Nagle, and the waiting `--busy-poll` asks for.
    fn take(&mut self, s: TcpStream) -> Result<()> {
        s.set_nodelay(true)?;
        s.set_nonblocking(self.busy_poll)?;
        s.set_read_timeout(Some(self.io_timeout))?;
        s.set_write_timeout(Some(self.io_timeout))?;
        self.conn = Some(s);
        Ok(())
    }

    fn send(&mut self, size: usize, seq: u64) -> Result<()> {
        let (conn, msg) = (self.conn.as_mut().expect("connected before the first message"), &mut self.msg[..size]);
        msg[size - 1] = seq as u8;
        let deadline = Instant::now() + self.io_timeout;
        let mut off = 0;
        while off < size {
            match conn.write(&msg[off..]) {
                Ok(0) => return Err(data_error(self.role, ErrorKind::WriteZero.into())),
                Ok(n) => off += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < deadline => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(data_error(self.role, e)),
            }
        }
        Ok(())
    }

    fn receive(&mut self, size: usize, seq: u64) -> Result<()> {
        let (conn, msg) = (self.conn.as_mut().expect("connected before the first message"), &mut self.msg[..size]);
        let deadline = Instant::now() + self.io_timeout;
        let mut off = 0;
        while off < size {
            match conn.read(&mut msg[off..]) {
                Ok(0) => return Err(data_error(self.role, ErrorKind::UnexpectedEof.into())),
                Ok(n) => off += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < deadline => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(data_error(self.role, e)),
            }
        }
        if msg[size - 1] != seq as u8 {
            bail!("{} sent message {} where {seq} was due; the ping-pong lost step", self.role, msg[size - 1]);
        }
        Ok(())
    }
}

impl PingEnd for TcpPingEnd {
    fn hello(&self) -> serde_json::Value {
        let port = self.port.as_ref().map_or(0, |p| p.port());
        serde_json::to_value(Offer { data_port: port, region_len: self.msg.len() as u64 }).expect("offer serializes")
    }

    fn finish(&mut self, _peer: serde_json::Value) -> Result<()> {
        // The initiator connected before answering; the port's door has been taking its connection (and turning
        // strangers away) since it opened.
        let Some(mut port) = self.port.take() else { return Ok(()) };
        let mut conns = port.take(Instant::now() + self.io_timeout, self.role)?;
        self.take(conns.pop().expect("one connection taken"))
    }

    fn ping(&mut self, size: usize, seq: u64) -> Result<()> {
        self.send(size, seq)?;
        self.receive(size, seq)
    }

    fn pong(&mut self, size: usize, seq: u64) -> Result<()> {
        self.receive(size, seq)?;
        self.send(size, seq)
    }

    fn describe(&self) -> serde_json::Value {
        serde_json::json!({ "nodelay": true, "wait": if self.busy_poll { "busy-poll" } else { "blocking" } })
    }
}
