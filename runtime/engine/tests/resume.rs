//! What a resume holds and what a `durable` run costs: a resumed run reads from the store only
//! the values still to be read, and sequential steps in `durable` mode take one commit each.
//! And what a replay computes again: no recorded result is hashed a second time; and a replay
//! long enough to read its values ahead on a thread gives the same report, stops where it
//! diverges, and names a value the store lacks. And what a worker reads and when it looks: a
//! run whose claim read it is not read again, and a timer heard of moves the next look rather
//! than making one.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use reel_flowspec::FlowSpec;
use reel_runtime::worker::{Wake, WorkerConfig, work};
use reel_runtime::{
    EnvSecrets, Environment, ManualClock, NoProgress, ReplayOptions, RiderConfig, RunDeps,
    StartRequest, replay, resume, start,
};
use reel_store::{
    Claim, CleanScope, Cleaned, DueClaim, Durability, EventRow, Flow, Kept, Lease, LogRow,
    NewEvent, NewRun, Owner, ReadWithClaim, RunFilter, RunRow, RunStatus, RunUpdate, SignalRow,
    SqliteStore, Store, StoreError, StoreRead, Ticket,
};
use reel_tools::ToolHost;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

mod support;
use support::compile;

/// What a read of a spec returns instead of the stored text (`None`: no spec).
type Spoil = fn(String) -> Option<String>;

/// A store that counts the values, journals and signals read from it, can hand out a spoiled
/// FlowSpec, and can read a claimed run's journal and signals with its claim as a database
/// store does.
struct Counting {
    inner: Arc<SqliteStore>,
    reads: AtomicU64,
    /// Reads of a journal, and of a run's pending signals.
    journal_reads: AtomicU64,
    signal_reads: AtomicU64,
    /// Claims of due runs (a worker's looks).
    claims: AtomicU64,
    /// Applied to every spec read, when set.
    spoil: Option<Spoil>,
    /// A value the store is made to lack, when set.
    hidden: Option<String>,
    /// Whether `claim_due` reads each claimed run's journal and signals with it.
    reads_with_claims: bool,
}

impl Counting {
    fn new(inner: Arc<SqliteStore>) -> Counting {
        Counting {
            inner,
            reads: AtomicU64::new(0),
            journal_reads: AtomicU64::new(0),
            signal_reads: AtomicU64::new(0),
            claims: AtomicU64::new(0),
            spoil: None,
            hidden: None,
            reads_with_claims: false,
        }
    }
}

impl StoreRead for Counting {
    fn stored_value(&self, digest: &str) -> Result<Option<Value>, StoreError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        if self.hidden.as_deref() == Some(digest) {
            return Ok(None);
        }
        self.inner.stored_value(digest)
    }

    fn get_spec(&self, digest: &str) -> Result<Option<String>, StoreError> {
        let json = self.inner.get_spec(digest)?;
        Ok(match self.spoil {
            Some(spoil) => json.and_then(spoil),
            None => json,
        })
    }

    fn run(&self, id: &str) -> Result<Option<RunRow>, StoreError> {
        self.inner.run(id)
    }

    fn find_runs(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        self.inner.find_runs(prefix)
    }

    fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunRow>, StoreError> {
        self.inner.list_runs(filter)
    }

    fn read_journal(
        &self,
        run: &str,
        from_seq: u64,
        f: &mut dyn FnMut(EventRow) -> Flow,
    ) -> Result<(), StoreError> {
        self.journal_reads.fetch_add(1, Ordering::SeqCst);
        self.inner.read_journal(run, from_seq, f)
    }

    fn logs(&self, run: &str) -> Result<Vec<LogRow>, StoreError> {
        self.inner.logs(run)
    }

    fn pending_signals(&self, run: &str) -> Result<Vec<SignalRow>, StoreError> {
        self.signal_reads.fetch_add(1, Ordering::SeqCst);
        self.inner.pending_signals(run)
    }

    fn due_runs(&self, now_ms: i64, limit: usize) -> Result<Vec<String>, StoreError> {
        self.inner.due_runs(now_ms, limit)
    }
}

impl Store for Counting {
    fn put_value(&self, value: &Value) -> Result<String, StoreError> {
        self.inner.put_value(value)
    }

