//! Fork and rerun: a new run from a recorded one, reusing what the record holds.
//!
//! A **fork** runs a corrected flow. It keeps the parent's inputs (unless overridden), seed and
//! environment snapshot, and has its own id, retention and idempotency keys (keys derive from
//! the run id, so a call it makes live is never deduplicated into its parent's). While a call
//! matches the parent's history (same step, same `foreach` index, same inputs digest, same
//! tool: [`History`]), the live driver answers it with the parent's recorded result without
//! calling the tool, and the journal records a `call_reused` naming the parent's event; any
//! other call is made live.
//!
//! A **rerun** (`reel replay --rerun`) runs the parent's own recorded flow the same way, but
//! reuses only its reads: a call of a `pure` or `read` tool that matches the record is answered
//! from it, and every effect is made again, live, with the rerun's own idempotency keys.
//!
//! Both carry the parent's consumed signals over: a `signal` wait of the same step, `foreach`
//! index and name whose upstream steps ended as they did in the parent takes the signal the
//! parent's wait received ([`History::carried_signal`]). The signal is sent to the new run (so
//! its journal and its signal table are complete on their own) and its `signal_received` is
//! preceded by a `call_reused` naming the parent's event. Only what the parent had consumed
//! when the new run started is carried; signals sent to the parent later stay the parent's.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use reel_flowspec::{FlowSpec, ToolKind};
use reel_store::{Lease, Store, StoreError, StoreRead};
use reel_tools::ToolOutput;
use serde_json::Map;

use crate::core::{ArrivedSignal, CallStart, Returned, Stamped};
use crate::deps::RunDeps;
use crate::fold::{CallRecord, StepRecord};
use crate::journal::Event;
use crate::replay::{History, Recording};
use crate::rider::{Refusal, RiderConfig, RunOutcome, StartRequest, begin};

/// What a new run takes from its parent's record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// A fork: every matching call.
    Fork,
    /// A rerun: matching calls of `pure` and `read` tools; effects are made again.
    Rerun,
}

/// The parent's history as the new run's driver uses it, with the counts of what it did.
pub struct Reuse {
    history: History,
    spec: Arc<FlowSpec>,
    policy: Policy,
    reused: AtomicUsize,
    live: AtomicUsize,
    seen: Mutex<Seen>,
}

/// What the new run's own journal says so far, as far as carrying signals needs it.
#[derive(Default)]
struct Seen {
    /// Each finished step's output digest (`None`: skipped).
    ended: HashMap<String, Option<String>>,
    /// Signal waits open now: step, `foreach` index and the name waited for.
    waits: Vec<(String, Option<u32>, String)>,
    /// Waits a signal was carried to already.
    carried: HashSet<(String, Option<u32>)>,
}

impl Reuse {
    /// The parent's history of `parent`, for a new run of `spec`.
    pub(crate) fn new(parent: &Recording, spec: Arc<FlowSpec>, policy: Policy) -> Reuse {
        Reuse {
            history: History::new(parent),
            spec,
            policy,
            reused: AtomicUsize::new(0),
            live: AtomicUsize::new(0),
            seen: Mutex::new(Seen::default()),
        }
    }

