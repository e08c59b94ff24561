//! Reel's types as the FlowSpec writes them, with the subtyping rules that checker and runtime share.

use borsh::{BorshDeserialize, BorshSerialize};
use serde::{Deserialize, Serialize};

/// A Reel type, written as an object tagged by `type` (by the `Serialize` below) and read by
/// the hand-written reader in `de.rs`, which streams the tagged object instead of buffering it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Type {
    /// `string`
    String,
    /// `int`
    Int,
    /// `float`
    Float,
    /// `bool`
    Bool,
    /// `duration`, written in JSON as its literal text (`"250ms"`).
    Duration,
    /// `json`: any JSON value, checked when used.
    Json,
    /// `secret`: only ever the whole value of a `secret` parameter.
    Secret,
    /// The type of `null` alone.
    Null,
    /// `list<T>`
    List {
        /// The element type.
        item: Box<Type>,
    },
    /// `{ name: T, … }`
    Record {
        /// The fields in declaration order.
        fields: Vec<RecordField>,
    },
    /// `T?`
    Optional {
        /// The type when not null.
        inner: Box<Type>,
    },
    /// The type of an expression that already failed to check; accepted everywhere so one mistake
    /// gives one diagnostic. Never emitted in a FlowSpec of a flow that checked clean.
    Error,
}

impl Serialize for Type {
    /// The shape serde's derive wrote for the tagged enum (`type` first, then the members), one
    /// level at a time on enough stack: types nest as deep as the values they describe.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        crate::de::on_enough_stack(|| {
            let mut map = s.serialize_map(None)?;
            let tag = match self {
                Type::String => "string",
                Type::Int => "int",
                Type::Float => "float",
                Type::Bool => "bool",
                Type::Duration => "duration",
                Type::Json => "json",
                Type::Secret => "secret",
                Type::Null => "null",
                Type::List { .. } => "list",
                Type::Record { .. } => "record",
                Type::Optional { .. } => "optional",
                Type::Error => "error",
            };
            map.serialize_entry("type", tag)?;
            match self {
                Type::List { item } => map.serialize_entry("item", item)?,
                Type::Record { fields } => map.serialize_entry("fields", fields)?,
                Type::Optional { inner } => map.serialize_entry("inner", inner)?,
                _ => {}
            }
            map.end()
        })
    }
}

/// One field of a record type.
#[derive(
    Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, BorshSerialize, BorshDeserialize,
)]
pub struct RecordField {
    /// The field's name.
    pub name: String,
    /// The field's type; `T?` fields may be absent.
    #[serde(rename = "of")]
    pub ty: Type,
}

impl Type {
    /// `list<item>`
    pub fn list(item: Type) -> Type {
        Type::List {
            item: Box::new(item),
        }
    }

    /// `inner?` (an optional of an optional, `json`, `null` or an error stays as it is).
    pub fn optional(inner: Type) -> Type {
        match inner {
            Type::Optional { .. } | Type::Json | Type::Null | Type::Error => inner,
            other => Type::Optional {
                inner: Box::new(other),
            },
        }
    }

    /// A record type from `(name, type)` pairs.
    pub fn record(fields: impl IntoIterator<Item = (String, Type)>) -> Type {
        Type::Record {
            fields: fields
                .into_iter()
                .map(|(name, ty)| RecordField { name, ty })
                .collect(),
        }
    }

    /// Whether `null` is a value of this type.
    pub fn is_nullable(&self) -> bool {
        matches!(
            self,
            Type::Optional { .. } | Type::Json | Type::Null | Type::Error
        )
    }

    /// Whether a secret can be found anywhere inside this type.
    pub fn contains_secret(&self) -> bool {
        match self {
            Type::Secret => true,
            Type::List { item } => item.contains_secret(),
            Type::Optional { inner } => inner.contains_secret(),
            Type::Record { fields } => fields.iter().any(|f| f.ty.contains_secret()),
            _ => false,
        }
    }

