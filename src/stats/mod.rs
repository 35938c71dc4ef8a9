//! Turning per-rep measurements into the numbers users quote.

pub mod attribution;
pub mod case;
pub mod ceiling;
pub mod cluster;
pub mod confidence;
pub mod host;
pub mod interpolate;
pub mod modes;
pub mod queueing;
pub mod replay;
pub mod warnings;

pub use crate::measure::{RateSummary, Summary, Warning, WarningKind};
pub use case::CaseResult;
pub use ceiling::{ceiling, Ceiling, Verdict as CeilingVerdict};
pub use confidence::MedianCi;
pub use modes::Bimodality;
