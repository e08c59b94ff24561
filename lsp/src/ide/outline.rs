//! The outline of a file: document symbols (flows with their members, tools) and folding ranges.

use reel_compiler::queries::file_comments;
use reel_syntax::Span;
use reel_syntax::ast::{Item, Member};
use tower_lsp_server::lsp_types::{DocumentSymbol, FoldingRange, FoldingRangeKind, SymbolKind};

use super::Ctx;

#[allow(deprecated)] // `deprecated` is a required field of the struct, superseded by `tags`.
fn symbol(
    cx: &Ctx<'_>,
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
        range: cx.lines.range(span),
        selection_range: cx.lines.range(name_span),
        children,
    }
}

/// Flows (with inputs, secrets, env names, steps and the output) and tools, in source order.
pub fn document_symbols(cx: &Ctx<'_>) -> Vec<DocumentSymbol> {
    cx.parsed()
        .file
        .items
        .iter()
        .map(|item| match item {
            Item::Tool(t) => symbol(
                cx,
                &t.name.name,
                Some("tool".into()),
                SymbolKind::INTERFACE,
                t.span,
                t.name.span,
                None,
            ),
            Item::Flow(f) => {
                let children = f
                    .members
                    .iter()
                    .filter_map(|m| match m {
                        Member::Input(i) => Some(symbol(
                            cx,
                            &i.name.name,
                            cx.text
                                .get(i.ty.span.range())
                                .map(|t| format!("input: {t}")),
                            SymbolKind::FIELD,
                            i.span,
                            i.name.span,
                            None,
                        )),
                        Member::Secret(n) => Some(symbol(
                            cx,
                            &n.name.name,
                            Some("secret".into()),
                            SymbolKind::KEY,
                            n.span,
                            n.name.span,
                            None,
                        )),
                        Member::Env(n) => Some(symbol(
                            cx,
                            &n.name.name,
                            Some("env".into()),
                            SymbolKind::CONSTANT,
                            n.span,
                            n.name.span,
                            None,
                        )),
                        Member::Step(s) => Some(symbol(
                            cx,
                            &s.name.name,
                            Some(match &s.body {
                                reel_syntax::ast::StepBody::Call(c) => c.tool.name.clone(),
                                reel_syntax::ast::StepBody::Expr(_) => "expression".into(),
                            }),
                            SymbolKind::FUNCTION,
                            s.span,
                            s.name.span,
                            None,
                        )),
                        Member::Output(o) => Some(symbol(
                            cx,
                            "output",
                            None,
                            SymbolKind::PROPERTY,
                            o.span,
                            o.span,
                            None,
                        )),
                        Member::Error(_) => None,
                    })
                    .collect();
                symbol(
                    cx,
                    &f.name.name,
                    Some("flow".into()),
                    SymbolKind::MODULE,
                    f.span,
                    f.name.span,
                    Some(children),
                )
            }
        })
        .collect()
}

/// A fold for every flow, tool, step or output spanning several lines, and for runs of comments.
pub fn folding_ranges(cx: &Ctx<'_>) -> Vec<FoldingRange> {
    let mut spans: Vec<(Span, Option<FoldingRangeKind>)> = Vec::new();
    for item in &cx.parsed().file.items {
        spans.push((item.span(), None));
        if let Item::Flow(f) = item {
            spans.extend(
                f.members
                    .iter()
                    .filter(|m| matches!(m, Member::Step(_) | Member::Output(_)))
                    .map(|m| (m.span(), None)),
            );
        }
    }
    // Consecutive comment lines fold as one block.
    let mut block: Option<Span> = None;
    for c in file_comments(cx.db, cx.file) {
        block = match block {
            Some(b)
                if cx.lines.line_of(c.span.start as usize)
                    == cx.lines.line_of(b.end as usize) + 1 =>
            {
                Some(b.cover(c.span))
            }
            Some(b) => {
                spans.push((b, Some(FoldingRangeKind::Comment)));
                Some(c.span)
            }
            None => Some(c.span),
        };
    }
    spans.extend(block.map(|b| (b, Some(FoldingRangeKind::Comment))));
    spans
        .into_iter()
        .filter_map(|(span, kind)| {
            let start = cx.lines.line_of(span.start as usize);
            let end = cx.lines.line_of(span.end as usize);
            (end > start).then_some(FoldingRange {
                start_line: start as u32,
                start_character: None,
                end_line: end as u32,
                end_character: None,
                kind,
                collapsed_text: None,
            })
        })
        .collect()
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