    fn put_canonical(&self, digest: &str, text: String) -> Result<Kept, StoreError> {
        self.inner.put_canonical(digest, text)
    }

    fn put_spec(&self, digest: &str, json: &str) -> Result<Kept, StoreError> {
        self.inner.put_spec(digest, json)
    }

    fn create_run(&self, run: NewRun, owner: &Owner, lease_ms: u64) -> Result<Lease, StoreError> {
        self.inner.create_run(run, owner, lease_ms)
    }

    fn claim_run(&self, run: &str, owner: &Owner, lease_ms: u64) -> Result<Claim, StoreError> {
        self.inner.claim_run(run, owner, lease_ms)
    }

    fn renew(&self, lease: &Lease, lease_ms: u64) -> Result<(), StoreError> {
        self.inner.renew(lease, lease_ms)
    }

    fn release(&self, lease: &Lease) -> Ticket {
        self.inner.release(lease)
    }

    fn append_kept(
        &self,
        lease: &Lease,
        events: Vec<NewEvent>,
        kept: Vec<Kept>,
    ) -> Result<(), StoreError> {
        self.inner.append_kept(lease, events, kept)
    }

    fn update_run(&self, lease: &Lease, update: RunUpdate) -> Result<(), StoreError> {
        self.inner.update_run(lease, update)
    }

    fn append_log(&self, lease: &Lease, log: LogRow) -> Result<(), StoreError> {
        self.inner.append_log(lease, log)
    }

    fn consume_signal(&self, lease: &Lease, seq: u64, by: u64) -> Result<(), StoreError> {
        self.inner.consume_signal(lease, seq, by)
    }

    fn sync(&self, lease: &Lease) -> Ticket {
        self.inner.sync(lease)
    }

    fn send_signal(&self, run: &str, name: &str, payload: &Value) -> Result<u64, StoreError> {
        self.inner.send_signal(run, name, payload)
    }

    fn request_cancel(&self, run: &str) -> Result<bool, StoreError> {
        self.inner.request_cancel(run)
    }

    fn claim_due(
        &self,
        now_ms: i64,
        owner: &Owner,
        lease_ms: u64,
        limit: usize,
        skip: &HashSet<String>,
    ) -> Result<Vec<DueClaim>, StoreError> {
        self.claims.fetch_add(1, Ordering::SeqCst);
        let mut claimed = self.inner.claim_due(now_ms, owner, lease_ms, limit, skip)?;
        if self.reads_with_claims {
            for claim in &mut claimed {
                let run = &claim.lease.run;
                let mut journal = Vec::new();
                self.inner.read_journal_rows(run, 0, &mut |row| {
                    journal.push(row);
                    Flow::Continue
                })?;
                let names: Vec<String> = self
                    .inner
                    .pending_signals(run)?
                    .into_iter()
                    .map(|s| s.name)
                    .collect();
                let signals = self.inner.pending_signals_with_payloads(run, &names)?;
                claim.read = Some(Box::new(ReadWithClaim { journal, signals }));
            }
        }
        Ok(claimed)
    }

    fn clean(&self, scope: &CleanScope, dry_run: bool) -> Result<Cleaned, StoreError> {
        self.inner.clean(scope, dry_run)
    }
}

/// The time the tests' clocks stand at: the engine and the store read no real time here.
const T0: i64 = 1_700_000_000_000;

/// A clock standing at [`T0`] (a `sleep` moves it, taking no real time).
fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::at(T0))
}

/// An environment with no variables set.
struct NoEnvironment;

impl Environment for NoEnvironment {
    fn get(&self, _: &str) -> Option<String> {
        None
    }
}

fn deps(store: Arc<dyn Store>) -> RunDeps {
    RunDeps {
        store,
        tools: Arc::new(ToolHost::new()),
        clock: clock(),
        secrets: Arc::new(EnvSecrets::from_pairs([])),
        env: Arc::new(NoEnvironment),
        progress: Arc::new(NoProgress),
        shutdown: CancellationToken::new(),
        owner: Owner::this_process(),
    }
}

