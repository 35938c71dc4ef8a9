//! Reading src/ as the structure tests do (tests/layers.rs, tests/registry.rs): its files, and their tokens with
//! comments, strings and char literals blanked out, so that only code is read.

use std::path::Path;

/// The text with comments, string literals and char literals replaced by spaces (newlines kept, so lines count).
pub fn blank_literals(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    let blank = |out: &mut String, s: &[char]| out.extend(s.iter().map(|&ch| if ch == '\n' { '\n' } else { ' ' }));
    while i < c.len() {
        let rest = &c[i..];
        let end = if rest.starts_with(&['/', '/']) {
            i + rest.iter().position(|&ch| ch == '\n').unwrap_or(rest.len())
        } else if rest.starts_with(&['/', '*']) {
            block_comment_end(&c, i)
        } else if let Some(end) = raw_string_end(&c, i) {
            end
        } else if c[i] == '"' || (c[i] == 'b' && rest.get(1) == Some(&'"') && !ident_char_before(&c, i)) {
            quoted_end(&c, i + rest.iter().position(|&ch| ch == '"').unwrap(), '"')
        } else if c[i] == '\'' && (rest.get(1) == Some(&'\\') || rest.get(2) == Some(&'\'')) {
            quoted_end(&c, i, '\'')
        } else {
            out.push(c[i]);
            i += 1;
            continue;
        };
        blank(&mut out, &c[i..end]);
        i = end;
    }
    out
}

fn ident_char_before(c: &[char], i: usize) -> bool {
    i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_')
}

/// End (exclusive) of the `/* … */` comment starting at `i`; such comments nest.
fn block_comment_end(c: &[char], mut i: usize) -> usize {
    let mut depth = 0;
    while i < c.len() {
        if c[i..].starts_with(&['/', '*']) {
            depth += 1;
            i += 2;
        } else if c[i..].starts_with(&['*', '/']) {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += 1;
        }
    }
    c.len()
}

/// End of a raw string (`r"…"`, `r#"…"#`, `br##"…"##`) starting at `i`, if one starts there.
fn raw_string_end(c: &[char], i: usize) -> Option<usize> {
    if ident_char_before(c, i) {
        return None;
    }
    let mut j = i + usize::from(c[i] == 'b');
    if c.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let hashes = c[j..].iter().take_while(|&&ch| ch == '#').count();
    j += hashes;
    if c.get(j) != Some(&'"') {
        return None;
    }
    let close: Vec<char> = std::iter::once('"').chain(std::iter::repeat_n('#', hashes)).collect();
    let body = j + 1;
    Some((body..c.len()).find(|&k| c[k..].starts_with(&close)).map_or(c.len(), |k| k + close.len()))
}

/// End of a `"…"` or `'…'` literal whose opening quote is at `open`, honouring backslash escapes.
fn quoted_end(c: &[char], open: usize, quote: char) -> usize {
    let mut i = open + 1;
    while i < c.len() {
        match c[i] {
            '\\' => i += 2,
            ch if ch == quote => return i + 1,
            _ => i += 1,
        }
    }
    c.len()
}

/// Identifiers (and numbers), `::`, and single punctuation characters, each with its line.
pub fn tokens(src: &str) -> Vec<(String, usize)> {
    let text = blank_literals(src);
    let c: Vec<char> = text.chars().collect();
    let (mut out, mut line, mut i) = (Vec::new(), 1, 0);
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch.is_alphanumeric() || ch == '_' {
            let len = c[i..].iter().take_while(|&&x| x.is_alphanumeric() || x == '_').count();
            out.push((c[i..i + len].iter().collect(), line));
            i += len;
        } else if c[i..].starts_with(&[':', ':']) {
            out.push(("::".into(), line));
            i += 2;
        } else {
            out.push((ch.to_string(), line));
            i += 1;
        }
    }
    out
}

/// Every `.rs` file under `dir`, as (path relative to `root`, text).
pub fn sources_of(dir: &Path, root: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            sources_of(&p, root, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/");
            out.push((rel, std::fs::read_to_string(&p).unwrap()));
        }
    }
}
