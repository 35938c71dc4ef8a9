//! kvxfer: measure how fast KV-cache-sized buffers move between hosts and GPUs.
//!
//! The folders are the pipeline: `plan` (what to run) → `mem` (the buffers) → `env` + `control` (the host and the
//! channel to the peer) → `transport` (moving bytes) → `run` (doing it) → `stats` (summaries) → `export` (results
//! files) → `output` (what users see while a run goes) → `cli` (flags) → `commands` (one per subcommand).
//! [`LAYERS`] declares that order; `tests/layers.rs` holds every `crate::…` path in src/ to it.

pub mod cli;
pub mod cluster;
pub mod commands;
pub mod console;
pub mod control;
pub mod env;
pub mod error;
pub mod export;
pub mod measure;
pub mod mem;
pub mod named;
pub mod observe;
pub mod order_stats;
pub mod output;
pub mod pattern;
pub mod plan;
pub mod run;
pub mod stats;
pub mod transport;
pub mod units;

/// The module layers, bottom first. A module may use modules of its own layer and of the layers below, never one
/// above; modules of one layer may not use each other in a cycle (neither may the files of one module, other than
/// a parent and its children).
pub const LAYERS: &[&[&str]] = &[
    // Leaves every layer may use: errors and exit codes, the --verify byte pattern and the seeded generator, units
    // of bandwidth, printing that never panics (console), the median's order-statistic interval (order_stats), the
    // names of closed sets (named), the binary's glibc shim (src/glibc_compat.rs, a module of main.rs), and what a
    // measurement hands up (measure: a sample's summary, a warning, a transport's extras as ordered JSON), so that a
    // transport can summarize and warn about its own extras while stats and export carry them without knowing them.
    &["error", "pattern", "units", "glibc_compat", "console", "order_stats", "named", "measure"],
    // What to run: sizes, models, paged layouts, orders, sweep files.
    &["plan"],
    // Buffers: host, pinned and GPU memory, and the GPU kernels that fill and check them.
    &["mem"],
    // The host: hostname, hardware, and how two hosts differ (lists GPUs through mem).
    &["env"],
    // What the host's counters and topology say: per-rep counter deltas, PCIe/NUMA placement (reads sysfs
    // through env's root).
    &["observe"],
    // The control channel to the peer: messages, framing, the hello (names the host through env), timeouts.
    &["control"],
    // Moving bytes: tcp, verbs and cuda (uses control's timeouts and token check).
    &["transport"],
    // Driving reps on both ends and recording what each took.
    &["run"],
    // Cluster runs: which rank this process is (from the launcher's environment) and the rendezvous at rank 0.
    &["cluster"],
    // Turning rep records into the numbers users quote.
    &["stats"],
    // Results files: JSON, CSV, Markdown, events, figures, and the exporter every command writes them with.
    &["export"],
    // What the user sees while a run goes: live rows, progress, the side-by-side table, the run's recorder.
    &["output"],
    // Command-line definitions.
    &["cli"],
    // One module per subcommand, wiring the layers together.
    &["commands"],
];
