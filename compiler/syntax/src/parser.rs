//! The parser (chumsky): tokens to the syntax tree, recovering at declaration, entry and delimiter level.
//!
//! The lexer hands over balanced delimiters, so recovery can always skip one whole entry: up to
//! the next separating line break or comma at the same depth. One mistake gives one diagnostic
//! and the rest of the file is still parsed.

use chumsky::input::{Input as _, ValueInput};
use chumsky::pratt::{infix, left, prefix, right};
use chumsky::prelude::*;

use crate::ast::{self, *};
use crate::codes::Code;
use crate::diagnostic::Diagnostic;
use crate::lexer::lex;
use crate::nesting::limit_nesting;
use crate::span::Span;
use crate::token::{Keyword, Token};

type Sp = SimpleSpan;
/// The parsers' extra: an error type and nothing else (see [`SyntaxError`]).
type Extra<Er> = extra::Err<Er>;

/// The errors the diagnostics are made from: each says what was expected and what was found.
type RichError<'t> = Rich<'t, Token, Sp>;

/// What the parser asks of its error type. Every parser is written once for both: a group of a
/// flow's members is parsed first with [`EmptyErr`], which keeps no account of what each failed
/// alternative expected (that account was about half of parsing a correct file), and only when
/// that finds an error, again with [`Rich`] errors, whose expectations the diagnostics name.
trait SyntaxError<'t, I>:
    chumsky::error::Error<'t, I>
    + chumsky::label::LabelError<'t, I, &'static str>
    + chumsky::label::LabelError<'t, I, chumsky::DefaultExpected<'t, Token>>
    + 't
where
    I: chumsky::input::Input<'t, Token = Token, Span = Sp>,
{
    /// An error with a message of its own.
    fn custom(span: Sp, msg: String) -> Self;
}

impl<'t, I> SyntaxError<'t, I> for RichError<'t>
where
    I: chumsky::input::Input<'t, Token = Token, Span = Sp>,
{
    fn custom(span: Sp, msg: String) -> Self {
        Rich::custom(span, msg)
    }
}

impl<'t, I> SyntaxError<'t, I> for EmptyErr
where
    I: chumsky::input::Input<'t, Token = Token, Span = Sp>,
{
    fn custom(_: Sp, _: String) -> Self {
        EmptyErr::default()
    }
}

/// A parsed file and every lexical and syntax diagnostic found on the way.
#[derive(Clone, Debug, PartialEq)]
pub struct Parsed {
    /// The syntax tree (with `Error` nodes where the source was broken).
    pub file: File,
    /// Lexical and syntax diagnostics, in source order.
    pub diagnostics: Vec<Diagnostic>,
}

/// Parses a whole source file. Never fails and never panics.
pub fn parse(src: &str) -> Parsed {
    let (tokens, lexed) = file_tokens(src);
    let eoi = Sp::from(src.len()..src.len());
    // Rich errors at once, not a first parse without them: a whole file or flow is parsed as a
    // piece when the outline cannot split it, mostly while it is broken, where a first parse
    // would only double the work (a 10,000-step flow's diagnostics came 41 -> 70 ms after a key).
    let (items, errors) = file_parser()
        .parse(tokens[..].split_token_span(eoi))
        .into_output_errors();
    let diagnostics = merge_diagnostics(src, lexed.diagnostics, &errors);
    let mut file = File {
        items: items.unwrap_or_default(),
        comments: lexed.comments,
    };
    crate::docs::attach_doc_comments(&mut file, src);
    Parsed { file, diagnostics }
}

/// A whole file's tokens as the parser reads them, and what the lexer found besides (its
/// diagnostics, with the nesting limit's, and the comments).
fn file_tokens(src: &str) -> (Vec<(Token, Sp)>, crate::lexer::Lexed) {
    let mut lexed = lex(src);
    // Entries are inside a flow's or a tool's braces.
    let limited = limit_nesting(std::mem::take(&mut lexed.tokens), 1, &mut lexed.diagnostics);
    let tokens = limited
        .into_iter()
        .map(|(t, s)| (t, Sp::from(s.range())))
        .collect();
    (tokens, lexed)
}

/// Which token follows a chunk of a flow body in its file, and so the group that ends with it
/// (offsets relative to the start of what is parsed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChunkEnd {
    /// A separating line break at this offset: another member follows.
    Newline(u32),
    /// The flow's closing `}` at this offset.
    Close(u32),
}

/// One group of chunks of a flow body parsed alone: what [`parse`] would give for that stretch
/// of the file (see `outline` for chunks and groups).
#[derive(Clone, Debug, PartialEq)]
pub struct GroupParse {
    /// The members, spans relative to the group's start, doc comments attached.
    pub members: Vec<Member>,
    /// Lexical and syntax diagnostics, relative to the group's start, in source order.
    pub diagnostics: Vec<Diagnostic>,
    /// Whether the group's delimiters balance on their own (if not, the split was wrong).
    pub balanced: bool,
    /// Whether an expression continues after the group's last token, so that the line break
    /// after it separates nothing and the group cannot be parsed apart from the next chunk.
    pub open_end: bool,
}

