//! The lexer: source text to tokens, comments and lexical diagnostics.
//!
//! Two things happen here rather than in the parser, because they make recovery simple and
//! errors precise. Delimiters are balanced: a missing or stray closer is reported once, at the
//! opener, and the token stream is repaired so the parser never sees an unbalanced file. And line
//! breaks are kept only where they separate entries (inside `{ }` and at the top level, between
//! two tokens that could not continue one expression), so `a +` at the end of a line continues on
//! the next one while `a` followed by `b: …` starts a new entry.

use crate::ast::Comment;
use crate::diagnostic::Diagnostic;
use crate::span::Span;
use crate::token::{Keyword, Token};

/// The lexer's output.
#[derive(Clone, Debug, PartialEq)]
pub struct Lexed {
    /// The tokens with their spans; delimiters balanced, separating line breaks as [`Token::Newline`].
    pub tokens: Vec<(Token, Span)>,
    /// Every comment, in source order.
    pub comments: Vec<Comment>,
    /// Lexical problems (unterminated strings, bad escapes, stray characters, unbalanced delimiters).
    pub diagnostics: Vec<Diagnostic>,
}

/// An open delimiter or string, as the lexer and the outline scan track nesting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Delim {
    Brace,
    Bracket,
    Paren,
    Interp,
    Str,
}

impl Delim {
    fn open_text(self) -> &'static str {
        match self {
            Delim::Brace => "{",
            Delim::Bracket => "[",
            Delim::Paren => "(",
            Delim::Interp => "${",
            Delim::Str => "\"",
        }
    }

    fn close_text(self) -> &'static str {
        match self {
            Delim::Brace | Delim::Interp => "}",
            Delim::Bracket => "]",
            Delim::Paren => ")",
            Delim::Str => "\"",
        }
    }

    fn close_token(self) -> Token {
        match self {
            Delim::Brace => Token::RBrace,
            Delim::Bracket => Token::RBracket,
            Delim::Paren => Token::RParen,
            Delim::Interp => Token::InterpClose,
            Delim::Str => Token::StrEnd,
        }
    }
}

/// Lexes `src`. Never fails: problems become diagnostics and the tokens are repaired.
pub fn lex(src: &str) -> Lexed {
    let mut lexer = Lexer::new(src, false);
    lexer.run();
    lexer.finish()
}

/// Lexes `src`, a run of a flow body's members, as the file's lexer does inside the flow's
/// braces (a member line closes what its entry left open, as in the file), and says whether
/// it balanced as a run of whole entries should: nothing closed the flow's brace, and nothing
/// was left open at the end. A `src` that ends with the first word of the next member's line
/// (the outline's tail, see `outline::ChunkSpan::tail`) is closed before that word exactly as
/// the file is, "the next entry starts here"; the caller drops the word.
pub(crate) fn lex_body(src: &str) -> (Lexed, bool) {
    let mut lexer = Lexer::new(src, true);
    lexer.run();
    let balanced = lexer.body_intact;
    (lexer.finish(), balanced)
}

impl<'a> Lexer<'a> {
    fn new(src: &'a str, body: bool) -> Self {
        Lexer {
            src,
            pos: 0,
            raw: Vec::new(),
            comments: Vec::new(),
            diagnostics: Vec::new(),
            // Inside a body, the flow's brace: never reported, never closed.
            stack: if body {
                vec![(Delim::Brace, Span::new(0, 0))]
            } else {
                Vec::new()
            },
            unterminated: false,
            line_start: true,
            last_newline: 0,
            body,
            body_intact: true,
        }
    }

    fn finish(self) -> Lexed {
        Lexed {
            tokens: filter_newlines(self.raw),
            comments: self.comments,
            diagnostics: self.diagnostics,
        }
    }
}

struct Lexer<'a> {
    src: &'a str,
    pos: usize,
    raw: Vec<(Token, Span)>,
    comments: Vec<Comment>,
    diagnostics: Vec<Diagnostic>,
    stack: Vec<(Delim, Span)>,
    /// Whether a string ran to the end of its line: delimiters it swallowed are then repaired
    /// silently, since the string is the one mistake.
    unterminated: bool,
    /// Whether only white space stands between the last line break and `pos`.
    line_start: bool,
    /// Where the last line break is.
    last_newline: usize,
    /// Lexing a run of a flow body's members: `stack[0]` stands for the flow's brace.
    body: bool,
    /// In a body, whether the flow's brace is still open and nothing else was left open at the end.
    body_intact: bool,
}

