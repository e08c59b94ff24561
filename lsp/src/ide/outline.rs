//! The outline of a file: document symbols (flows with their members, tools) and folding ranges.

use std::collections::HashMap;

use reel_compiler::queries::{FlowLayout, GroupMembers, MemberGroup, ToolLayout, file_layout};
use reel_syntax::Span;
use reel_syntax::ast::Member;
use reel_syntax::outline::ItemKind;
use reel_syntax::visit::member_spans_mut;
use tower_lsp_server::lsp_types::{
    DocumentSymbol, FoldingRange, FoldingRangeKind, Position, SymbolKind,
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

/// The groups whose results are kept, by the offset of the segment each starts.
fn kept_groups<'a>(cx: &Ctx<'a>) -> HashMap<usize, MemberGroup<'a>> {
    pieces::segments(cx.db, cx.file)
        .into_iter()
        .filter_map(|s| Some((s.start, s.group?)))
        .collect()
}

/// A tool's symbol.
fn tool_symbol(lines: &Lines<'_>, t: &ToolLayout) -> DocumentSymbol {
    symbol(
        lines,
        &t.tool.name.name,
        Some("tool".into()),
        SymbolKind::INTERFACE,
        t.tool.span.shifted(t.offset),
        t.tool.name.span.shifted(t.offset),
        None,
    )
}

/// A flow's symbol, with its members' symbols as `children`.
fn flow_symbol(lines: &Lines<'_>, f: &FlowLayout, children: Vec<DocumentSymbol>) -> DocumentSymbol {
    symbol(
        lines,
        &f.name,
        Some("flow".into()),
        SymbolKind::MODULE,
        f.span,
        f.name_span,
        Some(children),
    )
}

/// The symbols of a group's members, spans relative to `offset`, computed in place (for a
/// group whose symbols are not kept: a flow parsed whole).
fn placed_member_symbols<'a>(
    lines: &'a Lines<'_>,
    offset: u32,
    group: &'a GroupMembers,
) -> impl Iterator<Item = DocumentSymbol> + 'a {
    group.members().iter().filter_map(move |m| {
        let mut m = m.clone();
        member_spans_mut(&mut m, &mut |s: &mut Span| *s = s.shifted(offset));
        member_symbol(lines, &m)
    })
}

/// The member symbols of one group of a flow, as [`flow_member_pieces`] gives them.
enum MemberPiece<'a> {
    /// A group of a split flow: its kept symbols, relative to `base`, where its segment starts.
    Kept {
        symbols: &'a Vec<DocumentSymbol>,
        base: Position,
    },
    /// A group whose symbols are not kept (a flow parsed whole), computed in place.
    Placed(Vec<DocumentSymbol>),
}

/// The member symbols of flow `f`, group by group, in source order: the one walk both the
/// plain answer and its JSON make. `kept` is [`kept_groups`].
fn flow_member_pieces<'a>(
    cx: &'a Ctx<'_>,
    f: &'a FlowLayout,
    kept: &'a HashMap<usize, MemberGroup<'a>>,
) -> impl Iterator<Item = MemberPiece<'a>> + 'a {
    f.groups
        .iter()
        .enumerate()
        .map(move |(n, (offset, group))| {
            // A long flow is many groups: an edit stops the walk between two.
            if n % 64 == 63 {
                cx.db.unwind_if_revision_cancelled();
            }
            match kept.get(&(*offset as usize)) {
                Some(&g) if matches!(group, GroupMembers::Split(_)) => MemberPiece::Kept {
                    symbols: pieces::group_symbols(cx.db, g),
                    base: cx.lines.position(*offset as usize),
                },
                _ => {
                    MemberPiece::Placed(placed_member_symbols(&cx.lines, *offset, group).collect())
                }
            }
        })
}

/// Flows (with inputs, secrets, env names, steps and the output) and tools, in source order:
/// each group's kept member symbols moved into place (see [`super::pieces`]).
pub fn document_symbols(cx: &Ctx<'_>) -> Vec<DocumentSymbol> {
    let layout = file_layout(cx.db, cx.file);
    let kept = kept_groups(cx);
    let mut out = Vec::with_capacity(layout.order.len());
    for &(kind, i) in &layout.order {
        match kind {
            ItemKind::Tool => out.push(tool_symbol(&cx.lines, &layout.tools[i])),
            ItemKind::Flow => {
                let f = &layout.flows[i];
                let mut children = Vec::new();
                for piece in flow_member_pieces(cx, f, &kept) {
                    match piece {
                        MemberPiece::Kept { symbols, base } => children.extend(
                            symbols
                                .iter()
                                .map(|s| pieces::shift_symbol(s.clone(), base)),
                        ),
                        MemberPiece::Placed(symbols) => children.extend(symbols),
                    }
                }
                out.push(flow_symbol(&cx.lines, f, children));
            }
        }
    }
    out
}

