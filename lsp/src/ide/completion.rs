//! Completion that knows where it is. The place is read from the tokens of the entry the cursor
//! is in, from its start to the cursor, because a half-typed line rarely parses into the node
//! the user means; the syntax tree (recovered) only says which item and member it is, and the
//! flow's signature what its names are.
//!
//! - At the start of a line: the keywords that start a declaration (`flow`, `tool`) at the top
//!   of the file, a member (`input`, `secret`, `env`, `step`, `output`) in a flow, an entry
//!   (`kind`, `exec`, `input`, `output`) in a tool; in a step's block, its meta-arguments and the
//!   tool's parameters.
//! - Where an expression goes (after `=`, after `key:`, in arguments, lists and
//!   interpolations): the flow's steps (not the one being written), `input.X`, `env.X`, the
//!   builtins with their signatures, literals, and `item`/`index` only inside a `foreach` step's
//!   other arguments. Right after `step NAME =` also the tools, built-in and declared. Where a
//!   secret goes (the whole value of a `secret` parameter) only `secret.X`.
//! - After `.` or `?.`: the members of `input`, `env`, `secret`, and the record fields of a
//!   step's value or an input, through any chain of fields.
//! - After `input NAME:`: the types.

use reel_compiler::contracts::{META_ARGUMENTS, builtin_contracts};
use reel_compiler::queries::{FlowLayout, file_layout, flow_signature, user_tools};
use reel_compiler::signature::FlowSignature;
use reel_flowspec::Type;
use reel_syntax::ast::{Member, StepBody};
use reel_syntax::lexer::{ends_entry, lex};
use reel_syntax::token::{Keyword, Token};
use reel_syntax::{Span, ast};

use super::Ctx;

/// What a completion item is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ItemKind {
    /// A step.
    Step,
    /// An input, secret or env name.
    Variable,
    /// A record field.
    Field,
    /// A builtin function.
    Function,
    /// A tool.
    Tool,
    /// A meta-argument or tool parameter.
    Property,
    /// A keyword or namespace.
    Keyword,
}

/// One completion proposal.
#[derive(Clone, Debug, PartialEq)]
pub struct Item {
    /// The text inserted (and shown).
    pub label: String,
    /// What it is.
    pub kind: ItemKind,
    /// A short description: a type or a signature.
    pub detail: Option<String>,
}

fn item(label: impl Into<String>, kind: ItemKind, detail: Option<String>) -> Item {
    Item {
        label: label.into(),
        kind,
        detail,
    }
}

fn keywords(words: &[&str]) -> Vec<Item> {
    words
        .iter()
        .map(|w| item(*w, ItemKind::Keyword, None))
        .collect()
}

/// The members a flow declares, in source order.
const MEMBER_KEYWORDS: [&str; 5] = ["input", "secret", "env", "step", "output"];
/// The entries of a tool declaration.
const TOOL_KEYWORDS: [&str; 4] = ["kind", "exec", "input", "output"];
/// The declarations of a file.
const ITEM_KEYWORDS: [&str; 2] = ["flow", "tool"];
/// The type names (`list<T>` and records are written out).
const TYPE_NAMES: [&str; 8] = [
    "string", "int", "float", "bool", "duration", "json", "secret", "list",
];

/// At most this many of a flow's steps are proposed at once: a 10,000-step flow would
/// otherwise send (and type) every step on every key.
pub const MAX_STEPS: usize = 200;

/// The proposals at a position.
#[derive(Debug, Default, PartialEq)]
pub struct Proposals {
    /// What may go there.
    pub items: Vec<Item>,
    /// More steps match than [`MAX_STEPS`]: the client asks again as the word grows
    /// (`isIncomplete`).
    pub incomplete: bool,
}

impl From<Vec<Item>> for Proposals {
    fn from(items: Vec<Item>) -> Self {
        Proposals {
            items,
            incomplete: false,
        }
    }
}

