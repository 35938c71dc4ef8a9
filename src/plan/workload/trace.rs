//! Reading a request trace: Mooncake's JSONL (`timestamp` in ms, `input_length`, `output_length`, `hash_ids`), one
//! request a line. Other traces of the format carry more keys (a conversation's or a tool call's); they are passed
//! over, so any file of the format replays. Every refusal is one usage error naming the file and the line, and what
//! to do: a replay of an hour-long trace should not start on a file that is half wrong.

use super::{blocks_for, Request, BLOCK_TOKENS};
use crate::bail_usage;
use crate::error::usage;
use anyhow::Result;
use serde::Deserialize;
use std::path::Path;

/// What each line must be, said at the end of a refusal about a line's shape.
const SHAPE: &str = "each line must be one JSON object like \
                     {\"timestamp\": 0, \"input_length\": 1024, \"output_length\": 8, \"hash_ids\": [0, 1]}";

/// One line as written. Lengths are read signed so that a negative one is refused as negative, not as "expected
/// u64"; keys beyond these are ignored.
#[derive(Deserialize)]
struct Row {
    timestamp: f64,
    input_length: i64,
    output_length: i64,
    #[serde(default)]
    hash_ids: Option<Vec<u64>>,
}

/// Read a trace file: the requests in line order, or sorted by arrival when `sort` (stably: requests of one
/// timestamp keep their order). Without `sort`, a timestamp earlier than the line before is refused: a trace out of
/// order is more often two files pasted together than a trace meant that way.
pub fn read_trace(path: &Path, sort: bool) -> Result<Vec<Request>> {
    let name = path.display().to_string();
    let bytes = crate::plan::input::read(path, "the trace")?;
    if bytes.starts_with(&[0x1f, 0x8b]) {
        bail_usage!("{name}: gzip-compressed; decompress it first (gunzip -k {name}) and give the .jsonl");
    }
    if bytes.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        bail_usage!("{name}: zstd-compressed; decompress it first (zstd -d {name}) and give the .jsonl");
    }
    let text = std::str::from_utf8(&bytes).map_err(|e| {
        let line = bytes[..e.valid_up_to()].iter().filter(|&&b| b == b'\n').count() + 1;
        usage(format!("{name}:{line}: not UTF-8 text; a trace is JSON Lines, one request object a line"))
    })?;
    parse_trace_named(text, &name, sort)
}

/// [`read_trace`] on text already read, its errors naming it `trace`.
pub fn parse_trace(text: &str, sort: bool) -> Result<Vec<Request>> {
    parse_trace_named(text, "trace", sort)
}

/// [`read_trace`] on text already read, its errors naming it `source` (a path, or what the text came from).
///
/// Lines may end in CRLF. Blank lines may end the file but not sit between requests: a request's id is its line
/// less one, which a blank line in the middle would break (and one there usually means two files were pasted).
pub fn parse_trace_named(text: &str, source: &str, sort: bool) -> Result<Vec<Request>> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.trim_start().starts_with('[') {
        bail_usage!(
            "{source}: a JSON array, not JSON Lines; put one request object on each line (jq -c '.[]' {source})"
        );
    }
    let mut out: Vec<Request> = Vec::new();
    let mut blank: Option<usize> = None;
    for (i, line) in text.split('\n').enumerate() {
        let n = i + 1;
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.trim().is_empty() {
            blank.get_or_insert(n);
            continue;
        }
        if let Some(b) = blank {
            bail_usage!("{source}:{b}: blank line between requests; remove it (one request a line, none empty)");
        }
        let req = request(line, out.len() as u64, source, n)?;
        if let Some(prev) = out.last() {
            if !sort && req.arrival_ms < prev.arrival_ms {
                bail_usage!(
                    "{source}:{n}: timestamp {} ms is before line {}'s {} ms; sort the lines by timestamp, or add --sort",
                    req.arrival_ms,
                    n - 1,
                    prev.arrival_ms
                );
            }
        }
        out.push(req);
    }
    if out.is_empty() {
        bail_usage!("{source}: empty, no requests; {SHAPE}");
    }
    if sort {
        out.sort_by(|a, b| a.arrival_ms.total_cmp(&b.arrival_ms));
    }
    Ok(out)
}

/// One line's request, checked: lengths positive (an output of 0 is a prefill-only request, kept), and one hash id
/// for each 512-token block of the input.
fn request(line: &str, id: u64, source: &str, n: usize) -> Result<Request> {
    // serde reads a struct from an array too (`[0, 10, 1]`): a line must be an object, keys and all.
    if !line.trim_start().starts_with('{') {
        bail_usage!("{source}:{n}: not a JSON object; {SHAPE}");
    }
    let row: Row = serde_json::from_str(line).map_err(|e| {
        let msg = e.to_string();
        let msg = msg.rsplit_once(" at line ").map_or(msg.as_str(), |(m, _)| m);
        usage(format!("{source}:{n}: {msg} (column {}); {SHAPE}", e.column()))
    })?;
    if row.timestamp < 0.0 {
        bail_usage!("{source}:{n}: timestamp {} is negative; timestamps are ms from the trace's start", row.timestamp);
    }
    if row.input_length <= 0 {
        bail_usage!(
            "{source}:{n}: input_length {}; a request needs at least one input token, so fix or drop the line",
            row.input_length
        );
    }
    if row.output_length < 0 {
        bail_usage!("{source}:{n}: output_length {} is negative; fix or drop the line", row.output_length);
    }
    let input = row.input_length as u64;
    if let Some(ids) = &row.hash_ids {
        let want = blocks_for(input);
        if ids.len() as u64 != want {
            bail_usage!(
                "{source}:{n}: {} hash_ids for input_length {input}, which needs {want} (one a {BLOCK_TOKENS}-token \
                 block); fix the line's hash_ids or its input_length",
                ids.len()
            );
        }
    }
    Ok(Request {
        id,
        arrival_ms: row.timestamp,
        input_tokens: input,
        output_tokens: row.output_length as u64,
        hash_ids: row.hash_ids,
    })
}

#[cfg(test)]
#[path = "trace_tests.rs"]
mod tests;
