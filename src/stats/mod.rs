//! Turning per-rep measurements into the numbers users quote.

pub mod case;
pub mod summary;

pub use case::CaseResult;
pub use summary::{gbps, RateSummary, Summary};
