//! Hand-written readers for the two tagged shapes of the FlowSpec: expressions (tagged by `op`)
//! and types (tagged by `type`).
//!
//! serde's derive reads an internally tagged enum by first buffering the whole object into its
//! private `Content` tree (the tag may come last, as it does in canonical JSON), and `Expr`'s
//! `#[serde(flatten)]` buffered it once more and cloned it; on a large spec that was most of
//! the reading time and several times the text's size in memory. Here every member name has one
//! type whatever the tag (`cond` is an expression in `if` and in `for`, `name` always a string),
//! so members are read straight into their final types, in any order, and the node is built
//! when the object ends. The JSON accepted is the derive's: unknown members are skipped, a
//! repeated member or a missing one is an error naming it, and the writer (still derived) is
//! untouched, so emitted text and digests are unchanged.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;

use crate::spec::{BinaryOp, Expr, Node, RecordEntry, StepSpec, UnaryOp};
use crate::types::{RecordField, Type};

/// Fills an empty slot from the map's next value; a second occurrence is an error, as with the
/// derive.
macro_rules! fill {
    ($map:ident, $slot:expr, $name:literal) => {{
        if $slot.is_some() {
            return Err(de::Error::duplicate_field($name));
        }
        $slot = Some($map.next_value()?);
    }};
}

/// Runs one level of the recursive reader or writer, on a fresh stack segment when the current
/// one is nearly used up. Reading and writing cost several KiB of stack per level in a debug
/// build, more than any other pass over an expression, and a spec may nest up to
/// [`MAX_JSON_DEPTH`](crate::MAX_JSON_DEPTH) levels; the runtime and the language server read
/// and digest specs on 2 MiB worker stacks.
pub(crate) fn on_enough_stack<R>(level: impl FnOnce() -> R) -> R {
    stacker::maybe_grow(64 * 1024, 1024 * 1024, level)
}

/// A required member, or the derive's "missing field" error.
fn need<T, E: de::Error>(slot: Option<T>, name: &'static str) -> Result<T, E> {
    slot.ok_or_else(|| E::missing_field(name))
}

/// A closed set of names (node kinds, operators, member keys), read from a JSON string or key.
trait Names: Sized + Copy + 'static {
    /// Every name, for "unknown variant" errors.
    const ALL: &'static [&'static str];
    /// What a value of the set is, for "invalid type" errors.
    const WHAT: &'static str;
    /// The element named `name`.
    fn from_name(name: &str) -> Option<Self>;
    /// The element's name.
    fn name(self) -> &'static str;
}

/// Defines an enum of names and its [`Names`] and `Deserialize` impls. Reading goes through
/// `deserialize_identifier`, so serde_json hands over the text without allocating.
macro_rules! names {
    ($(#[$doc:meta])* $ty:ident, $what:literal, { $($text:literal => $var:ident),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        enum $ty { $($var),* }

        impl Names for $ty {
            const ALL: &'static [&'static str] = &[$($text),*];
            const WHAT: &'static str = $what;
            fn from_name(name: &str) -> Option<Self> {
                match name {
                    $($text => Some($ty::$var),)*
                    _ => None,
                }
            }
            fn name(self) -> &'static str {
                match self {
                    $($ty::$var => $text,)*
                }
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_identifier(NameVisitor::<$ty>(PhantomData))
            }
        }
    };
}

/// Reads one of the names of `N`; another name is an "unknown variant" error.
struct NameVisitor<N>(PhantomData<N>);

impl<N: Names> Visitor<'_> for NameVisitor<N> {
    type Value = N;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(N::WHAT)
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<N, E> {
        N::from_name(s).ok_or_else(|| E::unknown_variant(s, N::ALL))
    }
}

names!(
    /// The node kinds, the values of `op`.
    Op, "an expression's `op`", {
        "lit" => Lit, "interp" => Interp, "list" => List, "record" => Record,
        "input" => Input, "env" => Env, "secret" => Secret, "step" => Step, "item" => Item,
        "index" => Index, "var" => Var, "member" => Member, "at" => At, "call" => Call,
        "unary" => Unary, "binary" => Binary, "if" => If, "for" => For,
    }
);

