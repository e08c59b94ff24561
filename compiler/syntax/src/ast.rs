//! The syntax tree of one `.reel` file: a plain value, every node with its span, no semantic information.
//!
//! Parsing never fails: where the source is broken the tree holds `Error` nodes and the
//! parser reports diagnostics, so later stages can still check the rest of the file.

use crate::span::Span;

/// A parsed source file.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct File {
    /// Flows and tools, in source order.
    pub items: Vec<Item>,
    /// Every comment of the file (doc comments included), in source order; the formatter keeps them.
    pub comments: Vec<Comment>,
}

/// A `//` or `///` comment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Comment {
    /// The whole comment, from `//` to the end of its line (the newline excluded).
    pub span: Span,
    /// The text after `//` or `///`, with one leading space removed.
    pub text: String,
    /// Whether it is a `///` doc comment.
    pub doc: bool,
}

/// A name as written, with its span.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Ident {
    /// The name.
    pub name: String,
    /// Where it is written.
    pub span: Span,
}

/// A top-level declaration.
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    /// `flow NAME { … }`
    Flow(Flow),
    /// `tool NAME { … }`
    Tool(Tool),
}

impl Item {
    /// The span of the whole declaration.
    pub fn span(&self) -> Span {
        match self {
            Item::Flow(f) => f.span,
            Item::Tool(t) => t.span,
        }
    }
}

/// `flow NAME { members }`
#[derive(Clone, Debug, PartialEq)]
pub struct Flow {
    /// The flow's name.
    pub name: Ident,
    /// The `///` comment above it.
    pub doc: Option<String>,
    /// Inputs, secrets, env names, steps and the output, in source order.
    pub members: Vec<Member>,
    /// From `flow` to the closing brace.
    pub span: Span,
}

/// One declaration inside a flow.
#[derive(Clone, Debug, PartialEq)]
pub enum Member {
    /// `input NAME: TYPE [= DEFAULT]`
    Input(Input),
    /// `secret NAME`
    Secret(NameDecl),
    /// `env NAME`
    Env(NameDecl),
    /// `step NAME = …`
    Step(Step),
    /// `output EXPR`
    Output(Output),
    /// A member that could not be parsed (its diagnostic was reported).
    Error(Span),
}

impl Member {
    /// The span of the whole member.
    pub fn span(&self) -> Span {
        match self {
            Member::Input(i) => i.span,
            Member::Secret(n) | Member::Env(n) => n.span,
            Member::Step(s) => s.span,
            Member::Output(o) => o.span,
            Member::Error(s) => *s,
        }
    }
}

/// `input NAME: TYPE [= DEFAULT]`
#[derive(Clone, Debug, PartialEq)]
pub struct Input {
    /// The input's name.
    pub name: Ident,
    /// Its declared type.
    pub ty: TypeExpr,
    /// Its default value, when it has one.
    pub default: Option<Expr>,
    /// The `///` comment above it.
    pub doc: Option<String>,
    /// The whole declaration.
    pub span: Span,
}

/// `secret NAME` or `env NAME`.
#[derive(Clone, Debug, PartialEq)]
pub struct NameDecl {
    /// The declared name.
    pub name: Ident,
    /// The `///` comment above it.
    pub doc: Option<String>,
    /// The whole declaration.
    pub span: Span,
}

/// `step NAME = TOOL { ARGS }` or `step NAME = EXPR`.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// The step's name.
    pub name: Ident,
    /// What the step computes.
    pub body: StepBody,
    /// The `///` comment above it.
    pub doc: Option<String>,
    /// The whole declaration.
    pub span: Span,
}

/// The right-hand side of a step.
#[derive(Clone, Debug, PartialEq)]
pub enum StepBody {
    /// A call of a tool with a block of arguments (meta-arguments included).
    Call(Call),
    /// A pure step: an expression.
    Expr(Expr),
}

/// `TOOL { ARGS }`
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    /// The tool's name, dotted for built-ins (`http.get`).
    pub tool: Ident,
    /// The block's entries, in source order.
    pub args: Vec<Field>,
    /// From `{` to `}`.
    pub block_span: Span,
    /// Whether an entry of the block could not be parsed (and was reported): what seems to be
    /// missing may be in it.
    pub recovered: bool,
}

/// `key: value` in a step block or a record.
#[derive(Clone, Debug, PartialEq)]
pub struct Field {
    /// The key.
    pub key: Key,
    /// The value.
    pub value: Expr,
    /// From the key to the end of the value.
    pub span: Span,
}

/// A record or block key: a word (keywords included) or a quoted string.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    /// The key's text, unquoted and unescaped.
    pub name: String,
    /// Whether it was written as a quoted string.
    pub quoted: bool,
    /// Where it is written (quotes included).
    pub span: Span,
}

/// `output EXPR`
#[derive(Clone, Debug, PartialEq)]
pub struct Output {
    /// The run's result.
    pub expr: Expr,
    /// The whole declaration.
    pub span: Span,
}

/// `tool NAME { kind: …, exec: …, input { … }, output { … } }`
#[derive(Clone, Debug, PartialEq)]
pub struct Tool {
    /// The tool's name.
    pub name: Ident,
    /// The `///` comment above it.
    pub doc: Option<String>,
    /// Its entries, in source order.
    pub entries: Vec<ToolEntry>,
    /// From `tool` to the closing brace.
    pub span: Span,
}

/// One entry of a tool declaration.
#[derive(Clone, Debug, PartialEq)]
pub enum ToolEntry {
    /// `kind: "pure"`, `exec: [...]` or any other `key: value` (checked later).
    Field(Field),
    /// `input { … }` or `output { … }`.
    Schema(Schema),
    /// An entry that could not be parsed (its diagnostic was reported).
    Error(Span),
}

