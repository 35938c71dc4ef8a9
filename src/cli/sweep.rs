//! `kvxfer sweep`'s flags, and a sweep file's keys, which are its parameter flags: a key is named by the flag's field
//! (`block_size` for `--block-size`) and read into the same field with the flag's own parser, so a flag and a key
//! are one definition. The other flags (outputs, `--resume`, `--plan`) apply with a file as without.

use super::values::{self, defaults_from_clap};
use super::{Cli, DeviceArgs, OutputArgs, RunArgs, SizeArgs};
use crate::mem::MemKind;
use crate::plan::sweep_file::ParamKeys;
use crate::plan::text::{from_texts, TextError};
use clap::{ArgAction, Args, CommandFactory};
use serde::Deserialize;
use std::path::PathBuf;

defaults_from_clap!(SweepArgs);

#[derive(Args, Debug, Deserialize)]
#[serde(default)]
pub struct SweepArgs {
    /// A sweep file (sweeps/*.toml): its cases, reps and order replace the size and run flags
    #[arg(value_name = "FILE.toml")]
    #[serde(skip)]
    pub file: Option<PathBuf>,
    /// Override a key of the sweep file, repeatable: --set transport=tcp --set tokens=1k,2k
    #[arg(long = "set", value_name = "KEY=VALUE", requires = "file")]
    #[serde(skip)]
    pub sets: Vec<String>,
    /// Continue an interrupted sweep (flags or a sweep file, given as before): keep the completed cases (and a
    /// sweep file's measured reps) of this results file, run the rest, and write back into it (unless --json says
    /// otherwise)
    #[arg(long, value_name = "FILE.json")]
    #[serde(skip)]
    pub resume: Option<PathBuf>,
    /// Print the plan (each case, the bytes it moves, the memory each end needs, the run time from
    /// --estimate-from) and exit without measuring; needs none of the run's hardware unless --here
    #[arg(long)]
    #[serde(skip)]
    pub plan: bool,
    /// With --plan: also make the run's checks on this host (devices, drivers, memory) and fail listing every case
    /// that cannot run here
    #[arg(long, requires = "plan")]
    #[serde(skip)]
    pub here: bool,
    /// With --plan: estimate the run time from these results (p50 per size of the same transport, interpolated)
    #[arg(long, value_name = "RESULTS.json", requires = "plan")]
    #[serde(skip)]
    pub estimate_from: Option<PathBuf>,
    /// Where the sender's buffer lives: host, pinned or gpu:N
    #[arg(long, default_value = "host", value_name = "KIND")]
    #[serde(deserialize_with = "values::from_str")]
    pub src: MemKind,
    /// Where the receiver's buffer lives: host, pinned or gpu:N
    #[arg(long, default_value = "host", value_name = "KIND")]
    #[serde(deserialize_with = "values::from_str")]
    pub dst: MemKind,
    /// The sender's RDMA device (-d) and port; the receiver uses --peer-device (default: the same device)
    #[command(flatten)]
    #[serde(skip)]
    pub device: DeviceArgs,
    /// The receiver's RDMA device (default: the sender's, i.e. loopback through one NIC)
    #[arg(long, value_name = "NAME", help_heading = "RDMA device")]
    pub peer_device: Option<String>,
    // The groups of flags a sweep file's keys are read into apart (`SweepArgs::from_texts`).
    #[command(flatten)]
    #[serde(skip)]
    pub sizes: SizeArgs,
    #[command(flatten)]
    #[serde(skip)]
    pub run: RunArgs,
    #[command(flatten)]
    #[serde(skip)]
    pub pace: super::PaceArgs,
    #[command(flatten)]
    #[serde(skip)]
    pub out: OutputArgs,
    /// Where the results file goes when --json does not name one: a new <timestamp>-<suffix>.json, never an
    /// existing file
    #[arg(long, env = "KVXFER_OUT_DIR", default_value = "results", value_name = "DIR", help_heading = "Output")]
    #[serde(skip)]
    pub out_dir: PathBuf,
    /// The ids of the flags given on the command line (filled by [`Cli::parse_args`]): a sweep file refuses
    /// parameter flags by whether they were given, not by whether their value differs from the default.
    #[arg(skip)]
    #[serde(skip)]
    pub explicit: Vec<String>,
}

