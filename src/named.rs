//! Closed sets that users name: a layout, a pattern, a sweep's order. [`named_enum!`] declares such an enum with one
//! table of its values' names, and from that table alone gives it `Display`, `FromStr` and serde, so the command
//! line, sweep files and results files spell every value the same way; `cli` hands the same table (names and help)
//! to its argument parser. The layers below `cli` see only the enum and std/serde.

use serde::de::{self, Deserializer, Visitor};
use std::fmt;
use std::marker::PhantomData;

/// An enum whose values users write by name. Implemented by [`named_enum!`].
pub trait Named: Sized + Copy + Send + Sync + 'static {
    /// Every value with its name and the help `--help` shows beside it (empty: none), in the order help lists them.
    const TABLE: &'static [(Self, &'static str, &'static str)];
    /// The names alone, in the same order.
    const NAMES: &'static [&'static str];

    /// How users write this value.
    fn name(self) -> &'static str;

    /// The value written `text` (exactly as named: no other case, no abbreviation).
    fn from_name(text: &str) -> Option<Self> {
        Self::TABLE.iter().find(|(_, name, _)| *name == text).map(|(value, _, _)| *value)
    }

    /// Every value, in the table's order.
    fn values() -> impl Iterator<Item = Self> {
        Self::TABLE.iter().map(|(value, _, _)| *value)
    }
}

/// A name that is none of an enum's values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownName {
    pub given: String,
    pub names: &'static [&'static str],
}

impl fmt::Display for UnknownName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: choose one of {}", self.given, self.names.join(", "))
    }
}

impl std::error::Error for UnknownName {}

/// `FromStr` of a [`Named`] enum.
pub fn parse<T: Named>(text: &str) -> Result<T, UnknownName> {
    T::from_name(text).ok_or_else(|| UnknownName { given: text.to_string(), names: T::NAMES })
}

/// serde's reading of a [`Named`] enum: its name, refused as serde refuses an unknown variant.
pub fn deserialize<'de, T: Named, D: Deserializer<'de>>(d: D) -> Result<T, D::Error> {
    struct ByName<T>(PhantomData<T>);

    impl<T: Named> Visitor<'_> for ByName<T> {
        type Value = T;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            write!(f, "one of {}", T::NAMES.join(", "))
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
            T::from_name(v).ok_or_else(|| E::unknown_variant(v, T::NAMES))
        }
    }

    d.deserialize_str(ByName(PhantomData))
}

/// Declare an enum of unit variants, each with its name (and optionally the help `--help` shows for it), and give it
/// [`Named`], an inherent `name()`, `Display` and `FromStr` by name, and serde as the name:
///
/// ```ignore
/// named_enum! {
///     /// `--layout`: how a transfer's bytes sit in each side's memory.
///     #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
///     pub enum Layout {
///         #[default]
///         Contiguous = "contiguous",
///         Paged = "paged": "per-layer K/V blocks scattered over a pool",
///     }
/// }
/// ```
macro_rules! named_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal $(: $help:literal)? ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis enum $name {
            $( $(#[$vmeta])* $variant ),+
        }

        impl $crate::named::Named for $name {
            const TABLE: &'static [(Self, &'static str, &'static str)] =
                &[$( (Self::$variant, $text, $crate::named::named_enum!(@help $($help)?)) ),+];
            const NAMES: &'static [&'static str] = &[$($text),+];

            fn name(self) -> &'static str {
                match self {
                    $( Self::$variant => $text ),+
                }
            }
        }

        impl $name {
            /// How users write this value (the command line, sweep files and results files alike).
            pub fn name(self) -> &'static str {
                <Self as $crate::named::Named>::name(self)
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.name())
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::named::UnknownName;

            fn from_str(text: &str) -> ::std::result::Result<Self, Self::Err> {
                $crate::named::parse(text)
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> ::std::result::Result<S::Ok, S::Error> {
                s.serialize_str(self.name())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> ::std::result::Result<Self, D::Error> {
                $crate::named::deserialize(d)
            }
        }
    };
    (@help $help:literal) => { $help };
    (@help) => { "" };
}
pub(crate) use named_enum;

#[cfg(test)]
mod tests {
    use super::Named;

    named_enum! {
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        enum Shade {
            #[default]
            Light = "light",
            DarkGrey = "dark-grey": "the darker one",
        }
    }

    #[test]
    fn one_table_spells_the_values_everywhere() {
        assert_eq!(Shade::NAMES, ["light", "dark-grey"]);
        assert_eq!((Shade::DarkGrey.name(), Shade::DarkGrey.to_string()), ("dark-grey", "dark-grey".to_string()));
        assert_eq!("dark-grey".parse::<Shade>(), Ok(Shade::DarkGrey));
        assert_eq!(Shade::values().collect::<Vec<_>>(), [Shade::Light, Shade::DarkGrey]);
        assert_eq!(Shade::TABLE[1].2, "the darker one");
        assert_eq!(Shade::TABLE[0].2, "");
        let e = "Dark".parse::<Shade>().unwrap_err().to_string();
        assert_eq!(e, "\"Dark\": choose one of light, dark-grey");
        assert_eq!(serde_json::to_string(&Shade::DarkGrey).unwrap(), "\"dark-grey\"");
        assert_eq!(serde_json::from_str::<Shade>("\"light\"").unwrap(), Shade::Light);
        let e = serde_json::from_value::<Shade>("dim".into()).unwrap_err().to_string();
        assert_eq!(e, "unknown variant `dim`, expected `light` or `dark-grey`");
    }
}
