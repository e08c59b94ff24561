//! The Rider: starts and resumes runs, and drives one run's DAG of steps to its end or until it parks.
//!
//! One task owns a run's state; tool calls run as spawned tasks that report back over a
//! channel. Every decision is journaled before it is acted on in the order the store commits
//! it; in `durable` mode the engine also waits for the record before each call that is not
//! pure. Nothing a journal records as finished is ever run again.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;

use reel_flowspec::{Backoff, FlowSpec, Node, StepSpec, ToolKind};
use reel_store::{
    Claim, Durability, Lease, LogRow, NewEvent, NewRun, RunStatus, RunUpdate, Store, StoreError,
};
use reel_tools::{ToolCall, ToolError, ToolOutput, UserTool, scrub};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::deps::{Progress, RunDeps};
use crate::error::RunError;
use crate::fold::{CallRecord, Folded, StepRecord, fold_journal};
use crate::inputs::resolve_inputs;
use crate::journal::{DETERMINISM_EPOCH, Event, RunStarted};
use crate::scope::{RunScope, StepValues, idempotency_key, rfc3339, seeded_rng};

/// How the Rider runs things.
#[derive(Clone, Debug)]
pub struct RiderConfig {
    /// Most calls in flight at once, across the run's steps.
    pub max_parallel: usize,
    /// How long a lease lasts without renewal (ms).
    pub lease_ms: u64,
    /// How often the run looks for signals and cancellation while it works (ms).
    pub poll_ms: u64,
}

impl Default for RiderConfig {
    fn default() -> Self {
        RiderConfig {
            max_parallel: 64,
            lease_ms: 15_000,
            poll_ms: 200,
        }
    }
}

/// A request to start a run.
#[derive(Clone, Debug)]
pub struct StartRequest {
    /// The new run's id.
    pub run_id: String,
    /// The compiled flow.
    pub spec: Arc<FlowSpec>,
    /// The inputs given (defaults are filled in).
    pub inputs: Map<String, Value>,
    /// The directory the run is started in.
    pub cwd: PathBuf,
    /// The source file as given.
    pub source: Option<String>,
    /// The source file's absolute path.
    pub source_abs: Option<String>,
    /// How long the run is kept after it ends (ms).
    pub keep_for_ms: Option<u64>,
    /// The write mode.
    pub durability: Durability,
    /// The seed of `random()` and retry jitter.
    pub seed: u64,
    /// The run this one forks, if any.
    pub parent: Option<String>,
}

/// How a run (or this part of it) ended.
#[derive(Clone, Debug, PartialEq)]
pub struct RunOutcome {
    /// The run.
    pub run: String,
    /// Its status now.
    pub status: RunStatus,
    /// Its output, when it succeeded.
    pub output: Option<Value>,
    /// Its error, when it failed or was canceled.
    pub error: Option<RunError>,
}

impl RunOutcome {
    /// The object `reel run --json` prints.
    pub fn to_json(&self) -> Value {
        json!({
            "run": self.run,
            "status": self.status.as_str(),
            "output": self.output,
            "error": self.error,
        })
    }
}

/// Why a run was not started or resumed, or stopped without an ending.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// Bad inputs: nothing was recorded.
    #[error("{0}")]
    Input(String),
    /// A secret cannot be resolved: nothing was recorded (or the run stays as it was).
    #[error("{0}")]
    Secret(String),
    /// No such run.
    #[error("there is no run `{0}`")]
    UnknownRun(String),
    /// A live process holds the run.
    #[error(
        "run {run} is held by process {pid} on {host}; stop it first, or wait for it to finish"
    )]
    Held {
        /// The run.
        run: String,
        /// The holder's pid.
        pid: u32,
        /// The holder's host.
        host: String,
    },
    /// The run is quarantined.
    #[error(
        "run {0} is quarantined: a replay diverged from its journal; it is a fault of the platform, not of the flow"
    )]
    Quarantined(String),
    /// The store failed: the run stays resumable from what was recorded.
    #[error("{0}; the run can be resumed with `reel resume` once the store works")]
    Store(#[from] StoreError),
    /// The recorded FlowSpec cannot be read.
    #[error("the run's recorded flow cannot be read: {0}")]
    Spec(String),
    /// This process was told to stop (Ctrl-C): the run stays resumable.
    #[error("interrupted; continue it with `reel resume {0}`")]
    Interrupted(String),
}

