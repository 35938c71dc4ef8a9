//! The host's network interfaces as sysfs describes them (`/sys/class/net/*`): what a TCP run goes through, its
//! link speed and MTU.

use super::sysroot::SysRoot;
use serde::Serialize;

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct NetInterface {
    pub name: String,
    /// `up`, `down`, `unknown` (loopback and many virtual interfaces say unknown while they work)...
    pub operstate: Option<String>,
    /// Link speed in Mb/s; None where the driver has none to report (loopback, virtual interfaces, a link that
    /// is down: sysfs then gives -1 or refuses the read).
    pub speed_mbps: Option<u64>,
    pub mtu: Option<u32>,
}

/// Every interface under `root`, by name.
pub fn interfaces(root: &SysRoot) -> Vec<NetInterface> {
    root.entries("/sys/class/net")
        .into_iter()
        // bonding_masters is a file there, not an interface.
        .filter(|n| !root.path(format!("/sys/class/net/{n}")).is_file())
        .map(|name| {
            let dir = format!("/sys/class/net/{name}");
            NetInterface {
                operstate: root.read(format!("{dir}/operstate")),
                speed_mbps: root
                    .read(format!("{dir}/speed"))
                    .and_then(|s| s.parse::<i64>().ok())
                    .and_then(|s| u64::try_from(s).ok().filter(|&s| s > 0)),
                mtu: root.read(format!("{dir}/mtu")).and_then(|s| s.parse().ok()),
                name,
            }
        })
        .collect()
}

impl NetInterface {
    /// `25 Gb/s` or `100 Mb/s`, or None.
    pub fn speed_text(&self) -> Option<String> {
        self.speed_mbps.map(|m| {
            if m >= 1000 && m % 1000 == 0 {
                format!("{} Gb/s", m / 1000)
            } else if m >= 1000 {
                format!("{:.1} Gb/s", m as f64 / 1000.0)
            } else {
                format!("{m} Mb/s")
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_listed_with_its_mtu_and_no_speed() {
        let all = interfaces(&SysRoot::at("/"));
        let lo = all.iter().find(|i| i.name == "lo").expect("lo");
        let mtu: u32 = std::fs::read_to_string("/sys/class/net/lo/mtu").unwrap().trim().parse().unwrap();
        assert_eq!((lo.mtu, lo.speed_mbps), (Some(mtu), None));
    }
}
