//! Byte sizes and token counts as users type them.
//!
//! Sizes are binary only (B, KiB, MiB, GiB, TiB): a KV cache is laid out in powers of two and "GB" is ambiguous,
//! so decimal units are rejected with a hint rather than guessed. Token counts take `k` = 1024 (so `1k` tokens of a
//! model at 96 KiB/token is exactly 96 MiB, the convention of the seed's tables).
//!
//! A list element may also be a range, as perftest (`-a`) and nccl-tests (`-b -e -f 2`) sweep: `1MiB..1GiB` doubles
//! from the start to the end, `1MiB..1GiB:x4` multiplies by 4, `1MiB..8MiB:+1MiB` adds 1 MiB; an end off the step's
//! grid is the last value (`1MiB..3MiB` is 1, 2, 3 MiB). Ranges and single values mix: `1MiB..4MiB,96MiB`.

use super::MAX_CASES;
use crate::bail_usage;
use anyhow::Result;

const UNITS: [(&str, u64); 5] = [("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10), ("B", 1)];

/// Parse one size such as `96MiB`, `1.5GiB`, `4096` or `4096B` into bytes.
pub fn parse_size(text: &str) -> Result<u64> {
    let t = text.trim();
    if is_negative(t) {
        bail_usage!("size {text:?} is negative; give a positive size such as 96MiB");
    }
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = (&t[..split], t[split..].trim());
    if num.is_empty() {
        bail_usage!("size {text:?}: expected a number followed by B, KiB, MiB or GiB (e.g. 96MiB)");
    }
    let mult = match UNITS.iter().find(|(u, _)| u.eq_ignore_ascii_case(unit)) {
        Some((_, m)) => *m,
        None if unit.is_empty() => 1,
        None => {
            let hint = match unit.to_ascii_lowercase().as_str() {
                "kb" | "k" => " use KiB (1024 bytes)",
                "mb" | "m" => " use MiB (2^20 bytes)",
                "gb" | "g" => " use GiB (2^30 bytes)",
                "tb" | "t" => " use TiB (2^40 bytes)",
                _ => " use B, KiB, MiB, GiB or TiB",
            };
            bail_usage!("size {text:?}: unknown unit {unit:?};{hint}, e.g. 12GiB (sizes are binary units only)");
        }
    };
    let bytes = if num.contains('.') {
        let v: f64 = num.parse().map_err(|_| crate::error::usage(format!("size {text:?}: {num:?} is not a number")))?;
        let b = v * mult as f64;
        if b.fract() != 0.0 {
            bail_usage!("size {text:?} is not a whole number of bytes");
        }
        if b >= u64::MAX as f64 {
            bail_usage!("size {text:?} is too large");
        }
        b as u64
    } else {
        let v: u64 = num.parse().map_err(|_| crate::error::usage(format!("size {text:?} is too large")))?;
        v.checked_mul(mult).ok_or_else(|| crate::error::usage(format!("size {text:?} is too large")))?
    };
    if bytes == 0 {
        bail_usage!("size {text:?} is zero; give a positive size such as 96MiB");
    }
    Ok(bytes)
}

/// Parse a comma-separated list of sizes and size ranges (`96MiB,1GiB,12GiB`, `1MiB..1GiB:x4,12GiB`).
pub fn parse_size_list(text: &str) -> Result<Vec<u64>> {
    parse_list(text, "--sizes", parse_size)
}

/// Parse one token count: `512`, `1k` (= 1024), `128k`, `1m` (= 1024 × 1024).
pub fn parse_tokens(text: &str) -> Result<u64> {
    let t = text.trim();
    if is_negative(t) {
        bail_usage!("token count {text:?} is negative; give a positive count such as 1k");
    }
    let (num, mult) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1024u64),
        Some((i, 'm' | 'M')) => (&t[..i], 1024 * 1024),
        _ => (t, 1),
    };
    let n: u64 = num.parse().map_err(|_| {
        crate::error::usage(format!("token count {text:?}: expected a whole number like 512, 1k or 128k"))
    })?;
    let n = n.checked_mul(mult).ok_or_else(|| crate::error::usage(format!("token count {text:?} is too large")))?;
    if n == 0 {
        bail_usage!("token count {text:?} is zero; give a positive count such as 1k");
    }
    Ok(n)
}

/// Parse a comma-separated list of token counts and ranges (`1k,32k,128k`, `1k..128k`).
pub fn parse_token_list(text: &str) -> Result<Vec<u64>> {
    parse_list(text, "--tokens", parse_tokens)
}

