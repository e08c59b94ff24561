//! Many `reel worker`s on one PostgreSQL database, standing for many machines: each in a
//! directory of its own, sharing nothing but the database. Every due run goes to exactly one
//! of them, and a worker killed in the middle of its runs leaves them to the other, which
//! repeats only the calls whose record had not landed, each with its first idempotency key.
//!
//! Every call of the flows' effect tool appends `N KEY` to `calls.log` in the directory the
//! runs were started in (where their tools run, whichever worker drives them), so the test
//! counts every invocation. The journals are read back with `reel sql` over `reel_events`.
//!
//! These tests need the private server `scripts/test.sh` starts (see `postgres.rs`).

// edge: the test drives real processes and bounds its waits with the real clock.
#![allow(clippy::disallowed_methods)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::postgres::{database, on_postgres};
use crate::support::{json, reel, temp, write};

/// An effect tool that logs its run's number and its key, then answers with its input.
const NOTE_SH: &str = r#"read input
n=$(printf '%s' "$input" | tr -cd '0-9')
echo "$n $REEL_IDEMPOTENCY_KEY" >> calls.log
printf '%s\n' "$input"
"#;

/// A sleep, a signal wait, the effect, and another sleep: the runs park twice or three times,
/// and each time a worker takes them up again.
const RELAY: &str = r#"tool note {
  kind: "effect"
  exec: ["sh", "note.sh"]
  input { n: int }
  output { n: int }
}

flow relay {
  input n: int = 0
  step go = signal { name: "go", timeout: 1d }
  step nap = sleep { for: 30ms, after: [go] }
  step noted = note { n: input.n, after: [nap] }
  step rest = sleep { for: 30ms, after: [noted] }
  output { n: noted.n, go: go, rest: rest }
}
"#;

/// How long a test waits for its workers before it gives up on them.
const PATIENCE: Duration = Duration::from_secs(180);

