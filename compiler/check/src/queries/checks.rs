//! The checking queries over a flow's members: declarations and the signature, user tools, the
//! step graph, each step's and the output's check, unused-name warnings, and every diagnostic of
//! a file, made absolute from the layout's offsets.

use std::collections::BTreeMap;

use reel_flowspec::Type;
use reel_syntax::ast::{self, Member};
use reel_syntax::outline::ItemKind;
use reel_syntax::visit::rebase_member;
use reel_syntax::{Code, Diagnostic, Span};
use rustc_hash::FxHashMap;

use crate::contracts::Contract;
use crate::dag::{Dag, find_cycles};
use crate::db::{Db, SourceFile};
use crate::declarations::{Declarations, MemberHead, PlacedDiagnostic, check_declarations};
use crate::infer::{Checker, ItemScope, Refs};
use crate::signature::FlowSignature;
use crate::step::{StepCheck, check_step, syntactic_dependencies};
use crate::tools::{UserTool, check_tool};

use super::layout::{Shared, StepMentions, file_layout};
use super::members::{
    FlowId, MemberAt, MemberGroup, StepId, file_flows, flow_groups, flow_layout, group_positions,
    step_place, step_syntax,
};
use super::shards::{
    SHARDS, SignatureShards, flow_output, shard_declarations, shard_of, signature_shard,
};

/// The flow's declarations, checked from its members' heads: an edit inside a step's body does
/// not re-run it.
#[salsa::tracked(returns(ref))]
pub fn flow_declarations<'db>(db: &'db dyn Db, flow: FlowId<'db>) -> Declarations {
    let groups = flow_groups(db, flow);
    let heads: Vec<&Shared<Vec<MemberHead>>> = groups.iter().map(|g| g.heads(db)).collect();
    let count = heads.iter().map(|h| h.len()).sum();
    let placed = heads.iter().enumerate().flat_map(|(g, heads)| {
        heads
            .iter()
            .enumerate()
            .map(move |(m, head)| ((g as u32, m as u32), head))
    });
    check_declarations(placed, count, |_| true)
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
    for t in &file_layout(db, file).tools {
        if let Some(tool) = check_tool(&t.tool, &mut sink) {
            out.entry(t.tool.name.name.clone()).or_insert(tool);
        }
    }
    out
}

/// Diagnostics of the file's tool declarations and of duplicate top-level names.
#[salsa::tracked(returns(ref))]
pub fn item_diagnostics(db: &dyn Db, file: SourceFile) -> Vec<Diagnostic> {
    let mut diags = Vec::new();
    let mut flows: FxHashMap<&str, Span> = FxHashMap::default();
    let mut tools: FxHashMap<&str, Span> = FxHashMap::default();
    let layout = file_layout(db, file);
    for &(kind, i) in &layout.order {
        let (name, span, seen) = match kind {
            ItemKind::Flow => {
                let f = &layout.flows[i];
                (f.name.as_str(), f.name_span, &mut flows)
            }
            ItemKind::Tool => {
                let t = &layout.tools[i];
                let mut local = Vec::new();
                check_tool(&t.tool, &mut local);
                diags.extend(local.iter().map(|d| d.shifted(t.offset)));
                (
                    t.tool.name.name.as_str(),
                    t.tool.name.span.shifted(t.offset),
                    &mut tools,
                )
            }
        };
        let what = kind.keyword();
        if let Some(first) = seen.get(name) {
            diags.push(
                Diagnostic::error(
                    Code::NameDuplicate,
                    span,
                    format!("the {what} `{name}` is declared twice in this file"),
                )
                .with_label("declared again here")
                .with_secondary(*first, "first declared here")
                .with_help(format!("rename one of the two {what}s")),
            );
        } else {
            seen.insert(name, span);
        }
    }
    diags
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

/// The flow's step graph and its cycles. Built before any type is inferred, from what each
/// group's steps mention: an edit that keeps every step's references does not re-run it. It
/// re-runs on most keys typed into a step, so it works on indices and borrows every name: no
/// name is copied unless it is on a cycle. Which mentions are the signature's steps it reads
/// from the signature's shards, so a name typed elsewhere does not build the whole signature.
#[salsa::tracked(returns(ref))]
pub fn flow_dag<'db>(db: &'db dyn Db, flow: FlowId<'db>) -> Dag {
    let groups = flow_groups(db, flow);
    // The nodes, in source order: the first step of each name, if the signature holds it (a
    // duplicate, a reserved name or a name an input took first is not a step to depend on).
    let shards = SignatureShards::of(db, flow);
    let steps = shards.steps();
    let mut index: FxHashMap<&str, usize> = FxHashMap::default();
    index.reserve(steps);
    let mut nodes: Vec<&StepMentions> = Vec::with_capacity(steps);
    for &group in groups {
        for m in group.mentions(db).iter() {
            if let std::collections::hash_map::Entry::Vacant(v) = index.entry(m.name.as_str())
                && shards.has_step(&m.name)
            {
                v.insert(nodes.len());
                nodes.push(m);
            }
        }
    }
    let names: Vec<&str> = nodes.iter().map(|m| m.name.as_str()).collect();
    let adj: Vec<Vec<usize>> = nodes
        .iter()
        .map(|m| {
            let after = m.after.iter().filter(|n| **n != m.name);
            m.names
                .iter()
                .chain(after)
                .filter_map(|n| index.get(n.as_str()).copied())
                .collect()
        })
        .collect();
    find_cycles(&names, &adj)
}

