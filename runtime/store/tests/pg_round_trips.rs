//! Counts, not timings: the round trips to the server the PostgreSQL store takes for a step,
//! and that they do not grow with the run's length; a journal of one page, or values wanted
//! together, read in one.
//!
//! A durable step is a value, an event naming it and a sync: one transaction sent in one round
//! trip (`BEGIN`, the batch's opening, its values, the fenced append and `COMMIT`, each sent
//! before the answers to those before it). A batch split by a slow moment (the writer waits
//! 2 ms for company) costs one more, so the bound is on the average over many steps.
//!
//! Needs `REEL_TEST_POSTGRES_URL` (`scripts/test.sh` sets it); without it the tests fail,
//! saying so.

use std::collections::HashSet;
use std::sync::Arc;

use reel_flowspec::canonical::sha256_hex;
use reel_store::{
    Durability, Flow, ManualClock, NewEvent, NewRun, Owner, PgStore, RunStatus, RunUpdate, Store,
    StoreRead,
};
use serde_json::json;

mod test_server;

fn open() -> PgStore {
    open_at(&test_server::fresh_database("reel_trips"))
}

/// The time of the stores' clock.
const NOW: i64 = 1_700_000_000_000;

fn open_at(url: &str) -> PgStore {
    PgStore::open(url, Arc::new(ManualClock::at(NOW))).unwrap()
}

fn new_run(id: &str) -> NewRun {
    NewRun {
        first_events: Vec::new(),
        id: id.to_string(),
        flow: "steps".to_string(),
        flow_digest: "f".repeat(64),
        source: None,
        source_abs: None,
        cwd: "/".to_string(),
        parent: None,
        keep_for_ms: None,
        durability: Durability::Durable,
        created_at: 1_000,
        kept: Vec::new(),
    }
}

/// The round trips `steps` durable steps of one run cost, after `before` steps of it.
fn durable_steps(store: &PgStore, id: &str, before: u64, steps: u64) -> u64 {
    let lease = store
        .create_run(new_run(id), &Owner::this_process(), 60_000)
        .unwrap();
    let step = |n: u64| {
        let text = format!("{{\"n\":{n}}}");
        let kept = store
            .put_canonical(&sha256_hex(text.as_bytes()), text)
            .unwrap();
        store
            .append_kept(&lease, vec![returned(n)], vec![kept])
            .unwrap();
        store.sync(&lease).0.blocking_recv().unwrap().unwrap();
    };
    (0..before).for_each(step);
    let start = store.round_trips();
    (before..before + steps).for_each(step);
    store.round_trips() - start
}

#[test]
fn a_durable_step_costs_one_round_trip_however_long_the_run() {
    let store = open();
    let short = durable_steps(&store, "short", 0, 50);
    let long = durable_steps(&store, "long", 1_000, 200);
    // One a step, and one more for the odd batch split by a slow moment (or, in the first
    // steps, for values vouched for before the store's first look at the count of cleans).
    for (steps, sent) in [(50, short), (200, long)] {
        assert!(sent >= steps, "{sent} round trips for {steps} steps");
        assert!(
            2 * sent < 3 * steps,
            "{sent} round trips for {steps} steps: 1.5 or more a step on average"
        );
    }
}

#[test]
fn a_read_is_one_statement_once_prepared() {
    let store = open();
    store
        .create_run(new_run("r"), &Owner::this_process(), 60_000)
        .unwrap();
    // Each reader connection prepares the statement once.
    store.run("r").unwrap();
    let start = store.round_trips();
    for _ in 0..100 {
        assert!(store.run("r").unwrap().is_some());
    }
    let sent = store.round_trips() - start;
    // One statement a read: reads one after another keep to the connection that prepared it.
    assert_eq!(sent, 100, "{sent} statements for 100 reads");
}

/// The server processes serving the store's database, but the asker's own.
fn connections(url: &str) -> i64 {
    let mut admin = postgres::Client::connect(url, postgres::NoTls).unwrap();
    admin
        .query_one(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
            &[],
        )
        .unwrap()
        .get(0)
}

