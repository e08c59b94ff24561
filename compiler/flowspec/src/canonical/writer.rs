//! The canonical text written straight from any `Serialize`, without a `serde_json::Value` in
//! between.
//!
//! Building a `Value` of a whole FlowSpec (a `BTreeMap` per object, a `String` per key) and then
//! canonicalising it (a buffer per key and per value, each key parsed back to sort it) cost
//! `reel build` several times what checking the flow cost, and as much memory again as the spec.
//! This writer appends to one buffer: an object's members are written where they come, each
//! member's place noted, and only an object whose members did not come in order is rewritten,
//! in order, from a copy of its own text.
//!
//! What it writes is what `canonical_json(&serde_json::to_value(x))` wrote: keys sorted by their
//! UTF-16 code units, strings escaped as RFC 8785 (JSON.stringify) does, floats in RFC 8785's
//! shortest form (`ryu_js`), a non-finite float as `null` (as `to_value` made it), and integers
//! with all their digits (RFC 8785's form up to 2^53, exact beyond; see `canonical_json`).
//! Map keys may be strings, chars, integers or booleans (written as strings, as `to_value` did);
//! any other key is an error. A struct that names one member twice (which no type here does)
//! would be written twice, where `to_value` kept the last.

use std::cmp::Ordering;

use serde::Serialize;
use serde::ser::{self, Error as _, Impossible};
use serde_json::Value;

/// The error of a value without a canonical form (a map key that is not a string).
type Error = serde_json::Error;

/// The canonical text of `value`; `skip` leaves out the top-level object's member of that name
/// (the spec's digest is of the spec without its `digest`).
pub(crate) fn write<T: Serialize + ?Sized>(
    value: &T,
    skip: Option<&'static str>,
) -> Result<String, Error> {
    let mut w = Writer {
        out: Vec::with_capacity(256),
        frames: Vec::new(),
        pool: Vec::new(),
        scratch: Vec::new(),
        skip,
    };
    value.serialize(&mut w)?;
    // Only whole strings, ASCII punctuation and number digits are written.
    String::from_utf8(w.out).map_err(Error::custom)
}

/// The canonical text of a JSON value, walked directly: what [`write`] writes of it, without a
/// name allocated per member or a frame per object (a run digests every call's inputs and
/// every step's output). A `Value`'s object is a `BTreeMap`, already in byte order, which is
/// RFC 8785's order when the keys are ASCII; an object with other keys is sorted.
pub(crate) fn write_value(value: &Value) -> String {
    let mut out = Vec::with_capacity(64);
    walk(&mut out, value);
    // Only whole strings, ASCII punctuation and number digits are written.
    String::from_utf8(out).expect("canonical text is UTF-8")
}

fn walk(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                out.extend_from_slice(itoa::Buffer::new().format(u).as_bytes());
            } else if let Some(i) = n.as_i64() {
                out.extend_from_slice(itoa::Buffer::new().format(i).as_bytes());
            } else {
                float(out, n.as_f64().unwrap_or(f64::NAN));
            }
        }
        Value::String(s) => write_str(out, s),
        Value::Array(items) => crate::de::on_enough_stack(|| {
            out.push(b'[');
            for (n, item) in items.iter().enumerate() {
                if n > 0 {
                    out.push(b',');
                }
                walk(out, item);
            }
            out.push(b']');
        }),
        Value::Object(map) => crate::de::on_enough_stack(|| {
            out.push(b'{');
            let member = |out: &mut Vec<u8>, n: usize, key: &str, item: &Value| {
                if n > 0 {
                    out.push(b',');
                }
                write_str(out, key);
                out.push(b':');
                walk(out, item);
            };
            if map.keys().all(|k| k.is_ascii()) {
                for (n, (key, item)) in map.iter().enumerate() {
                    member(out, n, key, item);
                }
            } else {
                let mut members: Vec<_> = map.iter().collect();
                members.sort_by(|a, b| key_order(a.0, b.0));
                for (n, (key, item)) in members.into_iter().enumerate() {
                    member(out, n, key, item);
                }
            }
            out.push(b'}');
        }),
    }
}

/// Writes `f` in RFC 8785's shortest form; a non-finite float as `null`, as `to_value` made it.
fn float(out: &mut Vec<u8>, f: f64) {
    if f.is_finite() {
        out.extend_from_slice(ryu_js::Buffer::new().format_finite(f).as_bytes());
    } else {
        out.extend_from_slice(b"null");
    }
}

