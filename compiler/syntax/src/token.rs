//! The tokens the lexer produces and the parser reads.

use std::fmt;

/// Reserved words. Any of them may still be a record key or argument name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Keyword {
    /// `flow`
    Flow,
    /// `tool`
    Tool,
    /// `input`
    Input,
    /// `secret`
    Secret,
    /// `env`
    Env,
    /// `step`
    Step,
    /// `output`
    Output,
    /// `if`
    If,
    /// `then`
    Then,
    /// `else`
    Else,
    /// `for`
    For,
    /// `in`
    In,
    /// `true`
    True,
    /// `false`
    False,
    /// `null`
    Null,
}

impl Keyword {
    /// Every keyword.
    pub const ALL: [Keyword; 15] = [
        Keyword::Flow,
        Keyword::Tool,
        Keyword::Input,
        Keyword::Secret,
        Keyword::Env,
        Keyword::Step,
        Keyword::Output,
        Keyword::If,
        Keyword::Then,
        Keyword::Else,
        Keyword::For,
        Keyword::In,
        Keyword::True,
        Keyword::False,
        Keyword::Null,
    ];

    /// The word as written.
    pub fn as_str(self) -> &'static str {
        match self {
            Keyword::Flow => "flow",
            Keyword::Tool => "tool",
            Keyword::Input => "input",
            Keyword::Secret => "secret",
            Keyword::Env => "env",
            Keyword::Step => "step",
            Keyword::Output => "output",
            Keyword::If => "if",
            Keyword::Then => "then",
            Keyword::Else => "else",
            Keyword::For => "for",
            Keyword::In => "in",
            Keyword::True => "true",
            Keyword::False => "false",
            Keyword::Null => "null",
        }
    }

    /// The keyword spelled `word`, if any.
    pub fn from_word(word: &str) -> Option<Keyword> {
        Keyword::ALL.into_iter().find(|k| k.as_str() == word)
    }
}

/// One token.
#[derive(Clone, Debug, PartialEq)]
pub enum Token {
    /// A name that is not a keyword.
    Ident(String),
    /// A reserved word.
    Kw(Keyword),
    /// An integer literal.
    Int(i64),
    /// A float literal, as written.
    Float(String),
    /// A duration literal, as written (`250ms`); empty for one the lexer reported as invalid.
    Duration(String),
    /// `"` opening a string.
    StrStart,
    /// Literal text inside a string, escapes resolved.
    StrText(String),
    /// `${` inside a string.
    InterpOpen,
    /// The `}` that closes `${`.
    InterpClose,
    /// `"` closing a string.
    StrEnd,
    /// `{`
    LBrace,
    /// `}`
    RBrace,
    /// `[`
    LBracket,
    /// `]`
    RBracket,
    /// `(`
    LParen,
    /// `)`
    RParen,
    /// `,`
    Comma,
    /// `:`
    Colon,
    /// `.`
    Dot,
    /// `?.`
    QuestionDot,
    /// `?`
    Question,
    /// `??`
    QuestionQuestion,
    /// `=`
    Assign,
    /// `==`
    EqEq,
    /// `!=`
    NotEq,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `+`
    Plus,
    /// `-`
    Minus,
    /// `*`
    Star,
    /// `/`
    Slash,
    /// `%`
    Percent,
    /// `!`
    Bang,
    /// `&&`
    AndAnd,
    /// `||`
    OrOr,
    /// A line break that separates entries (the lexer drops those that cannot).
    Newline,
    /// An entry nested too deeply, cut out before parsing and already reported
    /// (`syntax.too-deep`, see [`crate::nesting`]); never made by the lexer.
    TooDeep,
}

impl Token {
    /// Whether the token is an opening delimiter.
    pub fn is_open(&self) -> bool {
        matches!(
            self,
            Token::LBrace | Token::LBracket | Token::LParen | Token::InterpOpen | Token::StrStart
        )
    }
}

/// Text of the source in backticks, as messages quote it; past 64 characters, its first 32
/// and how long it is: a message about a token of a megabyte (a file that is not a flow) quoted
/// it whole, in every diagnostic and editor that showed it.
pub(crate) fn quoted(text: &str) -> String {
    const SHOWN_WHOLE: usize = 64;
    let chars = text.chars().count();
    if chars <= SHOWN_WHOLE {
        return format!("`{text}`");
    }
    let head: String = text.chars().take(SHOWN_WHOLE / 2).collect();
    format!("`{head}…` ({chars} characters)")
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Token::Ident(name) => return f.write_str(&quoted(name)),
            Token::Kw(k) => return write!(f, "`{}`", k.as_str()),
            Token::Int(n) => return write!(f, "`{n}`"),
            // An invalid duration has no text (see the lexer).
            Token::Duration(t) if t.is_empty() => "a duration",
            Token::Float(t) | Token::Duration(t) => return f.write_str(&quoted(t)),
            Token::StrStart => "a string",
            Token::StrText(_) => "text",
            Token::InterpOpen => "`${`",
            Token::InterpClose => "`}`",
            Token::StrEnd => "`\"`",
            Token::LBrace => "`{`",
            Token::RBrace => "`}`",
            Token::LBracket => "`[`",
            Token::RBracket => "`]`",
            Token::LParen => "`(`",
            Token::RParen => "`)`",
            Token::Comma => "`,`",
            Token::Colon => "`:`",
            Token::Dot => "`.`",
            Token::QuestionDot => "`?.`",
            Token::Question => "`?`",
            Token::QuestionQuestion => "`??`",
            Token::Assign => "`=`",
            Token::EqEq => "`==`",
            Token::NotEq => "`!=`",
            Token::Lt => "`<`",
            Token::Le => "`<=`",
            Token::Gt => "`>`",
            Token::Ge => "`>=`",
            Token::Plus => "`+`",
            Token::Minus => "`-`",
            Token::Star => "`*`",
            Token::Slash => "`/`",
            Token::Percent => "`%`",
            Token::Bang => "`!`",
            Token::AndAnd => "`&&`",
            Token::OrOr => "`||`",
            Token::Newline => "a line break",
            Token::TooDeep => "an expression nested too deeply",
        };
        f.write_str(s)
    }
}
