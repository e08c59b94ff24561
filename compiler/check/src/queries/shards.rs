//! A flow's declarations split into shards by a hash of the name, each built from the members
//! whose names fall in it. Two declarations clash only when they have the same name, so a
//! shard's declarations (its part of the signature, the first step of each of its names, its
//! duplicate and reserved names) are those of the whole flow restricted to it. Typing a new
//! step's name changes one group's heads on every key: built flow-wide, the declarations, the
//! signature and the member table (10,000 entries each at 10,000 steps) would be built again on
//! each key. Built by shard, a key rebuilds the shards of the edited group's names (a few, each
//! a few dozen names) and an index of which groups declare names in which shard (group ids
//! only); a per-step query reads the shards of the names it looks up, and runs again only when
//! one of those changed.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::db::Db;
use crate::declarations::{MemberHead, PlacedDiagnostic, check_declarations};
use crate::signature::FlowSignature;

use super::layout::Shared;
use super::members::{FlowId, MemberAt, MemberGroup, StepId, flow_groups};

/// How many shards a flow's names are split into: enough that a changed name is read by few of
/// a 10,000-step flow's steps, few enough that re-running every shard's query costs little.
pub const SHARDS: u32 = 512;

/// The shard of a name: a fixed hash (no per-process seed), so shards are the same in every run.
pub fn shard_of(name: &str) -> u32 {
    let mut h = rustc_hash::FxHasher::default();
    name.hash(&mut h);
    (h.finish() % u64::from(SHARDS)) as u32
}

/// The members of `heads` (a group's) with a name in `shard`, in order. A plain function, not
/// a memo per group: hashing a group's few names again where they are needed costs less than
/// salsa verifying a memo for each of 1,000 groups on every key.
fn members_in(heads: &[MemberHead], shard: u32) -> impl Iterator<Item = (u32, &MemberHead)> {
    heads
        .iter()
        .enumerate()
        .filter(move |(_, head)| head.names().any(|name| shard_of(name) == shard))
        .map(|(index, head)| (index as u32, head))
}

/// For each shard, the groups with a member named in it, in source order. Ids only, so
/// re-running it on each key that changes a name costs little; always a new value (no
/// comparison), as what reads it is [`shard_groups`], one shard at a time.
#[salsa::tracked(returns(ref), no_eq)]
fn groups_by_shard<'db>(db: &'db dyn Db, flow: FlowId<'db>) -> Vec<Vec<MemberGroup<'db>>> {
    let mut out: Vec<Vec<MemberGroup<'db>>> = vec![Vec::new(); SHARDS as usize];
    for &group in flow_groups(db, flow) {
        for head in group.heads(db).iter() {
            for name in head.names() {
                let groups = &mut out[shard_of(name) as usize];
                if groups.last() != Some(&group) {
                    groups.push(group);
                }
            }
        }
    }
    out
}

/// The groups with a member named in shard `shard`, in source order: equal unless a group
/// gained or lost a name there, or such groups were reordered.
#[salsa::tracked(returns(ref))]
pub fn shard_groups<'db>(db: &'db dyn Db, flow: FlowId<'db>, shard: u32) -> Vec<MemberGroup<'db>> {
    groups_by_shard(db, flow)
        .get(shard as usize)
        .cloned()
        .unwrap_or_default()
}

/// What the members named in one shard declare, checked.
#[derive(Clone, Debug, PartialEq, Default, salsa::SalsaValue)]
pub struct ShardDeclarations<'db> {
    /// The shard's part of the flow's signature.
    pub signature: Shared<FlowSignature>,
    /// Where the first step of each of the shard's names is, in source order.
    pub steps: Vec<(StepId<'db>, MemberAt<'db>)>,
    /// The problems with these declarations (duplicate and reserved names, input types and
    /// defaults), placed by member.
    pub diagnostics: Vec<PlacedDiagnostic<MemberAt<'db>>>,
}

