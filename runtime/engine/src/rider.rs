//! The Rider: starts, resumes and cancels runs.
//!
//! A run's decisions are made by its [`Machine`] (`crate::core`), which does no I/O; the live
//! driver (`crate::drive`) carries them out. Every decision is journaled before it is acted on
//! in the order the store commits it; in `durable` mode the engine also waits for the record
//! before each call that is not pure. Nothing a journal records as finished is ever run again.

use std::path::PathBuf;
use std::sync::Arc;

use reel_flowspec::FlowSpec;
use reel_flowspec::canonical::canonical_json;
use reel_store::{
    Claim, DueClaim, Durability, JournalRow, Kept, Lease, NewRun, RunRow, RunStatus, RunUpdate,
    Store, StoreError,
};
use serde_json::{Map, Value, json};

use crate::core::{Decided, Input, Machine, Setup, check_decisions};
use crate::deps::{Progress, RunDeps};
use crate::drive::drive;
use crate::error::RunError;
use crate::fold::{Folded, fold_journal, fold_rows};
use crate::fork::Reuse;
use crate::inputs::resolve_inputs;
use crate::journal::{DETERMINISM_EPOCH, Event, RunStarted};

/// How the Rider runs things.
#[derive(Clone, Debug)]
pub struct RiderConfig {
    /// Most calls in flight at once, across the run's steps.
    pub max_parallel: usize,
    /// How long a lease lasts without renewal (ms).
    pub lease_ms: u64,
    /// How often the run looks for signals and cancellation while it works (ms).
    pub poll_ms: u64,
    /// Builtins whose results are changed on purpose: a test's fault injection, which a resume
    /// must catch as a divergence; empty in every real run.
    pub faults: Vec<String>,
}