fn request(id: &str, spec: FlowSpec, durability: Durability, cwd: &Path) -> StartRequest {
    StartRequest {
        run_id: id.to_string(),
        spec: Arc::new(spec),
        inputs: serde_json::Map::new(),
        cwd: cwd.to_path_buf(),
        source: None,
        source_abs: None,
        keep_for_ms: None,
        durability,
        seed: 1,
        parent: None,
    }
}

/// The steps `s0` … `s{n-1}` of a chain of `echo` calls, each one more than the one before.
fn echo_chain(n: usize) -> String {
    let mut s = String::from("  step s0 = echo { value: 0 }\n");
    for i in 1..n {
        s.push_str(&format!("  step s{i} = echo {{ value: s{} + 1 }}\n", i - 1));
    }
    s
}

/// A chain of `n` `echo` calls ending in `output s{n-1}`.
fn chain(n: usize) -> String {
    format!("flow t {{\n{}  output s{}\n}}\n", echo_chain(n), n - 1)
}

/// `n` `echo` steps, each reading the one before, then a wait for signal `go`.
fn chain_then_signal(n: usize) -> String {
    let mut s = format!("flow t {{\n{}", echo_chain(n));
    s.push_str(&format!(
        "  step w = signal {{\n    name: \"go\"\n    after: [s{}]\n  }}\n  output {{ last: s{}, first: s0, w: w }}\n}}\n",
        n - 1,
        n - 1
    ));
    s
}