/// How a range goes from its start to its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// `:xN`: multiply by N (the default, N = 2).
    Times(u64),
    /// `:+N`: add N (a size or a token count, like the ends).
    Plus(u64),
}

/// Whether a list element is a range (`A..B`, `A..B:x4`, `A..B:+1MiB`) rather than one value.
pub fn is_range(element: &str) -> bool {
    element.contains("..")
}

/// The values of one range element, ends included; `flag` and `parse` say what its ends are (`--sizes` and
/// [`parse_size`], `--tokens` and [`parse_tokens`]).
pub fn expand_range(element: &str, flag: &str, parse: fn(&str) -> Result<u64>) -> Result<Vec<u64>> {
    let e = element.trim();
    let (range, step) = match e.rsplit_once(':') {
        Some((r, s)) => (r, Some(s.trim())),
        None => (e, None),
    };
    let Some((from, to)) = range.split_once("..") else {
        bail_usage!(
            "{flag} {e:?}: a range is START..END, e.g. 1MiB..1GiB (doubling), 1MiB..1GiB:x4 or 1MiB..8MiB:+1MiB"
        );
    };
    let (from, to) = (parse(from)?, parse(to)?);
    let step = match step {
        None => Step::Times(2),
        Some(s) => match (s.strip_prefix(['x', 'X']), s.strip_prefix('+')) {
            (Some(n), _) => Step::Times(n.trim().parse().map_err(|_| {
                crate::error::usage(format!("{flag} {e:?}: step {s:?}: give a whole factor of 2 or more, e.g. :x4"))
            })?),
            // A zero step is a range that never ends, not a bad size.
            (_, Some(n)) if n.trim().trim_end_matches(char::is_alphabetic).trim().parse::<f64>().ok() == Some(0.0) => {
                Step::Plus(0)
            }
            (_, Some(n)) => Step::Plus(parse(n)?),
            _ => bail_usage!("{flag} {e:?}: step {s:?}: give :xN to multiply (e.g. :x4) or :+N to add (e.g. :+1MiB)"),
        },
    };
    if from > to {
        bail_usage!("{flag} {e:?}: the range runs backwards; give the smaller end first");
    }
    let mut out: Vec<u64> = match step {
        Step::Times(n @ (0 | 1)) => {
            bail_usage!("{flag} {e:?}: a factor of {n} never reaches the end; give :x2 or more")
        }
        Step::Plus(0) => bail_usage!("{flag} {e:?}: a step of 0 never reaches the end; give a positive step"),
        // Each step at least doubles: at most 64 values.
        Step::Times(n) => std::iter::successors(Some(from), |v| v.checked_mul(n).filter(|x| *x < to)).collect(),
        Step::Plus(n) => {
            // The values below the end, and the end.
            let count = (to - from).div_ceil(n).saturating_add(1);
            if count > MAX_CASES as u64 {
                bail_usage!(
                    "{flag} {e:?}: {count} values, more than the sweep limit of {MAX_CASES}; give a larger step"
                );
            }
            std::iter::successors(Some(from), |v| v.checked_add(n).filter(|x| *x < to)).collect()
        }
    };
    // The end is a value whether or not the step lands on it.
    if out.last() != Some(&to) {
        out.push(to);
    }
    Ok(out)
}

/// A comma-separated list whose elements are values or ranges of values.
fn parse_list(text: &str, flag: &str, parse: fn(&str) -> Result<u64>) -> Result<Vec<u64>> {
    let mut out = Vec::new();
    for element in split_list(text, flag)? {
        if is_range(element) {
            out.extend(expand_range(element, flag, parse)?);
        } else {
            out.push(parse(element)?);
        }
        if out.len() > MAX_CASES {
            bail_usage!("{flag} {text:?}: more than the sweep limit of {MAX_CASES} values; give fewer or larger steps");
        }
    }
    Ok(out)
}

/// `--sizes`: a comma-separated list of sizes, parsed from the flag's one value (not split into values by the
/// command line, so that an empty element is named as such).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizeList(pub Vec<u64>);

/// As the sizes read back exactly (`1MiB,96MiB`): two spellings of the same sizes serialize alike.
impl serde::Serialize for SizeList {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(&self.0.iter().map(|b| size_text(*b)).collect::<Vec<_>>().join(","))
    }
}

impl std::str::FromStr for SizeList {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> Result<SizeList> {
        parse_size_list(text).map(SizeList)
    }
}

/// `--tokens`: a comma-separated list of token counts, parsed from the flag's one value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenList(pub Vec<u64>);

