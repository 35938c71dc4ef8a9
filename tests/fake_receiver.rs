//! The real `kvxfer send` against hand-written receivers on loopback: ones that lie about the bytes they got, that
//! are not kvxfer at all, or that never answer. These are the failures a real `serve` cannot be made to produce.

mod common;

use common::*;
use kvxfer::control::auth;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

fn read_msg(s: &mut TcpStream) -> serde_json::Value {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).expect("frame length");
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut body).expect("frame body");
    serde_json::from_slice(&body).expect("JSON")
}

/// One frame in one write: a message is never held back behind its own length (Nagle's algorithm would keep it
/// until the sender's delayed ACK, ~40 ms a message).
fn write_msg(s: &mut TcpStream, v: serde_json::Value) {
    let body = v.to_string().into_bytes();
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    let _ = s.write_all(&frame);
}

/// How a scripted receiver departs from the protocol; the default follows it.
#[derive(Clone, Default)]
struct Lies {
    /// Mismatched bytes reported in every rep of the second case.
    bad: u64,
    /// The region its offer names, instead of the largest size.
    region_len: Option<u64>,
    /// Ack a frame `(0, 1)` on the data connection before any frame arrived.
    ack_first: bool,
    /// Ack every frame twice.
    ack_twice: bool,
    /// Keys that replace the honest RepDone's (`mismatched_bytes`, `transfer_ms`...).
    rep_done: serde_json::Map<String, serde_json::Value>,
    /// `(n, bad)`: mismatched bytes reported in the n-th measured rep (from 0) only, said on the channel once sent.
    bad_at: Option<(u64, u64, std::sync::mpsc::Sender<()>)>,
}

/// A receiver that follows the protocol but reports `bad` mismatched bytes in every rep of the second case.
fn lying_receiver(bad: u64) -> (String, JoinHandle<()>) {
    scripted_receiver(Lies { bad, ..Lies::default() })
}

/// A receiver that speaks the protocol, telling the `lies` it is given.
fn scripted_receiver(lies: Lies) -> (String, JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let h = std::thread::spawn(move || {
        let (mut ctl, _) = l.accept().unwrap();
        ctl.set_nodelay(true).unwrap();
        let key = handshake(&mut ctl);
        let cfg = read_msg(&mut ctl);
        assert_eq!(cfg["type"], "config", "{cfg}");
        let region =
            cfg["config"]["cases"].as_array().unwrap().iter().map(|c| c["size_bytes"].as_u64().unwrap()).max().unwrap();
        let data_l = TcpListener::bind("127.0.0.1:0").unwrap();
        write_msg(
            &mut ctl,
            serde_json::json!({"type": "accept", "offer": {
                "data_port": data_l.local_addr().unwrap().port(), "region_len": lies.region_len.unwrap_or(region)}}),
        );
        if lies.region_len.is_some_and(|r| r < region) {
            // A sender that checks the offer gives up here.
            let m = read_msg(&mut ctl);
            assert_eq!(m["type"], "error", "{m}");
            return;
        }
        let (data, _) = data_l.accept().unwrap();
        data.set_nodelay(true).unwrap();
        let bytes = data_sink(data, &key, &lies);
        assert_eq!(read_msg(&mut ctl)["type"], "connect");
        write_msg(&mut ctl, serde_json::json!({"type": "connected"}));
        serve_reps(&mut ctl, &bytes, &lies);
    });
    (addr, h)
}

/// The challenge-response of control/auth.rs, with the empty token `send` uses by default; returns the session key.
fn handshake(ctl: &mut TcpStream) -> auth::SessionKey {
    let hello = read_msg(ctl);
    assert_eq!(hello["type"], "hello");
    let sender = auth::parse_nonce(hello["nonce"].as_str().unwrap()).unwrap();
    let nonces = auth::Nonces { sender, receiver: [5u8; auth::NONCE_LEN] };
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let proof = hex(&auth::receiver_proof("", &nonces));
    write_msg(ctl, serde_json::json!({"type": "challenge", "nonce": hex(&nonces.receiver), "proof": proof}));
    let p = read_msg(ctl);
    assert!(auth::proof_matches(&auth::sender_proof("", &nonces), p["proof"].as_str().unwrap()), "{p}");
    write_msg(ctl, serde_json::json!({"type": "welcome", "version": "fake", "hostname": "liar"}));
    auth::session_key("", &nonces)
}

