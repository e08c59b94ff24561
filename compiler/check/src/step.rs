//! Checking one step: its tool and arguments against the contract, its meta-arguments, and its lowering.
//!
//! Works on a step whose spans are relative to the step's start, so the result of an unchanged
//! step is reused after edits elsewhere in the file.

use reel_flowspec::{self as fs, Backoff, Duration, RetrySpec, ToolKind, Type};
use reel_syntax::ast::{self, ExprKind, StepBody};
use reel_syntax::{Code, Diagnostic, Span};
use serde_json::Value;

use crate::contracts::{ArgRule, Contract, META_ARGUMENTS, ResultType, builtin_contract};
use crate::declarations::RESERVED_STEP_NAMES;
use crate::infer::{Checker, ItemScope, Refs};
use crate::signature::FlowSignature;
use crate::suggest::closest;

/// The lowered step, without spans or digest (the flow adds those).
#[derive(Clone, Debug, PartialEq)]
pub struct LoweredStep {
    /// The called tool, or `None` for an expression step.
    pub tool: Option<String>,
    /// The tool's kind.
    pub kind: ToolKind,
    /// Arguments by name.
    pub args: fs::Args,
    /// An expression step's value.
    pub value: Option<fs::Expr>,
    /// `when`
    pub when: Option<fs::Expr>,
    /// `foreach`
    pub foreach: Option<fs::Expr>,
    /// `concurrency`
    pub concurrency: u32,
    /// `after`
    pub after: Vec<String>,
    /// `retry`, defaults filled.
    pub retry: RetrySpec,
    /// `timeout`, defaults filled.
    pub timeout: Option<Duration>,
}

/// What checking one step found.
#[derive(Clone, Debug, PartialEq)]
pub struct StepCheck {
    /// The type of the step's value.
    pub ty: Type,
    /// The lowered step.
    pub lowered: LoweredStep,
    /// What its expressions refer to.
    pub refs: Refs,
    /// The steps named in `after`, with their spans.
    pub after: Vec<(String, Span)>,
    /// Diagnostics, spans relative to the step's start.
    pub diagnostics: Vec<Diagnostic>,
}

impl StepCheck {
    /// The FlowSpec step `id` of this check: what it calls and how, without what only a whole
    /// flow knows (its dependencies, doc comment and place, and its digest, which sealing fills).
    pub fn step_spec(&self, id: String) -> fs::StepSpec {
        let l = &self.lowered;
        fs::StepSpec {
            id,
            tool: l.tool.clone(),
            kind: l.kind,
            args: l.args.clone(),
            value: l.value.clone(),
            deps: Vec::new(),
            when: l.when.clone(),
            foreach: l.foreach.clone(),
            concurrency: l.concurrency,
            after: l.after.clone(),
            retry: l.retry.clone(),
            timeout: l.timeout,
            ty: self.ty.clone(),
            doc: None,
            span: fs::SourceSpan::default(),
            name_span: fs::SourceSpan::default(),
            semantic_digest: String::new(),
        }
    }
}

/// The default concurrency of a `foreach` step.
pub const DEFAULT_CONCURRENCY: u32 = 8;

/// The contract's default per-attempt timeout of `http.*` calls.
pub const HTTP_DEFAULT_TIMEOUT: Duration = Duration(30_000);

/// Looks up a tool by name: built in, or declared in the file.
pub type ToolLookup<'a> = &'a dyn Fn(&str) -> Option<Contract>;

