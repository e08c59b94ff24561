//! One suite of store tests, run unchanged against both implementations: the SQLite store and
//! the PostgreSQL store. Each test is written once against [`Backend`] and instantiated for
//! each store by `conformance!` at the bottom.
//!
//! The PostgreSQL tests need a server: `scripts/test.sh` starts a private one and sets
//! `REEL_TEST_POSTGRES_URL` (or `source scripts/postgres-for-tests.sh` by hand). Without it
//! they fail, saying so; none is skipped.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use reel_flowspec::canonical::{canonical_json, sha256_hex};
use reel_store::{
    Claim, CleanScope, Durability, EventRow, Flow, JournalRow, Lease, LogRow, ManualClock,
    NewEvent, NewRun, Owner, PgStore, QueryLimits, RunFilter, RunStatus, RunUpdate, SqliteStore,
    Store, StoreError, Ticket, UNKNOWN_OUTCOME,
};
use serde_json::json;

mod test_server;

/// The time the tests' clock stands at.
const T0: i64 = 1_700_000_000_000;

/// A store implementation under test: opens stores on one database, and reaches into that
/// database directly to damage it.
trait Backend {
    /// The clock the stores it opens read.
    fn clock(&self) -> Arc<ManualClock>;
    /// Opens a store (another one on the same database each time: another "process").
    fn open(&self) -> Result<Box<dyn Store>, StoreError>;
    /// Opens a store for reading only.
    fn open_read_only(&self) -> Result<Box<dyn Store>, StoreError>;
    /// Runs SQL on the database directly (statements both dialects read alike).
    fn raw(&self, sql: &str);
    /// The first number a raw query returns.
    fn raw_count(&self, sql: &str) -> i64;
    /// Whether it is a database many machines share: its store reads a short claimed run's
    /// journal and signals with the claim ([`reel_store::ReadWithClaim`]), since each read is
    /// a round trip, and counts held runs' leases in the next due time, since a holder may
    /// die on another machine.
    fn shared(&self) -> bool;
}

struct Sqlite {
    dir: tempfile::TempDir,
    clock: Arc<ManualClock>,
}

impl Sqlite {
    fn new() -> Sqlite {
        Sqlite {
            dir: tempfile::tempdir().unwrap(),
            clock: Arc::new(ManualClock::at(T0)),
        }
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join(".reel")
    }

    fn conn(&self) -> rusqlite::Connection {
        let conn = rusqlite::Connection::open(self.path().join("reel.db")).unwrap();
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .unwrap();
        conn
    }
}

impl Backend for Sqlite {
    fn clock(&self) -> Arc<ManualClock> {
        self.clock.clone()
    }
    fn open(&self) -> Result<Box<dyn Store>, StoreError> {
        Ok(Box::new(SqliteStore::open(
            &self.path(),
            self.clock.clone(),
        )?))
    }
    fn open_read_only(&self) -> Result<Box<dyn Store>, StoreError> {
        Ok(Box::new(SqliteStore::open_read_only(&self.path())?))
    }
    fn raw(&self, sql: &str) {
        self.conn().execute_batch(sql).unwrap();
    }
    fn raw_count(&self, sql: &str) -> i64 {
        self.conn().query_row(sql, [], |r| r.get(0)).unwrap()
    }
    fn shared(&self) -> bool {
        false
    }
}

struct Postgres {
    url: String,
    clock: Arc<ManualClock>,
}

impl Postgres {
    /// A fresh database on the test server, for one test.
    fn new() -> Postgres {
        Postgres {
            url: test_server::fresh_database("reel"),
            clock: Arc::new(ManualClock::at(T0)),
        }
    }

    fn conn(&self) -> ::postgres::Client {
        let mut client = ::postgres::Client::connect(&self.url, ::postgres::NoTls).unwrap();
        client.batch_execute("SET search_path TO reel").unwrap();
        client
    }
}

impl Backend for Postgres {
    fn clock(&self) -> Arc<ManualClock> {
        self.clock.clone()
    }
    fn open(&self) -> Result<Box<dyn Store>, StoreError> {
        Ok(Box::new(PgStore::open(&self.url, self.clock.clone())?))
    }
    fn open_read_only(&self) -> Result<Box<dyn Store>, StoreError> {
        Ok(Box::new(PgStore::open_read_only(&self.url)?))
    }
    fn raw(&self, sql: &str) {
        self.conn().batch_execute(sql).unwrap();
    }
    fn shared(&self) -> bool {
        true
    }
    fn raw_count(&self, sql: &str) -> i64 {
        self.conn().query_one(sql, &[]).unwrap().get(0)
    }
}

fn new_run(id: &str) -> NewRun {
    NewRun {
        first_events: Vec::new(),
        id: id.to_string(),
        flow: "deploy".to_string(),
        flow_digest: "f".repeat(64),
        source: Some("deploy.reel".to_string()),
        source_abs: Some("/src/deploy.reel".to_string()),
        cwd: "/src".to_string(),
        parent: None,
        keep_for_ms: Some(7 * 24 * 3600 * 1000),
        durability: Durability::Fast,
        created_at: 1_000,
        kept: Vec::new(),
    }
}

fn event(kind: &str, n: u64) -> NewEvent {
    NewEvent {
        at: 5_000 + n as i64,
        kind: kind.to_string(),
        step: Some(format!("step{n}")),
        index: Some(2),
        attempt: Some(1),
        data: json!({ "n": n }),
    }
}

/// A line step `s` of `run` printed in its first attempt.
fn log_line(run: &str, text: &str) -> LogRow {
    LogRow {
        run: run.to_string(),
        step: "s".to_string(),
        index: None,
        attempt: 1,
        at: 1,
        text: text.to_string(),
    }
}

fn wait(ticket: Ticket) -> Result<(), StoreError> {
    ticket.0.blocking_recv().unwrap_or(Err(StoreError::Closed))
}

/// Ends the run of `lease` as succeeded at `at` and lets its lease go: committed on return.
fn end_succeeded(store: &dyn Store, lease: &Lease, at: i64) {
    store
        .update_run(
            lease,
            RunUpdate {
                status: Some(RunStatus::Succeeded),
                ended_at: Some(at),
                ..RunUpdate::default()
            },
        )
        .unwrap();
    wait(store.release(lease)).unwrap();
}

fn journal(store: &dyn Store, run: &str) -> Result<Vec<EventRow>, StoreError> {
    let mut rows = Vec::new();
    store.read_journal(run, 0, &mut |row| {
        rows.push(row);
        Flow::Continue
    })?;
    Ok(rows)
}

fn numbers(rows: &[EventRow]) -> Vec<u64> {
    rows.iter().map(|r| r.data["n"].as_u64().unwrap()).collect()
}

fn me() -> Owner {
    Owner::this_process()
}

/// A holder that is alive (it is this process) but is not us as far as leases go.
fn other_live_owner() -> Owner {
    Owner {
        id: format!("{}-other", me().id),
        ..me()
    }
}

fn a_run_round_trips(b: &dyn Backend) {
    let store = b.open().unwrap();
    let lease = store.create_run(new_run("r1"), &me(), 60_000).unwrap();
    assert_eq!((lease.token, lease.next_seq.load(Ordering::SeqCst)), (1, 0));
    store
        .append(
            &lease,
            vec![event("run_started", 0), event("step_started", 1)],
        )
        .unwrap();
    store
        .update_run(
            &lease,
            RunUpdate {
                status: Some(RunStatus::Succeeded),
                ended_at: Some(9_000),
                output_digest: Some("o".repeat(64)),
                error: Some(json!({ "code": "x" })),
                waiting_on: Some(vec!["approve".to_string()]),
                due_at: Some(Some(7)),
                ..RunUpdate::default()
            },
        )
        .unwrap();
    wait(store.sync(&lease)).unwrap();

    let rows = journal(&*store, "r1").unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1].seq, 1);
    assert_eq!(rows[1].kind, "step_started");
    assert_eq!(rows[1].step.as_deref(), Some("step1"));
    assert_eq!(
        (rows[1].index, rows[1].attempt, rows[1].at),
        (Some(2), Some(1), 5_001)
    );
    let run = store.run("r1").unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Succeeded);
    assert_eq!(run.next_seq, 2);
    assert_eq!(run.ended_at, Some(9_000));
    assert_eq!(run.due_at, Some(7));
    assert_eq!(run.waiting_on, vec!["approve".to_string()]);
    assert_eq!(run.error, Some(json!({ "code": "x" })));
    assert_eq!(run.output_digest, Some("o".repeat(64)));
    assert_eq!(run.lease_owner, Some(me()));
    assert_eq!(run.lease_token, 1);
    assert_eq!(run.lease_expires_at, Some(T0 + 60_000));
    assert_eq!(run.keep_for_ms, Some(7 * 24 * 3600 * 1000));
    assert_eq!(
        (run.flow.as_str(), run.cwd.as_str(), run.created_at),
        ("deploy", "/src", 1_000)
    );
    assert_eq!(store.run("nope").unwrap(), None);
    assert_eq!(
        journal(&*store, "nope").unwrap_err(),
        StoreError::NotFound("nope".to_string())
    );

    let mut seen = Vec::new();
    store
        .read_journal("r1", 1, &mut |row| {
            seen.push(row.seq);
            Flow::Stop
        })
        .unwrap();
    assert_eq!(seen, vec![1]);

    wait(store.release(&lease)).unwrap();
    assert_eq!(store.run("r1").unwrap().unwrap().lease_owner, None);
    assert!(
        store
            .create_run(new_run("r1"), &me(), 1)
            .unwrap_err()
            .to_string()
            .contains("already exists")
    );
    // A run's first events land with it.
    let mut first = new_run("r2");
    first.first_events = vec![event("run_started", 0)];
    let lease = store.create_run(first, &me(), 60_000).unwrap();
    assert_eq!(lease.next_seq.load(Ordering::SeqCst), 1);
    assert_eq!(numbers(&journal(&*store, "r2").unwrap()), vec![0]);
}

fn rows_land_in_order_without_gaps_across_threads_and_runs(b: &dyn Backend) {
    let store = b.open().unwrap();
    let runs = 6;
    let per_run = 200u64;
    let leases: Vec<Lease> = (0..runs)
        .map(|i| {
            store
                .create_run(new_run(&format!("run{i}")), &me(), 60_000)
                .unwrap()
        })
        .collect();
    std::thread::scope(|s| {
        for chunk in leases.chunks(2) {
            let store = &store;
            s.spawn(move || {
                let mut n = 0;
                while n < per_run {
                    for lease in chunk {
                        // Appends of one to three events, so batches cut through appends.
                        let k = 1 + n % 3;
                        let events = (n..(n + k).min(per_run)).map(|i| event("e", i)).collect();
                        store.append(lease, events).unwrap();
                    }
                    n += 1 + n % 3;
                }
                for lease in chunk {
                    wait(store.sync(lease)).unwrap();
                }
            });
        }
    });
    for lease in &leases {
        let rows = journal(&*store, &lease.run).unwrap();
        assert_eq!(numbers(&rows), (0..per_run).collect::<Vec<_>>());
        assert!(rows.iter().enumerate().all(|(i, r)| r.seq == i as u64));
        assert_eq!(store.run(&lease.run).unwrap().unwrap().next_seq, per_run);
    }
}

fn a_journal_read_while_it_grows_is_always_a_prefix(b: &dyn Backend) {
    let writer = b.open().unwrap();
    let reader = b.open().unwrap();
    let lease = writer.create_run(new_run("p"), &me(), 60_000).unwrap();
    let total = 300u64;
    std::thread::scope(|s| {
        s.spawn(|| {
            for n in 0..total {
                writer.append(&lease, vec![event("e", n)]).unwrap();
                if n % 7 == 0 {
                    wait(writer.sync(&lease)).unwrap();
                }
            }
            wait(writer.sync(&lease)).unwrap();
        });
        let mut last = 0;
        while last < total {
            let rows = journal(&*reader, "p").unwrap();
            let len = rows.len() as u64;
            assert_eq!(numbers(&rows), (0..len).collect::<Vec<_>>());
            assert!(len >= last, "a journal never shrinks ({len} after {last})");
            last = len;
        }
    });
}

fn a_taken_over_lease_fences_its_old_holder(b: &dyn Backend) {
    // Two stores on one database: two processes, the first of which slept past its lease.
    let old = b.open().unwrap();
    let new = b.open().unwrap();
    let first = old.create_run(new_run("r"), &me(), 30).unwrap();
    old.append(&first, vec![event("e", 0)]).unwrap();
    wait(old.sync(&first)).unwrap();
    b.clock().advance(60);

    let Claim::Claimed(second) = new.claim_run("r", &other_live_owner(), 60_000).unwrap() else {
        panic!("the expired lease should be taken over");
    };
    assert_eq!(second.token, 2);
    assert_eq!(second.next_seq.load(Ordering::SeqCst), 1);

    // The old holder wakes up and still believes it holds the run: nothing it writes lands.
    old.append(&first, vec![event("e", 100)]).unwrap();
    old.append(&first, vec![event("e", 101)]).unwrap();
    let lost = StoreError::LeaseLost {
        run: "r".to_string(),
    };
    assert_eq!(wait(old.sync(&first)), Err(lost.clone()));
    assert_eq!(old.append(&first, vec![event("e", 102)]), Err(lost.clone()));
    assert_eq!(old.renew(&first, 1_000), Err(lost.clone()));
    assert_eq!(
        old.update_run(
            &first,
            RunUpdate {
                status: Some(RunStatus::Failed),
                ..RunUpdate::default()
            }
        ),
        Err(lost.clone())
    );
    wait(old.release(&first)).unwrap_err();
    let run = new.run("r").unwrap().unwrap();
    assert_eq!(run.lease_owner, Some(other_live_owner()));
    assert_eq!(run.status, RunStatus::Running);

    new.append(&second, vec![event("e", 1)]).unwrap();
    new.append_log(&second, log_line("r", "mine")).unwrap();
    wait(new.sync(&second)).unwrap();
    assert_eq!(numbers(&journal(&*new, "r").unwrap()), vec![0, 1]);
    new.renew(&second, 60_000).unwrap();
}

