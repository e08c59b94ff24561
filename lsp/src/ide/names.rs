//! What each name in a file refers to: the definitions and references of steps, inputs, secrets,
//! env names and tools, found on the syntax tree (absolute spans) of the current text.
//!
//! Go to definition, find references, rename, hover and semantic tokens all read this one table,
//! so they agree on what a name means. Comprehension variables shadow steps, as in the checker.

use std::collections::HashSet;

use reel_syntax::Span;
use reel_syntax::ast::{Expr, ExprKind, File, Flow, Item, Member, StepBody, StrPart};

/// What kind of thing a name denotes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A step of the flow.
    Step,
    /// An input of the flow (`input.NAME`).
    Input,
    /// A secret of the flow (`secret.NAME`).
    Secret,
    /// An environment variable of the flow (`env.NAME`).
    Env,
    /// A tool (user-declared or built in).
    Tool,
}

/// A named thing: its kind, its name and the flow it belongs to (`None` for tools).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Symbol {
    /// What it is.
    pub kind: Kind,
    /// Its name (dotted for built-in tools).
    pub name: String,
    /// The index of the flow among the file's items, for flow members.
    pub flow: Option<usize>,
}

/// One place a symbol's name is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Occurrence {
    /// The symbol.
    pub symbol: Symbol,
    /// The name's span.
    pub span: Span,
    /// Whether this is the declaration.
    pub definition: bool,
}

/// Every occurrence of every symbol in `file`, in no particular order.
pub fn occurrences(file: &File) -> Vec<Occurrence> {
    let mut out = Vec::new();
    for (idx, item) in file.items.iter().enumerate() {
        match item {
            Item::Tool(t) => out.push(Occurrence {
                symbol: Symbol {
                    kind: Kind::Tool,
                    name: t.name.name.clone(),
                    flow: None,
                },
                span: t.name.span,
                definition: true,
            }),
            Item::Flow(f) => flow_occurrences(idx, f, &mut out),
        }
    }
    out
}

/// The names of a flow's steps, for telling a step's name from any other name.
pub fn step_names(flow: &Flow) -> HashSet<&str> {
    flow.members
        .iter()
        .filter_map(|m| match m {
            Member::Step(s) => Some(s.name.name.as_str()),
            _ => None,
        })
        .collect()
}

fn flow_occurrences(idx: usize, flow: &Flow, out: &mut Vec<Occurrence>) {
    let steps = step_names(flow);
    for m in &flow.members {
        member_occurrences(idx, &steps, m, out);
    }
}

/// The occurrences in one member of flow `idx` whose steps are `steps`: what a request about
/// one place reads, instead of the whole file.
pub fn member_occurrences(
    idx: usize,
    steps: &HashSet<&str>,
    m: &Member,
    out: &mut Vec<Occurrence>,
) {
    let sym = |kind, name: &str| Symbol {
        kind,
        name: name.to_string(),
        flow: Some(idx),
    };
    let mut walker = Walker {
        flow: idx,
        steps,
        locals: Vec::new(),
        out,
    };
    match m {
        Member::Input(i) => {
            walker.out.push(Occurrence {
                symbol: sym(Kind::Input, &i.name.name),
                span: i.name.span,
                definition: true,
            });
            if let Some(d) = &i.default {
                walker.expr(d);
            }
        }
        Member::Secret(n) | Member::Env(n) => {
            let kind = if matches!(m, Member::Secret(_)) {
                Kind::Secret
            } else {
                Kind::Env
            };
            walker.out.push(Occurrence {
                symbol: sym(kind, &n.name.name),
                span: n.name.span,
                definition: true,
            });
        }
        Member::Step(s) => {
            walker.out.push(Occurrence {
                symbol: sym(Kind::Step, &s.name.name),
                span: s.name.span,
                definition: true,
            });
            match &s.body {
                StepBody::Expr(e) => walker.expr(e),
                StepBody::Call(c) => {
                    walker.out.push(Occurrence {
                        symbol: Symbol {
                            kind: Kind::Tool,
                            name: c.tool.name.clone(),
                            flow: None,
                        },
                        span: c.tool.span,
                        definition: false,
                    });
                    for a in &c.args {
                        walker.expr(&a.value);
                    }
                }
            }
        }
        Member::Output(o) => walker.expr(&o.expr),
        Member::Error(_) => {}
    }
}

