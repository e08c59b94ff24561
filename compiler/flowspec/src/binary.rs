//! The FlowSpec's binary form: a cache of a spec the store keeps beside its canonical JSON,
//! which reads several times faster than the JSON.
//!
//! The JSON stays the spec's one true text: its digest names the spec, `reel sql`'s views read
//! it, and a spec without a binary form is read from it. Reading a spec
//! of tens of thousands of steps was half of a replay's time, most of it serde_json finding
//! member names and scanning strings; borsh reads the same fields in a fixed order. The form
//! is tied to this build's types, named by [`LAYOUT`]: a reader hands back `None` for a cache
//! of another layout (or a damaged one), and the caller reads the JSON instead.

use std::io::{self, Read, Write};

use borsh::{BorshDeserialize, BorshSerialize};

use crate::document::MAX_JSON_DEPTH;
use crate::spec::{Expr, FlowSpec, Node, StepSpec};
use crate::types::{RecordField, Type};

/// The layout of the binary form this build writes and reads. Bump it whenever a type the
/// FlowSpec holds changes (a field added, removed, reordered or retyped; a variant added or
/// moved): the test `the_binary_layout_is_the_one_named` fails until it is bumped.
pub const LAYOUT: u32 = 1;

/// What a binary form begins with: the bytes `reel` and the layout, little-endian.
const MAGIC: &[u8; 4] = b"reel";

impl FlowSpec {
    /// The spec's binary form, for [`FlowSpec::from_binary`] of a build of the same [`LAYOUT`].
    pub fn to_binary(&self) -> Vec<u8> {
        // Room for a step's usual 250 bytes and then some: growing a buffer of megabytes by
        // doubling copied it a dozen times and touched twice its memory.
        let mut out = Vec::with_capacity(4096 + self.steps.len() * BYTES_A_STEP_USUALLY);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&LAYOUT.to_le_bytes());
        self.serialize(&mut out)
            .expect("writing to a Vec cannot fail");
        out
    }

    /// The spec a binary form holds; `None` when it is of another layout or does not read
    /// whole, which the caller answers by reading the spec's JSON.
    pub fn from_binary(bytes: &[u8]) -> Option<FlowSpec> {
        let body = bytes.strip_prefix(MAGIC)?;
        let (layout, mut body) = body.split_first_chunk::<4>()?;
        if u32::from_le_bytes(*layout) != LAYOUT {
            return None;
        }
        let before = BYTES.with(|b| b.replace(body.len()));
        let spec = FlowSpec::deserialize(&mut body);
        BYTES.with(|b| b.set(before));
        body.is_empty().then_some(spec.ok()?)
    }
}

/// A little more than a generated step of the benchmarks takes in the binary form (250 bytes).
const BYTES_A_STEP_USUALLY: usize = 320;

/// The fewest bytes a step of a sealed spec takes in the binary form: its id, spans, retry
/// policy and 64-character semantic digest are always there (a step of a spec not sealed may
/// take fewer; its list then grows as it is read).
const STEP_BYTES_AT_LEAST: usize = 128;

std::thread_local! {
    /// How long the binary form being read on this thread is, to bound the room reserved for
    /// its steps by what it can hold.
    static BYTES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// How deep the expression or type being read nests, so that damaged bytes claiming
    /// endless nesting are an error rather than a stack that grows until memory runs out.
    static DEPTH: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Reads one level of a nested expression or type on enough stack, within the depth the JSON
/// reader allows.
fn nested<T>(read: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    let depth = DEPTH.with(|d| {
        let depth = d.get() + 1;
        d.set(depth);
        depth
    });
    let out = if depth > MAX_JSON_DEPTH {
        Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "the binary FlowSpec nests too deep",
        ))
    } else {
        crate::de::on_enough_stack(read)
    };
    DEPTH.with(|d| d.set(depth - 1));
    out
}

