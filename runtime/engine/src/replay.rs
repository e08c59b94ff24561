//! Replay: a driver of the core that answers every call, timer and signal from a recorded
//! journal instead of the world.
//!
//! A replay opens nothing for writing, calls no tool and needs no secret: each `Launch` is
//! answered with the recorded result of the same call (step id, `foreach` index and attempt:
//! a cursor per call, never a journal position), time comes from the recorded events, signals
//! from the recorded `signal_received`, and pure steps are computed again. With `verify`, every
//! recomputed step output and every call's inputs digest is compared with the record, and the
//! first difference is a [`Divergence`].
//!
//! The same driver, given a corrected flow and the parent's [`History`], is the fork's dry run
//! ([`plan_fork`]): a call the fork would reuse is answered from the record, a call it would
//! make live is held (nothing downstream of it can be known), and each step gets a verdict.

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use reel_flowspec::canonical::same_value;
use reel_flowspec::{FlowSpec, SourceSpan};
use reel_store::{Durability, Flow, RawJournalRow, RunRow, StoreError, StoreRead, parse_value};
use reel_tools::{ToolError, ToolOutput};
// Keys here are step ids the record holds, not input an attacker picks: a fast hash will do.
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use serde_json::{Map, Value};

use crate::core::{
    ArrivedSignal, CallStart, Command, Ending, Input, Machine, Poll, Returned, ReusedFrom, Setup,
    Stamped,
};
use crate::deps::{Progress, ProgressSink, StepEnd};
use crate::error::RunError;
use crate::fold::Folded;
use crate::journal::{Event, RunStarted};
use crate::rider::Refusal;

/// A run as its store records it: its row, its flow, what it started with, and its journal
/// indexed by what a replay asks (each call's inputs and result, each wait's answer, each
/// step's outcome, each ending and resume). The journal is read once, as a stream, and not
/// kept: what a recording holds grows with the run's calls and steps, not with its events
/// (a retried or redriven call adds one entry per attempt, a park or resume none).
#[derive(Clone, Debug)]
pub struct Recording {
    /// The run's row.
    pub run: RunRow,
    /// The FlowSpec it ran (by the digest it recorded).
    pub spec: Arc<FlowSpec>,
    /// Its `run_started`.
    pub started: RunStarted,
    /// When it started.
    pub started_at: i64,
    /// Its inputs, defaults filled in.
    pub inputs: Map<String, Value>,
    /// Its snapshot of the declared environment.
    pub env: Map<String, Value>,
    /// How many events its journal holds.
    pub length: u64,
    idx: Index,
}

impl Recording {
    /// Reads run `run` from `store` (reads only: a store opened read-only will do).
    ///
    /// The FlowSpec (for a flow of many steps, megabytes even in its binary form) is read on
    /// a thread of its own while this one reads, decodes and indexes the journal, a stretch
    /// of [`STRETCH`] events at a time; once it has the spec, that thread takes the next
    /// stretch nobody has taken too, and decodes it into a list that this one indexes when
    /// every stretch before it is in: for a flow of tens of thousands of steps the spec takes
    /// well under half as long as the journal, and the journal is then read by two cores. The
    /// index numbers steps in the order the journal names them; once all is read the steps
    /// are numbered again in the flow's order (see [`Index::renumber`]), a pass over the run's
    /// steps and calls, not its events.
    pub fn load(store: &dyn StoreRead, run: &str) -> Result<Recording, Refusal> {
        let row = store
            .run(run)?
            .ok_or_else(|| Refusal::UnknownRun(run.to_string()))?;
        Self::load_row(store, row)
    }

    /// [`Recording::load`] of the run whose row the caller has read already.
    pub fn load_row(store: &dyn StoreRead, row: RunRow) -> Result<Recording, Refusal> {
        let id = row.id.clone();
        let run = id.as_str();
        let digest = row.flow_digest.clone();
        let digest = digest.as_str();
        // The journal in stretches, taken in turn by this thread and, once it has the
        // FlowSpec, the other one; the last runs to the journal's end, so events appended
        // since the row was read are read too (and so does the last of `STRETCHES_AT_MOST`:
        // the row's count is not trusted with memory).
        let stretches = usize::try_from(row.next_seq.div_ceil(STRETCH))
            .map_or(STRETCHES_AT_MOST, |n| n.clamp(1, STRETCHES_AT_MOST));
        let taken = &AtomicUsize::new(0);
        let read: &Mutex<Vec<Option<Stretch>>> =
            &Mutex::new((0..stretches).map(|_| None).collect());
        std::thread::scope(|scope| {
            let beside = scope.spawn(move || {
                let spec = crate::rider::recorded_spec(store, digest);
                while spec.is_ok() {
                    let n = taken.fetch_add(1, Ordering::Relaxed);
                    if n >= stretches {
                        break;
                    }
                    let stretch = Stretch::read(store, run, n, stretches);
                    lock(read)[n] = Some(stretch);
                }
                spec
            });
            let mut fill = Filling::new(row.next_seq);
            // A stretch goes into the index once every one before it is there: as this thread
            // reads it when it is the next, else from `read` when the other thread has read it.
            let mut added = 0;
            while fill.stop.is_none() {
                let ready = lock(read).get_mut(added).and_then(Option::take);
                if let Some(stretch) = ready {
                    fill.take(stretch);
                    added += 1;
                    continue;
                }
                let n = taken.fetch_add(1, Ordering::Relaxed);
                if n >= stretches {
                    break;
                }
                if n == added {
                    added += 1;
                    fill.stop = Stretch::each(store, run, n, stretches, &mut |seq, at, event| {
                        fill.add(seq, at, event)
                    });
                } else {
                    let stretch = Stretch::read(store, run, n, stretches);
                    lock(read)[n] = Some(stretch);
                }
            }
            if fill.stop.is_some() {
                // The other thread need not read further.
                taken.store(stretches, Ordering::Relaxed);
            }
            // The flow's error first, as when the flow was read before the journal: a run
            // whose flow cannot be read has nothing to replay.
            let spec = beside
                .join()
                .unwrap_or_else(|_| Err(Refusal::Spec("the FlowSpec's reader panicked".into())))?;
            while fill.stop.is_none() && added < stretches {
                let Some(stretch) = lock(read)[added].take() else {
                    break;
                };
                fill.take(stretch);
                added += 1;
            }
            let Filling {
                mut idx,
                length,
                started,
                stop,
            } = fill;
            if let Some(e) = stop {
                return Err(e.into());
            }
            idx.renumber(&spec);
            let Some((started, started_at)) = started else {
                return Err(Refusal::Store(StoreError::Hole {
                    run: run.to_string(),
                    seq: 0,
                    message: "the journal does not begin with run_started".into(),
                }));
            };
            let (inputs, env) = crate::rider::inputs_and_env(store, &started)?;
            Ok(Recording {
                run: row,
                spec,
                started,
                started_at,
                inputs,
                env,
                length,
                idx,
            })
        })
    }
}

/// A recording's index as the journal's events go into it, in order.
struct Filling {
    idx: Index,
    /// How many events went in.
    length: u64,
    /// The first `run_started` and its time.
    started: Option<(RunStarted, i64)>,
    /// What ended the reading early: a hole, or the store's failure to read.
    stop: Option<StoreError>,
}

impl Filling {
    /// An empty index for a journal of about `events` events.
    fn new(events: u64) -> Filling {
        let mut idx = Index::default();
        // A call is at least two events (its start and its result): room for them all at
        // once rather than a table grown and rehashed a dozen times (up to a bound: the row's
        // count is not trusted with memory).
        let calls = usize::try_from(events / 2).map_or(0, |n| n.min(1 << 20));
        Arc::make_mut(&mut idx.calls).reserve(calls);
        idx.results.reserve(calls);
        Filling {
            idx,
            length: 0,
            started: None,
            stop: None,
        }
    }

    fn add(&mut self, seq: u64, at: i64, event: Event) {
        self.length += 1;
        if let Event::RunStarted(s) = &event
            && self.started.is_none()
        {
            self.started = Some((s.clone(), at));
        }
        self.idx.add(seq, at, event);
    }

    /// Adds the events of a stretch read on the other thread, and what stopped it.
    fn take(&mut self, stretch: Stretch) {
        for (seq, at, event) in stretch.events {
            self.add(seq, at, event);
        }
        self.stop = stretch.stop;
    }
}

/// Locks `m`, even if a thread panicked holding it: a stretch goes in whole or not at all.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// How many events of a journal one read takes at a time (see [`Recording::load_row`]).
const STRETCH: u64 = 4096;

/// The most stretches a journal is read in (268 million events); the last reads the rest.
const STRETCHES_AT_MOST: usize = 1 << 16;

/// The events of one stretch of a journal, decoded on the thread that read them while the
/// index took an earlier stretch.
struct Stretch {
    /// In journal order.
    events: Vec<(u64, i64, Event)>,
    /// What ended it early: a hole, or the store's failure to read.
    stop: Option<StoreError>,
}

/// What one row of a stretch is to the recording.
enum Row {
    Event(u64, i64, Event),
    /// A hole: the reading stops there.
    Stop(StoreError),
    /// A row past the stretch, read only to find where it ends.
    Past,
}

impl Stretch {
    /// Where stretch `n` of `stretches` begins, and where it ends (`None`: at the journal's
    /// end).
    fn bounds(n: usize, stretches: usize) -> (u64, Option<u64>) {
        let from = n as u64 * STRETCH;
        (from, (n + 1 < stretches).then_some(from + STRETCH))
    }

    /// Stretch `n` of `stretches` of run `run`'s journal.
    fn read(store: &dyn StoreRead, run: &str, n: usize, stretches: usize) -> Stretch {
        let mut events = Vec::with_capacity(STRETCH as usize);
        let stop = Stretch::each(store, run, n, stretches, &mut |seq, at, event| {
            events.push((seq, at, event))
        });
        Stretch { events, stop }
    }

    /// Hands each event of stretch `n` of `stretches` of run `run`'s journal to `take`, in
    /// order; what stopped it early (a hole, or the store's failure to read), if anything.
    fn each(
        store: &dyn StoreRead,
        run: &str,
        n: usize,
        stretches: usize,
        take: &mut dyn FnMut(u64, i64, Event),
    ) -> Option<StoreError> {
        let (from, to) = Stretch::bounds(n, stretches);
        let mut stop = None;
        let read = store.read_journal_raw(run, from, &mut |r| {
            let seq = r.seq();
            match Stretch::row(run, r, to) {
                Row::Event(seq, at, event) => take(seq, at, event),
                Row::Stop(e) => stop = Some(e),
                Row::Past => {}
            }
            if stop.is_none() && to.is_none_or(|to| seq < to) {
                Flow::Continue
            } else {
                Flow::Stop
            }
        });
        read.err().or(stop)
    }

    /// Row `r` decoded, unless it lies at or past `to`.
    fn row(run: &str, r: RawJournalRow<'_>, to: Option<u64>) -> Row {
        if to.is_some_and(|to| r.seq() >= to) {
            return Row::Past;
        }
        let hole = |seq, message: String| {
            Row::Stop(StoreError::Hole {
                run: run.to_string(),
                seq,
                message,
            })
        };
        match r {
            RawJournalRow::Hole { seq, message } => hole(seq, message.to_string()),
            RawJournalRow::Event(r) => match Event::from_raw(&r) {
                Ok(event) => Row::Event(r.seq, r.at, event),
                Err(message) => hole(r.seq, message),
            },
        }
    }
}

