//! What a replay moves: the workload its flags name, resolved by `commands::workload` (which `predict --trace`
//! shares).

use crate::cli::{ReplayArgs, WorkloadArgs};
pub use crate::commands::workload::Job;
use crate::commands::workload::KvFlags;
use anyhow::Result;

pub fn job(a: &ReplayArgs) -> Result<Job> {
    let kv = KvFlags {
        model: a.model.as_deref(),
        model_config: a.model_config.as_deref(),
        kv_bytes_per_token: a.kv_bytes_per_token,
    };
    crate::commands::workload::job(&WorkloadArgs::of_replay(a), kv)
}