/// Read the data connection's proof, then every frame into a sink, acking each; each frame's payload bytes go to
/// the returned channel before its ack leaves.
fn data_sink(mut data: TcpStream, key: &auth::SessionKey, lies: &Lies) -> std::sync::mpsc::Receiver<u64> {
    let mut k = [0u8; 36];
    data.read_exact(&mut k).unwrap();
    assert!(auth::data_proof_matches(key, 0, &k[4..]), "stream 0 proves the derived session key");
    if lies.ack_first {
        let mut ack = [0u8; 16];
        ack[8..].copy_from_slice(&1u64.to_le_bytes());
        data.write_all(&ack).unwrap();
    }
    let acks = if lies.ack_twice { 2 } else { 1 };
    // Like a real receiver: read and ack every frame from the start (the sender's calibration of its send path
    // comes before Connect), and report each frame's payload bytes before acking it, so that the bytes of every
    // acked frame are already counted when the sender sends its next message.
    let (landed, bytes) = std::sync::mpsc::channel::<u64>();
    std::thread::spawn(move || {
        let mut sink = vec![0u8; 1 << 20];
        loop {
            // A scatter frame: (first, count, payload bytes), count (offset, len) entries, payloads; the count
            // word's top bit asks for the bounce receive path, which a sink does not care about.
            let mut hdr = [0u8; 24];
            if data.read_exact(&mut hdr).is_err() {
                return; // the sender hung up
            }
            let word = |i: usize| u64::from_le_bytes(hdr[i * 8..i * 8 + 8].try_into().unwrap());
            let (count, len) = (word(1) & !(1 << 63), word(2));
            let mut entries = vec![0u8; count as usize * 16];
            let mut left = len;
            if data.read_exact(&mut entries).is_err() {
                return;
            }
            while left > 0 {
                let n = left.min(sink.len() as u64) as usize;
                if data.read_exact(&mut sink[..n]).is_err() {
                    return;
                }
                left -= n as u64;
            }
            let _ = landed.send(len);
            // The ack: (first, count), without the flag.
            let mut ack = [0u8; 16];
            ack[..8].copy_from_slice(&hdr[..8]);
            ack[8..].copy_from_slice(&count.to_le_bytes());
            for _ in 0..acks {
                if data.write_all(&ack).is_err() {
                    return;
                }
            }
        }
    });
    bytes
}

/// Answer RepStart, wait for the rep's bytes and answer RepDone, until Finish or the sender's Error.
fn serve_reps(ctl: &mut TcpStream, bytes: &std::sync::mpsc::Receiver<u64>, lies: &Lies) {
    let mut measured = 0u64;
    loop {
        let m = read_msg(ctl);
        match m["type"].as_str().unwrap() {
            "rep_start" => {
                let size = m["size_bytes"].as_u64().unwrap();
                let case = m["case"].as_u64().unwrap();
                // Bytes that landed before this rep was armed (calibration) are not its bytes.
                while bytes.try_recv().is_ok() {}
                write_msg(ctl, serde_json::json!({"type": "rep_ready"}));
                let t = Instant::now();
                let mut got = 0;
                while got < size {
                    match bytes.recv() {
                        Ok(n) => got += n,
                        // The sender gave up on the data path: its Error follows on the control connection.
                        Err(_) => {
                            let m = read_msg(ctl);
                            assert_eq!(m["type"], "error", "{m}");
                            return;
                        }
                    }
                }
                let ms = t.elapsed().as_secs_f64() * 1e3;
                let this = (m["warmup"] == false).then(|| {
                    measured += 1;
                    measured - 1
                });
                let late = lies.bad_at.as_ref().filter(|(n, ..)| this == Some(*n));
                let bad_here = if case == 1 { lies.bad } else { late.map_or(0, |l| l.1) };
                let mut done = serde_json::json!({"type": "rep_done", "notify_ms": ms, "t_rep_start_ms": 0.0,
                    "t_landed_ms": ms, "verify_ms": 0.1, "mismatched_bytes": bad_here});
                for (k, v) in &lies.rep_done {
                    done[k] = v.clone();
                }
                write_msg(ctl, done);
                if let Some((.., said)) = late {
                    let _ = said.send(());
                }
            }
            "finish" => {
                write_msg(ctl, serde_json::json!({"type": "bye"}));
                return;
            }
            // The sender gives up with an Error message: fine.
            "error" => return,
            other => panic!("unexpected {other}"),
        }
    }
}