/// Starts a run: checks inputs and secrets before anything is recorded, then drives it.
pub async fn start(
    deps: &RunDeps,
    cfg: &RiderConfig,
    req: StartRequest,
) -> Result<RunOutcome, Refusal> {
    let spec = req.spec.clone();
    let inputs = resolve_inputs(&spec, &req.inputs).map_err(Refusal::Input)?;
    let secrets = resolve_secrets(deps, &spec)?;
    let mut env = Map::new();
    for e in &spec.env {
        env.insert(
            e.name.clone(),
            deps.env.get(&e.name).map_or(Value::Null, Value::String),
        );
    }
    let store = deps.store.clone();
    store.put_spec(&spec.digest, &spec.to_json())?;
    let inputs_digest = store.put_value(&Value::Object(inputs.clone()))?;
    let env_digest = store.put_value(&Value::Object(env.clone()))?;
    let now = deps.clock.now_ms();
    let started = RunStarted {
        flow: spec.digest.clone(),
        inputs: inputs_digest,
        seed: req.seed,
        epoch: DETERMINISM_EPOCH,
        env: env_digest,
        cwd: req.cwd.display().to_string(),
        source: req.source.clone(),
        durability: match req.durability {
            Durability::Fast => "fast".into(),
            Durability::Durable => "durable".into(),
        },
    };
    // The run and its `run_started` are committed together: a crash can never leave a run
    // that has no beginning to resume from.
    let new = NewRun {
        id: req.run_id.clone(),
        flow: spec.name.clone(),
        flow_digest: spec.digest.clone(),
        source: req.source.clone(),
        source_abs: req.source_abs.clone(),
        cwd: req.cwd.display().to_string(),
        parent: req.parent.clone(),
        keep_for_ms: req.keep_for_ms,
        durability: req.durability,
        created_at: now,
        first_events: vec![Event::RunStarted(started).to_row(now)],
    };
    let owner = deps.owner.clone();
    let lease_ms = cfg.lease_ms;
    let lease = blocking(store.clone(), move |s| s.create_run(new, &owner, lease_ms)).await?;
    let run = Run::new(
        deps.clone(),
        cfg.clone(),
        spec,
        Arc::new(lease),
        req.seed,
        now,
        req.cwd,
        inputs,
        env,
        secrets,
    );
    run.drive(Folded::default()).await
}

/// Resumes a run from its journal: after a crash, when its timer is due or a signal arrived, or
/// after it failed or was canceled (a redrive: successes are kept, the failed step runs again).
pub async fn resume(
    deps: &RunDeps,
    cfg: &RiderConfig,
    run_id: &str,
    reason: &str,
) -> Result<RunOutcome, Refusal> {
    let store = deps.store.clone();
    let row = store
        .run(run_id)?
        .ok_or_else(|| Refusal::UnknownRun(run_id.to_string()))?;
    match row.status {
        RunStatus::Succeeded => {
            let output = match &row.output_digest {
                Some(d) => store.get_value(d)?,
                None => None,
            };
            return Ok(RunOutcome {
                run: row.id,
                status: RunStatus::Succeeded,
                output,
                error: None,
            });
        }
        RunStatus::Quarantined => return Err(Refusal::Quarantined(row.id)),
        _ => {}
    }
    // Parsed where the store holds the text, so the text is not copied first: for a flow of
    // many steps the JSON is tens of MiB.
    let mut parsed = None;
    store.read_spec(&row.flow_digest, &mut |json| {
        parsed = Some(FlowSpec::from_json(json));
    })?;
    let spec = match parsed {
        Some(Ok(spec)) => Arc::new(spec),
        Some(Err(e)) => return Err(Refusal::Spec(e.to_string())),
        None => {
            return Err(Refusal::Spec(format!(
                "the FlowSpec {} is missing from the store",
                row.flow_digest
            )));
        }
    };
    let secrets = resolve_secrets(deps, &spec)?;
    let owner = deps.owner.clone();
    let lease_ms = cfg.lease_ms;
    let id = row.id.clone();
    let claim = blocking(store.clone(), move |s| s.claim_run(&id, &owner, lease_ms)).await?;
    let lease = match claim {
        Claim::Claimed(lease) => lease,
        Claim::HeldBy(owner) => {
            return Err(Refusal::Held {
                run: row.id,
                pid: owner.pid,
                host: owner.host,
            });
        }
        Claim::NotFound => return Err(Refusal::UnknownRun(row.id)),
    };
    let lease = Arc::new(lease);
    let folded = {
        let store = store.clone();
        let id = row.id.clone();
        tokio::task::spawn_blocking(move || fold_journal(store.as_ref(), &id))
            .await
            .map_err(|e| Refusal::Store(StoreError::Sqlite(e.to_string())))??
    };
    let Some((started, started_at)) = folded.started.clone() else {
        return Err(Refusal::Store(StoreError::Hole {
            run: row.id,
            seq: 0,
            message: "the journal does not begin with run_started".into(),
        }));
    };
    let inputs = match store.get_value(&started.inputs)? {
        Some(Value::Object(m)) => m,
        _ => {
            return Err(StoreError::MissingValue {
                digest: started.inputs,
            }
            .into());
        }
    };
    let env = match store.get_value(&started.env)? {
        Some(Value::Object(m)) => m,
        _ => {
            return Err(StoreError::MissingValue {
                digest: started.env,
            }
            .into());
        }
    };
    let redrive = matches!(folded.finished.as_deref(), Some("failed" | "canceled"));
    let mut run = Run::new(
        deps.clone(),
        cfg.clone(),
        spec,
        lease,
        started.seed,
        started_at,
        PathBuf::from(&started.cwd),
        inputs,
        env,
        secrets,
    );
    run.record(Event::RunResumed {
        reason: if redrive {
            "redrive".into()
        } else {
            reason.to_string()
        },
        by: format!("{}:{}", deps.owner.host, deps.owner.pid),
    });
    run.drive(folded).await
}