impl Recording {
    /// Lets go of the recording; for a flow of many steps its FlowSpec and its index are freed
    /// on two threads (each is hundreds of thousands of allocations, and freeing them took a
    /// twentieth of a replay).
    pub fn free(self) {
        let Recording { spec, idx, .. } = self;
        if spec.steps.len() < BIG_FLOW {
            return;
        }
        std::thread::scope(|scope| {
            scope.spawn(move || drop(spec));
            drop(idx);
        });
    }

    /// A recording of run `run` made of `events` (time and event, in journal order) rather
    /// than read from a store: what a cassette stands for. The first event is `run_started`.
    pub fn from_events(
        run: RunRow,
        spec: Arc<FlowSpec>,
        inputs: Map<String, Value>,
        env: Map<String, Value>,
        events: Vec<(i64, Event)>,
    ) -> Result<Recording, Refusal> {
        let Some((started_at, Event::RunStarted(started))) = events.first().cloned() else {
            return Err(Refusal::Store(StoreError::Hole {
                run: run.id.clone(),
                seq: 0,
                message: "the journal does not begin with run_started".into(),
            }));
        };
        let mut idx = Index::new(&spec);
        let length = events.len() as u64;
        for (seq, (at, event)) in events.into_iter().enumerate() {
            idx.add(seq as u64, at, event);
        }
        Ok(Recording {
            run,
            spec,
            started,
            started_at,
            inputs,
            env,
            length,
            idx,
        })
    }
}

/// How many values the machines put a replay keeps aside before it hashes them into its table
/// (see `Replayer::computed`).
const COMPUTED_AT_MOST: usize = 1 << 16;

/// How many steps make a flow big enough for a replay to make its first machine on a thread of
/// its own (below it, a thread costs more than it saves).
const BIG_FLOW: usize = 2048;

/// How many of the record's next results a replay reads along with one it lacks, and how many
/// the thread reading ahead (see [`read_ahead`]) reads at a time.
const READ_AHEAD: usize = 512;

/// How many batches of [`READ_AHEAD`] values the thread reading ahead may have read that the
/// replay has not taken yet.
const READ_AHEAD_BATCHES: usize = 4;

/// Batches of the record's results (digest, value; `None` when the store lacks it), in the
/// record's order.
type ReadAhead<'a> = std::sync::mpsc::Receiver<Vec<(&'a str, Option<Value>)>>;

/// Reads the values of the record's results on a thread of `scope`, in the record's order, a
/// batch at a time, while the replay works out its calls: a replay asks for them in about
/// that order, so most are at hand when asked for instead of read then. `None` for a record
/// too short to be worth a thread. The thread stops at the end of the record, at an error
/// (the replay then reads what it lacks itself, and meets the error there), or once the
/// receiver is dropped.
fn read_ahead<'scope, 'a: 'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    store: &'a dyn StoreRead,
    idx: &'a Index,
) -> Option<ReadAhead<'a>> {
    if idx.results.len() < 2 * READ_AHEAD {
        return None;
    }
    let (batches, taken) = std::sync::mpsc::sync_channel(READ_AHEAD_BATCHES);
    scope.spawn(move || {
        let mut seen: HashSet<&str> = HashSet::default();
        for keys in idx.results.chunks(READ_AHEAD) {
            let mut digests: Vec<&str> = keys
                .iter()
                .filter_map(|k| idx.result_digest(k))
                .filter(|d| seen.insert(d))
                .collect();
            // In the index's order: neighbouring lookups share its pages.
            digests.sort_unstable();
            let Ok(values) = store.get_values(&digests) else {
                return;
            };
            if batches
                .send(digests.into_iter().zip(values).collect())
                .is_err()
            {
                return;
            }
        }
    });
    Some(taken)
}

/// A call: its step's number in the record (`Index::numbers`), `foreach` index and attempt. A
/// number rather than the step's name, so that looking a call up allocates nothing.
type CallKey = (u32, Option<u32>, u32);
/// A timer or signal wait: step and `foreach` index.
type WaitKey = (String, Option<u32>);

#[derive(Clone, Debug)]
enum RecResult {
    Ok {
        seq: u64,
        at: i64,
        digest: String,
    },
    /// Boxed: failures are few, and the index's table of calls holds one of these per call.
    Err {
        seq: u64,
        at: i64,
        error: Box<RunError>,
    },
}

#[derive(Clone, Debug, Default)]
struct RecCall {
    inputs: Option<String>,
    result: Option<RecResult>,
}

#[derive(Clone, Debug, PartialEq)]
enum RecStep {
    Succeeded(String),
    Skipped,
    Failed,
}

/// A signal the record says a wait received.
#[derive(Clone, Debug)]
struct RecSignal {
    /// When it was delivered.
    at: i64,
    /// The sequence number of the `signal_received` event.
    seq: u64,
    /// Its number among the run's signals.
    number: u64,
    name: String,
    payload: String,
}

/// One ending of the record (`run_finished`); a redriven run has several.
#[derive(Clone, Debug)]
struct RecFinish {
    seq: u64,
    at: i64,
    status: String,
    output: Option<String>,
    error: Option<RunError>,
}

/// The record, indexed by what a replay asks. Steps are numbered by their place in the
/// recorded flow (a name the flow lacks, which only a damaged record holds, after them), so
/// that what is kept of each step is a place in a vector rather than an entry of a table
/// keyed by its name: filling, reading and dropping the index costs a few vectors.
#[derive(Clone, Debug, Default)]
struct Index {
    /// Each step id's number (shared with a fork's [`History`]).
    numbers: Arc<HashMap<String, u32>>,
    /// Every recorded call (shared with a fork's [`History`]).
    calls: Arc<HashMap<CallKey, RecCall>>,
    /// When each timer fired.
    timers: HashMap<WaitKey, i64>,
    /// The signal each wait received.
    signals: HashMap<WaitKey, RecSignal>,
    /// When each signal wait failed for its deadline.
    expired: HashMap<WaitKey, i64>,
    /// Each step's last outcome, by number (shared with a fork's [`History`]).
    steps: Arc<Vec<Option<RecStep>>>,
    /// By number: whether the record says the step failed at some point.
    failed: Vec<bool>,
    /// By number: when the step's first event happened (its activation).
    first_at: Vec<Option<i64>>,
    /// By number: the sequence number of the step's `step_succeeded`.
    done_seq: Vec<Option<u64>>,
    /// Each time the run ended, in order (the last is how it ends now).
    finishes: Vec<RecFinish>,
    /// Each redrive after an ending: its sequence number and time.
    redrives: Vec<(u64, i64)>,
    /// Each successful call, in the record's order: whose results a replay reads ahead.
    results: Vec<CallKey>,
    /// Whether the run was ever taken up again (`run_resumed`: after a park or a redrive).
    resumed: bool,
}

impl Index {
    /// An index of a record of `spec`, its steps numbered in the flow's order.
    fn new(spec: &FlowSpec) -> Index {
        let mut idx = Index::default();
        let n = spec.steps.len();
        Arc::make_mut(&mut idx.numbers).reserve(n);
        Arc::make_mut(&mut idx.steps).reserve(n);
        idx.failed.reserve(n);
        idx.first_at.reserve(n);
        idx.done_seq.reserve(n);
        for s in &spec.steps {
            idx.number(&s.id);
        }
        idx
    }

    /// The number of step `step`, given one if it has none yet.
    fn number(&mut self, step: &str) -> u32 {
        if let Some(&n) = self.numbers.get(step) {
            return n;
        }
        let n = self.numbers.len() as u32;
        Arc::make_mut(&mut self.numbers).insert(step.to_string(), n);
        Arc::make_mut(&mut self.steps).push(None);
        self.failed.push(false);
        self.first_at.push(None);
        self.done_seq.push(None);
        n
    }

    /// Numbers the steps again by their place in `spec` (a name the flow lacks after them, in
    /// the order they had), for an index filled before the flow was read: what reads the index
    /// finds a step of the recorded flow at its place. When the record named the flow's steps
    /// in the flow's order (a chain, one `foreach`), the calls and vectors stay as they are.
    /// Otherwise a pass over the steps and calls moves each to its new number.
    fn renumber(&mut self, spec: &FlowSpec) {
        let old = self.numbers.len();
        // The record named the first of the flow's steps, in the flow's order: the numbers
        // hold, and the flow's other steps follow them, as `Index::new` would number them.
        let in_order = spec.steps.get(..old).is_some_and(|first| {
            first
                .iter()
                .enumerate()
                .all(|(place, s)| self.numbers.get(&s.id) == Some(&(place as u32)))
        });
        if in_order {
            for s in &spec.steps[old..] {
                self.number(&s.id);
            }
            return;
        }
        // `to[old number]` is the new one.
        let mut to = vec![u32::MAX; old];
        let mut numbers: HashMap<String, u32> =
            HashMap::with_capacity_and_hasher(old.max(spec.steps.len()), Default::default());
        for s in &spec.steps {
            let next = numbers.len() as u32;
            if let std::collections::hash_map::Entry::Vacant(v) = numbers.entry(s.id.clone()) {
                v.insert(next);
                if let Some(&n) = self.numbers.get(&s.id) {
                    to[n as usize] = next;
                }
            }
        }
        for (n, name) in self.names().into_iter().enumerate() {
            if to[n] == u32::MAX {
                to[n] = numbers.len() as u32;
                numbers.insert(name.to_string(), to[n]);
            }
        }
        let places = numbers.len();
        fn moved<T: Clone>(v: &mut Vec<T>, to: &[u32], places: usize, empty: T) {
            let mut out = vec![empty; places];
            for (n, x) in std::mem::take(v).into_iter().enumerate() {
                out[to[n] as usize] = x;
            }
            *v = out;
        }
        moved(Arc::make_mut(&mut self.steps), &to, places, None);
        moved(&mut self.failed, &to, places, false);
        moved(&mut self.first_at, &to, places, None);
        moved(&mut self.done_seq, &to, places, None);
        let key = |(n, index, attempt): CallKey| (to[n as usize], index, attempt);
        let calls = std::mem::take(Arc::make_mut(&mut self.calls));
        self.calls = Arc::new(calls.into_iter().map(|(k, c)| (key(k), c)).collect());
        for k in &mut self.results {
            *k = key(*k);
        }
        self.numbers = Arc::new(numbers);
    }

    /// The step ids by number: for messages only (the index keeps each name once, in
    /// `numbers`).
    fn names(&self) -> Vec<&str> {
        let mut names = vec![""; self.numbers.len()];
        for (name, &n) in self.numbers.iter() {
            names[n as usize] = name;
        }
        names
    }

    /// The number of step `step`, if the record names it.
    fn find(&self, step: &str) -> Option<u32> {
        self.numbers.get(step).copied()
    }

    /// How step `step` last ended in the record, if it did.
    fn outcome(&self, step: &str) -> Option<&RecStep> {
        self.steps[self.find(step)? as usize].as_ref()
    }

    /// The digest of the recorded result of call `key`, if it succeeded.
    fn result_digest(&self, key: &CallKey) -> Option<&str> {
        match self.calls.get(key)?.result.as_ref()? {
            RecResult::Ok { digest, .. } => Some(digest),
            RecResult::Err { .. } => None,
        }
    }