/// A member's name: the struct fields' are static, a map's are owned.
enum Key {
    Static(&'static str),
    Owned(String),
}

impl Key {
    fn as_str(&self) -> &str {
        match self {
            Key::Static(s) => s,
            Key::Owned(s) => s,
        }
    }
}

/// RFC 8785's order of member names: by UTF-16 code units (byte order is the same for ASCII).
fn key_order(a: &str, b: &str) -> Ordering {
    if a.is_ascii() && b.is_ascii() {
        a.cmp(b)
    } else {
        a.encode_utf16().cmp(b.encode_utf16())
    }
}

/// One member written: its name and where its `"name":value` text lies in the buffer.
struct Entry {
    key: Key,
    start: usize,
    end: usize,
}

/// An object being written.
struct Frame {
    /// Where its first member starts (just after `{`).
    start: usize,
    entries: Vec<Entry>,
    /// A map's key, between `serialize_key` and `serialize_value`.
    key: Option<Key>,
    /// Whether this is the top-level object, whose `skip` member is left out.
    top: bool,
}

struct Writer {
    out: Vec<u8>,
    frames: Vec<Frame>,
    /// Entry lists of finished objects, reused.
    pool: Vec<Vec<Entry>>,
    /// The copy an object out of order is rewritten from, reused.
    scratch: Vec<u8>,
    skip: Option<&'static str>,
}

impl Writer {
    fn begin_object(&mut self) {
        self.out.push(b'{');
        let top = self.frames.is_empty() && self.out.len() == 1;
        self.frames.push(Frame {
            start: self.out.len(),
            entries: self.pool.pop().unwrap_or_default(),
            key: None,
            top,
        });
    }

    fn member<T: Serialize + ?Sized>(&mut self, key: Key, value: &T) -> Result<(), Error> {
        let frame = self
            .frames
            .last_mut()
            .expect("a member is written inside an object");
        if frame.top && self.skip == Some(key.as_str()) {
            return Ok(());
        }
        if !frame.entries.is_empty() {
            self.out.push(b',');
        }
        let start = self.out.len();
        write_str(&mut self.out, key.as_str());
        self.out.push(b':');
        value.serialize(&mut *self)?;
        let end = self.out.len();
        let frame = self.frames.last_mut().expect("the object is still open");
        frame.entries.push(Entry { key, start, end });
        Ok(())
    }

    fn end_object(&mut self) {
        let Frame {
            start, mut entries, ..
        } = self.frames.pop().expect("an object to end");
        let sorted = entries
            .windows(2)
            .all(|w| key_order(w[0].key.as_str(), w[1].key.as_str()) == Ordering::Less);
        if !sorted {
            // Members came out of order: rewrite them in order from a copy of the object's text.
            let mut scratch = std::mem::take(&mut self.scratch);
            scratch.clear();
            scratch.extend_from_slice(&self.out[start..]);
            self.out.truncate(start);
            entries.sort_by(|a, b| key_order(a.key.as_str(), b.key.as_str()));
            for (n, e) in entries.iter().enumerate() {
                if n > 0 {
                    self.out.push(b',');
                }
                self.out
                    .extend_from_slice(&scratch[e.start - start..e.end - start]);
            }
            self.scratch = scratch;
        }
        self.out.push(b'}');
        entries.clear();
        self.pool.push(entries);
    }

    fn integer(&mut self, n: impl itoa::Integer) {
        self.out
            .extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    }

    fn float(&mut self, f: f64) {
        float(&mut self.out, f);
    }
}

/// Writes `s` as an RFC 8785 string: `"` and `\` escaped, control characters as `\b \t \n \f
/// \r` or `\u00xx` (lowercase hex), everything else as it is.
fn write_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut run = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            0x0c => b"\\f",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x00..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[run..i]);
        run = i + 1;
        if escape.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.extend_from_slice(b"\\u00");
            out.push(HEX[(b >> 4) as usize]);
            out.push(HEX[(b & 0xf) as usize]);
        } else {
            out.extend_from_slice(escape);
        }
    }
    out.extend_from_slice(&bytes[run..]);
    out.push(b'"');
}

/// An array, or an object being written (`Compound::Object` for structs and maps).
enum Compound<'a> {
    Array {
        w: &'a mut Writer,
        first: bool,
    },
    Object {
        w: &'a mut Writer,
    },
    /// A variant wrapped in a one-member object (`{"variant": …}`): closed twice.
    Variant {
        w: &'a mut Writer,
        first: bool,
    },
}

impl Compound<'_> {
    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        match self {
            Compound::Array { w, first } | Compound::Variant { w, first } => {
                if !*first {
                    w.out.push(b',');
                }
                *first = false;
                value.serialize(&mut **w)
            }
            Compound::Object { .. } => Err(Error::custom("an element inside an object")),
        }
    }

    fn field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Result<(), Error> {
        match self {
            Compound::Object { w } => w.member(Key::Static(key), value),
            Compound::Array { .. } | Compound::Variant { .. } => {
                Err(Error::custom("a field outside an object"))
            }
        }
    }

    fn w(&mut self) -> &mut Writer {
        match self {
            Compound::Array { w, .. } | Compound::Object { w } | Compound::Variant { w, .. } => w,
        }
    }
}

