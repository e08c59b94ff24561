//! Hover: what a name is (a step's type, tool contract and doc; an input's type and default), the
//! type of the expression under the cursor, and a builtin function's signatures.

use reel_compiler::infer::{Checker, ItemScope};
use reel_compiler::queries::{StepId, flow_signature, step_type};
use reel_flowspec::Type;
use reel_syntax::Span;
use reel_syntax::ast::{Expr, ExprKind, Flow, Member, StepBody, StrPart};

use super::Ctx;
use super::names::{self, Kind};

/// Markdown for the hover at `offset`, and the span it is about.
pub fn hover(cx: &Ctx<'_>, offset: usize) -> Option<(String, Span)> {
    if let Some(occ) = names::occurrence_at(&cx.parsed().file, offset) {
        let text = describe(cx, &occ.symbol)?;
        return Some((text, occ.span));
    }
    let (idx, flow) = names::flow_at(&cx.parsed().file, offset)?;
    expression_hover(cx, idx, flow, offset)
}

/// The description of a symbol, as Markdown.
pub fn describe(cx: &Ctx<'_>, symbol: &names::Symbol) -> Option<String> {
    let flow = symbol
        .flow
        .and_then(|i| match cx.parsed().file.items.get(i) {
            Some(reel_syntax::ast::Item::Flow(f)) => Some(f),
            _ => None,
        });
    match symbol.kind {
        Kind::Step => {
            let flow = flow?;
            let step = flow.members.iter().find_map(|m| match m {
                Member::Step(s) if s.name.name == symbol.name => Some(s),
                _ => None,
            })?;
            let ty = cx
                .step_type(symbol.flow?, &symbol.name)
                .unwrap_or(Type::Error);
            let mut out = format!("```reel\nstep {}: {}\n```", symbol.name, show(&ty));
            if let StepBody::Call(c) = &step.body
                && let Some(contract) = cx.contract(&c.tool.name)
            {
                // A block, as the tool's own hover shows it: a signature holds backticks.
                out.push_str(&format!(
                    "\n\n```reel\n{}\n```\n\n{}",
                    contract.signature(),
                    contract.doc
                ));
            }
            if let Some(doc) = &step.doc {
                out.push_str(&format!("\n\n{doc}"));
            }
            Some(out)
        }
        Kind::Input => {
            let flow = flow?;
            let input = flow.members.iter().find_map(|m| match m {
                Member::Input(i) if i.name.name == symbol.name => Some(i),
                _ => None,
            })?;
            let ty = cx.text.get(input.ty.span.range()).unwrap_or("?");
            let mut out = format!("```reel\ninput {}: {ty}", symbol.name);
            if let Some(d) = &input.default {
                out.push_str(&format!(" = {}", cx.text.get(d.span.range()).unwrap_or("")));
            }
            out.push_str("\n```");
            if let Some(doc) = &input.doc {
                out.push_str(&format!("\n\n{doc}"));
            }
            Some(out)
        }
        Kind::Secret | Kind::Env => {
            let flow = flow?;
            let word = if symbol.kind == Kind::Secret {
                "secret"
            } else {
                "env"
            };
            let doc = flow.members.iter().find_map(|m| match m {
                Member::Secret(n) | Member::Env(n) if n.name.name == symbol.name => {
                    Some(n.doc.clone())
                }
                _ => None,
            })?;
            let mut out = format!("```reel\n{word} {}\n```", symbol.name);
            if let Some(doc) = doc {
                out.push_str(&format!("\n\n{doc}"));
            }
            Some(out)
        }
        Kind::Tool => {
            let contract = cx.contract(&symbol.name)?;
            Some(format!(
                "```reel\n{}\n```\n\n{}",
                contract.signature(),
                contract.doc
            ))
        }
    }
}

fn show(t: &Type) -> String {
    if *t == Type::Error {
        "unknown".to_string()
    } else {
        t.to_string()
    }
}

/// The type of the smallest expression around `offset` that can be typed on its own; inside a
/// comprehension's body that is the comprehension, since its variable is bound there.
fn expression_hover(
    cx: &Ctx<'_>,
    idx: usize,
    flow: &Flow,
    offset: usize,
) -> Option<(String, Span)> {
    let member = names::members_around(flow, offset).next()?;
    let (roots, scope): (Vec<&Expr>, ItemScope) = match member {
        Member::Step(s) => match &s.body {
            StepBody::Expr(e) => (vec![e], ItemScope::Outside),
            StepBody::Call(c) => {
                let arg = c.args.iter().find(|a| a.value.span.contains(offset))?;
                let scope = match arg.key.name.as_str() {
                    "foreach" => ItemScope::Outside,
                    "when" if c.args.iter().any(|a| a.key.name == "foreach") => ItemScope::InWhen,
                    _ => match c.args.iter().find(|a| a.key.name == "foreach") {
                        Some(fe) => ItemScope::Foreach(element_type(cx, idx, &fe.value)),
                        None => ItemScope::Outside,
                    },
                };
                (vec![&arg.value], scope)
            }
        },
        Member::Output(o) => (vec![&o.expr], ItemScope::Outside),
        Member::Input(i) => (i.default.iter().collect(), ItemScope::Outside),
        _ => return None,
    };
    let root = roots.into_iter().find(|e| e.span.contains(offset))?;
    if let ExprKind::Call { func, .. } = &smallest(root, offset).kind
        && func.span.contains(offset)
        && let Some(b) = reel_eval::builtin(&func.name)
    {
        let sigs: Vec<String> = b.signatures.iter().map(|s| s.to_string()).collect();
        return Some((
            format!("```reel\n{}\n```\n\n{}", sigs.join("\n"), b.doc),
            func.span,
        ));
    }
    let target = typable(root, offset);
    let ty = infer(cx, idx, target, scope)?;
    let src = cx.text.get(target.span.range()).unwrap_or("");
    let shown = if src.chars().count() > 60 {
        format!("{}…", src.chars().take(60).collect::<String>())
    } else {
        src.to_string()
    };
    Some((
        format!("```reel\n{}: {}\n```", shown.replace('\n', " "), show(&ty)),
        target.span,
    ))
}