impl Default for RiderConfig {
    fn default() -> Self {
        RiderConfig {
            max_parallel: 64,
            lease_ms: 15_000,
            poll_ms: 200,
            faults: Vec::new(),
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
    begin(deps, cfg, req, None, None).await
}

/// Starts a run; `env` is a snapshot to keep (a fork keeps its parent's) instead of reading
/// the environment, and `reuse` answers calls from a parent's record (a fork).
pub(crate) async fn begin(
    deps: &RunDeps,
    cfg: &RiderConfig,
    req: StartRequest,
    snapshot: Option<&Map<String, Value>>,
    reuse: Option<&Reuse>,
) -> Result<RunOutcome, Refusal> {
    let spec = req.spec.clone();
    let inputs = resolve_inputs(&spec, &req.inputs).map_err(Refusal::Input)?;
    let secrets = resolve_secrets(deps, &spec)?;
    let mut env = Map::new();
    for e in &spec.env {
        let kept = snapshot.and_then(|s| s.get(&e.name)).cloned();
        env.insert(
            e.name.clone(),
            kept.unwrap_or_else(|| deps.env.get(&e.name).map_or(Value::Null, Value::String)),
        );
    }
    let store = deps.store.clone();
    // What `run_started` names goes with it (see `Kept`): a clean in another process between
    // these writes and the run's creation cannot leave the run naming nothing.
    let mut kept = vec![store.put_spec(&spec.digest, &spec.to_json())?];
    store.keep_spec_binary(&spec)?;
    let (inputs_digest, inputs_kept) = put_object(&*store, &inputs)?;
    let (env_digest, env_kept) = put_object(&*store, &env)?;
    kept.extend(inputs_kept.into_iter().chain(env_kept));
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
        rerun: reuse.is_some_and(Reuse::is_rerun),
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
        kept,
    };
    let owner = deps.owner.clone();
    let lease_ms = cfg.lease_ms;
    let lease = blocking(store.clone(), move |s| s.create_run(new, &owner, lease_ms)).await?;
    deps.progress.report(Progress::RunCreated {
        run: lease.run.clone(),
    });
    let machine = Machine::new(Setup {
        run_id: lease.run.clone(),
        spec,
        seed: req.seed,
        started_at: now,
        cwd: req.cwd,
        inputs,
        env,
        secrets: secrets.into(),
        durability: lease.durability,
        max_parallel: cfg.max_parallel,
        faults: cfg.faults.clone(),
        idempotency_keys: true,
    });
    drive(
        deps,
        cfg,
        Arc::new(lease),
        machine,
        Input::Started,
        reuse,
        None,
    )
    .await
}

/// Resumes a run from its journal: after a crash, when its timer is due or a signal arrived, or
/// after it failed or was canceled (a redrive: successes are kept, the failed step runs again).
pub async fn resume(
    deps: &RunDeps,
    cfg: &RiderConfig,
    run_id: &str,
    reason: &str,
) -> Result<RunOutcome, Refusal> {
    resume_deciding(deps, cfg, run_id, reason, Vec::new()).await
}

/// Resumes a run as [`resume`] does, with a person's decisions about calls whose outcome is
/// unknown (`reel resume --accept`, `--retry`). A decision that names no such call, or a result
/// that does not fit the step's type, refuses the resume before anything is recorded.
pub async fn resume_deciding(
    deps: &RunDeps,
    cfg: &RiderConfig,
    run_id: &str,
    reason: &str,
    decisions: Vec<Decided>,
) -> Result<RunOutcome, Refusal> {
    resume_run(deps, cfg, run_id, reason, decisions, true, None).await
}

/// Continues a run a worker claimed ([`reel_store::Store::look`]): as [`resume`], but a
/// run that ended meanwhile (canceled by `reel cancel`, finished by another worker) is left as
/// it ended, never redriven: a redrive is a person's decision. A run it cannot go on with is
/// given back as it was.
pub(crate) async fn resume_claimed(
    deps: &RunDeps,
    cfg: &RiderConfig,
    claim: DueClaim,
) -> Result<RunOutcome, Refusal> {
    let run = claim.lease.run.clone();
    resume_run(deps, cfg, &run, "worker", Vec::new(), false, Some(claim)).await
}

async fn resume_run(
    deps: &RunDeps,
    cfg: &RiderConfig,
    run_id: &str,
    reason: &str,
    decisions: Vec<Decided>,
    may_redrive: bool,
    held: Option<DueClaim>,
) -> Result<RunOutcome, Refusal> {
    let store = deps.store.clone();
    let looked = look(
        deps,
        run_id,
        &decisions,
        held.as_ref().map(|h| (*h.row).clone()),
    );
    let (mut row, spec, secrets) = match (looked, held.as_ref()) {
        (Ok(Look::Go { row, spec, secrets }), _) => (*row, spec, secrets),
        (Ok(Look::Done(outcome)), held) => {
            // It succeeded: its row is left as it is.
            if let Some(held) = held {
                let _ = store.release(&held.lease).await;
            }
            return Ok(outcome);
        }
        (Err(refusal), held) => {
            if let Some(held) = held {
                give_back(&store, &held.lease, held.was).await;
            }
            return Err(refusal);
        }
    };
    let (lease, current, read) = match held {
        Some(held) => {
            reel_store::crash::reached(reel_store::crash::CrashPoint::Takeover);
            // The row came with the claim, which made a waiting run `running`: it is the run
            // as the claim left it, so it is not read again; nor are its journal and signals
            // when the claim read them too.
            let current = Some(row.clone());
            row.status = held.was;
            (held.lease, current, held.read)
        }
        None => {
            let lease = claim(deps, cfg, &row).await?;
            (lease, store.run(&row.id)?, None)
        }
    };
    let (journal, signals) = read.map(|read| (read.journal, read.signals)).unzip();
    // Another process may have ended the run before this claim (two workers saw it due; the
    // other finished it and let it go; `reel cancel` ended it): what it recorded stands, and
    // the run is neither resumed again nor, unless a person asked, redriven.
    if (!row.status.is_ended() || !may_redrive)
        && let Some(now) = current.clone()
        && now.status.is_ended()
    {
        let _ = store.release(&lease).await;
        let output = match &now.output_digest {
            Some(d) => store.get_value(d)?,
            None => None,
        };
        return Ok(RunOutcome {
            run: now.id,
            status: now.status,
            output,
            error: now.error.and_then(|e| serde_json::from_value(e).ok()),
        });
    }
    // A cancel asked for while another process held the run, which then parked it before it
    // looked (a worker waking it from a timer into a signal wait), is carried out now, as
    // `reel cancel` does for a run nobody holds. Resumed instead, the run would park again
    // with the request still standing, be due again at once, and be taken up forever.
    if current.is_some_and(|now| now.cancel_requested && !now.status.is_ended()) {
        let now = deps.clock.now_ms();
        end_canceled(store.as_ref(), &lease, now)?;
        store.release(&lease).await?;
        return Ok(RunOutcome {
            run: row.id,
            status: RunStatus::Canceled,
            output: None,
            error: Some(cancel_error()),
        });
    }
    let lease = Arc::new(lease);
    // The journal's length as the claim found it.
    let length = lease.next_seq.load(std::sync::atomic::Ordering::SeqCst);
    let (folded, started, started_at, inputs, env) =
        match read_back(&store, &row.id, length, journal).await {
            Ok(read) => read,
            Err(refusal) => {
                give_back(&store, &lease, row.status).await;
                return Err(refusal);
            }
        };
    if let Err(message) = check_decisions(&spec, &folded, &decisions) {
        give_back(&store, &lease, row.status).await;
        return Err(Refusal::Input(format!(
            "cannot resume run {}: {message}",
            row.id
        )));
    }
    let redrive = matches!(folded.finished.as_deref(), Some("failed" | "canceled"));
    // A fork or rerun goes on reusing its parent's record after a park or a crash.
    let reuse = match &row.parent {
        Some(parent) => {
            match Reuse::resumed(store.as_ref(), parent, spec.clone(), started.rerun, &folded) {
                Ok(reuse) => reuse,
                Err(refusal) => {
                    give_back(&store, &lease, row.status).await;
                    return Err(refusal);
                }
            }
        }
        None => None,
    };
    let mut machine = Machine::new(Setup {
        run_id: lease.run.clone(),
        spec,
        seed: started.seed,
        started_at,
        cwd: PathBuf::from(&started.cwd),
        inputs,
        env,
        secrets: secrets.into(),
        durability: lease.durability,
        max_parallel: cfg.max_parallel,
        faults: cfg.faults.clone(),
        idempotency_keys: true,
    });
    machine.decide(decisions);
    let first = Input::Resumed {
        folded: Box::new(folded),
        reason: if redrive {
            "redrive".into()
        } else {
            reason.to_string()
        },
        by: format!("{}:{}", deps.owner.host, deps.owner.pid),
    };
    drive(deps, cfg, lease, machine, first, reuse.as_ref(), signals).await
}

/// What a resume found before taking the run: nothing to do, or what it needs to go on.
enum Look {
    /// The run succeeded already: this is its outcome.
    Done(RunOutcome),
    /// The run to go on with, its flow and its secrets.
    Go {
        row: Box<RunRow>,
        spec: Arc<FlowSpec>,
        secrets: Vec<(String, String)>,
    },
}

/// Reads the run (unless a claim brought its row) and what resuming it needs.
fn look(
    deps: &RunDeps,
    run_id: &str,
    decisions: &[Decided],
    claimed: Option<RunRow>,
) -> Result<Look, Refusal> {
    let store = &deps.store;
    let row = match claimed {
        Some(row) => row,
        None => store
            .run(run_id)?
            .ok_or_else(|| Refusal::UnknownRun(run_id.to_string()))?,
    };
    match row.status {
        RunStatus::Succeeded if !decisions.is_empty() => {
            return Err(Refusal::Input(format!(
                "run {} succeeded: it has no call whose outcome is unknown",
                row.id
            )));
        }
        RunStatus::Succeeded => {
            let output = match &row.output_digest {
                Some(d) => store.get_value(d)?,
                None => None,
            };
            return Ok(Look::Done(RunOutcome {
                run: row.id,
                status: RunStatus::Succeeded,
                output,
                error: None,
            }));
        }
        RunStatus::Quarantined => return Err(Refusal::Quarantined(row.id)),
        _ => {}
    }
    let spec = recorded_spec(store.as_ref(), &row.flow_digest)?;
    let secrets = resolve_secrets(deps, &spec)?;
    Ok(Look::Go {
        row: Box::new(row),
        spec,
        secrets,
    })
}

/// Takes the run's lease for a resume, or says who holds it.
async fn claim(deps: &RunDeps, cfg: &RiderConfig, row: &RunRow) -> Result<Lease, Refusal> {
    let owner = deps.owner.clone();
    let lease_ms = cfg.lease_ms;
    let id = row.id.clone();
    let claim = blocking(deps.store.clone(), move |s| {
        s.claim_run(&id, &owner, lease_ms)
    })
    .await?;
    match claim {
        Claim::Claimed(lease) => {
            reel_store::crash::reached(reel_store::crash::CrashPoint::Takeover);
            Ok(lease)
        }
        Claim::HeldBy(owner) => Err(Refusal::Held {
            run: row.id.clone(),
            pid: owner.pid,
            host: owner.host,
        }),
        Claim::NotFound => Err(Refusal::UnknownRun(row.id.clone())),
    }
}

/// What a resume rebuilds from the store once it holds the run: the folded journal, how the
/// run started, its inputs and its environment; the journal is read unless its claim read it
/// (`journal`). A hole in the journal or a missing value refuses the resume: a run rebuilt
/// from part of its record could run a step twice.
async fn read_back(
    store: &Arc<dyn Store>,
    run: &str,
    length: u64,
    journal: Option<Vec<JournalRow>>,
) -> Result<
    (
        Folded,
        RunStarted,
        i64,
        Map<String, Value>,
        Map<String, Value>,
    ),
    Refusal,
> {
    let folded = match journal {
        // Short (the claim read it so), so folded here.
        Some(rows) => fold_rows(run, &rows)?,
        None => {
            let store = store.clone();
            let id = run.to_string();
            tokio::task::spawn_blocking(move || fold_journal(store.as_ref(), &id, length))
                .await
                .map_err(|e| Refusal::Store(StoreError::Sqlite(e.to_string())))??
        }
    };
    let Some((started, started_at)) = folded.started.clone() else {
        return Err(Refusal::Store(StoreError::Hole {
            run: run.to_string(),
            seq: 0,
            message: "the journal does not begin with run_started".into(),
        }));
    };
    let (inputs, env) = inputs_and_env(store.as_ref(), &started)?;
    Ok((folded, started, started_at, inputs, env))
}

/// A run's inputs and its environment snapshot, as `run_started` names them.
type InputsAndEnv = (Map<String, Value>, Map<String, Value>);

/// The inputs and the environment snapshot a run's `run_started` names, read together: one
/// round trip to a database, and often one digest (`{}`) for both. Small ones are kept by
/// digest ([`KEPT_OBJECTS`]): a worker resumes run after run started with the same inputs and
/// environment, and on PostgreSQL each resume read them again (200 of the 2,500 statements
/// of a burst of 200 short signalled runs).
pub(crate) fn inputs_and_env(
    store: &dyn reel_store::StoreRead,
    started: &RunStarted,
) -> Result<InputsAndEnv, Refusal> {
    let digests = [started.inputs.as_str(), started.env.as_str()];
    let kept = digests.map(|d| KEPT_OBJECTS.get(d));
    let unkept: Vec<&str> = digests
        .iter()
        .zip(&kept)
        .filter_map(|(d, k)| k.is_none().then_some(*d))
        .collect();
    let mut read = if unkept.is_empty() {
        Vec::new()
    } else {
        store.get_values(&unkept)?
    }
    .into_iter();
    // A kept object, or the next one read (and kept when small).
    let mut object = |digest: &str, kept: Option<Arc<Map<String, Value>>>| {
        let object = match kept {
            Some(object) => object,
            None => match read.next().flatten() {
                Some(Value::Object(m)) => {
                    let m = Arc::new(m);
                    KEPT_OBJECTS.keep(digest, json_size_up_to(&m, KEPT_OBJECT_MAX), &m);
                    m
                }
                _ => {
                    return Err(Refusal::from(StoreError::MissingValue {
                        digest: digest.to_string(),
                    }));
                }
            },
        };
        Ok(Arc::unwrap_or_clone(object))
    };
    let [inputs, env] = kept;
    Ok((object(digests[0], inputs)?, object(digests[1], env)?))
}

/// The inputs and environments this process read last, by digest ([`inputs_and_env`]).
static KEPT_OBJECTS: std::sync::LazyLock<KeptByDigest<Map<String, Value>>> =
    std::sync::LazyLock::new(|| KeptByDigest::new(KEPT_OBJECT_COUNT, KEPT_OBJECT_MAX));

/// How many inputs and environments are kept.
const KEPT_OBJECT_COUNT: std::num::NonZeroUsize = std::num::NonZeroUsize::new(64).unwrap();
/// Only those whose JSON is at most this long are kept.
const KEPT_OBJECT_MAX: usize = 16 << 10;

/// The length of `value`'s JSON, counted only up to `limit` (one more when longer): what
/// decides whether to keep it costs no more than the limit, however big the value.
fn json_size_up_to(value: &Map<String, Value>, limit: usize) -> usize {
    /// Counts what is written and stops the writing past `limit`.
    struct Count {
        written: usize,
        limit: usize,
    }
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.written += buf.len();
            if self.written > self.limit {
                return Err(std::io::Error::other("past the limit"));
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count { written: 0, limit };
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.written,
        Err(_) => limit + 1,
    }
}

/// Hands a run the resume could not take up back as it was: the claim made a waiting run
/// `running`, and a run left so, held by nobody, would look stuck rather than waiting.
async fn give_back(store: &Arc<dyn Store>, lease: &Lease, was: RunStatus) {
    if was == RunStatus::Waiting {
        // Best effort: should it fail, the run is `running` with no holder, which a worker
        // takes up again (and refuses again) as after a crash.
        let _ = store.update_run(
            lease,
            RunUpdate {
                status: Some(RunStatus::Waiting),
                ..RunUpdate::default()
            },
        );
    }
    let _ = store.release(lease).await;
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

pub(crate) async fn blocking<T: Send + 'static>(
    store: Arc<dyn Store>,
    f: impl FnOnce(&dyn Store) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(move || f(store.as_ref()))
        .await
        .map_err(|e| StoreError::Sqlite(format!("a store task stopped: {e}")))?
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
            // A worker may have carried out this request (or ended the run otherwise) between
            // the read above and this claim: the run ends once.
            if let Some(now) = store.run(run_id)?
                && now.status.is_ended()
            {
                let _ = store.release(&lease).await;
                return Ok(CancelOutcome::AlreadyEnded(now.status));
            }
            end_canceled(store.as_ref(), &lease, deps.clock.now_ms())?;
            store.release(&lease).await?;
            Ok(CancelOutcome::Canceled)
        }
    }
}