/// As token counts read back exactly (`1k,32k`).
impl serde::Serialize for TokenList {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(&self.0.iter().map(|t| format_tokens(*t)).collect::<Vec<_>>().join(","))
    }
}

impl std::str::FromStr for TokenList {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> Result<TokenList> {
        parse_token_list(text).map(TokenList)
    }
}

/// `-1MiB`, `-2k`: a minus sign before a number (not a stray flag such as `--reps`).
fn is_negative(t: &str) -> bool {
    t.strip_prefix('-').is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit() || c == '.'))
}

fn split_list<'a>(text: &'a str, flag: &str) -> Result<Vec<&'a str>> {
    if text.trim().is_empty() {
        bail_usage!("{flag} {text:?}: expected a comma-separated list");
    }
    let items: Vec<&str> = text.split(',').map(str::trim).collect();
    if let Some(i) = items.iter().position(|s| s.is_empty()) {
        bail_usage!(
            "{flag} {text:?}: element {} of {} is empty; separate the values with single commas, e.g. 1k,32k",
            i + 1,
            items.len()
        );
    }
    Ok(items)
}

/// Format bytes in the largest binary unit that keeps the number readable: `96 MiB`, `1.5 GiB`, `4 KiB`, `100 B`.
pub fn format_size(bytes: u64) -> String {
    for (unit, mult) in UNITS {
        if bytes >= mult && mult > 1 {
            let v = bytes as f64 / mult as f64;
            return if v.fract() == 0.0 || v >= 100.0 {
                format!("{v:.0} {unit}")
            } else {
                let s = format!("{v:.2}");
                format!("{} {unit}", s.trim_end_matches('0').trim_end_matches('.'))
            };
        }
    }
    format!("{bytes} B")
}

/// Bytes as a size that parses back exactly, in the largest unit that divides them: `3MiB`, `1536B`.
pub fn size_text(bytes: u64) -> String {
    match UNITS.iter().find(|(_, m)| bytes >= *m && bytes % m == 0) {
        Some((unit, m)) => format!("{}{unit}", bytes / m),
        None => format!("{bytes}B"),
    }
}