    /// Takes in the record's next event.
    fn add(&mut self, seq: u64, at: i64, event: Event) {
        let x = self;
        let first = match &event {
            Event::StepStarted { step, .. }
            | Event::StepSucceeded { step, .. }
            | Event::StepSkipped { step, .. }
            | Event::StepFailed { step, .. }
            | Event::TimerStarted { step, .. }
            | Event::SignalAwaited { step, .. } => Some(x.number(step) as usize),
            _ => None,
        };
        if let Some(n) = first
            && x.first_at[n].is_none()
        {
            x.first_at[n] = Some(at);
        }
        match event {
            Event::StepStarted {
                step,
                index,
                attempt,
                inputs,
                ..
            } => {
                let n = x.number(&step);
                let c = Arc::make_mut(&mut x.calls)
                    .entry((n, index, attempt))
                    .or_default();
                c.inputs = Some(inputs);
            }
            Event::CallSucceeded {
                step,
                index,
                attempt,
                output: digest,
            }
            | Event::EffectRecorded {
                step,
                index,
                attempt,
                result: digest,
                ..
            } => {
                let key = (x.number(&step), index, attempt);
                x.results.push(key);
                let c = Arc::make_mut(&mut x.calls).entry(key).or_default();
                c.result = Some(RecResult::Ok { seq, at, digest });
            }
            Event::CallFailed {
                step,
                index,
                attempt,
                error,
                ..
            } => {
                if error.code == "signal.timeout" {
                    x.expired.insert((step, index), at);
                } else if let Some(c) = x
                    .find(&step)
                    .and_then(|n| Arc::make_mut(&mut x.calls).get_mut(&(n, index, attempt)))
                {
                    c.result = Some(RecResult::Err {
                        seq,
                        at,
                        error: Box::new(error),
                    });
                }
            }
            Event::TimerFired { step, index, .. } => {
                x.timers.insert((step, index), at);
            }
            Event::SignalReceived {
                step,
                index,
                name,
                signal,
                payload,
            } => {
                x.signals.insert(
                    (step, index),
                    RecSignal {
                        at,
                        seq,
                        number: signal,
                        name,
                        payload,
                    },
                );
            }
            Event::StepSucceeded { step, output, .. } => {
                let n = x.number(&step) as usize;
                x.done_seq[n] = Some(seq);
                Arc::make_mut(&mut x.steps)[n] = Some(RecStep::Succeeded(output));
            }
            Event::StepSkipped { step, .. } => {
                let n = x.number(&step) as usize;
                Arc::make_mut(&mut x.steps)[n] = Some(RecStep::Skipped);
            }
            Event::StepFailed { step, .. } => {
                let n = x.number(&step) as usize;
                Arc::make_mut(&mut x.steps)[n] = Some(RecStep::Failed);
                x.failed[n] = true;
            }
            Event::RunFinished {
                status,
                output,
                error,
            } => x.finishes.push(RecFinish {
                seq,
                at,
                status,
                output,
                error,
            }),
            // A run is taken up again after an ending only by a redrive.
            Event::RunResumed { .. } if !x.finishes.is_empty() => {
                x.resumed = true;
                let last = x.finishes.last().map_or(0, |f| f.seq);
                if x.redrives.last().is_none_or(|r| r.0 < last) {
                    x.redrives.push((seq, at));
                }
            }
            Event::RunResumed { .. } => x.resumed = true,
            _ => {}
        }
    }

    /// How the run last ended, unless a redrive took it up again since.
    fn finished(&self) -> Option<&RecFinish> {
        let last = self.finishes.last()?;
        self.redrives.iter().all(|r| r.0 < last.seq).then_some(last)
    }
}

/// Where a replay first differed from its record.
#[derive(Clone, Debug, PartialEq)]
pub struct Divergence {
    /// The step (none for the run's output or status).
    pub step: Option<String>,
    /// The `foreach` index, for a call.
    pub index: Option<u32>,
    /// What differs, in words.
    pub what: String,
    /// Where the step is declared in the flow's source.
    pub span: Option<SourceSpan>,
    /// The recorded value, when there is one.
    pub recorded: Option<Value>,
    /// The value the replay computed, when there is one.
    pub replayed: Option<Value>,
}

/// What a replay found.
#[derive(Clone, Debug)]
pub struct ReplayReport {
    /// How the replay ended: `succeeded`, `failed`, `canceled` or `waiting` (the record ends
    /// waiting), or `diverged`. A redriven record is followed to its final ending.
    pub status: String,
    /// The output it computed, when it succeeded.
    pub output: Option<Value>,
    /// The error it ended with, when it failed.
    pub error: Option<RunError>,
    /// The first difference from the record, if any: then the replay did not reproduce it.
    pub divergence: Option<Divergence>,
    /// Calls answered from the record.
    pub calls: usize,
    /// Values the replay canonicalised and hashed (a recorded result is taken with the
    /// digest the record gives it, never hashed again).
    pub digests: u64,
}

/// How to replay.
#[derive(Clone, Debug, Default)]
pub struct ReplayOptions {
    /// Compare every recomputed step output and every call's inputs digest with the record.
    pub verify: bool,
    /// Builtins whose results are changed on purpose (a test's fault injection).
    pub faults: Vec<String>,
}

/// Replays run `run` from `store`, which it only reads.
pub fn replay(
    store: &dyn StoreRead,
    run: &str,
    opts: &ReplayOptions,
    progress: &dyn ProgressSink,
) -> Result<ReplayReport, Refusal> {
    let rec = Recording::load(store, run)?;
    let report = replay_recording(store, &rec, opts, progress);
    rec.free();
    report
}

/// Replays `rec`, loaded from `store` (which it only reads): [`replay`] for a caller that
/// holds the recording already, so the run's FlowSpec is not read and parsed twice.
pub fn replay_recording(
    store: &dyn StoreRead,
    rec: &Recording,
    opts: &ReplayOptions,
    progress: &dyn ProgressSink,
) -> Result<ReplayReport, Refusal> {
    let spec = rec.spec.clone();
    std::thread::scope(|scope| {
        let mut r = Replayer::new(store, rec, spec, Mode::Replay(opts.verify), progress, |s| {
            s.faults = opts.faults.clone()
        });
        r.read_ahead = read_ahead(scope, store, &rec.idx);
        finish(r, opts.verify)
    })
}

/// Runs `spec` against a recording that stands for a cassette (`reel test`): every call is
/// answered from it by step, `foreach` index and attempt when its inputs are the recorded
/// ones, in the recorded time; a call it does not hold, a recorded call never made, or an
/// ending other than the recorded one is the [`Divergence`]. Pure steps are not compared:
/// only what the flow asks of the world and what it returns.
pub fn test_against(
    store: &dyn StoreRead,
    rec: &Recording,
    spec: Arc<FlowSpec>,
    faults: &[String],
    progress: &dyn ProgressSink,
) -> Result<ReplayReport, Refusal> {
    std::thread::scope(|scope| {
        let mut r = Replayer::new(store, rec, spec, Mode::Test, progress, |s| {
            s.faults = faults.to_vec()
        });
        r.read_ahead = read_ahead(scope, store, &rec.idx);
        finish(r, true)
    })
}

/// Drives `r` to its end and compares the ending (and, when `strict`, the calls never made)
/// with the record.
fn finish(mut r: Replayer<'_>, strict: bool) -> Result<ReplayReport, Refusal> {
    let ending = r.run()?;
    let calls = r.answered;
    let mut divergence = r.divergence.take();
    if divergence.is_none() && strict {
        divergence = r.unmade_call();
    }
    let (status, output, error) = match ending {
        Some(Ending::Succeeded { output, .. }) => ("succeeded", Some(output), None),
        Some(Ending::Failed(e)) => ("failed", None, Some(e)),
        Some(Ending::Canceled(e)) => ("canceled", None, Some(e)),
        Some(Ending::Quarantined(e)) => ("quarantined", None, Some(e)),
        Some(Ending::Waiting) => ("waiting", None, None),
        None => ("diverged", None, None),
    };
    if divergence.is_none() {
        divergence = r.compare_ending(status, output.as_ref(), error.as_ref())?;
    }
    if divergence.is_none() && status == "diverged" {
        divergence = Some(Divergence {
            step: None,
            index: None,
            what: "the replay stopped before the run's end: it waits for something the record does not hold".into(),
            span: None,
            recorded: None,
            replayed: None,
        });
    }
    Ok(ReplayReport {
        status: if divergence.is_some() {
            "diverged".into()
        } else {
            status.into()
        },
        output,
        error,
        divergence,
        calls,
        digests: r.digests,
    })
}

/// A step's verdict in a fork's dry run.
#[derive(Clone, Debug, PartialEq)]
pub struct StepPlan {
    /// The step (of the corrected flow, or of the parent's for a removed step).
    pub step: String,
    /// Whether the fork reuses the parent's record for it.
    pub reused: bool,
    /// Why it runs live (for the steps that do).
    pub reason: Option<String>,
    /// Calls whose recorded results would be reused.
    pub reused_calls: usize,
    /// Calls that would run live.
    pub live_calls: usize,
}

/// What a fork with a corrected flow would do: one verdict per step.
#[derive(Clone, Debug, PartialEq)]
pub struct ForkPlan {
    /// The parent run.
    pub parent: String,
    /// Per step, in the corrected flow's order, then the parent's removed steps.
    pub steps: Vec<StepPlan>,
}

impl ForkPlan {
    /// Whether the whole history is reused.
    pub fn compatible(&self) -> bool {
        self.steps.iter().all(|s| s.reused)
    }

    /// The first step that runs live, if any.
    pub fn first_divergence(&self) -> Option<&StepPlan> {
        self.steps.iter().find(|s| !s.reused)
    }
}

/// The dry run of a fork of `rec` with `spec`: the fork's compatibility check, run without
/// calling anything.
pub fn plan_fork(
    store: &dyn StoreRead,
    rec: &Recording,
    spec: Arc<FlowSpec>,
    inputs: Map<String, Value>,
) -> Result<ForkPlan, Refusal> {
    let history = History::new(rec);
    let mut r = Replayer::new(
        store,
        rec,
        spec.clone(),
        Mode::Plan(Box::new(history)),
        &crate::deps::NoProgress,
        |s| {
            s.inputs = inputs;
            // Held live calls must not keep a `foreach`'s other elements from being looked at.
            s.max_parallel = usize::MAX;
        },
    );
    r.run()?;
    Ok(r.verdicts(&spec))
}

/// A parent's recorded successful calls and received signals, as a fork reuses them.
#[derive(Clone, Debug)]
pub struct History {
    parent: String,
    /// The parent's step ids by number, as its record numbers them.
    numbers: Arc<HashMap<String, u32>>,
    /// The parent's flow (for each call's tool: a step's number is its place in it).
    spec: Arc<FlowSpec>,
    /// The record's calls, shared with it rather than copied (a call's inputs and output are
    /// two digests each).
    recorded: Arc<HashMap<CallKey, RecCall>>,
    /// By step number and `foreach` index: the attempt whose success stands.
    calls: HashMap<(u32, Option<u32>), u32>,
    signals: HashMap<WaitKey, RecSignal>,
    /// How each step last ended, by number.
    steps: Arc<Vec<Option<RecStep>>>,
    /// The parent's `sleep` steps: their value is the time they woke, not data.
    timers: HashSet<String>,
}

/// One successful call of a parent run, as its record holds it.
struct RecordedCall<'h> {
    tool: Option<&'h str>,
    inputs: &'h str,
    output: &'h str,
    seq: u64,
    at: i64,
}

/// A signal a fork carries over from its parent's record.
#[derive(Clone, Debug, PartialEq)]
pub struct CarriedSignal {
    /// Its name.
    pub name: String,
    /// Its payload's digest.
    pub payload: String,
    /// Where the parent recorded receiving it.
    pub from: ReusedFrom,
}

