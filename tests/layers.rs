//! The module graph is one-way: every `crate::…`, `super::…` and `self::…` path in src/ is checked against the layer
//! order declared in `kvxfer::LAYERS` (src/lib.rs). The check fails, naming file:line, on
//! - an import of a module in a higher layer,
//! - a cycle between top-level modules (possible only inside one layer),
//! - a cycle between files of one top-level module that are not each other's parent (a `mod.rs` and its children
//!   may use each other: that is how a module declares and re-exports its parts).
//!
//! Paths are read from a token stream with comments, strings and char literals blanked out; `use` trees are
//! expanded (`use crate::{a, b::{c, d}}`), inline paths are read where they start with `crate`/`super`/`self`, and a
//! name re-exported by a parent (`pub use case::CaseResult` in stats/mod.rs) is followed to the file defining it.

mod source;

use source::{sources_of, tokens};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;

/// One path in a source file that names something of this crate, already made absolute (`["stats", "case", …]`).
#[derive(Debug, Clone)]
struct Ref {
    line: usize,
    path: Vec<String>,
}

/// What one file says about the module graph.
#[derive(Debug, Default)]
struct Parsed {
    refs: Vec<Ref>,
    /// `pub use x::Name` in this file: Name → the absolute path it stands for.
    reexports: BTreeMap<String, Vec<String>>,
    /// `#[macro_export] macro_rules! name` (reachable as `crate::name`).
    macros: Vec<String>,
}

struct SourceFile {
    /// As written in messages: `src/export/markdown.rs`.
    name: String,
    /// `["export", "markdown"]`; `src/env.rs` and `src/env/mod.rs` are both `["env"]`.
    module: Vec<String>,
    parsed: Parsed,
}

/// An import between two files: where it is written and what it names.
#[derive(Debug, Clone)]
struct Edge {
    from: usize,
    to: usize,
    line: usize,
    path: String,
}

// ---------------------------------------------------------------------------------------------------------------
// Parsing

fn is_ident(t: &str) -> bool {
    t.chars().next().is_some_and(|ch| ch.is_alphabetic() || ch == '_')
}