#[test]
fn a_command_that_only_reads_holds_one_connection() {
    // Each connection is a server process forked and authenticated, milliseconds of a short
    // command: reads one after another keep to the opening's, and the writer connects when
    // there is something to write.
    let url = test_server::fresh_database("reel_conns");
    let store = open_at(&url);
    for _ in 0..20 {
        assert!(store.run("none").unwrap().is_none());
        store.list_runs(&reel_store::RunFilter::default()).unwrap();
    }
    assert_eq!(connections(&url), 1, "a store that has only read");
    store
        .create_run(new_run("r"), &Owner::this_process(), 60_000)
        .unwrap();
    assert!(store.run("r").unwrap().is_some());
    assert_eq!(connections(&url), 2, "with the writer's");
    // Reads at once from several threads have connections of their own.
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..50 {
                    assert!(store.run("r").unwrap().is_some());
                }
            });
        }
    });
    let many = connections(&url);
    assert!((2..=8).contains(&many), "{many} connections");
}

#[test]
fn a_look_is_one_statement_and_two_more_when_it_claims_short_runs() {
    let store = open();
    let owner = Owner::this_process();
    let none = HashSet::new();
    // Runs a live process holds (no look takes them, but each look asks whether their holder
    // on this host is dead), and twenty parked runs whose timer is due.
    for i in 0..3 {
        store
            .create_run(new_run(&format!("held-{i}")), &owner, 600_000)
            .unwrap();
    }
    for i in 0..20 {
        let lease = store
            .create_run(new_run(&format!("parked-{i:02}")), &owner, 60_000)
            .unwrap();
        store
            .update_run(
                &lease,
                RunUpdate {
                    status: Some(RunStatus::Waiting),
                    due_at: Some(Some(NOW - 1)),
                    ..RunUpdate::default()
                },
            )
            .unwrap();
        store.release(&lease).0.blocking_recv().unwrap().unwrap();
    }
    let taker = Owner {
        id: format!("{}-taker", owner.id),
        ..owner.clone()
    };
    // Every reader connection prepares the look once (and the claimed runs' two reads).
    let looks = |limit: usize, times: u64| {
        let start = store.round_trips();
        let mut claimed = 0;
        for _ in 0..times {
            claimed += store
                .look(NOW, &taker, 60_000, limit, &none)
                .unwrap()
                .claims
                .len();
        }
        (claimed, store.round_trips() - start)
    };
    let (claimed, sent) = looks(0, 100);
    assert_eq!(claimed, 0);
    assert!(
        (100..=106).contains(&sent),
        "{sent} statements for 100 looks"
    );
    // Each of twenty looks claims one short run, and reads its journal and signals.
    let (claimed, sent) = looks(1, 20);
    assert_eq!(claimed, 20);
    assert!(
        (60..=78).contains(&sent),
        "{sent} statements for 20 claiming looks"
    );
    let (claimed, sent) = looks(10, 100);
    assert_eq!(claimed, 0);
    assert!(
        (100..=106).contains(&sent),
        "{sent} statements for 100 more looks"
    );
}

