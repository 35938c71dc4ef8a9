//! The control channel against a real `kvxfer serve`: wrong tokens, protocol mismatches and hostile bytes must be
//! refused with a clear message and must never take the server down.

mod common;

use common::raw_sender::*;
use common::*;
use kvxfer::control::auth;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

#[test]
fn wrong_token_is_refused_and_serve_keeps_serving() {
    let mut serve = Serve::start(&["--token", "right-token"]);
    let bad = run(&["send", "--peer", &serve.addr, "--token", "wrong-token", "--sizes", "1MiB"]);
    bad.expect_code(2);
    let line = bad.one_error();
    assert!(line.contains("token"), "{line}");
    assert!(!bad.stderr.contains("right-token"), "never echo the expected token");
    // No token at all is refused the same way.
    let none = run(&["send", "--peer", &serve.addr, "--sizes", "1MiB"]);
    none.expect_code(2);
    assert!(none.one_error().contains("token"), "{}", none.stderr);
    wait_sessions(&serve, 2);
    assert!(serve.stderr().contains("wrong token"), "{}", serve.stderr());
    assert!(serve.proc.is_running(), "serve (without --once) survives a wrong token");
    assert_serves(&serve, Some("right-token"));
    assert!(serve.proc.is_running());
}

#[test]
fn token_from_the_environment() {
    let serve = Serve::start(&["--token", "env-secret", "--once"]);
    let dir = TempDir::new("envtok");
    let json = dir.arg("r.json");
    let out = kvxfer()
        .args(["send", "--peer", &serve.addr, "--sizes", "1MiB", "--reps", "1", "--json", &json])
        .env("KVXFER_TOKEN", "env-secret")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("warning: --token"), "a token from the environment is not warned about: {stderr}");
    assert_eq!(read_json(&dir.join("r.json"))["cases"][0]["n"].as_u64(), Some(1));
    let serve = serve.proc.finish();
    serve.expect_code(0);
    // serve's own --token was on its command line, where any user of the host reads it: said once, naming the fix.
    let warned: Vec<&str> = serve.stderr.lines().filter(|l| l.starts_with("warning: --token")).collect();
    assert_eq!(warned.len(), 1, "{}", serve.stderr);
    assert!(warned[0].contains("/proc/PID/cmdline") && warned[0].contains("KVXFER_TOKEN"), "{}", warned[0]);
}

#[test]
fn wrong_token_with_once_exits_serve_with_one_error() {
    let serve = Serve::start(&["--token", "right", "--once"]);
    run(&["send", "--peer", &serve.addr, "--token", "nope", "--sizes", "1MiB"]).expect_code(2);
    let s = serve.proc.finish();
    s.no_panic();
    assert_ne!(s.code, Some(0), "{}", s.stderr);
    assert!(s.one_error().contains("token"), "{}", s.stderr);
}

/// A sender of the protocol before this one (its Config had another shape) is turned away at Hello, in one line
/// naming both protocols.
#[test]
fn a_sender_of_the_previous_protocol_is_refused_naming_both() {
    let mut serve = Serve::start(&[]);
    let mut s = connect(&serve.addr);
    let hello = br#"{"type":"hello","magic":"kvxfer","protocol":6,"version":"0.0.9","nonce":""}"#;
    s.write_all(&frame(hello)).unwrap();
    let reply = read_reply(&mut s).expect("an Error frame before the close");
    let msg = reply["message"].as_str().unwrap();
    assert!(!msg.contains('\n'), "one line: {msg}");
    assert!(msg.contains("sender kvxfer 0.0.9 speaks protocol 6") && msg.contains("speaks 8"), "{msg}");
    wait_sessions(&serve, 1);
    assert!(serve.proc.is_running());
    assert_serves(&serve, None);
}

#[test]
fn protocol_version_mismatch_gets_an_error_frame() {
    let mut serve = Serve::start(&[]);
    let mut s = connect(&serve.addr);
    let hello = br#"{"type":"hello","magic":"kvxfer","protocol":999,"version":"x","token":""}"#;
    s.write_all(&frame(hello)).unwrap();
    let reply = read_reply(&mut s).expect("an Error frame before the close");
    assert_eq!(reply["type"], "error", "{reply}");
    let msg = reply["message"].as_str().unwrap();
    assert!(msg.contains("protocol") && msg.contains("999"), "{msg}");
    assert!(msg.contains("version"), "{msg}");
    // Then the server closes this connection.
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert!(rest.is_empty(), "nothing after the Error frame: {rest:?}");
    wait_sessions(&serve, 1);
    assert!(serve.stderr().contains("protocol version mismatch"), "{}", serve.stderr());
    assert!(serve.proc.is_running());
    assert_serves(&serve, None);
}

