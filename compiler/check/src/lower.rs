//! Assembles a flow's FlowSpec from the checked declarations, steps and output, and seals it.

use std::collections::BTreeMap;

use reel_flowspec::{
    FORMAT_VERSION, FlowSpec, InputSpec, NameSpec, OutputSpec, SourceSpan, StepSpec, ToolSpec,
};
use reel_syntax::Span;
use reel_syntax::ast::Member;

use crate::db::{Db, SourceFile};
use crate::queries::{
    FlowId, SignatureShards, StepId, file_diagnostics, file_layout, flow_declarations, flow_layout,
    line_index, output_check, step_check, user_tools,
};

/// `span` of `file` in lines and columns.
pub fn source_span(db: &dyn Db, file: SourceFile, span: Span) -> SourceSpan {
    let text = file.text(db);
    let index = line_index(db, file);
    let a = index.line_col(text, span.start as usize);
    let b = index.line_col(text, span.end as usize);
    SourceSpan {
        file: file.path(db).clone(),
        line: a.line,
        column: a.column,
        end_line: b.line,
        end_column: b.column,
    }
}

fn moved(span: Span, offset: u32) -> Span {
    Span::new((span.start + offset) as usize, (span.end + offset) as usize)
}

/// The sealed FlowSpec of `flow`, or `None` when its file has errors: kept, for the language
/// server, which asks for it again as the file changes.
#[salsa::tracked(returns(ref))]
pub fn flow_spec<'db>(db: &'db dyn Db, flow: FlowId<'db>) -> Option<FlowSpec> {
    lower_flow(db, flow)
}

/// [`flow_spec`] made anew and not kept: what a command that builds a flow once uses, since a
/// kept spec is only handed out by reference, and copying a big flow's spec out of the database
/// cost 5–9 % of `reel build`.
pub(crate) fn lower_flow(db: &dyn Db, flow: FlowId<'_>) -> Option<FlowSpec> {
    let file = flow.file(db);
    if file_diagnostics(db, file).iter().any(|d| d.is_error()) {
        return None;
    }
    let layout = flow_layout(db, flow)?;
    let decls = flow_declarations(db, flow);
    let tools = user_tools(db, file);
    let mut inputs = Vec::new();
    let mut secrets = Vec::new();
    let mut env = Vec::new();
    // Most members are steps: growing the list a step at a time moved every step made so far.
    let mut steps = Vec::with_capacity(layout.groups.iter().map(|(_, g)| g.members().len()).sum());
    let mut used_tools = BTreeMap::new();
    let mut output_span = None;
    let shards = SignatureShards::of(db, flow);
    for (offset, group) in &layout.groups {
        // One entry per step member, in order: the names its expressions and `after` mention,
        // which the check's step graph has already read.
        let mut mentions = group.summary().mentions.0.iter();
        for member in group.members() {
            match member {
                Member::Input(i) => {
                    let checked = decls.inputs.iter().find(|c| c.name == i.name.name)?;
                    inputs.push(InputSpec {
                        name: i.name.name.clone(),
                        ty: checked.ty.clone(),
                        default: checked.default.clone(),
                        doc: i.doc.clone(),
                        span: source_span(db, file, moved(i.span, *offset)),
                    });
                }
                Member::Secret(s) => secrets.push(NameSpec {
                    name: s.name.name.clone(),
                    doc: s.doc.clone(),
                    span: source_span(db, file, moved(s.span, *offset)),
                }),
                Member::Env(e) => env.push(NameSpec {
                    name: e.name.name.clone(),
                    doc: e.doc.clone(),
                    span: source_span(db, file, moved(e.span, *offset)),
                }),
                Member::Step(s) => {
                    // The first step of a name is the one checked (a duplicate is an error anyway).
                    let id = StepId::new(db, flow, s.name.name.as_str());
                    let check = step_check(db, id).as_ref()?;
                    if let Some(tool) = &check.lowered.tool
                        && let Some(user) = tools.get(tool)
                    {
                        used_tools.insert(tool.clone(), user.clone());
                    }
                    let mentioned = mentions.next()?;
                    // The steps it depends on, as the step graph has them: mentioned steps, and
                    // those in `after` but itself.
                    let after = mentioned.after.iter().filter(|n| **n != mentioned.name);
                    let mut deps: Vec<String> = (mentioned.names.iter().chain(after))
                        .filter(|n| shards.has_step(n))
                        .cloned()
                        .collect();
                    deps.sort();
                    deps.dedup();
                    steps.push(StepSpec {
                        deps,
                        doc: s.doc.clone(),
                        span: source_span(db, file, moved(s.span, *offset)),
                        name_span: source_span(db, file, moved(s.name.span, *offset)),
                        ..check.step_spec(s.name.name.clone())
                    });
                }
                Member::Output(o) => {
                    if output_span.is_none() {
                        output_span = Some(moved(o.span, *offset));
                    }
                }
                Member::Error(_) => {}
            }
        }
    }
    let output = match (output_check(db, flow), output_span) {
        (Some(check), Some(span)) => Some(OutputSpec {
            expr: check.expr.clone(),
            ty: check.expr.ty.clone(),
            span: source_span(db, file, span),
        }),
        _ => None,
    };
    let file_tools = &file_layout(db, file).tools;
    let tools = used_tools
        .into_iter()
        .map(|(name, user)| {
            let span = file_tools
                .iter()
                .find(|t| t.tool.name.name == name)
                .map(|t| moved(t.tool.span, t.offset))
                .unwrap_or_default();
            let spec = ToolSpec {
                name: name.clone(),
                kind: user.contract.kind,
                exec: user.exec.clone(),
                dir: file.tool_dir(db).clone(),
                input: user.input.clone(),
                output: user.output.clone(),
                repeat: user.repeat,
                doc: user.doc.clone(),
                span: source_span(db, file, span),
            };
            (name, spec)
        })
        .collect();
    let mut spec = FlowSpec {
        format: "reel.flowspec".to_string(),
        version: FORMAT_VERSION,
        name: flow.name(db).clone(),
        doc: layout.doc.clone(),
        span: source_span(db, file, layout.span),
        inputs,
        secrets,
        env,
        tools,
        steps,
        output,
        digest: String::new(),
    };
    spec.seal();
    Some(spec)
}
