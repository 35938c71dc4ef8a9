//! Sweep files (`sweeps/*.toml`): which cases to measure, how many reps, in which order.
//!
//! ```toml
//! name = "mb2"                  # run-level keys: name, description, label, reps, warmup, order, seed
//! reps = 5
//! order = "interleaved"         # interleaved | random | sequential
//! tokens = [512, 1024, "128k"]  # every other key is a parameter, named like the `kvxfer sweep` flag
//! # sizes = ["1MiB..1GiB:x4"]   # a range (see `sizes`) is one case per size it makes
//! model = "qwen3-30b-a3b"       # (block_size = --block-size); a list makes it an axis of the cross product
//! transport = ["cuda", "tcp"]
//!
//! [[case]]                      # optional: an explicit case list, each merged over the top-level parameters
//! transport = "verbs"           # (lists inside a case expand too)
//! ```
//!
//! Cases are the cross product of the axes, the size axis (`sizes` or `tokens`) innermost and the others in
//! alphabetical order, each axis's values in the order listed. `--set key=value` overrides a key everywhere (`a,b`
//! makes a list). Each case ends up as a map of parameter → value strings: the exact set of `kvxfer sweep` flags
//! that measure it, and what `--resume` matches cases by.

use super::order::Order;
use super::sizes;
use super::MAX_CASES;
use crate::bail_usage;
use anyhow::Result;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Keys of the whole sweep rather than of a case.
const RUN_KEYS: &[&str] = &["name", "description", "label", "reps", "warmup", "order", "seed", "case"];
/// The parameters a sweep file may set, named like the `kvxfer sweep` flags (`block_size` = `--block-size`). The
/// command layer lists them from the command-line definition itself, so a file key and a flag cannot drift apart.
#[derive(Debug, Clone, Default)]
pub struct ParamKeys {
    /// Flags that take a value.
    pub options: Vec<String>,
    /// Switches (`true` or `false` in a file; present on the command line when true).
    pub switches: Vec<String>,
}

impl ParamKeys {
    fn contains(&self, key: &str) -> bool {
        self.options.iter().chain(&self.switches).any(|k| k == key)
    }
}

/// The size axis: each case has exactly one of these, with one value.
pub const SIZE_KEYS: &[&str] = &["sizes", "tokens"];

pub type Params = BTreeMap<String, String>;

/// One case of a sweep: its index in the case list, its parameters, and a short name of what sets it apart.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepCase {
    pub id: usize,
    pub params: Params,
    /// "transport=cuda dst=gpu:1" — the non-size parameters that vary across the sweep (empty when none do).
    pub label: String,
}

#[derive(Debug, Clone)]
pub struct SweepFile {
    pub path: PathBuf,
    pub name: String,
    pub description: Option<String>,
    pub label: Option<String>,
    pub reps: u32,
    pub warmup: u32,
    pub order: Order,
    pub seed: u64,
    pub cases: Vec<SweepCase>,
}

/// A parameter's value: one, or a list (an axis).
type Values = Vec<String>;

fn scalar(file: &str, key: &str, v: &toml::Value) -> Result<String> {
    Ok(match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        other => bail_usage!("{file}: {key} = {other}: expected a string, number, boolean or a list of them"),
    })
}

fn values(file: &str, key: &str, v: &toml::Value) -> Result<Values> {
    match v {
        toml::Value::Array(items) if items.is_empty() => bail_usage!("{file}: {key} = []: an axis needs a value"),
        toml::Value::Array(items) => items.iter().map(|i| scalar(file, key, i)).collect(),
        one => Ok(vec![scalar(file, key, one)?]),
    }
}

fn check_param(file: &str, key: &str, keys: &ParamKeys) -> Result<()> {
    if !keys.contains(key) {
        bail_usage!(
            "{file}: unknown key {key:?}; parameters are {} (and run keys {})",
            keys.options.iter().chain(&keys.switches).cloned().collect::<Vec<_>>().join(", "),
            RUN_KEYS.join(", ")
        );
    }
    Ok(())
}

