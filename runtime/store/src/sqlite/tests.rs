//! Tests of the SQLite store through its public interface (plus the writer's test hooks).

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
fn a_run_round_trips() {
    let (_dir, store) = store();
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
    store
        .append_log(
            &lease,
            LogRow {
                run: "r1".to_string(),
                step: "step1".to_string(),
                index: None,
                attempt: 1,
                at: 6_000,
                text: "hello".to_string(),
            },
        )
        .unwrap();
    wait(store.sync(&lease)).unwrap();

    let rows = journal(&store, "r1").unwrap();
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
    assert_eq!(run.lease_owner, Some(me()));
    assert_eq!(run.lease_token, 1);
    assert_eq!(run.keep_for_ms, Some(7 * 24 * 3600 * 1000));
    assert_eq!(store.logs("r1").unwrap()[0].text, "hello");
    assert_eq!(store.run("nope").unwrap(), None);
    assert_eq!(
        journal(&store, "nope").unwrap_err(),
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
}

#[test]
fn rows_land_in_order_without_gaps_across_threads_and_runs() {
    let (_dir, store) = store();
    let runs = 8;
    let per_run = 400u64;
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
        let rows = journal(&store, &lease.run).unwrap();
        assert_eq!(numbers(&rows), (0..per_run).collect::<Vec<_>>());
        assert!(rows.iter().enumerate().all(|(i, r)| r.seq == i as u64));
        assert_eq!(store.run(&lease.run).unwrap().unwrap().next_seq, per_run);
    }
}

