use super::*;
use crate::error::exit_code;
use crate::plan::workload::{shipped_trace as shipped, TraceSummary};

/// The one-line usage error (exit 2) that parsing `text` gives.
fn refusal(text: &str, sort: bool) -> String {
    let e = parse_trace(text, sort).unwrap_err();
    assert_eq!(exit_code(&e), 2, "{e:#}");
    let msg = format!("{e:#}");
    assert!(!msg.contains('\n'), "{msg}");
    msg
}

const A: &str = r#"{"timestamp": 0, "input_length": 1024, "output_length": 8, "hash_ids": [0, 1]}"#;
const B: &str = r#"{"timestamp": 5, "input_length": 513, "output_length": 0, "hash_ids": [0, 2]}"#;

#[test]
fn the_shipped_trace_reads_with_the_numbers_its_readme_gives() {
    let reqs = shipped();
    let s = TraceSummary::of(&reqs);
    assert_eq!(s.requests, 3993);
    assert_eq!(s.span_ms, 1_022_025.0);
    assert_eq!(s.max_input_tokens, 191_378);
    assert_eq!(s.total_input_tokens, 61_194_628);
    assert!((s.mean_input_tokens - 15_325.48).abs() < 0.01, "{}", s.mean_input_tokens);
    let repeats = reqs.windows(2).filter(|w| w[0].arrival_ms == w[1].arrival_ms).count();
    assert_eq!(repeats, 11, "repeated timestamps are accepted");
    assert!(reqs.iter().enumerate().all(|(i, r)| r.id == i as u64 && r.hash_ids.is_some()));
    assert_eq!(reqs[0].input_tokens, 40160);
    assert_eq!(reqs[0].hash_ids.as_ref().unwrap()[..3], [0, 1, 2]);
}

#[test]
fn the_shipped_trace_parses_fast_enough_to_not_matter() {
    // A loose bound even for a debug build on a shared machine; release takes a few ms.
    let t = std::time::Instant::now();
    shipped();
    assert!(t.elapsed().as_secs_f64() < 5.0, "{:?}", t.elapsed());
}

