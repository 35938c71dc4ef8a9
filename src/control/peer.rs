//! One end of the control connection: typed messages over frames, with timeouts, and the handshake of each role.

use super::auth::{self, Nonces, SessionKey};
use super::frame::{read_frame, read_frame_limited, write_frame, FrameError, MAX_HELLO_FRAME};
use super::messages::{Msg, MAGIC, PROTOCOL};
use anyhow::{anyhow, bail, Context, Result};
use std::io::ErrorKind;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Timeouts that keep either side from hanging on a silent peer.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub connect: Duration,
    pub io: Duration,
}

/// Longest single connection attempt (a SYN into a black hole); attempts repeat until `--connect-timeout`.
const CONNECT_ATTEMPT: Duration = Duration::from_secs(5);

/// A connected control channel.
pub struct ControlChannel {
    stream: TcpStream,
    /// What the other end is, for error messages ("the receiver", "the sender").
    peer_role: &'static str,
    io_timeout: Duration,
    /// The session key the handshake derived (see `auth`); None before it.
    session_key: Option<SessionKey>,
}

/// The peer reported an error in an `Error` message: its text is shown as is.
#[derive(Debug, thiserror::Error)]
#[error("{role} reported: {}", crate::console::peer_error(message))]
pub struct PeerReported {
    pub role: &'static str,
    pub message: String,
}

impl ControlChannel {
    /// The session key the handshake derived; None before a successful handshake.
    pub fn session_key(&self) -> Option<SessionKey> {
        self.session_key
    }