/// Parses one group of chunks of a flow body (members and the comments between them), given
/// the token that follows it in the file, so that an error at its end reads as it does in the
/// whole file.
///
/// With `ChunkEnd::Newline(at)`, `src` may go on past `at` to the end of the next member's
/// first word (the outline's tail): the group's last entry left delimiters open, and the
/// lexer closes them before that word as it does in the file; the word itself is not parsed.
pub fn parse_group(src: &str, end: ChunkEnd) -> GroupParse {
    let (mut lexed, mut balanced) = crate::lexer::lex_body(src);
    // The line break before the next member's line: the lexer puts the closers at (or before)
    // it, past the comment and blank lines between (the next member's doc comments among them).
    let tail = match end {
        ChunkEnd::Newline(at) if src.len() > at as usize => Some(
            src.rfind('\n')
                .filter(|&n| n >= at as usize)
                .unwrap_or(at as usize),
        ),
        _ => None,
    };
    if let Some(at) = tail {
        // The line break and the word are the next group's. A closer past the line break means
        // the lexer did not take the word for a member's (after a `.` it is a field name) and
        // closed what was open at the end instead: the file does not split here.
        let closed_late = lexed.tokens.iter().any(|(t, s)| {
            s.end as usize > at
                && matches!(
                    t,
                    Token::RBrace
                        | Token::RBracket
                        | Token::RParen
                        | Token::InterpClose
                        | Token::StrEnd
                )
        });
        balanced &= !closed_late;
        lexed.tokens.retain(|(_, s)| s.end as usize <= at);
    }
    let open_end = !crate::lexer::ends_entry(&lexed.tokens);
    // Entries are the group's top level; whether one continues is decided before any is cut.
    let limited = limit_nesting(lexed.tokens, 0, &mut lexed.diagnostics);
    // The file's separating line break is the first one after the group's last token (text
    // that makes no token, such as a stray character, may stand between).
    let last_end = limited.last().map(|(_, s)| s.end as usize);
    let mut tokens: Vec<(Token, Sp)> = Vec::with_capacity(limited.len() + 1);
    tokens.extend(limited.into_iter().map(|(t, s)| (t, Sp::from(s.range()))));
    let eoi = match end {
        ChunkEnd::Newline(at) => {
            // After closers put before the next entry, the file's line break is the last one.
            let at = tail.unwrap_or_else(|| {
                last_end
                    .and_then(|e| src.get(e..)?.find('\n').map(|n| e + n))
                    .unwrap_or(at as usize)
            });
            // The file drops a line break an expression continues across.
            if !open_end {
                tokens.push((Token::Newline, Sp::from(at..at + 1)));
            }
            Sp::from(at + 1..at + 1)
        }
        ChunkEnd::Close(at) => {
            let at = at as usize;
            tokens.push((Token::RBrace, Sp::from(at..at + 1)));
            Sp::from(at + 1..at + 1)
        }
    };
    // First without accounts, again with rich errors only if that found one (see
    // [`SyntaxError`]): a group is small and mostly correct. Errors do not steer a parse (a
    // recovery starts from one and emits it), so a parse that found none is the rich one's.
    let (fast, fast_errors) = group_parser::<_, EmptyErr>()
        .parse(tokens[..].split_token_span(eoi))
        .into_output_errors();
    let (members, errors) = match fast {
        Some(members) if fast_errors.is_empty() => (Some(members), Vec::new()),
        _ => group_parser()
            .parse(tokens[..].split_token_span(eoi))
            .into_output_errors(),
    };
    let diagnostics = merge_diagnostics(src, lexed.diagnostics, &errors);
    let mut members = members.unwrap_or_default();
    crate::docs::attach_member_docs(&mut members, &lexed.comments, src);
    GroupParse {
        members,
        diagnostics,
        balanced,
        open_end,
    }
}

