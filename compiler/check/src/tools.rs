//! User `tool` declarations: checked into contracts the steps are checked against.

use reel_flowspec::{Repeat, ToolKind, Type};
use reel_syntax::ast::{self, ExprKind, SchemaSide, ToolEntry};
use reel_syntax::{Code, Diagnostic, Span};

use crate::contracts::{Contract, META_ARGUMENTS, Param, ResultType, builtin_contract};
use crate::suggest::closest;
use crate::types::resolve_fields;

/// A checked user tool: its contract and how to run it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct UserTool {
    /// The contract steps are checked against.
    pub contract: Contract,
    /// The command and its arguments.
    pub exec: Vec<String>,
    /// The arguments' record type.
    pub input: Type,
    /// The result type.
    pub output: Type,
    /// Whether a call whose outcome is unknown is attempted again.
    pub repeat: Repeat,
    /// Its doc comment.
    pub doc: Option<String>,
}

/// Checks one `tool` declaration. A broken one still gives a (broken) contract, so calls of it
/// are not reported again as calls of an unknown tool.
pub fn check_tool(tool: &ast::Tool, diags: &mut Vec<Diagnostic>) -> Option<UserTool> {
    if builtin_contract(&tool.name.name).is_some() {
        diags.push(
            Diagnostic::error(
                Code::NameBuiltinTool,
                tool.name.span,
                format!("`{}` is a built-in tool", tool.name.name),
            )
            .with_label("this name is taken")
            .with_help("give your tool another name"),
        );
    }
    let mut kind: Option<ToolKind> = None;
    let mut exec: Option<Vec<String>> = None;
    let mut repeat: Option<(Repeat, Span)> = None;
    let mut input: Option<Vec<(String, Type)>> = None;
    let mut output: Option<Vec<(String, Type)>> = None;
    let mut seen: Vec<(String, Span)> = Vec::new();
    let mut broken = false;
    for entry in &tool.entries {
        let (key, key_span) = match entry {
            ToolEntry::Field(f) => (f.key.name.clone(), f.key.span),
            ToolEntry::Schema(s) => (
                match s.side {
                    SchemaSide::Input => "input".to_string(),
                    SchemaSide::Output => "output".to_string(),
                },
                s.keyword_span,
            ),
            ToolEntry::Error(_) => {
                broken = true;
                continue;
            }
        };
        if let Some((_, first)) = seen.iter().find(|(k, _)| *k == key) {
            diags.push(
                Diagnostic::error(
                    Code::ToolDuplicateEntry,
                    key_span,
                    format!("`{key}` is given twice in this tool"),
                )
                .with_label("given again here")
                .with_secondary(*first, "first given here")
                .with_help("remove one of them"),
            );
            continue;
        }
        seen.push((key.clone(), key_span));
        match entry {
            ToolEntry::Field(f) => match key.as_str() {
                "kind" => kind = tool_kind(f, diags),
                "exec" => exec = exec_list(f, diags),
                "repeat" => repeat = tool_repeat(f, diags).map(|r| (r, f.value.span)),
                "input" | "output" => diags.push(
                    Diagnostic::error(
                        Code::ToolInvalidSchema,
                        f.span,
                        format!("`{key}` is a block of typed fields, not a value"),
                    )
                    .with_label("not a schema")
                    .with_help(format!("write `{key} {{ name: string, count: int }}`")),
                ),
                other => {
                    let mut d = Diagnostic::error(
                        Code::ToolUnknownEntry,
                        f.key.span,
                        format!("a tool has no setting `{other}`"),
                    )
                    .with_label("unknown setting")
                    .with_help(
                        "a tool has `kind`, `exec`, `repeat`, `input { … }` and `output { … }`",
                    );
                    if let Some(s) = closest(other, ["kind", "exec", "repeat", "input", "output"]) {
                        d = d.with_fix(format!("replace with `{s}`"), f.key.span, s);
                    }
                    diags.push(d);
                }
            },
            ToolEntry::Schema(s) => {
                let fields = resolve_fields(&s.fields, diags, "parameter");
                for (f, (_, ty)) in s.fields.iter().zip(&fields) {
                    let top_level = matches!(ty.strip_optional(), Type::Secret);
                    let (bad, message, help) = match s.side {
                        SchemaSide::Output => (
                            ty.contains_secret(),
                            "a tool's result cannot hold a secret",
                            "results are recorded in the journal; a secret never is",
                        ),
                        SchemaSide::Input => (
                            ty.contains_secret() && !top_level,
                            "a secret can only be a whole parameter, not part of one",
                            "declare the parameter itself as `secret` (or `secret?`)",
                        ),
                    };
                    if bad {
                        diags.push(
                            Diagnostic::error(Code::TypeSecretNested, f.ty.span, message)
                                .with_label("a secret inside this type")
                                .with_help(help),
                        );
                    }
                }
                match s.side {
                    SchemaSide::Input => {
                        for f in &s.fields {
                            if META_ARGUMENTS.contains(&f.key.name.as_str()) {
                                diags.push(
                                    Diagnostic::error(
                                        Code::ToolReservedParameter,
                                        f.key.span,
                                        format!("`{}` belongs to the engine and cannot be a tool parameter", f.key.name),
                                    )
                                    .with_label("reserved meta-argument")
                                    .with_help(format!(
                                        "rename it; {} are meta-arguments of every step",
                                        META_ARGUMENTS.map(|m| format!("`{m}`")).join(", ")
                                    )),
                                );
                            }
                        }
                        input = Some(fields);
                    }
                    SchemaSide::Output => output = Some(fields),
                }
            }
            ToolEntry::Error(_) => {}
        }
    }
    let name_span = tool.name.span;
    if kind.is_none() && !seen.iter().any(|(k, _)| k == "kind") {
        diags.push(
            Diagnostic::error(
                Code::ToolMissingKind,
                name_span,
                format!("the tool `{}` has no `kind`", tool.name.name),
            )
            .with_label("missing `kind`")
            .with_help("add `kind: \"pure\"`, `kind: \"read\"` or `kind: \"effect\"`"),
        );
    }
    if exec.is_none() && !seen.iter().any(|(k, _)| k == "exec") {
        diags.push(
            Diagnostic::error(
                Code::ToolMissingExec,
                name_span,
                format!("the tool `{}` has no `exec`", tool.name.name),
            )
            .with_label("missing `exec`")
            .with_help("add the command to run, such as `exec: [\"python3\", \"tools/score.py\"]`"),
        );
    }
    if let (Some(k), Some((Repeat::Never, span))) = (kind, repeat)
        && k != ToolKind::Effect
    {
        diags.push(
            Diagnostic::error(
                Code::ToolInvalidRepeat,
                span,
                format!(
                    "`repeat` is for effect tools; this tool is `{}`",
                    k.as_str()
                ),
            )
            .with_label("not an effect tool")
            .with_help("a pure or read call is simply made again; remove `repeat`"),
        );
    }
    let (Some(kind), Some(exec), false) = (kind, exec, broken) else {
        // Calls of a broken tool are not checked against it: its own diagnostic is the one.
        return Some(UserTool {
            contract: Contract {
                name: tool.name.name.clone(),
                kind: ToolKind::Effect,
                params: Vec::new(),
                rules: Vec::new(),
                result: ResultType::Fixed(Type::Error),
                doc: tool.doc.clone().unwrap_or_default(),
                builtin: false,
                broken: true,
            },
            exec: Vec::new(),
            input: Type::Error,
            output: Type::Error,
            repeat: Repeat::WithKey,
            doc: tool.doc.clone(),
        });
    };
    let input_fields = input.unwrap_or_default();
    let output_ty = match output {
        Some(fields) => Type::record(fields),
        None => Type::Json,
    };
    let written_optional = |name: &str| {
        tool.entries.iter().any(|e| match e {
            ToolEntry::Schema(s) if s.side == SchemaSide::Input => s
                .fields
                .iter()
                .find(|f| f.key.name == name)
                .is_some_and(|f| matches!(f.ty.kind, ast::TypeExprKind::Optional(_))),
            _ => false,
        })
    };
    let params = input_fields
        .iter()
        .map(|(n, t)| Param {
            name: n.clone(),
            ty: t.clone(),
            optional: written_optional(n),
        })
        .collect();
    Some(UserTool {
        contract: Contract {
            name: tool.name.name.clone(),
            kind,
            params,
            rules: Vec::new(),
            result: ResultType::Fixed(output_ty.clone()),
            doc: tool.doc.clone().unwrap_or_default(),
            builtin: false,
            broken: false,
        },
        exec,
        input: Type::record(input_fields),
        output: output_ty,
        repeat: repeat.map_or(Repeat::WithKey, |(r, _)| r),
        doc: tool.doc.clone(),
    })
}