/// Flags that still apply with a sweep file: where results go and what the run is called.
const FILE_FLAGS: &[&str] = &[
    "file",
    "sets",
    "resume",
    "plan",
    "here",
    "estimate_from",
    "json",
    "csv",
    "md",
    "events",
    "fig",
    "lines",
    "html",
    "out_dir",
    "label",
    "max_input_size",
];

/// Flags a sweep file sets as run keys (one value for the whole sweep), not per case.
const RUN_FLAGS: &[&str] = &["reps", "warmup", "label"];

/// Flags of a run from flags only, which a sweep file has no key for (`commands::sweep` refuses them with one).
const FLAGS_ONLY: &[&str] = &["duration", "interval", "bidir"];

/// Flags a sweep file names otherwise, as their fields' `#[serde(rename(deserialize))]` does: a file's `seed` is its
/// shuffle's, so `--seed` is `pattern_seed` there.
const FILE_NAMES: &[(&str, &str)] = &[("seed", "pattern_seed")];

impl SweepArgs {
    /// The arguments of a sweep file's case: its `key = value` texts (the run keys `reps` and `warmup` among them)
    /// read into the fields of the flags they name, each group of flags reading its own keys; a missing key takes
    /// the flag's default. Which keys exist at all is [`file_keys`]' to say.
    pub fn from_texts(entries: &[(&str, &str)]) -> Result<SweepArgs, TextError> {
        // Each key alone first: of several bad values, the one named is the first in the case's order.
        for entry in entries {
            SweepArgs::read(std::slice::from_ref(entry))?;
        }
        SweepArgs::read(entries)
    }

    fn read(entries: &[(&str, &str)]) -> Result<SweepArgs, TextError> {
        Ok(SweepArgs {
            device: from_texts(entries)?,
            sizes: from_texts(entries)?,
            run: RunArgs::from_texts(entries)?,
            ..from_texts(entries)?
        })
    }

    /// The first flag given on the command line that a sweep file would set (it is refused, not ignored, whatever
    /// its value), named by its long name: `--reps`, `--device` for `-d`.
    pub fn parameter_flag_given(&self) -> Option<String> {
        let cmd = sweep_command();
        // The ids clap records also name the groups of flattened flag structs, which are no flag at all.
        let mut given =
            self.explicit.iter().filter_map(|id| cmd.get_arguments().find(|arg| arg.get_id() == id.as_str()));
        let arg = given.find(|arg| !FILE_FLAGS.contains(&arg.get_id().as_str()))?;
        Some(match (arg.get_long(), arg.get_short()) {
            (Some(long), _) => format!("--{long}"),
            (None, Some(short)) => format!("-{short}"),
            (None, None) => arg.get_id().to_string(),
        })
    }
}

/// The `kvxfer sweep` command as clap defines it (what sweep-file keys are listed and named from).
fn sweep_command() -> clap::Command {
    let mut cli = Cli::command();
    cli.build();
    cli.find_subcommand("sweep").expect("kvxfer has a sweep subcommand").clone()
}

