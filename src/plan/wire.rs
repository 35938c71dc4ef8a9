//! [`RunConfig`] as it travels to the receiver in `Config`. The shape predates [`TransportConfig`]: the transport's
//! name, then cuda's `copy`/`staging` and verbs' `verbs` as keys of every configuration whatever the transport (at
//! their defaults when another transport runs), so that peers of either age read each other. Older peers may leave
//! out every key with a serde default here.

use super::paged::PagedConfig;
use super::transport::{
    AllKnobs, CopyMode, CudaConfig, MooncakeConfig, NixlConfig, Staging, TransportConfig, TransportKind, VerbsConfig,
};
use super::{RunConfig, RunKnobs, SizeCase};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
pub(super) struct RunConfigWire {
    transport: TransportKind,
    #[serde(flatten)]
    knobs: RunKnobs,
    #[serde(default)]
    block_size_default: bool,
    #[serde(default)]
    copy: CopyMode,
    #[serde(default)]
    staging: Staging,
    #[serde(default = "default_mem")]
    src_mem: String,
    #[serde(default)]
    verbs: VerbsConfig,
    /// Left out at its defaults, so configurations without mooncake keep their bytes.
    #[serde(default, skip_serializing_if = "is_default")]
    mooncake: MooncakeConfig,
    /// Likewise nixl's.
    #[serde(default, skip_serializing_if = "is_default")]
    nixl: NixlConfig,
    cases: Vec<SizeCase>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    paged: Option<PagedConfig>,
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

fn default_mem() -> String {
    "host".into()
}

impl From<RunConfig> for RunConfigWire {
    fn from(c: RunConfig) -> RunConfigWire {
        let AllKnobs { cuda, verbs, mooncake, nixl } = c.transport.all_knobs();
        RunConfigWire {
            transport: c.transport.kind(),
            knobs: c.knobs,
            block_size_default: c.block_size_default,
            copy: cuda.copy,
            staging: cuda.staging,
            src_mem: c.src_mem,
            verbs,
            mooncake,
            nixl,
            cases: c.cases,
            paged: c.paged,
        }
    }
}

impl From<RunConfigWire> for RunConfig {
    fn from(w: RunConfigWire) -> RunConfig {
        let cuda = CudaConfig { copy: w.copy, staging: w.staging };
        let all = AllKnobs { cuda, verbs: w.verbs, mooncake: w.mooncake, nixl: w.nixl };
        let transport = TransportConfig::select(w.transport, all);
        RunConfig {
            transport,
            knobs: w.knobs,
            block_size_default: w.block_size_default,
            src_mem: w.src_mem,
            cases: w.cases,
            paged: w.paged,
        }
    }
}
