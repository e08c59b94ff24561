//! One run's state and its transitions: which steps run, which calls start, what is recorded,
//! when the run waits, parks or ends. Pure: every effect is a [`Command`] for the driver.

use std::collections::{BTreeSet, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;

use reel_flowspec::canonical::{canonical_json, literal, name_text};
use reel_flowspec::{Backoff, Expr, FlowSpec, Node, StepSpec, ToolKind};
use reel_store::Durability;
use reel_tools::{ToolCall, UserTool, scrub};
// A fixed hash rather than std's seeded one: the keys are the machine's own places and digests,
// hashed for every call, and nothing here depends on a seed.
use rustc_hash::FxHashMap as HashMap;
use serde_json::{Map, Value};

use super::command::{CallStart, Command, Ending, Stamped};
use super::decide::{Decided, Decision, never_repeated};
use super::input::{ArrivedSignal, Input, Returned};
use crate::deps::{Progress, StepEnd};
use crate::error::RunError;
use crate::fold::{CallRecord, Folded, StepRecord};
use crate::journal::{Event, Resolution, woke_value};
use crate::scope::{Purpose, RunScope, StepValues, idempotency_key, rfc3339, seeded_rng};

/// What a run is made of: fixed for its whole life.
#[derive(Clone, Debug)]
pub struct Setup {
    /// The run's id (it is part of every idempotency key).
    pub run_id: String,
    /// The flow.
    pub spec: Arc<FlowSpec>,
    /// The seed of `random()` and retry jitter.
    pub seed: u64,
    /// When the run started (the logical time before any step finished).
    pub started_at: i64,
    /// The directory calls run in.
    pub cwd: PathBuf,
    /// The inputs, defaults filled in.
    pub inputs: Map<String, Value>,
    /// The environment values the flow declares.
    pub env: Map<String, Value>,
    /// The secrets' values (never recorded).
    pub secrets: Arc<[(String, String)]>,
    /// The write mode.
    pub durability: Durability,
    /// Most calls in flight at once.
    pub max_parallel: usize,
    /// Builtin functions whose results are deliberately changed: a test's fault injection
    /// (`reel replay --verify` must catch it); empty in every real run.
    pub faults: Vec<String>,
    /// Whether effect calls are given their idempotency keys. A replay, a fork's dry run and
    /// a cassette test make no call and read no key, and the two hashes of a key were a
    /// tenth of a replay's drive: they leave them out (no key in the events they make).
    pub idempotency_keys: bool,
}

#[derive(Clone, Debug, PartialEq)]
enum StepStatus {
    Pending,
    Active,
    Succeeded,
    Skipped,
    Failed,
}

/// Where one call stands: no more than a time or a place, so that a step of a million calls
/// keeps a million small records (the rare signal wait keeps its name in
/// `Machine::signal_waits`, a result its text in the step's `Results`).
#[derive(Clone, Copy, Debug, PartialEq)]
enum CallState {
    Ready,
    Backoff(i64),
    InFlight,
    Timer(i64),
    /// Waits for a signal (its name and deadline are in `Machine::signal_waits`).
    Signal,
    /// Done; its result is at this place in the step's `Results`.
    Done(usize),
    Failed,
}

/// A signal wait's name and deadline.
#[derive(Clone, Debug)]
struct SignalWait {
    name: String,
    deadline: Option<i64>,
}

/// The results of a step's finished calls until its value is assembled, as compact JSON text
/// (a result's exact `serde_json` text, not its `Value`, whose maps and strings take several
/// times the room), each after its length: the call's state holds where it begins.
#[derive(Default)]
struct Results {
    bytes: Vec<u8>,
}

impl Results {
    /// Keeps `value`; where it is kept.
    fn push(&mut self, value: &Value) -> usize {
        let at = self.bytes.len();
        let text = serde_json::to_vec(value).unwrap_or_else(|_| b"null".to_vec());
        let mut len = text.len();
        // The length as LEB128: one byte for a result under 128 bytes.
        loop {
            let byte = (len & 0x7f) as u8;
            len >>= 7;
            if len == 0 {
                self.bytes.push(byte);
                break;
            }
            self.bytes.push(byte | 0x80);
        }
        self.bytes.extend_from_slice(&text);
        at
    }

    /// The value kept at `at`.
    fn get(&self, at: usize) -> Value {
        let mut len = 0usize;
        let mut shift = 0;
        let mut pos = at;
        while let Some(&byte) = self.bytes.get(pos) {
            pos += 1;
            len |= ((byte & 0x7f) as usize) << shift;
            shift += 7;
            if byte & 0x80 == 0 {
                break;
            }
        }
        self.bytes
            .get(pos..pos + len)
            .and_then(|text| read_deep(text).ok())
            .unwrap_or(Value::Null)
    }
}

/// Reads a result's text back without serde_json's fixed limit of 128 levels: a run builds
/// values deeper than that (as the store reads them back, the stack grows as needed).
fn read_deep(text: &[u8]) -> Result<Value, serde_json::Error> {
    use serde::Deserialize;
    let mut de = serde_json::Deserializer::from_slice(text);
    de.disable_recursion_limit();
    let value = Value::deserialize(serde_stacker::Deserializer::new(&mut de))?;
    de.end()?;
    Ok(value)
}

/// A step's calls that are ready to start, lowest first, without a set of all of them: every
/// call begins ready, and they start mostly in order, so the calls from `fresh` on are ready
/// when their state says so; only calls below it that became ready again (a retry due, a call
/// restored from the journal) are kept in `again`.
#[derive(Default)]
struct ReadyCalls {
    fresh: usize,
    again: BTreeSet<usize>,
    count: usize,
}

impl ReadyCalls {
    /// Call `c` became ready.
    fn insert(&mut self, c: usize) {
        self.count += 1;
        if c < self.fresh {
            self.again.insert(c);
        }
    }

    /// Call `c` is no longer ready.
    fn remove(&mut self, c: usize) {
        self.count -= 1;
        if c < self.fresh {
            self.again.remove(&c);
        }
    }

    /// The lowest ready call; moving `fresh` past calls no longer ready counts as `work`
    /// (each call once, over the step's life).
    fn first(&mut self, calls: &[CallRt], work: &mut u64) -> Option<usize> {
        if self.count == 0 {
            return None;
        }
        if let Some(&c) = self.again.first() {
            return Some(c);
        }
        while self.fresh < calls.len() && calls[self.fresh].state != CallState::Ready {
            self.fresh += 1;
            *work += 1;
        }
        (self.fresh < calls.len()).then_some(self.fresh)
    }
}

#[derive(Clone, Debug)]
struct CallRt {
    state: CallState,
    /// The last attempt number used (0 before the first).
    attempt: u32,
    /// Attempts made in this drive, against the retry budget.
    tries: u32,
}

struct StepRt {
    status: StepStatus,
    /// The steps this one waits for (and whose values its expressions may read).
    deps: Vec<usize>,
    dependents: Vec<usize>,
    remaining: usize,
    /// Dependents that have not finished: while some remain, this step's value may be read
    /// and is worth keeping in memory; at zero it is dropped (its digest stays).
    readers_left: usize,
    finished_at: i64,
    started_at: Option<i64>,
    attempts: u32,
    calls: Vec<CallRt>,
    /// The results of its finished calls.
    results: Results,
    /// The `foreach` list; an element is dropped once its call is done.
    items: Vec<Value>,
    foreach: bool,
    in_flight: usize,
    /// Its calls that are ready to start (kept by `Machine::set_call`).
    ready_calls: ReadyCalls,
    /// How many of its calls are done (kept by `Machine::set_call`).
    done: usize,
    /// The digest of its call's result, for a step without `foreach` whose call returned in
    /// this drive: the step's output is that value, so its digest is not computed again.
    result_digest: Option<String>,
}

/// Where the calls of active steps stand, kept up to date by every change of a call's state
/// (`Machine::set_call`), so that each round, wait and completion looks only at what can
/// move: no scan of all steps or all calls per event. Only calls of active steps are in it.
#[derive(Default)]
struct Schedule {
    /// Active steps, in step order.
    active: BTreeSet<usize>,
    /// Ready calls, over all active steps.
    ready: usize,
    /// Calls waiting out a retry's backoff: (due, step, call).
    backoffs: BTreeSet<(i64, usize, usize)>,
    /// Sleeping calls: (due, step, call).
    timers: BTreeSet<(i64, usize, usize)>,
    /// Signal waits, in step and call order.
    signals: BTreeSet<(usize, usize)>,
    /// Signal waits with a deadline: (deadline, step, call).
    deadlines: BTreeSet<(i64, usize, usize)>,
    /// Steps that succeeded or were skipped.
    finished: usize,
}

/// Where the machine is in its loop; the stages that wait name the input they wait for.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Stage {
    /// Not started: waits for `Started` or `Resumed`.
    Fresh,
    /// The top of a round: activate ready steps, then start calls.
    Round,
    /// Start ready calls (steps are activated already this round).
    Dispatch,
    /// Waits for `ValuesLoaded`, then goes on with the round.
    LoadingForRound,
    /// Waits for `ValuesLoaded`, then goes on starting calls.
    LoadingForDispatch,
    /// Waits for `ValuesLoaded`, then computes the output again.
    LoadingForOutput,
    /// Waits for `Launched`.
    Launching,
    /// Waits for `Signals` with nothing in flight (`progressed`: calls finished at once).
    IdleSignals { progressed: bool },
    /// Waits for calls to return and for `Tick`.
    Waiting,
    /// Waits for `Signals` during a tick.
    TickSignals,
    /// Ended, parked or interrupted: takes no more input.
    Done,
}

