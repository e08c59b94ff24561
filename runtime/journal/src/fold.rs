//! The one fold of a run's journal into what a reader needs of the run, streaming.
//!
//! The engine resumes from [`Folded`]'s state: finished steps keep their output digest; calls
//! of steps still in progress keep their last state. For a resume the steps that succeeded are
//! looked up first (`StoreRead::succeeded_steps`) and their calls' records are passed over, so
//! memory follows the number of steps and of calls still in progress, not the journal's length.
//! Readers that show a run (the language server) ask for per-step [`StepView`]s as well, and
//! extend a kept fold with the events appended since ([`Folded::read`] goes on from the events
//! already folded). No value is read here.

use std::collections::{BTreeMap, HashMap, HashSet};

use reel_store::{EventRow, Flow, JournalRow, RawEventRow, RawJournalRow, StoreError, StoreRead};

use crate::error::RunError;
use crate::journal::{Event, Resolution, RunStarted, woke_value};

/// What the journal says about one call (one `foreach` element, or a step's single call).
#[derive(Clone, Debug, PartialEq)]
pub enum CallRecord {
    /// Started and never finished (in flight when the process stopped).
    Started {
        /// The attempt.
        attempt: u32,
        /// The idempotency key, for an effect: set, the call's outcome is unknown.
        key: Option<String>,
    },
    /// Finished with this result.
    Done {
        /// The result's digest.
        output: String,
        /// The attempt.
        attempt: u32,
    },
    /// Failed; tried again at `retry_at` if set, else failed for good.
    Failed {
        /// The attempt.
        attempt: u32,
        /// When the next attempt is due.
        retry_at: Option<i64>,
        /// Why.
        error: RunError,
    },
    /// A `sleep` waiting until `until`.
    Timer {
        /// Due time.
        until: i64,
    },
    /// A `signal` wait.
    Signal {
        /// The signal's name.
        name: String,
        /// When it times out.
        deadline: Option<i64>,
    },
}

/// What the journal says about one step.
#[derive(Clone, Debug, PartialEq)]
pub enum StepRecord {
    /// Finished with this value.
    Succeeded {
        /// The value's digest.
        output: String,
        /// When.
        at: i64,
        /// Attempts in all.
        attempts: u32,
    },
    /// Skipped.
    Skipped {
        /// When.
        at: i64,
    },
    /// Failed for good.
    Failed {
        /// Why.
        error: RunError,
    },
}

/// Where one step stands, as a run's reader shows it.
#[derive(Clone, Debug, PartialEq)]
pub enum StepState {
    /// Started, not finished.
    Running,
    /// Finished with the value of this digest.
    Succeeded {
        /// The value's digest.
        output: String,
    },
    /// Failed for good.
    Failed(RunError),
    /// Its `when` was false, for this reason.
    Skipped(String),
    /// Waiting for a signal of this name.
    WaitingSignal(String),
    /// Sleeping until this time (ms since epoch).
    Sleeping(i64),
}

/// What the journal says about one step, for showing it.
#[derive(Clone, Debug, PartialEq)]
pub struct StepView {
    /// Its state.
    pub state: StepState,
    /// When its first event happened (ms since epoch).
    pub first_at: i64,
    /// When its last event happened.
    pub last_at: i64,
    /// The highest attempt of any call.
    pub attempts: u32,
    /// For `foreach` steps: calls that succeeded and calls that failed for good, when any call
    /// had an index.
    pub calls: Option<(u32, u32)>,
    /// Each attempt's start: (index, attempt, time).
    pub starts: Vec<(Option<u32>, u32, i64)>,
    /// Idempotency keys the calls started with.
    pub keys: Vec<String>,
    /// Effects recorded, by key.
    pub effects: Vec<String>,
    /// Calls found with an unknown outcome on a resume: (index, attempt, what was done).
    pub unknown: Vec<(Option<u32>, u32, Resolution)>,
}

/// What to do with a journal row that cannot be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holes {
    /// Stop with [`StoreError::Hole`]: a run with a hole cannot resume.
    Stop,
    /// Count it and go on: a view shows what can be read.
    PassOver,
}