impl<'a> Lexer<'a> {
    fn peek(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }

    fn peek_at(&self, n: usize) -> Option<char> {
        self.src[self.pos..].chars().nth(n)
    }

    fn push(&mut self, token: Token, start: usize) {
        self.raw.push((token, Span::new(start, self.pos)));
    }

    fn newline_significant(&self) -> bool {
        matches!(self.stack.last(), None | Some((Delim::Brace, _)))
    }

    fn run(&mut self) {
        while self.pos < self.src.len() {
            if matches!(self.stack.last(), Some((Delim::Str, _))) {
                self.string_body();
            } else {
                self.token();
            }
        }
        if let Some((Delim::Str, _)) = self.stack.last() {
            self.string_body();
        }
        let at = self.src.len();
        if self.body {
            // The flow's brace stands open beyond the text; whatever else is open is not.
            if self.stack.len() > 1 {
                self.body_intact = false;
                self.close_unclosed(1, at, None);
            }
            if self.stack.pop().is_none() {
                self.body_intact = false;
            }
            return;
        }
        if !self.stack.is_empty() {
            self.close_all_unclosed(at, None);
        }
    }

    /// Reports the delimiters still open and closes them with empty tokens at `at`.
    fn close_all_unclosed(&mut self, at: usize, reason: Option<(Span, &str)>) {
        self.close_unclosed(0, at, reason);
    }

    /// Reports the delimiters open above `depth` and closes them with empty tokens at `at`.
    fn close_unclosed(&mut self, depth: usize, at: usize, reason: Option<(Span, &str)>) {
        if self.body && depth == 0 {
            self.body_intact = false;
        }
        let open: Vec<(Delim, Span)> = self.stack.drain(depth..).rev().collect();
        let Some(&(innermost, innermost_span)) = open.first() else {
            return;
        };
        let mut diag = Diagnostic::error(
            crate::Code::SyntaxUnclosedDelimiter,
            innermost_span,
            format!("`{}` is never closed", innermost.open_text()),
        )
        .with_label("opened here")
        .with_help(format!(
            "add `{}` where this block ends",
            innermost.close_text()
        ));
        for (delim, span) in open.iter().skip(1) {
            diag = diag.with_secondary(
                *span,
                format!("`{}` is not closed either", delim.open_text()),
            );
        }
        if let Some((span, msg)) = reason {
            diag = diag.with_secondary(span, msg);
        }
        if !self.unterminated {
            self.diagnostics.push(diag);
        }
        for (delim, _) in open {
            self.raw.push((delim.close_token(), Span::new(at, at)));
        }
    }

    fn string_body(&mut self) {
        let start = self.pos;
        let mut text = String::new();
        loop {
            let Some(c) = self.peek() else {
                self.unterminated_string(start, text);
                return;
            };
            match c {
                '"' => {
                    self.flush_text(start, text);
                    let s = self.pos;
                    self.pos += 1;
                    self.push(Token::StrEnd, s);
                    self.stack.pop();
                    return;
                }
                '\n' => {
                    self.unterminated_string(start, text);
                    return;
                }
                '$' if self.peek_at(1) == Some('{') => {
                    self.flush_text(start, text);
                    let s = self.pos;
                    self.pos += 2;
                    self.push(Token::InterpOpen, s);
                    self.stack.push((Delim::Interp, Span::new(s, self.pos)));
                    return;
                }
                '\\' => {
                    let s = self.pos;
                    self.pos += 1;
                    match self.peek() {
                        Some('"') => text.push('"'),
                        Some('\\') => text.push('\\'),
                        Some('n') => text.push('\n'),
                        Some('t') => text.push('\t'),
                        Some('$') => text.push('$'),
                        Some('\n') | None => {
                            text.push('\\');
                            continue;
                        }
                        Some(other) => {
                            self.diagnostics.push(
                                Diagnostic::error(
                                    crate::Code::SyntaxInvalidEscape,
                                    Span::new(s, s + 1 + other.len_utf8()),
                                    format!("unknown escape `\\{other}` in a string"),
                                )
                                .with_label("not an escape")
                                .with_help(
                                    "the escapes are \\\" \\\\ \\n \\t \\$; write \\\\ for a backslash",
                                ),
                            );
                            text.push('\\');
                            text.push(other);
                        }
                    }
                    self.pos += self.peek().map_or(0, char::len_utf8);
                }
                other => {
                    text.push(other);
                    self.pos += other.len_utf8();
                }
            }
        }
    }

