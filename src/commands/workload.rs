//! What a replay moves (and what `predict --trace` simulates): the requests of a trace (or the built-in one) or of
//! an arrival model, their bytes at the model's KV bytes per token after the prefix cache, and each load's schedule.

use crate::bail_usage;
use crate::cli::WorkloadArgs;
use crate::plan::kv;
use crate::plan::workload::{
    self, Arrivals, OutputTokens, PrefixCache, PrefixCacheSize, PromptTokens, Request, TraceSummary, Window,
};
use crate::run::replay::Scheduled;
use anyhow::Result;
use serde_json::json;

/// The Mooncake FAST'25 release's synthetic trace (Apache-2.0; see traces/README.md), the workload of a replay
/// given none.
const BUILT_IN_TRACE: &str = include_str!("../../traces/mooncake-synthetic.jsonl");
const BUILT_IN_NAME: &str = "built-in: Mooncake FAST'25 synthetic trace";
/// The part of the built-in trace replayed when `--window` and `--requests` give none.
const BUILT_IN_WINDOW: &str = "0s..60s";

/// Where the requests come from.
enum Source {
    Trace { name: String, window: Option<String>, speeds: Vec<f64> },
    Model { arrivals: Arrivals, lengths: Lengths, text: (String, String), n: u64, seed: u64, rates: Vec<f64> },
}

/// An arrival model's request lengths: each prompt's, and each answer's when known.
struct Lengths {
    prompt: PromptTokens,
    output: Option<(OutputTokens, String)>,
}

/// A replay's workload, resolved and checked.
pub struct Job {
    source: Source,
    /// A trace's selected requests with their bytes (moved, cached); an arrival model's are generated per rate.
    trace: Vec<(Request, u64, u64)>,
    pub bytes_per_token: u64,
    pub model: Option<String>,
    /// The model's layer count (absent when `--kv-bytes-per-token` gave the bytes without a model).
    pub layers: Option<u64>,
    prefix: serde_json::Value,
}

/// A comma-separated list of positive finite numbers (`--speeds`, `--rates`).
fn positive_list(flag: &str, text: &str) -> Result<Vec<f64>> {
    let values: Vec<f64> = text
        .split(',')
        .map(|t| match t.trim().parse::<f64>() {
            Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
            _ => bail_usage!("{flag} {text}: '{t}' is not a positive number; give e.g. {flag} 1,2,4"),
        })
        .collect::<Result<_>>()?;
    Ok(values)
}

/// Where the KV bytes per token come from: `--model`, `--model-config` or `--kv-bytes-per-token`.
#[derive(Debug, Clone, Copy, Default)]
pub struct KvFlags<'a> {
    pub model: Option<&'a str>,
    pub model_config: Option<&'a std::path::Path>,
    pub kv_bytes_per_token: Option<u64>,
}

/// The model's KV bytes per token, its name and its layer count (qwen3-30b-a3b unless a flag names another).
fn bytes_per_token(a: KvFlags) -> Result<(u64, Option<String>, Option<u64>)> {
    let geometry = match (a.model, a.model_config, a.kv_bytes_per_token) {
        (Some(m), _, _) => kv::preset(m)?,
        (_, Some(p), _) => kv::from_config_file(p)?,
        (_, _, Some(0)) => bail_usage!("--kv-bytes-per-token must be positive"),
        (_, _, Some(n)) => return Ok((n, None, None)),
        (None, None, None) => kv::preset(super::common::DEFAULT_MODEL)?,
    };
    crate::noteln!("kv bytes/token: {}", geometry.describe());
    Ok((geometry.bytes_per_token(), Some(geometry.name), Some(geometry.layers)))
}