/// The error of a run ended by `reel cancel`.
fn cancel_error() -> RunError {
    RunError::new("run.canceled", "the run was canceled with `reel cancel`")
}

/// Records the end of a run canceled while nobody drove it (parked, or its process gone),
/// under `lease`; the caller syncs and releases.
fn end_canceled(store: &dyn Store, lease: &Lease, now: i64) -> Result<(), StoreError> {
    let error = cancel_error();
    let event = Event::RunFinished {
        status: "canceled".into(),
        output: None,
        error: Some(error.clone()),
    };
    store.append(lease, vec![event.to_row(now)])?;
    store.update_run(
        lease,
        RunUpdate {
            status: Some(RunStatus::Canceled),
            due_at: Some(None),
            waiting_on: Some(Vec::new()),
            ended_at: Some(now),
            error: Some(serde_json::to_value(&error).unwrap_or(Value::Null)),
            ..RunUpdate::default()
        },
    )
}

/// Ends a quarantine by trying again (`reel release`): the run's row leaves `quarantined` and
/// the run is resumed as a redrive, its call of unknown outcome made again only if it now
/// computes the inputs (and so the key) it was first made with; else it is quarantined again.
pub async fn release(
    deps: &RunDeps,
    cfg: &RiderConfig,
    run_id: &str,
) -> Result<RunOutcome, Refusal> {
    let store = deps.store.clone();
    let row = store
        .run(run_id)?
        .ok_or_else(|| Refusal::UnknownRun(run_id.to_string()))?;
    if row.status != RunStatus::Quarantined {
        return Err(Refusal::Input(format!(
            "run {} is {}, not quarantined: `reel release` ends a quarantine (`reel resume` continues a run)",
            row.id,
            row.status.as_str()
        )));
    }
    let lease = claimed(deps, cfg, &row.id).await?;
    store.update_run(
        &lease,
        RunUpdate {
            status: Some(RunStatus::Running),
            ..RunUpdate::default()
        },
    )?;
    store.release(&lease).await?;
    resume(deps, cfg, &row.id, "release").await
}