    fn flush_text(&mut self, start: usize, text: String) {
        if self.pos > start {
            self.raw
                .push((Token::StrText(text), Span::new(start, self.pos)));
        }
    }

    fn unterminated_string(&mut self, start: usize, text: String) {
        self.unterminated = true;
        self.flush_text(start, text);
        let open = self.stack.last().map(|(_, s)| *s).unwrap_or_default();
        self.diagnostics.push(
            Diagnostic::error(
                crate::Code::SyntaxUnterminatedString,
                Span::new(open.start as usize, self.pos),
                "this string is not closed before the end of its line",
            )
            .with_label("the string starts here")
            .with_help("add the closing `\"`; a string ends on the line it starts (use \\n for a line break)"),
        );
        self.raw
            .push((Token::StrEnd, Span::new(self.pos, self.pos)));
        self.stack.pop();
    }

    fn token(&mut self) {
        let Some(c) = self.peek() else { return };
        let start = self.pos;
        if c == '\n' {
            self.pos += 1;
            self.last_newline = start;
            if self.newline_significant() {
                self.push(Token::Newline, start);
            }
            self.line_start = true;
            return;
        }
        if c.is_whitespace() {
            self.pos += c.len_utf8();
            return;
        }
        let at_line_start = std::mem::replace(&mut self.line_start, false);
        if c == '/' && self.peek_at(1) == Some('/') {
            self.comment();
            self.line_start = at_line_start;
            return;
        }
        if c.is_ascii_digit() {
            self.number();
            return;
        }
        if c.is_alphabetic() || c == '_' {
            if at_line_start && self.declaration_starts_here() {
                if !self.stack.is_empty() {
                    let here = Span::new(start, start);
                    self.close_all_unclosed(start, Some((here, "a new declaration starts here")));
                }
                // An unterminated string silences the repairs of its own entry only.
                self.unterminated = false;
            } else if at_line_start && let Some((depth, member)) = self.entry_starts_here() {
                if depth < self.stack.len() {
                    self.close_before_entry(depth);
                }
                if member {
                    self.unterminated = false;
                }
            }
            self.word();
            return;
        }
        let two = |a: char, b: char| c == a && self.peek_at(1) == Some(b);
        let (token, len) = if two('?', '.') {
            (Token::QuestionDot, 2)
        } else if two('?', '?') {
            (Token::QuestionQuestion, 2)
        } else if two('=', '=') {
            (Token::EqEq, 2)
        } else if two('!', '=') {
            (Token::NotEq, 2)
        } else if two('<', '=') {
            (Token::Le, 2)
        } else if two('>', '=') {
            (Token::Ge, 2)
        } else if two('&', '&') {
            (Token::AndAnd, 2)
        } else if two('|', '|') {
            (Token::OrOr, 2)
        } else {
            let t = match c {
                '"' => {
                    self.pos += 1;
                    self.push(Token::StrStart, start);
                    self.stack.push((Delim::Str, Span::new(start, start + 1)));
                    return;
                }
                '{' | '[' | '(' => {
                    let (tok, delim) = match c {
                        '{' => (Token::LBrace, Delim::Brace),
                        '[' => (Token::LBracket, Delim::Bracket),
                        _ => (Token::LParen, Delim::Paren),
                    };
                    self.pos += 1;
                    self.push(tok, start);
                    self.stack.push((delim, Span::new(start, start + 1)));
                    return;
                }
                '}' | ']' | ')' => {
                    self.closer(c);
                    return;
                }
                '?' => Token::Question,
                '=' => Token::Assign,
                '!' => Token::Bang,
                '<' => Token::Lt,
                '>' => Token::Gt,
                '+' => Token::Plus,
                '-' => Token::Minus,
                '*' => Token::Star,
                '/' => Token::Slash,
                '%' => Token::Percent,
                ',' => Token::Comma,
                ':' => Token::Colon,
                '.' => Token::Dot,
                other => {
                    self.pos += other.len_utf8();
                    let help = match other {
                        '&' => "write `&&` for logical and",
                        '|' => "write `||` for logical or",
                        '\'' => "strings are written in double quotes",
                        ';' => "entries are separated by commas or line breaks",
                        '#' => "comments start with `//`",
                        _ => "remove it",
                    };
                    self.diagnostics.push(
                        Diagnostic::error(
                            crate::Code::SyntaxUnexpectedCharacter,
                            Span::new(start, self.pos),
                            format!("unexpected character `{other}`"),
                        )
                        .with_label("not part of the language")
                        .with_help(help),
                    );
                    return;
                }
            };
            (t, 1)
        };
        self.pos += len;
        self.push(token, start);
    }