/// The workload `a` names, its bytes at the KV bytes per token `kv` gives.
pub fn job(a: &WorkloadArgs, kv: KvFlags) -> Result<Job> {
    let cache_size: PrefixCacheSize = a.prefix_cache.parse()?;
    if a.arrivals.is_some() && cache_size != PrefixCacheSize::Off {
        bail_usage!(
            "--prefix-cache: requests from --arrivals have no prefix blocks to share; replay a --trace, or drop it"
        );
    }
    let (bpt, model, layers) = bytes_per_token(kv)?;
    if a.requests == Some(0) {
        bail_usage!("--requests 0: replay at least one request");
    }
    if let Some(arrivals) = &a.arrivals {
        return model_job(a, arrivals, bpt, (model, layers));
    }
    let (name, requests, window) = match &a.trace {
        Some(path) => (path.display().to_string(), workload::read_trace(path, a.sort)?, a.window.clone()),
        None => {
            let window = a.window.clone().or_else(|| a.requests.is_none().then(|| BUILT_IN_WINDOW.to_string()));
            (BUILT_IN_NAME.to_string(), workload::parse_trace(BUILT_IN_TRACE, false)?, window)
        }
    };
    let parsed_window = window.as_deref().map(|w| w.parse::<Window>()).transpose()?;
    let requests = workload::select(requests, parsed_window, a.requests)?;
    let speeds = match (&a.speeds, a.speed) {
        (Some(list), _) => positive_list("--speeds", list)?,
        (None, Some(s)) if s.is_finite() && s > 0.0 => vec![s],
        (None, Some(s)) => bail_usage!("--speed {s}: give trace seconds per wall second, above 0 (e.g. 1 or 0.5)"),
        (None, None) => vec![1.0],
    };
    let mut cache = PrefixCache::new(cache_size);
    let trace: Vec<(Request, u64, u64)> = requests
        .into_iter()
        .map(|r| {
            let cached = cache.admit(&r).min(r.input_tokens);
            let moved = (r.input_tokens - cached).saturating_mul(bpt);
            (r, moved, cached.saturating_mul(bpt))
        })
        .collect();
    let reqs: Vec<Request> = trace.iter().map(|t| t.0.clone()).collect();
    let summary = TraceSummary::of(&reqs);
    for &s in &speeds {
        crate::noteln!("trace: {} at speed {s}: {}", name, summary.line(bpt, s));
    }
    let prefix = json!({
        "size": a.prefix_cache,
        "hit_requests": trace.iter().filter(|t| t.2 > 0).count(),
        "cached_bytes": trace.iter().map(|t| t.2).sum::<u64>(),
        "hit_rate": hit_rate(&trace),
    });
    if cache_size != PrefixCacheSize::Off {
        crate::noteln!(
            "prefix cache ({} blocks): {:.1}% of input tokens held, {} requests hit",
            a.prefix_cache,
            hit_rate(&trace) * 100.0,
            prefix["hit_requests"]
        );
    }
    Ok(Job { source: Source::Trace { name, window, speeds }, trace, bytes_per_token: bpt, model, layers, prefix })
}

/// Cached ÷ input bytes over the selected requests.
fn hit_rate(trace: &[(Request, u64, u64)]) -> f64 {
    let cached: u64 = trace.iter().map(|t| t.2).sum();
    let all: u64 = trace.iter().map(|t| t.1 + t.2).sum();
    if all == 0 {
        0.0
    } else {
        cached as f64 / all as f64
    }
}

fn model_job(
    a: &WorkloadArgs,
    arrivals_text: &str,
    bpt: u64,
    (model, layers): (Option<String>, Option<u64>),
) -> Result<Job> {
    if a.window.is_some() {
        bail_usage!("--window selects part of a trace; with --arrivals, --requests N says how many to generate");
    }
    let arrivals: Arrivals = arrivals_text.parse()?;
    let Some(prompt_text) = &a.prompt_tokens else {
        bail_usage!("--arrivals needs --prompt-tokens: fixed:N, uniform:A..B, lognormal:MEDIAN,SIGMA or trace:FILE");
    };
    let prompt: PromptTokens = prompt_text.parse()?;
    let output = match &a.output_tokens {
        Some(_) if matches!(prompt, PromptTokens::Trace(_)) => bail_usage!(
            "--output-tokens with --prompt-tokens trace:FILE: the trace's rows give each request's output length; drop one"
        ),
        Some(t) => Some((t.parse::<OutputTokens>()?, t.clone())),
        None => None,
    };
    let n = a.requests.unwrap_or(100);
    let rates = match &a.rates {
        Some(list) => positive_list("--rates", list)?,
        None => vec![arrivals.rate()],
    };
    let source = Source::Model {
        arrivals,
        lengths: Lengths { prompt, output },
        text: (arrivals_text.to_string(), prompt_text.clone()),
        n,
        seed: a.seed,
        rates,
    };
    let job = Job { source, trace: Vec::new(), bytes_per_token: bpt, model, layers, prefix: json!({ "size": "off" }) };
    for &rate in &job.loads() {
        let reqs = job.generated(rate)?;
        let summary = TraceSummary::of(&reqs);
        crate::noteln!("requests: {arrivals_text} at {rate}/s: {}", summary.line(bpt, 1.0));
    }
    Ok(job)
}