impl History {
    /// The successful calls and received signals of `rec`, by step and `foreach` index.
    pub fn new(rec: &Recording) -> History {
        let success = |c: &RecCall| match (&c.inputs, &c.result) {
            (Some(_), Some(RecResult::Ok { seq, .. })) => Some(*seq),
            _ => None,
        };
        let mut calls: HashMap<(u32, Option<u32>), u32> =
            HashMap::with_capacity_and_hasher(rec.idx.calls.len(), Default::default());
        for (&(n, index, attempt), c) in rec.idx.calls.iter() {
            let Some(seq) = success(c) else { continue };
            // Of several successful attempts of one call, the last recorded stands, whatever
            // order the map gives them in.
            let last = calls.entry((n, index)).or_insert(attempt);
            let last_seq = rec.idx.calls.get(&(n, index, *last)).and_then(success);
            if last_seq.is_some_and(|s| s < seq) {
                *last = attempt;
            }
        }
        History {
            parent: rec.run.id.clone(),
            numbers: rec.idx.numbers.clone(),
            spec: rec.spec.clone(),
            recorded: rec.idx.calls.clone(),
            calls,
            signals: rec.idx.signals.clone(),
            steps: rec.idx.steps.clone(),
            timers: rec
                .spec
                .steps
                .iter()
                .filter(|s| s.kind == reel_flowspec::ToolKind::Timer)
                .map(|s| s.id.clone())
                .collect(),
        }
    }

    /// The parent's result for this call, when a fork may reuse it: same step, same `foreach`
    /// index, same inputs digest and same tool. Returns the output digest and where the parent
    /// recorded it.
    pub fn reusable(
        &self,
        step: &str,
        index: Option<u32>,
        inputs: &str,
        tool: Option<&str>,
    ) -> Option<(String, ReusedFrom)> {
        let (output, from, _) = self.reusable_at(*self.numbers.get(step)?, index, inputs, tool)?;
        Some((output.to_string(), from))
    }

    /// [`History::reusable`] of the step the parent's record numbers `n`, with the time the
    /// parent recorded the result.
    fn reusable_at(
        &self,
        n: u32,
        index: Option<u32>,
        inputs: &str,
        tool: Option<&str>,
    ) -> Option<(&str, ReusedFrom, i64)> {
        let c = self.call_at(n, index)?;
        (same_value(c.inputs, inputs) && c.tool == tool).then(|| {
            (
                c.output,
                ReusedFrom {
                    parent: self.parent.clone(),
                    seq: c.seq,
                },
                c.at,
            )
        })
    }

    /// The signal the parent's wait of this step received, when a fork's wait may take it:
    /// same step, same `foreach` index, same signal name, and every step it depends on ended
    /// as it did in the parent (`ended` gives the fork's outcome of a step: its output digest,
    /// or `None` when skipped; a `sleep` counts as the same once it woke, whenever that was).
    /// An answer given to other upstream values is asked again.
    pub fn carried_signal(
        &self,
        step: &reel_flowspec::StepSpec,
        index: Option<u32>,
        name: &str,
        ended: &dyn Fn(&str) -> Option<Option<String>>,
    ) -> Option<CarriedSignal> {
        let s = self.signals.get(&(step.id.clone(), index))?;
        if s.name != name {
            return None;
        }
        let same_upstream = step.deps.iter().all(|d| match (ended(d), self.outcome(d)) {
            (Some(Some(_)), Some(RecStep::Succeeded(_))) if self.timers.contains(d) => true,
            (Some(Some(a)), Some(RecStep::Succeeded(b))) => same_value(&a, b),
            (Some(None), Some(RecStep::Skipped)) => true,
            _ => false,
        });
        same_upstream.then(|| CarriedSignal {
            name: s.name.clone(),
            payload: s.payload.clone(),
            from: ReusedFrom {
                parent: self.parent.clone(),
                seq: s.seq,
            },
        })
    }

    /// How the parent's step `step` last ended, if it did.
    fn outcome(&self, step: &str) -> Option<&RecStep> {
        let n = self.numbers.get(step)?;
        self.steps.get(*n as usize)?.as_ref()
    }

    /// The parent's successful call of the step its record numbers `n`, and `index`.
    fn call_at(&self, n: u32, index: Option<u32>) -> Option<RecordedCall<'_>> {
        let attempt = *self.calls.get(&(n, index))?;
        let c = self.recorded.get(&(n, index, attempt))?;
        let (Some(inputs), Some(RecResult::Ok { seq, at, digest })) = (&c.inputs, &c.result) else {
            return None;
        };
        Some(RecordedCall {
            // A step's number is its place in the recorded flow (`Index`).
            tool: self
                .spec
                .steps
                .get(n as usize)
                .and_then(|s| s.tool.as_deref()),
            inputs,
            output: digest,
            seq: *seq,
            at: *at,
        })
    }
}

enum Mode {
    /// Replay the record; `true` verifies.
    Replay(bool),
    /// A fork's dry run against the parent's history.
    Plan(Box<History>),
    /// A flow tested against a cassette: calls and the ending are compared, pure steps not.
    Test,
}

/// An answer waiting to be delivered at the time the record gives.
struct Answer {
    seq: u64,
    at: i64,
    returned: Returned,
}

// Answers are delivered in the order the record holds them.
impl PartialEq for Answer {
    fn eq(&self, other: &Self) -> bool {
        self.seq == other.seq
    }
}

impl Eq for Answer {}

impl PartialOrd for Answer {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Answer {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.seq.cmp(&other.seq)
    }
}

struct Replayer<'a> {
    store: &'a dyn StoreRead,
    rec: &'a Recording,
    idx: &'a Index,
    /// The recorded calls this replay made (kept when verifying: [`Self::unmade_call`]).
    made: HashSet<CallKey>,
    /// The place in `spec` of the step whose calls the replay answered last: the events that
    /// follow mostly name it, and comparing one name is cheaper than a lookup.
    recent: usize,
    /// The record's number of each step of `spec` (`None`: the record has no such step).
    numbers: Vec<Option<u32>>,
    mode: Mode,
    spec: Arc<FlowSpec>,
    setup: Setup,
    /// The machine the first drive starts with, made while the rest of the replayer was (see
    /// [`Replayer::new`]).
    first: Option<Machine>,
    progress: &'a dyn ProgressSink,
    /// Values by digest: the record's results keyed by the record's own text of their digest
    /// (nothing allocated per value read).
    values: HashMap<Cow<'a, str>, Value>,
    /// What this replay's machines computed since a machine last asked for values, by digest,
    /// in the order they were put, as canonical JSON: few are ever looked up (a machine asks
    /// for a value it let go of, a message shows one), so they go into `computed_kept` only
    /// when a machine asks or [`COMPUTED_AT_MOST`] are kept, instead of each being hashed into
    /// a table as big as the record; and a value is kept as its text, a few bytes, where its
    /// tree (a call's inputs are an object: a B-tree node of 11 entries) took hundreds, most of
    /// a big replay's fresh memory.
    computed: Vec<(String, String)>,
    /// What the machines computed before a machine last asked for values, by digest.
    computed_kept: HashMap<String, String>,
    /// The fold of the events this replay's machine recorded: a park or a redrive is resumed
    /// from it, as the recorded run was resumed from its journal.
    folded: Folded,
    /// Whether `folded` is kept: in a replay only when the record was resumed, since a
    /// replay resumes only where its record did; one that finds it must resume anyway is
    /// driven again from the start with the fold kept (`Replayer::run`).
    fold: bool,
    /// Set when the replay had to resume without its fold kept.
    needs_fold: bool,
    /// Values the machines of this replay canonicalised and hashed.
    digests: u64,
    /// How many of the record's endings the replay has gone past (a redriven run has one
    /// per redrive before its last).
    ended: usize,
    /// Whether the cancel the record ends this stretch with was handed to the machine.
    cancel_sent: bool,
    now: i64,
    /// Answers of the calls in flight, earliest in the record first.
    answers: BinaryHeap<Reverse<Answer>>,
    answered: usize,
    /// How far in the record's results (`Index::results`) values were read ahead.
    ahead: usize,
    /// The values a thread reads ahead of the replay, while it does (see [`read_ahead`]).
    read_ahead: Option<ReadAhead<'a>>,
    /// Digests the thread reading ahead found the store without: not waited for again.
    absent: HashSet<&'a str>,
    /// Calls the record started and never answered before its cancel: (step, index, attempt).
    held: Vec<(usize, usize, u32)>,
    timers: HashMap<WaitKey, i64>,
    signal_waits: HashSet<WaitKey>,
    /// By place in `spec`: whether the step succeeded or was skipped.
    finished: Vec<bool>,
    /// The place in `spec` of each step id, when `spec` is not the record's flow (whose
    /// numbers, `Index::numbers`, are places in it).
    places: Option<HashMap<String, usize>>,
    /// The steps each step depends on, and those that depend on it, by place in `spec`; the
    /// steps that depend on none.
    deps: Vec<Vec<usize>>,
    dependents: Vec<Vec<usize>>,
    roots: Vec<usize>,
    divergence: Option<Divergence>,
    /// Plan mode, by place in `spec`: each step's calls reused, its calls held live (their
    /// `foreach` indexes), and how it ended.
    reused: Vec<usize>,
    live: Vec<Vec<Option<u32>>>,
    outcomes: Vec<Option<RecStep>>,
}

impl<'a> Replayer<'a> {
    fn new(
        store: &'a dyn StoreRead,
        rec: &'a Recording,
        spec: Arc<FlowSpec>,
        mode: Mode,
        progress: &'a dyn ProgressSink,
        adjust: impl FnOnce(&mut Setup),
    ) -> Self {
        // Secrets are never needed: a call's inputs digest shows them as `{secret:NAME}`, and
        // no call is made. The placeholder scrubs to itself.
        let secrets = spec
            .secrets
            .iter()
            .map(|s| (s.name.clone(), format!("{{secret:{}}}", s.name)))
            .collect();
        // The record numbers the steps of its own flow by their places: a replay's flow is
        // that one; a dry run's or a test's may be another, whose places are looked up here.
        let own = Arc::ptr_eq(&spec, &rec.spec)
            || (rec.spec.steps.len() == spec.steps.len()
                && rec
                    .spec
                    .steps
                    .iter()
                    .zip(&spec.steps)
                    .all(|(a, b)| a.id == b.id));
        let places: Option<HashMap<String, usize>> = (!own).then(|| {
            spec.steps
                .iter()
                .enumerate()
                .map(|(i, s)| (s.id.clone(), i))
                .collect()
        });
        let place = |id: &str| -> Option<usize> {
            match &places {
                Some(p) => p.get(id).copied(),
                None => rec
                    .idx
                    .find(id)
                    .map(|n| n as usize)
                    .filter(|&n| n < spec.steps.len()),
            }
        };
        // A test may park where the record did not (a cassette in virtual time): it folds as
        // it goes, since driving it again would show its progress twice. A dry run shows none:
        // one that parks (a timer or a signal) is driven again with the fold kept, as a replay
        // is, and the many that do not park fold nothing.
        let fold = rec.idx.resumed || matches!(mode, Mode::Test);
        let mut setup = Setup {
            run_id: rec.run.id.clone(),
            spec: spec.clone(),
            seed: rec.started.seed,
            started_at: rec.started_at,
            cwd: PathBuf::from(&rec.started.cwd),
            inputs: rec.inputs.clone(),
            env: rec.env.clone(),
            secrets,
            durability: Durability::Fast,
            max_parallel: 64,
            faults: Vec::new(),
            idempotency_keys: false,
        };
        adjust(&mut setup);
        let plan = matches!(mode, Mode::Plan(_));
        let steps = spec.steps.len();
        let graph = || {
            let mut deps = vec![Vec::new(); steps];
            let mut dependents = vec![Vec::new(); steps];
            let mut roots = Vec::new();
            for (j, s) in spec.steps.iter().enumerate() {
                if s.deps.is_empty() {
                    roots.push(j);
                }
                for d in &s.deps {
                    if let Some(i) = place(d) {
                        dependents[i].push(j);
                        deps[j].push(i);
                    }
                }
            }
            (deps, dependents, roots)
        };
        // For a flow of many steps, making the first machine (its tables of every step) and
        // this replayer's graph of the steps each take milliseconds: they are made on two
        // threads, the machine on one of its own.
        let (first, (deps, dependents, roots)) = if steps >= BIG_FLOW {
            std::thread::scope(|scope| {
                let making = scope.spawn(|| Self::machine_of(setup.clone(), plan));
                let graph = graph();
                (making.join().ok(), graph)
            })
        } else {
            (None, graph())
        };
        Replayer {
            first,
            store,
            rec,
            idx: &rec.idx,
            made: HashSet::with_capacity_and_hasher(rec.idx.calls.len(), Default::default()),
            numbers: match &places {
                None => (0..spec.steps.len() as u32).map(Some).collect(),
                Some(_) => spec.steps.iter().map(|s| rec.idx.find(&s.id)).collect(),
            },
            recent: 0,
            mode,
            spec,
            setup,
            progress,
            values: HashMap::with_capacity_and_hasher(
                rec.idx.results.len().min(READ_AHEAD * 64),
                Default::default(),
            ),
            computed: Vec::new(),
            computed_kept: HashMap::default(),
            folded: Folded::default(),
            fold,
            needs_fold: false,
            digests: 0,
            ended: 0,
            cancel_sent: false,
            now: rec.started_at,
            answers: BinaryHeap::new(),
            answered: 0,
            ahead: 0,
            read_ahead: None,
            absent: HashSet::default(),
            held: Vec::new(),
            timers: HashMap::default(),
            signal_waits: HashSet::default(),
            finished: vec![false; deps.len()],
            places,
            deps,
            dependents,
            roots,
            divergence: None,
            reused: vec![0; steps],
            live: vec![Vec::new(); steps],
            outcomes: vec![None; steps],
        }
    }