/// Reads a FlowSpec's steps into a list with room for them all: borsh grows a list it reads
/// from a few KiB by doubling (so that a damaged length cannot ask for any memory), which for
/// tens of thousands of steps copied the list a dozen times and touched twice its memory. The
/// room is bounded by how many steps the bytes can hold.
pub(crate) fn steps<R: Read>(r: &mut R) -> io::Result<Vec<StepSpec>> {
    let len = u32::deserialize_reader(r)? as usize;
    let mut steps = Vec::new();
    let _ = steps.try_reserve_exact(len.min(BYTES.with(|b| b.get()) / STEP_BYTES_AT_LEAST));
    for _ in 0..len {
        steps.push(StepSpec::deserialize_reader(r)?);
    }
    Ok(steps)
}

impl BorshSerialize for Expr {
    fn serialize<W: Write>(&self, w: &mut W) -> io::Result<()> {
        crate::de::on_enough_stack(|| {
            self.node.serialize(w)?;
            self.ty.serialize(w)
        })
    }
}

impl BorshDeserialize for Expr {
    fn deserialize_reader<R: Read>(r: &mut R) -> io::Result<Self> {
        nested(|| {
            let node = Node::deserialize_reader(r)?;
            let ty = Type::deserialize_reader(r)?;
            Ok(Expr { node, ty })
        })
    }
}

impl BorshSerialize for Type {
    fn serialize<W: Write>(&self, w: &mut W) -> io::Result<()> {
        crate::de::on_enough_stack(|| {
            let tag: u8 = match self {
                Type::String => 0,
                Type::Int => 1,
                Type::Float => 2,
                Type::Bool => 3,
                Type::Duration => 4,
                Type::Json => 5,
                Type::Secret => 6,
                Type::Null => 7,
                Type::List { .. } => 8,
                Type::Record { .. } => 9,
                Type::Optional { .. } => 10,
                Type::Error => 11,
            };
            tag.serialize(w)?;
            match self {
                Type::List { item } => item.serialize(w),
                Type::Record { fields } => fields.serialize(w),
                Type::Optional { inner } => inner.serialize(w),
                _ => Ok(()),
            }
        })
    }
}

impl BorshDeserialize for Type {
    fn deserialize_reader<R: Read>(r: &mut R) -> io::Result<Self> {
        nested(|| {
            Ok(match u8::deserialize_reader(r)? {
                0 => Type::String,
                1 => Type::Int,
                2 => Type::Float,
                3 => Type::Bool,
                4 => Type::Duration,
                5 => Type::Json,
                6 => Type::Secret,
                7 => Type::Null,
                8 => Type::List {
                    item: Box::new(Type::deserialize_reader(r)?),
                },
                9 => Type::Record {
                    fields: Vec::<RecordField>::deserialize_reader(r)?,
                },
                10 => Type::Optional {
                    inner: Box::new(Type::deserialize_reader(r)?),
                },
                11 => Type::Error,
                tag => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("no type has the tag {tag}"),
                    ));
                }
            })
        })
    }
}

/// A literal JSON value as its JSON text: values are few and short beside the expressions, and
/// `serde_json::Value` has no binary form of its own.
pub(crate) mod json {
    use std::io::{self, Read, Write};

    use borsh::{BorshDeserialize, BorshSerialize};
    use serde_json::Value;

    /// Writes the value's JSON text.
    pub(crate) fn serialize<W: Write>(value: &Value, w: &mut W) -> io::Result<()> {
        value.to_string().serialize(w)
    }

    /// Reads a value from its JSON text.
    pub(crate) fn deserialize<R: Read>(r: &mut R) -> io::Result<Value> {
        let text = String::deserialize_reader(r)?;
        serde_json::from_str(&text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }
}

/// An optional literal JSON value, as [`json`] writes one after a presence byte.
pub(crate) mod optional_json {
    use std::io::{self, Read, Write};

