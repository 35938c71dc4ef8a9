//! What the user sees while a run goes: live rows, a progress bar, the side-by-side table on the console, and the
//! [`Recorder`] that shows each size and rewrites the results files as the run goes.

pub mod compare;
pub mod interrupt;
pub mod progress;
pub mod recorder;
pub mod table;

pub use recorder::Recorder;