fn a_release_commits_what_came_before_it_and_reports_a_refused_write(b: &dyn Backend) {
    // A run that ends gives its lease up without waiting for its last writes first: the
    // release comes after them, in their transaction or a later one.
    let store = b.open().unwrap();
    let lease = store.create_run(new_run("r"), &me(), 60_000).unwrap();
    store
        .append(&lease, vec![event("e", 0), event("e", 1)])
        .unwrap();
    end_succeeded(&*store, &lease, 9_000);
    let other = b.open().unwrap();
    assert_eq!(numbers(&journal(&*other, "r").unwrap()), vec![0, 1]);
    let run = other.run("r").unwrap().unwrap();
    assert_eq!(
        (run.status, run.ended_at, run.lease_owner),
        (RunStatus::Succeeded, Some(9_000), None)
    );

    // A holder whose lease was taken over hears, from its release alone, that its writes
    // were refused; the new holder keeps the run.
    let first = store.create_run(new_run("s"), &me(), 30).unwrap();
    b.clock().advance(60);
    let Claim::Claimed(second) = other.claim_run("s", &other_live_owner(), 60_000).unwrap() else {
        panic!("the expired lease should be taken over");
    };
    store.append(&first, vec![event("e", 100)]).unwrap();
    assert_eq!(
        wait(store.release(&first)),
        Err(StoreError::LeaseLost {
            run: "s".to_string()
        })
    );
    assert!(journal(&*other, "s").unwrap().is_empty());
    let run = other.run("s").unwrap().unwrap();
    assert_eq!(run.lease_owner, Some(other_live_owner()));
    assert_eq!(run.lease_token, second.token);
}

fn logs_are_kept_in_order_and_only_from_the_holder(b: &dyn Backend) {
    let store = b.open().unwrap();
    let lease = store.create_run(new_run("r"), &me(), 30).unwrap();
    let log = |text: &str, index: Option<u32>| LogRow {
        run: "r".to_string(),
        step: "build".to_string(),
        index,
        attempt: 2,
        at: 6_000,
        text: text.to_string(),
    };
    for (i, text) in ["one", "two", "three"].iter().enumerate() {
        store.append_log(&lease, log(text, Some(i as u32))).unwrap();
    }
    wait(store.sync(&lease)).unwrap();
    let logs = store.logs("r").unwrap();
    assert_eq!(
        logs.iter().map(|l| l.text.as_str()).collect::<Vec<_>>(),
        ["one", "two", "three"]
    );
    assert_eq!(logs[2], log("three", Some(2)));
    assert!(store.logs("none").unwrap().is_empty());

    b.clock().advance(60);
    let other = b.open().unwrap();
    assert!(matches!(
        other.claim_run("r", &other_live_owner(), 60_000).unwrap(),
        Claim::Claimed(_)
    ));
    store.append_log(&lease, log("late", None)).unwrap();
    assert_eq!(
        wait(store.sync(&lease)),
        Err(StoreError::LeaseLost {
            run: "r".to_string()
        })
    );
    assert_eq!(store.logs("r").unwrap().len(), 3);
}

fn a_live_holder_keeps_its_run_and_a_dead_one_loses_it_at_once(b: &dyn Backend) {
    let store = b.open().unwrap();
    store.create_run(new_run("live"), &me(), 60_000).unwrap();
    match store
        .claim_run("live", &other_live_owner(), 60_000)
        .unwrap()
    {
        Claim::HeldBy(holder) => assert_eq!(holder, me()),
        other => panic!("expected HeldBy, got {other:?}"),
    }
    let dead = Owner {
        id: "ghost".to_string(),
        pid: u32::MAX - 11,
        ..me()
    };
    let ghost = store.create_run(new_run("dead"), &dead, 3_600_000).unwrap();
    store.append(&ghost, vec![event("e", 0)]).unwrap();
    wait(store.sync(&ghost)).unwrap();
    match store.claim_run("dead", &me(), 60_000).unwrap() {
        Claim::Claimed(lease) => {
            assert_eq!(lease.token, 2);
            assert_eq!(lease.next_seq.load(Ordering::SeqCst), 1);
            assert_eq!(lease.owner, me());
        }
        other => panic!("expected a takeover, got {other:?}"),
    }
    assert!(matches!(
        store.claim_run("missing", &me(), 1).unwrap(),
        Claim::NotFound
    ));
}

fn racing_claims_give_a_run_to_one_claimer(b: &dyn Backend) {
    let stores: Vec<Box<dyn Store>> = (0..4).map(|_| b.open().unwrap()).collect();
    for i in 0..10 {
        let lease = stores[0]
            .create_run(new_run(&format!("r{i}")), &me(), 10)
            .unwrap();
        wait(stores[0].release(&lease)).unwrap();
    }
    let won = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for (k, store) in stores.iter().enumerate() {
            let won = &won;
            s.spawn(move || {
                let owner = Owner {
                    id: format!("claimer-{k}"),
                    ..me()
                };
                for i in 0..10 {
                    if let Claim::Claimed(lease) =
                        store.claim_run(&format!("r{i}"), &owner, 60_000).unwrap()
                    {
                        won.lock().unwrap().push((i, lease.token));
                    }
                }
            });
        }
    });
    let mut won = won.into_inner().unwrap();
    won.sort();
    assert_eq!(won, (0..10).map(|i| (i, 2)).collect::<Vec<_>>());
}

/// Parks run `id` as waiting, due at `due` or on `signals`, and lets it go.
fn park(store: &dyn Store, id: &str, due: Option<i64>, signals: &[&str]) {
    let lease = store.create_run(new_run(id), &me(), 60_000).unwrap();
    store
        .update_run(
            &lease,
            RunUpdate {
                status: Some(RunStatus::Waiting),
                due_at: Some(due),
                waiting_on: Some(signals.iter().map(|s| s.to_string()).collect()),
                ..RunUpdate::default()
            },
        )
        .unwrap();
    wait(store.release(&lease)).unwrap();
}

fn racing_due_claims_give_each_run_to_one_claimer(b: &dyn Backend) {
    let stores: Vec<Box<dyn Store>> = (0..4).map(|_| b.open().unwrap()).collect();
    let runs = 40;
    for i in 0..runs {
        park(&*stores[0], &format!("r{i:02}"), Some(T0 - 1), &[]);
    }
    let won = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for (k, store) in stores.iter().enumerate() {
            let won = &won;
            s.spawn(move || {
                let owner = Owner {
                    id: format!("claimer-{k}"),
                    ..me()
                };
                loop {
                    let claimed = store
                        .claim_due(T0, &owner, 60_000, 3, &HashSet::new())
                        .unwrap();
                    assert!(claimed.len() <= 3);
                    if claimed.is_empty() {
                        break;
                    }
                    for c in claimed {
                        assert_eq!(c.was, RunStatus::Waiting);
                        assert_eq!(c.lease.owner, owner);
                        won.lock()
                            .unwrap()
                            .push((c.lease.run.clone(), c.lease.token));
                    }
                }
            });
        }
    });
    let mut won = won.into_inner().unwrap();
    won.sort();
    let expected: Vec<(String, u64)> = (0..runs).map(|i| (format!("r{i:02}"), 2)).collect();
    assert_eq!(won, expected);
    for (run, _) in &won {
        let row = stores[1].run(run).unwrap().unwrap();
        assert_eq!(row.status, RunStatus::Running);
        assert_eq!(row.lease_token, 2);
    }
}

fn due_claims_pass_over_skipped_held_and_future_runs(b: &dyn Backend) {
    let store = b.open().unwrap();
    park(&*store, "timer-past", Some(T0 - 1_000), &[]);
    park(&*store, "timer-future", Some(T0 + 3_600_000), &[]);
    park(&*store, "signal", None, &["go"]);
    park(&*store, "skipped", Some(T0 - 1_000), &[]);
    park(&*store, "idle", None, &[]);
    store.send_signal("signal", "go", &json!(null)).unwrap();
    store.create_run(new_run("held"), &me(), 600_000).unwrap();
    store.create_run(new_run("expired"), &me(), 0).unwrap();
    let dead = Owner {
        pid: u32::MAX - 3,
        ..me()
    };
    store.create_run(new_run("orphan"), &dead, 600_000).unwrap();
    // A dead holder's every run is taken, beside a live holder's kept.
    store
        .create_run(new_run("orphan-2"), &dead, 600_000)
        .unwrap();
    let skip: HashSet<String> = ["skipped".to_string()].into();
    let taker = other_live_owner();

    let first = store.claim_due(T0 + 1, &taker, 60_000, 1, &skip).unwrap();
    assert_eq!(first.len(), 1);
    let mut claimed: Vec<(String, RunStatus)> = first
        .into_iter()
        .chain(store.claim_due(T0 + 1, &taker, 60_000, 100, &skip).unwrap())
        .map(|c| (c.lease.run.clone(), c.was))
        .collect();
    claimed.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        claimed,
        vec![
            ("expired".to_string(), RunStatus::Running),
            ("orphan".to_string(), RunStatus::Running),
            ("orphan-2".to_string(), RunStatus::Running),
            ("signal".to_string(), RunStatus::Waiting),
            ("timer-past".to_string(), RunStatus::Waiting),
        ]
    );
    // Taken once: a second look finds nothing more until the future timer comes due.
    assert!(
        store
            .claim_due(T0 + 1, &taker, 60_000, 100, &skip)
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .claim_due(T0 + 1, &taker, 60_000, 0, &HashSet::new())
            .unwrap()
            .is_empty()
    );
    let later: Vec<String> = store
        .claim_due(T0 + 3_600_000, &taker, 60_000, 100, &HashSet::new())
        .unwrap()
        .into_iter()
        .map(|c| c.lease.run.clone())
        .collect();
    assert_eq!(later, vec!["skipped", "timer-future"]);
    assert_eq!(
        store.run("held").unwrap().unwrap().lease_owner,
        Some(me()),
        "a live holder keeps its run"
    );
}

fn what_a_claim_reads_with_a_run_is_what_its_resume_would_read(b: &dyn Backend) {
    let store = b.open().unwrap();
    // A short run with a hole in its journal, one long one, one with no signal: each parked
    // on `go` with events after its start, and signals (one consumed, one over 64 KiB) sent.
    let parked = |id: &str, events: u64| {
        let lease = store.create_run(new_run(id), &me(), 60_000).unwrap();
        store
            .append(&lease, (0..events).map(|n| event("e", n)).collect())
            .unwrap();
        store
            .update_run(
                &lease,
                RunUpdate {
                    status: Some(RunStatus::Waiting),
                    waiting_on: Some(vec!["go".to_string()]),
                    ..RunUpdate::default()
                },
            )
            .unwrap();
        wait(store.release(&lease)).unwrap();
    };
    parked("short", 6);
    parked("long", 600);
    parked("quiet", 3);
    b.raw("DELETE FROM journal WHERE run = 'short' AND seq = 2");
    let big = json!({ "text": "x".repeat(100 * 1024) });
    for run in ["short", "long"] {
        store.send_signal(run, "early", &json!(0)).unwrap();
        store.send_signal(run, "go", &big).unwrap();
        store.send_signal(run, "later", &json!({ "n": 2 })).unwrap();
    }
    // `quiet` is due by its lease alone: a claim takes it though nothing was sent.
    b.raw("UPDATE runs SET status = 'running' WHERE id = 'quiet'");
    let taker = other_live_owner();
    let first = store
        .claim_due(T0, &taker, 60_000, 100, &HashSet::new())
        .unwrap();
    let early = first
        .iter()
        .find(|c| c.lease.run == "short")
        .expect("the short run is claimed");
    store
        .consume_signal(&early.lease, 0, 5)
        .expect("the early signal is consumed");
    // Given back, and claimed again: the consumed signal is no longer pending.
    for claim in &first {
        wait(store.release(&claim.lease)).unwrap();
    }
    b.raw("UPDATE runs SET status = 'running', lease_owner = NULL, lease_expires_at = NULL");
    let mut claimed = store
        .claim_due(T0, &taker, 60_000, 100, &HashSet::new())
        .unwrap();
    claimed.sort_by(|a, b| a.lease.run.cmp(&b.lease.run));
    let runs: Vec<&str> = claimed.iter().map(|c| c.lease.run.as_str()).collect();
    assert_eq!(runs, ["long", "quiet", "short"]);
    let mut read_with_claim = Vec::new();
    for claim in &claimed {
        let Some(read) = &claim.read else { continue };
        read_with_claim.push(claim.lease.run.clone());
        let mut journal = Vec::new();
        store
            .read_journal_rows(&claim.lease.run, 0, &mut |row| {
                journal.push(row);
                Flow::Continue
            })
            .unwrap();
        assert_eq!(read.journal, journal, "{}", claim.lease.run);
        let names = ["early", "go", "later"].map(String::from);
        let signals = store
            .pending_signals_with_payloads(&claim.lease.run, &names)
            .unwrap();
        assert_eq!(read.signals, signals, "{}", claim.lease.run);
    }
    if b.shared() {
        // The long run's journal is left to its resume.
        assert_eq!(read_with_claim, ["quiet", "short"]);
        let short = claimed[2].read.as_ref().unwrap();
        assert!(matches!(short.journal[2], JournalRow::Hole { seq: 2, .. }));
        assert_eq!(short.journal.len(), 6);
        let names: Vec<&str> = short.signals.iter().map(|(s, _)| s.name.as_str()).collect();
        assert_eq!(names, ["go", "later"]);
        assert_eq!(short.signals[0].1, Some(big));
    } else {
        assert!(read_with_claim.is_empty());
    }
}

fn the_next_due_time_is_the_earliest_timer(b: &dyn Backend) {
    let store = b.open().unwrap();
    assert_eq!(store.next_due().unwrap(), None);
    park(&*store, "later", Some(T0 + 9_000), &[]);
    park(&*store, "sooner", Some(T0 + 5_000), &[]);
    park(&*store, "signal", None, &["go"]);
    assert_eq!(store.next_due().unwrap(), Some(T0 + 5_000));
}