fn resolve_secrets(deps: &RunDeps, spec: &FlowSpec) -> Result<Vec<(String, String)>, Refusal> {
    let mut out = Vec::new();
    let mut missing = Vec::new();
    for s in &spec.secrets {
        match deps.secrets.get(&s.name) {
            Some(v) => out.push((s.name.clone(), v)),
            None => missing.push(s.name.clone()),
        }
    }
    if missing.is_empty() {
        return Ok(out);
    }
    let list: Vec<String> = missing
        .iter()
        .map(|m| format!("`{m}` (set {})", crate::deps::secret_variable(m)))
        .collect();
    Err(Refusal::Secret(format!(
        "the flow `{}` needs the secret{} {}",
        spec.name,
        if missing.len() > 1 { "s" } else { "" },
        list.join(", ")
    )))
}

async fn blocking<T: Send + 'static>(
    store: Arc<dyn Store>,
    f: impl FnOnce(&dyn Store) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(move || f(store.as_ref()))
        .await
        .map_err(|e| StoreError::Sqlite(format!("a store task stopped: {e}")))?
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

/// A call whose start is recorded, ready to be made.
struct Prepared {
    step: usize,
    index: usize,
    attempt: u32,
    call: ToolCall,
}

struct CallResult {
    step: usize,
    call: usize,
    attempt: u32,
    outcome: Result<ToolOutput, ToolError>,
}

/// One run being driven by this process.
struct Run {
    deps: RunDeps,
    cfg: RiderConfig,
    spec: Arc<FlowSpec>,
    lease: Arc<Lease>,
    seed: u64,
    started_at: i64,
    cwd: PathBuf,
    inputs: Map<String, Value>,
    env: Map<String, Value>,
    secrets: Vec<(String, String)>,
    steps: Vec<StepRt>,
    index: Arc<HashMap<String, usize>>,
    /// Finished steps' digests, and the values still to be read.
    values: StepValues,
    ready: VecDeque<usize>,
    in_flight: usize,
    failure: Option<RunError>,
    canceled: bool,
    pending: Vec<NewEvent>,
    results_tx: mpsc::UnboundedSender<CallResult>,
    results_rx: mpsc::UnboundedReceiver<CallResult>,
    calls_cancel: CancellationToken,
    fatal: Option<StoreError>,
    /// Calls the journal recorded for steps that had not finished, applied when they activate.
    restored_calls: HashMap<(String, Option<u32>), CallRecord>,
    /// The idempotency key of each effect call in flight, by step and call.
    keys: HashMap<(usize, usize), String>,
}

impl Run {
    #[allow(clippy::too_many_arguments)]
    fn new(
        deps: RunDeps,
        cfg: RiderConfig,
        spec: Arc<FlowSpec>,
        lease: Arc<Lease>,
        seed: u64,
        started_at: i64,
        cwd: PathBuf,
        inputs: Map<String, Value>,
        env: Map<String, Value>,
        secrets: Vec<(String, String)>,
    ) -> Self {
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
        let values = StepValues::new(deps.store.clone(), index.clone());
        let (results_tx, results_rx) = mpsc::unbounded_channel();
        let calls_cancel = deps.shutdown.child_token();
        Run {
            deps,
            cfg,
            spec,
            lease,
            seed,
            started_at,
            cwd,
            inputs,
            env,
            secrets,
            steps,
            index,
            values,
            ready: VecDeque::new(),
            in_flight: 0,
            failure: None,
            canceled: false,
            pending: Vec::new(),
            results_tx,
            results_rx,
            calls_cancel,
            fatal: None,
            restored_calls: HashMap::new(),
            keys: HashMap::new(),
        }
    }

    fn run_id(&self) -> &str {
        &self.lease.run
    }

    fn now(&self) -> i64 {
        self.deps.clock.now_ms()
    }

    fn record(&mut self, event: Event) {
        let at = self.now();
        self.pending.push(event.to_row(at));
    }

    fn flush(&mut self) -> Result<(), StoreError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let events = std::mem::take(&mut self.pending);
        self.deps.store.append(&self.lease, events)
    }

    async fn sync(&mut self) -> Result<(), StoreError> {
        self.flush()?;
        self.deps.store.sync(&self.lease).await
    }

    fn put(&mut self, value: &Value) -> String {
        match self.deps.store.put_value(value) {
            Ok(d) => d,
            Err(e) => {
                self.fatal.get_or_insert(e);
                String::new()
            }
        }
    }

    fn get_value(&mut self, digest: &str) -> Value {
        match self.deps.store.get_value(digest) {
            Ok(Some(v)) => v,
            Ok(None) => {
                self.fatal.get_or_insert(StoreError::MissingValue {
                    digest: digest.to_string(),
                });
                Value::Null
            }
            Err(e) => {
                self.fatal.get_or_insert(e);
                Value::Null
            }
        }
    }

    /// Applies what the journal says, then drives the run.
    async fn drive(mut self, folded: Folded) -> Result<RunOutcome, Refusal> {
        self.restore(folded);
        let result = self.drive_loop().await;
        self.calls_cancel.cancel();
        match result {
            Ok(outcome) => Ok(outcome),
            Err(e) => Err(e),
        }
    }

    /// Takes the journal's state: finished steps keep only their status and output digest
    /// (no value is read here: expressions read the few they need when they run).
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
}

