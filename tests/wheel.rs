//! The Python wheel end to end, as a GPU host without Rust uses it: scripts/wheel builds it, a fresh venv
//! pip-installs it from the file (offline), and the venv's kvxfer lists devices and runs a verified loopback
//! sweep. Nothing is skipped: python3 with venv is a test prerequisite (scripts/setup --test installs it).

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// scripts/wheel reuses target/release, so after the suite's release build its cargo runs are fresh: it packs in
/// seconds and holds the target dir's lock only for a moment while the other tests run. Run under another profile,
/// or after build.rs's inputs moved (a commit: it watches the git refs), it compiles the release binary first,
/// which takes minutes on a small machine and relinks target/release/kvxfer under the tests running it.
const WHEEL_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Creating the venv and installing the wheel into it: pip unzips a ~9 MB wheel.
const PIP_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// Run `cmd` to completion with both pipes captured, echoing it to the test's log; the test fails if it does
/// not exit within `timeout`.
fn run_cmd(cmd: &mut Command, timeout: Duration) -> Out {
    let what = format!("{:?}", cmd);
    let started = Instant::now();
    let mut p = Proc::start(cmd.stdin(Stdio::null()), what);
    let status = p.wait_timeout(timeout).unwrap_or_else(|| {
        panic!("{} did not exit within {timeout:?}\nstdout:\n{}\nstderr:\n{}", p.what, p.stdout.text(), p.stderr.text())
    });
    let out = Out { code: status.code(), stdout: p.stdout.text(), stderr: p.stderr.text(), what: p.what.clone() };
    eprintln!("$ {} ({:.1} s)\n{}{}", out.what, started.elapsed().as_secs_f64(), out.stdout, out.stderr);
    out
}

/// A command of the venv's `bin/` (python, kvxfer), with no Python settings of the caller's leaking in.
fn venv_cmd(venv: &Path, exe: &str) -> Command {
    let mut c = Command::new(venv.join("bin").join(exe));
    for var in ["PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "KVXFER_TOKEN"] {
        c.env_remove(var);
    }
    c
}

#[test]
fn wheel_installs_into_a_fresh_venv_and_its_kvxfer_runs_a_verified_sweep() {
    let t = TempDir::new("wheel");

    // Build: the one stdout line is the wheel's path, relative to the repository.
    let out = run_cmd(Command::new(Path::new(ROOT).join("scripts/wheel")).current_dir(ROOT), WHEEL_TIMEOUT);
    out.expect_code(0);
    let rel = out.stdout.lines().last().unwrap_or_else(|| panic!("scripts/wheel printed no wheel path"));
    let wheel = Path::new(ROOT).join(rel.trim());
    let name = format!("kvxfer-{}-py3-none-manylinux_2_34_{}.whl", env!("CARGO_PKG_VERSION"), std::env::consts::ARCH);
    assert_eq!(wheel.file_name().and_then(|n| n.to_str()), Some(name.as_str()), "wheel name and tags");
    assert!(wheel.is_file(), "{} is not there", wheel.display());

    // Install: a fresh venv, the wheel from its file only (--no-index: no registry is asked).
    let venv: PathBuf = t.join("venv");
    run_cmd(Command::new("python3").args(["-m", "venv"]).arg(&venv), PIP_TIMEOUT).expect_code(0);
    let mut pip = venv_cmd(&venv, "python");
    pip.args(["-m", "pip", "install", "--no-index", "--disable-pip-version-check"]).arg(&wheel);
    run_cmd(&mut pip, PIP_TIMEOUT).expect_code(0);
    let installed = venv.join("bin/kvxfer");
    assert!(installed.is_file(), "pip installed no {}", installed.display());

    // Run from the venv: the version it was built as, the device listing, a verified loopback sweep.
    let v = run_cmd(venv_cmd(&venv, "kvxfer").arg("--version"), CMD_TIMEOUT);
    v.expect_code(0);
    assert_eq!(v.stdout.trim(), format!("kvxfer {}", env!("CARGO_PKG_VERSION")));

    let d = run_cmd(venv_cmd(&venv, "kvxfer").arg("devices"), CMD_TIMEOUT);
    d.expect_code(0);
    assert!(d.stdout.contains("transports") && d.stdout.contains("tcp"), "devices lists the transports:\n{}", d.stdout);

    let json = t.join("sweep.json");
    let results = t.join("results");
    let mut sweep = venv_cmd(&venv, "kvxfer");
    sweep.args(["sweep", "--sizes", "1MiB,4MiB", "--reps", "2", "--verify", "--json"]).arg(&json);
    sweep.arg("--out-dir").arg(&results);
    run_cmd(&mut sweep, CMD_TIMEOUT).expect_code(0);
    let r = read_json(&json);
    let cases = r["cases"].as_array().unwrap_or_else(|| panic!("no cases[] in {r}"));
    let sizes: Vec<u64> = cases.iter().filter_map(|c| c["size_bytes"].as_u64()).collect();
    assert_eq!(sizes, [1 << 20, 4 << 20], "one case per size, in order");
    for c in cases {
        check_case(c, c["size_bytes"].as_u64().unwrap(), 2, true);
    }
    assert_eq!(r["kvxfer_version"], env!("CARGO_PKG_VERSION"), "the results name the wheel's version");
}