/// A run's state as its journal leaves it.
#[derive(Clone, Debug, Default)]
pub struct Folded {
    /// How it started.
    pub started: Option<(RunStarted, i64)>,
    /// Finished, skipped and failed steps.
    pub steps: HashMap<String, StepRecord>,
    /// Calls of steps that have not finished, by step and index.
    pub calls: HashMap<(String, Option<u32>), CallRecord>,
    /// Attempts made so far, by step.
    pub attempts: HashMap<String, u32>,
    /// How the run last ended, if it did: `succeeded`, `failed` or `canceled`.
    pub finished: Option<String>,
    /// The output digest, if it succeeded.
    pub output: Option<String>,
    /// The error it last ended with.
    pub error: Option<RunError>,
    /// Rows read (unreadable ones included): the next read starts after them.
    pub events: u64,
    /// The rows passed over as holes ([`Holes::PassOver`]): their positions and why each
    /// cannot be read.
    pub holes: Vec<(u64, String)>,
    /// Per-step views, when asked for with [`Folded::with_views`]; they keep every attempt's
    /// start, so they grow with the calls, which a resume does not need.
    pub views: Option<BTreeMap<String, StepView>>,
    /// Steps whose success the journal records: their calls' records are not kept.
    done: HashSet<String>,
}

impl Folded {
    /// An empty fold that also builds per-step views.
    pub fn with_views() -> Self {
        Folded {
            views: Some(BTreeMap::new()),
            ..Folded::default()
        }
    }

    /// Folds one row in; `Err` says why it cannot be read (it is counted all the same).
    pub fn apply_row(&mut self, row: &EventRow) -> Result<(), String> {
        self.events += 1;
        let event = Event::from_row(row)?;
        if let Some(views) = &mut self.views {
            view_step(views, row.step.as_deref(), row.at, row.index, &event);
        }
        self.apply(row.at, event);
        Ok(())
    }

    /// Folds one row in as the store holds it ([`Event::from_raw`]): what
    /// [`Folded::apply_row`] does with the row parsed, without a JSON tree per row.
    pub fn apply_raw(&mut self, row: &RawEventRow<'_>) -> Result<(), String> {
        self.events += 1;
        let event = Event::from_raw(row)?;
        self.apply_read(row, event);
        Ok(())
    }

    /// Folds in `event`, read from `row` (counted already).
    fn apply_read(&mut self, row: &RawEventRow<'_>, event: Event) {
        if let Some(views) = &mut self.views {
            view_step(views, row.step, row.at, row.index, &event);
        }
        self.apply(row.at, event);
    }

    /// Reads the journal of `run` after the rows already folded, to its end (or, with
    /// [`Holes::Stop`], to its first unreadable row, which is the error). Folding a journal in
    /// parts gives what one fold from the start gives, so a kept fold of a live run is extended
    /// with the events appended since rather than folded again.
    pub fn read(
        &mut self,
        store: &dyn StoreRead,
        run: &str,
        holes: Holes,
    ) -> Result<(), StoreError> {
        let mut hole: Option<StoreError> = None;
        walk(store, run, self.events, &mut |row| {
            self.events += 1;
            let unreadable = match row {
                Ok((row, event)) => {
                    self.apply_read(row, event);
                    return Flow::Continue;
                }
                Err(unreadable) => unreadable,
            };
            if holes == Holes::PassOver {
                self.holes.push(unreadable);
                return Flow::Continue;
            }
            hole = Some(hole_at(run, unreadable));
            Flow::Stop
        })?;
        hole.map_or(Ok(()), Err)
    }

    /// Folds in one event held in memory, as it happened at `at` (a replay folds what its
    /// machine records as it goes, so a park or redrive resumes without a second pass).
    pub fn push(&mut self, at: i64, event: Event) {
        self.events += 1;
        self.apply(at, event);
    }