/// The full check of one step (relative spans). It reads its group's `steps`, which an edit of
/// any of the group's steps changes: the steps of the edited group are checked again (a few), an
/// edit that only moves them (a blank line, a comment, a longer step above) checks none. It reads
/// the flow's names through the shards of the names it writes (see [`names_signature`]), so a
/// name typed elsewhere checks it again only when the two share a shard.
#[salsa::tracked(returns(ref))]
pub fn step_check<'db>(db: &'db dyn Db, step: StepId<'db>) -> Option<StepCheck> {
    let syntax = step_syntax(db, step)?;
    let flow = step.flow(db);
    let file = flow.file(db);
    let tools = |name: &str| -> Option<Contract> {
        user_tools(db, file).get(name).map(|t| t.contract.clone())
    };
    let types = |name: &str| dep_type(db, flow, name);
    let exprs: Vec<&ast::Expr> = match &syntax.body {
        ast::StepBody::Expr(e) => vec![e],
        ast::StepBody::Call(c) => c.args.iter().map(|a| &a.value).collect(),
    };
    let check = check_step(syntax, &names_signature(db, flow, &exprs), &tools, &types);
    // An unknown name's help suggests among every name of the flow: only then is the whole
    // signature read (and the step checked again when any of the flow's names changes).
    if check.diagnostics.iter().any(|d| suggests_names(d.code)) {
        return Some(check_step(syntax, flow_signature(db, flow), &tools, &types));
    }
    Some(check)
}

/// Whether a diagnostic of this code suggests among the flow's declared names.
fn suggests_names(code: Code) -> bool {
    matches!(
        code,
        Code::NameUnknown
            | Code::NameUnknownInput
            | Code::NameUnknownEnv
            | Code::NameUnknownSecret
            | Code::NameUnknownStep
            | Code::NameUnknownTool
            | Code::NameUnknownFunction
    )
}

/// The part of the flow's signature that some expressions' names look up: the inputs, secrets,
/// env names, steps and broken members named like an identifier they write (a plain name, or a
/// name after `input.`, `env.` or `secret.`). A step (or the output) checked against it gets
/// the check the whole signature gives unless it reports an unknown name (see [`step_check`]).
/// Not a query of its own (one memo fewer per step for every edit to verify): it reads the
/// signature's shards of those names only (see [`signature_shard`]).
fn names_signature<'db>(db: &'db dyn Db, flow: FlowId<'db>, exprs: &[&ast::Expr]) -> FlowSignature {
    let mut out = FlowSignature::default();
    let mut names = Vec::new();
    for e in exprs {
        reel_syntax::visit::walk_expr(e, &mut |e| match &e.kind {
            ast::ExprKind::Name(id) => names.push(id.name.as_str()),
            // A name after `.` is looked up only in `input.`, `env.` and `secret.`; after a
            // step's name it is a field, checked against the step's type.
            ast::ExprKind::Member { base, name, .. }
                if matches!(&base.kind, ast::ExprKind::Name(ns)
                    if matches!(ns.name.as_str(), "input" | "env" | "secret")) =>
            {
                names.push(name.name.as_str())
            }
            _ => {}
        });
    }
    names.sort_unstable();
    names.dedup();
    for name in names {
        let sig = signature_shard(db, flow, shard_of(name));
        if let Some(ty) = sig.input(name) {
            out.inputs.push((name.to_string(), ty.clone()));
        }
        if sig.secrets.iter().any(|s| s == name) {
            out.secrets.push(name.to_string());
        }
        if sig.env.iter().any(|e| e == name) {
            out.env.push(name.to_string());
        }
        if let Some(head) = sig.step(name) {
            out.push_step(head.clone());
        }
        if sig.maybe_declared(name) {
            out.broken_names.push(name.to_string());
        }
    }
    out
}