    /// The place in `spec` of step `id`.
    fn place(&self, id: &str) -> Option<usize> {
        if self.spec.steps.get(self.recent).is_some_and(|s| s.id == id) {
            return Some(self.recent);
        }
        match &self.places {
            Some(p) => p.get(id).copied(),
            None => self
                .idx
                .find(id)
                .map(|n| n as usize)
                .filter(|&n| n < self.spec.steps.len()),
        }
    }

    /// Step `id` succeeded or was skipped.
    /// Marks step `id` finished; returns its place.
    fn set_finished(&mut self, id: &str) -> Option<usize> {
        let i = self.place(id)?;
        self.finished[i] = true;
        Some(i)
    }

    /// How step `id` ended in this dry run, if it did.
    fn outcome(&self, id: &str) -> Option<&RecStep> {
        self.outcomes[self.place(id)?].as_ref()
    }

    fn verify(&self) -> bool {
        matches!(self.mode, Mode::Replay(true) | Mode::Test)
    }

    fn value(&self, digest: &str) -> Result<Value, Refusal> {
        if let Some(v) = self.values.get(digest) {
            return Ok(v.clone());
        }
        if let Some(text) = self.computed_kept.get(digest) {
            return Ok(parse_value(digest, text)?);
        }
        if let Some(v) = self.store.get_value(digest)? {
            return Ok(v);
        }
        // A value this replay computed and the record never had (a message shows it): rare
        // enough for a look through what was put since the last ask.
        match self.computed.iter().rev().find(|(d, _)| d == digest) {
            Some((_, text)) => Ok(parse_value(digest, text)?),
            None => Err(Refusal::Store(StoreError::MissingValue {
                digest: digest.to_string(),
            })),
        }
    }

    /// Reads the values of `digests` that are not at hand yet in one go, so that a round's
    /// answers cost one visit to the store rather than one each. A value the store lacks is
    /// left out: asking for it later is the error.
    fn prefetch(&mut self, digests: impl Iterator<Item = Cow<'a, str>>) -> Result<(), Refusal> {
        let mut wanted: Vec<Cow<'a, str>> = digests
            .filter(|d| {
                !self.values.contains_key(d.as_ref())
                    && !self.computed_kept.contains_key(d.as_ref())
            })
            .collect();
        if wanted.is_empty() {
            return Ok(());
        }
        // A replay asks for results in about the record's order: the next ones are read
        // along (they would be kept once the machine put them anyway), unless a thread reads
        // them ahead already.
        let idx: &'a Index = self.idx;
        if self.read_ahead.is_none() {
            let end = (self.ahead + READ_AHEAD).min(idx.results.len());
            wanted.extend(
                idx.results[self.ahead..end]
                    .iter()
                    .filter_map(|k| idx.result_digest(k))
                    .filter(|d| !self.values.contains_key(*d))
                    .map(Cow::Borrowed),
            );
            self.ahead = end;
        }
        wanted.sort_unstable();
        wanted.dedup();
        let asked: Vec<&str> = wanted.iter().map(|d| d.as_ref()).collect();
        let found = self.store.get_values(&asked)?;
        for (digest, value) in wanted.into_iter().zip(found) {
            if let Some(value) = value {
                self.values.insert(digest, value);
            }
        }
        Ok(())
    }

    /// Moves the values the machines computed into their table.
    fn keep_computed(&mut self) {
        self.computed_kept.extend(self.computed.drain(..));
    }

