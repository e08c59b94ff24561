//! The file as segments whose editor results are kept across revisions: a request about the
//! whole file (semantic tokens, document symbols, folding ranges) concatenates the kept results
//! of its segments, and an edit recomputes only the segments it touched.
//!
//! A **segment** runs from one place where the file can be lexed on its own (the start of a
//! group of a flow's members as the checker parsed them, of a tool, or of the file) to the next
//! one. The segment that starts at a group of a split flow is kept in salsa, keyed by the group
//! ([`MemberGroup`]): its text ([`group_text`], equal across edits elsewhere, so what reads it is
//! not run again), its tokens ([`group_tokens`]) and its symbols ([`group_symbols`]), with
//! positions relative to the segment's start, shifted into place when the answer is assembled.
//! The other segments (the head of the file, tools, flows parsed whole) are small or rare and
//! are computed on each request.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use reel_compiler::queries::{
    FlowLayout, GroupMembers, MemberGroup, file_layout, flow_groups, flow_layout, group_positions,
    step_named,
};
use reel_compiler::{Db, SourceFile, file_flows};
use reel_syntax::ast::{ExprKind, Member};
use tower_lsp_server::lsp_types::{DocumentSymbol, Position, Range};

use super::outline::member_symbol;
use super::tokens::{RelToken, relative_tokens};
use crate::position::Lines;

/// One segment of the file: its byte range, and the group whose kept results cover it.
#[derive(Clone, Copy, Debug)]
pub struct Segment<'db> {
    /// Where it starts.
    pub start: usize,
    /// Where the next one starts (or the file ends).
    pub end: usize,
    /// The group of a split flow that starts it, whose results salsa keeps.
    pub group: Option<MemberGroup<'db>>,
}

/// The places where a segment starts (the file's start, every group's and tool's start),
/// sorted, then the file's end.
#[salsa::tracked(returns(ref))]
pub fn segment_bounds(db: &dyn Db, file: SourceFile) -> Vec<u32> {
    let layout = file_layout(db, file);
    let mut bounds: Vec<u32> = std::iter::once(0)
        .chain(
            layout
                .flows
                .iter()
                .flat_map(|f| f.groups.iter().map(|(offset, _)| *offset)),
        )
        .chain(layout.tools.iter().map(|t| t.offset))
        .collect();
    bounds.sort_unstable();
    bounds.dedup();
    let len = file.text(db).len() as u32;
    if bounds.last() != Some(&len) {
        bounds.push(len);
    }
    bounds
}

/// The file's segments in order, each with its kept group if it has one.
pub fn segments<'db>(db: &'db dyn Db, file: SourceFile) -> Vec<Segment<'db>> {
    let mut kept: HashMap<u32, MemberGroup<'db>> = HashMap::new();
    for &flow in file_flows(db, file) {
        let Some(layout) = flow_layout(db, flow) else {
            continue;
        };
        for ((offset, members), group) in layout.groups.iter().zip(flow_groups(db, flow)) {
            if matches!(members, GroupMembers::Split(_)) {
                kept.insert(*offset, *group);
            }
        }
    }
    segment_bounds(db, file)
        .windows(2)
        .map(|w| Segment {
            start: w[0] as usize,
            end: w[1] as usize,
            group: kept.get(&w[0]).copied(),
        })
        .collect()
}

/// The text of the segment `group` starts: equal across edits that do not touch it, so the
/// queries reading it are not run again.
#[salsa::tracked(returns(ref))]
pub fn group_text<'db>(db: &'db dyn Db, group: MemberGroup<'db>) -> String {
    let flow = group.flow(db);
    let file = flow.file(db);
    let Some(index) = group_positions(db, flow).of(group) else {
        return String::new();
    };
    let Some(&(offset, _)) = flow_layout(db, flow).and_then(|l| l.groups.get(index as usize))
    else {
        return String::new();
    };
    let bounds = segment_bounds(db, file);
    let text: &str = file.text(db);
    let end = bounds
        .get(bounds.partition_point(|b| *b <= offset))
        .map_or(text.len(), |b| *b as usize);
    text.get(offset as usize..end)
        .unwrap_or_default()
        .to_string()
}

/// The names written as plain names in `group`'s expressions, sorted, each once: those that may
/// refer to steps.
#[salsa::tracked(returns(ref))]
pub fn group_names<'db>(db: &'db dyn Db, group: MemberGroup<'db>) -> Vec<String> {
    let mut names = Vec::new();
    for m in group.source(db).members() {
        for e in reel_syntax::visit::member_exprs(m) {
            reel_syntax::visit::walk_expr(e, &mut |e| {
                if let ExprKind::Name(id) = &e.kind {
                    names.push(id.name.clone());
                }
            });
        }
    }
    names.sort_unstable();
    names.dedup();
    names
}

/// Those of [`group_names`] that name steps of the flow: re-run when the flow's steps change
/// (a step typed elsewhere), but equal, so the group's tokens are not recomputed, unless a name
/// the group writes became or stopped being a step.
#[salsa::tracked(returns(ref))]
pub fn group_steps<'db>(db: &'db dyn Db, group: MemberGroup<'db>) -> Vec<String> {
    let flow = group.flow(db);
    group_names(db, group)
        .iter()
        .filter(|n| step_named(db, flow, n).is_some())
        .cloned()
        .collect()
}

/// The semantic tokens of the segment `group` starts, relative to the segment's start (shared:
/// a kept answer holds them, see [`super::tokens::TokenAnswer`]).
#[salsa::tracked(returns(ref))]
pub fn group_tokens<'db>(db: &'db dyn Db, group: MemberGroup<'db>) -> Arc<[RelToken]> {
    let steps: HashSet<&str> = group_steps(db, group).iter().map(String::as_str).collect();
    relative_tokens(
        group_text(db, group),
        &[(group.source(db).members(), steps)],
        &[],
    )
    .into()
}

/// The document symbols of `group`'s members, relative to the segment's start.
#[salsa::tracked(returns(ref))]
pub fn group_symbols<'db>(db: &'db dyn Db, group: MemberGroup<'db>) -> Vec<DocumentSymbol> {
    let text = group_text(db, group);
    let lines = Lines::new(text);
    group
        .source(db)
        .members()
        .iter()
        .filter_map(|m| member_symbol(&lines, m))
        .collect()
}

/// The step names of a flow laid out in the file, from its members (for the segments whose
/// results are not kept).
pub fn step_names(flow: &FlowLayout) -> HashSet<&str> {
    flow.members()
        .filter_map(|(_, m)| match m {
            Member::Step(s) => Some(s.name.name.as_str()),
            _ => None,
        })
        .collect()
}

/// Moves `pos`, relative to a segment that starts at `base`, into place in the file.
pub fn shift(pos: Position, base: Position) -> Position {
    if pos.line == 0 {
        Position::new(base.line, base.character + pos.character)
    } else {
        Position::new(base.line + pos.line, pos.character)
    }
}

/// Moves a symbol (and its children), relative to a segment that starts at `base`, into place.
pub fn shift_symbol(mut s: DocumentSymbol, base: Position) -> DocumentSymbol {
    let range = |r: Range| Range::new(shift(r.start, base), shift(r.end, base));
    s.range = range(s.range);
    s.selection_range = range(s.selection_range);
    s.children = s
        .children
        .map(|c| c.into_iter().map(|c| shift_symbol(c, base)).collect());
    s
}
