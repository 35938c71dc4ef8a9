//! How a flag's value is read: clap's parser for a named enum (its names and their help from the enum's one table),
//! the defaults every parameter struct takes from its flags, and the serde readers that
//! give a sweep file's key the flag's own parser (a parameter arrives as text, or as a TOML number), so `block_size =
//! "1MiB"` in a file and `--block-size 1MiB` on the command line cannot disagree. Missing keys take clap's own
//! defaults.

use crate::named::Named;
use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use serde::de::{self, Deserializer, Visitor};
use std::fmt::{self, Display};

/// A value given as a string, an integer or a boolean, as its text.
struct AsText;

impl Visitor<'_> for AsText {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string, a whole number or a boolean")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<String, E> {
        Ok(v.to_string())
    }
}

/// The text of a value, whatever type it arrived as.
pub fn text<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    d.deserialize_any(AsText)
}

/// Parse a value's text with `parse` (the flag's own parser).
pub fn parsed<'de, D, T, E>(d: D, parse: impl Fn(&str) -> Result<T, E>) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    E: Display,
{
    parse(&text(d)?).map_err(de::Error::custom)
}

/// `Some` of a value's text parsed with `parse` (an optional flag that was given).
pub fn parsed_some<'de, D, T, E>(d: D, parse: impl Fn(&str) -> Result<T, E>) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    E: Display,
{
    parsed(d, parse).map(Some)
}

/// A value parsed with its type's `FromStr` (as clap parses a flag of that type).
pub fn from_str<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: std::str::FromStr,
    T::Err: Display,
{
    parsed(d, str::parse::<T>)
}

/// `Some` of a value parsed with its type's `FromStr`.
pub fn some_from_str<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: std::str::FromStr,
    T::Err: Display,
{
    from_str(d).map(Some)
}

/// `Some` of a value's text (a name such as a device or model; a name that looks like a number stays a name).
pub fn some_text<'de, D: Deserializer<'de>, T: From<String>>(d: D) -> Result<Option<T>, D::Error> {
    text(d).map(|t| Some(T::from(t)))
}

/// clap's parser of a [`Named`] enum: its names are the possible values (listed by `--help`, with each one's help
/// where it has one), and a name that is none of them is refused naming them.
pub fn named<T: Named>() -> impl TypedValueParser<Value = T> {
    let values: Vec<PossibleValue> = T::TABLE
        .iter()
        .map(|(_, name, help)| {
            let value = PossibleValue::new(*name);
            if help.is_empty() {
                value
            } else {
                value.help(*help)
            }
        })
        .collect();
    PossibleValuesParser::new(values).map(|name| T::from_name(&name).expect("clap admits only the enum's names"))
}

/// A parameter struct as the command line leaves it when none of its flags is given: clap's defaults are the only
/// defaults, and a sweep file's missing keys take them too (see [`defaults_from_clap`]).
pub fn clap_defaults<T: clap::Args + clap::FromArgMatches>() -> T {
    let cmd = T::augment_args(clap::Command::new("defaults"));
    let matches = cmd.try_get_matches_from(["defaults"]).expect("every parameter flag has a default or is optional");
    T::from_arg_matches(&matches).expect("the defaults parse")
}

/// `impl Default` by [`clap_defaults`], for the parameter structs that `#[serde(default)]` fills.
macro_rules! defaults_from_clap {
    ($($t:ty),*) => {$(
        impl Default for $t {
            fn default() -> Self {
                $crate::cli::values::clap_defaults()
            }
        }
    )*};
}
pub(crate) use defaults_from_clap;

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize, Debug, PartialEq)]
    struct Probe {
        #[serde(deserialize_with = "from_str")]
        n: u32,
        #[serde(default, deserialize_with = "some_text")]
        name: Option<String>,
        #[serde(default, deserialize_with = "parsed_size")]
        size: Option<u64>,
    }

    fn parsed_size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        parsed_some(d, crate::plan::sizes::parse_size)
    }

    #[test]
    fn numbers_strings_and_flag_parsers() {
        let p: Probe = serde_json::from_str(r#"{"n": "7", "name": 0, "size": "2MiB"}"#).unwrap();
        assert_eq!(p, Probe { n: 7, name: Some("0".into()), size: Some(2 << 20) });
        let p: Probe = serde_json::from_str(r#"{"n": 7, "size": 4096}"#).unwrap();
        assert_eq!(p, Probe { n: 7, name: None, size: Some(4096) });
        let e = serde_json::from_str::<Probe>(r#"{"n": 1, "size": "2MB"}"#).unwrap_err().to_string();
        assert!(e.contains("use MiB"), "{e}");
    }
}
