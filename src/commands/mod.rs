//! The subcommands: each turns parsed arguments into a plan, runs it, and hands results to the exporters. What
//! several of them share (flags → run configuration, host checks, the loopback receiver, default output files)
//! lives in `common`, which imports no subcommand.

pub mod cluster;
pub mod cluster_args;
pub mod cluster_flows;
pub mod cluster_replay;
pub mod common;
pub mod devices;
pub mod doctor;
pub mod latency;
pub mod loopback;
pub mod pace;
pub mod predict;
pub mod replay;
pub mod report;
pub mod resume;
pub mod send;
pub mod serve;
pub mod sweep;
pub mod sweep_file;
pub mod sweep_plan;
pub mod sweep_sessions;
pub mod workload;

// `predict` resolves sizes as the running commands do.
pub use common::resolve_cases;