/// The proposals at `offset`.
pub fn complete(cx: &Ctx<'_>, offset: usize) -> Proposals {
    let mut offset = offset.min(cx.text.len());
    while !cx.text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &cx.text[..offset];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line = &before[line_start..];
    // The word being typed, and what stands before it on its line.
    let word_len = line
        .chars()
        .rev()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .map(char::len_utf8)
        .sum::<usize>();
    let head = &line[..line.len() - word_len];
    let word_start = offset - word_len;

    // From the layout (no whole tree assembled): the flow or tool around the cursor.
    let in_item = |span: Span| (span.start as usize) < offset && offset <= span.end as usize;
    let flow = cx
        .flows()
        .find(|(_, f)| f.span.contains(offset))
        .filter(|(_, f)| in_item(f.span))
        .or_else(|| last_open_flow(cx, offset));
    let Some((idx, flow)) = flow else {
        let layout = file_layout(cx.db, cx.file);
        let tool = layout.tools.iter().find_map(|t| {
            let span = t.tool.span.shifted(t.offset);
            in_item(span).then_some(span.start as usize)
        });
        return match tool {
            Some(start) => tool_body(cx.text, start, word_start, head),
            None if head.trim().is_empty() => keywords(&ITEM_KEYWORDS),
            None => Vec::new(),
        }
        .into();
    };
    let member = last_member_start(flow, word_start);
    let Some(place) = place_in_flow(cx.text, flow.span, member, word_start, head) else {
        return Proposals::default();
    };
    let sig = cx.flow_id(idx).map(|id| flow_signature(cx.db, id));
    let sig = sig.unwrap_or(&EMPTY_SIGNATURE);
    match place {
        Place::Member => keywords(&MEMBER_KEYWORDS).into(),
        Place::Type => keywords(&TYPE_NAMES).into(),
        Place::BlockKey { tool } => block_keys(cx, &tool).into(),
        Place::Fields(chain) => fields(cx, idx, sig, &chain).into(),
        Place::ToolPath => tools(cx).into(),
        Place::Expr(at) => expression(cx, idx, sig, &at, &cx.text[word_start..offset]),
    }
}

/// Whether `label` is proposed for the word typed so far: its letters in order, in any case,
/// as editors filter (`gre` finds `greeting` and `get_report`).
fn matches_word(label: &str, word: &str) -> bool {
    let mut label = label.chars().flat_map(char::to_lowercase);
    word.chars()
        .flat_map(char::to_lowercase)
        .all(|w| label.any(|l| l == w))
}

/// The steps proposed for `word`: all of them when they are at most [`MAX_STEPS`] (the editor
/// filters as the word grows); else at most that many, those whose name starts with `word`
/// first, then those it matches otherwise, each in the flow's order; and whether some were
/// left out.
fn steps_for<'s>(steps: impl Iterator<Item = &'s str> + Clone, word: &str) -> (Vec<&'s str>, bool) {
    if steps.clone().nth(MAX_STEPS).is_none() {
        return (steps.collect(), false);
    }
    let lower = word.to_lowercase();
    let starts = |n: &str| n.to_lowercase().starts_with(&lower);
    let prefixed = steps.clone().filter(|n| starts(n));
    let others = steps.filter(|n| !starts(n) && matches_word(n, word));
    let mut all = prefixed.chain(others);
    let kept: Vec<&str> = all.by_ref().take(MAX_STEPS).collect();
    let more = all.next().is_some();
    (kept, more)
}

static EMPTY_SIGNATURE: std::sync::LazyLock<FlowSignature> =
    std::sync::LazyLock::new(FlowSignature::default);

/// The last flow that starts before `offset` and is still open there (its `}` missing).
fn last_open_flow<'a>(cx: &Ctx<'a>, offset: usize) -> Option<(usize, &'a FlowLayout)> {
    cx.flows()
        .filter(|(_, f)| (f.span.start as usize) < offset)
        .last()
        .filter(|(_, f)| !cx.text[f.span.range()].trim_end().ends_with('}'))
}