    /// Takes the values read ahead so far; while `wait` holds digests not at hand yet, waits
    /// for the batches that follow (the thread reads every recorded result, so only digests of
    /// results are waited for). A value the thread did not deliver is left to [`Self::prefetch`].
    fn take_read_ahead(&mut self, wait: &[&'a str]) {
        let Some(taken) = self.read_ahead.take() else {
            return;
        };
        let mut open = true;
        loop {
            let missing = wait
                .iter()
                .any(|d| !self.values.contains_key(*d) && !self.absent.contains(d));
            let batch = if missing {
                taken.recv().ok()
            } else {
                match taken.try_recv() {
                    Ok(batch) => Some(batch),
                    Err(std::sync::mpsc::TryRecvError::Empty) => break,
                    Err(std::sync::mpsc::TryRecvError::Disconnected) => None,
                }
            };
            let Some(batch) = batch else {
                open = false;
                break;
            };
            for (digest, value) in batch {
                match value {
                    Some(value) => {
                        self.values.entry(Cow::Borrowed(digest)).or_insert(value);
                    }
                    // Asked for, it is the error [`Self::value`] reports.
                    None => {
                        self.absent.insert(digest);
                    }
                }
            }
        }
        if open {
            self.read_ahead = Some(taken);
        }
    }

    /// The record's key of the call of step `step` (a position in `spec`), if the record has
    /// the step.
    fn key(&self, step: usize, index: Option<u32>, attempt: u32) -> Option<CallKey> {
        Some((self.numbers[step]?, index, attempt))
    }

    /// The record's key of a call the replay makes, named as an event names it.
    fn key_of(&self, step: &str, index: Option<u32>, attempt: u32) -> Option<CallKey> {
        Some((self.idx.find(step)?, index, attempt))
    }

    /// The record's key and entry of each of `calls` (a replay or a test; a dry run answers
    /// from the parent's history instead, and gets none): looked up once, for the values to
    /// read and then the answers.
    fn recorded_calls(&self, calls: &[CallStart]) -> Vec<Option<(CallKey, &'a RecCall)>> {
        let idx: &'a Index = self.idx;
        if matches!(self.mode, Mode::Plan(_)) {
            return vec![None; calls.len()];
        }
        calls
            .iter()
            .map(|c| {
                let index = self.spec.steps[c.step]
                    .foreach
                    .as_ref()
                    .map(|_| c.index as u32);
                let key = self.key(c.step, index, c.attempt)?;
                Some((key, idx.calls.get(&key)?))
            })
            .collect()
    }

    /// The digests of the recorded results (and failures' causes) that answering `calls` reads,
    /// and of those the results that succeeded: the ones the thread reading ahead delivers.
    /// Borrowed from the record (owned in a dry run, whose history the replayer holds).
    fn recorded_results(
        &self,
        calls: &[CallStart],
        recorded: &[Option<(CallKey, &'a RecCall)>],
    ) -> (Vec<Cow<'a, str>>, Vec<&'a str>) {
        let mut read = Vec::with_capacity(calls.len());
        let mut ok = Vec::with_capacity(calls.len());
        for (c, r) in calls.iter().zip(recorded) {
            match &self.mode {
                Mode::Replay(_) | Mode::Test => {
                    match r.and_then(|(_, call)| call.result.as_ref()) {
                        Some(RecResult::Ok { digest, .. }) => {
                            read.push(Cow::Borrowed(digest.as_str()));
                            ok.push(digest.as_str());
                        }
                        Some(RecResult::Err { error, .. }) => {
                            read.extend(error.cause.as_deref().map(Cow::Borrowed));
                        }
                        None => {}
                    }
                }
                Mode::Plan(history) => {
                    let step = &self.spec.steps[c.step];
                    let index = step.foreach.as_ref().map(|_| c.index as u32);
                    let tool = step.tool.as_deref();
                    read.extend(
                        self.numbers[c.step]
                            .and_then(|n| history.reusable_at(n, index, &c.inputs, tool))
                            .map(|(digest, _, _)| Cow::Owned(digest.to_string())),
                    );
                }
            }
        }
        (read, ok)
    }

    /// The value of `digest` for a message, if it can be found.
    fn shown(&self, digest: &str) -> Option<Value> {
        self.value(digest).ok()
    }

    fn span(&self, step: &str) -> Option<SourceSpan> {
        self.spec
            .steps
            .iter()
            .find(|s| s.id == step)
            .map(|s| s.span.clone())
    }

    fn diverge(
        &mut self,
        step: Option<&str>,
        index: Option<u32>,
        what: String,
        recorded: Option<Value>,
        replayed: Option<Value>,
    ) {
        if self.divergence.is_none() {
            self.divergence = Some(Divergence {
                step: step.map(str::to_string),
                index,
                what,
                span: step.and_then(|s| self.span(s)),
                recorded,
                replayed,
            });
        }
    }

    /// Drives a machine from the start to its end (or to where the record runs out); again,
    /// with the fold kept, when the first drive had to resume without it.
    fn run(&mut self) -> Result<Option<Ending>, Refusal> {
        let ending = self.drive()?;
        if !self.needs_fold {
            return Ok(ending);
        }
        self.restart();
        self.drive()
    }

    /// Forgets what a drive found, to drive again from the start with the fold kept (the
    /// values read stay: they are the record's, by digest).
    fn restart(&mut self) {
        self.made.clear();
        self.folded = Folded::default();
        self.fold = true;
        self.needs_fold = false;
        self.ended = 0;
        self.cancel_sent = false;
        self.now = self.rec.started_at;
        self.answers.clear();
        self.answered = 0;
        self.held.clear();
        self.timers.clear();
        self.signal_waits.clear();
        self.finished.iter_mut().for_each(|f| *f = false);
        self.divergence = None;
        self.reused.fill(0);
        self.live.iter_mut().for_each(Vec::clear);
        self.outcomes.fill(None);
    }

    /// A new machine of this replay; a dry run's ignores each step's `concurrency` (see
    /// [`plan_fork`]).
    fn machine(&self) -> Machine {
        Self::machine_of(self.setup.clone(), matches!(self.mode, Mode::Plan(_)))
    }

    /// A new machine of `setup`, for a dry run when `plan`.
    fn machine_of(setup: Setup, plan: bool) -> Machine {
        let mut m = Machine::new(setup);
        if plan {
            m.lift_concurrency();
        }
        m
    }

    /// Drives a machine from the start to its end (or to where the record runs out).
    fn drive(&mut self) -> Result<Option<Ending>, Refusal> {
        let mut m = match self.first.take() {
            Some(m) => m,
            None => self.machine(),
        };
        let ending = self.drive_from(&mut m);
        self.digests += m.digests();
        ending
    }

    /// Drives `m`, just made, to its end; a resume or redrive goes on with a new machine.
    fn drive_from(&mut self, m: &mut Machine) -> Result<Option<Ending>, Refusal> {
        self.now = self.round_time(None, self.rec.started_at);
        m.handle(self.now, Input::Started);
        // A bound against a machine and a record that never agree to end.
        for _ in 0..(self.rec.length as usize * 8 + 10_000) {
            if self.divergence.is_some() {
                return Ok(None);
            }
            let Some(cmd) = m.poll_command() else {
                return Ok(None);
            };
            match cmd {
                Command::PutValue { digest, text, .. } => {
                    self.computed.push((digest, text));
                    // Bounded: a value put again and again (a `foreach` of equal elements)
                    // is one entry of the table, not one per put.
                    if self.computed.len() >= COMPUTED_AT_MOST {
                        self.keep_computed();
                    }
                }
                Command::Append(events) => {
                    for e in events {
                        self.check(&e);
                        if self.fold {
                            self.folded.push(e.at, e.event);
                        }
                    }
                }
                Command::Progress(p) => {
                    // A park in the middle of the record is no news: the run went on.
                    if !matches!(
                        &p,
                        Progress::StepDone {
                            state: StepEnd::Waiting,
                            ..
                        }
                    ) {
                        self.progress.report(p);
                    }
                }
                Command::LoadValues(digests) => {
                    self.keep_computed();
                    self.take_read_ahead(&[]);
                    self.prefetch(digests.iter().map(|d| Cow::Owned(d.clone())))?;
                    let values = digests
                        .iter()
                        .map(|d| self.value(d))
                        .collect::<Result<Vec<_>, _>>()?;
                    m.handle(self.now, Input::ValuesLoaded(values));
                }
                Command::FetchSignals(_) => {
                    let arrived = self.arrived_signals()?;
                    m.handle(self.now, Input::Signals(arrived));
                }
                Command::Launch(calls) => {
                    let recorded = self.recorded_calls(&calls);
                    let (wanted, results) = self.recorded_results(&calls, &recorded);
                    if self.read_ahead.is_some() {
                        self.take_read_ahead(&results);
                    }
                    self.prefetch(wanted.into_iter())?;
                    for (c, r) in calls.into_iter().zip(recorded) {
                        self.answer(c, r)?;
                    }
                    m.handle(self.now, Input::Launched(Vec::new()));
                }
                Command::Wait { deadline, .. } => {
                    let wake = deadline.map(|d| self.wake_time(d));
                    if self.cancel_due(self.answers.peek().map(|a| &a.0), wake) {
                        // The record was canceled here, while the run worked: its next look
                        // at the store found the request.
                        self.cancel_sent = true;
                        m.handle(
                            self.now,
                            Input::Tick {
                                poll: Some(Poll {
                                    cancel_requested: true,
                                }),
                            },
                        );
                        continue;
                    }
                    let due = |a: &Answer| wake.is_none_or(|w| a.at <= w);
                    if !self.answers.peek().is_some_and(|a| due(&a.0)) {
                        match wake {
                            Some(w) => {
                                self.now = self.now.max(w);
                                m.handle(self.now, tick());
                                continue;
                            }
                            // Only calls that run live are left (a dry run), or nothing at all.
                            None => return Ok(None),
                        }
                    }
                    // The results due now go in together, in the record's order, as the live
                    // driver hands over what finished while it waited; a batch ends with a
                    // step's end (the next round's time depends on it) or before a failure
                    // (which may start a backoff or be the record's cancel).
                    let mut ended = None;
                    while let Some(Reverse(a)) = self.answers.pop() {
                        self.now = self.now.max(a.at);
                        let step = a.returned.step;
                        // The record ends a step in the event after its last call's result.
                        let ends = self.numbers[step].and_then(|n| self.idx.done_seq[n as usize])
                            == Some(a.seq + 1);
                        let failed = a.returned.outcome.is_err();
                        m.handle(self.now, Input::CallReturned(a.returned));
                        if ends {
                            ended = Some(step);
                            break;
                        }
                        let go_on = self
                            .answers
                            .peek()
                            .is_some_and(|n| due(&n.0) && n.0.returned.outcome.is_ok());
                        if failed || !go_on {
                            break;
                        }
                    }
                    self.now = self.round_time(ended, self.now);
                    m.handle(self.now, tick());
                }
                Command::Finish(Ending::Waiting) => {
                    let wake = self.next_wake();
                    if let Some(f) = self.recorded_ending("canceled")
                        && wake.is_none_or(|w| w > f.at)
                    {
                        // The record was canceled while it waited (`reel cancel` of a parked
                        // run, which records the ending without the engine).
                        let error = f.error.clone().unwrap_or_else(|| {
                            RunError::new("run.canceled", "the run was canceled with `reel cancel`")
                        });
                        self.now = self.now.max(f.at);
                        self.folded.push(
                            f.at,
                            Event::RunFinished {
                                status: "canceled".into(),
                                output: None,
                                error: Some(error.clone()),
                            },
                        );
                        let ending = Ending::Canceled(error);
                        match self.redriven(&ending) {
                            Some(m2) => {
                                self.digests += m.digests();
                                *m = m2;
                            }
                            None => return Ok(Some(ending)),
                        }
                        continue;
                    }
                    // The recorded run parked here and went on when its timer was due or its
                    // signal came: resume from what this replay recorded, as it did.
                    let Some(t) = wake else {
                        return Ok(Some(Ending::Waiting));
                    };
                    if !self.fold {
                        self.needs_fold = true;
                        return Ok(None);
                    }
                    self.now = self.now.max(t);
                    self.digests += m.digests();
                    *m = self.resumed("replay");
                }
                Command::Finish(ending) => match self.redriven(&ending) {
                    Some(m2) => {
                        self.digests += m.digests();
                        *m = m2;
                    }
                    None => return Ok(Some(ending)),
                },
                Command::CancelCalls => self.cancel_held(),
                Command::Log { .. }
                | Command::Sync
                | Command::ConsumeSignal { .. }
                | Command::ClearSignalPending
                | Command::Park { .. } => {}
            }
        }
        Ok(None)
    }

    /// A machine resumed from what this replay recorded so far, as the recorded run was
    /// resumed from its journal.
    fn resumed(&self, reason: &str) -> Machine {
        let mut m = self.machine();
        m.handle(
            self.now,
            Input::Resumed {
                folded: Box::new(self.folded.clone()),
                reason: reason.into(),
                by: String::new(),
            },
        );
        m
    }

    /// The record's ending of the stretch the replay is in, when it ended with `status` (a
    /// replay only: a dry run follows no ending of the parent).
    fn recorded_ending(&self, status: &str) -> Option<&'a RecFinish> {
        if !matches!(self.mode, Mode::Replay(_)) {
            return None;
        }
        self.idx
            .finishes
            .get(self.ended)
            .filter(|f| f.status == status)
    }

    /// After the replay ended as the record's stretch ended: when the record goes on with a
    /// redrive (`reel resume` of a failed or canceled run), the machine that continues it.
    fn redriven(&mut self, ending: &Ending) -> Option<Machine> {
        let status = match ending {
            Ending::Failed(_) => "failed",
            Ending::Canceled(_) => "canceled",
            _ => return None,
        };
        let f = self.recorded_ending(status)?;
        let &(_, at) = self.idx.redrives.iter().find(|r| r.0 > f.seq)?;
        if !self.fold {
            self.needs_fold = true;
            return None;
        }
        self.ended += 1;
        self.cancel_sent = false;
        self.now = self.now.max(at);
        Some(self.resumed("redrive"))
    }

    /// Stops the calls held without an answer as the live driver's cancel stops calls in
    /// flight: each returns `tool.canceled`, at the record's cancel.
    fn cancel_held(&mut self) {
        let (seq, at) = self
            .recorded_ending("canceled")
            .map_or((u64::MAX, self.now), |f| (f.seq, f.at.max(self.now)));
        for (step, index, attempt) in std::mem::take(&mut self.held) {
            self.answers.push(Reverse(Answer {
                seq,
                at,
                returned: Returned {
                    step,
                    index,
                    attempt,
                    outcome: Err(ToolError {
                        code: reel_tools::codes::CANCELED,
                        message: "the call was canceled".into(),
                        retryable: false,
                        cause: None,
                        log: String::new(),
                    }),
                    reused: None,
                    digest: None,
                },
            }));
        }
    }

    /// Whether the record's cancel comes before what the replay would hand the machine next:
    /// before the first call the cancel stopped, or once nothing recorded before the ending
    /// is left.
    fn cancel_due(&self, next: Option<&Answer>, wake: Option<i64>) -> bool {
        if self.cancel_sent {
            return false;
        }
        let Some(f) = self.recorded_ending("canceled") else {
            return false;
        };
        match next {
            Some(a) if matches!(&a.returned.outcome, Err(e) if e.code == "run.canceled") => true,
            Some(a) if a.seq < f.seq => false,
            _ => wake.is_none_or(|w| w > f.at),
        }
    }

    /// The time of the round after step `ended` finished at `t` (none: the first round): when
    /// the recorded run activated the first of the steps that can start now (else `t`).
    fn round_time(&self, ended: Option<usize>, t: i64) -> i64 {
        if ended.is_none() && t != self.rec.started_at {
            return t;
        }
        let candidates = match ended {
            Some(i) => &self.dependents[i],
            None => &self.roots,
        };
        candidates
            .iter()
            .filter(|&&j| {
                self.deps[j]
                    .iter()
                    .all(|&d| Some(d) == ended || self.finished[d])
            })
            .filter_map(|&j| self.idx.first_at[self.numbers[j]? as usize])
            .filter(|&at| at >= t)
            .min()
            .unwrap_or(t)
    }

    /// When the record says the wait for `deadline` ended: a timer due then fired at its
    /// recorded time; a retry or a signal's deadline at the deadline itself.
    fn wake_time(&self, deadline: i64) -> i64 {
        self.timers
            .iter()
            .filter(|(_, until)| **until == deadline)
            .filter_map(|(k, _)| self.idx.timers.get(k).copied())
            .min()
            .unwrap_or(deadline)
    }

    /// When the recorded run was taken up again after it parked, if it was.
    fn next_wake(&self) -> Option<i64> {
        let timers = self
            .timers
            .keys()
            .filter_map(|k| self.idx.timers.get(k).copied());
        let signals = self.signal_waits.iter().filter_map(|k| {
            self.idx
                .signals
                .get(k)
                .filter(|s| self.signal_answers(k, &s.name))
                .map(|s| s.at)
                .or_else(|| self.idx.expired.get(k).copied())
        });
        timers.chain(signals).min()
    }

    /// Whether the record's signal answers wait `k` here: always in a replay; in a fork's dry
    /// run when the fork would carry it over (`History::carried_signal`).
    fn signal_answers(&self, k: &WaitKey, name: &str) -> bool {
        let Mode::Plan(history) = &self.mode else {
            return true;
        };
        let Some(step) = self.spec.steps.iter().find(|s| s.id == k.0) else {
            return false;
        };
        let ended = |d: &str| match self.outcome(d) {
            Some(RecStep::Succeeded(o)) => Some(Some(o.clone())),
            Some(RecStep::Skipped) => Some(None),
            _ => None,
        };
        history.carried_signal(step, k.1, name, &ended).is_some()
    }

    /// The recorded signals of the waits open now that had arrived by now.
    fn arrived_signals(&self) -> Result<Vec<ArrivedSignal>, Refusal> {
        let mut arrived = Vec::new();
        for k in &self.signal_waits {
            if let Some(s) = self.idx.signals.get(k)
                && s.at <= self.now
                && self.signal_answers(k, &s.name)
            {
                arrived.push(ArrivedSignal {
                    seq: s.number,
                    name: s.name.clone(),
                    payload_digest: s.payload.clone(),
                    payload: self.value(&s.payload)?,
                });
            }
        }
        arrived.sort_by_key(|s| s.seq);
        Ok(arrived)
    }

    /// Answers a call from the record (a replay) or from the parent's history (a dry run).
    fn answer(
        &mut self,
        c: CallStart,
        recorded: Option<(CallKey, &'a RecCall)>,
    ) -> Result<(), Refusal> {
        let step = &self.spec.steps[c.step];
        let index = step.foreach.as_ref().map(|_| c.index as u32);
        self.recent = c.step;
        match &self.mode {
            Mode::Replay(_) | Mode::Test => {
                if let Some((k, _)) = recorded
                    && self.verify()
                {
                    self.made.insert(k);
                }
                let Some(result) = recorded.and_then(|(_, r)| r.result.as_ref()) else {
                    let id = step.id.clone();
                    if matches!(self.mode, Mode::Test) {
                        self.miss(&id, index, c.attempt, &c.inputs);
                        return Ok(());
                    }
                    let started = recorded.is_some();
                    if started && self.recorded_ending("canceled").is_some() {
                        // The recorded run's process died during this call and the run was
                        // canceled afterwards (`reel cancel` of a run nobody held): the call
                        // stays unanswered, as it did, until the cancel stops it.
                        self.held.push((c.step, c.index, c.attempt));
                        return Ok(());
                    }
                    let what = if started {
                        format!(
                            "the record has no result for attempt {} of this call (it was in flight when the recorded run stopped)",
                            c.attempt
                        )
                    } else {
                        format!(
                            "the replay makes a call the record does not have (attempt {})",
                            c.attempt
                        )
                    };
                    let replayed = self.shown(&c.inputs);
                    self.diverge(Some(&id), index, what, None, replayed);
                    return Ok(());
                };
                let (seq, at, outcome, digest) = match result {
                    RecResult::Ok { seq, at, digest } => (
                        *seq,
                        *at,
                        Ok(ToolOutput {
                            value: self.value(digest)?,
                            log: String::new(),
                        }),
                        Some(digest.clone()),
                    ),
                    RecResult::Err { seq, at, error } => {
                        let cause = match &error.cause {
                            Some(d) => Some(self.value(d)?),
                            None => None,
                        };
                        (
                            *seq,
                            *at,
                            Err(ToolError {
                                code: static_code(&error.code),
                                message: error.message.clone(),
                                retryable: error.retryable,
                                cause,
                                log: String::new(),
                            }),
                            None,
                        )
                    }
                };
                self.answered += 1;
                self.answers.push(Reverse(Answer {
                    seq,
                    at,
                    returned: Returned {
                        step: c.step,
                        index: c.index,
                        attempt: c.attempt,
                        outcome,
                        reused: None,
                        digest,
                    },
                }));
            }
            Mode::Plan(history) => {
                let reusable = self.numbers[c.step]
                    .and_then(|n| history.reusable_at(n, index, &c.inputs, step.tool.as_deref()));
                match reusable {
                    Some((digest, from, at)) => {
                        let digest = digest.to_string();
                        let value = self.value(&digest)?;
                        self.reused[c.step] += 1;
                        self.answers.push(Reverse(Answer {
                            seq: from.seq,
                            at,
                            returned: Returned {
                                step: c.step,
                                index: c.index,
                                attempt: c.attempt,
                                outcome: Ok(ToolOutput {
                                    value,
                                    log: String::new(),
                                }),
                                reused: Some(from),
                                digest: Some(digest),
                            },
                        }));
                    }
                    None => self.live[c.step].push(index),
                }
            }
        }
        Ok(())
    }

    /// Takes note of an event the machine recorded; a replay with `verify` compares it with
    /// the record.
    fn check(&mut self, e: &Stamped) {
        match &e.event {
            Event::TimerStarted { step, index, until } => {
                self.timers.insert((step.clone(), *index), *until);
            }
            Event::TimerFired { step, index, .. } => {
                self.timers.remove(&(step.clone(), *index));
            }
            Event::SignalAwaited { step, index, .. } => {
                self.signal_waits.insert((step.clone(), *index));
            }
            Event::SignalReceived { step, index, .. } | Event::CallFailed { step, index, .. } => {
                self.signal_waits.remove(&(step.clone(), *index));
            }
            // Only a dry run asks how steps ended (for its verdicts and carried signals).
            Event::StepSucceeded { step, output, .. } => {
                let place = self.set_finished(step);
                if let (Some(i), Mode::Plan(_)) = (place, &self.mode) {
                    self.outcomes[i] = Some(RecStep::Succeeded(output.clone()));
                }
            }
            Event::StepSkipped { step, .. } => {
                let place = self.set_finished(step);
                if let (Some(i), Mode::Plan(_)) = (place, &self.mode) {
                    self.outcomes[i] = Some(RecStep::Skipped);
                }
            }
            Event::StepFailed { step, .. } if matches!(self.mode, Mode::Plan(_)) => {
                if let Some(i) = self.place(step) {
                    self.outcomes[i] = Some(RecStep::Failed);
                }
            }
            _ => {}
        }
        if !self.verify() {
            return;
        }
        match &e.event {
            Event::StepStarted {
                step,
                index,
                attempt,
                inputs,
                ..
            } => {
                let recorded = self
                    .key_of(step, *index, *attempt)
                    .and_then(|k| self.idx.calls.get(&k))
                    .and_then(|c| c.inputs.clone());
                match recorded {
                    Some(r) if same_value(&r, inputs) => {}
                    _ if matches!(self.mode, Mode::Test) => {
                        self.miss(step, *index, *attempt, inputs)
                    }
                    Some(r) => {
                        let (rv, pv) = (self.shown(&r), self.shown(inputs));
                        self.diverge(
                            Some(step),
                            *index,
                            "its call's inputs differ from the record".into(),
                            rv,
                            pv,
                        );
                    }
                    None => {
                        let pv = self.shown(inputs);
                        self.diverge(
                            Some(step),
                            *index,
                            format!(
                                "the replay makes a call the record does not have (attempt {attempt})"
                            ),
                            None,
                            pv,
                        );
                    }
                }
            }
            // A test compares what the flow asks of the world and what it returns, not how.
            Event::StepSucceeded { .. } | Event::StepSkipped { .. } | Event::StepFailed { .. }
                if matches!(self.mode, Mode::Test) => {}
            Event::StepSucceeded { step, output, .. } => match self.idx.outcome(step).cloned() {
                Some(RecStep::Succeeded(r)) if same_value(&r, output) => {}
                Some(RecStep::Succeeded(r)) => {
                    let (rv, pv) = (self.shown(&r), self.shown(output));
                    self.diverge(
                        Some(step),
                        None,
                        "its output differs from the record".into(),
                        rv,
                        pv,
                    );
                }
                other => {
                    let pv = self.shown(output);
                    self.diverge(
                        Some(step),
                        None,
                        format!("it succeeds, but the record has it {}", described(other)),
                        None,
                        pv,
                    );
                }
            },
            Event::StepSkipped { step, .. } => {
                let other = self.idx.outcome(step).cloned();
                if other != Some(RecStep::Skipped) {
                    self.diverge(
                        Some(step),
                        None,
                        format!("it is skipped, but the record has it {}", described(other)),
                        None,
                        None,
                    );
                }
            }
            Event::StepFailed { step, error }
                if !self
                    .idx
                    .find(step)
                    .is_some_and(|n| self.idx.failed[n as usize]) =>
            {
                let other = self.idx.outcome(step).cloned();
                self.diverge(
                    Some(step),
                    None,
                    format!(
                        "it fails ([{}] {}), but the record has it {}",
                        error.code,
                        error.message,
                        described(other)
                    ),
                    None,
                    None,
                );
            }
            _ => {}
        }
    }

    /// With `verify`: a call the record holds a result of that the replay never made.
    /// A test's call that the cassette does not hold: named with its inputs beside the nearest
    /// recorded call (the same element's attempt, else another element of the step, else a
    /// call of the same tool), so that the report shows what changed.
    fn miss(&mut self, step: &str, index: Option<u32>, attempt: u32, inputs: &str) {
        let tool = self
            .spec
            .steps
            .iter()
            .find(|s| s.id == step)
            .and_then(|s| s.tool.clone());
        let tool_of = |id: &str| {
            self.rec
                .spec
                .steps
                .iter()
                .find(|s| s.id == id)
                .and_then(|s| s.tool.clone())
        };
        // By step name, `foreach` index and attempt.
        type Named<'n> = (&'n str, Option<u32>, u32);
        let names = self.idx.names();
        let mut near: Vec<(u8, Named<'_>, &RecCall)> = self
            .idx
            .calls
            .iter()
            .filter(|(_, c)| c.inputs.is_some())
            .filter_map(|(k, c)| {
                let k = (names[k.0 as usize], k.1, k.2);
                let rank = if k.0 == step && k.1 == index {
                    0
                } else if k.0 == step {
                    1
                } else if tool.is_some() && tool_of(k.0) == tool {
                    2
                } else {
                    return None;
                };
                Some((rank, k, c))
            })
            .collect();
        near.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        let nearest = near.first().map(|(_, k, c)| {
            let name = match k.1 {
                Some(i) => format!("`{}`[{i}] attempt {}", k.0, k.2),
                None => format!("`{}` attempt {}", k.0, k.2),
            };
            (name, c.inputs.clone().unwrap_or_default())
        });
        let same = near.first().is_some_and(|(rank, _, _)| *rank == 0);
        let what = match &nearest {
            Some(_) if same => format!(
                "the flow makes a call the cassette does not hold: its inputs differ from the recorded attempt {attempt}"
            ),
            Some((name, _)) => format!(
                "the flow makes a call the cassette does not hold (attempt {attempt}); the nearest recorded call is {name}"
            ),
            None => format!(
                "the flow makes a call the cassette does not hold (attempt {attempt}), and none of the step's or its tool's"
            ),
        };
        let recorded = nearest.and_then(|(_, d)| self.shown(&d));
        let replayed = self.shown(inputs);
        self.diverge(Some(step), index, what, recorded, replayed);
    }

    /// What the recorded side is called in messages.
    fn record_name(&self) -> &'static str {
        match self.mode {
            Mode::Test => "cassette",
            _ => "record",
        }
    }

    fn unmade_call(&self) -> Option<Divergence> {
        let mut unmade: Vec<(&CallKey, &RecCall)> = self
            .idx
            .calls
            .iter()
            .filter(|(k, c)| !self.made.contains(*k) && c.result.is_some())
            .collect();
        unmade.sort_by_key(|(_, c)| match &c.result {
            Some(RecResult::Ok { seq, .. } | RecResult::Err { seq, .. }) => *seq,
            None => 0,
        });
        let ((n, index, attempt), c) = unmade.first()?;
        let step = self.idx.names()[*n as usize].to_string();
        Some(Divergence {
            span: self.span(&step),
            step: Some(step),
            index: *index,
            what: if matches!(self.mode, Mode::Test) {
                format!("the cassette has a call (attempt {attempt}) that the flow never makes")
            } else {
                format!("the record has a call (attempt {attempt}) that the replay never made")
            },
            recorded: c.inputs.as_deref().and_then(|d| self.shown(d)),
            replayed: None,
        })
    }

    /// Compares how the replay ended with how the record ends.
    fn compare_ending(
        &self,
        status: &str,
        output: Option<&Value>,
        error: Option<&RunError>,
    ) -> Result<Option<Divergence>, Refusal> {
        if status == "diverged" {
            return Ok(None);
        }
        let recorded = self
            .idx
            .finished()
            .map(|f| (f.status.clone(), f.output.clone(), f.error.clone()));
        let differs = |what: String, recorded: Option<Value>, replayed: Option<Value>| {
            Some(Divergence {
                step: None,
                index: None,
                what,
                span: None,
                recorded,
                replayed,
            })
        };
        Ok(match (status, recorded) {
            ("waiting", None) => None,
            ("succeeded", Some((s, Some(d), _))) if s == "succeeded" => {
                let rv = self.value(&d)?;
                if Some(&rv) == output {
                    None
                } else {
                    differs(
                        format!("the run's output differs from the {}", self.record_name()),
                        Some(rv),
                        output.cloned(),
                    )
                }
            }
            ("failed" | "canceled", Some((s, _, Some(e)))) if s == status => {
                let same = error.is_some_and(|r| r.code == e.code && r.step == e.step);
                (!same).then(|| Divergence {
                    step: e.step.clone(),
                    index: None,
                    what: "the run fails otherwise than the record says".into(),
                    span: None,
                    recorded: serde_json::to_value(&e).ok(),
                    replayed: error.and_then(|r| serde_json::to_value(r).ok()),
                })
            }
            (status, recorded) => differs(
                format!(
                    "the replay ends {status}, the record {}",
                    recorded.map_or("waiting".to_string(), |r| r.0)
                ),
                None,
                None,
            ),
        })
    }

    /// Each step's verdict after a dry run.
    fn verdicts(&self, spec: &FlowSpec) -> ForkPlan {
        let Mode::Plan(history) = &self.mode else {
            return ForkPlan {
                parent: self.rec.run.id.clone(),
                steps: Vec::new(),
            };
        };
        // By place in `spec`: the parent's step of the same id (the record numbers steps by
        // their places in the parent's flow), whether the step diverged, and its verdict.
        let parent = |i: usize| {
            let n = self.numbers.get(i).copied().flatten()?;
            self.rec.spec.steps.get(n as usize)
        };
        let mut diverged = vec![false; spec.steps.len()];
        let mut plans: Vec<Option<StepPlan>> = vec![None; spec.steps.len()];
        for i in topological(spec) {
            let s = &spec.steps[i];
            let reused_calls = self.reused[i];
            let live = &self.live[i];
            let upstream = self.deps[i]
                .iter()
                .find(|&&p| diverged[p])
                .map(|&p| spec.steps[p].id.clone());
            let now = self.outcomes[i].as_ref();
            let then = self.numbers[i].and_then(|n| self.idx.steps[n as usize].as_ref());
            let reason: Option<String> = match parent(i) {
                None => Some("new step".into()),
                Some(p) if p.tool != s.tool => Some(format!(
                    "changed tool: `{}` became `{}`",
                    p.tool.as_deref().unwrap_or("an expression"),
                    s.tool.as_deref().unwrap_or("an expression")
                )),
                Some(p)
                    if (p.when.is_some() || s.when.is_some())
                        && matches!(now, Some(RecStep::Skipped))
                            != matches!(then, Some(RecStep::Skipped))
                        && now.is_some() =>
                {
                    Some("changed condition: its `when` decides otherwise".into())
                }
                Some(p) => {
                    let changed = p.semantic_digest != s.semantic_digest;
                    let because = || match (&upstream, changed) {
                        (_, true) if s.tool.is_some() => "changed arguments".to_string(),
                        (_, true) => "changed expression".to_string(),
                        (Some(u), false) => {
                            format!("changed inputs: upstream step `{u}` changed")
                        }
                        (None, false) => "changed inputs".to_string(),
                    };
                    if !live.is_empty() {
                        let new: Vec<String> = live
                            .iter()
                            .filter(|ix| {
                                self.numbers[i].is_none_or(|n| history.call_at(n, **ix).is_none())
                            })
                            .map(|ix| ix.map_or("call".to_string(), |i| format!("[{i}]")))
                            .collect();
                        if s.foreach.is_some() && upstream.is_none() && new.len() == live.len() {
                            // The recorded elements are reused; only new ones run.
                            Some(format!("new elements: {}", new.join(", ")))
                        } else if !changed && upstream.is_none() && !new.is_empty() {
                            Some("the parent has no result for its call".to_string())
                        } else {
                            Some(because())
                        }
                    } else {
                        match (now, then) {
                            (None, _) => Some(match &upstream {
                                // Its upstream ended otherwise: the parent's answer is not
                                // carried over, a new signal is waited for.
                                Some(u)
                                    if s.tool.as_deref() == Some("signal")
                                        && s.deps.iter().all(|d| self.outcome(d).is_some()) =>
                                {
                                    format!("waits for a new signal: upstream step `{u}` changed")
                                }
                                Some(u) => {
                                    format!("waits for upstream step `{u}`, which runs live")
                                }
                                None => "not reached in the dry run".into(),
                            }),
                            (Some(RecStep::Failed), _) => Some("fails in the dry run".into()),
                            (Some(RecStep::Skipped), Some(RecStep::Skipped)) => None,
                            (Some(RecStep::Succeeded(a)), Some(RecStep::Succeeded(b)))
                                if same_value(a, b) =>
                            {
                                None
                            }
                            (Some(RecStep::Succeeded(_)), Some(RecStep::Failed)) => {
                                Some(format!("failed in the parent; {}", because()))
                            }
                            (Some(_), None) => Some("not finished in the parent".into()),
                            _ => Some(because()),
                        }
                    }
                }
            };
            diverged[i] = reason.is_some();
            plans[i] = Some(StepPlan {
                step: s.id.clone(),
                reused: reason.is_none(),
                reason,
                reused_calls,
                live_calls: live.len(),
            });
        }
        let mut steps: Vec<StepPlan> = plans.into_iter().flatten().collect();
        // The parent's steps the corrected flow still has, by their number in the record.
        let mut kept = vec![false; self.rec.spec.steps.len()];
        for n in self.numbers.iter().flatten() {
            if let Some(k) = kept.get_mut(*n as usize) {
                *k = true;
            }
        }
        for (p, kept) in self.rec.spec.steps.iter().zip(kept) {
            if !kept {
                steps.push(StepPlan {
                    step: p.id.clone(),
                    reused: false,
                    reason: Some("removed step".into()),
                    reused_calls: 0,
                    live_calls: 0,
                });
            }
        }
        ForkPlan {
            parent: self.rec.run.id.clone(),
            steps,
        }
    }
}

/// The steps of `spec` in an order where each comes after the steps it depends on (in the
/// flow's order where it is free). Iterative: a chain of ten thousand steps is no deeper than
/// one.
fn topological(spec: &FlowSpec) -> Vec<usize> {
    let index: HashMap<&str, usize> = spec
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    let mut seen = vec![false; spec.steps.len()];
    let mut order = Vec::with_capacity(spec.steps.len());
    // (step, how many of its deps were looked at)
    let mut stack: Vec<(usize, usize)> = Vec::new();
    for start in 0..spec.steps.len() {
        if seen[start] {
            continue;
        }
        seen[start] = true;
        stack.push((start, 0));
        while let Some(&mut (i, ref mut next)) = stack.last_mut() {
            let deps = &spec.steps[i].deps;
            if let Some(d) = deps.get(*next) {
                *next += 1;
                if let Some(&j) = index.get(d.as_str())
                    && !seen[j]
                {
                    seen[j] = true;
                    stack.push((j, 0));
                }
            } else {
                order.push(i);
                stack.pop();
            }
        }
    }
    order
}

fn described(step: Option<RecStep>) -> &'static str {
    match step {
        Some(RecStep::Succeeded(_)) => "succeeded",
        Some(RecStep::Skipped) => "skipped",
        Some(RecStep::Failed) => "failed",
        None => "not finished",
    }
}

fn tick() -> Input {
    Input::Tick {
        poll: Some(Poll {
            cancel_requested: false,
        }),
    }
}

/// A recorded error code as the tool host's static code. The host's codes are static strings;
/// a replay is one short process, so the few codes a record holds are kept for its life.
fn static_code(code: &str) -> &'static str {
    Box::leak(code.to_string().into_boxed_str())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::journal::Event;
    use reel_compiler::{RootDb, SourceFile, build_flow};