impl<'a> ser::Serializer for &'a mut Writer {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Compound<'a>;
    type SerializeTuple = Compound<'a>;
    type SerializeTupleStruct = Compound<'a>;
    type SerializeTupleVariant = Compound<'a>;
    type SerializeMap = Compound<'a>;
    type SerializeStruct = Compound<'a>;
    type SerializeStructVariant = Compound<'a>;

    fn serialize_bool(self, v: bool) -> Result<(), Error> {
        self.out
            .extend_from_slice(if v { b"true" } else { b"false" });
        Ok(())
    }
    fn serialize_i8(self, v: i8) -> Result<(), Error> {
        self.integer(v);
        Ok(())
    }
    fn serialize_i16(self, v: i16) -> Result<(), Error> {
        self.integer(v);
        Ok(())
    }
    fn serialize_i32(self, v: i32) -> Result<(), Error> {
        self.integer(v);
        Ok(())
    }
    fn serialize_i64(self, v: i64) -> Result<(), Error> {
        self.integer(v);
        Ok(())
    }
    fn serialize_i128(self, v: i128) -> Result<(), Error> {
        // `to_value` held only what fits 64 bits.
        if i64::try_from(v).is_err() && u64::try_from(v).is_err() {
            return Err(Error::custom("number out of range"));
        }
        self.integer(v);
        Ok(())
    }
    fn serialize_u8(self, v: u8) -> Result<(), Error> {
        self.integer(v);
        Ok(())
    }
    fn serialize_u16(self, v: u16) -> Result<(), Error> {
        self.integer(v);
        Ok(())
    }
    fn serialize_u32(self, v: u32) -> Result<(), Error> {
        self.integer(v);
        Ok(())
    }
    fn serialize_u64(self, v: u64) -> Result<(), Error> {
        self.integer(v);
        Ok(())
    }
    fn serialize_u128(self, v: u128) -> Result<(), Error> {
        if u64::try_from(v).is_err() {
            return Err(Error::custom("number out of range"));
        }
        self.integer(v);
        Ok(())
    }
    fn serialize_f32(self, v: f32) -> Result<(), Error> {
        self.float(f64::from(v));
        Ok(())
    }
    fn serialize_f64(self, v: f64) -> Result<(), Error> {
        self.float(v);
        Ok(())
    }
    fn serialize_char(self, v: char) -> Result<(), Error> {
        write_str(&mut self.out, v.encode_utf8(&mut [0; 4]));
        Ok(())
    }
    fn serialize_str(self, v: &str) -> Result<(), Error> {
        write_str(&mut self.out, v);
        Ok(())
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<(), Error> {
        // As serde_json: an array of numbers.
        let mut seq = ser::Serializer::serialize_seq(self, Some(v.len()))?;
        for b in v {
            ser::SerializeSeq::serialize_element(&mut seq, b)?;
        }
        ser::SerializeSeq::end(seq)
    }
    fn serialize_none(self) -> Result<(), Error> {
        self.out.extend_from_slice(b"null");
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Error> {
        self.serialize_none()
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Error> {
        self.serialize_none()
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<(), Error> {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        self.begin_object();
        self.member(Key::Static(variant), value)?;
        self.end_object();
        Ok(())
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Compound<'a>, Error> {
        self.out.push(b'[');
        Ok(Compound::Array {
            w: self,
            first: true,
        })
    }
    fn serialize_tuple(self, len: usize) -> Result<Compound<'a>, Error> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(self, _: &'static str, len: usize) -> Result<Compound<'a>, Error> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Compound<'a>, Error> {
        // `{"variant":[` … `]}`: one member, so already in order.
        self.out.push(b'{');
        write_str(&mut self.out, variant);
        self.out.extend_from_slice(b":[");
        Ok(Compound::Variant {
            w: self,
            first: true,
        })
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Compound<'a>, Error> {
        self.begin_object();
        Ok(Compound::Object { w: self })
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Compound<'a>, Error> {
        self.serialize_map(None)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Compound<'a>, Error> {
        // `{"variant":{` … `}}`: the outer object has one member, so it is in order.
        self.out.push(b'{');
        write_str(&mut self.out, variant);
        self.out.push(b':');
        self.frames.push(Frame {
            start: self.out.len() + 1,
            entries: self.pool.pop().unwrap_or_default(),
            key: None,
            top: false,
        });
        self.out.push(b'{');
        Ok(Compound::Object { w: self })
    }
}

impl ser::SerializeSeq for Compound<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        self.element(value)
    }
    fn end(self) -> Result<(), Error> {
        match self {
            Compound::Array { w, .. } => {
                w.out.push(b']');
                Ok(())
            }
            Compound::Variant { w, .. } => {
                w.out.extend_from_slice(b"]}");
                Ok(())
            }
            Compound::Object { .. } => Err(Error::custom("an object ended as an array")),
        }
    }
}

impl ser::SerializeTuple for Compound<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        self.element(value)
    }
    fn end(self) -> Result<(), Error> {
        ser::SerializeSeq::end(self)
    }
}

