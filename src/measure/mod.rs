//! What the layers that measure hand up to those that summarize and write it, defined below all of them: a sample's
//! [`Summary`], a [`Warning`] about a case, and [`Fields`], the extras a transport measured (and its knobs), which
//! run, stats and export carry, and results files keep, without knowing their types, and [`ExtrasNotes`], how a
//! transport puts them in words.

pub mod json;
pub mod notes;
pub mod summary;
pub mod warning;

pub use json::{Fields, Json};
pub use notes::{CaseExtras, ExtrasNote, ExtrasNotes};
pub use summary::{RateSummary, Summary};
pub use warning::{Warning, WarningKind};
