//! Semantic tokens: keywords, steps, inputs (and secrets, env names), strings, numbers,
//! durations, comments, builtin functions and tools, from the lexer and the name table, kept
//! per segment of the file (see [`super::pieces`]) and assembled per request.

use std::collections::HashSet;
use std::sync::Arc;

use reel_compiler::queries::{GroupMembers, file_layout};
use reel_syntax::Span;
use reel_syntax::ast::{ExprKind, Member, Tool};
use reel_syntax::token::Token;
use tower_lsp_server::lsp_types::{
    Position, SemanticToken, SemanticTokenModifier, SemanticTokenType, SemanticTokensEdit,
    SemanticTokensLegend,
};

use super::names::{self, Kind};
use super::{Ctx, pieces};
use crate::position::Lines;

const KEYWORD: u32 = 0;
const STEP: u32 = 1;
const INPUT: u32 = 2;
const STRING: u32 = 3;
const NUMBER: u32 = 4;
/// The type of a comment token.
pub const COMMENT: u32 = 5;
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

/// One semantic token, placed in the text it was computed from: its line there, and its column
/// (UTF-16) from the line's start (on the text's first line, from the text's start).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RelToken {
    /// The line, from the text's first.
    pub line: u32,
    /// The column.
    pub col: u32,
    /// The length (UTF-16), within the line.
    pub len: u32,
    /// The token type (an index into [`legend`]'s types).
    pub ty: u32,
    /// The modifiers (bits of [`legend`]'s modifiers).
    pub mods: u32,
}

/// The file's semantic tokens, encoded relative to each other as LSP wants: the kept tokens of
/// each segment (see [`super::pieces`]) moved into place.
pub fn semantic_tokens(cx: &Ctx<'_>) -> Vec<SemanticToken> {
    let mut out = Encoder::default();
    placed_tokens(cx, 0, cx.text.len(), &mut |t| out.push(t));
    out.tokens
}

/// The line of each comment token of the file, in order, from the segments' kept tokens
/// (nothing encoded).
pub fn comment_lines(cx: &Ctx<'_>) -> Vec<u32> {
    let mut lines = Vec::new();
    placed_tokens(cx, 0, cx.text.len(), &mut |t| {
        if t.ty == COMMENT {
            lines.push(t.line);
        }
    });
    lines
}

/// A full answer as the segments' kept tokens and where each segment starts: what the server
/// keeps per document for the next delta, which it answers by comparing segments (an unchanged
/// segment is the same `Arc`), encoding only the tokens between the first and the last that
/// changed.
#[derive(Clone, Debug, Default)]
pub struct TokenAnswer {
    /// The text it is of.
    pub text: Arc<str>,
    segments: Vec<(Position, Arc<[RelToken]>)>,
}

impl TokenAnswer {
    /// The answer for the file: the segments' kept tokens, shared, not copied.
    pub fn of(cx: &Ctx<'_>) -> Self {
        let segments = pieces::segments(cx.db, cx.file);
        let mut out = Vec::with_capacity(segments.len());
        for (i, seg) in segments.iter().enumerate() {
            if i % 64 == 63 {
                cx.db.unwind_if_revision_cancelled();
            }
            let tokens = match seg.group {
                Some(group) => pieces::group_tokens(cx.db, group).clone(),
                None => direct_tokens(cx, seg.start, seg.end).into(),
            };
            if !tokens.is_empty() {
                out.push((cx.lines.position(seg.start), tokens));
            }
        }
        TokenAnswer {
            text: cx.file.text(cx.db).clone(),
            segments: out,
        }
    }

    /// The whole list, encoded.
    pub fn encode(&self) -> Vec<SemanticToken> {
        let mut out = Encoder {
            tokens: Vec::with_capacity(self.segments.iter().map(|(_, t)| t.len()).sum()),
            prev: (0, 0),
        };
        for (base, tokens) in &self.segments {
            place_into(*base, tokens, &mut out);
        }
        out.tokens
    }