names!(
    /// The values of `operator`, unary and binary together: the two sets share no name, so the
    /// operator can be read before `op` says which set it must come from.
    Operator, "an operator", {
        "not" => Not, "neg" => Neg,
        "or" => Or, "and" => And, "eq" => Eq, "ne" => Ne, "lt" => Lt, "le" => Le, "gt" => Gt,
        "ge" => Ge, "coalesce" => Coalesce, "add" => Add, "sub" => Sub, "mul" => Mul,
        "div" => Div, "rem" => Rem,
    }
);

names!(
    /// Every member an expression object can have, whatever its `op`.
    ExprKey, "an expression member", {
        "op" => Op, "type" => Type, "value" => Value, "parts" => Parts, "items" => Items,
        "fields" => Fields, "name" => Name, "base" => Base, "index" => Index, "func" => Func,
        "args" => Args, "operator" => Operator, "expr" => Expr, "lhs" => Lhs, "rhs" => Rhs,
        "cond" => Cond, "then" => Then, "otherwise" => Otherwise, "var" => Var, "iter" => Iter,
        "body" => Body, "optional" => Optional,
    }
);

names!(
    /// The type kinds, the values of a type's `type`.
    TypeTag, "a type's `type`", {
        "string" => String, "int" => Int, "float" => Float, "bool" => Bool,
        "duration" => Duration, "json" => Json, "secret" => Secret, "null" => Null,
        "list" => List, "record" => Record, "optional" => Optional, "error" => Error,
    }
);

names!(
    /// Every member a type object can have.
    TypeKey, "a type member", {
        "type" => Type, "item" => Item, "fields" => Fields, "inner" => Inner,
    }
);

/// A member key: one of `K`, or `None` for any other name, whose value is skipped (as the
/// derive skips unknown members).
struct Key<K>(Option<K>);

impl<'de, K: Names> Deserialize<'de> for Key<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<K>(PhantomData<K>);
        impl<K: Names> Visitor<'_> for V<K> {
            type Value = Key<K>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Key<K>, E> {
                Ok(Key(K::from_name(s)))
            }
        }
        d.deserialize_identifier(V(PhantomData))
    }
}

/// The members of one expression object as they arrive, before `op` decides which are used.
#[derive(Default)]
struct ExprMembers {
    op: Option<Op>,
    ty: Option<Type>,
    value: Option<Value>,
    parts: Option<Vec<Expr>>,
    items: Option<Vec<Expr>>,
    fields: Option<Vec<RecordEntry>>,
    name: Option<String>,
    base: Option<Box<Expr>>,
    index: Option<Box<Expr>>,
    func: Option<String>,
    args: Option<Vec<Expr>>,
    operator: Option<Operator>,
    expr: Option<Box<Expr>>,
    lhs: Option<Box<Expr>>,
    rhs: Option<Box<Expr>>,
    /// Outer `Some`: the member is present; inner `None`: it is `null` (allowed for `for`).
    cond: Option<Option<Box<Expr>>>,
    then: Option<Box<Expr>>,
    otherwise: Option<Box<Expr>>,
    var: Option<String>,
    iter: Option<Box<Expr>>,
    body: Option<Box<Expr>>,
    optional: Option<bool>,
}