    fn apply(&mut self, at: i64, event: Event) {
        if let Some(step) = call_step(&event)
            && self.done.contains(step)
        {
            return;
        }
        let call_key = |step: &str, index: Option<u32>| (step.to_string(), index);
        match event {
            Event::RunStarted(s) => self.started = Some((s, at)),
            Event::RunResumed { .. } => self.finished = None,
            Event::StepSkipped { step, .. } => {
                self.steps.insert(step, StepRecord::Skipped { at });
            }
            Event::StepStarted {
                step,
                index,
                attempt,
                key,
                ..
            } => {
                *self.attempts.entry(step.clone()).or_default() += 1;
                self.calls
                    .insert(call_key(&step, index), CallRecord::Started { attempt, key });
            }
            Event::CallSucceeded {
                step,
                index,
                attempt,
                output,
            } => {
                self.calls
                    .insert(call_key(&step, index), CallRecord::Done { output, attempt });
            }
            Event::EffectRecorded {
                step,
                index,
                attempt,
                result,
                ..
            } => {
                self.calls.insert(
                    call_key(&step, index),
                    CallRecord::Done {
                        output: result,
                        attempt,
                    },
                );
            }
            Event::CallFailed {
                step,
                index,
                attempt,
                error,
                retry_at,
            } => {
                self.calls.insert(
                    call_key(&step, index),
                    CallRecord::Failed {
                        attempt,
                        retry_at,
                        error,
                    },
                );
            }
            Event::StepSucceeded {
                step,
                output,
                attempts,
            } => {
                self.calls.retain(|(s, _), _| *s != step);
                // The record carries the count; a finished step keeps nothing else.
                self.attempts.remove(&step);
                self.steps.insert(
                    step,
                    StepRecord::Succeeded {
                        output,
                        at,
                        attempts,
                    },
                );
            }
            Event::StepFailed { step, error } => {
                self.steps.insert(step, StepRecord::Failed { error });
            }
            Event::TimerStarted { step, index, until } => {
                *self.attempts.entry(step.clone()).or_default() += 1;
                self.calls
                    .insert(call_key(&step, index), CallRecord::Timer { until });
            }
            Event::TimerFired { step, index, until } => {
                let digest = reel_flowspec::canonical::name_value(&woke_value(until));
                self.calls.insert(
                    call_key(&step, index),
                    CallRecord::Done {
                        output: digest,
                        attempt: 1,
                    },
                );
            }
            Event::SignalAwaited {
                step,
                index,
                name,
                deadline,
            } => {
                *self.attempts.entry(step.clone()).or_default() += 1;
                self.calls.insert(
                    call_key(&step, index),
                    CallRecord::Signal { name, deadline },
                );
            }
            Event::SignalReceived {
                step,
                index,
                payload,
                ..
            } => {
                self.calls.insert(
                    call_key(&step, index),
                    CallRecord::Done {
                        output: payload,
                        attempt: 1,
                    },
                );
            }
            // What the reuse produced is in the `call_succeeded`/`effect_recorded` that follows;
            // a call of unknown outcome stays `Started` until a new start or a result lands.
            Event::RunWaiting { .. } | Event::CallReused { .. } | Event::UnknownOutcome { .. } => {}
            Event::RunFinished {
                status,
                output,
                error,
            } => {
                self.finished = Some(status);
                self.output = output;
                self.error = error;
            }
        }
    }
}

/// The step of an event about one call (or one wait), which a finished step no longer needs.
fn call_step(event: &Event) -> Option<&str> {
    match event {
        Event::StepStarted { step, .. }
        | Event::CallSucceeded { step, .. }
        | Event::EffectRecorded { step, .. }
        | Event::UnknownOutcome { step, .. }
        | Event::CallFailed { step, .. }
        | Event::TimerStarted { step, .. }
        | Event::TimerFired { step, .. }
        | Event::SignalAwaited { step, .. }
        | Event::SignalReceived { step, .. } => Some(step),
        _ => None,
    }
}

