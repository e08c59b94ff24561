//! The hand-written readers against the derive they replace: same values from the same JSON,
//! in any member order, and the same documents refused, with errors that name the member.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::sample::sample_spec;
use crate::spec::{BinaryOp, Expr, FlowSpec, Node, RecordEntry, UnaryOp};
use crate::types::{RecordField, Type};

/// The reader as it was: serde's derive over an internally tagged enum, flattened. Kept here as
/// the reference the new reader must agree with.
mod derived {
    use serde::{Deserialize, Serialize};
    use serde_json::Value;

    use crate::spec::{BinaryOp, UnaryOp};

    #[derive(Serialize, Deserialize)]
    pub struct Expr {
        #[serde(flatten)]
        node: Node,
        #[serde(rename = "type")]
        ty: Type,
    }

    #[derive(Serialize, Deserialize)]
    #[serde(tag = "op", rename_all = "snake_case")]
    pub enum Node {
        Lit {
            value: Value,
        },
        Interp {
            parts: Vec<Expr>,
        },
        List {
            items: Vec<Expr>,
        },
        Record {
            fields: Vec<RecordEntry>,
        },
        Input {
            name: String,
        },
        Env {
            name: String,
        },
        Secret {
            name: String,
        },
        Step {
            name: String,
        },
        Item,
        Index,
        Var {
            name: String,
        },
        Member {
            base: Box<Expr>,
            name: String,
            optional: bool,
        },
        At {
            base: Box<Expr>,
            index: Box<Expr>,
        },
        Call {
            func: String,
            args: Vec<Expr>,
        },
        Unary {
            #[serde(rename = "operator")]
            op: UnaryOp,
            expr: Box<Expr>,
        },
        Binary {
            #[serde(rename = "operator")]
            op: BinaryOp,
            lhs: Box<Expr>,
            rhs: Box<Expr>,
        },
        If {
            cond: Box<Expr>,
            then: Box<Expr>,
            otherwise: Box<Expr>,
        },
        For {
            var: String,
            iter: Box<Expr>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            cond: Option<Box<Expr>>,
            body: Box<Expr>,
        },
    }

    #[derive(Serialize, Deserialize)]
    pub struct RecordEntry {
        name: String,
        value: Expr,
    }

    #[derive(Serialize, Deserialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    pub enum Type {
        String,
        Int,
        Float,
        Bool,
        Duration,
        Json,
        Secret,
        Null,
        List { item: Box<Type> },
        Record { fields: Vec<RecordField> },
        Optional { inner: Box<Type> },
        Error,
    }

    #[derive(Serialize, Deserialize)]
    pub struct RecordField {
        name: String,
        #[serde(rename = "of")]
        ty: Type,
    }
}

/// `T` read from `text`, written back as a value; or the error.
fn read<'a, T: Deserialize<'a> + Serialize>(text: &'a str) -> Result<Value, String> {
    serde_json::from_str::<T>(text)
        .map(|t| serde_json::to_value(t).unwrap_or_default())
        .map_err(|e| e.to_string())
}

/// `value` as JSON text with every object's members in reverse order of their keys, so that
/// tags come after the members they decide (canonical order already puts `lhs` before `op`).
fn reversed(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let members: Vec<String> = map
                .iter()
                .rev()
                .map(|(k, v)| format!("{}:{}", Value::String(k.clone()), reversed(v)))
                .collect();
            format!("{{{}}}", members.join(","))
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(reversed).collect();
            format!("[{}]", items.join(","))
        }
        other => other.to_string(),
    }
}

fn t(ty: Type) -> Type {
    ty
}

fn ex(node: Node, ty: Type) -> Expr {
    Expr::new(node, ty)
}

fn int(n: i64) -> Expr {
    ex(Node::Lit { value: json!(n) }, Type::Int)
}

fn b(e: Expr) -> Box<Expr> {
    Box::new(e)
}