/// Collect the crate paths of one file whose module is `module`; `is_module` tells which names a bare `use x::…`
/// (a 2018 relative path) may start with.
fn parse(src: &str, module: &[String], is_module: &dyn Fn(&[String]) -> bool) -> Parsed {
    let toks = tokens(src);
    let tok = |i: usize| toks.get(i).map(|t| t.0.as_str()).unwrap_or("");
    let mut parsed = Parsed::default();
    // One entry per open brace: the inline module it opens, if any (`mod tests {`).
    let mut braces: Vec<Option<String>> = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        let here: Vec<String> = module.iter().cloned().chain(braces.iter().flatten().cloned()).collect();
        match tok(i) {
            "{" => {
                let inline_mod = (i >= 2 && tok(i - 2) == "mod").then(|| tok(i - 1).to_string());
                braces.push(inline_mod);
            }
            "}" => {
                braces.pop();
            }
            // `#[macro_export]` among the attributes right before it.
            "macro_rules"
                if tok(i + 1) == "!" && toks[i.saturating_sub(8)..i].iter().any(|t| t.0 == "macro_export") =>
            {
                parsed.macros.push(tok(i + 2).to_string());
            }
            "use" => {
                let public = i >= 1 && (tok(i - 1) == "pub" || tok(i - 1) == ")");
                let mut leaves = Vec::new();
                let mut j = i + 1;
                use_tree(&toks, &mut j, Vec::new(), &mut leaves);
                for (path, name, line) in leaves {
                    let Some(abs) = absolute(&path, &here, is_module) else { continue };
                    if public && name != "*" {
                        parsed.reexports.insert(name, abs.clone());
                    }
                    parsed.refs.push(Ref { line, path: abs });
                }
                i = j;
                continue;
            }
            "crate" | "super" | "self" if tok(i + 1) == "::" && i >= 1 && tok(i - 1) != "$" && tok(i - 1) != "::" => {
                let mut path = vec![tok(i).to_string()];
                let mut j = i + 1;
                while tok(j) == "::" && is_ident(tok(j + 1)) {
                    path.push(tok(j + 1).to_string());
                    j += 2;
                }
                if let Some(abs) = absolute(&path, &here, is_module) {
                    parsed.refs.push(Ref { line: toks[i].1, path: abs });
                }
                i = j;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    parsed
}

/// Expand the use tree starting at `*i` under `prefix` into `(path, name it binds, line)` leaves; `*i` ends after it.
fn use_tree(toks: &[(String, usize)], i: &mut usize, prefix: Vec<String>, out: &mut Vec<(Vec<String>, String, usize)>) {
    let tok = |i: usize| toks.get(i).map(|t| t.0.as_str()).unwrap_or("");
    if tok(*i) == "::" {
        *i += 1;
    }
    match tok(*i) {
        "{" => {
            *i += 1;
            while *i < toks.len() && tok(*i) != "}" {
                use_tree(toks, i, prefix.clone(), out);
                if tok(*i) == "," {
                    *i += 1;
                }
            }
            *i += 1;
        }
        "*" => {
            out.push((prefix, "*".into(), toks[*i].1));
            *i += 1;
        }
        seg if is_ident(seg) => {
            let line = toks[*i].1;
            let mut path = prefix;
            *i += 1;
            if tok(*i) == "::" {
                path.push(seg.to_string());
                *i += 1;
                return use_tree(toks, i, path, out);
            }
            let mut name = if seg == "self" { path.last().cloned().unwrap_or_default() } else { seg.to_string() };
            if seg != "self" {
                path.push(seg.to_string());
            }
            if tok(*i) == "as" {
                name = tok(*i + 1).to_string();
                *i += 2;
            }
            out.push((path, name, line));
        }
        _ => *i += 1,
    }
    if tok(*i) == ";" {
        *i += 1;
    }
}

/// The path made absolute from the crate root, or None when it names another crate (std, anyhow, …).
fn absolute(path: &[String], here: &[String], is_module: &dyn Fn(&[String]) -> bool) -> Option<Vec<String>> {
    let first = path.first()?;
    let (mut base, rest) = match first.as_str() {
        "crate" => (Vec::new(), &path[1..]),
        "self" => (here.to_vec(), &path[1..]),
        "super" => {
            let ups = path.iter().take_while(|s| *s == "super").count();
            (here[..here.len().saturating_sub(ups)].to_vec(), &path[ups..])
        }
        // A 2018 relative path: `use case::CaseResult` inside stats/mod.rs.
        _ if is_module(&[here, &path[..1]].concat()) => (here.to_vec(), path),
        _ => return None,
    };
    base.extend(rest.iter().cloned());
    Some(base)
}

// ---------------------------------------------------------------------------------------------------------------
// Resolving paths to files, and the checks

/// `src/export/markdown.rs` → `["export", "markdown"]`; None for the crate roots (lib.rs, main.rs).
fn module_of(rel: &str) -> Option<Vec<String>> {
    let inner = rel.strip_prefix("src/")?.strip_suffix(".rs")?;
    let mut parts: Vec<String> = inner.split('/').map(String::from).collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    (!parts.is_empty() && parts != ["lib"] && parts != ["main"]).then_some(parts)
}

struct Graph {
    files: Vec<SourceFile>,
    edges: Vec<Edge>,
}

impl Graph {
    fn build(sources: &[(String, String)]) -> Graph {
        let modules: Vec<(String, Vec<String>)> =
            sources.iter().filter_map(|(n, _)| module_of(n).map(|m| (n.clone(), m))).collect();
        let known: BTreeSet<Vec<String>> = modules.iter().map(|(_, m)| m.clone()).collect();
        let is_module = |m: &[String]| known.contains(m);
        let files: Vec<SourceFile> = modules
            .iter()
            .map(|(name, module)| {
                let src = &sources.iter().find(|(n, _)| n == name).unwrap().1;
                SourceFile { name: name.clone(), module: module.clone(), parsed: parse(src, module, &is_module) }
            })
            .collect();
        let mut g = Graph { files, edges: Vec::new() };
        for from in 0..g.files.len() {
            for r in g.files[from].parsed.refs.clone() {
                if let Some(to) = g.resolve(&r.path) {
                    if to != from {
                        g.edges.push(Edge { from, to, line: r.line, path: format!("crate::{}", r.path.join("::")) });
                    }
                }
            }
        }
        g
    }

    /// The file defining what `path` names: the deepest module on it, following a parent's `pub use` re-exports
    /// and `#[macro_export]` macros (which live at the crate root). None for items of the crate root itself.
    fn resolve(&self, path: &[String]) -> Option<usize> {
        let mut path = path.to_vec();
        for _ in 0..8 {
            let (len, file) = (1..=path.len())
                .rev()
                .find_map(|n| self.files.iter().position(|f| f.module == path[..n]).map(|f| (n, f)))
                .or_else(|| {
                    let name = path.first()?;
                    self.files.iter().position(|f| f.parsed.macros.contains(name)).map(|f| (path.len(), f))
                })?;
            match path.get(len).and_then(|next| self.files[file].parsed.reexports.get(next)) {
                Some(target) if target.as_slice() != path.as_slice() => {
                    path = target.iter().cloned().chain(path[len + 1..].iter().cloned()).collect();
                }
                _ => return Some(file),
            }
        }
        None
    }

    fn top(&self, file: usize) -> &str {
        &self.files[file].module[0]
    }

    fn at(&self, e: &Edge) -> String {
        format!("{}:{} ({})", self.files[e.from].name, e.line, e.path)
    }
}

/// Every violation of `layers` in the graph, one message each.
fn check(g: &Graph, layers: &[&[&str]]) -> Vec<String> {
    let level = |m: &str| layers.iter().position(|l| l.contains(&m));
    let mut out = Vec::new();
    let tops: BTreeSet<&str> = (0..g.files.len()).map(|f| g.top(f)).collect();
    for t in &tops {
        if level(t).is_none() {
            out.push(format!("module {t} is in no layer of kvxfer::LAYERS (src/lib.rs): add it"));
        }
    }
    for name in layers.iter().flat_map(|l| l.iter()) {
        if !tops.contains(name) {
            out.push(format!("kvxfer::LAYERS names {name}, but src/ has no such module"));
        }
    }
    for e in &g.edges {
        let (from, to) = (g.top(e.from), g.top(e.to));
        if let (Some(a), Some(b)) = (level(from), level(to)) {
            if b > a {
                out.push(format!("{}: {from} (layer {a}) imports {to} (layer {b}), a higher layer", g.at(e)));
            }
        }
    }
    // Module cycles: one node per top-level module.
    let names: Vec<&str> = tops.iter().copied().collect();
    let idx = |m: &str| names.iter().position(|n| *n == m).unwrap();
    let module_edges: Vec<(usize, usize, &Edge)> = g
        .edges
        .iter()
        .filter(|e| g.top(e.from) != g.top(e.to))
        .map(|e| (idx(g.top(e.from)), idx(g.top(e.to)), e))
        .collect();
    for (scc, cycle) in cycles(names.len(), &module_edges) {
        let steps: Vec<String> =
            cycle.iter().map(|e| format!("{} → {}: {}", g.top(e.from), g.top(e.to), g.at(e))).collect();
        let members: Vec<&str> = scc.iter().map(|&m| names[m]).collect();
        out.push(format!("module cycle among {}:\n    {}", members.join(", "), steps.join("\n    ")));
    }
    // File cycles inside one top-level module, between files neither of which is the other's parent.
    let related = |a: &[String], b: &[String]| a.starts_with(b) || b.starts_with(a);
    let file_edges: Vec<(usize, usize, &Edge)> = g
        .edges
        .iter()
        .filter(|e| g.top(e.from) == g.top(e.to) && !related(&g.files[e.from].module, &g.files[e.to].module))
        .map(|e| (e.from, e.to, e))
        .collect();
    for (scc, cycle) in cycles(g.files.len(), &file_edges) {
        let steps: Vec<String> = cycle.iter().map(|e| g.at(e)).collect();
        let members: Vec<&str> = scc.iter().map(|&f| g.files[f].name.as_str()).collect();
        out.push(format!("file cycle among {}:\n    {}", members.join(", "), steps.join("\n    ")));
    }
    out
}

/// Each set of nodes that reach one another (more than one node), with one cycle through it as the edges walked.
fn cycles<'a>(n: usize, edges: &[(usize, usize, &'a Edge)]) -> Vec<(Vec<usize>, Vec<&'a Edge>)> {
    let reach = |from: usize| -> Vec<bool> {
        let mut seen = vec![false; n];
        let mut queue = VecDeque::from([from]);
        while let Some(x) = queue.pop_front() {
            for &(a, b, _) in edges {
                if a == x && !seen[b] {
                    seen[b] = true;
                    queue.push_back(b);
                }
            }
        }
        seen
    };
    let reaches: Vec<Vec<bool>> = (0..n).map(reach).collect();
    let mut done = vec![false; n];
    let mut out = Vec::new();
    for start in 0..n {
        if done[start] || !reaches[start][start] {
            continue;
        }
        let scc: Vec<usize> = (0..n).filter(|&x| reaches[start][x] && reaches[x][start]).collect();
        scc.iter().for_each(|&x| done[x] = true);
        let cycle = shortest_cycle(start, edges, &scc);
        out.push((scc, cycle));
    }
    out
}

