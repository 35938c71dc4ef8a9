//! The memory check before a run allocates, against real limits: a memory cgroup made for the test (v1 or v2,
//! whichever this host mounts; making one needs root) and `ulimit -l`. The cgroup tests skip, saying why, when not
//! root, unless `KVXFER_REQUIRE_ROOT_CGROUP=1` promises root and a memory controller: then they fail.

mod common;
use common::{bin, missing_hardware, Out, Proc, TempDir};
use std::path::{Path, PathBuf};
use std::process::Command;

const REQUIRE: &str = "KVXFER_REQUIRE_ROOT_CGROUP";
const MIB: u64 = 1 << 20;

/// A memory cgroup made for one test at the top of this host's memory hierarchy, removed on drop.
struct Cgroup {
    dir: PathBuf,
    /// The file that holds the limit: `memory.limit_in_bytes` (v1) or `memory.max` (v2).
    limit_file: &'static str,
}

impl Cgroup {
    /// A new cgroup limited to `limit` bytes; None (skipped, or failed where promised) without root or a memory
    /// controller.
    fn new(tag: &str, limit: u64) -> Option<Cgroup> {
        if !is_root() {
            missing_hardware(REQUIRE, 0, "making a memory cgroup needs root");
            return None;
        }
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let mount = |fstype: &str, opt: Option<&str>| {
            mounts.lines().find_map(|l| {
                let (before, after) = l.split_once(" - ")?;
                let mut after = after.split_whitespace();
                let fits = after.next() == Some(fstype)
                    && opt.is_none_or(|o| after.nth(1).is_some_and(|opts| opts.split(',').any(|x| x == o)));
                fits.then(|| PathBuf::from(before.split_whitespace().nth(4).unwrap()))
            })
        };
        let (top, limit_file) = match mount("cgroup", Some("memory")) {
            Some(v1) => (v1, "memory.limit_in_bytes"),
            None => match mount("cgroup2", None).filter(|m| has_memory_v2(m)) {
                Some(v2) => (v2, "memory.max"),
                None => {
                    missing_hardware(REQUIRE, 0, "this host mounts no memory cgroup controller");
                    return None;
                }
            },
        };
        let dir = top.join(format!("kvx-test-{tag}-{}", std::process::id()));
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        let cg = Cgroup { dir, limit_file };
        std::fs::write(cg.dir.join(limit_file), limit.to_string()).unwrap();
        Some(cg)
    }

    /// The cgroup as /proc/self/cgroup names it.
    fn name(&self) -> String {
        format!("/{}", self.dir.file_name().unwrap().to_string_lossy())
    }

    /// `sh_before; exec kvxfer ARGS`, run by a shell that first moves itself into this cgroup.
    fn run(&self, sh_before: &str, args: &[&str]) -> Out {
        let procs = self.dir.join("cgroup.procs");
        let script = format!("echo $$ > '{}' && {sh_before} exec \"$0\" \"$@\"", procs.display());
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(script).arg(bin()).args(args).env_remove("KVXFER_TOKEN").env_remove("KVXFER_SYSFS_ROOT");
        Proc::start(&mut cmd, format!("kvxfer {} in {}", args.join(" "), self.name())).finish()
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Its processes have exited; a cgroup is removed with rmdir (its files are not real files).
        if let Err(e) = std::fs::remove_dir(&self.dir) {
            eprintln!("could not remove {}: {e}", self.dir.display());
        }
    }
}

/// Whether the v2 hierarchy at `top` offers the memory controller to the cgroups made under it (enabling it there
/// if needed: the root cgroup may).
fn has_memory_v2(top: &Path) -> bool {
    let controllers = std::fs::read_to_string(top.join("cgroup.controllers")).unwrap_or_default();
    if !controllers.split_whitespace().any(|c| c == "memory") {
        return false;
    }
    let subtree = top.join("cgroup.subtree_control");
    let on = |t: String| t.split_whitespace().any(|c| c == "memory");
    on(std::fs::read_to_string(&subtree).unwrap_or_default())
        || (std::fs::write(&subtree, "+memory").is_ok() && on(std::fs::read_to_string(&subtree).unwrap_or_default()))
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|u| u.split_whitespace().nth(1))
        == Some("0")
}