/// Checks one step. `step_type` gives the value type of another step (already optional for
/// `when` steps and a list for `foreach` steps); `tools` finds the file's user tools.
pub fn check_step(
    step: &ast::Step,
    sig: &FlowSignature,
    user_tools: ToolLookup<'_>,
    step_type: &dyn Fn(&str) -> Type,
) -> StepCheck {
    match &step.body {
        StepBody::Expr(e) => {
            let mut cx = Checker::new(sig, step_type, ItemScope::Outside);
            let value = cx.expr(e);
            StepCheck {
                ty: value.ty.clone(),
                lowered: LoweredStep {
                    tool: None,
                    kind: ToolKind::Pure,
                    args: fs::Args::new(),
                    value: Some(value),
                    when: None,
                    foreach: None,
                    concurrency: DEFAULT_CONCURRENCY,
                    after: Vec::new(),
                    retry: RetrySpec::none(),
                    timeout: None,
                },
                refs: cx.refs,
                after: Vec::new(),
                diagnostics: cx.diags,
            }
        }
        StepBody::Call(call) => check_call(step, call, sig, user_tools, step_type),
    }
}

fn check_call(
    step: &ast::Step,
    call: &ast::Call,
    sig: &FlowSignature,
    user_tools: ToolLookup<'_>,
    step_type: &dyn Fn(&str) -> Type,
) -> StepCheck {
    let found = builtin_contract(&call.tool.name)
        .cloned()
        .or_else(|| user_tools(&call.tool.name));
    let mut cx = Checker::new(sig, step_type, ItemScope::Outside);
    if found.is_none() {
        report_unknown_tool(&mut cx, &call.tool, sig, user_tools);
    }
    let kind = found.as_ref().map_or(ToolKind::Effect, |c| c.kind);
    let contract = found.filter(|c| !c.broken);

    // Duplicate keys: the first one counts.
    let mut args: Vec<&ast::Field> = Vec::new();
    for f in &call.args {
        if let Some(first) = args.iter().find(|a| a.key.name == f.key.name) {
            cx.report(
                Diagnostic::error(
                    Code::NameDuplicateArgument,
                    f.key.span,
                    format!("`{}` is given twice", f.key.name),
                )
                .with_label("given again here")
                .with_secondary(first.key.span, "first given here")
                .with_help("remove one of them"),
            );
            continue;
        }
        args.push(f);
    }
    let arg = |name: &str| args.iter().copied().find(|a| a.key.name == name);

    // `foreach` first: it decides what `item` is for the other arguments.
    let foreach = arg("foreach").map(|f| {
        let e = cx.expr(&f.value);
        let elem = cx.element_type(&e, f.value.span, "`foreach`");
        (e, elem)
    });
    let when = arg("when").map(|f| {
        cx.item = if foreach.is_some() {
            ItemScope::InWhen
        } else {
            ItemScope::Outside
        };
        let e = cx.expr(&f.value);
        cx.expect(&e, f.value.span, &Type::Bool, "`when`");
        if reel_eval::is_constant(&e)
            && let Ok(Value::Bool(b)) = reel_eval::eval_const(&e)
        {
            cx.report(
                Diagnostic::warning(
                    Code::LintConstantWhen,
                    f.value.span,
                    format!("this `when` is always {b}"),
                )
                .with_label("does not depend on anything the run knows")
                .with_help(if b {
                    "remove `when`: the step always runs"
                } else {
                    "remove the step, or make `when` depend on an input or a step"
                }),
            );
        }
        e
    });
    cx.item = match &foreach {
        Some((_, elem)) => ItemScope::Foreach(elem.clone()),
        None => ItemScope::Outside,
    };

    let concurrency = arg("concurrency").map_or(DEFAULT_CONCURRENCY, |f| {
        if foreach.is_none() {
            cx.report(
                Diagnostic::warning(
                    Code::LintConcurrencyWithoutForeach,
                    f.key.span,
                    "`concurrency` does nothing without `foreach`",
                )
                .with_label("this step makes one call")
                .with_help("remove it, or add `foreach`"),
            );
        }
        match &f.value.kind {
            ExprKind::Int(n) if (1..=10_000).contains(n) => *n as u32,
            // A syntax error, already reported.
            ExprKind::Error => DEFAULT_CONCURRENCY,
            _ => {
                cx.expr(&f.value);
                cx.report(
                    Diagnostic::error(
                        Code::MetaConcurrency,
                        f.value.span,
                        "`concurrency` must be a whole number from 1 to 10000",
                    )
                    .with_label("not a number from 1 to 10000")
                    .with_help("write a literal such as `concurrency: 4`"),
                );
                DEFAULT_CONCURRENCY
            }
        }
    });
    let after = arg("after").map_or_else(Vec::new, |f| after_list(&mut cx, step, f));
    let retry = retry_policy(&mut cx, arg("retry"), kind);
    let timeout = arg("timeout").map_or_else(
        || {
            call.tool
                .name
                .starts_with("http.")
                .then_some(HTTP_DEFAULT_TIMEOUT)
        },
        |f| duration_literal(&mut cx, f, "timeout"),
    );

    // The tool's own parameters.
    // Collected at the end rather than inserted one by one: `Args` then holds exactly its
    // entries (an insert leaves room for four, and every step's check is kept).
    let mut lowered_args: Vec<(String, fs::Expr)> = Vec::new();
    let mut value_type: Option<Type> = None;
    for f in &args {
        if META_ARGUMENTS.contains(&f.key.name.as_str()) {
            continue;
        }
        let Some(contract) = &contract else {
            cx.expr(&f.value);
            continue;
        };
        let Some(param) = contract.param(&f.key.name) else {
            cx.expr(&f.value);
            report_unknown_argument(&mut cx, contract, f);
            continue;
        };
        let lowered = if param.ty.strip_optional() == &Type::Secret {
            match cx.secret_argument(&f.value) {
                Some(e) => e,
                None => {
                    let e = cx.expr(&f.value);
                    if e.ty != Type::Error {
                        cx.report(
                            Diagnostic::error(
                                Code::TypeMismatch,
                                f.value.span,
                                format!("`{}` takes a secret, found `{}`", f.key.name, e.ty),
                            )
                            .with_label("not a secret")
                            .with_help(
                                "declare `secret NAME` in the flow and pass `secret.NAME` here",
                            ),
                        );
                    }
                    e
                }
            }
        } else {
            let e = cx.expr(&f.value);
            if matches!(e.ty, Type::Secret) {
                // Already reported by the taint rule.
            } else {
                cx.expect(&e, f.value.span, &param.ty, &format!("`{}`", f.key.name));
            }
            e
        };
        if let ResultType::SameAs(p) = &contract.result
            && *p == f.key.name
        {
            value_type = Some(lowered.ty.clone());
        }
        lowered_args.push((f.key.name.clone(), lowered));
    }

    if let Some(contract) = contract.as_ref().filter(|_| !call.recovered) {
        check_required(&mut cx, contract, call, &args);
    }

    let result = match &contract {
        None => Type::Error,
        Some(c) => match &c.result {
            ResultType::Fixed(t) => t.clone(),
            ResultType::SameAs(_) => value_type.unwrap_or(Type::Error),
        },
    };
    let mut ty = result;
    if foreach.is_some() {
        ty = Type::list(ty);
    }
    if when.is_some() {
        ty = Type::optional(ty);
    }
    let lowered = LoweredStep {
        tool: Some(call.tool.name.clone()),
        kind,
        args: lowered_args.into_iter().collect(),
        value: None,
        when,
        foreach: foreach.map(|(e, _)| e),
        concurrency,
        after: after.iter().map(|(n, _)| n.clone()).collect(),
        retry,
        timeout,
    };
    StepCheck {
        ty,
        lowered,
        refs: cx.refs,
        after,
        diagnostics: cx.diags,
    }
}