/// The parameters of one table (the top level or a `[[case]]`), run keys left out.
fn params_of(file: &str, t: &toml::Table, keys: &ParamKeys) -> Result<BTreeMap<String, Values>> {
    let mut out = BTreeMap::new();
    for (k, v) in t.iter().filter(|(k, _)| !RUN_KEYS.contains(&k.as_str())) {
        check_param(file, k, keys)?;
        out.insert(k.clone(), expand_ranges(file, k, values(file, k, v)?)?);
    }
    Ok(out)
}

/// A size axis with its ranges (`"1MiB..1GiB"`, `"1k..128k:x4"`) written out, one value per size, so each size is a
/// case of its own.
fn expand_ranges(file: &str, key: &str, values: Values) -> Result<Values> {
    if !SIZE_KEYS.contains(&key) {
        return Ok(values);
    }
    let mut out = Vec::with_capacity(values.len());
    for v in values {
        if !sizes::is_range(&v) {
            out.push(v);
        } else if key == "tokens" {
            let tokens = sizes::expand_range(&v, &format!("{file}: {key} ="), sizes::parse_tokens)?;
            out.extend(tokens.into_iter().map(sizes::format_tokens));
        } else {
            let bytes = sizes::expand_range(&v, &format!("{file}: {key} ="), sizes::parse_size)?;
            out.extend(bytes.into_iter().map(sizes::size_text));
        }
        if out.len() > MAX_CASES {
            bail_usage!("{file}: {key}: more than the sweep limit of {MAX_CASES} values; give fewer or larger steps");
        }
    }
    Ok(out)
}

fn run_u64(file: &str, key: &str, v: Option<&String>, default: u64) -> Result<u64> {
    match v {
        None => Ok(default),
        Some(s) => {
            s.parse().map_err(|_| crate::error::usage(format!("{file}: {key} = {s:?}: expected a whole number")))
        }
    }
}

/// `--set key=value`, parsed once: run keys take one value, parameters a list.
fn split_sets(sets: &[String], keys: &ParamKeys) -> Result<(BTreeMap<String, String>, BTreeMap<String, Values>)> {
    let mut run_sets: BTreeMap<String, String> = BTreeMap::new();
    let mut param_sets: BTreeMap<String, Values> = BTreeMap::new();
    for s in sets {
        let Some((k, v)) = s.split_once('=') else {
            bail_usage!("--set {s:?}: expected key=value, e.g. --set transport=tcp");
        };
        let k = k.trim().replace('-', "_");
        if RUN_KEYS.contains(&k.as_str()) && k != "case" {
            run_sets.insert(k, v.trim().to_string());
            continue;
        }
        check_param("--set", &k, keys)?;
        let list: Values = v.split(',').map(|x| x.trim().to_string()).collect();
        if list.iter().all(String::is_empty) {
            bail_usage!("--set {s:?}: give a value");
        }
        if let Some(i) = list.iter().position(String::is_empty) {
            bail_usage!(
                "--set {s:?}: element {} of {} is empty; separate the values with single commas",
                i + 1,
                list.len()
            );
        }
        param_sets.insert(k.clone(), expand_ranges("--set", &k, list)?);
    }
    Ok((run_sets, param_sets))
}

impl SweepFile {
    /// Read and expand a sweep file, with `--set key=value` overrides applied; `keys` are the parameters it may set.
    pub fn load(path: &Path, sets: &[String], keys: &ParamKeys) -> Result<SweepFile> {
        let text = super::input::read_text(path, "the sweep file")?;
        SweepFile::parse(&path.display().to_string(), &text, sets, keys).map(|mut f| {
            f.path = path.to_path_buf();
            f
        })
    }