/// The shortest walk from `start` back to itself inside `scc`, breadth first.
fn shortest_cycle<'a>(start: usize, edges: &[(usize, usize, &'a Edge)], scc: &[usize]) -> Vec<&'a Edge> {
    let mut via: BTreeMap<usize, (usize, &'a Edge)> = BTreeMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(x) = queue.pop_front() {
        for &(a, b, e) in edges {
            if a != x || !scc.contains(&b) || via.contains_key(&b) {
                continue;
            }
            via.insert(b, (a, e));
            if b == start {
                let mut walk = vec![e];
                let mut at = a;
                while at != start {
                    let (prev, e) = via[&at];
                    walk.push(e);
                    at = prev;
                }
                walk.reverse();
                return walk;
            }
            queue.push_back(b);
        }
    }
    Vec::new()
}

// ---------------------------------------------------------------------------------------------------------------
// The tests

/// Violations another branch removes, each the first line of its message as printed. A listed violation
/// that no longer exists fails the test: delete its line.
const PENDING: &[&str] = &[];

#[test]
fn src_follows_the_declared_layers() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut sources = Vec::new();
    sources_of(&root.join("src"), root, &mut sources);
    sources.sort();
    let g = Graph::build(&sources);
    assert!(g.edges.len() > 100, "the parser found only {} imports: is it still reading src/?", g.edges.len());
    let found = check(&g, kvxfer::LAYERS);
    let first_line = |m: &String| m.lines().next().unwrap_or_default().to_string();
    let mut problems: Vec<String> =
        found.iter().filter(|m| !PENDING.contains(&first_line(m).as_str())).cloned().collect();
    for p in PENDING {
        if !found.iter().any(|m| first_line(m) == *p) {
            problems.push(format!("PENDING lists {p:?}, which src/ no longer has: delete that line"));
        }
    }
    assert!(problems.is_empty(), "the module graph breaks the layer order of src/lib.rs:\n{}", problems.join("\n"));
}

