//! The salsa queries: how parse, declarations, steps, the DAG and the FlowSpec depend on each other.
//!
//! Steps and the output are checked on copies whose spans are relative to their own start, and
//! the signature a step is checked against holds no spans: an edit re-checks the edited step and
//! the steps whose inputs' types it changed, while every other step's result is reused.

use std::collections::{BTreeMap, BTreeSet};

use reel_flowspec::Type;
use reel_syntax::ast::{self, Item, Member};
use reel_syntax::visit::rebase_member;
use reel_syntax::{Diagnostic, LineIndex, Parsed, Span};

use crate::contracts::Contract;
use crate::dag::{Dag, find_cycles};
use crate::db::{Db, SourceFile};
use crate::declarations::{Declarations, check_declarations};
use crate::infer::{Checker, ItemScope, Refs};
use crate::signature::FlowSignature;
use crate::step::{StepCheck, check_step, syntactic_dependencies};
use crate::tools::{UserTool, check_tool};

/// The parsed file (spans absolute).
#[salsa::tracked(returns(ref), no_eq)]
pub fn parse_file(db: &dyn Db, file: SourceFile) -> Parsed {
    reel_syntax::parse(file.text(db))
}

/// Line starts of the file, for spans in lines and columns.
#[salsa::tracked(returns(ref))]
pub fn line_index(db: &dyn Db, file: SourceFile) -> LineIndex {
    LineIndex::new(file.text(db))
}

/// A flow, by file and name.
#[salsa::interned(debug)]
pub struct FlowId<'db> {
    /// The file that declares it.
    #[returns(copy)]
    pub file: SourceFile,
    /// Its name.
    #[returns(ref)]
    pub name: String,
}

/// A step, by flow and name.
#[salsa::interned(debug)]
pub struct StepId<'db> {
    /// The flow it belongs to.
    #[returns(copy)]
    pub flow: FlowId<'db>,
    /// Its name.
    #[returns(ref)]
    pub name: String,
}

/// The flows of a file, in order (the first of each name).
#[salsa::tracked(returns(ref))]
pub fn file_flows<'db>(db: &'db dyn Db, file: SourceFile) -> Vec<FlowId<'db>> {
    let mut seen = BTreeSet::new();
    parse_file(db, file)
        .file
        .items
        .iter()
        .filter_map(|i| match i {
            Item::Flow(f) if seen.insert(f.name.name.clone()) => {
                Some(FlowId::new(db, file, f.name.name.clone()))
            }
            _ => None,
        })
        .collect()
}

/// A flow's members, each moved to start at 0, with where it really starts.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowLayout {
    /// The `flow` declaration's span.
    pub span: Span,
    /// The flow name's span.
    pub name_span: Span,
    /// The flow's doc comment.
    pub doc: Option<String>,
    /// `(offset, member with spans relative to offset)`, in source order.
    pub members: Vec<(u32, Member)>,
    /// Index of the first step of each name in `members`.
    pub step_index: BTreeMap<String, usize>,
    /// Index of the first output in `members`.
    pub output_index: Option<usize>,
}

/// The layout of a flow, `None` if the file no longer declares it.
#[salsa::tracked(returns(ref), no_eq)]
pub fn flow_layout<'db>(db: &'db dyn Db, flow: FlowId<'db>) -> Option<FlowLayout> {
    let parsed = parse_file(db, flow.file(db));
    let f = parsed.file.items.iter().find_map(|i| match i {
        Item::Flow(f) if f.name.name == *flow.name(db) => Some(f),
        _ => None,
    })?;
    let mut members = Vec::with_capacity(f.members.len());
    let mut step_index = BTreeMap::new();
    let mut output_index = None;
    for m in &f.members {
        let offset = m.span().start;
        let mut rel = m.clone();
        rebase_member(&mut rel, offset);
        match &rel {
            Member::Step(s) => {
                step_index
                    .entry(s.name.name.clone())
                    .or_insert(members.len());
            }
            Member::Output(_) if output_index.is_none() => output_index = Some(members.len()),
            _ => {}
        }
        members.push((offset, rel));
    }
    Some(FlowLayout {
        span: f.span,
        name_span: f.name.span,
        doc: f.doc.clone(),
        members,
        step_index,
        output_index,
    })
}

/// The flow's declarations checked against the absolute members (cheap: no expressions but defaults).
#[salsa::tracked(returns(ref))]
pub fn flow_declarations<'db>(db: &'db dyn Db, flow: FlowId<'db>) -> Declarations {
    let parsed = parse_file(db, flow.file(db));
    let members: &[Member] = parsed
        .file
        .items
        .iter()
        .find_map(|i| match i {
            Item::Flow(f) if f.name.name == *flow.name(db) => Some(f.members.as_slice()),
            _ => None,
        })
        .unwrap_or(&[]);
    check_declarations(members)
}