/// What a value a step's activation or call needs but does not hold is for.
#[derive(Clone, Debug)]
enum Want {
    /// Step `i`'s value, for an expression.
    Step(usize),
    /// A restored call's result.
    Call(String),
}

/// What a call restored from the journal becomes beyond its plain state.
enum Then {
    /// Its state as given.
    Plain,
    /// Done with this result.
    Done(Value),
    /// Waiting for the signal of this name, until this deadline.
    Wait(String, Option<i64>),
}

/// What trying to go on found.
enum Go<T> {
    Ok(T),
    /// Values to load first; nothing was recorded.
    Load(Vec<(Want, String)>),
}

/// One run's state, driven by [`Input`]s; [`Machine::poll_command`] gives what to do next.
pub struct Machine {
    setup: Setup,
    spec: Arc<FlowSpec>,
    /// The environment every call sees (the declared values that are set), made once rather
    /// than per call.
    call_env: Arc<[(String, String)]>,
    steps: Vec<StepRt>,
    /// Finished steps' digests, and the values still to be read.
    values: StepValues,
    ready: VecDeque<usize>,
    in_flight: usize,
    failure: Option<RunError>,
    canceled: bool,
    /// Events recorded and not yet handed to the driver.
    pending: Vec<Stamped>,
    commands: VecDeque<Command>,
    stage: Stage,
    /// The time of the input being handled.
    now: i64,
    /// Calls started this round, to launch together.
    prepared: Vec<CallStart>,
    /// What the values asked for are for, in the order asked.
    wants: Vec<Want>,
    /// Restored calls' results, loaded for the step being activated.
    loaded: HashMap<String, Value>,
    /// Calls the journal recorded for steps that had not finished, applied when they activate.
    restored_calls: std::collections::HashMap<(String, Option<u32>), CallRecord>,
    /// The idempotency key of each effect call in flight, by step and call.
    keys: HashMap<(usize, usize), String>,
    /// The name and deadline of each call waiting for a signal, by step and call.
    signal_waits: HashMap<(usize, usize), SignalWait>,
    /// The calls of active steps by state.
    sched: Schedule,
    /// What a person decided about calls whose outcome is unknown (`reel resume --accept`,
    /// `--retry`), applied when their steps activate.
    decisions: Vec<Decided>,
    /// The idempotency key each call of unknown outcome had when it was first made, by step and
    /// call: made again, it must have the same (its inputs must not have changed).
    first_keys: HashMap<(usize, usize), String>,
    /// Set when resuming diverged from the run's own journal: the run ends quarantined.
    quarantined: bool,
    /// Iterations of the machine's loops so far (see [`Machine::work`]).
    work: u64,
    /// Values canonicalised and hashed so far (see [`Machine::digests`]).
    digests: u64,
    /// Set for a fork's dry run: no step's `concurrency` holds its calls back.
    unbounded: bool,
}

impl Machine {
    /// A run about to start or resume: nothing happens before `Started` or `Resumed`.
    pub fn new(setup: Setup) -> Self {
        let spec = setup.spec.clone();
        let started_at = setup.started_at;
        let index: Arc<rustc_hash::FxHashMap<String, usize>> = Arc::new(
            spec.steps
                .iter()
                .enumerate()
                .map(|(i, s)| (s.id.clone(), i))
                .collect(),
        );
        let mut steps: Vec<StepRt> = spec
            .steps
            .iter()
            .map(|s| StepRt {
                status: StepStatus::Pending,
                deps: Vec::new(),
                dependents: Vec::new(),
                remaining: 0,
                readers_left: 0,
                finished_at: started_at,
                started_at: None,
                attempts: 0,
                calls: Vec::new(),
                results: Results::default(),
                items: Vec::new(),
                foreach: s.foreach.is_some(),
                in_flight: 0,
                ready_calls: ReadyCalls::default(),
                done: 0,
                result_digest: None,
            })
            .collect();
        for (i, s) in spec.steps.iter().enumerate() {
            let mut deps: Vec<usize> = s
                .deps
                .iter()
                .filter_map(|d| index.get(d).copied())
                .collect();
            deps.sort_unstable();
            deps.dedup();
            steps[i].remaining = deps.len();
            for &d in &deps {
                steps[d].dependents.push(i);
                steps[d].readers_left += 1;
            }
            steps[i].deps = deps;
        }
        // The output reads its steps when the run ends: their values stay in memory for it
        // rather than being read back from the store.
        if let Some(out) = &spec.output {
            let mut read = Vec::new();
            steps_named(&out.expr, &index, &mut read);
            read.sort_unstable();
            read.dedup();
            for d in read {
                steps[d].readers_left += 1;
            }
        }
        let values = StepValues::new(index);
        let call_env = setup
            .env
            .iter()
            .filter_map(|(name, value)| Some((name.clone(), value.as_str()?.to_string())))
            .collect();
        Machine {
            call_env,
            setup,
            spec,
            steps,
            values,
            ready: VecDeque::new(),
            in_flight: 0,
            failure: None,
            canceled: false,
            pending: Vec::new(),
            commands: VecDeque::new(),
            stage: Stage::Fresh,
            now: started_at,
            prepared: Vec::new(),
            wants: Vec::new(),
            loaded: HashMap::default(),
            restored_calls: std::collections::HashMap::new(),
            keys: HashMap::default(),
            signal_waits: HashMap::default(),
            sched: Schedule::default(),
            decisions: Vec::new(),
            first_keys: HashMap::default(),
            quarantined: false,
            work: 0,
            digests: 0,
            unbounded: false,
        }
    }

    /// Lifts every step's `concurrency` limit (a fork's dry run, which holds the calls it
    /// would make live and must still look at the other elements of their `foreach`).
    pub fn lift_concurrency(&mut self) {
        self.unbounded = true;
    }

    /// Hands over a person's decisions about calls whose outcome is unknown, before `Resumed`
    /// (checked first with [`super::check_decisions`]).
    pub fn decide(&mut self, decisions: Vec<Decided>) {
        self.decisions = decisions;
    }

    /// Takes in what happened at `now` and decides what follows; an input the machine does not
    /// wait for now is ignored.
    pub fn handle(&mut self, now: i64, input: Input) {
        self.now = now;
        match (self.stage, input) {
            (Stage::Fresh, Input::Started) => {
                self.restore(Folded::default());
                self.stage = Stage::Round;
            }
            (Stage::Fresh, Input::Resumed { folded, reason, by }) => {
                self.record(Event::RunResumed { reason, by });
                self.restore(*folded);
                self.stage = Stage::Round;
            }
            (
                Stage::LoadingForRound | Stage::LoadingForDispatch | Stage::LoadingForOutput,
                Input::ValuesLoaded(values),
            ) => {
                let wants = std::mem::take(&mut self.wants);
                for (want, value) in wants.into_iter().zip(values) {
                    match want {
                        Want::Step(i) => self.values.fill(i, value),
                        Want::Call(digest) => {
                            self.loaded.insert(digest, value);
                        }
                    }
                }
                self.stage = match self.stage {
                    Stage::LoadingForRound => Stage::Round,
                    Stage::LoadingForDispatch => Stage::Dispatch,
                    _ => {
                        self.finish_succeeded();
                        return;
                    }
                };
            }
            (Stage::Launching, Input::Launched(returned)) => {
                let progressed = !returned.is_empty();
                for r in returned {
                    self.on_result(r);
                }
                if self.after_dispatch(progressed) {
                    return;
                }
            }
            (Stage::Waiting, Input::CallReturned(r)) => {
                self.on_result(r);
                return;
            }
            (Stage::IdleSignals { progressed }, Input::Signals(arrived)) => {
                if self.deliver_signals(arrived) || self.expire_signal_waits() {
                    self.stage = Stage::Round;
                } else if self.idle_end_or_wait(progressed) {
                    return;
                }
            }
            (Stage::Waiting, Input::Tick { poll }) => {
                if let Some(poll) = poll {
                    if poll.cancel_requested && !self.canceled {
                        self.canceled = true;
                        self.commands.push_back(Command::CancelCalls);
                    }
                    let waiting = self.signals_waited_for();
                    if !waiting.is_empty() {
                        self.commands.push_back(Command::FetchSignals(waiting));
                        self.stage = Stage::TickSignals;
                        return;
                    }
                    self.expire_signal_waits();
                }
                self.retry_due_backoffs();
                self.fire_due_timers();
                self.stage = Stage::Round;
            }
            (Stage::TickSignals, Input::Signals(arrived)) => {
                self.deliver_signals(arrived);
                self.expire_signal_waits();
                self.retry_due_backoffs();
                self.fire_due_timers();
                self.stage = Stage::Round;
            }
            (stage, Input::Interrupted) if stage != Stage::Done => {
                self.flush();
                self.commands.push_back(Command::Sync);
                self.stage = Stage::Done;
                return;
            }
            _ => return,
        }
        self.advance();
    }