/// The document symbols made JSON, as `serde_json::to_vec` makes
/// `DocumentSymbolResponse::Nested(document_symbols(cx))`, from the JSON of each group's
/// symbols that `kept` holds from the last answer. While a line is typed, every other group's
/// symbols are where they were (the same kept symbols, the same place), so their JSON is copied,
/// not made again: at 10,000 steps making the 2.2 MB of JSON cost more than computing the
/// symbols. A piece is kept by the address of the group's kept symbols and where it is in the
/// file, and used only if the symbols it was made from are equal to the group's.
pub fn document_symbols_json(
    cx: &Ctx<'_>,
    kept: &mut SymbolsJson,
) -> Result<Vec<u8>, serde_json::Error> {
    let layout = file_layout(cx.db, cx.file);
    let groups = kept_groups(cx);
    let mut next: HashMap<PieceKey, KeptPiece> = HashMap::with_capacity(kept.pieces.len());
    let mut out = Vec::with_capacity(kept.last_len + 4096);
    let mut reused = 0;
    out.push(b'[');
    for (n, &(kind, i)) in layout.order.iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        match kind {
            ItemKind::Tool => {
                serde_json::to_writer(&mut out, &tool_symbol(&cx.lines, &layout.tools[i]))?
            }
            ItemKind::Flow => {
                let f = &layout.flows[i];
                serde_json::to_writer(&mut out, &flow_symbol(&cx.lines, f, Vec::new()))?;
                // `children` is the symbol's last field: the JSON ends `"children":[]}`, and the
                // members' symbols go between the brackets. (Should lsp-types ever write it
                // otherwise, the error makes the server answer the plain way.)
                if !out.ends_with(b"[]}") {
                    return Err(serde::ser::Error::custom(
                        "a flow's symbol does not end with its children",
                    ));
                }
                out.truncate(out.len() - 2);
                let mut first = true;
                let mut comma = |out: &mut Vec<u8>| {
                    if !std::mem::take(&mut first) {
                        out.push(b',');
                    }
                };
                for piece in flow_member_pieces(cx, f, &groups) {
                    match piece {
                        MemberPiece::Kept { symbols, base } => {
                            if symbols.is_empty() {
                                continue;
                            }
                            let key = (symbols.as_ptr() as usize, base.line, base.character);
                            let piece = match kept.pieces.remove(&key) {
                                Some(piece) if piece.symbols == *symbols => {
                                    reused += 1;
                                    piece
                                }
                                _ => {
                                    let mut json = Vec::new();
                                    for (k, s) in symbols.iter().enumerate() {
                                        if k > 0 {
                                            json.push(b',');
                                        }
                                        serde_json::to_writer(
                                            &mut json,
                                            &pieces::shift_symbol(s.clone(), base),
                                        )?;
                                    }
                                    KeptPiece {
                                        symbols: symbols.clone(),
                                        json,
                                    }
                                }
                            };
                            comma(&mut out);
                            out.extend_from_slice(&piece.json);
                            next.insert(key, piece);
                        }
                        MemberPiece::Placed(symbols) => {
                            for symbol in &symbols {
                                comma(&mut out);
                                serde_json::to_writer(&mut out, symbol)?;
                            }
                        }
                    }
                }
                out.extend_from_slice(b"]}");
            }
        }
    }
    out.push(b']');
    kept.pieces = next;
    kept.last_len = out.len();
    kept.reused = reused;
    Ok(out)
}

/// The JSON of each group's document symbols in the last answer (see [`document_symbols_json`]).
#[derive(Default)]
pub struct SymbolsJson {
    pieces: HashMap<PieceKey, KeptPiece>,
    last_len: usize,
    reused: usize,
}

impl SymbolsJson {
    /// How many groups' JSON the last answer copied from the one before.
    pub fn reused(&self) -> usize {
        self.reused
    }
}

/// A group's kept symbols by address, and the line and column its segment starts at.
type PieceKey = (usize, u32, u32);

/// One group's symbols and their JSON, moved into place.
struct KeptPiece {
    symbols: Vec<DocumentSymbol>,
    json: Vec<u8>,
}

/// A fold for every flow, tool, step or output spanning several lines, and for runs of comments:
/// the lines of the items and of the kept member symbols of each group, and the comments among
/// the segments' kept tokens. Only lines are read: the symbols are not copied into place nor
/// the tokens encoded, which at 10,000 steps was most of the request.
pub fn folding_ranges(cx: &Ctx<'_>) -> Vec<FoldingRange> {
    let mut out = Vec::new();
    let mut add = |start: u32, end: u32| {
        if end > start {
            out.push(fold(start, end, None));
        }
    };
    let layout = file_layout(cx.db, cx.file);
    let kept = kept_groups(cx);
    let lines_of = |span: Span| {
        let r = cx.lines.range(span);
        (r.start.line, r.end.line)
    };
    for &(kind, i) in &layout.order {
        match kind {
            ItemKind::Tool => {
                let t = &layout.tools[i];
                let (start, end) = lines_of(t.tool.span.shifted(t.offset));
                add(start, end);
            }
            ItemKind::Flow => {
                let f = &layout.flows[i];
                let (start, end) = lines_of(f.span);
                add(start, end);
                for (n, (offset, group)) in f.groups.iter().enumerate() {
                    // A long flow is many groups: an edit stops the walk between two.
                    if n % 64 == 63 {
                        cx.db.unwind_if_revision_cancelled();
                    }
                    match kept.get(&(*offset as usize)) {
                        Some(&g) if matches!(group, GroupMembers::Split(_)) => {
                            let base = cx.lines.position(*offset as usize).line;
                            for s in pieces::group_symbols(cx.db, g) {
                                if matches!(s.kind, SymbolKind::FUNCTION | SymbolKind::PROPERTY) {
                                    add(base + s.range.start.line, base + s.range.end.line);
                                }
                            }
                        }
                        _ => {
                            for m in group.members() {
                                let span = match m {
                                    Member::Step(s) => s.span,
                                    Member::Output(o) => o.span,
                                    _ => continue,
                                };
                                let (start, end) = lines_of(span.shifted(*offset));
                                add(start, end);
                            }
                        }
                    }
                }
            }
        }
    }
    out.extend(comment_folds(tokens::comment_lines(cx)));
    out
}

