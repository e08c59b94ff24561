//! Many processes on one SQLite store: eight `reel run` loops and two `reel worker`s, with
//! timers, signals sent while runs wait, and cancels, a few hundred runs in all.
//!
//! Every effect call of every flow appends `STEP KEY` to `calls.log` (the runs share one
//! directory), so the test sees every invocation. Afterwards it checks, from the journals
//! (`reel events --json`), the log and the stderr of every process: no run lost, no event
//! lost or duplicated, every journal gapless, no run taken up by two processes at once, no
//! effect made twice, no store error (`database is locked` above all) reaching a user, and
//! every run ended as its flow and the test's actions say.

// edge: the test drives real processes and bounds its waits with the real clock.
#![allow(clippy::disallowed_methods)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::*;

/// `reel run` processes at once.
const RUNNERS: usize = 8;
/// Runs each runner starts, one after the other.
const RUNS_PER_RUNNER: usize = 36;
/// `reel worker` processes.
const WORKERS: usize = 2;

/// A timer: an effect, a short sleep (the run parks; a worker wakes it), a `foreach` effect.
const TIMER: &str = r#"flow timer {
  input n: int
  step a = exec {
    cmd: ["sh", "-c", "echo \"a $REEL_IDEMPOTENCY_KEY\" >> calls.log; echo $1", "sh", to_string(input.n)]
  }
  step nap = sleep {
    for: 150ms
    after: [a]
  }
  step b = exec {
    foreach: [1, 2]
    after: [nap]
    cmd: ["sh", "-c", "echo \"b $REEL_IDEMPOTENCY_KEY\" >> calls.log; echo $(( $1 * $2 ))", "sh", to_string(a.json), to_string(item)]
  }
  output { n: input.n, b: [for x in b: x.json] }
}
"#;

/// A signal wait: the run parks until the test sends `go`, then makes an effect of its payload.
const SIGNAL: &str = r#"flow signaled {
  input n: int
  step a = exec {
    cmd: ["sh", "-c", "echo \"a $REEL_IDEMPOTENCY_KEY\" >> calls.log; echo $1", "sh", to_string(input.n)]
  }
  step go = signal {
    name: "go"
    timeout: 1d
    after: [a]
  }
  step b = exec {
    cmd: ["sh", "-c", "echo \"b $REEL_IDEMPOTENCY_KEY\" >> calls.log; echo $(( $1 + $2 ))", "sh", to_string(a.json), to_string(go.v)]
  }
  output { n: input.n, b: b.json }
}
"#;

/// Canceled: a short sleep, then a wait for a signal that never comes; the test cancels it
/// as soon as `reel run` returns, so the cancel meets it parked or held by a worker.
const CANCELED: &str = r#"flow canceled {
  input n: int
  step a = exec {
    cmd: ["sh", "-c", "echo \"a $REEL_IDEMPOTENCY_KEY\" >> calls.log; echo $1", "sh", to_string(input.n)]
  }
  step nap = sleep {
    for: 100ms
    after: [a]
  }
  step never = signal {
    name: "never"
    timeout: 1d
    after: [nap]
  }
  step b = exec {
    after: [never]
    cmd: ["sh", "-c", "echo \"b $REEL_IDEMPOTENCY_KEY\" >> calls.log"]
  }
  output a.json
}
"#;

/// The flows, by the file each is written to.
const FLOWS: [(&str, &str); 3] = [
    ("timer.reel", TIMER),
    ("signal.reel", SIGNAL),
    ("cancel.reel", CANCELED),
];

/// What the test expects of one run it started.
#[derive(Debug, Clone)]
struct Expected {
    /// The flow's file.
    flow: &'static str,
    /// `succeeded` or `canceled`.
    status: &'static str,
    /// The output, when it succeeds.
    output: Value,
    /// Effect calls it makes (timer: 3, signal: 2, canceled: 1).
    calls: usize,
}

