//! What the user sees while a run goes: live rows and a progress bar.

pub mod compare;
pub mod progress;
pub mod table;
