//! Strangers at rank 0's door: a real 2-rank `kvxfer cluster` run on loopback, with this test connecting to rank 0
//! as each stranger would (wrong magic, another protocol, garbage, a huge or trickled frame, a Join captured from a
//! real rank and replayed) while the run still gathers. None of them may end or stall the run: each is turned away
//! and named in escaped form on rank 0's stderr, and the real rank 1 joins and the run finishes. Also the world
//! size's bounds: a usage error past 65,536, and a 20,000-rank run that nobody joins times out in bounded memory
//! with its missing ranks summarized.

mod common;

use common::launch::clean;
use common::{free_port, read_json, Proc, TempDir};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const TOKEN: &str = "strangers-test-token-1234";
const ARRIVES: Duration = Duration::from_secs(20);

/// Rank `r` of `size`, meeting at 127.0.0.1:`port`; rank 0 writes `json`.
fn rank(r: usize, size: &str, port: u16, json: &str, extra: &[&str]) -> Proc {
    let mut cmd = clean(Command::new(common::bin()));
    cmd.args(["cluster", "--coordinator", &format!("127.0.0.1:{port}"), "--sizes", "1MiB", "--reps", "1"]);
    cmd.args(["--warmup", "0", "--verify", "--json", json]).args(extra);
    cmd.env("KVXFER_RANK", r.to_string()).env("KVXFER_WORLD_SIZE", size).env("KVXFER_TOKEN", TOKEN);
    Proc::start(&mut cmd, format!("kvxfer cluster rank {r} of {size}"))
}

/// One rendezvous frame: a 4-byte big-endian length, then the bytes.
fn frame(body: &[u8]) -> Vec<u8> {
    [&(body.len() as u32).to_be_bytes()[..], body].concat()
}

fn read_frame(s: &mut TcpStream) -> Vec<u8> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).expect("a frame's length");
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut body).expect("a frame's body");
    body
}

/// Connect to rank 0 (retrying while it is not listening yet) and read its Challenge: the nonce, as bytes.
fn challenged(port: u16) -> (TcpStream, [u8; 16]) {
    let start = Instant::now();
    let mut s = loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => break s,
            // Rank 0 is still starting (a refused connect is the answer to wait for): try again.
            Err(_) if start.elapsed() < ARRIVES => std::thread::yield_now(),
            Err(e) => panic!("rank 0 never listened on {port}: {e}"),
        }
    };
    s.set_read_timeout(Some(ARRIVES)).unwrap();
    let challenge: Value = serde_json::from_slice(&read_frame(&mut s)).expect("a JSON challenge");
    assert_eq!(challenge["type"], "Challenge", "{challenge}");
    let nonce = hex::decode(challenge["nonce"].as_str().unwrap()).unwrap();
    (s, nonce.try_into().unwrap())
}

/// A Join as a stranger writes it: any proof.
fn join(magic: &str, protocol: u32, rank: usize, world_size: usize, host: &str) -> Vec<u8> {
    let msg = json!({"type": "Join", "magic": magic, "protocol": protocol, "nonce": "11".repeat(16),
        "proof": "22".repeat(32), "rank": rank, "world_size": world_size, "local_rank": 0, "host": host,
        "addr": "127.0.0.1:1"});
    frame(&serde_json::to_vec(&msg).unwrap())
}

/// The Join a real rank 1 sends, captured by this test playing rank 0 for it on another port.
fn captured_join() -> Vec<u8> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let dir = TempDir::new("strangers-decoy");
    let mut decoy = rank(1, "2", port, &dir.arg("unused.json"), &["--rendezvous-timeout", "20s"]);
    let (mut s, _) = listener.accept().unwrap();
    s.set_read_timeout(Some(ARRIVES)).unwrap();
    let challenge = json!({"type": "Challenge", "nonce": "00112233445566778899aabbccddeeff"});
    s.write_all(&frame(&serde_json::to_vec(&challenge).unwrap())).unwrap();
    let body = read_frame(&mut s);
    drop(s);
    // The decoy gives up (its rank 0 went away); it only had to join once.
    assert!(decoy.wait_timeout(ARRIVES).is_some(), "the decoy rank 1 did not exit: {}", decoy.stderr.text());
    frame(&body)
}

const TURNED_AWAY: &str = "rendezvous: turned away a connection from ";

/// Wait until rank 0 has turned `n` connections away; the `n`th line.
fn nth_turned_away(rank0: &Proc, n: usize) -> String {
    let seen = rank0.stderr.wait_until(ARRIVES, |t| t.matches(TURNED_AWAY).count() >= n);
    let text = rank0.stderr.text();
    assert!(seen, "rank 0 did not turn away connection {n}:\n{text}");
    text.lines().map(common::unprefixed).filter(|l| l.starts_with(TURNED_AWAY)).nth(n - 1).unwrap().to_string()
}