/// Lexical diagnostics and syntax errors together, in source order, without echoes.
fn merge_diagnostics(
    src: &str,
    mut diagnostics: Vec<Diagnostic>,
    errors: &[Rich<'_, Token, Sp>],
) -> Vec<Diagnostic> {
    // A stray token right after a lexical error (on the same line, nothing but blanks between)
    // is that error's echo: report the first only. So is any error at an entry the nesting
    // limit cut out.
    for err in errors {
        let d = to_diagnostic(err);
        let right_after = |l: &Diagnostic| {
            src.get(l.primary.span.end as usize..d.primary.span.start as usize)
                .is_some_and(|gap| gap.bytes().all(|b| b == b' ' || b == b'\t'))
        };
        let echo = diagnostics.iter().any(|l| {
            (right_after(l) && l.code.as_str().starts_with("syntax."))
                || (l.code == Code::SyntaxTooDeep
                    && l.primary.span.start <= d.primary.span.start
                    && d.primary.span.start <= l.primary.span.end)
        });
        if !echo {
            diagnostics.push(d);
        }
    }
    diagnostics.sort_by_key(|d| (d.primary.span.start, d.primary.span.end));
    diagnostics.dedup_by(|a, b| a.primary.span == b.primary.span && a.message == b.message);
    diagnostics
}

fn to_diagnostic(err: &Rich<'_, Token, Sp>) -> Diagnostic {
    let span = Span::new(err.span().start, err.span().end);
    let found = match err.found() {
        Some(Token::StrStart) => "string".to_string(),
        Some(Token::Newline) => "end of line".to_string(),
        Some(t) => t.to_string(),
        None => "end of file".to_string(),
    };
    if let chumsky::error::RichReason::Custom(msg) = err.reason() {
        let d = Diagnostic::error(crate::Code::SyntaxUnexpectedToken, span, msg.to_string());
        return if msg.starts_with("expected an expression") {
            d.with_label("the expression is incomplete")
        } else {
            d.with_label("not part of the entry before it")
                .with_help("separate entries with a line break or a comma, or remove this text")
        };
    }
    let mut expected: Vec<String> = err
        .expected()
        .filter_map(|p| match p {
            // A long list of operators says less than the word "operator".
            chumsky::error::RichPattern::Token(t) if is_operator(t) => {
                Some("an operator".to_string())
            }
            chumsky::error::RichPattern::Token(t) => Some(t.to_string()),
            chumsky::error::RichPattern::Label(l) => Some(l.to_string()),
            chumsky::error::RichPattern::Identifier(i) => Some(format!("`{i}`")),
            chumsky::error::RichPattern::EndOfInput => Some("the end of the file".to_string()),
            _ => None,
        })
        .collect();
    expected.sort();
    expected.dedup();
    let label = match expected.len() {
        0 => "not expected here".to_string(),
        1 => format!("expected {}", expected[0]),
        _ => {
            let last = expected.pop().unwrap_or_default();
            format!("expected {} or {last}", expected.join(", "))
        }
    };
    let mut d = Diagnostic::error(
        crate::Code::SyntaxUnexpectedToken,
        span,
        format!("unexpected {found}"),
    )
    .with_label(label);
    if let Some(help) = help_for(err.found()) {
        d = d.with_help(help);
    }
    d
}

fn is_operator(t: &Token) -> bool {
    use Token::*;
    matches!(
        t,
        Dot | QuestionDot
            | QuestionQuestion
            | EqEq
            | NotEq
            | Lt
            | Le
            | Gt
            | Ge
            | Plus
            | Minus
            | Star
            | Slash
            | Percent
            | AndAnd
            | OrOr
            | LBracket
            | LParen
    )
}

fn help_for(found: Option<&Token>) -> Option<&'static str> {
    match found? {
        Token::Assign => Some("block entries are written `key: value`; compare with `==`"),
        Token::Kw(Keyword::Flow | Keyword::Tool) => {
            Some("declarations cannot nest: close the one before with `}` first")
        }
        Token::Newline => Some("the line ends before its entry is complete"),
        _ => None,
    }
}

fn sp(s: Sp) -> Span {
    Span::new(s.start, s.end)
}

/// `v` holding exactly its elements. A collected vector keeps room for four or more, and the
/// syntax of a big flow is kept whole (each group's parse is memoized): most lists hold one
/// element (a step's one argument), so the room, with that of the check's lowered arguments,
/// was a fifth of what `reel check` held for a flow of 100,000 steps.
fn exact<T>(mut v: Vec<T>) -> Vec<T> {
    v.shrink_to_fit();
    v
}

const OPENERS: [Token; 5] = [
    Token::LBrace,
    Token::LBracket,
    Token::LParen,
    Token::InterpOpen,
    Token::StrStart,
];

/// One balanced group of tokens: `{ … }`, `[ … ]`, `( … )`, a string.
fn group<'t, I, Er>() -> impl Parser<'t, I, (), Extra<Er>> + Clone
where
    I: ValueInput<'t, Token = Token, Span = Sp>,
    Er: SyntaxError<'t, I>,
{
    recursive(|group| {
        let inner = group
            .or(none_of([
                Token::LBrace,
                Token::RBrace,
                Token::LBracket,
                Token::RBracket,
                Token::LParen,
                Token::RParen,
                Token::InterpOpen,
                Token::InterpClose,
                Token::StrStart,
                Token::StrEnd,
            ])
            .ignored())
            .repeated();
        choice((
            inner
                .clone()
                .delimited_by(just(Token::LBrace), just(Token::RBrace)),
            inner
                .clone()
                .delimited_by(just(Token::LBracket), just(Token::RBracket)),
            inner
                .clone()
                .delimited_by(just(Token::LParen), just(Token::RParen)),
            inner
                .clone()
                .delimited_by(just(Token::InterpOpen), just(Token::InterpClose)),
            inner.delimited_by(just(Token::StrStart), just(Token::StrEnd)),
        ))
        .ignored()
    })
}