/// Inside a 512 MiB cgroup on a host with far more free memory, a sweep of two 1 GiB buffers was killed by the
/// kernel's OOM killer (exit 137, no output, no results file): the check read only MemAvailable. It is refused now,
/// before allocating, with the cgroup's limit named; a size that fits runs and writes its results.
#[test]
fn a_sweep_beyond_its_memory_cgroup_is_refused_naming_the_limit_and_one_that_fits_runs() {
    let Some(cg) = Cgroup::new("limit", 512 * MIB) else { return };
    let t = TempDir::new("cgroup-limit");
    let out = cg.run("", &["sweep", "--sizes", "1GiB", "--reps", "1", "--out-dir", &t.arg("")]);
    out.expect_code(2);
    let line = out.one_error();
    let named = format!("but the memory cgroup {} allows only", cg.name());
    assert!(line.contains("needs 2 GiB of memory here (2 buffer(s))") && line.contains(&named), "{line}");
    assert!(line.contains(&format!("({} 512 MiB;", cg.limit_file)), "{line}");
    assert_eq!(std::fs::read_dir(t.path()).unwrap().count(), 0, "nothing is written for a refused run");

    let json = t.join("r.json");
    let (j, o) = (json.to_string_lossy().into_owned(), t.arg(""));
    let out = cg.run("", &["sweep", "--sizes", "16MiB", "--reps", "2", "--json", &j, "--out-dir", &o]);
    out.expect_code(0);
    let r = common::read_json(&json);
    assert_eq!(r["cases"][0]["size_bytes"].as_u64(), Some(16 * MIB), "{r}");
    assert_eq!(r["cases"][0]["n"].as_u64(), Some(2));
}

/// Page cache the cgroup's members left (a build, a copied data set) is reclaimed before anyone is killed, so it
/// counts as free: after writing 384 MiB of a file inside a 512 MiB cgroup, two 96 MiB buffers still run.
#[test]
fn page_cache_in_the_cgroup_counts_as_free() {
    let Some(cg) = Cgroup::new("cache", 512 * MIB) else { return };
    // On disk (the target dir), not /tmp: tmpfs pages are not reclaimable cache.
    let t = TempDir::new("cgroup-cache");
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("kvx-cache-{}", std::process::id()));
    let dd = format!("dd if=/dev/zero of='{}' bs=1M count=384 conv=fsync status=none &&", file.display());
    let out = cg.run(&dd, &["sweep", "--sizes", "96MiB", "--reps", "1", "--out-dir", &t.arg("")]);
    let _ = std::fs::remove_file(&file);
    out.expect_code(0);
}

/// `sh -c 'ulimit -l KIB; exec [setpriv …] kvxfer ARGS'`: root loses CAP_IPC_LOCK (which lifts the limit) when
/// `drop_cap`.
fn with_memlock(kib: u64, drop_cap: bool, args: &[&str]) -> Out {
    let setpriv = if drop_cap && is_root() { "setpriv --bounding-set=-ipc_lock --inh-caps=-ipc_lock" } else { "" };
    let script = format!("ulimit -l {kib} && exec {setpriv} \"$0\" \"$@\"");
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(script).arg(bin()).args(args).env_remove("KVXFER_TOKEN").env_remove("KVXFER_SYSFS_ROOT");
    Proc::start(&mut cmd, format!("kvxfer {} under ulimit -l {kib}", args.join(" "))).finish()
}

/// verbs registers (pins) both buffers of a sweep, which `ulimit -l` bounds: past it, registration fails deep in
/// the run with ENOMEM. Refused first, naming `ulimit -l` and the size; a size within the limit is not refused
/// for it (it goes on to look for an RDMA device), and neither is root's, whose CAP_IPC_LOCK lifts the limit.
#[test]
fn verbs_past_ulimit_l_is_refused_before_pinning_naming_the_limit_and_the_size() {
    let t = TempDir::new("memlock");
    let dir = t.arg("");
    let run = |size: &str, drop_cap| {
        with_memlock(
            64,
            drop_cap,
            &["sweep", "--transport", "verbs", "--sizes", size, "--reps", "1", "--out-dir", &dir],
        )
    };
    let out = run("1MiB", true);
    out.expect_code(2);
    let line = out.one_error();
    assert!(line.contains("--transport verbs pins 2 MiB of host memory here (2 buffer(s))"), "{line}");
    assert!(line.contains("ulimit -l (RLIMIT_MEMLOCK, 64 KiB)"), "{line}");
    for out in [run("16KiB", true)].into_iter().chain(is_root().then(|| run("1MiB", false))) {
        out.no_panic();
        assert!(!out.stderr.contains("(RLIMIT_MEMLOCK"), "{}: {}", out.what, out.stderr);
    }
}