/// Ends a quarantine by giving up (`reel abandon`): the run ends failed with `run.abandoned`,
/// nothing is made again.
pub async fn abandon(
    deps: &RunDeps,
    cfg: &RiderConfig,
    run_id: &str,
) -> Result<RunOutcome, Refusal> {
    let store = deps.store.clone();
    let row = store
        .run(run_id)?
        .ok_or_else(|| Refusal::UnknownRun(run_id.to_string()))?;
    if row.status != RunStatus::Quarantined {
        return Err(Refusal::Input(format!(
            "run {} is {}, not quarantined: `reel abandon` ends a quarantine (`reel cancel` stops a run)",
            row.id,
            row.status.as_str()
        )));
    }
    let lease = claimed(deps, cfg, &row.id).await?;
    let error = RunError::new(
        "run.abandoned",
        "the run was quarantined and then abandoned with `reel abandon`",
    );
    let now = deps.clock.now_ms();
    let event = Event::RunFinished {
        status: "failed".into(),
        output: None,
        error: Some(error.clone()),
    };
    store.append(&lease, vec![event.to_row(now)])?;
    store.update_run(
        &lease,
        RunUpdate {
            status: Some(RunStatus::Failed),
            due_at: Some(None),
            waiting_on: Some(Vec::new()),
            ended_at: Some(now),
            error: Some(serde_json::to_value(&error).unwrap_or(Value::Null)),
            ..RunUpdate::default()
        },
    )?;
    store.release(&lease).await?;
    Ok(RunOutcome {
        run: row.id,
        status: RunStatus::Failed,
        output: None,
        error: Some(error),
    })
}

