//! The receiver's agent: written into (`--nixl-op write`), or the decode side that READs each rep from the sender
//! through prepped descriptor lists and times it (`--nixl-op read`).

use super::{descriptor_lists, nixl, Engine, Owned, Region, READ_DONE, RECEIVER_PROGRESS_DELAY_US};
use super::{NixlConfig, NixlOp};
use crate::mem::Buffer;
use crate::plan::{RunConfig, TransferPlan};
use crate::transport::{Context, Target};
use anyhow::{anyhow, bail, Result};
use nixl_sys::{OptArgs, XferDlistHandle, XferOp, XferRequest};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One case's READ: the prepped lists of both ends and the request made from them by index, posted every rep.
struct PreparedRead {
    /// The rep it reads: (case, bytes).
    rep: (usize, u64),
    // Drop order: the request before the lists it was made from.
    request: XferRequest,
    _lists: Owned<(XferDlistHandle, XferDlistHandle)>,
}

pub struct NixlTarget {
    op: NixlOp,
    cfg: RunConfig,
    /// The sender's agent and region (`--nixl-op read`, from its answer).
    sender: Option<(String, Region)>,
    read: Option<PreparedRead>,
    armed: Option<usize>,
    /// The last READ's post and completion.
    last: Option<(Instant, Instant)>,
    engine: Engine,
    _buf: Arc<Buffer>,
}

impl NixlTarget {
    pub fn open(cfg: &NixlConfig, run: &RunConfig, buf: Arc<Buffer>, _ctx: &Context) -> Result<NixlTarget> {
        let engine = Engine::start("receiver", cfg, &buf, Some(RECEIVER_PROGRESS_DELAY_US))?;
        Ok(NixlTarget {
            op: cfg.op,
            cfg: run.clone(),
            sender: None,
            read: None,
            armed: None,
            last: None,
            engine,
            _buf: buf,
        })
    }

    /// The READ of case `case`, made when the case changes: every piece of the sender's buffer into its slot here.
    fn prepare_read(&mut self, case: usize, size_bytes: u64) -> Result<()> {
        if self.read.as_ref().is_some_and(|r| r.rep == (case, size_bytes)) {
            return Ok(());
        }
        self.read = None;
        let plan = TransferPlan::for_rep(&self.cfg, case, size_bytes)?;
        let (sender_agent, sender) =
            self.sender.as_ref().ok_or_else(|| anyhow!("the sender's nixl region is missing"))?;
        let (src, dst) = descriptor_lists(&plan.writes, sender, &self.engine.region())?;
        let agent = &self.engine.agent;
        let local = agent.prepare_xfer_dlist("", &dst, None).map_err(nixl("prep_xfer_dlist (local)"))?;
        let remote = agent.prepare_xfer_dlist(sender_agent, &src, None).map_err(nixl("prep_xfer_dlist (remote)"))?;
        let indices: Vec<i32> = (0..plan.writes.len())
            .map(|i| i32::try_from(i).map_err(|_| anyhow!("{} pieces are more than NIXL indexes", plan.writes.len())))
            .collect::<Result<_>>()?;
        let mut args = OptArgs::new().map_err(nixl("options"))?;
        args.set_notification_message(READ_DONE).map_err(nixl("notification"))?;
        args.set_has_notification(true).map_err(nixl("notification"))?;
        let request = agent
            .make_xfer_req(XferOp::Read, &local, &indices, &remote, &indices, Some(&args))
            .map_err(nixl("make_xfer_req"))?;
        self.read = Some(PreparedRead { rep: (case, size_bytes), request, _lists: Owned((local, remote)) });
        Ok(())
    }
}

impl Target for NixlTarget {
    fn offer(&self) -> serde_json::Value {
        serde_json::to_value(self.engine.region()).expect("a region serializes")
    }

    fn accept(&mut self, answer: serde_json::Value) -> Result<()> {
        if self.op == NixlOp::Read {
            self.sender = Some(self.engine.load_remote(answer, "the sender's")?);
        }
        Ok(())
    }

    fn arm(&mut self, case: usize, size_bytes: u64) -> Result<()> {
        if self.op == NixlOp::Read {
            self.prepare_read(case, size_bytes)?;
            self.armed = Some(case);
        }
        Ok(())
    }

    /// `--nixl-op read`: post this rep's READ and poll it to completion (the sender lends its buffer meanwhile).
    fn wait_landed(&mut self, timeout: Duration, control_ready: &mut dyn FnMut() -> bool) -> Result<Option<Instant>> {
        let (Some(case), Some(read)) = (self.armed.take(), self.read.as_ref()) else {
            bail!("the nixl target was asked to wait without an armed READ");
        };
        debug_assert_eq!(case, read.rep.0);
        let agent = &self.engine.agent;
        let posted = Instant::now();
        agent.post_xfer_req(&read.request, None).map_err(nixl("post_xfer_req"))?;
        let done = super::complete(agent, &read.request, timeout, control_ready)?;
        self.last = done.map(|d| (posted, d));
        Ok(done)
    }

    fn posted_transfer(&self) -> Option<(Instant, Instant)> {
        self.last
    }
}
