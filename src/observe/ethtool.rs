//! A network interface's driver statistics, as `ethtool -S` shows them (PFC pause frames, discards, per-queue
//! drops...), read with the SIOCETHTOOL ioctl: no ethtool binary needed. The ioctl (and the zeroed `ifreq` it
//! takes) is this module's FFI edge and its only `unsafe`; its buffers are plain bytes, decoded field by field.

use nix::libc;
use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};

/// ethtool commands and the statistics string set (linux/ethtool.h).
const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSTATS: u32 = 0x1d;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETH_SS_STATS: u32 = 1;
const ETH_GSTRING_LEN: usize = 32;
/// More statistics than any driver reports (mlx5 reports about 1,000 with many queues): a bound, not a limit.
const MAX_STATS: usize = 1 << 16;

/// The statistics of interface `name`, by name; None when it has none (lo, most virtual devices) or it cannot be
/// asked (no such interface, no permission).
pub fn stats(name: &str) -> Option<BTreeMap<String, u64>> {
    Reader::open(name)?.read()
}

/// One interface's statistics, read again and again: the names are asked once, each read is two ioctls (the
/// count, then the values).
pub struct Reader {
    sock: OwnedFd,
    name: String,
    names: Vec<String>,
}

impl Reader {
    /// None when the interface has no statistics or cannot be asked.
    pub fn open(name: &str) -> Option<Reader> {
        let sock = nix::sys::socket::socket(
            nix::sys::socket::AddressFamily::Inet,
            nix::sys::socket::SockType::Datagram,
            nix::sys::socket::SockFlag::SOCK_CLOEXEC,
            None,
        )
        .ok()?;
        let count = stats_count(&sock, name).filter(|n| (1..=MAX_STATS).contains(n))?;
        let names = strings(&sock, name, count)?;
        Some(Reader { sock, name: name.to_string(), names })
    }

    /// The values now, by name; None when the driver's set of statistics changed since [`Reader::open`] (a
    /// reconfigured NIC: open it again) or the interface went away.
    pub fn read(&self) -> Option<BTreeMap<String, u64>> {
        let count = stats_count(&self.sock, &self.name)?;
        if count != self.names.len() {
            return None;
        }
        let values = values(&self.sock, &self.name, count)?;
        Some(self.names.iter().cloned().zip(values).collect())
    }
}

/// How many statistics the driver reports: ETHTOOL_GSSET_INFO for the stats set.
fn stats_count(sock: &OwnedFd, name: &str) -> Option<usize> {
    // struct ethtool_sset_info { u32 cmd; u32 reserved; u64 sset_mask; u32 data[]; } with room for one u32.
    let mut buf = [0u8; 24];
    buf[0..4].copy_from_slice(&ETHTOOL_GSSET_INFO.to_ne_bytes());
    buf[8..16].copy_from_slice(&(1u64 << ETH_SS_STATS).to_ne_bytes());
    ethtool_ioctl(sock, name, &mut buf)?;
    // The kernel clears the mask bit of a set the driver does not have.
    let mask = u64::from_ne_bytes(buf[8..16].try_into().ok()?);
    let count = u32::from_ne_bytes(buf[16..20].try_into().ok()?);
    (mask & (1 << ETH_SS_STATS) != 0).then_some(count as usize)
}

/// The statistics' names: ETHTOOL_GSTRINGS, `count` NUL-padded strings of 32 bytes after a 12-byte header (room
/// for twice as many, as for [`values`]: the kernel writes what the driver has then).
fn strings(sock: &OwnedFd, name: &str, count: usize) -> Option<Vec<String>> {
    let header = 12;
    let mut bytes = vec![0u8; header + (2 * count + 64) * ETH_GSTRING_LEN];
    bytes[0..4].copy_from_slice(&ETHTOOL_GSTRINGS.to_ne_bytes());
    bytes[4..8].copy_from_slice(&ETH_SS_STATS.to_ne_bytes());
    bytes[8..12].copy_from_slice(&(count as u32).to_ne_bytes());
    ethtool_ioctl(sock, name, &mut bytes)?;
    if u32::from_ne_bytes(bytes[8..12].try_into().ok()?) as usize != count {
        return None;
    }
    let names = bytes[header..header + count * ETH_GSTRING_LEN]
        .chunks(ETH_GSTRING_LEN)
        .map(|s| {
            let end = s.iter().position(|b| *b == 0).unwrap_or(s.len());
            String::from_utf8_lossy(&s[..end]).trim().to_string()
        })
        .collect();
    Some(names)
}

