//! Reaping completions: busy-polling by default (lowest latency, one core spinning), or sleeping on a completion
//! channel (`--cq-mode event`), or both: spinning for a bounded time, then sleeping ([`Poller::spinning_first`]).
//! The work completion array is allocated once, never in the loop.

use super::qp::QpSet;
use anyhow::{bail, Result};
use rdma_mummy_sys::{
    ibv_ack_cq_events, ibv_comp_channel, ibv_cq, ibv_get_cq_event, ibv_poll_cq, ibv_req_notify_cq, ibv_wc,
};
use sideway::ibverbs::completion::{BasicCompletionQueue, CompletionChannel, CompletionQueue};
use std::ffi::c_void;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};

const BATCH: usize = 64;

pub struct Poller {
    cq: NonNull<ibv_cq>,
    channel: Option<(NonNull<ibv_comp_channel>, i32)>,
    armed: bool,
    /// With a channel: how long to busy-poll before arming it and sleeping.
    spin: Duration,
    wcs: Vec<ibv_wc>,
    // The queue and channel the raw handles above point into, held so that they outlive this poller whatever the
    // owner's field order (dropped after the fields above, which only copy pointers).
    _cq_owner: Arc<BasicCompletionQueue>,
    _channel_owner: Option<Arc<CompletionChannel>>,
}

// SAFETY: `cq` and `channel` point into the queue and channel this value holds (`_cq_owner`, `_channel_owner`), so
// they are live wherever the poller moves; libibverbs' CQ and completion-channel calls are thread-safe. `wcs` holds
// plain C structs, no pointers.
unsafe impl Send for Poller {}

impl Poller {
    pub fn new(set: &QpSet) -> Poller {
        let channel = set.channel.as_ref().map(|ch| {
            // SAFETY: the channel is held by the poller (`_channel_owner`) for as long as the pointer is used.
            (unsafe { ch.comp_channel() }, ch.as_raw_fd())
        });
        // SAFETY: the completion queue is held by the poller (`_cq_owner`) for as long as the pointer is used.
        let cq = unsafe { set.cq.cq() };
        // SAFETY: ibv_wc is a plain C struct; all-zero is a valid (empty) value.
        let wcs = vec![unsafe { std::mem::zeroed::<ibv_wc>() }; BATCH];
        Poller {
            cq,
            channel,
            armed: false,
            spin: Duration::ZERO,
            wcs,
            _cq_owner: set.cq.clone(),
            _channel_owner: set.channel.clone(),
        }
    }

    /// A poller that busy-polls for up to `spin` on each wait, then sleeps on the set's completion channel (the set
    /// must have one): completions that come sooner are reaped as fast as by polling, and a long wait leaves the
    /// core to others, such as a software RDMA device's kernel work.
    pub fn spinning_first(set: &QpSet, spin: Duration) -> Poller {
        Poller { spin, ..Poller::new(set) }
    }

    fn poll_now(&mut self) -> Result<usize> {
        // SAFETY: `cq` is a live completion queue; `wcs` has room for BATCH entries.
        let n = unsafe { ibv_poll_cq(self.cq.as_ptr(), BATCH as i32, self.wcs.as_mut_ptr()) };
        if n < 0 {
            bail!("ibv_poll_cq failed ({n})");
        }
        Ok(n as usize)
    }

    /// Completions available now, waiting at most `max` for the first one (busy or sleeping, by mode).
    pub fn wait(&mut self, max: Duration) -> Result<&[ibv_wc]> {
        let n = match self.channel {
            None => self.spin_for(max)?,
            Some((channel, fd)) => {
                let n = self.spin_for(self.spin.min(max))?;
                if n > 0 {
                    n
                } else {
                    if !self.armed {
                        // SAFETY: live CQ created with a completion channel.
                        if unsafe { ibv_req_notify_cq(self.cq.as_ptr(), 0) } != 0 {
                            bail!("ibv_req_notify_cq failed");
                        }
                        self.armed = true;
                    }
                    // A completion may have arrived between the poll and arming.
                    let n = self.poll_now()?;
                    if n > 0 {
                        n
                    } else {
                        // SAFETY: the fd belongs to the live completion channel.
                        let bfd = unsafe { BorrowedFd::borrow_raw(fd) };
                        let mut fds = [nix::poll::PollFd::new(bfd, nix::poll::PollFlags::POLLIN)];
                        let ms = max.as_millis().min(u16::MAX as u128) as u16;
                        if nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ms)).unwrap_or(0) > 0 {
                            let mut cq: *mut ibv_cq = std::ptr::null_mut();
                            let mut ctx: *mut c_void = std::ptr::null_mut();
                            // SAFETY: the channel is live and readable; out-pointers are valid.
                            if unsafe { ibv_get_cq_event(channel.as_ptr(), &mut cq, &mut ctx) } == 0 {
                                // SAFETY: acknowledge the one event just received on this CQ.
                                unsafe { ibv_ack_cq_events(self.cq.as_ptr(), 1) };
                                self.armed = false;
                            }
                        }
                        self.poll_now()?
                    }
                }
            }
        };
        Ok(&self.wcs[..n])
    }

    /// Busy-poll until a completion arrives or `max` passed (one poll at least).
    fn spin_for(&mut self, max: Duration) -> Result<usize> {
        let deadline = Instant::now() + max;
        loop {
            let n = self.poll_now()?;
            if n > 0 || Instant::now() >= deadline {
                return Ok(n);
            }
            std::hint::spin_loop();
        }
    }
}