    /// Whether a line starting at `pos` begins an entry that no delimiter still open can hold,
    /// and if so, the depth of the block that holds it: a member of the flow (`step NAME`,
    /// `input NAME`, `output …`: no expression starts with those words) inside any block, or a
    /// `key:` inside `( )`, `[ ]` or `${ }` right in a block, after a token no expression
    /// continues from. Closing what is open there reports a missing closer once, at its
    /// opener, and lets the entry parse on its own.
    ///
    /// Also `(1, true)` for a member header with nothing but its block open, which closes
    /// nothing: `true` says a member starts, which ends what an unterminated string silences.
    fn entry_starts_here(&self) -> Option<(usize, bool)> {
        let (Delim::Brace, _) = self.stack.first()? else {
            return None;
        };
        let prev = self.raw.last().map(|(t, _)| t);
        // A keyword right after `.` is a member name.
        if matches!(prev, Some(Token::Dot | Token::QuestionDot)) {
            return None;
        }
        let rest = &self.src[self.pos..];
        let w = word_len(rest);
        let after = rest[w..].trim_start_matches([' ', '\t']);
        let next = after.chars().next();
        if member_header(&rest[..w], after) {
            return Some((1, true));
        }
        let block = self.stack.iter().rposition(|(d, _)| *d == Delim::Brace)? + 1;
        let key = next == Some(':') && !prev.is_some_and(continues_after);
        (key && block < self.stack.len()).then_some((block, false))
    }

    /// Closes the delimiters open above `depth` before the entry starting at `pos`, and
    /// separates the entry from what came before with the line break before it.
    fn close_before_entry(&mut self, depth: usize) {
        let newline = self.last_newline;
        // Line breaks already kept inside a block that is closed here go after its closer.
        let mut at = newline;
        while let Some((Token::Newline, s)) = self.raw.last() {
            at = s.start as usize;
            self.raw.pop();
        }
        let word = Span::new(self.pos, self.pos + word_len(&self.src[self.pos..]));
        self.close_unclosed(depth, at, Some((word, "the next entry starts here")));
        self.raw
            .push((Token::Newline, Span::new(newline, newline + 1)));
    }

    /// Whether `flow NAME {` or `tool NAME {` starts at `pos`.
    fn declaration_starts_here(&self) -> bool {
        let rest = &self.src[self.pos..];
        let word_end = |s: &str| {
            s.find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(s.len())
        };
        let w = word_end(rest);
        if !matches!(&rest[..w], "flow" | "tool") {
            return false;
        }
        let rest = rest[w..].trim_start_matches([' ', '\t']);
        let n = word_end(rest);
        if n == 0 {
            return false;
        }
        rest[n..].trim_start_matches([' ', '\t']).starts_with('{')
    }

