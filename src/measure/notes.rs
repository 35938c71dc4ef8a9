//! What a transport says in words about its extras: the lines under a run's table and the end of a case's live
//! row. Export asks through [`ExtrasNotes`] (the transport registry implements it for every transport at once), so
//! it prints a transport's extras without knowing them.

use super::Fields;

/// One case's extras, as notes see them.
pub struct CaseExtras<'a> {
    /// The case as tables name it ("64 MiB", "1k tok").
    pub name: &'a str,
    pub extras: &'a Fields,
    /// The writes the case posted per transfer.
    pub writes: usize,
}

/// A line under a run's table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtrasNote {
    pub line: String,
    /// Each case's live row already said it, so a run's closing lines leave it out.
    pub live: bool,
}

/// A transport's words about its extras (each says nothing about keys it does not write).
pub trait ExtrasNotes: Sync {
    /// The lines under a table of `cases`, in order.
    fn notes(&self, _cases: &[CaseExtras<'_>]) -> Vec<ExtrasNote> {
        Vec::new()
    }

    /// What a case's live row says at its end.
    fn inline(&self, _case: &CaseExtras<'_>) -> Vec<String> {
        Vec::new()
    }
}