/// Starts `reel worker` in `dir` (a machine of its own) on the database at `url`.
fn worker(dir: &Path, url: &str, args: &[&str]) -> Child {
    let mut all = vec!["worker"];
    all.extend_from_slice(args);
    reel(dir, &all)
        .env("REEL_STORE_URL", url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("reel starts")
}

/// Waits for a worker to stop by itself, killing it (and failing) when it takes too long.
fn finish(mut child: Child, began: Instant) -> (Option<i32>, String) {
    while child.try_wait().unwrap().is_none() {
        if began.elapsed() > PATIENCE {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "a worker did not stop: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Starts `runs` runs of `file`'s flow with inputs `n` = 0.. from `dir`, four at a time;
/// returns their ids by `n`.
fn start_runs(dir: &Path, url: &str, file: &str, runs: usize, extra: &[&str]) -> Vec<String> {
    let mut ids = vec![String::new(); runs];
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|k| {
                s.spawn(move || {
                    (k..runs)
                        .step_by(4)
                        .map(|n| {
                            let input = format!("n={n}");
                            let mut args = vec!["run", file, "--input", &input, "--json"];
                            args.extend_from_slice(extra);
                            let r = on_postgres(dir, url, &args);
                            (n, r)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in handles {
            for (n, r) in h.join().unwrap() {
                ids[n] = json(&r)["run"]
                    .as_str()
                    .unwrap_or_else(|| panic!("run {n} has an id: {r:?}"))
                    .to_string();
            }
        }
    });
    ids
}

/// Sends signal `go` to every run, four senders at a time.
fn signal_all(dir: &Path, url: &str, ids: &[String]) {
    std::thread::scope(|s| {
        for k in 0..4 {
            s.spawn(move || {
                for id in ids.iter().skip(k).step_by(4) {
                    let r = on_postgres(dir, url, &["signal", id, "go", "1"]);
                    assert_eq!(r.status, 0, "{r:?}");
                }
            });
        }
    });
}

/// Every journal event of every run, by run, in `seq` order, read with `reel sql`.
fn journals(dir: &Path, url: &str) -> BTreeMap<String, Vec<Value>> {
    let r = on_postgres(
        dir,
        url,
        &[
            "sql",
            "--json",
            "SELECT run, seq, kind, step, data FROM reel_events ORDER BY run, seq",
        ],
    );
    assert_eq!(r.status, 0, "{r:?}");
    let mut by_run: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for row in json(&r).as_array().unwrap() {
        let run = row["run"].as_str().unwrap().to_string();
        by_run.entry(run).or_default().push(row.clone());
    }
    by_run
}

/// The statuses of every run, by id, read with `reel sql`.
fn statuses(dir: &Path, url: &str) -> BTreeMap<String, String> {
    let r = on_postgres(
        dir,
        url,
        &["sql", "--json", "SELECT id, status FROM reel_runs"],
    );
    assert_eq!(r.status, 0, "{r:?}");
    json(&r)
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            (
                row["id"].as_str().unwrap().to_string(),
                row["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// `calls.log` of `dir`: for each run number, the keys its calls were made with, in order.
fn calls_by_run(dir: &Path) -> BTreeMap<usize, Vec<String>> {
    let mut by_run: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for line in crate::support::calls(dir) {
        let (n, key) = line.split_once(' ').unwrap_or_else(|| panic!("{line}"));
        by_run
            .entry(n.parse().unwrap())
            .or_default()
            .push(key.to_string());
    }
    by_run
}

/// The event's data as JSON (`reel sql` gives it as the stored text).
fn data(event: &Value) -> Value {
    match &event["data"] {
        Value::String(text) => serde_json::from_str(text).unwrap(),
        other => other.clone(),
    }
}

/// Checks a journal's `seq` runs from 0 without a gap and that the run finished once.
fn gapless_and_finished_once(run: &str, events: &[Value]) {
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["seq"], i, "{run}: {events:#?}");
    }
    let finished = events
        .iter()
        .filter(|e| e["kind"] == "run_finished")
        .count();
    assert_eq!(finished, 1, "{run}: {events:#?}");
    assert_eq!(events.last().unwrap()["kind"], "run_finished", "{run}");
}

/// The key the journal recorded for step `step`'s effect, when its record landed.
fn recorded_keys(events: &[Value], step: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["kind"] == "effect_recorded" && e["step"] == step)
        .map(|e| data(e)["key"].as_str().unwrap().to_string())
        .collect()
}

/// The keys the journal shows step `step`'s effect started with.
fn started_keys(events: &[Value], step: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["kind"] == "step_started" && e["step"] == step)
        .map(|e| data(e)["key"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn two_workers_on_two_machines_finish_200_runs_each_exactly_once() {
    let (starter, one, two) = (temp(), temp(), temp());
    write(starter.path(), "relay.reel", RELAY);
    write(starter.path(), "note.sh", NOTE_SH);
    let url = database();
    let runs = 200;
    let ids = start_runs(starter.path(), &url, "relay.reel", runs, &[]);
    let waiting = statuses(starter.path(), &url);
    assert_eq!(waiting.len(), runs);
    assert!(waiting.values().all(|s| s == "waiting"), "{waiting:?}");

    // Two machines take the runs up as the signals arrive, through sleeps and the call.
    let began = Instant::now();
    let args = ["--until-idle", "--poll-ms", "100"];
    let (a, b) = (
        worker(one.path(), &url, &args),
        worker(two.path(), &url, &args),
    );
    signal_all(starter.path(), &url, &ids);
    let mut pids = BTreeSet::new();
    for child in [a, b] {
        pids.insert(child.id());
        let (code, stderr) = finish(child, began);
        assert_eq!(code, Some(0), "{stderr}");
        for line in stderr.lines().skip(1) {
            assert!(
                line.ends_with(" succeeded") || line.ends_with(" waiting"),
                "a worker said something else: {line}\n{stderr}"
            );
        }
    }

    let statuses = statuses(starter.path(), &url);
    assert!(statuses.values().all(|s| s == "succeeded"), "{statuses:?}");
    let journals = journals(starter.path(), &url);
    let calls = calls_by_run(starter.path());
    let mut drivers = BTreeSet::new();
    for (n, id) in ids.iter().enumerate() {
        let events = &journals[id];
        gapless_and_finished_once(id, events);
        // Each time it was taken up, one worker took it, and only once per park.
        let resumed: Vec<&Value> = events
            .iter()
            .filter(|e| e["kind"] == "run_resumed")
            .collect();
        let parked = events.iter().filter(|e| e["kind"] == "run_waiting").count();
        assert_eq!(resumed.len(), parked, "{id}: {events:#?}");
        for e in resumed {
            drivers.insert(data(e)["by"].as_str().unwrap().to_string());
        }
        // The call with a recorded success ran once, with the key its record holds.
        let recorded = recorded_keys(events, "noted");
        assert_eq!(recorded.len(), 1, "{id}: {events:#?}");
        assert_eq!(calls.get(&n), Some(&recorded), "run {n} ({id})");
    }
    assert_eq!(calls.len(), runs);
    // Both machines drove runs (their resumes name them by host and pid).
    let by_pid: BTreeSet<u32> = drivers
        .iter()
        .map(|by| by.rsplit_once(':').unwrap().1.parse().unwrap())
        .collect();
    assert_eq!(by_pid, pids, "{drivers:?}");
}

/// Forty runs whose call takes a moment; the first call made kills the worker that made it.
const SHOP: &str = r#"tool pay {
  kind: "effect"
  exec: ["sh", "pay.sh"]
  input { n: int }
  output { paid: int }
}

flow shop {
  input n: int = 0
  step go = signal { name: "go", timeout: 1d }
  step charge = pay { n: input.n, after: [go] }
  output charge.paid
}
"#;

/// Logs `N KEY`, takes a moment, and the very first time kills the `reel` that called it, so
/// the kill lands while that worker holds other runs, some with calls in flight.
const PAY_SH: &str = r#"read input
n=$(printf '%s' "$input" | tr -cd '0-9')
echo "$n $REEL_IDEMPOTENCY_KEY" >> calls.log
sleep 0.2
if mkdir fired 2>/dev/null; then kill -9 $PPID; exit 1; fi
echo '{"paid": 5}'
"#;

#[test]
fn a_worker_killed_mid_runs_leaves_them_to_the_other_which_repeats_only_unrecorded_calls() {
    let (starter, one, two) = (temp(), temp(), temp());
    write(starter.path(), "shop.reel", SHOP);
    write(starter.path(), "pay.sh", PAY_SH);
    let url = database();
    let runs = 40;
    // Durable, so that a recorded call is on the database before the next step starts.
    let ids = start_runs(
        starter.path(),
        &url,
        "shop.reel",
        runs,
        &["--durability", "durable"],
    );
    signal_all(starter.path(), &url, &ids);
    let began = Instant::now();
    let args = ["--until-idle", "--poll-ms", "100"];
    let (a, b) = (
        worker(one.path(), &url, &args),
        worker(two.path(), &url, &args),
    );
    let results: Vec<(Option<i32>, String)> =
        [a, b].into_iter().map(|c| finish(c, began)).collect();
    // One was killed (no exit code); the other finished everything and stopped.
    let killed = results.iter().filter(|(code, _)| code.is_none()).count();
    assert_eq!(killed, 1, "{results:#?}");
    assert!(
        results.iter().any(|(code, _)| *code == Some(0)),
        "{results:#?}"
    );

    let statuses = statuses(starter.path(), &url);
    assert!(statuses.values().all(|s| s == "succeeded"), "{statuses:?}");
    let journals = journals(starter.path(), &url);
    let calls = calls_by_run(starter.path());
    let mut repeated = 0;
    for (n, id) in ids.iter().enumerate() {
        let events = &journals[id];
        gapless_and_finished_once(id, events);
        let recorded = recorded_keys(events, "charge");
        assert_eq!(recorded.len(), 1, "{id}: {events:#?}");
        let started = started_keys(events, "charge");
        let made = calls.get(&n).cloned().unwrap_or_default();
        // Every call was made with the run's first key, the one its record holds.
        assert!(made.iter().all(|k| *k == recorded[0]), "run {n}: {made:?}");
        assert!(started.iter().all(|k| *k == recorded[0]), "run {n}");
        // A call was made again only when the journal shows an earlier start without a
        // record, that is, a call the killed worker had in flight. Such a start may also have
        // no call behind it: the worker died after its start was synced and before its tool
        // process counted the call (seen once under a loaded CI machine), and the call was then
        // made once, by the other worker.
        assert!(
            (1..=2).contains(&started.len()) && (1..=started.len()).contains(&made.len()),
            "run {n} made its call {} times for {} starts: {made:?}",
            made.len(),
            started.len()
        );
        if started.len() == 2 {
            let first_start = events
                .iter()
                .position(|e| e["kind"] == "step_started" && e["step"] == "charge")
                .unwrap();
            let took_over = events[first_start..]
                .iter()
                .position(|e| e["kind"] == "run_resumed");
            let recorded_at = events
                .iter()
                .position(|e| e["kind"] == "effect_recorded")
                .unwrap();
            assert!(
                took_over.is_some_and(|t| first_start + t < recorded_at),
                "run {n}: a second start without a takeover: {events:#?}"
            );
        }
        if made.len() == 2 {
            repeated += 1;
        }
    }
    // At least the call that killed its worker had no record, and was made again.
    assert!(repeated >= 1, "{calls:?}");
}
