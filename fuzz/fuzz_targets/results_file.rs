//! The results-file reader as `report` and `predict` use it: any text is results or one usage error; results get
//! their ceiling and series like a real file.
#![no_main]
use kvxfer::export::json::Results;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(mut r) = Results::parse(std::path::Path::new("fuzz.json"), text) {
        r.update_ceiling();
        let _ = r.series();
    }
});
