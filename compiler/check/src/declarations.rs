//! A flow's declarations: duplicate and reserved names, input types and defaults, the output's place.

use reel_flowspec::Type;
use std::sync::Arc;

use reel_syntax::ast::{self, Member, StepBody};
use reel_syntax::visit::rebase_member;
use reel_syntax::{Code, Diagnostic, Span};
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

/// What one member declares, with spans relative to the member's own start: equal across
/// edits anywhere else, and across edits of a step's body, so the flow-wide queries that read
/// heads (the member table, the declarations, the signature) are not re-run by them.
#[derive(Clone, Debug, PartialEq)]
pub enum MemberHead {
    /// An input (relative spans).
    Input(Arc<ast::Input>),
    /// A secret's name.
    Secret(ast::Ident),
    /// An environment variable's name.
    Env(ast::Ident),
    /// A step: its name (relative span) and what its header says.
    Step {
        /// The name.
        name: ast::Ident,
        /// The called tool, or `None` for a pure expression step.
        tool: Option<String>,
        /// Whether the step has `when`.
        has_when: bool,
        /// Whether the step has `foreach`.
        has_foreach: bool,
    },
    /// The output; its span's length (it starts at 0).
    Output(u32),
    /// A member that did not parse, with the names written in it.
    Broken(Vec<String>),
    /// A member that did not parse, its text not at hand.
    Other,
}

impl MemberHead {
    /// The head of `m`, whose spans are relative to `m`'s group.
    pub fn of(m: &Member) -> MemberHead {
        let rel = |id: &ast::Ident, start: u32| ast::Ident {
            name: id.name.clone(),
            span: id.span.relative_to(start),
        };
        match m {
            Member::Input(i) => {
                let mut m = Member::Input(i.clone());
                rebase_member(&mut m, i.span.start);
                match m {
                    Member::Input(i) => MemberHead::Input(Arc::new(i)),
                    _ => MemberHead::Other,
                }
            }
            Member::Secret(s) => MemberHead::Secret(rel(&s.name, s.span.start)),
            Member::Env(e) => MemberHead::Env(rel(&e.name, e.span.start)),
            Member::Step(s) => {
                let (tool, has_when, has_foreach) = match &s.body {
                    StepBody::Call(c) => (
                        Some(c.tool.name.clone()),
                        c.args.iter().any(|a| a.key.name == "when"),
                        c.args.iter().any(|a| a.key.name == "foreach"),
                    ),
                    StepBody::Expr(_) => (None, false, false),
                };
                MemberHead::Step {
                    name: rel(&s.name, s.span.start),
                    tool,
                    has_when,
                    has_foreach,
                }
            }
            Member::Output(o) => MemberHead::Output(o.span.end - o.span.start),
            Member::Error(_) => MemberHead::Other,
        }
    }

