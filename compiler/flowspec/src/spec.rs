//! The FlowSpec document: inputs, secrets, env names, tools, steps and output of one flow.

use std::collections::BTreeMap;

use borsh::{BorshDeserialize, BorshSerialize};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::args::Args;
use crate::types::Type;

/// The newest version of the FlowSpec format this crate reads and writes; readers refuse newer
/// ones. A spec is written as version 3 only when a tool is declared `repeat: "never"` (an
/// older reader would repeat its calls), as version 2 when it leaves out the type of a nested
/// literal (see [`Expr`]); any other spec is written exactly as version 1 was.
pub const FORMAT_VERSION: u32 = 3;

/// The oldest version this crate reads.
pub const OLDEST_VERSION: u32 = 1;

thread_local! {
    /// Whether `Expr`s being written leave out the types of nested literals (version 2). Off
    /// unless a version-2 spec is being written through its own methods, so that a version-1
    /// spec is written, and digested, exactly as before.
    static IMPLIED_TYPES: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `write` with the types of nested literals left out (`implied`) or all written.
pub(crate) fn writing_implied_types<R>(implied: bool, write: impl FnOnce() -> R) -> R {
    let before = IMPLIED_TYPES.with(|c| c.replace(implied));
    let result = write();
    IMPLIED_TYPES.with(|c| c.set(before));
    result
}

/// One compiled flow.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, BorshSerialize, BorshDeserialize)]
pub struct FlowSpec {
    /// Always `"reel.flowspec"`.
    pub format: String,
    /// The format version: 3 when a tool is declared `repeat: "never"`, 2 when a nested
    /// literal's type is left out, else 1 (set by [`FlowSpec::seal`]).
    pub version: u32,
    /// The flow's name.
    pub name: String,
    /// The flow's doc comment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub doc: Option<String>,
    /// The whole `flow` declaration.
    pub span: SourceSpan,
    /// The run's inputs, in declaration order.
    pub inputs: Vec<InputSpec>,
    /// Secret names, resolved at every start and resume, never recorded.
    pub secrets: Vec<NameSpec>,
    /// Environment variables snapshotted at run start.
    pub env: Vec<NameSpec>,
    /// Contracts of the user tools the steps call, by name.
    pub tools: BTreeMap<String, ToolSpec>,
    /// The steps, in source order.
    #[serde(deserialize_with = "crate::de::steps")]
    #[borsh(deserialize_with = "crate::binary::steps")]
    pub steps: Vec<StepSpec>,
    /// The run's result, when the flow declares one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<OutputSpec>,
    /// SHA-256 (lowercase hex) of the canonical JSON of this spec with `digest` left out.
    #[serde(default)]
    pub digest: String,
}

/// A place in a source file, 1-based, columns in characters.
#[derive(
    Clone,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    BorshSerialize,
    BorshDeserialize,
)]
pub struct SourceSpan {
    /// The source file's path, as given to the compiler.
    pub file: String,
    /// First line.
    pub line: u32,
    /// First column.
    pub column: u32,
    /// Last line.
    pub end_line: u32,
    /// Column just past the end.
    pub end_column: u32,
}

/// `input NAME: TYPE [= DEFAULT]`
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, BorshSerialize, BorshDeserialize)]
pub struct InputSpec {
    /// The input's name.
    pub name: String,
    /// Its declared type.
    #[serde(rename = "type")]
    pub ty: Type,
    /// Its default value as JSON; an input without one is required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[borsh(
        serialize_with = "crate::binary::optional_json::serialize",
        deserialize_with = "crate::binary::optional_json::deserialize"
    )]
    pub default: Option<Value>,
    /// Its doc comment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub doc: Option<String>,
    /// Where it is declared.
    pub span: SourceSpan,
}

/// A declared secret or env name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, BorshSerialize, BorshDeserialize)]
pub struct NameSpec {
    /// The name.
    pub name: String,
    /// Its doc comment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub doc: Option<String>,
    /// Where it is declared.
    pub span: SourceSpan,
}

