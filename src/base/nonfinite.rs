//! Finds the floats JSON cannot hold (NaN, ±infinity) in a value about to be recorded.
//! `serde_json` writes them as `null`, which reads back as something else or not at all, so a
//! replay would see another value than the first run did; `codec::encode` refuses them instead.
//!
//! A serializer that writes nothing: it walks the value and stops at the first such float.
//! It must never be used to produce output.

use std::fmt;

use serde::ser::{self, Serialize};

/// True when `value` holds a NaN or infinite float anywhere (or fails to serialize).
pub(crate) fn holds_non_finite<T: Serialize + ?Sized>(value: &T) -> bool {
    value.serialize(Finder).is_err()
}

struct Finder;

/// The walk stopped: a non-finite float (or the value's own serialization error).
#[derive(Debug)]
struct Found;

impl fmt::Display for Found {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a non-finite float")
    }
}

impl std::error::Error for Found {}

impl ser::Error for Found {
    fn custom<M: fmt::Display>(_: M) -> Self {
        Found
    }
}

fn float(v: f64) -> Result<(), Found> {
    if v.is_finite() {
        Ok(())
    } else {
        Err(Found)
    }
}

macro_rules! ignore {
    ($($name:ident: $ty:ty),*) => {$(
        fn $name(self, _: $ty) -> Result<(), Found> {
            Ok(())
        }
    )*};
}

impl ser::Serializer for Finder {
    type Ok = ();
    type Error = Found;
    type SerializeSeq = Finder;
    type SerializeTuple = Finder;
    type SerializeTupleStruct = Finder;
    type SerializeTupleVariant = Finder;
    type SerializeMap = Finder;
    type SerializeStruct = Finder;
    type SerializeStructVariant = Finder;

    ignore!(serialize_bool: bool, serialize_i8: i8, serialize_i16: i16, serialize_i32: i32,
        serialize_i64: i64, serialize_i128: i128, serialize_u8: u8, serialize_u16: u16,
        serialize_u32: u32, serialize_u64: u64, serialize_u128: u128, serialize_char: char,
        serialize_str: &str, serialize_bytes: &[u8], serialize_unit_struct: &'static str);

    fn serialize_f32(self, v: f32) -> Result<(), Found> {
        float(f64::from(v))
    }
    fn serialize_f64(self, v: f64) -> Result<(), Found> {
        float(v)
    }
    fn serialize_none(self) -> Result<(), Found> {
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Result<(), Found> {
        v.serialize(Finder)
    }
    fn serialize_unit(self) -> Result<(), Found> {
        Ok(())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Result<(), Found> {
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<(), Found> {
        v.serialize(Finder)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        v: &T,
    ) -> Result<(), Found> {
        v.serialize(Finder)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Finder, Found> {
        Ok(Finder)
    }
    fn serialize_tuple(self, _: usize) -> Result<Finder, Found> {
        Ok(Finder)
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Finder, Found> {
        Ok(Finder)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Finder, Found> {
        Ok(Finder)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Finder, Found> {
        Ok(Finder)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Finder, Found> {
        Ok(Finder)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Finder, Found> {
        Ok(Finder)
    }
}

macro_rules! compound {
    ($($trait:ident :: $method:ident),*) => {$(
        impl ser::$trait for Finder {
            type Ok = ();
            type Error = Found;
            fn $method<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Found> {
                v.serialize(Finder)
            }
            fn end(self) -> Result<(), Found> {
                Ok(())
            }
        }
    )*};
}

compound!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

impl ser::SerializeMap for Finder {
    type Ok = ();
    type Error = Found;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, k: &T) -> Result<(), Found> {
        k.serialize(Finder)
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Found> {
        v.serialize(Finder)
    }
    fn end(self) -> Result<(), Found> {
        Ok(())
    }
}

macro_rules! fields {
    ($($trait:ident),*) => {$(
        impl ser::$trait for Finder {
            type Ok = ();
            type Error = Found;
            fn serialize_field<T: Serialize + ?Sized>(
                &mut self,
                _: &'static str,
                v: &T,
            ) -> Result<(), Found> {
                v.serialize(Finder)
            }
            fn end(self) -> Result<(), Found> {
                Ok(())
            }
        }
    )*};
}

fields!(SerializeStruct, SerializeStructVariant);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_non_finite_floats_anywhere() {
        assert!(holds_non_finite(&f64::NAN));
        assert!(holds_non_finite(&Some(f32::INFINITY)));
        assert!(holds_non_finite(&vec![(1, f64::NEG_INFINITY)]));
        let map: std::collections::HashMap<&str, f64> = [("x", f64::NAN)].into();
        assert!(holds_non_finite(&map));
        assert!(!holds_non_finite(&(1.5, None::<f64>, "null", ())));
    }
}