    /// Parse the text of a sweep file (`file` names it in errors).
    pub fn parse(file: &str, text: &str, sets: &[String], keys: &ParamKeys) -> Result<SweepFile> {
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            crate::error::usage(format!("{file}: not valid TOML: {}", e.to_string().replace('\n', " ")))
        })?;
        let (run_sets, param_sets) = split_sets(sets, keys)?;
        let run_str = |key: &str| -> Result<Option<String>> {
            match (run_sets.get(key), table.get(key)) {
                (Some(v), _) => Ok(Some(v.clone())),
                (None, Some(v)) => Ok(Some(scalar(file, key, v)?)),
                (None, None) => Ok(None),
            }
        };
        let name = run_str("name")?.unwrap_or_else(|| {
            Path::new(file).file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "sweep".into())
        });
        let reps = run_u64(file, "reps", run_str("reps")?.as_ref(), 5)?;
        let warmup = run_u64(file, "warmup", run_str("warmup")?.as_ref(), 1)?;
        if reps == 0 || reps > 100_000 || warmup > 100_000 {
            bail_usage!("{file}: reps = {reps}, warmup = {warmup}: give 1 or more reps (and fewer than 100000)");
        }
        let order = match run_str("order")? {
            Some(o) => Order::parse(&o).map_err(|e| crate::error::usage(format!("{file}: {e}")))?,
            None => Order::Interleaved,
        };
        let seed = run_u64(file, "seed", run_str("seed")?.as_ref(), 0x6b76_7866)?;

        let base = params_of(file, &table, keys)?;
        let tables: Vec<BTreeMap<String, Values>> = match table.get("case") {
            None => vec![BTreeMap::new()],
            Some(toml::Value::Array(list)) if !list.is_empty() => list
                .iter()
                .enumerate()
                .map(|(i, c)| match c {
                    toml::Value::Table(t) => params_of(&format!("{file}: [[case]] {}", i + 1), t, keys),
                    _ => bail_usage!("{file}: case must be a list of tables ([[case]])"),
                })
                .collect::<Result<_>>()?,
            Some(_) => bail_usage!("{file}: case must be a list of tables ([[case]])"),
        };
        let mut cases: Vec<Params> = Vec::new();
        for (i, overlay) in tables.iter().enumerate() {
            let mut merged = base.clone();
            merged.extend(overlay.clone());
            merged.extend(param_sets.clone());
            // A size given by --set or a case replaces the other size key too.
            for k in SIZE_KEYS {
                if overlay.contains_key(*k) || param_sets.contains_key(*k) {
                    merged.retain(|key, _| key == k || !SIZE_KEYS.contains(&key.as_str()));
                }
            }
            let where_ = if tables.len() > 1 { format!("{file}: [[case]] {}", i + 1) } else { file.to_string() };
            match SIZE_KEYS.iter().filter(|k| merged.contains_key(**k)).count() {
                0 => bail_usage!(
                    "{where_}: no sizes: give sizes = [\"96MiB\", ...] or tokens = [1024, ...] with a model"
                ),
                1 => {}
                _ => bail_usage!("{where_}: give sizes or tokens, not both"),
            }
            for s in keys.switches.iter().filter_map(|k| merged.get(k)).flatten() {
                if s != "true" && s != "false" {
                    bail_usage!("{where_}: {s:?} for a switch ({}): use true or false", keys.switches.join(", "));
                }
            }
            let count = merged.values().try_fold(1usize, |n, v| n.checked_mul(v.len().max(1)));
            match count.and_then(|n| n.checked_add(cases.len())) {
                Some(total) if total <= MAX_CASES => {}
                _ => bail_usage!(
                    "{where_}: more than {MAX_CASES} cases (the product of every list's length); split the sweep into several files"
                ),
            }
            cases.extend(cross(&merged));
        }
        let mut seen = std::collections::HashSet::with_capacity(cases.len());
        if let Some(c) = cases.iter().find(|c| !seen.insert(*c)) {
            bail_usage!("{file}: the case {} appears twice; remove the duplicate", describe(c));
        }
        let labels = labels(&cases);
        let cases = cases
            .into_iter()
            .zip(labels)
            .enumerate()
            .map(|(id, (params, label))| SweepCase { id, params, label })
            .collect();
        Ok(SweepFile {
            path: PathBuf::from(file),
            name,
            description: run_str("description")?,
            label: run_str("label")?,
            reps: reps as u32,
            warmup: warmup as u32,
            order,
            seed,
            cases,
        })
    }
}

