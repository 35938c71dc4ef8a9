//! What soft-RoCE puts on the wire: a raw packet socket in the guest (the test binary runs there as root) sees
//! every RoCE v2 packet (UDP port 4791) a run sends across the veth pair, and `--tclass` must be their IPv4 TOS
//! byte (DSCP and ECN) in both directions: the requests and the responder's acknowledgements.

use super::*;
use nix::sys::socket::{recv, setsockopt, socket, sockopt, AddressFamily, MsgFlags, SockFlag, SockProtocol, SockType};
use nix::sys::time::TimeVal;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A RoCE v2 packet as captured: its IPv4 TOS byte, source and destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Roce {
    tos: u8,
    src: [u8; 4],
    dst: [u8; 4],
}

/// The RoCE v2 packet in an Ethernet frame, if it is one (IPv4, UDP, destination port 4791).
fn roce_of(frame: &[u8]) -> Option<Roce> {
    let ip = frame.get(14..).filter(|_| frame.get(12..14) == Some(&[0x08, 0x00]))?;
    let ihl = usize::from(*ip.first()? & 0x0f) * 4;
    if ip[0] >> 4 != 4 || ip.len() < 20 || ip[9] != 17 {
        return None;
    }
    let udp = ip.get(ihl..ihl + 8)?;
    (u16::from_be_bytes([udp[2], udp[3]]) == 4791).then(|| Roce {
        tos: ip[1],
        src: ip[12..16].try_into().unwrap(),
        dst: ip[16..20].try_into().unwrap(),
    })
}

/// Every RoCE v2 packet any interface sends or receives while `during` runs (each crossing of the veth pair is
/// seen twice: leaving one end, arriving at the other).
fn capture_roce(during: impl FnOnce()) -> Vec<Roce> {
    let fd: OwnedFd = socket(AddressFamily::Packet, SockType::Raw, SockFlag::SOCK_CLOEXEC, SockProtocol::EthAll)
        .expect("a raw packet socket (the guest runs the tests as root)");
    setsockopt(&fd, sockopt::ReceiveTimeout, &TimeVal::new(0, 50_000)).expect("a receive timeout");
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let (mut seen, mut frame) = (Vec::new(), vec![0u8; 65536]);
            loop {
                match recv(fd.as_raw_fd(), &mut frame, MsgFlags::empty()) {
                    Ok(n) => seen.extend(roce_of(&frame[..n])),
                    // Timed out with nothing queued: the run is over once told so.
                    Err(_) if stop.load(Ordering::Acquire) => return seen,
                    Err(_) => {}
                }
            }
        })
    };
    during();
    stop.store(true, Ordering::Release);
    reader.join().expect("the capture thread")
}

/// Check that `run`'s RoCE packets went both ways between rxeA and rxeB, every one with TOS `tos`.
fn check_tos(what: &str, r: &Rxe, packets: &[Roce], tos: u8) {
    let ip = |s: &str| -> [u8; 4] { s.parse::<std::net::Ipv4Addr>().expect("an IPv4 address").octets() };
    let (a, b) = (ip(&r.a_ip), ip(&std::env::var("RXE_B_IP").expect("scripts/rxe-vm names rxeB's address")));
    let between = |src, dst| packets.iter().filter(|p| p.src == src && p.dst == dst).count();
    assert!(between(b, a) > 0 && between(a, b) > 0, "{what}: RoCE packets both ways, got {packets:?}");
    let off: Vec<&Roce> = packets.iter().filter(|p| p.tos != tos).collect();
    assert!(
        off.is_empty(),
        "{what}: every RoCE packet has TOS {tos}; {} of {} do not: {off:?}",
        off.len(),
        packets.len()
    );
}

#[test]
#[ignore = "needs soft-RoCE devices: scripts/test-rxe runs it in a VM (KVXFER_REQUIRE_RXE=1, --include-ignored)"]
fn tclass_is_the_tos_byte_of_every_roce_packet_both_ways() {
    let Some(r) = rxe() else { return };
    let t = TempDir::new("verbs-wire");
    // 106: DSCP 26 (AF31) with ECN ECT(0); 184: DSCP 46 (EF).
    let sent = capture_roce(|| {
        let (_, v) = send_to_serve_once(&r, &t, &["--sizes", "256KiB", "--reps", "2", "--verify", "--tclass", "106"]);
        assert_eq!(v["config"]["transport_detail"]["sender"]["tclass"], 106);
    });
    check_tos("send --tclass 106", &r, &sent, 106);
    let latency = capture_roce(|| {
        let args = ["latency", "--transport", "verbs", "-d", &r.b_dev, "--peer-device", &r.a_dev, "--tclass", "184"];
        run(&[&args[..], &["--ack-timeout", "18", "--sizes", "8,4KiB", "--iters", "20", "--warmup-iters", "2"]]
            .concat())
        .expect_code(0);
    });
    check_tos("latency --tclass 184", &r, &latency, 184);
    // Without --tclass the same capture sees class 0: the byte is the flag's doing, not the path's.
    let default = capture_roce(|| {
        send_to_serve_once(&r, &t, &["--sizes", "64KiB", "--reps", "1"]);
    });
    check_tos("send without --tclass", &r, &default, 0);
}

#[test]
fn a_roce_v2_frame_is_told_from_other_udp() {
    let mut frame = vec![0u8; 14 + 20 + 8];
    frame[12..14].copy_from_slice(&[0x08, 0x00]);
    frame[14] = 0x45;
    frame[15] = 106;
    frame[14 + 9] = 17;
    frame[14 + 12..14 + 16].copy_from_slice(&[10, 77, 0, 2]);
    frame[14 + 16..14 + 20].copy_from_slice(&[10, 77, 0, 1]);
    frame[34 + 2..34 + 4].copy_from_slice(&4791u16.to_be_bytes());
    assert_eq!(roce_of(&frame), Some(Roce { tos: 106, src: [10, 77, 0, 2], dst: [10, 77, 0, 1] }));
    frame[34 + 2..34 + 4].copy_from_slice(&53u16.to_be_bytes());
    assert_eq!(roce_of(&frame), None, "another UDP port");
    frame[12] = 0x86;
    assert_eq!(roce_of(&frame), None, "not IPv4");
}
