//! Walks over the syntax tree: every expression in order, and every span (to rebase a subtree).

use crate::ast::*;
use crate::span::Span;

/// Calls `f` on `e` and on every expression inside it, parents before children.
pub fn walk_expr<'a>(e: &'a Expr, f: &mut impl FnMut(&'a Expr)) {
    f(e);
    match &e.kind {
        ExprKind::Int(_)
        | ExprKind::Float { .. }
        | ExprKind::Duration { .. }
        | ExprKind::Bool(_)
        | ExprKind::Null
        | ExprKind::Name(_)
        | ExprKind::Error => {}
        ExprKind::Str(parts) => {
            for p in parts {
                if let StrPart::Interp(e) = p {
                    walk_expr(e, f);
                }
            }
        }
        ExprKind::List(items) => items.iter().for_each(|i| walk_expr(i, f)),
        ExprKind::Record(fields) => fields.iter().for_each(|fl| walk_expr(&fl.value, f)),
        ExprKind::Member { base, .. } => walk_expr(base, f),
        ExprKind::Index { base, index } => {
            walk_expr(base, f);
            walk_expr(index, f);
        }
        ExprKind::Call { args, .. } => args.iter().for_each(|a| walk_expr(a, f)),
        ExprKind::Unary { expr, .. } | ExprKind::Paren(expr) => walk_expr(expr, f),
        ExprKind::Binary { lhs, rhs, .. } => {
            walk_expr(lhs, f);
            walk_expr(rhs, f);
        }
        ExprKind::If {
            cond,
            then,
            otherwise,
        } => {
            walk_expr(cond, f);
            walk_expr(then, f);
            walk_expr(otherwise, f);
        }
        ExprKind::Comprehension {
            iter, cond, body, ..
        } => {
            walk_expr(iter, f);
            if let Some(c) = cond {
                walk_expr(c, f);
            }
            walk_expr(body, f);
        }
    }
}

/// Every expression directly held by a member (step arguments, step value, input default, output).
pub fn member_exprs(member: &Member) -> Vec<&Expr> {
    match member {
        Member::Input(i) => i.default.iter().collect(),
        Member::Step(s) => match &s.body {
            StepBody::Call(c) => c.args.iter().map(|a| &a.value).collect(),
            StepBody::Expr(e) => vec![e],
        },
        Member::Output(o) => vec![&o.expr],
        Member::Secret(_) | Member::Env(_) | Member::Error(_) => Vec::new(),
    }
}

/// Applies `f` to every span in a member, so a member can be moved to another offset.
pub fn member_spans_mut(member: &mut Member, f: &mut impl FnMut(&mut Span)) {
    match member {
        Member::Input(i) => {
            f(&mut i.span);
            ident(&mut i.name, f);
            type_spans_mut(&mut i.ty, f);
            if let Some(d) = &mut i.default {
                expr_spans_mut(d, f);
            }
        }
        Member::Secret(n) | Member::Env(n) => {
            f(&mut n.span);
            ident(&mut n.name, f);
        }
        Member::Step(s) => step_spans_mut(s, f),
        Member::Output(o) => {
            f(&mut o.span);
            expr_spans_mut(&mut o.expr, f);
        }
        Member::Error(s) => f(s),
    }
}

/// Applies `f` to every span in a top-level item.
pub fn item_spans_mut(item: &mut Item, f: &mut impl FnMut(&mut Span)) {
    match item {
        Item::Flow(flow) => {
            f(&mut flow.span);
            ident(&mut flow.name, f);
            for m in &mut flow.members {
                member_spans_mut(m, f);
            }
        }
        Item::Tool(tool) => {
            f(&mut tool.span);
            ident(&mut tool.name, f);
            for e in &mut tool.entries {
                match e {
                    ToolEntry::Field(fl) => field_spans_mut(fl, f),
                    ToolEntry::Schema(s) => {
                        f(&mut s.span);
                        f(&mut s.keyword_span);
                        for fl in &mut s.fields {
                            f(&mut fl.span);
                            f(&mut fl.key.span);
                            type_spans_mut(&mut fl.ty, f);
                        }
                    }
                    ToolEntry::Error(s) => f(s),
                }
            }
        }
    }
}

