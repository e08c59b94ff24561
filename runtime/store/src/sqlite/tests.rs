//! Tests of what is the SQLite store's own (blob files, the WAL, group commit, the writer's
//! test hooks); what both stores promise is `tests/conformance.rs`, run on each.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rusqlite::Connection;
use serde_json::json;
use tempfile::TempDir;

use super::*;
use crate::api::{RunStatus, RunUpdate};
use crate::clock::ManualClock;

/// The time the tests' clock stands at.
const T0: i64 = 1_700_000_000_000;

/// A clock standing at [`T0`]: lease and signal times in these tests read no real time.
fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::at(T0))
}

fn store() -> (TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join(".reel"), clock()).unwrap();
    (dir, store)
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

fn wait(ticket: Ticket) -> Result<(), StoreError> {
    ticket.0.blocking_recv().unwrap_or(Err(StoreError::Closed))
}

fn journal(store: &SqliteStore, run: &str) -> Result<Vec<EventRow>, StoreError> {
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

fn raw(dir: &TempDir) -> Connection {
    let conn = Connection::open(dir.path().join(".reel/reel.db")).unwrap();
    conn.busy_timeout(Duration::from_secs(10)).unwrap();
    conn
}

#[test]
fn group_commit_batches_many_appends_into_few_transactions() {
    let (_dir, store) = store();
    let lease = store.create_run(new_run("r"), &me(), 60_000).unwrap();
    let before = store.stats();
    for n in 0..2_000 {
        // Long enough to be stored (a short value is its own name and writes nothing).
        store
            .put_value(&json!({ "value": n, "pad": "p".repeat(64) }))
            .unwrap();
        store.append(&lease, vec![event("e", n)]).unwrap();
    }
    wait(store.sync(&lease)).unwrap();
    let after = store.stats();
    let commands = after.commands - before.commands;
    let batches = after.batches - before.batches;
    assert_eq!(commands, 4_001);
    println!("{batches} transactions for {commands} commands");
    // At least ten commands per transaction on average, however the threads were scheduled.
    assert!(batches * 10 <= commands, "{batches} transactions");
    assert_eq!(journal(&store, "r").unwrap().len(), 2_000);
}

#[test]
fn appends_batched_together_leave_each_run_its_journal_end() {
    // Appends that follow one another in a batch store the journal's end once; anything else
    // in the batch (here a run's update, and a stale append) finds it stored.
    let (dir, store) = store();
    let a = store.create_run(new_run("a"), &me(), 60_000).unwrap();
    let b = store.create_run(new_run("b"), &me(), 60_000).unwrap();
    for n in 0..1_500 {
        store
            .append(&a, vec![event("e", n), event("f", n)])
            .unwrap();
        if n % 3 == 0 {
            store.append(&b, vec![event("e", n)]).unwrap();
        }
        if n == 700 {
            store
                .update_run(
                    &b,
                    RunUpdate {
                        due_at: Some(Some(9_000)),
                        ..RunUpdate::default()
                    },
                )
                .unwrap();
        }
    }
    wait(store.sync(&a)).unwrap();
    wait(store.sync(&b)).unwrap();
    let checks = crate::writer::FENCE_CHECKS.load(Ordering::Relaxed);
    let batches = store.stats().batches;
    println!("{checks} fence checks for 2,000 appends in {batches} batches");
    assert!(checks * 5 <= 2_000, "{checks} fence checks");
    let next_seq = |run: &str| -> i64 {
        raw(&dir)
            .query_row("SELECT next_seq FROM runs WHERE id = ?1", [run], |r| {
                r.get(0)
            })
            .unwrap()
    };
    assert_eq!(next_seq("a"), 3_000);
    assert_eq!(next_seq("b"), 500);
    assert_eq!(journal(&store, "a").unwrap().len(), 3_000);
    assert_eq!(journal(&store, "b").unwrap().len(), 500);
    // An append that does not start where the journal ends is refused, naming that end.
    let stale = new_lease("b", b.token, &me(), Durability::Fast, 7);
    store.append(&stale, vec![event("e", 0)]).unwrap();
    let refused = wait(store.sync(&stale)).unwrap_err();
    assert!(
        refused.to_string().contains("continues at 500, not at 7"),
        "{refused}"
    );
    assert_eq!(next_seq("b"), 500);
}

#[test]
fn a_caller_commits_its_own_sync_when_the_writer_is_free() {
    let (_dir, store) = store();
    let lease = store.create_run(new_run("r"), &me(), 60_000).unwrap();
    let before = store.stats();
    let n = 50;
    for i in 0..n {
        store.put_value(&json!({ "value": i })).unwrap();
        store.append(&lease, vec![event("e", i)]).unwrap();
        wait(store.sync(&lease)).unwrap();
    }
    let after = store.stats();
    let led = after.led - before.led;
    println!("{led} of {n} syncs committed by their caller");
    // A caller alone finds the writer free, unless the writer thread's linger ran out between
    // its append and its sync (a slow test machine): some sync committed by its caller is what
    // shows there was no hand-off.
    assert!(led > 0, "no sync was committed by its caller");
    assert!(after.batches - before.batches <= n + 2);
    assert_eq!(journal(&store, "r").unwrap().len(), n as usize);
}

#[test]
fn a_taken_over_lease_fences_its_old_holder() {
    let dir = tempfile::tempdir().unwrap();
    let time = clock();
    let store = SqliteStore::open(&dir.path().join(".reel"), time.clone()).unwrap();
    let first = store.create_run(new_run("r"), &me(), 30).unwrap();
    store.append(&first, vec![event("e", 0)]).unwrap();
    wait(store.sync(&first)).unwrap();
    time.advance(60);

    let Claim::Claimed(second) = store.claim_run("r", &other_live_owner(), 60_000).unwrap() else {
        panic!("the expired lease should be taken over");
    };
    assert_eq!(second.token, 2);
    assert_eq!(second.next_seq.load(Ordering::SeqCst), 1);

    // The old holder still believes it holds the run.
    store.append(&first, vec![event("e", 100)]).unwrap();
    store.append(&first, vec![event("e", 101)]).unwrap();
    let lost = StoreError::LeaseLost {
        run: "r".to_string(),
    };
    assert_eq!(wait(store.sync(&first)), Err(lost.clone()));
    assert_eq!(
        store.append(&first, vec![event("e", 102)]),
        Err(lost.clone())
    );
    assert_eq!(store.renew(&first, 1_000), Err(lost.clone()));
    wait(store.release(&first)).unwrap_err();
    assert_eq!(
        store.run("r").unwrap().unwrap().lease_owner,
        Some(other_live_owner())
    );

    store.append(&second, vec![event("e", 1)]).unwrap();
    wait(store.sync(&second)).unwrap();
    assert_eq!(numbers(&journal(&store, "r").unwrap()), vec![0, 1]);
    store.renew(&second, 60_000).unwrap();
}

#[test]
fn a_failed_write_poisons_its_run_only() {
    let (_dir, store) = store();
    let a = store.create_run(new_run("a"), &me(), 60_000).unwrap();
    let b = store.create_run(new_run("b"), &me(), 60_000).unwrap();
    *lock(&store.shared.fail_append) = Some(("a".to_string(), 2));
    for n in 0..6 {
        store.append(&a, vec![event("e", n)]).unwrap();
        store.append(&b, vec![event("e", n)]).unwrap();
    }
    store
        .update_run(
            &a,
            RunUpdate {
                status: Some(RunStatus::Failed),
                ..RunUpdate::default()
            },
        )
        .unwrap_or(());
    let poisoned = wait(store.sync(&a)).unwrap_err();
    assert_eq!(poisoned.code(), "store.poisoned");
    assert!(
        poisoned.to_string().contains("injected failure"),
        "{poisoned}"
    );
    wait(store.sync(&b)).unwrap();

    assert_eq!(numbers(&journal(&store, "a").unwrap()), vec![0, 1]);
    assert_eq!(
        numbers(&journal(&store, "b").unwrap()),
        (0..6).collect::<Vec<_>>()
    );
    let run = store.run("a").unwrap().unwrap();
    assert_eq!((run.next_seq, run.status), (2, RunStatus::Running));
    assert_eq!(
        store.append(&a, vec![event("e", 9)]).unwrap_err().code(),
        "store.poisoned"
    );

    // A new lease on the run (a new token) is not poisoned.
    *lock(&store.shared.fail_append) = None;
    wait(store.release(&a)).unwrap_err();
    let Claim::Claimed(again) = store.claim_run("a", &me(), 60_000).unwrap() else {
        panic!("a released run can be claimed");
    };
    assert_eq!(again.next_seq.load(Ordering::SeqCst), 2);
    store.append(&again, vec![event("e", 2)]).unwrap();
    wait(store.sync(&again)).unwrap();
    assert_eq!(numbers(&journal(&store, "a").unwrap()), vec![0, 1, 2]);
}

#[test]
fn a_failed_batch_poisons_its_runs_and_keeps_its_values() {
    let (dir, store) = store();
    let a = store.create_run(new_run("a"), &me(), 60_000).unwrap();
    let b = store.create_run(new_run("b"), &me(), 60_000).unwrap();
    store.shared.fail_commit.store(true, Ordering::SeqCst);
    let kept = json!({ "kept": "k".repeat(64) });
    let digest = store.put_value(&kept).unwrap();
    store.append(&a, vec![event("e", 0)]).unwrap();
    assert_eq!(wait(store.sync(&a)).unwrap_err().code(), "store.poisoned");
    assert_eq!(store.get_value(&digest).unwrap(), Some(kept));
    store.shared.fail_commit.store(false, Ordering::SeqCst);

    store.append(&b, vec![event("e", 0)]).unwrap();
    wait(store.sync(&b)).unwrap();
    let stored: i64 = raw(&dir)
        .query_row(
            "SELECT COUNT(*) FROM vals WHERE digest = ?1",
            [&digest],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(stored, 1);
    assert_eq!(journal(&store, "a").unwrap().len(), 0);
    assert_eq!(
        store.append(&a, vec![event("e", 1)]).unwrap_err().code(),
        "store.poisoned"
    );
}

#[test]
fn values_are_stored_once_and_large_ones_apart() {
    let (dir, store) = store();
    let pad = "p".repeat(64);
    let small = json!({ "b": 1, "a": [true, null], "pad": pad });
    let d1 = store.put_value(&small).unwrap();
    let d2 = store
        .put_value(&json!({ "a": [true, null], "b": 1.0, "pad": pad }))
        .unwrap();
    assert_eq!(d1, d2);
    assert_eq!(d1, reel_flowspec::canonical::digest_value(&small));
    // A short value is its own name: readable at once, and no row of its own (counted below).
    let short = store.put_value(&json!({ "b": 1.0 })).unwrap();
    assert_eq!(short, r#"={"b":1}"#);
    assert_eq!(store.get_value(&short).unwrap(), Some(json!({ "b": 1 })));
    // Readable at once, before any commit.
    assert_eq!(store.get_value(&d1).unwrap(), Some(small.clone()));

    let big = json!({ "text": "x".repeat(100 * 1024) });
    let big_digest = store.put_value(&big).unwrap();
    assert_eq!(store.get_value(&big_digest).unwrap(), Some(big.clone()));
    let lease = store.create_run(new_run("r"), &me(), 60_000).unwrap();
    wait(store.sync(&lease)).unwrap();

    let conn = raw(&dir);
    let count: i64 = conn
        .query_row("SELECT COUNT(*) FROM vals", [], |r| r.get(0))
        .unwrap();
    assert_eq!(count, 2);
    let (json, external, size): (Option<String>, bool, i64) = conn
        .query_row(
            "SELECT json, external, size FROM vals WHERE digest = ?1",
            [&big_digest],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!((json, external), (None, true));
    assert!(size > 100 * 1024);
    let file = dir
        .path()
        .join(".reel/blobs")
        .join(&big_digest[..2])
        .join(&big_digest);
    assert!(file.is_file());
    assert_eq!(store.get_value(&d1).unwrap(), Some(small));
    assert_eq!(store.get_value(&big_digest).unwrap(), Some(big));

    assert_eq!(store.get_value(&"0".repeat(64)).unwrap(), None);
    assert_eq!(store.get_value("../../etc/passwd").unwrap(), None);
    // Bytes that no longer match their digest are refused, in a row or in a file alike.
    conn.execute(
        "UPDATE vals SET json = replace(json, '\"b\":1', '\"b\":2') WHERE digest = ?1",
        [&d1],
    )
    .unwrap();
    assert_eq!(
        store.get_value(&d1).unwrap_err(),
        StoreError::CorruptValue { digest: d1.clone() }
    );
    std::fs::write(&file, r#"{"text":"changed"}"#).unwrap();
    assert_eq!(
        store.get_value(&big_digest).unwrap_err().code(),
        "store.corrupt-value"
    );
    std::fs::remove_file(&file).unwrap();
    assert_eq!(
        store.get_value(&big_digest).unwrap_err(),
        StoreError::MissingValue {
            digest: big_digest.clone()
        }
    );

    store.put_spec(&d1, "{\"spec\":1}").unwrap();
    store.put_spec(&d1, "{\"spec\":1}").unwrap();
    assert_eq!(
        store.get_spec(&d1).unwrap().as_deref(),
        Some("{\"spec\":1}")
    );
    assert_eq!(store.get_spec("none").unwrap(), None);
    let mut seen = Vec::new();
    assert!(
        store
            .read_spec(&d1, &mut |json| seen.push(json.to_owned()))
            .unwrap()
    );
    assert!(
        !store
            .read_spec("none", &mut |json| seen.push(json.to_owned()))
            .unwrap()
    );
    assert_eq!(seen, ["{\"spec\":1}"]);
}

#[test]
fn a_reader_sees_committed_data_and_refuses_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(".reel");
    let missing = SqliteStore::open_read_only(&path).unwrap_err();
    assert_eq!(missing.code(), "store.open");
    assert!(missing.to_string().contains("no Reel store"), "{missing}");
    assert!(!path.exists(), "opening read-only must create nothing");

    let writer = SqliteStore::open(&path, clock()).unwrap();
    let lease = writer.create_run(new_run("r"), &me(), 60_000).unwrap();
    let reader = SqliteStore::open_read_only(&path).unwrap();
    assert!(reader.is_read_only());
    for n in 0..3 {
        writer.append(&lease, vec![event("e", n)]).unwrap();
        wait(writer.sync(&lease)).unwrap();
        assert_eq!(journal(&reader, "r").unwrap().len() as u64, n + 1);
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
    assert_eq!(wait(reader.sync(&lease)), Err(ro.clone()));
    assert_eq!(wait(reader.release(&lease)), Err(ro));

    drop(reader);
    drop(writer);
    let files = || {
        let mut files: Vec<_> = std::fs::read_dir(&path)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        files.sort();
        files
    };
    // No connection folds a short WAL back as it closes: the next to open reads it.
    assert_eq!(
        files(),
        vec!["blobs", "reel.db", "reel.db-shm", "reel.db-wal"]
    );
    let reader = SqliteStore::open_read_only(&path).unwrap();
    assert_eq!(journal(&reader, "r").unwrap().len(), 3);
    // Only SQLite's own WAL index may appear beside the database.
    assert!(
        files()
            .iter()
            .all(|f| ["blobs", "reel.db", "reel.db-shm", "reel.db-wal"].contains(&f.as_str())),
        "{:?}",
        files()
    );
}

#[test]
fn a_long_journal_streams_quickly() {
    let (_dir, store) = store();
    let lease = store.create_run(new_run("long"), &me(), 60_000).unwrap();
    let total = 20_000u64;
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
    // The test measures how long a read takes, so it reads the real monotonic clock.
    #[allow(clippy::disallowed_methods)]
    let started = Instant::now();
    let mut count = 0u64;
    store
        .read_journal("long", 0, &mut |row| {
            assert_eq!(row.seq, count);
            count += 1;
            Flow::Continue
        })
        .unwrap();
    assert_eq!(count, total);
    println!("read {total} journal rows in {:?}", started.elapsed());
}

#[test]
fn the_writer_folds_back_a_long_wal_as_it_stops_and_leaves_a_short_one() {
    let wal_len = |dir: &TempDir| {
        std::fs::metadata(dir.path().join(".reel/reel.db-wal"))
            .map(|m| m.len())
            .unwrap_or(0)
    };
    let (dir, store) = store();
    let lease = store.create_run(new_run("short"), &me(), 60_000).unwrap();
    store.append(&lease, vec![event("e", 0)]).unwrap();
    wait(store.sync(&lease)).unwrap();
    drop(store);
    assert!(wal_len(&dir) > 0, "a short WAL stays for the next process");
    let store = SqliteStore::open(&dir.path().join(".reel"), clock()).unwrap();
    assert_eq!(journal(&store, "short").unwrap().len(), 1);

    let lease = store.create_run(new_run("long"), &me(), 60_000).unwrap();
    let mut seq = 0;
    while wal_len(&dir) <= crate::checkpoint::CLOSE_LIMIT {
        let events = (seq..seq + 200)
            .map(|n| NewEvent {
                data: json!({ "n": n, "output": "d".repeat(1000) }),
                ..event("step_succeeded", n)
            })
            .collect();
        store.append(&lease, events).unwrap();
        wait(store.sync(&lease)).unwrap();
        seq += 200;
    }
    drop(store);
    assert_eq!(
        wal_len(&dir),
        0,
        "a WAL past the limit is folded back and cut"
    );
    let reader = SqliteStore::open_read_only(&dir.path().join(".reel")).unwrap();
    assert_eq!(journal(&reader, "long").unwrap().len() as u64, seq);
    assert_eq!(journal(&reader, "short").unwrap().len(), 1);
}

/// Fast commits that each write a megabyte keep the WAL near its limit: the writer learns the
/// WAL's length from each commit and truncates it after the first commit past the limit (or
/// a later one, should a background pass be copying then, but never past twice the limit). It
/// used to look every 64 commits and give up whenever a background pass was under way, and a
/// million-call `foreach`, whose commits each rewrite megabytes of the values' index, grew its
/// WAL to gigabytes.
#[test]
fn large_fast_commits_keep_the_wal_near_its_limit() {
    const LIMIT: u64 = 4 << 20;
    const MIB: u64 = 1 << 20;
    let dir = tempfile::tempdir().unwrap();
    let reel = dir.path().join(".reel");
    let store = SqliteStore::open_with_wal_limit(&reel, clock(), LIMIT).unwrap();
    let wal_len = || {
        std::fs::metadata(reel.join("reel.db-wal"))
            .map(|m| m.len())
            .unwrap_or(0)
    };
    let lease = store.create_run(new_run("big"), &me(), 60_000).unwrap();
    let rounds = 48;
    let (mut longest, mut cuts, mut last) = (0, 0, 0);
    for round in 0..rounds {
        for n in 0..16 {
            let pad = "x".repeat(60_000);
            store
                .put_value(&json!({ "round": round, "n": n, "pad": pad }))
                .unwrap();
        }
        store.append(&lease, vec![event("e", round)]).unwrap();
        wait(store.sync(&lease)).unwrap();
        let len = wal_len();
        if len < last {
            cuts += 1;
        }
        (longest, last) = (longest.max(len), len);
    }
    // Past twice its limit the writer waits for a background pass to truncate; a round writes
    // about a megabyte (16 values of 60 KB), and the file grows ahead of its frames by up to a
    // MiB.
    let most = 2 * LIMIT + 2 * MIB;
    assert!(
        longest <= most,
        "the WAL grew to {longest} bytes (at most {most})"
    );
    assert!(cuts >= 3, "the WAL was cut {cuts} times in {rounds} rounds");
    assert_eq!(journal(&store, "big").unwrap().len() as u64, rounds);
}

/// The WAL header's checkpoint sequence number: SQLite adds one each time a write starts the
/// WAL over at its beginning.
fn wal_restarts(dir: &TempDir) -> u32 {
    let header = std::fs::read(dir.path().join(".reel/reel.db-wal")).unwrap();
    u32::from_be_bytes(header[12..16].try_into().unwrap())
}

#[test]
fn durable_commits_reuse_the_wal_rather_than_growing_it() {
    let (dir, store) = store();
    let lease = store
        .create_run(
            NewRun {
                durability: Durability::Durable,
                ..new_run("r")
            },
            &me(),
            60_000,
        )
        .unwrap();
    let restarts = wal_restarts(&dir);
    let rounds = 5 * crate::writer::RESTART_EVERY;
    for n in 0..u64::from(rounds) {
        // Long enough to be stored (a short value is its own name and writes nothing).
        store
            .put_value(&json!({ "value": n, "pad": "p".repeat(64) }))
            .unwrap();
        store.append(&lease, vec![event("e", n)]).unwrap();
        wait(store.sync(&lease)).unwrap();
    }
    // Each round is one durable commit of a few pages (the run's row, the journal's last
    // page, the value's row and index entry). Without the writer's checkpoints the WAL would
    // hold every round's frames; with them it holds at most about two intervals' worth.
    let wal = std::fs::metadata(dir.path().join(".reel/reel.db-wal"))
        .unwrap()
        .len();
    let most = u64::from(2 * crate::writer::RESTART_EVERY + 64) * 8 * (4096 + 24);
    assert!(wal <= most, "the WAL grew to {wal} bytes (at most {most})");
    assert!(
        wal_restarts(&dir) >= restarts + 3,
        "the WAL started over {} times in {rounds} durable commits",
        wal_restarts(&dir) - restarts
    );
    assert_eq!(journal(&store, "r").unwrap().len(), rounds as usize);
}

/// A worker's look at what is due reads the waiting runs through indexes: the runs whose timer
/// is due, and those with a cancel asked for or a signal pending, not every parked run (with
/// 100,000 runs waiting for a signal, reading them all took 26 ms a look; through the indexes
/// 0.1 ms). The plan SQLite makes of the statement shows no scan of the table itself.
#[test]
fn a_look_at_what_is_due_reads_waiting_runs_through_indexes() {
    let (dir, _store) = store();
    let conn = raw(&dir);
    let mut stmt = conn
        .prepare(&format!("EXPLAIN QUERY PLAN {}", crate::read::DUE_RUNS[0]))
        .unwrap();
    let plan: Vec<String> = stmt
        .query_map([T0], |r| r.get::<_, String>(3))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let runs: Vec<&String> = plan.iter().filter(|l| l.contains("runs")).collect();
    assert_eq!(runs.len(), 2, "{plan:#?}");
    assert!(
        runs.iter()
            .any(|l| l.contains("INDEX runs_status_due (status=? AND due_at<?)")),
        "due timers by their index: {plan:#?}"
    );
    assert!(
        runs.iter()
            .any(|l| l.contains("INDEX runs_waiting_flagged")),
        "cancels and signals by theirs: {plan:#?}"
    );
}

/// `reel runs` shows every listed run's calls of unknown outcome: read through their index
/// (`journal_unknown_outcome`), the statement steps over those rows, not the store's other
/// events. Counted by SQLite itself (its virtual machine's steps), not timed.
#[test]
fn unknown_outcome_rows_step_only_over_themselves() {
    const OTHERS: i64 = 100_000;
    let (dir, store) = store();
    let conn = raw(&dir);
    conn.execute_batch(&format!(
        "WITH RECURSIVE g(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM g WHERE n < {last})
         INSERT INTO journal (run, seq, at, kind, step, data)
         SELECT 'run-' || (n / 10), n % 10, 0,
                CASE WHEN n % 5000 = 3 THEN 'unknown_outcome' ELSE 'call_succeeded' END, 's',
                CASE WHEN n % 5000 = 3 THEN '{{\"key\": \"k\", \"then\": \"repeated\"}}'
                     ELSE '{{}}' END
         FROM g;",
        last = OTHERS - 1
    ))
    .unwrap();
    let mut stmt = conn.prepare(crate::read::UNKNOWN_OUTCOME_ROWS).unwrap();
    let found = stmt
        .query_map([], |r| r.get::<_, String>(7))
        .unwrap()
        .count();
    let steps = stmt.get_status(rusqlite::StatementStatus::VmStep);
    assert_eq!(found, (OTHERS / 5000) as usize);
    assert!(steps < 50 * found as i32, "{steps} steps for {found} rows");
    drop(stmt);
    assert_eq!(store.unknown_outcome_rows().unwrap().len(), found);
}

#[test]
fn runs_are_exported_in_order_within_a_bound_of_events() {
    let (_dir, store) = store();
    // r0, r1 and r2 hold 3, 4 and 5 events.
    for (n, id) in ["r0", "r1", "r2"].into_iter().enumerate() {
        let lease = store.create_run(new_run(id), &me(), 60_000).unwrap();
        let events = (0..3 + n as u64)
            .map(|k| event("call_returned", k))
            .collect();
        store.append(&lease, events).unwrap();
        wait(store.sync(&lease)).unwrap();
    }
    let ids = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
    let bounded = |names: &[&str], max: u64| {
        let (runs, taken) = store.export_runs(&ids(names), max).unwrap();
        let got: Vec<String> = runs.iter().map(|r| r.row.id.clone()).collect();
        let lengths: Vec<usize> = runs.iter().map(|r| r.events.len()).collect();
        (got, lengths, taken)
    };
    let all = ["r0", "r1", "r2"];
    assert_eq!(bounded(&all, u64::MAX), (ids(&all), vec![3, 4, 5], 3));
    assert_eq!(bounded(&all, 7), (ids(&["r0", "r1"]), vec![3, 4], 2));
    // At least one run, however long.
    assert_eq!(bounded(&all, 1), (ids(&["r0"]), vec![3], 1));
    // A run the store does not have is taken and left out.
    assert_eq!(
        bounded(&["r0", "nosuch", "r1"], 3),
        (ids(&["r0"]), vec![3], 2)
    );
    assert_eq!(bounded(&["nosuch"], 3), (Vec::new(), Vec::new(), 1));
}