    /// The type without its optional wrapper.
    pub fn strip_optional(&self) -> &Type {
        match self {
            Type::Optional { inner } => inner,
            other => other,
        }
    }

    /// The field `name` of a record type.
    pub fn field(&self, name: &str) -> Option<&Type> {
        match self {
            Type::Record { fields } => fields.iter().find(|f| f.name == name).map(|f| &f.ty),
            _ => None,
        }
    }

    /// Whether a value of type `self` is accepted where `expected` is required.
    ///
    /// `json` goes both ways (checked at run time), `int` is accepted for `float`, `null` and `T`
    /// for `T?`, and records are accepted when every required field of `expected` is present
    /// with an accepted type (extra fields are allowed; optional fields may be missing).
    pub fn is_assignable_to(&self, expected: &Type) -> bool {
        use Type::*;
        match (self, expected) {
            (Error, _) | (_, Error) => true,
            (Secret, Secret) => true,
            (Secret, _) | (_, Secret) => false,
            (Json, _) | (_, Json) => true,
            (Null, Optional { .. }) => true,
            (Optional { inner: a }, Optional { inner: b }) => a.is_assignable_to(b),
            (Optional { .. }, _) => false,
            (a, Optional { inner }) => a.is_assignable_to(inner),
            (Int, Float) => true,
            (List { item: a }, List { item: b }) => a.is_assignable_to(b),
            (Record { fields: have }, Record { fields: want }) => {
                want.iter()
                    .all(|w| match have.iter().find(|h| h.name == w.name) {
                        Some(h) => h.ty.is_assignable_to(&w.ty),
                        None => w.ty.is_nullable(),
                    })
            }
            (a, b) => a == b,
        }
    }

    /// The smallest type both `a` and `b` are assignable to, if there is one short of `json`.
    pub fn join(a: &Type, b: &Type) -> Option<Type> {
        use Type::*;
        match (a, b) {
            (Error, x) | (x, Error) => Some(x.clone()),
            _ if a == b => Some(a.clone()),
            (Null, x) | (x, Null) => Some(Type::optional(x.clone())),
            (Optional { inner }, x) | (x, Optional { inner }) => {
                Type::join(inner, x).map(Type::optional)
            }
            (Int, Float) | (Float, Int) => Some(Float),
            (List { item: x }, List { item: y }) => Type::join(x, y).map(Type::list),
            (Record { fields: fa }, Record { fields: fb }) => {
                let mut fields = Vec::new();
                for f in fa {
                    match fb.iter().find(|g| g.name == f.name) {
                        Some(g) => fields.push(RecordField {
                            name: f.name.clone(),
                            ty: Type::join(&f.ty, &g.ty)?,
                        }),
                        None => fields.push(RecordField {
                            name: f.name.clone(),
                            ty: Type::optional(f.ty.clone()),
                        }),
                    }
                }
                for g in fb {
                    if !fa.iter().any(|f| f.name == g.name) {
                        fields.push(RecordField {
                            name: g.name.clone(),
                            ty: Type::optional(g.ty.clone()),
                        });
                    }
                }
                Some(Record { fields })
            }
            _ => None,
        }
    }
}

impl std::fmt::Display for Type {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Type::String => f.write_str("string"),
            Type::Int => f.write_str("int"),
            Type::Float => f.write_str("float"),
            Type::Bool => f.write_str("bool"),
            Type::Duration => f.write_str("duration"),
            Type::Json => f.write_str("json"),
            Type::Secret => f.write_str("secret"),
            Type::Null => f.write_str("null"),
            Type::Error => f.write_str("{unknown}"),
            Type::List { item } => write!(f, "list<{item}>"),
            Type::Optional { inner } => write!(f, "{inner}?"),
            Type::Record { fields } => {
                f.write_str("{ ")?;
                for (i, field) in fields.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{}: {}", field.name, field.ty)?;
                }
                f.write_str(" }")
            }
        }
    }
}