/// One expression of every node kind (and `for` with and without its filter).
fn every_node() -> Vec<Expr> {
    let s = |name: &str| ex(Node::Step { name: name.into() }, Type::Json);
    vec![
        ex(
            Node::Lit {
                value: json!({ "a": [1, 2.5, null, "x\"y"], "b": true }),
            },
            Type::Json,
        ),
        ex(
            Node::Interp {
                parts: vec![ex(Node::Lit { value: json!("n=") }, Type::String), int(1)],
            },
            Type::String,
        ),
        ex(
            Node::List {
                items: vec![int(1), int(2)],
            },
            Type::list(Type::Int),
        ),
        ex(
            Node::Record {
                fields: vec![RecordEntry {
                    name: "k".into(),
                    value: int(3),
                }],
            },
            Type::record([("k".to_owned(), Type::Int)]),
        ),
        ex(Node::Input { name: "i".into() }, Type::String),
        ex(
            Node::Env {
                name: "HOME".into(),
            },
            Type::String,
        ),
        ex(Node::Secret { name: "tok".into() }, Type::Secret),
        s("fetch"),
        ex(Node::Item, Type::Json),
        ex(Node::Index, Type::Int),
        ex(Node::Var { name: "x".into() }, Type::Json),
        ex(
            Node::Member {
                base: b(s("fetch")),
                name: "body".into(),
                optional: true,
            },
            Type::Json,
        ),
        ex(
            Node::At {
                base: b(s("xs")),
                index: b(int(0)),
            },
            Type::Json,
        ),
        ex(
            Node::Call {
                func: "len".into(),
                args: vec![s("xs")],
            },
            Type::Int,
        ),
        ex(
            Node::Unary {
                op: UnaryOp::Neg,
                expr: b(int(4)),
            },
            Type::Int,
        ),
        ex(
            Node::Binary {
                op: BinaryOp::Coalesce,
                lhs: b(s("a")),
                rhs: b(int(5)),
            },
            Type::Json,
        ),
        ex(
            Node::If {
                cond: b(ex(Node::Lit { value: json!(true) }, Type::Bool)),
                then: b(int(1)),
                otherwise: b(ex(Node::Lit { value: Value::Null }, Type::Null)),
            },
            Type::optional(Type::Int),
        ),
        ex(
            Node::For {
                var: "x".into(),
                iter: b(s("xs")),
                cond: Some(b(ex(
                    Node::Unary {
                        op: UnaryOp::Not,
                        expr: b(ex(Node::Var { name: "x".into() }, Type::Bool)),
                    },
                    Type::Bool,
                ))),
                body: b(ex(Node::Var { name: "x".into() }, Type::Json)),
            },
            Type::list(Type::Json),
        ),
        ex(
            Node::For {
                var: "x".into(),
                iter: b(s("xs")),
                cond: None,
                body: b(int(1)),
            },
            Type::list(Type::Int),
        ),
    ]
}

/// One type of every kind.
fn every_type() -> Vec<Type> {
    vec![
        Type::String,
        Type::Int,
        Type::Float,
        Type::Bool,
        Type::Duration,
        Type::Json,
        Type::Secret,
        Type::Null,
        Type::Error,
        Type::list(Type::list(Type::Int)),
        Type::record([
            ("a".to_owned(), Type::optional(Type::String)),
            ("b".to_owned(), t(Type::record([]))),
        ]),
        Type::Optional {
            inner: Box::new(Type::list(Type::Json)),
        },
    ]
}

#[test]
fn every_node_kind_reads_back_in_any_member_order() {
    let mut ops = Vec::new();
    for e in every_node() {
        let value = serde_json::to_value(&e).unwrap_or_default();
        ops.push(value["op"].as_str().unwrap_or_default().to_owned());
        let texts = [
            serde_json::to_string(&e).unwrap_or_default(),
            serde_json::to_string_pretty(&e).unwrap_or_default(),
            value.to_string(),
            reversed(&value),
            crate::canonical::canonical_json(&value),
        ];
        for text in &texts {
            let back: Result<Expr, String> = serde_json::from_str(text).map_err(|e| e.to_string());
            assert_eq!(back.as_ref(), Ok(&e), "{text}");
            let node: Result<Node, String> = serde_json::from_str(text).map_err(|e| e.to_string());
            assert_eq!(node.as_ref(), Ok(&e.node), "a node alone: {text}");
        }
        assert_eq!(
            serde_json::to_string(&e).ok(),
            serde_json::from_str::<Expr>(&texts[0])
                .ok()
                .and_then(|back| serde_json::to_string(&back).ok()),
            "writing what was read gives the same text"
        );
    }
    ops.sort();
    ops.dedup();
    assert_eq!(ops.len(), 18, "every node kind: {ops:?}");
}

