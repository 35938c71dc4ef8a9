//! How bytes move. Every transport does the same thing: the receiver exposes a region the sender may write into;
//! the sender turns a transfer into [`Write`](crate::plan::Write)s and pushes them as parallel as the transport
//! allows, learns when each completed, and the receiver learns when all of them landed.
//!
//! A transport is two halves behind two small traits, connected through the control channel in two steps:
//! the target's [`Target::offer`] (e.g. TCP: data port; verbs: rkeys and QP numbers) travels in `Accept`, the
//! source's [`Source::answer`] travels back in `Connect`.
//!
//! A transport is a folder here plus one line in the list below (its module and its unit type), and its arm of
//! [`TransportKind`]. Its unit type implements [`Transport`] ([`api`]),
//! which answers everything generic code asks of a transport: its default block size, how a rep's landing is
//! learned, what it needs of the host, how buffers are allocated, how the two halves open and connect, its knobs
//! (their type lives in its folder; [`TransportConfig`] carries them as JSON, see `plan::transport`), and its
//! extras: a transfer's ([`TransferTimes::extras`], keys of the rep in results) and a case's, which the transport
//! summarizes from its reps' and puts in words itself. Generic code looks a transport up by kind
//! ([`registry::get`]) and asks; it never matches on the kind. Plan, stats and export never know which transport
//! they carry.

pub mod api;
mod batch;
pub mod registry;

/// Declares each transport's module and lists its unit type for [`registry`], in `--transport`'s order.
macro_rules! transports {
    ($($module:ident :: $unit:ident),+ $(,)?) => {
        $(pub mod $module;)+
        const TRANSPORTS: &[&dyn Transport] = &[$(&$module::$unit),+];
    };
}

// One line per transport: its folder's module and the type that answers for it.
transports! {
    tcp::Tcp,           // sockets: the baseline between any two hosts
    verbs::Verbs,       // RDMA WRITEs over libibverbs
    cuda::Cuda,         // CUDA copies within one host
    mooncake::Mooncake, // Mooncake Transfer Engine, in a worker process per end
    nixl::Nixl,         // NIXL through its C API
}

pub use crate::plan::{TransportConfig, TransportKind};
pub use api::{
    Context, DeviceChoice, Inventory, Landing, ResultsKnobs, Source, Target, TransferHooks, TransferTimes, Transport,
    TransportDetail, Unusable,
};
pub use api::{HasKnobs, OwnKnobs, PingEnd, PingPong, TransportKnobs};
use serde::Serialize;

/// One transport by name, and whether it can run here (`kvxfer devices`).
#[derive(Debug, Clone, Serialize)]
pub struct Availability {
    pub name: String,
    pub available: bool,
    /// Why not, when not: `reason` and `detail`.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub unusable: Option<Unusable>,
}

/// Every transport of this build, in `--transport`'s order, with whether it can run here.
pub fn availability() -> Vec<Availability> {
    registry::all()
        .iter()
        .map(|t| {
            let unusable = t.usable_here().err();
            Availability { name: t.kind().to_string(), available: unusable.is_none(), unusable }
        })
        .collect()
}