fn a_look_tells_the_next_due_time_after_its_claim(b: &dyn Backend) {
    let store = b.open().unwrap();
    park(&*store, "past", Some(T0 - 1_000), &[]);
    park(&*store, "future", Some(T0 + 5_000), &[]);
    // A running run whose lease ran out (its old expiry, `T0`, must not count once it is
    // claimed), and one a live holder keeps for ten minutes.
    store.create_run(new_run("expired"), &me(), 0).unwrap();
    store.create_run(new_run("held"), &me(), 600_000).unwrap();
    let taker = other_live_owner();
    let none = HashSet::new();
    // With no room, a look claims nothing and tells what is due: the past timer.
    let look = store.look(T0, &taker, 1_000, 0, &none).unwrap();
    assert!(look.claims.is_empty());
    assert_eq!(look.next_due, Some(T0 - 1_000));
    assert_eq!(look.next_due, store.next_due().unwrap());
    // A look that claims both due runs with a one-second lease: next due when those leases
    // run out, before the future timer, as the store tells it after the claim (a store on
    // one machine counts timers alone).
    let look = store.look(T0, &taker, 1_000, 10, &none).unwrap();
    let mut claimed: Vec<&str> = look.claims.iter().map(|c| c.lease.run.as_str()).collect();
    claimed.sort_unstable();
    assert_eq!(claimed, ["expired", "past"]);
    let next = if b.shared() { T0 + 1_000 } else { T0 + 5_000 };
    assert_eq!(look.next_due, Some(next));
    assert_eq!(look.next_due, store.next_due().unwrap());
    // Nothing more is due: the same time again.
    let again = store.look(T0, &taker, 1_000, 10, &none).unwrap();
    assert!(again.claims.is_empty());
    assert_eq!(again.next_due, Some(next));
    // Once they have ended, the future timer is next.
    b.raw("UPDATE runs SET status = 'succeeded' WHERE id IN ('expired', 'past')");
    let last = store.look(T0, &taker, 1_000, 10, &none).unwrap();
    assert!(last.claims.is_empty());
    assert_eq!(last.next_due, Some(T0 + 5_000));
    assert_eq!(last.next_due, store.next_due().unwrap());
}

fn claims_wake_waiting_runs_and_leave_ended_ones_ended(b: &dyn Backend) {
    let store = b.open().unwrap();
    let lease = store.create_run(new_run("w"), &me(), 60_000).unwrap();
    store
        .update_run(
            &lease,
            RunUpdate {
                status: Some(RunStatus::Waiting),
                due_at: Some(Some(100)),
                ..RunUpdate::default()
            },
        )
        .unwrap();
    wait(store.release(&lease)).unwrap();
    assert!(matches!(
        store.claim_run("w", &me(), 1_000).unwrap(),
        Claim::Claimed(_)
    ));
    assert_eq!(store.run("w").unwrap().unwrap().status, RunStatus::Running);

    let lease = store.create_run(new_run("e"), &me(), 60_000).unwrap();
    store
        .update_run(
            &lease,
            RunUpdate {
                status: Some(RunStatus::Failed),
                ..RunUpdate::default()
            },
        )
        .unwrap();
    wait(store.release(&lease)).unwrap();
    assert!(matches!(
        store.claim_run("e", &me(), 1_000).unwrap(),
        Claim::Claimed(_)
    ));
    assert_eq!(store.run("e").unwrap().unwrap().status, RunStatus::Failed);
}

