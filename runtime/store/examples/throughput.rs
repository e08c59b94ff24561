//! Prints the store's write and read throughput: `cargo run --release -p reel-store --example throughput`.
//!
//! A "step" is what the engine journals for one call: three events (each its own append) and
//! two values (the call's inputs and its output).

// edge: a benchmark measures real time.
#![allow(clippy::disallowed_methods)]

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use reel_store::{
    Durability, Flow, Lease, ManualClock, NewEvent, NewRun, Owner, SqliteStore, Store, StoreError,
    StoreRead, Ticket,
};
use serde_json::json;

fn wait(ticket: Ticket) -> Result<(), StoreError> {
    ticket.0.blocking_recv().unwrap_or(Err(StoreError::Closed))
}

fn new_run(id: &str, durability: Durability) -> NewRun {
    NewRun {
        first_events: Vec::new(),
        id: id.to_string(),
        flow: "bench".to_string(),
        flow_digest: "0".repeat(64),
        source: None,
        source_abs: None,
        cwd: "/".to_string(),
        parent: None,
        keep_for_ms: None,
        durability,
        created_at: 0,
        kept: Vec::new(),
    }
}

fn event(kind: &str, step: u64, data: serde_json::Value) -> NewEvent {
    NewEvent {
        at: 1_700_000_000_000 + step as i64,
        kind: kind.to_string(),
        step: Some(format!("step_{}", step % 50)),
        index: None,
        attempt: Some(1),
        data,
    }
}

/// Journals `steps` steps for `lease`, waiting for the record after each when `sync_each`.
fn steps(store: &SqliteStore, lease: &Lease, from: u64, steps: u64, sync_each: bool) {
    for n in from..from + steps {
        let input = store
            .put_value(&json!({ "url": "https://example.com/", "n": n, "run": lease.run }))
            .expect("put input");
        store
            .append(
                lease,
                vec![event(
                    "step_started",
                    n,
                    json!({ "inputs": input, "key": n }),
                )],
            )
            .expect("append");
        let output = store
            .put_value(&json!({ "status": 200, "body": format!("result {n} {}", lease.run) }))
            .expect("put output");
        store
            .append(
                lease,
                vec![event("effect_recorded", n, json!({ "result": output }))],
            )
            .expect("append");
        store
            .append(
                lease,
                vec![event("step_succeeded", n, json!({ "output": output }))],
            )
            .expect("append");
        if sync_each {
            wait(store.sync(lease)).expect("sync");
        }
    }
    wait(store.sync(lease)).expect("sync");
}

fn report(label: &str, steps: u64, started: Instant, store: &SqliteStore, before: (u64, u64)) {
    let secs = started.elapsed().as_secs_f64();
    let stats = store.stats();
    println!(
        "{label:<44} {:>8.0} steps/s {:>8.0} rows+values/s  ({} transactions, {:.1} commands each)",
        steps as f64 / secs,
        (steps * 5) as f64 / secs,
        stats.batches - before.0,
        (stats.commands - before.1) as f64 / (stats.batches - before.0).max(1) as f64,
    );
}

fn main() -> Result<(), StoreError> {
    let dir = tempfile::tempdir().map_err(|e| StoreError::Io {
        path: "tempdir".to_string(),
        message: e.to_string(),
    })?;
    let store = SqliteStore::open(&dir.path().join(".reel"), Arc::new(ManualClock::at(0)))?;
    let me = Owner::this_process();
    let n = 20_000;

    let snap = |s: &SqliteStore| (s.stats().batches, s.stats().commands);

    let lease = store.create_run(new_run("seq-fast", Durability::Fast), &me, 600_000)?;
    let before = snap(&store);
    let started = Instant::now();
    steps(&store, &lease, 0, n, false);
    report("fast, one run, no waiting", n, started, &store, before);

    let lease = store.create_run(new_run("seq-fast-sync", Durability::Fast), &me, 600_000)?;
    let before = snap(&store);
    let started = Instant::now();
    steps(&store, &lease, 0, n / 4, true);
    report(
        "fast, one run, sync after every step",
        n / 4,
        started,
        &store,
        before,
    );

    let threads = 4;
    let leases: Vec<Lease> = (0..threads)
        .map(|i| store.create_run(new_run(&format!("par{i}"), Durability::Fast), &me, 600_000))
        .collect::<Result<_, _>>()?;
    let before = snap(&store);
    let started = Instant::now();
    std::thread::scope(|s| {
        for lease in &leases {
            let store = &store;
            s.spawn(move || steps(store, lease, 0, n / 2, false));
        }
    });
    report(
        "fast, 4 runs on 4 threads, no waiting",
        n / 2 * threads,
        started,
        &store,
        before,
    );

    let lease = store.create_run(new_run("durable", Durability::Durable), &me, 600_000)?;
    let before = snap(&store);
    let started = Instant::now();
    steps(&store, &lease, 0, 500, true);
    report(
        "durable, one run, sync after every step",
        500,
        started,
        &store,
        before,
    );

    // Resume: a 100,000-event journal read back in order.
    let lease = store.create_run(new_run("long", Durability::Fast), &me, 600_000)?;
    let total = 100_000u64;
    for chunk in 0..total / 100 {
        let events = (chunk * 100..chunk * 100 + 100)
            .map(|i| {
                event(
                    "step_succeeded",
                    i,
                    json!({ "output": "d".repeat(64), "key": i }),
                )
            })
            .collect();
        store.append(&lease, events)?;
    }
    wait(store.sync(&lease))?;
    assert_eq!(lease.next_seq.load(Ordering::SeqCst), total);
    let started = Instant::now();
    let mut count = 0u64;
    store.read_journal("long", 0, &mut |row| {
        count += u64::from(row.seq == count);
        Flow::Continue
    })?;
    println!(
        "read_journal of {count} events                   {:>8.0} ms",
        started.elapsed().as_secs_f64() * 1000.0
    );
    Ok(())
}