/// What the loop waits for next.
enum Wake {
    Result(CallResult),
    Tick,
    Shutdown,
}

impl Run {
    async fn drive_loop(&mut self) -> Result<RunOutcome, Refusal> {
        let mut renew_at = self.now() + (self.cfg.lease_ms / 3) as i64;
        let mut poll_at = self.now() + self.cfg.poll_ms as i64;
        loop {
            let mut progressed = false;
            if self.failure.is_none() && !self.canceled {
                self.activate_ready();
                progressed = self.dispatch().await?;
            }
            // In `durable` mode every append is committed at once with an fsync. When calls
            // finished at once, the next round starts more calls and syncs their starts
            // anyway: leaving these ends to that commit makes one fsync per step, not two.
            // Before any wait, and in `fast` mode (whose writer gathers writes), they go now.
            if !(progressed && self.lease.durability == Durability::Durable) {
                self.flush()?;
            }
            if let Some(e) = self.fatal.take() {
                // What was recorded is true still: it is handed over if the store will take it.
                let _ = self.flush();
                return Err(e.into());
            }
            if self.in_flight == 0 {
                if self.canceled {
                    return self.finish_canceled().await;
                }
                if let Some(err) = self.failure.clone() {
                    return self.finish_failed(err).await;
                }
                if self
                    .steps
                    .iter()
                    .all(|s| matches!(s.status, StepStatus::Succeeded | StepStatus::Skipped))
                {
                    return self.finish_succeeded().await;
                }
                if self.fire_due_timers()
                    || self.deliver_signals().await?
                    || self.expire_signal_waits()
                {
                    continue;
                }
                if !self.has_ready_work() && self.earliest_backoff().is_none() {
                    return self.park().await;
                }
            }
            let now = self.now();
            let mut wake_at = renew_at.min(poll_at);
            if let Some(t) = self.earliest_backoff() {
                wake_at = wake_at.min(t);
            }
            if let Some(t) = self.earliest_timer() {
                wake_at = wake_at.min(t);
            }
            // Calls that finished at once may have made more work ready: no waiting then.
            let wake = if progressed || wake_at <= now {
                Wake::Tick
            } else {
                let sleep = self.deps.clock.sleep_until(wake_at);
                let shutdown = self.deps.shutdown.clone();
                tokio::select! {
                    Some(r) = self.results_rx.recv() => Wake::Result(r),
                    _ = sleep => Wake::Tick,
                    _ = shutdown.cancelled() => Wake::Shutdown,
                }
            };
            match wake {
                Wake::Result(r) => {
                    self.on_result(r);
                    // Gather whatever else finished meanwhile into the same batch.
                    while let Ok(r) = self.results_rx.try_recv() {
                        self.on_result(r);
                    }
                }
                Wake::Shutdown => {
                    self.calls_cancel.cancel();
                    let _ = self.sync().await;
                    return Err(Refusal::Interrupted(self.run_id().to_string()));
                }
                Wake::Tick => {}
            }
            let now = self.now();
            if now >= renew_at {
                renew_at = now + (self.cfg.lease_ms / 3) as i64;
                let store = self.deps.store.clone();
                let lease = self.lease.clone();
                let ms = self.cfg.lease_ms;
                blocking(store, move |s| s.renew(&lease, ms)).await?;
            }
            if now >= poll_at {
                poll_at = now + self.cfg.poll_ms as i64;
                self.poll_store().await?;
            }
            self.retry_due_backoffs();
            self.fire_due_timers();
        }
    }

    /// Looks for cancellation and newly arrived signals.
    async fn poll_store(&mut self) -> Result<(), Refusal> {
        if let Some(row) = self.deps.store.run(self.run_id())?
            && row.cancel_requested
            && !self.canceled
        {
            self.canceled = true;
            self.calls_cancel.cancel();
        }
        self.deliver_signals().await?;
        self.expire_signal_waits();
        Ok(())
    }

