//! Requests made up from a seed: arrivals from a process (Poisson, constant or gamma at a rate), prompt lengths from
//! a distribution or drawn from a trace's rows. The same arguments and seed give the same requests, run after run,
//! so a generated load can be named in a result and offered again.
//!
//! The random stream is ChaCha8 (`rand_chacha`), whose output is specified and portable; the distributions are
//! `rand_distr`'s (well-kept, tested samplers rather than hand-written ones). Their transforms call the platform's
//! `ln`/`exp`, so two platforms agree bit for bit only where their math libraries do; a test pins seed 42's values,
//! so a difference shows as a failure rather than a silent shift. Arrivals and lengths draw from two streams of one
//! seed, so changing the prompt distribution does not move the arrivals, and the other way round.

use super::{read_trace, Request};
use crate::bail_usage;
use crate::error::usage;
use crate::plan::sizes::parse_tokens;
use anyhow::Result;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp, Gamma, LogNormal, Uniform};
use std::path::PathBuf;

/// The longest prompt a generated request gets (16m = 2^24 tokens): far past any model's context, and small enough
/// that tokens × bytes per token cannot overflow. A lognormal's tail is clamped to it; a longer fixed or uniform
/// length is refused.
pub const MAX_PROMPT_TOKENS: u64 = 1 << 24;

/// The most requests one call generates: ten million is hours of load at a thousand a second; more is a typo, and
/// would be refused by the allocator (an abort) rather than by a message.
pub const MAX_GENERATED: u64 = 10_000_000;

/// When requests arrive: gaps between arrivals with mean 1/rate seconds (rate in requests per second).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arrivals {
    /// Exponential gaps: independent arrivals, as from many users.
    Poisson { rate: f64 },
    /// Gaps of exactly 1/rate: the steadiest load at a rate.
    Constant { rate: f64 },
    /// Gamma gaps with coefficient of variation `cv` (shape 1/cv², scale cv²/rate): cv > 1 is burstier than
    /// Poisson, cv < 1 steadier, cv = 1 Poisson's distribution.
    Gamma { rate: f64, cv: f64 },
}

impl Arrivals {
    pub fn rate(self) -> f64 {
        match self {
            Arrivals::Poisson { rate } | Arrivals::Constant { rate } | Arrivals::Gamma { rate, .. } => rate,
        }
    }

    /// The same process at another rate (a sweep over rates keeps the shape).
    pub fn with_rate(self, r: f64) -> Arrivals {
        match self {
            Arrivals::Poisson { .. } => Arrivals::Poisson { rate: r },
            Arrivals::Constant { .. } => Arrivals::Constant { rate: r },
            Arrivals::Gamma { cv, .. } => Arrivals::Gamma { rate: r, cv },
        }
    }

    fn check(self) -> Result<()> {
        positive(self.rate(), "arrival rate", "requests per second, e.g. poisson:10")?;
        if let Arrivals::Gamma { cv, .. } = self {
            positive(cv, "gamma arrivals' CV", "e.g. gamma:10,2 for gaps twice as variable as Poisson's")?;
        }
        Ok(())
    }
}

impl std::fmt::Display for Arrivals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Arrivals::Poisson { rate } => write!(f, "poisson:{rate}"),
            Arrivals::Constant { rate } => write!(f, "constant:{rate}"),
            Arrivals::Gamma { rate, cv } => write!(f, "gamma:{rate},{cv}"),
        }
    }
}

impl std::str::FromStr for Arrivals {
    type Err = anyhow::Error;

    /// `poisson:R`, `constant:R`, `gamma:R,CV`.
    fn from_str(text: &str) -> Result<Arrivals> {
        let number = |t: &str| number(t, text, "arrivals");
        let a = match text.trim().split_once(':') {
            Some(("poisson", r)) => Arrivals::Poisson { rate: number(r)? },
            Some(("constant", r)) => Arrivals::Constant { rate: number(r)? },
            Some(("gamma", rest)) => match rest.split_once(',') {
                Some((r, cv)) => Arrivals::Gamma { rate: number(r)?, cv: number(cv)? },
                None => bail_usage!("arrivals {text:?}: gamma takes a rate and a CV, e.g. gamma:10,2"),
            },
            _ => bail_usage!("arrivals {text:?}: expected poisson:RATE, constant:RATE or gamma:RATE,CV (per second)"),
        };
        a.check().map_err(|e| usage(format!("arrivals {text:?}: {e}")))?;
        Ok(a)
    }
}

/// How long each generated prompt is, in tokens.
#[derive(Debug, Clone, PartialEq)]
pub enum PromptTokens {
    Fixed(u64),
    /// Uniform over A..=B.
    Uniform(u64, u64),
    /// `median · exp(sigma · N(0,1))`, rounded, at least 1 (and at most [`MAX_PROMPT_TOKENS`]).
    LogNormal {
        median: f64,
        sigma: f64,
    },
    /// A row of this trace drawn uniformly for each request: its input and its output length.
    Trace(PathBuf),
}