impl ser::SerializeTupleStruct for Compound<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        self.element(value)
    }
    fn end(self) -> Result<(), Error> {
        ser::SerializeSeq::end(self)
    }
}

impl ser::SerializeTupleVariant for Compound<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        self.element(value)
    }
    fn end(self) -> Result<(), Error> {
        ser::SerializeSeq::end(self)
    }
}

impl ser::SerializeMap for Compound<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Error> {
        let key = key.serialize(KeyWriter)?;
        let w = self.w();
        let frame = w.frames.last_mut().expect("a map is an open object");
        frame.key = Some(Key::Owned(key));
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        let w = self.w();
        let frame = w.frames.last_mut().expect("a map is an open object");
        let key = frame
            .key
            .take()
            .ok_or_else(|| Error::custom("a map value without its key"))?;
        w.member(key, value)
    }
    fn end(mut self) -> Result<(), Error> {
        self.w().end_object();
        Ok(())
    }
}

impl ser::SerializeStruct for Compound<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        self.field(key, value)
    }
    fn end(mut self) -> Result<(), Error> {
        self.w().end_object();
        Ok(())
    }
}

impl ser::SerializeStructVariant for Compound<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        self.field(key, value)
    }
    fn end(mut self) -> Result<(), Error> {
        let w = self.w();
        w.end_object();
        w.out.push(b'}');
        Ok(())
    }
}

/// A map key as its text: strings and chars as they are, integers and booleans as their
/// digits or words (as `to_value` keyed them); anything else has no canonical form.
struct KeyWriter;

fn not_a_key<T>() -> Result<T, Error> {
    Err(Error::custom("key must be a string"))
}

impl ser::Serializer for KeyWriter {
    type Ok = String;
    type Error = Error;
    type SerializeSeq = Impossible<String, Error>;
    type SerializeTuple = Impossible<String, Error>;
    type SerializeTupleStruct = Impossible<String, Error>;
    type SerializeTupleVariant = Impossible<String, Error>;
    type SerializeMap = Impossible<String, Error>;
    type SerializeStruct = Impossible<String, Error>;
    type SerializeStructVariant = Impossible<String, Error>;

    fn serialize_bool(self, v: bool) -> Result<String, Error> {
        Ok(v.to_string())
    }
    fn serialize_i8(self, v: i8) -> Result<String, Error> {
        Ok(v.to_string())
    }
    fn serialize_i16(self, v: i16) -> Result<String, Error> {
        Ok(v.to_string())
    }
    fn serialize_i32(self, v: i32) -> Result<String, Error> {
        Ok(v.to_string())
    }
    fn serialize_i64(self, v: i64) -> Result<String, Error> {
        Ok(v.to_string())
    }
    fn serialize_u8(self, v: u8) -> Result<String, Error> {
        Ok(v.to_string())
    }
    fn serialize_u16(self, v: u16) -> Result<String, Error> {
        Ok(v.to_string())
    }
    fn serialize_u32(self, v: u32) -> Result<String, Error> {
        Ok(v.to_string())
    }
    fn serialize_u64(self, v: u64) -> Result<String, Error> {
        Ok(v.to_string())
    }
    fn serialize_f32(self, _: f32) -> Result<String, Error> {
        not_a_key()
    }
    fn serialize_f64(self, _: f64) -> Result<String, Error> {
        not_a_key()
    }
    fn serialize_char(self, v: char) -> Result<String, Error> {
        Ok(v.to_string())
    }
    fn serialize_str(self, v: &str) -> Result<String, Error> {
        Ok(v.to_string())
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<String, Error> {
        not_a_key()
    }
    fn serialize_none(self) -> Result<String, Error> {
        not_a_key()
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result<String, Error> {
        not_a_key()
    }
    fn serialize_unit(self) -> Result<String, Error> {
        not_a_key()
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<String, Error> {
        not_a_key()
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<String, Error> {
        Ok(variant.to_string())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<String, Error> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<String, Error> {
        not_a_key()
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, Error> {
        not_a_key()
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, Error> {
        not_a_key()
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, Error> {
        not_a_key()
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, Error> {
        not_a_key()
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, Error> {
        not_a_key()
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct, Error> {
        not_a_key()
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, Error> {
        not_a_key()
    }
}
