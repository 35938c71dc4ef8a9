//! What the host says about a run besides its times: counters read around each rep on both ends
//! ([`counters`]), where the GPUs and NICs sit on the PCIe tree ([`topology`]), and what of that is likely to cost
//! bandwidth ([`doctor`]). Every sysfs and procfs read goes through [`crate::env::sysroot::SysRoot`].

pub mod contention;
pub mod counters;
pub mod doctor;
pub mod ethtool;
pub mod numa;
pub mod topology;