fn report_unknown_tool(
    cx: &mut Checker<'_>,
    tool: &ast::Ident,
    sig: &FlowSignature,
    user_tools: ToolLookup<'_>,
) {
    let mut names: Vec<String> = crate::contracts::builtin_contracts()
        .iter()
        .map(|c| c.name.clone())
        .collect();
    names.extend(
        sig.steps
            .iter()
            .filter_map(|s| s.tool.clone())
            .filter(|t| user_tools(t).is_some()),
    );
    let mut d = Diagnostic::error(
        Code::NameUnknownTool,
        tool.span,
        format!("there is no tool `{}`", tool.name),
    )
    .with_label("unknown tool");
    match closest(&tool.name, names.iter().map(String::as_str)) {
        Some(s) => {
            d = d
                .with_help(format!("did you mean `{s}`?"))
                .with_fix(format!("replace with `{s}`"), tool.span, s)
        }
        None => {
            d = d.with_help(format!(
                "declare it in this file with `tool {} {{ kind: …, exec: […], input {{ … }}, output {{ … }} }}`",
                tool.name
            ))
        }
    }
    cx.report(d);
}

fn report_unknown_argument(cx: &mut Checker<'_>, contract: &Contract, f: &ast::Field) {
    let mut d = Diagnostic::error(
        Code::ToolUnknownArgument,
        f.key.span,
        format!("`{}` has no parameter `{}`", contract.name, f.key.name),
    )
    .with_label("unknown argument");
    let names = contract
        .params
        .iter()
        .map(|p| p.name.as_str())
        .chain(META_ARGUMENTS);
    match closest(&f.key.name, names) {
        Some(s) => {
            d = d.with_help(format!("did you mean `{s}`?")).with_fix(
                format!("replace with `{s}`"),
                f.key.span,
                s,
            )
        }
        None => {
            let params: Vec<String> = contract
                .params
                .iter()
                .map(|p| format!("`{}`", p.name))
                .collect();
            d = d.with_help(if params.is_empty() {
                format!("`{}` takes no arguments", contract.name)
            } else {
                format!("its parameters are {}", params.join(", "))
            });
        }
    }
    cx.report(d);
}