impl PromptTokens {
    fn check(&self) -> Result<()> {
        self.check_as("prompt")
    }

    /// Refuses an empty range, a zero or too long length, a median or sigma that is not positive; `what` names the
    /// lengths (prompt, output) in the message.
    fn check_as(&self, what: &str) -> Result<()> {
        let at_most = |n: u64| {
            if n == 0 || n > MAX_PROMPT_TOKENS {
                bail_usage!("{what} length {n}: expected 1 to {MAX_PROMPT_TOKENS} tokens");
            }
            Ok(())
        };
        match self {
            PromptTokens::Fixed(n) => at_most(*n),
            PromptTokens::Uniform(a, b) if a > b => bail_usage!("uniform:{a}..{b} is empty; put the smaller first"),
            PromptTokens::Uniform(a, b) => at_most(*a).and(at_most(*b)),
            PromptTokens::LogNormal { median, sigma } => {
                positive(*median, "lognormal median", "in tokens, e.g. lognormal:8192,1")?;
                positive(*sigma, "lognormal sigma", "e.g. lognormal:8192,1")
            }
            PromptTokens::Trace(_) => Ok(()),
        }
    }
}

impl std::str::FromStr for PromptTokens {
    type Err = anyhow::Error;

    /// `fixed:N`, `uniform:A..B` (token counts: `512`, `4k`), `lognormal:MEDIAN,SIGMA`, `trace:FILE`.
    fn from_str(text: &str) -> Result<PromptTokens> {
        PromptTokens::parse_as(text, "prompt")
    }
}

impl PromptTokens {
    /// [`PromptTokens::from_str`], its refusals naming `what` lengths they are (prompt, output).
    fn parse_as(text: &str, what: &str) -> Result<PromptTokens> {
        let flag = format!("{what} tokens");
        let tokens = |t: &str| parse_tokens(t).map_err(|e| usage(format!("{flag} {text:?}: {e}")));
        let p = match text.trim().split_once(':') {
            Some(("fixed", n)) => PromptTokens::Fixed(tokens(n)?),
            Some(("uniform", ab)) => match ab.split_once("..") {
                Some((a, b)) => PromptTokens::Uniform(tokens(a)?, tokens(b)?),
                None => bail_usage!("{flag} {text:?}: uniform takes A..B, e.g. uniform:1k..32k"),
            },
            Some(("lognormal", rest)) => match rest.split_once(',') {
                Some((m, s)) => {
                    PromptTokens::LogNormal { median: number(m, text, &flag)?, sigma: number(s, text, &flag)? }
                }
                None => bail_usage!("{flag} {text:?}: lognormal takes MEDIAN,SIGMA, e.g. lognormal:8192,1"),
            },
            Some(("trace", f)) if !f.trim().is_empty() => PromptTokens::Trace(PathBuf::from(f.trim())),
            _ => bail_usage!("{flag} {text:?}: expected fixed:N, uniform:A..B, lognormal:MEDIAN,SIGMA or trace:FILE"),
        };
        p.check_as(what).map_err(|e| usage(format!("{flag} {text:?}: {e}")))?;
        Ok(p)
    }
}

/// How many tokens each generated request answers with (`--output-tokens`): a paged replay holds a request's
/// blocks while it decodes them. Any of the prompt's distributions but `trace:` (whose rows carry both lengths).
#[derive(Debug, Clone, PartialEq)]
pub struct OutputTokens(PromptTokens);

impl std::str::FromStr for OutputTokens {
    type Err = anyhow::Error;

    /// `fixed:N`, `uniform:A..B`, `lognormal:MEDIAN,SIGMA`.
    fn from_str(text: &str) -> Result<OutputTokens> {
        match PromptTokens::parse_as(text, "output")? {
            PromptTokens::Trace(_) => bail_usage!(
                "output tokens {text:?}: --prompt-tokens trace:FILE draws each request's input and output lengths from the same row; give fixed:N, uniform:A..B or lognormal:MEDIAN,SIGMA"
            ),
            dist => Ok(OutputTokens(dist)),
        }
    }
}

/// `n` requests, ids 0..n, the first arriving at 0 (a replay starts with a request, as a selected window does) and
/// each next one a gap later. Generated requests have no `hash_ids` (no prefix hits). `output_tokens` is the drawn
/// row's with `trace:`, else 0: a replay moves a prompt's KV cache once, at the prefill-to-decode handoff, which the
/// output length does not change, so none is made up.
pub fn generate(arrivals: Arrivals, prompt: &PromptTokens, n: u64, seed: u64) -> Result<Vec<Request>> {
    generate_with(arrivals, (prompt, None), n, seed)
}