    /// The history of the run's parent, for a resume of a fork or rerun: reuse goes on after
    /// a park or a crash as it went in the process that started it. `folded` is the run's own
    /// journal: the steps it finished and the signal waits it has open. `None` when the
    /// parent is gone (removed by `reel clean`): what is left runs live.
    pub(crate) fn resumed(
        store: &dyn StoreRead,
        parent: &str,
        spec: Arc<FlowSpec>,
        rerun: bool,
        folded: &crate::fold::Folded,
    ) -> Result<Option<Reuse>, Refusal> {
        let parent = match Recording::load(store, parent) {
            Ok(p) => p,
            Err(Refusal::UnknownRun(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        let policy = if rerun { Policy::Rerun } else { Policy::Fork };
        let reuse = Reuse::new(&parent, spec, policy);
        {
            let mut seen = reuse.seen.lock().unwrap_or_else(|e| e.into_inner());
            for (step, record) in &folded.steps {
                match record {
                    StepRecord::Succeeded { output, .. } => {
                        seen.ended.insert(step.clone(), Some(output.clone()));
                    }
                    StepRecord::Skipped { .. } => {
                        seen.ended.insert(step.clone(), None);
                    }
                    StepRecord::Failed { .. } => {}
                }
            }
            for ((step, index), call) in &folded.calls {
                if let CallRecord::Signal { name, .. } = call {
                    seen.waits.push((step.clone(), *index, name.clone()));
                }
            }
        }
        Ok(Some(reuse))
    }

    /// Whether the new run is a rerun.
    pub(crate) fn is_rerun(&self) -> bool {
        self.policy == Policy::Rerun
    }

    /// The parent's recorded result for call `c`, when the history matches it and the policy
    /// reuses it (else `None`: the call is made live).
    pub(crate) fn answer(
        &self,
        store: &dyn StoreRead,
        c: &CallStart,
    ) -> Result<Option<Returned>, Refusal> {
        let step = &self.spec.steps[c.step];
        let index = step.foreach.as_ref().map(|_| c.index as u32);
        let reusable = match self.policy {
            Policy::Fork => true,
            Policy::Rerun => matches!(step.kind, ToolKind::Pure | ToolKind::Read),
        };
        let found = reusable
            .then(|| {
                self.history
                    .reusable(&step.id, index, &c.inputs, step.tool.as_deref())
            })
            .flatten();
        let Some((digest, from)) = found else {
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
            digest: None,
        }))
    }

    /// Takes note of events the new run appended: which steps ended how, which signal waits
    /// are open.
    pub(crate) fn observe(&self, events: &[Stamped]) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        for e in events {
            match &e.event {
                Event::StepSucceeded { step, output, .. } => {
                    seen.ended.insert(step.clone(), Some(output.clone()));
                }
                Event::StepSkipped { step, .. } => {
                    seen.ended.insert(step.clone(), None);
                }
                Event::SignalAwaited {
                    step, index, name, ..
                } => seen.waits.push((step.clone(), *index, name.clone())),
                Event::SignalReceived { step, index, .. }
                | Event::CallFailed { step, index, .. } => {
                    seen.waits.retain(|w| !(w.0 == *step && w.1 == *index));
                }
                _ => {}
            }
        }
    }

    /// Before the run looks for signals named `names`: the parent's signals its open waits
    /// take, sent to the run and announced by a `call_reused` each. Returns them as arrived,
    /// with the names still to look for among the run's own signals.
    pub(crate) fn carry_signals(
        &self,
        store: &dyn Store,
        lease: &Lease,
        now: i64,
        mut names: Vec<String>,
    ) -> Result<(Vec<ArrivedSignal>, Vec<String>), Refusal> {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let mut arrived = Vec::new();
        let waits = seen.waits.clone();
        for (step, index, name) in waits {
            let key = (step.clone(), index);
            if seen.carried.contains(&key) {
                continue;
            }
            let Some(pos) = names.iter().position(|n| *n == name) else {
                continue;
            };
            let Some(spec) = self.spec.steps.iter().find(|s| s.id == step) else {
                continue;
            };
            let ended = |d: &str| seen.ended.get(d).cloned();
            let Some(carried) = self.history.carried_signal(spec, index, &name, &ended) else {
                continue;
            };
            let payload =
                store
                    .get_value(&carried.payload)?
                    .ok_or_else(|| StoreError::MissingValue {
                        digest: carried.payload.clone(),
                    })?;
            let number = store.send_signal(&lease.run, &name, &payload)?;
            let reused = Event::CallReused {
                step: step.clone(),
                index,
                attempt: 1,
                parent: carried.from.parent.clone(),
                seq: carried.from.seq,
            };
            store.append(lease, vec![reused.to_row(now)])?;
            seen.carried.insert(key);
            self.reused.fetch_add(1, Ordering::Relaxed);
            names.remove(pos);
            arrived.push(ArrivedSignal {
                seq: number,
                name,
                payload_digest: carried.payload,
                payload,
            });
        }
        Ok((arrived, names))
    }
}