    pub fn new(stream: TcpStream, peer_role: &'static str, io_timeout: Duration) -> Result<Self> {
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(io_timeout))?;
        stream.set_write_timeout(Some(io_timeout))?;
        Ok(ControlChannel { stream, peer_role, io_timeout, session_key: None })
    }

    /// Connect to `peer` (HOST:PORT), trying each resolved address, and again while nothing listens there yet
    /// (refused, unreachable, timed out) until `timeouts.connect` has passed: a launcher that starts both sides at
    /// once (srun, mpirun, two ssh's) may start the sender first. Says once on stderr that it is waiting.
    pub fn connect(peer: &str, timeouts: Timeouts) -> Result<Self> {
        let addrs: Vec<SocketAddr> = peer
            .to_socket_addrs()
            .map_err(|e| crate::error::usage(format!("--peer {peer}: cannot resolve: {e}; expected HOST:PORT")))?
            .collect();
        let deadline = Instant::now() + timeouts.connect;
        let mut pause = Duration::from_millis(20);
        let mut said = false;
        loop {
            let mut last = None;
            for addr in &addrs {
                let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
                match TcpStream::connect_timeout(addr, left.min(CONNECT_ATTEMPT)) {
                    Ok(s) => return Self::new(s, "the receiver", timeouts.io),
                    Err(e) => last = Some(e),
                }
            }
            let why = last.map(|e| (e.kind(), e.to_string()));
            let not_yet = why.as_ref().is_some_and(|(kind, _)| {
                matches!(
                    kind,
                    ErrorKind::ConnectionRefused
                        | ErrorKind::TimedOut
                        | ErrorKind::HostUnreachable
                        | ErrorKind::NetworkUnreachable
                        | ErrorKind::ConnectionReset
                )
            });
            if !not_yet || Instant::now() + pause >= deadline {
                let why = why.map(|(_, text)| text).unwrap_or_else(|| "no address".into());
                bail!(
                    "cannot reach the receiver at {peer} within --connect-timeout ({}): {why}; is `kvxfer serve` running there and the port open?",
                    humantime::format_duration(timeouts.connect)
                );
            }
            if !said {
                crate::errln!(
                    "waiting for the receiver at {peer} (up to {}; --connect-timeout to change)",
                    humantime::format_duration(timeouts.connect)
                );
                said = true;
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(500));
        }
    }

    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.stream.peer_addr().ok()
    }

    /// The peer as errors name it: `role` ("the sender", "the receiver") at its address, where the connection still
    /// has one.
    pub fn peer_named(&self, role: &str) -> String {
        self.peer_addr().map_or_else(|| role.to_string(), |a| format!("{role} at {a}"))
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.stream.local_addr().ok()
    }

    pub fn io_timeout(&self) -> Duration {
        self.io_timeout
    }

    /// Whether the peer has sent something (a message or a close) that is waiting to be read. Never blocks.
    pub fn has_input(&self) -> bool {
        if self.stream.set_nonblocking(true).is_err() {
            return true;
        }
        let r = self.stream.peek(&mut [0u8; 1]);
        let _ = self.stream.set_nonblocking(false);
        match r {
            Ok(_) => true, // data, or 0 = closed
            Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
        }
    }

    /// Whether the peer hung up or sent an `Error` that is waiting to be read. Never blocks; a normal message
    /// waiting (e.g. an early RepDone) is not a failure.
    pub fn peer_failed(&self) -> bool {
        if self.stream.set_nonblocking(true).is_err() {
            return true;
        }
        let mut buf = [0u8; 4096];
        let r = self.stream.peek(&mut buf);
        let _ = self.stream.set_nonblocking(false);
        match r {
            Ok(0) => true,
            Ok(n) if n >= 4 => {
                let len = u32::from_be_bytes(buf[..4].try_into().unwrap()) as usize;
                n >= 4 + len && matches!(serde_json::from_slice(&buf[4..4 + len]), Ok(Msg::Error { .. }))
            }
            Ok(_) => false,
            Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
        }
    }

    pub fn send(&mut self, msg: &Msg) -> Result<()> {
        let bytes = serde_json::to_vec(msg)?;
        write_frame(&mut self.stream, &bytes).map_err(|e| self.frame_error(e, msg.name()))
    }

    /// Receive the next message. An `Error` from the peer becomes an `Err` carrying its text.
    pub fn recv(&mut self, waiting_for: &str) -> Result<Msg> {
        let bytes = read_frame(&mut self.stream).map_err(|e| self.frame_error(e, waiting_for))?;
        self.decode(bytes)
    }

    /// Receive the opening message of a peer that has not authenticated yet: at most [`MAX_HELLO_FRAME`] bytes,
    /// all of it by `deadline` (a peer sending a byte a second cannot hold the handshake open).
    fn recv_before(&mut self, deadline: Instant, waiting_for: &str) -> Result<Msg> {
        let mut r = DeadlineReader { stream: &self.stream, deadline };
        let bytes = read_frame_limited(&mut r, MAX_HELLO_FRAME).map_err(|e| match e {
            FrameError::TimedOut => {
                anyhow!("{} sent no complete {waiting_for} within the handshake's deadline", self.peer_role)
            }
            e => self.frame_error(e, waiting_for),
        })?;
        self.stream.set_read_timeout(Some(self.io_timeout))?;
        self.decode(bytes)
    }

    fn decode(&mut self, bytes: Vec<u8>) -> Result<Msg> {
        let msg: Msg = serde_json::from_slice(&bytes).map_err(|e| {
            // serde quotes what it could not read (an unknown variant, a string): peer text, escaped.
            let why = crate::console::printable(&e.to_string());
            anyhow!("{} sent a malformed control message ({why}); is it a kvxfer peer?", self.peer_role)
        })?;
        if let Msg::Error { message } = msg {
            // An authenticated peer's error is why the run stopped and is kept whole; a stranger's is cut to a log
            // line.
            let message = if self.session_key.is_some() { message } else { crate::console::printable(&message) };
            let reported = PeerReported { role: self.peer_role, message: message.clone() };
            // A peer refusing our input (bad size, wrong token) is the user's to fix: keep exit code 2.
            if message.starts_with("usage: ") {
                let text = crate::console::peer_error(message.trim_start_matches("usage: "));
                return Err(crate::error::usage(format!("{} refused: {text}", self.peer_role)));
            }
            return Err(reported.into());
        }
        Ok(msg)
    }

    /// Tell the peer why we stop. Best effort: the connection may already be gone.
    pub fn send_error(&mut self, err: &anyhow::Error) {
        let prefix = if crate::error::exit_code(err) == 2 { "usage: " } else { "" };
        let _ = self.send(&Msg::Error { message: format!("{prefix}{err:#}") });
    }

    fn frame_error(&self, e: FrameError, during: &str) -> anyhow::Error {
        let role = self.peer_role;
        match e {
            FrameError::Closed | FrameError::Truncated => {
                anyhow!("{role} closed the control connection (while waiting for {during}); did it exit or crash?")
            }
            FrameError::TimedOut => anyhow!(
                "{role} did not answer within {:.0} s (waiting for {during}); raise --io-timeout if it is just slow",
                self.io_timeout.as_secs_f64()
            ),
            other => anyhow!("{other} (waiting for {during} from {role})"),
        }
    }
}