/// Rank 1 joins after the strangers; both ranks exit 0 and rank 0 wrote both flows, verified.
fn finish_run(rank0: Proc, port: u16, json: &str) -> String {
    let rank1 = rank(1, "2", port, json, &[]);
    let (out0, out1) = (rank0.finish(), rank1.finish());
    out1.expect_code(0);
    out0.expect_code(0);
    let r = read_json(Path::new(json));
    let cases = r["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 2, "0→1 and 1→0");
    assert!(cases.iter().all(|c| c["verified"] == true), "{cases:?}");
    out0.stderr
}

#[test]
fn strangers_at_rank_0_are_turned_away_and_the_run_finishes() {
    let dir = TempDir::new("strangers");
    let json = dir.arg("r.json");
    let port = free_port();
    let rank0 = rank(0, "2", port, &json, &["--rendezvous-timeout", "60s"]);
    let replay = captured_join();
    let forged = format!("evil\x1b[31m\nforged: line {}", "x".repeat(600));
    // (what it sends after the Challenge, what rank 0's line for it says)
    let strangers: [(Vec<u8>, &str); 6] = [
        (join("nope", 2, 1, 2, &forged), "is not kvxfer: magic \"nope\""),
        (join("kvxfer-cluster", 99, 1, 2, "other"), "speaks rendezvous protocol 99, rank 0 speaks 2"),
        (b"GET / HTTP/1.1\r\n\r\n".to_vec(), "byte message"),
        (frame(b"\x1b[2J\nnot json"), "not a kvxfer rendezvous message"),
        ((1u32 << 20).to_be_bytes().to_vec(), "announced a 1048576-byte message"),
        (replay, "its proof does not match this run's KVXFER_TOKEN"),
    ];
    for (i, (bytes, says)) in strangers.iter().enumerate() {
        let (mut s, _) = challenged(port);
        s.write_all(bytes).unwrap();
        let line = nth_turned_away(&rank0, i + 1);
        assert!(line.contains(says), "stranger {i}: {line}");
        assert!(!line.contains("rank 1"), "a stranger is not named as a rank: {line}");
    }
    let err = finish_run(rank0, port, &json);
    assert!(err.contains("every rank joined; 6 connections were turned away"), "{err}");
    // The forged host arrives escaped and cut: no terminal escape, no line of its own, no 600-character run.
    assert!(!err.contains('\x1b') && err.contains("evil\\u{1b}[31m\\u{a}forged"), "{err}");
    assert!(!err.lines().any(|l| l.starts_with("forged")), "{err}");
    assert!(err.lines().all(|l| l.chars().count() < 500), "{err}");
}

/// Send a frame's length and then its bytes one at a time until rank 0 drops the connection (or `give_up`).
fn trickle(mut s: TcpStream, announced: u32, give_up: Duration) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let start = Instant::now();
        let _ = s.write_all(&announced.to_be_bytes());
        // A byte a quarter second (each read call on rank 0 gets something well within any per-read timeout),
        // stopping as soon as rank 0 drops the connection: the pause is a wait for that close.
        s.set_read_timeout(Some(Duration::from_millis(250))).unwrap();
        while start.elapsed() < give_up && s.write_all(b" ").is_ok() {
            match s.read(&mut [0u8; 64]) {
                Ok(0) => break,
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                Ok(_) | Err(_) => break,
            }
        }
    })
}

#[test]
fn a_trickler_is_cut_at_its_deadline_and_never_holds_the_real_rank_back() {
    let dir = TempDir::new("strangers-trickle");
    let json = dir.arg("r.json");
    let port = free_port();
    let rank0 = rank(0, "2", port, &json, &["--rendezvous-timeout", "30s"]);
    // A 1 MiB length is refused as soon as it arrives.
    let huge = trickle(challenged(port).0, 1 << 20, ARRIVES);
    assert!(nth_turned_away(&rank0, 1).contains("announced a 1048576-byte message"));
    // A small frame trickled a byte a quarter second is cut at its deadline, long before it would be whole.
    let connected = Instant::now();
    let slow = trickle(challenged(port).0, 2000, ARRIVES);
    let line = nth_turned_away(&rank0, 2);
    assert!(line.contains("no whole Join within 5 s"), "{line}");
    assert!(connected.elapsed() < Duration::from_secs(8), "cut after {:?}", connected.elapsed());
    // Another trickler at the door while the real rank 1 joins: rank 1 is not kept waiting behind it.
    let _third = trickle(challenged(port).0, 2000, ARRIVES);
    let err = finish_run(rank0, port, &json);
    let joined = err.find("rank 1 joined").expect("rank 1 joined");
    assert!(err[..joined].matches(TURNED_AWAY).count() == 2, "rank 1 waited for the third trickler:\n{err}");
    huge.join().unwrap();
    slow.join().unwrap();
}