fn check_required(
    cx: &mut Checker<'_>,
    contract: &Contract,
    call: &ast::Call,
    args: &[&ast::Field],
) {
    let given = |n: &str| args.iter().any(|a| a.key.name == n);
    let missing: Vec<&str> = contract
        .params
        .iter()
        .filter(|p| p.required() && !given(&p.name))
        .map(|p| p.name.as_str())
        .collect();
    if !missing.is_empty() {
        let list: Vec<String> = missing.iter().map(|m| format!("`{m}`")).collect();
        let types: Vec<String> = missing
            .iter()
            .filter_map(|m| contract.param(m))
            .map(|p| format!("`{}: …`", p.name))
            .collect();
        cx.report(
            Diagnostic::error(
                Code::ToolMissingArgument,
                call.tool.span,
                format!(
                    "`{}` needs {} {}",
                    contract.name,
                    if missing.len() == 1 {
                        "the argument"
                    } else {
                        "the arguments"
                    },
                    list.join(", ")
                ),
            )
            .with_label(format!("missing {}", list.join(", ")))
            .with_secondary(call.block_span, "in this block")
            .with_help(format!("add {} to the block", types.join(", "))),
        );
    }
    for rule in &contract.rules {
        match rule {
            ArgRule::AtMostOne(names) | ArgRule::ExactlyOne(names) => {
                let present: Vec<&&ast::Field> = args
                    .iter()
                    .filter(|a| names.contains(&a.key.name))
                    .collect();
                let list = names
                    .iter()
                    .map(|n| format!("`{n}`"))
                    .collect::<Vec<_>>()
                    .join(" or ");
                if present.len() > 1 {
                    let mut d = Diagnostic::error(
                        Code::ToolConflictingArguments,
                        present[1].key.span,
                        format!("`{}` takes {list}, not both", contract.name),
                    )
                    .with_label("given together with another one");
                    d = d.with_secondary(present[0].key.span, "already given here");
                    cx.report(d.with_help("keep one of them"));
                } else if present.is_empty() && matches!(rule, ArgRule::ExactlyOne(_)) {
                    cx.report(
                        Diagnostic::error(
                            Code::ToolMissingArgument,
                            call.tool.span,
                            format!("`{}` needs {list}", contract.name),
                        )
                        .with_label(format!("missing {list}"))
                        .with_secondary(call.block_span, "in this block")
                        .with_help(format!("add one of {list} to the block")),
                    );
                }
            }
        }
    }
}