/// The occurrence at `offset` (as [`at`]), found in the one item or member that holds it.
pub fn occurrence_at(file: &File, offset: usize) -> Option<Occurrence> {
    let (idx, item) = file
        .items
        .iter()
        .enumerate()
        .find(|(_, i)| i.span().contains(offset))?;
    let mut occs = Vec::new();
    match item {
        Item::Tool(t) => occs.push(Occurrence {
            symbol: Symbol {
                kind: Kind::Tool,
                name: t.name.name.clone(),
                flow: None,
            },
            span: t.name.span,
            definition: true,
        }),
        Item::Flow(f) => {
            let steps = step_names(f);
            for m in members_around(f, offset) {
                member_occurrences(idx, &steps, m, &mut occs);
            }
        }
    }
    at(&occs, offset).cloned()
}

/// The members of `flow` whose span holds `offset` (two when it is at the end of one and the
/// start of the next), found by bisection: members are in source order.
pub fn members_around(flow: &Flow, offset: usize) -> impl Iterator<Item = &Member> {
    let first = flow
        .members
        .partition_point(|m| (m.span().end as usize) < offset);
    flow.members[first..]
        .iter()
        .take_while(move |m| m.span().start as usize <= offset)
        .filter(move |m| m.span().contains(offset))
}

/// The declaration of `symbol` in `file`, found among declarations alone (no expression walked).
pub fn declaration(file: &File, symbol: &Symbol) -> Option<Span> {
    match (symbol.kind, symbol.flow) {
        (Kind::Tool, _) => file.items.iter().find_map(|i| match i {
            Item::Tool(t) if t.name.name == symbol.name => Some(t.name.span),
            _ => None,
        }),
        (kind, Some(idx)) => {
            let Some(Item::Flow(f)) = file.items.get(idx) else {
                return None;
            };
            f.members.iter().find_map(|m| match (kind, m) {
                (Kind::Step, Member::Step(s)) if s.name.name == symbol.name => Some(s.name.span),
                (Kind::Input, Member::Input(i)) if i.name.name == symbol.name => Some(i.name.span),
                (Kind::Secret, Member::Secret(n)) | (Kind::Env, Member::Env(n))
                    if n.name.name == symbol.name =>
                {
                    Some(n.name.span)
                }
                _ => None,
            })
        }
        (_, None) => None,
    }
}

/// Every occurrence of `symbol` in `file`: its flow's members alone (the file's items for a tool).
pub fn occurrences_of(file: &File, symbol: &Symbol) -> Vec<Occurrence> {
    let mut occs = Vec::new();
    match symbol.flow {
        Some(idx) => {
            if let Some(Item::Flow(f)) = file.items.get(idx) {
                flow_occurrences(idx, f, &mut occs);
            }
        }
        None => occs = occurrences(file),
    }
    occs.retain(|o| o.symbol == *symbol);
    occs
}

struct Walker<'a> {
    flow: usize,
    steps: &'a HashSet<&'a str>,
    locals: Vec<String>,
    out: &'a mut Vec<Occurrence>,
}

impl Walker<'_> {
    fn push(&mut self, kind: Kind, name: &str, span: Span) {
        self.out.push(Occurrence {
            symbol: Symbol {
                kind,
                name: name.to_string(),
                flow: Some(self.flow),
            },
            span,
            definition: false,
        });
    }

    fn expr(&mut self, e: &Expr) {
        match &e.kind {
            ExprKind::Name(id) => {
                if !self.locals.contains(&id.name) && self.steps.contains(id.name.as_str()) {
                    self.push(Kind::Step, &id.name, id.span);
                }
            }
            ExprKind::Member { base, name, .. } => {
                if let ExprKind::Name(b) = &base.kind
                    && !self.locals.contains(&b.name)
                {
                    let kind = match b.name.as_str() {
                        "input" => Some(Kind::Input),
                        "secret" => Some(Kind::Secret),
                        "env" => Some(Kind::Env),
                        _ => None,
                    };
                    if let Some(kind) = kind {
                        self.push(kind, &name.name, name.span);
                        return;
                    }
                }
                self.expr(base);
            }
            ExprKind::Comprehension {
                var,
                iter,
                cond,
                body,
            } => {
                self.expr(iter);
                self.locals.push(var.name.clone());
                if let Some(c) = cond {
                    self.expr(c);
                }
                self.expr(body);
                self.locals.pop();
            }
            ExprKind::Str(parts) => {
                for p in parts {
                    if let StrPart::Interp(e) = p {
                        self.expr(e);
                    }
                }
            }
            ExprKind::List(items) => items.iter().for_each(|i| self.expr(i)),
            ExprKind::Record(fields) => fields.iter().for_each(|f| self.expr(&f.value)),
            ExprKind::Index { base, index } => {
                self.expr(base);
                self.expr(index);
            }
            ExprKind::Call { args, .. } => args.iter().for_each(|a| self.expr(a)),
            ExprKind::Unary { expr, .. } | ExprKind::Paren(expr) => self.expr(expr),
            ExprKind::Binary { lhs, rhs, .. } => {
                self.expr(lhs);
                self.expr(rhs);
            }
            ExprKind::If {
                cond,
                then,
                otherwise,
            } => {
                self.expr(cond);
                self.expr(then);
                self.expr(otherwise);
            }
            ExprKind::Int(_)
            | ExprKind::Float { .. }
            | ExprKind::Duration { .. }
            | ExprKind::Bool(_)
            | ExprKind::Null
            | ExprKind::Error => {}
        }
    }
}