    use borsh::{BorshDeserialize, BorshSerialize};
    use serde_json::Value;

    /// Writes whether there is a value, then its JSON text.
    pub(crate) fn serialize<W: Write>(value: &Option<Value>, w: &mut W) -> io::Result<()> {
        value.is_some().serialize(w)?;
        value
            .as_ref()
            .map_or(Ok(()), |v| super::json::serialize(v, w))
    }

    /// Reads what [`serialize`] wrote.
    pub(crate) fn deserialize<R: Read>(r: &mut R) -> io::Result<Option<Value>> {
        if bool::deserialize_reader(r)? {
            super::json::deserialize(r).map(Some)
        } else {
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::sha256_hex;
    use crate::sample::sample_spec;

    #[test]
    fn a_spec_reads_back_from_its_binary_form_as_it_was() {
        let mut spec = sample_spec();
        spec.seal();
        let bytes = spec.to_binary();
        assert_eq!(FlowSpec::from_binary(&bytes), Some(spec.clone()));
        // And its JSON from the spec read back is the same text, digest and all.
        let again = FlowSpec::from_binary(&bytes).unwrap();
        assert_eq!(again.to_json(), spec.to_json());
        assert!(again.verify_digest());
    }

    /// The sample holds every expression node, every type, a user tool, retry, timeout,
    /// `when`, `foreach` and an output: a change to how any of them is laid out changes its
    /// bytes. When this fails, bump [`LAYOUT`] and write the new digest here, so that a build
    /// never takes a form another build laid out differently for its own.
    #[test]
    fn the_binary_layout_is_the_one_named() {
        let bytes = sample_spec().to_binary();
        assert_eq!(
            (LAYOUT, sha256_hex(&bytes).as_str()),
            (
                1,
                "d112590124cdaf934a7d79a339907b00c746a17cb81dedba97ac7cef3996c355"
            ),
            "the binary form of the sample changed: bump binary::LAYOUT"
        );
    }

    #[test]
    fn a_form_of_another_layout_or_not_a_form_is_none() {
        let bytes = sample_spec().to_binary();
        let mut other = bytes.clone();
        other[4..8].copy_from_slice(&(LAYOUT + 1).to_le_bytes());
        assert_eq!(FlowSpec::from_binary(&other), None);
        assert_eq!(
            FlowSpec::from_binary(b"{\"format\":\"reel.flowspec\"}"),
            None
        );
        assert_eq!(FlowSpec::from_binary(b""), None);
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(FlowSpec::from_binary(&longer), None, "a byte too many");
    }

    #[test]
    fn damaged_bytes_read_as_none_or_a_spec_never_a_panic() {
        let bytes = sample_spec().to_binary();
        for cut in 0..bytes.len() {
            assert_eq!(FlowSpec::from_binary(&bytes[..cut]), None, "cut at {cut}");
        }
        for at in 8..bytes.len() {
            for flip in [0x01, 0x80, 0xff] {
                let mut damaged = bytes.clone();
                damaged[at] ^= flip;
                let _ = FlowSpec::from_binary(&damaged);
            }
        }
    }

    #[test]
    fn bytes_claiming_endless_nesting_are_an_error_not_a_stack_overflow() {
        // `list<list<…>>` a million levels deep (8 is the tag of `list`).
        let types = vec![8u8; 1_000_000];
        assert!(borsh::from_slice::<Type>(&types).is_err());
        // `!!!…` a million levels deep (14 is the variant of `unary`, 0 the operator `not`).
        let exprs: Vec<u8> = std::iter::repeat_n([14u8, 0], 1_000_000)
            .flatten()
            .collect();
        assert!(borsh::from_slice::<Expr>(&exprs).is_err());
        // As deep as the JSON reader allows still reads.
        let mut ok = vec![8u8; MAX_JSON_DEPTH - 1];
        ok.push(1);
        assert!(borsh::from_slice::<Type>(&ok).is_ok());
    }
}