/// Sender side of the handshake (see `auth`): Hello with a fresh nonce, check the receiver's proof, send ours.
/// Returns the receiver's hostname; the channel then holds the session key.
pub fn client_hello(ch: &mut ControlChannel, token: &str) -> Result<String> {
    let sender = auth::nonce()?;
    ch.send(&Msg::Hello {
        magic: MAGIC.into(),
        protocol: PROTOCOL,
        version: env!("CARGO_PKG_VERSION").into(),
        nonce: hex::encode(sender),
    })?;
    let (nonce, proof) = match ch.recv("Challenge")? {
        Msg::Challenge { nonce, proof } => (nonce, proof),
        other => bail!("the receiver answered {} to Hello; is it a kvxfer peer?", other.name()),
    };
    let receiver = auth::parse_nonce(&nonce).ok_or_else(|| anyhow!("the receiver's challenge nonce is malformed"))?;
    let nonces = Nonces { sender, receiver };
    if !auth::proof_matches(&auth::receiver_proof(token, &nonces), &proof) {
        let _ = ch.send(&Msg::Error {
            message:
                "usage: wrong token: the sender's token is not this receiver's (its challenge proof does not match)"
                    .into(),
        });
        return Err(crate::error::usage(
            "wrong token: the receiver's proof of its token does not match this one; pass the receiver's token with --token or KVXFER_TOKEN",
        ));
    }
    ch.send(&Msg::Proof { proof: hex::encode(auth::sender_proof(token, &nonces)) })?;
    match ch.recv("Welcome")? {
        Msg::Welcome { hostname, .. } => {
            ch.session_key = Some(auth::session_key(token, &nonces));
            Ok(hostname)
        }
        other => bail!("the receiver answered {} to Proof; is it a kvxfer peer?", other.name()),
    }
}

/// Marks a handshake that never became a kvxfer Hello (silence, a trickle, an oversized or foreign first frame):
/// `serve --once` waits on for a real sender instead of ending there.
#[derive(Debug)]
pub struct Stranger;

impl std::fmt::Display for Stranger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("not a kvxfer sender")
    }
}

/// Whether a handshake error came from a connection that never presented a kvxfer Hello.
pub fn is_stranger(e: &anyhow::Error) -> bool {
    e.is::<Stranger>()
}

/// How long a connection may take, from accept, to present a complete Hello.
pub const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(5);

/// Reads that give up at `deadline`, however the bytes trickle in.
struct DeadlineReader<'a> {
    stream: &'a TcpStream,
    deadline: Instant,
}

impl std::io::Read for DeadlineReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        self.stream.set_read_timeout(Some(left))?;
        (&mut &*self.stream).read(buf)
    }
}

