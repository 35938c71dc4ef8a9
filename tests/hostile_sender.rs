//! An authenticated sender that asks a real `kvxfer serve` for more than its run agreed, in the messages a paged
//! replay and a bidirectional run add: each ask is refused naming the sender, and serve goes on to serve the next
//! real sender. (A RepStart larger than the agreed buffer: `tests/protocol.rs`,
//! `rep_larger_than_the_agreed_buffer_is_refused`.)

mod common;

use common::raw_sender::*;
use common::*;
use kvxfer::control::auth;
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

/// A sender whose Reverse offer names a region smaller than the run's buffer would have serve write past it on the
/// sender's host: serve refuses the offer before it connects anything to it.
#[test]
fn a_reverse_offer_smaller_than_the_run_is_refused_before_serve_connects_to_it() {
    const SIZE: u64 = 1 << 20;
    let mut serve = Serve::start(&[]);
    let mut s = RawSender::hello(&serve);
    let accept = s.send_bidir_config(SIZE);
    assert_eq!(accept["type"], "accept", "{accept}");
    let host = s.addr.rsplit_once(':').unwrap().0.to_string();
    let port = accept["offer"]["data_port"].as_u64().unwrap();
    let mut data = TcpStream::connect(format!("{host}:{port}")).unwrap();
    data.write_all(&0u32.to_le_bytes()).unwrap();
    data.write_all(&auth::data_proof(&s.key, 0)).unwrap();
    s.send(serde_json::json!({"type": "connect", "answer": {"streams": 1}}));
    assert_eq!(s.recv()["type"], "connected");
    // The port the offer names is the test's own: serve must never connect to it.
    let bait = TcpListener::bind(format!("{host}:0")).unwrap();
    bait.set_nonblocking(true).unwrap();
    let bait_port = bait.local_addr().unwrap().port();
    s.send(serde_json::json!({"type": "reverse", "offer": {"data_port": bait_port, "region_len": 4096}}));
    let e = s.recv();
    assert_eq!(e["type"], "error", "serve took a 4 KiB reverse region for a 1 MiB run: {e}");
    let msg = e["message"].as_str().unwrap();
    assert!(msg.contains("Reverse") && msg.contains("4096 bytes") && msg.contains("refused"), "{msg}");
    assert!(bait.accept().is_err(), "serve connected to the refused offer's port");
    wait_sessions(&serve, 1);
    assert!(serve.proc.is_running());
    assert_serves(&serve, None);
}

/// A paged replay's RepStart names the receiver's block slots: one outside the pool, or more slots than the size
/// takes blocks, is refused at RepStart, before a byte moves, naming the sender; serve stays up for the next one.
/// (A slot given twice: `tests/replay_paged.rs`.)
#[test]
fn block_slots_outside_the_pool_or_not_matching_the_size_are_refused_and_serve_keeps_serving() {
    let mut serve = Serve::start(&[]);
    let (run, cfg) = common::paged::four_block_pool();
    let host = kvxfer::mem::MemKind::Host;
    let timeouts = kvxfer::control::Timeouts { connect: Duration::from_secs(20), io: run.io_timeout };
    let device = kvxfer::transport::DeviceChoice::default();
    // A pool of 64 tokens is 4 blocks of 16; 32 tokens take 2 of them.
    for (tokens, src, dst, needle) in [
        (32u64, &[0u64, 1][..], &[0u64, 1 << 40][..], "outside the pool of 4 blocks"),
        (32, &[0, 1], &[3, 4], "block slot 4 is outside the pool"),
    ] {
        serve.wait_idle();
        let (mut session, _) =
            kvxfer::commands::send::connect(&serve.addr, "", timeouts, &device, &cfg, host, false).expect("a session");
        let err = format!("{:#}", session.arm_paged(tokens, (src, dst), 0).err().expect("refused"));
        assert!(err.contains(needle) && err.contains("the sender at 127.0.0.1:"), "{dst:?}: {err}");
    }
    // More slots than the size takes blocks, which kvxfer's own sender cannot even plan: by hand.
    let mut s = RawSender::hello(&serve);
    let accept = s.send_config(serde_json::to_value(&cfg).unwrap());
    assert_eq!(accept["type"], "accept", "{accept}");
    let host = s.addr.rsplit_once(':').unwrap().0.to_string();
    let port = accept["offer"]["data_port"].as_u64().unwrap();
    let streams = cfg.knobs.streams;
    let _data: Vec<TcpStream> = (0..streams)
        .map(|i| {
            let mut d = TcpStream::connect(format!("{host}:{port}")).unwrap();
            d.write_all(&i.to_le_bytes()).unwrap();
            d.write_all(&auth::data_proof(&s.key, i)).unwrap();
            d
        })
        .collect();
    s.send(serde_json::json!({"type": "connect", "answer": {"streams": streams}}));
    assert_eq!(s.recv()["type"], "connected");
    let one_block = cfg.cases[0].size_bytes / 2;
    s.send(serde_json::json!({"type": "rep_start", "case": 0, "rep": 0, "warmup": false,
        "size_bytes": one_block, "dst_slots": [0, 1, 2]}));
    let e = s.recv();
    assert_eq!(e["type"], "error", "{e}");
    assert!(e["message"].as_str().unwrap().contains("3 block slots for 16 tokens"), "{e}");
    wait_sessions(&serve, 3);
    assert!(serve.proc.is_running());
    assert!(serve.stderr().contains("outside the pool of 4 blocks"), "{}", serve.stderr());
    assert_serves(&serve, None);
}