impl Job {
    /// The loads to run: the trace's speeds or the model's rates.
    pub fn loads(&self) -> Vec<f64> {
        match &self.source {
            Source::Trace { speeds, .. } => speeds.clone(),
            Source::Model { rates, .. } => rates.clone(),
        }
    }

    /// Whether requests say how many tokens they answer with: a trace's rows do, an arrival model's when its
    /// prompts are drawn from a trace or `--output-tokens` gave a distribution.
    pub fn has_output_lengths(&self) -> bool {
        match &self.source {
            Source::Trace { .. } => true,
            Source::Model { lengths, .. } => {
                lengths.output.is_some() || matches!(lengths.prompt, PromptTokens::Trace(_))
            }
        }
    }

    /// What a load counts: `speed` (trace seconds per wall second) or `rate` (requests per second).
    pub fn load_unit(&self) -> &'static str {
        match self.source {
            Source::Trace { .. } => "speed",
            Source::Model { .. } => "rate",
        }
    }

    /// The model's requests at `rate` (the same seed gives the same requests).
    fn generated(&self, rate: f64) -> Result<Vec<Request>> {
        let Source::Model { arrivals, lengths, n, seed, .. } = &self.source else {
            unreachable!("only an arrival model generates")
        };
        let output = lengths.output.as_ref().map(|o| &o.0);
        workload::generate_with(arrivals.with_rate(rate), (&lengths.prompt, output), *n, *seed)
    }

    /// Each request at `load`: its arrival and bytes (moved, cached) scheduled.
    fn requests_at(&self, load: f64) -> Result<Vec<Scheduled>> {
        let at = |r: &Request, at_ms: f64, bytes: u64, cached_bytes: u64| Scheduled {
            id: r.id,
            at_ms,
            bytes,
            cached_bytes,
            output_tokens: r.output_tokens,
        };
        Ok(match &self.source {
            Source::Trace { .. } => self.trace.iter().map(|(r, m, c)| at(r, r.arrival_ms / load, *m, *c)).collect(),
            Source::Model { .. } => self
                .generated(load)?
                .iter()
                .map(|r| at(r, r.arrival_ms, r.input_tokens.saturating_mul(self.bytes_per_token), 0))
                .collect(),
        })
    }

    /// The schedule of `load`, by arrival.
    pub fn schedule(&self, load: f64) -> Result<Vec<Scheduled>> {
        let mut s = self.requests_at(load)?;
        s.sort_by(|a, b| a.at_ms.total_cmp(&b.at_ms).then(a.id.cmp(&b.id)));
        Ok(s)
    }

    /// The most bytes one request moves, at any load.
    pub fn largest_bytes(&self) -> u64 {
        self.loads()
            .iter()
            .filter_map(|&l| self.requests_at(l).ok())
            .flat_map(|rs| rs.into_iter().map(|r| r.bytes))
            .max()
            .unwrap_or(0)
    }

    /// The bytes of the stream's first `n` requests that move anything (the warm-up).
    pub fn warmup_bytes(&self, n: u64) -> Vec<u64> {
        let first = self.loads().first().copied().unwrap_or(1.0);
        let all = self.requests_at(first).unwrap_or_default();
        all.into_iter().map(|r| r.bytes).filter(|&b| b > 0).take(n as usize).collect()
    }

    /// The results' `replay.workload`.
    pub fn describe(&self) -> serde_json::Value {
        let summary = |reqs: &[Request]| {
            let s = TraceSummary::of(reqs);
            json!({
                "requests": s.requests,
                "span_s": s.span_ms / 1e3,
                "mean_input_tokens": s.mean_input_tokens,
                "max_input_tokens": s.max_input_tokens,
                "total_input_tokens": s.total_input_tokens,
            })
        };
        match &self.source {
            Source::Trace { name, window, .. } => {
                let reqs: Vec<Request> = self.trace.iter().map(|t| t.0.clone()).collect();
                json!({
                    "source": "trace",
                    "trace": name,
                    "window": window,
                    "bytes_per_token": self.bytes_per_token,
                    "summary": summary(&reqs),
                    "prefix_cache": self.prefix,
                })
            }
            Source::Model { text, n, seed, lengths, .. } => json!({
                "source": "model",
                "arrivals": text.0,
                "prompt_tokens": text.1,
                "output_tokens": lengths.output.as_ref().map(|o| &o.1),
                "requests": n,
                "seed": seed,
                "bytes_per_token": self.bytes_per_token,
                "prefix_cache": self.prefix,
            }),
        }
    }
}