/// Skips the rest of one entry: balanced groups and tokens up to a separator or a closer.
fn skip_entry<'t, I, Er>() -> impl Parser<'t, I, Sp, Extra<Er>> + Clone
where
    I: ValueInput<'t, Token = Token, Span = Sp>,
    Er: SyntaxError<'t, I>,
{
    let stop = [
        Token::Newline,
        Token::Comma,
        Token::RBrace,
        Token::RBracket,
        Token::RParen,
        Token::InterpClose,
        Token::StrEnd,
    ];
    group()
        .or(none_of(stop).and_is(one_of(OPENERS).not()).ignored())
        .repeated()
        .at_least(1)
        .map_with(|_, e| e.span())
}

/// The closer `close`, and whether the lexer made it up (zero width) because the delimiter was
/// never closed, which it reported. What such a group holds runs to wherever the lexer closed
/// it, so it is only a guess: the callers make it an `Error` node, and nothing checks it again.
fn closer<'t, I, Er>(close: Token) -> impl Parser<'t, I, bool, Extra<Er>> + Clone
where
    I: ValueInput<'t, Token = Token, Span = Sp>,
    Er: SyntaxError<'t, I>,
{
    just(close).map_with(|_, e| {
        let s: Sp = e.span();
        s.start == s.end
    })
}

/// The rest of an entry, possibly nothing: where a recovery that keeps the entry's name resumes.
fn rest_of_entry<'t, I, Er>() -> impl Parser<'t, I, Sp, Extra<Er>> + Clone
where
    I: ValueInput<'t, Token = Token, Span = Sp>,
    Er: SyntaxError<'t, I>,
{
    skip_entry().or_not().map_with(|_, e| e.span())
}

/// `entry`, then anything left before the next separator, reported once as unexpected.
///
/// Without this, text after a complete entry (`input b string` parses `input b` and stops)
/// would fail the whole enclosing list and lose every entry after it.
fn with_trailing<'t, I, O, Er>(
    entry: impl Parser<'t, I, O, Extra<Er>> + Clone,
) -> impl Parser<'t, I, O, Extra<Er>> + Clone
where
    I: ValueInput<'t, Token = Token, Span = Sp>,
    Er: SyntaxError<'t, I>,
{
    with_trailing_by(entry, skip_entry())
}

/// [`with_trailing`], the rest of the entry being what `skip` skips.
fn with_trailing_by<'t, I, O, Er>(
    entry: impl Parser<'t, I, O, Extra<Er>> + Clone,
    skip: impl Parser<'t, I, Sp, Extra<Er>> + Clone,
) -> impl Parser<'t, I, O, Extra<Er>> + Clone
where
    I: ValueInput<'t, Token = Token, Span = Sp>,
    Er: SyntaxError<'t, I>,
{
    let junk = any().rewind().then(skip);
    entry.then_ignore(junk.or_not().validate(|junk, _, emitter| {
        if let Some((first, span)) = junk {
            // `(` and `[` are operators only as a call or an index, which is not what is missing.
            let msg = if is_operator(&first) && !matches!(first, Token::LParen | Token::LBracket) {
                format!("expected an expression after {first}")
            } else {
                format!("unexpected {first} after the end of this entry")
            };
            emitter.emit(Er::custom(span, msg));
        }
    }))
}

fn separator<'t, I, Er>() -> impl Parser<'t, I, (), Extra<Er>> + Clone
where
    I: ValueInput<'t, Token = Token, Span = Sp>,
    Er: SyntaxError<'t, I>,
{
    one_of([Token::Comma, Token::Newline])
        .repeated()
        .at_least(1)
        .ignored()
}

fn name<'t, I, Er>() -> impl Parser<'t, I, Ident, Extra<Er>> + Clone
where
    I: ValueInput<'t, Token = Token, Span = Sp>,
    Er: SyntaxError<'t, I>,
{
    select! { Token::Ident(n) => n }
        .map_with(|name, e| Ident {
            name,
            span: sp(e.span()),
        })
        .labelled("a name")
}

/// Any word, keywords included: keys, argument names and members.
fn word<'t, I, Er>() -> impl Parser<'t, I, Ident, Extra<Er>> + Clone
where
    I: ValueInput<'t, Token = Token, Span = Sp>,
    Er: SyntaxError<'t, I>,
{
    select! {
        Token::Ident(n) => n,
        Token::Kw(k) => k.as_str().to_string(),
    }
    .map_with(|name, e| Ident {
        name,
        span: sp(e.span()),
    })
    .labelled("a name")
}

fn key<'t, I, Er>() -> impl Parser<'t, I, Key, Extra<Er>> + Clone
where
    I: ValueInput<'t, Token = Token, Span = Sp>,
    Er: SyntaxError<'t, I>,
{
    let plain = word().map(|w| Key {
        name: w.name,
        quoted: false,
        span: w.span,
    });
    let quoted = select! { Token::StrText(t) => t }
        .or_not()
        .delimited_by(just(Token::StrStart), just(Token::StrEnd))
        .map_with(|t, e| Key {
            name: t.unwrap_or_default(),
            quoted: true,
            span: sp(e.span()),
        });
    plain.or(quoted).labelled("a key")
}

fn kw<'t, I, Er>(k: Keyword) -> impl Parser<'t, I, Token, Extra<Er>> + Clone
where
    I: ValueInput<'t, Token = Token, Span = Sp>,
    Er: SyntaxError<'t, I>,
{
    just(Token::Kw(k))
}

