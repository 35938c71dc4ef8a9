//! Typed options from text. A sweep file's case is a list of `key = value` texts (what results record and `--resume`
//! matches by); serde reads them into the structs the command line fills, and each field's type decides how its
//! text is read: `"3"` is a number where the field is a number, a name where it is a name, `"true"` a switch where
//! it is a bool. Fields with a parser of their own (sizes, durations) read the text with it, so `block_size =
//! "1MiB"` in a file and `--block-size 1MiB` cannot disagree.

use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, MapAccess, Visitor};
use serde::forward_to_deserialize_any;
use std::fmt;

/// A value that cannot be read, named by its key: `streams = "two": invalid type: string "two", expected u32`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextError(pub String);

impl fmt::Display for TextError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TextError {}

impl de::Error for TextError {
    fn custom<T: fmt::Display>(msg: T) -> TextError {
        TextError(msg.to_string())
    }
}

/// Read `T` from `entries`. Keys that are no field of `T` are passed over: a struct read from part of a case (one
/// group of flags) takes its own keys; which keys exist at all is checked where the case is read.
pub fn from_texts<T: DeserializeOwned>(entries: &[(&str, &str)]) -> Result<T, TextError> {
    T::deserialize(Texts { entries, next: 0 })
}

/// The entries of a case, as a map.
struct Texts<'a> {
    entries: &'a [(&'a str, &'a str)],
    next: usize,
}

impl<'de> de::Deserializer<'de> for Texts<'_> {
    type Error = TextError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TextError> {
        visitor.visit_map(self)
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit unit_struct
        newtype_struct seq tuple tuple_struct map struct enum identifier ignored_any
    }
}

impl<'de> MapAccess<'de> for Texts<'_> {
    type Error = TextError;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, TextError> {
        let Some((key, _)) = self.entries.get(self.next) else { return Ok(None) };
        seed.deserialize(key.into_deserializer()).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, TextError> {
        let (key, value) = self.entries[self.next];
        self.next += 1;
        seed.deserialize(Text(value)).map_err(|e| TextError(format!("{key} = {value:?}: {e}")))
    }
}

/// One value's text, read as the type asking for it.
struct Text<'a>(&'a str);

impl Text<'_> {
    /// A whole number where one is asked for; other text is refused by the visitor as the wrong type.
    fn unsigned<'de, V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TextError> {
        match self.0.parse::<u64>() {
            Ok(n) => visitor.visit_u64(n),
            Err(_) => visitor.visit_str(self.0),
        }
    }

    fn signed<'de, V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TextError> {
        match self.0.parse::<i64>() {
            Ok(n) => visitor.visit_i64(n),
            Err(_) => visitor.visit_str(self.0),
        }
    }
}

impl<'de> de::Deserializer<'de> for Text<'_> {
    type Error = TextError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TextError> {
        visitor.visit_str(self.0)
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TextError> {
        match self.0 {
            "true" => visitor.visit_bool(true),
            "false" => visitor.visit_bool(false),
            other => visitor.visit_str(other),
        }
    }

    fn deserialize_u8<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TextError> {
        self.unsigned(visitor)
    }

    fn deserialize_u16<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TextError> {
        self.unsigned(visitor)
    }

    fn deserialize_u32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TextError> {
        self.unsigned(visitor)
    }

    fn deserialize_u64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TextError> {
        self.unsigned(visitor)
    }

    fn deserialize_i8<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TextError> {
        self.signed(visitor)
    }

    fn deserialize_i16<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TextError> {
        self.signed(visitor)
    }

    fn deserialize_i32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TextError> {
        self.signed(visitor)
    }

    fn deserialize_i64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TextError> {
        self.signed(visitor)
    }

    fn deserialize_f32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TextError> {
        self.deserialize_f64(visitor)
    }

    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TextError> {
        match self.0.parse::<f64>() {
            Ok(x) => visitor.visit_f64(x),
            Err(_) => visitor.visit_str(self.0),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TextError> {
        visitor.visit_some(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, TextError> {
        visitor.visit_enum(self.0.into_deserializer())
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, TextError> {
        visitor.visit_newtype_struct(self)
    }

    forward_to_deserialize_any! {
        i128 u128 char str string bytes byte_buf unit unit_struct seq tuple tuple_struct map struct identifier
        ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize, Debug, PartialEq, Default)]
    #[serde(default)]
    struct Probe {
        n: u32,
        on: bool,
        name: Option<String>,
        #[serde(rename(deserialize = "renamed"))]
        seed: u64,
        kind: Option<Kind>,
    }

    #[derive(Deserialize, Debug, PartialEq)]
    #[serde(rename_all = "lowercase")]
    enum Kind {
        Ce,
        Sm,
    }

    fn probe(entries: &[(&str, &str)]) -> Result<Probe, String> {
        from_texts(entries).map_err(|e| e.to_string())
    }

    #[test]
    fn each_text_is_read_as_its_fields_type() {
        let p = probe(&[("n", "7"), ("on", "true"), ("name", "0"), ("renamed", "9"), ("kind", "sm")]).unwrap();
        assert_eq!(p, Probe { n: 7, on: true, name: Some("0".into()), seed: 9, kind: Some(Kind::Sm) });
        assert_eq!(probe(&[("other", "x")]).unwrap(), Probe::default(), "keys of other groups are passed over");
    }

    #[test]
    fn a_bad_value_is_named_by_its_key_as_serde_words_it() {
        assert_eq!(probe(&[("n", "two")]).unwrap_err(), r#"n = "two": invalid type: string "two", expected u32"#);
        assert_eq!(probe(&[("n", "-1")]).unwrap_err(), r#"n = "-1": invalid type: string "-1", expected u32"#);
        assert_eq!(
            probe(&[("n", "99999999999")]).unwrap_err(),
            r#"n = "99999999999": invalid value: integer `99999999999`, expected u32"#
        );
        assert_eq!(
            probe(&[("kind", "dma")]).unwrap_err(),
            r#"kind = "dma": unknown variant `dma`, expected `ce` or `sm`"#
        );
        assert_eq!(
            probe(&[("on", "yes")]).unwrap_err(),
            r#"on = "yes": invalid type: string "yes", expected a boolean"#
        );
    }
}