/// The names and types a flow's expressions resolve against: free of spans, so most edits keep it equal.
#[salsa::tracked(returns(ref))]
pub fn flow_signature<'db>(db: &'db dyn Db, flow: FlowId<'db>) -> FlowSignature {
    flow_declarations(db, flow).signature.clone()
}

/// The file's user tools that checked well enough to call, by name.
#[salsa::tracked(returns(ref))]
pub fn user_tools(db: &dyn Db, file: SourceFile) -> BTreeMap<String, UserTool> {
    let mut out = BTreeMap::new();
    let mut sink = Vec::new();
    for item in &parse_file(db, file).file.items {
        if let Item::Tool(t) = item
            && let Some(tool) = check_tool(t, &mut sink)
        {
            out.entry(t.name.name.clone()).or_insert(tool);
        }
    }
    out
}

/// Diagnostics of the file's tool declarations and of duplicate top-level names.
#[salsa::tracked(returns(ref))]
pub fn item_diagnostics(db: &dyn Db, file: SourceFile) -> Vec<Diagnostic> {
    let mut diags = Vec::new();
    let mut flows: Vec<(&str, Span)> = Vec::new();
    let mut tools: Vec<(&str, Span)> = Vec::new();
    let parsed = parse_file(db, file);
    for item in &parsed.file.items {
        let (name, list, what) = match item {
            Item::Flow(f) => (&f.name, &mut flows, "flow"),
            Item::Tool(t) => {
                check_tool(t, &mut diags);
                (&t.name, &mut tools, "tool")
            }
        };
        if let Some((_, first)) = list.iter().find(|(n, _)| *n == name.name) {
            diags.push(
                Diagnostic::error(
                    "name.duplicate",
                    name.span,
                    format!("the {what} `{}` is declared twice in this file", name.name),
                )
                .with_label("declared again here")
                .with_secondary(*first, "first declared here")
                .with_help(format!("rename one of the two {what}s")),
            );
        } else {
            list.push((&name.name, name.span));
        }
    }
    diags
}

/// A step's syntax with spans relative to its start (equal across edits elsewhere).
#[salsa::tracked(returns(ref))]
pub fn step_syntax<'db>(db: &'db dyn Db, step: StepId<'db>) -> Option<ast::Step> {
    let layout = flow_layout(db, step.flow(db)).as_ref()?;
    let idx = *layout.step_index.get(step.name(db))?;
    match &layout.members[idx].1 {
        Member::Step(s) => Some(s.clone()),
        _ => None,
    }
}

/// Where a step starts in the file.
pub fn step_offset(db: &dyn Db, step: StepId<'_>) -> u32 {
    flow_layout(db, step.flow(db))
        .as_ref()
        .and_then(|l| l.step_index.get(step.name(db)).map(|i| l.members[*i].0))
        .unwrap_or(0)
}

/// The steps a step depends on, from its syntax alone (relative spans).
#[salsa::tracked(returns(ref))]
pub fn step_dependencies<'db>(db: &'db dyn Db, step: StepId<'db>) -> Vec<(String, Span)> {
    let sig = flow_signature(db, step.flow(db));
    match step_syntax(db, step) {
        Some(s) => syntactic_dependencies(s, sig),
        None => Vec::new(),
    }
}

/// The steps of a flow, as ids.
pub fn flow_steps<'db>(db: &'db dyn Db, flow: FlowId<'db>) -> Vec<StepId<'db>> {
    flow_signature(db, flow)
        .steps
        .iter()
        .map(|s| StepId::new(db, flow, s.name.clone()))
        .collect()
}

/// The flow's step graph and its cycles. Built before any type is inferred.
#[salsa::tracked(returns(ref))]
pub fn flow_dag<'db>(db: &'db dyn Db, flow: FlowId<'db>) -> Dag {
    let mut edges = BTreeMap::new();
    for step in flow_steps(db, flow) {
        let deps = step_dependencies(db, step)
            .iter()
            .map(|(n, _)| n.clone())
            .collect();
        edges.insert(step.name(db).clone(), deps);
    }
    find_cycles(&edges)
}

