//! Rank 0's address through the launcher's PMIx server, the way MPI libraries and NCCL's tests find each other
//! under `mpirun` and `srun --mpi=pmix` without a flag: rank 0 binds its rendezvous listener on a port the kernel
//! picks and puts `host:port` under one key; every rank fences, collecting the data, and reads rank 0's key. A
//! port nobody chose cannot collide with another run's, and rank 0 says where it really is.
//!
//! libpmix is loaded at run time (`libpmix.so.2`, found as the dynamic loader finds any library), so kvxfer starts
//! on hosts without it; the few structs and constants used are transcribed from pmix_common.h (PMIx 4.2; the same
//! since PMIx 2) and checked by size and offset below. Every `unsafe` block of the cluster module is in this file.

use super::launcher::{self, BoundListener, Coordinator, CoordinatorSource, EnvMap, PmixReply, RankInfo};
use anyhow::{anyhow, bail, Context, Result};
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::mem::{offset_of, size_of};
use std::net::{Ipv4Addr, TcpListener};
use std::ptr;
use std::time::Duration;

const LIBRARY: &CStr = c"libpmix.so.2";
/// The key rank 0 puts its address under.
const KEY: &CStr = c"kvxfer.coordinator";

// pmix_common.h
const PMIX_SUCCESS: c_int = 0;
const PMIX_MAX_NSLEN: usize = 255;
const PMIX_MAX_KEYLEN: usize = 511;
const PMIX_RANK_WILDCARD: u32 = u32::MAX - 1;
const PMIX_GLOBAL: u8 = 3;
const PMIX_BOOL: u16 = 1;
const PMIX_STRING: u16 = 3;
const PMIX_INT: u16 = 6;
const PMIX_COLLECT_DATA: &CStr = c"pmix.collect";
const PMIX_TIMEOUT: &CStr = c"pmix.timeout";

/// `pmix_proc_t`.
#[repr(C)]
#[derive(Clone, Copy)]
struct Proc {
    nspace: [c_char; PMIX_MAX_NSLEN + 1],
    rank: u32,
}

/// The union of `pmix_value_t`: only the members used here, padded to its size (24 bytes, 8-aligned, set by its
/// widest members: `struct timeval`, `pmix_byte_object_t`, `pmix_envar_t`).
#[repr(C)]
#[derive(Clone, Copy)]
union Data {
    flag: bool,
    integer: c_int,
    string: *mut c_char,
    size: [u64; 3],
}

/// `pmix_value_t`.
#[repr(C)]
#[derive(Clone, Copy)]
struct Value {
    kind: u16,
    data: Data,
}

/// `pmix_info_t`.
#[repr(C)]
struct Info {
    key: [c_char; PMIX_MAX_KEYLEN + 1],
    flags: u32,
    value: Value,
}

// Sizes and offsets as gcc lays out pmix_common.h on x86_64 and aarch64 (LP64).
const _: () = assert!(size_of::<Proc>() == 260 && offset_of!(Proc, rank) == 256);
const _: () = assert!(size_of::<Value>() == 32 && offset_of!(Value, data) == 8);
const _: () = assert!(size_of::<Info>() == 552 && offset_of!(Info, flags) == 512 && offset_of!(Info, value) == 520);

impl Info {
    fn new(key: &CStr, value: Value) -> Info {
        let mut info = Info { key: [0; PMIX_MAX_KEYLEN + 1], flags: 0, value };
        for (dst, src) in info.key.iter_mut().zip(key.to_bytes()) {
            *dst = *src as c_char;
        }
        info
    }
}

type InitFn = unsafe extern "C" fn(*mut Proc, *mut Info, usize) -> c_int;
type PutFn = unsafe extern "C" fn(u8, *const c_char, *mut Value) -> c_int;
type CommitFn = unsafe extern "C" fn() -> c_int;
type FenceFn = unsafe extern "C" fn(*const Proc, usize, *const Info, usize) -> c_int;
type GetFn = unsafe extern "C" fn(*const Proc, *const c_char, *const Info, usize, *mut *mut Value) -> c_int;
type FinalizeFn = unsafe extern "C" fn(*const Info, usize) -> c_int;
type ErrorStringFn = unsafe extern "C" fn(c_int) -> *const c_char;

/// The PMIx client functions kvxfer calls.
struct Api {
    init: InitFn,
    put: PutFn,
    commit: CommitFn,
    fence: FenceFn,
    get: GetFn,
    finalize: FinalizeFn,
    error_string: ErrorStringFn,
}