/// The declarations of the members named in shard `shard` (see [`ShardDeclarations`]): re-run
/// when one of its groups' heads changed, equal unless one of its names' declarations did.
#[salsa::tracked(returns(ref))]
pub fn shard_declarations<'db>(
    db: &'db dyn Db,
    flow: FlowId<'db>,
    shard: u32,
) -> ShardDeclarations<'db> {
    let mut heads: Vec<(MemberAt<'db>, &MemberHead)> = Vec::new();
    for &group in shard_groups(db, flow, shard) {
        for (index, head) in members_in(group.heads(db), shard) {
            heads.push((MemberAt { group, index }, head));
        }
    }
    let decls = check_declarations(heads.iter().copied(), heads.len(), |name| {
        shard_of(name) == shard
    });
    let mut steps: Vec<(StepId<'db>, MemberAt<'db>)> = Vec::new();
    for &(at, head) in &heads {
        if let Some(name) = head.step_name() {
            let id = StepId::new(db, flow, name);
            if !steps.iter().any(|(seen, _)| *seen == id) {
                steps.push((id, at));
            }
        }
    }
    ShardDeclarations {
        signature: Shared(Arc::new(decls.signature)),
        steps,
        diagnostics: decls.diagnostics,
    }
}

/// The names of the flow's signature that fall in shard `shard` (see [`shard_of`]), with their
/// declarations: equal unless one of this shard's did change, so what reads it is not re-run.
#[salsa::tracked(returns(ref))]
pub fn signature_shard<'db>(
    db: &'db dyn Db,
    flow: FlowId<'db>,
    shard: u32,
) -> Shared<FlowSignature> {
    shard_declarations(db, flow, shard).signature.clone()
}

/// Every shard of `flow`'s signature, read once up front: a salsa read per name looked up
/// would cost more than what looks them up (see [`SignatureShards::has_step`]).
pub struct SignatureShards<'db>(Vec<&'db Shared<FlowSignature>>);

impl<'db> SignatureShards<'db> {
    /// The shards of `flow`'s signature.
    pub fn of(db: &'db dyn Db, flow: FlowId<'db>) -> Self {
        SignatureShards(
            (0..SHARDS)
                .map(|shard| signature_shard(db, flow, shard))
                .collect(),
        )
    }

    /// How many steps the signature has.
    pub fn steps(&self) -> usize {
        self.0.iter().map(|s| s.steps.len()).sum()
    }

    /// Whether `name` is one of the signature's steps (not a duplicate's, a reserved name's or
    /// a name an input took first).
    pub fn has_step(&self, name: &str) -> bool {
        self.0[shard_of(name) as usize].step(name).is_some()
    }
}

/// Where the steps whose names fall in shard `shard` are (the first of each name): equal unless
/// one of them was added, removed or moved.
#[salsa::tracked(returns(ref))]
pub fn member_shard<'db>(
    db: &'db dyn Db,
    flow: FlowId<'db>,
    shard: u32,
) -> Vec<(StepId<'db>, MemberAt<'db>)> {
    shard_declarations(db, flow, shard).steps.clone()
}

/// The flow's output (the first) and the problems with the others.
#[derive(Clone, Debug, PartialEq, Default, salsa::SalsaValue)]
pub struct FlowOutput<'db> {
    /// Where the first `output` is.
    pub first: Option<MemberAt<'db>>,
    /// A second `output` is an error.
    pub diagnostics: Vec<PlacedDiagnostic<MemberAt<'db>>>,
}

/// Where the flow's output is: a walk over the groups' heads, re-run only when one changed.
#[salsa::tracked(returns(ref))]
pub fn flow_output<'db>(db: &'db dyn Db, flow: FlowId<'db>) -> FlowOutput<'db> {
    let mut heads: Vec<(MemberAt<'db>, &MemberHead)> = Vec::new();
    for &group in flow_groups(db, flow) {
        for (index, head) in group.heads(db).iter().enumerate() {
            if matches!(head, MemberHead::Output(_)) {
                let index = index as u32;
                heads.push((MemberAt { group, index }, head));
            }
        }
    }
    FlowOutput {
        first: heads.first().map(|&(at, _)| at),
        diagnostics: check_declarations(heads.iter().copied(), 0, |_| false).diagnostics,
    }
}