    /// The next thing to do, in order.
    pub fn poll_command(&mut self) -> Option<Command> {
        self.commands.pop_front()
    }

    /// How many iterations the machine's loops have made so far: each step or call looked at
    /// once counts one. A test divides it by the calls made to show that the cost of an event
    /// does not grow with the flow's size.
    pub fn work(&self) -> u64 {
        self.work
    }

    /// How many values the machine has canonicalised and hashed so far: a test shows that a
    /// result handed in with its digest, or a step's output that is its one call's result, is
    /// not digested again.
    pub fn digests(&self) -> u64 {
        self.digests
    }

    /// Whether the run has ended, parked or stopped in this process.
    pub fn is_done(&self) -> bool {
        self.stage == Stage::Done
    }

    /// When the machine next has something to do without any input: the earliest retry,
    /// timer or signal timeout (absolute ms).
    pub fn next_deadline(&self) -> Option<i64> {
        match (self.earliest_backoff(), self.earliest_timer()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Events recorded and not yet handed over in an `Append` (for a driver that stops on a
    /// store error and hands over what it can).
    pub fn take_unsaved(&mut self) -> Vec<Stamped> {
        std::mem::take(&mut self.pending)
    }

    /// Runs rounds until one waits for an input or the run is done.
    fn advance(&mut self) {
        loop {
            match self.stage {
                Stage::Round => {
                    if self.failure.is_none() && !self.canceled && !self.activate_ready() {
                        return;
                    }
                    self.stage = Stage::Dispatch;
                }
                Stage::Dispatch => {
                    if self.failure.is_none() && !self.canceled {
                        if !self.start_ready_calls() {
                            return;
                        }
                        if !self.prepared.is_empty() {
                            // In `durable` mode the record of every start must land before its
                            // call is made; one sync covers all the calls started together.
                            if self.setup.durability == Durability::Durable
                                && self.prepared.iter().any(|r| r.call.kind != ToolKind::Pure)
                            {
                                self.flush();
                                self.commands.push_back(Command::Sync);
                            }
                            let calls = std::mem::take(&mut self.prepared);
                            self.commands.push_back(Command::Launch(calls));
                            self.stage = Stage::Launching;
                            return;
                        }
                    }
                    if self.after_dispatch(false) {
                        return;
                    }
                }
                _ => return,
            }
        }
    }

    /// The rest of a round once its calls are launched; true when the machine now waits for
    /// an input (or is done), false to run another round.
    fn after_dispatch(&mut self, progressed: bool) -> bool {
        // In `durable` mode every append is committed at once with an fsync. When calls
        // finished at once, the next round starts more calls and syncs their starts
        // anyway: leaving these ends to that commit makes one fsync per step, not two.
        // Before any wait, and in `fast` mode (whose writer gathers writes), they go now.
        if !(progressed && self.setup.durability == Durability::Durable) {
            self.flush();
        }
        if self.in_flight == 0 {
            if self.canceled {
                self.finish_canceled();
                return true;
            }
            if let Some(err) = self.failure.clone() {
                self.finish_failed(err);
                return true;
            }
            if self.sched.finished == self.steps.len() {
                self.finish_succeeded();
                return true;
            }
            if self.fire_due_timers() {
                self.stage = Stage::Round;
                return false;
            }
            let waiting = self.signals_waited_for();
            if !waiting.is_empty() {
                self.commands.push_back(Command::FetchSignals(waiting));
                self.stage = Stage::IdleSignals { progressed };
                return true;
            }
            return self.idle_end_or_wait(progressed);
        }
        self.wait(progressed);
        true
    }

    /// Nothing in flight and no signal delivered: park when nothing can happen without an
    /// input from outside, else wait.
    fn idle_end_or_wait(&mut self, progressed: bool) -> bool {
        if self.in_flight == 0 && !self.has_ready_work() && self.earliest_backoff().is_none() {
            self.park();
            return true;
        }
        self.wait(progressed);
        true
    }

    fn wait(&mut self, progressed: bool) {
        self.commands.push_back(Command::Wait {
            deadline: self.next_deadline(),
            at_once: progressed,
        });
        self.stage = Stage::Waiting;
    }

    fn run_id(&self) -> &str {
        &self.setup.run_id
    }

    fn record(&mut self, event: Event) {
        self.pending.push(Stamped {
            at: self.now,
            event,
        });
    }

    fn flush(&mut self) {
        if !self.pending.is_empty() {
            let events = std::mem::take(&mut self.pending);
            self.commands.push_back(Command::Append(events));
        }
    }

    fn progress(&mut self, p: Progress) {
        self.commands.push_back(Command::Progress(p));
    }

    /// The name of `value` (`canonical::name_text`); the driver is told to keep a value named
    /// by its digest, while a short one is its own name and needs no keeping.
    fn put(&mut self, value: &Value) -> String {
        self.digests += 1;
        let text = canonical_json(value);
        let name = name_text(&text);
        if literal(&name).is_none() {
            self.commands.push_back(Command::PutValue {
                digest: name.clone(),
                text,
            });
        }
        name
    }

    /// Asks for values; the machine waits in `stage` for them.
    fn load(&mut self, wants: Vec<(Want, String)>, stage: Stage) {
        let mut digests = Vec::with_capacity(wants.len());
        for (want, digest) in wants {
            self.wants.push(want);
            digests.push(digest);
        }
        self.commands.push_back(Command::LoadValues(digests));
        self.stage = stage;
    }

    /// Takes the journal's state: finished steps keep only their status and output digest
    /// (no value is loaded here: expressions ask for the few they need when they run).
    fn restore(&mut self, mut folded: Folded) {
        let redrive = matches!(
            folded.finished.as_deref(),
            Some("failed" | "canceled" | "quarantined")
        );
        let spec = self.spec.clone();
        for (i, s) in spec.steps.iter().enumerate() {
            if let Some(n) = folded.attempts.remove(&s.id) {
                self.steps[i].attempts = n;
            }
            match folded.steps.remove(&s.id) {
                Some(StepRecord::Succeeded {
                    output,
                    at,
                    attempts,
                }) => {
                    self.values.succeeded(i, output, None);
                    self.set_inactive(i, StepStatus::Succeeded);
                    self.steps[i].finished_at = at;
                    self.steps[i].attempts = attempts;
                }
                Some(StepRecord::Skipped { at }) => {
                    self.values.skipped(i);
                    self.set_inactive(i, StepStatus::Skipped);
                    self.steps[i].finished_at = at;
                }
                Some(StepRecord::Failed { error }) if !redrive => {
                    self.set_inactive(i, StepStatus::Failed);
                    self.failure.get_or_insert(error);
                }
                Some(StepRecord::Failed { .. }) | None => {}
            }
        }
        // Dependents of finished steps are released; ready steps are queued in order.
        for i in 0..self.steps.len() {
            if matches!(
                self.steps[i].status,
                StepStatus::Succeeded | StepStatus::Skipped
            ) {
                for d in self.steps[i].dependents.clone() {
                    self.steps[d].remaining -= 1;
                }
                self.forget_read_values(i);
            }
        }
        for i in 0..self.steps.len() {
            if self.steps[i].status == StepStatus::Pending && self.steps[i].remaining == 0 {
                self.ready.push_back(i);
            }
        }
        self.restored_calls = std::mem::take(&mut folded.calls);
        if redrive {
            // A redrive tries failed calls again; canceled ones too.
            for rec in self.restored_calls.values_mut() {
                if let CallRecord::Failed { retry_at, .. } = rec
                    && retry_at.is_none()
                {
                    *retry_at = Some(0);
                }
            }
        }
    }

    fn has_ready_work(&self) -> bool {
        !self.ready.is_empty() || self.sched.ready > 0
    }

    fn earliest_backoff(&self) -> Option<i64> {
        self.sched.backoffs.first().map(|b| b.0)
    }

    fn earliest_timer(&self) -> Option<i64> {
        let timer = self.sched.timers.first().map(|t| t.0);
        let deadline = self.sched.deadlines.first().map(|d| d.0);
        match (timer, deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The name a signal wait waits for.
    fn signal_name(&self, i: usize, c: usize) -> String {
        self.signal_waits
            .get(&(i, c))
            .map(|w| w.name.clone())
            .unwrap_or_default()
    }

    /// The names waiting calls wait for, one per call, in the order they are served.
    fn signals_waited_for(&self) -> Vec<String> {
        self.sched
            .signals
            .iter()
            .map(|&(i, c)| self.signal_name(i, c))
            .collect()
    }

    /// Sets call `c` of step `i` to `state`, keeping the schedule's indexes: every change of
    /// a call's state goes through here.
    fn set_call(&mut self, i: usize, c: usize, state: CallState) {
        let old = std::mem::replace(&mut self.steps[i].calls[c].state, state);
        if self.steps[i].status == StepStatus::Active {
            self.unindex(i, c, old);
            self.index(i, c, state);
        }
        if old == CallState::Signal && state != CallState::Signal {
            self.signal_waits.remove(&(i, c));
        }
    }

    /// Call `c` of step `i` is done with `value`: kept in the step's results, and the
    /// `foreach` element it was made for is let go.
    fn call_done(&mut self, i: usize, c: usize, value: &Value) {
        self.steps[i].result_digest = None;
        let at = self.steps[i].results.push(value);
        if let Some(item) = self.steps[i].items.get_mut(c) {
            *item = Value::Null;
        }
        self.set_call(i, c, CallState::Done(at));
    }

    /// Call `c` of step `i` waits for the signal `name` until `deadline`.
    fn call_waits(&mut self, i: usize, c: usize, name: String, deadline: Option<i64>) {
        self.signal_waits
            .insert((i, c), SignalWait { name, deadline });
        self.set_call(i, c, CallState::Signal);
    }

    /// The deadline of call `c` of step `i`'s signal wait.
    fn signal_deadline(&self, i: usize, c: usize) -> Option<i64> {
        self.signal_waits.get(&(i, c)).and_then(|w| w.deadline)
    }

    /// Adds call `c` of active step `i`, in `state`, to the schedule.
    fn index(&mut self, i: usize, c: usize, state: CallState) {
        match state {
            CallState::Ready => {
                self.steps[i].ready_calls.insert(c);
                self.sched.ready += 1;
            }
            CallState::Backoff(t) => {
                self.sched.backoffs.insert((t, i, c));
            }
            CallState::Timer(t) => {
                self.sched.timers.insert((t, i, c));
            }
            CallState::Signal => {
                self.sched.signals.insert((i, c));
                if let Some(d) = self.signal_deadline(i, c) {
                    self.sched.deadlines.insert((d, i, c));
                }
            }
            CallState::Done(_) => self.steps[i].done += 1,
            CallState::InFlight | CallState::Failed => {}
        }
    }

    /// Takes call `c` of active step `i`, which was in `state`, out of the schedule.
    fn unindex(&mut self, i: usize, c: usize, state: CallState) {
        match state {
            CallState::Ready => {
                self.steps[i].ready_calls.remove(c);
                self.sched.ready -= 1;
            }
            CallState::Backoff(t) => {
                self.sched.backoffs.remove(&(t, i, c));
            }
            CallState::Timer(t) => {
                self.sched.timers.remove(&(t, i, c));
            }
            CallState::Signal => {
                self.sched.signals.remove(&(i, c));
                if let Some(d) = self.signal_deadline(i, c) {
                    self.sched.deadlines.remove(&(d, i, c));
                }
            }
            CallState::Done(_) => self.steps[i].done -= 1,
            CallState::InFlight | CallState::Failed => {}
        }
    }

    /// Step `i` becomes active with `n` calls, all ready.
    fn set_active(&mut self, i: usize, n: usize) {
        self.steps[i].status = StepStatus::Active;
        self.steps[i].calls = (0..n)
            .map(|_| CallRt {
                state: CallState::Ready,
                attempt: 0,
                tries: 0,
            })
            .collect();
        self.steps[i].ready_calls = ReadyCalls {
            count: n,
            ..ReadyCalls::default()
        };
        self.steps[i].results = Results::default();
        self.steps[i].done = 0;
        self.sched.ready += n;
        self.sched.active.insert(i);
    }

    /// Step `i` leaves the active steps with `status`: its calls leave the schedule.
    fn set_inactive(&mut self, i: usize, status: StepStatus) {
        let was_active = self.steps[i].status == StepStatus::Active;
        if matches!(status, StepStatus::Succeeded | StepStatus::Skipped)
            && !matches!(
                self.steps[i].status,
                StepStatus::Succeeded | StepStatus::Skipped
            )
        {
            self.sched.finished += 1;
        }
        self.steps[i].status = status;
        if !was_active {
            return;
        }
        self.sched.active.remove(&i);
        self.work += self.steps[i].calls.len() as u64;
        for c in 0..self.steps[i].calls.len() {
            let state = self.steps[i].calls[c].state;
            if !matches!(state, CallState::Ready | CallState::Done(_)) {
                self.unindex(i, c, state);
            }
            if state == CallState::Signal {
                self.signal_waits.remove(&(i, c));
            }
        }
        self.sched.ready -= self.steps[i].ready_calls.count;
        self.steps[i].ready_calls = ReadyCalls::default();
        self.steps[i].done = 0;
    }

    /// The logical time a step's expressions see: the latest event it depends on.
    fn logical_now(&self, step: usize) -> i64 {
        // The step's dependencies by position (the flow's, less unknown names and repeats,
        // which change no maximum).
        self.steps[step]
            .deps
            .iter()
            .map(|&d| self.steps[d].finished_at)
            .fold(self.setup.started_at, i64::max)
    }

    fn scope<'s>(
        &'s self,
        step: Option<usize>,
        item: Option<(Value, u32)>,
        purpose: Purpose<'s>,
    ) -> RunScope<'s> {
        let now_ms = match step {
            Some(i) => self.logical_now(i),
            None => self
                .steps
                .iter()
                .map(|s| s.finished_at)
                .fold(self.setup.started_at, i64::max),
        };
        let (item, index) = match item {
            Some((v, i)) => (Some(v), Some(i)),
            None => (None, None),
        };
        RunScope {
            inputs: &self.setup.inputs,
            env: &self.setup.env,
            steps: &self.values,
            item,
            index,
            now_ms,
            seed: self.setup.seed,
            purpose,
            rng: None,
            faults: &self.setup.faults,
        }
    }

    /// Evaluates an expression of step `step`; a value it needed and that is not in memory
    /// discards the result and asks for the value (an evaluation is pure: it runs again).
    fn eval_at(
        &self,
        expr: &reel_flowspec::Expr,
        step: usize,
        item: Option<(Value, u32)>,
        purpose: Purpose<'_>,
    ) -> Go<Result<Value, RunError>> {
        let mut scope = self.scope(Some(step), item, purpose);
        let result = reel_eval::eval(expr, &mut scope)
            .map_err(|e| RunError::new(e.code, e.message).at_step(&self.spec.steps[step].id));
        missing_or(self.values.take_misses(), result)
    }

    fn fail_step(&mut self, i: usize, error: RunError) {
        let id = self.spec.steps[i].id.clone();
        let error = error.at_step(&id);
        self.set_inactive(i, StepStatus::Failed);
        self.record(Event::StepFailed {
            step: id.clone(),
            error: error.clone(),
        });
        let started = self.steps[i].started_at.unwrap_or(self.setup.started_at);
        let p = Progress::StepDone {
            step: id,
            state: StepEnd::Failed,
            duration_ms: self.now - started,
            attempts: self.steps[i].attempts,
            calls: self.steps[i].calls.len().max(1) as u32,
            detail: Some(error.code.clone()),
        };
        self.progress(p);
        if self.failure.is_none() {
            self.failure = Some(error);
        }
    }

    /// Step `i` succeeded with `value`, made of `calls` calls (1 for a step without a tool).
    /// Step `i` succeeded with `value`; `known` is its digest when the value is already kept
    /// under it (its one call's result).
    fn succeed_step(&mut self, i: usize, value: Value, known: Option<String>, calls: u32) {
        let id = self.spec.steps[i].id.clone();
        let digest = match known {
            Some(d) => d,
            None => self.put(&value),
        };
        // Kept in memory only while a step still to finish (or the output) may read it: the
        // value itself, not a copy (a 1,000,000-call step's list is 32 MB of `Value`s).
        let kept = (self.steps[i].readers_left > 0).then_some(value);
        let now = self.now;
        self.set_inactive(i, StepStatus::Succeeded);
        self.steps[i].finished_at = now;
        self.steps[i].items = Vec::new();
        self.values.succeeded(i, digest.clone(), kept);
        let attempts = self.steps[i].attempts;
        self.record(Event::StepSucceeded {
            step: id.clone(),
            output: digest,
            attempts,
        });
        let started = self.steps[i].started_at.unwrap_or(now);
        self.progress(Progress::StepDone {
            step: id,
            state: StepEnd::Succeeded,
            duration_ms: now - started,
            attempts,
            calls,
            detail: None,
        });
        self.steps[i].calls = Vec::new();
        self.release_dependents(i);
        self.forget_read_values(i);
    }

    /// Step `i` has finished: the steps it read lose a reader, and those left with none drop
    /// their values from memory.
    fn forget_read_values(&mut self, i: usize) {
        self.work += self.steps[i].deps.len() as u64;
        for k in 0..self.steps[i].deps.len() {
            let d = self.steps[i].deps[k];
            let left = &mut self.steps[d].readers_left;
            *left = left.saturating_sub(1);
            if *left == 0 {
                self.values.release(d);
            }
        }
    }

    fn release_dependents(&mut self, i: usize) {
        self.work += self.steps[i].dependents.len() as u64;
        for k in 0..self.steps[i].dependents.len() {
            let d = self.steps[i].dependents[k];
            self.steps[d].remaining -= 1;
            if self.steps[d].remaining == 0 && self.steps[d].status == StepStatus::Pending {
                self.ready.push_back(d);
            }
        }
    }

    /// Evaluates `when`, `foreach` and pure steps of every step whose dependencies are done;
    /// false when it waits for values to be loaded first.
    fn activate_ready(&mut self) -> bool {
        while let Some(i) = self.ready.pop_front() {
            self.work += 1;
            if self.failure.is_some() || self.canceled {
                return true;
            }
            if let Go::Load(wants) = self.activate(i) {
                // Nothing of the step was recorded: it is activated again once they are in.
                self.ready.push_front(i);
                self.load(wants, Stage::LoadingForRound);
                return false;
            }
        }
        true
    }

    fn activate(&mut self, i: usize) -> Go<()> {
        // The Arc, not the step: cloning a step copies its expressions and spans, and this
        // runs for every step (and `start_call`/`on_result` for every call).
        let flow = self.spec.clone();
        let spec = &flow.steps[i];
        self.steps[i].started_at = Some(self.now);
        if let Some(when) = &spec.when {
            let result = match self.eval_at(when, i, None, Purpose::Part(&spec.id, "when")) {
                Go::Load(w) => return Go::Load(w),
                Go::Ok(r) => r,
            };
            match result {
                Ok(Value::Bool(true)) => {}
                Ok(Value::Bool(false)) => {
                    let reason = format!("`when` was false: {}", reel_eval::to_source(when));
                    self.set_inactive(i, StepStatus::Skipped);
                    self.steps[i].finished_at = self.now;
                    self.values.skipped(i);
                    self.record(Event::StepSkipped {
                        step: spec.id.clone(),
                        reason: reason.clone(),
                    });
                    self.progress(Progress::StepDone {
                        step: spec.id.clone(),
                        state: StepEnd::Skipped,
                        duration_ms: 0,
                        attempts: 0,
                        calls: 0,
                        detail: Some(reason),
                    });
                    self.release_dependents(i);
                    self.forget_read_values(i);
                    return Go::Ok(());
                }
                Ok(other) => {
                    self.fail_step(
                        i,
                        RunError::new(
                            "eval.type",
                            format!(
                                "`when` must be true or false, found {}",
                                reel_eval::values::short(&other)
                            ),
                        ),
                    );
                    return Go::Ok(());
                }
                Err(e) => {
                    self.fail_step(i, e);
                    return Go::Ok(());
                }
            }
        }
        if spec.tool.is_none() {
            let Some(expr) = &spec.value else {
                self.fail_step(
                    i,
                    RunError::new("spec.invalid", "an expression step without a value"),
                );
                return Go::Ok(());
            };
            match self.eval_at(expr, i, None, Purpose::Step(&spec.id)) {
                Go::Load(w) => return Go::Load(w),
                Go::Ok(Ok(v)) => self.succeed_step(i, v, None, 1),
                Go::Ok(Err(e)) => self.fail_step(i, e),
            }
            return Go::Ok(());
        }
        let items = match &spec.foreach {
            Some(list) => match self.eval_at(list, i, None, Purpose::Part(&spec.id, "foreach")) {
                Go::Load(w) => return Go::Load(w),
                Go::Ok(Ok(Value::Array(items))) => Some(items),
                Go::Ok(Ok(other)) => {
                    self.fail_step(
                        i,
                        RunError::new(
                            "eval.type",
                            format!(
                                "`foreach` needs a list, found {}",
                                reel_eval::values::short(&other)
                            ),
                        ),
                    );
                    return Go::Ok(());
                }
                Go::Ok(Err(e)) => {
                    self.fail_step(i, e);
                    return Go::Ok(());
                }
            },
            None => None,
        };
        let n = items.as_ref().map_or(1, Vec::len);
        // Each call is looked at twice below at most: for its recorded result, then its
        // recorded state.
        self.work += 2 * n as u64;
        // The results the journal recorded for these calls are loaded before the step begins.
        let mut wants = Vec::new();
        // A fresh run (or a replay) restores nothing: no key is made to look for.
        let restored = if self.restored_calls.is_empty() { 0 } else { n };
        for c in 0..restored {
            let index = spec.foreach.as_ref().map(|_| c as u32);
            if let Some(CallRecord::Done { output, .. }) =
                self.restored_calls.get(&(spec.id.clone(), index))
                && !self.loaded.contains_key(output)
            {
                wants.push((Want::Call(output.clone()), output.clone()));
            }
        }
        if !wants.is_empty() {
            return Go::Load(wants);
        }
        self.steps[i].items = items.unwrap_or_default();
        self.set_active(i, n);
        self.progress(Progress::StepRunning {
            step: spec.id.clone(),
            calls: spec.foreach.as_ref().map(|_| n),
        });
        // What the journal already says about these calls.
        for c in 0..restored {
            let index = spec.foreach.as_ref().map(|_| c as u32);
            if let Some(rec) = self.restored_calls.remove(&(spec.id.clone(), index)) {
                let (rt, then) = match rec {
                    CallRecord::Started {
                        attempt,
                        key: Some(key),
                    } => self.unknown_outcome(i, index, attempt, key),
                    CallRecord::Started { attempt, key: None } => (
                        CallRt {
                            state: CallState::Ready,
                            attempt: attempt.saturating_sub(1),
                            tries: attempt.saturating_sub(1),
                        },
                        Then::Plain,
                    ),
                    CallRecord::Done { output, attempt } => (
                        CallRt {
                            state: CallState::Ready,
                            attempt,
                            tries: attempt,
                        },
                        Then::Done(self.loaded.get(&output).cloned().unwrap_or(Value::Null)),
                    ),
                    CallRecord::Failed {
                        attempt,
                        retry_at: Some(t),
                        ..
                    } => (
                        CallRt {
                            state: CallState::Backoff(t),
                            attempt,
                            tries: if t == 0 { 0 } else { attempt },
                        },
                        Then::Plain,
                    ),
                    CallRecord::Failed {
                        attempt,
                        retry_at: None,
                        error,
                    } => {
                        self.steps[i].calls[c].attempt = attempt;
                        self.fail_step(i, error);
                        (
                            CallRt {
                                state: CallState::Failed,
                                attempt,
                                tries: attempt,
                            },
                            Then::Plain,
                        )
                    }
                    CallRecord::Timer { until } => (
                        CallRt {
                            state: CallState::Timer(until),
                            attempt: 1,
                            tries: 1,
                        },
                        Then::Plain,
                    ),
                    CallRecord::Signal { name, deadline } => (
                        CallRt {
                            state: CallState::Signal,
                            attempt: 1,
                            tries: 1,
                        },
                        Then::Wait(name, deadline),
                    ),
                };
                self.steps[i].calls[c].attempt = rt.attempt;
                self.steps[i].calls[c].tries = rt.tries;
                match then {
                    Then::Plain => self.set_call(i, c, rt.state),
                    Then::Done(value) => self.call_done(i, c, &value),
                    Then::Wait(name, deadline) => self.call_waits(i, c, name, deadline),
                }
            }
        }
        self.loaded.clear();
        if self.steps[i].status == StepStatus::Active {
            self.complete_if_done(i);
        }
        Go::Ok(())
    }

    /// An effect call of step `i` whose start the journal records but not its result: whether
    /// the tool acted is unknown. It is attempted again with the same key, unless its tool is
    /// declared `repeat: "never"`: then the step fails with `run.unknown-outcome` until a person
    /// decides (a result to record, or a retry). The journal says which, before anything else
    /// of the call.
    fn unknown_outcome(
        &mut self,
        i: usize,
        index: Option<u32>,
        attempt: u32,
        key: String,
    ) -> (CallRt, Then) {
        let id = self.spec.steps[i].id.clone();
        let decision = self
            .decisions
            .iter()
            .filter(|d| d.covers(&id, index))
            // A decision about this one call wins over one about the whole step.
            .max_by_key(|d| d.index.is_some())
            .map(|d| d.decision.clone());
        let again = CallRt {
            state: CallState::Ready,
            attempt: attempt.saturating_sub(1),
            tries: attempt.saturating_sub(1),
        };
        let then = match &decision {
            Some(Decision::Accept(_)) => Resolution::Accepted,
            Some(Decision::Retry) => Resolution::Retried,
            None if never_repeated(&self.spec, &id) => Resolution::Held,
            None => Resolution::Repeated,
        };
        self.record(Event::UnknownOutcome {
            step: id.clone(),
            index,
            attempt,
            key: key.clone(),
            then,
        });
        match (then, decision) {
            (Resolution::Accepted, Some(Decision::Accept(value))) => {
                let digest = self.put(&value);
                self.record(Event::EffectRecorded {
                    step: id,
                    index,
                    attempt,
                    key,
                    result: digest,
                });
                (
                    CallRt {
                        state: CallState::Ready,
                        attempt,
                        tries: attempt,
                    },
                    Then::Done(value),
                )
            }
            (Resolution::Held, _) => {
                let call = match index {
                    Some(ix) => format!("{id}[{ix}]"),
                    None => id.clone(),
                };
                let tool = self.spec.steps[i].tool.clone().unwrap_or_default();
                let run = self.setup.run_id.clone();
                let error = RunError::new(
                    "run.unknown-outcome",
                    format!(
                        "the outcome of `{call}` is unknown: its start (attempt {attempt}) was \
                         recorded but not its result, and its tool `{tool}` is declared \
                         `repeat: \"never\"`; decide with `reel resume {run} --accept \
                         {call}=JSON` (records JSON as its result) or `reel resume {run} --retry \
                         {call}` (attempts it again with the same idempotency key)"
                    ),
                );
                self.fail_step(i, error);
                (
                    CallRt {
                        state: CallState::Failed,
                        attempt,
                        tries: attempt,
                    },
                    Then::Plain,
                )
            }
            _ => {
                let c = index.map_or(0, |ix| ix as usize);
                self.first_keys.insert((i, c), key);
                (again, Then::Plain)
            }
        }
    }

    fn complete_if_done(&mut self, i: usize) {
        if self.steps[i].status != StepStatus::Active {
            return;
        }
        if self.steps[i].done != self.steps[i].calls.len() {
            return;
        }
        let n = self.steps[i].calls.len();
        self.work += n as u64;
        // The list is assembled once, here, from the results' text; what the calls needed is
        // let go first.
        self.steps[i].items = Vec::new();
        let results = std::mem::take(&mut self.steps[i].results);
        let mut values: Vec<Value> = self.steps[i]
            .calls
            .iter()
            .map(|c| match c.state {
                CallState::Done(at) => results.get(at),
                _ => Value::Null,
            })
            .collect();
        drop(results);
        // Every call is done: their states go before the list's digest and text are made (24
        // bytes a call, 24 MB at 1,000,000 calls, the peak of a wide `foreach`).
        self.steps[i].calls = Vec::new();
        let (value, digest) = if self.steps[i].foreach {
            (Value::Array(values), None)
        } else {
            let digest = self.steps[i].result_digest.take();
            (values.pop().unwrap_or(Value::Null), digest)
        };
        self.succeed_step(i, value, digest, n.max(1) as u32);
    }

    /// Records the start of every ready call the limits allow; false when it waits for values
    /// to be loaded first.
    fn start_ready_calls(&mut self) -> bool {
        if self.sched.ready == 0 {
            return true;
        }
        let active: Vec<usize> = self.sched.active.iter().copied().collect();
        'steps: for i in active {
            self.work += 1;
            let limit = if self.unbounded {
                usize::MAX
            } else if self.steps[i].foreach {
                self.spec.steps[i].concurrency.max(1) as usize
            } else {
                1
            };
            // The lowest ready call first, as the step's calls are numbered.
            while let Some(c) = self.first_ready(i) {
                self.work += 1;
                // Calls already started in this round are still made: their starts are recorded.
                if self.failure.is_some() || self.canceled {
                    break 'steps;
                }
                if self.in_flight >= self.setup.max_parallel || self.steps[i].in_flight >= limit {
                    break;
                }
                match self.start_call(i, c) {
                    Go::Ok(Some(call)) => self.prepared.push(call),
                    Go::Ok(None) => {}
                    Go::Load(wants) => {
                        self.load(wants, Stage::LoadingForDispatch);
                        return false;
                    }
                }
                if self.first_ready(i) == Some(c) {
                    // Still ready (nothing moved it on): never loop on it.
                    break;
                }
            }
        }
        true
    }

    /// The lowest ready call of step `i`.
    fn first_ready(&mut self, i: usize) -> Option<usize> {
        let step = &mut self.steps[i];
        step.ready_calls.first(&step.calls, &mut self.work)
    }

    /// Records the start of call `c` of step `i` and prepares it; timers and signal waits need
    /// no call and give `None`, as does a call whose arguments fail to evaluate.
    fn start_call(&mut self, i: usize, c: usize) -> Go<Option<CallStart>> {
        let flow = self.spec.clone();
        let spec = &flow.steps[i];
        let index = spec.foreach.as_ref().map(|_| c as u32);
        let item = index.map(|ix| (self.steps[i].items[c].clone(), ix));
        let purpose = match index {
            Some(ix) => Purpose::Element(&spec.id, ix),
            None => Purpose::Step(&spec.id),
        };
        let mut args = Map::new();
        let mut shown = Map::new();
        for (name, expr) in &spec.args {
            if let Node::Secret { name: secret } = &expr.node {
                let value = self
                    .setup
                    .secrets
                    .iter()
                    .find(|(n, _)| n == secret)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default();
                args.insert(name.clone(), Value::String(value));
                shown.insert(name.clone(), Value::String(format!("{{secret:{secret}}}")));
                continue;
            }
            match self.eval_at(expr, i, item.clone(), purpose) {
                Go::Load(w) => return Go::Load(w),
                Go::Ok(Ok(v)) => {
                    args.insert(name.clone(), v.clone());
                    shown.insert(name.clone(), v);
                }
                Go::Ok(Err(e)) => {
                    self.set_call(i, c, CallState::Failed);
                    self.fail_step(i, e);
                    return Go::Ok(None);
                }
            }
        }
        let tool = spec.tool.clone().unwrap_or_default();
        let now = self.now;
        match tool.as_str() {
            "sleep" => {
                let until = match sleep_until(&args, now) {
                    Ok(t) => t,
                    Err(e) => {
                        self.set_call(i, c, CallState::Failed);
                        self.fail_step(i, e);
                        return Go::Ok(None);
                    }
                };
                self.steps[i].calls[c].attempt = 1;
                self.steps[i].calls[c].tries = 1;
                self.set_call(i, c, CallState::Timer(until));
                self.steps[i].attempts += 1;
                self.record(Event::TimerStarted {
                    step: spec.id.clone(),
                    index,
                    until,
                });
                return Go::Ok(None);
            }
            "signal" => {
                let name = args
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                // A deadline later than any time Reel can keep never comes: no deadline.
                let deadline = spec.timeout.and_then(|d| later_by(now, d));
                self.steps[i].calls[c].attempt = 1;
                self.steps[i].calls[c].tries = 1;
                self.call_waits(i, c, name.clone(), deadline);
                self.steps[i].attempts += 1;
                self.record(Event::SignalAwaited {
                    step: spec.id.clone(),
                    index,
                    name,
                    deadline,
                });
                return Go::Ok(None);
            }
            _ => {}
        }
        let inputs_digest = self.put(&Value::Object(shown));
        let started_inputs = inputs_digest.clone();
        let key = (spec.kind == ToolKind::Effect && self.setup.idempotency_keys)
            .then(|| idempotency_key(self.run_id(), &spec.id, index, &inputs_digest));
        if let Some(first) = self.first_keys.remove(&(i, c))
            && self.setup.idempotency_keys
            && key.as_deref() != Some(first.as_str())
        {
            // The same program computed other inputs from the same journal: the platform
            // changed (an evaluator, a builtin), not the flow. Made again, the effect would
            // carry a new key, so it is not made: the run waits for a person.
            let call = match index {
                Some(ix) => format!("`{}`[{ix}]", spec.id),
                None => format!("`{}`", spec.id),
            };
            let run = self.setup.run_id.clone();
            let error = RunError::new(
                "run.diverged",
                format!(
                    "resuming the run, the call of {call} whose outcome is unknown computed other \
                     inputs than the journal recorded for it, with the same flow: a fault of the \
                     platform, not of the flow; its effect was not made again. The run is \
                     quarantined: `reel release {run}` tries again (after updating or fixing \
                     reel), `reel abandon {run}` ends it as failed"
                ),
            )
            .at_step(&spec.id);
            self.set_call(i, c, CallState::Failed);
            self.quarantined = true;
            self.fail_step(i, error);
            return Go::Ok(None);
        }
        if let Some(k) = &key {
            self.keys.insert((i, c), k.clone());
        }
        self.set_call(i, c, CallState::InFlight);
        let call = &mut self.steps[i].calls[c];
        call.attempt += 1;
        call.tries += 1;
        let attempt = call.attempt;
        self.steps[i].attempts += 1;
        self.steps[i].in_flight += 1;
        self.in_flight += 1;
        self.record(Event::StepStarted {
            step: spec.id.clone(),
            index,
            attempt,
            inputs: started_inputs,
            key: key.clone(),
        });
        let user = spec
            .tool
            .as_ref()
            .and_then(|t| self.spec.tools.get(t))
            .map(|t| UserTool {
                exec: t.exec.clone(),
                dir: PathBuf::from(&t.dir),
                output: t.output.clone(),
            });
        let call = ToolCall {
            tool,
            kind: spec.kind,
            args,
            idempotency_key: key,
            run_dir: self.setup.cwd.clone(),
            env: self.call_env.clone(),
            user,
            timeout: spec
                .timeout
                .map(|d| std::time::Duration::from_millis(d.millis())),
            secrets: self.setup.secrets.clone(),
        };
        Go::Ok(Some(CallStart {
            step: i,
            index: c,
            attempt,
            inputs: inputs_digest,
            call,
        }))
    }

    fn on_result(&mut self, r: Returned) {
        let i = r.step;
        let (Some(step), Some(call)) = (
            self.steps.get(i),
            self.steps.get(i).and_then(|s| s.calls.get(r.index)),
        ) else {
            return;
        };
        if !matches!(call.state, CallState::InFlight) || step.in_flight == 0 {
            // Not a call this machine made (a driver's mistake): nothing to record.
            return;
        }
        self.in_flight -= 1;
        self.steps[i].in_flight -= 1;
        let flow = self.spec.clone();
        let spec = &flow.steps[i];
        let index = spec.foreach.as_ref().map(|_| r.index as u32);
        let log = match &r.outcome {
            Ok(o) => &o.log,
            Err(e) => &e.log,
        };
        if !log.is_empty() {
            let text = scrub(log, &self.setup.secrets);
            self.commands.push_back(Command::Log {
                step: spec.id.clone(),
                index,
                attempt: r.attempt,
                at: self.now,
                text,
            });
        }
        match r.outcome {
            Ok(out) => {
                let digest = match r.digest {
                    // Read from the store under its digest: recorded (and scrubbed) already.
                    Some(d) => {
                        let at = self.steps[i].results.push(&out.value);
                        (at, d)
                    }
                    None => {
                        // What a tool returns is recorded; a secret it echoes back is not.
                        let value = if self.setup.secrets.is_empty() {
                            out.value
                        } else {
                            scrub_value(&out.value, &self.setup.secrets)
                        };
                        let at = self.steps[i].results.push(&value);
                        (at, self.put(&value))
                    }
                };
                let (at, digest) = digest;
                if !self.steps[i].foreach {
                    self.steps[i].result_digest = Some(digest.clone());
                }
                if let Some(from) = r.reused {
                    self.record(Event::CallReused {
                        step: spec.id.clone(),
                        index,
                        attempt: r.attempt,
                        parent: from.parent,
                        seq: from.seq,
                    });
                }
                let event = if spec.kind == ToolKind::Effect {
                    Event::EffectRecorded {
                        step: spec.id.clone(),
                        index,
                        attempt: r.attempt,
                        key: self.keys.remove(&(i, r.index)).unwrap_or_default(),
                        result: digest,
                    }
                } else {
                    Event::CallSucceeded {
                        step: spec.id.clone(),
                        index,
                        attempt: r.attempt,
                        output: digest,
                    }
                };
                self.record(event);
                self.keys.remove(&(i, r.index));
                if index.is_some() {
                    self.progress(Progress::CallDone {
                        step: spec.id.clone(),
                    });
                }
                if let Some(item) = self.steps[i].items.get_mut(r.index) {
                    *item = Value::Null;
                }
                self.set_call(i, r.index, CallState::Done(at));
                self.complete_if_done(i);
            }
            Err(e) => {
                let cause = e
                    .cause
                    .as_ref()
                    .map(|c| self.put(&scrub_value(c, &self.setup.secrets)));
                let mut error = RunError {
                    code: e.code.to_string(),
                    message: scrub(&e.message, &self.setup.secrets),
                    step: Some(spec.id.clone()),
                    retryable: e.retryable,
                    cause,
                };
                if self.canceled {
                    error = RunError::new(
                        "run.canceled",
                        "the run was canceled while this call was in flight",
                    )
                    .at_step(&spec.id);
                }
                let tries = self.steps[i].calls[r.index].tries;
                let can_retry = error.retryable
                    && tries < spec.retry.max
                    && self.failure.is_none()
                    && !self.canceled;
                let retry_at = can_retry
                    .then(|| self.now + backoff_ms(self.setup.seed, spec, index, r.attempt));
                self.record(Event::CallFailed {
                    step: spec.id.clone(),
                    index,
                    attempt: r.attempt,
                    error: error.clone(),
                    retry_at,
                });
                match retry_at {
                    Some(t) => {
                        self.set_call(i, r.index, CallState::Backoff(t));
                        self.progress(Progress::Retrying {
                            step: spec.id.clone(),
                            attempt: r.attempt,
                            code: error.code.clone(),
                        });
                    }
                    None => {
                        self.set_call(i, r.index, CallState::Failed);
                        if self.canceled {
                            self.set_inactive(i, StepStatus::Failed);
                        } else {
                            self.fail_step(i, error);
                        }
                    }
                }
            }
        }
    }

    fn retry_due_backoffs(&mut self) {
        while let Some(&(t, i, c)) = self.sched.backoffs.first() {
            if t > self.now {
                break;
            }
            self.set_call(i, c, CallState::Ready);
        }
    }

    /// Fires the timers that are due; true when any fired.
    fn fire_due_timers(&mut self) -> bool {
        let now = self.now;
        // In step and call order, as they are recorded.
        let mut due: Vec<(usize, usize, i64)> = self
            .sched
            .timers
            .iter()
            .take_while(|(t, _, _)| *t <= now)
            .map(|&(t, i, c)| (i, c, t))
            .collect();
        due.sort_unstable();
        self.work += due.len() as u64;
        for &(i, c, until) in &due {
            let flow = self.spec.clone();
            let spec = &flow.steps[i];
            let index = spec.foreach.as_ref().map(|_| c as u32);
            let woke = woke_value(until);
            self.call_done(i, c, &woke);
            self.put(&woke);
            self.record(Event::TimerFired {
                step: spec.id.clone(),
                index,
                until,
            });
            self.complete_if_done(i);
        }
        !due.is_empty()
    }

    /// Fails signal waits whose deadline passed; true when any did.
    fn expire_signal_waits(&mut self) -> bool {
        let now = self.now;
        let mut expired: Vec<(usize, usize, String)> = self
            .sched
            .deadlines
            .iter()
            .take_while(|(d, _, _)| *d <= now)
            .map(|&(_, i, c)| (i, c, self.signal_name(i, c)))
            .collect();
        expired.sort_unstable();
        self.work += expired.len() as u64;
        for (i, c, name) in &expired {
            let id = self.spec.steps[*i].id.clone();
            let index = self.spec.steps[*i].foreach.as_ref().map(|_| *c as u32);
            let error = RunError::new(
                "signal.timeout",
                format!("no signal `{name}` arrived before the step's timeout"),
            )
            .at_step(&id);
            self.record(Event::CallFailed {
                step: id,
                index,
                attempt: 1,
                error: error.clone(),
                retry_at: None,
            });
            self.set_call(*i, *c, CallState::Failed);
            self.fail_step(*i, error);
        }
        !expired.is_empty()
    }

    /// Delivers arrived signals to the steps waiting for them; true when any was delivered.
    fn deliver_signals(&mut self, mut arrived: Vec<ArrivedSignal>) -> bool {
        let waiting: Vec<(usize, usize, String)> = self
            .sched
            .signals
            .iter()
            .map(|&(i, c)| (i, c, self.signal_name(i, c)))
            .collect();
        self.work += waiting.len() as u64;
        let mut delivered = false;
        for (i, c, name) in waiting {
            let Some(pos) = arrived.iter().position(|s| s.name == name) else {
                continue;
            };
            let signal = arrived.remove(pos);
            let id = self.spec.steps[i].id.clone();
            let index = self.spec.steps[i].foreach.as_ref().map(|_| c as u32);
            self.record(Event::SignalReceived {
                step: id,
                index,
                name,
                signal: signal.seq,
                payload: signal.payload_digest,
            });
            // The signal is marked with the event that consumed it: the event goes first.
            self.flush();
            self.commands
                .push_back(Command::ConsumeSignal { signal: signal.seq });
            self.call_done(i, c, &signal.payload);
            self.complete_if_done(i);
            delivered = true;
        }
        if delivered {
            // The mark goes only if nothing else is left unconsumed (the store checks).
            self.commands.push_back(Command::ClearSignalPending);
            self.flush();
            self.commands.push_back(Command::Sync);
        }
        delivered
    }

    fn park(&mut self) {
        let mut signals: Vec<String> = Vec::new();
        let mut details: Vec<(String, String)> = Vec::new();
        // Signal waits and timers, in step and call order.
        let mut parked: Vec<(usize, usize)> = self.sched.signals.iter().copied().collect();
        parked.extend(self.sched.timers.iter().map(|&(_, i, c)| (i, c)));
        parked.sort_unstable();
        self.work += parked.len() as u64;
        for (i, c) in parked {
            match self.steps[i].calls[c].state {
                CallState::Signal => {
                    let name = self.signal_name(i, c);
                    details.push((self.spec.steps[i].id.clone(), format!("signal `{name}`")));
                    if !signals.contains(&name) {
                        signals.push(name);
                    }
                }
                CallState::Timer(t) => details.push((
                    self.spec.steps[i].id.clone(),
                    format!("timer until {}", rfc3339(t)),
                )),
                _ => {}
            }
        }
        details.dedup();
        let due_at = self.earliest_timer();
        self.record(Event::RunWaiting {
            due_at,
            signals: signals.clone(),
        });
        // The journal's events go before the row that says the run waits.
        self.flush();
        self.commands.push_back(Command::Park { due_at, signals });
        for (step, what) in details {
            self.progress(Progress::StepDone {
                step,
                state: StepEnd::Waiting,
                duration_ms: 0,
                attempts: 1,
                calls: 1,
                detail: Some(what),
            });
        }
        self.commands.push_back(Command::Finish(Ending::Waiting));
        self.stage = Stage::Done;
    }

    fn finish_succeeded(&mut self) {
        let output = match &self.spec.output {
            Some(out) => {
                let mut scope = self.scope(None, None, Purpose::Text("#output"));
                let result = reel_eval::eval(&out.expr, &mut scope);
                drop(scope);
                let misses = self.values.take_misses();
                if !misses.is_empty() {
                    let wants = misses
                        .into_iter()
                        .map(|(i, d)| (Want::Step(i), d))
                        .collect();
                    self.load(wants, Stage::LoadingForOutput);
                    return;
                }
                match result {
                    Ok(v) => match reel_eval::check_value(&v, &out.ty) {
                        Ok(()) => Ok(v),
                        Err(m) => Err(RunError::new(
                            "output.type",
                            format!("the output does not fit its type: {m}"),
                        )),
                    },
                    Err(e) => Err(RunError::new(
                        e.code,
                        format!("the output cannot be computed: {}", e.message),
                    )),
                }
            }
            None => Ok(Value::Null),
        };
        let output = match output {
            Ok(v) => v,
            Err(e) => return self.finish_failed(e),
        };
        let digest = self.put(&output);
        self.record(Event::RunFinished {
            status: "succeeded".into(),
            output: Some(digest.clone()),
            error: None,
        });
        self.end(Ending::Succeeded { digest, output });
    }

    fn finish_failed(&mut self, error: RunError) {
        if self.quarantined {
            self.record(Event::RunFinished {
                status: "quarantined".into(),
                output: None,
                error: Some(error.clone()),
            });
            self.end(Ending::Quarantined(error));
            return;
        }
        self.record(Event::RunFinished {
            status: "failed".into(),
            output: None,
            error: Some(error.clone()),
        });
        self.end(Ending::Failed(error));
    }

    fn finish_canceled(&mut self) {
        let error = RunError::new("run.canceled", "the run was canceled with `reel cancel`");
        self.record(Event::RunFinished {
            status: "canceled".into(),
            output: None,
            error: Some(error.clone()),
        });
        self.end(Ending::Canceled(error));
    }

    fn end(&mut self, ending: Ending) {
        // The journal's events go before the row that says how the run ended.
        self.flush();
        self.commands.push_back(Command::Finish(ending));
        self.stage = Stage::Done;
    }
}

/// The steps `expr` names, by their index (as often as named).
fn steps_named(expr: &Expr, index: &rustc_hash::FxHashMap<String, usize>, out: &mut Vec<usize>) {
    if let Node::Step { name } = &expr.node
        && let Some(&i) = index.get(name)
    {
        out.push(i);
    }
    for child in expr.node.children() {
        steps_named(child, index, out);
    }
}

/// `result`, unless the evaluation missed values: then those, to load.
fn missing_or<T>(misses: Vec<(usize, String)>, result: T) -> Go<T> {
    if misses.is_empty() {
        Go::Ok(result)
    } else {
        Go::Load(
            misses
                .into_iter()
                .map(|(i, d)| (Want::Step(i), d))
                .collect(),
        )
    }
}

/// How long to wait before attempt `attempt + 1`: the step's backoff, with jitter drawn from
/// the run's seed (the same on every replay).
fn backoff_ms(seed: u64, spec: &StepSpec, index: Option<u32>, attempt: u32) -> i64 {
    let base = spec.retry.base.millis() as f64;
    let delay = match spec.retry.backoff {
        Backoff::Exp => base * 2f64.powi(attempt.saturating_sub(1).min(20) as i32),
        Backoff::Fixed => base,
    }
    .min(600_000.0);
    let delay = if spec.retry.jitter {
        use rand::Rng;
        let purpose = format!(
            "{}#{}#jitter#{attempt}",
            spec.id,
            index.map_or(-1, i64::from)
        );
        let r: f64 = seeded_rng(seed, &purpose).random();
        delay / 2.0 + r * delay / 2.0
    } else {
        delay
    };
    delay as i64
}

/// The time `d` after `now` (ms since the epoch), unless it is later than the latest time
/// Reel can keep and show, the end of the year 9999 (as RFC 3339 times, and `sleep`'s `until`,
/// go no further): a sum past it wrapped around to a time long past, so a wait meant to last
/// ages ended at once.
fn later_by(now: i64, d: reel_flowspec::Duration) -> Option<i64> {
    i64::try_from(d.millis())
        .ok()
        .and_then(|ms| now.checked_add(ms))
        .filter(|&t| t <= jiff::Timestamp::MAX.as_millisecond())
}

/// When a `sleep` call is due.
fn sleep_until(args: &Map<String, Value>, now: i64) -> Result<i64, RunError> {
    if let Some(d) = args.get("for").filter(|v| !v.is_null()) {
        let text = d.as_str().unwrap_or_default();
        let dur = reel_flowspec::Duration::parse(text).ok_or_else(|| {
            RunError::new(
                "tool.sleep.for",
                format!("`for` must be a duration such as 10s, found {d}"),
            )
        })?;
        return later_by(now, dur).ok_or_else(|| {
            RunError::new(
                "tool.sleep.for",
                format!(
                    "`for` is {dur}, which ends after {}, later than any time Reel can keep: \
                     sleep for less, or wait for a signal",
                    jiff::Timestamp::from_second(jiff::Timestamp::MAX.as_second())
                        .unwrap_or(jiff::Timestamp::MAX)
                ),
            )
        });
    }
    if let Some(u) = args.get("until").filter(|v| !v.is_null()) {
        let text = u.as_str().unwrap_or_default();
        let t: jiff::Timestamp = text.parse().map_err(|e| {
            RunError::new(
                "tool.sleep.until",
                format!(
                    "`until` must be an RFC 3339 time such as 2026-01-01T09:00:00Z, found {u}: {e}"
                ),
            )
        })?;
        return Ok(t.as_millisecond());
    }
    Err(RunError::new("tool.args", "`sleep` needs `for` or `until`"))
}

fn scrub_value(v: &Value, secrets: &[(String, String)]) -> Value {
    match v {
        Value::String(s) => Value::String(scrub(s, secrets)),
        Value::Array(a) => Value::Array(a.iter().map(|x| scrub_value(x, secrets)).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, x)| (k.clone(), scrub_value(x, secrets)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `{"x": {"x": … 0 …}}`, `levels` deep.
    fn deep(levels: usize) -> Value {
        (0..levels).fold(json!(0), |v, _| json!({ "x": v }))
    }

    #[test]
    fn results_come_back_exactly_as_kept() {
        // Floats stay floats (`1.0` is not `1`), 64-bit integers keep every digit, a result
        // of 128 bytes or more takes a longer length, and one deeper than serde_json's 128
        // levels comes back whole.
        let kept = [
            json!(1.0),
            json!(-0.0),
            json!(1234567890123456789u64),
            json!(-9223372036854775808i64),
            json!({"b": [1, 2.5, null], "a": "é\n\"", "c": {"d": true}}),
            json!("x".repeat(300)),
            json!(null),
            json!([]),
            deep(1000),
        ];
        let mut results = Results::default();
        let at: Vec<usize> = kept.iter().map(|v| results.push(v)).collect();
        for (v, at) in kept.iter().zip(at).rev() {
            let back = results.get(at);
            assert_eq!(&back, v);
            assert_eq!(back.is_f64(), v.is_f64(), "{v}");
        }
    }

    #[test]
    fn ready_calls_come_lowest_first_without_a_set_of_all() {
        let call = |state| CallRt {
            state,
            attempt: 0,
            tries: 0,
        };
        let mut calls = vec![call(CallState::Ready); 5];
        let mut ready = ReadyCalls {
            count: 5,
            ..ReadyCalls::default()
        };
        let mut work = 0;
        // Calls 0 and 1 start; 2 is restored done.
        for c in 0..3 {
            assert_eq!(ready.first(&calls, &mut work), Some(c.min(2)));
            calls[c].state = if c < 2 {
                CallState::InFlight
            } else {
                CallState::Done(0)
            };
            ready.remove(c);
        }
        assert_eq!(ready.first(&calls, &mut work), Some(3));
        assert!(ready.again.is_empty(), "calls from `fresh` on need no set");
        // Call 1 fails and is due again: it comes before 3.
        calls[1].state = CallState::Ready;
        ready.insert(1);
        assert_eq!(ready.first(&calls, &mut work), Some(1));
        calls[1].state = CallState::InFlight;
        ready.remove(1);
        for c in 3..5 {
            assert_eq!(ready.first(&calls, &mut work), Some(c));
            calls[c].state = CallState::InFlight;
            ready.remove(c);
        }
        assert_eq!(ready.first(&calls, &mut work), None);
        assert_eq!(ready.count, 0);
        assert!(work <= 5, "each call is passed once: {work}");
    }
}
