//! `kvxfer serve` on a shared network: strangers that connect and stay silent, or trickle a huge length
//! prefix a byte at a time, cannot keep a real sender out, and a second sender is told at once that serve is busy
//! (or, with `--max-sessions`, runs beside the first, its reps marked as sharing the receiver).

mod common;
use common::*;
use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

#[test]
fn silent_and_trickling_strangers_do_not_lock_out_a_real_sender() {
    let addr = format!("127.0.0.1:{}", free_port());
    let mut serve = Proc::start(kvxfer().args(["serve", "--listen", &addr, "--token", "tok"]), "serve".into());
    assert!(serve.stderr.wait_for("listening on", Duration::from_secs(30)), "{}", serve.stderr.text());
    // 200 silent connections, and 20 that announce a 1 MiB frame and then send one byte at a time.
    let silent: Vec<TcpStream> = (0..200).map(|_| TcpStream::connect(&addr).unwrap()).collect();
    let mut trickling: Vec<TcpStream> = (0..20)
        .map(|_| {
            let mut s = TcpStream::connect(&addr).unwrap();
            s.write_all(&(1u32 << 20).to_be_bytes()).unwrap();
            s
        })
        .collect();
    for s in trickling.iter_mut() {
        let _ = s.write_all(b"{");
    }
    let started = Instant::now();
    let t = TempDir::new("hardening");
    let json = t.arg("r.json");
    run(&["send", "--peer", &addr, "--token", "tok", "--sizes", "8MiB", "--reps", "3", "--verify", "--json", &json])
        .expect_code(0);
    let took = started.elapsed();
    check_case(&read_json(std::path::Path::new(&json))["cases"][0], 8 << 20, 3, true);
    // Stall detector with a wide margin: a locked-out sender waited for the io timeout (60 s).
    assert!(took < Duration::from_secs(30), "the real sender took {took:?} among strangers");
    drop(silent);
    drop(trickling);
    assert!(serve.is_running(), "serve keeps serving");
}

#[test]
fn a_second_sender_is_told_at_once_that_serve_is_busy() {
    let addr = format!("127.0.0.1:{}", free_port());
    let mut serve = Proc::start(kvxfer().args(["serve", "--listen", &addr]), "serve".into());
    assert!(serve.stderr.wait_for("listening on", Duration::from_secs(30)), "{}", serve.stderr.text());
    // A long run: 512 MiB x 40 reps.
    let mut first = Proc::start(
        kvxfer().args(["send", "--peer", &addr, "--sizes", "512MiB", "--reps", "40", "--counters", "off"]),
        "first".into(),
    );
    assert!(serve.stderr.wait_for("sender connected", Duration::from_secs(30)), "{}", serve.stderr.text());
    // The second sender is told at once; it tries again until its --connect-timeout, saying so, then gives up.
    // (5 s: under CI's parallel tests, with the first sender holding both cores, one handshake took 2 s, which a
    // 2-second timeout left no room to retry after.)
    let started = Instant::now();
    let second = run(&["send", "--peer", &addr, "--sizes", "1MiB", "--connect-timeout", "5s"]);
    second.expect_code(1);
    let line = second.one_error();
    assert!(line.contains("busy") && line.contains("127.0.0.1"), "{line}");
    assert!(second.stderr.contains("waiting up to 5s"), "{}", second.stderr);
    assert!(started.elapsed() < Duration::from_secs(15), "gave up at its connect timeout: {:?}", started.elapsed());
    let _ = first.child.kill();
    assert!(serve.is_running());
}