/// The last member of `flow` that starts before `word_start`, with where it starts: found among the
/// groups that start before it, from the last, so a long flow costs a bisection.
fn last_member_start(flow: &FlowLayout, word_start: usize) -> Option<(usize, &Member)> {
    let k = flow
        .groups
        .partition_point(|(offset, _)| (*offset as usize) < word_start);
    flow.groups[..k].iter().rev().find_map(|(offset, group)| {
        group
            .members()
            .iter()
            .rev()
            .map(|m| (*offset as usize + member_span(m).start as usize, m))
            .find(|(start, _)| *start < word_start)
    })
}

/// Where in a flow the cursor is.
#[derive(Debug, PartialEq)]
enum Place {
    /// The start of a member.
    Member,
    /// The type of an input.
    Type,
    /// The start of an entry of a step's block calling `tool`.
    BlockKey { tool: String },
    /// After `a.b.`: the chain of names before the last `.`.
    Fields(Vec<String>),
    /// A dotted tool name being typed right after `step NAME =`.
    ToolPath,
    /// An expression.
    Expr(ExprAt),
}

/// What an expression position allows.
#[derive(Debug, Default, PartialEq)]
struct ExprAt {
    /// The step being written, which its own expressions cannot name.
    step: Option<String>,
    /// Right after `step NAME =`: a tool call may go here.
    tools: bool,
    /// Inside a `foreach` step's other arguments: `item` and `index` are in scope.
    foreach: bool,
    /// The whole value of parameter `.1` of tool `.0`: if its type is `secret`, only a secret
    /// goes here.
    slot: Option<(String, String)>,
    /// An input's default: only constants.
    constant: bool,
}