/// What every process printed on stderr, with what it was.
type Stderrs = Mutex<Vec<(String, String)>>;

/// Runs `reel ARGS` against the store `home`, keeping its stderr for the final check.
fn reel_kept(dir: &Path, home: &Path, args: &[&str], stderrs: &Stderrs) -> Run {
    let mut command = reel(dir, args);
    command.env("REEL_HOME", home);
    let r = run(command);
    stderrs
        .lock()
        .unwrap()
        .push((args.join(" "), r.stderr.clone()));
    r
}

/// One runner: starts its runs one after the other, and signals or cancels each that waits.
fn runner(dir: &Path, home: &Path, which: usize, stderrs: &Stderrs) -> Vec<(String, Expected)> {
    let mut started = Vec::new();
    for i in 0..RUNS_PER_RUNNER {
        let n = (which * RUNS_PER_RUNNER + i) as i64;
        let (flow, _) = FLOWS[(which + i) % FLOWS.len()];
        let durability = if i % 2 == 0 { "fast" } else { "durable" };
        let input = format!("n={n}");
        let r = reel_kept(
            dir,
            home,
            &[
                "run",
                flow,
                "--input",
                &input,
                "--durability",
                durability,
                "--json",
            ],
            stderrs,
        );
        assert_eq!(r.status, 0, "{flow} n={n}: {r:?}");
        let out = json(&r);
        assert_eq!(out["status"], "waiting", "{flow} n={n}: {out}");
        let id = out["run"].as_str().unwrap().to_string();
        let expected = match flow {
            "timer.reel" => Expected {
                flow,
                status: "succeeded",
                output: json!({"n": n, "b": [n, 2 * n]}),
                calls: 3,
            },
            "signal.reel" => {
                // Sent while the run waits; a worker takes it up.
                let payload = json!({ "v": n * 10 }).to_string();
                let s = reel_kept(dir, home, &["signal", &id, "go", &payload], stderrs);
                assert_eq!(s.status, 0, "signal {id}: {s:?}");
                Expected {
                    flow,
                    status: "succeeded",
                    output: json!({"n": n, "b": n + n * 10}),
                    calls: 2,
                }
            }
            _ => {
                // Sent at once: a worker may be waking the run from its nap meanwhile.
                let c = reel_kept(dir, home, &["cancel", &id], stderrs);
                assert_eq!(c.status, 0, "cancel {id}: {c:?}");
                Expected {
                    flow,
                    status: "canceled",
                    output: Value::Null,
                    calls: 1,
                }
            }
        };
        started.push((id, expected));
    }
    started
}

/// Starts a `reel worker` polling often, its stderr to `err`.
fn start_worker(dir: &Path, home: &Path, err: &Path) -> Child {
    let mut command = reel(dir, &["worker", "--poll-ms", "20"]);
    command
        .env("REEL_HOME", home)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(fs::File::create(err).unwrap());
    command.spawn().expect("reel worker starts")
}

/// The statuses of every run of the store, by id.
fn statuses(dir: &Path, home: &Path) -> BTreeMap<String, Value> {
    let r = reel_env(
        dir,
        &["runs", "--json", "--limit", "100000"],
        &[("REEL_HOME", home.to_str().unwrap())],
    );
    assert_eq!(r.status, 0, "{r:?}");
    json(&r)
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["run"].as_str().unwrap().to_string(), r.clone()))
        .collect()
}