/// What a tool does to the world; decides default retries and whether calls are journaled as effects.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    BorshSerialize,
    BorshDeserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    /// No effect; the same inputs give the same result.
    Pure,
    /// Reads the world without changing it.
    Read,
    /// Changes the world; carries an idempotency key.
    Effect,
    /// Waits for a time (`sleep`).
    Timer,
    /// Waits for a signal (`signal`).
    Wait,
}

impl ToolKind {
    /// The lowercase word.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolKind::Pure => "pure",
            ToolKind::Read => "read",
            ToolKind::Effect => "effect",
            ToolKind::Timer => "timer",
            ToolKind::Wait => "wait",
        }
    }
}

/// A user tool's contract and where its command runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, BorshSerialize, BorshDeserialize)]
pub struct ToolSpec {
    /// The tool's name.
    pub name: String,
    /// Pure, read or effect.
    pub kind: ToolKind,
    /// The command and its arguments.
    pub exec: Vec<String>,
    /// The directory the command runs in: the directory of the file that declares the tool.
    pub dir: String,
    /// The arguments' record type.
    pub input: Type,
    /// The result's type.
    pub output: Type,
    /// Whether a call whose outcome is unknown may be attempted again (left out when it may).
    #[serde(default, skip_serializing_if = "Repeat::is_with_key")]
    pub repeat: Repeat,
    /// Its doc comment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub doc: Option<String>,
    /// Where it is declared.
    pub span: SourceSpan,
}

/// What a resume does with an effect call whose start was recorded but not its result.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    BorshSerialize,
    BorshDeserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Repeat {
    /// Attempt it again with the same idempotency key (the default).
    #[default]
    WithKey,
    /// Never attempt it again on its own: the run fails with `run.unknown-outcome` until a
    /// person decides (`reel resume --accept` or `--retry`).
    Never,
}

impl Repeat {
    /// Whether this is the default, which a spec leaves out.
    pub fn is_with_key(&self) -> bool {
        *self == Repeat::WithKey
    }

    /// The word a tool declaration writes.
    pub fn as_str(self) -> &'static str {
        match self {
            Repeat::WithKey => "with-key",
            Repeat::Never => "never",
        }
    }
}

/// How the wait between attempts grows.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    BorshSerialize,
    BorshDeserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Backoff {
    /// `base * 2^(attempt-1)`
    Exp,
    /// `base` every time.
    Fixed,
}

/// How often and how a failing call is tried again. `max` counts every attempt, the first included.
#[derive(
    Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, BorshSerialize, BorshDeserialize,
)]
pub struct RetrySpec {
    /// Attempts in all (1 means no retry).
    pub max: u32,
    /// Exponential or fixed.
    pub backoff: Backoff,
    /// The first wait.
    pub base: Duration,
    /// Whether waits are randomised (from the run's seeded generator).
    pub jitter: bool,
}

impl RetrySpec {
    /// One attempt, no retry.
    pub fn none() -> Self {
        RetrySpec {
            max: 1,
            backoff: Backoff::Fixed,
            base: Duration(0),
            jitter: false,
        }
    }

    /// The contract's default for read and effect tools.
    pub fn default_for_io() -> Self {
        RetrySpec {
            max: 3,
            backoff: Backoff::Exp,
            base: Duration(500),
            jitter: true,
        }
    }
}

/// A duration in milliseconds, written in JSON as its literal text (`"250ms"`, `"10s"`).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, BorshSerialize, BorshDeserialize,
)]
pub struct Duration(pub u64);

impl Duration {
    /// Parses `250ms`, `10s`, `5m`, `2h`, `7d`: digits then a unit, nothing around them.
    pub fn parse(text: &str) -> Option<Duration> {
        let (digits, factor) = Self::parts(text)?;
        digits
            .parse::<u64>()
            .ok()?
            .checked_mul(factor)
            .map(Duration)
    }

    /// Whether `text` is written as a duration (digits then a unit) whose milliseconds are
    /// more than a `u64` holds, which [`Duration::parse`] refuses too: its caller can then say
    /// "too long" rather than "not a duration".
    pub fn is_too_long(text: &str) -> bool {
        Self::parts(text).is_some() && Self::parse(text).is_none()
    }