/// The lease of run `id`, claimed for this process; refused when another process holds it.
async fn claimed(
    deps: &RunDeps,
    cfg: &RiderConfig,
    id: &str,
) -> Result<reel_store::Lease, Refusal> {
    let owner = deps.owner.clone();
    let lease_ms = cfg.lease_ms;
    let run = id.to_string();
    match blocking(deps.store.clone(), move |s| {
        s.claim_run(&run, &owner, lease_ms)
    })
    .await?
    {
        Claim::Claimed(lease) => Ok(lease),
        Claim::HeldBy(owner) => Err(Refusal::Held {
            run: id.to_string(),
            pid: owner.pid,
            host: owner.host,
        }),
        Claim::NotFound => Err(Refusal::UnknownRun(id.to_string())),
    }
}

/// The FlowSpec a run recorded, by its digest: a run resumes and replays against the program it
/// started with, never the file as edited since.
pub(crate) fn recorded_spec(
    store: &dyn reel_store::StoreRead,
    digest: &str,
) -> Result<Arc<FlowSpec>, Refusal> {
    if let Some(spec) = KEPT_SPECS.get(digest) {
        return Ok(spec);
    }
    match store.flowspec(digest)? {
        Some((Ok(spec), size)) => {
            let spec = Arc::new(spec);
            KEPT_SPECS.keep(digest, size, &spec);
            Ok(spec)
        }
        Some((Err(e), _)) => Err(Refusal::Spec(e.to_string())),
        None => Err(Refusal::Spec(format!(
            "the FlowSpec {digest} is missing from the store"
        ))),
    }
}

