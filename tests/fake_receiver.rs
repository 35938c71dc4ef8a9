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

fn write_msg(s: &mut TcpStream, v: serde_json::Value) {
    let body = v.to_string().into_bytes();
    let _ = s.write_all(&(body.len() as u32).to_be_bytes());
    let _ = s.write_all(&body);
}

/// A receiver that follows the protocol but reports `bad` mismatched bytes in every rep of the second case.
fn lying_receiver(bad: u64) -> (String, JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let h = std::thread::spawn(move || {
        let (mut ctl, _) = l.accept().unwrap();
        // The challenge-response of control/auth.rs, with the empty token `send` uses by default.
        let hello = read_msg(&mut ctl);
        assert_eq!(hello["type"], "hello");
        let sender = auth::parse_nonce(hello["nonce"].as_str().unwrap()).unwrap();
        let nonces = auth::Nonces { sender, receiver: [5u8; auth::NONCE_LEN] };
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        let proof = hex(&auth::receiver_proof("", &nonces));
        write_msg(&mut ctl, serde_json::json!({"type": "challenge", "nonce": hex(&nonces.receiver), "proof": proof}));
        let p = read_msg(&mut ctl);
        assert!(auth::proof_matches(&auth::sender_proof("", &nonces), p["proof"].as_str().unwrap()), "{p}");
        write_msg(&mut ctl, serde_json::json!({"type": "welcome", "version": "fake", "hostname": "liar"}));
        let key = auth::session_key("", &nonces);
        let cfg = read_msg(&mut ctl);
        assert_eq!(cfg["type"], "config", "{cfg}");
        let region =
            cfg["config"]["cases"].as_array().unwrap().iter().map(|c| c["size_bytes"].as_u64().unwrap()).max().unwrap();
        let data_l = TcpListener::bind("127.0.0.1:0").unwrap();
        write_msg(
            &mut ctl,
            serde_json::json!({"type": "accept", "offer": {
                "data_port": data_l.local_addr().unwrap().port(), "region_len": region}}),
        );
        let (mut data, _) = data_l.accept().unwrap();
        let mut k = [0u8; 36];
        data.read_exact(&mut k).unwrap();
        assert!(auth::data_proof_matches(&key, 0, &k[4..]), "stream 0 proves the derived session key");
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
                data.read_exact(&mut entries).unwrap();
                let mut left = len;
                while left > 0 {
                    let n = left.min(sink.len() as u64) as usize;
                    data.read_exact(&mut sink[..n]).unwrap();
                    left -= n as u64;
                }
                let _ = landed.send(len);
                // The ack: (first, count), without the flag.
                let mut ack = [0u8; 16];
                ack[..8].copy_from_slice(&hdr[..8]);
                ack[8..].copy_from_slice(&count.to_le_bytes());
                if data.write_all(&ack).is_err() {
                    return;
                }
            }
        });
        assert_eq!(read_msg(&mut ctl)["type"], "connect");
        write_msg(&mut ctl, serde_json::json!({"type": "connected"}));
        loop {
            let m = read_msg(&mut ctl);
            match m["type"].as_str().unwrap() {
                "rep_start" => {
                    let size = m["size_bytes"].as_u64().unwrap();
                    let case = m["case"].as_u64().unwrap();
                    // Bytes that landed before this rep was armed (calibration) are not its bytes.
                    while bytes.try_recv().is_ok() {}
                    write_msg(&mut ctl, serde_json::json!({"type": "rep_ready"}));
                    let t = Instant::now();
                    let mut got = 0;
                    while got < size {
                        got += bytes.recv().expect("the data connection closed mid-rep");
                    }
                    let ms = t.elapsed().as_secs_f64() * 1e3;
                    let bad_here = if case == 1 { bad } else { 0 };
                    write_msg(
                        &mut ctl,
                        serde_json::json!({"type": "rep_done", "notify_ms": ms, "t_rep_start_ms": 0.0,
                            "t_landed_ms": ms, "verify_ms": 0.1, "mismatched_bytes": bad_here}),
                    );
                }
                "finish" => {
                    write_msg(&mut ctl, serde_json::json!({"type": "bye"}));
                    return;
                }
                // The sender gives up with an Error message: fine.
                "error" => return,
                other => panic!("unexpected {other}"),
            }
        }
    });
    (addr, h)
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
