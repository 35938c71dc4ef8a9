//! The environment fingerprint stored in every results file, and what `kvxfer devices` prints about the host.

mod diff;
pub mod hardware;
pub mod memory;
pub mod netdev;
pub mod sysroot;

pub use diff::{differences, transport_differences};

use crate::mem::host::meminfo_field;
use hardware::{GpuDevice, Iommu, Nic, NumaNode};
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct Env {
    pub hostname: String,
    pub kernel: String,
    pub os: String,
    pub cpu: String,
    pub cpus: usize,
    /// The 1, 5 and 15 minute load averages when the run started; `load_avg_end` (added when it ends) says
    /// whether the host was busier by then.
    pub load_avg_start: Option<[f64; 3]>,
    pub mem_total_bytes: Option<u64>,
    pub mem_available_bytes: Option<u64>,
    pub hugepages_total: Option<u64>,
    pub hugepages_free: Option<u64>,
    pub hugepage_size_bytes: Option<u64>,
    pub kvxfer_version: String,
    pub command_line: Vec<String>,
    /// `git describe --always --dirty --tags` of the source kvxfer was built from ("unknown" outside a checkout).
    pub git_describe: String,
    pub numa_nodes: Vec<NumaNode>,
    pub iommu: Iommu,
    /// RDMA NICs (/sys/class/infiniband): board, firmware, NUMA node, ports with link rate, MTU and GID types.
    pub nics: Vec<Nic>,
    /// NVIDIA GPUs on the PCI bus and their NUMA nodes.
    pub gpus: Vec<GpuDevice>,
    pub gpu_driver: Option<String>,
    pub cuda_driver_version: Option<String>,
}

pub fn hostname() -> String {
    nix::unistd::gethostname().map(|h| h.to_string_lossy().into_owned()).unwrap_or_else(|_| "unknown".into())
}

fn os_name() -> String {
    std::fs::read_to_string(sysroot::SysRoot::get().path("/etc/os-release"))
        .ok()
        .and_then(|t| t.lines().find_map(|l| l.strip_prefix("PRETTY_NAME=").map(|v| v.trim_matches('"').to_string())))
        .unwrap_or_else(|| "unknown".into())
}

fn cpu_model() -> String {
    std::fs::read_to_string(sysroot::SysRoot::get().path("/proc/cpuinfo"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("model name").map(|v| v.trim_start_matches([' ', '\t', ':']).to_string()))
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// The CPUs the process was given when it started, once [`note_cpus_at_start`] has run.
static CPUS_AT_START: std::sync::OnceLock<usize> = std::sync::OnceLock::new();

/// Remember how many CPUs this process may run on, before any thread binds itself to fewer (a ping-pong's ends, a
/// NUMA node): every results file's fingerprint counts what the run was given, not what one thread kept.
pub fn note_cpus_at_start() {
    CPUS_AT_START.get_or_init(available_cpus);
}

fn available_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl Env {
    pub fn capture() -> Env {
        let meminfo = std::fs::read_to_string(sysroot::SysRoot::get().path("/proc/meminfo")).unwrap_or_default();
        Env {
            hostname: hostname(),
            kernel: nix::sys::utsname::uname()
                .map(|u| u.release().to_string_lossy().into_owned())
                .unwrap_or_else(|_| "unknown".into()),
            os: os_name(),
            cpu: cpu_model(),
            cpus: CPUS_AT_START.get().copied().unwrap_or_else(available_cpus),
            load_avg_start: load_average(sysroot::SysRoot::get()),
            mem_total_bytes: meminfo_field(&meminfo, "MemTotal"),
            mem_available_bytes: meminfo_field(&meminfo, "MemAvailable"),
            hugepages_total: meminfo_field(&meminfo, "HugePages_Total"),
            hugepages_free: meminfo_field(&meminfo, "HugePages_Free"),
            hugepage_size_bytes: meminfo_field(&meminfo, "Hugepagesize"),
            kvxfer_version: env!("CARGO_PKG_VERSION").to_string(),
            command_line: scrub_token(std::env::args()),
            git_describe: option_env!("KVXFER_GIT_DESCRIBE").unwrap_or("unknown").to_string(),
            numa_nodes: hardware::numa_nodes(),
            iommu: hardware::iommu(),
            nics: hardware::nics(),
            gpus: hardware::gpus(),
            gpu_driver: hardware::gpu_driver(),
            cuda_driver_version: hardware::cuda_driver_version(),
        }
    }
}

/// The 1, 5 and 15 minute load averages (`/proc/loadavg`).
pub fn load_average(root: &sysroot::SysRoot) -> Option<[f64; 3]> {
    let text = root.read("/proc/loadavg")?;
    let mut f = text.split_whitespace().map(|v| v.parse::<f64>().ok().filter(|x| x.is_finite() && *x >= 0.0));
    Some([f.next()??, f.next()??, f.next()??])
}

/// The command line with the value of `--token` replaced: results files travel, the secret must not.
pub fn scrub_token(args: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut hide_next = false;
    for a in args {
        if hide_next {
            out.push("(hidden)".to_string());
            hide_next = false;
        } else if a == "--token" {
            out.push(a);
            hide_next = true;
        } else if a.starts_with("--token=") {
            out.push("--token=(hidden)".to_string());
        } else {
            out.push(a);
        }
    }
    out
}

#[cfg(test)]
mod scrub_tests {
    #[test]
    fn the_token_never_reaches_the_command_line_of_a_results_file() {
        let args = ["kvxfer", "send", "--token", "s3cret", "--peer", "h:1", "--token=s3cret2"].map(String::from);
        let kept = super::scrub_token(args);
        assert!(!kept.iter().any(|a| a.contains("s3cret")), "{kept:?}");
        assert_eq!(kept[2..5], ["--token", "(hidden)", "--peer"]);
    }
}