/// Imports the layer order allows but the design does not: (importer, imported, why).
const FORBIDDEN: &[(&str, &str, &str)] = &[
    ("stats", "transport", "stats carries a transport's extras without knowing them (see `measure`)"),
    ("export", "transport", "export writes a transport's extras without knowing them (see `measure`)"),
];

/// Each import of `g` that [`FORBIDDEN`] names, as "file:line (path): why".
fn forbidden(g: &Graph, rules: &[(&str, &str, &str)]) -> Vec<String> {
    let mut out = Vec::new();
    for e in &g.edges {
        let (from, to) = (g.top(e.from), g.top(e.to));
        for (a, b, why) in rules {
            if from == *a && to == *b {
                out.push(format!("{}: {from} imports {to}: {why}", g.at(e)));
            }
        }
    }
    out
}

#[test]
fn stats_and_export_import_nothing_of_a_transport() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut sources = Vec::new();
    sources_of(&root.join("src"), root, &mut sources);
    let found = forbidden(&Graph::build(&sources), FORBIDDEN);
    assert!(found.is_empty(), "{}", found.join("\n"));
    // The rule bites: an import of a transport's type from stats is named.
    let g = example(&[
        ("src/stats/case.rs", "use crate::transport::verbs::RailRep;\n"),
        ("src/transport/mod.rs", "pub mod verbs;\n"),
        ("src/transport/verbs.rs", "pub struct RailRep;\n"),
    ]);
    let found = forbidden(&g, FORBIDDEN);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].starts_with("src/stats/case.rs:1 (crate::transport::verbs::RailRep): stats imports transport"));
}