fn error_expr(s: Sp) -> Expr {
    Expr {
        kind: ExprKind::Error,
        span: sp(s),
    }
}

fn expr_parser<'t, I, Er>() -> impl Parser<'t, I, Expr, Extra<Er>> + Clone
where
    I: ValueInput<'t, Token = Token, Span = Sp>,
    Er: SyntaxError<'t, I>,
{
    recursive(|expr| {
        let literal = select! {
            Token::Int(n) => ExprKind::Int(n),
            Token::Float(text) => ExprKind::Float { value: text.parse().unwrap_or(0.0), text },
            // An invalid duration, already reported by the lexer.
            Token::Duration(text) if text.is_empty() => ExprKind::Error,
            Token::Duration(text) => ExprKind::Duration {
                millis: reel_duration_millis(&text),
                text,
            },
            Token::Kw(Keyword::True) => ExprKind::Bool(true),
            Token::Kw(Keyword::False) => ExprKind::Bool(false),
            Token::Kw(Keyword::Null) => ExprKind::Null,
            // Already reported by the nesting limit.
            Token::TooDeep => ExprKind::Error,
        };

        let interp = expr
            .clone()
            .delimited_by(just(Token::InterpOpen), just(Token::InterpClose))
            .recover_with(via_parser(nested_delimiters(
                Token::InterpOpen,
                Token::InterpClose,
                [
                    (Token::LBrace, Token::RBrace),
                    (Token::LBracket, Token::RBracket),
                    (Token::LParen, Token::RParen),
                ],
                error_expr,
            )))
            .map(StrPart::Interp);
        let string = select! { Token::StrText(t) => StrPart::Text(t) }
            .or(interp)
            .repeated()
            .collect::<Vec<_>>()
            .delimited_by(just(Token::StrStart), just(Token::StrEnd))
            .map(|parts| ExprKind::Str(exact(parts)));

        let field = with_trailing(
            key()
                .then_ignore(just(Token::Colon))
                .then(expr.clone())
                .map_with(|(key, value), e| {
                    Some(Field {
                        key,
                        value,
                        span: sp(e.span()),
                    })
                }),
        )
        .recover_with(via_parser(skip_entry().map(|_| None)));
        let record = field
            .separated_by(separator())
            .allow_leading()
            .allow_trailing()
            .collect::<Vec<Option<Field>>>()
            .delimited_by(just(Token::LBrace), just(Token::RBrace))
            .map(|fields| ExprKind::Record(exact(fields.into_iter().flatten().collect())))
            .labelled("a record");

        let comprehension = kw(Keyword::For)
            .ignore_then(name())
            .then_ignore(kw(Keyword::In))
            .then(expr.clone())
            .then(kw(Keyword::If).ignore_then(expr.clone()).or_not())
            .then_ignore(just(Token::Colon))
            .then(expr.clone())
            .map(|(((var, iter), cond), body)| ExprKind::Comprehension {
                var,
                iter: Box::new(iter),
                cond: cond.map(Box::new),
                body: Box::new(body),
            });
        let items = expr
            .clone()
            .separated_by(just(Token::Comma))
            .allow_trailing()
            .collect::<Vec<_>>()
            .map(|items| ExprKind::List(exact(items)));
        let list = just(Token::LBracket)
            .ignore_then(comprehension.or(items))
            .then(closer(Token::RBracket))
            .map(|(list, made_up)| if made_up { ExprKind::Error } else { list })
            .labelled("a list");

        let if_expr = kw(Keyword::If)
            .ignore_then(expr.clone())
            .then_ignore(kw(Keyword::Then))
            .then(expr.clone())
            .then_ignore(kw(Keyword::Else))
            .then(expr.clone())
            .map(|((cond, then), otherwise)| ExprKind::If {
                cond: Box::new(cond),
                then: Box::new(then),
                otherwise: Box::new(otherwise),
            });

        // A broken argument is one error and an `Error` node: the call stays a call, so its
        // function is still known and the other arguments are still checked.
        let arg =
            with_trailing(expr.clone()).recover_with(via_parser(skip_entry().map(error_expr)));
        let args = just(Token::LParen)
            .ignore_then(
                arg.separated_by(just(Token::Comma))
                    .allow_trailing()
                    .collect::<Vec<_>>(),
            )
            .then(closer(Token::RParen))
            .map_with(|(args, made_up), e| {
                if made_up {
                    vec![error_expr(e.span())]
                } else {
                    exact(args)
                }
            })
            .recover_with(via_parser(nested_delimiters(
                Token::LParen,
                Token::RParen,
                [
                    (Token::LBracket, Token::RBracket),
                    (Token::LBrace, Token::RBrace),
                ],
                |s| vec![error_expr(s)],
            )));
        let call = name()
            .then(args)
            .map(|(func, args)| ExprKind::Call { func, args });

        let reference = select! {
            Token::Ident(n) => n,
            Token::Kw(Keyword::Input) => "input".to_string(),
            Token::Kw(Keyword::Env) => "env".to_string(),
            Token::Kw(Keyword::Secret) => "secret".to_string(),
        }
        .map_with(|name, e| {
            ExprKind::Name(Ident {
                name,
                span: sp(e.span()),
            })
        });

        let paren = just(Token::LParen)
            .ignore_then(expr.clone())
            .then(closer(Token::RParen))
            .map(|(e, made_up)| {
                if made_up {
                    ExprKind::Error
                } else {
                    ExprKind::Paren(Box::new(e))
                }
            });

        let atom = choice((
            literal, string, call, reference, list, record, if_expr, paren,
        ))
        .map_with(|kind, e| Expr {
            kind,
            span: sp(e.span()),
        })
        .recover_with(via_parser(nested_delimiters(
            Token::LParen,
            Token::RParen,
            [
                (Token::LBracket, Token::RBracket),
                (Token::LBrace, Token::RBrace),
            ],
            error_expr,
        )))
        .recover_with(via_parser(nested_delimiters(
            Token::LBracket,
            Token::RBracket,
            [
                (Token::LParen, Token::RParen),
                (Token::LBrace, Token::RBrace),
            ],
            error_expr,
        )))
        .labelled("an expression")
        .boxed();

        enum Post {
            Member(Ident, bool),
            Index(Expr),
        }
        let postfix = choice((
            just(Token::Dot)
                .ignore_then(word())
                .map(|w| Post::Member(w, false)),
            just(Token::QuestionDot)
                .ignore_then(word())
                .map(|w| Post::Member(w, true)),
            expr.clone()
                .delimited_by(just(Token::LBracket), just(Token::RBracket))
                .map(Post::Index),
        ));
        let accessed = atom.foldl_with(postfix.repeated(), |base, post, e| {
            let kind = match post {
                Post::Member(name, optional) => ExprKind::Member {
                    base: Box::new(base),
                    name,
                    optional,
                },
                Post::Index(index) => ExprKind::Index {
                    base: Box::new(base),
                    index: Box::new(index),
                },
            };
            Expr {
                kind,
                span: sp(e.span()),
            }
        });

        let op = |t: Token, op: BinaryOp| just(t).map_with(move |_, e| (op, sp(e.span())));
        let bin = |l: Expr, (op, op_span): (BinaryOp, Span), r: Expr| Expr {
            span: l.span.cover(r.span),
            kind: ExprKind::Binary {
                op,
                op_span,
                lhs: Box::new(l),
                rhs: Box::new(r),
            },
        };
        let un = |op: UnaryOp| {
            move |_, r: Expr, e: &mut chumsky::input::MapExtra<'t, '_, I, Extra<Er>>| Expr {
                span: sp(e.span()),
                kind: ExprKind::Unary {
                    op,
                    expr: Box::new(r),
                },
            }
        };
        accessed
            .pratt((
                prefix(UNARY_PRECEDENCE, just(Token::Bang), un(UnaryOp::Not)),
                prefix(UNARY_PRECEDENCE, just(Token::Minus), un(UnaryOp::Neg)),
                infix(
                    left(7),
                    choice((
                        op(Token::Star, BinaryOp::Mul),
                        op(Token::Slash, BinaryOp::Div),
                        op(Token::Percent, BinaryOp::Rem),
                    )),
                    move |l, o, r, _| bin(l, o, r),
                ),
                infix(
                    left(6),
                    op(Token::Plus, BinaryOp::Add).or(op(Token::Minus, BinaryOp::Sub)),
                    move |l, o, r, _| bin(l, o, r),
                ),
                infix(
                    right(5),
                    op(Token::QuestionQuestion, BinaryOp::Coalesce),
                    move |l, o, r, _| bin(l, o, r),
                ),
                infix(
                    left(4),
                    choice((
                        op(Token::Le, BinaryOp::Le),
                        op(Token::Ge, BinaryOp::Ge),
                        op(Token::Lt, BinaryOp::Lt),
                        op(Token::Gt, BinaryOp::Gt),
                    )),
                    move |l, o, r, _| bin(l, o, r),
                ),
                infix(
                    left(3),
                    op(Token::EqEq, BinaryOp::Eq).or(op(Token::NotEq, BinaryOp::Ne)),
                    move |l, o, r, _| bin(l, o, r),
                ),
                infix(
                    left(2),
                    op(Token::AndAnd, BinaryOp::And),
                    move |l, o, r, _| bin(l, o, r),
                ),
                infix(left(1), op(Token::OrOr, BinaryOp::Or), move |l, o, r, _| {
                    bin(l, o, r)
                }),
            ))
            .labelled("an expression")
            .boxed()
    })
}

