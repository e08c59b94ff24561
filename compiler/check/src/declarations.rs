//! A flow's declarations: duplicate and reserved names, input types and defaults, the output's place.

use reel_flowspec::Type;
use reel_syntax::ast::{self, Member, StepBody};
use reel_syntax::{Diagnostic, Span};
use serde_json::Value;

use crate::signature::{FlowSignature, StepHead};
use crate::types::resolve_type;

/// Names a step cannot take: they already mean something in expressions.
pub const RESERVED_STEP_NAMES: [&str; 5] = ["input", "env", "secret", "item", "index"];

/// A checked input.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckedInput {
    /// Its name.
    pub name: String,
    /// Its declared type.
    pub ty: Type,
    /// Its default, evaluated.
    pub default: Option<Value>,
}

/// The signature of a flow and what its declarations got wrong (absolute spans).
#[derive(Clone, Debug, PartialEq)]
pub struct Declarations {
    /// Names and types, duplicates dropped.
    pub signature: FlowSignature,
    /// Inputs with their defaults, in order.
    pub inputs: Vec<CheckedInput>,
    /// Problems with the declarations.
    pub diagnostics: Vec<Diagnostic>,
}

/// Checks the declarations of `members`: `(offset, member)` pairs whose spans are relative to
/// `offset`, in source order, about `expected` of them. The diagnostics come out with absolute spans.
pub fn check_declarations<'a>(
    members: impl IntoIterator<Item = (u32, &'a Member)>,
    expected: usize,
) -> Declarations {
    let mut diags = Vec::new();
    let mut sig = FlowSignature::default();
    sig.steps.reserve(expected);
    sig.step_index.reserve(expected);
    let mut inputs = Vec::new();
    // One namespace for inputs, secrets and steps (the contract), one for env names.
    let mut names: rustc_hash::FxHashMap<&'a str, (Span, &'static str)> =
        rustc_hash::FxHashMap::default();
    names.reserve(expected);
    let mut env_names: Vec<(String, Span)> = Vec::new();
    let mut output: Option<Span> = None;
    let mut declare = |name: &'a ast::Ident,
                       offset: u32,
                       what: &'static str,
                       diags: &mut Vec<Diagnostic>|
     -> bool {
        let span = moved(name.span, offset);
        if let Some((first, first_what)) = names.get(name.name.as_str()) {
            diags.push(
                Diagnostic::error(
                    "name.duplicate",
                    span,
                    format!("`{}` is declared twice in this flow", name.name),
                )
                .with_label(format!("this {what} reuses the name"))
                .with_secondary(*first, format!("the {first_what} `{}` is declared here", name.name))
                .with_help("inputs, secrets and steps of a flow share one set of names: rename one of them"),
            );
            return false;
        }
        names.insert(name.name.as_str(), (span, what));
        true
    };
    for (offset, m) in members {
        // Problems local to this member are found with relative spans and moved once.
        let mut local = Vec::new();
        // Duplicates point at two members: their spans are absolute already.
        let mut dups = Vec::new();
        match m {
            Member::Input(i) => {
                let ty = resolve_type(&i.ty, &mut local);
                if ty.contains_secret() {
                    local.push(
                        Diagnostic::error(
                            "type.secret-input",
                            i.ty.span,
                            "an input cannot be a secret",
                        )
                        .with_label("inputs are recorded with the run")
                        .with_help(format!(
                            "declare `secret {}` instead; it is read from REEL_SECRET_{} when the run starts",
                            i.name.name,
                            i.name.name.to_uppercase()
                        )),
                    );
                }
                let default = i
                    .default
                    .as_ref()
                    .and_then(|d| input_default(d, &ty, &mut local));
                if declare(&i.name, offset, "input", &mut dups) {
                    sig.inputs.push((i.name.name.clone(), ty.clone()));
                    inputs.push(CheckedInput {
                        name: i.name.name.clone(),
                        ty,
                        default,
                    });
                }
            }
            Member::Secret(s) => {
                if declare(&s.name, offset, "secret", &mut dups) {
                    sig.secrets.push(s.name.name.clone());
                }
            }
            Member::Env(e) => {
                if let Some((_, first)) = env_names.iter().find(|(n, _)| *n == e.name.name) {
                    dups.push(
                        Diagnostic::error(
                            "name.duplicate",
                            moved(e.name.span, offset),
                            format!("`env {}` is declared twice", e.name.name),
                        )
                        .with_label("declared again here")
                        .with_secondary(*first, "first declared here")
                        .with_help("remove one of them"),
                    );
                } else {
                    env_names.push((e.name.name.clone(), moved(e.name.span, offset)));
                    sig.env.push(e.name.name.clone());
                }
            }
            Member::Step(s) => {
                if RESERVED_STEP_NAMES.contains(&s.name.name.as_str()) {
                    local.push(
                        Diagnostic::error(
                            "name.reserved",
                            s.name.span,
                            format!("`{}` cannot name a step", s.name.name),
                        )
                        .with_label("this name already means something in expressions")
                        .with_help(format!(
                            "rename the step, for example `{}_step`",
                            s.name.name
                        )),
                    );
                } else if declare(&s.name, offset, "step", &mut dups) {
                    let (tool, has_when, has_foreach) = match &s.body {
                        StepBody::Call(c) => (
                            Some(c.tool.name.clone()),
                            c.args.iter().any(|a| a.key.name == "when"),
                            c.args.iter().any(|a| a.key.name == "foreach"),
                        ),
                        StepBody::Expr(_) => (None, false, false),
                    };
                    sig.push_step(StepHead {
                        name: s.name.name.clone(),
                        tool,
                        has_when,
                        has_foreach,
                    });
                }
            }
            Member::Output(o) => {
                if let Some(first) = output {
                    dups.push(
                        Diagnostic::error(
                            "flow.duplicate-output",
                            moved(o.span, offset),
                            "a flow has one `output`",
                        )
                        .with_label("a second output")
                        .with_secondary(first, "the first output is here")
                        .with_help("merge them into one record: `output { a: …, b: … }`"),
                    );
                } else {
                    output = Some(moved(o.span, offset));
                }
            }
            Member::Error(_) => {}
        }
        diags.extend(local.iter().map(|d| d.shifted(offset)));
        diags.append(&mut dups);
    }
    Declarations {
        signature: sig,
        inputs,
        diagnostics: diags,
    }
}