/// The full check of one step (relative spans).
#[salsa::tracked(returns(ref))]
pub fn step_check<'db>(db: &'db dyn Db, step: StepId<'db>) -> Option<StepCheck> {
    let syntax = step_syntax(db, step).as_ref()?;
    let flow = step.flow(db);
    let file = flow.file(db);
    let sig = flow_signature(db, flow);
    let tools = |name: &str| -> Option<Contract> {
        user_tools(db, file).get(name).map(|t| t.contract.clone())
    };
    let types = |name: &str| step_type(db, StepId::new(db, flow, name.to_string())).clone();
    Some(check_step(syntax, sig, &tools, &types))
}

/// The type of a step's value; the error type for a step on a cycle (which is reported once, as the cycle).
#[salsa::tracked(returns(ref))]
pub fn step_type<'db>(db: &'db dyn Db, step: StepId<'db>) -> Type {
    if flow_dag(db, step.flow(db)).in_cycle.contains(step.name(db)) {
        return Type::Error;
    }
    step_check(db, step)
        .as_ref()
        .map_or(Type::Error, |c| c.ty.clone())
}

/// The checked output of a flow (relative spans).
#[derive(Clone, Debug, PartialEq)]
pub struct OutputCheck {
    /// The lowered expression.
    pub expr: reel_flowspec::Expr,
    /// What it refers to.
    pub refs: Refs,
    /// Problems, relative to the output's start.
    pub diagnostics: Vec<Diagnostic>,
}

/// The output member, relative to its start.
#[salsa::tracked(returns(ref))]
pub fn output_syntax<'db>(db: &'db dyn Db, flow: FlowId<'db>) -> Option<ast::Output> {
    let layout = flow_layout(db, flow).as_ref()?;
    match &layout.members[layout.output_index?].1 {
        Member::Output(o) => Some(o.clone()),
        _ => None,
    }
}

/// The checked output of a flow.
#[salsa::tracked(returns(ref))]
pub fn output_check<'db>(db: &'db dyn Db, flow: FlowId<'db>) -> Option<OutputCheck> {
    let out = output_syntax(db, flow).as_ref()?;
    let sig = flow_signature(db, flow);
    let types = |name: &str| step_type(db, StepId::new(db, flow, name.to_string())).clone();
    let mut cx = Checker::new(sig, &types, ItemScope::Outside);
    let expr = cx.expr(&out.expr);
    Some(OutputCheck {
        expr,
        refs: cx.refs,
        diagnostics: cx.diags,
    })
}

fn shifted(d: &Diagnostic, offset: u32) -> Diagnostic {
    let mut d = d.clone();
    let mv = |s: &mut Span| {
        s.start += offset;
        s.end += offset;
    };
    mv(&mut d.primary.span);
    d.secondary.iter_mut().for_each(|l| mv(&mut l.span));
    d.fixes.iter_mut().for_each(|f| mv(&mut f.span));
    d
}