/// Updates the view of the step `row` concerns (rows about no step leave the views alone).
///
/// Every update depends only on the step's view and the event, and a `step_succeeded` decides
/// the step's state for good (later events of that step only touch times and counts).
fn view_step(
    views: &mut BTreeMap<String, StepView>,
    name: Option<&str>,
    at: i64,
    index: Option<u32>,
    event: &Event,
) {
    let Some(name) = name else {
        return;
    };
    if !views.contains_key(name) {
        views.insert(
            name.to_string(),
            StepView {
                state: StepState::Running,
                first_at: at,
                last_at: at,
                attempts: 0,
                calls: None,
                starts: Vec::new(),
                keys: Vec::new(),
                effects: Vec::new(),
                unknown: Vec::new(),
            },
        );
    }
    let Some(step) = views.get_mut(name) else {
        return;
    };
    step.last_at = at;
    if index.is_some() && step.calls.is_none() {
        step.calls = Some((0, 0));
    }
    let succeeded = matches!(step.state, StepState::Succeeded { .. });
    let set = |step: &mut StepView, state: StepState| {
        if !succeeded {
            step.state = state;
        }
    };
    match event {
        Event::StepStarted {
            index,
            attempt,
            key,
            ..
        } => {
            step.attempts = step.attempts.max(*attempt);
            step.starts.push((*index, *attempt, at));
            if let Some(k) = key
                && !step.keys.contains(k)
            {
                step.keys.push(k.clone());
            }
            set(step, StepState::Running);
        }
        Event::CallSucceeded { index, .. } | Event::EffectRecorded { index, .. } => {
            if let (Some(_), Some(c)) = (index, step.calls.as_mut()) {
                c.0 += 1;
            }
            if let Event::EffectRecorded { key, .. } = event {
                step.effects.push(key.clone());
            }
        }
        Event::CallFailed {
            index, retry_at, ..
        } => {
            if let (Some(_), None, Some(c)) = (index, retry_at, step.calls.as_mut()) {
                c.1 += 1;
            }
        }
        Event::StepSucceeded {
            output, attempts, ..
        } => {
            step.attempts = step.attempts.max(*attempts);
            step.state = StepState::Succeeded {
                output: output.clone(),
            };
        }
        Event::StepFailed { error, .. } => set(step, StepState::Failed(error.clone())),
        Event::StepSkipped { reason, .. } => set(step, StepState::Skipped(reason.clone())),
        Event::SignalAwaited { name, .. } => set(step, StepState::WaitingSignal(name.clone())),
        Event::SignalReceived { .. } | Event::TimerFired { .. } => set(step, StepState::Running),
        Event::TimerStarted { until, .. } => set(step, StepState::Sleeping(*until)),
        Event::UnknownOutcome {
            index,
            attempt,
            then,
            ..
        } => step.unknown.push((*index, *attempt, *then)),
        _ => {}
    }
}

/// Folds events held in memory (a test's journal, a replay's), oldest first, with their times.
pub fn fold_events(events: impl IntoIterator<Item = (i64, Event)>) -> Folded {
    let mut folded = Folded::default();
    for (at, event) in events {
        folded.push(at, event);
    }
    folded
}

/// The rows of a run's journal that cannot be read (corrupt bytes, a missing row, an event
/// kind or shape this version does not know): their positions and why. A run with any cannot
/// resume; a view shows the rest.
pub fn holes(store: &dyn StoreRead, run: &str) -> Result<Vec<(u64, String)>, StoreError> {
    let mut out = Vec::new();
    store.read_journal_raw(run, 0, &mut |row| {
        match row {
            RawJournalRow::Event(row) => {
                if let Err(message) = Event::from_raw(&row) {
                    out.push((row.seq, message));
                }
            }
            RawJournalRow::Hole { seq, message } => out.push((seq, message.to_string())),
        }
        Flow::Continue
    })?;
    Ok(out)
}

/// A call a resume found with an unknown outcome: (step, index, attempt, what was done).
pub type Unknown = (String, Option<u32>, u32, Resolution);

/// The calls every run of the store was found with an unknown outcome, by run, in journal
/// order: read from the store's index of such rows, not from each run's journal, so a list of
/// runs shows them at the cost of what it finds. A row that does not read as one is left to
/// [`holes`].
pub fn unknown_outcomes(
    store: &dyn StoreRead,
) -> Result<HashMap<String, Vec<Unknown>>, StoreError> {
    let mut out: HashMap<String, Vec<Unknown>> = HashMap::new();
    for row in store.unknown_outcome_rows()? {
        if let Ok(Event::UnknownOutcome {
            step,
            index,
            attempt,
            then,
            ..
        }) = Event::from_row(&row)
        {
            out.entry(row.run)
                .or_default()
                .push((step, index, attempt, then));
        }
    }
    Ok(out)
}

/// A journal row as a fold reads it: its event, or where the row is and why it cannot be read.
type Read<'r, 'a> = Result<(&'r RawEventRow<'a>, Event), (u64, String)>;