fn values_are_stored_once_by_digest_large_ones_too(b: &dyn Backend) {
    let store = b.open().unwrap();
    let pad = "p".repeat(64);
    let small = json!({ "b": 1, "a": [true, null], "pad": pad });
    let d1 = store.put_value(&small).unwrap();
    let d2 = store
        .put_value(&json!({ "a": [true, null], "b": 1.0, "pad": pad }))
        .unwrap();
    assert_eq!(d1, d2);
    assert_eq!(d1, reel_flowspec::canonical::digest_value(&small));
    // A value of at most 63 bytes of canonical JSON is its own name: it is read back without
    // the store, and has no row of its own (counted below), on either store.
    let short = store.put_value(&json!({ "b": 1.0, "s": "é" })).unwrap();
    assert_eq!(short, r#"={"b":1,"s":"é"}"#);
    assert_eq!(
        store.get_values(&[&short, &d1, &short]).unwrap(),
        vec![
            Some(json!({ "b": 1, "s": "é" })),
            Some(small.clone()),
            Some(json!({ "b": 1, "s": "é" }))
        ]
    );
    // A name that is not the canonical text of its value (a journal edited by hand) is refused,
    // never read as another value.
    assert_eq!(
        store.get_value("={\"b\":1.0}").unwrap_err(),
        StoreError::CorruptValue {
            digest: "={\"b\":1.0}".into()
        }
    );
    // Readable at once, before any commit.
    assert_eq!(store.get_value(&d1).unwrap(), Some(small.clone()));

    // Over 64 KiB.
    let big = json!({ "text": "x".repeat(100 * 1024) });
    let big_digest = store.put_value(&big).unwrap();
    assert_eq!(store.put_value(&big).unwrap(), big_digest);
    assert_eq!(store.get_value(&big_digest).unwrap(), Some(big.clone()));
    let lease = store.create_run(new_run("r"), &me(), 60_000).unwrap();
    wait(store.sync(&lease)).unwrap();
    assert_eq!(b.raw_count("SELECT COUNT(*) FROM vals"), 2);
    assert!(
        b.raw_count(&format!(
            "SELECT size FROM vals WHERE digest = '{big_digest}'"
        )) > 100 * 1024
    );

    // Another process reads both.
    let other = b.open().unwrap();
    assert_eq!(other.get_value(&d1).unwrap(), Some(small));
    assert_eq!(other.get_value(&big_digest).unwrap(), Some(big));
    assert_eq!(other.get_value(&"0".repeat(64)).unwrap(), None);
    assert_eq!(other.get_value("../../etc/passwd").unwrap(), None);

    // Bytes that no longer match their digest are refused.
    b.raw(&format!(
        "UPDATE vals SET json = '{{\"a\":[true,null],\"b\":2}}' WHERE digest = '{d1}'"
    ));
    assert_eq!(
        other.get_value(&d1).unwrap_err(),
        StoreError::CorruptValue { digest: d1.clone() }
    );
}

fn specs_are_stored_by_digest(b: &dyn Backend) {
    let store = b.open().unwrap();
    let d = "a".repeat(64);
    store.put_spec(&d, "{\"spec\":1}").unwrap();
    store.put_spec(&d, "{\"spec\":1}").unwrap();
    assert_eq!(store.get_spec(&d).unwrap().as_deref(), Some("{\"spec\":1}"));
    assert_eq!(store.get_spec("none").unwrap(), None);
    let mut seen = Vec::new();
    assert!(
        store
            .read_spec(&d, &mut |json| seen.push(json.to_owned()))
            .unwrap()
    );
    assert!(
        !store
            .read_spec("none", &mut |json| seen.push(json.to_owned()))
            .unwrap()
    );
    assert_eq!(seen, ["{\"spec\":1}"]);
    assert_eq!(b.raw_count("SELECT COUNT(*) FROM specs"), 1);
}

fn a_spec_keeps_one_binary_form_of_this_builds_layout(b: &dyn Backend) {
    let store = b.open().unwrap();
    let mut spec = reel_flowspec::FlowSpec {
        format: reel_flowspec::FORMAT.to_string(),
        version: 2,
        name: "f".to_string(),
        doc: None,
        span: Default::default(),
        inputs: Vec::new(),
        secrets: Vec::new(),
        env: Vec::new(),
        tools: Default::default(),
        steps: Vec::new(),
        output: None,
        digest: String::new(),
    };
    spec.seal();
    let d = spec.digest.clone();
    // An awaited write: the writer has committed everything sent before it.
    let committed = || store.put_spec(&d, &spec.to_json()).unwrap();
    let read = || {
        let mut got = None;
        let had = store
            .read_spec_binary(&d, &mut |b| got = reel_flowspec::FlowSpec::from_binary(b))
            .unwrap();
        (had, got)
    };
    committed();
    assert_eq!(read(), (false, None), "a spec has none until it is kept");
    store.keep_spec_binary(&spec).unwrap();
    committed();
    assert_eq!(read(), (true, Some(spec.clone())));
    let this = i64::from(reel_flowspec::BINARY_LAYOUT);
    let of_this_layout = format!("SELECT COUNT(*) FROM spec_binaries WHERE layout = {this}");
    assert_eq!(b.raw_count(&of_this_layout), 1);
    // What every reader of a spec calls gives the same spec.
    let (read_back, _) = store.flowspec(&d).unwrap().unwrap();
    assert_eq!(read_back.unwrap(), spec);
    // Kept again in this layout, it is not written again: damaged bytes stay, the store
    // hands them over for the caller to refuse, and a spec's reader reads the JSON instead.
    b.raw("UPDATE spec_binaries SET bytes = substr(bytes, 1, 1)");
    store.keep_spec_binary(&spec).unwrap();
    committed();
    assert_eq!(read(), (true, None));
    let (read_back, _) = store.flowspec(&d).unwrap().unwrap();
    assert_eq!(read_back.unwrap(), spec);
    // One of another layout reads as none. This store found the form already and does not
    // look again (a look is a round trip on PostgreSQL); another process's store replaces it.
    b.raw("UPDATE spec_binaries SET layout = layout + 1");
    assert_eq!(read(), (false, None));
    store.keep_spec_binary(&spec).unwrap();
    committed();
    assert_eq!(read(), (false, None));
    let other = b.open().unwrap();
    other.keep_spec_binary(&spec).unwrap();
    other.put_spec(&d, &spec.to_json()).unwrap();
    assert_eq!(read(), (true, Some(spec.clone())));
    assert_eq!(b.raw_count("SELECT COUNT(*) FROM spec_binaries"), 1);
    assert_eq!(b.raw_count(&of_this_layout), 1);
    // A store opened read-only has nothing to write while it has the form, and cannot write
    // one it lacks.
    let reader = b.open_read_only().unwrap();
    assert_eq!(reader.keep_spec_binary(&spec), Ok(()));
    b.raw("DELETE FROM spec_binaries");
    let reader = b.open_read_only().unwrap();
    assert_eq!(reader.keep_spec_binary(&spec), Err(StoreError::ReadOnly));
}

fn a_reader_sees_committed_data_and_refuses_writes(b: &dyn Backend) {
    let missing = b.open_read_only().err().expect("no store yet");
    assert_eq!(missing.code(), "store.open");

    let writer = b.open().unwrap();
    let lease = writer.create_run(new_run("r"), &me(), 60_000).unwrap();
    let reader = b.open_read_only().unwrap();
    for n in 0..3 {
        writer.append(&lease, vec![event("e", n)]).unwrap();
        wait(writer.sync(&lease)).unwrap();
        assert_eq!(journal(&*reader, "r").unwrap().len() as u64, n + 1);
    }
    let stored = json!({ "n": 42, "pad": "p".repeat(64) });
    let digest = writer.put_value(&stored).unwrap();
    wait(writer.sync(&lease)).unwrap();
    assert_eq!(reader.get_value(&digest).unwrap(), Some(stored.clone()));

    let ro = StoreError::ReadOnly;
    assert_eq!(reader.put_value(&stored), Err(ro.clone()));
    assert_eq!(reader.put_spec("d", "{}"), Err(ro.clone()));
    assert_eq!(reader.create_run(new_run("x"), &me(), 1).unwrap_err(), ro);
    assert_eq!(reader.claim_run("r", &me(), 1).unwrap_err(), ro);
    assert_eq!(reader.append(&lease, vec![event("e", 9)]), Err(ro.clone()));
    assert_eq!(
        reader.update_run(&lease, RunUpdate::default()),
        Err(ro.clone())
    );
    assert_eq!(reader.send_signal("r", "go", &json!(1)), Err(ro.clone()));
    assert_eq!(reader.request_cancel("r"), Err(ro.clone()));
    assert_eq!(reader.clean(&CleanScope::AllEnded, true), Err(ro.clone()));
    assert_eq!(wait(reader.sync(&lease)), Err(ro.clone()));
    assert_eq!(wait(reader.release(&lease)), Err(ro));
}

fn signals_sent_before_the_wait_are_kept(b: &dyn Backend) {
    let store = b.open().unwrap();
    let lease = store.create_run(new_run("r"), &me(), 60_000).unwrap();
    assert_eq!(
        store
            .send_signal("r", "approve", &json!({ "ok": true }))
            .unwrap(),
        0
    );
    assert_eq!(
        store
            .send_signal("r", "approve", &json!({ "ok": false }))
            .unwrap(),
        1
    );
    assert_eq!(
        store
            .send_signal("missing", "approve", &json!(1))
            .unwrap_err(),
        StoreError::NotFound("missing".to_string())
    );
    assert!(store.run("r").unwrap().unwrap().signal_pending);
    let pending = store.pending_signals("r").unwrap();
    assert_eq!(pending.len(), 2);
    assert_eq!(
        store.get_value(&pending[0].payload_digest).unwrap(),
        Some(json!({ "ok": true }))
    );
    assert_eq!(
        (pending[0].name.as_str(), pending[0].sent_at),
        ("approve", T0)
    );
    // The same with their payloads, in one read on a database; only the names asked for.
    store.send_signal("r", "other", &json!("x")).unwrap();
    let with = store
        .pending_signals_with_payloads("r", &["approve".to_string()])
        .unwrap();
    assert_eq!(
        with,
        vec![
            (pending[0].clone(), Some(json!({ "ok": true }))),
            (pending[1].clone(), Some(json!({ "ok": false }))),
        ]
    );
    let other = store
        .pending_signals_with_payloads("r", &["other".to_string(), "none".to_string()])
        .unwrap();
    assert_eq!(
        other
            .iter()
            .map(|(s, p)| (s.seq, s.name.as_str(), p.clone()))
            .collect::<Vec<_>>(),
        vec![(2, "other", Some(json!("x")))]
    );

    store
        .append(&lease, vec![event("signal_received", 0)])
        .unwrap();
    store.consume_signal(&lease, 0, 0).unwrap();
    let clear = RunUpdate {
        clear_signal_pending: true,
        ..RunUpdate::default()
    };
    store.update_run(&lease, clear.clone()).unwrap();
    wait(store.sync(&lease)).unwrap();
    // One signal is still unconsumed, so the mark stays.
    assert!(store.run("r").unwrap().unwrap().signal_pending);
    assert_eq!(store.pending_signals("r").unwrap()[0].seq, 1);

    store.consume_signal(&lease, 1, 0).unwrap();
    store.consume_signal(&lease, 2, 0).unwrap();
    store.update_run(&lease, clear.clone()).unwrap();
    wait(store.sync(&lease)).unwrap();
    assert!(!store.run("r").unwrap().unwrap().signal_pending);
    assert!(store.pending_signals("r").unwrap().is_empty());
    assert!(
        store
            .pending_signals_with_payloads("r", &["approve".to_string()])
            .unwrap()
            .is_empty()
    );

    store.consume_signal(&lease, 7, 0).unwrap();
    store.update_run(&lease, clear.clone()).unwrap();
    let err = wait(store.sync(&lease)).unwrap_err();
    assert!(err.to_string().contains("has no signal 7"), "{err}");

    // Under a lease taken over since, neither the signal nor the mark changes.
    let lease = store.create_run(new_run("s"), &me(), 60_000).unwrap();
    store.send_signal("s", "go", &json!(1)).unwrap();
    b.raw("UPDATE runs SET lease_token = lease_token + 1 WHERE id = 's'");
    store.consume_signal(&lease, 0, 0).unwrap();
    store.update_run(&lease, clear).unwrap();
    let err = wait(store.sync(&lease)).unwrap_err();
    assert_eq!(err.code(), "store.lease-lost", "{err}");
    assert!(store.run("s").unwrap().unwrap().signal_pending);
    assert_eq!(store.pending_signals("s").unwrap().len(), 1);
}

fn signals_from_many_senders_are_numbered_without_gaps(b: &dyn Backend) {
    let stores: Vec<Box<dyn Store>> = (0..3).map(|_| b.open().unwrap()).collect();
    stores[0].create_run(new_run("r"), &me(), 60_000).unwrap();
    std::thread::scope(|s| {
        for store in &stores {
            s.spawn(move || {
                for n in 0..10 {
                    store.send_signal("r", "poke", &json!(n)).unwrap();
                }
            });
        }
    });
    let seqs: Vec<u64> = stores[1]
        .pending_signals("r")
        .unwrap()
        .iter()
        .map(|s| s.seq)
        .collect();
    assert_eq!(seqs, (0..30).collect::<Vec<_>>());
}

/// Many threads of one process sending through one store, as a service signalling runs does:
/// the store writes the signals that wait together in one transaction (on PostgreSQL, in one
/// round trip), and each is numbered and answered as though sent alone; one to a run that
/// does not exist fails alone.
fn signals_from_many_threads_of_one_store_are_numbered_and_answered_each(b: &dyn Backend) {
    let store = b.open().unwrap();
    let runs = ["a", "b", "c", "d"];
    for run in runs {
        store.create_run(new_run(run), &me(), 60_000).unwrap();
    }
    type Answer = (String, serde_json::Value, Result<u64, String>);
    let answers: Vec<Vec<Answer>> = std::thread::scope(|s| {
        let senders: Vec<_> = (0..8)
            .map(|t| {
                let store = &store;
                s.spawn(move || {
                    (0..10)
                        .map(|n| {
                            // Every fifth signal of every other thread goes to no run.
                            let run = if t % 2 == 1 && n % 5 == 0 {
                                "nobody"
                            } else {
                                runs[(t + n) % runs.len()]
                            };
                            let payload = json!({"t": t, "n": n});
                            let sent = store.send_signal(run, "poke", &payload);
                            (
                                run.to_string(),
                                payload,
                                sent.map_err(|e| e.code().to_string()),
                            )
                        })
                        .collect()
                })
            })
            .collect();
        senders.into_iter().map(|t| t.join().unwrap()).collect()
    });
    // Each run's signals by the number their senders were told.
    let mut told: std::collections::BTreeMap<String, Vec<(u64, serde_json::Value)>> =
        Default::default();
    for (run, payload, answer) in answers.into_iter().flatten() {
        match (run.as_str(), answer) {
            ("nobody", answer) => assert_eq!(answer, Err("store.not-found".to_string())),
            (_, Ok(seq)) => told.entry(run).or_default().push((seq, payload)),
            (_, Err(code)) => panic!("a signal to {run} failed: {code}"),
        }
    }
    for run in runs {
        let mut told = told.remove(run).unwrap_or_default();
        told.sort_by_key(|(seq, _)| *seq);
        let stored: Vec<(u64, serde_json::Value)> = store
            .pending_signals_with_payloads(run, &["poke".to_string()])
            .unwrap()
            .into_iter()
            .map(|(row, payload)| (row.seq, payload.unwrap()))
            .collect();
        assert_eq!(
            stored.iter().map(|s| s.0).collect::<Vec<_>>(),
            (0..told.len() as u64).collect::<Vec<_>>(),
            "{run}: numbered without gaps"
        );
        assert_eq!(
            told, stored,
            "{run}: each sender told its own signal's number"
        );
        assert!(store.run(run).unwrap().unwrap().signal_pending, "{run}");
    }
    assert!(store.pending_signals("nobody").unwrap().is_empty());
}

fn holes_and_gaps_are_reported(b: &dyn Backend) {
    let store = b.open().unwrap();
    let lease = store.create_run(new_run("r"), &me(), 60_000).unwrap();
    store
        .append(&lease, (0..10).map(|n| event("e", n)).collect())
        .unwrap();
    wait(store.sync(&lease)).unwrap();
    b.raw("UPDATE journal SET data = '{broken' WHERE run = 'r' AND seq = 5");
    let mut read = Vec::new();
    let err = store
        .read_journal("r", 0, &mut |row| {
            read.push(row.seq);
            Flow::Continue
        })
        .unwrap_err();
    assert_eq!(read, vec![0, 1, 2, 3, 4]);
    match &err {
        StoreError::Hole {
            run,
            seq: 5,
            message,
        } => {
            assert_eq!(run, "r");
            assert!(message.contains("not JSON"), "{message}");
        }
        other => panic!("expected a hole at 5, got {other:?}"),
    }
    assert_eq!(err.code(), "store.hole");

    b.raw("DELETE FROM journal WHERE run = 'r' AND seq = 7");
    let mut from_six = Vec::new();
    let err = store
        .read_journal("r", 6, &mut |row| {
            from_six.push(row.seq);
            Flow::Continue
        })
        .unwrap_err();
    assert_eq!(from_six, vec![6]);
    assert!(matches!(err, StoreError::Hole { seq: 7, .. }), "{err:?}");

    b.raw("DELETE FROM journal WHERE run = 'r' AND seq = 9");
    let err = store
        .read_journal("r", 8, &mut |_| Flow::Continue)
        .unwrap_err();
    assert!(matches!(err, StoreError::Hole { seq: 9, .. }), "{err:?}");

    // A view goes past every hole: corrupt bytes (5), missing rows (7, and 9 at the end).
    let mut seen = Vec::new();
    store
        .read_journal_rows("r", 0, &mut |row| {
            seen.push(match row {
                JournalRow::Event(e) => format!("{}", e.seq),
                JournalRow::Hole { seq, message } => format!("{seq}: {message}"),
            });
            Flow::Continue
        })
        .unwrap();
    assert_eq!(seen.len(), 10, "{seen:?}");
    assert_eq!(seen[..5], ["0", "1", "2", "3", "4"]);
    assert!(
        seen[5].starts_with("5: ") && seen[5].contains("not JSON"),
        "{seen:?}"
    );
    assert_eq!(
        seen[6..],
        ["6", "7: the row is missing", "8", "9: the row is missing"]
    );
}

fn opening_again_keeps_the_runs_and_a_newer_schema_is_refused(b: &dyn Backend) {
    let store = b.open().unwrap();
    store.create_run(new_run("r"), &me(), 1).unwrap();
    drop(store);
    let store = b.open().unwrap();
    assert!(store.run("r").unwrap().is_some());
    drop(store);
    let version = b.raw_count("SELECT value FROM meta WHERE key = 'schema_version'");
    b.raw("UPDATE meta SET value = value + 1 WHERE key = 'schema_version'");
    for err in [b.open().err(), b.open_read_only().err()] {
        let err = err.expect("a newer schema must be refused");
        assert_eq!(err.code(), "store.open");
        let text = err.to_string();
        assert!(text.contains("newer than this reel knows"), "{text}");
        // Both versions are named.
        assert!(
            text.contains(&format!("version {}", version + 1))
                && text.contains(&format!("({version})")),
            "{text}"
        );
    }
}

/// A value long enough to be stored by digest (a short one is its own name and has no row).
fn shared(n: u64) -> serde_json::Value {
    json!({ "shared": n, "pad": "p".repeat(64) })
}

fn two_stores_on_one_database_do_not_corrupt_each_other(b: &dyn Backend) {
    let one = b.open().unwrap();
    let two = b.open().unwrap();
    let per_run = 150u64;
    std::thread::scope(|s| {
        for (i, store) in [&one, &two].into_iter().enumerate() {
            s.spawn(move || {
                let leases: Vec<Lease> = (0..3)
                    .map(|r| {
                        store
                            .create_run(new_run(&format!("s{i}r{r}")), &me(), 60_000)
                            .unwrap()
                    })
                    .collect();
                for n in 0..per_run {
                    for lease in &leases {
                        store.put_value(&shared(n)).unwrap();
                        store.append(lease, vec![event("e", n)]).unwrap();
                    }
                    if n % 50 == 0 {
                        let other = if i == 0 { "s1r0" } else { "s0r0" };
                        // Signals from "another process" while this one writes.
                        let _ = store.send_signal(other, "poke", &json!(n));
                    }
                }
                for lease in &leases {
                    wait(store.sync(lease)).unwrap();
                }
            });
        }
    });
    for store in [&one, &two] {
        for i in 0..2 {
            for r in 0..3 {
                let rows = journal(&**store, &format!("s{i}r{r}")).unwrap();
                assert_eq!(numbers(&rows), (0..per_run).collect::<Vec<_>>());
            }
        }
    }
    let digest = reel_flowspec::canonical::digest_value(&shared(7));
    assert_eq!(one.get_value(&digest).unwrap(), Some(shared(7)));
}

fn due_runs_are_timers_awaited_signals_and_abandoned_leases(b: &dyn Backend) {
    let store = b.open().unwrap();
    let park = |id: &str, due: Option<i64>, signals: &[&str]| {
        let lease = store.create_run(new_run(id), &me(), 60_000).unwrap();
        store
            .update_run(
                &lease,
                RunUpdate {
                    status: Some(RunStatus::Waiting),
                    due_at: Some(due),
                    waiting_on: Some(signals.iter().map(|s| s.to_string()).collect()),
                    ..RunUpdate::default()
                },
            )
            .unwrap();
        wait(store.release(&lease)).unwrap();
    };
    let now = T0;
    park("timer-past", Some(now - 1_000), &[]);
    park("timer-future", Some(now + 3_600_000), &[]);
    park("signal", None, &["go"]);
    park("idle", None, &[]);
    // A signal kept for a later wait does not wake a run that waits for something else.
    park("kept", None, &["other"]);
    park("canceled", None, &[]);
    // Due by its timer and asked to cancel too: taken up once.
    park("both", Some(now - 500), &[]);
    store.send_signal("signal", "go", &json!(null)).unwrap();
    store.request_cancel("both").unwrap();
    store.send_signal("kept", "go", &json!(null)).unwrap();
    store.request_cancel("canceled").unwrap();
    store.create_run(new_run("held"), &me(), 600_000).unwrap();
    store.create_run(new_run("expired"), &me(), 0).unwrap();
    let dead = Owner {
        pid: u32::MAX - 3,
        ..me()
    };
    store.create_run(new_run("orphan"), &dead, 600_000).unwrap();

    let later = T0 + 1;
    let mut due = store.due_runs(later, 100).unwrap();
    let mut waiting: Vec<_> = due.drain(..4).collect();
    assert_eq!(waiting.remove(0), "timer-past");
    assert_eq!(waiting.remove(0), "both");
    waiting.sort();
    assert_eq!(waiting, vec!["canceled", "signal"]);
    due.sort();
    assert_eq!(due, vec!["expired", "orphan"]);
    assert_eq!(store.due_runs(later, 1).unwrap().len(), 1);
    assert!(store.due_runs(later, 0).unwrap().is_empty());
    // The timer comes due.
    assert!(
        store
            .due_runs(T0 + 3_600_000, 100)
            .unwrap()
            .contains(&"timer-future".to_string())
    );
}

fn cancel_requests_reach_only_runs_that_have_not_ended(b: &dyn Backend) {
    let store = b.open().unwrap();
    let lease = store.create_run(new_run("r"), &me(), 60_000).unwrap();
    assert!(store.request_cancel("r").unwrap());
    assert!(store.run("r").unwrap().unwrap().cancel_requested);
    store
        .update_run(
            &lease,
            RunUpdate {
                status: Some(RunStatus::Canceled),
                ..RunUpdate::default()
            },
        )
        .unwrap();
    wait(store.sync(&lease)).unwrap();
    let run = store.run("r").unwrap().unwrap();
    assert_eq!(
        (run.status, run.cancel_requested),
        (RunStatus::Canceled, false)
    );
    assert!(!store.request_cancel("r").unwrap());
    assert_eq!(
        store.request_cancel("x").unwrap_err(),
        StoreError::NotFound("x".to_string())
    );
}

fn runs_are_found_by_prefix_and_listed_newest_first(b: &dyn Backend) {
    let store = b.open().unwrap();
    for (i, id) in ["01abc", "01abd", "01b", "02", "01B"].iter().enumerate() {
        let mut run = new_run(id);
        run.created_at = i as i64;
        if *id == "02" {
            run.flow = "other".to_string();
        }
        store.create_run(run, &me(), 1).unwrap();
    }
    assert_eq!(store.find_runs("01a").unwrap(), vec!["01abc", "01abd"]);
    assert_eq!(store.find_runs("01abd").unwrap(), vec!["01abd"]);
    assert_eq!(store.find_runs("01b").unwrap(), vec!["01b"]);
    assert!(store.find_runs("9").unwrap().is_empty());
    // Bytewise order, whatever the database's locale.
    assert_eq!(
        store.find_runs("").unwrap(),
        vec!["01B", "01abc", "01abd", "01b", "02"]
    );

    let ids = |filter: RunFilter| -> Vec<String> {
        store
            .list_runs(&filter)
            .unwrap()
            .into_iter()
            .map(|r| r.id)
            .collect()
    };
    assert_eq!(
        ids(RunFilter::default()),
        vec!["01B", "02", "01b", "01abd", "01abc"]
    );
    let latest = RunFilter {
        flow: Some("deploy".to_string()),
        source_abs: Some("/src/deploy.reel".to_string()),
        limit: Some(2),
        ..RunFilter::default()
    };
    assert_eq!(ids(latest), vec!["01B", "01b"]);
    let running = RunFilter {
        status: Some(RunStatus::Running),
        ..RunFilter::default()
    };
    assert_eq!(ids(running).len(), 5);
    let none = RunFilter {
        status: Some(RunStatus::Waiting),
        ..RunFilter::default()
    };
    assert!(ids(none).is_empty());
}

fn durable_runs_commit_and_read_back(b: &dyn Backend) {
    let store = b.open().unwrap();
    let mut run = new_run("d");
    run.durability = Durability::Durable;
    let lease = store.create_run(run, &me(), 60_000).unwrap();
    assert_eq!(lease.durability, Durability::Durable);
    let fast = store.create_run(new_run("f"), &me(), 60_000).unwrap();
    for n in 0..20 {
        store.append(&lease, vec![event("e", n)]).unwrap();
        store.append(&fast, vec![event("e", n)]).unwrap();
        wait(store.sync(&lease)).unwrap();
    }
    wait(store.sync(&fast)).unwrap();
    assert_eq!(journal(&*store, "d").unwrap().len(), 20);
    assert_eq!(journal(&*store, "f").unwrap().len(), 20);
    assert_eq!(
        store.run("d").unwrap().unwrap().durability,
        Durability::Durable
    );
    // A claim hands the run's mode on.
    b.clock().advance(120_000);
    let Claim::Claimed(again) = store.claim_run("d", &me(), 1_000).unwrap() else {
        panic!("an expired lease is taken over");
    };
    assert_eq!(again.durability, Durability::Durable);
}

fn a_long_journal_reads_whole_and_in_order(b: &dyn Backend) {
    let store = b.open().unwrap();
    let lease = store.create_run(new_run("long"), &me(), 60_000).unwrap();
    let total = 5_000u64;
    for chunk in (0..total).collect::<Vec<_>>().chunks(100) {
        let events = chunk
            .iter()
            .map(|&n| NewEvent {
                data: json!({ "n": n, "output": "d".repeat(64) }),
                ..event("step_succeeded", n)
            })
            .collect();
        store.append(&lease, events).unwrap();
    }
    wait(store.sync(&lease)).unwrap();
    let mut count = 0u64;
    store
        .read_journal("long", 0, &mut |row| {
            assert_eq!(row.seq, count);
            count += 1;
            Flow::Continue
        })
        .unwrap();
    assert_eq!(count, total);
    let mut from = Vec::new();
    store
        .read_journal("long", 4_990, &mut |row| {
            from.push(row.seq);
            Flow::Continue
        })
        .unwrap();
    assert_eq!(from, (4_990..5_000).collect::<Vec<_>>());
    assert_eq!(store.succeeded_steps("long").unwrap().len(), total as usize);
}

fn succeeded_steps_names_each_succeeded_step_once(b: &dyn Backend) {
    let store = b.open().unwrap();
    let lease = store.create_run(new_run("r"), &me(), 60_000).unwrap();
    let succeeded = |n: u64| NewEvent {
        step: Some(format!("step{}", n % 2)),
        ..event("step_succeeded", n)
    };
    store
        .append(
            &lease,
            vec![
                succeeded(0),
                event("step_started", 1),
                succeeded(2),
                succeeded(3),
            ],
        )
        .unwrap();
    wait(store.sync(&lease)).unwrap();
    let steps = store.succeeded_steps("r").unwrap();
    assert_eq!(
        steps,
        HashSet::from(["step0".to_string(), "step1".to_string()])
    );
}

fn unknown_outcome_rows_are_every_runs_by_run_and_position(b: &dyn Backend) {
    let store = b.open().unwrap();
    let unknown = |n: u64| event(UNKNOWN_OUTCOME, n);
    let runs = [
        ("b", vec![event("step_started", 0), unknown(1), unknown(2)]),
        ("a", vec![event("step_started", 0), unknown(1)]),
        (
            "c",
            vec![event("step_started", 0), event("call_succeeded", 1)],
        ),
    ];
    for (id, events) in runs {
        let lease = store.create_run(new_run(id), &me(), 60_000).unwrap();
        store.append(&lease, events).unwrap();
        end_succeeded(&*store, &lease, 9_000);
    }
    let found = |store: &dyn Store| -> Vec<(String, u64, u64)> {
        store
            .unknown_outcome_rows()
            .unwrap()
            .into_iter()
            .map(|r| {
                assert_eq!(r.kind, UNKNOWN_OUTCOME);
                (r.run, r.seq, r.data["n"].as_u64().unwrap())
            })
            .collect()
    };
    let expected = vec![
        ("a".to_string(), 1, 1),
        ("b".to_string(), 1, 1),
        ("b".to_string(), 2, 2),
    ];
    assert_eq!(found(&*store), expected);
    assert_eq!(found(&*b.open_read_only().unwrap()), expected);
    // A row whose data does not read is a hole, left to a read of its journal.
    b.raw("UPDATE journal SET data = '{broken' WHERE run = 'b' AND seq = 1");
    assert_eq!(
        found(&*store),
        vec![("a".to_string(), 1, 1), ("b".to_string(), 2, 2)]
    );
}

fn a_clean_removes_ended_runs_and_what_only_they_reference(b: &dyn Backend) {
    let store = b.open().unwrap();
    let shared = store
        .put_value(&json!({ "shared": "s".repeat(64) }))
        .unwrap();
    let own = store
        .put_value(&json!({ "own": "x".repeat(70 * 1024) }))
        .unwrap();
    let end = |id: &str, values: Vec<&str>, status: RunStatus| {
        let lease = store.create_run(new_run(id), &me(), 60_000).unwrap();
        store
            .append(
                &lease,
                vec![NewEvent {
                    data: json!({ "values": values }),
                    ..event("step_succeeded", 0)
                }],
            )
            .unwrap();
        store
            .update_run(
                &lease,
                RunUpdate {
                    status: Some(status),
                    ended_at: Some(2_000),
                    ..RunUpdate::default()
                },
            )
            .unwrap();
        wait(store.release(&lease)).unwrap();
    };
    end("done", vec![&shared, &own], RunStatus::Succeeded);
    end("open", vec![&shared], RunStatus::Waiting);
    let dry = store.clean(&CleanScope::AllEnded, true).unwrap();
    assert_eq!(
        (dry.runs.clone(), dry.events, dry.values),
        (vec!["done".to_string()], 1, 1)
    );
    assert!(store.run("done").unwrap().is_some());
    assert_eq!(
        store
            .clean(&CleanScope::Run("open".to_string()), false)
            .unwrap_err()
            .code(),
        "store.not-ended"
    );
    let cleaned = store.clean(&CleanScope::AllEnded, false).unwrap();
    assert_eq!(cleaned.runs, vec!["done".to_string()]);
    assert_eq!(cleaned.values, 1);
    assert!(cleaned.bytes > 70 * 1024);
    assert_eq!(store.run("done").unwrap(), None);
    assert_eq!(store.get_value(&own).unwrap(), None);
    assert_eq!(
        store.get_value(&shared).unwrap(),
        Some(json!({ "shared": "s".repeat(64) }))
    );
    assert!(store.run("open").unwrap().is_some());
    // A value removed is written again when a run needs it.
    assert_eq!(
        store
            .put_value(&json!({ "own": "x".repeat(70 * 1024) }))
            .unwrap(),
        own
    );
    let lease = store.create_run(new_run("again"), &me(), 60_000).unwrap();
    wait(store.sync(&lease)).unwrap();
    assert!(store.get_value(&own).unwrap().is_some());
}

/// A clean reads each ended run that stays once and keeps what it references for the cleans
/// after it, which read only what changed since: a run redriven and ended again, a run
/// signalled. Without reading those again a clean would remove what they came to reference.
fn a_clean_reads_an_ended_run_once_unless_it_changes(b: &dyn Backend) {
    let store = b.open().unwrap();
    let value = |name: &str| {
        store
            .put_value(&json!({ "v": name, "pad": "p".repeat(64) }))
            .unwrap()
    };
    let end = |lease: &Lease, status: RunStatus| {
        store
            .update_run(
                lease,
                RunUpdate {
                    status: Some(status),
                    ended_at: Some(2_000),
                    ..RunUpdate::default()
                },
            )
            .unwrap();
        wait(store.release(lease)).unwrap();
    };
    let names = |lease: &Lease, seq: u64, values: &[&String]| {
        store
            .append(
                lease,
                vec![NewEvent {
                    data: json!({ "values": values }),
                    ..event("step_succeeded", seq)
                }],
            )
            .unwrap();
    };
    let ended = |id: &str, values: &[&String], status: RunStatus| {
        let lease = store.create_run(new_run(id), &me(), 60_000).unwrap();
        names(&lease, 0, values);
        end(&lease, status);
    };
    let (shared, own, later) = (value("shared"), value("own"), value("later"));
    // Every run is made from one FlowSpec, which goes with the last of them.
    let spec = new_run("any").flow_digest;
    store.put_spec(&spec, r#"{"flow":"shared"}"#).unwrap();
    ended("a", &[&shared, &own], RunStatus::Succeeded);
    ended("b", &[&shared], RunStatus::Failed);
    for i in 0..20 {
        ended(&format!("c{i:02}"), &[], RunStatus::Succeeded);
    }
    // The first clean reads every run that stays, and keeps what they reference.
    let first = store.clean(&CleanScope::Run("a".into()), false).unwrap();
    assert_eq!(
        (first.values, first.specs, first.runs_read),
        (1, 0, 21),
        "{first:?}"
    );
    assert_eq!(store.get_value(&own).unwrap(), None);
    assert!(store.get_value(&shared).unwrap().is_some());
    // The next reads none of them: `b` still keeps `shared`.
    ended("d", &[&shared], RunStatus::Succeeded);
    let next = store.clean(&CleanScope::Run("d".into()), false).unwrap();
    assert_eq!((next.values, next.runs_read), (0, 0), "{next:?}");
    assert!(store.get_value(&shared).unwrap().is_some());
    // `b` is redriven, comes to reference `later`, and ends again: read again, it keeps it.
    let Claim::Claimed(lease) = store.claim_run("b", &me(), 60_000).unwrap() else {
        panic!("an ended run is claimed to be redriven")
    };
    store
        .update_run(
            &lease,
            RunUpdate {
                status: Some(RunStatus::Running),
                ..RunUpdate::default()
            },
        )
        .unwrap();
    names(&lease, 1, &[&later]);
    end(&lease, RunStatus::Succeeded);
    ended("e", &[&later], RunStatus::Succeeded);
    let redriven = store.clean(&CleanScope::Run("e".into()), false).unwrap();
    assert_eq!(
        (redriven.values, redriven.runs_read),
        (0, 1),
        "{redriven:?}"
    );
    assert!(store.get_value(&later).unwrap().is_some());
    // A signal to an ended run is one more value it references: read again, it keeps it.
    let payload = json!({ "late": "q".repeat(64) });
    store.send_signal("c00", "late", &payload).unwrap();
    let signalled = value("signalled");
    let digest = store.put_value(&payload).unwrap();
    ended("f", &[&digest, &signalled], RunStatus::Succeeded);
    let after_signal = store.clean(&CleanScope::Run("f".into()), false).unwrap();
    assert_eq!(
        (after_signal.values, after_signal.runs_read),
        (1, 1),
        "{after_signal:?}"
    );
    assert_eq!(store.get_value(&digest).unwrap(), Some(payload));
    assert_eq!(store.get_value(&signalled).unwrap(), None);
    // What a removed run referenced goes from what the cleans keep.
    let all = store.clean(&CleanScope::AllEnded, false).unwrap();
    assert_eq!(
        (all.runs.len(), all.specs, all.runs_read),
        (21, 1, 0),
        "{all:?}"
    );
    assert_eq!(b.raw_count("SELECT count(*) FROM refs"), 0);
    assert_eq!(store.get_value(&shared).unwrap(), None);
    assert_eq!(store.get_spec(&spec).unwrap(), None);
}

/// A `reel clean` in another process commits between a writer's storing of values (and a
/// FlowSpec) that only an ended run named and the rows that name them: the rows carry what
/// they name, so none of it is missing once they commit.
fn a_clean_between_storing_and_naming_leaves_nothing_named_missing(b: &dyn Backend) {
    let writer = b.open().unwrap();
    let cleaner = b.open().unwrap();
    let kept = |value: serde_json::Value| {
        let text = canonical_json(&value);
        writer
            .put_canonical(&sha256_hex(text.as_bytes()), text)
            .unwrap()
    };
    let spec = "e".repeat(64);
    let spec_json = r#"{"flow":"old"}"#;
    let small = kept(json!("named by an old run only"));
    let large = kept(json!({ "big": "y".repeat(70 * 1024) }));
    writer.put_spec(&spec, spec_json).unwrap();
    let named = json!({ "values": [small.digest(), large.digest()] });
    let old = writer
        .create_run(
            NewRun {
                flow_digest: spec.clone(),
                ..new_run("old")
            },
            &me(),
            60_000,
        )
        .unwrap();
    writer
        .append(
            &old,
            vec![NewEvent {
                data: named.clone(),
                ..event("step_succeeded", 0)
            }],
        )
        .unwrap();
    end_succeeded(&*writer, &old, 2_000);
    // A live run stores the same values and spec again: already there, nothing is written.
    let live = writer.create_run(new_run("live"), &me(), 60_000).unwrap();
    let again = vec![
        kept(json!("named by an old run only")),
        kept(json!({ "big": "y".repeat(70 * 1024) })),
    ];
    let spec_again = writer.put_spec(&spec, spec_json).unwrap();
    wait(writer.sync(&live)).unwrap();
    // The clean commits now, and removes them: only the ended run named them.
    let cleaned = cleaner.clean(&CleanScope::AllEnded, false).unwrap();
    assert_eq!((cleaned.values, cleaned.specs), (2, 1), "{cleaned:?}");
    let reader = b.open_read_only().unwrap();
    assert_eq!(reader.get_value(small.digest()).unwrap(), None);
    assert_eq!(reader.get_spec(&spec).unwrap(), None);
    // Then the rows that name them, carrying them, and a run made from the spec.
    writer
        .append_kept(
            &live,
            vec![NewEvent {
                data: named,
                ..event("step_succeeded", 0)
            }],
            again,
        )
        .unwrap();
    let forked = writer
        .create_run(
            NewRun {
                flow_digest: spec.clone(),
                kept: vec![spec_again],
                ..new_run("forked")
            },
            &me(),
            60_000,
        )
        .unwrap();
    wait(writer.sync(&live)).unwrap();
    wait(writer.sync(&forked)).unwrap();
    let reader = b.open_read_only().unwrap();
    assert_eq!(
        reader.get_value(small.digest()).unwrap(),
        Some(json!("named by an old run only"))
    );
    assert_eq!(
        reader.get_value(large.digest()).unwrap(),
        Some(json!({ "big": "y".repeat(70 * 1024) }))
    );
    assert_eq!(reader.get_spec(&spec).unwrap().as_deref(), Some(spec_json));
}

/// The same race run for real: one thread runs short runs that each store a value only ended
/// runs named and then name it, while another cleans every ended run as fast as it can. Each
/// run must find its value there once its rows committed. Runs go on past the first 300 until
/// a clean has removed the value between two of them (on a loaded machine the cleaning thread
/// may not get a core for a while), so the race was there to lose.
fn cleans_racing_runs_never_remove_what_a_run_names(b: &dyn Backend) {
    let writer: Arc<dyn Store> = b.open().unwrap().into();
    let cleaner = b.open().unwrap();
    let reader = b.open_read_only().unwrap();
    let value = json!({ "shared": "by every run, one after the other" });
    let text = canonical_json(&value);
    let digest = sha256_hex(text.as_bytes());
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let removed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let cleans = std::thread::spawn({
        let (done, removed) = (done.clone(), removed.clone());
        move || {
            while !done.load(Ordering::SeqCst) {
                let values = cleaner.clean(&CleanScope::AllEnded, false).unwrap().values;
                removed.fetch_add(values, Ordering::SeqCst);
            }
        }
    });
    for i in 0.. {
        if i >= 300 && removed.load(Ordering::SeqCst) > 0 {
            break;
        }
        assert!(
            i < 20_000,
            "no clean removed the value between 20,000 runs: the race was never run"
        );
        let lease = writer
            .create_run(new_run(&format!("run-{i:03}")), &me(), 60_000)
            .unwrap();
        let kept = writer.put_canonical(&digest, text.clone()).unwrap();
        writer
            .append_kept(
                &lease,
                vec![NewEvent {
                    data: json!({ "output": digest }),
                    ..event("step_succeeded", 0)
                }],
                vec![kept],
            )
            .unwrap();
        wait(writer.sync(&lease)).unwrap();
        assert_eq!(
            reader.get_value(&digest).unwrap().as_ref(),
            Some(&value),
            "run {i} names a value a clean removed"
        );
        end_succeeded(&*writer, &lease, 2_000);
    }
    done.store(true, Ordering::SeqCst);
    cleans.join().unwrap();
}

/// One call event of step `step` (no `foreach` index).
fn call(
    kind: &str,
    at: i64,
    step: &str,
    attempt: Option<u32>,
    data: serde_json::Value,
) -> NewEvent {
    NewEvent {
        at,
        kind: kind.to_string(),
        step: Some(step.to_string()),
        index: None,
        attempt,
        data,
    }
}

/// Records a run of `steps` whose calls went as `events` say, ended with `status` and `error`.
fn recorded_run(
    store: &dyn Store,
    id: &str,
    events: Vec<NewEvent>,
    status: RunStatus,
    error: Option<serde_json::Value>,
) {
    let mut run = new_run(id);
    run.first_events = vec![NewEvent {
        at: 1_000,
        kind: "run_started".to_string(),
        step: None,
        index: None,
        attempt: None,
        data: json!({}),
    }];
    let lease = store.create_run(run, &me(), 60_000).unwrap();
    store.append(&lease, events).unwrap();
    store
        .update_run(
            &lease,
            RunUpdate {
                status: Some(status),
                ended_at: Some(9_000),
                error,
                ..RunUpdate::default()
            },
        )
        .unwrap();
    wait(store.sync(&lease)).unwrap();
    wait(store.release(&lease)).unwrap();
}

fn the_sql_views_answer_alike_and_refuse_writes(b: &dyn Backend) {
    let store = b.open().unwrap();
    // The FlowSpec the runs started with (`new_run`'s digest): where each step's line and tool
    // come from.
    let spec = json!({ "name": "deploy", "steps": [
        { "id": "charge", "tool": "pay", "span": { "line": 7 } },
        { "id": "ship", "tool": "post", "span": { "line": 12 } },
    ] });
    store.put_spec(&"f".repeat(64), &spec.to_string()).unwrap();
    let failure = |step: &str| json!({ "code": "tool.failed", "message": "no", "step": step });
    recorded_run(
        &*store,
        "r1",
        vec![
            call(
                "step_started",
                2_000,
                "charge",
                Some(1),
                json!({ "key": "k1" }),
            ),
            call(
                "call_failed",
                2_100,
                "charge",
                Some(1),
                json!({ "error": failure("charge") }),
            ),
            call(
                "step_started",
                3_000,
                "charge",
                Some(2),
                json!({ "key": "k1" }),
            ),
            call(
                "call_failed",
                3_200,
                "charge",
                Some(2),
                json!({ "error": failure("charge") }),
            ),
            call(
                "step_failed",
                3_300,
                "charge",
                None,
                json!({ "error": failure("charge") }),
            ),
        ],
        RunStatus::Failed,
        Some(failure("charge")),
    );
    recorded_run(
        &*store,
        "r2",
        vec![
            call(
                "step_started",
                2_000,
                "charge",
                Some(1),
                json!({ "key": "k2" }),
            ),
            call(
                "effect_recorded",
                2_500,
                "charge",
                Some(1),
                json!({ "key": "k2" }),
            ),
            call(
                "step_succeeded",
                2_600,
                "charge",
                None,
                json!({ "attempts": 1 }),
            ),
            call(
                "step_started",
                2_700,
                "ship",
                Some(1),
                json!({ "key": "k3" }),
            ),
            call(
                "call_failed",
                2_800,
                "ship",
                Some(1),
                json!({ "error": failure("ship") }),
            ),
            call(
                "step_failed",
                2_900,
                "ship",
                None,
                json!({ "error": failure("ship") }),
            ),
        ],
        RunStatus::Failed,
        Some(failure("ship")),
    );
    let answer = |sql: &str| {
        let a = store.query(sql, QueryLimits::NONE).unwrap();
        json!({ "columns": a.columns, "rows": a.rows })
    };

    // Which runs failed at step `charge`: from the runs' errors and from their steps.
    assert_eq!(
        answer("SELECT id, status, error_code, error_step FROM reel_runs ORDER BY id"),
        json!({ "columns": ["id", "status", "error_code", "error_step"], "rows": [
            ["r1", "failed", "tool.failed", "charge"],
            ["r2", "failed", "tool.failed", "ship"],
        ] })
    );
    assert_eq!(
        answer(
            "SELECT run, step, status, attempts, first_at, last_at, error_code, line
             FROM reel_steps ORDER BY run, step"
        ),
        json!({
            "columns": ["run", "step", "status", "attempts", "first_at", "last_at",
                        "error_code", "line"],
            "rows": [
                ["r1", "charge", "failed", 2, 2_000, 3_300, "tool.failed", 7],
                ["r2", "charge", "succeeded", 1, 2_000, 2_600, null, 7],
                ["r2", "ship", "failed", 1, 2_700, 2_900, "tool.failed", 12],
            ]
        })
    );
    assert_eq!(
        answer("SELECT * FROM reel_calls ORDER BY run, step, attempt"),
        json!({
            "columns": ["run", "step", "idx", "attempt", "tool", "started_at", "ended_at",
                        "outcome", "error_code", "idempotency_key"],
            "rows": [
                ["r1", "charge", null, 1, "pay", 2_000, 2_100, "failed", "tool.failed", "k1"],
                ["r1", "charge", null, 2, "pay", 3_000, 3_200, "failed", "tool.failed", "k1"],
                ["r2", "charge", null, 1, "pay", 2_000, 2_500, "succeeded", null, "k2"],
                ["r2", "ship", null, 1, "post", 2_700, 2_800, "failed", "tool.failed", "k3"],
            ]
        })
    );
    assert_eq!(
        answer(
            "SELECT run, seq, at, kind, step, idx, attempt FROM reel_events
             WHERE run = 'r2' AND seq < 2 ORDER BY seq"
        ),
        json!({
            "columns": ["run", "seq", "at", "kind", "step", "idx", "attempt"],
            "rows": [
                ["r2", 0, 1_000, "run_started", null, null, null],
                ["r2", 1, 2_000, "step_started", "charge", null, 1],
            ]
        })
    );
    assert_eq!(
        answer("SELECT COUNT(*) AS n FROM reel_events"),
        json!({ "columns": ["n"], "rows": [[13]] })
    );
    // The events' data is the event's JSON, as text on both stores.
    let data = answer("SELECT data FROM reel_events WHERE run = 'r1' AND seq = 1");
    let text = data["rows"][0][0].as_str().unwrap();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(text).unwrap(),
        json!({ "key": "k1" })
    );

    // Writes are refused, whatever their form, and change nothing.
    for write in [
        "DELETE FROM runs",
        "UPDATE runs SET status = 'succeeded'",
        "INSERT INTO specs (digest, json) VALUES ('x', '{}')",
        "CREATE TABLE mine (x INTEGER)",
        "DROP VIEW reel_runs",
    ] {
        let err = store.query(write, QueryLimits::NONE).unwrap_err();
        assert_eq!(err.code(), "store.query-writes", "{write}: {err}");
        assert!(err.to_string().contains("read-only queries only"), "{err}");
    }
    // More than one statement is refused before any of them runs.
    let err = store
        .query("SELECT 1; DELETE FROM runs", QueryLimits::NONE)
        .unwrap_err();
    assert_eq!(err.code(), "store.query");
    assert!(err.to_string().contains("one statement"), "{err}");
    assert_eq!(b.raw_count("SELECT COUNT(*) FROM runs"), 2);
    // A statement the database cannot read gets its own message.
    let err = store
        .query("SELEC id FROM reel_runs", QueryLimits::NONE)
        .unwrap_err();
    assert_eq!(err.code(), "store.query");
    assert!(err.to_string().contains("SELEC"), "{err}");
    let err = store
        .query("SELECT nope FROM reel_runs", QueryLimits::NONE)
        .unwrap_err();
    assert_eq!(err.code(), "store.query");
    assert!(err.to_string().contains("nope"), "{err}");
    // A store opened read-only answers the same.
    drop(store);
    let reader = b.open_read_only().unwrap();
    assert_eq!(
        reader
            .query(
                "SELECT run FROM reel_steps WHERE step = 'charge' AND status = 'failed'",
                QueryLimits::NONE
            )
            .unwrap()
            .rows,
        vec![vec![json!("r1")]]
    );
}

/// A query that counts without end, and one that answers without end: what a typo in a
/// recursive query gives.
const ENDLESS_COUNT: &str = "WITH RECURSIVE endless_count(x) AS \
     (SELECT 1 UNION ALL SELECT x + 1 FROM endless_count) SELECT count(*) FROM endless_count";
const ENDLESS_ROWS: &str = "WITH RECURSIVE endless_rows(x) AS \
     (SELECT 1 UNION ALL SELECT x + 1 FROM endless_rows) SELECT x FROM endless_rows";

fn a_query_is_stopped_at_its_time_and_row_limits(b: &dyn Backend) {
    let store = b.open().unwrap();
    recorded_run(&*store, "r1", Vec::new(), RunStatus::Succeeded, None);
    let timeout = |ms| QueryLimits {
        timeout: Some(std::time::Duration::from_millis(ms)),
        max_rows: None,
    };
    let rows = |max| QueryLimits {
        timeout: None,
        max_rows: Some(max),
    };

    // Past its time: stopped, told so with the limit, and on a server, not left running.
    let err = store.query(ENDLESS_COUNT, timeout(300)).unwrap_err();
    assert_eq!(err.code(), "store.query-timeout", "{err}");
    assert!(err.to_string().contains("after 300ms"), "{err}");
    assert!(err.to_string().contains("--timeout"), "{err}");
    if b.shared() {
        assert_eq!(
            b.raw_count(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND state = 'active'
                   AND pid <> pg_backend_pid()"
            ),
            0
        );
    }
    // A query canceled by somebody else before its time (an administrator's
    // `pg_cancel_backend`) is not told it ran out of time: the server's words say what
    // happened.
    if b.shared() {
        let query = std::thread::scope(|scope| {
            let asked = scope.spawn(|| store.query("SELECT pg_sleep(30)", timeout(60_000)));
            let canceled = (0..500).any(|_| {
                std::thread::sleep(std::time::Duration::from_millis(10));
                b.raw_count(
                    "SELECT count(pg_cancel_backend(pid)) FROM pg_stat_activity
                     WHERE datname = current_database() AND state = 'active'
                       AND wait_event = 'PgSleep' AND pid <> pg_backend_pid()",
                ) == 1
            });
            assert!(canceled, "the query was never seen running");
            asked.join().unwrap()
        });
        let err = query.unwrap_err();
        assert_eq!(err.code(), "store.query", "{err}");
        assert!(err.to_string().contains("user request"), "{err}");
        assert!(!err.to_string().contains("time limit"), "{err}");
    }
    // Without a row limit an endless answer would fill memory; with one it stops there, with
    // no time limit to help, however the answer is read (a cursor's second fetch included).
    let err = store.query(ENDLESS_ROWS, rows(1_500)).unwrap_err();
    assert_eq!(err.code(), "store.query-rows", "{err}");
    assert!(err.to_string().contains("more than 1500 rows"), "{err}");
    assert!(err.to_string().contains("--max-rows"), "{err}");
    // As many rows as the limit is an answer, and a query within its time is one.
    let limited = format!("{ENDLESS_ROWS} LIMIT 1500");
    let answer = store.query(&limited, rows(1_500)).unwrap();
    assert_eq!(answer.rows.len(), 1_500);
    assert_eq!(answer.rows[1_499], vec![json!(1_500)]);
    // A limit longer than a server keeps (24.8 days on PostgreSQL) is as good as none.
    for ms in [10_000, 90 * 86_400_000] {
        let answer = store
            .query("SELECT id, status FROM reel_runs", timeout(ms))
            .unwrap();
        assert_eq!(answer.rows, vec![vec![json!("r1"), json!("succeeded")]]);
    }
    // A statement no cursor can hold is answered under the same limits.
    let plan = store
        .query(
            "EXPLAIN SELECT * FROM reel_runs",
            QueryLimits {
                timeout: Some(std::time::Duration::from_secs(10)),
                max_rows: Some(1_000),
            },
        )
        .unwrap();
    assert!(!plan.rows.is_empty());
    let err = store
        .query("EXPLAIN SELECT * FROM reel_runs", rows(0))
        .unwrap_err();
    assert_eq!(err.code(), "store.query-rows", "{err}");
    // A stopped query leaves the store answering, and writes nothing.
    assert_eq!(
        store
            .query("SELECT count(*) AS n FROM reel_runs", QueryLimits::NONE)
            .unwrap()
            .rows,
        vec![vec![json!(1)]]
    );
}

fn a_store_of_the_schema_before_the_views_gets_them_when_opened(b: &dyn Backend) {
    let store = b.open().unwrap();
    recorded_run(&*store, "r1", Vec::new(), RunStatus::Succeeded, None);
    drop(store);
    // Back to schema version 1, which had no views.
    for view in ["reel_runs", "reel_steps", "reel_calls", "reel_events"] {
        b.raw(&format!("DROP VIEW {view}"));
    }
    b.raw("UPDATE meta SET value = 1 WHERE key = 'schema_version'");
    let err = b
        .open_read_only()
        .err()
        .expect("an older schema is not read");
    // `reel sql` knows this case by these words, and opens such a store to write.
    assert!(
        err.to_string()
            .contains("schema version 1, older than this reel's"),
        "{err}"
    );
    let store = b.open().unwrap();
    assert_eq!(
        store
            .query("SELECT id, status FROM reel_runs", QueryLimits::NONE)
            .unwrap()
            .rows,
        vec![vec![json!("r1"), json!("succeeded")]]
    );
}

macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        /// The suite on the embedded SQLite store.
        mod sqlite {
            $(
                #[test]
                fn $name() {
                    super::$name(&super::Sqlite::new());
                }
            )*
        }

        /// The suite on PostgreSQL (the server `scripts/postgres-for-tests.sh` starts).
        mod postgres {
            $(
                #[test]
                fn $name() {
                    super::$name(&super::Postgres::new());
                }
            )*
        }
    };
}

