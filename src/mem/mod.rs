//! Where bytes live. Host memory today; GPU device and pinned memory join in issue C.

pub mod host;

pub use host::HostBuffer;
