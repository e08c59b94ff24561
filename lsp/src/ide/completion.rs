//! Completion: members after `input.`, `env.` and `secret.`; a step's record fields after
//! `step.`; tool names after `step x = `; meta-arguments and tool parameters at the start of an
//! entry of a step block; else step names, builtin functions and the namespaces.
//!
//! The context is read from the text before the cursor, because a half-typed line rarely parses
//! into the node the user means; the syntax tree (recovered) only says which flow and step it is.

use reel_compiler::contracts::{META_ARGUMENTS, builtin_contracts};
use reel_compiler::queries::user_tools;
use reel_flowspec::Type;
use reel_syntax::ast::{Flow, Member, StepBody};

use super::Ctx;
use super::names;

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

/// The proposals at `offset`.
pub fn complete(cx: &Ctx<'_>, offset: usize) -> Vec<Item> {
    let mut offset = offset.min(cx.text.len());
    while !cx.text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &cx.text[..offset];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line = &before[line_start..];
    // The word being typed, and what stands before it.
    let word_len = line
        .chars()
        .rev()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .map(char::len_utf8)
        .sum::<usize>();
    let head = &line[..line.len() - word_len];
    // A tool name needs no flow: the line may be too broken for the flow to parse.
    let trimmed = line.trim_start();
    if tool_prefix(trimmed) {
        return tools(cx);
    }
    let flow = names::flow_at(&cx.parsed().file, offset).or_else(|| last_flow_before(cx, offset));
    let Some((idx, flow)) = flow else {
        return Vec::new();
    };

    if let Some(base) = head.strip_suffix('.').or_else(|| head.strip_suffix("?.")) {
        let base_word: String = base
            .chars()
            .rev()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        return members(cx, idx, flow, &base_word);
    }
    if head.trim().is_empty()
        && let Some(tool) = enclosing_call(flow, offset)
    {
        let mut out: Vec<Item> = META_ARGUMENTS
            .iter()
            .map(|m| item(*m, ItemKind::Property, Some("meta-argument".into())))
            .collect();
        if let Some(contract) = cx.contract(&tool) {
            out.extend(
                contract
                    .params
                    .iter()
                    .map(|p| item(p.name.clone(), ItemKind::Property, Some(p.ty.to_string()))),
            );
        }
        return out;
    }
    expression_names(cx, idx, flow)
}

/// `step x = `, or `step x = http.` while typing a dotted tool name.
fn tool_prefix(trimmed: &str) -> bool {
    let Some(rest) = trimmed.strip_prefix("step ") else {
        return false;
    };
    let Some((name, rhs)) = rest.split_once('=') else {
        return false;
    };
    let rhs = rhs.trim_start();
    let simple = rhs
        .chars()
        .all(|c| c.is_alphanumeric() || c == '_' || c == '.');
    // `input.` after `=` is an expression step; `http.` is the start of a tool's name.
    let tool_namespace = match rhs.split_once('.') {
        None => true,
        Some((ns, _)) => builtin_contracts()
            .iter()
            .any(|c| c.name.split_once('.').is_some_and(|(n, _)| n == ns)),
    };
    !name.trim().is_empty() && simple && tool_namespace
}

fn last_flow_before<'a>(cx: &'a Ctx<'_>, offset: usize) -> Option<(usize, &'a Flow)> {
    cx.parsed()
        .file
        .items
        .iter()
        .enumerate()
        .filter_map(|(i, it)| match it {
            reel_syntax::ast::Item::Flow(f) if (f.span.start as usize) <= offset => Some((i, f)),
            _ => None,
        })
        .next_back()
}