/// The type of step `name` as the expressions that read it see it. Read from its check rather
/// than from `step_type`, and the cycles from the flow's graph rather than from `step_in_cycle`:
/// fewer memos per step for every edit to verify. The graph is re-run by most keys but equal
/// unless a cycle came or went, and then every check that reads another step may change anyway.
fn dep_type<'db>(db: &'db dyn Db, flow: FlowId<'db>, name: &str) -> Type {
    if flow_dag(db, flow).in_cycle.contains(name) {
        return Type::Error;
    }
    // By id and per-step queries, not the flow's tables: a step added elsewhere changes those,
    // and must not check again every step that reads another.
    let id = StepId::new(db, flow, name);
    step_check(db, id)
        .as_ref()
        .map_or(Type::Error, |c| c.ty.clone())
}

/// Whether `step` is on a cycle of its flow's graph: re-run when the graph changes, but equal
/// unless this step joined or left a cycle.
#[salsa::tracked(returns(copy))]
pub fn step_in_cycle<'db>(db: &'db dyn Db, step: StepId<'db>) -> bool {
    flow_dag(db, step.flow(db)).in_cycle.contains(step.name(db))
}

/// The type of a step's value; the error type for a step on a cycle (which is reported once, as the cycle).
#[salsa::tracked(returns(ref))]
pub fn step_type<'db>(db: &'db dyn Db, step: StepId<'db>) -> Type {
    if step_in_cycle(db, step) {
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
    let at = flow_output(db, flow).first?;
    match at.member(db)? {
        Member::Output(o) => {
            let mut m = Member::Output(o.clone());
            rebase_member(&mut m, o.span.start);
            match m {
                Member::Output(o) => Some(o),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The checked output of a flow.
#[salsa::tracked(returns(ref))]
pub fn output_check<'db>(db: &'db dyn Db, flow: FlowId<'db>) -> Option<OutputCheck> {
    let out = output_syntax(db, flow).as_ref()?;
    let types = |name: &str| dep_type(db, flow, name);
    let check = |sig: &FlowSignature| {
        let mut cx = Checker::new(sig, &types, ItemScope::Outside);
        let expr = cx.expr(&out.expr);
        OutputCheck {
            expr,
            refs: cx.refs,
            diagnostics: cx.diags,
        }
    };
    // As a step's check: the shards of the names it writes, the whole signature only for the
    // suggestions of an unknown name.
    let first = check(&names_signature(db, flow, &[&out.expr]));
    if first.diagnostics.iter().any(|d| suggests_names(d.code)) {
        return Some(check(flow_signature(db, flow)));
    }
    Some(first)
}

/// Every diagnostic of one flow (absolute spans).
#[salsa::tracked(returns(ref))]
pub fn flow_diagnostics<'db>(db: &'db dyn Db, flow: FlowId<'db>) -> Vec<Diagnostic> {
    let Some(layout) = flow_layout(db, flow) else {
        return Vec::new();
    };
    let start_of = |(g, m): crate::declarations::Place| -> u32 {
        layout.groups.get(g as usize).map_or(0, |(offset, group)| {
            offset
                + group
                    .members()
                    .get(m as usize)
                    .map_or(0, |m| m.span().start)
        })
    };
    // The layout's groups and the flow's `MemberGroup`s are built one from the other, in order.
    let groups = flow_groups(db, flow);
    // Where a member starts in the file, for the few members a declaration problem, the output
    // or a cycle points at.
    let start_at = |at: MemberAt<'db>| -> u32 {
        group_positions(db, flow)
            .of(at.group)
            .map_or(0, |g| start_of((g, at.index)))
    };
    // The declarations' problems, shard by shard (see `shards`), then the outputs'.
    let mut diags: Vec<Diagnostic> = Vec::new();
    for shard in 0..SHARDS {
        let decls = shard_declarations(db, flow, shard);
        diags.extend(decls.diagnostics.iter().map(|d| d.placed(start_at)));
    }
    let output = flow_output(db, flow);
    diags.extend(output.diagnostics.iter().map(|d| d.placed(start_at)));
    let dag = flow_dag(db, flow);
    let step_offset =
        |_: &dyn Db, id: StepId<'db>| -> u32 { step_place(db, id).map_or(0, start_at) };

    // Cycles: one diagnostic each, a label on every edge's reference.
    for cycle in &dag.cycles {
        let first = StepId::new(db, flow, cycle[0].clone());
        let first_name = step_syntax(db, first)
            .map(|s| s.name.span)
            .unwrap_or_default();
        let mut d = Diagnostic::error(
            Code::DagCycle,
            first_name.shifted(step_offset(db, first)),
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
                    span.shifted(offset),
                    format!("`{name}` needs `{next}` here"),
                );
            }
        }
        diags.push(d.with_help("a step can only use steps that finish before it: break the cycle by removing one of these references"));
    }

    // Per-step diagnostics, a group at a time.
    for ((offset, _), &group) in layout.groups.iter().zip(groups) {
        let report = group_report(db, group);
        diags.extend(report.diagnostics.iter().map(|d| d.shifted(*offset)));
    }
    let output_at = output.first.map(start_at);
    if let (Some(check), Some(at)) = (output_check(db, flow), output_at) {
        diags.extend(check.diagnostics.iter().map(|d| d.shifted(at)));
    }

    // Warnings for what nothing uses. They are held back while the flow has errors, syntax
    // errors inside it included: a mistyped or broken reference is often the use they would
    // complain about.
    let syntax_errors = file_layout(db, flow.file(db)).diagnostics.iter().any(|d| {
        d.is_error()
            && d.primary.span.start >= layout.span.start
            && d.primary.span.start <= layout.span.end
    });
    if !syntax_errors && !diags.iter().any(Diagnostic::is_error) {
        diags.extend(flow_unused(db, flow).iter().map(|d| d.placed(start_of)));
    }
    diags
}