    fn closer(&mut self, c: char) {
        let start = self.pos;
        self.pos += 1;
        let want = match c {
            '}' => [Delim::Brace, Delim::Interp],
            ']' => [Delim::Bracket, Delim::Bracket],
            _ => [Delim::Paren, Delim::Paren],
        };
        match self.stack.last() {
            Some((d, _)) if want.contains(d) => {
                let d = *d;
                self.stack.pop();
                self.push(d.close_token(), start);
            }
            _ => {
                let here = Span::new(start, self.pos);
                match self.stack.iter().rposition(|(d, _)| want.contains(d)) {
                    Some(depth) => {
                        // The delimiters opened after the one this closes were never closed.
                        let (inner, inner_span) = self.stack[self.stack.len() - 1];
                        let report = !self.unterminated;
                        self.diagnostics.extend(report.then(|| {
                            Diagnostic::error(
                                crate::Code::SyntaxUnclosedDelimiter,
                                inner_span,
                                format!("`{}` is never closed", inner.open_text()),
                            )
                            .with_label("opened here")
                            .with_secondary(here, format!("`{c}` closes an outer block here"))
                            .with_help(format!("add `{}` before `{c}`", inner.close_text()))
                        }));
                        while self.stack.len() > depth + 1 {
                            let (d, _) = self.stack.pop().expect("stack is deeper than depth");
                            self.raw.push((d.close_token(), Span::new(start, start)));
                        }
                        let (d, _) = self
                            .stack
                            .pop()
                            .expect("the matching opener is on the stack");
                        self.push(d.close_token(), start);
                    }
                    None => self.diagnostics.push(
                        Diagnostic::error(
                            crate::Code::SyntaxUnmatchedDelimiter,
                            here,
                            format!("`{c}` closes nothing"),
                        )
                        .with_label("no block is open here")
                        .with_help("remove it, or add the opening delimiter it was meant to close"),
                    ),
                }
            }
        }
        // In a body, a closer that reaches the flow's brace ends the flow: not a run of entries.
        if self.body && self.stack.is_empty() {
            self.body_intact = false;
        }
    }

    fn comment(&mut self) {
        let start = self.pos;
        let end = self.src[start..]
            .find('\n')
            .map_or(self.src.len(), |n| start + n);
        let raw = &self.src[start..end];
        let doc = raw.starts_with("///") && !raw.starts_with("////");
        let body = if doc { &raw[3..] } else { &raw[2..] };
        let body = body.strip_prefix(' ').unwrap_or(body);
        self.comments.push(Comment {
            span: Span::new(start, end),
            text: body.trim_end().to_string(),
            doc,
        });
        self.pos = end;
    }

    fn number(&mut self) {
        let start = self.pos;
        let digits_end = |s: &str, from: usize| {
            s[from..]
                .find(|c: char| !c.is_ascii_digit())
                .map_or(s.len(), |n| from + n)
        };
        let mut end = digits_end(self.src, start);
        let mut is_float = false;
        if self.src[end..].starts_with('.')
            && self.src[end + 1..].starts_with(|c: char| c.is_ascii_digit())
        {
            is_float = true;
            end = digits_end(self.src, end + 1);
        }
        let unit_end = self.src[end..]
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .map_or(self.src.len(), |n| end + n);
        let text = &self.src[start..end];
        let unit = &self.src[end..unit_end];
        self.pos = unit_end;
        let span = Span::new(start, unit_end);
        if !unit.is_empty() {
            let known = matches!(unit, "ms" | "s" | "m" | "h" | "d");
            let fits = reel_duration_fits(text, unit);
            if known && !is_float && fits {
                self.push(Token::Duration(format!("{text}{unit}")), start);
                return;
            }
            let (message, help) = if known && !is_float {
                (
                    format!("the duration `{text}{unit}` is too long"),
                    "durations go up to about 292 million years in milliseconds; use a smaller number".to_string(),
                )
            } else if known {
                (
                    format!("a duration is a whole number of units, not `{text}{unit}`"),
                    "use a smaller unit: 1500ms rather than 1.5s".to_string(),
                )
            } else {
                (
                    format!("unknown duration unit `{unit}`"),
                    "the units are ms, s, m, h and d (250ms, 10s, 5m, 2h, 7d)".to_string(),
                )
            };
            self.diagnostics.push(
                Diagnostic::error(crate::Code::SyntaxInvalidDuration, span, message)
                    .with_label("not a duration")
                    .with_help(help),
            );
            // No text: the parser reads it as an expression that failed, so that nothing
            // checks a made-up value and reports this mistake again.
            self.raw.push((Token::Duration(String::new()), span));
            return;
        }
        if is_float {
            self.push(Token::Float(text.to_string()), start);
            return;
        }
        match text.parse::<i64>() {
            Ok(n) => self.push(Token::Int(n), start),
            Err(_) => {
                self.diagnostics.push(
                    Diagnostic::error(
                        crate::Code::SyntaxInvalidNumber,
                        span,
                        format!("`{text}` does not fit in a 64-bit integer"),
                    )
                    .with_label("too large")
                    .with_help("integers range from -9223372036854775808 to 9223372036854775807; write a float for larger numbers"),
                );
                self.push(Token::Int(0), start);
            }
        }
    }