#[test]
fn a_trickler_does_not_hold_rank_0_past_the_rendezvous_timeout() {
    let dir = TempDir::new("strangers-timeout");
    let port = free_port();
    let mut rank0 = rank(0, "2", port, &dir.arg("r.json"), &["--rendezvous-timeout", "2s"]);
    let _trickler = trickle(challenged(port).0, 2000, ARRIVES);
    let start = Instant::now();
    let status = rank0.wait_timeout(Duration::from_secs(10));
    let err = rank0.stderr.text();
    assert!(status.is_some(), "rank 0 still gathering {:?} after a 2 s timeout:\n{err}", start.elapsed());
    assert_eq!(status.unwrap().code(), Some(1), "{err}");
    assert!(err.contains("rank 1 of 2 did not join within 2 s"), "{err}");
}

/// A Join that proves the token, claiming what it is told to.
fn proven_join(port: u16, rank: usize, world_size: usize, protocol: u32) -> TcpStream {
    use kvxfer::control::auth::{self, Nonces};
    let (mut s, receiver) = challenged(port);
    let nonces = Nonces { sender: [7; 16], receiver };
    let msg = json!({"type": "Join", "magic": "kvxfer-cluster", "protocol": protocol,
        "nonce": hex::encode(nonces.sender), "proof": hex::encode(auth::sender_proof(TOKEN, &nonces)),
        "rank": rank, "world_size": world_size, "local_rank": 0, "host": "tampered", "addr": "127.0.0.1:1"});
    s.write_all(&frame(&serde_json::to_vec(&msg).unwrap())).unwrap();
    s
}

#[test]
fn a_proven_join_that_does_not_fit_fails_the_run_naming_what_is_wrong() {
    let dir = TempDir::new("strangers-proven");
    // (rank, world size, protocol, what rank 0's error says)
    let cases = [
        (5, 2, 2, "tampered claims rank 5, not below the world size 2 (ranks are 0-1)"),
        (0, 2, 2, "two processes claim rank 0: "),
        (1, 2, 99, "rank 1 on tampered speaks rendezvous protocol 99, rank 0 on "),
    ];
    for (r, size, protocol, needle) in cases {
        let port = free_port();
        let rank0 = rank(0, "2", port, &dir.arg("r.json"), &["--rendezvous-timeout", "20s"]);
        let _s = proven_join(port, r, size, protocol);
        let out = rank0.finish();
        out.expect_code(1);
        assert!(out.one_error().contains(needle), "rank {r} of {size}, protocol {protocol}: {}", out.stderr);
    }
}

#[test]
fn a_world_size_past_65536_is_a_usage_error() {
    let dir = TempDir::new("strangers-size");
    for size in ["65537", "18446744073709551615"] {
        let out =
            rank(0, size, free_port(), &dir.arg("r.json"), &["--pattern", "incast", "--rendezvous-timeout", "1s"])
                .finish();
        out.expect_code(2);
        let line = out.one_error();
        assert!(line.contains(&format!("KVXFER_WORLD_SIZE={size}")) && line.contains("at most 65536 ranks"), "{line}");
    }
}

/// Largest resident size of any child this test process has waited for, in KiB.
fn children_peak_rss_kib() -> i64 {
    use nix::sys::resource::{getrusage, UsageWho};
    getrusage(UsageWho::RUSAGE_CHILDREN).unwrap().max_rss()
}

#[test]
fn twenty_thousand_ranks_nobody_joins_time_out_in_bounded_memory_with_a_short_summary() {
    let dir = TempDir::new("strangers-20000");
    let port = free_port();
    let start = Instant::now();
    let mut rank0 = rank(0, "20000", port, &dir.arg("r.json"), &["--pattern", "ring", "--rendezvous-timeout", "1s"]);
    let status = rank0.wait_timeout(Duration::from_secs(15));
    let err = rank0.stderr.text();
    assert!(status.is_some(), "rank 0 of 20000 still running after {:?}:\n{err}", start.elapsed());
    assert_eq!(status.unwrap().code(), Some(1), "{err}");
    let line = err.lines().map(common::unprefixed).find(|l| l.starts_with("error:"));
    let line = line.unwrap_or_else(|| panic!("no error line:\n{err}"));
    assert!(line.contains("ranks 1-19999 of 20000 did not join within 1 s"), "{line}");
    assert!(line.len() < 300, "{} characters: {line}", line.len());
    let peak = children_peak_rss_kib();
    assert!(peak < 256 * 1024, "rank 0 of 20000 peaked at {peak} KiB");
}