fn after_list(cx: &mut Checker<'_>, step: &ast::Step, f: &ast::Field) -> Vec<(String, Span)> {
    let ExprKind::List(items) = &f.value.kind else {
        cx.report(
            Diagnostic::error(
                Code::MetaAfter,
                f.value.span,
                "`after` takes a list of step names",
            )
            .with_label("not a list of names")
            .with_help("write `after: [step_a, step_b]`"),
        );
        return Vec::new();
    };
    let mut out = Vec::new();
    for item in items {
        let ExprKind::Name(id) = &item.kind else {
            cx.report(
                Diagnostic::error(
                    Code::MetaAfter,
                    item.span,
                    "`after` lists step names, not expressions",
                )
                .with_label("not a step name")
                .with_help("write the bare name of a step of this flow"),
            );
            continue;
        };
        if id.name == step.name.name {
            cx.report(
                Diagnostic::error(
                    Code::DagSelfDependency,
                    id.span,
                    format!("`{}` waits for itself", id.name),
                )
                .with_label("a step cannot come after itself")
                .with_help("remove it from `after`"),
            );
            continue;
        }
        if cx_sig_has_step(cx, &id.name) {
            out.push((id.name.clone(), id.span));
        } else if cx.signature().maybe_declared(&id.name) {
            // A member that did not parse may have declared it: its syntax error is the one error.
        } else {
            let mut d = Diagnostic::error(
                Code::NameUnknownStep,
                id.span,
                format!("there is no step `{}` in this flow", id.name),
            )
            .with_label("unknown step");
            if let Some(s) = cx_closest_step(cx, &id.name) {
                d = d.with_help(format!("did you mean `{s}`?")).with_fix(
                    format!("replace with `{s}`"),
                    id.span,
                    s,
                );
            }
            cx.report(d);
        }
    }
    out
}

fn cx_sig_has_step(cx: &Checker<'_>, name: &str) -> bool {
    cx.signature().step(name).is_some()
}

fn cx_closest_step(cx: &Checker<'_>, name: &str) -> Option<String> {
    closest(name, cx.signature().steps.iter().map(|s| s.name.as_str())).map(str::to_string)
}

