use super::*;

/// A written /proc and /sys tree under a fresh temp directory, removed on drop.
struct Tree(PathBuf);

impl Tree {
    fn new(tag: &str) -> Tree {
        let dir = std::env::temp_dir().join(format!("kvxfer-memory-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Tree(dir)
    }

    fn write(&self, path: &str, text: &str) -> &Tree {
        let p = self.0.join(path.trim_start_matches('/'));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
        self
    }

    fn root(&self) -> SysRoot {
        SysRoot::at(&self.0)
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

const V2_MOUNTS: &str = "\
24 30 0:22 / /sys rw,nosuid shared:7 - sysfs sysfs rw
35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";

fn meminfo(available: u64) -> String {
    format!("MemTotal:       263854080 kB\nMemFree:         1000 kB\nMemAvailable:   {} kB\n", available / 1024)
}

#[test]
fn a_v2_cgroup_limit_tighter_than_the_host_bounds_the_run_with_its_cache_counted_free() {
    let t = Tree::new("v2");
    let job = "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_42";
    t.write("/proc/meminfo", &meminfo(200 * GIB))
        .write("/proc/self/cgroup", "0::/system.slice/slurmstepd.scope/job_42\n")
        .write("/proc/self/mountinfo", V2_MOUNTS)
        .write(&format!("{job}/memory.max"), &format!("{}\n", 3 * GIB / 2))
        .write(&format!("{job}/memory.current"), &format!("{}\n", GIB + 100 * MIB))
        .write(
            &format!("{job}/memory.stat"),
            &format!("anon 1000\nfile 300\ninactive_file {}\nactive_file 9\n", 100 * MIB),
        )
        // The scope has no memory.max (the controller is off there), the slice no limit; the root never has one.
        .write("/sys/fs/cgroup/system.slice/memory.max", "max\n");
    let h = headroom(&t.root()).expect("a bound");
    assert_eq!(h.bytes, GIB / 2, "1.5 GiB limit less 1.1 GiB used, of which 100 MiB is cache");
    assert_eq!(
        h.bound,
        Bound::Cgroup {
            version: CgroupVersion::V2,
            path: "/system.slice/slurmstepd.scope/job_42".into(),
            limit: 3 * GIB / 2,
            usage: GIB + 100 * MIB,
            reclaimable: 100 * MIB
        }
    );
    assert_eq!(
        h.describe(),
        "the memory cgroup /system.slice/slurmstepd.scope/job_42 allows only 512 MiB more (memory.max 1.5 GiB; 1.1 GiB in use, 100 MiB of it reclaimable cache)"
    );
}

#[test]
fn an_ancestors_v2_limit_binds_and_max_means_none() {
    let t = Tree::new("v2-parent");
    t.write("/proc/meminfo", &meminfo(8 * GIB))
        .write("/proc/self/cgroup", "0::/kubepods/pod1/ctr\n")
        .write("/proc/self/mountinfo", V2_MOUNTS)
        .write("/sys/fs/cgroup/kubepods/pod1/ctr/memory.max", "max\n")
        .write("/sys/fs/cgroup/kubepods/pod1/ctr/memory.current", "4096\n")
        .write("/sys/fs/cgroup/kubepods/pod1/memory.max", &format!("{}\n", 2 * GIB))
        .write("/sys/fs/cgroup/kubepods/pod1/memory.current", &format!("{}\n", GIB))
        .write("/sys/fs/cgroup/kubepods/memory.max", &format!("{}\n", 64 * GIB));
    let limits = cgroup_limits(&t.root());
    let paths: Vec<_> = limits
        .iter()
        .map(|h| match &h.bound {
            Bound::Cgroup { path, .. } => (path.as_str(), h.bytes),
            Bound::Host => ("host", h.bytes),
        })
        .collect();
    assert_eq!(paths, [("/kubepods/pod1", GIB), ("/kubepods", 64 * GIB)]);
    assert_eq!(headroom(&t.root()).unwrap().bytes, GIB);
}

#[test]
fn a_v1_memory_hierarchy_is_found_through_mountinfo_and_the_host_bounds_when_tighter() {
    let t = Tree::new("v1");
    let mounts = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 /docker/abc /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    // Hybrid mode: the v2 hierarchy is mounted but has no memory controller, so it holds no memory.max.
    t.write("/proc/meminfo", &meminfo(100 * GIB))
        .write("/proc/self/cgroup", "4:memory:/docker/abc/kvx-test\n2:cpu:/\n0::/\n")
        .write("/proc/self/mountinfo", mounts)
        .write("/sys/fs/cgroup/memory/kvx-test/memory.limit_in_bytes", &format!("{}\n", 3 * GIB / 2))
        .write("/sys/fs/cgroup/memory/kvx-test/memory.usage_in_bytes", &format!("{}\n", GIB))
        .write("/sys/fs/cgroup/memory/kvx-test/memory.stat", "inactive_file 5\ntotal_inactive_file 0\n")
        .write("/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n")
        .write("/sys/fs/cgroup/unified/cgroup.procs", "1\n");
    let h = headroom(&t.root()).unwrap();
    assert_eq!(h.bytes, GIB / 2);
    assert_eq!(
        h.describe(),
        "the memory cgroup /docker/abc/kvx-test allows only 512 MiB more (memory.limit_in_bytes 1.5 GiB; 1 GiB in use, 0 B of it reclaimable cache)"
    );
    t.write("/proc/meminfo", &meminfo(256 * MIB));
    let h = headroom(&t.root()).unwrap();
    assert_eq!((h.bytes, h.describe()), (256 * MIB, "only 256 MiB is available (MemAvailable)".to_string()));
}

#[test]
fn nothing_readable_means_no_bound() {
    let t = Tree::new("empty");
    assert_eq!(headroom(&t.root()), None);
    t.write("/proc/self/cgroup", "0::/../../elsewhere\n").write("/proc/self/mountinfo", V2_MOUNTS);
    assert_eq!(cgroup_limits(&t.root()), Vec::new());
}

#[test]
fn memlock_binds_without_cap_ipc_lock_and_unlimited_or_the_capability_lift_it() {
    let t = Tree::new("memlock");
    let limits = |soft: &str| {
        format!("Limit                     Soft Limit           Hard Limit           Units     \nMax open files            1024                 4096                 files     \nMax locked memory         {soft:<20} {soft:<20} bytes     \n")
    };
    let status = |cap: &str| format!("Name:\tkvxfer\nVmLck:\t       4 kB\nVmPin:\t       8 kB\nCapEff:\t{cap}\n");
    t.write("/proc/self/limits", &limits("65536")).write("/proc/self/status", &status("0000000000000000"));
    let l = lockable(&t.root()).expect("a bound");
    assert_eq!((l.limit, l.pinned, l.bytes()), (65536, 12 * 1024, 65536 - 12 * 1024));
    t.write("/proc/self/status", &status("000001ffffffffff"));
    assert_eq!(lockable(&t.root()), None, "root's CAP_IPC_LOCK lifts the limit");
    t.write("/proc/self/status", &status("0000000000000000")).write("/proc/self/limits", &limits("unlimited"));
    assert_eq!(lockable(&t.root()), None);
}