/// What the steps of one group report: their diagnostics (relative to the group) and the names
/// they use. Re-run when the group or one of its steps' checks changed, and equal unless what
/// they report changed, so the flow-wide usage is not recomputed for an edit that keeps it.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct GroupReport {
    /// Diagnostics of its steps, relative to the group's start.
    pub diagnostics: Vec<Diagnostic>,
    /// The steps, inputs, environment variables and secrets its steps use (`after` included).
    pub uses: Uses,
}

/// Names used, each once, sorted.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Uses {
    /// Steps read or waited for.
    pub steps: Vec<String>,
    /// Inputs read.
    pub inputs: Vec<String>,
    /// Environment variables read.
    pub env: Vec<String>,
    /// Secrets passed.
    pub secrets: Vec<String>,
}

impl Uses {
    fn add(&mut self, refs: &Refs) {
        self.steps.extend(refs.steps.iter().map(|(n, _)| n.clone()));
        self.inputs.extend(refs.inputs.iter().cloned());
        self.env.extend(refs.env.iter().cloned());
        self.secrets.extend(refs.secrets.iter().cloned());
    }

    fn tidy(&mut self) {
        for v in [
            &mut self.steps,
            &mut self.inputs,
            &mut self.env,
            &mut self.secrets,
        ] {
            v.sort_unstable();
            v.dedup();
        }
    }
}

