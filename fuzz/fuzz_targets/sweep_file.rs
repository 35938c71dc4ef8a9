//! The sweep-file parser: any text is a sweep or one usage error, never a panic, and never more than the case
//! limit.
#![no_main]
use kvxfer::plan::{sweep_file::SweepFile, MAX_CASES};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fuzz_target!(|data: &[u8]| {
    static KEYS: OnceLock<kvxfer::plan::sweep_file::ParamKeys> = OnceLock::new();
    let keys = KEYS.get_or_init(kvxfer::cli::sweep::file_keys);
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(s) = SweepFile::parse("fuzz.toml", text, &[], keys) {
        assert!(!s.cases.is_empty() && s.cases.len() <= MAX_CASES);
    }
});
