//! Every `--flag` a message in src/ tells users to give exists: each string literal of the sources (errors, notes,
//! hints) is scanned for long flags, and each must be one that some command of the built binary accepts — listed in
//! `kvxfer <command> --help`, or, for a hidden flag, parsed by one of them. A fix naming a flag the command line
//! does not have sends users to a dead end.

mod common;
use common::kvxfer;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Flags in kvxfer's messages that belong to other programs, each with the program: they must still appear in
/// src/ (so the list cannot outlive its reason).
const OTHER_PROGRAMS: &[(&str, &str)] = &[
    ("--gpu-architecture", "NVRTC's compile options"),
    ("--std", "NVRTC's compile options"),
    ("--no-deps", "pip install"),
    ("--ulimit", "docker run"),
];

/// The string literals of Rust source, with the line each starts on: comments and char literals are skipped, raw
/// strings read to their closing quote and hashes.
fn string_literals(src: &str) -> Vec<(usize, String)> {
    let c: Vec<char> = src.chars().collect();
    let line_at = |i: usize| c[..i].iter().filter(|&&ch| ch == '\n').count() + 1;
    let ident_before = |i: usize| i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_');
    let (mut out, mut i) = (Vec::new(), 0);
    while i < c.len() {
        let rest = &c[i..];
        if rest.starts_with(&['/', '/']) {
            i += rest.iter().position(|&ch| ch == '\n').unwrap_or(rest.len());
        } else if rest.starts_with(&['/', '*']) {
            i += 2 + rest[2..].windows(2).position(|w| w == ['*', '/']).map_or(rest.len(), |p| p + 2);
        } else if !ident_before(i) && (rest.starts_with(&['r', '"']) || rest.starts_with(&['r', '#'])) {
            let hashes = rest[1..].iter().take_while(|&&ch| ch == '#').count();
            if rest.get(1 + hashes) != Some(&'"') {
                i += 1;
                continue;
            }
            let start = i + 2 + hashes;
            let close: Vec<char> = std::iter::once('"').chain(std::iter::repeat_n('#', hashes)).collect();
            let end = (start..c.len()).find(|&j| c[j..].starts_with(&close)).expect("raw string closes");
            out.push((line_at(i), c[start..end].iter().collect()));
            i = end + close.len();
        } else if c[i] == '"' {
            let mut j = i + 1;
            while c[j] != '"' {
                j += if c[j] == '\\' { 2 } else { 1 };
            }
            out.push((line_at(i), c[i + 1..j].iter().collect()));
            i = j + 1;
        } else if c[i] == '\'' && rest.get(1) == Some(&'\\') {
            // An escaped char literal ('\'', '\u{..}'): to the quote after the escaped character.
            i += 3 + rest[3..].iter().position(|&ch| ch == '\'').unwrap_or(0) + 1;
        } else if c[i] == '\'' && rest.get(2) == Some(&'\'') {
            i += 3; // a plain char literal ('"'); a lifetime ('a) has no closing quote and is stepped over
        } else {
            i += 1;
        }
    }
    out
}

/// The long flags named in a piece of text: `--name` not glued to a word or another dash before it.
fn long_flags(text: &str) -> Vec<String> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    for i in 0..b.len().saturating_sub(2) {
        let glued = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'-' || b[i - 1] == b'_');
        if &b[i..i + 2] == b"--" && !glued && b[i + 2].is_ascii_lowercase() {
            let len = b[i + 2..].iter().take_while(|&&x| x.is_ascii_lowercase() || x.is_ascii_digit() || x == b'-');
            out.push(text[i..i + 2 + len.count()].trim_end_matches('-').to_string());
        }
    }
    out
}

/// Source files under `dir`, test modules left out (a test may name a flag that does not exist to see it refused).
fn sources(dir: &Path, out: &mut Vec<(String, String)>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") && !p.to_string_lossy().ends_with("_tests.rs") {
            let text = std::fs::read_to_string(&p).unwrap();
            let code = text.split("\n#[cfg(test)]\nmod ").next().unwrap().to_string();
            out.push((p.strip_prefix(env!("CARGO_MANIFEST_DIR")).unwrap().display().to_string(), code));
        }
    }
}

fn run(args: &[&str]) -> std::process::Output {
    kvxfer().args(args).output().expect("run kvxfer")
}

/// The commands of `kvxfer --help`.
fn commands() -> Vec<String> {
    let help = String::from_utf8(run(&["--help"]).stdout).unwrap();
    let listed = help.split("Commands:\n").nth(1).expect("kvxfer --help lists commands").split("\n\n").next().unwrap();
    let names: Vec<String> = listed
        .lines()
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .filter(|n| n != "help")
        .collect();
    assert!(names.len() >= 5 && names.iter().any(|n| n == "sweep"), "{names:?}");
    names
}

/// Whether some command parses `flag` (hidden flags are in no help): an unknown one is refused as "unexpected
/// argument" before `--help` is looked at; a known one gets help, or a complaint about its missing value.
fn parsed_by_some_command(commands: &[String], flag: &str) -> bool {
    commands.iter().any(|c| {
        let out = run(&[c, flag, "--help"]);
        !String::from_utf8_lossy(&out.stderr).contains("unexpected argument")
    })
}

#[test]
fn every_flag_a_message_names_is_a_flag_of_some_command() {
    let commands = commands();
    let mut known: BTreeSet<String> = ["--help".to_string(), "--version".to_string()].into();
    for c in &commands {
        let out = run(&[c, "--help"]);
        assert!(out.status.success(), "kvxfer {c} --help");
        known.extend(long_flags(&String::from_utf8_lossy(&out.stdout)));
    }
    assert!(known.contains("--src") && known.contains("--mem") && known.contains("--transport"), "{known:?}");

    let mut files = Vec::new();
    sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut files);
    let mut named: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (file, code) in &files {
        for (line, s) in string_literals(code) {
            for flag in long_flags(&s) {
                named.entry(flag).or_default().push(format!("{file}:{line}"));
            }
        }
    }
    assert!(named.len() > 30, "the scan finds the flags messages name: {:?}", named.keys());
    let mut dead = Vec::new();
    for (flag, places) in &named {
        let other = OTHER_PROGRAMS.iter().any(|(f, _)| f == flag);
        if !other && !known.contains(flag) && !parsed_by_some_command(&commands, flag) {
            dead.push(format!("{flag} (named at {})", places.join(", ")));
        }
    }
    assert!(dead.is_empty(), "messages name flags no kvxfer command has:\n{}", dead.join("\n"));
    for (flag, program) in OTHER_PROGRAMS {
        assert!(named.contains_key(*flag), "{flag} ({program}) is no longer named in src/: drop it from the list");
    }
}

#[test]
fn the_scan_reads_strings_and_not_comments() {
    let src = "// \"--in-comment\"\nlet a = \"use --mem gpu:N\"; let b = r#\"--raw \"q\" x\"#; let c = '\"';\n\
               fn f<'a>(x: &'a str) { g(\"--x-y, --z\") } /* \"--blocked\" */ let d = \"x--no\\\"--esc\"; let e = '\\''; h(\"--q\");";
    let flags: Vec<String> = string_literals(src).iter().flat_map(|(_, s)| long_flags(s)).collect();
    assert_eq!(flags, ["--mem", "--raw", "--x-y", "--z", "--esc", "--q"]);
}