fn enclosing_call(flow: &Flow, offset: usize) -> Option<String> {
    flow.members.iter().find_map(|m| match m {
        Member::Step(s) => match &s.body {
            StepBody::Call(c)
                if (c.block_span.start as usize) < offset && offset < c.block_span.end as usize =>
            {
                Some(c.tool.name.clone())
            }
            _ => None,
        },
        _ => None,
    })
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

fn members(cx: &Ctx<'_>, idx: usize, flow: &Flow, base: &str) -> Vec<Item> {
    let mut out = Vec::new();
    for m in &flow.members {
        match (base, m) {
            ("input", Member::Input(i)) => out.push(item(
                i.name.name.clone(),
                ItemKind::Variable,
                cx.text.get(i.ty.span.range()).map(str::to_string),
            )),
            ("secret", Member::Secret(n)) => out.push(item(
                n.name.name.clone(),
                ItemKind::Variable,
                Some("secret".into()),
            )),
            ("env", Member::Env(n)) => out.push(item(
                n.name.name.clone(),
                ItemKind::Variable,
                Some("string".into()),
            )),
            _ => {}
        }
    }
    if !out.is_empty() || matches!(base, "input" | "secret" | "env") {
        return out;
    }
    let is_step = flow
        .members
        .iter()
        .any(|m| matches!(m, Member::Step(s) if s.name.name == base));
    if !is_step {
        return out;
    }
    if let Some(Type::Record { fields }) =
        cx.step_type(idx, base).map(|t| t.strip_optional().clone())
    {
        out.extend(
            fields
                .iter()
                .map(|f| item(f.name.clone(), ItemKind::Field, Some(f.ty.to_string()))),
        );
    }
    out
}

fn expression_names(cx: &Ctx<'_>, idx: usize, flow: &Flow) -> Vec<Item> {
    let mut out: Vec<Item> = flow
        .members
        .iter()
        .filter_map(|m| match m {
            Member::Step(s) => Some(item(
                s.name.name.clone(),
                ItemKind::Step,
                cx.step_type(idx, &s.name.name).map(|t| t.to_string()),
            )),
            _ => None,
        })
        .collect();
    out.extend(
        reel_eval::builtins()
            .iter()
            .map(|b| item(b.name, ItemKind::Function, Some(b.signatures.join(" | ")))),
    );
    for word in [
        "input", "env", "secret", "item", "index", "if", "for", "true", "false", "null",
    ] {
        out.push(item(word, ItemKind::Keyword, None));
    }
    out
}

#[cfg(test)]
mod tests {
    use reel_compiler::{RootDb, SourceFile};

    use super::*;

    fn labels(src: &str) -> Vec<String> {
        let offset = src.find('$').unwrap();
        let src = src.replace('$', "");
        let db = RootDb::default();
        let file = SourceFile::new(&db, "t.reel".into(), "/tmp".into(), src.as_str().into());
        let cx = Ctx::new(&db, file);
        complete(&cx, offset).into_iter().map(|i| i.label).collect()
    }

    #[test]
    fn input_members() {
        let l = labels("flow f {\n  input who: string\n  input n: int\n  step a = input.$\n}\n");
        assert_eq!(l, vec!["who", "n"]);
    }

    #[test]
    fn step_fields() {
        let l =
            labels("flow f {\n  step a = echo { value: { x: 1, y: \"s\" } }\n  output a.$\n}\n");
        assert_eq!(l, vec!["x", "y"]);
    }

    #[test]
    fn tools_after_step_equals() {
        let l = labels("flow f {\n  step a = $\n}\n");
        assert!(l.contains(&"http.get".to_string()), "{l:?}");
        let l = labels("flow f {\n  step a = http.$\n}\n");
        assert!(l.contains(&"echo".to_string()), "{l:?}");
    }

    #[test]
    fn block_keys_and_expression_names() {
        let l = labels("flow f {\n  step a = echo {\n    $\n  }\n}\n");
        assert!(
            l.contains(&"foreach".to_string()) && l.contains(&"value".to_string()),
            "{l:?}"
        );
        let l = labels("flow f {\n  step a = echo { value: 1 }\n  output l$\n}\n");
        assert!(
            l.contains(&"a".to_string()) && l.contains(&"len".to_string()),
            "{l:?}"
        );
    }
}