/// Reads `run`'s journal from `from`, handing each row to `each` as [`Read`].
fn walk(
    store: &dyn StoreRead,
    run: &str,
    from: u64,
    each: &mut dyn FnMut(Read<'_, '_>) -> Flow,
) -> Result<(), StoreError> {
    store.read_journal_raw(run, from, &mut |row| match row {
        RawJournalRow::Event(row) => match Event::from_raw(&row) {
            Ok(event) => each(Ok((&row, event))),
            Err(message) => each(Err((row.seq, message))),
        },
        RawJournalRow::Hole { seq, message } => each(Err((seq, message.to_string()))),
    })
}

/// The error of a resume stopped by an unreadable row of `run`'s journal.
fn hole_at(run: &str, (seq, message): (u64, String)) -> StoreError {
    StoreError::Hole {
        run: run.to_string(),
        seq,
        message,
    }
}

/// Journals of at most this many events are read once and held while folded (see
/// [`fold_journal`]): one page of a database's read.
pub const SHORT_JOURNAL: u64 = 1000;

/// Reads a run's journal into the state a resume needs. A row that cannot be read is a hole:
/// the run cannot resume.
///
/// `length` is how many events the run's row says its journal holds. A short journal is read
/// once and its events held until its end says which steps succeeded; a longer one is not
/// held, and which steps succeeded is read first instead. Either way the calls of succeeded
/// steps are passed over, and the fold is the same; a wrong `length` costs only memory or a
/// read.
pub fn fold_journal(store: &dyn StoreRead, run: &str, length: u64) -> Result<Folded, StoreError> {
    if length <= SHORT_JOURNAL {
        // Read up to its first unreadable row, which the fold refuses.
        let mut read = Vec::new();
        walk(store, run, 0, &mut |row| {
            let hole = row.is_err();
            read.push(row.map(|(row, e)| (row.at, e)));
            if hole { Flow::Stop } else { Flow::Continue }
        })?;
        return fold_held(run, read);
    }
    let mut folded = Folded {
        done: store.succeeded_steps(run)?,
        ..Folded::default()
    };
    folded.read(store, run, Holes::Stop)?;
    Ok(folded)
}

/// Folds a run's journal read already (a claim read it with the run:
/// `reel_store::ReadWithClaim`), as [`fold_journal`] folds a short one it reads.
pub fn fold_rows(run: &str, rows: &[JournalRow]) -> Result<Folded, StoreError> {
    fold_held(
        run,
        rows.iter().map(|row| match row {
            JournalRow::Event(row) => Event::from_row(row)
                .map(|event| (row.at, event))
                .map_err(|message| (row.seq, message)),
            JournalRow::Hole { seq, message } => Err((*seq, message.clone())),
        }),
    )
}

/// An event with its time, or an unreadable row's position and what is wrong with it.
type Timed = Result<(i64, Event), (u64, String)>;