/// The FlowSpecs this process read last, by digest: a worker resumes run after run of the same
/// few flows, and each resume read and parsed its flow's FlowSpec again (one read in eight of a
/// resumed short run on PostgreSQL). Only those whose form as read (the binary form where the
/// store keeps one, else the JSON, about three times as long) is at most 256 KiB are kept: a
/// big flow's parsed FlowSpec is many times that, and a process that ran it once should not
/// hold it after.
static KEPT_SPECS: std::sync::LazyLock<KeptByDigest<FlowSpec>> = std::sync::LazyLock::new(|| {
    KeptByDigest::new(std::num::NonZeroUsize::new(16).unwrap(), 256 << 10)
});

/// A few small things read from the store, by digest, the least recently used going first. A
/// digest names one text for good, so what is kept is never out of date, whichever store it
/// came from.
struct KeptByDigest<T> {
    kept: std::sync::Mutex<lru::LruCache<String, Arc<T>>>,
    /// Only things whose text is at most this long are kept.
    max_size: usize,
}

impl<T> KeptByDigest<T> {
    fn new(count: std::num::NonZeroUsize, max_size: usize) -> KeptByDigest<T> {
        KeptByDigest {
            kept: std::sync::Mutex::new(lru::LruCache::new(count)),
            max_size,
        }
    }