fn reel_duration_millis(text: &str) -> u64 {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let n: u64 = text[..split].parse().unwrap_or(0);
    let factor = match &text[split..] {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => 0,
    };
    n.saturating_mul(factor)
}

fn type_parser<'t, I, Er>() -> impl Parser<'t, I, TypeExpr, Extra<Er>> + Clone
where
    I: ValueInput<'t, Token = Token, Span = Sp>,
    Er: SyntaxError<'t, I>,
{
    recursive(|ty| {
        let list = select! { Token::Ident(n) if n == "list" => () }
            .ignore_then(ty.clone().delimited_by(just(Token::Lt), just(Token::Gt)))
            .map(|t| TypeExprKind::List(Box::new(t)));
        let named = word().map(|w| TypeExprKind::Named(w.name));
        let record = type_fields(ty.clone())
            .delimited_by(just(Token::LBrace), just(Token::RBrace))
            .map(TypeExprKind::Record);
        let too_deep = just(Token::TooDeep).to(TypeExprKind::Error);
        let base = choice((list, record, named, too_deep))
            .map_with(|kind, e| TypeExpr {
                kind,
                span: sp(e.span()),
            })
            .labelled("a type");
        // `T??` lexes as one `??` token: it is two optional marks.
        let marks = just(Token::Question)
            .to(1)
            .or(just(Token::QuestionQuestion).to(2));
        base.foldl_with(marks.repeated(), |t, n, e| {
            let mut t = t;
            for _ in 0..n {
                t = TypeExpr {
                    kind: TypeExprKind::Optional(Box::new(t)),
                    span: sp(e.span()),
                };
            }
            t
        })
        .boxed()
    })
}