/// Format a token count the way users type it (`1k`, `128k`, `1536`).
pub fn format_tokens(tokens: u64) -> String {
    if tokens >= 1024 && tokens % 1024 == 0 {
        format!("{}k", tokens / 1024)
    } else {
        tokens.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_binary_units() {
        assert_eq!(parse_size("96MiB").unwrap(), 96 << 20);
        assert_eq!(parse_size("12GiB").unwrap(), 12 << 30);
        assert_eq!(parse_size("1.5GiB").unwrap(), 3 << 29);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("64 KiB").unwrap(), 64 << 10);
        assert_eq!(parse_size("7B").unwrap(), 7);
        assert_eq!(parse_size_list("96MiB, 1GiB").unwrap(), vec![96 << 20, 1 << 30]);
    }

    #[test]
    fn rejects_decimal_units_with_a_hint() {
        let e = parse_size("12GB").unwrap_err().to_string();
        assert!(e.contains("unknown unit \"GB\"") && e.contains("GiB"), "{e}");
        assert!(parse_size("5MB").unwrap_err().to_string().contains("MiB"));
    }

    #[test]
    fn rejects_zero_negative_garbage_and_overflow() {
        for bad in ["0", "0MiB", "-1MiB", "abc", "", "1.3B", "99999999999TiB", "184467440737095516160"] {
            let e = parse_size(bad).unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2, "{bad}: {e}");
        }
        assert!(parse_size_list(",").is_err());
        assert!(parse_size("-1MiB").unwrap_err().to_string().contains("negative"));
        assert!(parse_tokens("-1k").unwrap_err().to_string().contains("negative"));
    }

    #[test]
    fn tokens_use_k_as_1024() {
        assert_eq!(parse_tokens("1k").unwrap(), 1024);
        assert_eq!(parse_tokens("128k").unwrap(), 131072);
        assert_eq!(parse_tokens("512").unwrap(), 512);
        assert_eq!(parse_token_list("512,1k").unwrap(), vec![512, 1024]);
        assert!(parse_tokens("0").is_err());
        assert!(parse_tokens("1.5k").is_err());
        assert!(parse_tokens("k").is_err());
    }

    const MIB: u64 = 1 << 20;

    #[test]
    fn ranges_double_by_default_and_take_a_factor_or_an_increment() {
        let mibs = |v: Vec<u64>| v.into_iter().map(|b| b / MIB).collect::<Vec<_>>();
        assert_eq!(mibs(parse_size_list("1MiB..1GiB").unwrap()), (0..=10).map(|i| 1 << i).collect::<Vec<_>>());
        assert_eq!(mibs(parse_size_list("1MiB..1GiB:x4").unwrap()), [1, 4, 16, 64, 256, 1024]);
        assert_eq!(mibs(parse_size_list("1MiB..4MiB:+1MiB").unwrap()), [1, 2, 3, 4]);
        assert_eq!(mibs(parse_size_list("1MiB..4MiB,96MiB").unwrap()), [1, 2, 4, 96]);
        assert_eq!(mibs(parse_size_list("96MiB, 1MiB .. 2MiB").unwrap()), [96, 1, 2]);
        assert_eq!(mibs(parse_size_list("4MiB..4MiB").unwrap()), [4]);
        assert_eq!(parse_token_list("1k..128k").unwrap(), (10..=17).map(|i| 1 << i).collect::<Vec<_>>());
        assert_eq!(parse_token_list("1k..4k:+1k,512").unwrap(), [1024, 2048, 3072, 4096, 512]);
        // The top of u64: the doubling stops at the end instead of overflowing.
        assert_eq!(parse_size_list("8TiB..16TiB").unwrap(), [8 << 40, 16 << 40]);
    }

    #[test]
    fn an_end_off_the_grid_is_the_last_value() {
        let mibs = |v: Vec<u64>| v.into_iter().map(|b| b / MIB).collect::<Vec<_>>();
        assert_eq!(mibs(parse_size_list("1MiB..3MiB").unwrap()), [1, 2, 3]);
        assert_eq!(mibs(parse_size_list("1MiB..96MiB:x4").unwrap()), [1, 4, 16, 64, 96]);
        assert_eq!(mibs(parse_size_list("1MiB..10MiB:+4MiB").unwrap()), [1, 5, 9, 10]);
        assert_eq!(parse_token_list("1k..3000").unwrap(), [1024, 2048, 3000]);
    }

    #[test]
    fn bad_ranges_are_one_line_usage_errors() {
        for (bad, needle) in [
            ("4MiB..1MiB", "runs backwards"),
            ("1MiB..4MiB:x0", "factor of 0 never reaches the end"),
            ("1MiB..4MiB:x1", "factor of 1 never reaches the end"),
            ("1MiB..4MiB:+0", "step of 0 never reaches the end"),
            ("1MiB..4MiB:x1.5", "whole factor"),
            ("1MiB..4MiB:*2", "give :xN to multiply"),
            ("1B..1GiB:+1B", "more than the sweep limit of 100000"),
            ("..4MiB", "expected a number"),
            ("1MiB..4MB", "use MiB"),
            ("1MiB..2MiB..4MiB", "size"),
        ] {
            let e = parse_size_list(bad).unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2, "{bad}: {e}");
            let msg = format!("{e:#}");
            assert!(msg.contains(needle) && !msg.contains('\n'), "{bad}: {msg}");
        }
        // Many ranges, each under the limit, still add up past it.
        let many = vec!["1B..4096B:+1B"; 25].join(",");
        assert!(parse_size_list(&many).unwrap_err().to_string().contains("sweep limit"));
        assert!(parse_token_list("128k..1k")
            .unwrap_err()
            .to_string()
            .contains("--tokens \"128k..1k\": the range runs backwards"));
    }

    #[test]
    fn size_text_parses_back_exactly() {
        for b in [1u64, 1000, 1536, MIB, 3 * MIB, 96 * MIB, 3 << 29, 12 << 30, 16 << 40] {
            assert_eq!(parse_size(&size_text(b)).unwrap(), b, "{}", size_text(b));
        }
        assert_eq!(size_text(3 * MIB), "3MiB");
        assert_eq!(size_text(1536), "1536B");
    }

    #[test]
    fn formats_round_trip() {
        assert_eq!(format_size(96 << 20), "96 MiB");
        assert_eq!(format_size(3 << 29), "1.5 GiB");
        assert_eq!(format_size(12 << 30), "12 GiB");
        assert_eq!(format_size(100), "100 B");
        assert_eq!(format_size(1536), "1.5 KiB");
        assert_eq!(format_tokens(131072), "128k");
        assert_eq!(format_tokens(1536), "1536");
        for s in [96u64 << 20, 3 << 29, 4096, 12 << 30] {
            assert_eq!(parse_size(&format_size(s).replace(' ', "")).unwrap(), s);
        }
    }
}
