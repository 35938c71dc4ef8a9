//! Every link in the front page and the reference resolves: relative links name a file of this repository, and a
//! `#fragment` names a heading of the file it points into (GitHub's slugs). Web links are not fetched (CI has no
//! network); they are only checked to be well formed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The pages a reader follows links through: README, the root pages and every page of docs/.
fn pages() -> Vec<PathBuf> {
    let root = Path::new(ROOT);
    let mut pages: Vec<PathBuf> =
        ["README.md", "ARCHITECTURE.md", "CHANGELOG.md", "SECURITY.md"].iter().map(|p| root.join(p)).collect();
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .map(|e| e.expect("a readable docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The targets of the inline links `[text](target)` and images `![alt](target)` of a Markdown text, outside code.
fn link_targets(markdown: &str) -> Vec<(usize, String)> {
    let mut targets = Vec::new();
    let mut in_fence = false;
    for (n, line) in markdown.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        let outside_code: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = outside_code.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].split_whitespace().next().unwrap_or("").to_string();
            targets.push((n + 1, target));
            rest = &after[end..];
        }
    }
    targets
}

/// A heading's anchor as GitHub writes it: lower case, punctuation dropped, spaces to hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(markdown: &str) -> BTreeSet<String> {
    markdown.lines().filter_map(|l| l.strip_prefix('#')).map(|h| slug(h.trim_start_matches('#'))).collect()
}

#[test]
fn every_link_in_the_readme_and_docs_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap_or_else(|e| panic!("{}: {e}", page.display()));
        let name = page.strip_prefix(ROOT).unwrap().display().to_string();
        for (line, target) in link_targets(&text) {
            checked += 1;
            if target.starts_with("https://") || target.starts_with("http://") {
                if target.contains(char::is_whitespace) || target.len() < 12 {
                    broken.push(format!("{name}:{line}: malformed web link {target}"));
                }
                continue;
            }
            let (file, fragment) = target.split_once('#').unwrap_or((&target, ""));
            let resolved = if file.is_empty() { page.clone() } else { page.parent().unwrap().join(file) };
            if !resolved.exists() {
                broken.push(format!("{name}:{line}: {target} names no file ({})", resolved.display()));
                continue;
            }
            if !fragment.is_empty() {
                let into = std::fs::read_to_string(&resolved).unwrap_or_default();
                if !anchors(&into).contains(fragment) {
                    broken.push(format!("{name}:{line}: {target}: no heading with anchor #{fragment}"));
                }
            }
        }
    }
    assert!(checked > 20, "the link reader found only {checked} links: it no longer reads the pages");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_link_reader_finds_links_and_skips_code() {
    let md = "see [a](docs/a.md) and ![fig](figs/x.png)\n`[not](a link)`\n```\n[no](pe)\n```\n[b](#part-two)";
    let targets: Vec<String> = link_targets(md).into_iter().map(|(_, t)| t).collect();
    assert_eq!(targets, ["docs/a.md", "figs/x.png", "#part-two"]);
    assert_eq!(slug(" Part two: the `cli` (flags)"), "part-two-the-cli-flags");
    assert!(anchors("# Top\n## Part two\n").contains("part-two"));
}

#[test]
fn the_readme_stays_a_front_page() {
    let readme = std::fs::read_to_string(Path::new(ROOT).join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(lines <= 200, "README.md has {lines} lines: move reference material to docs/ (a front page stays ≤ 200)");
}