/// How a fork or rerun went.
#[derive(Clone, Debug, PartialEq)]
pub struct ForkOutcome {
    /// The new run's outcome.
    pub outcome: RunOutcome,
    /// Calls (and signals) answered from the parent's record.
    pub reused: usize,
    /// Calls made live.
    pub live: usize,
}

/// Starts `req` (its `parent` names the run to fork; its `inputs` override the parent's; its
/// `seed` is replaced by the parent's) and drives it, reusing the parent's matching calls.
pub async fn fork(
    deps: &RunDeps,
    cfg: &RiderConfig,
    req: StartRequest,
) -> Result<ForkOutcome, Refusal> {
    let parent_id = req
        .parent
        .clone()
        .ok_or_else(|| Refusal::Input("a fork needs the run it forks".into()))?;
    let parent = load(deps, parent_id).await?;
    drive_from(deps, cfg, req, parent, Policy::Fork).await
}

/// A request to rerun a run.
#[derive(Clone, Debug)]
pub struct RerunRequest {
    /// The new run's id.
    pub run_id: String,
    /// The run to rerun.
    pub parent: String,
    /// How long the new run is kept after it ends (ms).
    pub keep_for_ms: Option<u64>,
    /// The new run's write mode.
    pub durability: reel_store::Durability,
}

/// Reruns a run as a new one whose parent it is: its recorded flow, inputs, seed, environment
/// snapshot and directory, its reads answered from its record and its effects made again live,
/// with the new run's idempotency keys and secrets resolved fresh from `deps`.
pub async fn rerun(
    deps: &RunDeps,
    cfg: &RiderConfig,
    req: RerunRequest,
) -> Result<ForkOutcome, Refusal> {
    let parent = load(deps, req.parent.clone()).await?;
    let start = StartRequest {
        run_id: req.run_id,
        spec: parent.spec.clone(),
        inputs: Map::new(),
        cwd: parent.started.cwd.clone().into(),
        source: parent.run.source.clone(),
        source_abs: parent.run.source_abs.clone(),
        keep_for_ms: req.keep_for_ms,
        durability: req.durability,
        seed: parent.started.seed,
        parent: Some(req.parent),
    };
    drive_from(deps, cfg, start, parent, Policy::Rerun).await
}

/// Run `parent_id`'s record, read from the store.
async fn load(deps: &RunDeps, parent_id: String) -> Result<Recording, Refusal> {
    let store = deps.store.clone();
    tokio::task::spawn_blocking(move || Recording::load(store.as_ref(), &parent_id))
        .await
        .map_err(|e| Refusal::Store(StoreError::Sqlite(e.to_string())))?
}

async fn drive_from(
    deps: &RunDeps,
    cfg: &RiderConfig,
    mut req: StartRequest,
    parent: Recording,
    policy: Policy,
) -> Result<ForkOutcome, Refusal> {
    let mut inputs = parent.inputs.clone();
    // Inputs the corrected flow no longer declares are dropped; the rest are kept.
    inputs.retain(|k, _| req.spec.inputs.iter().any(|i| &i.name == k));
    inputs.extend(std::mem::take(&mut req.inputs));
    req.inputs = inputs;
    req.seed = parent.started.seed;
    let reuse = Reuse::new(&parent, req.spec.clone(), policy);
    let outcome = begin(deps, cfg, req, Some(&parent.env), Some(&reuse)).await?;
    Ok(ForkOutcome {
        outcome,
        reused: reuse.reused.load(Ordering::Relaxed),
        live: reuse.live.load(Ordering::Relaxed),
    })
}