    /// The edits that turn `old`'s encoded list into this one's: none when no segment changed,
    /// else one edit from the first changed token to the last, found by comparing segments.
    pub fn delta_from(&self, old: &TokenAnswer) -> Vec<SemanticTokensEdit> {
        let same = |a: &Arc<[RelToken]>, b: &Arc<[RelToken]>| Arc::ptr_eq(a, b) || a == b;
        let (o, n) = (&old.segments, &self.segments);
        let prefix = o
            .iter()
            .zip(n)
            .take_while(|(a, b)| a.0 == b.0 && same(&a.1, &b.1))
            .count();
        if prefix == o.len() && prefix == n.len() {
            return Vec::new();
        }
        // Segments after the edit are moved by whole lines, their first column unchanged: their
        // tokens encode alike, but for the first one's distance from the token before it.
        let room = o.len().min(n.len()) - prefix;
        let moved = |a: Position, b: Position| i64::from(b.line) - i64::from(a.line);
        let shift = match (o.last(), n.last()) {
            (Some(a), Some(b)) => moved(a.0, b.0),
            _ => 0,
        };
        let suffix = o
            .iter()
            .rev()
            .zip(n.iter().rev())
            .take(room)
            .take_while(|(a, b)| {
                a.0.character == b.0.character && moved(a.0, b.0) == shift && same(&a.1, &b.1)
            })
            .count();
        let count = |segs: &[(Position, Arc<[RelToken]>)]| -> usize {
            segs.iter().map(|(_, t)| t.len()).sum()
        };
        let before = count(&o[..prefix]);
        // Both sides of the change, encoded from the same token before them, through the first
        // token of the unchanged end (encoded again: what comes before it changed); then only
        // what differs between the two is sent.
        let prev = n[..prefix]
            .iter()
            .rev()
            .find_map(|(base, t)| t.last().map(|t| absolute(*base, t)))
            .map_or((0, 0), |t| (t.line, t.col));
        let middle = |segs: &[(Position, Arc<[RelToken]>)], suffix: usize| {
            let mut out = Encoder {
                tokens: Vec::new(),
                prev,
            };
            let end = segs.len() - suffix;
            for (base, tokens) in &segs[prefix..end] {
                place_into(*base, tokens, &mut out);
            }
            if let Some((base, tokens)) = segs[end..].first()
                && let Some(t) = tokens.first()
            {
                out.push(absolute(*base, t));
            }
            out.tokens
        };
        let (was, now) = (middle(o, suffix), middle(n, suffix));
        if was == now {
            return Vec::new();
        }
        let same_start = was.iter().zip(&now).take_while(|(a, b)| a == b).count();
        let room = was.len().min(now.len()) - same_start;
        let same_end = was
            .iter()
            .rev()
            .zip(now.iter().rev())
            .take(room)
            .take_while(|(a, b)| a == b)
            .count();
        vec![SemanticTokensEdit {
            start: ((before + same_start) * 5) as u32,
            delete_count: ((was.len() - same_start - same_end) * 5) as u32,
            data: Some(now[same_start..now.len() - same_end].to_vec()),
        }]
    }
}

/// A segment's token, relative to the segment starting at `base`, placed in the file.
fn absolute(base: Position, t: &RelToken) -> RelToken {
    let at = pieces::shift(Position::new(t.line, t.col), base);
    RelToken {
        line: at.line,
        col: at.character,
        ..*t
    }
}

/// Encodes the tokens of the segment starting at `base` onto `out`.
fn place_into(base: Position, tokens: &[RelToken], out: &mut Encoder) {
    for t in tokens {
        out.push(absolute(base, t));
    }
}

/// The semantic tokens that start in `span` (encoded from the start of the file, as a range
/// request answers): the tokens of the full answer that start there, from the segments that
/// overlap it alone.
pub fn semantic_tokens_in(cx: &Ctx<'_>, span: Span) -> Vec<SemanticToken> {
    let (from, to) = (span.start as usize, span.end as usize);
    let (first, last) = (cx.lines.position(from), cx.lines.position(to));
    let key = |p: Position| (p.line, p.character);
    let mut out = Encoder::default();
    placed_tokens(cx, from, to, &mut |t| {
        let at = (t.line, t.col);
        if key(first) <= at && at < key(last) {
            out.push(t);
        }
    });
    out.tokens
}

