//! The subcommands: each turns parsed arguments into a plan, runs it, and hands results to the exporters.

pub mod devices;
pub mod layout;
pub mod predict;
pub mod report;
pub mod send;
pub mod serve;
pub mod sweep;
pub mod sweep_file;
pub mod sweep_sessions;

use crate::bail_usage;
use crate::cli::{DeviceArgs, RunArgs, SizeArgs, VerbsArgs};
use crate::control::Timeouts;
use crate::mem::MemKind;
use crate::plan::kv::{self, KvGeometry};
use crate::plan::sizes::{format_size, parse_size, parse_size_list, parse_token_list};
use crate::plan::{RunConfig, SizeCase, VerbsConfig};
use crate::transport::DeviceChoice;
use anyhow::Result;
use std::time::Duration;

/// Sizes when the user gives none: 1k..16k tokens of the seed's model (96 MiB .. 1.5 GiB), seconds on loopback.
pub const DEFAULT_TOKENS: &str = "1k,2k,4k,8k,16k";
pub const DEFAULT_MODEL: &str = "qwen3-30b-a3b";

/// Resolve --sizes / --tokens + model into cases; prints where bytes/token came from.
pub fn resolve_cases(a: &SizeArgs) -> Result<(Vec<SizeCase>, Option<KvGeometry>)> {
    if let Some(list) = &a.sizes {
        if a.model.is_some() || a.model_config.is_some() || a.kv_bytes_per_token.is_some() {
            bail_usage!("--model/--model-config/--kv-bytes-per-token go with --tokens, not --sizes");
        }
        let cases = parse_size_list(list)?
            .into_iter()
            .map(|s| SizeCase { size_bytes: s, tokens: None, bytes_per_token: None })
            .collect();
        return Ok((cases, None));
    }
    let (tokens, default) = match &a.tokens {
        Some(t) => (parse_token_list(t)?, false),
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
            eprintln!("kv bytes/token: {}", g.describe());
            g.bytes_per_token()
        }
        None => {
            let n = a.kv_bytes_per_token.expect("matched above");
            eprintln!("kv bytes/token: {n} B/token (from --kv-bytes-per-token)");
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

/// Parse `5s`, `500ms`, `2m` or a plain number of seconds.
pub fn parse_duration(flag: &str, text: &str) -> Result<Duration> {
    let d = if text.chars().all(|c| c.is_ascii_digit()) && !text.is_empty() {
        text.parse::<u64>().map(Duration::from_secs).ok()
    } else {
        humantime::parse_duration(text).ok()
    };
    match d {
        Some(d) if !d.is_zero() => Ok(d),
        _ => Err(crate::error::usage(format!("{flag} {text:?}: expected a positive duration like 5s, 500ms or 2m"))),
    }
}

pub fn timeouts(connect: &str, io: &str) -> Result<Timeouts> {
    Ok(Timeouts { connect: parse_duration("--connect-timeout", connect)?, io: parse_duration("--io-timeout", io)? })
}

/// `--transport auto`: cuda when every end this command knows of is a GPU, tcp otherwise; said on stderr.
fn resolve_transport(given: &str, ends: &[MemKind]) -> Result<String> {
    if given != "auto" {
        if !crate::transport::TRANSPORTS.contains(&given) {
            bail_usage!(
                "--transport {given:?}: unknown transport; choose one of auto, {}",
                crate::transport::TRANSPORTS.join(", ")
            );
        }
        return Ok(given.to_string());
    }
    let gpus = ends.iter().all(|k| matches!(k, MemKind::Gpu(_)));
    let (name, why) = if gpus {
        ("cuda", if ends.len() > 1 { "both ends are GPUs" } else { "the buffer is on a GPU" })
    } else {
        ("tcp", "not every end is a GPU")
    };
    eprintln!("transport: {name} ({why}; --transport tcp|verbs|cuda to choose)");
    Ok(name.to_string())
}

/// Validate the run flags and build the configuration the receiver will check again. `ends` are the memory kinds
/// of the buffers this command knows (the source first): they choose the transport under `--transport auto`.
pub fn run_config(r: &RunArgs, cases: Vec<SizeCase>, ends: &[MemKind]) -> Result<RunConfig> {
    let src = ends[0];
    let transport = resolve_transport(&r.transport, ends)?;
    if r.reps == 0 {
        bail_usage!("--reps 0: at least one measured rep is needed");
    }
    if r.streams == 0 || r.streams > 64 {
        bail_usage!("--streams {}: give 1 to 64 parallel connections", r.streams);
    }
    if r.staging == "gather" && (transport != "cuda" || !matches!(src, MemKind::Gpu(_))) {
        bail_usage!(
            "--staging gather packs pieces with GPU kernels: it needs --transport cuda and GPU memory on both ends (--src gpu:N / --mem gpu:N), not --transport {transport} from {src} memory"
        );
    }
    let block_size = match &r.block_size {
        Some(b) => parse_size(b).map_err(|e| crate::error::usage(format!("--block-size: {e}")))?,
        None => crate::transport::default_block_size(&transport),
    };
    let cfg = RunConfig {
        transport,
        block_size,
        streams: r.streams,
        reps: r.reps,
        warmup: r.warmup,
        verify: r.verify,
        seed: r.seed,
        hugepages: r.hugepages,
        block_size_default: r.block_size.is_none(),
        copy: r.copy.clone(),
        staging: r.staging.clone(),
        src_mem: src.to_string(),
        verbs: verbs_config(&r.verbs)?,
        cases,
        // Set by `layout::paged_config`, which needs the model geometry.
        paged: None,
    };
    if r.block_size.is_none() && block_size < 1 << 40 && r.paged.layout == "contiguous" {
        eprintln!("block size: {} ({} default; --block-size to change)", format_size(block_size), cfg.transport);
    }
    Ok(cfg)
}

pub fn verbs_config(v: &VerbsArgs) -> Result<VerbsConfig> {
    if v.qps == 0 || v.qps > 256 {
        bail_usage!("--qps {}: give 1 to 256 queue pairs", v.qps);
    }
    if v.inflight == 0 || v.inflight > 16384 {
        bail_usage!("--inflight {}: give 1 to 16384 outstanding work requests per queue pair", v.inflight);
    }
    if v.batch == 0 || v.batch > v.inflight {
        bail_usage!("--batch {}: give 1 to --inflight ({}) work requests per post", v.batch, v.inflight);
    }
    if v.signal_every == 0 || v.signal_every > v.inflight {
        bail_usage!("--signal-every {}: give 1 to --inflight ({})", v.signal_every, v.inflight);
    }
    if v.max_sge == 0 || v.max_sge > 64 {
        bail_usage!("--max-sge {}: give 1 to 64 scatter entries per work request (1 turns gathering off)", v.max_sge);
    }
    let chunk = |flag: &str, given: &Option<String>| -> Result<Option<u64>> {
        let Some(s) = given else { return Ok(None) };
        let n = parse_size(s).map_err(|e| crate::error::usage(format!("{flag}: {e}")))?;
        if n % 4096 != 0 {
            bail_usage!("{flag} {s}: must be a multiple of 4 KiB (pages are registered whole)");
        }
        Ok(Some(n))
    };
    let mr_chunk = chunk("--mr-chunk", &v.mr_chunk)?;
    let dst_mr_chunk = chunk("--dst-mr-chunk", &v.dst_mr_chunk)?;
    Ok(VerbsConfig {
        qps: v.qps,
        batch: v.batch,
        inflight: v.inflight,
        signal_every: v.signal_every,
        mr_chunk,
        dst_mr_chunk,
        reg_per_rep: v.reg_per_rep,
        cq_mode: v.cq_mode.clone(),
        ack_timeout: v.ack_timeout,
        max_sge: v.max_sge,
    })
}

pub fn device_choice(d: &DeviceArgs) -> Result<DeviceChoice> {
    if d.ib_port == 0 {
        bail_usage!("--ib-port 0: ports are numbered from 1");
    }
    Ok(DeviceChoice { name: d.device.clone(), ib_port: d.ib_port, gid_index: d.gid_index })
}

/// Fail before connecting when the run needs CUDA (a GPU or pinned buffer, or the cuda transport) or RDMA (the
/// verbs transport) and this host lacks it.
pub fn check_host_support(cfg: &RunConfig, kinds: &[(&str, MemKind)], devices: &[&DeviceChoice]) -> Result<()> {
    let needs = kinds.iter().find(|(_, k)| *k != MemKind::Host).map(|(flag, k)| format!("{flag} {k}"));
    let needs = needs.or_else(|| (cfg.transport == "cuda").then(|| "--transport cuda".to_string()));
    if let Some(what) = needs {
        crate::mem::cuda::driver().map_err(|e| e.context(what))?;
    }
    for (flag, kind) in kinds {
        if let MemKind::Gpu(i) = kind {
            crate::mem::cuda::check_ordinal(*i).map_err(|e| e.context(format!("{flag} {kind}")))?;
        }
    }
    if cfg.transport == "verbs" {
        for d in devices {
            // Opening the device checks the library, the device name, the port and the GID index at once.
            crate::transport::verbs::device::open(d).map_err(|e| e.context("--transport verbs"))?;
        }
    }
    Ok(())
}

/// Refuse sizes that cannot fit in host memory before allocating anything, counting the buffers of `kinds` that
/// live in host memory here (both ends' when they run in this process). GPU memory is checked when allocated.
pub fn check_memory(cfg: &RunConfig, kinds: &[MemKind]) -> Result<()> {
    let copies = kinds.iter().filter(|k| !matches!(k, MemKind::Gpu(_))).count() as u64;
    let need = cfg.buffer_bytes().saturating_mul(copies);
    if let Some(avail) = crate::mem::host::available_memory() {
        if need > avail {
            let fix = match &cfg.paged {
                Some(p) => format!(
                    "a paged pool of {} tokens is {} per side; give a smaller --pool-tokens (at least the largest transfer) or fewer --tokens",
                    p.pool_tokens,
                    format_size(p.pool_bytes())
                ),
                None => "use smaller sizes".to_string(),
            };
            bail_usage!(
                "size {} needs {} of memory here ({copies} buffer(s)), but only {} is available; {fix}",
                format_size(cfg.buffer_bytes()),
                format_size(need),
                format_size(avail)
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(tokens: Option<&str>, model: Option<&str>, bpt: Option<u64>) -> SizeArgs {
        SizeArgs {
            sizes: None,
            tokens: tokens.map(String::from),
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

    #[test]
    fn durations() {
        assert_eq!(parse_duration("x", "5").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("x", "500ms").unwrap(), Duration::from_millis(500));
        assert!(parse_duration("x", "0s").is_err());
        assert!(parse_duration("x", "soon").is_err());
    }
}