    fn word(&mut self) {
        let start = self.pos;
        let end = self.src[start..]
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .map_or(self.src.len(), |n| start + n);
        let word = &self.src[start..end];
        self.pos = end;
        let token = match Keyword::from_word(word) {
            Some(k) => Token::Kw(k),
            None => Token::Ident(word.to_string()),
        };
        self.push(token, start);
    }
}

/// The length of the word at the start of `s`, as identifiers are read.
fn word_len(s: &str) -> usize {
    s.find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len())
}

/// Whether `word`, first on a line and followed by `after` (blanks skipped), declares a member
/// of a flow or a tool: `step NAME`, `output …`, `input NAME`, `secret NAME`, `env NAME`,
/// `input { … }`. None of these continues an expression, so a line that starts with one always
/// starts a new entry.
pub(crate) fn member_header(word: &str, after: &str) -> bool {
    let next = after.chars().next();
    // A member's name is never a keyword: `input then` is the namespace in an `if`.
    let name = &after[..word_len(after)];
    let starts_word = !name.is_empty()
        && next.is_some_and(|c| c.is_alphabetic() || c == '_')
        && Keyword::from_word(name).is_none();
    match word {
        "step" | "output" => !matches!(next, Some(':' | '.' | '?')),
        "input" => starts_word || next == Some('{'),
        "secret" | "env" => starts_word,
        _ => false,
    }
}

/// Whether `digits` of `unit` fit in a 64-bit count of milliseconds.
fn reel_duration_fits(digits: &str, unit: &str) -> bool {
    let factor: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return true,
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(factor))
        .is_some_and(|ms| ms <= i64::MAX as u64)
}

/// Whether an expression may continue after `t` (so a line break after it separates nothing).
///
/// `>` is left out: it ends a type (`list<string>`) far more often than a line ends in `a >`.
fn continues_after(t: &Token) -> bool {
    use Token::*;
    matches!(
        t,
        LBrace
            | LBracket
            | LParen
            | InterpOpen
            | Comma
            | Colon
            | Dot
            | QuestionDot
            | QuestionQuestion
            | Assign
            | EqEq
            | NotEq
            | Lt
            | Le
            | Ge
            | Plus
            | Minus
            | Star
            | Slash
            | Percent
            | Bang
            | AndAnd
            | OrOr
            | Newline
            | Kw(Keyword::If | Keyword::Then | Keyword::Else | Keyword::For | Keyword::In)
    )
}

/// Whether `t`, first on a line, continues what the line before began.
fn continues_before(t: &Token, next: Option<&Token>) -> bool {
    use Token::*;
    match t {
        RBrace | RBracket | RParen | InterpClose | Dot | QuestionDot | QuestionQuestion | EqEq
        | NotEq | Lt | Le | Gt | Ge | Plus | Minus | Star | Slash | Percent | AndAnd | OrOr
        | Assign | Comma | Colon | Question | LBrace => true,
        // `then`/`else`/`in` on a new line continue an `if` or a comprehension, unless they are a key.
        Kw(Keyword::Then | Keyword::Else | Keyword::In) => next != Some(&Colon),
        _ => false,
    }
}