#[test]
fn lines_become_requests_numbered_from_zero_with_unknown_keys_ignored() {
    let extra = r#"{"timestamp": 7.5, "input_length": 10, "output_length": 3, "hash_ids": [9], "turn": 2, "x": {}}"#;
    let reqs = parse_trace(&format!("{A}\n{B}\n{extra}\n"), false).unwrap();
    assert_eq!(reqs.len(), 3);
    assert_eq!(
        reqs[1],
        Request { id: 1, arrival_ms: 5.0, input_tokens: 513, output_tokens: 0, hash_ids: Some(vec![0, 2]) }
    );
    assert_eq!(reqs[2].arrival_ms, 7.5);
    let no_ids = parse_trace(r#"{"timestamp": 1, "input_length": 5, "output_length": 1}"#, false).unwrap();
    assert_eq!(no_ids[0].hash_ids, None, "a trace without hash_ids replays, with no prefix hits");
}

#[test]
fn crlf_endings_and_blank_lines_at_the_end_are_accepted() {
    let reqs = parse_trace(&format!("{A}\r\n{B}\r\n\r\n  \n"), false).unwrap();
    assert_eq!(reqs.len(), 2);
    assert_eq!(parse_trace(&format!("\u{feff}{A}"), false).unwrap().len(), 1);
}

#[test]
fn a_blank_line_between_requests_is_refused_by_its_number() {
    let m = refusal(&format!("{A}\n\n{B}\n"), false);
    assert!(m.starts_with("trace:2: blank line"), "{m}");
}

#[test]
fn an_empty_file_is_refused() {
    for text in ["", "\n\n", "  \r\n"] {
        assert!(refusal(text, false).starts_with("trace: empty, no requests"), "{text:?}");
    }
}

#[test]
fn a_malformed_line_is_named_by_its_number() {
    let m = refusal(&format!("{A}\n{{\"timestamp\": 1, \"input_length\": \n"), false);
    assert!(m.starts_with("trace:2: EOF while parsing"), "{m}");
    let m = refusal(&format!("{A}\n{B}\n{{\"timestamp\": 9, \"output_length\": 1}}"), false);
    assert!(m.starts_with("trace:3: missing field `input_length`"), "{m}");
    assert!(m.contains("each line must be one JSON object"), "{m}");
    let m = refusal(&format!("{A}\n[1, 2]"), false);
    assert!(m.starts_with("trace:2: not a JSON object; each line must be"), "{m}");
    let m = refusal(r#"{"timestamp": "soon", "input_length": 1, "output_length": 1}"#, false);
    assert!(m.starts_with("trace:1: invalid type: string \"soon\", expected f64 (column 20); each line"), "{m}");
}

#[test]
fn a_json_array_is_named_as_one() {
    let m = refusal(&format!("[{A},\n{B}]\n"), false);
    assert!(m.starts_with("trace: a JSON array, not JSON Lines"), "{m}");
    assert!(m.contains("jq -c '.[]'"), "{m}");
}

#[test]
fn a_compressed_file_is_named_as_one() {
    let dir = std::env::temp_dir().join(format!("kvxfer-workload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let gz = dir.join("t.jsonl.gz");
    std::fs::write(&gz, [0x1f, 0x8b, 0x08, 0x00, 0x00]).unwrap();
    let e = read_trace(&gz, false).unwrap_err();
    assert_eq!(exit_code(&e), 2);
    assert!(format!("{e}").contains("t.jsonl.gz: gzip-compressed; decompress it first (gunzip -k"), "{e}");
    let bad = dir.join("latin1.jsonl");
    std::fs::write(&bad, [A.as_bytes(), b"\n\xe9\n"].concat()).unwrap();
    assert!(format!("{}", read_trace(&bad, false).unwrap_err()).contains("latin1.jsonl:2: not UTF-8"));
    let missing = read_trace(&dir.join("nope.jsonl"), false).unwrap_err();
    assert_eq!(exit_code(&missing), 2);
    assert!(format!("{missing}").contains("nope.jsonl: cannot read the trace"), "{missing}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn timestamps_going_backwards_are_refused_unless_sorting() {
    let c = r#"{"timestamp": 3, "input_length": 1, "output_length": 1, "hash_ids": [4]}"#;
    let text = format!("{A}\n{B}\n{c}\n");
    let m = refusal(&text, false);
    assert_eq!(m, "trace:3: timestamp 3 ms is before line 2's 5 ms; sort the lines by timestamp, or add --sort");
    let sorted = parse_trace(&text, true).unwrap();
    let ids: Vec<u64> = sorted.iter().map(|r| r.id).collect();
    assert_eq!(ids, [0, 2, 1], "sorted by time, each keeping its line's id");
}

#[test]
fn sorting_is_stable_for_repeated_timestamps() {
    let line = |t: u32, len: u32| format!(r#"{{"timestamp": {t}, "input_length": {len}, "output_length": 1}}"#);
    let text = [line(5, 1), line(1, 2), line(5, 3), line(1, 4), line(5, 5)].join("\n");
    let lens: Vec<u64> = parse_trace(&text, true).unwrap().iter().map(|r| r.input_tokens).collect();
    assert_eq!(lens, [2, 4, 1, 3, 5]);
}

#[test]
fn impossible_lengths_and_timestamps_are_refused() {
    let line =
        |t: &str, i: &str, o: &str| format!(r#"{{"timestamp": {t}, "input_length": {i}, "output_length": {o}}}"#);
    let m = refusal(&format!("{A}\n{}", line("1", "0", "1")), false);
    assert!(m.starts_with("trace:2: input_length 0; a request needs at least one input token"), "{m}");
    assert!(refusal(&line("1", "-4", "1"), false).starts_with("trace:1: input_length -4;"));
    assert!(refusal(&line("1", "4", "-1"), false).starts_with("trace:1: output_length -1 is negative"));
    assert!(refusal(&line("-1", "4", "1"), false).starts_with("trace:1: timestamp -1 is negative"));
    assert!(refusal(&line("1", "4.5", "1"), false).starts_with("trace:1: invalid type: floating point `4.5`"));
}

#[test]
fn hash_ids_must_number_one_per_block() {
    let m = refusal(r#"{"timestamp": 0, "input_length": 2048, "output_length": 1, "hash_ids": [1, 2, 3]}"#, false);
    assert_eq!(
        m,
        "trace:1: 3 hash_ids for input_length 2048, which needs 4 (one a 512-token block); fix the line's hash_ids \
         or its input_length"
    );
    assert!(parse_trace(
        r#"{"timestamp": 0, "input_length": 2049, "output_length": 1, "hash_ids": [1, 2, 3, 4, 5]}"#,
        false
    )
    .is_ok());
    assert!(parse_trace(r#"{"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [1]}"#, false).is_ok());
}

#[test]
fn a_million_lines_parse_in_linear_time() {
    let text =
        "{\"timestamp\": 1, \"input_length\": 600, \"output_length\": 1, \"hash_ids\": [1, 2]}\n".repeat(1 << 20);
    let t = std::time::Instant::now();
    assert_eq!(parse_trace(&text, true).unwrap().len(), 1 << 20);
    assert!(t.elapsed().as_secs_f64() < 30.0, "{:?}", t.elapsed());
}