#[test]
fn a_verify_mismatch_fails_the_run_and_is_recorded() {
    let (addr, h) = lying_receiver(3);
    let dir = TempDir::new("mismatch");
    let json = dir.arg("r.json");
    let out = run(&["send", "--peer", &addr, "--sizes", "1MiB,2MiB,3MiB", "--reps", "2", "--verify", "--json", &json]);
    out.expect_code(1);
    let line = out.one_error();
    assert!(line.contains("verification failed") && line.contains("mismatched"), "{line}");
    h.join().unwrap();
    let r = read_json(&dir.join("r.json"));
    let cases = r["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 2, "the good case and the failed one are recorded; the run stops there: {r}");
    check_case(&cases[0], 1 << 20, 2, true);
    let failed = &cases[1];
    assert_eq!(failed["verified"], false, "{failed}");
    // 3 bytes in each of 1 warm-up + 2 measured reps.
    assert_eq!(failed["mismatched_bytes"].as_u64(), Some(9), "{failed}");
    assert!(r["error"].as_str().unwrap().contains("verification failed"));
    assert!(out.stdout.contains("9 bad"), "the table shows it: {}", out.stdout);
}

#[test]
fn a_peer_that_is_not_kvxfer() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let h = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
        // Hold the connection until the sender hangs up (closing first, with its hello unread, would reset the
        // connection under the sender's read of the answer).
        let _ = s.read_to_end(&mut Vec::new());
    });
    let out = run(&["send", "--peer", &addr, "--sizes", "1MiB"]);
    out.expect_code(1);
    let line = out.one_error();
    assert!(line.contains("kvxfer peer") && line.contains("receiver"), "{line}");
    h.join().unwrap();
}

#[test]
fn a_silent_receiver_times_out() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let h = std::thread::spawn(move || {
        // Say nothing, and hold the connection until the sender gives up and hangs up.
        let (mut s, _) = l.accept().unwrap();
        let _ = s.read_to_end(&mut Vec::new());
    });
    let t = Instant::now();
    let out = run(&["send", "--peer", &addr, "--sizes", "1MiB", "--io-timeout", "1s"]);
    let took = t.elapsed();
    out.expect_code(1);
    let line = out.one_error();
    assert!(line.contains("receiver") && line.contains("--io-timeout"), "{line}");
    assert!(took < Duration::from_secs(3), "took {took:?} with --io-timeout 1s");
    h.join().unwrap();
}

#[test]
fn a_receiver_that_closes_after_hello() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let h = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let _ = read_msg(&mut s);
    });
    let out = run(&["send", "--peer", &addr, "--sizes", "1MiB"]);
    out.expect_code(1);
    let line = out.one_error();
    assert!(line.contains("receiver closed the control connection"), "{line}");
    h.join().unwrap();
}

/// `send`'s outcome against a receiver telling `lies`, after the receiver's thread ended.
fn send_to(lies: Lies, args: &[&str]) -> (Out, String) {
    let (addr, h) = scripted_receiver(lies);
    let mut all = vec!["send", "--peer", &addr];
    all.extend_from_slice(args);
    let out = run(&all);
    h.join().unwrap();
    assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
    (out, addr)
}

/// A RepDone whose keys are replaced by `done`.
fn rep_done(done: serde_json::Value) -> Lies {
    Lies { rep_done: done.as_object().unwrap().clone(), ..Lies::default() }
}

#[test]
fn an_ack_before_any_frame_is_one_error_naming_the_receiver_not_a_panic() {
    for _ in 0..3 {
        let (out, _) = send_to(Lies { ack_first: true, ..Lies::default() }, &["--sizes", "1MiB", "--reps", "2"]);
        out.expect_code(1);
        let line = out.one_error();
        assert!(line.contains("the receiver at 127.0.0.1 (data port") && line.contains("acknowledged"), "{line}");
    }
}

#[test]
fn a_duplicated_ack_cannot_end_the_next_rep() {
    let (out, _) = send_to(Lies { ack_twice: true, ..Lies::default() }, &["--sizes", "1MiB", "--reps", "3"]);
    out.expect_code(1);
    let line = out.one_error();
    assert!(line.contains("the receiver at 127.0.0.1 (data port") && line.contains("duplicate"), "{line}");
}

#[test]
fn a_missing_mismatch_count_is_not_verified_and_says_so() {
    let dir = TempDir::new("unchecked");
    let json = dir.arg("r.json");
    let lies = rep_done(serde_json::json!({"mismatched_bytes": null, "verify_ms": null}));
    let (out, addr) = send_to(lies, &["--sizes", "1MiB", "--reps", "2", "--verify", "--json", &json]);
    out.expect_code(0);
    let warning = out.stderr.lines().find(|l| l.starts_with("warning:")).unwrap_or_else(|| panic!("{}", out.stderr));
    assert!(warning.contains(&addr) && warning.contains("not verified"), "{warning}");
    assert_eq!(out.stderr.matches("warning:").count(), 1, "said once: {}", out.stderr);
    let case = &read_json(&dir.join("r.json"))["cases"][0];
    assert_eq!(case["verified"], false, "{case}");
    assert_eq!(case["unchecked_reps"].as_u64(), Some(3), "1 warm-up + 2 measured: {case}");
    assert!(out.stdout.contains("unchecked"), "the table shows it: {}", out.stdout);
}

