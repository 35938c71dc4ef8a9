use kvxfer::cli::{Cli, Command};
use kvxfer::commands;

mod glibc_compat;

fn main() {
    kvxfer::env::note_cpus_at_start();
    let cli = match Cli::parse_args() {
        Ok(cli) => cli,
        Err(e) => {
            // clap prints help/version to stdout (exit 0) and usage errors to stderr (exit 2).
            let _ = e.print();
            std::process::exit(if e.use_stderr() { 2 } else { 0 });
        }
    };
    kvxfer::plan::input::set_max(cli.max_input_size);
    if cli.token_in_argv {
        kvxfer::errln!(
            "warning: --token on the command line can be read by every user of this host (ps, /proc/PID/cmdline); export KVXFER_TOKEN instead"
        );
    }
    if let Err(e) = kvxfer::output::interrupt::install() {
        kvxfer::errln!(
            "warning: cannot take Ctrl-C, SIGTERM and SIGHUP ({e:#}); an interrupted run's files will not say so"
        );
    }
    let outcome = match cli.command {
        Command::Serve(a) => commands::serve::run(a),
        Command::Send(a) => commands::send::run(a),
        Command::Sweep(a) => commands::sweep::run(a),
        Command::Latency(a) => commands::latency::run(a),
        Command::Replay(a) => commands::replay::run(a),
        Command::Report(a) => commands::report::run(a),
        Command::Predict(a) => commands::predict::run(a),
        Command::Cluster(a) => commands::cluster::run(a),
        Command::Devices(a) => commands::devices::run(a),
        Command::Doctor(a) => commands::doctor::run(a),
        Command::Token => kvxfer::control::auth::new_token().map(|t| kvxfer::outln!("{t}")),
    };
    if let Err(e) = outcome {
        if !e.is::<kvxfer::error::Found>() {
            kvxfer::errln!("error: {e:#}");
        }
        std::process::exit(kvxfer::error::exit_code(&e));
    }
}