conformance!(
    a_run_round_trips,
    rows_land_in_order_without_gaps_across_threads_and_runs,
    a_journal_read_while_it_grows_is_always_a_prefix,
    a_taken_over_lease_fences_its_old_holder,
    a_release_commits_what_came_before_it_and_reports_a_refused_write,
    logs_are_kept_in_order_and_only_from_the_holder,
    a_live_holder_keeps_its_run_and_a_dead_one_loses_it_at_once,
    racing_claims_give_a_run_to_one_claimer,
    racing_due_claims_give_each_run_to_one_claimer,
    due_claims_pass_over_skipped_held_and_future_runs,
    what_a_claim_reads_with_a_run_is_what_its_resume_would_read,
    the_next_due_time_is_the_earliest_timer,
    a_look_tells_the_next_due_time_after_its_claim,
    claims_wake_waiting_runs_and_leave_ended_ones_ended,
    values_are_stored_once_by_digest_large_ones_too,
    a_spec_keeps_one_binary_form_of_this_builds_layout,
    specs_are_stored_by_digest,
    a_reader_sees_committed_data_and_refuses_writes,
    signals_sent_before_the_wait_are_kept,
    signals_from_many_senders_are_numbered_without_gaps,
    signals_from_many_threads_of_one_store_are_numbered_and_answered_each,
    holes_and_gaps_are_reported,
    opening_again_keeps_the_runs_and_a_newer_schema_is_refused,
    two_stores_on_one_database_do_not_corrupt_each_other,
    due_runs_are_timers_awaited_signals_and_abandoned_leases,
    cancel_requests_reach_only_runs_that_have_not_ended,
    runs_are_found_by_prefix_and_listed_newest_first,
    durable_runs_commit_and_read_back,
    a_long_journal_reads_whole_and_in_order,
    succeeded_steps_names_each_succeeded_step_once,
    unknown_outcome_rows_are_every_runs_by_run_and_position,
    a_clean_removes_ended_runs_and_what_only_they_reference,
    a_clean_reads_an_ended_run_once_unless_it_changes,
    a_clean_between_storing_and_naming_leaves_nothing_named_missing,
    cleans_racing_runs_never_remove_what_a_run_names,
    the_sql_views_answer_alike_and_refuse_writes,
    a_query_is_stopped_at_its_time_and_row_limits,
    a_store_of_the_schema_before_the_views_gets_them_when_opened,
);

