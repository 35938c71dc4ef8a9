//! [`Json`] → a typed value: a self-describing deserializer over the tree, objects visited in their order (what
//! serde_json's `Value` deserializer does, for these objects).

use super::{Error, Fields, Json};
use serde::de::value::{MapAccessDeserializer, MapDeserializer, SeqDeserializer, StringDeserializer};
use serde::de::{self, IntoDeserializer, Visitor};
use serde::forward_to_deserialize_any;

impl<'de> IntoDeserializer<'de, Error> for Json {
    type Deserializer = Json;

    fn into_deserializer(self) -> Json {
        self
    }
}

fn object<'de, V: Visitor<'de>>(fields: Fields, visitor: V) -> Result<V::Value, Error> {
    let mut map = MapDeserializer::new(fields.0.into_iter());
    let value = visitor.visit_map(&mut map)?;
    map.end()?;
    Ok(value)
}

impl<'de> de::Deserializer<'de> for Json {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            Json::Null => visitor.visit_unit(),
            Json::Bool(b) => visitor.visit_bool(b),
            Json::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
                (Some(u), _, _) => visitor.visit_u64(u),
                (None, Some(i), _) => visitor.visit_i64(i),
                (None, None, Some(f)) => visitor.visit_f64(f),
                (None, None, None) => Err(Error(format!("unreadable number {n}"))),
            },
            Json::String(s) => visitor.visit_string(s),
            Json::Array(items) => {
                let mut seq = SeqDeserializer::new(items.into_iter());
                let value = visitor.visit_seq(&mut seq)?;
                seq.end()?;
                Ok(value)
            }
            Json::Object(fields) => object(fields, visitor),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            Json::Null => visitor.visit_none(),
            other => visitor.visit_some(other),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(self, _name: &'static str, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    /// A unit variant is its name; a variant with data is `{name: data}` (serde's external tagging, as serde_json).
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self {
            Json::String(s) => visitor.visit_enum(StringDeserializer::<Error>::new(s)),
            Json::Object(fields) if fields.0.len() == 1 => {
                visitor.visit_enum(MapAccessDeserializer::new(MapDeserializer::new(fields.0.into_iter())))
            }
            other => Err(Error(format!("expected an enum variant, got {other:?}"))),
        }
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf unit unit_struct seq
        tuple tuple_struct map struct identifier ignored_any
    }
}
