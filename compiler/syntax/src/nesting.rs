//! The nesting limit: an expression, type or entry nested deeper than [`MAX_NESTING`] levels is
//! cut out of the token stream before parsing and reported once, as `syntax.too-deep`.
//!
//! Every pass over an expression (parser, checker, lowering, evaluator, formatter, FlowSpec
//! reader and writer, the language server's walks) recurses on its depth, and the language
//! server and the runtime run them on threads with 2 MiB stacks. Rather than make each pass
//! iterative, the depth is bounded once, here, on tokens, where measuring it needs no
//! recursion: any tree the parser can build from what is left is at most [`MAX_NESTING`] deep.
//!
//! Tokens are read as nested groups (`( )`, `[ ]`, `{ }`, strings, `${ }`), each cut into
//! segments by `,`, `:`, `=` and separating line breaks: a segment holds the tokens of at most
//! one expression (or type, or entry head). A segment's bound is one, plus one for each
//! operator (`+`, `.`, `!`, `?`, `if`, …) and each postfix group (an index or call after
//! something other than a name, as in `a[0][1]`) written in it, plus the largest bound of a
//! segment inside its groups. That is never less than the depth of the tree parsed from it: on
//! any path down the tree, each operator and postfix group adds at most one node, and the path
//! either ends in a leaf (the one) or enters one group, whose node is the one and whose inside
//! is bounded by its segments; siblings in other segments do not add up. The bound grows from a
//! segment to the one that holds it, so when a segment is too deep, so is the entry around it,
//! and the entry (at the top level of a flow or tool body) is the one replaced, by a single
//! [`Token::TooDeep`] the parser reads as an expression that failed (or a type, or a broken
//! entry). One diagnostic per entry; the rest of the file is parsed as usual. Bounds depend
//! only on a segment's own tokens, so a chunk parsed alone is cut exactly as in the whole file.

use crate::codes::Code;
use crate::diagnostic::Diagnostic;
use crate::span::Span;
use crate::token::{Keyword, Token};

/// The deepest an expression, type or entry may nest, counted as [this module](self) counts:
/// every operator adds a level (`1 + 2 + 3` is three deep), and so does every parenthesis,
/// list, record, string and `${ }` around another, and every index or call after another.
/// Chosen so that every recursive pass fits a 2 MiB stack at least twice over in a debug build
/// and a FlowSpec stays within `MAX_JSON_DEPTH`; half the evaluator's own limit.
pub const MAX_NESTING: u32 = 128;

/// How many levels a token adds to the segment it is written in.
fn weight(t: &Token) -> u32 {
    use Token::*;
    match t {
        // `T??` is two optional marks.
        QuestionQuestion => 2,
        Dot | QuestionDot | Question | EqEq | NotEq | Lt | Le | Gt | Ge | Plus | Minus | Star
        | Slash | Percent | Bang | AndAnd | OrOr => 1,
        Kw(Keyword::If | Keyword::For) => 1,
        _ => 0,
    }
}

/// Whether a group opened right after `t` is postfix (an index, or a call's arguments, applied
/// to what `t` ends), which adds a level. After a name it is the first index or a call, whose
/// node the group's own level already counts.
fn ends_operand(t: &Token) -> bool {
    use Token::*;
    matches!(
        t,
        Int(_)
            | Float(_)
            | Duration(_)
            | Kw(Keyword::True | Keyword::False | Keyword::Null)
            | RParen
            | RBracket
            | RBrace
            | StrEnd
            | TooDeep
    )
}

/// Whether `t` ends one segment of its group and starts the next.
fn separates(t: &Token) -> bool {
    matches!(
        t,
        Token::Comma | Token::Colon | Token::Assign | Token::Newline
    )
}

fn closes(t: &Token) -> bool {
    matches!(
        t,
        Token::RBrace | Token::RBracket | Token::RParen | Token::InterpClose | Token::StrEnd
    )
}

/// One open group, and the segment of it being read.
#[derive(Default)]
struct Group {
    /// Index of the segment's first token.
    start: usize,
    /// Levels its own tokens add (operators and postfix groups).
    levels: u32,
    /// The largest bound of a segment inside the groups read so far in this segment.
    inner: u32,
    /// The largest bound of this group's segments finished so far.
    deepest: u32,
}

impl Group {
    fn new(start: usize) -> Group {
        Group {
            start,
            ..Group::default()
        }
    }
}

