//! The out-of-band channel: a TCP connection that carries the run's configuration, the transport's connection
//! details and per-rep start/done messages. Bulk data never crosses it.

pub mod auth;
pub mod frame;
pub mod messages;
pub mod peer;

pub use messages::{Msg, RepReport, ReverseTimes};
pub use peer::{ControlChannel, Timeouts};
