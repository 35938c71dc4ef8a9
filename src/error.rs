//! The two kinds of failure a user can meet, and the exit code each maps to.
//!
//! Every layer returns `anyhow::Error`; a failure caused by what the user typed or gave us (a bad size, a missing
//! file, an unknown model) is wrapped in [`UsageError`] so `main` can map it to exit code 2. Anything else is a
//! runtime failure (exit 1).

use std::fmt;

/// A mistake in the user's input: bad flag value, unreadable input file, impossible request. Exit code 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Build an `anyhow::Error` that `main` reports with exit code 2.
pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(msg.into()))
}

/// Return early with a usage error (exit code 2), formatted like `anyhow::bail!`.
#[macro_export]
macro_rules! bail_usage {
    ($($arg:tt)*) => { return Err($crate::error::usage(format!($($arg)*))) };
}

/// Not a failure but an answer that a script must be able to tell apart: `kvxfer doctor` found something (it
/// has printed what). Exit code 1, and `main` prints nothing more.
#[derive(Debug)]
pub struct Found(pub usize);

impl fmt::Display for Found {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} finding(s)", self.0)
    }
}

impl std::error::Error for Found {}

pub fn found(n: usize) -> anyhow::Error {
    anyhow::Error::new(Found(n))
}

/// Exit code for an error chain: 2 when any cause is a [`UsageError`], 1 otherwise.
pub fn exit_code(err: &anyhow::Error) -> i32 {
    if err.chain().any(|c| c.is::<UsageError>()) {
        2
    } else {
        1
    }
}
