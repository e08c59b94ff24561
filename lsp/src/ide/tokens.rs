//! Semantic tokens: keywords, steps, inputs (and secrets, env names), strings, numbers,
//! durations, comments, builtin functions and tools, from the lexer and the name table.

use reel_compiler::queries::file_layout;
use reel_syntax::Span;
use reel_syntax::ast::{ExprKind, Item};
use reel_syntax::token::Token;
use tower_lsp_server::lsp_types::{
    Position, SemanticToken, SemanticTokenModifier, SemanticTokenType, SemanticTokensEdit,
    SemanticTokensLegend,
};

use super::Ctx;
use super::names::{self, Kind};

const KEYWORD: u32 = 0;
const STEP: u32 = 1;
const INPUT: u32 = 2;
const STRING: u32 = 3;
const NUMBER: u32 = 4;
const COMMENT: u32 = 5;
const FUNCTION: u32 = 6;
const TOOL: u32 = 7;

const DECLARATION: u32 = 1;
const DURATION: u32 = 2;
const DOC: u32 = 4;

/// The token types and modifiers, in the order the encoded indices refer to.
pub fn legend() -> SemanticTokensLegend {
    SemanticTokensLegend {
        token_types: vec![
            SemanticTokenType::KEYWORD,
            SemanticTokenType::VARIABLE,
            SemanticTokenType::PARAMETER,
            SemanticTokenType::STRING,
            SemanticTokenType::NUMBER,
            SemanticTokenType::COMMENT,
            SemanticTokenType::FUNCTION,
            SemanticTokenType::NAMESPACE,
        ],
        token_modifiers: vec![
            SemanticTokenModifier::DECLARATION,
            SemanticTokenModifier::new("duration"),
            SemanticTokenModifier::DOCUMENTATION,
        ],
    }
}

/// The file's semantic tokens, encoded relative to each other as LSP wants.
pub fn semantic_tokens(cx: &Ctx<'_>) -> Vec<SemanticToken> {
    semantic_tokens_in(cx, Span::new(0, cx.text.len()))
}

/// The semantic tokens that start in `span` (encoded from the start of the file, as a range
/// request answers): the tokens of the full answer that start there, computed from the text
/// around `span` alone (see [`window`]).
pub fn semantic_tokens_in(cx: &Ctx<'_>, span: Span) -> Vec<SemanticToken> {
    let (from, to) = window(cx, span);
    let mut marks: Vec<(Span, u32, u32)> = Vec::new();
    let lexed = reel_syntax::lexer::lex(&cx.text[from..to]);
    let from32 = from as u32;
    for (token, span) in &lexed.tokens {
        let mark = match token {
            Token::Kw(_) => Some((KEYWORD, 0)),
            Token::Int(_) | Token::Float(_) => Some((NUMBER, 0)),
            Token::Duration(_) => Some((NUMBER, DURATION)),
            Token::StrStart | Token::StrText(_) | Token::StrEnd => Some((STRING, 0)),
            _ => None,
        };
        if let Some((ty, modifiers)) = mark {
            marks.push((span.shifted(from32), ty, modifiers));
        }
    }
    for c in &lexed.comments {
        marks.push((c.span.shifted(from32), COMMENT, if c.doc { DOC } else { 0 }));
    }
    let mut occs = Vec::new();
    let overlaps = |s: Span| (s.start as usize) < to && (s.end as usize) >= from;
    for (idx, item) in cx.parsed().file.items.iter().enumerate() {
        if !overlaps(item.span()) {
            continue;
        }
        match item {
            Item::Tool(t) => occs.push((t.name.span, TOOL, DECLARATION)),
            Item::Flow(f) => {
                let steps = names::step_names(f);
                let first = f
                    .members
                    .partition_point(|m| (m.span().end as usize) < from);
                let mut found = Vec::new();
                for (i, m) in f.members[first..]
                    .iter()
                    .take_while(|m| (m.span().start as usize) < to)
                    .enumerate()
                {
                    // The full list walks every member: an edit stops it on the way.
                    if i % 256 == 255 {
                        cx.db.unwind_if_revision_cancelled();
                    }
                    names::member_occurrences(idx, &steps, m, &mut found);
                    for e in reel_syntax::visit::member_exprs(m) {
                        reel_syntax::visit::walk_expr(e, &mut |e| {
                            if let ExprKind::Call { func, .. } = &e.kind
                                && reel_eval::builtin(&func.name).is_some()
                            {
                                marks.push((func.span, FUNCTION, 0));
                            }
                        });
                    }
                }
                for occ in found {
                    let ty = match occ.symbol.kind {
                        Kind::Step => STEP,
                        Kind::Input | Kind::Secret | Kind::Env => INPUT,
                        Kind::Tool => TOOL,
                    };
                    occs.push((occ.span, ty, if occ.definition { DECLARATION } else { 0 }));
                }
            }
        }
    }
    marks.extend(occs);
    encode(cx, marks, span)
}

