//! `kvxfer serve`: the receiver's accept loop. One sender at a time; a failed session is reported and the loop
//! goes on (with `--once`, the exit code is that session's).

use super::common::{bind, device_choice};
use crate::cli::ServeArgs;
use crate::run::receiver::{serve_session, ReceiverLimits};
use crate::{bail_usage, transport};
use anyhow::{anyhow, Context, Result};
use std::net::SocketAddr;

pub fn run(a: ServeArgs) -> Result<()> {
    let addr: SocketAddr = a
        .listen
        .parse()
        .map_err(|_| crate::error::usage(format!("--listen {:?}: expected ADDR:PORT like 0.0.0.0:18515", a.listen)))?;
    let token = a.token.clone().unwrap_or_default();
    if !addr.ip().is_loopback() && token.is_empty() {
        bail_usage!(
            "--listen {addr}: a non-loopback address needs a token (--token T or KVXFER_TOKEN), so that only your sender can write into this host's memory"
        );
    }
    let limits = ReceiverLimits {
        max_size: a.max_size,
        max_streams: a.max_streams.max(1),
        timeouts: crate::control::Timeouts { connect: a.connect_timeout, io: a.io_timeout },
        mem: a.mem,
        device: device_choice(&a.device)?,
        shares_process: false,
    };
    if limits.mem != crate::mem::MemKind::Host {
        crate::mem::cuda::driver().map_err(|e| e.context(format!("--mem {}", limits.mem)))?;
    }
    for name in limits.device.names.iter() {
        crate::transport::verbs::device::open(&limits.device, Some(name))?;
    }
    let listener = bind(addr)?;
    // The port bound, when --listen asked for any (:0).
    let addr = listener.local_addr().unwrap_or(addr);
    crate::errln!("kvxfer serve: listening on {addr} (transports: {})", transport::TRANSPORTS.join(", "));
    loop {
        let (stream, peer) = listener.accept().map_err(|e| anyhow!("accepting a sender on {addr}: {e}"))?;
        crate::errln!("sender connected from {peer}");
        let outcome = serve_session(stream, &token, &limits);
        match &outcome {
            Ok(()) => crate::errln!("sender {peer}: run complete"),
            // With --once, main reports the error (once) as this process's own.
            Err(e) if !a.once => crate::errln!("error: sender {peer}: {e:#}"),
            Err(_) => {}
        }
        if a.once {
            return outcome.with_context(|| format!("sender {peer}"));
        }
    }
}