/// Cuts every entry nested deeper than [`MAX_NESTING`] out of balanced `tokens`, each replaced by
/// one [`Token::TooDeep`] and reported in `diagnostics`. Entries are the segments of depth
/// `entry_depth`: 1 for a whole file (inside a flow's or tool's braces), 0 for a chunk of a body.
pub(crate) fn limit_nesting(
    tokens: Vec<(Token, Span)>,
    entry_depth: usize,
    diagnostics: &mut Vec<Diagnostic>,
) -> Vec<(Token, Span)> {
    let mut cuts: Vec<(usize, usize)> = Vec::new();
    let mut stack = vec![Group::new(0)];
    // Ends the segment of the innermost group at token `end` (exclusive).
    let finish = |stack: &mut Vec<Group>, end: usize, cuts: &mut Vec<(usize, usize)>| {
        let depth = stack.len() - 1;
        let Some(g) = stack.last_mut() else { return };
        if g.start < end {
            let bound = 1u32.saturating_add(g.levels).saturating_add(g.inner);
            if bound > MAX_NESTING && depth == entry_depth {
                cuts.push((g.start, end));
            }
            g.deepest = g.deepest.max(bound);
        }
    };
    for (i, (t, _)) in tokens.iter().enumerate() {
        if t.is_open() {
            let postfix = i > 0 && ends_operand(&tokens[i - 1].0);
            if let Some(g) = stack.last_mut() {
                g.levels = g.levels.saturating_add(u32::from(postfix));
            }
            stack.push(Group::new(i + 1));
        } else if closes(t) && stack.len() > 1 {
            finish(&mut stack, i, &mut cuts);
            let deepest = stack.pop().map_or(0, |g| g.deepest);
            if let Some(g) = stack.last_mut() {
                g.inner = g.inner.max(deepest);
            }
        } else if separates(t) {
            finish(&mut stack, i, &mut cuts);
            if let Some(g) = stack.last_mut() {
                *g = Group {
                    deepest: g.deepest,
                    ..Group::new(i + 1)
                };
            }
        } else if let Some(g) = stack.last_mut() {
            g.levels = g.levels.saturating_add(weight(t));
        }
    }
    // Balanced tokens leave only the top level open.
    while !stack.is_empty() {
        finish(&mut stack, tokens.len(), &mut cuts);
        stack.pop();
    }
    if cuts.is_empty() {
        return tokens;
    }
    cuts.sort_unstable();
    let mut out = Vec::with_capacity(tokens.len());
    let mut next = cuts.into_iter().peekable();
    let mut tokens = tokens.into_iter().enumerate();
    while let Some((i, token)) = tokens.next() {
        let Some(&(start, end)) = next.peek().filter(|(start, _)| *start == i) else {
            out.push(token);
            continue;
        };
        next.next();
        let mut last = token.1;
        for (_, (_, span)) in tokens.by_ref().take(end - start - 1) {
            last = span;
        }
        let span = Span::new(token.1.start as usize, last.end as usize);
        diagnostics.push(too_deep(span));
        out.push((Token::TooDeep, span));
    }
    out
}

fn too_deep(span: Span) -> Diagnostic {
    Diagnostic::error(
        Code::SyntaxTooDeep,
        span,
        format!("this nests deeper than {MAX_NESTING} levels"),
    )
    .with_label("nested too deeply")
    .with_help("split it into steps, or name its parts with steps of their own")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lexer::lex;

    fn cut(src: &str, entry_depth: usize) -> (Vec<Token>, Vec<Diagnostic>) {
        let mut diagnostics = Vec::new();
        let tokens = limit_nesting(lex(src).tokens, entry_depth, &mut diagnostics);
        (tokens.into_iter().map(|(t, _)| t).collect(), diagnostics)
    }

    /// `1 + 1 + …` with `n` operators in one step of a flow.
    fn chain(n: usize) -> String {
        format!(
            "flow f {{\n  step s = 1{}\n  step t = 2\n}}\n",
            " + 1".repeat(n)
        )
    }

    #[test]
    fn a_chain_at_the_limit_is_kept_and_one_past_it_is_cut_alone() {
        // `step s = 1 + …`: the segment after `=` holds the operators and one level of its own.
        let (tokens, diags) = cut(&chain(MAX_NESTING as usize - 1), 1);
        assert!(diags.is_empty());
        assert!(!tokens.contains(&Token::TooDeep));
        let (tokens, diags) = cut(&chain(MAX_NESTING as usize), 1);
        assert_eq!(diags.len(), 1, "{diags:?}");
        assert_eq!(diags[0].code, "syntax.too-deep");
        let kept: Vec<Token> = tokens.into_iter().skip(3).take(6).collect();
        assert_eq!(
            kept,
            [
                Token::Kw(Keyword::Step),
                Token::Ident("s".into()),
                Token::Assign,
                Token::TooDeep,
                Token::Newline,
                Token::Kw(Keyword::Step),
            ]
        );
    }

    #[test]
    fn nested_groups_count_each_level_and_siblings_do_not_add_up() {
        let deep = |n: usize| format!("{}x{}", "(".repeat(n), ")".repeat(n));
        let wide = format!("[{}]", vec![deep(100); 50].join(", "));
        assert!(
            cut(&format!("flow f {{ step s = {wide} }}"), 1)
                .1
                .is_empty()
        );
        // `(x)` is two deep: the parenthesis and the name.
        let at = MAX_NESTING as usize - 1;
        assert!(cut(&format!("step s = {}", deep(at)), 0).1.is_empty());
        let (_, diags) = cut(&format!("step s = {}", deep(at + 1)), 0);
        assert_eq!(diags.len(), 1);
    }

    #[test]
    fn strings_added_up_are_a_chain_and_postfix_indexes_count() {
        let strings = format!("\"a\"{}", " + \"b\"".repeat(MAX_NESTING as usize - 2));
        assert!(cut(&format!("step s = {strings}"), 0).1.is_empty());
        let indexes = |n: usize| format!("x{}", "[0]".repeat(n));
        assert!(
            cut(
                &format!("step s = {}", indexes(MAX_NESTING as usize - 1)),
                0
            )
            .1
            .is_empty()
        );
        assert_eq!(
            cut(&format!("step s = {}", indexes(MAX_NESTING as usize)), 0)
                .1
                .len(),
            1
        );
    }
}