    /// The digits of `text` and its unit's milliseconds, when it is digits then a unit.
    fn parts(text: &str) -> Option<(&str, u64)> {
        let split = text.find(|c: char| !c.is_ascii_digit())?;
        let (digits, unit) = text.split_at(split);
        let factor = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return None,
        };
        (!digits.is_empty()).then_some((digits, factor))
    }

    /// The milliseconds.
    pub fn millis(self) -> u64 {
        self.0
    }
}

impl std::fmt::Display for Duration {
    /// The largest unit that divides the duration exactly.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = self.0;
        for (unit, factor) in [
            ("d", 86_400_000),
            ("h", 3_600_000),
            ("m", 60_000),
            ("s", 1_000),
        ] {
            if ms != 0 && ms.is_multiple_of(factor) {
                return write!(f, "{}{unit}", ms / factor);
            }
        }
        write!(f, "{ms}ms")
    }
}

impl Serialize for Duration {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <String as Deserialize>::deserialize(d)?;
        Duration::parse(&text).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "`{text}` is not a duration (write it as 250ms, 10s, 5m, 2h or 7d)"
            ))
        })
    }
}

/// One step of the flow.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, BorshSerialize, BorshDeserialize)]
pub struct StepSpec {
    /// The step's name, unique in the flow.
    pub id: String,
    /// The called tool (`http.get`, a user tool's name), or none for a pure expression step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The called tool's kind; `pure` for an expression step.
    pub kind: ToolKind,
    /// The tool's arguments (meta-arguments excluded), by name.
    pub args: Args,
    /// The value of a pure expression step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Expr>,
    /// Steps this one waits for: every step it refers to, and its `after` list; sorted.
    pub deps: Vec<String>,
    /// `when`: false skips the step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<Expr>,
    /// `foreach`: one call per element.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub foreach: Option<Expr>,
    /// Most calls of a `foreach` in flight at once.
    pub concurrency: u32,
    /// `after`: ordering-only dependencies, as written.
    pub after: Vec<String>,
    /// Retry policy, defaults filled from the tool's kind.
    pub retry: RetrySpec,
    /// Per-attempt timeout (the deadline of the wait for `sleep` and `signal`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Duration>,
    /// The type of the step's value (a list for `foreach`, optional for `when`).
    #[serde(rename = "type")]
    pub ty: Type,
    /// Its doc comment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub doc: Option<String>,
    /// The whole step declaration.
    pub span: SourceSpan,
    /// The step's name where it is declared (its header line).
    pub name_span: SourceSpan,
    /// SHA-256 of what the step calls and with what: spans, doc comments and paths excluded.
    pub semantic_digest: String,
}

/// The run's output expression and its type.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, BorshSerialize, BorshDeserialize)]
pub struct OutputSpec {
    /// The expression, evaluated when every step has finished.
    pub expr: Expr,
    /// Its type.
    #[serde(rename = "type")]
    pub ty: Type,
    /// Where it is declared.
    pub span: SourceSpan,
}

/// A typed expression: every node carries the type the checker inferred for it.
///
/// Written by the `Serialize` below (the derived shape, one level at a time on enough stack);
/// read by the hand-written reader in `de.rs`, which reads the same JSON without buffering
/// each node.
#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    /// The node.
    pub node: Node,
    /// Its inferred type.
    pub ty: Type,
}

impl Serialize for Expr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        /// The shape the derive wrote: the node's members, then `type`.
        #[derive(Serialize)]
        struct Repr<'a> {
            #[serde(flatten)]
            node: &'a Node,
            #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
            ty: Option<&'a Type>,
        }
        crate::de::on_enough_stack(|| {
            let implied = IMPLIED_TYPES.with(std::cell::Cell::get) && self.type_is_implied();
            Repr {
                node: &self.node,
                ty: (!implied).then_some(&self.ty),
            }
            .serialize(s)
        })
    }
}

impl Expr {
    /// Whether this is a nested literal whose type version 2 leaves out: a list or record with
    /// a list or record among its elements, whose type is the one its elements imply
    /// ([`implied_type`]). Writing every level's type made the spec of a literal `n` levels
    /// deep `n²` long; left out, it is as long as the literal.
    pub fn type_is_implied(&self) -> bool {
        holds_literals(&self.node) && implied_type(&self.node).as_ref() == Some(&self.ty)
    }
}