fn type_fields<'t, I, Er>(
    ty: impl Parser<'t, I, TypeExpr, Extra<Er>> + Clone + 't,
) -> impl Parser<'t, I, Vec<TypeField>, Extra<Er>> + Clone
where
    I: ValueInput<'t, Token = Token, Span = Sp>,
    Er: SyntaxError<'t, I>,
{
    with_trailing(
        key()
            .then_ignore(just(Token::Colon))
            .then(ty)
            .map_with(|(key, ty), e| {
                Some(TypeField {
                    key,
                    ty,
                    span: sp(e.span()),
                })
            }),
    )
    .recover_with(via_parser(skip_entry().map(|_| None)))
    .separated_by(separator())
    .allow_leading()
    .allow_trailing()
    .collect::<Vec<_>>()
    .map(|v| v.into_iter().flatten().collect())
}

/// The members of a flow body, separated by line breaks or commas (the braces are not included).
fn members_parser<'t, I, Er>(
    expr: impl Parser<'t, I, Expr, Extra<Er>> + Clone + 't,
    ty: impl Parser<'t, I, TypeExpr, Extra<Er>> + Clone + 't,
) -> impl Parser<'t, I, Vec<Member>, Extra<Er>> + Clone
where
    I: ValueInput<'t, Token = Token, Span = Sp>,
    Er: SyntaxError<'t, I>,
{
    let block_field = with_trailing(
        key()
            .then_ignore(just(Token::Colon))
            .then(expr.clone())
            .map_with(|(key, value), e| {
                Some(Field {
                    key,
                    value,
                    span: sp(e.span()),
                })
            }),
    )
    .recover_with(via_parser(skip_entry().map(|_| None)));
    let block = block_field
        .separated_by(separator())
        .allow_leading()
        .allow_trailing()
        .collect::<Vec<_>>()
        .delimited_by(just(Token::LBrace), just(Token::RBrace))
        .map_with(|fields: Vec<Option<Field>>, e| {
            let recovered = fields.iter().any(Option::is_none);
            (
                exact(fields.into_iter().flatten().collect()),
                sp(e.span()),
                recovered,
            )
        });

    // The first word is a name, not a keyword: `step s = if {…}.ok then …` is an expression.
    let tool_path = name()
        .foldl_with(
            just(Token::Dot).ignore_then(word()).repeated(),
            |a, b, _| Ident {
                name: format!("{}.{}", a.name, b.name),
                span: a.span.cover(b.span),
            },
        )
        .labelled("a tool name");
    let call = tool_path
        .then(block.clone())
        .map(|(tool, (args, block_span, recovered))| {
            StepBody::Call(Call {
                tool,
                args,
                block_span,
                recovered,
            })
        });
    // Once `step NAME` is read the step exists, whatever follows: references to it stay valid
    // and the one error is where its body went wrong.
    let step_body = just(Token::Assign)
        .ignore_then(call.or(expr.clone().map(StepBody::Expr)))
        .recover_with(via_parser(
            rest_of_entry().map(|s| StepBody::Expr(error_expr(s))),
        ));
    let step = kw(Keyword::Step)
        .ignore_then(name())
        .then(step_body)
        .map_with(|(name, body), e| {
            Member::Step(Step {
                name,
                body,
                doc: None,
                span: sp(e.span()),
            })
        });
    // Likewise an input exists once `input NAME` is read; a missing default is an `Error` node.
    let default = just(Token::Assign).ignore_then(
        expr.clone()
            .recover_with(via_parser(rest_of_entry().map(error_expr))),
    );
    let input = kw(Keyword::Input)
        .ignore_then(name())
        .then(
            just(Token::Colon)
                .ignore_then(ty.clone())
                .then(default.or_not())
                .recover_with(via_parser(rest_of_entry().map(|s| {
                    let ty = TypeExpr {
                        kind: TypeExprKind::Error,
                        span: sp(s),
                    };
                    (ty, None)
                }))),
        )
        .map_with(|(name, (ty, default)), e| {
            Member::Input(ast::Input {
                name,
                ty,
                default,
                doc: None,
                span: sp(e.span()),
            })
        });
    let decl = |k: Keyword| {
        kw(k).ignore_then(name()).map_with(|name, e| NameDecl {
            name,
            doc: None,
            span: sp(e.span()),
        })
    };
    let output = kw(Keyword::Output)
        .ignore_then(expr.clone())
        .map_with(|expr, e| {
            Member::Output(Output {
                expr,
                span: sp(e.span()),
            })
        });
    let member = with_trailing(
        choice((
            step,
            input,
            decl(Keyword::Secret).map(Member::Secret),
            decl(Keyword::Env).map(Member::Env),
            output,
        ))
        .labelled("`input`, `secret`, `env`, `step` or `output`"),
    )
    .recover_with(via_parser(skip_entry().map(|s| Member::Error(sp(s)))));
    member
        .separated_by(separator())
        .allow_leading()
        .allow_trailing()
        .collect::<Vec<_>>()
        .map(exact)
}

