//! A sender speaking kvxfer's control protocol by hand against a real `kvxfer serve`, to send what a real kvxfer
//! never would: hostile messages, strangers on the data port, requests past what the run agreed.

use super::*;
use kvxfer::control::auth;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

pub fn frame(payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes().to_vec();
    f.extend_from_slice(payload);
    f
}

pub fn connect(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect to serve");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Read one reply frame; None when the server closed the connection without one.
pub fn read_reply(s: &mut TcpStream) -> Option<serde_json::Value> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).ok()?;
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut body).ok()?;
    Some(serde_json::from_slice(&body).expect("the reply is JSON"))
}

/// A real sender gets a verified 1 MiB transfer through: the server is still healthy.
pub fn assert_serves(serve: &Serve, token: Option<&str>) {
    let mut args = vec!["send", "--peer", &serve.addr, "--sizes", "1MiB", "--reps", "1", "--verify"];
    if let Some(t) = token {
        args.extend(["--token", t]);
    }
    let dir = TempDir::new("ok");
    let json = dir.arg("r.json");
    args.extend(["--json", &json]);
    run(&args).expect_code(0);
    let r = read_json(&dir.join("r.json"));
    assert_eq!(r["cases"][0]["mismatched_bytes"].as_u64(), Some(0));
}

/// Wait until serve's stderr has logged `n` finished sessions (a line per session, good or bad).
pub fn wait_sessions(serve: &Serve, n: usize) {
    let ok = serve.proc.stderr.wait_until(Duration::from_secs(15), |t| {
        t.lines().filter(|l| l.contains("run complete") || l.starts_with("error: sender")).count() >= n
    });
    assert!(ok, "serve did not finish {n} sessions:\n{}", serve.stderr());
}

/// A sender speaking the control protocol by hand, to send what a real kvxfer never would.
pub struct RawSender {
    pub ctl: TcpStream,
    pub addr: String,
    /// The session key both ends derived in the handshake.
    pub key: auth::SessionKey,
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl RawSender {
    /// Connect once `serve` has ended its earlier sessions (it runs one at a time and tells a sender that comes
    /// while the previous one is still ending that it is busy), and say Hello.
    pub fn hello(serve: &Serve) -> RawSender {
        serve.wait_idle();
        let addr = serve.addr.as_str();
        let mut ctl = connect(addr);
        // The challenge-response of control/auth.rs, with serve's empty token.
        let sender = [9u8; auth::NONCE_LEN];
        let hello = format!(
            r#"{{"type":"hello","magic":"kvxfer","protocol":8,"version":"{}","nonce":"{}"}}"#,
            env!("CARGO_PKG_VERSION"),
            hex(&sender)
        );
        ctl.write_all(&frame(hello.as_bytes())).unwrap();
        let c = read_reply(&mut ctl).expect("Challenge");
        assert_eq!(c["type"], "challenge", "{c}");
        let receiver = auth::parse_nonce(c["nonce"].as_str().unwrap()).unwrap();
        let nonces = auth::Nonces { sender, receiver };
        assert!(auth::proof_matches(&auth::receiver_proof("", &nonces), c["proof"].as_str().unwrap()));
        let proof = serde_json::json!({"type": "proof", "proof": hex(&auth::sender_proof("", &nonces))});
        ctl.write_all(&frame(proof.to_string().as_bytes())).unwrap();
        let w = read_reply(&mut ctl).expect("Welcome");
        assert_eq!(w["type"], "welcome", "{w}");
        let key = auth::session_key("", &nonces);
        RawSender { ctl, addr: addr.to_string(), key }
    }

    pub fn send(&mut self, msg: serde_json::Value) {
        self.ctl.write_all(&frame(msg.to_string().as_bytes())).unwrap();
    }

    pub fn recv(&mut self) -> serde_json::Value {
        read_reply(&mut self.ctl).expect("a reply frame")
    }

    pub fn config(&mut self, size: u64, streams: u32) -> serde_json::Value {
        self.send_config(serde_json::json!({
            "transport": {"name": "tcp", "knobs": {}}, "block_size": size, "streams": streams, "reps": 1,
            "warmup": 0, "verify": true, "seed": 7, "hugepages": false, "block_size_default": false,
            "src_mem": "host", "cases": [{"size_bytes": size, "tokens": null, "bytes_per_token": null}]}))
    }

    /// Config of a bidirectional (`--bidir`) tcp run of one stream, and the answer.
    pub fn send_bidir_config(&mut self, size: u64) -> serde_json::Value {
        let config = serde_json::json!({
            "transport": {"name": "tcp", "knobs": {}}, "block_size": size, "streams": 1, "reps": 1,
            "warmup": 0, "verify": false, "seed": 7, "hugepages": false, "block_size_default": false,
            "src_mem": "host", "cases": [{"size_bytes": size, "tokens": null, "bytes_per_token": null}]});
        self.send(serde_json::json!({"type": "config", "config": config, "bidir": true}));
        self.recv()
    }

    /// Send Config and return the answer.
    pub fn send_config(&mut self, config: serde_json::Value) -> serde_json::Value {
        self.send(serde_json::json!({"type": "config", "config": config}));
        self.recv()
    }

    /// Config, Accept, one data connection proving the session key, Connect, Connected. Returns the data connection.
    pub fn establish(&mut self, size: u64) -> TcpStream {
        let accept = self.config(size, 1);
        assert_eq!(accept["type"], "accept", "{accept}");
        let offer = &accept["offer"];
        assert_eq!(offer["region_len"].as_u64(), Some(size), "{offer}");
        let port = offer["data_port"].as_u64().unwrap();
        let host = self.addr.rsplit_once(':').unwrap().0;
        // Strangers first: one with a wrong proof, one silent (held open): both must be ignored, not counted as our
        // stream, and the silent one must not hold the real stream up.
        let mut stranger = TcpStream::connect(format!("{host}:{port}")).unwrap();
        let _ = stranger.write_all(&[0u8; 36]);
        let _silent = TcpStream::connect(format!("{host}:{port}")).unwrap();
        let mut data = TcpStream::connect(format!("{host}:{port}")).unwrap();
        data.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        data.write_all(&0u32.to_le_bytes()).unwrap();
        data.write_all(&auth::data_proof(&self.key, 0)).unwrap();
        self.send(serde_json::json!({"type": "connect", "answer": {"streams": 1}}));
        let c = self.recv();
        assert_eq!(c["type"], "connected", "{c}");
        data
    }

    pub fn rep_start(&mut self, size: u64) -> serde_json::Value {
        self.send(serde_json::json!({"type": "rep_start", "case": 0, "rep": 0, "warmup": false, "size_bytes": size}));
        self.recv()
    }
}

/// One scatter frame of one write: header (index, 1, claimed length), entry (offset, claimed length), payload.
pub fn data_write(data: &mut TcpStream, index: u64, offset: u64, payload_len: u64, claimed_len: u64) {
    raw_frame(data, &[index, 1, claimed_len, offset, claimed_len], payload_len);
}

/// Whatever header and entry words a test wants, then `payload_len` bytes of 0xab.
pub fn raw_frame(data: &mut TcpStream, words: &[u64], payload_len: u64) {
    let hdr: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let _ = data.write_all(&hdr);
    let _ = data.write_all(&vec![0xabu8; payload_len as usize]);
}