impl Api {
    /// dlopen libpmix and look its functions up; the loader's words when it cannot.
    fn load() -> std::result::Result<Api, String> {
        // SAFETY: dlopen of a NUL-terminated name. The handle is never closed: PMIx runs a progress thread and
        // loads plugins of its own, which must outlive every call.
        let handle = unsafe { nix::libc::dlopen(LIBRARY.as_ptr(), nix::libc::RTLD_NOW | nix::libc::RTLD_GLOBAL) };
        if handle.is_null() {
            return Err(format!("{} does not load: {}", LIBRARY.to_string_lossy(), loader_error()));
        }
        let find = |name: &CStr| {
            // SAFETY: dlsym on the live handle above with a NUL-terminated name.
            let symbol = unsafe { nix::libc::dlsym(handle, name.as_ptr()) };
            match symbol.is_null() {
                true => Err(format!("{} has no {}", LIBRARY.to_string_lossy(), name.to_string_lossy())),
                false => Ok(symbol),
            }
        };
        let (init, put, commit) = (find(c"PMIx_Init")?, find(c"PMIx_Put")?, find(c"PMIx_Commit")?);
        let (fence, get, finalize) = (find(c"PMIx_Fence")?, find(c"PMIx_Get")?, find(c"PMIx_Finalize")?);
        let error_string = find(c"PMIx_Error_string")?;
        // SAFETY: each pointer is the named function of libpmix, non-null, and each type transcribes that
        // function's declaration in pmix.h.
        Ok(unsafe {
            Api {
                init: std::mem::transmute::<*mut c_void, InitFn>(init),
                put: std::mem::transmute::<*mut c_void, PutFn>(put),
                commit: std::mem::transmute::<*mut c_void, CommitFn>(commit),
                fence: std::mem::transmute::<*mut c_void, FenceFn>(fence),
                get: std::mem::transmute::<*mut c_void, GetFn>(get),
                finalize: std::mem::transmute::<*mut c_void, FinalizeFn>(finalize),
                error_string: std::mem::transmute::<*mut c_void, ErrorStringFn>(error_string),
            }
        })
    }

    /// PMIx's name for a status.
    fn status(&self, rc: c_int) -> String {
        // SAFETY: PMIx_Error_string takes any status and returns a static string (or NULL).
        let text = unsafe { (self.error_string)(rc) };
        if text.is_null() {
            return format!("status {rc}");
        }
        // SAFETY: a non-null result is a NUL-terminated static string.
        format!("{} ({rc})", unsafe { CStr::from_ptr(text) }.to_string_lossy())
    }
}

/// The dynamic loader's message for the dlopen that just failed on this thread.
fn loader_error() -> String {
    // SAFETY: dlerror returns a thread-local message (or NULL) about the last failed dl call of this thread.
    let text = unsafe { nix::libc::dlerror() };
    if text.is_null() {
        return "unknown reason".into();
    }
    // SAFETY: a non-null dlerror result is a NUL-terminated string, valid until the next dl call.
    unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned()
}

/// A connection to the launcher's PMIx server, finalized when dropped (mpirun counts a process that initialized
/// PMIx and exits without finalizing as one that failed).
struct Client {
    api: Api,
    me: Proc,
}

impl Client {
    fn init(api: Api) -> std::result::Result<Client, String> {
        let mut me = Proc { nspace: [0; PMIX_MAX_NSLEN + 1], rank: 0 };
        // SAFETY: PMIx_Init fills `me`, a pmix_proc_t; no info array.
        let rc = unsafe { (api.init)(&mut me, ptr::null_mut(), 0) };
        if rc != PMIX_SUCCESS {
            return Err(format!("PMIx_Init failed: {}", api.status(rc)));
        }
        Ok(Client { api, me })
    }

    /// Put `value` under [`KEY`] for every process of the job, and push it to the server.
    fn publish(&self, value: &str) -> Result<()> {
        let text = CString::new(value).map_err(|_| anyhow!("a NUL in {value:?}"))?;
        let mut v = Value { kind: PMIX_STRING, data: Data { string: text.as_ptr().cast_mut() } };
        // SAFETY: PMIx_Put copies the key and the value (the string included) before it returns.
        let rc = unsafe { (self.api.put)(PMIX_GLOBAL, KEY.as_ptr(), &mut v) };
        if rc != PMIX_SUCCESS {
            bail!("PMIx_Put of rank 0's address failed: {}", self.api.status(rc));
        }
        // SAFETY: PMIx_Commit takes no arguments.
        let rc = unsafe { (self.api.commit)() };
        if rc != PMIX_SUCCESS {
            bail!("PMIx_Commit of rank 0's address failed: {}", self.api.status(rc));
        }
        Ok(())
    }

