//! Strangers on a session's TCP data port, against a real `kvxfer serve`: however many connect and stay silent, the
//! sender's own streams get in without waiting on them.

mod common;

use common::raw_sender::*;
use common::*;
use kvxfer::control::auth;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// `n` connections to `addr` opened at once, each given `wait` to complete; those that did are returned (held open,
/// silent, until dropped).
fn silent_connections(addr: SocketAddr, n: usize, wait: Duration) -> Vec<TcpStream> {
    let (tx, rx) = mpsc::channel();
    for _ in 0..n {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let _ = tx.send(TcpStream::connect_timeout(&addr, wait).ok());
        });
    }
    drop(tx);
    rx.iter().flatten().collect()
}

/// More silent connections than a listen backlog holds (128 is the usual default), opened between the receiver's
/// offer and the sender's streams, must not keep the streams out until they time out: the port drains strangers as
/// they come, so the sender connects, is connected and completes a rep well within the stall bound.
#[test]
fn a_data_port_flooded_with_silent_connections_still_takes_the_senders_streams() {
    const STREAMS: u32 = 4;
    const SIZE: u64 = 8192;
    let stall = Duration::from_secs(10);
    let serve = Serve::start(&["--once"]);
    let mut s = RawSender::hello(&serve);
    let accept = s.config(SIZE, STREAMS);
    assert_eq!(accept["type"], "accept", "{accept}");
    let host = s.addr.rsplit_once(':').unwrap().0;
    let addr: SocketAddr = format!("{host}:{}", accept["offer"]["data_port"].as_u64().unwrap()).parse().unwrap();
    let strangers = silent_connections(addr, 150, Duration::from_secs(1));
    let began = Instant::now();
    let (tx, rx) = mpsc::channel();
    for index in 0..STREAMS {
        let (tx, key) = (tx.clone(), s.key);
        std::thread::spawn(move || {
            let stream = TcpStream::connect_timeout(&addr, stall).map(|mut d| {
                d.write_all(&index.to_le_bytes()).unwrap();
                d.write_all(&auth::data_proof(&key, index)).unwrap();
                d
            });
            let _ = tx.send((index, stream));
        });
    }
    drop(tx);
    let mut data: Vec<TcpStream> = Vec::new();
    for (index, stream) in rx.iter() {
        match stream {
            Ok(d) => data.push(d),
            Err(e) => panic!(
                "stream {index} could not connect within {stall:?} past {} silent connections: {e}",
                strangers.len()
            ),
        }
    }
    s.send(serde_json::json!({"type": "connect", "answer": {"streams": STREAMS}}));
    let c = s.recv();
    assert_eq!(c["type"], "connected", "{c}");
    assert_eq!(s.rep_start(SIZE)["type"], "rep_ready");
    let d = &mut data[0];
    d.set_read_timeout(Some(stall)).unwrap();
    data_write(d, 0, 0, SIZE, SIZE);
    let mut ack = [0u8; 16];
    d.read_exact(&mut ack).unwrap();
    let done = s.recv();
    assert_eq!(done["type"], "rep_done", "{done}");
    assert!(began.elapsed() < stall, "the streams took {:?} to get past the strangers", began.elapsed());
    s.send(serde_json::json!({"type": "finish"}));
    assert_eq!(s.recv()["type"], "bye");
    drop(strangers);
    serve.proc.finish().expect_code(0);
}