#[cfg(unix)]
#[test]
fn eight_runners_and_two_workers_share_one_store_without_losing_or_doubling_anything() {
    let dir = temp();
    let home = dir.path().join(".reel");
    for (file, text) in FLOWS {
        write(dir.path(), file, text);
    }
    let stderrs: Stderrs = Mutex::new(Vec::new());
    let began = Instant::now();

    let mut workers: Vec<(Child, std::path::PathBuf)> = (0..WORKERS)
        .map(|w| {
            let err = dir.path().join(format!("worker{w}.err"));
            (start_worker(dir.path(), &home, &err), err)
        })
        .collect();
    let started: Vec<(String, Expected)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..RUNNERS)
            .map(|k| {
                let (d, h, e) = (dir.path(), home.as_path(), &stderrs);
                s.spawn(move || runner(d, h, k, e))
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a runner panicked"))
            .collect()
    });
    let runners_took = began.elapsed();

    // The workers finish what waits; then they are stopped as a person would (SIGTERM).
    let expected: BTreeMap<String, Expected> = started.into_iter().collect();
    assert_eq!(
        expected.len(),
        RUNNERS * RUNS_PER_RUNNER,
        "run ids are unique"
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let rows = loop {
        let rows = statuses(dir.path(), &home);
        let open: Vec<&Value> = rows
            .values()
            .filter(|r| {
                !matches!(
                    r["status"].as_str(),
                    Some("succeeded" | "canceled" | "failed")
                )
            })
            .collect();
        if open.is_empty() {
            break rows;
        }
        if Instant::now() >= deadline {
            let id = open[0]["run"].as_str().unwrap();
            let events = reel_env(
                dir.path(),
                &["events", id],
                &[("REEL_HOME", home.to_str().unwrap())],
            );
            let workers: Vec<String> = workers
                .iter()
                .map(|(_, err)| fs::read_to_string(err).unwrap_or_default())
                .collect();
            panic!(
                "{} runs are still open a minute after the runners ended: {open:#?}\nthe first's journal: {}\nworkers: {workers:#?}",
                open.len(),
                events.stdout
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    for (child, _) in &mut workers {
        // SAFETY: kill only sends a signal, to a child not yet waited for (its id is still ours).
        let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        assert_eq!(rc, 0);
    }
    let mut worker_pids = BTreeSet::new();
    for (mut child, err) in workers {
        let pid = child.id();
        let status = child.wait().unwrap();
        let text = fs::read_to_string(&err).unwrap();
        assert!(
            status.success(),
            "worker {pid} exited with {status}: {text}"
        );
        stderrs
            .lock()
            .unwrap()
            .push((format!("worker {pid}"), text));
        worker_pids.insert(pid);
    }

    // No run lost, none made up, each ended as expected.
    assert_eq!(
        rows.keys().collect::<BTreeSet<_>>(),
        expected.keys().collect::<BTreeSet<_>>(),
        "the store holds exactly the runs started"
    );
    for (id, e) in &expected {
        let row = &rows[id];
        assert_eq!(row["status"], e.status, "{} {id}: {row}", e.flow);
        assert_eq!(row["holes"], 0, "{id}: {row}");
    }

    // Every journal: gapless, nothing doubled, each resume after a park by a worker, and the
    // effects recorded once each.
    let log = fs::read_to_string(dir.path().join("calls.log")).unwrap_or_default();
    let mut invocations: BTreeMap<String, usize> = BTreeMap::new();
    for line in log.lines() {
        let (_, key) = line.split_once(' ').expect("a log line is `STEP KEY`");
        *invocations.entry(key.to_string()).or_default() += 1;
    }
    let mut recorded_keys = BTreeSet::new();
    let mut resumed_by: BTreeMap<String, usize> = BTreeMap::new();
    let mut spurious = 0;
    for (id, e) in &expected {
        let r = reel_env(
            dir.path(),
            &["events", id, "--json"],
            &[("REEL_HOME", home.to_str().unwrap())],
        );
        assert_eq!(r.status, 0, "{r:?}");
        let events = json(&r);
        let events = events.as_array().unwrap();
        let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
        for (i, ev) in events.iter().enumerate() {
            assert_eq!(
                ev["seq"], i,
                "{id}: the journal has a gap or a repeat: {kinds:?}"
            );
        }
        assert_eq!(kinds.first(), Some(&"run_started"), "{id}: {kinds:?}");
        assert_eq!(kinds.last(), Some(&"run_finished"), "{id}: {kinds:?}");
        let mut once = BTreeSet::new();
        for (i, ev) in events.iter().enumerate() {
            let kind = kinds[i];
            match kind {
                "run_resumed" => {
                    // Taken up only from a park, and by nobody else at the same time: a second
                    // taker would have to resume it after this one without a park between.
                    assert_eq!(
                        kinds[i - 1],
                        "run_waiting",
                        "{id}: resumed while it was held: {kinds:?}"
                    );
                    assert_eq!(ev["data"]["reason"], "worker", "{id}: {ev}");
                    let by = ev["data"]["by"].as_str().unwrap();
                    let pid: u32 = by.rsplit(':').next().unwrap().parse().unwrap();
                    assert!(worker_pids.contains(&pid), "{id}: resumed by {by}");
                    *resumed_by.entry(by.to_string()).or_default() += 1;
                }
                "run_waiting" | "step_skipped" => {}
                _ => {
                    let what = format!("{kind} {} {} {}", ev["step"], ev["index"], ev["attempt"]);
                    assert!(
                        once.insert(what.clone()),
                        "{id}: {what:?} is twice: {kinds:?}"
                    );
                }
            }
            if kind == "effect_recorded" {
                recorded_keys.insert(ev["data"]["key"].as_str().unwrap().to_string());
            }
        }
        let recorded = kinds.iter().filter(|k| **k == "effect_recorded").count();
        assert_eq!(recorded, e.calls, "{id} ({}): {kinds:?}", e.flow);
        if e.status == "succeeded" {
            // One park, and at least one resume; more when a worker took the run up the moment
            // its `reel run` let it go and found nothing due yet (it parks again: harmless).
            let resumes = kinds.iter().filter(|k| **k == "run_resumed").count();
            assert!(resumes >= 1, "{id}: {kinds:?}");
            spurious += resumes - 1;
            let shown = reel_env(
                dir.path(),
                &["resume", id, "--json"],
                &[("REEL_HOME", home.to_str().unwrap())],
            );
            assert_eq!(json(&shown)["output"], e.output, "{id}");
        }
    }
    // Every effect recorded was made exactly once; nothing was made that was not recorded but
    // for a canceled run's (a cancel stops a call in flight).
    for key in &recorded_keys {
        assert_eq!(
            invocations.get(key),
            Some(&1),
            "effect {key} was made {invocations:?}"
        );
    }
    for (key, n) in &invocations {
        assert_eq!(*n, 1, "effect {key} was made {n} times");
    }
    assert!(
        invocations.len() >= recorded_keys.len(),
        "every recorded effect was logged"
    );
    // Both workers took part, or the test tested no contention.
    assert_eq!(resumed_by.len(), WORKERS, "runs resumed by: {resumed_by:?}");

    // Nothing a user sees speaks of a store error.
    let stderrs = stderrs.into_inner().unwrap();
    for (what, text) in &stderrs {
        let lower = text.to_lowercase();
        for bad in ["locked", "busy", "store.", "error", "lease", "panicked"] {
            assert!(!lower.contains(bad), "`reel {what}` said `{bad}`:\n{text}");
        }
        // A worker meeting a run another process holds has nothing to say about it.
        if what.starts_with("worker") {
            assert!(!lower.contains("held by"), "`reel {what}`:\n{text}");
        }
    }
    eprintln!(
        "{} runs ({} timers, {} signaled, {} canceled), {} effects, {} processes; runners took {runners_took:?}, all {:?}; resumes by worker: {resumed_by:?}, {spurious} of them found nothing due",
        expected.len(),
        expected.values().filter(|e| e.flow == "timer.reel").count(),
        expected
            .values()
            .filter(|e| e.flow == "signal.reel")
            .count(),
        expected
            .values()
            .filter(|e| e.flow == "cancel.reel")
            .count(),
        invocations.len(),
        stderrs.len(),
        began.elapsed()
    );
}