/// Whether `t` (then `next`), first on a line, starts an entry whatever came before: a member
/// header ([`member_header`]) or a `key:`. No expression goes on with either, so an entry left
/// unfinished on the line before (`step x =`, `a +`) ends there and this one parses on its own.
fn starts_entry(t: &Token, next: Option<&Token>) -> bool {
    use Token::*;
    // A member's name is never a keyword: `input then` is the namespace in an `if`.
    let name = |t: Option<&Token>| matches!(t, Some(Ident(_)));
    match t {
        Kw(Keyword::Step | Keyword::Output) => !matches!(
            next,
            Some(Colon | Dot | QuestionDot | Question | QuestionQuestion)
        ),
        Kw(Keyword::Input) => name(next) || next == Some(&LBrace),
        Kw(Keyword::Secret | Keyword::Env) => name(next),
        Ident(_) | Kw(_) => next == Some(&Colon),
        _ => false,
    }
}

/// Whether a line break after the last of `tokens` (already filtered) would separate entries, as
/// far as those tokens tell: no expression continues after them.
pub fn ends_entry(tokens: &[(Token, Span)]) -> bool {
    let n = tokens.len();
    let Some((last, _)) = tokens.last() else {
        return true;
    };
    let member_name = n >= 2
        && matches!(last, Token::Kw(_))
        && matches!(tokens[n - 2].0, Token::Dot | Token::QuestionDot);
    member_name || !continues_after(last)
}