/// What only PostgreSQL's schema has: room left on the runs' pages, so that the appends'
/// updates of a run's journal length stay on the page and add no index entry.
mod postgres_schema {
    use super::*;

    /// Whether the runs' table keeps 30 % of each page free.
    fn leaves_room(db: &Postgres) -> bool {
        db.raw_count(
            "SELECT count(*) FROM pg_class
             WHERE oid = 'runs'::regclass AND reloptions @> ARRAY['fillfactor=70']",
        ) == 1
    }

    #[test]
    fn the_runs_pages_leave_room_for_updates_in_place_also_after_a_migration() {
        let db = Postgres::new();
        drop(db.open().unwrap());
        assert!(leaves_room(&db));
        // A store of schema version 4, before the room was left, gets it when opened.
        db.raw("ALTER TABLE runs RESET (fillfactor)");
        db.raw("UPDATE meta SET value = 4 WHERE key = 'schema_version'");
        assert!(!leaves_room(&db));
        drop(db.open().unwrap());
        assert!(leaves_room(&db));
        assert_eq!(
            db.raw_count("SELECT value FROM meta WHERE key = 'schema_version'"),
            10
        );
    }
}

/// What only a store on a server meets: its connections ended under it.
mod postgres_connections {
    use super::*;

    /// A `durable` run `id` held by this process for a minute, its event `e` 0 committed.
    fn durable_run_with_an_event(store: &dyn Store, id: &str) -> Lease {
        let mut run = new_run(id);
        run.durability = Durability::Durable;
        let lease = store.create_run(run, &me(), 60_000).unwrap();
        store.append(&lease, vec![event("e", 0)]).unwrap();
        wait(store.sync(&lease)).unwrap();
        lease
    }

