//! What the host says about a run besides its times: counters read around each rep on both ends (see
//! [`counters`]). Every sysfs and procfs read goes through [`crate::env::sysroot::SysRoot`].

pub mod counters;