impl ExprMembers {
    fn read<'de, A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
        let mut m = ExprMembers::default();
        while let Some(Key(key)) = map.next_key::<Key<ExprKey>>()? {
            match key {
                Some(ExprKey::Op) => fill!(map, m.op, "op"),
                Some(ExprKey::Type) => fill!(map, m.ty, "type"),
                Some(ExprKey::Value) => fill!(map, m.value, "value"),
                Some(ExprKey::Parts) => fill!(map, m.parts, "parts"),
                Some(ExprKey::Items) => fill!(map, m.items, "items"),
                Some(ExprKey::Fields) => fill!(map, m.fields, "fields"),
                Some(ExprKey::Name) => fill!(map, m.name, "name"),
                Some(ExprKey::Base) => fill!(map, m.base, "base"),
                Some(ExprKey::Index) => fill!(map, m.index, "index"),
                Some(ExprKey::Func) => fill!(map, m.func, "func"),
                Some(ExprKey::Args) => fill!(map, m.args, "args"),
                Some(ExprKey::Operator) => fill!(map, m.operator, "operator"),
                Some(ExprKey::Expr) => fill!(map, m.expr, "expr"),
                Some(ExprKey::Lhs) => fill!(map, m.lhs, "lhs"),
                Some(ExprKey::Rhs) => fill!(map, m.rhs, "rhs"),
                Some(ExprKey::Cond) => fill!(map, m.cond, "cond"),
                Some(ExprKey::Then) => fill!(map, m.then, "then"),
                Some(ExprKey::Otherwise) => fill!(map, m.otherwise, "otherwise"),
                Some(ExprKey::Var) => fill!(map, m.var, "var"),
                Some(ExprKey::Iter) => fill!(map, m.iter, "iter"),
                Some(ExprKey::Body) => fill!(map, m.body, "body"),
                Some(ExprKey::Optional) => fill!(map, m.optional, "optional"),
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(m)
    }

    /// The node `op` names, from the members it has.
    fn node<E: de::Error>(self) -> Result<Node, E> {
        let op = need(self.op, "op")?;
        Ok(match op {
            Op::Lit => Node::Lit {
                value: need(self.value, "value")?,
            },
            Op::Interp => Node::Interp {
                parts: need(self.parts, "parts")?,
            },
            Op::List => Node::List {
                items: need(self.items, "items")?,
            },
            Op::Record => Node::Record {
                fields: need(self.fields, "fields")?,
            },
            Op::Input => Node::Input {
                name: need(self.name, "name")?,
            },
            Op::Env => Node::Env {
                name: need(self.name, "name")?,
            },
            Op::Secret => Node::Secret {
                name: need(self.name, "name")?,
            },
            Op::Step => Node::Step {
                name: need(self.name, "name")?,
            },
            Op::Item => Node::Item,
            Op::Index => Node::Index,
            Op::Var => Node::Var {
                name: need(self.name, "name")?,
            },
            Op::Member => Node::Member {
                base: need(self.base, "base")?,
                name: need(self.name, "name")?,
                optional: need(self.optional, "optional")?,
            },
            Op::At => Node::At {
                base: need(self.base, "base")?,
                index: need(self.index, "index")?,
            },
            Op::Call => Node::Call {
                func: need(self.func, "func")?,
                args: need(self.args, "args")?,
            },
            Op::Unary => Node::Unary {
                op: unary(need(self.operator, "operator")?)?,
                expr: need(self.expr, "expr")?,
            },
            Op::Binary => Node::Binary {
                op: binary(need(self.operator, "operator")?)?,
                lhs: need(self.lhs, "lhs")?,
                rhs: need(self.rhs, "rhs")?,
            },
            Op::If => Node::If {
                cond: need(self.cond, "cond")?.ok_or_else(|| {
                    E::invalid_type(de::Unexpected::Unit, &"an expression (`if` needs a `cond`)")
                })?,
                then: need(self.then, "then")?,
                otherwise: need(self.otherwise, "otherwise")?,
            },
            Op::For => Node::For {
                var: need(self.var, "var")?,
                iter: need(self.iter, "iter")?,
                cond: self.cond.flatten(),
                body: need(self.body, "body")?,
            },
        })
    }
}

/// `operator` of a `unary` node.
fn unary<E: de::Error>(op: Operator) -> Result<UnaryOp, E> {
    match op {
        Operator::Not => Ok(UnaryOp::Not),
        Operator::Neg => Ok(UnaryOp::Neg),
        other => Err(E::unknown_variant(other.name(), &Operator::ALL[..2])),
    }
}

/// `operator` of a `binary` node.
fn binary<E: de::Error>(op: Operator) -> Result<BinaryOp, E> {
    Ok(match op {
        Operator::Not | Operator::Neg => {
            return Err(E::unknown_variant(op.name(), &Operator::ALL[2..]));
        }
        Operator::Or => BinaryOp::Or,
        Operator::And => BinaryOp::And,
        Operator::Eq => BinaryOp::Eq,
        Operator::Ne => BinaryOp::Ne,
        Operator::Lt => BinaryOp::Lt,
        Operator::Le => BinaryOp::Le,
        Operator::Gt => BinaryOp::Gt,
        Operator::Ge => BinaryOp::Ge,
        Operator::Coalesce => BinaryOp::Coalesce,
        Operator::Add => BinaryOp::Add,
        Operator::Sub => BinaryOp::Sub,
        Operator::Mul => BinaryOp::Mul,
        Operator::Div => BinaryOp::Div,
        Operator::Rem => BinaryOp::Rem,
    })
}

impl<'de> Deserialize<'de> for Expr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Expr;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an expression (an object with `op` and `type`)")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Expr, A::Error> {
                let mut members = ExprMembers::read(map)?;
                let ty = members.ty.take();
                let node = members.node()?;
                // Version 2 leaves out the type of a nested literal: its elements imply it.
                let ty = match ty {
                    Some(ty) => ty,
                    None if crate::spec::holds_literals(&node) => {
                        need(crate::spec::implied_type(&node), "type")?
                    }
                    None => return Err(de::Error::missing_field("type")),
                };
                Ok(Expr::new(node, ty))
            }
        }
        on_enough_stack(|| d.deserialize_map(V))
    }
}