/// The cross product of a case's axes: the size axis innermost, the others in key order.
fn cross(merged: &BTreeMap<String, Values>) -> Vec<Params> {
    let mut keys: Vec<&String> = merged.keys().filter(|k| !SIZE_KEYS.contains(&k.as_str())).collect();
    keys.extend(merged.keys().filter(|k| SIZE_KEYS.contains(&k.as_str())));
    let mut out = vec![Params::new()];
    for k in keys {
        out = out
            .into_iter()
            .flat_map(|p| {
                merged[k].iter().map(move |v| {
                    let mut p = p.clone();
                    p.insert(k.clone(), v.clone());
                    p
                })
            })
            .collect();
    }
    out
}

/// `k=v k=v` of every parameter.
pub fn describe(p: &Params) -> String {
    p.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
}

/// The non-size parameters whose values differ somewhere across `cases` (a key some cases lack counts), in key
/// order: what tells a sweep's configurations apart.
pub fn varying_keys<'a>(cases: impl IntoIterator<Item = &'a Params> + Clone) -> Vec<String> {
    let keys: std::collections::BTreeSet<&String> =
        cases.clone().into_iter().flat_map(|c| c.keys()).filter(|k| !SIZE_KEYS.contains(&k.as_str())).collect();
    let first = cases.clone().into_iter().next();
    keys.into_iter()
        .filter(|k| cases.clone().into_iter().any(|c| c.get(*k) != first.and_then(|f| f.get(*k))))
        .cloned()
        .collect()
}

/// Each case's non-size parameters whose values differ somewhere in the sweep.
fn labels(cases: &[Params]) -> Vec<String> {
    let varying = varying_keys(cases);
    cases
        .iter()
        .map(|c| varying.iter().filter_map(|k| c.get(k).map(|v| format!("{k}={v}"))).collect::<Vec<_>>().join(" "))
        .collect()
}