/// Folds a short journal's events, held until its end says which steps succeeded (see
/// [`fold_journal`]); its first unreadable row refuses it.
fn fold_held(run: &str, read: impl IntoIterator<Item = Timed>) -> Result<Folded, StoreError> {
    let events: Vec<(i64, Event)> = read
        .into_iter()
        .collect::<Result<_, _>>()
        .map_err(|unreadable| hole_at(run, unreadable))?;
    let mut folded = Folded {
        done: events
            .iter()
            .filter_map(|(_, e)| match e {
                Event::StepSucceeded { step, .. } => Some(step.clone()),
                _ => None,
            })
            .collect(),
        ..Folded::default()
    };
    for (at, event) in events {
        folded.push(at, event);
    }
    Ok(folded)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use reel_store::{Durability, Lease, ManualClock, NewEvent, NewRun, Owner, SqliteStore, Store};
    use serde_json::json;

    use super::*;

    /// A `foreach` step `a` with a retried call, a step `b` waiting for a signal, at times 1..
    fn events() -> Vec<Event> {
        let started = |index, attempt| Event::StepStarted {
            step: "a".into(),
            index: Some(index),
            attempt,
            inputs: "i".repeat(64),
            key: Some(format!("k{index}")),
        };
        vec![
            started(0, 1),
            started(1, 1),
            Event::CallSucceeded {
                step: "a".into(),
                index: Some(0),
                attempt: 1,
                output: "0".repeat(64),
            },
            Event::CallFailed {
                step: "a".into(),
                index: Some(1),
                attempt: 1,
                error: RunError::new("tool.http.status", "503"),
                retry_at: Some(9),
            },
            started(1, 2),
            Event::EffectRecorded {
                step: "a".into(),
                index: Some(1),
                attempt: 2,
                key: "k1".into(),
                result: "1".repeat(64),
            },
            Event::StepSucceeded {
                step: "a".into(),
                output: "a".repeat(64),
                attempts: 3,
            },
            Event::SignalAwaited {
                step: "b".into(),
                index: None,
                name: "go".into(),
                deadline: None,
            },
            Event::RunWaiting {
                due_at: None,
                signals: vec!["go".into()],
            },
        ]
    }

    /// A store holding one run `r` whose journal is `rows`, and the lease to append to it.
    fn store_with(rows: Vec<NewEvent>) -> (tempfile::TempDir, SqliteStore, Lease) {
        let tmp = tempfile::tempdir().unwrap();
        let store =
            SqliteStore::open(&tmp.path().join(".reel"), Arc::new(ManualClock::at(0))).unwrap();
        let run = NewRun {
            id: "r".into(),
            flow: "f".into(),
            flow_digest: "d".repeat(64),
            source: None,
            source_abs: None,
            cwd: "/".into(),
            parent: None,
            keep_for_ms: None,
            durability: Durability::Fast,
            created_at: 0,
            first_events: rows,
            kept: Vec::new(),
        };
        let lease = store
            .create_run(run, &Owner::this_process(), 60_000)
            .unwrap();
        (tmp, store, lease)
    }

    fn rows() -> Vec<NewEvent> {
        events()
            .iter()
            .enumerate()
            .map(|(n, e)| e.to_row(1 + n as i64))
            .collect()
    }

    #[test]
    fn the_views_say_where_each_step_stands() {
        let (_tmp, store, _) = store_with(rows());
        let mut folded = Folded::with_views();
        folded.read(&store, "r", Holes::Stop).unwrap();
        assert_eq!(folded.events, 9);
        let views = folded.views.as_ref().unwrap();
        assert_eq!(
            views["a"],
            StepView {
                state: StepState::Succeeded {
                    output: "a".repeat(64)
                },
                first_at: 1,
                last_at: 7,
                attempts: 3,
                calls: Some((2, 0)),
                starts: vec![(Some(0), 1, 1), (Some(1), 1, 2), (Some(1), 2, 5)],
                keys: vec!["k0".into(), "k1".into()],
                effects: vec!["k1".into()],
                unknown: Vec::new(),
            }
        );
        assert_eq!(views["b"].state, StepState::WaitingSignal("go".into()));
        // The resume state is built alongside: `a` finished, `b`'s wait is its open call.
        assert!(matches!(folded.steps["a"], StepRecord::Succeeded { .. }));
        assert_eq!(
            folded.calls[&("b".to_string(), None)],
            CallRecord::Signal {
                name: "go".into(),
                deadline: None
            }
        );
    }

    #[test]
    fn folding_in_parts_gives_what_one_fold_gives() {
        let all = rows();
        let (_tmp, whole_store, _) = store_with(all.clone());
        let mut whole = Folded::with_views();
        whole.read(&whole_store, "r", Holes::Stop).unwrap();
        for cut in 1..all.len() {
            let (_tmp, store, lease) = store_with(all[..cut].to_vec());
            let mut parts = Folded::with_views();
            parts.read(&store, "r", Holes::Stop).unwrap();
            assert_eq!(parts.events, cut as u64);
            // The journal grows; the kept fold goes on from where it stopped.
            store.append(&lease, all[cut..].to_vec()).unwrap();
            store.sync(&lease).0.blocking_recv().unwrap().unwrap();
            parts.read(&store, "r", Holes::Stop).unwrap();
            assert_eq!(parts.events, whole.events, "cut at {cut}");
            assert_eq!(parts.views, whole.views, "cut at {cut}");
            assert_eq!(parts.steps, whole.steps, "cut at {cut}");
            assert_eq!(parts.calls, whole.calls, "cut at {cut}");
        }
    }

    /// The rows of `run`'s journal as a claim that read it hands them over.
    fn journal_rows(store: &SqliteStore, run: &str) -> Vec<JournalRow> {
        let mut rows = Vec::new();
        store
            .read_journal_rows(run, 0, &mut |row| {
                rows.push(row);
                Flow::Continue
            })
            .unwrap();
        rows
    }

    #[test]
    fn a_short_journal_held_and_a_long_one_read_twice_fold_the_same() {
        let (_tmp, store, _) = store_with(rows());
        // A length up to a page holds the rows; past it, the succeeded steps are read first;
        // rows a claim read already fold as those read here.
        let held = fold_journal(&store, "r", 9).unwrap();
        let twice = fold_journal(&store, "r", SHORT_JOURNAL + 1).unwrap();
        let given = fold_rows("r", &journal_rows(&store, "r")).unwrap();
        assert_eq!(held.events, 9);
        assert_eq!(format!("{held:?}"), format!("{twice:?}"));
        assert_eq!(format!("{held:?}"), format!("{given:?}"));
        // `a` succeeded: its calls are passed over; `b`'s wait is kept.
        assert!(held.calls.keys().all(|(step, _)| step == "b"), "{held:?}");
        assert!(held.calls.contains_key(&("b".to_string(), None)));
    }

    #[test]
    fn an_effect_started_without_its_result_keeps_its_key_and_its_marks_show() {
        let started = |step: &str, key: Option<&str>| Event::StepStarted {
            step: step.into(),
            index: None,
            attempt: 1,
            inputs: "i".repeat(64),
            key: key.map(str::to_string),
        };
        let unknown = Event::UnknownOutcome {
            step: "pay".into(),
            index: None,
            attempt: 1,
            key: "k".into(),
            then: Resolution::Held,
        };
        let events = [
            started("pay", Some("k")),
            started("look", None),
            unknown.clone(),
        ];
        let folded = fold_events(events.iter().cloned().map(|e| (1, e)));
        // The mark changes nothing of the call: it stays of unknown outcome until a result or
        // a new start lands.
        assert_eq!(
            folded.calls[&("pay".to_string(), None)],
            CallRecord::Started {
                attempt: 1,
                key: Some("k".into())
            }
        );
        assert_eq!(
            folded.calls[&("look".to_string(), None)],
            CallRecord::Started {
                attempt: 1,
                key: None
            }
        );
        let rows: Vec<NewEvent> = events.iter().map(|e| e.to_row(1)).collect();
        let (_tmp, store, _) = store_with(rows);
        assert!(holes(&store, "r").unwrap().is_empty());
        assert_eq!(
            unknown_outcomes(&store).unwrap(),
            HashMap::from([(
                "r".to_string(),
                vec![("pay".to_string(), None, 1, Resolution::Held)]
            )])
        );
        let mut view = Folded::with_views();
        view.read(&store, "r", Holes::Stop).unwrap();
        assert_eq!(
            view.views.unwrap()["pay"].unknown,
            vec![(None, 1, Resolution::Held)]
        );
    }

    #[test]
    fn an_unreadable_row_stops_a_resume_and_is_passed_over_by_a_view() {
        let mut all = rows();
        all.insert(
            2,
            NewEvent {
                at: 2,
                kind: "from_the_future".into(),
                step: Some("a".into()),
                index: None,
                attempt: None,
                data: json!({}),
            },
        );
        let (_tmp, store, _) = store_with(all);
        // Read whole and held, or not held, or handed over by a claim: the same refusal.
        let given = fold_rows("r", &journal_rows(&store, "r"));
        for length in [10, u64::MAX] {
            let err = fold_journal(&store, "r", length).unwrap_err();
            assert_eq!(Err(&err), given.as_ref().map(|_| ()), "{length}");
            assert_eq!(err.code(), "store.hole");
            assert!(err.to_string().contains("from_the_future"), "{err}");
            assert!(matches!(err, StoreError::Hole { seq: 2, .. }), "{err}");
        }
        let mut view = Folded::with_views();
        view.read(&store, "r", Holes::PassOver).unwrap();
        assert_eq!(view.events, 10);
        let found = holes(&store, "r").unwrap();
        assert_eq!(view.holes, found);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].0, 2);
        assert!(found[0].1.contains("from_the_future"), "{found:?}");
        assert!(matches!(
            view.views.unwrap()["a"].state,
            StepState::Succeeded { .. }
        ));
    }
}