    /// The head of `m`, a member of `text` (its spans relative to `text`): as [`MemberHead::of`],
    /// and for a member that did not parse, the names written in it.
    pub fn in_text(m: &Member, text: &str) -> MemberHead {
        let Member::Error(span) = m else {
            return MemberHead::of(m);
        };
        let names = text
            .get(span.range())
            .map(|broken| {
                reel_syntax::lexer::lex(broken)
                    .tokens
                    .into_iter()
                    .filter_map(|(t, _)| match t {
                        reel_syntax::token::Token::Ident(n) => Some(n),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        MemberHead::Broken(names)
    }

    /// The step's name, if this is a step.
    pub fn step_name(&self) -> Option<&str> {
        match self {
            MemberHead::Step { name, .. } => Some(&name.name),
            _ => None,
        }
    }

    /// The names this member declares, or, for a member that did not parse, writes: the names
    /// whose declarations it can clash with.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        let (one, many): (Option<&str>, &[String]) = match self {
            MemberHead::Input(i) => (Some(&i.name.name), &[]),
            MemberHead::Secret(name) | MemberHead::Env(name) => (Some(&name.name), &[]),
            MemberHead::Step { name, .. } => (Some(&name.name), &[]),
            MemberHead::Broken(names) => (None, names),
            MemberHead::Output(_) | MemberHead::Other => (None, &[]),
        };
        one.into_iter().chain(many.iter().map(String::as_str))
    }
}

/// Where a member is in its flow: the index of its group, and its index in that group.
pub type Place = (u32, u32);

/// A problem with the declarations, its spans relative to the members they point at: `places[0]`
/// is the primary label's member (and its fixes'), then one place per secondary label. The
/// caller, which knows where members are, makes the spans absolute. A place is a [`Place`], or
/// whatever else names a member (the per-shard declarations name the member's group itself, so
/// that a group added above does not change them).
#[derive(Clone, Debug, PartialEq, salsa::SalsaValue)]
pub struct PlacedDiagnostic<P = Place> {
    /// The diagnostic, spans relative to members.
    pub diagnostic: Diagnostic,
    /// The members its labels are in.
    pub places: Vec<P>,
}

impl<P: Copy> PlacedDiagnostic<P> {
    /// The diagnostic with absolute spans, given where each member starts.
    pub fn placed(&self, start_of: impl Fn(P) -> u32) -> Diagnostic {
        let mut d = self.diagnostic.clone();
        let mv = |s: &mut Span, at: u32| *s = s.shifted(at);
        let primary = start_of(self.places[0]);
        mv(&mut d.primary.span, primary);
        d.fixes.iter_mut().for_each(|f| mv(&mut f.span, primary));
        for (l, &place) in d.secondary.iter_mut().zip(&self.places[1..]) {
            mv(&mut l.span, start_of(place));
        }
        d
    }
}

/// The signature of a flow and what its declarations got wrong.
#[derive(Clone, Debug, PartialEq)]
pub struct Declarations<P = Place> {
    /// Names and types, duplicates dropped.
    pub signature: FlowSignature,
    /// Inputs with their defaults, in order.
    pub inputs: Vec<CheckedInput>,
    /// Problems with the declarations, placed by member.
    pub diagnostics: Vec<PlacedDiagnostic<P>>,
}

/// Checks the declarations of a flow from its members' heads, in source order (about
/// `expected` of them), each with its place. Two declarations clash only when they have the
/// same name, so the heads may be those of the names of one shard only (see
/// `queries::shards`): `broken` then keeps the names a broken member writes that are in it.
pub fn check_declarations<'a, P: Copy>(
    heads: impl IntoIterator<Item = (P, &'a MemberHead)>,
    expected: usize,
    broken: impl Fn(&str) -> bool,
) -> Declarations<P> {
    let mut diags = Vec::new();
    let mut sig = FlowSignature::default();
    sig.steps.reserve(expected);
    sig.step_index.reserve(expected);
    let mut inputs = Vec::new();
    // One namespace for inputs, secrets and steps (the contract), one for env names.
    let mut names: rustc_hash::FxHashMap<&'a str, (P, Span, &'static str)> =
        rustc_hash::FxHashMap::default();
    names.reserve(expected);
    let mut env_names: Vec<(&'a str, P, Span)> = Vec::new();
    let mut output: Option<(P, Span)> = None;
    let mut declare = |name: &'a ast::Ident,
                       place: P,
                       what: &'static str,
                       diags: &mut Vec<PlacedDiagnostic<P>>|
     -> bool {
        if let Some((first_place, first, first_what)) = names.get(name.name.as_str()) {
            diags.push(PlacedDiagnostic {
                diagnostic: Diagnostic::error(
                    Code::NameDuplicate,
                    name.span,
                    format!("`{}` is declared twice in this flow", name.name),
                )
                .with_label(format!("this {what} reuses the name"))
                .with_secondary(*first, format!("the {first_what} `{}` is declared here", name.name))
                .with_help("inputs, secrets and steps of a flow share one set of names: rename one of them"),
                places: vec![place, *first_place],
            });
            return false;
        }
        names.insert(name.name.as_str(), (place, name.span, what));
        true
    };
    for (place, head) in heads {
        // Problems local to this member.
        let mut local = Vec::new();
        match head {
            MemberHead::Input(i) => {
                let ty = resolve_type(&i.ty, &mut local);
                if ty.contains_secret() {
                    local.push(
                        Diagnostic::error(
                            Code::TypeSecretInput,
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
                if declare(&i.name, place, "input", &mut diags) {
                    sig.inputs.push((i.name.name.clone(), ty.clone()));
                    inputs.push(CheckedInput {
                        name: i.name.name.clone(),
                        ty,
                        default,
                    });
                }
            }
            MemberHead::Secret(name) => {
                if declare(name, place, "secret", &mut diags) {
                    sig.secrets.push(name.name.clone());
                }
            }
            MemberHead::Env(name) => {
                if let Some((_, first_place, first)) =
                    env_names.iter().find(|(n, _, _)| *n == name.name)
                {
                    diags.push(PlacedDiagnostic {
                        diagnostic: Diagnostic::error(
                            Code::NameDuplicate,
                            name.span,
                            format!("`env {}` is declared twice", name.name),
                        )
                        .with_label("declared again here")
                        .with_secondary(*first, "first declared here")
                        .with_help("remove one of them"),
                        places: vec![place, *first_place],
                    });
                } else {
                    env_names.push((name.name.as_str(), place, name.span));
                    sig.env.push(name.name.clone());
                }
            }
            MemberHead::Step {
                name,
                tool,
                has_when,
                has_foreach,
            } => {
                if RESERVED_STEP_NAMES.contains(&name.name.as_str()) {
                    local.push(
                        Diagnostic::error(
                            Code::NameReserved,
                            name.span,
                            format!("`{}` cannot name a step", name.name),
                        )
                        .with_label("this name already means something in expressions")
                        .with_help(format!("rename the step, for example `{}_step`", name.name)),
                    );
                } else if declare(name, place, "step", &mut diags) {
                    sig.push_step(StepHead {
                        name: name.name.clone(),
                        tool: tool.clone(),
                        has_when: *has_when,
                        has_foreach: *has_foreach,
                    });
                }
            }
            MemberHead::Output(len) => {
                let span = Span {
                    start: 0,
                    end: *len,
                };
                if let Some((first_place, first)) = output {
                    diags.push(PlacedDiagnostic {
                        diagnostic: Diagnostic::error(
                            Code::FlowDuplicateOutput,
                            span,
                            "a flow has one `output`",
                        )
                        .with_label("a second output")
                        .with_secondary(first, "the first output is here")
                        .with_help("merge them into one record: `output { a: …, b: … }`"),
                        places: vec![place, first_place],
                    });
                } else {
                    output = Some((place, span));
                }
            }
            MemberHead::Broken(names) => sig
                .broken_names
                .extend(names.iter().filter(|n| broken(n)).cloned()),
            MemberHead::Other => {}
        }
        // Every label of a local problem is in this member.
        diags.extend(local.into_iter().map(|diagnostic| PlacedDiagnostic {
            places: vec![place; 1 + diagnostic.secondary.len()],
            diagnostic,
        }));
    }
    Declarations {
        signature: sig,
        inputs,
        diagnostics: diags,
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
                Code::InputDefaultNotConstant,
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
        if diag.code.as_str().starts_with("name.") {
            diag = Diagnostic::error(
                Code::InputDefaultNotConstant,
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
                    Code::InputDefaultInvalid,
                    d.span,
                    format!("this default cannot be computed: {}", e.message),
                )
                .with_label("fails when evaluated"),
            );
            None
        }
    }
}
