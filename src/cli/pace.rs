//! `--duration` and `--interval` (send and sweep): measure each size for a time instead of a rep count. Read as
//! text here and checked by `commands::pace`, so that every bad value is one line and exit code 2.

use clap::Args;

#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Run")]
pub struct PaceArgs {
    /// Run the measured reps of each size for this long (e.g. 60s, 10m) instead of --reps, as perftest -D does;
    /// inf: until Ctrl-C (SIGINT or SIGTERM), one size only, after which the files are written and the exit code
    /// is 130
    #[arg(long, value_name = "DURATION|inf")]
    pub duration: Option<String>,
    /// With --duration: print and record (cases[].intervals) what each interval of this length moved: reps, GB/s,
    /// transfer_ms p50/p99 and the counters' deltas (e.g. 1s, 500ms). Without it a paced run prints progress
    /// every 5 s
    #[arg(long, value_name = "DURATION")]
    pub interval: Option<String>,
    /// Both ends send at once, as perftest -b does: the receiver writes the same sizes back into a buffer of the
    /// sender's at each rep; each direction's GB/s and both together (aggregate) are reported
    #[arg(long)]
    pub bidir: bool,
    /// Whether --reps was given on the command line (its default hides it), which --duration refuses.
    #[arg(skip)]
    pub reps_given: bool,
}