fn retry_policy(cx: &mut Checker<'_>, field: Option<&ast::Field>, kind: ToolKind) -> RetrySpec {
    let default = match kind {
        ToolKind::Read | ToolKind::Effect => RetrySpec::default_for_io(),
        ToolKind::Pure | ToolKind::Timer | ToolKind::Wait => RetrySpec::none(),
    };
    let Some(field) = field else {
        return default;
    };
    if matches!(kind, ToolKind::Timer | ToolKind::Wait) {
        cx.report(
            Diagnostic::error(Code::MetaRetry, field.key.span, "a wait cannot be retried")
                .with_label("`sleep` and `signal` steps are not retried")
                .with_help("remove `retry`; use `timeout` to bound the wait"),
        );
        return default;
    }
    let ExprKind::Record(entries) = &field.value.kind else {
        cx.report(
            Diagnostic::error(
                Code::MetaRetry,
                field.value.span,
                "`retry` takes a record of constants",
            )
            .with_label("not a record")
            .with_help("write `retry: { max: 3, backoff: \"exp\", base: 200ms, jitter: true }`"),
        );
        return default;
    };
    let mut policy = RetrySpec {
        max: default.max.max(3),
        ..RetrySpec::default_for_io()
    };
    for e in entries {
        match e.key.name.as_str() {
            "max" => match &e.value.kind {
                ExprKind::Int(n) if (1..=1000).contains(n) => policy.max = *n as u32,
                _ => cx.report(
                    Diagnostic::error(
                        Code::MetaRetry,
                        e.value.span,
                        "`max` must be a whole number from 1 to 1000",
                    )
                    .with_label("not a number of attempts")
                    .with_note("`max` counts every attempt, the first included"),
                ),
            },
            "backoff" => match string_literal(&e.value).as_deref() {
                Some("exp") => policy.backoff = Backoff::Exp,
                Some("fixed") => policy.backoff = Backoff::Fixed,
                _ => cx.report(
                    Diagnostic::error(
                        Code::MetaRetry,
                        e.value.span,
                        "`backoff` is \"exp\" or \"fixed\"",
                    )
                    .with_label("not a backoff"),
                ),
            },
            "base" => {
                if let Some(d) = duration_literal(cx, e, "base") {
                    policy.base = d;
                }
            }
            "jitter" => match &e.value.kind {
                ExprKind::Bool(b) => policy.jitter = *b,
                _ => cx.report(
                    Diagnostic::error(
                        Code::MetaRetry,
                        e.value.span,
                        "`jitter` is `true` or `false`",
                    )
                    .with_label("not a boolean literal"),
                ),
            },
            other => {
                let mut d = Diagnostic::error(
                    Code::MetaRetry,
                    e.key.span,
                    format!("`retry` has no setting `{other}`"),
                )
                .with_label("unknown setting")
                .with_help("the settings are `max`, `backoff`, `base` and `jitter`");
                if let Some(s) = closest(other, ["max", "backoff", "base", "jitter"]) {
                    d = d.with_fix(format!("replace with `{s}`"), e.key.span, s);
                }
                cx.report(d);
            }
        }
    }
    policy
}

fn string_literal(e: &ast::Expr) -> Option<String> {
    match &e.kind {
        ExprKind::Str(parts) => {
            let mut s = String::new();
            for p in parts {
                match p {
                    ast::StrPart::Text(t) => s.push_str(t),
                    ast::StrPart::Interp(_) => return None,
                }
            }
            Some(s)
        }
        _ => None,
    }
}

fn duration_literal(cx: &mut Checker<'_>, f: &ast::Field, what: &str) -> Option<Duration> {
    match &f.value.kind {
        ExprKind::Duration { millis, .. } if *millis > 0 || what == "base" => {
            Some(Duration(*millis))
        }
        // A syntax error (an invalid duration), already reported.
        ExprKind::Error => None,
        _ => {
            cx.report(
                Diagnostic::error(
                    Code::MetaDuration,
                    f.value.span,
                    format!("`{what}` takes a duration literal"),
                )
                .with_label("not a duration literal")
                .with_help(format!(
                    "write a positive duration such as `{what}: 10s` (units: ms, s, m, h, d)"
                )),
            );
            None
        }
    }
}

/// The steps a step depends on, from its syntax alone: the names of `sig`'s steps its
/// expressions mention (comprehension variables excluded), then its `after` list.
pub fn syntactic_dependencies(step: &ast::Step, sig: &FlowSignature) -> Vec<(String, Span)> {
    let is_step = |n: &str| sig.step(n).is_some();
    let mut out = Vec::new();
    for e in step_exprs(step) {
        collect_names(e, &is_step, &mut Vec::new(), &mut out);
    }
    out.extend(
        after_names(step)
            .filter(|id| is_step(&id.name) && id.name != step.name.name)
            .map(|id| (id.name.clone(), id.span)),
    );
    out
}

