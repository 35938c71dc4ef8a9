//! How a flag's value is read: clap's parser for a named enum (its names and their help from the enum's one table),
//! the defaults every parameter struct takes from its flags, and the serde readers that give a sweep file's key the
//! flag's own parser.

use crate::named::Named;
use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use serde::de::{self, Deserialize, Deserializer};
use std::fmt::Display;

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

/// A value's text parsed with `parse` (the flag's own parser).
pub fn parsed<'de, D, T, E>(d: D, parse: impl Fn(&str) -> Result<T, E>) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    E: Display,
{
    parse(&String::deserialize(d)?).map_err(de::Error::custom)
}

/// `Some` of a value's text parsed with `parse` (an optional flag that was given).
pub fn parsed_some<'de, D, T, E>(d: D, parse: impl Fn(&str) -> Result<T, E>) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    E: Display,
{
    parsed(d, parse).map(Some)
}

/// A value parsed with its type's `FromStr` (as the command line parses a flag of that type).
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
