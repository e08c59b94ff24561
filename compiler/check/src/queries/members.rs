//! The interned ids of flows and steps, and a flow's members as the groups they were parsed in:
//! the tracked structs that carry each group across revisions, and the table that finds a step's
//! group and index by its id.

use std::collections::BTreeSet;

use reel_syntax::ast::{self, Member};
use rustc_hash::FxHashMap;

use crate::db::{Db, SourceFile};
use crate::declarations::MemberHead;

use super::layout::{FlowLayout, GroupMembers, Shared, StepMentions, file_layout};
use super::shards::{member_shard, shard_of};

/// A flow, by file and name.
#[salsa::interned(debug, revisions = usize::MAX)]
pub struct FlowId<'db> {
    /// The file that declares it.
    #[returns(copy)]
    pub file: SourceFile,
    /// Its name.
    #[returns(ref)]
    pub name: String,
}

/// A step, by flow and name.
#[salsa::interned(debug, revisions = usize::MAX)]
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
    file_layout(db, file)
        .flows
        .iter()
        .filter(|f| seen.insert(f.name.as_str()))
        .map(|f| FlowId::new(db, file, f.name.as_str()))
        .collect()
}

/// The layout of a flow (the first of its name), `None` if the file no longer declares it.
pub fn flow_layout<'db>(db: &'db dyn Db, flow: FlowId<'db>) -> Option<&'db FlowLayout> {
    let name = flow.name(db);
    file_layout(db, flow.file(db))
        .flows
        .iter()
        .find(|f| f.name == *name)
}

/// One group of a flow's members (parsed together, checked together), known across revisions by
/// its flow and the name of its first step. Its fields are what an edit changes: `source` when
/// anything in the group changed, `heads` only when a member was added, removed or renamed,
/// `mentions` only when a step's references changed, so each query reads only what it needs.
#[salsa::tracked(debug)]
pub struct MemberGroup<'db> {
    /// The flow.
    #[returns(copy)]
    pub flow: FlowId<'db>,
    /// The name of its first step, if it has one.
    #[returns(ref)]
    pub key: Option<String>,
    /// Its members.
    #[tracked]
    #[returns(ref)]
    pub source: GroupMembers,
    /// What its members declare.
    #[tracked]
    #[returns(ref)]
    pub heads: Shared<Vec<MemberHead>>,
    /// What its steps refer to.
    #[tracked]
    #[returns(ref)]
    pub mentions: Shared<Vec<StepMentions>>,
    /// Its steps, each relative to its own start: what a step's check reads, so that an edit
    /// that moves a step without changing it does not check it again.
    #[tracked]
    #[returns(ref)]
    pub steps: Shared<Vec<Option<ast::Step>>>,
}

/// The groups of a flow's members, in source order. Runs again on every edit (it reads the
/// layout); equal, and so backdated, unless groups were added or removed.
#[salsa::tracked(returns(ref))]
pub fn flow_groups<'db>(db: &'db dyn Db, flow: FlowId<'db>) -> Vec<MemberGroup<'db>> {
    let Some(layout) = flow_layout(db, flow) else {
        return Vec::new();
    };
    layout
        .groups
        .iter()
        .map(|(_, members)| {
            let summary = members.summary();
            let key = summary
                .heads
                .iter()
                .find_map(|h| h.step_name().map(str::to_string));
            MemberGroup::new(
                db,
                flow,
                key,
                members.clone(),
                summary.heads.clone(),
                summary.mentions.clone(),
                summary.steps.clone(),
            )
        })
        .collect()
}

/// Each group's position among its flow's groups, by group: what finds a group's offset in the
/// layout without a scan of the groups (which, for each of 1,000 groups, is a million steps).
/// Re-run when the groups are, equal unless groups were added, removed or reordered.
#[salsa::tracked(returns(ref))]
pub fn group_positions<'db>(db: &'db dyn Db, flow: FlowId<'db>) -> GroupPositions<'db> {
    GroupPositions(
        flow_groups(db, flow)
            .iter()
            .enumerate()
            .map(|(i, &g)| (g, i as u32))
            .collect(),
    )
}