/// Which side of a tool's contract a schema describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SchemaSide {
    /// The arguments.
    Input,
    /// The result.
    Output,
}

/// `input { name: T, … }` or `output { … }` in a tool.
#[derive(Clone, Debug, PartialEq)]
pub struct Schema {
    /// Input or output.
    pub side: SchemaSide,
    /// The `input`/`output` keyword.
    pub keyword_span: Span,
    /// The declared fields.
    pub fields: Vec<TypeField>,
    /// The whole entry.
    pub span: Span,
}

/// `name: TYPE` in a record type or a tool schema.
#[derive(Clone, Debug, PartialEq)]
pub struct TypeField {
    /// The field's name.
    pub key: Key,
    /// Its type.
    pub ty: TypeExpr,
    /// The whole field.
    pub span: Span,
}

/// A type as written.
#[derive(Clone, Debug, PartialEq)]
pub struct TypeExpr {
    /// What kind of type.
    pub kind: TypeExprKind,
    /// Where it is written.
    pub span: Span,
}

/// The forms a written type takes.
#[derive(Clone, Debug, PartialEq)]
pub enum TypeExprKind {
    /// `string`, `int`, `float`, `bool`, `duration`, `json`, `secret` (or an unknown name, reported later).
    Named(String),
    /// `list<T>`
    List(Box<TypeExpr>),
    /// `{ name: T, … }`
    Record(Vec<TypeField>),
    /// `T?`
    Optional(Box<TypeExpr>),
    /// A type that could not be parsed.
    Error,
}

/// An expression.
#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    /// What kind of expression.
    pub kind: ExprKind,
    /// Where it is written.
    pub span: Span,
}

/// The forms of expressions.
#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    /// `42`
    Int(i64),
    /// `1.5`; the text is kept so the formatter prints it as written.
    Float { value: f64, text: String },
    /// `250ms`, `10s`, `5m`, `2h`, `7d`; the text is kept as written.
    Duration { millis: u64, text: String },
    /// `"text ${expr} text"`
    Str(Vec<StrPart>),
    /// `true` or `false`
    Bool(bool),
    /// `null`
    Null,
    /// `[a, b]`
    List(Vec<Expr>),
    /// `{ name: a, "other-key": b }`
    Record(Vec<Field>),
    /// A bare name: a step, `input`, `env`, `secret`, `item`, `index` or a comprehension variable.
    Name(Ident),
    /// `base.name`, or `base?.name` when `optional`.
    Member {
        base: Box<Expr>,
        name: Ident,
        optional: bool,
    },
    /// `base[index]`
    Index { base: Box<Expr>, index: Box<Expr> },
    /// `func(args)`
    Call { func: Ident, args: Vec<Expr> },
    /// `!e`, `-e`
    Unary { op: UnaryOp, expr: Box<Expr> },
    /// `l op r`
    Binary {
        op: BinaryOp,
        op_span: Span,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
    /// `if cond then a else b`
    If {
        cond: Box<Expr>,
        then: Box<Expr>,
        otherwise: Box<Expr>,
    },
    /// `[for var in iter if cond: body]`
    Comprehension {
        var: Ident,
        iter: Box<Expr>,
        cond: Option<Box<Expr>>,
        body: Box<Expr>,
    },
    /// `( e )`: kept so the formatter can print the parentheses the author wrote.
    Paren(Box<Expr>),
    /// An expression that could not be parsed (its diagnostic was reported).
    Error,
}

/// A part of an interpolated string.
#[derive(Clone, Debug, PartialEq)]
pub enum StrPart {
    /// Literal text, escapes already resolved.
    Text(String),
    /// `${expr}`
    Interp(Expr),
}

/// Prefix operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// `!`
    Not,
    /// `-`
    Neg,
}

/// Infix operators, loosest first in the order of the contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// `||`
    Or,
    /// `&&`
    And,
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `??`
    Coalesce,
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%`
    Rem,
}

impl BinaryOp {
    /// The operator as written.
    pub fn as_str(self) -> &'static str {
        match self {
            BinaryOp::Or => "||",
            BinaryOp::And => "&&",
            BinaryOp::Eq => "==",
            BinaryOp::Ne => "!=",
            BinaryOp::Lt => "<",
            BinaryOp::Le => "<=",
            BinaryOp::Gt => ">",
            BinaryOp::Ge => ">=",
            BinaryOp::Coalesce => "??",
            BinaryOp::Add => "+",
            BinaryOp::Sub => "-",
            BinaryOp::Mul => "*",
            BinaryOp::Div => "/",
            BinaryOp::Rem => "%",
        }
    }

    /// Binding strength: higher binds tighter.
    pub fn precedence(self) -> u16 {
        match self {
            BinaryOp::Or => 1,
            BinaryOp::And => 2,
            BinaryOp::Eq | BinaryOp::Ne => 3,
            BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge => 4,
            BinaryOp::Coalesce => 5,
            BinaryOp::Add | BinaryOp::Sub => 6,
            BinaryOp::Mul | BinaryOp::Div | BinaryOp::Rem => 7,
        }
    }
}

impl UnaryOp {
    /// The operator as written.
    pub fn as_str(self) -> &'static str {
        match self {
            UnaryOp::Not => "!",
            UnaryOp::Neg => "-",
        }
    }
}

/// Binding strength of prefix operators (tighter than every infix operator).
pub const UNARY_PRECEDENCE: u16 = 8;