impl<'de> Deserialize<'de> for Node {
    /// A node alone: the members of an expression, `type` optional and ignored.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Node;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an expression node (an object with `op`)")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Node, A::Error> {
                ExprMembers::read(map)?.node()
            }
        }
        d.deserialize_map(V)
    }
}

impl<'de> Deserialize<'de> for Type {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Type;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a type (an object with `type`)")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Type, A::Error> {
                let mut tag: Option<TypeTag> = None;
                let mut item: Option<Box<Type>> = None;
                let mut fields: Option<Vec<RecordField>> = None;
                let mut inner: Option<Box<Type>> = None;
                while let Some(Key(key)) = map.next_key::<Key<TypeKey>>()? {
                    match key {
                        Some(TypeKey::Type) => fill!(map, tag, "type"),
                        Some(TypeKey::Item) => fill!(map, item, "item"),
                        Some(TypeKey::Fields) => fill!(map, fields, "fields"),
                        Some(TypeKey::Inner) => fill!(map, inner, "inner"),
                        None => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(match need(tag, "type")? {
                    TypeTag::String => Type::String,
                    TypeTag::Int => Type::Int,
                    TypeTag::Float => Type::Float,
                    TypeTag::Bool => Type::Bool,
                    TypeTag::Duration => Type::Duration,
                    TypeTag::Json => Type::Json,
                    TypeTag::Secret => Type::Secret,
                    TypeTag::Null => Type::Null,
                    TypeTag::Error => Type::Error,
                    TypeTag::List => Type::List {
                        item: need(item, "item")?,
                    },
                    TypeTag::Record => Type::Record {
                        fields: need(fields, "fields")?,
                    },
                    TypeTag::Optional => Type::Optional {
                        inner: need(inner, "inner")?,
                    },
                })
            }
        }
        on_enough_stack(|| d.deserialize_map(V))
    }
}

/// The fewest bytes a step takes in a FlowSpec's JSON: a one-argument `echo` step with
/// one-letter names is about 460 (its spans, retry policy and semantic digest are always
/// there), a pure step a little less.
const STEP_BYTES_AT_LEAST: usize = 384;

thread_local! {
    /// How many steps the FlowSpec being read on this thread may hold at most, from its text's
    /// length (see [`reading_text_of`]); 0 when none is being read.
    static STEPS_AT_MOST: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Runs `read` (a FlowSpec's reading from a text of `len` bytes) with room for its steps
/// reserved when the list of steps begins. serde's reader of a list grows it by doubling, since
/// JSON does not say how long a list is: for a flow of tens of thousands of steps (each about
/// half a KiB in memory) that copied the list a dozen times and touched twice its memory, a
/// tenth of reading the spec. The reservation may be larger than the list: room never written
/// is address space, not memory.
pub(crate) fn reading_text_of<R>(len: usize, read: impl FnOnce() -> R) -> R {
    let before = STEPS_AT_MOST.with(|c| c.replace(len / STEP_BYTES_AT_LEAST));
    let result = read();
    STEPS_AT_MOST.with(|c| c.set(before));
    result
}

/// Reads the `steps` of a FlowSpec into a list with the room [`reading_text_of`] set aside
/// (taken once: the one list of steps of the spec being read).
pub(crate) fn steps<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<StepSpec>, D::Error> {
    struct Steps;
    impl<'de> Visitor<'de> for Steps {
        type Value = Vec<StepSpec>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a list of steps")
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<StepSpec>, A::Error> {
            let room = STEPS_AT_MOST.with(|c| c.replace(0));
            let mut steps = Vec::new();
            // Room that cannot be had (a huge text where address space is scarce) is not an
            // error: the list grows as it would have.
            let _ = steps.try_reserve_exact(room);
            while let Some(step) = seq.next_element()? {
                steps.push(step);
            }
            Ok(steps)
        }
    }
    d.deserialize_seq(Steps)
}

#[cfg(test)]
mod tests;
