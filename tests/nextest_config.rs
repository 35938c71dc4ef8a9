//! `.config/nextest.toml` names tests by their names, which nothing else ties to the code: a renamed test drops
//! out of its override silently (the stall detector then ran beside the suite on two cores). Every `binary(…)` and
//! `test(…)` there must name a test binary and a test that exist.

use std::collections::BTreeSet;
use std::path::Path;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The names of the `#[test]` functions in tests/*.rs, and the names of the test binaries.
fn tests_and_binaries() -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut tests, mut binaries) = (BTreeSet::new(), BTreeSet::new());
    for entry in std::fs::read_dir(Path::new(ROOT).join("tests")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        binaries.insert(path.file_stem().unwrap().to_string_lossy().into_owned());
        let text = std::fs::read_to_string(&path).unwrap();
        let mut after_test = false;
        for line in text.lines().map(str::trim) {
            if line == "#[test]" {
                after_test = true;
            } else if after_test && !line.starts_with("#[") {
                if let Some(name) = line.strip_prefix("fn ").and_then(|r| r.split('(').next()) {
                    tests.insert(name.to_string());
                }
                after_test = false;
            }
        }
    }
    (tests, binaries)
}

/// The arguments of every `PREDICATE(…)` in a filterset.
fn arguments<'a>(filter: &'a str, predicate: &str) -> Vec<&'a str> {
    let open = format!("{predicate}(");
    filter
        .match_indices(&open)
        // Not the tail of a longer predicate's name (`binary_id(` for `id(`).
        .filter(|(i, _)| !filter[..*i].ends_with(|c: char| c.is_alphanumeric() || c == '_'))
        .map(|(i, _)| {
            let rest = &filter[i + open.len()..];
            &rest[..rest.find(')').unwrap_or_else(|| panic!("unclosed {predicate}( in {filter:?}"))]
        })
        .collect()
}

/// Whether `names` has one that `matcher` selects: `=exact`, or `~substring` / a bare substring (what `test()` and
/// `binary()` do with a bare name). A regex or glob is refused: this check could not tell what it selects.
fn selects_one(matcher: &str, names: &BTreeSet<String>, filter: &str) -> bool {
    if let Some(exact) = matcher.strip_prefix('=') {
        names.contains(exact)
    } else if matcher.starts_with('/') || matcher.starts_with('#') {
        panic!("{filter:?}: {matcher} is a regex or glob; name the test with =NAME so tests/nextest_config.rs can check it")
    } else {
        let part = matcher.strip_prefix('~').unwrap_or(matcher);
        names.iter().any(|n| n.contains(part))
    }
}

#[test]
fn every_test_and_binary_the_nextest_config_names_exists() {
    let path = Path::new(ROOT).join(".config/nextest.toml");
    let config: toml::Value = toml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let (tests, binaries) = tests_and_binaries();
    let mut filters = Vec::new();
    for profile in config.get("profile").and_then(|p| p.as_table()).into_iter().flat_map(|t| t.values()) {
        for o in profile.get("overrides").and_then(|o| o.as_array()).into_iter().flatten() {
            filters.extend(o.get("filter").and_then(|f| f.as_str()));
        }
        filters.extend(profile.get("default-filter").and_then(|f| f.as_str()));
    }
    assert!(!filters.is_empty(), "no filters in {}: this test reads [[profile.*.overrides]]", path.display());
    for filter in filters {
        let named = arguments(filter, "test");
        assert!(!named.is_empty() || filter.contains("binary("), "{filter:?} names no test or binary");
        for m in named {
            assert!(selects_one(m, &tests, filter), "{}: {filter:?}: no test in tests/ is {m}", path.display());
        }
        for m in arguments(filter, "binary") {
            assert!(selects_one(m, &binaries, filter), "{}: {filter:?}: no tests/{m}.rs", path.display());
        }
    }
}

/// The check finds what it looks for: a test with another attribute before its `fn`, and none that is not there.
#[test]
fn the_check_reads_test_names_and_filtersets() {
    let (tests, binaries) = tests_and_binaries();
    assert!(tests.contains("no_rep_stalls_on_any_send_or_receive_path") && binaries.contains("cli_tcp"));
    assert!(tests.contains("under_srun"), "an #[ignore]d test counts");
    assert!(!tests.contains("no_rep_stalls_on_either_send_path"));
    let f = "binary(=cli_tcp) & (test(=a) | test(b)) | binary_id(x)";
    assert_eq!(arguments(f, "test"), ["=a", "b"]);
    assert_eq!(arguments(f, "binary"), ["=cli_tcp"]);
    assert!(!selects_one("=no_rep_stalls", &tests, f) && selects_one("no_rep_stalls", &tests, f));
}
