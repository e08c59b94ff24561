//! A flow's names split into shards by a hash of the name, so that a query that looks up a few
//! names depends on their shards only. Typing a new step's name (and, before it parses, the
//! names its broken member writes) changes the flow's signature and member table on every key;
//! read whole, they would re-run one query per step of the flow on each key. Read by shard, a
//! key re-runs the shard queries (a fixed number, each a copy of a few names) and the per-step
//! queries that read a name of a shard that changed.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::db::Db;
use crate::signature::FlowSignature;

use super::checks::flow_signature;
use super::layout::Shared;
use super::members::{FlowId, MemberAt, StepId, flow_members};

/// How many shards a flow's names are split into: enough that a changed name is read by few of
/// a 10,000-step flow's steps, few enough that re-running every shard's query costs little.
pub const SHARDS: u32 = 512;

/// The shard of a name: a fixed hash (no per-process seed), so shards are the same in every run.
pub fn shard_of(name: &str) -> u32 {
    let mut h = rustc_hash::FxHasher::default();
    name.hash(&mut h);
    (h.finish() % u64::from(SHARDS)) as u32
}

/// The flow's signature split by shard, in one pass. Always a new value when re-run (the
/// signature it splits changed), so it skips the comparison.
#[salsa::tracked(returns(ref), no_eq)]
fn signature_shards<'db>(db: &'db dyn Db, flow: FlowId<'db>) -> Vec<Shared<FlowSignature>> {
    let sig = flow_signature(db, flow);
    let mut out = vec![FlowSignature::default(); SHARDS as usize];
    for (name, ty) in &sig.inputs {
        out[shard_of(name) as usize]
            .inputs
            .push((name.clone(), ty.clone()));
    }
    for name in &sig.secrets {
        out[shard_of(name) as usize].secrets.push(name.clone());
    }
    for name in &sig.env {
        out[shard_of(name) as usize].env.push(name.clone());
    }
    for head in &sig.steps {
        out[shard_of(&head.name) as usize].push_step(head.clone());
    }
    for name in &sig.broken_names {
        out[shard_of(name) as usize].broken_names.push(name.clone());
    }
    out.into_iter().map(|s| Shared(Arc::new(s))).collect()
}

/// The names of the flow's signature that fall in shard `shard` (see [`shard_of`]), with their
/// declarations: re-run when any name of the flow changes, but equal unless one of this shard's
/// did, so what reads it is not re-run.
#[salsa::tracked(returns(ref))]
pub fn signature_shard<'db>(
    db: &'db dyn Db,
    flow: FlowId<'db>,
    shard: u32,
) -> Shared<FlowSignature> {
    signature_shards(db, flow)
        .get(shard as usize)
        .cloned()
        .unwrap_or_default()
}

/// The flow's member table split by the shard of each step's name.
#[salsa::tracked(returns(ref), no_eq)]
fn member_shards<'db>(
    db: &'db dyn Db,
    flow: FlowId<'db>,
) -> Vec<Vec<(StepId<'db>, MemberAt<'db>)>> {
    let members = flow_members(db, flow);
    let mut out = vec![Vec::new(); SHARDS as usize];
    // In source order, so that equal tables give equal shards.
    for &id in &members.order {
        if let Some(&at) = members.steps.get(&id) {
            out[shard_of(id.name(db)) as usize].push((id, at));
        }
    }
    out
}

/// Where the steps whose names fall in shard `shard` are (the first of each name): equal unless
/// one of them was added, removed or moved.
#[salsa::tracked(returns(ref))]
pub fn member_shard<'db>(
    db: &'db dyn Db,
    flow: FlowId<'db>,
    shard: u32,
) -> Vec<(StepId<'db>, MemberAt<'db>)> {
    member_shards(db, flow)
        .get(shard as usize)
        .cloned()
        .unwrap_or_default()
}
