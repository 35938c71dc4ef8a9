//! Launching ranks from a test: every launcher's variables are removed from a rank's environment, so that the
//! test's own (say, the test run itself under srun) cannot leak into the ranks it starts.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Set by scripts/test (as root, with a one-node Slurm up): mpirun and srun must be here.
pub const REQUIRE_SLURM: &str = "KVXFER_REQUIRE_SLURM";

/// Variables of every launcher.
pub const LAUNCHER_VARS: &[&str] = &[
    "KVXFER_RANK",
    "KVXFER_WORLD_SIZE",
    "KVXFER_LOCAL_RANK",
    "KVXFER_TOKEN",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "PMIX_RANK",
    "PMIX_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_STEP_ID",
    "SLURM_STEPID",
    "SLURM_JOB_NODELIST",
    "SLURM_NODELIST",
    "SLURM_JOB_ID",
    // What says every rank is on this host, what the ranks share, and PMIx's server: they choose how rank 0 is found.
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "OMPI_MCA_ess_base_jobid",
    "OMPI_MCA_orte_hnp_uri",
    "PMIX_NAMESPACE",
    "SLURM_STEP_NUM_NODES",
    "LOCAL_WORLD_SIZE",
    "KVXFER_PMIX",
];

/// `cmd` with no launcher variable and no stdin.
pub fn clean(mut cmd: Command) -> Command {
    for var in LAUNCHER_VARS {
        cmd.env_remove(var);
    }
    cmd.stdin(Stdio::null());
    cmd
}

/// `program` on PATH, or why not (a launcher test then skips, or fails under `KVXFER_REQUIRE_SLURM=1`).
fn missing_program(program: &str) -> Option<String> {
    let found =
        Command::new("sh").arg("-c").arg(format!("command -v {program}")).output().is_ok_and(|o| o.status.success());
    (!found).then(|| format!("{program} is not installed (scripts/slurm up installs openmpi-bin and slurm-wlm)"))
}

/// Whether `mpirun` is here; when not, says why (skip) or fails (`KVXFER_REQUIRE_SLURM=1`).
pub fn mpirun_ready() -> bool {
    match missing_program("mpirun") {
        Some(why) => {
            super::missing_hardware(REQUIRE_SLURM, 0, &why);
            false
        }
        None => true,
    }
}

/// SLURM_CONF of a Slurm that answers `sinfo` (the environment's, else the one `scripts/slurm up` writes by
/// default), or None after saying why (skip) or failing (`KVXFER_REQUIRE_SLURM=1`).
pub fn slurm_ready() -> Option<PathBuf> {
    let why = if let Some(why) = missing_program("srun") {
        why
    } else {
        let conf =
            std::env::var_os("SLURM_CONF").map(PathBuf::from).unwrap_or_else(|| "/tmp/kvxfer-slurm/slurm.conf".into());
        if !Path::new(&conf).exists() {
            "no Slurm running here (run scripts/slurm up, export SLURM_CONF)".to_string()
        } else {
            let up = Command::new("sinfo").args(["-h", "-o", "%t"]).env("SLURM_CONF", &conf).output();
            if up.as_ref().is_ok_and(|o| o.status.success() && !o.stdout.is_empty()) {
                return Some(conf);
            }
            "slurmctld does not answer sinfo (run scripts/slurm up)".to_string()
        }
    };
    super::missing_hardware(REQUIRE_SLURM, 0, &why);
    None
}