/// See [`group_positions`].
#[derive(Clone, Debug, PartialEq, Eq, Default, salsa::SalsaValue)]
pub struct GroupPositions<'db>(pub FxHashMap<MemberGroup<'db>, u32>);

impl<'db> GroupPositions<'db> {
    /// The position of `group` among its flow's groups.
    pub fn of(&self, group: MemberGroup<'db>) -> Option<u32> {
        self.0.get(&group).copied()
    }
}

/// Where a member is: its group and its index there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, salsa::SalsaValue)]
pub struct MemberAt<'db> {
    /// The group.
    pub group: MemberGroup<'db>,
    /// The index among the group's members.
    pub index: u32,
}

impl<'db> MemberAt<'db> {
    /// The member's syntax (spans relative to its group); reading it depends on the group's source.
    pub fn member(self, db: &'db dyn Db) -> Option<&'db Member> {
        self.group.source(db).members().get(self.index as usize)
    }
}

/// The named members of a flow: the first step of each name and the first output.
#[derive(Clone, Debug, PartialEq, Eq, Default, salsa::SalsaValue)]
pub struct FlowMembers<'db> {
    /// Steps by id.
    pub steps: FxHashMap<StepId<'db>, MemberAt<'db>>,
    /// The ids of `steps` in source order, so that a walk over the members finds each step's id
    /// by position instead of interning its name again.
    pub order: Vec<StepId<'db>>,
    /// The ids of `steps` by name: a check looks up the steps it reads here, one dependency on
    /// this table for all of them rather than one on the interner per name.
    pub ids: FxHashMap<String, StepId<'db>>,
    /// The output.
    pub output: Option<MemberAt<'db>>,
}

/// The flow's member table, from the groups' heads alone: an edit inside a step's body leaves
/// it alone, so it is not even re-run.
#[salsa::tracked(returns(ref))]
pub fn flow_members<'db>(db: &'db dyn Db, flow: FlowId<'db>) -> FlowMembers<'db> {
    let mut out = FlowMembers::default();
    for &group in flow_groups(db, flow) {
        for (index, head) in group.heads(db).iter().enumerate() {
            let at = MemberAt {
                group,
                index: index as u32,
            };
            match head {
                MemberHead::Step { name, .. } => {
                    let id = StepId::new(db, flow, name.name.as_str());
                    if let std::collections::hash_map::Entry::Vacant(v) = out.steps.entry(id) {
                        v.insert(at);
                        out.order.push(id);
                        out.ids.insert(name.name.clone(), id);
                    }
                }
                MemberHead::Output(_) if out.output.is_none() => out.output = Some(at),
                _ => {}
            }
        }
    }
    out
}

/// Where a flow's step `step` (the first of its name) is, read from its name's shard (see
/// [`member_shard`]): what reads a step's syntax depends on the steps of one shard, not on the
/// whole member table. Not a query of its own: a memo per step is 10,000 more memos to verify
/// after every key in a 10,000-step flow, while a shard changes only when one of its few dozen
/// steps is added, removed, renamed or moved.
pub fn step_place<'db>(db: &'db dyn Db, step: StepId<'db>) -> Option<MemberAt<'db>> {
    // A shard holds a few dozen steps of a 10,000-step flow: a scan is enough.
    member_shard(db, step.flow(db), shard_of(step.name(db)))
        .iter()
        .find(|(id, _)| *id == step)
        .map(|&(_, at)| at)
}

/// The id of the flow's step called `name`, if the flow has one (the first of the name), read
/// from its name's shard (see [`member_shard`]) rather than from the whole member table: what
/// asks depends on the steps of one shard.
pub fn step_named<'db>(db: &'db dyn Db, flow: FlowId<'db>, name: &str) -> Option<StepId<'db>> {
    member_shard(db, flow, shard_of(name))
        .iter()
        .find(|(id, _)| id.name(db) == name)
        .map(|&(id, _)| id)
}

/// The syntax of a flow's step `step` (the first of its name), spans relative to its own start.
/// Not a query: the group's `steps` field already is what an edit elsewhere leaves equal.
pub fn step_syntax<'db>(db: &'db dyn Db, step: StepId<'db>) -> Option<&'db ast::Step> {
    let at = step_place(db, step)?;
    at.group.steps(db).get(at.index as usize)?.as_ref()
}