fn filter_newlines(raw: Vec<(Token, Span)>) -> Vec<(Token, Span)> {
    let mut out: Vec<(Token, Span)> = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i].0 != Token::Newline {
            out.push(raw[i].clone());
            i += 1;
            continue;
        }
        let first = i;
        while i < raw.len() && raw[i].0 == Token::Newline {
            i += 1;
        }
        let prev = out.last().map(|(t, _)| t);
        let next = raw.get(i).map(|(t, _)| t);
        let after_next = raw.get(i + 1).map(|(t, _)| t);
        // A keyword after `.` is a member name (`body.in`), which ends an expression.
        let member_name = out.len() >= 2
            && matches!(prev, Some(Token::Kw(_)))
            && matches!(out[out.len() - 2].0, Token::Dot | Token::QuestionDot);
        // After `{` or `,` an entry may start anyway; after `.` a keyword is a member name.
        let forced = !matches!(
            prev,
            Some(Token::Dot | Token::QuestionDot | Token::LBrace | Token::Comma)
        );
        let keep = match (prev, next) {
            (Some(p), Some(n)) => {
                ((member_name || !continues_after(p)) && !continues_before(n, after_next))
                    || (forced && starts_entry(n, after_next))
            }
            _ => false,
        };
        if keep {
            out.push(raw[first].clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(src: &str) -> Vec<Token> {
        lex(src).tokens.into_iter().map(|(t, _)| t).collect()
    }

    #[test]
    fn interpolation_nests_tokens_inside_strings() {
        use Token::*;
        assert_eq!(
            kinds(r#""a ${x.y} \"b\" \$""#),
            vec![
                StrStart,
                StrText("a ".into()),
                InterpOpen,
                Ident("x".into()),
                Dot,
                Ident("y".into()),
                InterpClose,
                StrText(" \"b\" $".into()),
                StrEnd
            ]
        );
    }

    #[test]
    fn line_breaks_separate_only_where_an_entry_can_start() {
        use Token::*;
        let t = kinds("{ a: 1\n b: x +\n 2\n c: y\n  ?? z }");
        let newlines = t.iter().filter(|t| **t == Newline).count();
        assert_eq!(newlines, 2, "{t:?}");
        assert!(!kinds("[1,\n2\n]").contains(&Newline));
        let member_names = kinds("{ a: x.in\n b: y?.if\n c: if\n d }");
        assert_eq!(member_names.iter().filter(|t| **t == Newline).count(), 2);
    }

    #[test]
    fn durations_and_numbers() {
        use Token::*;
        assert_eq!(
            kinds("250ms 10s 1.5 42"),
            vec![
                Duration("250ms".into()),
                Duration("10s".into()),
                Float("1.5".into()),
                Int(42)
            ]
        );
        assert_eq!(lex("10x").diagnostics[0].code, "syntax.invalid-duration");
        assert_eq!(
            lex("99999999999999999999").diagnostics[0].code,
            "syntax.invalid-number"
        );
    }

    #[test]
    fn unbalanced_delimiters_are_repaired_and_reported_once() {
        let l = lex("flow a {\n step x = f { a: [1, 2 }\n}");
        assert_eq!(l.diagnostics.len(), 1, "{:?}", l.diagnostics);
        assert_eq!(l.diagnostics[0].code, "syntax.unclosed-delimiter");
        let opens = l.tokens.iter().filter(|(t, _)| t.is_open()).count();
        let closes = l
            .tokens
            .iter()
            .filter(|(t, _)| {
                matches!(
                    t,
                    Token::RBrace
                        | Token::RBracket
                        | Token::RParen
                        | Token::InterpClose
                        | Token::StrEnd
                )
            })
            .count();
        assert_eq!(opens, closes);
    }

    #[test]
    fn a_line_that_starts_a_member_or_a_key_ends_an_unfinished_entry() {
        use Token::*;
        let id = |w: &str| Ident(w.into());
        let step = Kw(Keyword::Step);
        // After `=` or `+` the next line continues, unless it starts a member or a key.
        assert_eq!(
            kinds("{\n step x =\n  y\n}"),
            [LBrace, step.clone(), id("x"), Assign, id("y"), RBrace]
        );
        assert_eq!(
            kinds("{\n step x =\n step y\n}"),
            [
                LBrace,
                step.clone(),
                id("x"),
                Assign,
                Newline,
                step,
                id("y"),
                RBrace
            ]
        );
        assert_eq!(
            kinds("{\n a: 1 +\n b: 2\n}"),
            [
                LBrace,
                id("a"),
                Colon,
                Int(1),
                Plus,
                Newline,
                id("b"),
                Colon,
                Int(2),
                RBrace
            ]
        );
        assert_eq!(
            kinds("{\n a: 1 +\n b\n}"),
            [LBrace, id("a"), Colon, Int(1), Plus, id("b"), RBrace]
        );
        // `input.b` continues: it is not a member header.
        assert!(!kinds("{\n a: 1 +\n input.b\n}").contains(&Newline));
    }

    #[test]
    fn a_member_line_closes_what_is_left_open_before_it() {
        let l = lex("flow f {
  step a = upper(x
  step b = 1
}
");
        assert_eq!(l.diagnostics.len(), 1, "{:?}", l.diagnostics);
        assert_eq!(l.diagnostics[0].code, "syntax.unclosed-delimiter");
        assert_eq!(l.diagnostics[0].primary.span, Span::new(25, 26));
        let kinds: Vec<Token> = l.tokens.into_iter().map(|(t, _)| t).collect();
        let close = kinds
            .iter()
            .position(|t| *t == Token::RParen)
            .expect("repaired");
        assert_eq!(kinds[close + 1], Token::Newline);
        assert_eq!(kinds[close + 2], Token::Kw(Keyword::Step));
        // `input.x` on the next line is an argument, not a member.
        assert!(
            lex("flow f {
  step a = upper(x,
  input.y)
}
")
            .diagnostics
            .is_empty()
        );
        // A comprehension broken after `in` goes on with a `key:`-like line.
        assert!(
            lex("flow f {
  step a = [for x in
  xs: x]
}
")
            .diagnostics
            .is_empty()
        );
    }

    #[test]
    fn a_missing_brace_before_the_next_declaration_is_caught_there() {
        let l = lex("flow a {\n step x = 1\n\nflow b {\n}\n");
        assert_eq!(l.diagnostics.len(), 1);
        assert_eq!(l.diagnostics[0].primary.span, Span::new(7, 8));
    }

    #[test]
    fn unterminated_strings_end_at_the_line() {
        let l = lex("\"abc\nx");
        assert_eq!(l.diagnostics[0].code, "syntax.unterminated-string");
        assert!(l.tokens.iter().any(|(t, _)| *t == Token::Ident("x".into())));
    }

    #[test]
    fn comments_are_kept_aside() {
        let l = lex("/// doc\n// plain\nx // trailing\n");
        assert_eq!(l.comments.len(), 3);
        assert!(l.comments[0].doc);
        assert_eq!(l.comments[0].text, "doc");
        assert!(!l.comments[1].doc);
    }
}
