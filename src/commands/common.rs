//! What several subcommands share: the run flags turned into a checked [`RunConfig`], the host checks, the loopback
//! receiver of `sweep`, the default output files. Imports no subcommand, so the subcommands import each other one
//! way only (sweep → sweep_file → sweep_sessions → send).

use crate::bail_usage;
use crate::cli::{DeviceArgs, RunArgs, SizeArgs, TransportChoice};
use crate::control::Timeouts;
use crate::env::{memory, sysroot::SysRoot};
use crate::export::json::{ConfigJson, Role};
use crate::export::outputs::Outputs;
use crate::mem::MemKind;
use crate::named::Named;
use crate::plan::kv::{self, KvGeometry};
use crate::plan::layout::paged_config;
use crate::plan::paged::Layout;
use crate::plan::sizes::{format_size, parse_token_list};
use crate::plan::{RunConfig, RunKnobs, SizeCase, TransportConfig, TransportKind};
use crate::transport::{registry, DeviceChoice, Transport};
use anyhow::{anyhow, Result};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;

/// Sizes when the user gives none: 1k..16k tokens of the seed's model (96 MiB .. 1.5 GiB), seconds on loopback.
pub const DEFAULT_TOKENS: &str = "1k,2k,4k,8k,16k";
pub const DEFAULT_MODEL: &str = "qwen3-30b-a3b";

/// Resolve --sizes / --tokens + model into cases; prints where bytes/token came from.
pub fn resolve_cases(a: &SizeArgs) -> Result<(Vec<SizeCase>, Option<KvGeometry>)> {
    resolve_cases_from(a, "--kv-bytes-per-token")
}