fn moved(span: Span, offset: u32) -> Span {
    Span {
        start: span.start + offset,
        end: span.end + offset,
    }
}

/// Checks and evaluates an input's default: a constant of the input's type.
fn input_default(d: &ast::Expr, ty: &Type, diags: &mut Vec<Diagnostic>) -> Option<Value> {
    let empty = FlowSignature::default();
    let no_steps = |_: &str| Type::Error;
    let mut cx = crate::infer::Checker::new(&empty, &no_steps, crate::infer::ItemScope::Outside);
    let lowered = cx.expr(d);
    let had_errors = !cx.diags.is_empty();
    if !had_errors && !reel_eval::is_constant(&lowered) {
        diags.push(
            Diagnostic::error(
                "input.default-not-constant",
                d.span,
                "an input's default must be a constant",
            )
            .with_label("this reads something the run only knows later")
            .with_help("write a literal value; compute derived values in a step instead"),
        );
        return None;
    }
    if !had_errors {
        cx.expect(&lowered, d.span, ty, "this input");
    }
    let ok = cx.diags.is_empty();
    // Names in a default resolve against an empty flow: say so rather than "unknown name".
    for mut diag in cx.diags {
        if diag.code.starts_with("name.") {
            diag = Diagnostic::error(
                "input.default-not-constant",
                diag.primary.span,
                "an input's default must be a constant",
            )
            .with_label("defaults cannot refer to inputs, steps or the environment")
            .with_help("write a literal value; compute derived values in a step instead");
        }
        diags.push(diag);
    }
    if !ok {
        return None;
    }
    match reel_eval::eval_const(&lowered) {
        Ok(v) => Some(v),
        Err(e) => {
            diags.push(
                Diagnostic::error(
                    "input.default-invalid",
                    d.span,
                    format!("this default cannot be computed: {}", e.message),
                )
                .with_label("fails when evaluated"),
            );
            None
        }
    }
}