/// Whether `node` is a list or record with a list or record among its elements: a nested
/// literal, the only kind of node whose type version 2 may leave out.
pub fn holds_literals(node: &Node) -> bool {
    let literal = |e: &Expr| matches!(e.node, Node::List { .. } | Node::Record { .. });
    match node {
        Node::List { items } => items.iter().any(literal),
        Node::Record { fields } => fields.iter().any(|f| literal(&f.value)),
        _ => false,
    }
}

/// The type a list or record literal has by its elements alone: a record of its fields' types
/// in order, a list of the join of its items' types. `None` for other nodes, an empty list, or
/// items without a join.
pub fn implied_type(node: &Node) -> Option<Type> {
    match node {
        Node::Record { fields } => Some(Type::record(
            fields.iter().map(|f| (f.name.clone(), f.value.ty.clone())),
        )),
        Node::List { items } => {
            let (first, rest) = items.split_first()?;
            rest.iter()
                .try_fold(first.ty.clone(), |joined, item| {
                    Type::join(&joined, &item.ty)
                })
                .map(Type::list)
        }
        _ => None,
    }
}

/// The expression forms of the FlowSpec (read by `de.rs`, like [`Expr`]).
#[derive(Clone, Debug, PartialEq, Serialize, BorshSerialize, BorshDeserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Node {
    /// A literal JSON value (a duration literal is its text, typed `duration`).
    Lit {
        /// The value.
        #[borsh(
            serialize_with = "crate::binary::json::serialize",
            deserialize_with = "crate::binary::json::deserialize"
        )]
        value: Value,
    },
    /// An interpolated string: the parts' texts concatenated (strings as their text, null as
    /// `null`, anything else as canonical JSON).
    Interp {
        /// Literal text parts are `lit` strings.
        parts: Vec<Expr>,
    },
    /// `[a, b]`
    List {
        /// The elements.
        items: Vec<Expr>,
    },
    /// `{ name: a }`
    Record {
        /// The fields in source order.
        fields: Vec<RecordEntry>,
    },
    /// `input.NAME`
    Input {
        /// The input's name.
        name: String,
    },
    /// `env.NAME`
    Env {
        /// The variable's name.
        name: String,
    },
    /// `secret.NAME`: only ever the whole value of a `secret` parameter.
    Secret {
        /// The secret's name.
        name: String,
    },
    /// A step's value.
    Step {
        /// The step's id.
        name: String,
    },
    /// `item` in a `foreach` step.
    Item,
    /// `index` in a `foreach` step.
    Index,
    /// A comprehension's variable.
    Var {
        /// Its name.
        name: String,
    },
    /// `base.name` or `base?.name`
    Member {
        /// The object.
        base: Box<Expr>,
        /// The field.
        name: String,
        /// `?.`: null when `base` is null.
        optional: bool,
    },
    /// `base[index]`
    At {
        /// The list or object.
        base: Box<Expr>,
        /// An int for a list, a string for an object.
        index: Box<Expr>,
    },
    /// `func(args)`, a builtin.
    Call {
        /// The builtin's name.
        func: String,
        /// The arguments.
        args: Vec<Expr>,
    },
    /// `!e` or `-e`
    Unary {
        /// The operator, written `operator` because `op` is the node's tag.
        #[serde(rename = "operator")]
        op: UnaryOp,
        /// The operand.
        expr: Box<Expr>,
    },
    /// `lhs op rhs`
    Binary {
        /// The operator, written `operator` because `op` is the node's tag.
        #[serde(rename = "operator")]
        op: BinaryOp,
        /// Left operand.
        lhs: Box<Expr>,
        /// Right operand.
        rhs: Box<Expr>,
    },
    /// `if cond then a else b`
    If {
        /// The condition.
        cond: Box<Expr>,
        /// Value when true.
        then: Box<Expr>,
        /// Value when false.
        otherwise: Box<Expr>,
    },
    /// `[for var in iter if cond: body]`
    For {
        /// The variable's name.
        var: String,
        /// The list iterated.
        iter: Box<Expr>,
        /// The filter, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cond: Option<Box<Expr>>,
        /// The element produced.
        body: Box<Expr>,
    },
}