/// Each step's `step_started` events, in journal order.
fn starts(store: &dyn Store, run: &str) -> Vec<String> {
    let mut out = Vec::new();
    store
        .read_journal(run, 0, &mut |row| {
            if row.kind == "step_started" {
                out.push(row.step.clone().unwrap_or_default());
            }
            Flow::Continue
        })
        .expect("the journal reads");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_reads_only_the_values_still_to_be_read() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let sqlite = Arc::new(SqliteStore::open(&dir.path().join("store"), clock()).expect("a store"));
    let n = 200;
    let spec = compile(&chain_then_signal(n));
    let first = start(
        &deps(sqlite.clone()),
        &RiderConfig::default(),
        request("r1", spec, Durability::Fast, dir.path()),
    )
    .await
    .expect("the run starts");
    assert_eq!(first.status, RunStatus::Waiting, "{first:?}");
    let started = starts(sqlite.as_ref(), "r1");
    assert_eq!(started.len(), n);

    // Parked again with nothing arrived: only the inputs and the environment are read.
    let counting = Arc::new(Counting::new(sqlite.clone()));
    let again = resume(
        &deps(counting.clone()),
        &RiderConfig::default(),
        "r1",
        "resume",
    )
    .await
    .expect("the run resumes");
    assert_eq!(again.status, RunStatus::Waiting, "{again:?}");
    let reads = counting.reads.load(Ordering::SeqCst);
    assert!(reads <= 2, "a parked resume read {reads} values");

    // The signal comes: the output reads two step values and the payload, nothing more.
    sqlite
        .send_signal("r1", "go", &json!({ "ok": true }))
        .expect("the signal is kept");
    counting.reads.store(0, Ordering::SeqCst);
    let done = resume(
        &deps(counting.clone()),
        &RiderConfig::default(),
        "r1",
        "signal",
    )
    .await
    .expect("the run resumes");
    assert_eq!(done.status, RunStatus::Succeeded, "{done:?}");
    let out = done.output.expect("an output");
    assert_eq!(out["last"], json!(n - 1));
    assert_eq!(out["first"], json!(0));
    assert_eq!(out["w"], json!({ "ok": true }));
    let reads = counting.reads.load(Ordering::SeqCst);
    assert!(reads <= 6, "the ending resume read {reads} values");
    // Nothing the journal recorded as finished ran again.
    assert_eq!(starts(sqlite.as_ref(), "r1"), started);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_claim_read_it_is_resumed_without_reading_it_again() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let sqlite = Arc::new(SqliteStore::open(&dir.path().join("store"), clock()).expect("a store"));
    let spec = compile(&chain_then_signal(3));
    let worker = WorkerConfig {
        until_idle: true,
        ..WorkerConfig::default()
    };
    // A worker whose claims read the run, then one whose claims do not: the same end.
    let mut reads = Vec::new();
    for (id, with_claims) in [("read", true), ("unread", false)] {
        let first = start(
            &deps(sqlite.clone()),
            &RiderConfig::default(),
            request(id, spec.clone(), Durability::Fast, dir.path()),
        )
        .await
        .expect("the run starts");
        assert_eq!(first.status, RunStatus::Waiting, "{first:?}");
        sqlite
            .send_signal(id, "go", &json!({ "ok": id }))
            .expect("the signal is kept");
        let counting = Arc::new(Counting {
            reads_with_claims: with_claims,
            ..Counting::new(sqlite.clone())
        });
        work(
            deps(counting.clone()),
            RiderConfig::default(),
            worker.clone(),
            |_| {},
        )
        .await
        .expect("the worker runs");
        let row = sqlite.run(id).expect("read").expect("the run");
        assert_eq!(row.status, RunStatus::Succeeded, "{id}: {row:?}");
        let output = sqlite
            .get_value(row.output_digest.as_deref().expect("an output"))
            .expect("read")
            .expect("the output");
        assert_eq!(output["w"], json!({ "ok": id }));
        assert_eq!(output["last"], json!(2));
        reads.push((
            id,
            counting.journal_reads.load(Ordering::SeqCst),
            counting.signal_reads.load(Ordering::SeqCst),
        ));
    }
    assert_eq!(reads[0], ("read", 0, 0), "the claim's reads are used");
    assert!(reads[1].1 >= 1 && reads[1].2 >= 1, "{reads:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_heard_of_moves_the_next_look_and_a_run_due_now_wakes_the_worker() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let sqlite = Arc::new(SqliteStore::open(&dir.path().join("store"), clock()).expect("a store"));
    let counting = Arc::new(Counting::new(sqlite));
    let wake = Arc::new(Wake::default());
    let deps = deps(counting.clone());
    let shutdown = deps.shutdown.clone();
    // Idle, it would look again only in ten minutes.
    let config = WorkerConfig {
        poll: std::time::Duration::from_secs(600),
        wake: Some(wake.clone()),
        ..WorkerConfig::default()
    };
    let worker = tokio::spawn(work(deps, RiderConfig::default(), config, |_| {}));
    let looks = || counting.claims.load(Ordering::SeqCst);
    let looked = |n: u64| async move {
        // edge: waits for the worker's task, in real time, up to a bound far past any need.
        for _ in 0..1_000 {
            if looks() >= n {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("the worker looked {} times, not {n}", looks());
    };
    looked(1).await;
    // A timer a day away does not make it look.
    wake.timer_at(T0 + 86_400_000);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(looks(), 1);
    // A run due now does, at once.
    wake.due_now();
    looked(2).await;
    // A timer 50 ms away makes it look then, not in ten minutes (its clock stands still,
    // so the nap is those 50 ms).
    wake.timer_at(T0 + 50);
    looked(3).await;
    shutdown.cancel();
    worker
        .await
        .expect("the worker ends")
        .expect("without an error");
    assert_eq!(looks(), 3);
}

/// `json` changed by `f`, as JSON text.
fn edit(json: &str, f: impl FnOnce(&mut Value)) -> Option<String> {
    let mut value: Value = serde_json::from_str(json).ok()?;
    f(&mut value);
    Some(value.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_flow_that_does_not_read_stops_the_resume() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let sqlite = Arc::new(SqliteStore::open(&dir.path().join("store"), clock()).expect("a store"));
    let first = start(
        &deps(sqlite.clone()),
        &RiderConfig::default(),
        request(
            "r3",
            compile(&chain_then_signal(3)),
            Durability::Fast,
            dir.path(),
        ),
    )
    .await
    .expect("the run starts");
    assert_eq!(first.status, RunStatus::Waiting, "{first:?}");
    let cases: [(Spoil, &str); 4] = [
        (
            |json| Some(json[..json.len() / 2].to_string()),
            "not a valid FlowSpec: EOF while parsing",
        ),
        (
            |json| {
                edit(&json, |v| {
                    v["steps"][1]["args"]["value"]["op"] = json!("pipe")
                })
            },
            "not a valid FlowSpec: unknown variant `pipe`",
        ),
        (
            |json| edit(&json, |v| v["version"] = json!(4)),
            "FlowSpec version 4 is not supported",
        ),
        (|_| None, "is missing from the store"),
    ];
    for (spoil, expected) in cases {
        let spoiled = Arc::new(Counting {
            spoil: Some(spoil),
            ..Counting::new(sqlite.clone())
        });
        let refused = resume(&deps(spoiled), &RiderConfig::default(), "r3", "resume")
            .await
            .map(|o| o.status)
            .map_err(|e| e.to_string());
        assert!(
            refused.as_ref().is_err_and(|e| e
                .starts_with("the run's recorded flow cannot be read: ")
                && e.contains(expected)),
            "{expected}: {refused:?}"
        );
    }
    // The refusals left the run as it was.
    let again = resume(
        &deps(sqlite.clone()),
        &RiderConfig::default(),
        "r3",
        "resume",
    )
    .await
    .expect("the run resumes");
    assert_eq!(again.status, RunStatus::Waiting, "{again:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_step_reads_the_value_it_needs_from_the_store() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let sqlite = Arc::new(SqliteStore::open(&dir.path().join("store"), clock()).expect("a store"));
    // `after` the signal, a step reads a value computed before the run parked.
    let source = "flow t {\n  step a = echo { value: { n: 41 } }\n  step b = echo { value: a.n + 1 }\n  step w = signal {\n    name: \"go\"\n    after: [b]\n  }\n  step c = echo {\n    value: a.n + b\n    after: [w]\n  }\n  output c\n}\n";
    let first = start(
        &deps(sqlite.clone()),
        &RiderConfig::default(),
        request("r2", compile(source), Durability::Fast, dir.path()),
    )
    .await
    .expect("the run starts");
    assert_eq!(first.status, RunStatus::Waiting, "{first:?}");
    sqlite
        .send_signal("r2", "go", &json!(null))
        .expect("the signal is kept");
    let done = resume(
        &deps(sqlite.clone()),
        &RiderConfig::default(),
        "r2",
        "signal",
    )
    .await
    .expect("the run resumes");
    assert_eq!(done.status, RunStatus::Succeeded, "{done:?}");
    assert_eq!(done.output, Some(json!(83)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_sequential_steps_take_one_commit_each() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let sqlite = Arc::new(SqliteStore::open(&dir.path().join("store"), clock()).expect("a store"));
    let n = 60;
    let spec = compile(&chain(n));
    let before = sqlite.stats().full_syncs;
    let done = start(
        &deps(sqlite.clone()),
        &RiderConfig::default(),
        request("r3", spec, Durability::Durable, dir.path()),
    )
    .await
    .expect("the run starts");
    assert_eq!(done.status, RunStatus::Succeeded, "{done:?}");
    assert_eq!(done.output, Some(json!(n - 1)));
    let batches = sqlite.stats().full_syncs - before;
    // Each start must land before its call (n fsync'd commits); the run's creation and its
    // ending add a few. Two per step would be about 2n. (Batches of values alone commit
    // without a full sync and are not counted.)
    assert!(
        batches <= n as u64 + 8,
        "{n} durable steps took {batches} fsync'd commits"
    );
}

/// Runs `source` as run `id` in `fast` mode, to its success.
async fn run_to_end(store: &Arc<SqliteStore>, id: &str, source: &str, dir: &Path) {
    let run = start(
        &deps(store.clone()),
        &RiderConfig::default(),
        request(id, compile(source), Durability::Fast, dir),
    )
    .await
    .expect("the run starts");
    assert_eq!(run.status, RunStatus::Succeeded, "{run:?}");
}

/// A replay hands each recorded result to the core with the digest the record gives it: what
/// it hashes is each call's inputs and the run's output, however many results it answers
/// (before, every result and every step's output were hashed again: 3 per step).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_hashes_no_recorded_result_again() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let sqlite = Arc::new(SqliteStore::open(&dir.path().join("store"), clock()).expect("a store"));
    for (id, n) in [("r1", 20usize), ("r2", 200)] {
        run_to_end(&sqlite, id, &chain(n), dir.path()).await;
        for verify in [false, true] {
            let opts = ReplayOptions {
                verify,
                faults: Vec::new(),
            };
            let report = replay(sqlite.as_ref(), id, &opts, &NoProgress).expect("it replays");
            assert_eq!(report.divergence, None);
            assert_eq!(report.status, "succeeded");
            assert_eq!(report.output, Some(json!(n - 1)));
            assert_eq!(report.calls, n);
            assert_eq!(report.digests, n as u64 + 1, "n = {n}, verify = {verify}");
        }
    }
}

/// The digest of the result recorded for step `step` of run `run`.
fn result_of(store: &dyn Store, run: &str, step: &str) -> String {
    let mut digest = None;
    store
        .read_journal(run, 0, &mut |e| {
            let recorded = match e.kind.as_str() {
                "call_succeeded" => &e.data["output"],
                "effect_recorded" => &e.data["result"],
                _ => &Value::Null,
            };
            if e.step.as_deref() == Some(step) && recorded.is_string() {
                digest = recorded.as_str().map(str::to_string);
                return Flow::Stop;
            }
            Flow::Continue
        })
        .expect("the journal reads");
    digest.unwrap_or_else(|| panic!("no recorded result of `{step}`"))
}

/// A replay of a run with enough results for a thread to read their values ahead gives the
/// report a short one gives; changed on purpose half-way, the verifying replay stops there (the
/// thread reading ahead is let go, nothing waits for it); and a value the store lacks half-way
/// is named, not waited for. At 3,000 steps the replay also takes a big flow's road: its
/// first machine is made on a thread of its own (with the faults asked for) and the record is
/// freed on two threads.
#[tokio::test]
async fn a_long_replay_reads_ahead_stops_where_it_diverges_and_names_a_lost_value() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let sqlite = Arc::new(SqliteStore::open(&dir.path().join("store"), clock()).expect("a store"));
    let n = 3000;
    let half = n / 2;
    // A pure step `p` between `s{half}` and the step after it.
    let source = chain(n).replace(
        &format!("  step s{} = echo {{ value: s{half} + 1 }}\n", half + 1),
        &format!(
            "  step p = max(s{half}, 0)\n  step s{} = echo {{ value: p + 1 }}\n",
            half + 1
        ),
    );
    assert!(source.contains("step p = "), "the pure step is in the flow");
    // A step `big` whose result is long enough to be kept by digest (the chain's numbers are
    // their own names, which no store can lose), read by the step after it.
    let lost_at = half + 100;
    let source = source.replace(
        &format!("  step s{lost_at} = echo {{ value: s{} + 1 }}\n", lost_at - 1),
        &format!(
            "  step big = echo {{ value: {{ n: s{}, pad: \"{}\" }} }}\n  step s{lost_at} = echo {{ value: big.n + 1 }}\n",
            lost_at - 1,
            "p".repeat(64)
        ),
    );
    assert!(
        source.contains("step big = "),
        "the long step is in the flow"
    );
    run_to_end(&sqlite, "long", &source, dir.path()).await;
    for verify in [false, true] {
        let opts = ReplayOptions {
            verify,
            faults: Vec::new(),
        };
        let report = replay(sqlite.as_ref(), "long", &opts, &NoProgress).expect("it replays");
        assert_eq!(report.divergence, None);
        assert_eq!(report.output, Some(json!(n - 1)));
        assert_eq!(report.calls, n + 1);
    }

    let changed = ReplayOptions {
        verify: true,
        faults: vec!["max".into()],
    };
    let report = replay(sqlite.as_ref(), "long", &changed, &NoProgress).expect("it replays");
    let divergence = report.divergence.expect("the changed builtin is caught");
    assert_eq!(divergence.step.as_deref(), Some("p"), "{divergence:?}");
    assert!(
        report.calls <= half + 2,
        "it stopped at `p`: {} calls",
        report.calls
    );

    let lost = result_of(sqlite.as_ref(), "long", "big");
    assert!(reel_flowspec::canonical::literal(&lost).is_none(), "{lost}");
    let losing = Counting {
        hidden: Some(lost.clone()),
        ..Counting::new(sqlite.clone())
    };
    let opts = ReplayOptions::default();
    match replay(&losing, "long", &opts, &NoProgress) {
        Err(e) => assert!(e.to_string().contains(&lost), "{e}"),
        Ok(report) => panic!("a lost value replayed: {:?}", report.status),
    }
}