/// Every free name a step's expressions mention (each once, reserved names left out) and every
/// name in its `after` list, whether or not a step has it: what the DAG needs from a step
/// before the flow's steps are known.
/// [`syntactic_dependencies`] is these, kept to the names of steps.
pub fn step_mentions(step: &ast::Step) -> (Vec<String>, Vec<String>) {
    let mut names = Vec::new();
    for e in step_exprs(step) {
        collect_names(e, &|_| true, &mut Vec::new(), &mut names);
    }
    let after = after_names(step).map(|id| id.name.clone()).collect();
    // Each name once, in order, and none a step cannot take (`input`, `env`, …): the step
    // graph looks each one up on every key that changes a step's references.
    let mut out: Vec<String> = Vec::with_capacity(names.len());
    for (n, _) in names {
        if !RESERVED_STEP_NAMES.contains(&n.as_str()) && !out.contains(&n) {
            out.push(n);
        }
    }
    (out, after)
}

/// The expressions of a step that can refer to steps, `after` left out.
fn step_exprs(step: &ast::Step) -> Vec<&ast::Expr> {
    match &step.body {
        StepBody::Expr(e) => vec![e],
        StepBody::Call(c) => c
            .args
            .iter()
            .filter(|a| a.key.name != "after")
            .map(|a| &a.value)
            .collect(),
    }
}

/// The plain names in a step's `after` list.
fn after_names(step: &ast::Step) -> impl Iterator<Item = &ast::Ident> {
    let lists = match &step.body {
        StepBody::Call(c) => c.args.iter().filter(|a| a.key.name == "after").collect(),
        StepBody::Expr(_) => Vec::new(),
    };
    lists.into_iter().flat_map(|a| match &a.value.kind {
        ExprKind::List(items) => items
            .iter()
            .filter_map(|i| match &i.kind {
                ExprKind::Name(id) => Some(id),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    })
}

/// The free names `e` refers to that `keep` accepts, with their spans, comprehension variables
/// excluded: the steps it reads when `keep` knows the steps, every free name when it accepts all.
pub fn collect_names(
    e: &ast::Expr,
    keep: &dyn Fn(&str) -> bool,
    locals: &mut Vec<String>,
    out: &mut Vec<(String, Span)>,
) {
    match &e.kind {
        ExprKind::Name(id) => {
            if !locals.contains(&id.name) && keep(&id.name) {
                out.push((id.name.clone(), id.span));
            }
        }
        ExprKind::Comprehension {
            var,
            iter,
            cond,
            body,
        } => {
            collect_names(iter, keep, locals, out);
            locals.push(var.name.clone());
            if let Some(c) = cond {
                collect_names(c, keep, locals, out);
            }
            collect_names(body, keep, locals, out);
            locals.pop();
        }
        ExprKind::Member { base, .. } => collect_names(base, keep, locals, out),
        ExprKind::Index { base, index } => {
            collect_names(base, keep, locals, out);
            collect_names(index, keep, locals, out);
        }
        ExprKind::Str(parts) => {
            for p in parts {
                if let ast::StrPart::Interp(e) = p {
                    collect_names(e, keep, locals, out);
                }
            }
        }
        ExprKind::List(items) => items
            .iter()
            .for_each(|i| collect_names(i, keep, locals, out)),
        ExprKind::Record(fields) => fields
            .iter()
            .for_each(|f| collect_names(&f.value, keep, locals, out)),
        ExprKind::Call { args, .. } => args
            .iter()
            .for_each(|a| collect_names(a, keep, locals, out)),
        ExprKind::Unary { expr, .. } | ExprKind::Paren(expr) => {
            collect_names(expr, keep, locals, out)
        }
        ExprKind::Binary { lhs, rhs, .. } => {
            collect_names(lhs, keep, locals, out);
            collect_names(rhs, keep, locals, out);
        }
        ExprKind::If {
            cond,
            then,
            otherwise,
        } => {
            collect_names(cond, keep, locals, out);
            collect_names(then, keep, locals, out);
            collect_names(otherwise, keep, locals, out);
        }
        ExprKind::Int(_)
        | ExprKind::Float { .. }
        | ExprKind::Duration { .. }
        | ExprKind::Bool(_)
        | ExprKind::Null
        | ExprKind::Error => {}
    }
}