/// Every diagnostic of one flow (absolute spans).
#[salsa::tracked(returns(ref))]
pub fn flow_diagnostics<'db>(db: &'db dyn Db, flow: FlowId<'db>) -> Vec<Diagnostic> {
    let Some(layout) = flow_layout(db, flow).as_ref() else {
        return Vec::new();
    };
    let decls = flow_declarations(db, flow);
    let mut diags = decls.diagnostics.clone();
    let dag = flow_dag(db, flow);
    let steps = flow_steps(db, flow);

    // Cycles: one diagnostic each, a label on every edge's reference.
    for cycle in &dag.cycles {
        let first = StepId::new(db, flow, cycle[0].clone());
        let first_name = step_syntax(db, first)
            .as_ref()
            .map(|s| s.name.span)
            .unwrap_or_default();
        let mut d = Diagnostic::error(
            "dag.cycle",
            Span::new(
                (first_name.start + step_offset(db, first)) as usize,
                (first_name.end + step_offset(db, first)) as usize,
            ),
            if cycle.len() == 1 {
                format!("the step `{}` depends on itself", cycle[0])
            } else {
                let mut path = cycle.clone();
                path.push(cycle[0].clone());
                format!("these steps depend on each other: {}", path.join(" → "))
            },
        )
        .with_label("this step is on the cycle");
        for (i, name) in cycle.iter().enumerate() {
            let next = &cycle[(i + 1) % cycle.len()];
            let id = StepId::new(db, flow, name.clone());
            let offset = step_offset(db, id);
            if let Some((_, span)) = step_dependencies(db, id).iter().find(|(n, _)| n == next) {
                d = d.with_secondary(
                    Span::new((span.start + offset) as usize, (span.end + offset) as usize),
                    format!("`{name}` needs `{next}` here"),
                );
            }
        }
        diags.push(d.with_help("a step can only use steps that finish before it: break the cycle by removing one of these references"));
    }

    // Per-step diagnostics and references.
    let mut used_steps: BTreeSet<String> = BTreeSet::new();
    let mut used_inputs: BTreeSet<String> = BTreeSet::new();
    let mut used_env: BTreeSet<String> = BTreeSet::new();
    let mut used_secrets: BTreeSet<String> = BTreeSet::new();
    let mut after_refs: Vec<String> = Vec::new();
    let mut note_refs = |r: &Refs| {
        used_steps.extend(r.steps.iter().map(|(n, _)| n.clone()));
        used_inputs.extend(r.inputs.iter().cloned());
        used_env.extend(r.env.iter().cloned());
        used_secrets.extend(r.secrets.iter().cloned());
    };
    for &step in &steps {
        let offset = step_offset(db, step);
        if let Some(check) = step_check(db, step) {
            diags.extend(check.diagnostics.iter().map(|d| shifted(d, offset)));
            note_refs(&check.refs);
            after_refs.extend(check.after.iter().map(|(n, _)| n.clone()));
        }
    }
    if let (Some(check), Some(idx)) = (output_check(db, flow), layout.output_index) {
        let offset = layout.members[idx].0;
        diags.extend(check.diagnostics.iter().map(|d| shifted(d, offset)));
        note_refs(&check.refs);
    }

    used_steps.extend(after_refs);

    // Warnings for what nothing uses. They are held back while the flow has errors, syntax
    // errors inside it included: a mistyped or broken reference is often the use they would
    // complain about.
    let syntax_errors = parse_file(db, flow.file(db)).diagnostics.iter().any(|d| {
        d.is_error()
            && d.primary.span.start >= layout.span.start
            && d.primary.span.start <= layout.span.end
    });
    let has_errors = syntax_errors || diags.iter().any(Diagnostic::is_error);
    for (offset, m) in layout.members.iter().filter(|_| !has_errors) {
        let at = |s: Span| Span::new((s.start + offset) as usize, (s.end + offset) as usize);
        match m {
            Member::Input(i) if !used_inputs.contains(&i.name.name) => diags.push(
                Diagnostic::warning(
                    "lint.unused-input",
                    at(i.name.span),
                    format!("the input `{}` is never read", i.name.name),
                )
                .with_label("unused input")
                .with_help(format!("read it as `input.{}`, or remove it", i.name.name)),
            ),
            Member::Secret(s) if !used_secrets.contains(&s.name.name) => diags.push(
                Diagnostic::warning(
                    "lint.unused-secret",
                    at(s.name.span),
                    format!("the secret `{}` is never passed to a tool", s.name.name),
                )
                .with_label("unused secret")
                .with_help("remove it, so runs do not need it set"),
            ),
            Member::Env(e) if !used_env.contains(&e.name.name) => diags.push(
                Diagnostic::warning(
                    "lint.unused-env",
                    at(e.name.span),
                    format!("the environment variable `{}` is never read", e.name.name),
                )
                .with_label("unused")
                .with_help(format!("read it as `env.{}`, or remove it", e.name.name)),
            ),
            Member::Step(s) if !used_steps.contains(&s.name.name) => {
                let id = StepId::new(db, flow, s.name.name.clone());
                let kind = step_check(db, id).as_ref().map(|c| c.lowered.kind);
                if matches!(
                    kind,
                    Some(reel_flowspec::ToolKind::Pure | reel_flowspec::ToolKind::Read)
                ) {
                    diags.push(
                        Diagnostic::warning("lint.unused-step", at(s.name.span), format!("nothing uses the value of `{}`", s.name.name))
                            .with_label("unused step")
                            .with_help("it has no effect, so it only costs time: use its value in the output or another step, or remove it"),
                    );
                }
            }
            _ => {}
        }
    }
    diags
}

/// Every diagnostic of a file, sorted by position.
#[salsa::tracked(returns(ref))]
pub fn file_diagnostics(db: &dyn Db, file: SourceFile) -> Vec<Diagnostic> {
    let mut diags = parse_file(db, file).diagnostics.clone();
    diags.extend(item_diagnostics(db, file).iter().cloned());
    for &flow in file_flows(db, file) {
        diags.extend(flow_diagnostics(db, flow).iter().cloned());
    }
    diags.sort_by(|a, b| {
        (a.primary.span.start, a.primary.span.end, a.code).cmp(&(
            b.primary.span.start,
            b.primary.span.end,
            b.code,
        ))
    });
    diags.dedup();
    diags
}