#[test]
fn every_type_kind_reads_back_in_any_member_order() {
    for ty in every_type() {
        let value = serde_json::to_value(&ty).unwrap_or_default();
        for text in [
            serde_json::to_string(&ty).unwrap_or_default(),
            reversed(&value),
        ] {
            let back: Result<Type, String> = serde_json::from_str(&text).map_err(|e| e.to_string());
            assert_eq!(back.as_ref(), Ok(&ty), "{text}");
        }
    }
}

#[test]
fn the_sample_spec_reads_back_unchanged() {
    let mut spec = sample_spec();
    spec.seal();
    let pretty = spec.to_json_pretty();
    let back: Result<FlowSpec, String> = serde_json::from_str(&pretty).map_err(|e| e.to_string());
    assert_eq!(back.as_ref(), Ok(&spec));
    assert_eq!(
        back.map(|s| s.to_json_pretty()),
        Ok(pretty),
        "byte for byte"
    );
    let reversed = reversed(&serde_json::to_value(&spec).unwrap_or_default());
    let back: Result<FlowSpec, String> = serde_json::from_str(&reversed).map_err(|e| e.to_string());
    assert_eq!(back.as_ref(), Ok(&spec));
}

/// Every object below `value` (itself included), by its JSON pointer.
fn objects(value: &Value, at: String, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            out.push(at.clone());
            for (k, v) in map {
                objects(v, format!("{at}/{k}"), out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                objects(v, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// Versions of `root` with one object changed: each member removed, set to `null`, set to a
/// number, set to an unknown name, and an unknown member added.
fn mutations(root: &Value) -> Vec<(String, Value)> {
    let mut pointers = Vec::new();
    objects(root, String::new(), &mut pointers);
    let mut out = Vec::new();
    for pointer in pointers {
        let Some(Value::Object(map)) = root.pointer(&pointer) else {
            continue;
        };
        // (label, member, new value): `None` removes the member.
        let mut edits: Vec<(String, String, Option<Value>)> = vec![(
            "an unknown member".into(),
            "colour".into(),
            Some(json!("red")),
        )];
        for key in map.keys() {
            edits.push((format!("without {key}"), key.clone(), None));
            for (what, v) in [
                ("null", Value::Null),
                ("7", json!(7)),
                ("\"pipe\"", json!("pipe")),
            ] {
                edits.push((format!("{key}: {what}"), key.clone(), Some(v)));
            }
        }
        for (label, member, value) in edits {
            let mut mutated = root.clone();
            if let Some(Value::Object(m)) = mutated.pointer_mut(&pointer) {
                match value {
                    Some(v) => m.insert(member, v),
                    None => m.remove(&member),
                };
            }
            out.push((format!("{pointer} {label}"), mutated));
        }
    }
    out
}

/// The one difference, on purpose: the derive also took a variant's index for its tag
/// (`"type": 7` read as `null`, `"op": 0` as `lit`), which the schema refuses; this reader
/// takes names only.
fn index_tag(old: &Result<Value, String>, new: &Result<Value, String>) -> bool {
    old.is_ok()
        && new.as_ref().is_err_and(|e| {
            e.starts_with("invalid type: integer `7`, expected a type's `type`")
                || e.starts_with("invalid type: integer `7`, expected an expression's `op`")
        })
}

#[test]
fn accepts_and_refuses_exactly_what_the_derive_did() {
    let mut spec = sample_spec();
    spec.seal();
    let mut exprs: Vec<Value> = every_node()
        .iter()
        .map(|e| serde_json::to_value(e).unwrap_or_default())
        .collect();
    let mut types: Vec<Value> = every_type()
        .iter()
        .map(|t| serde_json::to_value(t).unwrap_or_default())
        .collect();
    for step in &spec.steps {
        for e in step
            .args
            .values()
            .chain(&step.value)
            .chain(&step.when)
            .chain(&step.foreach)
        {
            exprs.push(serde_json::to_value(e).unwrap_or_default());
        }
        types.push(serde_json::to_value(&step.ty).unwrap_or_default());
    }
    let mut checked = 0;
    for root in &exprs {
        for (label, mutated) in mutations(root) {
            for text in [mutated.to_string(), reversed(&mutated)] {
                let old = read::<derived::Expr>(&text);
                let new = read::<Expr>(&text);
                if index_tag(&old, &new) {
                    continue;
                }
                assert_eq!(
                    old.is_ok(),
                    new.is_ok(),
                    "{label}: {old:?} / {new:?} of {text}"
                );
                if old.is_ok() {
                    assert_eq!(old, new, "{label}");
                }
                checked += 1;
            }
        }
    }
    for root in &types {
        for (label, mutated) in mutations(root) {
            let text = mutated.to_string();
            let old = read::<derived::Type>(&text);
            let new = read::<Type>(&text);
            if index_tag(&old, &new) {
                continue;
            }
            assert_eq!(
                old.is_ok(),
                new.is_ok(),
                "{label}: {old:?} / {new:?} of {text}"
            );
            if old.is_ok() {
                assert_eq!(old, new, "{label}");
            }
            checked += 1;
        }
    }
    assert!(checked > 1000, "{checked} documents compared");
}

#[test]
fn malformed_expressions_and_types_say_what_is_wrong() {
    let int = r#"{"type":"int"}"#;
    let cases = [
        ("not an object", "[1]".to_owned()),
        ("no op", format!(r#"{{"type":{int}}}"#)),
        ("no type", r#"{"op":"item"}"#.to_owned()),
        ("unknown op", format!(r#"{{"op":"pipe","type":{int}}}"#)),
        ("op not a string", format!(r#"{{"op":3,"type":{int}}}"#)),
        (
            "a member missing",
            format!(r#"{{"op":"step","type":{int}}}"#),
        ),
        (
            "a member of the wrong type",
            format!(r#"{{"op":"step","name":1,"type":{int}}}"#),
        ),
        (
            "a repeated member",
            format!(r#"{{"op":"item","op":"index","type":{int}}}"#),
        ),
        (
            "a binary operator on a unary node",
            format!(
                r#"{{"op":"unary","operator":"add","expr":{{"op":"item","type":{int}}},"type":{int}}}"#
            ),
        ),
        (
            "a unary operator on a binary node",
            format!(
                r#"{{"op":"binary","operator":"not","lhs":{{"op":"item","type":{int}}},"rhs":{{"op":"item","type":{int}}},"type":{int}}}"#
            ),
        ),
        (
            "an unknown operator",
            format!(r#"{{"op":"unary","operator":"xor","type":{int}}}"#),
        ),
        (
            "`if` with a null condition",
            format!(
                r#"{{"op":"if","cond":null,"then":{{"op":"item","type":{int}}},"otherwise":{{"op":"item","type":{int}}},"type":{int}}}"#
            ),
        ),
        (
            "a type without its tag",
            r#"{"op":"item","type":{"item":{"type":"int"}}}"#.to_owned(),
        ),
        (
            "an unknown type",
            r#"{"op":"item","type":{"type":"decimal"}}"#.to_owned(),
        ),
        (
            "a list type without item",
            r#"{"op":"item","type":{"type":"list"}}"#.to_owned(),
        ),
        (
            "a type that is a string",
            r#"{"op":"item","type":"int"}"#.to_owned(),
        ),
        ("truncated", r#"{"op":"item","type":{"type":"#.to_owned()),
    ];
    let rendered: String = cases
        .iter()
        .map(|(label, text)| {
            let outcome = match serde_json::from_str::<Expr>(text) {
                Ok(e) => format!("accepted {e:?}"),
                Err(e) => e.to_string(),
            };
            format!("{label}: {outcome}\n")
        })
        .collect();
    insta::assert_snapshot!(rendered);
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let depth = 100_000;
    let mut text = String::new();
    for _ in 0..depth {
        text.push_str(r#"{"op":"unary","operator":"not","type":{"type":"bool"},"expr":"#);
    }
    text.push_str(r#"{"op":"item","type":{"type":"bool"}}"#);
    text.push_str(&"}".repeat(depth));
    let err = serde_json::from_str::<Expr>(&text)
        .map(|_| ())
        .map_err(|e| e.to_string());
    assert!(
        err.as_ref()
            .is_err_and(|e| e.contains("recursion limit exceeded")),
        "{err:?}"
    );
}

#[test]
fn a_spec_nested_to_the_limit_reads_and_verifies_on_a_small_stack() {
    /// The sample spec with its first step's value `n` negations deep, sealed, as text.
    fn nested(n: usize) -> (FlowSpec, String) {
        let mut value = int(1);
        for _ in 0..n {
            value = ex(
                Node::Unary {
                    op: UnaryOp::Neg,
                    expr: b(value),
                },
                Type::Int,
            );
        }
        let mut spec = sample_spec();
        spec.steps[0].value = Some(value);
        spec.seal();
        let text = spec.to_json();
        (spec, text)
    }
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(|| {
            // The value sits a few levels down (spec, steps, step), its innermost type further.
            let n = (crate::MAX_JSON_DEPTH - 8..)
                .find(|&n| FlowSpec::from_json(&nested(n + 1).1).is_err())
                .expect("some depth is refused");
            let (spec, text) = nested(n);
            let back = FlowSpec::from_json(&text).expect("the deepest spec reads");
            assert!(back.verify_digest());
            assert_eq!(back, spec);
            let refused = FlowSpec::from_json(&nested(n + 1).1).map_err(|e| e.to_string());
            assert!(
                refused
                    .as_ref()
                    .is_err_and(|e| e.contains("nest deeper than")),
                "{refused:?}"
            );
        })
        .expect("a thread starts")
        .join()
        .expect("reading, writing and digesting fit a 2 MiB stack");
}

#[test]
fn a_malformed_spec_is_refused_with_its_place() {
    let mut spec = sample_spec();
    spec.seal();
    let text = spec
        .to_json_pretty()
        .replacen(r#""operator": "and""#, r#""operator": "nand""#, 1);
    let err = FlowSpec::from_json(&text)
        .map(|_| ())
        .map_err(|e| e.to_string());
    let Err(message) = err else {
        panic!("accepted an unknown operator");
    };
    assert!(
        message.starts_with("not a valid FlowSpec: unknown variant `nand`"),
        "{message}"
    );
    assert!(message.contains(" at line "), "{message}");
}

#[test]
fn unknown_members_are_skipped_as_before() {
    let text = r#"{"colour":{"deep":[1]},"op":"member","base":{"op":"item","type":{"type":"json","x":1}},"name":"a","optional":false,"type":{"type":"json"},"items":[]}"#;
    let e: Result<Expr, String> = serde_json::from_str(text).map_err(|e| e.to_string());
    assert_eq!(
        e,
        Ok(Expr::new(
            Node::Member {
                base: Box::new(Expr::new(Node::Item, Type::Json)),
                name: "a".into(),
                optional: false,
            },
            Type::Json,
        ))
    );
    let field: Result<RecordField, String> =
        serde_json::from_str(r#"{"of":{"type":"int"},"name":"n"}"#).map_err(|e| e.to_string());
    assert_eq!(
        field,
        Ok(RecordField {
            name: "n".into(),
            ty: Type::Int,
        })
    );
}

#[test]
fn a_specs_steps_get_room_from_its_texts_length_once() {
    let mut spec = sample_spec();
    spec.seal();
    let text = spec.to_json_pretty();
    let read = FlowSpec::from_json(&text).expect("the sample reads");
    assert_eq!(read, spec);
    // Room for as many steps as the text could hold, and not beyond that.
    let room = text.len() / super::STEP_BYTES_AT_LEAST;
    assert!(read.steps.capacity() >= room.max(read.steps.len()));
    assert!(read.steps.capacity() <= room.max(read.steps.len()) * 2);
    // The room is for that reading only: a spec read afterwards on the same thread without
    // it grows its list as serde does, from nothing.
    let plain: FlowSpec = serde_json::from_str(&text).expect("the sample reads");
    assert_eq!(plain, spec);
    assert!(
        plain.steps.capacity() < room,
        "{} >= {room}",
        plain.steps.capacity()
    );
}
