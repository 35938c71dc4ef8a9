//! The receiver's side of landing: a few receives stay posted on every queue pair; the sender's last write on each
//! queue pair carries an immediate (the rep number), and the rep has landed once every queue pair delivered it.

use super::cq::Poller;
use super::device::wc_status_text;
use super::qp::QpSet;
use anyhow::{bail, Result};
use rdma_mummy_sys::{ibv_post_recv, ibv_recv_wr};
use std::time::{Duration, Instant};

/// Receives kept posted per queue pair (one is consumed per rep; more absorb scheduling jitter).
pub const RECVS_PER_QP: u32 = 4;
const IBV_WC_RECV_RDMA_WITH_IMM: u32 = 129;

pub struct Lander {
    recv: ibv_recv_wr,
    got: Vec<bool>,
    expected: u32,
    /// When the armed rep's last immediate was seen.
    landed_at: Option<Instant>,
}

// SAFETY: the receive work request holds no pointers (no scatter list; `next` is NULL).
unsafe impl Send for Lander {}

impl Lander {
    pub fn new(set: &QpSet) -> Result<Lander> {
        let mut l = Lander {
            // SAFETY: ibv_recv_wr is a plain C struct; zero = no scatter entries, no next.
            recv: unsafe { std::mem::zeroed() },
            got: vec![false; set.qps.len()],
            expected: 0,
            landed_at: None,
        };
        for q in 0..set.qps.len() {
            for _ in 0..RECVS_PER_QP {
                l.post_recv(set, q)?;
            }
        }
        Ok(l)
    }

    fn post_recv(&mut self, set: &QpSet, q: usize) -> Result<()> {
        self.recv.wr_id = q as u64;
        self.recv.next = std::ptr::null_mut();
        self.recv.sg_list = std::ptr::null_mut();
        self.recv.num_sge = 0;
        let mut bad: *mut ibv_recv_wr = std::ptr::null_mut();
        // SAFETY: live queue pair; a single receive with no scatter entries (a WRITE_WITH_IMM consumes it without
        // writing into it).
        let rc = unsafe { ibv_post_recv(set.raw_qp(q).as_ptr(), &mut self.recv, &mut bad) };
        if rc != 0 {
            bail!("ibv_post_recv on queue pair {q} failed: {}", std::io::Error::from_raw_os_error(rc));
        }
        Ok(())
    }

    /// Expect rep number `rep`'s immediates.
    pub fn arm(&mut self, rep: u32) {
        self.expected = rep;
        self.landed_at = None;
        self.got.iter_mut().for_each(|g| *g = false);
    }

    /// Wait for every queue pair's immediate of the armed rep, looking at the control connection between
    /// completions; `Ok(None)` when a control message arrived first.
    pub fn wait(
        &mut self,
        set: &QpSet,
        poller: &mut Poller,
        timeout: Duration,
        control_ready: &mut dyn FnMut() -> bool,
    ) -> Result<Option<Instant>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(at) = self.poll(set, poller, Duration::from_millis(10))? {
                return Ok(Some(at));
            }
            if control_ready() {
                return Ok(None);
            }
            if Instant::now() >= deadline {
                let n = self.got.iter().filter(|&&g| g).count();
                bail!(
                    "{n} of {} queue pairs signalled the end of the rep within --io-timeout ({:.0} s)",
                    self.got.len(),
                    timeout.as_secs_f64()
                );
            }
        }
    }

    /// Take the completions that arrive within `max`; the time the last immediate was seen once every queue pair
    /// delivered one (and on every later call of the rep).
    pub fn poll(&mut self, set: &QpSet, poller: &mut Poller, max: Duration) -> Result<Option<Instant>> {
        if let Some(at) = self.landed_at {
            return Ok(Some(at));
        }
        let mut repost = Vec::with_capacity(self.got.len());
        let wcs = poller.wait(max)?;
        let now = Instant::now();
        for wc in wcs {
            if wc.status != 0 {
                bail!("receive completion failed: {} (vendor error {:#x})", wc_status_text(wc.status), wc.vendor_err);
            }
            if wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM {
                bail!("unexpected completion (opcode {}) on the receiver", wc.opcode);
            }
            // SAFETY: for RECV_RDMA_WITH_IMM completions the union holds the immediate.
            let imm = u32::from_be(unsafe { wc.imm_data_invalidated_rkey_union.imm_data });
            if imm != self.expected {
                bail!("the sender finished rep {imm} while this receiver expected rep {}", self.expected);
            }
            let q = wc.wr_id as usize;
            if q >= self.got.len() || self.got[q] {
                bail!("a second completion for queue pair {q} in one rep");
            }
            self.got[q] = true;
            repost.push(q);
        }
        for q in repost {
            self.post_recv(set, q)?;
        }
        if self.got.iter().all(|&g| g) {
            self.landed_at = Some(now);
        }
        Ok(self.landed_at)
    }
}
