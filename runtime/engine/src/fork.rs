//! Fork: a new run from a recorded one, with a corrected flow.
//!
//! The fork keeps its parent's inputs (unless overridden), seed and environment snapshot, and
//! has its own id, retention and idempotency keys (keys derive from the run id, so a call it
//! makes live is never deduplicated into its parent's). While a call matches the parent's
//! history (same step, same `foreach` index, same inputs digest, same tool: [`History`]), the
//! live driver answers it with the parent's recorded result without calling the tool, and
//! the journal records a `call_reused` naming the parent's event; any other call is made live.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use reel_store::{StoreError, StoreRead};
use reel_tools::ToolOutput;

use crate::core::{CallStart, Returned};
use crate::deps::RunDeps;
use crate::replay::{History, Recording};
use crate::rider::{Refusal, RiderConfig, RunOutcome, StartRequest, begin};

/// The parent's history as the fork's driver uses it, with the counts of what it did.
pub struct Reuse {
    history: History,
    spec: Arc<reel_flowspec::FlowSpec>,
    reused: AtomicUsize,
    live: AtomicUsize,
}

impl Reuse {
    /// The parent's recorded result for call `c`, when the history matches it (else `None`:
    /// the call is made live).
    pub(crate) fn answer(
        &self,
        store: &dyn StoreRead,
        c: &CallStart,
    ) -> Result<Option<Returned>, Refusal> {
        let step = &self.spec.steps[c.step];
        let index = step.foreach.as_ref().map(|_| c.index as u32);
        let Some((digest, from)) =
            self.history
                .reusable(&step.id, index, &c.inputs, step.tool.as_deref())
        else {
            self.live.fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        };
        let value = store
            .get_value(&digest)?
            .ok_or(StoreError::MissingValue { digest })?;
        self.reused.fetch_add(1, Ordering::Relaxed);
        Ok(Some(Returned {
            step: c.step,
            index: c.index,
            attempt: c.attempt,
            outcome: Ok(ToolOutput {
                value,
                log: String::new(),
            }),
            reused: Some(from),
        }))
    }
}

/// How a fork went.
#[derive(Clone, Debug, PartialEq)]
pub struct ForkOutcome {
    /// The new run's outcome.
    pub outcome: RunOutcome,
    /// Calls answered from the parent's record.
    pub reused: usize,
    /// Calls made live.
    pub live: usize,
}

/// Starts `req` (its `parent` names the run to fork; its `inputs` override the parent's; its
/// `seed` is replaced by the parent's) and drives it, reusing the parent's matching calls.
pub async fn fork(
    deps: &RunDeps,
    cfg: &RiderConfig,
    mut req: StartRequest,
) -> Result<ForkOutcome, Refusal> {
    let parent_id = req
        .parent
        .clone()
        .ok_or_else(|| Refusal::Input("a fork needs the run it forks".into()))?;
    let store = deps.store.clone();
    let parent = {
        let id = parent_id.clone();
        tokio::task::spawn_blocking(move || Recording::load(store.as_ref(), &id))
            .await
            .map_err(|e| Refusal::Store(StoreError::Sqlite(e.to_string())))??
    };
    let mut inputs = parent.inputs.clone();
    // Inputs the corrected flow no longer declares are dropped; the rest are kept.
    inputs.retain(|k, _| req.spec.inputs.iter().any(|i| &i.name == k));
    inputs.extend(std::mem::take(&mut req.inputs));
    req.inputs = inputs;
    req.seed = parent.started.seed;
    let reuse = Reuse {
        history: History::new(&parent),
        spec: req.spec.clone(),
        reused: AtomicUsize::new(0),
        live: AtomicUsize::new(0),
    };
    let outcome = begin(deps, cfg, req, Some(&parent.env), Some(&reuse)).await?;
    Ok(ForkOutcome {
        outcome,
        reused: reuse.reused.load(Ordering::Relaxed),
        live: reuse.live.load(Ordering::Relaxed),
    })
}