    /// Wait until every process of the job got here, collecting what each put; at most `timeout`.
    fn fence(&self, timeout: Duration) -> Result<()> {
        let all = Proc { rank: PMIX_RANK_WILDCARD, ..self.me };
        let seconds = timeout.as_secs().clamp(1, c_int::MAX as u64) as c_int;
        let info = [
            Info::new(PMIX_COLLECT_DATA, Value { kind: PMIX_BOOL, data: Data { flag: true } }),
            Info::new(PMIX_TIMEOUT, Value { kind: PMIX_INT, data: Data { integer: seconds } }),
        ];
        // SAFETY: one pmix_proc_t and two pmix_info_t, all valid for the call's duration.
        let rc = unsafe { (self.api.fence)(&all, 1, info.as_ptr(), info.len()) };
        if rc != PMIX_SUCCESS {
            bail!(
                "the PMIx fence of all ranks failed: {} (every rank must reach it within --rendezvous-timeout, {seconds} s; did one exit or not start?)",
                self.api.status(rc)
            );
        }
        Ok(())
    }

    /// The string rank `rank` put under [`KEY`].
    fn get(&self, rank: u32) -> Result<String> {
        let from = Proc { rank, ..self.me };
        let mut value: *mut Value = ptr::null_mut();
        // SAFETY: `from` is a valid pmix_proc_t; on success PMIx stores a malloc'd pmix_value_t in `value`.
        let rc = unsafe { (self.api.get)(&from, KEY.as_ptr(), ptr::null(), 0, &mut value) };
        if rc != PMIX_SUCCESS || value.is_null() {
            bail!("PMIx_Get of rank {rank}'s address failed: {}", self.api.status(rc));
        }
        // SAFETY: PMIx returned a valid pmix_value_t; its string member is read only when it holds a string, and
        // the value and its string are freed as PMIX_VALUE_RELEASE does (both were malloc'd by PMIx).
        let text = unsafe {
            let v = *value;
            let text = (v.kind == PMIX_STRING && !v.data.string.is_null())
                .then(|| CStr::from_ptr(v.data.string).to_string_lossy().into_owned());
            if v.kind == PMIX_STRING {
                nix::libc::free(v.data.string.cast());
            }
            nix::libc::free(value.cast());
            text
        };
        text.ok_or_else(|| anyhow!("rank {rank} put something other than a string under {}", KEY.to_string_lossy()))
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // SAFETY: finalizing the client initialized in `init`; no info array.
        unsafe { (self.api.finalize)(ptr::null(), 0) };
    }
}

/// Ask the launcher's PMIx server where rank 0 is (see the module). Unreachable, with the reason, when this
/// environment has no PMIx server (or `KVXFER_PMIX=off`), libpmix does not load, or PMIx_Init fails; an error when
/// the exchange itself fails. Rank 0 gets the coordinator with its listener already bound.
pub fn exchange(env: &EnvMap, info: &RankInfo, timeout: Duration) -> Result<PmixReply> {
    if let Some(why) = launcher::pmix_skipped(env)? {
        return Ok(PmixReply::Unreachable(why));
    }
    let client = match Api::load().and_then(Client::init) {
        Ok(client) => client,
        Err(why) => return Ok(PmixReply::Unreachable(why)),
    };
    if client.me.rank as usize != info.rank {
        return Ok(PmixReply::Unreachable(format!(
            "the PMIx server numbers this process {}, its launcher ({}) {}",
            client.me.rank, info.launcher, info.rank
        )));
    }
    let bound = BoundListener::default();
    if info.rank == 0 {
        let (listener, host) = bind_rank_0(env)?;
        let port = listener.local_addr()?.port();
        client.publish(&format!("{host}:{port}"))?;
        bound.put(listener);
    }
    client.fence(timeout)?;
    let published = client.get(0)?;
    drop(client);
    let Some((host, port)) = launcher::split_host_port(&published) else {
        bail!("rank 0 published {published:?} through PMIx, not HOST:PORT; run the same kvxfer on every rank");
    };
    Ok(PmixReply::Met(Coordinator { host, port, source: CoordinatorSource::Pmix, bound }))
}

/// Rank 0's rendezvous listener on a port the kernel picks, and the host the others should dial: loopback when
/// every rank is on this host, else every address and this host's name (each rank resolves it, as it would a name
/// in SLURM_JOB_NODELIST).
fn bind_rank_0(env: &EnvMap) -> Result<(TcpListener, String)> {
    if launcher::all_ranks_local(env) {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("rank 0 binding its rendezvous listener")?;
        return Ok((listener, Ipv4Addr::LOCALHOST.to_string()));
    }
    let listener = TcpListener::bind(("::", 0))
        .or_else(|_| TcpListener::bind(("0.0.0.0", 0)))
        .context("rank 0 binding its rendezvous listener")?;
    Ok((listener, crate::env::hostname()))
}