/// The keys a sweep file may set: every parameter flag of `kvxfer sweep` (not the hidden ones), in its order.
pub fn file_keys() -> ParamKeys {
    let mut keys = ParamKeys::default();
    let cmd = sweep_command();
    for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
        let id = arg.get_id().as_str();
        if FILE_FLAGS.contains(&id)
            || RUN_FLAGS.contains(&id)
            || FLAGS_ONLY.contains(&id)
            || matches!(arg.get_action(), ArgAction::Help)
        {
            continue;
        }
        let key = FILE_NAMES.iter().find(|(i, _)| *i == id).map_or(id, |(_, k)| k).to_string();
        match arg.get_action() {
            ArgAction::SetTrue => keys.switches.push(key),
            _ => keys.options.push(key),
        }
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::sweep_file::SIZE_KEYS;
    use clap::Parser;

    /// `kvxfer sweep ARGS` as the command line parses it.
    fn from_command_line(args: &[&str]) -> Option<SweepArgs> {
        match Cli::try_parse_from(["kvxfer", "sweep"].iter().chain(args)) {
            Ok(Cli { command: super::super::Command::Sweep(a), .. }) => Some(a),
            _ => None,
        }
    }

    /// A sweep file's case of `key = value`, as the sweep reads it (with a size and the default reps).
    fn from_file(key: &str, value: &str) -> Result<SweepArgs, TextError> {
        SweepArgs::from_texts(&[(key, value), ("sizes", "1MiB"), ("reps", "5"), ("warmup", "1")])
    }

    #[test]
    fn every_sweep_file_key_is_a_flag_and_sets_what_the_flag_sets() {
        let cmd = sweep_command();
        let keys = file_keys();
        assert!(keys.options.len() > 25 && keys.switches.contains(&"verify".to_string()), "{keys:?}");
        let flag_id = |key: &str| FILE_NAMES.iter().find(|(_, k)| *k == key).map_or(key, |(id, _)| id).to_string();
        for key in keys.options.iter().chain(&keys.switches).filter(|k| !SIZE_KEYS.contains(&k.as_str())) {
            let arg = cmd.get_arguments().find(|a| a.get_id() == flag_id(key).as_str()).expect("a key is a flag");
            let flag = format!("--{}", arg.get_long().expect("parameters are long flags"));
            let default = format!("{:?}", from_command_line(&["--sizes", "1MiB"]).unwrap());
            // A value the flag takes that is not its default: another possible value, or the first sample it parses.
            let possible: Vec<String> = arg.get_possible_values().iter().map(|v| v.get_name().to_string()).collect();
            let samples: Vec<String> = if matches!(arg.get_action(), ArgAction::SetTrue) {
                vec!["true".into()]
            } else if !possible.is_empty() {
                possible.into_iter().rev().collect()
            } else {
                ["3", "2MiB", "7s", "gpu:1", "1k,2k", "mlx5_1"].map(String::from).to_vec()
            };
            let found = samples.iter().find_map(|v| {
                let args: Vec<&str> = match arg.get_action() {
                    ArgAction::SetTrue => vec![&flag, "--sizes", "1MiB"],
                    _ => vec![&flag, v, "--sizes", "1MiB"],
                };
                let cli = from_command_line(&args).map(|a| format!("{a:?}"))?;
                (cli != default).then(|| (v.clone(), cli))
            });
            let (value, cli) = found.unwrap_or_else(|| panic!("no sample value for {flag}"));
            let file = from_file(key, &value).unwrap_or_else(|e| panic!("{key} = {value:?}: {e:#}"));
            assert_eq!(format!("{file:?}"), cli, "{key} = {value:?} in a file must set what {flag} {value} sets");
        }
    }

    #[test]
    fn a_parameter_flag_is_named_as_typed_and_output_flags_pass() {
        let given = |args: &[&str]| match Cli::parse_args_from(["kvxfer", "sweep", "f.toml"].iter().chain(args)) {
            Ok(Cli { command: super::super::Command::Sweep(a), .. }) => a.parameter_flag_given(),
            _ => panic!("{args:?} parse"),
        };
        assert_eq!(given(&["--json", "x.json", "--label", "x", "--out-dir", "d"]), None);
        assert_eq!(given(&["--json", "x.json", "-d", "mlx5_0"]).as_deref(), Some("--device"));
        assert_eq!(given(&["--reps", "5"]).as_deref(), Some("--reps"));
    }
}