/// The statistics' values: ETHTOOL_GSTATS, `count` u64 after an 8-byte header. The kernel writes as many values
/// as the driver has at that moment, whatever the header asks for, so the buffer has room for twice `count` (the
/// count was asked just before); a different count in the answer is refused.
fn values(sock: &OwnedFd, name: &str, count: usize) -> Option<Vec<u64>> {
    let mut bytes = vec![0u8; 8 * (1 + 2 * count + 64)];
    bytes[0..4].copy_from_slice(&ETHTOOL_GSTATS.to_ne_bytes());
    bytes[4..8].copy_from_slice(&(count as u32).to_ne_bytes());
    ethtool_ioctl(sock, name, &mut bytes)?;
    let answered = u32::from_ne_bytes(bytes[4..8].try_into().ok()?) as usize;
    (answered == count).then(|| {
        bytes[8..8 * (1 + count)]
            .chunks_exact(8)
            .map(|v| u64::from_ne_bytes(v.try_into().unwrap_or_default()))
            .collect()
    })
}

/// SIOCETHTOOL on interface `name` with `data` as the command buffer (the kernel reads the command from its start
/// and writes its answer back into it).
fn ethtool_ioctl(sock: &OwnedFd, name: &str, data: &mut [u8]) -> Option<()> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('\0') {
        return None;
    }
    // SAFETY: ifreq is plain data (a name array and a union of plain fields); all zeroes is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *dst = src as libc::c_char;
    }
    req.ifr_ifru.ifru_data = data.as_mut_ptr().cast();
    // SAFETY: SIOCETHTOOL takes a pointer to an ifreq whose ifru_data points to the command buffer; `data` is a
    // live, exclusively borrowed buffer with room for twice the count the driver reported just before (the kernel
    // writes the driver's count at the time of the call, whatever the buffer's header asks), so it writes within
    // it; `req` lives across the call.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCETHTOOL, &mut req as *mut libc::ifreq) };
    (rc == 0).then_some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_cannot_be_interfaces_are_refused_and_lo_has_none() {
        assert_eq!(stats(""), None);
        assert_eq!(stats("a-name-longer-than-ifnamsiz"), None);
        assert_eq!(stats("no-such-if0"), None);
        // The loopback driver reports no ethtool statistics.
        assert_eq!(stats("lo"), None);
    }

    /// A real veth pair (needs root, as CI runs): veth reports `peer_ifindex`, which must be its peer's ifindex,
    /// and the names as the kernel lists them.
    #[test]
    fn a_veth_reports_its_peers_ifindex() {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        if !status.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0")) {
            eprintln!("skipped: creating a veth pair needs root");
            return;
        }
        let (a, b) = (format!("kvxe{}a", std::process::id() % 10000), format!("kvxe{}b", std::process::id() % 10000));
        let ip = |args: &[&str]| std::process::Command::new("ip").args(args).status().is_ok_and(|s| s.success());
        assert!(ip(&["link", "add", &a, "type", "veth", "peer", "name", &b]), "ip link add {a} type veth failed");
        struct Del(String);
        impl Drop for Del {
            fn drop(&mut self) {
                let _ = std::process::Command::new("ip").args(["link", "del", &self.0]).status();
            }
        }
        let _del = Del(a.clone());
        let peer: u64 = std::fs::read_to_string(format!("/sys/class/net/{b}/ifindex")).unwrap().trim().parse().unwrap();
        let s = stats(&a).expect("veth reports ethtool statistics");
        assert_eq!(s.get("peer_ifindex"), Some(&peer), "{s:?}");
        assert!(s.keys().all(|k| !k.is_empty() && k.len() < ETH_GSTRING_LEN), "{s:?}");
    }
}