/// The stretch of text lexed for the tokens of `span`: from the last place before it where the
/// file can be lexed on its own (the start of a group of members or of a piece the checker
/// parsed alone, or of the file) to the first one after it, so that lexing it alone gives the
/// tokens lexing the whole file gives there.
fn window(cx: &Ctx<'_>, span: Span) -> (usize, usize) {
    let layout = file_layout(cx.db, cx.file);
    let starts = layout
        .flows
        .iter()
        .flat_map(|f| f.groups.iter().map(|(offset, _)| *offset as usize))
        .chain(layout.tools.iter().map(|t| t.offset as usize));
    let (mut from, mut to) = (0, cx.text.len());
    for s in starts {
        if s <= span.start as usize {
            from = from.max(s);
        } else if s >= span.end as usize {
            to = to.min(s);
        }
    }
    (from, to.max(from))
}

/// Encodes `marks` that start in `span` relative to each other as LSP wants (the first from the
/// file's start).
fn encode(cx: &Ctx<'_>, mut marks: Vec<(Span, u32, u32)>, span: Span) -> Vec<SemanticToken> {
    // Sorted and without overlaps (a zero-width repair token or a clash keeps the first).
    marks.retain(|(s, _, _)| !s.is_empty() && (s.end as usize) <= cx.text.len());
    marks.sort_by_key(|(s, _, _)| (s.start, s.end));
    let wanted = span.start as usize..span.end as usize;
    let mut out = Vec::new();
    let (mut prev_line, mut prev_col, mut covered) = (0u32, 0u32, 0u32);
    // Columns are counted on from the previous offset on the same line, not from the line's
    // start: the marks come in order, so a long line costs its length once, not once per mark.
    let mut cursor = (0usize, Position::new(0, 0));
    let mut position = |offset: usize| {
        let line = cx.lines.line_of(offset) as u32;
        if line != cursor.1.line || offset < cursor.0 {
            cursor = (
                cx.lines.offset(Position::new(line, 0)),
                Position::new(line, 0),
            );
        }
        let width: usize = cx
            .text
            .get(cursor.0..offset)
            .unwrap_or_default()
            .chars()
            .map(char::len_utf16)
            .sum();
        cursor = (
            offset,
            Position::new(line, cursor.1.character + width as u32),
        );
        cursor.1
    };
    for (mark, ty, modifiers) in marks {
        if mark.start < covered {
            continue;
        }
        covered = mark.end;
        // A token may not span lines: split it at each line break.
        let mut start = mark.start as usize;
        while start < mark.end as usize {
            let line = cx.lines.line_of(start);
            let end = cx.lines.line_end(line).min(mark.end as usize);
            if end > start && wanted.contains(&start) {
                let pos = position(start);
                let len = position(end).character - pos.character;
                let delta_line = pos.line - prev_line;
                let delta_start = if delta_line == 0 {
                    pos.character - prev_col
                } else {
                    pos.character
                };
                out.push(SemanticToken {
                    delta_line,
                    delta_start,
                    length: len,
                    token_type: ty,
                    token_modifiers_bitset: modifiers,
                });
                (prev_line, prev_col) = (pos.line, pos.character);
            }
            start = cx.lines.line_end(line) + 1;
        }
    }
    out
}

/// The edits that turn the token list `old` into `new`: one edit replacing what lies between
/// their common beginning and their common end (none when they are equal). Positions and counts
/// are in integers of the encoded list, five per token, as LSP wants.
pub fn delta(old: &[SemanticToken], new: &[SemanticToken]) -> Vec<SemanticTokensEdit> {
    let prefix = old.iter().zip(new).take_while(|(a, b)| a == b).count();
    if prefix == old.len() && prefix == new.len() {
        return Vec::new();
    }
    let room = old.len().min(new.len()) - prefix;
    let suffix = old
        .iter()
        .rev()
        .zip(new.iter().rev())
        .take(room)
        .take_while(|(a, b)| a == b)
        .count();
    vec![SemanticTokensEdit {
        start: (prefix * 5) as u32,
        delete_count: ((old.len() - prefix - suffix) * 5) as u32,
        data: Some(new[prefix..new.len() - suffix].to_vec()),
    }]
}

#[cfg(test)]
mod tests {
    use reel_compiler::{RootDb, SourceFile};

    use super::*;

    #[test]
    fn tokens_are_classified_and_relative() {
        let src = "// hi\nflow f {\n  step a = sleep { for: 1s }\n  output len(\"x\") + a\n}\n";
        let db = RootDb::default();
        let file = SourceFile::new(&db, "t.reel".into(), "/tmp".into(), src.into());
        let cx = Ctx::new(&db, file);
        let tokens = semantic_tokens(&cx);
        // Absolute (line, col, len, type) back from the relative encoding.
        let (mut line, mut col) = (0, 0);
        let mut abs = Vec::new();
        for t in &tokens {
            if t.delta_line > 0 {
                col = 0;
            }
            line += t.delta_line;
            col += t.delta_start;
            abs.push((line, col, t.length, t.token_type));
        }
        assert_eq!(abs[0], (0, 0, 5, COMMENT));
        assert_eq!(abs[1], (1, 0, 4, KEYWORD));
        assert!(abs.contains(&(2, 7, 1, STEP)), "{abs:?}");
        assert!(abs.contains(&(2, 11, 5, TOOL)), "{abs:?}");
        assert!(abs.contains(&(2, 24, 2, NUMBER)), "{abs:?}");
        assert!(abs.contains(&(3, 9, 3, FUNCTION)), "{abs:?}");
        assert!(abs.contains(&(3, 20, 1, STEP)), "{abs:?}");
    }