/// Returns once a session of `watch`'s database waits for a lock (the store's signal, for a
/// row another session holds); fails after 30 s.
fn wait_for_a_lock(watch: &mut postgres::Client) {
    for _ in 0..3_000 {
        let waiting: i64 = watch
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND wait_event_type = 'Lock'",
                &[],
            )
            .unwrap()
            .get(0);
        if waiting > 0 {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("the store's signal never waited for the lock");
}

/// A store on `url` with the runs `ids`, the first of them sent two signals `go` (payload
/// `1`, which every later signal of the tests sends too, so they cost only their signal); and
/// the round trips of its second signal, sent alone.
fn runs_to_signal(url: &str, ids: &[impl AsRef<str>]) -> (PgStore, u64) {
    let store = open_at(url);
    for id in ids {
        let lease = store
            .create_run(new_run(id.as_ref()), &Owner::this_process(), 60_000)
            .unwrap();
        store.sync(&lease).0.blocking_recv().unwrap().unwrap();
    }
    let first = ids[0].as_ref();
    store.send_signal(first, "go", &json!(1)).unwrap();
    let start = store.round_trips();
    assert_eq!(store.send_signal(first, "go", &json!(1)).unwrap(), 1);
    let alone = store.round_trips() - start;
    (store, alone)
}

#[test]
fn a_signal_is_one_statement_and_one_more_when_another_sender_took_its_number() {
    let url = test_server::fresh_database("reel_trips");
    let (store, alone) = runs_to_signal(&url, &["r"]);

    // Another sender holds the run's row, with signal 2 written, while this one sends: the
    // store's statement waits for it, finds 2 taken when it commits, and asks again.
    let mut other = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    other
        .batch_execute(
            "BEGIN;
             UPDATE reel.runs SET signal_pending = TRUE WHERE id = 'r';
             INSERT INTO reel.signals (run, seq, name, payload_digest, sent_at)
             SELECT run, 2, name, payload_digest, sent_at FROM reel.signals
             WHERE run = 'r' AND seq = 0",
        )
        .unwrap();
    let mut watch = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let start = store.round_trips();
    std::thread::scope(|s| {
        let sent = s.spawn(|| store.send_signal("r", "go", &json!(1)));
        // The other sender commits once the store's statement waits for its lock.
        wait_for_a_lock(&mut watch);
        other.batch_execute("COMMIT").unwrap();
        assert_eq!(sent.join().unwrap().unwrap(), 3);
    });
    let contested = store.round_trips() - start;
    assert_eq!(contested, alone + 1, "{alone} alone, {contested} contested");
    let seqs: Vec<u64> = store
        .pending_signals("r")
        .unwrap()
        .iter()
        .map(|s| s.seq)
        .collect();
    assert_eq!(seqs, [0, 1, 2, 3]);
}

#[test]
fn signals_that_wait_together_go_out_in_one_round_trip() {
    let url = test_server::fresh_database("reel_trips");
    let runs: Vec<String> = (0..10).map(|i| format!("r{i}")).collect();
    let (store, alone) = runs_to_signal(&url, &runs);

    // Another session holds r0's row, so the writer's batch with r0's signal waits for it
    // while nine more senders queue theirs; they are the writer's next batch.
    let mut other = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    other
        .batch_execute("BEGIN; UPDATE reel.runs SET signal_pending = TRUE WHERE id = 'r0'")
        .unwrap();
    let mut watch = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let queued = std::sync::atomic::AtomicUsize::new(0);
    let start = store.round_trips();
    std::thread::scope(|s| {
        let first = s.spawn(|| store.send_signal("r0", "go", &json!(1)));
        wait_for_a_lock(&mut watch);
        let senders: Vec<_> = (1..10)
            .map(|i| {
                let (store, queued) = (&store, &queued);
                s.spawn(move || {
                    queued.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    store.send_signal(&format!("r{i}"), "go", &json!(1))
                })
            })
            .collect();
        while queued.load(std::sync::atomic::Ordering::SeqCst) < 9 {
            std::thread::yield_now();
        }
        // From counting itself to its command in the writer's queue a sender only encodes
        // the payload, which is named by itself.
        std::thread::sleep(std::time::Duration::from_millis(200));
        other.batch_execute("COMMIT").unwrap();
        assert_eq!(first.join().unwrap().unwrap(), 2);
        for sender in senders {
            assert_eq!(sender.join().unwrap().unwrap(), 0);
        }
    });
    let together = store.round_trips() - start;
    assert_eq!(
        together,
        2 * alone,
        "one signal alone took {alone} round trips; one, then nine together, {together}"
    );
    for i in 0..10 {
        assert!(store.run(&format!("r{i}")).unwrap().unwrap().signal_pending);
    }
}

/// A store on a fresh database with 20 `fast` runs r0…r19 leased to this process, whose lease
/// of r0 ran out and was taken over by another holder (so that lease must write nothing); the
/// leases, r0's stale one first, and that holder.
fn twenty_runs_r0_taken_over() -> (PgStore, Vec<reel_store::Lease>, Owner) {
    let clock = Arc::new(ManualClock::at(1_700_000_000_000));
    let store = PgStore::open(&test_server::fresh_database("reel_trips"), clock.clone()).unwrap();
    let me = Owner::this_process();
    let mut leases: Vec<_> = (0..20)
        .map(|i| {
            let mut run = new_run(&format!("r{i}"));
            run.durability = Durability::Fast;
            store.create_run(run, &me, 60_000).unwrap()
        })
        .collect();
    clock.advance(120_000);
    let other = Owner {
        id: format!("{}-other", me.id),
        ..me.clone()
    };
    let reel_store::Claim::Claimed(_taken) = store.claim_run("r0", &other, 60_000).unwrap() else {
        panic!("an expired lease is taken over");
    };
    for lease in &mut leases[1..] {
        // The others' leases were renewed in time (their clock is the store's).
        store.renew(lease, 60_000).unwrap();
    }
    (store, leases, other)
}

/// Waits for `tickets`, one per run of [`twenty_runs_r0_taken_over`] in order, and checks
/// that r0's says its lease was lost and the others' that all went in; the statements sent
/// since `start`.
fn settled(store: &PgStore, tickets: Vec<reel_store::Ticket>, start: u64) -> u64 {
    let outcomes: Vec<_> = tickets
        .into_iter()
        .map(|t| t.0.blocking_recv().unwrap())
        .collect();
    assert!(
        matches!(outcomes[0], Err(reel_store::StoreError::LeaseLost { .. })),
        "{:?}",
        outcomes[0]
    );
    assert!(outcomes[1..].iter().all(Result::is_ok), "{outcomes:?}");
    store.round_trips() - start
}

#[test]
fn appends_of_many_runs_in_one_batch_go_in_one_statement_and_stay_fenced() {
    let (store, leases, _other) = twenty_runs_r0_taken_over();
    let start = store.round_trips();
    for (n, lease) in leases.iter().enumerate() {
        store
            .append_kept(
                lease,
                vec![returned(n as u64), returned(n as u64 + 100)],
                Vec::new(),
            )
            .unwrap();
    }
    let sent = settled(
        &store,
        leases.iter().map(|l| store.sync(l)).collect(),
        start,
    );
    // One round trip for the batch's opening, the appends of 20 runs (one statement, not 20)
    // and its commit (and a second batch's or two when the syncs come after a slow moment);
    // the refused run costs one more, to tell why.
    assert!(sent < 12, "{sent} round trips for 20 runs' appends");
    let mut lengths = Vec::new();
    for i in 0..20 {
        let mut n = 0;
        store
            .read_journal(&format!("r{i}"), 0, &mut |_| {
                n += 1;
                reel_store::Flow::Continue
            })
            .unwrap();
        lengths.push(n);
    }
    assert_eq!(
        lengths[0], 0,
        "the run whose lease was taken over got no row"
    );
    assert!(lengths[1..].iter().all(|&n| n == 2), "{lengths:?}");
}

#[test]
fn the_appends_of_many_short_runs_between_their_other_writes_go_in_one_statement() {
    // What a worker resuming many short runs writes at once: each run appends, updates its
    // row, appends again and lets its lease go. Run r0's lease was taken over: nothing of it
    // lands, and its release says why.
    let (store, leases, other) = twenty_runs_r0_taken_over();
    let start = store.round_trips();
    let mut releases = Vec::new();
    for (n, lease) in leases.iter().enumerate() {
        let n = n as u64;
        store
            .append(lease, vec![returned(n), returned(n + 100)])
            .unwrap();
        store
            .update_run(
                lease,
                reel_store::RunUpdate {
                    status: Some(reel_store::RunStatus::Succeeded),
                    ended_at: Some(2_000 + n as i64),
                    ..reel_store::RunUpdate::default()
                },
            )
            .unwrap_or(());
        store.append(lease, vec![returned(n + 200)]).unwrap_or(());
        releases.push(store.release(lease));
    }
    let sent = settled(&store, releases, start);
    // 40 updates and releases, a round trip each; one statement for the 40 appends (not 40),
    // sent with the batch's opening; its commit, one to tell why r0 was refused, and a second
    // batch's when the writer took the first before everything was enqueued.
    assert!(sent < 50, "{sent} round trips for 20 runs' 80 writes");
    for i in 0..20u64 {
        let mut data = Vec::new();
        store
            .read_journal(&format!("r{i}"), 0, &mut |row| {
                data.push(row.data["n"].as_u64());
                Flow::Continue
            })
            .unwrap();
        let run = store.run(&format!("r{i}")).unwrap().unwrap();
        if i == 0 {
            assert!(
                data.is_empty(),
                "the run whose lease was taken over got {data:?}"
            );
            assert_eq!(run.status, reel_store::RunStatus::Running);
            assert_eq!(run.lease_owner, Some(other.clone()));
            continue;
        }
        let want = vec![Some(i), Some(i + 100), Some(i + 200)];
        assert_eq!(data, want, "r{i}'s journal in the order appended");
        assert_eq!(run.next_seq, 3);
        assert_eq!(
            (run.status, run.ended_at, run.lease_owner),
            (
                reel_store::RunStatus::Succeeded,
                Some(2_000 + i as i64),
                None
            ),
            "r{i}"
        );
    }
}

#[test]
fn a_run_parked_and_let_go_in_one_statement_still_wakes_listening_workers() {
    let url = test_server::fresh_database("reel_trips");
    let (heard, notices) = std::sync::mpsc::channel();
    let _listener = reel_store::PgListener::start(&url, &reel_store::PgAuth::default(), move |n| {
        let _ = heard.send(n);
    })
    .unwrap();
    let store = open_at(&url);
    let me = Owner::this_process();
    let park = |id: &str, status: reel_store::RunStatus, due_at: Option<i64>| {
        let lease = store.create_run(new_run(id), &me, 60_000).unwrap();
        store
            .append(&lease, vec![returned(0), returned(1)])
            .unwrap();
        store
            .update_run(
                &lease,
                reel_store::RunUpdate {
                    status: Some(status),
                    due_at: Some(due_at),
                    ..reel_store::RunUpdate::default()
                },
            )
            .unwrap();
        store.release(&lease).0.blocking_recv().unwrap().unwrap();
        let run = store.run(id).unwrap().unwrap();
        assert_eq!(
            (run.status, run.due_at, run.lease_owner),
            (status, due_at, None)
        );
    };
    // A run that ended tells nobody; one parked with a timer tells the listeners its due
    // time (a worker whose next look comes first need not look); a signal, to look now.
    park("ended", reel_store::RunStatus::Succeeded, None);
    park(
        "timer",
        reel_store::RunStatus::Waiting,
        Some(1_700_000_060_000),
    );
    store.send_signal("timer", "go", &json!(1)).unwrap();
    // Notifications come in the order of their commits: the first is the timer's.
    let next = || notices.recv_timeout(std::time::Duration::from_secs(5)).ok();
    assert_eq!(next(), Some(reel_store::DueNotice::At(1_700_000_060_000)));
    assert_eq!(next(), Some(reel_store::DueNotice::Now));
}

/// Reads timed by the read tests below.
const READS: u64 = 20;
/// The store's reader connections, each of which prepares a statement once.
const READERS: u64 = 6;
/// At most one preparing of each of a journal read's two statements on each reader.
const PREPARED: u64 = 2 * READERS;

#[test]
fn a_journal_of_one_page_is_read_in_one_statement_and_a_longer_one_a_statement_a_page() {
    let store = open();
    let rows = |id: &str, from: u64| {
        let mut n = 0u64;
        store
            .read_journal(id, from, &mut |_| {
                n += 1;
                Flow::Continue
            })
            .map(|()| n)
    };
    // The statements per read of a whole journal, over `READS` reads: at most one more per
    // statement for each reader connection that prepares it then (which reader a read takes
    // is not fixed, so warming them up first proves nothing).
    let per_read = |id: &str, rows_wanted: u64, statements: u64| {
        let start = store.round_trips();
        for _ in 0..READS {
            assert_eq!(rows(id, 0).unwrap(), rows_wanted);
        }
        let sent = store.round_trips() - start;
        assert!(
            (READS * statements..=READS * statements + PREPARED).contains(&sent),
            "{sent} statements for {READS} reads of {id}, {statements} a read wanted"
        );
    };
    durable_steps(&store, "short", 0, 20);
    durable_steps(&store, "long", 0, 2_500);
    // The journal's length and its first page come together; pages hold 1,000 rows.
    per_read("short", 20, 1);
    per_read("long", 2_500, 3);
    // A journal read from the middle, and a run that is not there.
    assert_eq!(rows("long", 2_400).unwrap(), 100);
    assert!(rows("nosuch", 0).is_err());
}

#[test]
fn values_read_together_are_one_statement_each_digest_once() {
    let store = open();
    let lease = store
        .create_run(new_run("v"), &Owner::this_process(), 60_000)
        .unwrap();
    let mut digests = Vec::new();
    for n in 0..3 {
        let text = format!("{{\"v\":{n}}}");
        let digest = sha256_hex(text.as_bytes());
        let kept = store.put_canonical(&digest, text).unwrap();
        store
            .append_kept(&lease, vec![returned(n)], vec![kept])
            .unwrap();
        digests.push(digest);
    }
    store.sync(&lease).0.blocking_recv().unwrap().unwrap();
    let absent = "0".repeat(64);
    let wanted = [
        digests[0].as_str(),
        digests[1].as_str(),
        digests[0].as_str(),
        absent.as_str(),
        "not a digest",
        digests[2].as_str(),
    ];
    let start = store.round_trips();
    for _ in 0..READS {
        store.get_values(&wanted).unwrap();
    }
    let sent = store.round_trips() - start;
    // One a read, and at most one preparing on each reader connection.
    assert!(
        (READS..=READS + READERS).contains(&sent),
        "{sent} statements for {READS} reads of six values"
    );
    let values = store.get_values(&wanted).unwrap();
    assert_eq!(
        values,
        vec![
            Some(json!({ "v": 0 })),
            Some(json!({ "v": 1 })),
            Some(json!({ "v": 0 })),
            None,
            None,
            Some(json!({ "v": 2 })),
        ]
    );
}

/// Step `sN`'s call returned `{"n": N}`: the event each durable step appends.
fn returned(n: u64) -> NewEvent {
    NewEvent {
        at: 5_000,
        kind: "call_returned".to_string(),
        step: Some(format!("s{n}")),
        index: None,
        attempt: Some(1),
        data: json!({ "n": n }),
    }
}

/// A run of `steps` durable steps, two log lines and a signal, as a copy finds it.
fn exported_run(store: &PgStore, id: &str, steps: u64) {
    let lease = store
        .create_run(new_run(id), &Owner::this_process(), 60_000)
        .unwrap();
    let events: Vec<NewEvent> = (0..steps).map(returned).collect();
    store.append(&lease, events).unwrap();
    for n in 0..2 {
        let log = reel_store::LogRow {
            run: id.to_string(),
            step: "s0".to_string(),
            index: None,
            attempt: 1,
            at: 5_000 + n,
            text: format!("line {n} of {id}"),
        };
        store.append_log(&lease, log).unwrap();
    }
    store.sync(&lease).0.blocking_recv().unwrap().unwrap();
    store.send_signal(id, "go", &json!({ "to": id })).unwrap();
}

#[test]
fn runs_exported_together_are_four_statements_however_many() {
    let url = test_server::fresh_database("reel_trips");
    let store = open_at(&url);
    let ids: Vec<String> = (0..20).map(|n| format!("r{n:02}")).collect();
    for (n, id) in ids.iter().enumerate() {
        exported_run(&store, id, 3 + n as u64);
    }
    let statements = |ids: &[String]| {
        let start = store.round_trips();
        let (runs, taken) = store.export_runs(ids, u64::MAX).unwrap();
        assert_eq!(taken, ids.len(), "every run asked for, within no bound");
        (runs, store.round_trips() - start)
    };
    let (one, for_one) = statements(&ids[..1]);
    let wanted = [ids[3].clone(), "nosuch".to_string(), ids[0].clone()];
    let (some, for_some) = statements(&wanted);
    let (all, for_all) = statements(&ids);
    // Four a read, and the preparing of each once on a reader connection that had not yet
    // read (which reader a read takes is not fixed). A run at a time was four a run.
    for (runs, sent) in [(1, for_one), (2, for_some), (20, for_all)] {
        assert!(
            (4..=8).contains(&sent),
            "{sent} statements to export {runs} runs"
        );
    }
    // What they read: the runs there, in the order asked, each whole.
    assert_eq!(one.len(), 1);
    let order: Vec<&str> = some.iter().map(|r| r.row.id.as_str()).collect();
    assert_eq!(order, ["r03", "r00"]);
    assert_eq!(all.len(), 20);
    for (n, run) in all.iter().enumerate() {
        assert_eq!(run.row.id, ids[n]);
        let seqs: Vec<u64> = run.events.iter().map(|e| e.seq).collect();
        assert_eq!(
            seqs,
            (0..3 + n as u64).collect::<Vec<_>>(),
            "{}",
            run.row.id
        );
        assert!(run.events.iter().all(|e| e.run == run.row.id));
        let logs: Vec<&str> = run.logs.iter().map(|l| l.text.as_str()).collect();
        assert_eq!(
            logs,
            [
                format!("line 0 of {}", ids[n]),
                format!("line 1 of {}", ids[n])
            ]
        );
        assert_eq!(run.signals.len(), 1);
        assert_eq!(run.signals[0].run, run.row.id);
    }
    // Within a bound of events: the first runs that fit, at least one, and how many of the
    // ids asked for that took (a missing one among them).
    let bounded = |ids: &[String], max: u64| {
        let (runs, taken) = store.export_runs(ids, max).unwrap();
        let got: Vec<String> = runs.into_iter().map(|r| r.row.id).collect();
        (got, taken)
    };
    // r00, r01 and r02 hold 3, 4 and 5 events.
    assert_eq!(bounded(&ids, 12), (ids[..3].to_vec(), 3));
    assert_eq!(bounded(&ids, 11), (ids[..2].to_vec(), 2));
    assert_eq!(bounded(&ids, 1), (ids[..1].to_vec(), 1));
    let with_missing = [ids[0].clone(), "nosuch".to_string(), ids[1].clone()];
    assert_eq!(bounded(&with_missing, 7), (ids[..2].to_vec(), 3));
    assert_eq!(bounded(&with_missing, 3), (ids[..1].to_vec(), 2));
    // A journal with a hole is not exported: the copy would not be the run.
    let mut raw = ::postgres::Client::connect(&url, ::postgres::NoTls).unwrap();
    raw.batch_execute("DELETE FROM reel.journal WHERE run = 'r05' AND seq = 2")
        .unwrap();
    match store.export_runs(&ids, u64::MAX) {
        Err(reel_store::StoreError::Hole { run, seq, .. }) => {
            assert_eq!((run.as_str(), seq), ("r05", 2))
        }
        other => panic!("a hole exported: {other:?}"),
    }
}
