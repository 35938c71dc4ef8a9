//! `--events`: JSON lines with both ends' per-rep stage timestamps, each on its own monotonic clock (ms since that
//! side's run start). The two clocks are never compared; durations within one side are.

use crate::run::{CaseRecord, RepRecord};
use anyhow::Result;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

pub struct EventsFile {
    out: BufWriter<File>,
}

impl EventsFile {
    pub fn create(path: &Path) -> Result<EventsFile> {
        let f = super::files::open_stream("--events", path)?;
        Ok(EventsFile { out: BufWriter::new(f) })
    }

    /// Append the two lines (sender, receiver) of one rep and flush, so an interrupted run keeps every finished rep.
    pub fn rep(&mut self, case: &CaseRecord, rep: &RepRecord, warmup: bool) -> Result<()> {
        let common = serde_json::json!({
            "case": case.index, "size_bytes": case.case.size_bytes, "rep": rep.i, "warmup": warmup,
        });
        let mut sender = common.clone();
        merge(&mut sender, serde_json::json!({ "side": "sender" }));
        merge(&mut sender, serde_json::to_value(rep.sender)?);
        let mut receiver = common;
        merge(&mut receiver, serde_json::json!({ "side": "receiver" }));
        merge(&mut receiver, serde_json::to_value(&rep.receiver)?);
        writeln!(self.out, "{sender}")?;
        writeln!(self.out, "{receiver}")?;
        self.out.flush()?;
        Ok(())
    }
}

fn merge(into: &mut serde_json::Value, from: serde_json::Value) {
    if let (Some(a), serde_json::Value::Object(b)) = (into.as_object_mut(), from) {
        a.extend(b);
    }
}
