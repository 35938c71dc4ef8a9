//! A typed value → [`Json`], field by field in the order its type serializes them (serde_json's `to_value`, but
//! into objects that keep their order).

use super::{Error, Fields, Json};
use serde::ser::{self, Serialize};

pub(super) struct JsonSerializer;

/// An array being built (sequences, tuples), and under which variant name when it is a tuple variant's.
pub(super) struct SeqBuilder {
    items: Vec<Json>,
    variant: Option<&'static str>,
}

/// An object being built (maps, structs), and under which variant name when it is a struct variant's.
pub(super) struct MapBuilder {
    fields: Fields,
    key: Option<String>,
    variant: Option<&'static str>,
}

/// `{variant: value}`, as serde_json writes an externally tagged variant with data.
fn tagged(variant: Option<&'static str>, value: Json) -> Json {
    match variant {
        None => value,
        Some(name) => Json::Object(Fields(vec![(name.to_string(), value)])),
    }
}

impl ser::Serializer for JsonSerializer {
    type Ok = Json;
    type Error = Error;
    type SerializeSeq = SeqBuilder;
    type SerializeTuple = SeqBuilder;
    type SerializeTupleStruct = SeqBuilder;
    type SerializeTupleVariant = SeqBuilder;
    type SerializeMap = MapBuilder;
    type SerializeStruct = MapBuilder;
    type SerializeStructVariant = MapBuilder;

    fn serialize_bool(self, v: bool) -> Result<Json, Error> {
        Ok(Json::Bool(v))
    }
    fn serialize_i8(self, v: i8) -> Result<Json, Error> {
        self.serialize_i64(v.into())
    }
    fn serialize_i16(self, v: i16) -> Result<Json, Error> {
        self.serialize_i64(v.into())
    }
    fn serialize_i32(self, v: i32) -> Result<Json, Error> {
        self.serialize_i64(v.into())
    }
    fn serialize_i64(self, v: i64) -> Result<Json, Error> {
        Ok(Json::Number(v.into()))
    }
    fn serialize_u8(self, v: u8) -> Result<Json, Error> {
        self.serialize_u64(v.into())
    }
    fn serialize_u16(self, v: u16) -> Result<Json, Error> {
        self.serialize_u64(v.into())
    }
    fn serialize_u32(self, v: u32) -> Result<Json, Error> {
        self.serialize_u64(v.into())
    }
    fn serialize_u64(self, v: u64) -> Result<Json, Error> {
        Ok(Json::Number(v.into()))
    }
    fn serialize_f32(self, v: f32) -> Result<Json, Error> {
        // As serde_json writes an f32: its own shortest digits, not those of the f64 it widens to.
        Ok(serde_json::Number::from_f64(v.to_string().parse().unwrap_or(f64::NAN)).map_or(Json::Null, Json::Number))
    }
    fn serialize_f64(self, v: f64) -> Result<Json, Error> {
        Ok(Json::float(v))
    }
    fn serialize_char(self, v: char) -> Result<Json, Error> {
        Ok(Json::String(v.to_string()))
    }
    fn serialize_str(self, v: &str) -> Result<Json, Error> {
        Ok(Json::String(v.to_string()))
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<Json, Error> {
        Ok(Json::Array(v.iter().map(|&b| Json::Number(b.into())).collect()))
    }
    fn serialize_none(self) -> Result<Json, Error> {
        Ok(Json::Null)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<Json, Error> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<Json, Error> {
        Ok(Json::Null)
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<Json, Error> {
        Ok(Json::Null)
    }
    fn serialize_unit_variant(self, _name: &'static str, _index: u32, variant: &'static str) -> Result<Json, Error> {
        Ok(Json::String(variant.to_string()))
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _name: &'static str, value: &T) -> Result<Json, Error> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<Json, Error> {
        Ok(tagged(Some(variant), value.serialize(self)?))
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<SeqBuilder, Error> {
        Ok(SeqBuilder { items: Vec::with_capacity(len.unwrap_or(0)), variant: None })
    }
    fn serialize_tuple(self, len: usize) -> Result<SeqBuilder, Error> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(self, _name: &'static str, len: usize) -> Result<SeqBuilder, Error> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<SeqBuilder, Error> {
        Ok(SeqBuilder { items: Vec::with_capacity(len), variant: Some(variant) })
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<MapBuilder, Error> {
        Ok(MapBuilder { fields: Fields::new(), key: None, variant: None })
    }
    fn serialize_struct(self, _name: &'static str, len: usize) -> Result<MapBuilder, Error> {
        self.serialize_map(Some(len))
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<MapBuilder, Error> {
        Ok(MapBuilder { fields: Fields::new(), key: None, variant: Some(variant) })
    }
}

impl SeqBuilder {
    fn push<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        self.items.push(value.serialize(JsonSerializer)?);
        Ok(())
    }

    fn done(self) -> Result<Json, Error> {
        Ok(tagged(self.variant, Json::Array(self.items)))
    }
}

macro_rules! seq_like {
    ($($trait:ident :: $method:ident),*) => {$(
        impl ser::$trait for SeqBuilder {
            type Ok = Json;
            type Error = Error;
            fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
                self.push(value)
            }
            fn end(self) -> Result<Json, Error> {
                self.done()
            }
        }
    )*};
}

seq_like!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

/// A map key as serde_json writes it: a string, or a number or bool in its text.
fn key_text(key: Json) -> Result<String, Error> {
    match key {
        Json::String(s) => Ok(s),
        Json::Number(n) => Ok(n.to_string()),
        Json::Bool(b) => Ok(b.to_string()),
        other => Err(Error(format!("a map key must be a string, not {other:?}"))),
    }
}

impl MapBuilder {
    fn field<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) -> Result<(), Error> {
        self.fields.0.push((key.to_string(), value.serialize(JsonSerializer)?));
        Ok(())
    }

    fn done(self) -> Result<Json, Error> {
        Ok(tagged(self.variant, Json::Object(self.fields)))
    }
}

impl ser::SerializeMap for MapBuilder {
    type Ok = Json;
    type Error = Error;

    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Error> {
        self.key = Some(key_text(key.serialize(JsonSerializer)?)?);
        Ok(())
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        let key = self.key.take().ok_or_else(|| Error("a map value without its key".into()))?;
        self.field(&key, value)
    }

    fn end(self) -> Result<Json, Error> {
        self.done()
    }
}

macro_rules! struct_like {
    ($($trait:ident),*) => {$(
        impl ser::$trait for MapBuilder {
            type Ok = Json;
            type Error = Error;
            fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Result<(), Error> {
                self.field(key, value)
            }
            fn end(self) -> Result<Json, Error> {
                self.done()
            }
        }
    )*};
}

struct_like!(SerializeStruct, SerializeStructVariant);
