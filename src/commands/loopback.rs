//! The receiver of a one-machine run (`sweep`): one session on a loopback port with a fresh random token, in a
//! thread of this process — or, for transports that must not have both ends in one process, in a child
//! `kvxfer serve --once` (see [`Transport::receiver_in_own_process`](crate::transport::Transport::receiver_in_own_process)). Either way the sender drives it exactly as
//! `send` drives a remote `serve`, and the caller joins a thread that yields the receiver's outcome.

use super::common::bind;
use crate::run::receiver::{serve_session, ReceiverLimits};
use crate::transport::{registry, TransportKind};
use anyhow::{anyhow, Context as _, Result};
use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Command, Stdio};
use std::thread::JoinHandle;

/// Where the sender reaches the receiver, its token, and the receiver's outcome once its session ends.
pub type LoopbackReceiver = (SocketAddr, String, JoinHandle<Result<()>>);

/// A receiver for one session of `transport`, on loopback.
pub fn loopback_receiver(limits: ReceiverLimits, transport: TransportKind) -> Result<LoopbackReceiver> {
    // A fresh token per session: another local user cannot write into the receiver's buffer.
    let token = crate::control::auth::new_token()?;
    if registry::get(transport).receiver_in_own_process() {
        return receiver_process(&limits, token);
    }
    let listener = bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))?;
    let addr = listener.local_addr()?;
    let receiver_token = token.clone();
    let receiver = std::thread::Builder::new().name("kvxfer-receiver".into()).spawn(move || -> Result<()> {
        let (stream, _) = listener.accept()?;
        serve_session(stream, &receiver_token, &limits)
    })?;
    Ok((addr, token, receiver))
}

/// `kvxfer serve --once` on a free loopback port, as a child with the token in its environment. Its stderr is
/// read for the port it listens on, then kept: the last `error:` line becomes the receiver's outcome, so a
/// failure reads as one line, as from a receiver thread.
fn receiver_process(limits: &ReceiverLimits, token: String) -> Result<LoopbackReceiver> {
    let exe = std::env::current_exe().context("cannot find this kvxfer executable to start its receiver")?;
    let mut cmd = Command::new(exe);
    cmd.args(["serve", "--once", "--listen", "127.0.0.1:0", "--mem", &limits.mem.to_string()]);
    cmd.args(["--max-streams", &limits.max_streams.to_string()]);
    cmd.args(["--io-timeout", &format!("{}ms", limits.timeouts.io.as_millis())]);
    let d = &limits.device;
    if let Some(names) = d.label() {
        cmd.args(["-d", &names.replace('+', ",")]);
    }
    cmd.args(["--ib-port", &d.ib_port.to_string()]);
    if let Some(g) = d.gid_index {
        cmd.args(["--gid-index", &g.to_string()]);
    }
    let mut child = cmd
        .env("KVXFER_TOKEN", &token)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot start the receiver process (kvxfer serve)")?;
    let mut lines = BufReader::new(child.stderr.take().expect("stderr is piped")).lines();
    let mut said = Vec::new();
    let addr = loop {
        match lines.next() {
            Some(Ok(line)) => match line.split_once("listening on ") {
                Some((_, rest)) => break rest.split_whitespace().next().unwrap_or_default().parse::<SocketAddr>(),
                None => said.push(line),
            },
            _ => {
                let _ = child.wait();
                let why = said.iter().rev().find_map(|l| l.strip_prefix("error: ")).unwrap_or("no reason given");
                return Err(anyhow!("the receiver process (kvxfer serve) stopped before listening: {why}"));
            }
        }
    };
    let addr = match addr {
        Ok(a) => a,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(anyhow!("the receiver process (kvxfer serve) named no address it listens on: {e}"));
        }
    };
    let outcome = std::thread::Builder::new().name("kvxfer-receiver".into()).spawn(move || -> Result<()> {
        let last_error = lines.map_while(|l| l.ok()).filter_map(|l| l.strip_prefix("error: ").map(String::from)).last();
        let status = child.wait()?;
        match (status.success(), last_error) {
            (true, _) => Ok(()),
            (false, Some(e)) => Err(anyhow!("{e}")),
            (false, None) => Err(anyhow!("the receiver process (kvxfer serve) ended with {status}")),
        }
    })?;
    Ok((addr, token, outcome))
}