/// A fold of lines `start` to `end`.
fn fold(start: u32, end: u32, kind: Option<FoldingRangeKind>) -> FoldingRange {
    FoldingRange {
        start_line: start,
        start_character: None,
        end_line: end,
        end_character: None,
        kind,
        collapsed_text: None,
    }
}

/// The folds of the runs of consecutive comment lines among `lines` (in order; a comment is one
/// line, `//` to its end).
fn comment_folds(lines: impl IntoIterator<Item = u32>) -> Vec<FoldingRange> {
    let mut out = Vec::new();
    let mut block: Option<(u32, u32)> = None;
    let mut close = |first: u32, last: u32| {
        if last > first {
            out.push(fold(first, last, Some(FoldingRangeKind::Comment)));
        }
    };
    for line in lines {
        block = match block {
            Some((first, last)) if line == last + 1 => Some((first, line)),
            Some((first, last)) => {
                close(first, last);
                Some((line, line))
            }
            None => Some((line, line)),
        };
    }
    if let Some((first, last)) = block {
        close(first, last);
    }
    out
}

#[cfg(test)]
mod tests {
    use reel_compiler::{RootDb, SourceFile};
    use tower_lsp_server::lsp_types::Range;

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

    /// The folds as the whole document symbols and the encoded token list give them, which is
    /// what `folding_ranges` read before it read the kept per-group results' lines instead
    /// (the comment lines grouped into runs the same way).
    fn folds_from_symbols_and_tokens(cx: &Ctx<'_>) -> Vec<FoldingRange> {
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
        let mut line = 0;
        let comments = tokens::semantic_tokens(cx).into_iter().filter_map(|t| {
            line += t.delta_line;
            (t.token_type == tokens::COMMENT).then_some(line)
        });
        out.extend(comment_folds(comments));
        out
    }

    /// A long flow (split into groups) with documented, multi-line and one-line steps, comment
    /// runs between and across groups, a tool, and `broken` text appended inside the flow.
    fn long_file(broken: &str) -> String {
        let mut src = String::from(
            "// head\n// of the file\ntool t {\n  kind: \"pure\"\n  exec: [\"t\"]\n  input { a: int }\n  output { b: int }\n}\n\nflow f {\n  input n: int\n",
        );
        for i in 0..400 {
            match i % 4 {
                0 => src.push_str(&format!("  /// step {i}\n  /// documented\n  step s{i} = echo {{\n    value: input.n + {i}\n  }}\n")),
                1 => src.push_str(&format!("  // a note\n  step s{i} = {i}\n")),
                2 => src.push_str(&format!("  step s{i} = echo {{ value: {i} }}\n  // one\n  // two\n")),
                _ => src.push_str(&format!("\n  step s{i} = [\n    {i},\n    {i}\n  ]\n")),
            }
        }
        src.push_str(broken);
        src.push_str("  output s0\n}\n// tail\n// comments\n");
        src
    }

    #[test]
    fn folds_equal_those_of_the_whole_symbols_and_tokens() {
        let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
        let mut sources: Vec<(String, String)> = vec![
            ("long".into(), long_file("")),
            (
                "long, a brace left open".into(),
                long_file("  step open = echo {\n"),
            ),
            ("long, a broken member".into(), long_file("  step = = )\n")),
        ];
        for entry in std::fs::read_dir(examples.join("reference"))
            .into_iter()
            .flatten()
            .chain(std::fs::read_dir(&examples).into_iter().flatten())
            .flatten()
        {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "reel") {
                let text = std::fs::read_to_string(&path).expect("an example reads");
                sources.push((path.display().to_string(), text));
            }
        }
        assert!(sources.len() > 5, "the examples are found");
        for (name, src) in &sources {
            let db = RootDb::default();
            let file = SourceFile::new(&db, "t.reel".into(), "/tmp".into(), src.as_str().into());
            let cx = Ctx::new(&db, file);
            assert_eq!(
                folding_ranges(&cx),
                folds_from_symbols_and_tokens(&cx),
                "{name}"
            );
        }
    }
}
