//! Builders of typed expression trees for tests, standing in for the parser.
//!
//! Nodes are typed `json` unless the builder says otherwise: the evaluator only reads node
//! types to tell durations and floats apart, and tests that care use [`typed`].

use reel_flowspec::{BinaryOp, Expr, Node, RecordEntry, Type, UnaryOp};
use serde_json::{Value, json};

/// `e` with its type replaced.
pub fn typed(mut e: Expr, ty: Type) -> Expr {
    e.ty = ty;
    e
}

fn j(node: Node) -> Expr {
    Expr::new(node, Type::Json)
}

/// A literal, typed from its value.
pub fn lit(value: Value) -> Expr {
    let ty = match &value {
        Value::Null => Type::Null,
        Value::Bool(_) => Type::Bool,
        Value::Number(n) if n.is_f64() => Type::Float,
        Value::Number(_) => Type::Int,
        Value::String(_) => Type::String,
        _ => Type::Json,
    };
    Expr::new(Node::Lit { value }, ty)
}

/// An int literal.
pub fn int(i: i64) -> Expr {
    lit(json!(i))
}

/// A float literal.
pub fn float(f: f64) -> Expr {
    lit(json!(f))
}

/// A string literal.
pub fn s(text: &str) -> Expr {
    lit(json!(text))
}

/// A bool literal.
pub fn boolean(b: bool) -> Expr {
    lit(json!(b))
}

/// `null`
pub fn null() -> Expr {
    lit(Value::Null)
}

/// A duration literal.
pub fn dur(text: &str) -> Expr {
    Expr::new(Node::Lit { value: json!(text) }, Type::Duration)
}

/// `"…${…}…"`
pub fn interp(parts: Vec<Expr>) -> Expr {
    Expr::new(Node::Interp { parts }, Type::String)
}

/// `[a, b]`
pub fn list(items: Vec<Expr>) -> Expr {
    j(Node::List { items })
}

/// `{ name: value }`
pub fn record(fields: Vec<(&str, Expr)>) -> Expr {
    j(Node::Record {
        fields: fields
            .into_iter()
            .map(|(name, value)| RecordEntry {
                name: name.into(),
                value,
            })
            .collect(),
    })
}

/// `input.NAME`
pub fn input(name: &str) -> Expr {
    j(Node::Input { name: name.into() })
}

/// `env.NAME`
pub fn env(name: &str) -> Expr {
    j(Node::Env { name: name.into() })
}

/// `secret.NAME`
pub fn secret(name: &str) -> Expr {
    Expr::new(Node::Secret { name: name.into() }, Type::Secret)
}

/// A step's value.
pub fn step(name: &str) -> Expr {
    j(Node::Step { name: name.into() })
}

/// `item`
pub fn item() -> Expr {
    j(Node::Item)
}

/// `index`
pub fn index() -> Expr {
    Expr::new(Node::Index, Type::Int)
}

/// A comprehension variable.
pub fn var(name: &str) -> Expr {
    j(Node::Var { name: name.into() })
}

/// `base.name`
pub fn member(base: Expr, name: &str) -> Expr {
    j(Node::Member {
        base: Box::new(base),
        name: name.into(),
        optional: false,
    })
}

/// `base?.name`
pub fn opt_member(base: Expr, name: &str) -> Expr {
    j(Node::Member {
        base: Box::new(base),
        name: name.into(),
        optional: true,
    })
}

/// `base[index]`
pub fn at(base: Expr, index: Expr) -> Expr {
    j(Node::At {
        base: Box::new(base),
        index: Box::new(index),
    })
}

/// `func(args)`
pub fn call(func: &str, args: Vec<Expr>) -> Expr {
    j(Node::Call {
        func: func.into(),
        args,
    })
}

/// `op e`
pub fn unary(op: UnaryOp, e: Expr) -> Expr {
    j(Node::Unary {
        op,
        expr: Box::new(e),
    })
}

/// `lhs op rhs`
pub fn bin(op: BinaryOp, lhs: Expr, rhs: Expr) -> Expr {
    j(Node::Binary {
        op,
        lhs: Box::new(lhs),
        rhs: Box::new(rhs),
    })
}

/// `if cond then a else b`
pub fn if_(cond: Expr, then: Expr, otherwise: Expr) -> Expr {
    j(Node::If {
        cond: Box::new(cond),
        then: Box::new(then),
        otherwise: Box::new(otherwise),
    })
}

/// `[for var in iter if cond: body]`
pub fn comp(var: &str, iter: Expr, cond: Option<Expr>, body: Expr) -> Expr {
    j(Node::For {
        var: var.into(),
        iter: Box::new(iter),
        cond: cond.map(Box::new),
        body: Box::new(body),
    })
}
