//! FlowSpec expressions written back as Reel source, for error messages, hovers and tests.

use reel_flowspec::{Expr, Node, Type};
use serde_json::Value;

/// The longest expression quoted in an error message, in characters.
const BRIEF_LIMIT: usize = 40;

/// The expression as Reel source (`fetch.body?.title ?? "none"`), parenthesised where needed.
pub fn to_source(expr: &Expr) -> String {
    let mut out = String::new();
    write_expr(&mut out, expr);
    out
}

/// [`to_source`] cut short for quoting inside a sentence.
pub(crate) fn brief(expr: &Expr) -> String {
    let text = to_source(expr);
    if text.chars().count() <= BRIEF_LIMIT {
        return text;
    }
    let mut cut: String = text.chars().take(BRIEF_LIMIT - 1).collect();
    cut.push('…');
    cut
}

/// How tightly an expression binds: 0 for `if`, 1–7 for binary operators, 8 for unary, 9 for
/// postfix and atoms.
fn strength(expr: &Expr) -> u8 {
    match &expr.node {
        Node::If { .. } => 0,
        Node::Binary { op, .. } => op.precedence(),
        Node::Unary { .. } => 8,
        _ => 9,
    }
}

fn write_operand(out: &mut String, expr: &Expr, min: u8) {
    if strength(expr) < min {
        out.push('(');
        write_expr(out, expr);
        out.push(')');
    } else {
        write_expr(out, expr);
    }
}

fn write_expr(out: &mut String, expr: &Expr) {
    match &expr.node {
        Node::Lit { value } => write_lit(out, value, &expr.ty),
        Node::Interp { parts } => {
            out.push('"');
            for part in parts {
                match &part.node {
                    Node::Lit {
                        value: Value::String(text),
                    } => escape_into(out, text),
                    _ => {
                        out.push_str("${");
                        write_expr(out, part);
                        out.push('}');
                    }
                }
            }
            out.push('"');
        }
        Node::List { items } => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_expr(out, item);
            }
            out.push(']');
        }
        Node::Record { fields } => {
            if fields.is_empty() {
                out.push_str("{}");
                return;
            }
            out.push_str("{ ");
            for (i, field) in fields.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_key(out, &field.name);
                out.push_str(": ");
                write_expr(out, &field.value);
            }
            out.push_str(" }");
        }
        Node::Input { name } => {
            out.push_str("input.");
            out.push_str(name);
        }
        Node::Env { name } => {
            out.push_str("env.");
            out.push_str(name);
        }
        Node::Secret { name } => {
            out.push_str("secret.");
            out.push_str(name);
        }
        Node::Step { name } | Node::Var { name } => out.push_str(name),
        Node::Item => out.push_str("item"),
        Node::Index => out.push_str("index"),
        Node::Member {
            base,
            name,
            optional,
        } => {
            write_operand(out, base, 9);
            out.push_str(if *optional { "?." } else { "." });
            out.push_str(name);
        }
        Node::At { base, index } => {
            write_operand(out, base, 9);
            out.push('[');
            write_expr(out, index);
            out.push(']');
        }
        Node::Call { func, args } => {
            out.push_str(func);
            out.push('(');
            for (i, arg) in args.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_expr(out, arg);
            }
            out.push(')');
        }
        Node::Unary { op, expr } => {
            out.push_str(op.symbol());
            let mut operand = String::new();
            write_operand(&mut operand, expr, 8);
            // `--1` would read as two operators on 1 only by accident; say what is meant.
            if operand.starts_with('-') {
                out.push('(');
                out.push_str(&operand);
                out.push(')');
            } else {
                out.push_str(&operand);
            }
        }
        Node::Binary { op, lhs, rhs } => {
            let p = op.precedence();
            // Operators are left-associative: a right operand of equal strength needs parentheses.
            write_operand(out, lhs, p);
            out.push(' ');
            out.push_str(op.symbol());
            out.push(' ');
            write_operand(out, rhs, p + 1);
        }
        Node::If {
            cond,
            then,
            otherwise,
        } => {
            out.push_str("if ");
            write_expr(out, cond);
            out.push_str(" then ");
            write_expr(out, then);
            out.push_str(" else ");
            write_expr(out, otherwise);
        }
        Node::For {
            var,
            iter,
            cond,
            body,
        } => {
            out.push_str("[for ");
            out.push_str(var);
            out.push_str(" in ");
            write_expr(out, iter);
            if let Some(cond) = cond {
                out.push_str(" if ");
                write_expr(out, cond);
            }
            out.push_str(": ");
            write_expr(out, body);
            out.push(']');
        }
    }
}

fn write_lit(out: &mut String, value: &Value, ty: &Type) {
    match value {
        Value::String(text) if matches!(ty.strip_optional(), Type::Duration) => out.push_str(text),
        Value::String(text) => {
            out.push('"');
            escape_into(out, text);
            out.push('"');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_lit(out, item, &Type::Json);
            }
            out.push(']');
        }
        Value::Object(map) if map.is_empty() => out.push_str("{}"),
        Value::Object(map) => {
            out.push_str("{ ");
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_key(out, key);
                out.push_str(": ");
                write_lit(out, item, &Type::Json);
            }
            out.push_str(" }");
        }
        other => out.push_str(&other.to_string()),
    }
}

/// A record key: bare when it is an identifier, quoted otherwise.
fn write_key(out: &mut String, key: &str) {
    let mut chars = key.chars();
    let bare = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if bare {
        out.push_str(key);
    } else {
        out.push('"');
        escape_into(out, key);
        out.push('"');
    }
}

/// String text with Reel's escapes; `$` is escaped only before `{`, where it would interpolate.
fn escape_into(out: &mut String, text: &str) {
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '$' if chars.peek() == Some(&'{') => out.push_str("\\$"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use reel_flowspec::{BinaryOp, UnaryOp};
    use serde_json::json;

    use super::*;
    use crate::test_exprs::*;

    #[test]
    fn writes_every_form() {
        let cases = [
            lit(json!("a \"q\" ${x} $y\n")),
            dur("250ms"),
            lit(json!([1, 2.5, null, { "k-1": true }])),
            interp(vec![lit(json!("v${")), input("v"), lit(json!("!"))]),
            list(vec![item(), index()]),
            record(vec![("a", env("HOME")), ("other key", secret("t"))]),
            opt_member(member(step("fetch"), "body"), "title"),
            at(var("xs"), int(0)),
            call("max", vec![int(1), int(2)]),
            unary(
                UnaryOp::Not,
                bin(BinaryOp::And, boolean(true), boolean(false)),
            ),
            unary(UnaryOp::Neg, unary(UnaryOp::Neg, int(1))),
            unary(UnaryOp::Neg, bin(BinaryOp::Add, int(1), int(2))),
            bin(
                BinaryOp::Mul,
                bin(BinaryOp::Add, int(1), int(2)),
                bin(BinaryOp::Sub, int(3), bin(BinaryOp::Sub, int(4), int(5))),
            ),
            member(bin(BinaryOp::Coalesce, input("a"), input("b")), "c"),
            if_(boolean(true), int(1), int(2)),
            comp(
                "x",
                input("xs"),
                Some(bin(BinaryOp::Gt, var("x"), int(0))),
                var("x"),
            ),
            record(vec![]),
        ];
        let rendered: String = cases.iter().map(|e| to_source(e) + "\n").collect();
        insta::assert_snapshot!(rendered);
    }

    #[test]
    fn brief_cuts_long_expressions() {
        let long = lit(json!("x".repeat(100)));
        assert_eq!(brief(&long).chars().count(), BRIEF_LIMIT);
    }
}