/// Applies `f` to every span in a step.
pub fn step_spans_mut(s: &mut Step, f: &mut impl FnMut(&mut Span)) {
    f(&mut s.span);
    ident(&mut s.name, f);
    match &mut s.body {
        StepBody::Call(c) => {
            ident(&mut c.tool, f);
            f(&mut c.block_span);
            for a in &mut c.args {
                field_spans_mut(a, f);
            }
        }
        StepBody::Expr(e) => expr_spans_mut(e, f),
    }
}

fn ident(i: &mut Ident, f: &mut impl FnMut(&mut Span)) {
    f(&mut i.span);
}

fn field_spans_mut(fl: &mut Field, f: &mut impl FnMut(&mut Span)) {
    f(&mut fl.span);
    f(&mut fl.key.span);
    expr_spans_mut(&mut fl.value, f);
}

/// Applies `f` to every span in a type.
pub fn type_spans_mut(t: &mut TypeExpr, f: &mut impl FnMut(&mut Span)) {
    f(&mut t.span);
    match &mut t.kind {
        TypeExprKind::Named(_) | TypeExprKind::Error => {}
        TypeExprKind::List(inner) | TypeExprKind::Optional(inner) => type_spans_mut(inner, f),
        TypeExprKind::Record(fields) => {
            for fl in fields {
                f(&mut fl.span);
                f(&mut fl.key.span);
                type_spans_mut(&mut fl.ty, f);
            }
        }
    }
}

/// Applies `f` to every span in an expression.
pub fn expr_spans_mut(e: &mut Expr, f: &mut impl FnMut(&mut Span)) {
    f(&mut e.span);
    match &mut e.kind {
        ExprKind::Int(_)
        | ExprKind::Float { .. }
        | ExprKind::Duration { .. }
        | ExprKind::Bool(_)
        | ExprKind::Null
        | ExprKind::Error => {}
        ExprKind::Name(i) => ident(i, f),
        ExprKind::Str(parts) => {
            for p in parts {
                if let StrPart::Interp(e) = p {
                    expr_spans_mut(e, f);
                }
            }
        }
        ExprKind::List(items) => items.iter_mut().for_each(|i| expr_spans_mut(i, f)),
        ExprKind::Record(fields) => fields.iter_mut().for_each(|fl| field_spans_mut(fl, f)),
        ExprKind::Member { base, name, .. } => {
            expr_spans_mut(base, f);
            ident(name, f);
        }
        ExprKind::Index { base, index } => {
            expr_spans_mut(base, f);
            expr_spans_mut(index, f);
        }
        ExprKind::Call { func, args } => {
            ident(func, f);
            args.iter_mut().for_each(|a| expr_spans_mut(a, f));
        }
        ExprKind::Unary { expr, .. } | ExprKind::Paren(expr) => expr_spans_mut(expr, f),
        ExprKind::Binary {
            lhs, rhs, op_span, ..
        } => {
            f(op_span);
            expr_spans_mut(lhs, f);
            expr_spans_mut(rhs, f);
        }
        ExprKind::If {
            cond,
            then,
            otherwise,
        } => {
            expr_spans_mut(cond, f);
            expr_spans_mut(then, f);
            expr_spans_mut(otherwise, f);
        }
        ExprKind::Comprehension {
            var,
            iter,
            cond,
            body,
        } => {
            ident(var, f);
            expr_spans_mut(iter, f);
            if let Some(c) = cond {
                expr_spans_mut(c, f);
            }
            expr_spans_mut(body, f);
        }
    }
}

/// Moves every span of `member` by `-offset`, making them relative to the member's start.
pub fn rebase_member(member: &mut Member, offset: u32) {
    member_spans_mut(member, &mut |s: &mut Span| *s = s.relative_to(offset));
}