/// The parameters that decide the connection (everything but the size): cases sharing them share a session.
pub fn session_key(p: &Params) -> Params {
    p.iter()
        .map(|(k, v)| (k.clone(), if SIZE_KEYS.contains(&k.as_str()) { String::new() } else { v.clone() }))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A few parameters, as the command layer would list them from the CLI.
    fn keys() -> ParamKeys {
        let list = |k: &[&str]| k.iter().map(|s| s.to_string()).collect();
        ParamKeys {
            options: list(&["sizes", "tokens", "model", "transport", "streams", "mr_chunk", "block_size"]),
            switches: list(&["verify", "coalesce"]),
        }
    }

    #[test]
    fn cross_product_with_the_size_axis_innermost() {
        let f = SweepFile::parse(
            "t.toml",
            "reps = 3\ntransport = [\"tcp\", \"cuda\"]\nsizes = [\"1MiB\", \"2MiB\"]\n",
            &[],
            &keys(),
        )
        .unwrap();
        assert_eq!((f.reps, f.warmup, f.order), (3, 1, Order::Interleaved));
        let got: Vec<(String, String)> =
            f.cases.iter().map(|c| (c.params["transport"].clone(), c.params["sizes"].clone())).collect();
        // Values keep the order they are listed in; the size axis varies fastest.
        assert_eq!(got[0], ("tcp".into(), "1MiB".into()));
        assert_eq!(got[1], ("tcp".into(), "2MiB".into()));
        assert_eq!(got[2], ("cuda".into(), "1MiB".into()));
        assert_eq!(got.len(), 4);
        assert_eq!(f.cases[0].label, "transport=tcp");
        assert_eq!(session_key(&f.cases[0].params), session_key(&f.cases[1].params));
        assert_ne!(session_key(&f.cases[0].params), session_key(&f.cases[2].params));
    }

    #[test]
    fn explicit_cases_merge_over_the_top_level_and_set_wins() {
        let text = "tokens = [1024]\nmodel = \"qwen3-8b\"\nverify = true\n[[case]]\ntransport = \"tcp\"\nstreams = [1, 2]\n[[case]]\ntransport = \"cuda\"\nsizes = [\"4MiB\"]\n";
        let f = SweepFile::parse("t.toml", text, &[], &keys()).unwrap();
        assert_eq!(f.cases.len(), 3);
        assert_eq!(f.cases[2].params.get("tokens"), None, "a case's sizes replace the top-level tokens");
        let first: Vec<(&str, &str)> = f.cases[0].params.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            first,
            [("model", "qwen3-8b"), ("streams", "1"), ("tokens", "1024"), ("transport", "tcp"), ("verify", "true")]
        );
        let f = SweepFile::parse(
            "t.toml",
            text,
            &["transport=verbs".into(), "reps=2".into(), "order=random".into()],
            &keys(),
        )
        .unwrap();
        assert!(f.cases.iter().all(|c| c.params["transport"] == "verbs"));
        assert_eq!((f.reps, f.order), (2, Order::Random));
        let f = SweepFile::parse("t.toml", "sizes=[\"1MiB\"]", &["mr-chunk=2GiB,4GiB".into()], &keys()).unwrap();
        assert_eq!(f.cases.len(), 2);
    }

    #[test]
    fn size_ranges_become_one_case_per_size() {
        let sizes_of = |f: &SweepFile, key: &str| f.cases.iter().map(|c| c.params[key].clone()).collect::<Vec<_>>();
        let f = SweepFile::parse("t.toml", "sizes = [\"1MiB..4MiB\", \"96MiB\"]\n", &[], &keys()).unwrap();
        assert_eq!(sizes_of(&f, "sizes"), ["1MiB", "2MiB", "4MiB", "96MiB"]);
        let f = SweepFile::parse("t.toml", "tokens = \"1k..8k:x4\"\nmodel = \"qwen3-8b\"\n", &[], &keys()).unwrap();
        assert_eq!(sizes_of(&f, "tokens"), ["1k", "4k", "8k"]);
        let f = SweepFile::parse("t.toml", "sizes = [\"1MiB\"]", &["sizes=1MiB..3MiB,1GiB".into()], &keys()).unwrap();
        assert_eq!(sizes_of(&f, "sizes"), ["1MiB", "2MiB", "3MiB", "1GiB"]);
        for (text, needle) in [
            ("sizes = \"4MiB..1MiB\"", "t.toml: sizes = \"4MiB..1MiB\": the range runs backwards"),
            ("sizes = \"1MiB..4MiB:x1\"", "never reaches the end"),
            ("sizes = [\"1B..64KiB:+1B\", \"1MiB..1088576B:+1B\"]", "sweep limit of 100000"),
            ("sizes = \"1B..64KiB:+1B\"\nstreams = [1, 2]", "more than 100000 cases"),
        ] {
            let e = SweepFile::parse("t.toml", text, &[], &keys()).unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2, "{e}");
            assert!(e.to_string().contains(needle), "{text}: {e}");
        }
    }

    #[test]
    fn mistakes_are_usage_errors_that_name_the_key() {
        for (text, sets, needle) in [
            ("sizes = [\"1MiB\"]\nstreem = 2", vec![], "unknown key \"streem\""),
            ("transport = \"tcp\"", vec![], "no sizes"),
            ("sizes = [\"1MiB\"]\ntokens = [1]", vec![], "not both"),
            ("sizes = [\"1MiB\"]\norder = \"fast\"", vec![], "interleaved"),
            ("sizes = [\"1MiB\"]\nreps = 0", vec![], "reps"),
            ("sizes = [\"1MiB\", \"1MiB\"]", vec![], "twice"),
            ("sizes = [\"1MiB\"]\nverify = \"yes\"", vec![], "true or false"),
            ("sizes = [", vec![], "not valid TOML"),
            ("sizes = [\"1MiB\"]", vec!["transport"], "key=value"),
            ("sizes = [\"1MiB\"]", vec!["colour=red"], "unknown key \"colour\""),
        ] {
            let sets: Vec<String> = sets.into_iter().map(String::from).collect();
            let e = SweepFile::parse("t.toml", text, &sets, &keys()).unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2, "{e}");
            assert!(e.to_string().contains(needle), "{text}: {e}");
        }
    }
}