#[test]
fn wrong_magic_and_wrong_first_message_are_refused() {
    let mut serve = Serve::start(&[]);
    for payload in [
        &br#"{"type":"hello","magic":"http","protocol":1,"version":"x","token":""}"#[..],
        &br#"{"type":"finish"}"#[..],
        &br#"{"type":"rep_start","case":0,"rep":0,"warmup":false,"size_bytes":18446744073709551615}"#[..],
        // A message type that carries a forged log line: serde quotes the unknown variant back.
        &br#"{"type":"x\nerror: forged line"}"#[..],
    ] {
        let mut s = connect(&serve.addr);
        s.write_all(&frame(payload)).unwrap();
        let _ = read_reply(&mut s); // an Error frame or a plain close; either way no crash
    }
    wait_sessions(&serve, 4);
    assert!(serve.stderr().contains("magic"), "{}", serve.stderr());
    assert!(
        !serve.stderr().lines().any(|l| l.starts_with("error: forged")),
        "a peer forged a log line:\n{}",
        serve.stderr()
    );
    assert!(serve.stderr().contains("\\u{a}error: forged line"), "{}", serve.stderr());
    assert!(serve.proc.is_running());
    assert_serves(&serve, None);
}

#[test]
fn garbage_huge_and_truncated_frames_do_not_crash_serve() {
    let mut serve = Serve::start(&[]);
    let garbage: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let inputs: Vec<(&str, Vec<u8>)> = vec![
        ("http request", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
        ("pseudo-random bytes", garbage),
        ("huge length prefix", vec![0xff, 0xff, 0xff, 0xff, 1, 2, 3]),
        ("length just above the limit", ((1u32 << 20) + 1).to_be_bytes().to_vec()),
        ("truncated frame", {
            let mut f = frame(br#"{"type":"hello","magic":"kvxfer","protocol":8,"version":"x","nonce":""}"#);
            f.truncate(20);
            f
        }),
        ("truncated length", vec![0, 0]),
        ("valid frame, not JSON", frame(b"\x00\x01{not json")),
        ("valid JSON, not a message", frame(br#"{"type":"launch_missiles"}"#)),
        ("empty frame", frame(b"")),
    ];
    let n = inputs.len();
    for (what, bytes) in inputs {
        let mut s = connect(&serve.addr);
        // The server may close as soon as it has seen enough; a reset here is fine.
        let _ = s.write_all(&bytes);
        let _ = s.shutdown(Shutdown::Write);
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink);
        assert!(serve.proc.is_running(), "serve died after: {what}\n{}", serve.stderr());
    }
    wait_sessions(&serve, n);
    let err = serve.stderr();
    assert!(err.contains("limit"), "oversized frame named: {err}");
    assert!(err.contains("middle of a message") || err.contains("closed"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_serves(&serve, None);
    assert!(serve.proc.is_running());
}

#[test]
fn a_silent_client_times_out_and_serve_moves_on() {
    let mut serve = Serve::start(&["--io-timeout", "1s"]);
    let t = Instant::now();
    let mut s = connect(&serve.addr);
    // Say nothing; the server must give up on its own within --io-timeout.
    let mut buf = [0u8; 64];
    let _ = s.read(&mut buf);
    let waited = t.elapsed();
    assert!(waited < Duration::from_secs(5), "server waited {waited:?}");
    wait_sessions(&serve, 1);
    assert!(serve.stderr().contains("no complete Hello"), "{}", serve.stderr());
    assert!(serve.proc.is_running());
    assert_serves(&serve, None);
}

// ------------------------------------------------------------------------------------ a hand-written sender

#[test]
fn hand_written_sender_completes_a_rep() {
    // The protocol as documented in control/messages.rs, driven by hand: proves the raw client below is faithful.
    let serve = Serve::start(&["--once"]);
    let mut s = RawSender::hello(&serve);
    let mut data = s.establish(8192);
    assert_eq!(s.rep_start(8192)["type"], "rep_ready");
    // One frame of one write, then one frame of two (scattered out of order): acks name (first index, count).
    data_write(&mut data, 0, 4096, 4096, 4096);
    raw_frame(&mut data, &[1, 2, 4096, 2048, 2048, 0, 2048], 4096);
    let mut ack = [0u8; 16];
    for want in [(0u64, 1u64), (1, 2)] {
        data.read_exact(&mut ack).unwrap();
        let word = |i: usize| u64::from_le_bytes(ack[i * 8..i * 8 + 8].try_into().unwrap());
        assert_eq!((word(0), word(1)), want);
    }
    let done = s.recv();
    assert_eq!(done["type"], "rep_done", "{done}");
    // 0xab is not the verify pattern: the receiver counts (nearly) every byte as a mismatch.
    assert!(done["mismatched_bytes"].as_u64().unwrap() > 8000, "{done}");
    s.send(serde_json::json!({"type": "finish"}));
    assert_eq!(s.recv()["type"], "bye");
    serve.proc.finish().expect_code(0);
}

/// A sender that keeps writing into the region after the rep landed, while the receiver verifies it: the receive
/// thread and verify then touch the same bytes at once, which verify's volatile reads are built for. The count is
/// whatever it is (the bytes are 0xab anyway); the receiver must answer and keep serving.
#[test]
fn writes_racing_the_receivers_verify_only_skew_its_count() {
    const SIZE: u64 = 16 << 20;
    let serve = Serve::start(&["--once"]);
    let mut s = RawSender::hello(&serve);
    let mut data = s.establish(SIZE);
    assert_eq!(s.rep_start(SIZE)["type"], "rep_ready");
    data_write(&mut data, 0, 0, SIZE, SIZE);
    let mut more = data.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        for i in 1..8 {
            data_write(&mut more, i, 0, SIZE, SIZE);
        }
    });
    let done = s.recv();
    assert_eq!(done["type"], "rep_done", "{done}");
    assert!(done["mismatched_bytes"].as_u64().unwrap() > SIZE / 2, "{done}");
    writer.join().unwrap();
    s.send(serde_json::json!({"type": "finish"}));
    assert_eq!(s.recv()["type"], "bye");
    serve.proc.finish().expect_code(0);
}

#[test]
fn rep_larger_than_the_agreed_buffer_is_refused() {
    let mut serve = Serve::start(&[]);
    let mut s = RawSender::hello(&serve);
    let _data = s.establish(4096);
    let e = s.rep_start(1 << 30);
    assert_eq!(e["type"], "error", "{e}");
    assert!(e["message"].as_str().unwrap().contains("outside the agreed buffer"), "{e}");
    wait_sessions(&serve, 1);
    assert!(serve.proc.is_running());
    assert_serves(&serve, None);
}

#[test]
fn data_writes_outside_the_region_are_refused() {
    let mut serve = Serve::start(&[]);
    for (offset, len) in [(4096u64, 4096u64), (1, 4096), (u64::MAX - 1, 2), (0, u64::MAX), (0, 0)] {
        let mut s = RawSender::hello(&serve);
        let mut data = s.establish(4096);
        assert_eq!(s.rep_start(4096)["type"], "rep_ready");
        // Send only the header and a little payload: the receiver must refuse on the header alone.
        data_write(&mut data, 0, offset, len.min(16), len);
        let e = s.recv();
        assert_eq!(e["type"], "error", "offset {offset} len {len}: {e}");
        let msg = e["message"].as_str().unwrap();
        assert!(msg.contains("region") && msg.contains("refused"), "{msg}");
    }
    wait_sessions(&serve, 5);
    assert!(serve.proc.is_running());
    assert_serves(&serve, None);
}

#[test]
fn malformed_scatter_frames_are_refused() {
    let mut serve = Serve::start(&[]);
    for (what, words, needle) in [
        ("no writes", vec![0u64, 0, 0], "frame of 0 writes"),
        ("too many writes", vec![0, 1 << 40, 4096], "frame of"),
        ("payload longer than its writes", vec![0, 1, 4096, 0, 2048], "add up to 2048"),
        ("overlapping the end", vec![0, 2, 4096, 0, 2048, 4000, 2048], "outside"),
        ("two writes onto the same bytes", vec![0, 2, 4096, 1024, 2048, 0, 2048], "overlap"),
    ] {
        let mut s = RawSender::hello(&serve);
        let mut data = s.establish(4096);
        assert_eq!(s.rep_start(4096)["type"], "rep_ready");
        raw_frame(&mut data, &words, 16);
        let e = s.recv();
        assert_eq!(e["type"], "error", "{what}: {e}");
        let msg = e["message"].as_str().unwrap();
        assert!(msg.contains(needle) && msg.contains("refused"), "{what}: {msg}");
    }
    wait_sessions(&serve, 5);
    assert!(serve.proc.is_running());
    assert_serves(&serve, None);
}

#[test]
fn receiver_limits_are_checked_before_allocating() {
    let mut serve = Serve::start(&["--max-size", "1MiB", "--max-streams", "2"]);
    let big = run(&["send", "--peer", &serve.addr, "--sizes", "2MiB"]);
    big.expect_code(2);
    let line = big.one_error();
    assert!(line.contains("receiver refused") && line.contains("--max-size"), "{line}");
    let wide = run(&["send", "--peer", &serve.addr, "--sizes", "1MiB", "--streams", "3"]);
    wide.expect_code(2);
    assert!(wide.one_error().contains("at most 2"), "{}", wide.stderr);
    // By hand: an unknown transport and a size beyond any memory.
    let mut s = RawSender::hello(&serve);
    let e = s.send_config(serde_json::json!({
        "transport": {"name": "smoke-signals", "knobs": {}}, "block_size": 1, "streams": 1, "reps": 1,
        "warmup": 0, "verify": false, "seed": 0, "hugepages": false, "block_size_default": false,
        "src_mem": "host", "cases": [{"size_bytes": 1, "tokens": null, "bytes_per_token": null}]}));
    assert!(e["message"].as_str().unwrap().contains("smoke-signals"), "{e}");
    let mut s = RawSender::hello(&serve);
    let e = s.config(u64::MAX, 1);
    assert_eq!(e["type"], "error", "{e}");
    wait_sessions(&serve, 4);
    assert!(serve.proc.is_running());
    assert_serves(&serve, None);
}

/// The token never crosses the network and a captured handshake proves nothing later: each connection's proof is
/// bound to both ends' fresh nonces, so a Proof replayed on a new connection is refused as a wrong token.
#[test]
fn a_replayed_proof_is_refused_and_the_token_is_never_sent() {
    let token = "right-token-16chars";
    let mut serve = Serve::start(&["--token", token]);
    let sender = [7u8; auth::NONCE_LEN];
    let hello = format!(
        r#"{{"type":"hello","magic":"kvxfer","protocol":8,"version":"{}","nonce":"{}"}}"#,
        env!("CARGO_PKG_VERSION"),
        hex(&sender)
    );
    let challenge = |ctl: &mut TcpStream| {
        ctl.write_all(&frame(hello.as_bytes())).unwrap();
        let c = read_reply(ctl).expect("Challenge");
        assert_eq!(c["type"], "challenge", "{c}");
        auth::parse_nonce(c["nonce"].as_str().unwrap()).unwrap()
    };
    // A good handshake, as a sender that knows the token makes it.
    let mut first = connect(&serve.addr);
    let nonces = auth::Nonces { sender, receiver: challenge(&mut first) };
    let proof = serde_json::json!({"type": "proof", "proof": hex(&auth::sender_proof(token, &nonces))}).to_string();
    assert!(!proof.contains(token) && !hello.contains(token));
    first.write_all(&frame(proof.as_bytes())).unwrap();
    assert_eq!(read_reply(&mut first).expect("Welcome")["type"], "welcome");
    drop(first);
    // The same Hello and the captured Proof on a new connection: the receiver's nonce is new, the proof is stale.
    serve.wait_idle();
    let mut second = connect(&serve.addr);
    let receiver = challenge(&mut second);
    assert_ne!(receiver, nonces.receiver, "every connection gets a fresh nonce");
    second.write_all(&frame(proof.as_bytes())).unwrap();
    let e = read_reply(&mut second).expect("an Error frame");
    assert_eq!(e["type"], "error", "{e}");
    assert!(e["message"].as_str().unwrap().contains("wrong token"), "{e}");
    assert!(serve.proc.is_running());
}

#[test]
fn serve_on_a_network_address_needs_a_long_token_and_kvxfer_token_makes_one() {
    let short = run(&["serve", "--listen", "0.0.0.0:0", "--token", "fifteen-chars-x"]);
    short.expect_code(2);
    let line = short.one_error();
    assert!(line.contains("at least 16") && line.contains("kvxfer token"), "{line}");
    let t = run(&["token"]);
    t.expect_code(0);
    let made = t.stdout.trim();
    assert!(made.len() == 32 && made.chars().all(|c| c.is_ascii_hexdigit()), "{made:?}");
    assert_ne!(run(&["token"]).stdout.trim(), made, "a fresh token each time");
}