/// A delimiter open before the cursor: its token and where it is in the entry's tokens.
#[derive(Clone, Copy, Debug)]
struct Open {
    token: OpenKind,
    at: usize,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum OpenKind {
    Brace,
    Bracket,
    Paren,
    Interp,
    Str,
}

fn opener(t: &Token) -> Option<OpenKind> {
    Some(match t {
        Token::LBrace => OpenKind::Brace,
        Token::LBracket => OpenKind::Bracket,
        Token::LParen => OpenKind::Paren,
        Token::InterpOpen => OpenKind::Interp,
        Token::StrStart => OpenKind::Str,
        _ => return None,
    })
}

fn closes(t: &Token) -> Option<OpenKind> {
    Some(match t {
        Token::RBrace => OpenKind::Brace,
        Token::RBracket => OpenKind::Bracket,
        Token::RParen => OpenKind::Paren,
        Token::InterpClose => OpenKind::Interp,
        Token::StrEnd => OpenKind::Str,
        _ => return None,
    })
}

/// The tokens of `text` up to its end and the delimiters still open there. Closers the lexer
/// adds at the end to repair what is open are left out: there, the cursor is inside.
fn open_delimiters(text: &str) -> (Vec<Token>, Vec<Open>) {
    let lexed = lex(text);
    let mut tokens = Vec::with_capacity(lexed.tokens.len());
    let mut stack: Vec<Open> = Vec::new();
    for (t, span) in lexed.tokens {
        let repair = span.start == span.end && span.end as usize == text.len();
        if repair && closes(&t).is_some() {
            continue;
        }
        if let Some(kind) = opener(&t) {
            stack.push(Open {
                token: kind,
                at: tokens.len(),
            });
        } else if let Some(kind) = closes(&t)
            && stack.last().is_some_and(|o| o.token == kind)
        {
            stack.pop();
        }
        tokens.push(t);
    }
    (tokens, stack)
}

/// Whether a line break after `tokens` would end the entry (no expression continues).
fn entry_ended(tokens: &[Token]) -> bool {
    let last_two: Vec<(Token, Span)> = tokens[tokens.len().saturating_sub(2)..]
        .iter()
        .map(|t| (t.clone(), Span::default()))
        .collect();
    ends_entry(&last_two)
}

/// Where the cursor (at `word_start`, after `head` on its line) is in the flow spanning
/// `flow`, whose last member before the cursor starts at `member`.
fn place_in_flow(
    text: &str,
    flow: Span,
    member: Option<(usize, &Member)>,
    word_start: usize,
    head: &str,
) -> Option<Place> {
    // The entry the cursor is in: the last member starting before it, read from its start.
    let body_start = text[flow.range()]
        .find('{')
        .map_or(flow.end as usize, |b| flow.start as usize + b + 1);
    let start = member.map_or(body_start, |(start, _)| start);
    if start > word_start {
        return None;
    }
    let (tokens, stack) = open_delimiters(&text[start..word_start]);
    if stack.last().is_some_and(|o| o.token == OpenKind::Str) {
        return None;
    }
    if let Some(chain) = chain_before(head) {
        if stack.is_empty() && is_tool_path(&tokens, &chain) {
            return Some(Place::ToolPath);
        }
        return Some(Place::Fields(chain));
    }
    // Whether the word starts its line, and whether the entry before it has ended there.
    let at_line_start = head.trim().is_empty();
    let ends = entry_ended(&tokens);
    let step = match tokens.as_slice() {
        [Token::Kw(Keyword::Step), Token::Ident(n), ..] => Some(n.clone()),
        _ => None,
    };
    let Some(innermost) = stack.last() else {
        if tokens.is_empty() || (at_line_start && ends) {
            return Some(Place::Member);
        }
        return member_place(&tokens, step);
    };
    // Inside a step's block: which tool, which key, and whether it fans out.
    let block = stack
        .first()
        .filter(|o| o.token == OpenKind::Brace)
        .and_then(|o| call_block(&tokens, o.at));
    let key = stack
        .first()
        .and_then(|o| entry_key(&tokens, o.at, stack.get(1).map_or(tokens.len(), |n| n.at)));
    if innermost.token == OpenKind::Brace {
        let last = tokens.last();
        let entry_start = matches!(last, Some(Token::LBrace | Token::Comma | Token::Newline))
            || (at_line_start && ends);
        if entry_start {
            return match (&block, stack.len()) {
                (Some(tool), 1) => Some(Place::BlockKey { tool: tool.clone() }),
                // Keys of a record are the author's to choose.
                _ => None,
            };
        }
    }
    let foreach = block.is_some()
        && key
            .as_deref()
            .is_some_and(|k| k != "when" && k != "foreach")
        && member.is_some_and(|(_, m)| has_foreach(m));
    // Only the whole value of a parameter can be a secret: right inside the block.
    let slot = match (block, key) {
        (Some(tool), Some(key)) if stack.len() == 1 => Some((tool, key)),
        _ => None,
    };
    Some(Place::Expr(ExprAt {
        step,
        foreach,
        slot,
        ..ExprAt::default()
    }))
}

/// At the top level of a member, after its first tokens: what its kind takes next.
fn member_place(tokens: &[Token], step: Option<String>) -> Option<Place> {
    use Token::*;
    match tokens {
        // `step NAME = word`: a tool call or an expression.
        [Kw(Keyword::Step), Ident(_), Assign] => Some(Place::Expr(ExprAt {
            step,
            tools: true,
            ..ExprAt::default()
        })),
        [Kw(Keyword::Step), Ident(_), Assign, ..] | [Kw(Keyword::Output), ..] => {
            Some(Place::Expr(ExprAt {
                step,
                ..ExprAt::default()
            }))
        }
        [Kw(Keyword::Input), Ident(_), Colon] => Some(Place::Type),
        [Kw(Keyword::Input), Ident(_), Colon, rest @ ..] if rest.contains(&Assign) => {
            Some(Place::Expr(ExprAt {
                constant: true,
                ..ExprAt::default()
            }))
        }
        _ => None,
    }
}

fn member_span(m: &Member) -> Span {
    match m {
        Member::Input(i) => i.span,
        Member::Secret(n) | Member::Env(n) => n.span,
        Member::Step(s) => s.span,
        Member::Output(o) => o.span,
        Member::Error(s) => *s,
    }
}

fn has_foreach(m: &Member) -> bool {
    matches!(m, Member::Step(ast::Step { body: StepBody::Call(c), .. })
        if c.args.iter().any(|a| a.key.name == "foreach"))
}

/// The tool whose block the `{` at `brace` opens: `step NAME = a.b {`.
fn call_block(tokens: &[Token], brace: usize) -> Option<String> {
    let [
        Token::Kw(Keyword::Step),
        Token::Ident(_),
        Token::Assign,
        path @ ..,
    ] = &tokens[..brace]
    else {
        return None;
    };
    let mut name = String::new();
    for (i, t) in path.iter().enumerate() {
        match (i % 2, t) {
            (0, Token::Ident(w)) => name.push_str(w),
            (0, Token::Kw(k)) if i > 0 => name.push_str(k.as_str()),
            (1, Token::Dot) => name.push('.'),
            _ => return None,
        }
    }
    (!name.is_empty() && !name.ends_with('.')).then_some(name)
}

/// The key of the entry the cursor is in, inside the block opened at `brace`, looking at the
/// tokens up to `until` (where a nested delimiter opens, or the end).
fn entry_key(tokens: &[Token], brace: usize, until: usize) -> Option<String> {
    let inside = tokens.get(brace + 1..until)?;
    let mut depth = 0usize;
    let mut start = 0;
    for (i, t) in inside.iter().enumerate() {
        if opener(t).is_some() {
            depth += 1;
        } else if closes(t).is_some() {
            depth = depth.saturating_sub(1);
        } else if depth == 0 && matches!(t, Token::Comma | Token::Newline) {
            start = i + 1;
        }
    }
    match inside.get(start..start + 2)? {
        [Token::Ident(k), Token::Colon] => Some(k.clone()),
        [Token::Kw(k), Token::Colon] => Some(k.as_str().to_string()),
        _ => None,
    }
}

/// `a.b.` or `a?.b.` before the word being typed: the names before the last dot.
fn chain_before(head: &str) -> Option<Vec<String>> {
    let base = head.strip_suffix('.')?;
    let base = base.strip_suffix('?').unwrap_or(base);
    let chain: String = base
        .chars()
        .rev()
        .take_while(|c| c.is_alphanumeric() || matches!(c, '_' | '.' | '?'))
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    let names: Vec<String> = chain
        .split('.')
        .map(|n| n.trim_end_matches('?').to_string())
        .collect();
    if names.iter().any(|n| n.is_empty()) {
        return None;
    }
    Some(names)
}

/// Whether `chain` is the start of a built-in tool's dotted name right after `step NAME =`.
fn is_tool_path(tokens: &[Token], chain: &[String]) -> bool {
    let n = tokens.len();
    // `step NAME = a.b.` lexes as `step NAME = a . b .`
    if n != 3 + 2 * chain.len()
        || !matches!(
            tokens[..3],
            [Token::Kw(Keyword::Step), Token::Ident(_), Token::Assign]
        )
    {
        return false;
    }
    let prefix = format!("{}.", chain.join("."));
    builtin_contracts()
        .iter()
        .any(|c| c.name.starts_with(&prefix))
}

/// In a tool's declaration: its entry keywords at the start of a line of its body.
fn tool_body(text: &str, tool_start: usize, word_start: usize, head: &str) -> Vec<Item> {
    let (tokens, stack) = open_delimiters(&text[tool_start..word_start]);
    let entry_start = matches!(tokens.last(), Some(Token::LBrace | Token::Comma))
        || (head.trim().is_empty() && entry_ended(&tokens));
    if stack.len() == 1 && entry_start {
        keywords(&TOOL_KEYWORDS)
    } else {
        Vec::new()
    }
}

fn tools(cx: &Ctx<'_>) -> Vec<Item> {
    let mut out: Vec<Item> = builtin_contracts()
        .iter()
        .map(|c| item(c.name.clone(), ItemKind::Tool, Some(c.signature())))
        .collect();
    out.extend(user_tools(cx.db, cx.file).values().map(|t| {
        item(
            t.contract.name.clone(),
            ItemKind::Tool,
            Some(t.contract.signature()),
        )
    }));
    out
}

/// Meta-arguments and the tool's parameters, at the start of an entry of its block.
fn block_keys(cx: &Ctx<'_>, tool: &str) -> Vec<Item> {
    let mut out: Vec<Item> = META_ARGUMENTS
        .iter()
        .map(|m| item(*m, ItemKind::Property, Some("meta-argument".into())))
        .collect();
    if let Some(contract) = cx.contract(tool) {
        out.extend(
            contract
                .params
                .iter()
                .map(|p| item(p.name.clone(), ItemKind::Property, Some(p.ty.to_string()))),
        );
    }
    out
}

/// The fields after `chain.`: a namespace's members, or a record's fields.
fn fields(cx: &Ctx<'_>, idx: usize, sig: &FlowSignature, chain: &[String]) -> Vec<Item> {
    let variable = |name: &String, detail: &str| {
        item(name.clone(), ItemKind::Variable, Some(detail.to_string()))
    };
    let (first, rest) = match chain {
        [ns] if ns == "input" => {
            return sig
                .inputs
                .iter()
                .map(|(n, t)| variable(n, &t.to_string()))
                .collect();
        }
        [ns] if ns == "env" => return sig.env.iter().map(|n| variable(n, "string")).collect(),
        [ns] if ns == "secret" => {
            return sig.secrets.iter().map(|n| variable(n, "secret")).collect();
        }
        [ns, input, rest @ ..] if ns == "input" => (sig.input(input).cloned(), rest),
        [step, rest @ ..] if sig.step(step).is_some() => (cx.step_type(idx, step), rest),
        _ => return Vec::new(),
    };
    let mut ty = first;
    for name in rest {
        ty = ty.and_then(|t| t.strip_optional().field(name).cloned());
    }
    match ty.as_ref().map(Type::strip_optional) {
        Some(Type::Record { fields }) => fields
            .iter()
            .map(|f| item(f.name.clone(), ItemKind::Field, Some(f.ty.to_string())))
            .collect(),
        _ => Vec::new(),
    }
}

/// The names an expression at `at` may use, the steps among them narrowed to those `word`
/// (typed so far) matches.
fn expression(cx: &Ctx<'_>, idx: usize, sig: &FlowSignature, at: &ExprAt, word: &str) -> Proposals {
    if let Some((tool, key)) = &at.slot
        && cx.contract(tool).is_some_and(|c| {
            c.params
                .iter()
                .any(|p| p.name == *key && *p.ty.strip_optional() == Type::Secret)
        })
    {
        // The taint rule: a secret goes only here, and nothing else does.
        return sig
            .secrets
            .iter()
            .map(|n| {
                item(
                    format!("secret.{n}"),
                    ItemKind::Variable,
                    Some("secret".into()),
                )
            })
            .collect::<Vec<_>>()
            .into();
    }
    let mut out = Vec::new();
    let mut incomplete = false;
    if !at.constant {
        let names = sig
            .steps
            .iter()
            .map(|s| s.name.as_str())
            .filter(|n| at.step.as_deref() != Some(*n));
        // Typed only once narrowed: a step's type is its check.
        let (steps, more) = steps_for(names, word);
        incomplete = more;
        out.extend(steps.into_iter().map(|name| {
            item(
                name,
                ItemKind::Step,
                cx.step_type(idx, name).map(|t| t.to_string()),
            )
        }));
        out.extend(sig.inputs.iter().map(|(n, t)| {
            item(
                format!("input.{n}"),
                ItemKind::Variable,
                Some(t.to_string()),
            )
        }));
        out.extend(sig.env.iter().map(|n| {
            item(
                format!("env.{n}"),
                ItemKind::Variable,
                Some("string".into()),
            )
        }));
        if at.foreach {
            out.push(item("item", ItemKind::Keyword, Some("the element".into())));
            out.push(item("index", ItemKind::Keyword, Some("int".into())));
        }
    }
    out.extend(
        reel_eval::builtins()
            .iter()
            .map(|b| item(b.name, ItemKind::Function, Some(b.signatures.join(" | ")))),
    );
    out.extend(keywords(&["if", "true", "false", "null"]));
    if at.tools {
        out.extend(tools(cx));
    }
    Proposals {
        items: out,
        incomplete,
    }
}

#[cfg(test)]
mod tests;