/// [`resolve_cases`], where `bpt_source` names where `a.kv_bytes_per_token` came from when it is set (a results
/// file's cases fill it for `predict`, not only the flag).
pub fn resolve_cases_from(a: &SizeArgs, bpt_source: &str) -> Result<(Vec<SizeCase>, Option<KvGeometry>)> {
    // The command line refuses these together already; a sweep file's case reaches here without its checks.
    if [a.model.is_some(), a.model_config.is_some(), a.kv_bytes_per_token.is_some()].iter().filter(|g| **g).count() > 1
    {
        bail_usage!("give one of --model, --model-config and --kv-bytes-per-token");
    }
    if let Some(list) = &a.sizes {
        if a.model.is_some() || a.model_config.is_some() || a.kv_bytes_per_token.is_some() {
            bail_usage!("--model/--model-config/--kv-bytes-per-token go with --tokens, not --sizes");
        }
        let cases = list.0.iter().map(|&s| SizeCase { size_bytes: s, tokens: None, bytes_per_token: None }).collect();
        return Ok((cases, None));
    }
    let (tokens, default) = match &a.tokens {
        Some(t) => (t.0.clone(), false),
        None => (parse_token_list(DEFAULT_TOKENS)?, true),
    };
    let geometry = match (&a.model, &a.model_config, a.kv_bytes_per_token) {
        (Some(m), _, _) => Some(kv::preset(m)?),
        (_, Some(p), _) => Some(kv::from_config_file(p)?),
        (_, _, Some(0)) => bail_usage!("--kv-bytes-per-token must be positive"),
        (_, _, Some(_)) => None,
        (None, None, None) if default => Some(kv::preset(DEFAULT_MODEL)?),
        (None, None, None) => {
            bail_usage!("--tokens needs a model: --model NAME (e.g. {DEFAULT_MODEL}), --model-config FILE or --kv-bytes-per-token N")
        }
    };
    let bpt = match &geometry {
        Some(g) => {
            crate::noteln!("kv bytes/token: {}", g.describe());
            g.bytes_per_token()
        }
        None => {
            let n = a.kv_bytes_per_token.expect("matched above");
            crate::noteln!("kv bytes/token: {n} B/token (from {bpt_source})");
            n
        }
    };
    let cases = tokens
        .into_iter()
        .map(|t| {
            let size =
                t.checked_mul(bpt).ok_or_else(|| crate::error::usage(format!("{t} tokens × {bpt} B overflows")))?;
            Ok(SizeCase { size_bytes: size, tokens: Some(t), bytes_per_token: Some(bpt) })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((cases, geometry))
}

/// A run's configuration from its flags, checked before anything is allocated or connected.
pub struct Configured {
    pub cfg: RunConfig,
    /// The model the sizes were derived from, if any.
    pub model: Option<String>,
    pub timeouts: Timeouts,
}

/// The size and run flags → the run configuration: cases, transport and its knobs, layout and timeouts, refusing
/// sizes that cannot fit in host memory here. `ends` are the memory kinds of this command's buffers, the source
/// first (they choose the transport under `--transport auto`).
pub fn configure(sizes: &SizeArgs, run: &RunArgs, ends: &[MemKind]) -> Result<Configured> {
    let configured = configure_anywhere(sizes, run, ends)?;
    check_memory(&configured.cfg, ends)?;
    Ok(configured)
}

/// [`configure`] without looking at this host: what `--plan` checks on a machine that has none of the run's
/// hardware (or memory).
pub fn configure_anywhere(sizes: &SizeArgs, run: &RunArgs, ends: &[MemKind]) -> Result<Configured> {
    let (cases, geometry) = resolve_cases(sizes)?;
    let mut cfg = run_config(run, cases, ends)?;
    cfg.paged = paged_config(&run.paged.options(), run.block_size.is_some(), run.seed, geometry.as_ref(), &cfg.cases)?;
    cfg.check_plan_limits()?;
    Ok(Configured { cfg, model: geometry.map(|g| g.name), timeouts: timeouts(run) })
}

/// `--connect-timeout` and `--io-timeout`.
fn timeouts(r: &RunArgs) -> Timeouts {
    Timeouts { connect: r.connect_timeout, io: r.io_timeout }
}

/// The transport of `given`, resolving `auto` for `ends` and saying on stderr what it chose.
fn resolve_transport(given: TransportChoice, ends: &[MemKind]) -> TransportKind {
    if let TransportChoice::Named(kind) = given {
        return kind;
    }
    let (kind, why) = registry::auto(ends);
    let names = TransportKind::NAMES.join("|");
    crate::noteln!("transport: {kind} ({why}; --transport {names} to choose)");
    kind
}

/// Validate the run flags and build the configuration the receiver will check again. `ends` are the memory kinds
/// of the buffers this command knows (the source first): they choose the transport under `--transport auto`.
fn run_config(r: &RunArgs, cases: Vec<SizeCase>, ends: &[MemKind]) -> Result<RunConfig> {
    let src = ends[0];
    let transport = resolve_transport(r.transport, ends);
    if r.reps == 0 {
        bail_usage!("--reps 0: at least one measured rep is needed");
    }
    if r.streams == 0 || r.streams > 64 {
        bail_usage!("--streams {}: give 1 to 64 parallel connections", r.streams);
    }
    let knobs = transport_knobs(r, transport, src)?;
    let block_size = r.block_size.unwrap_or_else(|| registry::get(transport).default_block_size(&knobs));
    let cfg = RunConfig {
        transport: knobs,
        knobs: RunKnobs {
            block_size,
            streams: r.streams,
            reps: r.reps,
            warmup: r.warmup,
            verify: r.verify,
            seed: r.seed,
            hugepages: r.hugepages,
            counters: r.counters,
            numa: r.numa,
            prepare: r.prepare.clone(),
        },
        block_size_default: r.block_size.is_none(),
        src_mem: src.to_string(),
        cases,
        // Set by `plan::layout::paged_config`, which needs the model geometry.
        paged: None,
    };
    if r.block_size.is_none() && block_size < 1 << 40 && r.paged.layout == Layout::Contiguous {
        crate::noteln!("block size: {} ({} default; --block-size to change)", format_size(block_size), transport);
    }
    Ok(cfg)
}

/// The knobs of the transport that runs (`running`), from the flags. Every transport's flags are checked by it,
/// whichever runs: first whether they fit this run at all, then their values. A transport without flags gets its
/// defaults.
fn transport_knobs(r: &RunArgs, running: TransportKind, src: MemKind) -> Result<TransportConfig> {
    checked_knobs(&r.transport_knobs(), running, src)
}

/// The knobs of `running` from those the flags `given` set, each transport checking its own as
/// [`transport_knobs`] does.
pub fn checked_knobs(given: &[TransportConfig], running: TransportKind, src: MemKind) -> Result<TransportConfig> {
    let knobs: Vec<(&dyn Transport, TransportConfig)> = registry::all()
        .iter()
        .map(|&t| (t, given.iter().find(|k| k.kind() == t.kind()).cloned().unwrap_or_else(|| t.default_knobs())))
        .collect();
    for (t, k) in &knobs {
        t.check_flags(k, running, src)?;
    }
    for (t, k) in &knobs {
        t.check_knobs(k)?;
    }
    Ok(knobs.into_iter().find(|(t, _)| t.kind() == running).expect("the registry lists every transport kind").1)
}

/// `config` of a results file for a run of `cfg`: the configuration as the user set it (the transport's knobs where
/// results v1 keeps them), who ran it against whom, the receiver's memory kind and what the sender's transport
/// reported while connecting.
pub fn results_config(
    cfg: &RunConfig,
    model: Option<String>,
    peer: &str,
    role: Role,
    dst_mem: String,
    transport_detail: serde_json::Value,
) -> ConfigJson {
    let knobs = registry::get(cfg.transport.kind()).results_knobs(&cfg.transport);
    ConfigJson {
        transport: cfg.transport.kind().to_string(),
        knobs: cfg.knobs.clone(),
        model,
        peer: peer.to_string(),
        role: role.name().to_string(),
        copy: knobs.copy,
        staging: knobs.staging,
        src_mem: cfg.src_mem.clone(),
        dst_mem,
        verbs: knobs.verbs,
        transport_detail,
        numa: None,
        mode: None,
        bidir: None,
        ping_pong_cpus: None,
    }
}

/// `-d a,b` (or `a+b`): the rails' devices, in order. An empty name is refused.
pub fn rail_names(flag: &str, list: &str) -> Result<Vec<String>> {
    let names: Vec<String> = list.split([',', '+']).map(|n| n.trim().to_string()).collect();
    if names.iter().any(String::is_empty) {
        bail_usage!("{flag} {list:?}: an empty device name; give NAME, or NAME,NAME,... for rails");
    }
    Ok(names)
}

pub fn device_choice(d: &DeviceArgs) -> Result<DeviceChoice> {
    if d.ib_port == 0 {
        bail_usage!("--ib-port 0: ports are numbered from 1");
    }
    let names = match &d.device {
        Some(list) => rail_names("-d", list)?,
        None => Vec::new(),
    };
    Ok(DeviceChoice { names, ib_port: d.ib_port, gid_index: d.gid_index })
}

/// The sender's device and the loopback receiver's: `--peer-device` names the receiver's, else both use one.
pub fn loopback_devices(d: &DeviceArgs, peer_device: &Option<String>) -> Result<(DeviceChoice, DeviceChoice)> {
    let device = device_choice(d)?;
    let mut peer = device.clone();
    if let Some(list) = peer_device {
        peer.names = rail_names("--peer-device", list)?;
    }
    if device.rails().len() != peer.rails().len() {
        bail_usage!(
            "-d names {} device(s) and --peer-device {}: give each end the same number of rails",
            device.rails().len(),
            peer.rails().len()
        );
    }
    Ok((device, peer))
}

/// Fail before connecting when the run needs CUDA (a GPU or pinned buffer) or what its transport needs (see
/// [`crate::transport::Transport::check_host`]) and this host lacks it.
pub fn check_host_support(cfg: &RunConfig, kinds: &[(&str, MemKind)], devices: &[&DeviceChoice]) -> Result<()> {
    if let Some((flag, k)) = kinds.iter().find(|(_, k)| *k != MemKind::Host) {
        crate::mem::cuda::driver().map_err(|e| e.context(format!("{flag} {k}")))?;
    }
    for (flag, kind) in kinds {
        if let MemKind::Gpu(i) = kind {
            crate::mem::cuda::check_ordinal(*i).map_err(|e| e.context(format!("{flag} {kind}")))?;
        }
    }
    registry::get(cfg.transport.kind()).check_host(devices)
}

/// Refuse sizes that cannot fit in host memory before allocating anything, counting the buffers of `kinds` that
/// live in host memory here (both ends' when they run in this process): the host's available memory and every
/// memory cgroup this process is in bound it, and so does `ulimit -l` where the transport pins that memory. GPU
/// memory is checked when allocated.
pub fn check_memory(cfg: &RunConfig, kinds: &[MemKind]) -> Result<()> {
    check_memory_or(cfg, kinds, &smaller(cfg))
}

/// [`check_memory`], with `fix` saying how to ask for less.
pub fn check_memory_or(cfg: &RunConfig, kinds: &[MemKind], fix: &str) -> Result<()> {
    let copies = kinds.iter().filter(|k| !matches!(k, MemKind::Gpu(_))).count() as u64;
    let need = cfg.buffer_bytes().saturating_mul(copies);
    let root = SysRoot::get();
    if let Some(room) = memory::headroom(root).filter(|r| need > r.bytes) {
        bail_usage!(
            "size {} needs {} of memory here ({copies} buffer(s)), but {}; {}",
            format_size(cfg.buffer_bytes()),
            format_size(need),
            room.describe(),
            fix
        );
    }
    let kind = cfg.transport.kind();
    let pins = registry::get(kind).pins_host_memory();
    if let Some(lock) = memory::lockable(root).filter(|l| need > 0 && pins && need > l.bytes()) {
        bail_usage!(
            "--transport {kind} pins {} of host memory here ({copies} buffer(s)), but ulimit -l (RLIMIT_MEMLOCK, {}) lets this process pin only {} more; raise it (ulimit -l {} in KiB, or unlimited; LimitMEMLOCK= for a systemd service, --ulimit memlock=-1 for docker) or {}",
            format_size(need),
            format_size(lock.limit),
            format_size(lock.bytes()),
            need.saturating_add(lock.pinned).div_ceil(1024),
            fix
        );
    }
    Ok(())
}

/// How to ask for less memory: smaller sizes, or a smaller paged pool.
fn smaller(cfg: &RunConfig) -> String {
    match &cfg.paged {
        Some(p) => format!(
            "a paged pool of {} tokens is {} per side; {}",
            p.pool_tokens,
            format_size(p.pool_bytes()),
            p.smaller_pool_hint()
        ),
        None => "use smaller sizes".to_string(),
    }
}

/// Unless `--json` names the results file, it is created in `out_dir` under a name of its own
/// (`<timestamp>-<suffix>.json`, never an existing file) once the run starts: every run keeps its results, and
/// `--resume` and `report` read them. The folder is made and checked here, before anything runs.
pub fn default_outputs(out: &mut Outputs, out_dir: &Path) -> Result<()> {
    if out.json.is_none() {
        std::fs::create_dir_all(out_dir)
            .map_err(|e| crate::error::usage(format!("--out-dir {}: cannot create: {e}", out_dir.display())))?;
        crate::export::check_writable("--out-dir", &out_dir.join("results.json"))?;
        out.default_dir = Some(out_dir.to_path_buf());
    }
    Ok(())
}

/// Listen on `addr`, naming the usual cause when the port is taken.
pub fn bind(addr: SocketAddr) -> Result<TcpListener> {
    TcpListener::bind(addr).map_err(|e| {
        let hint = if e.kind() == std::io::ErrorKind::AddrInUse {
            "; is another kvxfer serve running? pick another port with --listen"
        } else {
            ""
        };
        anyhow!("cannot listen on {addr}: {e}{hint}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(tokens: Option<&str>, model: Option<&str>, bpt: Option<u64>) -> SizeArgs {
        SizeArgs {
            sizes: None,
            tokens: tokens.map(|t| t.parse().unwrap()),
            model: model.map(String::from),
            model_config: None,
            kv_bytes_per_token: bpt,
        }
    }

    #[test]
    fn tokens_times_model() {
        let (c, g) = resolve_cases(&sizes(Some("1k,128k"), Some("qwen3-30b-a3b"), None)).unwrap();
        assert_eq!(c[0].size_bytes, 96 << 20);
        assert_eq!(c[1].size_bytes, 12 << 30);
        assert_eq!(g.unwrap().name, "qwen3-30b-a3b");
        let (c, _) = resolve_cases(&sizes(Some("2"), None, Some(10))).unwrap();
        assert_eq!(c[0].size_bytes, 20);
    }

    #[test]
    fn tokens_without_model_is_usage_error() {
        let e = resolve_cases(&sizes(Some("1k"), None, None)).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(e.to_string().contains("--model"));
    }
}