/// One field of a record expression.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, BorshSerialize, BorshDeserialize)]
pub struct RecordEntry {
    /// The key.
    pub name: String,
    /// The value.
    pub value: Expr,
}

/// Prefix operators.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    BorshSerialize,
    BorshDeserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum UnaryOp {
    /// `!`
    Not,
    /// `-`
    Neg,
}

/// Infix operators.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    BorshSerialize,
    BorshDeserialize,
)]
#[serde(rename_all = "snake_case")]
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

impl UnaryOp {
    /// The operator as written in source.
    pub fn symbol(self) -> &'static str {
        match self {
            UnaryOp::Not => "!",
            UnaryOp::Neg => "-",
        }
    }
}

impl BinaryOp {
    /// The operator as written in source.
    pub fn symbol(self) -> &'static str {
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

    /// Binding strength, loosest 1 (`||`) to tightest 7 (`* / %`), as the contract orders them.
    pub fn precedence(self) -> u8 {
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

impl Node {
    /// The expressions directly inside this node, in source order.
    pub fn children(&self) -> Vec<&Expr> {
        match self {
            Node::Lit { .. }
            | Node::Input { .. }
            | Node::Env { .. }
            | Node::Secret { .. }
            | Node::Step { .. }
            | Node::Item
            | Node::Index
            | Node::Var { .. } => Vec::new(),
            Node::Interp { parts } => parts.iter().collect(),
            Node::List { items } => items.iter().collect(),
            Node::Record { fields } => fields.iter().map(|f| &f.value).collect(),
            Node::Call { args, .. } => args.iter().collect(),
            Node::Member { base, .. } => vec![base],
            Node::At { base, index } => vec![base, index],
            Node::Unary { expr, .. } => vec![expr],
            Node::Binary { lhs, rhs, .. } => vec![lhs, rhs],
            Node::If {
                cond,
                then,
                otherwise,
            } => vec![cond, then, otherwise],
            Node::For {
                iter, cond, body, ..
            } => {
                let mut out: Vec<&Expr> = vec![iter];
                out.extend(cond.as_deref());
                out.push(body);
                out
            }
        }
    }
}

impl Expr {
    /// A node with its type.
    pub fn new(node: Node, ty: Type) -> Self {
        Expr { node, ty }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn durations_parse_strictly_and_print_in_their_largest_unit() {
        for (text, ms) in [
            ("250ms", 250),
            ("10s", 10_000),
            ("5m", 300_000),
            ("2h", 7_200_000),
        ] {
            assert_eq!(Duration::parse(text), Some(Duration(ms)));
        }
        assert_eq!(
            Duration::parse("7d").map(|d| d.to_string()),
            Some("7d".into())
        );
        assert_eq!(Duration(90_000).to_string(), "90s");
        assert_eq!(Duration(0).to_string(), "0ms");
        for bad in [
            "",
            "10",
            "s",
            " 1s",
            "1s ",
            "-1s",
            "1.5s",
            "1sec",
            "99999999999999999999d",
        ] {
            assert_eq!(Duration::parse(bad), None, "{bad:?}");
            assert_eq!(
                Duration::is_too_long(bad),
                bad == "99999999999999999999d",
                "{bad:?}"
            );
        }
        assert!(Duration::is_too_long("213503982335d"));
        assert!(!Duration::is_too_long("213503982334d"));
    }

    #[test]
    fn operator_nodes_keep_op_for_the_node_and_operator_for_the_operator() {
        let e = Expr::new(
            Node::Binary {
                op: BinaryOp::Add,
                lhs: Box::new(Expr::new(Node::Lit { value: json!(1) }, Type::Int)),
                rhs: Box::new(Expr::new(Node::Item, Type::Int)),
            },
            Type::Int,
        );
        let value = serde_json::to_value(&e).unwrap_or_default();
        assert_eq!(
            value,
            json!({
                "op": "binary",
                "operator": "add",
                "lhs": { "op": "lit", "value": 1, "type": { "type": "int" } },
                "rhs": { "op": "item", "type": { "type": "int" } },
                "type": { "type": "int" }
            })
        );
        assert_eq!(serde_json::from_value::<Expr>(value).ok(), Some(e));
    }
}