#[test]
fn group_commit_batches_many_appends_into_few_transactions() {
    let (_dir, store) = store();
    let lease = store.create_run(new_run("r"), &me(), 60_000).unwrap();
    let before = store.stats();
    for n in 0..2_000 {
        store.put_value(&json!({ "value": n })).unwrap();
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
    let digest = store.put_value(&json!("kept")).unwrap();
    store.append(&a, vec![event("e", 0)]).unwrap();
    assert_eq!(wait(store.sync(&a)).unwrap_err().code(), "store.poisoned");
    assert_eq!(store.get_value(&digest).unwrap(), Some(json!("kept")));
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
fn a_live_holder_keeps_its_run_and_a_dead_one_loses_it_at_once() {
    let (_dir, store) = store();
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

#[test]
fn claims_wake_waiting_runs_and_leave_ended_ones_ended() {
    let (_dir, store) = store();
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

#[test]
fn values_are_stored_once_and_large_ones_apart() {
    let (dir, store) = store();
    let small = json!({ "b": 1, "a": [true, null] });
    let d1 = store.put_value(&small).unwrap();
    let d2 = store
        .put_value(&json!({ "a": [true, null], "b": 1.0 }))
        .unwrap();
    assert_eq!(d1, d2);
    assert_eq!(d1, reel_flowspec::canonical::digest_value(&small));
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
        "UPDATE vals SET json = '{\"a\":[true,null],\"b\":2}' WHERE digest = ?1",
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
    let digest = writer.put_value(&json!(42)).unwrap();
    wait(writer.sync(&lease)).unwrap();
    assert_eq!(reader.get_value(&digest).unwrap(), Some(json!(42)));

    let ro = StoreError::ReadOnly;
    assert_eq!(reader.put_value(&json!(1)), Err(ro.clone()));
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
    // The last connection to close (the writer's) folded the WAL back and removed it.
    assert_eq!(files(), vec!["blobs", "reel.db"]);
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
fn signals_sent_before_the_wait_are_kept() {
    let (_dir, store) = store();
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
    assert_eq!(pending[0].name, "approve");

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
    store.update_run(&lease, clear).unwrap();
    wait(store.sync(&lease)).unwrap();
    assert!(!store.run("r").unwrap().unwrap().signal_pending);
    assert!(store.pending_signals("r").unwrap().is_empty());

    store.consume_signal(&lease, 7, 0).unwrap();
    let err = wait(store.sync(&lease)).unwrap_err();
    assert!(err.to_string().contains("has no signal 7"), "{err}");
}

#[test]
fn holes_and_gaps_are_reported() {
    let (dir, store) = store();
    let lease = store.create_run(new_run("r"), &me(), 60_000).unwrap();
    store
        .append(&lease, (0..10).map(|n| event("e", n)).collect())
        .unwrap();
    wait(store.sync(&lease)).unwrap();
    let conn = raw(&dir);
    conn.execute(
        "UPDATE journal SET data = '{broken' WHERE run = 'r' AND seq = 5",
        [],
    )
    .unwrap();
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
    assert_eq!(
        journal(&store, "r").err().map(|e| e.code()),
        Some("store.hole")
    );

    conn.execute("DELETE FROM journal WHERE run = 'r' AND seq = 7", [])
        .unwrap();
    let mut from_six = Vec::new();
    let err = store
        .read_journal("r", 6, &mut |row| {
            from_six.push(row.seq);
            Flow::Continue
        })
        .unwrap_err();
    assert_eq!(from_six, vec![6]);
    assert!(matches!(err, StoreError::Hole { seq: 7, .. }), "{err:?}");

    conn.execute("DELETE FROM journal WHERE run = 'r' AND seq = 9", [])
        .unwrap();
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

#[test]
fn opening_twice_is_idempotent_and_a_future_schema_is_refused() {
    let (dir, store) = store();
    store.create_run(new_run("r"), &me(), 1).unwrap();
    drop(store);
    let store = SqliteStore::open(&dir.path().join(".reel"), clock()).unwrap();
    assert!(store.run("r").unwrap().is_some());
    drop(store);
    raw(&dir)
        .execute(
            "UPDATE meta SET value = value + 1 WHERE key = 'schema_version'",
            [],
        )
        .unwrap();
    for err in [
        SqliteStore::open(&dir.path().join(".reel"), clock()).err(),
        SqliteStore::open_read_only(&dir.path().join(".reel")).err(),
    ] {
        let err = err.expect("a newer schema must be refused");
        assert_eq!(err.code(), "store.open");
        assert!(
            err.to_string().contains("newer than this reel knows"),
            "{err}"
        );
    }
}

#[test]
fn two_stores_on_one_database_do_not_corrupt_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(".reel");
    let one = SqliteStore::open(&path, clock()).unwrap();
    let two = SqliteStore::open(&path, clock()).unwrap();
    let per_run = 300u64;
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
                        store.put_value(&json!({ "shared": n })).unwrap();
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
                let rows = journal(store, &format!("s{i}r{r}")).unwrap();
                assert_eq!(numbers(&rows), (0..per_run).collect::<Vec<_>>());
            }
        }
    }
    let digest = reel_flowspec::canonical::digest_value(&json!({ "shared": 7 }));
    assert_eq!(
        one.get_value(&digest).unwrap(),
        Some(json!({ "shared": 7 }))
    );
}

#[test]
fn due_runs_are_timers_awaited_signals_and_abandoned_leases() {
    let (_dir, store) = store();
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
    store.send_signal("signal", "go", &json!(null)).unwrap();
    store.send_signal("kept", "go", &json!(null)).unwrap();
    store.create_run(new_run("held"), &me(), 600_000).unwrap();
    store.create_run(new_run("expired"), &me(), 0).unwrap();
    let dead = Owner {
        pid: u32::MAX - 3,
        ..me()
    };
    store.create_run(new_run("orphan"), &dead, 600_000).unwrap();

    let later = T0 + 1;
    let mut due = store.due_runs(later, 100).unwrap();
    let waiting: Vec<_> = due.drain(..2).collect();
    assert_eq!(waiting, vec!["timer-past", "signal"]);
    due.sort();
    assert_eq!(due, vec!["expired", "orphan"]);
    assert_eq!(store.due_runs(later, 1).unwrap().len(), 1);
    assert!(store.due_runs(later, 0).unwrap().is_empty());
}

#[test]
fn cancel_requests_reach_only_runs_that_have_not_ended() {
    let (_dir, store) = store();
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
    assert!(!store.request_cancel("r").unwrap());
    assert_eq!(
        store.request_cancel("x").unwrap_err(),
        StoreError::NotFound("x".to_string())
    );
}

#[test]
fn runs_are_found_by_prefix_and_listed_newest_first() {
    let (_dir, store) = store();
    for (i, id) in ["01abc", "01abd", "01b", "02"].iter().enumerate() {
        let mut run = new_run(id);
        run.created_at = i as i64;
        if *id == "02" {
            run.flow = "other".to_string();
        }
        store.create_run(run, &me(), 1).unwrap();
    }
    assert_eq!(store.find_runs("01a").unwrap(), vec!["01abc", "01abd"]);
    assert_eq!(store.find_runs("01abd").unwrap(), vec!["01abd"]);
    assert!(store.find_runs("9").unwrap().is_empty());
    assert_eq!(store.find_runs("").unwrap().len(), 4);

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
        vec!["02", "01b", "01abd", "01abc"]
    );
    let latest = RunFilter {
        flow: Some("deploy".to_string()),
        source_abs: Some("/src/deploy.reel".to_string()),
        limit: Some(1),
        ..RunFilter::default()
    };
    assert_eq!(ids(latest), vec!["01b"]);
    let running = RunFilter {
        status: Some(RunStatus::Running),
        ..RunFilter::default()
    };
    assert_eq!(ids(running).len(), 4);
}

#[test]
fn durable_runs_commit_and_read_back() {
    let (_dir, store) = store();
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
    assert_eq!(journal(&store, "d").unwrap().len(), 20);
    assert_eq!(journal(&store, "f").unwrap().len(), 20);
    assert_eq!(
        store.run("d").unwrap().unwrap().durability,
        Durability::Durable
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
fn succeeded_steps_names_each_succeeded_step_once() {
    let (_dir, store) = store();
    let lease = store.create_run(new_run("r"), &me(), 60_000).unwrap();
    let succeeded = |n: u64| NewEvent {
        step: Some(format!("step{}", n % 2)),
        ..event("step_succeeded", n)
    };
    store
        .append(
            &lease,
            vec![
                event("run_started", 0),
                succeeded(1),
                event("step_started", 2),
                succeeded(3),
                succeeded(4),
                NewEvent {
                    step: None,
                    ..event("step_succeeded", 5)
                },
            ],
        )
        .unwrap();
    wait(store.sync(&lease)).unwrap();
    let mut steps: Vec<String> = store.succeeded_steps("r").unwrap().into_iter().collect();
    steps.sort();
    assert_eq!(steps, ["step0", "step1"]);
}