/// The occurrence whose name span holds `offset` (the end included, as for a cursor).
pub fn at(occs: &[Occurrence], offset: usize) -> Option<&Occurrence> {
    occs.iter()
        .filter(|o| o.span.contains(offset))
        .min_by_key(|o| o.span.len())
}

/// The declaration of `symbol`, if the file has one.
pub fn definition<'a>(occs: &'a [Occurrence], symbol: &Symbol) -> Option<&'a Occurrence> {
    occs.iter().find(|o| o.definition && o.symbol == *symbol)
}

/// The index of the flow item whose span holds `offset`.
pub fn flow_at(file: &File, offset: usize) -> Option<(usize, &Flow)> {
    file.items
        .iter()
        .enumerate()
        .find_map(|(i, item)| match item {
            Item::Flow(f) if f.span.contains(offset) => Some((i, f)),
            _ => None,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(src: &str, kind: Kind, name: &str) -> Vec<(String, bool)> {
        let parsed = reel_syntax::parse(src);
        let mut v: Vec<_> = occurrences(&parsed.file)
            .into_iter()
            .filter(|o| o.symbol.kind == kind && o.symbol.name == name)
            .map(|o| (src[o.span.range()].to_string(), o.definition))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn steps_inputs_and_tools_are_found_and_locals_shadow_steps() {
        let src = "flow f {\n  input n: int = 1\n  step a = echo { value: input.n }\n  step b = [for a in [1]: a]\n  step c = a\n  output { x: b, y: c }\n}\n";
        let steps = names(src, Kind::Step, "a");
        // The declaration and the use in `c`; the comprehension's `a` is a local.
        assert_eq!(steps, vec![("a".into(), false), ("a".into(), true)]);
        assert_eq!(names(src, Kind::Input, "n").len(), 2);
        assert_eq!(names(src, Kind::Tool, "echo").len(), 1);
    }

    #[test]
    fn the_occurrence_at_a_place_and_of_a_symbol_are_found_from_their_member() {
        let src = "tool t {\n  kind: pure\n  exec: [\"x\"]\n}\nflow f {\n  input n: int = 1\n  secret k\n  step a = t { v: input.n }\n  step b = [for a in [a]: a]\n  step c = a\n  output { x: b, y: c }\n}\nflow g {\n  step a = 1\n  output a\n}\n";
        let parsed = reel_syntax::parse(src);
        let all = occurrences(&parsed.file);
        for offset in 0..=src.len() {
            let want = at(&all, offset);
            assert_eq!(
                occurrence_at(&parsed.file, offset).as_ref(),
                want,
                "{offset}"
            );
            if let Some(occ) = want {
                let mut of: Vec<_> = all
                    .iter()
                    .filter(|o| o.symbol == occ.symbol)
                    .map(|o| o.span)
                    .collect();
                let mut got: Vec<_> = occurrences_of(&parsed.file, &occ.symbol)
                    .iter()
                    .map(|o| o.span)
                    .collect();
                of.sort_by_key(|s| s.start);
                got.sort_by_key(|s| s.start);
                assert_eq!(got, of, "{offset}");
                let decl = definition(&all, &occ.symbol).map(|o| o.span);
                assert_eq!(declaration(&parsed.file, &occ.symbol), decl, "{offset}");
            }
        }
    }
}