fn example(files: &[(&str, &str)]) -> Graph {
    let sources: Vec<(String, String)> = files.iter().map(|(n, s)| (n.to_string(), s.to_string())).collect();
    Graph::build(&sources)
}

#[test]
fn the_checker_names_an_import_of_a_higher_layer() {
    let g = example(&[
        ("src/plan/mod.rs", "pub mod order;\n"),
        ("src/plan/order.rs", "use std::io;\n\nfn f() -> u64 {\n    crate::run::verify::mix(1)\n}\n"),
        ("src/run/mod.rs", "pub mod verify;\n"),
        ("src/run/verify.rs", "pub fn mix(x: u64) -> u64 { x }\n"),
    ]);
    let found = check(&g, &[&["plan"], &["run"]]);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(
        found[0].starts_with("src/plan/order.rs:4 (crate::run::verify::mix): plan (layer 0) imports run"),
        "{}",
        found[0]
    );
    assert_eq!(check(&g, &[&["run"], &["plan"]]), Vec::<String>::new(), "run above plan may import it");
}

#[test]
fn the_checker_ignores_comments_strings_and_other_crates() {
    let g = example(&[
        ("src/plan/mod.rs", "// use crate::run::x;\n/* crate::run::y /* nested */ crate::run::z */\nconst S: &str = \"crate::run::w\";\nconst R: &str = r#\"crate::run::v\"#;\nconst C: char = '\"';\nfn f<'a>(x: &'a str) { $crate::run::q; std::run::x; }\n"),
        ("src/run/mod.rs", ""),
    ]);
    assert_eq!(check(&g, &[&["plan"], &["run"]]), Vec::<String>::new());
}

#[test]
fn the_checker_names_cycles_of_modules_and_of_sibling_files() {
    let g = example(&[
        ("src/export/mod.rs", "pub mod a;\npub mod b;\npub use a::Cell;\n"),
        ("src/export/a.rs", "use super::b::render;\npub struct Cell;\n"),
        ("src/export/b.rs", "use crate::export::{self, Cell};\npub fn render() {}\n"),
        ("src/output/mod.rs", "use crate::export::a::Cell;\n"),
        ("src/stats.rs", "use crate::output;\n"),
    ]);
    let found = check(&g, &[&["export", "output", "stats"]]);
    assert!(
        found
            .iter()
            .any(|m| m.contains("file cycle") && m.contains("src/export/a.rs:1") && m.contains("src/export/b.rs:1")),
        "{found:#?}"
    );
    assert_eq!(found.len(), 1, "mod.rs ↔ its children is no cycle, and no module cycle yet: {found:#?}");
    let g = example(&[
        ("src/export/mod.rs", "use crate::output::table;\n"),
        ("src/output/mod.rs", "pub mod table;\n"),
        ("src/output/table.rs", "use crate::{stats, export::{self}};\n"),
        ("src/stats.rs", ""),
    ]);
    let found = check(&g, &[&["stats"], &["export", "output"]]);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(
        found[0].contains("export → output: src/export/mod.rs:1")
            && found[0].contains("output → export: src/output/table.rs:1"),
        "{}",
        found[0]
    );
}

#[test]
fn the_checker_follows_inline_modules_relative_paths_and_macros() {
    let g = example(&[
        ("src/error.rs", "#[macro_export]\nmacro_rules! bail_usage { () => { $crate::error::usage() } }\n"),
        ("src/plan/mod.rs", "pub mod a;\nmod tests {\n    use super::a;\n}\n"),
        ("src/plan/a.rs", "mod tests {\n    use super::super::b;\n}\nfn f() { crate::bail_usage!(); }\n"),
        ("src/plan/b.rs", "use super::a::*;\n"),
    ]);
    let found = check(&g, &[&["plan"], &["error"]]);
    assert!(
        found.iter().any(|m| m.starts_with("src/plan/a.rs:4 (crate::bail_usage): plan (layer 0) imports error")),
        "{found:#?}"
    );
    assert!(found.iter().any(|m| m.contains("file cycle") && m.contains("src/plan/a.rs:2")), "{found:#?}");
}
