//! Semantic tokens: keywords, steps, inputs (and secrets, env names), strings, numbers,
//! durations, comments, builtin functions and tools, from the lexer and the name table.

use reel_syntax::Span;
use reel_syntax::ast::{ExprKind, Item};
use reel_syntax::token::Token;
use tower_lsp_server::lsp_types::{
    Position, SemanticToken, SemanticTokenModifier, SemanticTokenType, SemanticTokensLegend,
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
    let mut marks: Vec<(Span, u32, u32)> = Vec::new();
    let lexed = reel_syntax::lexer::lex(cx.text);
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
    for occ in names::occurrences(&cx.parsed().file) {
        let ty = match occ.symbol.kind {
            Kind::Step => STEP,
            Kind::Input | Kind::Secret | Kind::Env => INPUT,
            Kind::Tool => TOOL,
        };
        marks.push((occ.span, ty, if occ.definition { DECLARATION } else { 0 }));
    }
    for item in &cx.parsed().file.items {
        let Item::Flow(f) = item else { continue };
        for m in &f.members {
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
    }
    // Sorted and without overlaps (a zero-width repair token or a clash keeps the first).
    marks.retain(|(s, _, _)| !s.is_empty() && (s.end as usize) <= cx.text.len());
    marks.sort_by_key(|(s, _, _)| (s.start, s.end));
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
    for (span, ty, modifiers) in marks {
        if span.start < covered {
            continue;
        }
        covered = span.end;
        // A token may not span lines: split it at each line break.
        let mut start = span.start as usize;
        while start < span.end as usize {
            let line = cx.lines.line_of(start);
            let end = cx.lines.line_end(line).min(span.end as usize);
            if end > start {
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
}