/// One group of chunks of a flow body: its members, then the flow's `}` when it ends the body.
fn group_parser<'t, I, Er>() -> impl Parser<'t, I, Vec<Member>, Extra<Er>>
where
    I: ValueInput<'t, Token = Token, Span = Sp>,
    Er: SyntaxError<'t, I>,
{
    members_parser(expr_parser(), type_parser())
        .then_ignore(just(Token::RBrace).or_not())
        .then_ignore(end())
}

fn file_parser<'t, I, Er>() -> impl Parser<'t, I, Vec<Item>, Extra<Er>>
where
    I: ValueInput<'t, Token = Token, Span = Sp>,
    Er: SyntaxError<'t, I>,
{
    let expr = expr_parser();
    let ty = type_parser();
    let members = members_parser(expr.clone(), ty.clone());
    let flow = kw(Keyword::Flow)
        .ignore_then(name())
        .then(
            members
                .delimited_by(just(Token::LBrace), just(Token::RBrace))
                .recover_with(via_parser(nested_delimiters(
                    Token::LBrace,
                    Token::RBrace,
                    [
                        (Token::LBracket, Token::RBracket),
                        (Token::LParen, Token::RParen),
                    ],
                    |s| vec![Member::Error(sp(s))],
                ))),
        )
        .map_with(|(name, members), e| {
            Item::Flow(Flow {
                name,
                doc: None,
                members,
                span: sp(e.span()),
            })
        });

    let schema = kw(Keyword::Input)
        .to(SchemaSide::Input)
        .or(kw(Keyword::Output).to(SchemaSide::Output))
        .map_with(|side, e| (side, sp(e.span())))
        .then(type_fields(ty.clone()).delimited_by(just(Token::LBrace), just(Token::RBrace)))
        .map_with(|((side, keyword_span), fields), e| {
            ToolEntry::Schema(Schema {
                side,
                keyword_span,
                fields,
                span: sp(e.span()),
            })
        });
    let tool_field = key()
        .then_ignore(just(Token::Colon))
        .then(expr.clone())
        .map_with(|(key, value), e| {
            ToolEntry::Field(Field {
                key,
                value,
                span: sp(e.span()),
            })
        });
    let tool_entry = with_trailing(
        schema
            .or(tool_field)
            .labelled("`kind`, `exec`, `input` or `output`"),
    )
    .recover_with(via_parser(skip_entry().map(|s| ToolEntry::Error(sp(s)))));
    let tool = kw(Keyword::Tool)
        .ignore_then(name())
        .then(
            tool_entry
                .separated_by(separator())
                .allow_leading()
                .allow_trailing()
                .collect::<Vec<_>>()
                .delimited_by(just(Token::LBrace), just(Token::RBrace))
                .recover_with(via_parser(nested_delimiters(
                    Token::LBrace,
                    Token::RBrace,
                    [
                        (Token::LBracket, Token::RBracket),
                        (Token::LParen, Token::RParen),
                    ],
                    |s| vec![ToolEntry::Error(sp(s))],
                ))),
        )
        .map_with(|(name, entries), e| {
            Item::Tool(Tool {
                name,
                doc: None,
                entries,
                span: sp(e.span()),
            })
        });

    // At the top level only a line break separates: a stray comma is skipped with the rest of
    // its line, or the whole file would fail to parse.
    let top_level_junk = skip_entry()
        .ignored()
        .or(just(Token::Comma).ignored())
        .repeated()
        .at_least(1)
        .map_with(|_, e| e.span());
    let item = with_trailing_by(
        flow.or(tool).map(Some).labelled("`flow` or `tool`"),
        top_level_junk.clone(),
    )
    .recover_with(via_parser(top_level_junk.map(|_| None)));
    item.separated_by(just(Token::Newline).repeated().at_least(1))
        .allow_leading()
        .allow_trailing()
        .collect::<Vec<_>>()
        .map(|items| items.into_iter().flatten().collect())
        .then_ignore(end())
}

#[cfg(test)]
mod tests;