/// Calls `f` on the tokens, placed in the file, of every segment that overlaps `from..to`, in
/// order.
fn placed_tokens(cx: &Ctx<'_>, from: usize, to: usize, f: &mut impl FnMut(RelToken)) {
    let segments = pieces::segments(cx.db, cx.file);
    let first = segments.partition_point(|s| s.end <= from);
    for (i, seg) in segments[first..].iter().enumerate() {
        if seg.start >= to {
            break;
        }
        // The whole file is many segments: an edit stops the walk between two.
        if i % 64 == 63 {
            cx.db.unwind_if_revision_cancelled();
        }
        let base = cx.lines.position(seg.start);
        let place = |t: &RelToken| {
            let at = pieces::shift(Position::new(t.line, t.col), base);
            f(RelToken {
                line: at.line,
                col: at.character,
                ..*t
            });
        };
        match seg.group {
            Some(group) => pieces::group_tokens(cx.db, group).iter().for_each(place),
            None => direct_tokens(cx, seg.start, seg.end).iter().for_each(place),
        }
    }
}

/// The tokens of a segment whose results are not kept, relative to its start: the members of
/// the groups and the tools that start there (a flow parsed whole, a tool, the whole file when
/// the outline was unsure), or none (the head of the file).
fn direct_tokens(cx: &Ctx<'_>, start: usize, end: usize) -> Vec<RelToken> {
    let layout = file_layout(cx.db, cx.file);
    let mut parts = Vec::new();
    for flow in &layout.flows {
        let here: Vec<&GroupMembers> = flow
            .groups
            .iter()
            .filter(|(offset, _)| *offset as usize == start)
            .map(|(_, g)| g)
            .collect();
        if !here.is_empty() {
            let steps = pieces::step_names(flow);
            parts.extend(here.into_iter().map(|g| (g.members(), steps.clone())));
        }
    }
    let tools: Vec<&Tool> = layout
        .tools
        .iter()
        .filter(|t| t.offset as usize == start)
        .map(|t| &*t.tool)
        .collect();
    relative_tokens(&cx.text[start..end], &parts, &tools)
}

