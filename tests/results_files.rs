//! Every results file under results/ loads and is written back with every key it held, in the order it held them
//! — a transport's extras too (`work_requests`, `staged_p50`, `reg_ms`, `staged`... in cases and reps), which the
//! layers above the transport carry without knowing them. Keys the file lacks may be added (what this version
//! derives for older files), and numbers may move in their last digit (parsing is not exact); neither changes
//! the order. Files that are not kvxfer results (a torch baseline's) are skipped.

use kvxfer::export::json::Results;
use kvxfer::measure::Json;
use std::path::{Path, PathBuf};

/// Every key of `v`, by its path, in document order.
fn key_paths(v: &Json, at: &str, out: &mut Vec<String>) {
    match v {
        Json::Object(fields) => {
            for (k, x) in fields.iter() {
                let path = format!("{at}/{k}");
                out.push(path.clone());
                key_paths(x, &path, out);
            }
        }
        Json::Array(items) => items.iter().for_each(|x| key_paths(x, &format!("{at}[]"), out)),
        _ => {}
    }
}

/// A key that one object of `v` holds twice, if any.
fn repeated_key(v: &Json) -> Option<String> {
    match v {
        Json::Object(fields) => {
            let keys: Vec<&str> = fields.keys().collect();
            let twice = keys.iter().enumerate().find(|(i, k)| keys[..*i].contains(k)).map(|(_, k)| k.to_string());
            twice.or_else(|| fields.iter().find_map(|(_, x)| repeated_key(x)))
        }
        Json::Array(items) => items.iter().find_map(repeated_key),
        _ => None,
    }
}

fn keys_of(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    key_paths(&serde_json::from_str(text).unwrap(), "", &mut out);
    out
}

fn results_files() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("results");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_results_file_keeps_its_keys_in_their_order_when_written_back() {
    let mut checked = 0;
    for path in results_files() {
        let text = std::fs::read_to_string(&path).unwrap();
        if !text.contains("\"kvxfer/results/v1\"") {
            continue;
        }
        let results = Results::parse(&path, &text).unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
        let written = String::from_utf8(results.to_json().unwrap()).unwrap();
        let (before, after) = (keys_of(&text), keys_of(&written));
        assert_eq!(repeated_key(&serde_json::from_str(&written).unwrap()), None, "{}", path.display());
        let mut rest = after.iter();
        let lost: Vec<&String> = before.iter().filter(|k| !rest.any(|a| a == *k)).collect();
        assert!(lost.is_empty(), "{}: keys lost or moved, first {:?}", path.display(), &lost[..lost.len().min(3)]);
        // A case gathered from a cluster rank travels as ordered JSON (`measure::Json`): it reads back the same.
        for case in &results.cases {
            let back: kvxfer::stats::CaseResult = Json::of(case).unwrap().read().unwrap();
            let (a, b) = (serde_json::to_string(case).unwrap(), serde_json::to_string(&back).unwrap());
            assert_eq!(a, b, "{}", path.display());
        }
        // Written again, the file is what it was.
        let again = Results::parse(&path, &written).unwrap().to_json().unwrap();
        assert_eq!(keys_of(&String::from_utf8(again).unwrap()), after, "{}", path.display());
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} results files");
}