fn tool_kind(f: &ast::Field, diags: &mut Vec<Diagnostic>) -> Option<ToolKind> {
    let text = match &f.value.kind {
        ExprKind::Str(parts) => match parts.as_slice() {
            [ast::StrPart::Text(t)] => Some(t.as_str()),
            [] => Some(""),
            _ => None,
        },
        _ => None,
    };
    match text {
        Some("pure") => Some(ToolKind::Pure),
        Some("read") => Some(ToolKind::Read),
        Some("effect") => Some(ToolKind::Effect),
        other => {
            let mut d = Diagnostic::error(
                Code::ToolInvalidKind,
                f.value.span,
                "a tool's `kind` is \"pure\", \"read\" or \"effect\"",
            )
            .with_label("not a tool kind")
            .with_note("pure: no effect, same inputs give the same result; read: reads the world; effect: changes it, and gets an idempotency key");
            if let Some(s) = other.and_then(|o| closest(o, ["pure", "read", "effect"])) {
                d = d.with_help(format!("did you mean \"{s}\"?")).with_fix(
                    format!("replace with \"{s}\""),
                    f.value.span,
                    format!("\"{s}\""),
                );
            }
            diags.push(d);
            None
        }
    }
}

fn tool_repeat(f: &ast::Field, diags: &mut Vec<Diagnostic>) -> Option<Repeat> {
    let text = match &f.value.kind {
        ExprKind::Str(parts) => match parts.as_slice() {
            [ast::StrPart::Text(t)] => Some(t.as_str()),
            [] => Some(""),
            _ => None,
        },
        _ => None,
    };
    match text {
        Some("never") => Some(Repeat::Never),
        Some("with-key") => Some(Repeat::WithKey),
        other => {
            let mut d = Diagnostic::error(
                Code::ToolInvalidRepeat,
                f.value.span,
                "a tool's `repeat` is \"never\" or \"with-key\"",
            )
            .with_label("not a repeat policy")
            .with_note("a call whose start was recorded but not its result has an unknown outcome: \"with-key\" (the default) attempts it again with the same idempotency key, \"never\" fails the run until a person decides");
            if let Some(s) = other.and_then(|o| closest(o, ["never", "with-key"])) {
                d = d.with_help(format!("did you mean \"{s}\"?")).with_fix(
                    format!("replace with \"{s}\""),
                    f.value.span,
                    format!("\"{s}\""),
                );
            }
            diags.push(d);
            None
        }
    }
}

fn exec_list(f: &ast::Field, diags: &mut Vec<Diagnostic>) -> Option<Vec<String>> {
    let bad = |span: Span, msg: &str| {
        Diagnostic::error(Code::ToolInvalidExec, span, msg.to_string())
            .with_label("not a list of strings")
            .with_help("write the command and its arguments as string literals: `exec: [\"python3\", \"tools/score.py\"]`")
    };
    let ExprKind::List(items) = &f.value.kind else {
        diags.push(bad(f.value.span, "`exec` is a list of strings"));
        return None;
    };
    if items.is_empty() {
        diags.push(bad(
            f.value.span,
            "`exec` needs at least the command to run",
        ));
        return None;
    }
    let mut out = Vec::new();
    for i in items {
        match &i.kind {
            ExprKind::Str(parts) if parts.iter().all(|p| matches!(p, ast::StrPart::Text(_))) => {
                out.push(
                    parts
                        .iter()
                        .map(|p| match p {
                            ast::StrPart::Text(t) => t.as_str(),
                            ast::StrPart::Interp(_) => "",
                        })
                        .collect(),
                );
            }
            _ => {
                diags.push(bad(i.span, "each part of `exec` is a string literal"));
                return None;
            }
        }
    }
    Some(out)
}