    /// The tokens as absolute (line, column, length, type, modifiers).
    fn absolute(tokens: &[SemanticToken]) -> Vec<(u32, u32, u32, u32, u32)> {
        let (mut line, mut col) = (0, 0);
        tokens
            .iter()
            .map(|t| {
                if t.delta_line > 0 {
                    col = 0;
                }
                line += t.delta_line;
                col += t.delta_start;
                (line, col, t.length, t.token_type, t.token_modifiers_bitset)
            })
            .collect()
    }

    /// The reference examples, and a file of two flows and a tool with comments between them.
    fn texts() -> Vec<String> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/reference");
        let mut out: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "reel"))
            .map(|p| std::fs::read_to_string(p).unwrap())
            .collect();
        out.push(
            "// one\n/// The tool.\ntool t {\n  kind: pure\n  exec: [\"x\"]\n}\n\n// two\nflow f {\n  input n: int = 1\n  /// Doc.\n  step a = t { v: \"${input.n} // not a comment\" }\n  // between\n  step b = len([for x in [a]: x]) + 2\n  step c = \"multi ${\n    b\n  } line\"\n  output { a: a, b: b, c: c }\n}\n\nflow g {\n  step z = sleep { for: 1s }\n  output z\n}\n"
                .to_string(),
        );
        out
    }

    #[test]
    fn range_tokens_are_the_full_tokens_that_start_in_the_range() {
        for text in texts() {
            let db = RootDb::default();
            let file = SourceFile::new(&db, "t.reel".into(), "/tmp".into(), text.as_str().into());
            let cx = Ctx::new(&db, file);
            let full = absolute(&semantic_tokens(&cx));
            assert!(!full.is_empty());
            let lines = text.lines().count() as u32;
            for start in 0..lines {
                for len in [1, 4, 13] {
                    let range = tower_lsp_server::lsp_types::Range::new(
                        Position::new(start, 0),
                        Position::new(start + len, 0),
                    );
                    let got = absolute(&semantic_tokens_in(&cx, cx.lines.span(range)));
                    let want: Vec<_> = full
                        .iter()
                        .filter(|t| t.0 >= start && t.0 < start + len)
                        .copied()
                        .collect();
                    assert_eq!(got, want, "lines {start}..{}", start + len);
                }
            }
        }
    }

    /// `old` with LSP's `edits` applied, in the integers of the encoding.
    fn apply(old: &[SemanticToken], edits: &[SemanticTokensEdit]) -> Vec<SemanticToken> {
        let ints = |t: &[SemanticToken]| -> Vec<u32> {
            t.iter()
                .flat_map(|t| {
                    [
                        t.delta_line,
                        t.delta_start,
                        t.length,
                        t.token_type,
                        t.token_modifiers_bitset,
                    ]
                })
                .collect()
        };
        let mut data = ints(old);
        for e in edits.iter().rev() {
            let start = e.start as usize;
            let inserted = ints(e.data.as_deref().unwrap_or_default());
            data.splice(start..start + e.delete_count as usize, inserted);
        }
        data.chunks(5)
            .map(|c| SemanticToken {
                delta_line: c[0],
                delta_start: c[1],
                length: c[2],
                token_type: c[3],
                token_modifiers_bitset: c[4],
            })
            .collect()
    }

    #[test]
    fn a_delta_applied_to_the_previous_tokens_gives_the_new_ones() {
        use salsa::Setter;
        for text in texts() {
            let middle = text[..text.len() / 2].rfind('\n').map_or(0, |i| i + 1);
            let mut edited = vec![
                // A step typed in the middle, a line taken out, a literal lengthened.
                format!(
                    "{}  step typed = 1 + 2\n{}",
                    &text[..middle],
                    &text[middle..]
                ),
                format!(
                    "{}{}",
                    &text[..middle],
                    text[middle..].split_once('\n').map_or("", |(_, rest)| rest)
                ),
                text.replacen('1', "12345", 1),
                text.clone(),
            ];
            let mut db = RootDb::default();
            let file = SourceFile::new(&db, "t.reel".into(), "/tmp".into(), text.as_str().into());
            let mut old = semantic_tokens(&Ctx::new(&db, file));
            for next in edited.drain(..) {
                file.set_text(&mut db).to(next.as_str().into());
                let new = semantic_tokens(&Ctx::new(&db, file));
                let edits = delta(&old, &new);
                assert_eq!(apply(&old, &edits), new);
                assert!(delta(&new, &new).is_empty());
                old = new;
            }
        }
    }
}
