//! The transports of this build (listed in `transport/mod.rs`, one line each, in `--transport`'s order). Generic
//! code finds a transport here by its kind and asks it ([`Transport`]); it never matches on the kind itself.

use super::api::Transport;
use crate::measure::{CaseExtras, ExtrasNote, ExtrasNotes};
use crate::mem::MemKind;
use crate::plan::TransportKind;

const ALL: &[&dyn Transport] = super::TRANSPORTS;

/// Every transport of this build, in `--transport`'s order.
pub fn all() -> &'static [&'static dyn Transport] {
    ALL
}

/// The transport of `kind`.
pub fn get(kind: TransportKind) -> &'static dyn Transport {
    *ALL.iter().find(|t| t.kind() == kind).expect("the registry lists every transport kind")
}

/// `--transport auto`: the first transport (in `--transport`'s order) that takes buffers of `ends` (the source
/// first), and why.
pub fn auto(ends: &[MemKind]) -> (TransportKind, &'static str) {
    ALL.iter()
        .find_map(|t| t.picked_by_auto(ends).map(|why| (t.kind(), why)))
        .expect("some transport takes any memory kinds")
}

/// Every transport's words about its extras, for export: each says what it has to say about the cases.
pub struct Notes;

impl ExtrasNotes for Notes {
    fn notes(&self, cases: &[CaseExtras<'_>]) -> Vec<ExtrasNote> {
        ALL.iter().flat_map(|t| t.notes(cases)).collect()
    }

    fn inline(&self, case: &CaseExtras<'_>) -> Vec<String> {
        ALL.iter().flat_map(|t| t.inline(case)).collect()
    }
}

/// [`Notes`], as export takes it.
pub static NOTES: &dyn ExtrasNotes = &Notes;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::named::Named;

    #[test]
    fn every_kind_has_one_transport_in_the_order_of_the_kinds() {
        let kinds: Vec<TransportKind> = all().iter().map(|t| t.kind()).collect();
        assert_eq!(kinds, TransportKind::values().collect::<Vec<_>>());
        for k in TransportKind::values() {
            assert_eq!(get(k).kind(), k);
            assert_eq!(get(k).default_knobs().kind(), k, "{k}'s default knobs are its own");
            get(k).check_knobs(&get(k).default_knobs()).unwrap();
        }
    }

    #[test]
    fn auto_picks_by_whether_an_end_is_a_gpu() {
        let names = |ends: &[MemKind]| auto(ends).0.to_string();
        let (host, pinned, g0, g1) = (MemKind::Host, MemKind::Pinned, MemKind::Gpu(0), MemKind::Gpu(1));
        for ends in [&[host, host][..], &[pinned, host], &[pinned, pinned], &[host]] {
            assert_eq!(names(ends), "tcp", "{ends:?}");
        }
        for ends in [&[g0, g1][..], &[g0, host], &[pinned, g0], &[g0]] {
            assert_eq!(names(ends), "cuda", "{ends:?}");
        }
    }
}