/// [`generate`], each request answering with a length drawn from `output` when given (a third stream of the seed,
/// so the arrivals and prompts stay those of [`generate`]).
pub fn generate_with(
    arrivals: Arrivals,
    (prompt, output): (&PromptTokens, Option<&OutputTokens>),
    n: u64,
    seed: u64,
) -> Result<Vec<Request>> {
    if n == 0 {
        bail_usage!("generating 0 requests makes nothing to replay; ask for at least 1");
    }
    if n > MAX_GENERATED {
        bail_usage!("generating {n} requests is more than the {MAX_GENERATED} one replay can hold; ask for fewer");
    }
    arrivals.check()?;
    prompt.check()?;
    let times = arrival_times(arrivals, n, ChaCha8Rng::seed_from_u64(seed));
    let mut lengths_rng = ChaCha8Rng::seed_from_u64(seed);
    lengths_rng.set_stream(1);
    let mut lengths = lengths(prompt, n, lengths_rng)?;
    if let Some(OutputTokens(dist)) = output {
        let mut output_rng = ChaCha8Rng::seed_from_u64(seed);
        output_rng.set_stream(2);
        for (l, out) in lengths.iter_mut().zip(draw(dist, n, &mut output_rng)) {
            l.1 = out;
        }
    }
    let reqs = times.into_iter().zip(lengths).enumerate().map(|(i, (t, (input, output)))| Request {
        id: i as u64,
        arrival_ms: t,
        input_tokens: input,
        output_tokens: output,
        hash_ids: None,
    });
    Ok(reqs.collect())
}

/// Arrival times in ms: 0, then the running sum of `n - 1` gaps. Constant arrivals are computed as `i / rate`, not
/// summed, so a long run does not drift by rounding.
fn arrival_times(arrivals: Arrivals, n: u64, mut rng: ChaCha8Rng) -> Vec<f64> {
    let mut gap: Box<dyn FnMut() -> f64> = match arrivals {
        Arrivals::Constant { rate } => return (0..n).map(|i| i as f64 * 1e3 / rate).collect(),
        Arrivals::Poisson { rate } => {
            let d = Exp::new(rate).expect("checked: a positive, finite rate");
            Box::new(move || d.sample(&mut rng))
        }
        Arrivals::Gamma { rate, cv } => {
            let d = Gamma::new(1.0 / (cv * cv), cv * cv / rate).expect("checked: a positive, finite rate and CV");
            Box::new(move || d.sample(&mut rng))
        }
    };
    let mut t = 0.0;
    let mut out = Vec::with_capacity(n as usize);
    out.push(0.0);
    for _ in 1..n {
        t += gap() * 1e3;
        out.push(t);
    }
    out
}

/// `(input, output)` token counts of `n` prompts: outputs from the trace's rows with `trace:`, else 0.
fn lengths(prompt: &PromptTokens, n: u64, mut rng: ChaCha8Rng) -> Result<Vec<(u64, u64)>> {
    Ok(match prompt {
        PromptTokens::Trace(path) => {
            let rows = read_trace(path, true)?;
            let d = Uniform::new(0, rows.len() as u64).expect("a read trace has requests");
            let row = |i: u64| &rows[i as usize];
            (0..n).map(|_| row(d.sample(&mut rng))).map(|r| (r.input_tokens, r.output_tokens)).collect()
        }
        dist => draw(dist, n, &mut rng).into_iter().map(|t| (t, 0)).collect(),
    })
}

/// `n` lengths from a distribution (not `trace:`, which draws rows).
fn draw(dist: &PromptTokens, n: u64, rng: &mut ChaCha8Rng) -> Vec<u64> {
    match dist {
        PromptTokens::Fixed(t) => vec![*t; n as usize],
        PromptTokens::Uniform(a, b) => {
            let d = Uniform::new_inclusive(*a, *b).expect("checked: a <= b");
            (0..n).map(|_| d.sample(rng)).collect()
        }
        PromptTokens::LogNormal { median, sigma } => {
            let d = LogNormal::new(median.ln(), *sigma).expect("checked: a positive median and sigma");
            (0..n).map(|_| (d.sample(rng).round() as u64).clamp(1, MAX_PROMPT_TOKENS)).collect()
        }
        PromptTokens::Trace(_) => unreachable!("a trace's rows are drawn whole, by `lengths`"),
    }
}

/// A number of a flag value (`10`, `0.5`), before its range is checked.
fn number(t: &str, whole: &str, what: &str) -> Result<f64> {
    t.trim().parse().map_err(|_| usage(format!("{what} {whole:?}: {:?} is not a number", t.trim())))
}

/// Refuses `x` unless positive and finite (NaN and inf parse as numbers, and make no sense as a rate).
fn positive(x: f64, what: &str, example: &str) -> Result<()> {
    if !(x.is_finite() && x > 0.0) {
        bail_usage!("{what} {x} must be a positive, finite number ({example})");
    }
    Ok(())
}

#[cfg(test)]
#[path = "generate_tests.rs"]
mod tests;
