//! Finding and loading NIXL's C API (`libnixl_capi.so`) at run time. `nixl-sys` is built with its `stub-api`
//! feature: its functions `dlopen("libnixl_capi.so")` on first use and abort the process when that fails, so kvxfer
//! loads the library itself first, by full path (a library already loaded is found again by its name), and says
//! in one line what is missing otherwise. The wheels (`pip install --no-deps nixl-cu12`) keep the library and its
//! plugins in `site-packages/.nixl_cu12.mesonpy.libs`; `KVXFER_NIXL_LIB` names it (or its folder) directly.

use anyhow::{anyhow, Result};
use std::collections::BTreeMap;
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const LIB: &str = "libnixl_capi.so";
/// What to install, for the error lines.
pub const WHEEL_HINT: &str = "pip install --no-deps nixl-cu12 (or nixl-cu13) into the Python that KVXFER_PYTHON names, or set KVXFER_NIXL_LIB to libnixl_capi.so";

/// The loaded library and the environment kvxfer set for it.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub path: PathBuf,
    /// Variables kvxfer set because they were unset (UCX and NIXL read them when the agent starts).
    pub env: BTreeMap<String, String>,
}

/// Load the library once per process (later calls return the first outcome).
pub fn load() -> Result<&'static Loaded> {
    static LOADED: OnceLock<std::result::Result<Loaded, String>> = OnceLock::new();
    LOADED.get_or_init(|| load_once().map_err(|e| format!("{e:#}"))).as_ref().map_err(|e| anyhow!("{e}"))
}

fn load_once() -> Result<Loaded> {
    let dir = library_dir()?;
    let path = dir.join(LIB);
    let mut env = BTreeMap::new();
    // Hygiene, as measured where the wheel was tried: UCX's EFA module loads a second libibverbs and crashes at
    // exit; the plugins live beside the library. Only where the user set nothing.
    for (k, v) in [("NIXL_PLUGIN_DIR", dir.join("plugins").display().to_string()), ("UCX_MODULES", "^efa".into())] {
        if std::env::var_os(k).is_none() {
            std::env::set_var(k, &v);
            env.insert(k.to_string(), v);
        }
    }
    // The handle is kept for the life of the process (never dlclosed), so the stubs' later dlopen by name finds
    // this library and its symbols stay valid.
    dlopen(&path, nix::libc::RTLD_NOW | nix::libc::RTLD_GLOBAL)
        .map_err(|why| anyhow!("--transport nixl cannot load {}: {why}", path.display()))?;
    Ok(Loaded { path, env })
}

/// Why NIXL's plugin for `backend` (e.g. `UCX`) does not load, when it does not: the dynamic loader's own words
/// (a missing or too old library), which NIXL itself does not pass on.
pub fn plugin_problem(loaded: &Loaded, backend: &str) -> String {
    let dir =
        std::env::var_os("NIXL_PLUGIN_DIR").map(PathBuf::from).unwrap_or_else(|| loaded.path.with_file_name("plugins"));
    let plugin = dir.join(format!("libplugin_{backend}.so"));
    if !plugin.is_file() {
        return format!("no {} (NIXL_PLUGIN_DIR names the folder of NIXL's plugins)", plugin.display());
    }
    match dlopen(&plugin, nix::libc::RTLD_LAZY | nix::libc::RTLD_LOCAL) {
        Err(why) => format!("{} does not load: {why}", plugin.display()),
        Ok(()) => format!("{} loads, but NIXL could not start it", plugin.display()),
    }
}

/// dlopen `path`, or the loader's message. The handle is never closed.
fn dlopen(path: &Path, flags: i32) -> std::result::Result<(), String> {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| format!("a NUL in {}", path.display()))?;
    // SAFETY: dlopen of a NUL-terminated path; the handle is deliberately leaked (never dlclosed).
    let handle = unsafe { nix::libc::dlopen(c.as_ptr(), flags) };
    if !handle.is_null() {
        return Ok(());
    }
    // SAFETY: dlerror returns a thread-local message (or NULL) describing the failed dlopen just above.
    Err(unsafe {
        let e = nix::libc::dlerror();
        if e.is_null() {
            "unknown".to_string()
        } else {
            std::ffi::CStr::from_ptr(e).to_string_lossy().into_owned()
        }
    })
}

/// `KVXFER_NIXL_LIB` (the library or its folder), else the folder of an installed wheel as the Python that
/// `KVXFER_PYTHON` names (default python3) finds it.
fn library_dir() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("KVXFER_NIXL_LIB") {
        let p = PathBuf::from(p);
        let dir = if p.is_dir() { p.clone() } else { p.parent().map(Path::to_path_buf).unwrap_or_default() };
        if !dir.join(LIB).is_file() {
            return Err(anyhow!("KVXFER_NIXL_LIB={}: no {LIB} there; {WHEEL_HINT}", p.display()));
        }
        return Ok(dir);
    }
    let python = std::env::var("KVXFER_PYTHON").unwrap_or_else(|_| "python3".into());
    // find_spec locates the package without importing it (the nixl packages import torch).
    let probe = r#"
import importlib.util, os
for name in ("nixl_cu13", "nixl_cu12"):
    spec = importlib.util.find_spec(name)
    if spec and spec.origin:
        d = os.path.join(os.path.dirname(os.path.dirname(spec.origin)), "." + name + ".mesonpy.libs")
        if os.path.isfile(os.path.join(d, "libnixl_capi.so")):
            print(d)
            break
"#;
    let out = std::process::Command::new(&python).args(["-c", probe]).output().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            anyhow!("--transport nixl looks for the NIXL wheel with {python:?}, which was not found; {WHEEL_HINT}")
        }
        _ => anyhow!("cannot run {python} to find the NIXL wheel: {e}"),
    })?;
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if dir.is_empty() {
        return Err(anyhow!("--transport nixl needs NIXL's {LIB}, which {python} does not have; {WHEEL_HINT}"));
    }
    Ok(PathBuf::from(dir))
}