fn element_type(cx: &Ctx<'_>, idx: usize, e: &Expr) -> Type {
    match infer(cx, idx, e, ItemScope::Outside) {
        Some(Type::List { item }) => *item,
        Some(Type::Optional { inner }) => match *inner {
            Type::List { item } => *item,
            _ => Type::Error,
        },
        Some(Type::Json) => Type::Json,
        _ => Type::Error,
    }
}

fn infer(cx: &Ctx<'_>, idx: usize, e: &Expr, scope: ItemScope) -> Option<Type> {
    let flow = cx.flow_id(idx)?;
    let sig = flow_signature(cx.db, flow);
    let db = cx.db;
    let types = |name: &str| step_type(db, StepId::new(db, flow, name.to_string())).clone();
    let mut checker = Checker::new(sig, &types, scope);
    Some(checker.expr(e).ty)
}

/// The innermost expression holding `offset`.
fn smallest(e: &Expr, offset: usize) -> &Expr {
    children(e)
        .into_iter()
        .find(|c| c.span.contains(offset))
        .map_or(e, |c| smallest(c, offset))
}

/// The innermost expression holding `offset` that is not inside a comprehension's bound part.
fn typable(e: &Expr, offset: usize) -> &Expr {
    if let ExprKind::Comprehension { iter, .. } = &e.kind {
        return if iter.span.contains(offset) {
            typable(iter, offset)
        } else {
            e
        };
    }
    children(e)
        .into_iter()
        .find(|c| c.span.contains(offset))
        .map_or(e, |c| typable(c, offset))
}

fn children(e: &Expr) -> Vec<&Expr> {
    match &e.kind {
        ExprKind::Str(parts) => parts
            .iter()
            .filter_map(|p| match p {
                StrPart::Interp(e) => Some(e),
                StrPart::Text(_) => None,
            })
            .collect(),
        ExprKind::List(items) => items.iter().collect(),
        ExprKind::Record(fields) => fields.iter().map(|f| &f.value).collect(),
        ExprKind::Member { base, .. } => vec![base],
        ExprKind::Index { base, index } => vec![base, index],
        ExprKind::Call { args, .. } => args.iter().collect(),
        ExprKind::Unary { expr, .. } | ExprKind::Paren(expr) => vec![expr],
        ExprKind::Binary { lhs, rhs, .. } => vec![lhs, rhs],
        ExprKind::If {
            cond,
            then,
            otherwise,
        } => vec![cond, then, otherwise],
        ExprKind::Comprehension {
            iter, cond, body, ..
        } => {
            let mut v = vec![&**iter];
            v.extend(cond.as_deref());
            v.push(body);
            v
        }
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use reel_compiler::{RootDb, SourceFile};

    use super::*;

    fn hover_at(src: &str, marker: &str) -> String {
        let db = RootDb::default();
        let file = SourceFile::new(&db, "t.reel".into(), "/tmp".into(), src.into());
        let cx = Ctx::new(&db, file);
        let offset = src.find(marker).unwrap() + 1;
        hover(&cx, offset).map(|h| h.0).unwrap_or_default()
    }

    const SRC: &str = "flow f {\n  /// How many.\n  input n: int = 2\n  step a = echo { value: { x: input.n + 1 } }\n  step b = len([for v in [a]: v.x])\n  output a.x\n}\n";

    #[test]
    fn a_step_shows_its_type_and_tool() {
        let h = hover_at(SRC, "a.x\n");
        assert!(h.contains("step a: { x: int }"), "{h}");
        assert!(h.contains("echo"), "{h}");
    }

    #[test]
    fn an_input_shows_type_default_and_doc() {
        let h = hover_at(SRC, "n + 1");
        assert!(h.contains("input n: int = 2"), "{h}");
        assert!(h.contains("How many."), "{h}");
    }

    #[test]
    fn an_expression_shows_its_type() {
        assert!(hover_at(SRC, "+ 1").contains(": int"));
        assert!(hover_at(SRC, ".x\n").contains("a.x: int"));
        assert!(hover_at(SRC, "len(").contains("len("));
        assert!(hover_at(SRC, "v.x]").contains("list<int>"));
    }
}