    fn get(&self, digest: &str) -> Option<Arc<T>> {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.get(digest).cloned()
    }

    /// Keeps `thing`, whose text is `size` bytes long, unless that is too long.
    fn keep(&self, digest: &str, size: usize, thing: &Arc<T>) {
        if size <= self.max_size {
            let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
            kept.put(digest.to_string(), Arc::clone(thing));
        }
    }
}

/// Names a map of values as one value, stored unless it is its own name (`Store::put_named`);
/// returns the name and what the run that names it carries.
fn put_object(
    store: &dyn Store,
    map: &Map<String, Value>,
) -> Result<(String, Option<Kept>), StoreError> {
    store.put_named(canonical_json(&Value::Object(map.clone())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> Arc<FlowSpec> {
        let db = reel_compiler::RootDb::default();
        let src = "flow f {\n  step a = 1\n  output a\n}\n";
        let file = reel_compiler::SourceFile::new(&db, "t.reel".into(), "/".into(), src.into());
        Arc::new(reel_compiler::build_flow(&db, file, "f").expect("the flow builds"))
    }

    #[test]
    fn inputs_and_environments_read_once_are_kept_when_small() {
        let dir = tempfile::tempdir().expect("a directory");
        let clock = Arc::new(reel_store::ManualClock::at(0));
        let store =
            reel_store::SqliteStore::open(&dir.path().join("store"), clock).expect("a store");
        let small: Map<String, Value> = [("region".to_string(), Value::from("eu"))]
            .into_iter()
            .collect();
        let big: Map<String, Value> =
            [("blob".to_string(), Value::from("x".repeat(KEPT_OBJECT_MAX)))]
                .into_iter()
                .collect();
        let digest = |m: &Map<String, Value>| put_object(&store, m).expect("stored").0;
        let (small_digest, big_digest) = (digest(&small), digest(&big));
        let started = RunStarted {
            flow: String::new(),
            inputs: big_digest.clone(),
            seed: 0,
            epoch: DETERMINISM_EPOCH,
            env: small_digest.clone(),
            cwd: String::new(),
            source: None,
            durability: "fast".into(),
            rerun: false,
        };
        let (inputs, env) = inputs_and_env(&store, &started).expect("both read");
        assert_eq!((inputs, env), (big, small.clone()));
        // The small one is kept, the big one read again next time.
        assert_eq!(KEPT_OBJECTS.get(&small_digest).as_deref(), Some(&small));
        assert!(KEPT_OBJECTS.get(&big_digest).is_none());
        // What decides it stops counting past the limit.
        assert_eq!(json_size_up_to(&small, 100), r#"{"region":"eu"}"#.len());
        assert_eq!(json_size_up_to(&small, 4), 5);
    }

    #[test]
    fn kept_specs_keep_the_most_recently_used_small_ones() {
        let count = std::num::NonZeroUsize::new(16).unwrap();
        let kept = KeptByDigest::new(count, 256 << 10);
        let one = spec();
        kept.keep("d0", 10, &one);
        assert!(Arc::ptr_eq(&kept.get("d0").expect("kept"), &one));
        // A big FlowSpec is not kept.
        kept.keep("big", kept.max_size + 1, &one);
        assert!(kept.get("big").is_none());
        // Full, the least recently used goes: `d0` was used after `d1` was kept.
        for i in 1..count.get() {
            kept.keep(&format!("d{i}"), 10, &spec());
        }
        assert!(kept.get("d0").is_some());
        kept.keep("new", 10, &spec());
        assert!(kept.get("d1").is_none(), "the least recently used went");
        assert!(kept.get("d0").is_some() && kept.get("new").is_some());
        assert_eq!(kept.kept.lock().unwrap().len(), count.get());
    }
}