    /// Ends every connection to the test's database but the one that asks.
    fn end_connections(db: &Postgres) {
        db.raw(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
        );
    }

    /// As many reads at once as the store has readers, each long enough that none of them
    /// finishes before the last is taken.
    fn slow_reads_at_once(store: &dyn Store) -> Result<(), StoreError> {
        std::thread::scope(|scope| {
            let reads: Vec<_> = (0..6)
                .map(|_| {
                    scope.spawn(|| {
                        store
                            .query("SELECT pg_sleep(0.3)", QueryLimits::NONE)
                            .map(drop)
                    })
                })
                .collect();
            reads.into_iter().try_for_each(|r| r.join().unwrap())
        })
    }

    #[test]
    fn the_writer_and_the_readers_connect_again_after_the_server_ended_their_connections() {
        let db = Postgres::new();
        let store = db.open().unwrap();
        let lease = durable_run_with_an_event(&*store, "d");
        end_connections(&db);
        // The next batch goes out on the session the server ended (unused for less than the
        // check's second) and fails; the writer reads the run's row on a new connection, finds
        // its journal ending where the batch's rows begin, so nothing of the batch was
        // committed, and writes it again.
        store.append(&lease, vec![event("e", 1)]).unwrap();
        wait(store.sync(&lease)).unwrap();
        store.append(&lease, vec![event("e", 2)]).unwrap();
        wait(store.sync(&lease)).unwrap();
        // A reader whose connection the server ended reads again on a new one: the read
        // succeeds (a claim, which may have committed before its answer was lost, would fail
        // instead). Six slow reads at once take every reader, so each reads on a connection
        // the server ended.
        slow_reads_at_once(&*store).unwrap();
        end_connections(&db);
        slow_reads_at_once(&*store).unwrap();
        assert_eq!(numbers(&journal(&*store, "d").unwrap()), [0, 1, 2]);
        assert_eq!(
            db.raw_count("SELECT count(*) FROM journal WHERE run = 'd'"),
            3
        );
    }