#[test]
fn mismatch_counts_past_the_reps_bytes_are_refused_and_never_wrap_to_verified() {
    // 2^63 in each of two reps would add up to 0 in a wrapping sum.
    let lies = rep_done(serde_json::json!({"mismatched_bytes": 1u64 << 63}));
    let (out, addr) = send_to(lies, &["--sizes", "1MiB", "--reps", "1", "--verify"]);
    out.expect_code(1);
    let line = out.one_error();
    assert!(line.contains(&addr) && line.contains("9223372036854775808 mismatched bytes in a rep of 1 MiB"), "{line}");
}

#[test]
fn receiver_times_outside_the_senders_own_are_refused() {
    for ms in [serde_json::json!(-1.0), serde_json::json!(0.0), serde_json::json!(1e308)] {
        let (out, addr) =
            send_to(rep_done(serde_json::json!({"transfer_ms": ms})), &["--sizes", "1MiB", "--reps", "2"]);
        out.expect_code(1);
        let line = out.one_error();
        assert!(line.contains(&addr) && line.contains("transfer time") && line.contains("refused"), "{ms}: {line}");
    }
}

#[test]
fn an_offered_region_smaller_than_the_run_is_refused_a_huge_one_is_harmless() {
    let (out, addr) = send_to(Lies { region_len: Some(4096), ..Lies::default() }, &["--sizes", "1MiB,2MiB"]);
    out.expect_code(1);
    let line = out.one_error();
    assert!(line.contains(&addr) && line.contains("4 KiB") && line.contains("2 MiB"), "{line}");
    // The sender never sizes anything by the offer: a region of 16 EiB runs like an honest one.
    let (out, _) = send_to(Lies { region_len: Some(u64::MAX), ..Lies::default() }, &["--sizes", "1MiB", "--reps", "2"]);
    out.expect_code(0);
}

#[test]
fn a_replay_whose_receiver_checks_nothing_is_not_verified_and_says_so() {
    let dir = TempDir::new("unchecked-replay");
    let json = dir.arg("r.json");
    let (addr, h) = scripted_receiver(rep_done(serde_json::json!({"mismatched_bytes": null, "verify_ms": null})));
    let out = run(&[
        "replay",
        "--peer",
        &addr,
        "--arrivals",
        "constant:50",
        "--prompt-tokens",
        "fixed:16",
        "--kv-bytes-per-token",
        "1024",
        "--requests",
        "4",
        "--warmup-requests",
        "1",
        "--ceiling",
        "1",
        "--verify",
        "--json",
        &json,
    ]);
    h.join().unwrap();
    assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
    out.expect_code(0);
    assert!(out.stderr.contains(&addr) && out.stderr.contains("not verified"), "{}", out.stderr);
    let replay = &read_json(&dir.join("r.json"))["replay"];
    assert_eq!(replay["unchecked_requests"].as_u64(), Some(4), "{replay}");
    assert!(out.stderr.contains("warning: 4 request(s) came back without the receiver's check"), "{}", out.stderr);
}

/// A paced run keeps its first 10,000 measured reps one by one and folds the later ones into statistics: a mismatch
/// the receiver reports in a folded rep still fails the case's verification and is counted in the results.
#[test]
fn a_mismatch_in_a_rep_past_the_kept_ones_still_fails_verification() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let (said, heard) = std::sync::mpsc::channel();
    let (addr, h) = scripted_receiver(Lies { bad_at: Some((10_005, 5, said)), ..Lies::default() });
    let dir = TempDir::new("folded-mismatch");
    let json = dir.arg("r.json");
    let mut p =
        Proc::spawn(&["send", "--peer", &addr, "--sizes", "4KiB", "--duration", "inf", "--verify", "--json", &json]);
    heard.recv_timeout(Duration::from_secs(120)).expect("10,006 measured reps within 2 minutes");
    kill(Pid::from_raw(p.child.id() as i32), Signal::SIGINT).unwrap();
    let status = p.wait_timeout(Duration::from_secs(20)).expect("an exit after SIGINT");
    h.join().unwrap();
    let stderr = p.stderr.text();
    assert!(stderr.contains("verification failed: 5 mismatched bytes"), "{stderr}");
    assert_ne!(status.code(), Some(0), "{stderr}");
    let case = &read_json(&dir.join("r.json"))["cases"][0];
    assert!(case["duration"]["folded"]["reps"].as_u64().unwrap() > 0, "{}", case["duration"]);
    assert_eq!(case["duration"]["folded"]["mismatched_bytes"].as_u64(), Some(5), "{}", case["duration"]);
    assert_eq!((&case["verified"], case["mismatched_bytes"].as_u64()), (&serde_json::json!(false), Some(5)), "{case}");
}
