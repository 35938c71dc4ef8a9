//! kvxfer: measure how fast KV-cache-sized buffers move between hosts and GPUs.
//!
//! The folders are the pipeline: `plan` (what to run) → `mem` + `transport` (the endpoints) → `control` + `run`
//! (doing it) → `stats` (summaries) → `export` + `output` (what users read). `commands` wires them per subcommand.
//! `pattern` (the --verify byte pattern and the seeded generator) and `error` are leaves every layer may use.

pub mod cli;
pub mod cluster;
pub mod commands;
pub mod control;
pub mod env;
pub mod error;
pub mod export;
pub mod mem;
pub mod output;
pub mod pattern;
pub mod plan;
pub mod run;
pub mod stats;
pub mod transport;
