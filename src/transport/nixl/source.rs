//! The sender's agent: it WRITEs (`--nixl-op write`), or lends its buffer to the receiver's READs and waits for
//! their notifications (`--nixl-op read`).

use super::{descriptor_lists, nixl, Engine, Owned, Region, PEER_CHECK, READ_DONE};
use super::{NixlConfig, NixlOp};
use crate::mem::Buffer;
use crate::plan::Write;
use crate::transport::batch::Batch;
use crate::transport::{Context, Source, TransferHooks, TransferTimes, TransportDetail};
use anyhow::{bail, Result};
use nixl_sys::{NotificationMap, XferOp, XferRequest};
use std::time::{Duration, Instant};

/// A prepared WRITE of one case's writes, posted again every rep (the request holds its own copy of the
/// descriptor lists it was made from).
struct Prepared {
    writes: Vec<Write>,
    request: XferRequest,
}

pub struct NixlSource {
    op: NixlOp,
    prepared: Option<Prepared>,
    remote_agent: String,
    remote: Region,
    io_timeout: Duration,
    notifications: Owned<NotificationMap>,
    engine: Engine,
}

impl NixlSource {
    pub fn connect(cfg: &NixlConfig, buf: &Buffer, offer: serde_json::Value, ctx: &Context) -> Result<NixlSource> {
        let engine = Engine::start("sender", cfg, buf, None)?;
        let (remote_agent, remote) = engine.load_remote(offer, "the receiver's")?;
        let notifications = Owned(NotificationMap::new().map_err(nixl("notification map"))?);
        let io_timeout = ctx.timeouts.io;
        Ok(NixlSource { op: cfg.op, prepared: None, remote_agent, remote, io_timeout, notifications, engine })
    }

    /// The request for `writes`: the prepared one when the writes are the same as last time.
    fn prepare(&mut self, writes: &[Write]) -> Result<&Prepared> {
        if self.prepared.as_ref().is_some_and(|p| p.writes == writes) {
            return Ok(self.prepared.as_ref().expect("checked"));
        }
        self.prepared = None;
        let (local, remote) = descriptor_lists(writes, &self.engine.region(), &self.remote)?;
        let agent = &self.engine.agent;
        let request = agent
            .create_xfer_req(XferOp::Write, &local, &remote, &self.remote_agent, None)
            .map_err(nixl("create_xfer_req"))?;
        Ok(self.prepared.insert(Prepared { writes: writes.to_vec(), request }))
    }

    fn write(&mut self, writes: &[Write], hooks: &mut TransferHooks) -> Result<TransferTimes> {
        let timeout = self.io_timeout;
        self.prepare(writes)?;
        let p = self.prepared.as_ref().expect("just prepared");
        let agent = &self.engine.agent;
        let started = Instant::now();
        agent.post_xfer_req(&p.request, None).map_err(nixl("post_xfer_req"))?;
        // Busy-poll, as a connector's progress loop does (the request completes as a whole).
        let Some(done) = super::complete(agent, &p.request, timeout, hooks.peer_failed)? else {
            bail!("the receiver hung up or reported an error on the control connection mid-transfer");
        };
        for i in 0..writes.len() {
            (hooks.done)(i, started, done);
        }
        Ok(TransferTimes::new(started, done).with_extras(&Batch { descriptors: Some(writes.len() as u64) }))
    }

    /// Wait for the receiver's READ of this rep to notify its completion. Polling the notifications also drives
    /// this agent's progress, which a READ over a software transport (TCP, shared memory) needs on this end. The
    /// rep's time is the receiver's; these times are the sender's view (from RepReady to the notification).
    fn lend(&mut self, writes: &[Write], hooks: &mut TransferHooks) -> Result<TransferTimes> {
        let started = Instant::now();
        let mut checked = started;
        loop {
            let agent = &self.engine.agent;
            agent.get_notifications(&mut self.notifications.0, None).map_err(nixl("get_notifications"))?;
            if !self.notifications.0.is_empty().map_err(nixl("notifications"))? {
                let mut from = self.notifications.0.take_notifs().map_err(nixl("notifications"))?;
                let ours = from.remove(&self.remote_agent).unwrap_or_default();
                if ours.iter().any(|m| m.as_bytes() == READ_DONE) {
                    break;
                }
            }
            if checked.elapsed() > PEER_CHECK {
                checked = Instant::now();
                if started.elapsed() > self.io_timeout {
                    bail!(
                        "the receiver's nixl READ did not notify its completion within --io-timeout ({:.0} s)",
                        self.io_timeout.as_secs_f64()
                    );
                }
                if (hooks.peer_failed)() {
                    bail!("the receiver hung up or reported an error on the control connection mid-transfer");
                }
            }
        }
        let done = Instant::now();
        for i in 0..writes.len() {
            (hooks.done)(i, started, done);
        }
        Ok(TransferTimes::new(started, done).with_extras(&Batch { descriptors: Some(writes.len() as u64) }))
    }
}

impl Source for NixlSource {
    fn answer(&self) -> serde_json::Value {
        serde_json::to_value(self.engine.region()).expect("a region serializes")
    }

    fn describe(&self) -> TransportDetail {
        self.engine.describe(self.op)
    }

    fn transfer(&mut self, _mem: &Buffer, writes: &[Write], hooks: &mut TransferHooks) -> Result<TransferTimes> {
        match self.op {
            NixlOp::Write => self.write(writes, hooks),
            NixlOp::Read => self.lend(writes, hooks),
        }
    }
}
