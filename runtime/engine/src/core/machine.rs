//! One run's state and its transitions: which steps run, which calls start, what is recorded,
//! when the run waits, parks or ends. Pure: every effect is a [`Command`] for the driver.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;

use reel_flowspec::canonical::{canonical_json, sha256_hex};
use reel_flowspec::{Backoff, FlowSpec, Node, StepSpec, ToolKind};
use reel_store::Durability;
use reel_tools::{ToolCall, UserTool, scrub};
use serde_json::{Map, Value};

use super::command::{CallStart, Command, Ending, Stamped};
use super::input::{ArrivedSignal, Input, Returned};
use crate::deps::{Progress, StepEnd};
use crate::error::RunError;
use crate::fold::{CallRecord, Folded, StepRecord};
use crate::journal::{Event, woke_value};
use crate::scope::{RunScope, StepValues, idempotency_key, rfc3339, seeded_rng};

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
    pub secrets: Vec<(String, String)>,
    /// The write mode.
    pub durability: Durability,
    /// Most calls in flight at once.
    pub max_parallel: usize,
    /// Builtin functions whose results are deliberately changed: a test's fault injection
    /// (`reel replay --verify` must catch it); empty in every real run.
    pub faults: Vec<String>,
}

#[derive(Clone, Debug, PartialEq)]
enum StepStatus {
    Pending,
    Active,
    Succeeded,
    Skipped,
    Failed,
}

#[derive(Clone, Debug)]
enum CallState {
    Ready,
    Backoff(i64),
    InFlight,
    Timer(i64),
    Signal { name: String, deadline: Option<i64> },
    Done(Value),
    Failed,
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
    items: Vec<Value>,
    foreach: bool,
    in_flight: usize,
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
    steps: Vec<StepRt>,
    index: Arc<HashMap<String, usize>>,
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
    restored_calls: HashMap<(String, Option<u32>), CallRecord>,
    /// The idempotency key of each effect call in flight, by step and call.
    keys: HashMap<(usize, usize), String>,
    /// The steps whose status is `Active`, in flow order: every round looks at their calls,
    /// so a round costs what is active, not the whole flow (a replay of a long chain makes a
    /// round per step).
    active: BTreeSet<usize>,
}

