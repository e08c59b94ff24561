//! The outline of a file: document symbols (flows with their members, tools) and folding ranges.

use std::collections::HashMap;

use reel_compiler::queries::{GroupMembers, MemberGroup, file_layout};
use reel_syntax::Span;
use reel_syntax::ast::Member;
use reel_syntax::outline::ItemKind;
use reel_syntax::visit::member_spans_mut;
use tower_lsp_server::lsp_types::{
    DocumentSymbol, FoldingRange, FoldingRangeKind, Range, SymbolKind,
};

use super::{Ctx, pieces, tokens};
use crate::position::Lines;

#[allow(deprecated)] // `deprecated` is a required field of the struct, superseded by `tags`.
fn symbol(
    lines: &Lines<'_>,
    name: &str,
    detail: Option<String>,
    kind: SymbolKind,
    span: Span,
    name_span: Span,
    children: Option<Vec<DocumentSymbol>>,
) -> DocumentSymbol {
    DocumentSymbol {
        name: if name.is_empty() {
            "?".into()
        } else {
            name.into()
        },
        detail,
        kind,
        tags: None,
        deprecated: None,
        range: lines.range(span),
        selection_range: lines.range(name_span),
        children,
    }
}

/// The symbol of a flow's member (`None` for one that did not parse), its spans in `lines`.
pub fn member_symbol(lines: &Lines<'_>, m: &Member) -> Option<DocumentSymbol> {
    Some(match m {
        Member::Input(i) => symbol(
            lines,
            &i.name.name,
            lines
                .text()
                .get(i.ty.span.range())
                .map(|t| format!("input: {t}")),
            SymbolKind::FIELD,
            i.span,
            i.name.span,
            None,
        ),
        Member::Secret(n) => symbol(
            lines,
            &n.name.name,
            Some("secret".into()),
            SymbolKind::KEY,
            n.span,
            n.name.span,
            None,
        ),
        Member::Env(n) => symbol(
            lines,
            &n.name.name,
            Some("env".into()),
            SymbolKind::CONSTANT,
            n.span,
            n.name.span,
            None,
        ),
        Member::Step(s) => symbol(
            lines,
            &s.name.name,
            Some(match &s.body {
                reel_syntax::ast::StepBody::Call(c) => c.tool.name.clone(),
                reel_syntax::ast::StepBody::Expr(_) => "expression".into(),
            }),
            SymbolKind::FUNCTION,
            s.span,
            s.name.span,
            None,
        ),
        Member::Output(o) => symbol(
            lines,
            "output",
            None,
            SymbolKind::PROPERTY,
            o.span,
            o.span,
            None,
        ),
        Member::Error(_) => return None,
    })
}

/// Flows (with inputs, secrets, env names, steps and the output) and tools, in source order:
/// each group's kept member symbols moved into place (see [`super::pieces`]).
pub fn document_symbols(cx: &Ctx<'_>) -> Vec<DocumentSymbol> {
    let layout = file_layout(cx.db, cx.file);
    let kept: HashMap<usize, MemberGroup<'_>> = pieces::segments(cx.db, cx.file)
        .into_iter()
        .filter_map(|s| Some((s.start, s.group?)))
        .collect();
    let mut out = Vec::with_capacity(layout.order.len());
    for &(kind, i) in &layout.order {
        match kind {
            ItemKind::Tool => {
                let t = &layout.tools[i];
                out.push(symbol(
                    &cx.lines,
                    &t.tool.name.name,
                    Some("tool".into()),
                    SymbolKind::INTERFACE,
                    t.tool.span.shifted(t.offset),
                    t.tool.name.span.shifted(t.offset),
                    None,
                ));
            }
            ItemKind::Flow => {
                let f = &layout.flows[i];
                let mut children = Vec::new();
                for (n, (offset, group)) in f.groups.iter().enumerate() {
                    // A long flow is many groups: an edit stops the walk between two.
                    if n % 64 == 63 {
                        cx.db.unwind_if_revision_cancelled();
                    }
                    let base = cx.lines.position(*offset as usize);
                    match kept.get(&(*offset as usize)) {
                        Some(&g) if matches!(group, GroupMembers::Split(_)) => children.extend(
                            pieces::group_symbols(cx.db, g)
                                .iter()
                                .map(|s| pieces::shift_symbol(s.clone(), base)),
                        ),
                        _ => children.extend(group.members().iter().filter_map(|m| {
                            let mut m = m.clone();
                            member_spans_mut(&mut m, &mut |s: &mut Span| *s = s.shifted(*offset));
                            member_symbol(&cx.lines, &m)
                        })),
                    }
                }
                out.push(symbol(
                    &cx.lines,
                    &f.name,
                    Some("flow".into()),
                    SymbolKind::MODULE,
                    f.span,
                    f.name_span,
                    Some(children),
                ));
            }
        }
    }
    out
}

/// A fold for every flow, tool, step or output spanning several lines, and for runs of comments:
/// from the document symbols and the semantic tokens' comments, which are kept per segment.
pub fn folding_ranges(cx: &Ctx<'_>) -> Vec<FoldingRange> {
    let fold = |start: u32, end: u32, kind: Option<FoldingRangeKind>| FoldingRange {
        start_line: start,
        start_character: None,
        end_line: end,
        end_character: None,
        kind,
        collapsed_text: None,
    };
    let mut out = Vec::new();
    let mut add = |r: Range| {
        if r.end.line > r.start.line {
            out.push(fold(r.start.line, r.end.line, None));
        }
    };
    for item in document_symbols(cx) {
        add(item.range);
        for m in item.children.iter().flatten() {
            if matches!(m.kind, SymbolKind::FUNCTION | SymbolKind::PROPERTY) {
                add(m.range);
            }
        }
    }
    // Consecutive comment lines fold as one block (a comment is one line: `//` to its end).
    let mut block: Option<(u32, u32)> = None;
    let mut line = 0;
    for t in tokens::semantic_tokens(cx) {
        line += t.delta_line;
        if t.token_type != tokens::COMMENT {
            continue;
        }
        block = match block {
            Some((first, last)) if line == last + 1 => Some((first, line)),
            Some((first, last)) => {
                if last > first {
                    out.push(fold(first, last, Some(FoldingRangeKind::Comment)));
                }
                Some((line, line))
            }
            None => Some((line, line)),
        };
    }
    if let Some((first, last)) = block.filter(|(f, l)| l > f) {
        out.push(fold(first, last, Some(FoldingRangeKind::Comment)));
    }
    out
}

#[cfg(test)]
mod tests {
    use reel_compiler::{RootDb, SourceFile};

    use super::*;

    #[test]
    fn symbols_and_folds() {
        let src = "// a\n// b\nflow f {\n  input n: int\n  step a = echo {\n    value: input.n\n  }\n  output a\n}\n";
        let db = RootDb::default();
        let file = SourceFile::new(&db, "t.reel".into(), "/tmp".into(), src.into());
        let cx = Ctx::new(&db, file);
        let syms = document_symbols(&cx);
        assert_eq!(syms.len(), 1);
        let names: Vec<_> = syms[0]
            .children
            .as_ref()
            .unwrap()
            .iter()
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(names, vec!["n", "a", "output"]);
        let folds: Vec<_> = folding_ranges(&cx)
            .iter()
            .map(|f| (f.start_line, f.end_line))
            .collect();
        assert!(
            folds.contains(&(2, 8)) && folds.contains(&(4, 6)) && folds.contains(&(0, 1)),
            "{folds:?}"
        );
    }
}