/// The tokens of `text` lexed alone, with the names of `parts` (members whose spans are
/// relative to `text`, each with the step names of its flow) and of `tools` (likewise).
pub fn relative_tokens(
    text: &str,
    parts: &[(&[Member], HashSet<&str>)],
    tools: &[&Tool],
) -> Vec<RelToken> {
    let mut marks: Vec<(Span, u32, u32)> = Vec::new();
    let lexed = reel_syntax::lexer::lex(text);
    for (token, span) in &lexed.tokens {
        let mark = match token {
            Token::Kw(_) => Some((KEYWORD, 0)),
            Token::Int(_) | Token::Float(_) => Some((NUMBER, 0)),
            Token::Duration(_) => Some((NUMBER, DURATION)),
            Token::StrStart | Token::StrText(_) | Token::StrEnd => Some((STRING, 0)),
            _ => None,
        };
        if let Some((ty, modifiers)) = mark {
            marks.push((*span, ty, modifiers));
        }
    }
    for c in &lexed.comments {
        marks.push((c.span, COMMENT, if c.doc { DOC } else { 0 }));
    }
    let mut occs: Vec<(Span, u32, u32)> = tools
        .iter()
        .map(|t| (t.name.span, TOOL, DECLARATION))
        .collect();
    for (members, steps) in parts {
        let mut found = Vec::new();
        for m in *members {
            names::member_occurrences(0, steps, m, &mut found);
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
    marks.extend(occs);
    place(text, marks)
}

/// Places `marks` (spans in `text`) in lines and columns of `text`, in order, each split at
/// line breaks.
fn place(text: &str, mut marks: Vec<(Span, u32, u32)>) -> Vec<RelToken> {
    let lines = Lines::new(text);
    // Sorted and without overlaps (a zero-width repair token or a clash keeps the first).
    marks.retain(|(s, _, _)| !s.is_empty() && (s.end as usize) <= text.len());
    marks.sort_by_key(|(s, _, _)| (s.start, s.end));
    let mut out = Vec::with_capacity(marks.len());
    let mut covered = 0u32;
    // Columns are counted on from the previous offset on the same line, not from the line's
    // start: the marks come in order, so a long line costs its length once, not once per mark.
    let mut cursor = (0usize, Position::new(0, 0));
    let mut position = |offset: usize| {
        let line = lines.line_of(offset) as u32;
        if line != cursor.1.line || offset < cursor.0 {
            cursor = (lines.offset(Position::new(line, 0)), Position::new(line, 0));
        }
        let width: usize = text
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
    for (mark, ty, mods) in marks {
        if mark.start < covered {
            continue;
        }
        covered = mark.end;
        // A token may not span lines: split it at each line break.
        let mut start = mark.start as usize;
        while start < mark.end as usize {
            let line = lines.line_of(start);
            let end = lines.line_end(line).min(mark.end as usize);
            if end > start {
                let pos = position(start);
                let len = position(end).character - pos.character;
                out.push(RelToken {
                    line: pos.line,
                    col: pos.character,
                    len,
                    ty,
                    mods,
                });
            }
            start = lines.line_end(line) + 1;
        }
    }
    out
}

/// Encodes tokens given in order, each relative to the one before (the first from the file's
/// start), as LSP wants.
#[derive(Default)]
struct Encoder {
    tokens: Vec<SemanticToken>,
    prev: (u32, u32),
}

impl Encoder {
    fn push(&mut self, t: RelToken) {
        let delta_line = t.line - self.prev.0;
        let delta_start = if delta_line == 0 {
            t.col - self.prev.1
        } else {
            t.col
        };
        self.tokens.push(SemanticToken {
            delta_line,
            delta_start,
            length: t.len,
            token_type: t.ty,
            token_modifiers_bitset: t.mods,
        });
        self.prev = (t.line, t.col);
    }
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
        let mut big = String::from("flow big {\n");
        for i in 0..400 {
            big.push_str(&format!("  step step_{i} = len(\"v{i}\") + {i}\n"));
        }
        big.push_str("}\n");
        for text in texts().into_iter().chain([big]) {
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
            // Two unclosed delimiters typed, and a step ending the file.
            edited.push(format!(
                "{}  step typed = len(\"ab\n{}",
                &text[..middle],
                &text[middle..]
            ));
            edited.push(text.replacen("\n}", "\n  step last = [1\n}", 1));
            edited.push(text.clone());
            let mut db = RootDb::default();
            let file = SourceFile::new(&db, "t.reel".into(), "/tmp".into(), text.as_str().into());
            let mut old = TokenAnswer::of(&Ctx::new(&db, file));
            assert_eq!(old.encode(), semantic_tokens(&Ctx::new(&db, file)));
            for (k, next) in edited.drain(..).enumerate() {
                file.set_text(&mut db).to(next.as_str().into());
                let cx = Ctx::new(&db, file);
                let new = TokenAnswer::of(&cx);
                assert_eq!(new.encode(), semantic_tokens(&cx), "{next}");
                let edits = new.delta_from(&old);
                assert_eq!(apply(&old.encode(), &edits), new.encode(), "{next}");
                // A step typed in the middle of a big flow (the first edit): only the tokens of
                // the segments that changed are sent.
                let sent: usize = edits
                    .iter()
                    .map(|e| e.data.as_ref().map_or(0, Vec::len))
                    .sum();
                if k == 0 && next.starts_with("flow big") {
                    assert!(sent * 10 < new.encode().len(), "{sent} tokens sent");
                }
                assert!(new.delta_from(&new).is_empty());
                old = new;
            }
        }
    }
}