    fn has_ready_work(&self) -> bool {
        !self.ready.is_empty()
            || self.steps.iter().any(|s| {
                s.status == StepStatus::Active
                    && s.calls.iter().any(|c| matches!(c.state, CallState::Ready))
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
        self.steps
            .iter()
            .enumerate()
            .filter(|(_, s)| s.status == StepStatus::Active)
            .flat_map(|(i, s)| {
                s.calls
                    .iter()
                    .enumerate()
                    .map(move |(c, call)| (i, c, call))
            })
    }

    /// The logical time a step's expressions see: the latest event it depends on.
    fn logical_now(&self, step: usize) -> i64 {
        let spec = &self.spec.steps[step];
        spec.deps
            .iter()
            .filter_map(|d| self.index.get(d))
            .map(|&d| self.steps[d].finished_at)
            .fold(self.started_at, i64::max)
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
                .fold(self.started_at, i64::max),
        };
        let (item, index) = match item {
            Some((v, i)) => (Some(v), Some(i)),
            None => (None, None),
        };
        RunScope {
            inputs: &self.inputs,
            env: &self.env,
            steps: &self.values,
            item,
            index,
            now_ms,
            rng: seeded_rng(self.seed, purpose),
        }
    }

    fn eval_at(
        &self,
        expr: &reel_flowspec::Expr,
        step: usize,
        item: Option<(Value, u32)>,
        purpose: &str,
    ) -> Result<Value, RunError> {
        let mut scope = self.scope(Some(step), item, purpose);
        let result = reel_eval::eval(expr, &mut scope)
            .map_err(|e| RunError::new(e.code, e.message).at_step(&self.spec.steps[step].id));
        match self.values.failure() {
            // A value that could not be read makes any result meaningless; `fail_step` turns
            // this into the store error that stops the run, with nothing recorded.
            Some(e) => Err(RunError::new(e.code(), e.to_string())),
            None => result,
        }
    }

    fn fail_step(&mut self, i: usize, error: RunError) {
        if let Some(e) = self.values.take_failure() {
            // The store failed, not the step: stop without journaling a failure, so a resume
            // runs the step again.
            self.fatal.get_or_insert(e);
            return;
        }
        let id = self.spec.steps[i].id.clone();
        let error = error.at_step(&id);
        self.steps[i].status = StepStatus::Failed;
        self.record(Event::StepFailed {
            step: id.clone(),
            error: error.clone(),
        });
        let started = self.steps[i].started_at.unwrap_or(self.started_at);
        self.deps.progress.report(Progress::StepDone {
            step: id,
            state: "failed",
            duration_ms: self.now() - started,
            attempts: self.steps[i].attempts,
            calls: self.steps[i].calls.len().max(1) as u32,
            detail: Some(error.code.clone()),
        });
        if self.failure.is_none() {
            self.failure = Some(error);
        }
    }

    fn succeed_step(&mut self, i: usize, value: Value) {
        let id = self.spec.steps[i].id.clone();
        let digest = self.put(&value);
        let now = self.now();
        self.steps[i].status = StepStatus::Succeeded;
        self.steps[i].finished_at = now;
        self.steps[i].items.clear();
        // Kept in memory only while a step still to finish may read it.
        let keep = self.steps[i].readers_left > 0;
        self.values
            .succeeded(i, digest.clone(), keep.then_some(value));
        let attempts = self.steps[i].attempts;
        let calls = self.steps[i].calls.len().max(1) as u32;
        self.record(Event::StepSucceeded {
            step: id.clone(),
            output: digest,
            attempts,
        });
        let started = self.steps[i].started_at.unwrap_or(now);
        self.deps.progress.report(Progress::StepDone {
            step: id,
            state: "succeeded",
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

    /// Evaluates `when`, `foreach` and pure steps of every step whose dependencies are done.
    fn activate_ready(&mut self) {
        while let Some(i) = self.ready.pop_front() {
            if self.failure.is_some() || self.canceled || self.fatal.is_some() {
                return;
            }
            // The Arc, not the step: cloning a step copies its expressions and spans, and this
            // runs for every step (and `start_call`/`on_result` for every call).
            let flow = self.spec.clone();
            let spec = &flow.steps[i];
            self.steps[i].started_at = Some(self.now());
            if let Some(when) = &spec.when {
                match self.eval_at(when, i, None, &format!("{}#when", spec.id)) {
                    Ok(Value::Bool(true)) => {}
                    Ok(Value::Bool(false)) => {
                        let reason = format!("`when` was false: {}", reel_eval::to_source(when));
                        let now = self.now();
                        self.steps[i].status = StepStatus::Skipped;
                        self.steps[i].finished_at = now;
                        self.values.skipped(i);
                        self.record(Event::StepSkipped {
                            step: spec.id.clone(),
                            reason: reason.clone(),
                        });
                        self.deps.progress.report(Progress::StepDone {
                            step: spec.id.clone(),
                            state: "skipped",
                            duration_ms: 0,
                            attempts: 0,
                            calls: 0,
                            detail: Some(reason),
                        });
                        self.release_dependents(i);
                        self.forget_read_values(i);
                        continue;
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
                        continue;
                    }
                    Err(e) => {
                        self.fail_step(i, e);
                        continue;
                    }
                }
            }
            if spec.tool.is_none() {
                let Some(expr) = &spec.value else {
                    self.fail_step(
                        i,
                        RunError::new("spec.invalid", "an expression step without a value"),
                    );
                    continue;
                };
                match self.eval_at(expr, i, None, &spec.id) {
                    Ok(v) => self.succeed_step(i, v),
                    Err(e) => self.fail_step(i, e),
                }
                continue;
            }
            let items = match &spec.foreach {
                Some(list) => match self.eval_at(list, i, None, &format!("{}#foreach", spec.id)) {
                    Ok(Value::Array(items)) => Some(items),
                    Ok(other) => {
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
                        continue;
                    }
                    Err(e) => {
                        self.fail_step(i, e);
                        continue;
                    }
                },
                None => None,
            };
            let n = items.as_ref().map_or(1, Vec::len);
            self.steps[i].items = items.unwrap_or_default();
            self.steps[i].status = StepStatus::Active;
            self.steps[i].calls = (0..n)
                .map(|_| CallRt {
                    state: CallState::Ready,
                    attempt: 0,
                    tries: 0,
                })
                .collect();
            self.deps.progress.report(Progress::StepRunning {
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
                            state: CallState::Done(self.get_value(&output)),
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
            if self.steps[i].status == StepStatus::Active {
                self.complete_if_done(i);
            }
        }
    }

    fn complete_if_done(&mut self, i: usize) {
        if self.steps[i].status != StepStatus::Active {
            return;
        }
        if !self.steps[i]
            .calls
            .iter()
            .all(|c| matches!(c.state, CallState::Done(_)))
        {
            return;
        }
        let values: Vec<Value> = self.steps[i]
            .calls
            .iter()
            .map(|c| match &c.state {
                CallState::Done(v) => v.clone(),
                _ => Value::Null,
            })
            .collect();
        let value = if self.steps[i].foreach {
            Value::Array(values)
        } else {
            values.into_iter().next().unwrap_or(Value::Null)
        };
        self.succeed_step(i, value);
    }

    /// Starts every ready call the limits allow.
    /// Returns whether some call already finished (so more work may be ready at once).
    async fn dispatch(&mut self) -> Result<bool, Refusal> {
        let mut ready: Vec<Prepared> = Vec::new();
        'steps: for i in 0..self.steps.len() {
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
                if self.in_flight >= self.cfg.max_parallel || self.steps[i].in_flight >= limit {
                    break;
                }
                if matches!(self.steps[i].calls[c].state, CallState::Ready)
                    && let Some(call) = self.start_call(i, c)
                {
                    ready.push(call);
                }
            }
        }
        // In `durable` mode the record of every start must land before its call is made; one
        // sync covers all the calls started together.
        if self.lease.durability == Durability::Durable
            && ready.iter().any(|r| r.call.kind != ToolKind::Pure)
        {
            self.sync().await?;
        }
        let mut finished = false;
        for r in ready {
            if let Some(result) = self.launch(r) {
                self.on_result(result);
                finished = true;
            }
        }
        Ok(finished)
    }

    /// Records the start of call `c` of step `i` and prepares it; timers and signal waits need
    /// no call and give `None`, as does a call whose arguments fail to evaluate.
    fn start_call(&mut self, i: usize, c: usize) -> Option<Prepared> {
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
                Ok(v) => {
                    args.insert(name.clone(), v.clone());
                    shown.insert(name.clone(), v);
                }
                Err(e) => {
                    self.steps[i].calls[c].state = CallState::Failed;
                    self.fail_step(i, e);
                    return None;
                }
            }
        }
        let tool = spec.tool.clone().unwrap_or_default();
        let now = self.now();
        match tool.as_str() {
            "sleep" => {
                let until = match sleep_until(&args, now) {
                    Ok(t) => t,
                    Err(e) => {
                        self.steps[i].calls[c].state = CallState::Failed;
                        self.fail_step(i, e);
                        return None;
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
                return None;
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
                return None;
            }
            _ => {}
        }
        let shown_value = Value::Object(shown);
        let inputs_digest = self.put(&shown_value);
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
            inputs: inputs_digest,
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
            run_dir: self.cwd.clone(),
            env: self
                .env
                .iter()
                .filter_map(|(name, value)| Some((name.clone(), value.as_str()?.to_string())))
                .collect(),
            user,
            timeout: spec
                .timeout
                .map(|d| std::time::Duration::from_millis(d.millis())),
            secrets: self.secrets.clone(),
        };
        Some(Prepared {
            step: i,
            index: c,
            attempt,
            call,
        })
    }

    /// Makes a prepared call; its result comes back on the results channel.
    fn launch(&self, r: Prepared) -> Option<CallResult> {
        let tools = self.deps.tools.clone();
        let tx = self.results_tx.clone();
        let cancel = self.calls_cancel.child_token();
        let mut call = Box::pin(async move { tools.call(r.call, cancel).await });
        // A call that finishes without waiting (`echo`, a bad argument) is taken at once: a
        // task and a wake-up per step would cost more than the step.
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        if let std::task::Poll::Ready(outcome) = call.as_mut().poll(&mut cx) {
            return Some(CallResult {
                step: r.step,
                call: r.index,
                attempt: r.attempt,
                outcome,
            });
        }
        tokio::spawn(async move {
            let outcome = call.await;
            let _ = tx.send(CallResult {
                step: r.step,
                call: r.index,
                attempt: r.attempt,
                outcome,
            });
        });
        None
    }

    fn on_result(&mut self, r: CallResult) {
        let i = r.step;
        self.in_flight -= 1;
        self.steps[i].in_flight -= 1;
        let flow = self.spec.clone();
        let spec = &flow.steps[i];
        let index = spec.foreach.as_ref().map(|_| r.call as u32);
        let log = match &r.outcome {
            Ok(o) => o.log.clone(),
            Err(e) => e.log.clone(),
        };
        if !log.is_empty() {
            let row = LogRow {
                run: self.run_id().to_string(),
                step: spec.id.clone(),
                index,
                attempt: r.attempt,
                at: self.now(),
                text: scrub(&log, &self.secrets),
            };
            if let Err(e) = self.deps.store.append_log(&self.lease, row) {
                self.fatal.get_or_insert(e);
            }
        }
        match r.outcome {
            Ok(out) => {
                // What a tool returns is recorded; a secret it echoes back is not.
                let value = if self.secrets.is_empty() {
                    out.value
                } else {
                    scrub_value(&out.value, &self.secrets)
                };
                let digest = self.put(&value);
                let event = if spec.kind == ToolKind::Effect {
                    Event::EffectRecorded {
                        step: spec.id.clone(),
                        index,
                        attempt: r.attempt,
                        key: self.current_key(i, r.call),
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
                self.keys.remove(&(i, r.call));
                if index.is_some() {
                    self.deps.progress.report(Progress::CallDone {
                        step: spec.id.clone(),
                    });
                }
                self.steps[i].calls[r.call].state = CallState::Done(value);
                self.complete_if_done(i);
            }
            Err(e) => {
                let cause = e.cause.as_ref().map(|c| {
                    let c = scrub_value(c, &self.secrets);
                    self.put(&c)
                });
                let mut error = RunError {
                    code: e.code.to_string(),
                    message: scrub(&e.message, &self.secrets),
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
                let tries = self.steps[i].calls[r.call].tries;
                let can_retry = error.retryable
                    && tries < spec.retry.max
                    && self.failure.is_none()
                    && !self.canceled;
                let retry_at =
                    can_retry.then(|| self.now() + self.backoff_ms(spec, index, r.attempt));
                self.record(Event::CallFailed {
                    step: spec.id.clone(),
                    index,
                    attempt: r.attempt,
                    error: error.clone(),
                    retry_at,
                });
                match retry_at {
                    Some(t) => {
                        self.steps[i].calls[r.call].state = CallState::Backoff(t);
                        self.deps.progress.report(Progress::Retrying {
                            step: spec.id.clone(),
                            attempt: r.attempt,
                            code: error.code.clone(),
                        });
                    }
                    None => {
                        self.steps[i].calls[r.call].state = CallState::Failed;
                        if self.canceled {
                            self.steps[i].status = StepStatus::Failed;
                        } else {
                            self.fail_step(i, error);
                        }
                    }
                }
            }
        }
    }

    fn current_key(&self, i: usize, c: usize) -> String {
        self.keys.get(&(i, c)).cloned().unwrap_or_default()
    }

    fn backoff_ms(&self, spec: &StepSpec, index: Option<u32>, attempt: u32) -> i64 {
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
            let r: f64 = seeded_rng(self.seed, &purpose).random();
            delay / 2.0 + r * delay / 2.0
        } else {
            delay
        };
        delay as i64
    }

    fn retry_due_backoffs(&mut self) {
        let now = self.now();
        for s in self
            .steps
            .iter_mut()
            .filter(|s| s.status == StepStatus::Active)
        {
            for c in &mut s.calls {
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
        let now = self.now();
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
            let woke = json!({ "woke_at": rfc3339(until) });
            self.put(&woke);
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
        let now = self.now();
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
            let spec = self.spec.steps[*i].clone();
            let index = spec.foreach.as_ref().map(|_| *c as u32);
            let error = RunError::new(
                "signal.timeout",
                format!("no signal `{name}` arrived before the step's timeout"),
            )
            .at_step(&spec.id);
            self.record(Event::CallFailed {
                step: spec.id.clone(),
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

    /// Delivers signals that arrived to the steps waiting for them; true when any was delivered.
    async fn deliver_signals(&mut self) -> Result<bool, Refusal> {
        let waiting: Vec<(usize, usize, String)> = self
            .active_calls()
            .filter_map(|(i, c, call)| match &call.state {
                CallState::Signal { name, .. } => Some((i, c, name.clone())),
                _ => None,
            })
            .collect();
        if waiting.is_empty() {
            return Ok(false);
        }
        let mut pending = self.deps.store.pending_signals(self.run_id())?;
        let mut delivered = false;
        for (i, c, name) in waiting {
            let Some(pos) = pending.iter().position(|s| s.name == name) else {
                continue;
            };
            let signal = pending.remove(pos);
            let payload = self.get_value(&signal.payload_digest);
            let flow = self.spec.clone();
            let spec = &flow.steps[i];
            let index = spec.foreach.as_ref().map(|_| c as u32);
            let seq = self
                .lease
                .next_seq
                .load(std::sync::atomic::Ordering::SeqCst)
                + self.pending.len() as u64;
            self.record(Event::SignalReceived {
                step: spec.id.clone(),
                index,
                name,
                signal: signal.seq,
                payload: signal.payload_digest.clone(),
            });
            self.flush()?;
            self.deps
                .store
                .consume_signal(&self.lease, signal.seq, seq)?;
            self.steps[i].calls[c].state = CallState::Done(payload);
            self.complete_if_done(i);
            delivered = true;
        }
        if delivered {
            // The mark goes only if nothing else is left unconsumed (the store checks).
            self.deps.store.update_run(
                &self.lease,
                RunUpdate {
                    clear_signal_pending: true,
                    ..RunUpdate::default()
                },
            )?;
            self.sync().await?;
        }
        Ok(delivered)
    }

    async fn park(&mut self) -> Result<RunOutcome, Refusal> {
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
        self.flush()?;
        self.deps.store.update_run(
            &self.lease,
            RunUpdate {
                status: Some(RunStatus::Waiting),
                due_at: Some(due_at),
                waiting_on: Some(signals),
                ..RunUpdate::default()
            },
        )?;
        for (step, what) in details {
            self.deps.progress.report(Progress::StepDone {
                step,
                state: "waiting",
                duration_ms: 0,
                attempts: 1,
                calls: 1,
                detail: Some(what),
            });
        }
        self.sync().await?;
        self.deps.store.release(&self.lease).await?;
        Ok(RunOutcome {
            run: self.run_id().to_string(),
            status: RunStatus::Waiting,
            output: None,
            error: None,
        })
    }

    async fn finish_succeeded(&mut self) -> Result<RunOutcome, Refusal> {
        let output = match &self.spec.output {
            Some(out) => {
                let mut scope = self.scope(None, None, "#output");
                let result = reel_eval::eval(&out.expr, &mut scope);
                drop(scope);
                if let Some(e) = self.values.take_failure() {
                    return Err(e.into());
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
            Err(e) => return self.finish_failed(e).await,
        };
        let digest = self.put(&output);
        self.record(Event::RunFinished {
            status: "succeeded".into(),
            output: Some(digest.clone()),
            error: None,
        });
        self.end(RunStatus::Succeeded, Some(digest), None).await?;
        Ok(RunOutcome {
            run: self.run_id().to_string(),
            status: RunStatus::Succeeded,
            output: Some(output),
            error: None,
        })
    }

    async fn finish_failed(&mut self, error: RunError) -> Result<RunOutcome, Refusal> {
        self.record(Event::RunFinished {
            status: "failed".into(),
            output: None,
            error: Some(error.clone()),
        });
        self.end(RunStatus::Failed, None, Some(error.clone()))
            .await?;
        Ok(RunOutcome {
            run: self.run_id().to_string(),
            status: RunStatus::Failed,
            output: None,
            error: Some(error),
        })
    }

    async fn finish_canceled(&mut self) -> Result<RunOutcome, Refusal> {
        let error = RunError::new("run.canceled", "the run was canceled with `reel cancel`");
        self.record(Event::RunFinished {
            status: "canceled".into(),
            output: None,
            error: Some(error.clone()),
        });
        self.end(RunStatus::Canceled, None, Some(error.clone()))
            .await?;
        Ok(RunOutcome {
            run: self.run_id().to_string(),
            status: RunStatus::Canceled,
            output: None,
            error: Some(error),
        })
    }

    async fn end(
        &mut self,
        status: RunStatus,
        output: Option<String>,
        error: Option<RunError>,
    ) -> Result<(), Refusal> {
        let now = self.now();
        // The journal's events go before the row that says how the run ended.
        self.flush()?;
        self.deps.store.update_run(
            &self.lease,
            RunUpdate {
                status: Some(status),
                due_at: Some(None),
                waiting_on: Some(Vec::new()),
                ended_at: Some(now),
                output_digest: output,
                error: error.map(|e| serde_json::to_value(e).unwrap_or(Value::Null)),
                ..RunUpdate::default()
            },
        )?;
        self.sync().await?;
        if let Some(e) = self.fatal.take() {
            return Err(e.into());
        }
        self.deps.store.release(&self.lease).await?;
        Ok(())
    }
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

/// What `cancel` did.
#[derive(Clone, Debug, PartialEq)]
pub enum CancelOutcome {
    /// The run was not held by a live process and is now canceled.
    Canceled,
    /// A live process holds it; it stops the run at its next look at the store.
    Requested {
        /// The holder's pid.
        pid: u32,
    },
    /// It had already ended.
    AlreadyEnded(RunStatus),
}

/// Cancels a run: at once when nobody holds it (it is waiting, or its process died), else by
/// asking the process that holds it.
pub async fn cancel(
    deps: &RunDeps,
    cfg: &RiderConfig,
    run_id: &str,
) -> Result<CancelOutcome, Refusal> {
    let store = deps.store.clone();
    let row = store
        .run(run_id)?
        .ok_or_else(|| Refusal::UnknownRun(run_id.to_string()))?;
    if row.status.is_ended() {
        return Ok(CancelOutcome::AlreadyEnded(row.status));
    }
    store.request_cancel(run_id)?;
    let owner = deps.owner.clone();
    let lease_ms = cfg.lease_ms;
    let id = run_id.to_string();
    match blocking(store.clone(), move |s| s.claim_run(&id, &owner, lease_ms)).await? {
        Claim::HeldBy(owner) => Ok(CancelOutcome::Requested { pid: owner.pid }),
        Claim::NotFound => Err(Refusal::UnknownRun(run_id.to_string())),
        Claim::Claimed(lease) => {
            let error = RunError::new("run.canceled", "the run was canceled with `reel cancel`");
            let now = deps.clock.now_ms();
            let event = Event::RunFinished {
                status: "canceled".into(),
                output: None,
                error: Some(error.clone()),
            };
            store.append(&lease, vec![event.to_row(now)])?;
            store.update_run(
                &lease,
                RunUpdate {
                    status: Some(RunStatus::Canceled),
                    due_at: Some(None),
                    waiting_on: Some(Vec::new()),
                    ended_at: Some(now),
                    error: Some(serde_json::to_value(&error).unwrap_or(Value::Null)),
                    ..RunUpdate::default()
                },
            )?;
            store.sync(&lease).await?;
            store.release(&lease).await?;
            Ok(CancelOutcome::Canceled)
        }
    }
}
