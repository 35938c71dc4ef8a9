//! A transport is its folder plus one line in the transport list (src/transport/mod.rs) and its arm of
//! `TransportKind` (src/plan/transport.rs): generic code asks the registry and never names a transport. For each
//! folder under src/transport/, its name as code names it (`transport::verbs`, `TransportKind::Verbs`, the
//! `verbs::Verbs` of the list) and every public type only its files define (`VerbsConfig`, `RailRep`, ...; a
//! name defined elsewhere too, such as `Endpoint`, cannot tell) may appear outside the folder on those two lines
//! only, and in src/cli/, which defines the transports' flags. Comments and strings are not read: a message may say
//! "--transport verbs".

mod source;

use source::{sources_of, tokens};
use std::collections::BTreeSet;
use std::path::Path;

/// A file of src/: its path from the repository's root, and its text.
type Source = (String, String);

/// The types (struct, enum, trait, type) that `files` define: the public ones (`pub`, `pub(crate)`...) or all.
fn types_defined(files: &[&Source], public_only: bool) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (_, text) in files {
        let toks = tokens(text);
        for (i, w) in toks.windows(2).enumerate() {
            let public = i > 0 && (toks[i - 1].0 == "pub" || toks[i - 1].0 == ")");
            if ["struct", "enum", "trait", "type"].contains(&w[0].0.as_str()) && (public || !public_only) {
                names.insert(w[1].0.clone());
            }
        }
    }
    names
}

fn camel(name: &str) -> String {
    let mut c = name.chars();
    c.next().map(|f| f.to_uppercase().chain(c).collect()).unwrap_or_default()
}

/// The lines of `text` that name the transport `name` (its module under `transport::`, its kind's arm and uses,
/// the list's `name::Camel`, and its `types`).
fn naming_lines(text: &str, name: &str, types: &BTreeSet<String>) -> Vec<usize> {
    let toks = tokens(text);
    let unit = camel(name);
    let tok = |i: usize| toks.get(i).map(|t| t.0.as_str()).unwrap_or("");
    // The closed set declares its arms as `Verbs = "verbs"`.
    let declares_kinds = toks.windows(2).any(|w| w[0].0 == "enum" && w[1].0 == "TransportKind");
    let mut lines = BTreeSet::new();
    for (i, (t, line)) in toks.iter().enumerate() {
        let after_transport = i >= 2 && tok(i - 1) == "::" && tok(i - 2) == "transport";
        let module_path = t == name && tok(i + 1) == "::" && (after_transport || tok(i + 2) == unit);
        let kind_arm = (t == "TransportKind" && tok(i + 1) == "::" && tok(i + 2) == unit)
            || (declares_kinds && *t == unit && tok(i + 1) == "=");
        let typed = types.contains(t.as_str()) && (i < 1 || tok(i - 1) != ".");
        if module_path || kind_arm || typed {
            lines.insert(*line);
        }
    }
    lines.into_iter().collect()
}

#[test]
fn a_transport_is_named_outside_its_folder_only_by_its_list_line_and_its_kind() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut sources = Vec::new();
    sources_of(&root.join("src"), root, &mut sources);
    let folders: BTreeSet<String> = sources
        .iter()
        .filter_map(|(path, _)| path.strip_prefix("src/transport/")?.split_once('/').map(|(f, _)| f.to_string()))
        .collect();
    assert_eq!(folders.iter().map(String::as_str).collect::<Vec<_>>(), ["cuda", "mooncake", "nixl", "tcp", "verbs"]);
    let mut problems = Vec::new();
    for name in &folders {
        let inside = format!("src/transport/{name}/");
        let (own, rest): (Vec<&Source>, Vec<&Source>) = sources.iter().partition(|(p, _)| p.starts_with(&inside));
        let mut types = types_defined(&own, true);
        assert!(types.remove(&camel(name)), "src/transport/{name}/ defines no `{}`: {types:?}", camel(name));
        let elsewhere = types_defined(&rest, false);
        types.retain(|t| !elsewhere.contains(t));
        assert!(types.len() >= 3, "{name}: its own types are {types:?}");
        let mut found = Vec::new();
        for (path, text) in sources.iter().filter(|(p, _)| !p.starts_with(&inside) && !p.starts_with("src/cli/")) {
            found.extend(naming_lines(text, name, &types).into_iter().map(|l| format!("{path}:{l}")));
        }
        let expected = ["src/plan/transport.rs", "src/transport/mod.rs"];
        let places: Vec<&str> = found.iter().map(|f| f.split(':').next().unwrap()).collect();
        if found.len() != 2 || places != expected {
            problems.push(format!("{name} is named outside its folder at {}", found.join(", ")));
        }
    }
    assert!(problems.is_empty(), "expected only its kind arm and its list line:\n{}", problems.join("\n"));
}

#[test]
fn the_scan_sees_a_transport_named_in_code_but_not_in_words() {
    let types: BTreeSet<String> = ["VerbsConfig".to_string()].into();
    let text = "use crate::transport::verbs::device;\n// verbs::Verbs in a comment\nlet s = \"TransportKind::Verbs\";\nlet k = TransportKind::Verbs;\nfn f(c: &VerbsConfig) {}\nlet q = x.VerbsConfig;\nverbs::Verbs,\nmem::verbs::x();\nVerbs = \"verbs\",\n";
    assert_eq!(naming_lines(text, "verbs", &types), [1, 4, 5, 7]);
    let kinds = "enum TransportKind {\n    Tcp = \"tcp\",\n    Verbs = \"verbs\",\n}\n";
    assert_eq!(naming_lines(kinds, "verbs", &types), [3]);
}