/// The report of one group's steps: the steps the signature holds (the first of each name,
/// reserved names and names an input or secret took before left out), checked. It reads each
/// step's place and its name's shard of the signature rather than the flow's tables, so a name
/// typed in another group does not re-run it.
#[salsa::tracked(returns(ref))]
pub fn group_report<'db>(db: &'db dyn Db, group: MemberGroup<'db>) -> GroupReport {
    let flow = group.flow(db);
    let mut out = GroupReport::default();
    for (index, m) in group.source(db).members().iter().enumerate() {
        let Member::Step(s) = m else { continue };
        let name = s.name.name.as_str();
        let id = StepId::new(db, flow, name);
        let here = MemberAt {
            group,
            index: index as u32,
        };
        if step_place(db, id) != Some(here) {
            continue;
        }
        if signature_shard(db, flow, shard_of(name))
            .step(name)
            .is_none()
        {
            continue;
        }
        if let Some(check) = step_check(db, id) {
            let at = s.span.start;
            out.diagnostics
                .extend(check.diagnostics.iter().map(|d| d.shifted(at)));
            out.uses.add(&check.refs);
            out.uses
                .steps
                .extend(check.after.iter().map(|(n, _)| n.clone()));
        }
    }
    out.uses.tidy();
    out
}

/// Warnings for the inputs, secrets, env names and effect-free steps nothing uses, placed by
/// member. Reads the groups' reports and heads, so an edit that changes no use does not re-run it.
#[salsa::tracked(returns(ref))]
pub fn flow_unused<'db>(db: &'db dyn Db, flow: FlowId<'db>) -> Vec<PlacedDiagnostic> {
    let groups = flow_groups(db, flow);
    let mut uses = Uses::default();
    for &group in groups {
        let u = &group_report(db, group).uses;
        uses.steps.extend(u.steps.iter().cloned());
        uses.inputs.extend(u.inputs.iter().cloned());
        uses.env.extend(u.env.iter().cloned());
        uses.secrets.extend(u.secrets.iter().cloned());
    }
    if let Some(check) = output_check(db, flow) {
        uses.add(&check.refs);
    }
    uses.tidy();
    let used =
        |list: &[String], name: &str| list.binary_search_by(|n| n.as_str().cmp(name)).is_ok();
    let mut out = Vec::new();
    for (g, &group) in groups.iter().enumerate() {
        for (m, head) in group.heads(db).iter().enumerate() {
            let place = (g as u32, m as u32);
            let warning = match head {
                MemberHead::Input(i) if !used(&uses.inputs, &i.name.name) => Diagnostic::warning(
                    Code::LintUnusedInput,
                    i.name.span,
                    format!("the input `{}` is never read", i.name.name),
                )
                .with_label("unused input")
                .with_help(format!("read it as `input.{}`, or remove it", i.name.name)),
                MemberHead::Secret(name) if !used(&uses.secrets, &name.name) => {
                    Diagnostic::warning(
                        Code::LintUnusedSecret,
                        name.span,
                        format!("the secret `{}` is never passed to a tool", name.name),
                    )
                    .with_label("unused secret")
                    .with_help("remove it, so runs do not need it set")
                }
                MemberHead::Env(name) if !used(&uses.env, &name.name) => Diagnostic::warning(
                    Code::LintUnusedEnv,
                    name.span,
                    format!("the environment variable `{}` is never read", name.name),
                )
                .with_label("unused")
                .with_help(format!("read it as `env.{}`, or remove it", name.name)),
                MemberHead::Step { name, .. } if !used(&uses.steps, &name.name) => {
                    let id = StepId::new(db, flow, name.name.as_str());
                    let kind = step_check(db, id).as_ref().map(|c| c.lowered.kind);
                    if !matches!(
                        kind,
                        Some(reel_flowspec::ToolKind::Pure | reel_flowspec::ToolKind::Read)
                    ) {
                        continue;
                    }
                    Diagnostic::warning(Code::LintUnusedStep, name.span, format!("nothing uses the value of `{}`", name.name))
                        .with_label("unused step")
                        .with_help("it has no effect, so it only costs time: use its value in the output or another step, or remove it")
                }
                _ => continue,
            };
            out.push(PlacedDiagnostic {
                diagnostic: warning,
                places: vec![place],
            });
        }
    }
    out
}

/// Every diagnostic of a file, sorted by position.
#[salsa::tracked(returns(ref))]
pub fn file_diagnostics(db: &dyn Db, file: SourceFile) -> Vec<Diagnostic> {
    let mut diags = file_layout(db, file).diagnostics.clone();
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