impl Machine {
    /// A run about to start or resume: nothing happens before `Started` or `Resumed`.
    pub fn new(setup: Setup) -> Self {
        let spec = setup.spec.clone();
        let started_at = setup.started_at;
        let index: Arc<HashMap<String, usize>> = Arc::new(
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
                items: Vec::new(),
                foreach: s.foreach.is_some(),
                in_flight: 0,
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
        let values = StepValues::new(index.clone());
        Machine {
            setup,
            spec,
            steps,
            index,
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
            loaded: HashMap::new(),
            restored_calls: HashMap::new(),
            keys: HashMap::new(),
            active: BTreeSet::new(),
        }
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
            if self
                .steps
                .iter()
                .all(|s| matches!(s.status, StepStatus::Succeeded | StepStatus::Skipped))
            {
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

    /// The digest of `value`, which the driver is told to keep.
    fn put(&mut self, value: Value) -> String {
        let text = canonical_json(&value);
        let digest = sha256_hex(text.as_bytes());
        self.commands.push_back(Command::PutValue {
            digest: digest.clone(),
            text,
            value,
        });
        digest
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
        let redrive = matches!(folded.finished.as_deref(), Some("failed" | "canceled"));
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
                    self.steps[i].status = StepStatus::Succeeded;
                    self.steps[i].finished_at = at;
                    self.steps[i].attempts = attempts;
                }
                Some(StepRecord::Skipped { at }) => {
                    self.values.skipped(i);
                    self.steps[i].status = StepStatus::Skipped;
                    self.steps[i].finished_at = at;
                }
                Some(StepRecord::Failed { error }) if !redrive => {
                    self.steps[i].status = StepStatus::Failed;
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

    /// Sets step `i`'s status, keeping the set of active steps with it.
    fn set_status(&mut self, i: usize, status: StepStatus) {
        if status == StepStatus::Active {
            self.active.insert(i);
        } else {
            self.active.remove(&i);
        }
        self.steps[i].status = status;
    }

    fn has_ready_work(&self) -> bool {
        !self.ready.is_empty()
            || self.active.iter().any(|&i| {
                self.steps[i]
                    .calls
                    .iter()
                    .any(|c| matches!(c.state, CallState::Ready))
            })
    }

    fn earliest_backoff(&self) -> Option<i64> {
        self.active_calls()
            .filter_map(|(_, _, c)| match c.state {
                CallState::Backoff(t) => Some(t),
                _ => None,
            })
            .min()
    }

    fn earliest_timer(&self) -> Option<i64> {
        self.active_calls()
            .filter_map(|(_, _, c)| match c.state {
                CallState::Timer(t) => Some(t),
                CallState::Signal {
                    deadline: Some(d), ..
                } => Some(d),
                _ => None,
            })
            .min()
    }

    fn active_calls(&self) -> impl Iterator<Item = (usize, usize, &CallRt)> {
        self.active.iter().flat_map(move |&i| {
            self.steps[i]
                .calls
                .iter()
                .enumerate()
                .map(move |(c, call)| (i, c, call))
        })
    }

    /// The names waiting calls wait for, one per call, in the order they are served.
    fn signals_waited_for(&self) -> Vec<String> {
        self.active_calls()
            .filter_map(|(_, _, call)| match &call.state {
                CallState::Signal { name, .. } => Some(name.clone()),
                _ => None,
            })
            .collect()
    }

    /// The logical time a step's expressions see: the latest event it depends on.
    fn logical_now(&self, step: usize) -> i64 {
        let spec = &self.spec.steps[step];
        spec.deps
            .iter()
            .filter_map(|d| self.index.get(d))
            .map(|&d| self.steps[d].finished_at)
            .fold(self.setup.started_at, i64::max)
    }

    fn scope(
        &self,
        step: Option<usize>,
        item: Option<(Value, u32)>,
        purpose: &str,
    ) -> RunScope<'_> {
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
            rng: seeded_rng(self.setup.seed, purpose),
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
        purpose: &str,
    ) -> Go<Result<Value, RunError>> {
        let mut scope = self.scope(Some(step), item, purpose);
        let result = reel_eval::eval(expr, &mut scope)
            .map_err(|e| RunError::new(e.code, e.message).at_step(&self.spec.steps[step].id));
        missing_or(self.values.take_misses(), result)
    }

    fn fail_step(&mut self, i: usize, error: RunError) {
        let id = self.spec.steps[i].id.clone();
        let error = error.at_step(&id);
        self.set_status(i, StepStatus::Failed);
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

    fn succeed_step(&mut self, i: usize, value: Value) {
        let id = self.spec.steps[i].id.clone();
        // Kept in memory only while a step still to finish may read it.
        let kept = (self.steps[i].readers_left > 0).then(|| value.clone());
        let digest = self.put(value);
        let now = self.now;
        self.set_status(i, StepStatus::Succeeded);
        self.steps[i].finished_at = now;
        self.steps[i].items.clear();
        self.values.succeeded(i, digest.clone(), kept);
        let attempts = self.steps[i].attempts;
        let calls = self.steps[i].calls.len().max(1) as u32;
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
        self.steps[i].calls.clear();
        self.release_dependents(i);
        self.forget_read_values(i);
    }

    /// Step `i` has finished: the steps it read lose a reader, and those left with none drop
    /// their values from memory.
    fn forget_read_values(&mut self, i: usize) {
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
        for d in self.steps[i].dependents.clone() {
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
            let result = match self.eval_at(when, i, None, &format!("{}#when", spec.id)) {
                Go::Load(w) => return Go::Load(w),
                Go::Ok(r) => r,
            };
            match result {
                Ok(Value::Bool(true)) => {}
                Ok(Value::Bool(false)) => {
                    let reason = format!("`when` was false: {}", reel_eval::to_source(when));
                    self.steps[i].status = StepStatus::Skipped;
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
            match self.eval_at(expr, i, None, &spec.id) {
                Go::Load(w) => return Go::Load(w),
                Go::Ok(Ok(v)) => self.succeed_step(i, v),
                Go::Ok(Err(e)) => self.fail_step(i, e),
            }
            return Go::Ok(());
        }
        let items = match &spec.foreach {
            Some(list) => match self.eval_at(list, i, None, &format!("{}#foreach", spec.id)) {
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
        // The results the journal recorded for these calls are loaded before the step begins.
        let mut wants = Vec::new();
        for c in 0..n {
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
        self.set_status(i, StepStatus::Active);
        self.steps[i].calls = (0..n)
            .map(|_| CallRt {
                state: CallState::Ready,
                attempt: 0,
                tries: 0,
            })
            .collect();
        self.progress(Progress::StepRunning {
            step: spec.id.clone(),
            calls: spec.foreach.as_ref().map(|_| n),
        });
        // What the journal already says about these calls.
        for c in 0..n {
            let index = spec.foreach.as_ref().map(|_| c as u32);
            if let Some(rec) = self.restored_calls.remove(&(spec.id.clone(), index)) {
                self.steps[i].calls[c] = match rec {
                    CallRecord::Started { attempt } => CallRt {
                        state: CallState::Ready,
                        attempt: attempt.saturating_sub(1),
                        tries: attempt.saturating_sub(1),
                    },
                    CallRecord::Done { output, attempt } => CallRt {
                        state: CallState::Done(
                            self.loaded.get(&output).cloned().unwrap_or(Value::Null),
                        ),
                        attempt,
                        tries: attempt,
                    },
                    CallRecord::Failed {
                        attempt,
                        retry_at: Some(t),
                        ..
                    } => CallRt {
                        state: CallState::Backoff(t),
                        attempt,
                        tries: if t == 0 { 0 } else { attempt },
                    },
                    CallRecord::Failed {
                        attempt,
                        retry_at: None,
                        error,
                    } => {
                        self.steps[i].calls[c].attempt = attempt;
                        self.fail_step(i, error);
                        CallRt {
                            state: CallState::Failed,
                            attempt,
                            tries: attempt,
                        }
                    }
                    CallRecord::Timer { until } => CallRt {
                        state: CallState::Timer(until),
                        attempt: 1,
                        tries: 1,
                    },
                    CallRecord::Signal { name, deadline } => CallRt {
                        state: CallState::Signal { name, deadline },
                        attempt: 1,
                        tries: 1,
                    },
                };
            }
        }
        self.loaded.clear();
        if self.steps[i].status == StepStatus::Active {
            self.complete_if_done(i);
        }
        Go::Ok(())
    }

    fn complete_if_done(&mut self, i: usize) {
        if self.steps[i].status != StepStatus::Active {
            return;
        }
        // From the end: calls finish roughly in order, so the first one not done is found at
        // once there (from the start, each call's return would look at all those before it).
        if !self.steps[i]
            .calls
            .iter()
            .rev()
            .all(|c| matches!(c.state, CallState::Done(_)))
        {
            return;
        }
        let values: Vec<Value> = self.steps[i]
            .calls
            .iter_mut()
            .map(
                |c| match std::mem::replace(&mut c.state, CallState::Failed) {
                    CallState::Done(v) => v,
                    _ => Value::Null,
                },
            )
            .collect();
        let value = if self.steps[i].foreach {
            Value::Array(values)
        } else {
            values.into_iter().next().unwrap_or(Value::Null)
        };
        self.succeed_step(i, value);
    }

    /// Records the start of every ready call the limits allow; false when it waits for values
    /// to be loaded first.
    fn start_ready_calls(&mut self) -> bool {
        let active: Vec<usize> = self.active.iter().copied().collect();
        'steps: for i in active {
            if self.steps[i].status != StepStatus::Active {
                continue;
            }
            let limit = if self.steps[i].foreach {
                self.spec.steps[i].concurrency.max(1) as usize
            } else {
                1
            };
            for c in 0..self.steps[i].calls.len() {
                // Calls already started in this round are still made: their starts are recorded.
                if self.failure.is_some() || self.canceled {
                    break 'steps;
                }
                if self.in_flight >= self.setup.max_parallel || self.steps[i].in_flight >= limit {
                    break;
                }
                if matches!(self.steps[i].calls[c].state, CallState::Ready) {
                    match self.start_call(i, c) {
                        Go::Ok(Some(call)) => self.prepared.push(call),
                        Go::Ok(None) => {}
                        Go::Load(wants) => {
                            self.load(wants, Stage::LoadingForDispatch);
                            return false;
                        }
                    }
                }
            }
        }
        true
    }

    /// Records the start of call `c` of step `i` and prepares it; timers and signal waits need
    /// no call and give `None`, as does a call whose arguments fail to evaluate.
    fn start_call(&mut self, i: usize, c: usize) -> Go<Option<CallStart>> {
        let flow = self.spec.clone();
        let spec = &flow.steps[i];
        let index = spec.foreach.as_ref().map(|_| c as u32);
        let item = index.map(|ix| (self.steps[i].items[c].clone(), ix));
        let purpose = match index {
            Some(ix) => format!("{}#{ix}", spec.id),
            None => spec.id.clone(),
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
            match self.eval_at(expr, i, item.clone(), &purpose) {
                Go::Load(w) => return Go::Load(w),
                Go::Ok(Ok(v)) => {
                    args.insert(name.clone(), v.clone());
                    shown.insert(name.clone(), v);
                }
                Go::Ok(Err(e)) => {
                    self.steps[i].calls[c].state = CallState::Failed;
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
                        self.steps[i].calls[c].state = CallState::Failed;
                        self.fail_step(i, e);
                        return Go::Ok(None);
                    }
                };
                self.steps[i].calls[c] = CallRt {
                    state: CallState::Timer(until),
                    attempt: 1,
                    tries: 1,
                };
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
                let deadline = spec.timeout.map(|d| now + d.millis() as i64);
                self.steps[i].calls[c] = CallRt {
                    state: CallState::Signal {
                        name: name.clone(),
                        deadline,
                    },
                    attempt: 1,
                    tries: 1,
                };
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
        let inputs_digest = self.put(Value::Object(shown));
        let started_inputs = inputs_digest.clone();
        let key = (spec.kind == ToolKind::Effect)
            .then(|| idempotency_key(self.run_id(), &spec.id, index, &inputs_digest));
        if let Some(k) = &key {
            self.keys.insert((i, c), k.clone());
        }
        let call = &mut self.steps[i].calls[c];
        call.attempt += 1;
        call.tries += 1;
        call.state = CallState::InFlight;
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
            env: self
                .setup
                .env
                .iter()
                .filter_map(|(name, value)| Some((name.clone(), value.as_str()?.to_string())))
                .collect(),
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
                // What a tool returns is recorded; a secret it echoes back is not.
                let value = if self.setup.secrets.is_empty() {
                    out.value
                } else {
                    scrub_value(&out.value, &self.setup.secrets)
                };
                let digest = self.put(value.clone());
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
                self.steps[i].calls[r.index].state = CallState::Done(value);
                self.complete_if_done(i);
            }
            Err(e) => {
                let cause = e
                    .cause
                    .as_ref()
                    .map(|c| self.put(scrub_value(c, &self.setup.secrets)));
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
                        self.steps[i].calls[r.index].state = CallState::Backoff(t);
                        self.progress(Progress::Retrying {
                            step: spec.id.clone(),
                            attempt: r.attempt,
                            code: error.code.clone(),
                        });
                    }
                    None => {
                        self.steps[i].calls[r.index].state = CallState::Failed;
                        if self.canceled {
                            self.set_status(i, StepStatus::Failed);
                        } else {
                            self.fail_step(i, error);
                        }
                    }
                }
            }
        }
    }

    fn retry_due_backoffs(&mut self) {
        let now = self.now;
        for &i in &self.active {
            for c in &mut self.steps[i].calls {
                if let CallState::Backoff(t) = c.state
                    && t <= now
                {
                    c.state = CallState::Ready;
                }
            }
        }
    }

    /// Fires the timers that are due; true when any fired.
    fn fire_due_timers(&mut self) -> bool {
        let now = self.now;
        let due: Vec<(usize, usize, i64)> = self
            .active_calls()
            .filter_map(|(i, c, call)| match call.state {
                CallState::Timer(t) if t <= now => Some((i, c, t)),
                _ => None,
            })
            .collect();
        for &(i, c, until) in &due {
            let flow = self.spec.clone();
            let spec = &flow.steps[i];
            let index = spec.foreach.as_ref().map(|_| c as u32);
            let woke = woke_value(until);
            self.put(woke.clone());
            self.record(Event::TimerFired {
                step: spec.id.clone(),
                index,
                until,
            });
            self.steps[i].calls[c].state = CallState::Done(woke);
            self.complete_if_done(i);
        }
        !due.is_empty()
    }

    /// Fails signal waits whose deadline passed; true when any did.
    fn expire_signal_waits(&mut self) -> bool {
        let now = self.now;
        let expired: Vec<(usize, usize, String)> = self
            .active_calls()
            .filter_map(|(i, c, call)| match &call.state {
                CallState::Signal {
                    name,
                    deadline: Some(d),
                } if *d <= now => Some((i, c, name.clone())),
                _ => None,
            })
            .collect();
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
            self.steps[*i].calls[*c].state = CallState::Failed;
            self.fail_step(*i, error);
        }
        !expired.is_empty()
    }

    /// Delivers arrived signals to the steps waiting for them; true when any was delivered.
    fn deliver_signals(&mut self, mut arrived: Vec<ArrivedSignal>) -> bool {
        let waiting: Vec<(usize, usize, String)> = self
            .active_calls()
            .filter_map(|(i, c, call)| match &call.state {
                CallState::Signal { name, .. } => Some((i, c, name.clone())),
                _ => None,
            })
            .collect();
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
            self.steps[i].calls[c].state = CallState::Done(signal.payload);
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
        for (i, _, call) in self.active_calls() {
            match &call.state {
                CallState::Signal { name, .. } => {
                    if !signals.contains(name) {
                        signals.push(name.clone());
                    }
                    details.push((self.spec.steps[i].id.clone(), format!("signal `{name}`")));
                }
                CallState::Timer(t) => details.push((
                    self.spec.steps[i].id.clone(),
                    format!("timer until {}", rfc3339(*t)),
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
                let mut scope = self.scope(None, None, "#output");
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
        let digest = self.put(output.clone());
        self.record(Event::RunFinished {
            status: "succeeded".into(),
            output: Some(digest.clone()),
            error: None,
        });
        self.end(Ending::Succeeded { digest, output });
    }

    fn finish_failed(&mut self, error: RunError) {
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
        return Ok(now + dur.millis() as i64);
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
