//! An upper bound of a value's size as compact JSON, without writing it: a walk of the
//! value that counts every string as if each of its bytes needed a six-byte escape.
//! Cheap next to serializing (no escaping, no output), so [`crate::round::fits`] only
//! serializes the records whose bound passes the limit.

use serde::Serialize;
use serde::ser;

/// At least as many bytes as `serde_json::to_vec(value)` would produce (`None` when the
/// value does not serialize).
pub(crate) fn json_bound<T: Serialize + ?Sized>(value: &T) -> Option<usize> {
    let mut bound = Bound(0);
    value.serialize(&mut bound).ok()?;
    Some(bound.0)
}

struct Bound(usize);

#[derive(Debug)]
struct Unbounded;

impl std::fmt::Display for Unbounded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the value does not serialize")
    }
}

impl std::error::Error for Unbounded {}

impl ser::Error for Unbounded {
    fn custom<M: std::fmt::Display>(_: M) -> Self {
        Unbounded
    }
}

impl Bound {
    fn add(&mut self, n: usize) -> Result<(), Unbounded> {
        self.0 = self.0.saturating_add(n);
        Ok(())
    }

    /// Quotes, and every byte escaped as `\u00XX` at worst.
    fn string(&mut self, len: usize) -> Result<(), Unbounded> {
        self.add(len.saturating_mul(6).saturating_add(2))
    }
}

/// Integers are at most 20 characters (`-9223372036854775808`), 40 for 128 bits;
/// floats at most 24 (ryu's longest).
const INT: usize = 20;
const FLOAT: usize = 24;

/// The number methods: each adds the longest its type can be written.
macro_rules! numbers {
    ($($method:ident: $ty:ty => $len:expr),* $(,)?) => {$(
        fn $method(self, _: $ty) -> Result<(), Unbounded> {
            self.add($len)
        }
    )*};
}

impl ser::Serializer for &mut Bound {
    type Ok = ();
    type Error = Unbounded;
    type SerializeSeq = Self;
    type SerializeTuple = Self;
    type SerializeTupleStruct = Self;
    type SerializeTupleVariant = Self;
    type SerializeMap = Self;
    type SerializeStruct = Self;
    type SerializeStructVariant = Self;

    fn serialize_bool(self, _: bool) -> Result<(), Unbounded> {
        self.add(5)
    }
    numbers!(
        serialize_i8: i8 => INT, serialize_i16: i16 => INT, serialize_i32: i32 => INT, serialize_i64: i64 => INT,
        serialize_u8: u8 => INT, serialize_u16: u16 => INT, serialize_u32: u32 => INT, serialize_u64: u64 => INT,
        serialize_i128: i128 => 2 * INT, serialize_u128: u128 => 2 * INT,
        serialize_f32: f32 => FLOAT, serialize_f64: f64 => FLOAT
    );
    fn serialize_char(self, c: char) -> Result<(), Unbounded> {
        self.string(c.len_utf8())
    }
    fn serialize_str(self, v: &str) -> Result<(), Unbounded> {
        self.string(v.len())
    }
    /// serde_json writes bytes as an array of numbers.
    fn serialize_bytes(self, v: &[u8]) -> Result<(), Unbounded> {
        self.add(v.len().saturating_mul(4).saturating_add(2))
    }
    fn serialize_none(self) -> Result<(), Unbounded> {
        self.add(4)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Unbounded> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Unbounded> {
        self.add(4)
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Unbounded> {
        self.add(4)
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Result<(), Unbounded> {
        self.string(variant.len())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, value: &T) -> Result<(), Unbounded> {
        value.serialize(self)
    }
    /// `{"variant":value}`
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Unbounded> {
        self.string(variant.len())?;
        self.add(3)?;
        value.serialize(self)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self, Unbounded> {
        self.add(2)?;
        Ok(self)
    }
    fn serialize_tuple(self, _: usize) -> Result<Self, Unbounded> {
        self.serialize_seq(None)
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Self, Unbounded> {
        self.serialize_seq(None)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Self, Unbounded> {
        self.string(variant.len())?;
        self.add(5)?;
        Ok(self)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self, Unbounded> {
        self.add(2)?;
        Ok(self)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self, Unbounded> {
        self.serialize_map(None)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Self, Unbounded> {
        self.string(variant.len())?;
        self.add(5)?;
        Ok(self)
    }
}

/// An element and its comma.
fn element<T: Serialize + ?Sized>(bound: &mut Bound, value: &T) -> Result<(), Unbounded> {
    bound.add(1)?;
    value.serialize(bound)
}

/// A key (quoted even when it is a number), its colon and comma, and the value.
fn field<T: Serialize + ?Sized>(bound: &mut Bound, key: &'static str, value: &T) -> Result<(), Unbounded> {
    bound.string(key.len())?;
    bound.add(2)?;
    value.serialize(bound)
}

/// serde's compound traits: the sequence-like ones count elements, the struct-like ones
/// named fields.
macro_rules! compound {
    (elements: $($trait:ident :: $method:ident),*) => {$(
        impl ser::$trait for &mut Bound {
            type Ok = ();
            type Error = Unbounded;
            fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unbounded> {
                element(self, value)
            }
            fn end(self) -> Result<(), Unbounded> {
                Ok(())
            }
        }
    )*};
    (fields: $($trait:ident),*) => {$(
        impl ser::$trait for &mut Bound {
            type Ok = ();
            type Error = Unbounded;
            fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Result<(), Unbounded> {
                field(self, key, value)
            }
            fn end(self) -> Result<(), Unbounded> {
                Ok(())
            }
        }
    )*};
}

compound!(elements: SerializeSeq::serialize_element, SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field, SerializeTupleVariant::serialize_field);
compound!(fields: SerializeStruct, SerializeStructVariant);

impl ser::SerializeMap for &mut Bound {
    type Ok = ();
    type Error = Unbounded;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Unbounded> {
        // Quotes around numeric keys, the colon and the comma.
        self.add(4)?;
        key.serialize(&mut **self)
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unbounded> {
        value.serialize(&mut **self)
    }
    fn end(self) -> Result<(), Unbounded> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::json_bound;

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
            ".*".prop_map(Value::String),
            "[\\x00-\\x1f\"\\\\]*".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                prop::collection::btree_map(".*", inner, 0..8).prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn the_bound_is_never_below_the_json(value in arb_json()) {
            let exact = serde_json::to_vec(&value).unwrap().len();
            prop_assert!(json_bound(&value).unwrap() >= exact);
        }
    }

    #[test]
    fn typed_values_are_bounded_too() {
        #[derive(serde::Serialize)]
        enum E {
            Unit,
            New(u8),
            Tuple(u8, String),
            Struct { a: Option<i128>, b: Vec<u8> },
        }
        #[derive(serde::Serialize)]
        struct S {
            e: Vec<E>,
            c: char,
            t: (f32, ()),
        }
        let value = S {
            e: vec![E::Unit, E::New(7), E::Tuple(1, "\u{1}x".into()), E::Struct { a: Some(-1), b: vec![255; 3] }],
            c: '"',
            t: (1.5, ()),
        };
        let exact = serde_json::to_vec(&value).unwrap().len();
        assert!(json_bound(&value).unwrap() >= exact, "{exact}");
        assert!(json_bound(&json!("abc")).unwrap() >= 5);
    }
}