/// An authenticated sender that says nothing after its handshake held serve's one run slot until --io-timeout, and
/// every other sender was told "busy: one run in progress" though no run had started. Others are told now whom the
/// slot is reserved by and for how long it has been idle, and the slot is given back after the idle limit (10 s;
/// 3 s here): a sender waiting on it gets through well before --io-timeout.
#[test]
fn a_slot_reserved_by_a_silent_sender_is_named_as_such_and_given_back() {
    use kvxfer::control::{peer::client_hello, ControlChannel, Timeouts};
    let serve = Serve::start(&["--config-idle", "3s", "--io-timeout", "60s"]);
    let timeouts = Timeouts { connect: Duration::from_secs(10), io: Duration::from_secs(60) };
    let mut idle = ControlChannel::connect(&serve.addr, timeouts).unwrap();
    client_hello(&mut idle, "").unwrap();
    assert!(serve.proc.stderr.wait_for("sender connected", Duration::from_secs(30)), "{}", serve.stderr());
    let started = Instant::now();
    let probe = run(&["send", "--peer", &serve.addr, "--sizes", "1MiB", "--connect-timeout", "1s"]);
    probe.expect_code(1);
    let line = probe.one_error();
    assert!(line.contains("busy: reserved by 127.0.0.1, idle ") && !line.contains("run in progress"), "{line}");
    // A sender willing to wait gets the slot once it is given back.
    let t = TempDir::new("reserved");
    let json = t.arg("r.json");
    let args = ["--sizes", "1MiB", "--reps", "2", "--verify", "--connect-timeout", "50s", "--json", &json];
    run(&[&["send", "--peer", &serve.addr][..], &args].concat()).expect_code(0);
    let took = started.elapsed();
    assert!(took < Duration::from_secs(40), "the waiting sender got the slot after {took:?}, near --io-timeout");
    check_case(&read_json(std::path::Path::new(&json))["cases"][0], 1 << 20, 2, true);
    // The silent sender was told why, and serve logged it.
    let told = idle.recv("anything").unwrap_err().to_string();
    assert!(told.contains("sent no Config within 3s"), "{told}");
    assert!(serve.stderr().contains("sent no Config within 3s of its handshake"), "{}", serve.stderr());
}

#[test]
fn max_sessions_runs_senders_side_by_side_and_marks_the_reps_they_shared() {
    let addr = format!("127.0.0.1:{}", free_port());
    let mut serve = Proc::start(kvxfer().args(["serve", "--listen", &addr, "--max-sessions", "2"]), "serve".into());
    assert!(serve.stderr.wait_for("up to 2 runs at once", Duration::from_secs(30)), "{}", serve.stderr.text());
    // A run that lasts until it is killed.
    let mut first = Proc::start(
        kvxfer().args(["send", "--peer", &addr, "--sizes", "1MiB", "--reps", "1000000", "--counters", "off"]),
        "first".into(),
    );
    assert!(serve.stderr.wait_for("sender connected", Duration::from_secs(30)), "{}", serve.stderr.text());
    // The second runs while the first does: every rep of it shared the receiver, and its results say so.
    let t = TempDir::new("sessions");
    let json = t.arg("second.json");
    run(&["send", "--peer", &addr, "--sizes", "4MiB", "--reps", "5", "--verify", "--json", &json]).expect_code(0);
    let case = &read_json(std::path::Path::new(&json))["cases"][0];
    check_case(case, 4 << 20, 5, true);
    for rep in case["reps"].as_array().unwrap() {
        assert!(rep["shared_runs"].as_u64().is_some_and(|n| n >= 1), "{rep}");
    }
    let kinds: Vec<&str> = case["warnings"].as_array().unwrap().iter().filter_map(|w| w["kind"].as_str()).collect();
    assert!(kinds.contains(&"shared_receiver"), "{kinds:?}");
    // The second's slot came back: a third sender gets it while the first still runs, and a fourth beside those two
    // is told that serve is busy.
    let mut third = Proc::start(
        kvxfer().args(["send", "--peer", &addr, "--sizes", "1MiB", "--reps", "1000000", "--counters", "off"]),
        "third".into(),
    );
    assert!(
        serve.stderr.wait_until(Duration::from_secs(30), |t| t.matches("sender connected").count() >= 3),
        "{}",
        serve.stderr.text()
    );
    let fourth = run(&["send", "--peer", &addr, "--sizes", "1MiB", "--connect-timeout", "2s"]);
    fourth.expect_code(1);
    let line = fourth.one_error();
    assert!(line.contains("busy: 2 runs in progress"), "{line}");
    let _ = first.child.kill();
    let _ = third.child.kill();
    assert!(serve.is_running());
}