    /// The server's sessions of the test's database but the asker's, by process id.
    fn sessions(db: &Postgres) -> HashSet<i32> {
        db.conn()
            .query(
                "SELECT pid FROM pg_stat_activity
                 WHERE datname = current_database() AND pid <> pg_backend_pid()",
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    }

    /// A durable run's journal of events `e` 0 to 2, the middle one (`lost`) in a batch the
    /// server ends the writer's session around as `fault` says, in the store's own writer
    /// (`reel_store::PgStore::inject_fault`): the run's journal as the store reads it back,
    /// and whether the writer's session was ended.
    fn journal_around_a_session_end(fault: &str) -> (Vec<u64>, bool) {
        let db = Postgres::new();
        let store = PgStore::open(&db.url, db.clock.clone()).unwrap();
        store.inject_fault(fault).unwrap();
        let lease = durable_run_with_an_event(&store, "s");
        let before = sessions(&db);
        store.append(&lease, vec![event("lost", 1)]).unwrap();
        wait(store.sync(&lease)).unwrap();
        let ended = !before.is_subset(&sessions(&db));
        store.append(&lease, vec![event("e", 2)]).unwrap();
        end_succeeded(&store, &lease, 10);
        let rows = db.raw_count("SELECT count(*) FROM journal WHERE run = 's'");
        assert_eq!(rows, 3, "each event once");
        (numbers(&journal(&store, "s").unwrap()), ended)
    }

    #[test]
    fn a_batch_the_server_committed_before_the_session_ended_is_not_written_twice() {
        // The `COMMIT` is made, the session ends before its answer is read (a restart, a
        // failover, an administrator): the run's row shows the batch's rows went in, so its
        // writers are told it succeeded and nothing is written again.
        let (journal, ended) = journal_around_a_session_end("answer-lost@lost*1");
        assert!(ended, "the writer's session was ended");
        assert_eq!(journal, [0, 1, 2]);
    }

    #[test]
    fn a_batch_the_session_ended_before_is_written_again() {
        let (journal, ended) = journal_around_a_session_end("session-ends@lost*1");
        assert!(ended, "the writer's session was ended");
        assert_eq!(journal, [0, 1, 2]);
    }

    #[test]
    fn a_log_line_alone_sent_on_a_session_ended_since_is_written_again() {
        // A log line alone, on a session the server ended since the last batch (less than the
        // check's second ago): its rows could not tell its fate, but its `COMMIT` never went
        // out, so the writer writes it again on a new session, once.
        let db = Postgres::new();
        let store = db.open().unwrap();
        let lease = durable_run_with_an_event(&*store, "l");
        end_connections(&db);
        store.append_log(&lease, log_line("l", "hello")).unwrap();
        wait(store.sync(&lease)).unwrap();
        assert_eq!(store.logs("l").unwrap().len(), 1);
        store.append(&lease, vec![event("e", 1)]).unwrap();
        wait(store.sync(&lease)).unwrap();
        assert_eq!(numbers(&journal(&*store, "l").unwrap()), [0, 1]);
    }

    /// Two signals sent to a parked run, the server ending the writer's session around the
    /// first's batch as `fault` says: their numbers, the run's signals, and whether the
    /// session was ended.
    fn signals_around_a_session_end(fault: &str) -> ([u64; 2], i64, bool) {
        let db = Postgres::new();
        let store = PgStore::open(&db.url, db.clock.clone()).unwrap();
        store.inject_fault(fault).unwrap();
        park(&store, "w", None, &["go"]);
        let before = sessions(&db);
        let first = store.send_signal("w", "go", &json!({"v": 1})).unwrap();
        let ended = !before.is_subset(&sessions(&db));
        let second = store.send_signal("w", "go", &json!({"v": 2})).unwrap();
        let signals = db.raw_count("SELECT count(*) FROM signals WHERE run = 'w'");
        ([first, second], signals, ended)
    }

    #[test]
    fn a_signal_whose_answer_was_lost_is_sent_once_and_answered_with_its_number() {
        // The signal's batch is committed, and the session ends before its answer is read:
        // the writer finds the signal as it sent it (run, name, payload, time) and answers
        // with its number; sending it again would have made it two.
        assert_eq!(
            signals_around_a_session_end("answer-lost@signal*1"),
            ([0, 1], 2, true)
        );
        // The session ends before the batch goes out: it is sent again, once.
        assert_eq!(
            signals_around_a_session_end("session-ends@signal*1"),
            ([0, 1], 2, true)
        );
    }

    #[test]
    fn a_claim_whose_answer_was_lost_is_answered_from_the_run_s_row() {
        // `reel resume`'s claim is committed and the session ends before its answer is read:
        // the run's row names this process as its holder, so the claim is answered with the
        // lease it took (its token and where the journal goes on), and the run is not left
        // held by a process that does not know it holds it.
        let db = Postgres::new();
        let store = PgStore::open(&db.url, db.clock.clone()).unwrap();
        store.inject_fault("answer-lost@claim*1").unwrap();
        park(&store, "c", None, &["go"]);
        let before = sessions(&db);
        let Claim::Claimed(lease) = store.claim_run("c", &other_live_owner(), 60_000).unwrap()
        else {
            panic!("the run is not held");
        };
        assert!(!before.is_subset(&sessions(&db)), "the session was ended");
        let row = |column: &str| db.raw_count(&format!("SELECT {column} FROM runs WHERE id = 'c'"));
        assert_eq!(i64::try_from(lease.token).unwrap(), row("lease_token"));
        assert_eq!(lease.token, 2, "claimed once");
        let next = lease.next_seq.load(Ordering::SeqCst);
        assert_eq!(i64::try_from(next).unwrap(), row("next_seq"));
        store.append(&lease, vec![event("e", next)]).unwrap();
        wait(store.sync(&lease)).unwrap();
        assert_eq!(numbers(&journal(&store, "c").unwrap()).last(), Some(&next));
    }

    #[test]
    fn a_log_line_alone_whose_session_ended_is_kept_once() {
        // No journal row tells whether a batch of a log line alone was committed, and a log
        // line written again would show twice. Its session ending before the `COMMIT` went out
        // rolled it back: it is written again. Ending once the `COMMIT` was made, the server
        // says so, asked by the transaction's id the batch read first: it is not.
        for fault in ["session-ends@commit=3*1", "answer-lost@commit=3*1"] {
            let db = Postgres::new();
            let store = PgStore::open(&db.url, db.clock.clone()).unwrap();
            store.inject_fault(fault).unwrap();
            let lease = durable_run_with_an_event(&store, "p");
            let before = sessions(&db);
            store.append_log(&lease, log_line("p", "hello")).unwrap();
            wait(store.sync(&lease)).unwrap();
            assert!(
                !before.is_subset(&sessions(&db)),
                "{fault}: the writer's session was ended"
            );
            store.append(&lease, vec![event("e", 1)]).unwrap();
            wait(store.sync(&lease)).unwrap();
            assert_eq!(db.raw_count("SELECT count(*) FROM logs"), 1, "{fault}");
            assert_eq!(numbers(&journal(&store, "p").unwrap()), [0, 1], "{fault}");
        }
    }

    #[test]
    fn a_look_whose_answer_was_lost_is_taken_up_by_the_next_look_not_after_its_lease() {
        // A worker's look claims due runs in one statement; when its session ends before the
        // answer is read, the runs are the worker's but it never heard of them. Its next look
        // takes them up again, rather than leaving them until their lease runs out; runs
        // another process holds, and runs the worker drives, stay as they are.
        let db = Postgres::new();
        let store = PgStore::open(&db.url, db.clock.clone()).unwrap();
        store.inject_fault("answer-lost@look*1").unwrap();
        park(&store, "due", Some(T0 - 1_000), &[]);
        store.create_run(new_run("held"), &me(), 600_000).unwrap();
        let worker = other_live_owner();
        let driving: HashSet<String> = ["driven".to_string()].into();
        let lost = store.look(T0, &worker, 60_000, 4, &driving).unwrap_err();
        assert_eq!(lost.code(), "store.unreachable", "{lost}");
        assert_eq!(
            db.raw_count(&format!(
                "SELECT count(*) FROM runs WHERE id = 'due' AND lease_owner = '{}'",
                worker.id
            )),
            1,
            "the lost look claimed the due run"
        );
        store
            .create_run(new_run("driven"), &worker, 600_000)
            .unwrap();
        let look = store.look(T0, &worker, 60_000, 4, &driving).unwrap();
        let claimed: Vec<&str> = look.claims.iter().map(|c| c.lease.run.as_str()).collect();
        assert_eq!(claimed, ["due"]);
        assert_eq!(look.claims[0].was, RunStatus::Running);
        // Taken up once: the look after it is an ordinary one again.
        let again = store.look(T0, &worker, 60_000, 4, &driving).unwrap();
        assert!(again.claims.is_empty());
    }

    /// Sends the test's database away (every session ended, new ones refused, as while a
    /// server restarts) or lets it back.
    fn away(db: &Postgres, away: bool) {
        let (server, name) = db.url.rsplit_once('/').unwrap();
        let name = name.split('?').next().unwrap();
        let mut admin =
            ::postgres::Client::connect(&format!("{server}/postgres"), ::postgres::NoTls).unwrap();
        admin
            .batch_execute(&format!(
                "ALTER DATABASE {name} ALLOW_CONNECTIONS {}",
                !away
            ))
            .unwrap();
        if away {
            admin
                .execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1",
                    &[&name],
                )
                .unwrap();
        }
    }

    // edge: the test times how long a read waits, real time.
    #[allow(clippy::disallowed_methods)]
    #[test]
    fn a_store_opened_read_only_does_not_wait_for_a_server_that_is_away() {
        // The language server reads past runs through such a store: while the server is down
        // its reads fail at once (the editor shows no past runs), where a store opened to
        // write waits for it a while.
        let db = Postgres::new();
        drop(db.open().unwrap());
        let reader = db.open_read_only().unwrap();
        assert!(reader.run("r").unwrap().is_none());
        away(&db, true);
        let began = std::time::Instant::now();
        let err = reader.run("r").unwrap_err();
        let took = began.elapsed();
        away(&db, false);
        assert_eq!(err.code(), "store.unreachable", "{err}");
        assert!(err.is_transient());
        assert!(took < std::time::Duration::from_secs(5), "{took:?}");
        assert!(
            reader.run("r").unwrap().is_none(),
            "read again once it is back"
        );
    }

    // edge: the test times how long an opening waits, real time.
    #[allow(clippy::disallowed_methods)]
    #[test]
    fn an_opening_waits_for_a_server_that_answers_and_not_for_one_that_does_not() {
        // Nothing listens: the person who typed the command learns so within a second.
        let db = Postgres::new();
        let (server, name) = db.url.rsplit_once('/').unwrap();
        let (host, _port) = server.rsplit_once(':').unwrap();
        let nowhere = format!("{host}:1/{name}");
        let began = std::time::Instant::now();
        let err = PgStore::open(&nowhere, db.clock.clone()).unwrap_err();
        let took = began.elapsed();
        assert_eq!(err.code(), "store.unreachable", "{err}");
        assert!(took < std::time::Duration::from_secs(3), "{took:?}");
        // The server answers but refuses the database's sessions for a second and a half (a
        // restart under way, an administrator, sessions ended faster than a loaded machine
        // checks the schema): the opening waits for it, as the writer and the readers would.
        drop(db.open().unwrap());
        away(&db, true);
        let back = std::thread::spawn({
            let db = Postgres {
                url: db.url.clone(),
                clock: db.clock.clone(),
            };
            move || {
                std::thread::sleep(std::time::Duration::from_millis(1500));
                away(&db, false);
            }
        });
        let store = db.open();
        back.join().unwrap();
        assert!(store.unwrap().run("r").unwrap().is_none());
    }

    // edge: the test times, in real time, how soon an opening gives up.
    #[allow(clippy::disallowed_methods)]
    #[test]
    fn an_opening_gives_up_on_a_server_that_accepts_and_never_answers() {
        // What a stopped server's system does: connections are accepted into its backlog,
        // and nothing is ever said on them. (Held open until the test ends.)
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = silent.local_addr().unwrap().port();
        let held = std::thread::spawn(move || {
            let mut held = Vec::new();
            for stream in silent.incoming().take(4) {
                held.push(stream);
            }
            held
        });
        let clock = Arc::new(ManualClock::at(T0));
        for (url, within) in [
            (
                format!("postgres://reel@127.0.0.1:{port}/runs?connect_timeout=1"),
                1,
            ),
            (
                format!("postgres://reel:hunter2@127.0.0.1:{port}/runs?connect_timeout=2"),
                2,
            ),
        ] {
            let began = std::time::Instant::now();
            let err = PgStore::open(&url, clock.clone()).unwrap_err();
            let took = began.elapsed();
            assert_eq!(err.code(), "store.open", "{err}");
            let text = err.to_string();
            assert!(
                text.contains(&format!("did not answer within {within} s")),
                "{text}"
            );
            assert!(text.contains("connect_timeout"), "{text}");
            assert!(!text.contains("hunter2"), "{text}");
            // Once, not once for each of the tries a server that is not there gets.
            assert!(
                took < std::time::Duration::from_secs(within + 2),
                "{took:?}"
            );
        }
        drop(held);
    }

    // edge: the test lets the connections sit unused past the check's threshold, real time.
    #[allow(clippy::disallowed_methods)]
    #[test]
    fn a_connection_ended_while_it_sat_unused_is_found_out_before_anything_is_sent_on_it() {
        let db = Postgres::new();
        let store = db.open().unwrap();
        let lease = durable_run_with_an_event(&*store, "u");
        assert!(store.run("u").unwrap().is_some());
        // A restart, an idle timeout or an administrator ends the sessions while the store
        // has nothing to do (a step runs for minutes); by the next write they sat unused for
        // longer than a second, so the writer asks first, finds its session gone and
        // connects again: the run's lease goes on writing, as if nothing had happened.
        end_connections(&db);
        std::thread::sleep(std::time::Duration::from_millis(1_200));
        store.append(&lease, vec![event("e", 1)]).unwrap();
        wait(store.sync(&lease)).unwrap();
        // A claim, which must not run twice, goes on a new connection rather than failing.
        end_connections(&db);
        std::thread::sleep(std::time::Duration::from_millis(1_200));
        let look = store
            .look(0, &me(), 60_000, 4, &std::collections::HashSet::new())
            .unwrap();
        assert!(look.claims.is_empty(), "the run is held");
        store.append(&lease, vec![event("e", 2)]).unwrap();
        wait(store.sync(&lease)).unwrap();
        assert_eq!(numbers(&journal(&*store, "u").unwrap()), [0, 1, 2]);
    }
}

/// What only the store shared by many machines does: leases judged by the database's clock.
mod postgres_leases {
    use super::*;
    use reel_store::{BoxFuture, Clock, StoreRead};

    /// A clock that tells the real time as a machine whose clock is `skew_ms` off would.
    struct Skewed {
        skew_ms: i64,
    }

    impl Clock for Skewed {
        // edge: the test stands for machines whose real clocks disagree.
        #[allow(clippy::disallowed_methods)]
        fn now_ms(&self) -> i64 {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap();
            i64::try_from(now.as_millis()).unwrap() + self.skew_ms
        }
        fn sleep_until(&self, _at_ms: i64) -> BoxFuture<'static, ()> {
            Box::pin(std::future::ready(()))
        }
        fn is_real_time(&self) -> bool {
            true
        }
    }

    const HOUR: i64 = 3_600_000;

    #[test]
    fn a_machine_whose_clock_runs_ahead_cannot_take_a_live_lease_over() {
        let db = Postgres::new();
        let on_time = PgStore::open(&db.url, Arc::new(Skewed { skew_ms: 0 })).unwrap();
        let ahead = PgStore::open(&db.url, Arc::new(Skewed { skew_ms: HOUR })).unwrap();
        let lease = on_time.create_run(new_run("r"), &me(), 600_000).unwrap();
        // By the fast machine's clock the ten-minute lease ran out long ago; by the database's
        // it has not, and that is the clock that counts.
        assert!(matches!(
            ahead.claim_run("r", &other_live_owner(), 60_000).unwrap(),
            Claim::HeldBy(_)
        ));
        assert!(
            ahead
                .claim_due(
                    ahead_now(),
                    &other_live_owner(),
                    60_000,
                    10,
                    &HashSet::new()
                )
                .unwrap()
                .is_empty()
        );
        assert!(ahead.due_runs(ahead_now(), 10).unwrap().is_empty());
        // Its renewal is written on the database's clock too: still about ten minutes left.
        on_time.renew(&lease, 600_000).unwrap();
        let expires = on_time.run("r").unwrap().unwrap().lease_expires_at.unwrap();
        let on_time_now = Skewed { skew_ms: 0 }.now_ms();
        assert!(
            (expires - on_time_now - 600_000).abs() < 60_000,
            "{expires}"
        );
        // The fast machine sleeps until the lease runs out as its own clock tells that time:
        // about ten minutes from its now, not an hour before it.
        let next = ahead.next_due().unwrap().unwrap();
        assert!((next - ahead_now() - 600_000).abs() < 60_000, "{next}");
        // Its look tells the same, and claims nothing.
        let look = ahead
            .look(
                ahead_now(),
                &other_live_owner(),
                60_000,
                10,
                &HashSet::new(),
            )
            .unwrap();
        assert!(look.claims.is_empty());
        let told = look.next_due.unwrap();
        assert!((told - ahead_now() - 600_000).abs() < 60_000, "{told}");
    }

    #[test]
    fn a_machine_whose_clock_lags_takes_a_run_over_when_its_lease_runs_out() {
        let db = Postgres::new();
        let on_time = PgStore::open(&db.url, Arc::new(Skewed { skew_ms: 0 })).unwrap();
        let behind = PgStore::open(&db.url, Arc::new(Skewed { skew_ms: -HOUR })).unwrap();
        let old = on_time.create_run(new_run("r"), &me(), 0).unwrap();
        // By the slow machine's clock the lease has an hour left; by the database's it is out.
        let claimed = behind
            .claim_due(
                Skewed { skew_ms: -HOUR }.now_ms(),
                &other_live_owner(),
                60_000,
                10,
                &HashSet::new(),
            )
            .unwrap();
        assert_eq!(claimed.len(), 1);
        assert_eq!(claimed[0].lease.token, 2);
        // The old holder is fenced off.
        on_time.append(&old, vec![event("late", 0)]).unwrap();
        assert!(matches!(
            wait(on_time.sync(&old)),
            Err(StoreError::LeaseLost { .. })
        ));
    }

    fn ahead_now() -> i64 {
        Skewed { skew_ms: HOUR }.now_ms()
    }
}