/// Receiver side of the handshake: check magic and protocol, challenge the sender to prove it holds the token
/// (see `auth`), answer Welcome or Error. Hello and Proof must both be complete by `deadline` and small (see
/// [`ControlChannel::recv_before`]); the channel then holds the session key.
pub fn server_hello(ch: &mut ControlChannel, expected_token: &str, deadline: Instant) -> Result<()> {
    let msg = ch.recv_before(deadline, "Hello").context("handshake").map_err(|e| e.context(Stranger))?;
    let Msg::Hello { magic, protocol, version, nonce } = msg else {
        return Err(
            anyhow!("the sender opened with {} instead of Hello; is it a kvxfer peer?", msg.name()).context(Stranger)
        );
    };
    if magic != MAGIC {
        return Err(
            anyhow!("the sender is not kvxfer (magic {:?})", crate::console::printable(&magic)).context(Stranger)
        );
    }
    if protocol != PROTOCOL {
        let text = format!(
            "protocol version mismatch: sender kvxfer {} speaks protocol {protocol}, receiver kvxfer {} speaks {PROTOCOL}; run the same kvxfer version on both ends",
            crate::console::printable(&version),
            env!("CARGO_PKG_VERSION")
        );
        let _ = ch.send(&Msg::Error { message: text.clone() });
        bail!(text);
    }
    let Some(sender) = auth::parse_nonce(&nonce) else {
        return Err(anyhow!("the sender's Hello has no valid nonce").context(Stranger));
    };
    let nonces = Nonces { sender, receiver: auth::nonce()? };
    let proof = hex::encode(auth::receiver_proof(expected_token, &nonces));
    ch.send(&Msg::Challenge { nonce: hex::encode(nonces.receiver), proof })?;
    let given = match ch.recv_before(deadline, "Proof").context("handshake")? {
        Msg::Proof { proof } => proof,
        // A sender that found our proof wrong says so; its text is the story.
        Msg::Error { message } => bail!(PeerReported { role: "the sender", message }),
        other => bail!("the sender answered {} to Challenge", other.name()),
    };
    if !auth::proof_matches(&auth::sender_proof(expected_token, &nonces), &given) {
        let _ = ch.send(&Msg::Error {
            message: "usage: wrong token; pass the receiver's token with --token or KVXFER_TOKEN".into(),
        });
        return Err(crate::error::usage("the sender presented a wrong token; connection refused"));
    }
    ch.session_key = Some(auth::session_key(expected_token, &nonces));
    ch.send(&Msg::Welcome { version: env!("CARGO_PKG_VERSION").into(), hostname: crate::env::hostname() })
}

/// Compare tokens in constant time (for equal lengths) so the comparison leaks nothing about the expected token.
pub fn tokens_match(given: &str, expected: &str) -> bool {
    use subtle::ConstantTimeEq;
    given.as_bytes().ct_eq(expected.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real loopback connection: (the sender's end, the receiver's end).
    fn connected() -> (ControlChannel, ControlChannel) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let sender = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (receiver, _) = listener.accept().unwrap();
        let timeout = Duration::from_secs(10);
        (
            ControlChannel::new(sender, "the receiver", timeout).unwrap(),
            ControlChannel::new(receiver, "the sender", timeout).unwrap(),
        )
    }

    /// The reason a receiver's engine failed, with the loader's words past the 200th character.
    fn engine_error() -> String {
        format!(
            "--nixl-backend libfabric: Backend error occurred: /work/{}/plugins/libplugin_LIBFABRIC.so does not load: libfabric.so.1: cannot open shared object file: No such file or directory",
            "venv/lib/python3.11/site-packages/.nixl_cu12.mesonpy.libs".repeat(2)
        )
    }

    #[test]
    fn an_authenticated_receivers_error_arrives_whole_a_strangers_is_cut() {
        let (mut sender, mut receiver) = connected();
        let served = std::thread::spawn(move || {
            server_hello(&mut receiver, "s3cret-token", Instant::now() + Duration::from_secs(10)).unwrap();
            receiver.send_error(&anyhow!("{}", engine_error()));
        });
        client_hello(&mut sender, "s3cret-token").unwrap();
        let e = sender.recv("RepDone").unwrap_err();
        served.join().unwrap();
        assert_eq!(e.to_string(), format!("the receiver reported: {}", engine_error()));

        // Before the handshake the peer is anyone: its text is cut to a log line.
        let (mut sender, mut stranger) = connected();
        stranger.send(&Msg::Error { message: engine_error() }).unwrap();
        let e = sender.recv("Challenge").unwrap_err().to_string();
        assert!(e.ends_with('…') && e.chars().count() < engine_error().chars().count(), "{e}");
    }

    #[test]
    fn token_comparison() {
        assert!(tokens_match("abc", "abc"));
        assert!(tokens_match("", ""));
        assert!(!tokens_match("abd", "abc"));
        assert!(!tokens_match("ab", "abc"));
    }
}