    use super::Index;

    fn started(step: &str, index: Option<u32>) -> Event {
        Event::StepStarted {
            step: step.into(),
            index,
            attempt: 1,
            inputs: format!("in-{step}-{index:?}"),
            key: None,
        }
    }

    fn called(step: &str, index: Option<u32>) -> Event {
        Event::CallSucceeded {
            step: step.into(),
            index,
            attempt: 1,
            output: format!("out-{step}-{index:?}"),
        }
    }

    fn done(step: &str) -> Event {
        Event::StepSucceeded {
            step: step.into(),
            output: format!("value-{step}"),
            attempts: 1,
        }
    }

    /// Everything a replay reads of an index, in an order that does not depend on a table's.
    fn shown(idx: &Index) -> String {
        let mut numbers: Vec<_> = idx.numbers.iter().collect();
        numbers.sort();
        let mut calls: Vec<String> = idx.calls.iter().map(|c| format!("{c:?}")).collect();
        calls.sort();
        format!(
            "{numbers:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{calls:?}\n{:?}",
            idx.steps, idx.failed, idx.first_at, idx.done_seq, idx.results
        )
    }

    /// A journal indexed as it is read, before the flow is, and numbered again once it is,
    /// reads as the same journal indexed after the flow: steps the record reached out of the
    /// flow's order, steps it never reached, and a name the flow lacks (a damaged record).
    #[test]
    fn an_index_numbered_again_reads_as_one_numbered_by_the_flow_from_the_start() {
        let source = "flow f {\n  step a = echo { value: 1 }\n  step b = echo { value: 2 }\n  step c = echo { foreach: [1, 2], value: item }\n  step d = echo { value: 4 }\n  output [a, b, c, d]\n}\n";
        let db = RootDb::default();
        let file = SourceFile::new(&db, "t.reel".into(), "/".into(), Arc::from(source));
        let spec = build_flow(&db, file, "f").expect("the flow builds");
        let events = [
            started("c", Some(1)),
            started("b", None),
            called("c", Some(1)),
            started("c", Some(0)),
            started("ghost", None),
            called("b", None),
            done("b"),
            called("ghost", None),
            called("c", Some(0)),
            done("c"),
            started("a", None),
            called("a", None),
            done("a"),
        ];
        assert_numbered_alike(&spec, &events);
        // In the flow's order, with its later steps never reached: numbered alike, at once.
        assert_numbered_alike(&spec, &[started("a", None), called("a", None), done("a")]);
    }

    /// `events` indexed by the flow from the start, and indexed first and numbered again, read
    /// alike.
    fn assert_numbered_alike(spec: &reel_flowspec::FlowSpec, events: &[Event]) {
        let mut by_flow = Index::new(spec);
        let mut as_read = Index::default();
        for (seq, event) in events.iter().enumerate() {
            by_flow.add(seq as u64, 10 * seq as i64, event.clone());
            as_read.add(seq as u64, 10 * seq as i64, event.clone());
        }
        as_read.renumber(spec);
        assert_eq!(shown(&as_read), shown(&by_flow));
    }
}
